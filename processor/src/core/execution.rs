//! Which execution: a schedule and a date, `schedule/date` in text (`daily/2026-11-23`,
//! `hourly/2026-11-23T05`). That text keys an execution in the pipeline's state, and its two
//! parts travel in timers, job reports, trigger requests and events.
//!
//! Records may spell a date several ways; decoding reads it once with [`ExecutionDate`]'s
//! parser and keeps its canonical text, the only form Sluice stores or publishes.

use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use chrono::{Datelike, NaiveDate};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

pub use super::ids::RunId;

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
        // Every stored execution and timer is read through here: the common shape is read
        // digit by digit (chrono's parser and a formatted copy to compare cost more than the
        // rest of decoding an execution); any other text takes the long way.
        Self::four_digit_year(text).or_else(|| text.parse().ok().filter(|date: &Self| date.to_string() == text))
    }

    /// `YYYY-MM-DD` or `YYYY-MM-DDTHH`, read directly.
    fn four_digit_year(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        let number = |range: std::ops::Range<usize>| -> Option<u32> {
            let digits = b.get(range)?;
            digits
                .iter()
                .try_fold(0, |n, d| d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0')))
        };
        if !(b.len() == 10 || b.len() == 13) || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let day = NaiveDate::from_ymd_opt(number(0..4)? as i32, number(5..7)?, number(8..10)?)?;
        let hour = match b.len() {
            13 if b[10] == b'T' => Some(number(11..13).filter(|h| *h < 24)?),
            13 => return None,
            _ => None,
        };
        Some(ExecutionDate { day, hour })
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
        // Every execution id is made through here: the digits directly for the four-digit
        // years there are (chrono's `format` parses its pattern on every call).
        match self.day.year() {
            year @ 0..=9999 => write!(f, "{year:04}-{:02}-{:02}", self.day.month(), self.day.day())?,
            _ => write!(f, "{}", self.day.format("%Y-%m-%d"))?,
        }
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
///
/// It keeps its text: equality, order and hash are the text's, so a map keyed by ids stores
/// and serialises exactly as the map keyed by their text did (the store and the changelog
/// hold those bytes), and a lookup by `&str` works through [`Borrow`]. The text is shared:
/// a decision's copy of a state copies every id of the history, and timers and scans clone
/// them too.
#[derive(Clone)]
pub struct ExecutionId {
    text: Arc<str>,
    date: ExecutionDate,
}

impl ExecutionId {
    pub fn new(schedule: &str, date: ExecutionDate) -> Self {
        ExecutionId {
            text: format!("{schedule}{SEPARATOR}{date}").into(),
            date,
        }
    }

    /// The schedule id (`daily`, or whatever the config named it).
    pub fn schedule(&self) -> &str {
        &self.text[..self.text.len() - self.date_text().len() - SEPARATOR.len_utf8()]
    }

    pub fn date(&self) -> ExecutionDate {
        self.date
    }

    /// The date in its canonical text, as timers, records and events carry it.
    pub fn date_text(&self) -> &str {
        self.text.rsplit_once(SEPARATOR).map_or("", |(_, date)| date)
    }

    /// The text form, `schedule/date`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The id of `schedule` and a date in text, which must be canonical: what a record
    /// decoded or a timer carries. `None` for any other text.
    pub fn of(schedule: &str, date: &str) -> Option<Self> {
        // `date` is canonical: it is the text `new` would format.
        let date_text = date;
        let date = ExecutionDate::canonical(date_text)?;
        let mut text = String::with_capacity(schedule.len() + 1 + date_text.len());
        text.push_str(schedule);
        text.push(SEPARATOR);
        text.push_str(date_text);
        Some(ExecutionId {
            text: text.into(),
            date,
        })
    }
}

/// Reads the text form, with the date in its canonical form only (see
/// [`ExecutionDate::canonical`]): an id reads back as it was written.
impl FromStr for ExecutionId {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, ParseError> {
        text.rsplit_once(SEPARATOR)
            .and_then(|(schedule, date)| ExecutionId::of(schedule, date))
            .ok_or_else(|| ParseError::Id(text.to_string()))
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExecutionId({:?})", self.text)
    }
}

impl PartialEq for ExecutionId {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for ExecutionId {}

impl PartialOrd for ExecutionId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ExecutionId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.text.cmp(&other.text)
    }
}

impl Hash for ExecutionId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state)
    }
}

impl Borrow<str> for ExecutionId {
    fn borrow(&self) -> &str {
        &self.text
    }
}

/// As its text: a map key, or a field of its own.
impl Serialize for ExecutionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for ExecutionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(de::Error::custom)
    }
}

/// As its canonical text (`2026-11-23`, `2026-11-23T05`).
impl Serialize for ExecutionDate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ExecutionDate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        ExecutionDate::canonical(&text).ok_or_else(|| de::Error::custom(ParseError::Date(text.into_owned())))
    }
}

/// An id as two fields, `scheduleId` and `date`, for `#[serde(flatten, with = "fields")]`:
/// the form timers, executions and trigger requests have always been stored in.
pub mod fields {
    use super::*;

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Fields<'a> {
        #[serde(borrow)]
        schedule_id: Cow<'a, str>,
        #[serde(borrow)]
        date: Cow<'a, str>,
    }

    pub fn serialize<S: Serializer>(id: &ExecutionId, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = Fields {
            schedule_id: Cow::Borrowed(id.schedule()),
            date: Cow::Borrowed(id.date_text()),
        };
        fields.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ExecutionId, D::Error> {
        let fields = Fields::deserialize(deserializer)?;
        ExecutionId::of(&fields.schedule_id, &fields.date)
            .ok_or_else(|| de::Error::custom(ParseError::Date(fields.date.into_owned())))
    }
}

#[cfg(test)]
mod tests;

/// The id of `schedule` on `date` (canonical text), for tests.
#[cfg(test)]
pub(crate) fn id(schedule: &str, date: &str) -> ExecutionId {
    ExecutionId::of(schedule, date).unwrap_or_else(|| panic!("{schedule}/{date} is not an execution id"))
}
