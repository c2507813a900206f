//! Timers as plain data. The core asks for them; the runtime stores them durably with the
//! partition's state and hands them back as [`super::Input::TimerFired`] when due.
//!
//! A timer may fire late or twice: handling a timer whose purpose has passed changes nothing.
//! Every timer a pipeline has pending is also listed in its state, so deleting a pipeline or
//! changing its config can cancel exactly what it armed.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a timer is for. With the pipeline id it names the timer: setting it again moves it.
///
/// Execution timers carry `(schedule_id, date)`; schedule timers carry the date they watch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TimerKind {
    /// Re-evaluate an execution's rules (its interval), or close its window.
    #[serde(rename_all = "camelCase")]
    Evaluate { schedule_id: String, date: String },
    /// The next cron occurrence: opens that occurrence's execution.
    CronTick,
    /// The expected start of a day (`schedule.time`, or an inclusion date): SCHEDULE_MISSED,
    /// IRREGULAR_SCHEDULE_MISSED or TRIGGER_RECOVERED when nothing started.
    #[serde(rename_all = "camelCase")]
    StartCheck { date: String },
    /// `schedule.trigger.deadline`: SENSOR_DEADLINE_EXPIRED when nothing started by then.
    #[serde(rename_all = "camelCase")]
    TriggerDeadline { date: String },
    /// SLA_WARNING at deadline − expectedDuration.
    #[serde(rename_all = "camelCase")]
    SlaWarning { schedule_id: String, date: String },
    /// SLA_BREACH at the deadline.
    #[serde(rename_all = "camelCase")]
    SlaBreach { schedule_id: String, date: String },
    #[serde(rename_all = "camelCase")]
    RelativeSlaWarning { schedule_id: String, date: String },
    #[serde(rename_all = "camelCase")]
    RelativeSlaBreach { schedule_id: String, date: String },
    /// The job poll window of one run: JOB_POLL_EXHAUSTED when no outcome came.
    #[serde(rename_all = "camelCase")]
    JobPollWindow {
        schedule_id: String,
        date: String,
        run_id: String,
    },
    /// The next status check of a running job (every `job.pollInterval`).
    #[serde(rename_all = "camelCase")]
    JobStatusCheck {
        schedule_id: String,
        date: String,
        run_id: String,
    },
    /// The last resort for an execution that stopped making progress: STALE_RUN.
    #[serde(rename_all = "camelCase")]
    Watchdog { schedule_id: String, date: String },
    /// POST_RUN_SENSOR_MISSING when no post-run sensor came within `postRun.sensorTimeout`.
    #[serde(rename_all = "camelCase")]
    PostRunTimeout { schedule_id: String, date: String },
    /// An ended execution and the sensors scoped to its date are forgotten (bounded state).
    #[serde(rename_all = "camelCase")]
    Expire { schedule_id: String, date: String },
}

impl TimerKind {
    /// A stable text form, used in storage keys and event origins.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("timer kinds serialise")
    }

    pub fn decode(text: &str) -> Option<TimerKind> {
        serde_json::from_str(text).ok()
    }

    /// The execution `(schedule_id, date)` this timer belongs to, if it is an execution timer.
    pub fn execution(&self) -> Option<(&str, &str)> {
        match self {
            TimerKind::Evaluate { schedule_id, date }
            | TimerKind::SlaWarning { schedule_id, date }
            | TimerKind::SlaBreach { schedule_id, date }
            | TimerKind::RelativeSlaWarning { schedule_id, date }
            | TimerKind::RelativeSlaBreach { schedule_id, date }
            | TimerKind::JobPollWindow { schedule_id, date, .. }
            | TimerKind::JobStatusCheck { schedule_id, date, .. }
            | TimerKind::Watchdog { schedule_id, date }
            | TimerKind::PostRunTimeout { schedule_id, date }
            | TimerKind::Expire { schedule_id, date } => Some((schedule_id, date)),
            TimerKind::CronTick | TimerKind::StartCheck { .. } | TimerKind::TriggerDeadline { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerOp {
    Set { kind: TimerKind, at: DateTime<Utc> },
    Cancel { kind: TimerKind },
}
