//! Lifecycle events: everything Sluice decides, as published on `sluice.events`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::execution::RunId;
use crate::core::ids::PipelineId;

pub mod detail;
pub use detail::Detail;

macro_rules! event_types {
    ($($name:ident => $category:ident),* $(,)?) => {
        /// The event catalogue: the established types plus Sluice's own.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        pub enum EventType { $($name),* }

        impl EventType {
            pub const ALL: &'static [EventType] = &[$(EventType::$name),*];

            pub fn name(self) -> &'static str {
                match self { $(EventType::$name => stringify!($name)),* }
            }

            /// The type named `name`, in any letter case.
            pub fn parse(name: &str) -> Option<EventType> {
                EventType::ALL.iter().copied().find(|t| t.name().eq_ignore_ascii_case(name))
            }

            pub fn category(self) -> Category {
                match self { $(EventType::$name => Category::$category),* }
            }
        }
    };
}

event_types! {
    VALIDATION_PASSED => Validation,
    VALIDATION_EXHAUSTED => Validation,
    JOB_TRIGGERED => Job,
    JOB_COMPLETED => Job,
    JOB_FAILED => Job,
    JOB_TIMEOUT => Job,
    RETRY_EXHAUSTED => Job,
    JOB_POLL_EXHAUSTED => Job,
    INFRA_FAILURE => Job,
    SLA_WARNING => Sla,
    SLA_BREACH => Sla,
    SLA_MET => Sla,
    RELATIVE_SLA_WARNING => Sla,
    RELATIVE_SLA_BREACH => Sla,
    SCHEDULE_MISSED => Schedule,
    IRREGULAR_SCHEDULE_MISSED => Schedule,
    SENSOR_DEADLINE_EXPIRED => Schedule,
    TRIGGER_RECOVERED => Schedule,
    PIPELINE_EXCLUDED => Schedule,
    LATE_DATA_ARRIVAL => PostRun,
    RERUN_ACCEPTED => Rerun,
    RERUN_REJECTED => Rerun,
    POST_RUN_BASELINE_CAPTURED => PostRun,
    POST_RUN_PASSED => PostRun,
    POST_RUN_FAILED => PostRun,
    POST_RUN_DRIFT => PostRun,
    POST_RUN_DRIFT_INFLIGHT => PostRun,
    POST_RUN_SENSOR_MISSING => PostRun,
    DATA_DRIFT => PostRun,
    DRY_RUN_WOULD_TRIGGER => DryRun,
    DRY_RUN_LATE_DATA => DryRun,
    DRY_RUN_SLA_PROJECTION => DryRun,
    DRY_RUN_DRIFT => DryRun,
    DRY_RUN_COMPLETED => DryRun,
    DRY_RUN_WOULD_RERUN => DryRun,
    DRY_RUN_RERUN_REJECTED => DryRun,
    DRY_RUN_WOULD_RETRY => DryRun,
    DRY_RUN_RETRY_EXHAUSTED => DryRun,
    CONFIG_ACCEPTED => Config,
    CONFIG_REJECTED => Config,
    INPUT_REJECTED => Input,
    STALE_RUN => Job,
    RUN_CANCELLED => Job,
    // Added later than the rest: kept last, so the Avro enum's existing symbols keep their
    // positions.
    SLA_AT_RISK => Sla,
    SLA_RECOVERED => Sla,
    SENSOR_FLAPPING => Sensor,
    UNKNOWN_SENSOR => Sensor,
    STALE_SENSOR_WARNING => Sensor,
    VALIDATION_WARNED => Validation,
    POST_RUN_WARNED => PostRun,
    EVALUATION_SLA_WARNING => Sla,
    EVALUATION_SLA_BREACH => Sla,
    JOB_REPORT_AFTER_END => Job,
    JOB_STATUS_UNKNOWN => Job,
    DRY_RUN_WOULD_REPORT => DryRun,
}

impl EventType {
    /// A missed deadline: of the run (`SLA_BREACH`), of a relative SLA, or of evaluation.
    pub fn is_sla_breach(self) -> bool {
        matches!(
            self,
            EventType::SLA_BREACH | EventType::RELATIVE_SLA_BREACH | EventType::EVALUATION_SLA_BREACH
        )
    }
}

/// The family an event belongs to, so consumers can route without a list of types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    Validation,
    Job,
    Sla,
    Schedule,
    PostRun,
    Rerun,
    DryRun,
    Config,
    Input,
    /// Sensors that misbehave: flapping, unknown to every rule, or silent too long.
    Sensor,
}

/// The envelope of every record on `sluice.events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Deterministic: the same input handled again yields the same id, so consumers can
    /// drop re-sent duplicates.
    pub event_id: String,
    #[serde(rename = "type")]
    pub kind: EventType,
    pub category: Category,
    pub pipeline_id: PipelineId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    pub timestamp: DateTime<Utc>,
    pub message: String,
    /// A free map on the wire (the schemas say so); the decider makes it from a [`Detail`].
    #[serde(default)]
    pub detail: Map<String, Value>,
}

/// The most text of one reason an event or a dead letter carries. Errors about bad input
/// may quote the input; an input near the broker's record size limit must not make an event
/// or a dead letter that exceeds it.
pub const REASON_LIMIT: usize = 1_000;

/// `text`, cut to at most `limit` bytes (on a character boundary) with a note of the cut.
pub fn clip(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let end = (0..=limit).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    format!("{}… ({} more bytes)", &text[..end], text.len() - end)
}

/// Derives an event id from where the input came from and from the event itself: its type,
/// the execution it is about (`schedule/date`, empty for pipeline events) and how many events
/// of that type about that execution the same input produced before it. An id therefore
/// always names the same kind of event about the same execution: an input handled again
/// with another `now` (a batch redone after a crash) may produce other events, but never
/// gives an existing id to a different event.
pub fn event_id(origin: &str, kind: EventType, execution: Option<(&str, &str)>, seq: usize) -> String {
    let (schedule, date) = execution.unwrap_or(("", ""));
    let digest = Sha256::new()
        .chain_update(origin.as_bytes())
        .chain_update(b"#")
        .chain_update(kind.name())
        .chain_update(b"#")
        .chain_update(schedule)
        .chain_update(b"/")
        .chain_update(date)
        .chain_update(b"#")
        .chain_update(seq.to_string())
        .finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_on_a_character_boundary() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("ééé", 3), "é… (4 more bytes)");
        assert!(clip(&"x".repeat(600_000), REASON_LIMIT).len() < REASON_LIMIT + 30);
    }

    #[test]
    fn type_names_serialise_as_written_in_the_catalogue() {
        for t in EventType::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), Value::String(t.name().to_string()));
        }
        assert_eq!(EventType::ALL.len(), 55);
    }

    #[test]
    fn ids_are_deterministic_and_name_the_event() {
        use EventType::*;
        let day = Some(("daily", "2026-11-23"));
        let id = |origin, kind, exec, seq| event_id(origin, kind, exec, seq);
        let base = id("sensors/0@5", JOB_TRIGGERED, day, 0);
        assert_eq!(base, id("sensors/0@5", JOB_TRIGGERED, day, 0));
        // The same input redone may produce another event at the same place: another id.
        let others = [
            ("sequence", id("sensors/0@5", JOB_TRIGGERED, day, 1)),
            ("origin", id("sensors/0@6", JOB_TRIGGERED, day, 0)),
            ("type", id("sensors/0@5", SLA_BREACH, day, 0)),
            (
                "execution",
                id("sensors/0@5", JOB_TRIGGERED, Some(("daily", "2026-11-24")), 0),
            ),
        ];
        for (what, other) in others {
            assert_ne!(base, other, "another {what}, another id");
        }
        assert_ne!(
            id("sensors/0@5", CONFIG_ACCEPTED, None, 0),
            id("sensors/0@5", CONFIG_ACCEPTED, Some(("", "")), 1)
        );
        assert_eq!(id("x", INPUT_REJECTED, None, 0).len(), 32);
    }
}
