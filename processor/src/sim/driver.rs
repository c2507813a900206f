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
use crate::core::lifecycle::Effect;
use crate::core::output::Output;
use crate::core::task::{Learned, Opening, Staged, Store, Task, TaskError};
use crate::core::timers::TimerKind;

/// What a batch left once written.
#[derive(Default)]
pub struct Flushed {
    /// The effects to start, with their partitions.
    pub effects: Vec<(i32, Effect)>,
    /// Runs ended in the batch.
    pub ended_runs: Vec<RunId>,
    /// What the read models learn.
    pub learned: Learned,
    /// The input offsets committed: (topic, partition) → the last applied.
    pub commits: Vec<((String, i32), i64)>,
}

/// Opens partition `p` for `task` on `store`: its fence on the changelog in `log`, then
/// the partition installed (no journaled triggers, the timers the store holds).
pub fn open<S: Store>(
    task: &mut Task<S>,
    p: i32,
    store: S,
    timers: Vec<(String, TimerKind, DateTime<Utc>)>,
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
