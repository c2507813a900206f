//! Timers as plain data. The core asks for them; the runtime stores them durably with the
//! partition's state and hands them back as [`super::Input::TimerFired`] when due.
//!
//! A timer may fire late or twice: handling a timer whose purpose has passed changes nothing.
//! Every timer a pipeline has pending is also listed in its state, so deleting a pipeline or
//! changing its config can cancel exactly what it armed.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use chrono::{DateTime, Utc};
use std::borrow::Cow;

use serde::{de, Deserialize, Deserializer, Serialize};

use super::execution::{fields, ExecutionDate, ExecutionId, RunId};
use super::partitioning::PartitionId;
use crate::core::ids::PipelineId;

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
        run_id: RunId,
    },
    /// The next status check of a running job (every `job.pollInterval`).
    #[serde(rename_all = "camelCase")]
    JobStatusCheck {
        #[serde(flatten, with = "fields")]
        execution: ExecutionId,
        run_id: RunId,
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
    /// A pipeline without a config forgets its readings older than the retention, and its
    /// state once nothing is left of it (bounded state for ids nobody configures).
    Forget,
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
            TimerKind::CronTick
            | TimerKind::StartCheck { .. }
            | TimerKind::TriggerDeadline { .. }
            | TimerKind::Forget => None,
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
                run_id: field(&f.run_id, "runId")?.into(),
            },
            "jobStatusCheck" => TimerKind::JobStatusCheck {
                execution: execution()?,
                run_id: field(&f.run_id, "runId")?.into(),
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
            "forget" => TimerKind::Forget,
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
    "forget",
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
    pub partition: PartitionId,
    pub pipeline: PipelineId,
    pub kind: TimerKind,
}

/// A pipeline's pending timers, ordered by (due, kind): the first is the next to fire.
type PipelineTimers = Vec<(DateTime<Utc>, TimerKind)>;

/// Up to this many, a pipeline's list of timers is allocated for exactly what it holds.
const EXACT_UP_TO: usize = 8;

/// The pending timers across partitions: what the runtime's partition stores hold, or what a
/// replay has armed. They fire in (due, partition, pipeline, kind) order, so timers due at
/// the same moment always fire in the same order.
///
/// An instance may hold millions of timers, so they are kept by pipeline: each pipeline's
/// name once, its timers in a short list earliest first, and only its earliest in the order
/// of what fires next. One entry per timer in two maps, each naming its pipeline and kind,
/// cost about 325 bytes a timer (heaptrack: 97 MB of 342 with 100,000 pipelines); this about
/// half.
#[derive(Default)]
pub struct TimerIndex {
    /// By partition, then pipeline: its pending timers.
    partitions: HashMap<PartitionId, HashMap<PipelineId, PipelineTimers>>,
    /// Each pipeline's earliest timer: when it is due, and whose.
    next: BTreeSet<(DateTime<Utc>, PartitionId, PipelineId)>,
    len: usize,
}

impl TimerIndex {
    /// Sets a timer; returns the due time it replaced, if any.
    pub fn set(
        &mut self,
        partition: PartitionId,
        pipeline: &str,
        kind: &TimerKind,
        at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let pipelines = self.partitions.entry(partition).or_default();
        let name = match pipelines.get_key_value(pipeline) {
            Some((name, _)) => name.clone(),
            None => {
                let name = PipelineId::from(pipeline);
                pipelines.insert(name.clone(), Vec::new());
                name
            }
        };
        let timers = pipelines.get_mut(pipeline).expect("inserted above");
        let earliest = timers.first().map(|(at, _)| *at);
        let previous = (timers.iter().position(|(_, k)| k == kind)).map(|i| timers.remove(i).0);
        let i = timers.partition_point(|(a, k)| (a, k) < (&at, kind));
        if timers.len() == timers.capacity() && timers.len() < EXACT_UP_TO {
            // Most pipelines have one to three timers: room for four each was a quarter
            // to three quarters unused.
            timers.reserve_exact(1);
        }
        timers.insert(i, (at, kind.clone()));
        let now_earliest = timers.first().map(|(at, _)| *at);
        self.len += usize::from(previous.is_none());
        self.moved(partition, name, earliest, now_earliest);
        previous
    }

    /// Applies a decision's timer operations for `pipeline`: the index follows the timers
    /// its state now holds.
    pub fn apply(&mut self, partition: PartitionId, pipeline: &str, ops: &[TimerOp]) {
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
    pub fn cancel(&mut self, partition: PartitionId, pipeline: &str, kind: &TimerKind) -> Option<DateTime<Utc>> {
        let pipelines = self.partitions.get_mut(&partition)?;
        let (name, timers) = pipelines.get_key_value(pipeline)?;
        let (name, i) = (name.clone(), timers.iter().position(|(_, k)| k == kind)?);
        let timers = pipelines.get_mut(pipeline).expect("found above");
        let earliest = timers.first().map(|(at, _)| *at);
        let (at, _) = timers.remove(i);
        let now_earliest = timers.first().map(|(at, _)| *at);
        if timers.is_empty() {
            pipelines.remove(pipeline);
        }
        self.len -= 1;
        self.moved(partition, name, earliest, now_earliest);
        Some(at)
    }

    /// A pipeline's earliest timer moved from `was` to `is`: so does its place in `next`.
    fn moved(
        &mut self,
        partition: PartitionId,
        name: PipelineId,
        was: Option<DateTime<Utc>>,
        is: Option<DateTime<Utc>>,
    ) {
        if was == is {
            return;
        }
        if let Some(was) = was {
            self.next.remove(&(was, partition, name.clone()));
        }
        if let Some(is) = is {
            self.next.insert((is, partition, name));
        }
    }

    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.next.first().map(|(at, ..)| *at)
    }

    /// Every pending timer, earliest first.
    pub fn iter(&self) -> impl Iterator<Item = DueTimer> + '_ {
        let mut all: Vec<DueTimer> = (self.partitions.iter())
            .flat_map(|(p, pipelines)| {
                pipelines.iter().flat_map(move |(name, timers)| {
                    timers.iter().map(move |(at, kind)| DueTimer {
                        at: *at,
                        partition: *p,
                        pipeline: name.clone(),
                        kind: kind.clone(),
                    })
                })
            })
            .collect();
        all.sort_unstable();
        all.into_iter()
    }

    /// Removes and returns every timer due at or before `now`, earliest first, at most
    /// `limit`.
    pub fn pop_due(&mut self, now: DateTime<Utc>, limit: usize) -> Vec<DueTimer> {
        let mut due = Vec::new();
        while due.len() < limit {
            match self.next.first() {
                Some((at, ..)) if *at <= now => {
                    let (at, partition, name) = self.next.pop_first().expect("first exists");
                    let pipelines = self.partitions.get_mut(&partition).expect("indexed");
                    let timers = pipelines.get_mut(&*name).expect("indexed");
                    let (_, kind) = timers.remove(0);
                    match timers.first() {
                        Some((next, _)) => {
                            self.next.insert((*next, partition, name.clone()));
                        }
                        None => {
                            pipelines.remove(&*name);
                        }
                    }
                    self.len -= 1;
                    due.push(DueTimer {
                        at,
                        partition,
                        pipeline: name,
                        kind,
                    });
                }
                _ => break,
            }
        }
        due
    }

    /// Forgets the timers of a partition this instance no longer owns.
    pub fn drop_partition(&mut self, partition: PartitionId) {
        if let Some(pipelines) = self.partitions.remove(&partition) {
            self.len -= pipelines.values().map(Vec::len).sum::<usize>();
            self.next.retain(|(_, p, _)| *p != partition);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
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
    use std::collections::BTreeMap;

    use proptest::prelude::*;

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
            TimerKind::Forget => 18,
        }
    }

    fn one_of_each() -> Vec<TimerKind> {
        let execution = id("a/b", "2026-03-08T05");
        let date = execution.date();
        let run_id = RunId::from("r-1");
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
            TimerKind::Forget,
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

    #[derive(Debug, Clone)]
    enum Op {
        Set(PartitionId, u8, u8, i64),
        Cancel(PartitionId, u8, u8),
        Pop(i64, usize),
        Drop(PartitionId),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            4 => (0..3i32, 0..4u8, 0..4u8, 0..20i64).prop_map(|(p, n, k, at)| Op::Set(PartitionId::new(p), n, k, at)),
            2 => (0..3i32, 0..4u8, 0..4u8).prop_map(|(p, n, k)| Op::Cancel(PartitionId::new(p), n, k)),
            1 => (0..20i64, 1..4usize).prop_map(|(now, limit)| Op::Pop(now, limit)),
            1 => (0..3i32).prop_map(|p| Op::Drop(PartitionId::new(p))),
        ];
        proptest::collection::vec(op, 0..80)
    }

    proptest! {
        /// The index answers as a map of every timer by its name, fired in (due, partition,
        /// pipeline, kind) order, does: the order timers fire in is part of a replay's output.
        #[test]
        fn the_index_fires_in_the_order_a_map_of_every_timer_would(ops in ops()) {
            let t = |s| DateTime::from_timestamp(s, 0).unwrap();
            let kind = |k: u8| self::kind(&format!("2026-11-2{k}"));
            let name = |n: u8| format!("p{n}");
            let mut index = TimerIndex::default();
            let mut model: BTreeMap<(PartitionId, String, TimerKind), DateTime<Utc>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(p, n, k, at) => prop_assert_eq!(
                        index.set(p, &name(n), &kind(k), t(at)),
                        model.insert((p, name(n), kind(k)), t(at))
                    ),
                    Op::Cancel(p, n, k) => prop_assert_eq!(
                        index.cancel(p, &name(n), &kind(k)),
                        model.remove(&(p, name(n), kind(k)))
                    ),
                    Op::Pop(now, limit) => {
                        let mut due: Vec<DueTimer> = (model.iter())
                            .filter(|(_, at)| **at <= t(now))
                            .map(|((p, n, k), at)| DueTimer { at: *at, partition: *p, pipeline: n.as_str().into(), kind: k.clone() })
                            .collect();
                        due.sort();
                        due.truncate(limit);
                        for d in &due {
                            model.remove(&(d.partition, d.pipeline.to_string(), d.kind.clone()));
                        }
                        prop_assert_eq!(index.pop_due(t(now), limit), due);
                    }
                    Op::Drop(p) => {
                        index.drop_partition(p);
                        model.retain(|(q, ..), _| *q != p);
                    }
                }
                prop_assert_eq!(index.len(), model.len());
                prop_assert_eq!(index.next_due(), model.values().min().copied());
                let mut all: Vec<DueTimer> = (model.iter())
                    .map(|((p, n, k), at)| DueTimer { at: *at, partition: *p, pipeline: n.as_str().into(), kind: k.clone() })
                    .collect();
                all.sort();
                prop_assert_eq!(index.iter().collect::<Vec<_>>(), all);
            }
        }
    }

    #[test]
    fn setting_again_moves_and_cancel_removes() {
        let t = |s| DateTime::from_timestamp(s, 0).unwrap();
        let p = PartitionId::new;
        let mut index = TimerIndex::default();
        assert_eq!(index.set(p(0), "a", &kind("2026-11-21"), t(30)), None);
        assert_eq!(index.set(p(1), "b", &kind("2026-11-21"), t(10)), None);
        assert_eq!(index.set(p(0), "a", &kind("2026-11-21"), t(20)), Some(t(30)));
        assert_eq!(index.len(), 2);
        assert_eq!(index.next_due(), Some(t(10)));
        let due = index.pop_due(t(25), 10);
        assert_eq!(due.iter().map(|d| d.pipeline.as_str()).collect::<Vec<_>>(), ["b", "a"]);
        assert!(index.is_empty());
        index.set(p(2), "c", &kind("2026-11-22"), t(5));
        assert_eq!(index.cancel(p(2), "c", &kind("2026-11-22")), Some(t(5)));
        assert_eq!(index.cancel(p(2), "c", &kind("2026-11-22")), None);
        index.set(p(3), "d", &kind("2026-11-23"), t(1));
        index.drop_partition(p(3));
        assert_eq!(index.next_due(), None);
    }
}
