//! Timers as plain data. The core asks for them; the runtime stores them durably with the
//! partition's state and hands them back as [`super::Input::TimerFired`] when due.
//!
//! A timer may fire late or twice: handling a timer whose purpose has passed changes nothing.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a timer is for. With the pipeline id it names the timer: setting it again moves it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TimerKind {
    /// Re-evaluate an execution's rules (its interval), or close its window.
    #[serde(rename_all = "camelCase")]
    Evaluate { schedule_id: String, date: String },
}

impl TimerKind {
    /// A stable text form, used in storage keys and event origins.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("timer kinds serialise")
    }

    pub fn decode(text: &str) -> Option<TimerKind> {
        serde_json::from_str(text).ok()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerOp {
    Set { kind: TimerKind, at: DateTime<Utc> },
    Cancel { kind: TimerKind },
}
