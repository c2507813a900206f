//! What a decision is likely to read of a pipeline's quiet executions, so that the store
//! reads those with the live ones and no others (see [`super::Executions`]).
//!
//! A guess, never a rule: a decision that asks for more is made again from the whole state,
//! so a wrong guess costs time, not a wrong decision. What makes it right nearly always is
//! that an input names its day: a timer or a job report its execution, a command or a dated
//! reading its date.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::Input;
use crate::core::records::{Cancel, CommandOf, Rerun};
use crate::core::timers::TimerKind;

/// The executions a decision on an input is likely to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needs {
    /// Every execution: a config change or a pipeline forgotten reads them all.
    Whole,
    /// The executions of these days (every schedule's), besides the live ones.
    Days(Vec<NaiveDate>),
}

impl Needs {
    /// What a decision on `input` at `now` is likely to read: the day a timer, a job report,
    /// a command or a dated reading names; for an undated reading or a cron tick, the days
    /// around `now` (yesterday, today and tomorrow in UTC hold today in every timezone).
    pub fn of(input: &Input, now: DateTime<Utc>) -> Needs {
        let around_now = || {
            let today = now.date_naive();
            Needs::Days(vec![today - TimeDelta::days(1), today, today + TimeDelta::days(1)])
        };
        let day = |day: NaiveDate| Needs::Days(vec![day]);
        match input {
            Input::ConfigPublished(_) => Needs::Whole,
            Input::SensorReceived(reading) => reading.date.map_or_else(around_now, day),
            Input::JobReported(report) => day(report.execution.date().day),
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
                // A missed deadline arms the next date still owed, looked for from the day
                // before today in the pipeline's timezone (two days before today in UTC,
                // west of it).
                TimerKind::SlaWarning { execution } | TimerKind::SlaBreach { execution } => around_now()
                    .with(now.date_naive() - TimeDelta::days(2))
                    .with(execution.date().day),
                other => other.execution().map_or(Needs::Whole, |id| day(id.date().day)),
            },
            Input::Rejected { .. } => Needs::Days(Vec::new()),
        }
    }

    /// These needs and the executions of `day`.
    fn with(self, day: NaiveDate) -> Needs {
        match self {
            Needs::Whole => Needs::Whole,
            Needs::Days(mut days) => {
                if !days.contains(&day) {
                    days.push(day);
                }
                Needs::Days(days)
            }
        }
    }

    /// The days to read, or `None` for every execution.
    pub fn days(&self) -> Option<&[NaiveDate]> {
        match self {
            Needs::Whole => None,
            Needs::Days(days) => Some(days),
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
        let mut days: Vec<String> = needs.days().unwrap().iter().map(|d| d.to_string()).collect();
        days.sort();
        assert_eq!(
            days,
            ["2026-11-20", "2026-11-26", "2026-11-27", "2026-11-28", "2026-11-29"],
            "its own, and the day before today in every timezone"
        );
        let reading = Needs::of(&Input::TimerFired(TimerKind::CronTick), now);
        assert_eq!(reading.days().unwrap().len(), 3);
    }
}
