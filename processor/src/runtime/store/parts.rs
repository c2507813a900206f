//! How a pipeline's state is laid out in the store, so that a decision writes (and mirrors to
//! the changelog) what it changed rather than the pipeline's whole retained history: an
//! hourly pipeline keeps a week of executions and their readings, and rewriting all of them
//! for every reading made the cost of a record grow with the history.
//!
//! Keys: the head `p/<pipeline>` holds the state without its executions, sensor readings
//! and timers; each execution is a part with the timers armed for it (they change together),
//! `p/<pipeline>\0x<execution id>`; each sensor reading `p/<pipeline>\0s<sensor slot>`; and
//! each other timer (a schedule's, or one whose execution is gone) `p/<pipeline>\0t<timer kind>`. A pipeline id never
//! contains `\0` (records naming one are refused), so one pipeline's parts never mix with
//! another's. A head written before parts holds them inline and still reads; the first write
//! after moves them to parts.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::Write;
use crate::core::execution::ExecutionId;
use crate::core::lifecycle::{HeldExecution, PendingTimer, Phase, PipelineState, SharedMap, StoredSensor};
use crate::core::timers::TimerKind;

const SEPARATOR: u8 = 0;
const EXECUTION: u8 = b'x';
const SENSOR: u8 = b's';
const TIMER: u8 = b't';

pub fn head_key(pipeline: &str) -> Vec<u8> {
    [b"p/".as_slice(), pipeline.as_bytes()].concat()
}

/// The prefix of every part of `pipeline`.
pub fn parts_prefix(pipeline: &str) -> Vec<u8> {
    let mut key = head_key(pipeline);
    key.push(SEPARATOR);
    key
}

/// The first key past every part of `pipeline`: the parts' prefix with its separator
/// raised by one.
pub fn parts_end(pipeline: &str) -> Vec<u8> {
    let mut key = head_key(pipeline);
    key.push(SEPARATOR + 1);
    key
}

fn part_key(pipeline: &str, tag: u8, id: &str) -> Vec<u8> {
    let mut key = parts_prefix(pipeline);
    key.push(tag);
    key.extend_from_slice(id.as_bytes());
    key
}

/// The pipeline whose head or part `key` is.
pub fn pipeline_of(key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(b"p/")?.split(|b| *b == SEPARATOR).next()
}

/// Whether `key` (under `p/`) is a pipeline's head, not one of its parts.
pub fn is_head(key: &[u8]) -> bool {
    key.starts_with(b"p/") && !key.contains(&SEPARATOR)
}

/// The writes that take a pipeline's stored state from `before` to `after`: the head if it
/// changed, the parts that differ, and deletes of the parts gone. `before` is `None` when the
/// store does not hold the state in parts (nothing stored, or a head from before parts): the
/// head and every part are written.
///
/// A decision touches a few executions, readings and timers of a history that can be a
/// week long, and its copy of the state shares the rest (each is a
/// [`SharedMap`](crate::core::lifecycle::SharedMap)): only what it touched is laid out and
/// compared, so the cost follows the decision, not the history.
pub fn writes(
    pipeline: &str,
    before: Option<&PipelineState>,
    after: &PipelineState,
) -> Result<Vec<Write>, serde_json::Error> {
    let mut out = Vec::new();
    let head = head(after);
    if before.is_none_or(|before| self::head(before) != head) {
        out.push((head_key(pipeline), Some(serde_json::to_vec(&head)?)));
    }
    match before {
        Some(before) => touched_writes(&mut out, pipeline, before, after)?,
        None => whole_writes(&mut out, pipeline, &PipelineState::default(), after)?,
    }
    Ok(out)
}

/// The parts that differ, laying out both states whole.
fn whole_writes(
    out: &mut Vec<Write>,
    pipeline: &str,
    before: &PipelineState,
    after: &PipelineState,
) -> Result<(), serde_json::Error> {
    let (before, after) = (layout(before), layout(after));
    let executions = before.executions.changes(&after.executions);
    put(out, pipeline, EXECUTION, executions, |id| id.to_string())?;
    let sensors = before.state.sensors.changes(&after.state.sensors);
    put(out, pipeline, SENSOR, sensors, String::clone)?;
    put(out, pipeline, TIMER, before.timers.changes(&after.timers), |kind| {
        kind.encode()
    })
}

/// The parts that differ, laying out only what the decision touched (see [`Touched`]).
fn touched_writes(
    out: &mut Vec<Write>,
    pipeline: &str,
    before: &PipelineState,
    after: &PipelineState,
) -> Result<(), serde_json::Error> {
    let touched = Touched::between(before, after);
    let executions = |state| -> SharedMap<&ExecutionId, ExecutionPart> {
        (touched.executions.iter())
            .filter_map(|id| Some((*id, execution_part(state, id)?)))
            .collect()
    };
    let (was, is) = (executions(before), executions(after));
    put(out, pipeline, EXECUTION, was.changes(&is), |id| id.to_string())?;
    put(
        out,
        pipeline,
        SENSOR,
        before.sensors.changes(&after.sensors),
        String::clone,
    )?;
    let loose = |state| -> SharedMap<&TimerKind, &PendingTimer> {
        (touched.loose.iter())
            .filter_map(|kind| Some((*kind, loose_timer(state, kind)?)))
            .collect()
    };
    let (was, is) = (loose(before), loose(after));
    put(out, pipeline, TIMER, was.changes(&is), |kind| kind.encode())
}

/// What a decision may have changed between two states of a pipeline: the executions whose
/// part may differ, and the timer kinds whose part of their own may. A superset is harmless
/// (an unchanged part compares equal and is not written); a part missing from it would be a
/// write lost, which `touched_writes_are_those_of_the_whole_layout` checks against laying
/// out both states whole.
struct Touched<'s> {
    executions: BTreeSet<&'s ExecutionId>,
    loose: BTreeSet<&'s TimerKind>,
}

impl<'s> Touched<'s> {
    fn between(before: &'s PipelineState, after: &'s PipelineState) -> Self {
        let mut executions = BTreeSet::new();
        let mut loose = BTreeSet::new();
        // Executions changed (an unchanged one is the same allocation), added or removed.
        let mut came_or_went = Vec::new();
        for (key, was, is) in before.executions.changes(&after.executions) {
            if was.is_none() || is.is_none() {
                came_or_went.push(key);
            }
            executions.insert(key);
        }
        // An execution that came or went takes its timers into its part or out of it.
        for key in came_or_went {
            for kind in before.timers.keys().chain(after.timers.keys()) {
                if armed_for(kind, key) {
                    loose.insert(kind);
                }
            }
        }
        // Timers set, moved or cancelled (a kept one is the same allocation).
        for (kind, _, _) in before.timers.changes(&after.timers) {
            loose.insert(kind);
            if let Some(id) = kind.execution() {
                if before.executions.contains_key(id) || after.executions.contains_key(id) {
                    executions.insert(id);
                }
            }
        }
        Touched { executions, loose }
    }
}

/// Whether `timer` is armed for execution `id`: [`layout`] puts it in that part.
fn armed_for(timer: &TimerKind, id: &ExecutionId) -> bool {
    timer.execution() == Some(id)
}

/// The part of execution `id` in `state`, if it has that execution: as [`layout`] makes it.
fn execution_part<'s>(state: &'s PipelineState, id: &ExecutionId) -> Option<ExecutionPart<'s>> {
    let execution = state.executions.get(id)?;
    // In kind order, as the map holds them.
    let timers: Vec<&PendingTimer> = (state.timers.values())
        .filter(|t| armed_for(&t.timer, id))
        .map(|t| &**t)
        .collect();
    Some(ExecutionPart::new(execution, timers))
}

/// The timer of `kind` in `state`, if it is a part of its own (no execution of `state` holds
/// it): as [`layout`] makes it.
fn loose_timer<'s>(state: &'s PipelineState, kind: &TimerKind) -> Option<&'s PendingTimer> {
    let timer = state.timers.get(kind)?;
    let held = (kind.execution()).is_some_and(|id| state.executions.contains_key(id));
    (!held).then_some(&**timer)
}

/// An execution's part: its phase, the execution and the timers armed for it, in kind order.
#[derive(Clone, PartialEq, Serialize)]
struct ExecutionPart<'s> {
    /// The execution's phase (also inside it), so that a read learns it without scanning the
    /// execution's JSON a second time.
    phase: &'s Phase,
    execution: &'s HeldExecution,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    timers: Vec<&'s PendingTimer>,
}

impl<'s> ExecutionPart<'s> {
    fn new(execution: &'s HeldExecution, timers: Vec<&'s PendingTimer>) -> Self {
        let phase = execution.phase();
        ExecutionPart {
            phase,
            execution,
            timers,
        }
    }
}

/// An execution's part as read: the execution is kept as its JSON, with only its phase read
/// ([`HeldExecution`]), until a decision needs it. A part written before parts recorded the
/// phase has none: it is read from the execution.
#[derive(Deserialize)]
struct StoredExecution<'a> {
    #[serde(default)]
    phase: Option<Phase>,
    #[serde(borrow)]
    execution: &'a RawValue,
    #[serde(default)]
    timers: Vec<PendingTimer>,
}

/// The parts a state is stored in, borrowed from it (its sensor readings are parts as they
/// are): its executions with their timers, and the timers that go alone.
struct Layout<'s> {
    state: &'s PipelineState,
    executions: SharedMap<&'s ExecutionId, ExecutionPart<'s>>,
    timers: SharedMap<&'s TimerKind, &'s PendingTimer>,
}

fn layout(state: &PipelineState) -> Layout<'_> {
    let mut executions: SharedMap<&ExecutionId, ExecutionPart> = (state.executions.iter())
        .map(|(id, execution)| (id, ExecutionPart::new(execution, Vec::new())))
        .collect();
    let mut timers = SharedMap::new();
    for t in state.timers.values() {
        let part = (t.timer.execution()).and_then(|id| executions.get_mut(id));
        match part {
            Some(part) => part.timers.push(&**t),
            None => {
                timers.insert(&t.timer, &**t);
            }
        }
    }
    Layout {
        state,
        executions,
        timers,
    }
}

/// Puts the entries that `changes` says `after` lacks or holds otherwise; deletes the ones
/// gone. `id` names an entry's part.
fn put<K, V: Serialize>(
    out: &mut Vec<Write>,
    pipeline: &str,
    tag: u8,
    changes: Vec<(&K, Option<&V>, Option<&V>)>,
    id: impl Fn(&K) -> String,
) -> Result<(), serde_json::Error> {
    for (key, _, value) in changes {
        let value = value.map(serde_json::to_vec).transpose()?;
        out.push((part_key(pipeline, tag, &id(key)), value));
    }
    Ok(())
}

/// Deletes of every part `stored` has.
pub fn deletes(pipeline: &str, stored: &PipelineState) -> Vec<Vec<u8>> {
    let layout = layout(stored);
    let executions = layout
        .executions
        .keys()
        .map(|id| part_key(pipeline, EXECUTION, id.as_str()));
    let sensors = stored.sensors.keys().map(|slot| part_key(pipeline, SENSOR, slot));
    let timers = layout
        .timers
        .keys()
        .map(|kind| part_key(pipeline, TIMER, &kind.encode()));
    executions.chain(sensors).chain(timers).collect()
}

/// The head: the state without its config (stored apart) and without its parts. Every field
/// is named, so a field added to the state must be given a place: the head or parts.
fn head(state: &PipelineState) -> PipelineState {
    let PipelineState {
        config: _,
        sensors: _,
        executions: _,
        timers: _,
        dependents,
        history,
        forecasts,
        unknown_sensors,
    } = state;
    // The history, the forecast marks and the unknown keys are bounded (30 runs, 48 dates,
    // 64 keys) and change at most once a run or a day: small enough for the head.
    PipelineState {
        dependents: dependents.clone(),
        history: history.clone(),
        forecasts: forecasts.clone(),
        unknown_sensors: unknown_sensors.clone(),
        ..PipelineState::default()
    }
}

/// Whether a decoded head holds no parts inline: its state is stored in parts (or has none).
pub fn in_parts(head: &PipelineState) -> bool {
    head.executions.is_empty() && head.sensors.is_empty() && head.timers.is_empty()
}

/// An execution's part, or a head, read for its timers only (the rest is skipped, not
/// built): a head's inline timers are the same list under the same name.
#[derive(Deserialize)]
struct ExecutionTimers {
    #[serde(default)]
    timers: Vec<PendingTimer>,
}

/// The timers held under the stored `key` (under `p/`): an execution part's, a timer part's,
/// or those of a head written before parts (inline). This is how the timer index is rebuilt
/// when a partition opens: the state's parts are the timers' only record.
pub fn timers_of(key: &[u8], value: &[u8]) -> Result<Vec<PendingTimer>, String> {
    let Some(rest) = key.strip_prefix(b"p/") else {
        return Ok(Vec::new());
    };
    let bad = |e: serde_json::Error| e.to_string();
    // `None`: the head, whose timers (written before parts) are inline.
    let tag = rest.iter().position(|b| *b == SEPARATOR).map(|at| rest.get(at + 1));
    match tag {
        None | Some(Some(&EXECUTION)) => Ok(serde_json::from_slice::<ExecutionTimers>(value).map_err(bad)?.timers),
        Some(Some(&TIMER)) => Ok(vec![serde_json::from_slice(value).map_err(bad)?]),
        _ => Ok(Vec::new()),
    }
}

/// Adds the part stored under `suffix` (the key after [`parts_prefix`]) to `state`; `Err`
/// says why it does not decode.
pub fn add_part(state: &mut PipelineState, suffix: &[u8], value: &[u8]) -> Result<(), String> {
    let (&tag, id) = suffix.split_first().ok_or("an empty part key")?;
    let id = std::str::from_utf8(id).map_err(|e| e.to_string())?;
    let bad = |e: serde_json::Error| format!("part {id}: {e}");
    match tag {
        EXECUTION => {
            let part: StoredExecution = serde_json::from_slice(value).map_err(bad)?;
            let execution = HeldExecution::from_stored(part.execution.get().into(), part.phase).map_err(bad)?;
            let id: ExecutionId = id.parse().map_err(|e| format!("part {id}: {e}"))?;
            state.executions.insert(id, execution);
            for timer in part.timers {
                state.arm(timer);
            }
        }
        SENSOR => {
            let sensor: StoredSensor = serde_json::from_slice(value).map_err(bad)?;
            state.sensors.insert(id.to_string(), sensor.into());
        }
        TIMER => state.arm(serde_json::from_slice::<PendingTimer>(value).map_err(bad)?),
        other => return Err(format!("a part of unknown kind {:?}", other as char)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lifecycle::{decide, Context, Decision, Effect, Execution, Input, Settings, StateChange};
    use crate::core::records::{ConfigRecord, JobRecord, JobStatus, SensorReading};
    use crate::core::replay::Engine;
    use crate::runtime::store::{PartitionStore, StoreBatch};
    use serde_json::{json, Value};
    use std::sync::Arc;

    /// An hourly pipeline with `executions` executions opened, as the decider leaves it:
    /// each with its readings and timers.
    fn hourly(executions: u32) -> PipelineState {
        history(executions, None)
    }

    /// [`hourly`], each execution's job reported `reported` (if any).
    fn history(executions: u32, reported: Option<JobStatus>) -> PipelineState {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-24T08:00:00Z")
            .unwrap()
            .to_utc();
        let mut engine = Engine::new(Settings::default(), now);
        let config = json!({
            "pipeline": {"id": "p", "owner": "team"},
            "schedule": {"timezone": "UTC",
                "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
                "evaluation": {"window": "1h", "interval": "5m"}},
            "sla": {"deadline": "23:59", "deadlineDay": "dataDate", "expectedDuration": "30m"},
            "validation": {"trigger": "ALL", "rules": [
                {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
                {"key": "rows", "check": "gte", "field": "count", "value": 1000}]},
            "job": {"type": "command", "config": {"command": "true"}}
        });
        let put = ConfigRecord::Put {
            pipeline_id: "p".into(),
            config,
        };
        let _ = engine.handle(0, "p", &Input::ConfigPublished(put), "c");
        for slot in 0..executions {
            let date = now.date_naive() - chrono::Days::new((slot / 24) as u64);
            let reading = |key: &str, data: Value| {
                let reading = SensorReading {
                    pipeline_id: "p".into(),
                    key: key.into(),
                    data: data.as_object().unwrap().clone(),
                    date: Some(date),
                    hour: Some(slot % 24),
                    ..Default::default()
                };
                Input::SensorReceived(reading)
            };
            let _ = engine.handle(0, "p", &reading("rows", json!({"count": 5000})), "s");
            let decision = engine.handle(0, "p", &reading("upstream", json!({"status": "ready"})), "s");
            let triggered = decision.unwrap().effects.into_iter().filter_map(|e| match e {
                Effect::TriggerJob(request) => Some(request),
                _ => None,
            });
            for request in triggered.filter(|_| reported.is_some()) {
                let report = JobRecord {
                    pipeline_id: "p".into(),
                    schedule_id: request.execution.schedule().into(),
                    date: request.execution.date_text().into(),
                    run_id: request.run_id,
                    status: reported.unwrap(),
                    failure_category: None,
                    message: None,
                    metadata: None,
                    timestamp: now,
                };
                let _ = engine.handle(0, "p", &Input::JobReported(report), "j").unwrap();
            }
        }
        engine.states.remove("p").unwrap()
    }

    /// A store in a fresh directory (kept while the store is used).
    fn store() -> (tempfile::TempDir, PartitionStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(dir.path(), 0).unwrap();
        (dir, store)
    }

    /// Writes what `fill` puts in one batch.
    fn write(store: &mut PartitionStore, fill: impl FnOnce(&mut StoreBatch)) {
        let mut batch = StoreBatch::default();
        fill(&mut batch);
        store.write(batch).unwrap();
    }

    /// [`hourly`] without its config, which is stored apart.
    fn bare(executions: u32) -> PipelineState {
        PipelineState {
            config: None,
            ..hourly(executions)
        }
    }

    fn bytes(writes: &[Write]) -> usize {
        writes
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum()
    }

    #[test]
    fn a_state_in_parts_reads_back_as_written_and_lists_once() {
        let (_dir, mut store) = store();
        let state = hourly(30);
        assert!(state.executions.len() == 30 && state.sensors.len() == 60 && state.timers.len() > 30);
        write(&mut store, |b| {
            b.put_pipeline("p", &state, true).unwrap();
            b.put_pipeline("p.x", &hourly(1), true).unwrap();
        });
        let stored = store.stored("p").unwrap().unwrap();
        assert!(stored.in_parts);
        assert_eq!(Arc::unwrap_or_clone(stored.state), state.clone());
        assert_eq!(store.pipelines().unwrap(), ["p", "p.x"], "parts are not pipelines");
        let head = store.raw(&head_key("p")).unwrap().unwrap();
        assert!(head.len() < 500, "the head holds no executions: {} bytes", head.len());
        // The timer index is rebuilt from the parts alone: every timer, none twice.
        let mut timers: Vec<_> = (store.timers().unwrap().into_iter())
            .filter(|t| t.pipeline == "p")
            .map(|t| (t.at, t.kind))
            .collect();
        timers.sort();
        let mut expected: Vec<_> = state.timers.values().map(|t| (t.at, t.timer.clone())).collect();
        expected.sort();
        assert_eq!(timers, expected);
    }

    /// The root cause of latency growing under constant load: every reading rewrote the
    /// pipeline's whole retained history. A reading now writes what it changed.
    #[test]
    fn what_a_reading_writes_does_not_grow_with_the_history() {
        let written = |executions: u32| {
            let before = hourly(executions);
            let mut after = before.clone();
            let slot = after.sensors.keys().next().unwrap().clone();
            after
                .sensors
                .get_mut(&slot)
                .unwrap()
                .data
                .insert("count".into(), json!(7000));
            let writes = writes("p", Some(&before), &after).unwrap();
            assert_eq!(writes.len(), 1, "the one reading changed");
            bytes(&writes)
        };
        let (few, many) = (written(2), written(168));
        assert!(
            many <= few + 64,
            "a reading writes {few} bytes with 2 executions, {many} with 168"
        );
        let whole = |executions| bytes(&writes("p", None, &hourly(executions)).unwrap());
        assert!(
            whole(168) > 50 * few,
            "the whole state is what used to be written: {}",
            whole(168)
        );
    }

    /// Issue 42: a pipeline's state read from its parts decoded every execution of its
    /// history, so a record on a pipeline that had left the store's cache cost in proportion
    /// to that history. A reading now decodes the executions it concerns, and decides as it
    /// did on the whole state.
    #[test]
    fn a_reading_decodes_only_the_executions_it_concerns_and_decides_as_on_the_whole_state() {
        let whole = history(48, Some(JobStatus::Succeeded));
        assert!(whole.executions.values().all(|e| e.phase().is_completed()));
        let dir = tempfile::tempdir().unwrap();
        let mut store = PartitionStore::open(dir.path(), 0).unwrap();
        write(&mut store, |b| b.put_pipeline("p", &whole, true).unwrap());
        drop(store);
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-25T09:00:00Z")
            .unwrap()
            .to_utc();
        let ctx = Context {
            now,
            origin: "s",
            settings: Settings::default(),
        };
        let reading = |key: &str, data: Value, day: u32, hour: u32| {
            Input::SensorReceived(SensorReading {
                pipeline_id: "p".into(),
                key: key.into(),
                data: data.as_object().unwrap().clone(),
                date: chrono::NaiveDate::from_ymd_opt(2026, 11, day),
                hour: Some(hour),
                ..Default::default()
            })
        };
        // A reading of the next hour, and a late one of an hour that ran (its data changed).
        let next = reading("upstream", json!({"status": "ready"}), 25, 9);
        let late = reading("rows", json!({"count": 7000}), 24, 3);
        for (input, concerned) in [(next, 0), (late, 1)] {
            let store = PartitionStore::open(dir.path(), 0).unwrap();
            let read = store.stored("p").unwrap().unwrap().state;
            assert!(read.executions.values().all(|e| !e.is_decoded()), "read as stored");
            let decision = decide(&read, "p", &input, ctx);
            let decoded: Vec<_> = (read.executions.iter())
                .filter(|(_, e)| e.is_decoded())
                .map(|(id, _)| id.to_string())
                .collect();
            assert_eq!(decoded.len(), concerned, "decoded for one reading: {decoded:?}");
            // Of the history's 96 readings, only the data of the concerned execution's.
            let data: Vec<&String> = (read.sensors.iter())
                .filter(|(_, s)| s.data.is_decoded())
                .map(|(slot, _)| slot)
                .collect();
            assert_eq!(data.len(), 2 * concerned, "data decoded for one reading: {data:?}");
            let expected = decide(&whole, "p", &input, ctx);
            let parts = |d: Decision| {
                let state = match d.state {
                    StateChange::Put(state) => Some(*state),
                    _ => None,
                };
                (state, d.events, d.effects, d.timers, d.records, d.dead_letter)
            };
            assert!(!decision.events.is_empty(), "{:?}", decision.notes);
            assert!(parts(decision) == parts(expected), "decides as on the whole state");
        }
    }

    /// An execution's part records its phase beside it, so a read learns the phase without a
    /// second scan of the execution; a part written before that still reads, its phase read
    /// from the execution.
    #[test]
    fn an_execution_part_reads_with_its_phase_recorded_or_not() {
        let state = history(2, Some(JobStatus::Succeeded));
        let (id, execution) = state.executions.first_key_value().unwrap();
        let part = execution_part(&state, id).unwrap();
        let timers: Vec<PendingTimer> = part.timers.iter().map(|t| (*t).clone()).collect();
        assert!(!timers.is_empty());
        let mut written: Value = serde_json::to_value(&part).unwrap();
        assert_eq!(written["phase"], written["execution"]["phase"]);
        let suffix = [&[EXECUTION], id.to_string().as_bytes()].concat();
        let read = |value: &Value| {
            let mut read = PipelineState::default();
            add_part(&mut read, &suffix, &serde_json::to_vec(value).unwrap()).unwrap();
            read
        };
        let recorded = read(&written);
        written.as_object_mut().unwrap().remove("phase");
        let older = read(&written);
        for read in [recorded, older] {
            let held = &read.executions[id];
            assert_eq!(held.phase(), execution.phase());
            assert!(!held.is_decoded());
            assert_eq!(**held, **execution);
            let read_timers: Vec<PendingTimer> = read.timers.values().map(|t| (**t).clone()).collect();
            assert_eq!(read_timers, timers, "its timers");
        }
    }

    fn execution_of(t: &PendingTimer) -> Option<ExecutionId> {
        t.timer.execution().cloned()
    }

    #[test]
    fn parts_gone_are_deleted_and_a_timer_goes_with_its_execution() {
        let before = hourly(3);
        let mut after = before.clone();
        // An execution is pruned with its timers, a reading with it.
        let (gone, _) = after.executions.pop_first().unwrap();
        after.timers.retain(|_, t| execution_of(t).as_ref() != Some(&gone));
        let slot = after.sensors.keys().next().unwrap().clone();
        after.sensors.remove(&slot);
        // Another execution's timer moves: that execution's part is written again.
        let held = |k: &&TimerKind| k.execution().is_some_and(|e| after.executions.contains_key(e));
        let kind = after.timers.keys().find(held).unwrap().clone();
        after.timers.get_mut(&kind).unwrap().at += chrono::TimeDelta::minutes(5);
        let moved = execution_of(&after.timers[&kind]).unwrap();
        let writes = writes("p", Some(&before), &after).unwrap();
        let find = |writes: &[Write], tag: u8, id: &str| {
            (writes.iter())
                .find(|(k, _)| *k == part_key("p", tag, id))
                .map(|(_, v)| v.is_some())
        };
        assert_eq!(find(&writes, EXECUTION, gone.as_str()), Some(false));
        assert_eq!(find(&writes, SENSOR, &slot), Some(false));
        assert_eq!(find(&writes, EXECUTION, moved.as_str()), Some(true));
        assert_eq!(writes.len(), 3, "the three changes, the head as it was: {writes:?}");
        // A timer whose execution is gone is a part of its own until it goes too.
        let mut orphaned = after.clone();
        orphaned.executions.remove(&moved);
        let writes = self::writes("p", Some(&after), &orphaned).unwrap();
        let alone: Vec<&PendingTimer> = (orphaned.timers.values())
            .filter(|t| execution_of(t) == Some(moved.clone()))
            .map(|t| &**t)
            .collect();
        assert!(!alone.is_empty());
        for t in &alone {
            assert_eq!(find(&writes, TIMER, &t.timer.encode()), Some(true));
        }
        assert_eq!(writes.len(), 1 + alone.len());
        let mut batch_state = PipelineState::default();
        for (key, value) in writes.iter().filter(|(k, _)| k[0..4] == *b"p/p\0") {
            if let Some(value) = value {
                add_part(&mut batch_state, &key[4..], value).unwrap();
            }
        }
        assert_eq!(batch_state.timers.len(), alone.len(), "a lone timer reads back");
        let lone = (orphaned.timers.values())
            .filter(|t| execution_of(t).is_none_or(|e| !orphaned.executions.contains_key(&e)))
            .count();
        assert!(lone >= alone.len());
        let parts = orphaned.executions.len() + orphaned.sensors.len() + lone;
        assert_eq!(deletes("p", &orphaned).len(), parts, "every part, no more");
        // A changed head is written.
        let mut linked = after.clone();
        linked.dependents.insert("downstream".into(), "upstream-ready".into());
        let writes = self::writes("p", Some(&after), &linked).unwrap();
        assert_eq!(
            writes,
            [(head_key("p"), Some(serde_json::to_vec(&head(&linked)).unwrap()))]
        );
    }

    /// A state written whole by an earlier version reads, and its next write moves every part
    /// out of the head (a write of only the changes would lose the rest).
    #[test]
    fn a_state_written_whole_reads_and_moves_to_parts() {
        let (_dir, mut store) = store();
        let whole = bare(5);
        write(&mut store, |b| {
            b.mirror(&head_key("p"), Some(&serde_json::to_vec(&whole).unwrap()))
        });
        let stored = store.stored("p").unwrap().unwrap();
        assert!(!stored.in_parts);
        assert_eq!(*stored.state, whole);
        assert!(!whole.timers.is_empty());
        let inline = store.timers().unwrap().len();
        assert_eq!(inline, whole.timers.len(), "the timers a head holds inline count");
        let next = stored.state.clone();
        write(&mut store, |b| {
            b.put_state(writes("p", None, &next).unwrap(), None).unwrap()
        });
        let stored = store.stored("p").unwrap().unwrap();
        assert!(stored.in_parts);
        assert_eq!(Arc::unwrap_or_clone(stored.state), whole);
        assert_eq!(store.timers().unwrap().len(), inline, "moved to parts, not doubled");
        write(&mut store, |b| b.delete_pipeline("p", &next));
        assert!(store.stored("p").unwrap().is_none());
        assert!(store.pipelines().unwrap().is_empty());
        let left = store.db.iterator(rocksdb::IteratorMode::Start).count();
        assert_eq!(left, 0, "no part outlives its pipeline");
    }

    #[test]
    fn a_part_that_does_not_decode_says_which() {
        let mut state = PipelineState::default();
        let e = add_part(&mut state, b"x2026-11-24", b"{").unwrap_err();
        assert!(e.contains("2026-11-24"), "{e}");
        assert!(add_part(&mut state, b"q", b"{}").unwrap_err().contains("unknown kind"));
    }

    /// The store's cache of decoded states answers reads until a write touches the pipeline
    /// (a batch's, a restore's or a reset's), or the store is cleared for a full restore.
    #[test]
    fn the_cache_of_decoded_states_follows_every_write() {
        let (_dir, mut store) = store();
        let state = bare(2);
        write(&mut store, |b| {
            b.put_pipeline("p", &state, false).unwrap();
            b.put_pipeline("q", &state, false).unwrap();
        });
        assert_eq!(store.pipeline("p").unwrap().unwrap(), state.clone());
        // What the caller says it wrote is what reads return, without decoding.
        let mut told = state.clone();
        told.dependents.insert("d".into(), "k".into());
        store.remember("p", told.clone().into());
        assert_eq!(store.pipeline("p").unwrap().unwrap(), told);
        // A write of one of its parts (a restore's) is read from disk again.
        let (slot, reading) = state.sensors.iter().next().unwrap();
        let value = serde_json::to_vec(reading).unwrap();
        write(&mut store, |b| b.mirror(&part_key("p", SENSOR, slot), Some(&value)));
        assert_eq!(store.pipeline("p").unwrap().unwrap(), state.clone());
        // Another pipeline's writes leave it cached; a clear forgets everything.
        store.remember("p", told.clone().into());
        write(&mut store, |b| b.delete_pipeline("q", &state));
        assert_eq!(store.pipeline("p").unwrap().unwrap(), told);
        assert!(store.pipeline("q").unwrap().is_none());
        store.clear().unwrap();
        assert!(store.pipeline("p").unwrap().is_none());
    }

    /// Random states as the decider leaves them: executions of a few (schedule, date)s,
    /// timers armed for them, for dates without an execution, or for none, and readings.
    mod random {
        use super::*;
        use proptest::prelude::*;

        const DATES: [&str; 4] = ["2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23T05"];

        fn kind(pick: u8, date: usize) -> TimerKind {
            let execution = crate::core::execution::id("stream", DATES[date]);
            match pick % 4 {
                0 => TimerKind::SlaBreach { execution },
                1 => TimerKind::Expire { execution },
                2 => TimerKind::Evaluate { execution },
                _ => TimerKind::CronTick,
            }
        }

        fn at(minute: u8) -> chrono::DateTime<chrono::Utc> {
            chrono::DateTime::UNIX_EPOCH + chrono::TimeDelta::minutes(minute.into())
        }

        /// One change a decision makes: (what, which date, a value).
        type Change = (u8, usize, u8);

        fn apply(state: &mut PipelineState, (what, date, value): Change) {
            let key = crate::core::execution::id("stream", DATES[date]);
            match what % 7 {
                0 => {
                    let e = Execution::new(key.clone(), at(value), chrono::TimeDelta::hours(1));
                    state.executions.insert(key, e.into());
                }
                1 => {
                    state.executions.remove(&key);
                }
                2 => {
                    if let Some(e) = state.executions.get_mut(&key) {
                        e.attempt = value.into();
                    }
                }
                3 => {
                    state.arm(PendingTimer {
                        timer: kind(value, date),
                        at: at(value),
                    });
                }
                4 => {
                    state.timers.remove(&kind(value, date));
                }
                5 => {
                    let sensor = StoredSensor {
                        data: json!({"count": value}).as_object().unwrap().clone().into(),
                        received_at: at(value),
                        date: None,
                        hour: None,
                        ..Default::default()
                    };
                    state.sensors.insert(format!("rows@{}", DATES[date]), sensor.into());
                }
                _ => {
                    state.sensors.remove(&format!("rows@{}", DATES[date]));
                }
            }
        }

        fn changes() -> impl Strategy<Value = Vec<Change>> {
            prop::collection::vec((any::<u8>(), 0..DATES.len(), any::<u8>()), 0..24)
        }

        fn sorted(mut writes: Vec<Write>) -> Vec<Write> {
            writes.sort();
            writes
        }

        proptest! {
            /// What a decision writes, from what it touched, is what laying out both states
            /// whole says differs: no write is lost to the shortcut, none added.
            #[test]
            fn touched_writes_are_those_of_the_whole_layout(history in changes(), decision in changes(), unshared in any::<bool>()) {
                let mut before = PipelineState::default();
                for change in history {
                    apply(&mut before, change);
                }
                // A decision's copy shares what it does not touch; a state decoded from the
                // store shares nothing.
                let mut after = match unshared {
                    true => serde_json::from_value(serde_json::to_value(&before).unwrap()).unwrap(),
                    false => before.clone(),
                };
                for change in decision {
                    apply(&mut after, change);
                }
                let (mut touched, mut whole) = (Vec::new(), Vec::new());
                touched_writes(&mut touched, "p", &before, &after).unwrap();
                whole_writes(&mut whole, "p", &before, &after).unwrap();
                prop_assert_eq!(sorted(touched), sorted(whole));
            }
        }
    }
}
