//! Timers as plain data. The core asks for them; the runtime stores them durably with the
//! partition's state and hands them back as [`super::Input::TimerFired`] when due.
//!
//! A timer may fire late or twice: handling a timer whose purpose has passed changes nothing.
//! Every timer a pipeline has pending is also listed in its state, so deleting a pipeline or
//! changing its config can cancel exactly what it armed.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use std::borrow::Cow;

use serde::{de, Deserialize, Deserializer, Serialize};

use super::execution::{fields, ExecutionDate, ExecutionId};

/// What a timer is for. With the pipeline id it names the timer: setting it again moves it.
///
/// Execution timers carry their [`ExecutionId`] (stored as `scheduleId` and `date`); schedule
/// timers carry the date they watch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TimerKind {
    /// Re-evaluate an execution's rules (its interval), or close its window.
    #[serde(rename_all = "camelCase")]
    Evaluate {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// The next cron occurrence: opens that occurrence's execution.
    CronTick,
    /// The expected start of a day (`schedule.time`, or an inclusion date): SCHEDULE_MISSED,
    /// IRREGULAR_SCHEDULE_MISSED or TRIGGER_RECOVERED when nothing started.
    #[serde(rename_all = "camelCase")]
    StartCheck { date: ExecutionDate },
    /// `schedule.trigger.deadline`: SENSOR_DEADLINE_EXPIRED when nothing started by then.
    #[serde(rename_all = "camelCase")]
    TriggerDeadline { date: ExecutionDate },
    /// SLA_WARNING at deadline − expectedDuration.
    #[serde(rename_all = "camelCase")]
    SlaWarning {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// SLA_BREACH at the deadline.
    #[serde(rename_all = "camelCase")]
    SlaBreach {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// SLA_AT_RISK / SLA_RECOVERED: the SLA forecast is made again (its projection moves).
    #[serde(rename_all = "camelCase")]
    SlaForecast {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// EVALUATION_SLA_WARNING at `sla.evaluationDeadline` − `atRiskLeadTime`.
    #[serde(rename_all = "camelCase")]
    EvaluationSlaWarning {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// EVALUATION_SLA_BREACH at `sla.evaluationDeadline`.
    #[serde(rename_all = "camelCase")]
    EvaluationSlaBreach {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    #[serde(rename_all = "camelCase")]
    RelativeSlaWarning {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    #[serde(rename_all = "camelCase")]
    RelativeSlaBreach {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// The job poll window of one run: JOB_POLL_EXHAUSTED when no outcome came.
    #[serde(rename_all = "camelCase")]
    JobPollWindow {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
        run_id: String,
    },
    /// The next status check of a running job (every `job.pollInterval`).
    #[serde(rename_all = "camelCase")]
    JobStatusCheck {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
        run_id: String,
    },
    /// STALE_SENSOR_WARNING: a rule's sensor overstays its usual interval.
    #[serde(rename_all = "camelCase")]
    StaleSensorCheck {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// The next call of the evaluator of sensor `key` (every `every`, or sooner to retry a
    /// failed one) while the execution evaluates.
    #[serde(rename_all = "camelCase")]
    EvaluatorDue {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
        key: String,
    },
    /// The last resort for an execution that stopped making progress: STALE_RUN.
    #[serde(rename_all = "camelCase")]
    Watchdog {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// POST_RUN_SENSOR_MISSING when no post-run sensor came within `postRun.sensorTimeout`.
    #[serde(rename_all = "camelCase")]
    PostRunTimeout {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
    /// An ended execution and the sensors scoped to its date are forgotten (bounded state).
    #[serde(rename_all = "camelCase")]
    Expire {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
    },
}

impl TimerKind {
    /// A stable text form, used in storage keys and event origins.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("timer kinds serialise")
    }

    pub fn decode(text: &str) -> Option<TimerKind> {
        serde_json::from_str(text).ok()
    }

    /// The execution this timer belongs to, if it is an execution timer.
    pub fn execution(&self) -> Option<&ExecutionId> {
        match self {
            TimerKind::Evaluate { execution }
            | TimerKind::SlaWarning { execution }
            | TimerKind::SlaBreach { execution }
            | TimerKind::SlaForecast { execution }
            | TimerKind::EvaluationSlaWarning { execution }
            | TimerKind::EvaluationSlaBreach { execution }
            | TimerKind::RelativeSlaWarning { execution }
            | TimerKind::RelativeSlaBreach { execution }
            | TimerKind::JobPollWindow { execution, .. }
            | TimerKind::JobStatusCheck { execution, .. }
            | TimerKind::Watchdog { execution }
            | TimerKind::StaleSensorCheck { execution }
            | TimerKind::EvaluatorDue { execution, .. }
            | TimerKind::PostRunTimeout { execution }
            | TimerKind::Expire { execution } => Some(execution),
            TimerKind::CronTick | TimerKind::StartCheck { .. } | TimerKind::TriggerDeadline { .. } => None,
        }
    }
}

/// Read from its fields in one pass. Derived, an internally tagged enum whose variants
/// flatten the execution id buffers every field twice before it builds anything; every timer
/// of a state read from the store is decoded, so that cost a state read in proportion to
/// its timers. Reads exactly what the derived `Serialize` writes (unknown fields ignored).
impl<'de> Deserialize<'de> for TimerKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields<'a> {
            #[serde(borrow)]
            kind: Cow<'a, str>,
            #[serde(borrow, default)]
            schedule_id: Option<Cow<'a, str>>,
            #[serde(borrow, default)]
            date: Option<Cow<'a, str>>,
            #[serde(default)]
            run_id: Option<String>,
            #[serde(default)]
            key: Option<String>,
        }
        let f = Fields::deserialize(deserializer)?;
        let date = || -> Result<&str, D::Error> { f.date.as_deref().ok_or_else(|| de::Error::missing_field("date")) };
        let day = || -> Result<ExecutionDate, D::Error> {
            let text = date()?;
            ExecutionDate::canonical(text)
                .ok_or_else(|| de::Error::custom(format!("not a canonical execution date: {text:?}")))
        };
        let execution = || -> Result<ExecutionId, D::Error> {
            let schedule = (f.schedule_id.as_deref()).ok_or_else(|| de::Error::missing_field("scheduleId"))?;
            let text = date()?;
            ExecutionId::of(schedule, text)
                .ok_or_else(|| de::Error::custom(format!("not a canonical execution date: {text:?}")))
        };
        let field =
            |value: &Option<String>, name: &'static str| value.clone().ok_or_else(|| de::Error::missing_field(name));
        Ok(match &*f.kind {
            "evaluate" => TimerKind::Evaluate {
                execution: execution()?,
            },
            "cronTick" => TimerKind::CronTick,
            "startCheck" => TimerKind::StartCheck { date: day()? },
            "triggerDeadline" => TimerKind::TriggerDeadline { date: day()? },
            "slaWarning" => TimerKind::SlaWarning {
                execution: execution()?,
            },
            "slaBreach" => TimerKind::SlaBreach {
                execution: execution()?,
            },
            "slaForecast" => TimerKind::SlaForecast {
                execution: execution()?,
            },
            "evaluationSlaWarning" => TimerKind::EvaluationSlaWarning {
                execution: execution()?,
            },
            "evaluationSlaBreach" => TimerKind::EvaluationSlaBreach {
                execution: execution()?,
            },
            "relativeSlaWarning" => TimerKind::RelativeSlaWarning {
                execution: execution()?,
            },
            "relativeSlaBreach" => TimerKind::RelativeSlaBreach {
                execution: execution()?,
            },
            "jobPollWindow" => TimerKind::JobPollWindow {
                execution: execution()?,
                run_id: field(&f.run_id, "runId")?,
            },
            "jobStatusCheck" => TimerKind::JobStatusCheck {
                execution: execution()?,
                run_id: field(&f.run_id, "runId")?,
            },
            "staleSensorCheck" => TimerKind::StaleSensorCheck {
                execution: execution()?,
            },
            "evaluatorDue" => TimerKind::EvaluatorDue {
                execution: execution()?,
                key: field(&f.key, "key")?,
            },
            "watchdog" => TimerKind::Watchdog {
                execution: execution()?,
            },
            "postRunTimeout" => TimerKind::PostRunTimeout {
                execution: execution()?,
            },
            "expire" => TimerKind::Expire {
                execution: execution()?,
            },
            other => return Err(de::Error::unknown_variant(other, KINDS)),
        })
    }
}

/// The `kind` of every timer, as stored.
const KINDS: &[&str] = &[
    "evaluate",
    "cronTick",
    "startCheck",
    "triggerDeadline",
    "slaWarning",
    "slaBreach",
    "slaForecast",
    "evaluationSlaWarning",
    "evaluationSlaBreach",
    "relativeSlaWarning",
    "relativeSlaBreach",
    "jobPollWindow",
    "jobStatusCheck",
    "staleSensorCheck",
    "evaluatorDue",
    "watchdog",
    "postRunTimeout",
    "expire",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerOp {
    Set { kind: TimerKind, at: DateTime<Utc> },
    Cancel { kind: TimerKind },
}

/// The origin of the events a fired timer causes (their `eventId`s derive from it): the
/// pipeline, the timer and the time it was due, so a timer fired twice, or replayed in event
/// time, yields the same ids.
pub fn timer_origin(pipeline: &str, kind: &TimerKind, at: DateTime<Utc>) -> String {
    format!("timer/{pipeline}/{}@{}", kind.encode(), at.timestamp_millis())
}

/// One pending timer of a [`TimerIndex`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DueTimer {
    pub at: DateTime<Utc>,
    pub partition: i32,
    pub pipeline: String,
    pub kind: TimerKind,
}

/// The pending timers across partitions: what the runtime's partition stores hold, or what a
/// replay has armed. Ordered by (due, partition, pipeline, kind), so timers due at the same
/// moment always fire in the same order.
///
/// Both indexes share one allocation per timer, its [`Name`]: an instance may hold millions
/// of timers, and each index keeping its own copy of the strings doubled what they cost.
#[derive(Default)]
pub struct TimerIndex {
    by_due: BTreeSet<(DateTime<Utc>, Arc<Name>)>,
    by_name: HashMap<Arc<Name>, DateTime<Utc>>,
}

/// What names a pending timer: setting the same name again moves it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Name {
    partition: i32,
    pipeline: Box<str>,
    kind: TimerKind,
}

impl Name {
    fn new(partition: i32, pipeline: &str, kind: &TimerKind) -> Name {
        Name {
            partition,
            pipeline: pipeline.into(),
            kind: kind.clone(),
        }
    }

    fn due(self, at: DateTime<Utc>) -> DueTimer {
        DueTimer {
            at,
            partition: self.partition,
            pipeline: self.pipeline.into(),
            kind: self.kind,
        }
    }
}

impl TimerIndex {
    /// Sets a timer; returns the due time it replaced, if any.
    pub fn set(
        &mut self,
        partition: i32,
        pipeline: &str,
        kind: &TimerKind,
        at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let name = Arc::new(Name::new(partition, pipeline, kind));
        let previous = self.by_name.insert(name.clone(), at);
        if let Some(previous) = previous {
            self.by_due.remove(&(previous, name.clone()));
        }
        self.by_due.insert((at, name));
        previous
    }

    /// Applies a decision's timer operations for `pipeline`: the index follows the timers
    /// its state now holds.
    pub fn apply(&mut self, partition: i32, pipeline: &str, ops: &[TimerOp]) {
        for op in ops {
            match op {
                TimerOp::Set { kind, at } => {
                    self.set(partition, pipeline, kind, *at);
                }
                TimerOp::Cancel { kind } => {
                    self.cancel(partition, pipeline, kind);
                }
            }
        }
    }

    /// Removes a timer; returns its due time if it was set.
    pub fn cancel(&mut self, partition: i32, pipeline: &str, kind: &TimerKind) -> Option<DateTime<Utc>> {
        let (name, at) = self.by_name.remove_entry(&Name::new(partition, pipeline, kind))?;
        self.by_due.remove(&(at, name));
        Some(at)
    }

    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.by_due.first().map(|(at, _)| *at)
    }

    /// Every pending timer, earliest first.
    pub fn iter(&self) -> impl Iterator<Item = DueTimer> + '_ {
        (self.by_due.iter()).map(|(at, name)| Name::clone(name).due(*at))
    }

    /// Removes and returns every timer due at or before `now`, earliest first.
    pub fn pop_due(&mut self, now: DateTime<Utc>, limit: usize) -> Vec<DueTimer> {
        let mut due = Vec::new();
        while due.len() < limit {
            match self.by_due.first() {
                Some((at, _)) if *at <= now => {
                    let (at, name) = self.by_due.pop_first().expect("first exists");
                    self.by_name.remove(&name);
                    due.push(Arc::unwrap_or_clone(name).due(at));
                }
                _ => break,
            }
        }
        due
    }

    /// Forgets the timers of a partition this instance no longer owns.
    pub fn drop_partition(&mut self, partition: i32) {
        self.by_due.retain(|(_, name)| name.partition != partition);
        self.by_name.retain(|name, _| name.partition != partition);
    }

    pub fn len(&self) -> usize {
        self.by_due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_due.is_empty()
    }
}

/// The pending timers, earliest first.
impl fmt::Debug for TimerIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::execution::id;

    /// Which variant `kind` is: exhaustive, so a new variant fails to compile here until it
    /// is given a number (and [`one_of_each`] a sample).
    fn variant(kind: &TimerKind) -> usize {
        match kind {
            TimerKind::Evaluate { .. } => 0,
            TimerKind::CronTick => 1,
            TimerKind::StartCheck { .. } => 2,
            TimerKind::TriggerDeadline { .. } => 3,
            TimerKind::SlaWarning { .. } => 4,
            TimerKind::SlaBreach { .. } => 5,
            TimerKind::SlaForecast { .. } => 6,
            TimerKind::EvaluationSlaWarning { .. } => 7,
            TimerKind::EvaluationSlaBreach { .. } => 8,
            TimerKind::RelativeSlaWarning { .. } => 9,
            TimerKind::RelativeSlaBreach { .. } => 10,
            TimerKind::JobPollWindow { .. } => 11,
            TimerKind::JobStatusCheck { .. } => 12,
            TimerKind::StaleSensorCheck { .. } => 13,
            TimerKind::EvaluatorDue { .. } => 14,
            TimerKind::Watchdog { .. } => 15,
            TimerKind::PostRunTimeout { .. } => 16,
            TimerKind::Expire { .. } => 17,
        }
    }

    fn one_of_each() -> Vec<TimerKind> {
        let execution = id("a/b", "2026-03-08T05");
        let date = execution.date();
        let run_id = "r-1".to_string();
        vec![
            TimerKind::Evaluate {
                execution: execution.clone(),
            },
            TimerKind::CronTick,
            TimerKind::StartCheck { date },
            TimerKind::TriggerDeadline { date: date.whole_day() },
            TimerKind::SlaWarning {
                execution: execution.clone(),
            },
            TimerKind::SlaBreach {
                execution: execution.clone(),
            },
            TimerKind::SlaForecast {
                execution: execution.clone(),
            },
            TimerKind::EvaluationSlaWarning {
                execution: execution.clone(),
            },
            TimerKind::EvaluationSlaBreach {
                execution: execution.clone(),
            },
            TimerKind::RelativeSlaWarning {
                execution: execution.clone(),
            },
            TimerKind::RelativeSlaBreach {
                execution: execution.clone(),
            },
            TimerKind::JobPollWindow {
                execution: execution.clone(),
                run_id: run_id.clone(),
            },
            TimerKind::JobStatusCheck {
                execution: execution.clone(),
                run_id,
            },
            TimerKind::StaleSensorCheck {
                execution: execution.clone(),
            },
            TimerKind::EvaluatorDue {
                execution: execution.clone(),
                key: "k\"ey".into(),
            },
            TimerKind::Watchdog {
                execution: execution.clone(),
            },
            TimerKind::PostRunTimeout {
                execution: execution.clone(),
            },
            TimerKind::Expire { execution },
        ]
    }

    #[test]
    fn every_timer_kind_reads_back_as_written_and_nothing_else_reads() {
        let kinds = one_of_each();
        assert_eq!(
            kinds.iter().map(variant).collect::<Vec<_>>(),
            (0..KINDS.len()).collect::<Vec<_>>()
        );
        for kind in &kinds {
            let text = kind.encode();
            assert_eq!(TimerKind::decode(&text).as_ref(), Some(kind), "{text}");
            let tag = serde_json::from_str::<serde_json::Value>(&text).unwrap()["kind"].clone();
            assert_eq!(tag, KINDS[variant(kind)], "{text}");
            // Without a field it needs, or with a date not in its canonical form, it does not.
            let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
            for field in ["date", "scheduleId", "runId", "key"] {
                if let Some(present) = value.as_object_mut().unwrap().remove(field) {
                    assert_eq!(TimerKind::decode(&value.to_string()), None, "{text} without {field}");
                    value[field] = present;
                }
            }
            if value.get("date").is_some() {
                value["date"] = "2026-3-8".into();
                assert_eq!(TimerKind::decode(&value.to_string()), None, "{value}");
            }
        }
        assert_eq!(TimerKind::decode(r#"{"kind":"later"}"#), None);
        assert_eq!(
            TimerKind::decode(r#"{"kind":"cronTick","extra":1}"#),
            Some(TimerKind::CronTick),
            "unknown fields are ignored"
        );
    }

    fn kind(d: &str) -> TimerKind {
        TimerKind::Evaluate {
            execution: crate::core::execution::id("stream", d),
        }
    }

    #[test]
    fn setting_again_moves_and_cancel_removes() {
        let t = |s| DateTime::from_timestamp(s, 0).unwrap();
        let mut index = TimerIndex::default();
        assert_eq!(index.set(0, "a", &kind("2026-11-21"), t(30)), None);
        assert_eq!(index.set(1, "b", &kind("2026-11-21"), t(10)), None);
        assert_eq!(index.set(0, "a", &kind("2026-11-21"), t(20)), Some(t(30)));
        assert_eq!(index.len(), 2);
        assert_eq!(index.next_due(), Some(t(10)));
        let due = index.pop_due(t(25), 10);
        assert_eq!(due.iter().map(|d| d.pipeline.as_str()).collect::<Vec<_>>(), ["b", "a"]);
        assert!(index.is_empty());
        index.set(2, "c", &kind("2026-11-22"), t(5));
        assert_eq!(index.cancel(2, "c", &kind("2026-11-22")), Some(t(5)));
        assert_eq!(index.cancel(2, "c", &kind("2026-11-22")), None);
        index.set(3, "d", &kind("2026-11-23"), t(1));
        index.drop_partition(3);
        assert_eq!(index.next_due(), None);
    }
}
