//! What a decision is likely to read of a pipeline's quiet executions, so that the store
//! reads those with the live ones and no others (see [`super::Executions`]).
//!
//! A guess, never a rule: a decision that asks for more is made again from the whole state,
//! so a wrong guess costs time, not a wrong decision. What makes it right nearly always is
//! that an input names its date: a timer or a job report its execution, a command or a dated
//! reading its date. An hourly date is read alone (with its day's daily date, whose readings
//! an hour's rules also see), not its whole day: a day of an hourly pipeline is 24
//! executions, and reading them all for one of them made a reading's cost follow the hours
//! run so far that day.

use std::collections::BTreeSet;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::Input;
use crate::core::execution::ExecutionDate;
use crate::core::records::{Cancel, CommandOf, Rerun};
use crate::core::timers::TimerKind;

/// A stretch of a pipeline's history that a read in part loads whole: every execution of it
/// (under the schedules a config can name) and every reading scoped to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Span {
    /// A day: its daily date and each of its hours. A question about a whole day (any
    /// execution of it, every reading of it) needs the day read.
    Day(NaiveDate),
    /// One date: a daily date without its hours, or one hour.
    Date(ExecutionDate),
}

impl Span {
    /// The spans that hold `date`: its day for a daily date (a daily pipeline's day is one
    /// execution a schedule), else the hour and its day's daily date.
    pub fn of(date: ExecutionDate) -> Vec<Span> {
        match date.hour {
            None => vec![Span::Day(date.day)],
            Some(_) => vec![Span::Date(date), Span::Date(date.whole_day())],
        }
    }
}

/// The spans a state read in part holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spans(BTreeSet<Span>);

impl Spans {
    /// Whether every execution and reading of `date` is held: its day, or the date itself.
    pub fn covers(&self, date: ExecutionDate) -> bool {
        self.0.contains(&Span::Day(date.day)) || self.0.contains(&Span::Date(date))
    }

    /// Whether `day` is held whole.
    pub fn has_day(&self, day: NaiveDate) -> bool {
        self.0.contains(&Span::Day(day))
    }

    /// Whether everything of `span` is held.
    pub fn holds(&self, span: &Span) -> bool {
        match span {
            Span::Day(day) => self.has_day(*day),
            Span::Date(date) => self.covers(*date),
        }
    }

    /// Whether everything of each of `spans` is held.
    pub fn holds_all(&self, spans: &[Span]) -> bool {
        spans.iter().all(|s| self.holds(s))
    }

    /// Those of `spans` a state holds: each, read whole (`read` is `None`), else those its
    /// spans `read` hold (a state read in part claims no more than it read).
    pub fn held(read: Option<&Spans>, spans: &[Span]) -> Spans {
        spans
            .iter()
            .filter(|s| read.is_none_or(|r| r.holds(s)))
            .copied()
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Span> + '_ {
        self.0.iter()
    }

    pub fn to_vec(&self) -> Vec<Span> {
        self.0.iter().copied().collect()
    }
}

impl FromIterator<Span> for Spans {
    /// The spans, a date whose day is among them left out (the day holds it): one set of
    /// spans read has one form.
    fn from_iter<I: IntoIterator<Item = Span>>(spans: I) -> Self {
        let all: BTreeSet<Span> = spans.into_iter().collect();
        let day_read = |date: &ExecutionDate| all.contains(&Span::Day(date.day));
        let kept = all.iter().filter(|s| !matches!(s, Span::Date(date) if day_read(date)));
        Spans(kept.copied().collect())
    }
}

/// The executions a decision on an input is likely to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needs {
    /// Every execution: a config change or a pipeline forgotten reads them all.
    Whole,
    /// The executions and readings of these spans, besides the live executions.
    Part(Vec<Span>),
}

impl Needs {
    /// What a decision on `input` at `now` is likely to read: the day a timer, a job report,
    /// a command or a dated reading names; for an undated reading or a cron tick, the days
    /// around `now` (yesterday, today and tomorrow in UTC hold today in every timezone).
    pub fn of(input: &Input, now: DateTime<Utc>) -> Needs {
        let around_now = || {
            let today = now.date_naive();
            let days = [today - TimeDelta::days(1), today, today + TimeDelta::days(1)];
            Needs::Part(days.into_iter().map(Span::Day).collect())
        };
        let day = |day: NaiveDate| Needs::Part(vec![Span::Day(day)]);
        let date = |date: ExecutionDate| Needs::Part(Span::of(date));
        match input {
            Input::ConfigPublished(_) => Needs::Whole,
            Input::SensorReceived(reading) => reading.date.map_or_else(around_now, |day| {
                date(ExecutionDate {
                    day,
                    hour: reading.hour,
                })
            }),
            Input::JobReported(report) => date(report.execution.date()),
            Input::CommandReceived(command) => match &command.kind {
                CommandOf::Rerun(Rerun { execution, .. }) | CommandOf::Cancel(Cancel { execution, .. }) => {
                    day(execution.date.day)
                }
                // A subscription names no day (a new subscriber is sent recent completions).
                CommandOf::Subscribe { .. } | CommandOf::Unsubscribe { .. } => Needs::Whole,
            },
            Input::TimerFired(kind) => match kind {
                TimerKind::CronTick => around_now(),
                TimerKind::StartCheck { date } | TimerKind::TriggerDeadline { date } => day(date.day),
                TimerKind::Forget => Needs::Whole,
                // An expiry asks whether its day keeps another execution.
                TimerKind::Expire { execution } => day(execution.date().day),
                // A missed deadline arms the next date still owed, looked for from the day
                // before today in the pipeline's timezone (two days before today in UTC,
                // west of it).
                TimerKind::SlaWarning { execution } | TimerKind::SlaBreach { execution } => around_now()
                    .with(now.date_naive() - TimeDelta::days(2))
                    .with(execution.date().day),
                other => other.execution().map_or(Needs::Whole, |id| date(id.date())),
            },
            Input::Rejected { .. } => Needs::Part(Vec::new()),
        }
    }

    /// These needs and the executions of `day`.
    fn with(self, day: NaiveDate) -> Needs {
        match self {
            Needs::Whole => Needs::Whole,
            Needs::Part(mut spans) => {
                if !spans.contains(&Span::Day(day)) {
                    spans.push(Span::Day(day));
                }
                Needs::Part(spans)
            }
        }
    }

    /// The spans to read, or `None` for every execution.
    pub fn spans(&self) -> Option<&[Span]> {
        match self {
            Needs::Whole => None,
            Needs::Part(spans) => Some(spans),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::execution::ExecutionId;

    #[test]
    fn a_missed_deadline_reads_its_day_and_the_days_the_next_one_owed_is_looked_for_in() {
        let now: DateTime<Utc> = "2026-11-28T03:00:00Z".parse().unwrap();
        let execution = ExecutionId::of("cron", "2026-11-20").unwrap();
        let needs = Needs::of(&Input::TimerFired(TimerKind::SlaBreach { execution }), now);
        let mut days: Vec<String> = (needs.spans().unwrap().iter())
            .map(|s| match s {
                Span::Day(day) => day.to_string(),
                Span::Date(date) => panic!("{date} read alone"),
            })
            .collect();
        days.sort();
        assert_eq!(
            days,
            ["2026-11-20", "2026-11-26", "2026-11-27", "2026-11-28", "2026-11-29"],
            "its own, and the day before today in every timezone"
        );
        let reading = Needs::of(&Input::TimerFired(TimerKind::CronTick), now);
        assert_eq!(reading.spans().unwrap().len(), 3);
    }

    #[test]
    fn an_hour_is_read_with_its_days_daily_date_and_an_expiry_with_its_whole_day() {
        let now: DateTime<Utc> = "2026-11-28T03:00:00Z".parse().unwrap();
        let hour = ExecutionId::of("sensor", "2026-11-20T05").unwrap();
        let poll = Needs::of(
            &Input::TimerFired(TimerKind::Evaluate {
                execution: hour.clone(),
            }),
            now,
        );
        let day: NaiveDate = "2026-11-20".parse().unwrap();
        assert_eq!(
            poll.spans().unwrap(),
            [Span::Date(hour.date()), Span::Date(ExecutionDate::daily(day))]
        );
        let expire = Needs::of(&Input::TimerFired(TimerKind::Expire { execution: hour }), now);
        assert_eq!(expire.spans().unwrap(), [Span::Day(day)]);
        let daily = ExecutionId::of("sensor", "2026-11-20").unwrap();
        let report = Needs::of(&Input::TimerFired(TimerKind::Evaluate { execution: daily }), now);
        assert_eq!(report.spans().unwrap(), [Span::Day(day)], "a daily date reads its day");
    }

    #[test]
    fn spans_held_answer_for_what_they_cover_only() {
        let day: NaiveDate = "2026-11-20".parse().unwrap();
        let hour = |h| ExecutionDate { day, hour: Some(h) };
        let by_hour: Spans = Span::of(hour(5)).into_iter().collect();
        assert!(by_hour.covers(hour(5)) && by_hour.covers(ExecutionDate::daily(day)));
        assert!(!by_hour.covers(hour(6)) && !by_hour.has_day(day));
        assert!(!by_hour.holds(&Span::Day(day)));
        let whole: Spans = [Span::Day(day)].into_iter().collect();
        assert!(whole.covers(hour(6)) && whole.holds_all(&Span::of(hour(7))));
        let asked = [Span::Date(hour(1)), Span::Day(day + TimeDelta::days(1))];
        assert_eq!(Spans::held(Some(&whole), &asked).to_vec(), [Span::Date(hour(1))]);
        let each: Spans = asked.into_iter().collect();
        assert_eq!(Spans::held(None, &asked), each, "a state read whole holds each");
    }
}
