//! Which execution: a schedule and a date, `schedule/date` in text (`daily/2026-11-23`,
//! `hourly/2026-11-23T05`). That text keys an execution in the pipeline's state, and its two
//! parts travel in timers, job reports, trigger requests and events.
//!
//! Records may spell a date several ways; decoding reads it once with [`ExecutionDate`]'s
//! parser and keeps its canonical text, the only form Sluice stores or publishes.

use std::fmt;
use std::str::FromStr;

use chrono::NaiveDate;
use thiserror::Error;

/// Why a text is not an execution date or id.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error("{0:?} is not YYYY-MM-DD or YYYY-MM-DDTHH")]
    Date(String),
    #[error("{0:?} is not an execution id (schedule/YYYY-MM-DD or schedule/YYYY-MM-DDTHH)")]
    Id(String),
}

/// An execution's date: a day, or a day and hour for hourly executions. Text form
/// `YYYY-MM-DD` or `YYYY-MM-DDTHH`.
///
/// Dates order by day, and within a day the daily date comes before the hourly ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExecutionDate {
    pub day: NaiveDate,
    /// The local hour, 0..=23, of an hourly execution.
    pub hour: Option<u32>,
}

impl ExecutionDate {
    pub fn daily(day: NaiveDate) -> Self {
        ExecutionDate { day, hour: None }
    }

    /// `hour` is the local hour, 0..=23.
    pub fn hourly(day: NaiveDate, hour: u32) -> Self {
        debug_assert!(hour < 24, "hour {hour} of an hourly execution date");
        ExecutionDate { day, hour: Some(hour) }
    }

    /// Reads a date only in the canonical form [`Display`](fmt::Display) writes (`2026-03-08`,
    /// `2026-03-08T05`; not `20260308` or `2026-03-08T5`): the form of stored keys, timers and
    /// events, which never needs normalising.
    pub fn canonical(text: &str) -> Option<Self> {
        text.parse().ok().filter(|date: &Self| date.to_string() == text)
    }

    /// The daily date of the same day (itself, for a daily date).
    pub fn whole_day(self) -> Self {
        ExecutionDate::daily(self.day)
    }

    /// The day as `YYYYMMDD`.
    pub fn compact_day(self) -> String {
        self.day.format("%Y%m%d").to_string()
    }
}

/// The one parser of execution dates: a day as `YYYY-MM-DD` or `YYYYMMDD` (as chrono reads
/// those formats, so `2026-3-8` too), optionally followed by `T` and an hour 0-23 (`T05`,
/// `T5`). [`ExecutionDate::canonical`] reads only what `Display` writes.
impl FromStr for ExecutionDate {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, ParseError> {
        let bad = || ParseError::Date(text.to_string());
        let (day, hour) = match text.split_once('T') {
            Some((day, hour)) => (day, Some(hour)),
            None => (text, None),
        };
        let day = NaiveDate::parse_from_str(day, "%Y-%m-%d")
            .or_else(|_| NaiveDate::parse_from_str(day, "%Y%m%d"))
            .map_err(|_| bad())?;
        let hour = match hour {
            None => None,
            Some(hour) => Some(hour.parse::<u32>().ok().filter(|h| *h < 24).ok_or_else(bad)?),
        };
        Ok(ExecutionDate { day, hour })
    }
}

impl fmt::Display for ExecutionDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.day.format("%Y-%m-%d"))?;
        if let Some(hour) = self.hour {
            write!(f, "T{hour:02}")?;
        }
        Ok(())
    }
}

/// Separates the schedule from the date. A date never contains it, so the last one in an id
/// does, whatever the schedule id.
const SEPARATOR: char = '/';

/// One execution: a pipeline's run for a schedule and a date. Text form `schedule/date`, the
/// key of [`PipelineState::executions`](super::lifecycle::PipelineState::executions).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExecutionId {
    pub schedule: String,
    pub date: ExecutionDate,
}

impl ExecutionId {
    pub fn new(schedule: impl Into<String>, date: ExecutionDate) -> Self {
        ExecutionId {
            schedule: schedule.into(),
            date,
        }
    }
}

/// The text form of an execution id from its parts as text, which must already be canonical
/// (records are normalised when decoded, timers carry dates that `Display` wrote).
pub fn execution_key(schedule: &str, date: &str) -> String {
    format!("{schedule}{SEPARATOR}{date}")
}

/// Whether `key` is [`execution_key`]`(schedule, date)`, without building it.
pub fn is_execution_key(key: &str, schedule: &str, date: &str) -> bool {
    key.strip_prefix(schedule)
        .and_then(|rest| rest.strip_prefix(SEPARATOR))
        .is_some_and(|rest| rest == date)
}

/// Reads the text form, with the date in its canonical form only (see
/// [`ExecutionDate::canonical`]): an id reads back as it was written.
impl FromStr for ExecutionId {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, ParseError> {
        text.rsplit_once(SEPARATOR)
            .and_then(|(schedule, date)| Some(ExecutionId::new(schedule, ExecutionDate::canonical(date)?)))
            .ok_or_else(|| ParseError::Id(text.to_string()))
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{SEPARATOR}{}", self.schedule, self.date)
    }
}

#[cfg(test)]
mod tests;
