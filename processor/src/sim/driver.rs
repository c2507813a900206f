//! A broker-free driver of the partition task: the real [`Task`] writing its batches to an
//! in-memory [`Log`], every step of their [`Flush`](crate::core::batch::Flush) answered at
//! once and in order (one owner, no faults). The steady bench measures the processor's
//! per-record path through it; behaviour tests run in milliseconds on it. The simulator
//! drives the same steps with faults between them.

use chrono::{DateTime, Utc};

use super::log::Log;
use crate::core::batch::Action;
use crate::core::changelog::{Writer, FENCE_PREFIX};
use crate::core::execution::RunId;
use crate::core::ids::PipelineId;
use crate::core::lifecycle::{Effect, Input};
use crate::core::output::Output;
use crate::core::partitioning::PartitionId;
use crate::core::task::{Learned, Opening, Staged, Store, Task, TaskError};
use crate::core::timers::TimerKind;

/// What a batch left once written.
#[derive(Default)]
pub struct Flushed {
    /// The effects to start, with their partitions.
    pub effects: Vec<(PartitionId, Effect)>,
    /// Runs ended in the batch.
    pub ended_runs: Vec<RunId>,
    /// What the read models learn.
    pub learned: Learned,
    /// The input offsets committed: (topic, partition) → the last applied.
    pub commits: Vec<((String, PartitionId), i64)>,
}

/// One owner of partition 0 over an in-memory log: inputs decided into the batch in hand,
/// timers fired when due, the batch written out by [`flush`]. What the steady bench and
/// broker-free behaviour tests drive; the world around it (targets that answer, readings
/// that arrive) is theirs.
pub struct Driver<S: Store> {
    pub task: Task<S>,
    pub log: Log,
    staged: Staged,
}

impl<S: Store> Driver<S> {
    /// `task` owning partition 0 of `log`, on `store`.
    pub fn open(mut task: Task<S>, store: S, mut log: Log, now: DateTime<Utc>) -> Result<Self, TaskError> {
        open(&mut task, PartitionId::new(0), store, Vec::new(), &mut log, now)?;
        Ok(Driver {
            task,
            log,
            staged: Staged::default(),
        })
    }

    /// Decides `input` of `pipeline` into the batch in hand, as the processor does.
    pub fn handle(
        &mut self,
        pipeline: &PipelineId,
        input: &Input,
        origin: &str,
        now: DateTime<Utc>,
    ) -> Result<(), TaskError> {
        self.task.decide(
            &mut self.staged,
            PartitionId::new(0),
            pipeline,
            input,
            origin,
            now,
            None,
        )
    }

    /// When the next timer is due.
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.task.next_due()
    }

    /// Fires the timers due by `now` into the batch in hand; how many fired.
    pub fn fire_due(&mut self, now: DateTime<Utc>) -> Result<u64, TaskError> {
        let before = self.staged.tallies().timers_late.len();
        self.task.stage_due_timers(&mut self.staged, now)?;
        Ok((self.staged.tallies().timers_late.len() - before) as u64)
    }

    /// Writes the batch in hand out (see [`flush`]).
    pub fn write(&mut self, now: DateTime<Utc>) -> Result<Flushed, TaskError> {
        let staged = std::mem::take(&mut self.staged);
        flush(&mut self.task, staged, &mut self.log, now)
    }
}

/// Opens partition `p` for `task` on `store`: its fence on the changelog in `log`, then
/// the partition installed (no journaled triggers, the timers the store holds).
pub fn open<S: Store>(
    task: &mut Task<S>,
    p: PartitionId,
    store: S,
    timers: Vec<(PipelineId, TimerKind, DateTime<Utc>)>,
    log: &mut Log,
    now: DateTime<Utc>,
) -> Result<(), TaskError> {
    task.assigned(p)?;
    let fence = Output {
        topic: task.settings().changelog.clone(),
        partition: Some(p),
        key: Some(
            [
                FENCE_PREFIX,
                format!("driver/{p}/{}", log.end(&task.settings().changelog, p)).as_bytes(),
            ]
            .concat(),
        ),
        value: Some(b"fence".to_vec()),
        headers: Vec::new(),
    };
    let (_, at) = log.append(&fence);
    let opening = Opening {
        store,
        writer: Writer::fenced_at(at),
        journaled: Vec::new(),
        jobs_end: 0,
        timers,
    };
    task.install(p, opening, now);
    Ok(())
}

/// Writes `staged` out to `log` as the processor writes it to a broker: outputs, end
/// markers, stores, offsets, effects.
pub fn flush<S: Store>(
    task: &mut Task<S>,
    staged: Staged,
    log: &mut Log,
    now: DateTime<Utc>,
) -> Result<Flushed, TaskError> {
    let mut sealed = task.seal(staged)?;
    let mut flushed = Flushed::default();
    let first = sealed.first_changelog;
    loop {
        match sealed.flush.poll() {
            Action::Produce => {
                let landed: Vec<_> = sealed.outputs.iter().map(|o| log.append(o)).collect();
                sealed.flush.on_produced(&landed[first..], false, &mut task.writers());
            }
            Action::ReadChangelog { partition, ranges } => {
                let topic = task.settings().changelog.clone();
                let entries: Vec<_> = (ranges.into_iter())
                    .flat_map(|r| log.entries(&topic, partition, r))
                    .collect();
                sealed.flush.on_read(Some(&entries), &mut task.writers());
            }
            Action::ReadEnd { partition } => {
                let end = log.end(&task.settings().changelog, partition);
                sealed.flush.on_end(Some(end), &mut task.writers());
            }
            Action::ProduceMarkers(markers) => {
                let landed: Vec<_> = (task.marker_outputs(&markers).iter()).map(|o| log.append(o)).collect();
                sealed.flush.on_markers(&landed, false, &mut task.writers());
            }
            Action::ReadFenceOffsets => sealed.flush.on_fence_offsets(),
            Action::Transact => {
                let landed: Vec<_> = sealed.outputs.iter().map(|o| log.append(o)).collect();
                let markers = task.marker_outputs(&sealed.flush.markers(&landed[first..]));
                let landed: Vec<_> = markers.iter().map(|o| log.append(o)).collect();
                sealed.flush.on_transacted(&landed, false);
            }
            Action::WriteStores(counted) => {
                flushed.learned = task.write_stores(&mut sealed, &counted, now)?;
                sealed.flush.on_stored(false, &mut task.writers());
            }
            Action::CommitOffsets => {
                flushed.commits = std::mem::take(&mut sealed.commits).into_iter().collect();
                sealed.flush.on_committed();
            }
            Action::StartEffects => {
                flushed.effects = std::mem::take(&mut sealed.effects);
                flushed.ended_runs = std::mem::take(&mut sealed.ended_runs);
                sealed.flush.on_started();
            }
            Action::GiveUp(fenced) => return Err(task.give_up(fenced.into_iter().collect())),
            Action::ChangelogWentBack { partition } => return Err(task.changelog_went_back(partition)),
            Action::Abandon | Action::Done => return Ok(flushed),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use serde_json::json;

    use super::*;
    use crate::core::changelog::Restore;
    use crate::core::events::{Event, EventType};
    use crate::core::lifecycle::Settings as DeciderSettings;
    use crate::core::records::{decode_config, decode_job, decode_sensor};
    use crate::core::task::{self, ReleaseKeys};
    use crate::runtime::codec::Codec;
    use crate::runtime::outputs::Encoder;
    use crate::runtime::topics::Topics;
    use crate::sim::store::{Disk, MemoryStore};

    const P0: PartitionId = PartitionId::new(0);

    struct NoKeys;

    impl ReleaseKeys for NoKeys {
        fn next_key(&mut self) -> Option<String> {
            None
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    fn driver(topics: &Topics, disk: &Rc<RefCell<Disk>>) -> Driver<MemoryStore> {
        let decider = DeciderSettings::default();
        let encoder = Encoder {
            codec: Codec::json(),
            topics: topics.clone(),
            limits: decider.limits,
        };
        let settings = task::Settings {
            decider,
            partitions: 1,
            batch_size: 50,
            forward_misrouted: true,
            changelog: topics.changelog.clone(),
            dlq: topics.dlq.clone(),
            sensors: topics.sensors.clone(),
            exactly_once: false,
        };
        let task = Task::new(settings, Box::new(encoder), Box::new(NoKeys));
        let store = MemoryStore::new(disk.clone());
        Driver::open(task, store, Log::new(1), at("2026-11-28T08:00:00Z")).unwrap()
    }

    fn kinds(log: &Log, topic: &str) -> Vec<EventType> {
        (log.read(topic, P0, 0..log.end(topic, P0)))
            .map(|l| {
                serde_json::from_slice::<Event>(l.value.as_deref().unwrap())
                    .unwrap()
                    .kind
            })
            .collect()
    }

    /// A pipeline's day through the processor's own task, with no broker: its config, a
    /// reading that holds the trigger back, the one that lets it go, the job's report; the
    /// events land on the log, the trigger is asked for once, and the store is what the
    /// changelog restores.
    #[test]
    fn a_pipelines_day_runs_through_the_real_task_without_a_broker() {
        use EventType::*;
        let topics = Topics::new("t.");
        let disk = Rc::new(RefCell::new(Disk::default()));
        let mut d = driver(&topics, &disk);
        let config = json!({
            "pipeline": {"id": "gold", "owner": "data"},
            "schedule": {"timezone": "UTC", "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"}},
            "validation": {"trigger": "ALL", "rules": [{"key": "rows", "check": "gte", "field": "count", "value": 100}]},
            "job": {"type": "http", "config": {"url": "http://target/run", "awaitReport": true}}
        });
        let bytes = serde_json::to_vec(&config).unwrap();
        let config = decode_config(Some(b"gold"), Some(&bytes)).unwrap();
        let now = at("2026-11-28T08:00:00Z");
        d.handle(&"gold".into(), &Input::ConfigPublished(config), "config/0@0", now)
            .unwrap();
        let reading = |key: &str, data: serde_json::Value| {
            let value = json!({"pipelineId": "gold", "key": key, "date": "2026-11-28", "data": data});
            let reading = decode_sensor(Some(b"gold"), Some(&serde_json::to_vec(&value).unwrap())).unwrap();
            Input::SensorReceived(reading)
        };
        d.handle(
            &"gold".into(),
            &reading("rows", json!({"count": 5})),
            "sensors/0@0",
            now,
        )
        .unwrap();
        d.handle(
            &"gold".into(),
            &reading("upstream", json!({"status": "ready"})),
            "sensors/0@1",
            now,
        )
        .unwrap();
        assert!(d.write(now).unwrap().effects.is_empty(), "5 rows hold it back");
        let later = now + chrono::TimeDelta::minutes(5);
        d.handle(
            &"gold".into(),
            &reading("rows", json!({"count": 500})),
            "sensors/0@2",
            later,
        )
        .unwrap();
        let flushed = d.write(later).unwrap();
        let [(P0, Effect::TriggerJob(request))] = &flushed.effects[..] else {
            panic!("one trigger: {:?}", flushed.effects);
        };
        assert_eq!(request.run_id, "gold.stream.2026-11-28.1");
        let report = json!({"pipelineId": "gold", "scheduleId": "stream", "date": "2026-11-28",
                            "runId": request.run_id, "status": "succeeded", "timestamp": later.to_rfc3339()});
        let report = decode_job(Some(b"gold"), Some(&serde_json::to_vec(&report).unwrap())).unwrap();
        d.handle(&"gold".into(), &Input::JobReported(report), "jobs/0@0", later)
            .unwrap();
        let ended = d.write(later).unwrap();
        assert!(ended.effects.is_empty(), "{:?}", ended.effects);
        assert_eq!(
            ended.ended_runs,
            std::slice::from_ref(&request.run_id),
            "the executor is told the run ended"
        );
        let events = kinds(&d.log, &topics.events);
        assert_eq!(events.first(), Some(&CONFIG_ACCEPTED), "{events:?}");
        let at_most_once = |kind| events.iter().filter(|k| **k == kind).count();
        assert_eq!(
            (at_most_once(JOB_TRIGGERED), at_most_once(JOB_COMPLETED)),
            (1, 1),
            "{events:?}"
        );
        let triggered = events.iter().position(|k| *k == JOB_TRIGGERED);
        assert!(
            triggered < events.iter().position(|k| *k == JOB_COMPLETED),
            "{events:?}"
        );
        // The store is what a restore of the changelog gives.
        let topic = &topics.changelog;
        let mut restore = Restore::full();
        let mut restored = Disk::default();
        for entry in d.log.entries(topic, P0, 0..d.log.end(topic, P0)) {
            for (k, v) in restore.push(entry).unwrap() {
                restored.apply(k, v);
            }
        }
        assert_eq!(restored.kv, disk.borrow().kv);
        assert!(
            disk.borrow().kv.keys().any(|k| k.starts_with(b"p/gold")),
            "the pipeline's state is stored"
        );
    }
}
