//! The calendar side of a schedule: cron occurrences, execution dates and SLA deadlines, all
//! read on the wall clock of the schedule's timezone. Every instant is an argument.
//!
//! Daylight saving time, in one place:
//!
//! - A wall-clock time of day ([`local_instant`], [`next_daily`], [`sla_deadline`]) that falls in
//!   a spring-forward gap moves forward by the gap's length (02:30 on the New York spring-forward
//!   day is 03:30 EDT); one that falls in a fall-back fold is its earlier instant.
//! - A cron expression ([`Cron::next_after`]) follows `croner`'s Vixie-cron rules in the gap, which
//!   differ by the kind of expression. An expression with a single minute and a single hour (a
//!   *fixed-time* one, e.g. `30 2 * * *`) still fires that day, at the first instant after the gap
//!   (03:00 EDT, not 03:30). Any other expression (`0 * * * *`, `*/15 2 * * *`, `0 2,14 * * *`)
//!   skips the occurrences inside the gap; `*/15 2 * * *` does not fire at all on that day.
//! - A cron expression fires once for a wall-clock time that a fold repeats, at its earlier
//!   instant, whatever its kind (`croner` alone fires `0 * * * *` in both passes of the repeated
//!   hour; this module drops the second). So an hourly schedule has one execution per local hour:
//!   24 on a fall-back day, 23 on a spring-forward day.

use chrono::offset::LocalResult;
use chrono::{DateTime, Days, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};

use crate::core::config::{ClockTime, Deadline};
use crate::core::execution::ExecutionDate;

/// The fields of a cron expression, in order, with the values each allows.
const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L, W"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT, 0 and 7 are Sunday"),
];

/// A parsed 5-field cron expression (minute hour day-of-month month day-of-week).
///
/// Ranges (`1-5`), lists (`8,20`), steps (`*/15`, `8-18/2`) and names (`MON`, `JAN`) work as in
/// Vixie cron, and so does the day rule: when both day fields are restricted, a day matching
/// either one fires. `croner`'s extensions (`L`, `W`, `#`, `+`) are accepted too. Nicknames
/// (`@daily`) and 6- or 7-field forms (seconds, years) are not.
#[derive(Debug, Clone)]
pub struct Cron {
    text: String,
    inner: croner::Cron,
    sub_daily: bool,
}

/// Two crons are the same when their expressions are (the parsed form follows from it).
impl PartialEq for Cron {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// Why a cron expression does not parse: it names the expression and, when one field is
/// wrong on its own, that field and the values it allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCron {
    #[error("{expr:?} has {fields} field{}; a cron expression has 5 (minute hour day-of-month month day-of-week)", if *fields == 1 { "" } else { "s" })]
    Fields { expr: String, fields: usize },
    #[error("{expr:?}: the {name} field {field:?} is invalid: {reason} (allowed: {allowed})")]
    Field {
        expr: String,
        name: &'static str,
        field: String,
        reason: String,
        allowed: &'static str,
    },
    #[error("{expr:?} is invalid: {reason}")]
    Whole { expr: String, reason: String },
}

impl Cron {
    /// Parses a 5-field expression. The error names the expression and, when one field is wrong
    /// on its own, that field and the values it allows.
    pub fn parse(expr: &str) -> Result<Cron, InvalidCron> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        if fields.len() != FIELDS.len() {
            return Err(InvalidCron::Fields {
                expr: expr.to_string(),
                fields: fields.len(),
            });
        }
        let text = fields.join(" ");
        let parser = cron_parser();
        let inner = parser.parse(&text).map_err(|whole| {
            // Name the first field that is wrong on its own; else the fields only clash together.
            for (i, field) in fields.iter().enumerate() {
                let mut probe = ["*"; 5];
                probe[i] = field;
                if let Err(e) = parser.parse(&probe.join(" ")) {
                    let (name, allowed) = FIELDS[i];
                    return InvalidCron::Field {
                        expr: expr.to_string(),
                        name,
                        field: field.to_string(),
                        reason: reason(&e),
                        allowed,
                    };
                }
            }
            InvalidCron::Whole {
                expr: expr.to_string(),
                reason: reason(&whole),
            }
        })?;
        let sub_daily = inner.pattern.hours.values().len() > 1;
        Ok(Cron { text, inner, sub_daily })
    }

    /// The expression, its fields separated by single spaces.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first occurrence strictly after `after`, on the wall clock of `tz`, or `None` when
    /// the expression never fires again (`0 0 30 2 *`).
    ///
    /// DST (see the module docs): in a spring-forward gap a fixed-time expression (one minute,
    /// one hour) fires at the first instant after the gap, and any other expression skips the
    /// gap's occurrences; a wall-clock time repeated by a fall-back fold fires once, at its
    /// earlier instant, for every expression.
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        let mut from = after.with_timezone(&tz);
        loop {
            let next = self.inner.find_next_occurrence(&from, false).ok()?;
            if !is_repeat(&next) {
                return Some(next.to_utc());
            }
            // Each pass moves strictly forward and a fold is finite, so this ends.
            from = next;
        }
    }

    /// True when the expression can fire more than once a day (its hour field is not a single
    /// value), so its executions are hourly.
    ///
    /// Only the hour field counts: `*/15 8 * * *` fires four times a day, all in one hour, and is
    /// *daily*: its four occurrences share one execution date (the day), so the lifecycle sees
    /// the second to fourth as the execution it already has.
    pub fn is_sub_daily(&self) -> bool {
        self.sub_daily
    }

    /// The execution date of an occurrence: its local day in `tz`, and its local hour when the
    /// expression is sub-daily.
    pub fn execution_date(&self, at: DateTime<Utc>, tz: Tz) -> ExecutionDate {
        let local = at.with_timezone(&tz);
        ExecutionDate {
            day: local.date_naive(),
            hour: self.sub_daily.then(|| local.hour()),
        }
    }
}

fn cron_parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

fn reason(e: &CronError) -> String {
    let text = match e {
        CronError::InvalidPattern(m) | CronError::IllegalCharacters(m) | CronError::ComponentError(m) => m.clone(),
        other => other.to_string(),
    };
    text.trim_end_matches('.').to_string()
}

/// True when `t` is the later instant of a wall-clock time that a fold repeats.
fn is_repeat(t: &DateTime<Tz>) -> bool {
    match t.timezone().from_local_datetime(&t.naive_local()) {
        LocalResult::Ambiguous(earlier, _) => earlier != *t,
        _ => false,
    }
}

/// The instant of a wall-clock time on a local day. A time inside a DST gap moves forward by
/// the gap's length (02:30 on a spring-forward day in New York is 03:30 EDT); an ambiguous time
/// (fall back) is the earlier instant.
///
/// `time` is expected to be valid (hour < 24, minute < 60); larger values run on into the next
/// hour or day.
pub fn local_instant(day: NaiveDate, time: ClockTime, tz: Tz) -> DateTime<Utc> {
    let wall = day.and_time(NaiveTime::MIN)
        + TimeDelta::hours(i64::from(time.hour))
        + TimeDelta::minutes(i64::from(time.minute));
    wall_instant(wall, tz)
}

/// How far back, in quarter hours, a time in a gap looks for the wall clock before the gap.
/// The longest gap on record is a whole day (Samoa, 2011-12-30).
const GAP_LOOKBACK_QUARTERS: i64 = 26 * 4;

/// The instant of a local wall-clock time; see [`local_instant`] for gaps and folds.
fn wall_instant(wall: NaiveDateTime, tz: Tz) -> DateTime<Utc> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => t.to_utc(),
        LocalResult::Ambiguous(earlier, _) => earlier.to_utc(),
        LocalResult::None => {
            // Read the wall clock with the offset in force just before the gap: the instant
            // lands as far past the gap's end as `wall` is past its start.
            let before = (1..=GAP_LOOKBACK_QUARTERS)
                .find_map(|q| tz.from_local_datetime(&(wall - TimeDelta::minutes(15 * q))).latest())
                .map_or(0, |t| t.offset().fix().local_minus_utc());
            (wall - TimeDelta::seconds(i64::from(before))).and_utc()
        }
    }
}

/// The first local day on or after the day of `now` in `tz` whose `time` instant is strictly
/// after `now`, together with that instant — used to arm a daily timer forward-only (never for
/// the past).
///
/// On a fall-back day a `time` in the fold counts at its earlier instant only: once that has
/// passed, the next one is the following day's, even while the wall clock shows `time` again.
pub fn next_daily(now: DateTime<Utc>, time: ClockTime, tz: Tz) -> (NaiveDate, DateTime<Utc>) {
    let today = now.with_timezone(&tz).date_naive();
    let at = local_instant(today, time, tz);
    if at > now {
        return (today, at);
    }
    // Every instant of tomorrow's wall clock is past the end of today, so past `now`.
    let tomorrow = today + Days::new(1);
    (tomorrow, local_instant(tomorrow, time, tz))
}

/// The SLA deadline instant of an execution, in `tz`:
///
/// - `Daily(HH:MM)` for a date on day D: D at HH:MM. When `day_start` (the schedule's start
///   time of day: its cron time or expected start) is given and HH:MM <= `day_start`, the
///   deadline rolls over to D+1 (a 23:00 job with a 02:00 deadline is due the next morning).
///   An hourly date uses its day the same way.
/// - `Hourly { minute }` for an hourly date D T H: the hour's data is complete at the end of
///   the hour, so the deadline is (H+1):MM on the local clock, rolling into the next day after
///   hour 23. Across DST this is the next *wall-clock* hour: on the New York spring-forward day
///   `T01` with `:30` is due 02:30, which does not exist and so is 03:30 EDT; on the fall-back
///   day `T01` with `:00` is due 02:00 EST, two real hours after 01:00 EDT.
/// - `Hourly` for a daily date: `None`.
pub fn sla_deadline(
    date: ExecutionDate,
    deadline: Deadline,
    tz: Tz,
    day_start: Option<ClockTime>,
) -> Option<DateTime<Utc>> {
    match deadline {
        Deadline::Daily(time) => {
            let rolls = day_start.is_some_and(|start| (time.hour, time.minute) <= (start.hour, start.minute));
            let day = if rolls { date.day.succ_opt()? } else { date.day };
            Some(local_instant(day, time, tz))
        }
        Deadline::Hourly { minute } => {
            let hour = date.hour?;
            let wall = date.day.and_time(NaiveTime::MIN)
                + TimeDelta::hours(i64::from(hour) + 1)
                + TimeDelta::minutes(i64::from(minute));
            Some(wall_instant(wall, tz))
        }
    }
}

#[cfg(test)]
mod tests;
