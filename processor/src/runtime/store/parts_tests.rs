//! The layout of a pipeline's state in parts ([`crate::core::state::parts`]), tested
//! through the RocksDB store that holds it.

use crate::core::execution::ExecutionId;
use crate::core::lifecycle::{decide, Context, Decision, Effect, Execution, Input, Settings, StateChange};
use crate::core::lifecycle::{Needs, PendingTimer, PipelineState, Span, Spans, StoredSensor};
use crate::core::partitioning::PartitionId;
use crate::core::records::{ConfigRecord, JobRecord, JobStatus, SensorReading};
use crate::core::replay::Engine;
use crate::core::state::parts::*;
use crate::core::state::Write;
use crate::core::timers::TimerKind;
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
    let _ = engine.handle(PartitionId::new(0), &"p".into(), &Input::ConfigPublished(put), "c");
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
        let _ = engine.handle(
            PartitionId::new(0),
            &"p".into(),
            &reading("rows", json!({"count": 5000})),
            "s",
        );
        let decision = engine.handle(
            PartitionId::new(0),
            &"p".into(),
            &reading("upstream", json!({"status": "ready"})),
            "s",
        );
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
            let _ = engine
                .handle(
                    PartitionId::new(0),
                    &"p".into(),
                    &Input::JobReported(report.parse().unwrap()),
                    "j",
                )
                .unwrap();
        }
    }
    engine.states.remove("p").unwrap()
}

/// A store in a fresh directory (kept while the store is used).
fn store() -> (tempfile::TempDir, PartitionStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
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
    let stored = store.stored(&"p".into(), &Needs::Whole).unwrap().unwrap();
    assert!(stored.in_parts);
    assert_eq!(Arc::unwrap_or_clone(stored.state), state.clone());
    assert_eq!(store.pipelines().unwrap(), ["p", "p.x"], "parts are not pipelines");
    // The head holds no execution, only the ids of the live ones (here all: none ran).
    let head: PipelineState = serde_json::from_slice(&store.raw(&head_key("p")).unwrap().unwrap()).unwrap();
    assert!(in_parts(&head));
    let open: Vec<_> = state.executions.open().map(|(id, _)| id.clone()).collect();
    assert_eq!((open.len(), head.live), (30, Some(open)));
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
        let mut reading = after.sensors.get(&slot).unwrap().clone();
        reading.data.insert("count".into(), json!(7000));
        after.sensors.insert(slot, reading);
        let writes = writes("p", Some(&before), &after, false).unwrap();
        assert_eq!(writes.len(), 1, "the one reading changed");
        bytes(&writes)
    };
    let (few, many) = (written(2), written(168));
    assert!(
        many <= few + 64,
        "a reading writes {few} bytes with 2 executions, {many} with 168"
    );
    let whole = |executions| bytes(&writes("p", None, &hourly(executions), false).unwrap());
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
    let mut store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
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
        let store = PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        let read = store.stored(&"p".into(), &Needs::Whole).unwrap().unwrap().state;
        assert!(read.executions.values().all(|e| !e.is_decoded()), "read as stored");
        let decision = decide(&read, &"p".into(), &input, ctx);
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
        let expected = decide(&whole, &"p".into(), &input, ctx);
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

/// The head is written when what it sums up of the readings changed, and only then: the
/// summary of the state before is made only when its readings changed.
#[test]
fn a_new_reading_writes_the_head_and_an_unchanged_state_writes_nothing() {
    let before = hourly(3);
    assert!(writes("p", Some(&before), &before.clone(), false).unwrap().is_empty());
    let mut after = before.clone();
    let (slot, sensor) = after
        .sensors
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    let mut newer = (*sensor).clone();
    newer.received_at += chrono::TimeDelta::hours(1);
    newer.hour = Some(23);
    after.sensors.insert(newer.slot(newer.key_in(&slot)), newer.into());
    let writes = writes("p", Some(&before), &after, false).unwrap();
    assert_eq!(writes.len(), 2, "the reading and the head: {writes:?}");
    let head_written = writes.iter().find(|(k, _)| *k == head_key("p")).unwrap();
    let stored: PipelineState = serde_json::from_slice(head_written.1.as_ref().unwrap()).unwrap();
    assert_eq!(stored.readings.unwrap().count, before.sensors.len() + 1);
}

#[test]
fn parts_gone_are_deleted_and_a_timer_goes_with_its_execution() {
    let before = hourly(3);
    let mut after = before.clone();
    // An execution is pruned with its timers, a reading with it.
    let gone = after.executions.keys().next().unwrap().clone();
    after.executions.remove(&gone);
    after.timers.retain(|_, t| execution_of(t).as_ref() != Some(&gone));
    let slot = after.sensors.keys().next().unwrap().clone();
    after.sensors.remove(&slot);
    // Another execution's timer moves: that execution's part is written again.
    let held = |k: &&TimerKind| k.execution().is_some_and(|e| after.executions.contains_key(e));
    let kind = after.timers.keys().find(held).unwrap().clone();
    after.timers.get_mut(&kind).unwrap().at += chrono::TimeDelta::minutes(5);
    let moved = execution_of(&after.timers[&kind]).unwrap();
    let writes = writes("p", Some(&before), &after, false).unwrap();
    let find = |writes: &[Write], tag: u8, id: &str| {
        (writes.iter())
            .find(|(k, _)| *k == part_key("p", tag, id))
            .map(|(_, v)| v.is_some())
    };
    assert_eq!(find(&writes, EXECUTION, gone.as_str()), Some(false));
    assert_eq!(find(&writes, SENSOR, &slot), Some(false));
    assert_eq!(find(&writes, EXECUTION, moved.as_str()), Some(true));
    // The head too: the execution gone was live (it awaited its trigger).
    assert_eq!(writes.len(), 4, "the three changes and the head: {writes:?}");
    let written: PipelineState = serde_json::from_slice(writes[0].1.as_ref().unwrap()).unwrap();
    assert_eq!(written.live.unwrap().len(), after.executions.len());
    // A timer whose execution is gone is a part of its own until it goes too.
    let mut orphaned = after.clone();
    orphaned.executions.remove(&moved);
    let writes = self::writes("p", Some(&after), &orphaned, false).unwrap();
    let alone: Vec<&PendingTimer> = (orphaned.timers.values())
        .filter(|t| execution_of(t) == Some(moved.clone()))
        .map(|t| &**t)
        .collect();
    assert!(!alone.is_empty());
    for t in &alone {
        assert_eq!(find(&writes, TIMER, &t.timer.encode()), Some(true));
    }
    // And the head: a live execution went.
    assert_eq!(writes.len(), 2 + alone.len());
    let mut batch_state = PipelineState::default();
    for (key, value) in writes.iter().filter(|(k, _)| k.starts_with(b"p/p\0")) {
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
    let writes = self::writes("p", Some(&after), &linked, false).unwrap();
    assert_eq!(
        writes,
        [(head_key("p"), Some(serde_json::to_vec(&head(&linked)).unwrap()))]
    );
}

/// A state read in part is the whole state less its quiet executions (settled, no timer but
/// their expiry) but those of the days asked for: the store reads what the decider's view of
/// a state read in part assumes (see `Executions`), and far less than the whole.
#[test]
fn a_state_read_in_part_is_the_whole_less_its_quiet_executions() {
    let (_dir, store) = store();
    // Nothing cached: every read is from the parts.
    let mut store = store.with_state_cache(0);
    let mut state = history(60, Some(JobStatus::Succeeded));
    // Their SLA deadlines passed: only their expiries are left.
    state.timers.retain(|kind, _| matches!(kind, TimerKind::Expire { .. }));
    // Two hours of today still open.
    for hour in 0..2 {
        let other = history(1, None);
        let (id, open) = other
            .executions
            .open()
            .next()
            .map(|(id, e)| (id.clone(), e.clone()))
            .unwrap();
        let id: ExecutionId = format!("{}T{hour:02}", &id.as_str()[..id.as_str().len() - 3])
            .parse()
            .unwrap();
        state.executions.insert(id, open);
    }
    write(&mut store, |b| b.put_pipeline("p", &state, true).unwrap());
    let whole = store.stored(&"p".into(), &Needs::Whole).unwrap().unwrap();
    assert_eq!(*whole.state, state);
    let day = |d: &str| Span::Day(d.parse().unwrap());
    let date = |d: &str| Span::Date(d.parse().unwrap());
    let all = state.executions.loaded().len();
    let open: Vec<Span> = state.executions.open().map(|(id, _)| Span::Date(id.date())).collect();
    let latest: Vec<String> = state.sensors.summary().latest.into_values().collect();
    for spans in [
        vec![],
        vec![day("2026-11-24")],
        vec![day("2026-11-22"), day("2026-11-23")],
        vec![day("2026-11-01")],
        vec![date("2026-11-23T05"), date("2026-11-23")],
        // More dates of a day than a read takes one by one: the day.
        (1..=5).map(|h| date(&format!("2026-11-23T{h:02}"))).collect(),
    ] {
        let read = store.stored(&"p".into(), &Needs::Part(spans.clone())).unwrap().unwrap();
        let mut expected = state.clone();
        let left_out = expected.read_in_part(&spans);
        assert_eq!(*read.state, expected, "spans {spans:?}");
        assert!(read.in_parts && !read.head_stale);
        let loaded = read.state.executions.loaded().len();
        let readings = read.state.sensors.loaded().len();
        assert_eq!(loaded + readings + left_out, all + state.sensors.len());
        // What the spans and the open executions' dates cover, and no other: the readings
        // (undated, scoped to a date covered, or a key's latest) and the executions.
        let covered: Spans = match spans.len() {
            5 => [day("2026-11-23")].iter().chain(&open).copied().collect(),
            _ => spans.iter().chain(&open).copied().collect(),
        };
        let of_spans = (state.sensors.loaded().iter())
            .filter(|(slot, s)| s.scope().is_none_or(|d| covered.covers(d)) || latest.contains(slot))
            .count();
        assert_eq!(
            readings, of_spans,
            "the readings of {spans:?} and of the open executions' dates"
        );
        assert_eq!(read.state.sensors.len(), state.sensors.len(), "counted by the head");
        let of_spans = (state.executions.loaded().keys())
            .filter(|id| covered.covers(id.date()))
            .count();
        assert_eq!(loaded, of_spans, "the spans {spans:?} and the open executions' dates");
        match spans.as_slice() {
            [] => assert_eq!((loaded, all), (2, 60), "the two open hours of two days and a half"),
            [Span::Date(_), Span::Date(_)] => assert_eq!(loaded, 3, "the hour asked and the two open ones"),
            [_, _, _, _, _] => assert!(read.state.holds(&[day("2026-11-23")]), "read whole"),
            _ => {}
        }
    }
    assert_eq!(store.state_reads().whole, 1);
}

/// Takes `field` out of pipeline `p`'s stored head, as a version from before it wrote the
/// head; returns what it held.
fn drop_from_head(store: &mut PartitionStore, field: &str) -> Value {
    let mut head: serde_json::Map<String, Value> =
        serde_json::from_slice(&store.raw(&head_key("p")).unwrap().unwrap()).unwrap();
    let held = head.remove(field).unwrap_or_else(|| panic!("a head holds {field}"));
    write(store, |b| {
        b.mirror(&head_key("p"), Some(&serde_json::to_vec(&head).unwrap()))
    });
    held
}

/// Writes pipeline `p`'s `state` unchanged, read with a stale head: its write is the head
/// alone.
fn write_head_again(store: &mut PartitionStore, state: &PipelineState) {
    let writes = writes("p", Some(state), state, true).unwrap();
    assert_eq!(
        writes.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        [head_key("p")]
    );
    write(store, |b| b.put_state(writes, None));
}

/// A head written before reads in part names no live executions: its state is read whole,
/// and the next write writes the head again, after which it is read in part.
#[test]
fn a_head_from_before_reads_in_part_is_read_whole_until_written_again() {
    let (_dir, store) = store();
    let mut store = store.with_state_cache(0);
    let state = history(30, Some(JobStatus::Succeeded));
    write(&mut store, |b| b.put_pipeline("p", &state, true).unwrap());
    drop_from_head(&mut store, "live");
    let in_part = Needs::Part(Vec::new());
    let read = store.stored(&"p".into(), &in_part).unwrap().unwrap();
    assert!(read.head_stale && !read.state.executions.is_partial());
    write_head_again(&mut store, &read.state);
    let read = store.stored(&"p".into(), &in_part).unwrap().unwrap();
    assert!(!read.head_stale && read.state.executions.is_partial());
}

/// A head written before it summed up its readings has its readings read whole (its
/// executions in part), and the next write writes the head again, after which its readings
/// are read in part.
#[test]
fn a_head_from_before_its_readings_summary_reads_them_whole_until_written_again() {
    let (_dir, store) = store();
    let mut store = store.with_state_cache(0);
    let mut state = history(50, Some(JobStatus::Succeeded));
    // Their SLA deadlines passed: no execution is live.
    state.timers.retain(|kind, _| matches!(kind, TimerKind::Expire { .. }));
    write(&mut store, |b| b.put_pipeline("p", &state, true).unwrap());
    let summary = drop_from_head(&mut store, "readings");
    assert_eq!(summary["count"], json!(100));
    assert_eq!(summary["latest"]["rows"], json!("rows@2026-11-24T23"));
    let in_part = Needs::Part(Vec::new());
    let read = store.stored(&"p".into(), &in_part).unwrap().unwrap();
    assert!(read.head_stale && read.state.executions.is_partial() && !read.state.sensors.is_partial());
    assert_eq!(read.state.sensors.loaded().len(), 100);
    write_head_again(&mut store, &read.state);
    let read = store.stored(&"p".into(), &in_part).unwrap().unwrap();
    assert!(!read.head_stale && read.state.sensors.is_partial());
    assert_eq!(read.state.sensors.loaded().len(), 2, "each key's latest");
    assert_eq!(read.state.sensors.len(), 100);
}

/// After a rollback, a version from before the readings' summary adds readings without
/// writing the head: the partition's opening finds the head's summary off, and the state is
/// read whole (the new key's reading in it) until its next write sums it up again.
#[test]
fn readings_an_older_version_added_are_read_whole_until_the_head_sums_them_up() {
    let (_dir, store) = store();
    let mut store = store.with_state_cache(0);
    let mut state = history(30, Some(JobStatus::Succeeded));
    state.timers.retain(|kind, _| matches!(kind, TimerKind::Expire { .. }));
    write(&mut store, |b| {
        b.put_pipeline("p", &state, true).unwrap();
        b.put_pipeline("q", &state, true).unwrap();
    });
    let in_part = Needs::Part(Vec::new());
    store.timers().unwrap();
    let read = store.stored(&"p".into(), &in_part).unwrap().unwrap();
    assert!(
        read.state.sensors.is_partial() && !read.head_stale,
        "summed up as written"
    );
    // The older version's reading of a key the summary does not name, its head untouched.
    let sensor = StoredSensor {
        received_at: chrono::DateTime::UNIX_EPOCH,
        date: Some("2026-11-20".parse().unwrap()),
        ..Default::default()
    };
    let value = serde_json::to_vec(&sensor).unwrap();
    write(&mut store, |b| {
        b.mirror(&part_key("p", SENSOR, "late@2026-11-20"), Some(&value))
    });
    let read = store.stored(&"p".into(), &in_part).unwrap().unwrap();
    assert!(
        !read.state.sensors.loaded().contains_key("late@2026-11-20"),
        "a read in part misses it"
    );
    store.timers().unwrap();
    let read = store.stored(&"p".into(), &in_part).unwrap().unwrap();
    assert!(read.head_stale && !read.state.is_partial());
    assert!(read.state.sensors.loaded().contains_key("late@2026-11-20"));
    let other = store.stored(&"q".into(), &in_part).unwrap().unwrap();
    assert!(other.state.is_partial(), "the other pipeline is read in part as before");
    // Its next write writes the head, summing the reading up.
    write_head_again(&mut store, &read.state);
    store.remember(&"p".into(), read.state.clone());
    let cold = store.with_state_cache(0);
    cold.timers().unwrap();
    let read = cold.stored(&"p".into(), &in_part).unwrap().unwrap();
    assert!(read.state.sensors.is_partial() && !read.head_stale);
    assert_eq!(read.state.sensors.len(), 61);
    assert_eq!(
        read.state.sensors.latest_of("late").map(|(slot, _)| slot),
        Some("late@2026-11-20")
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
    let stored = store.stored(&"p".into(), &Needs::Whole).unwrap().unwrap();
    assert!(!stored.in_parts);
    assert_eq!(*stored.state, whole);
    assert!(!whole.timers.is_empty());
    let inline = store.timers().unwrap().len();
    assert_eq!(inline, whole.timers.len(), "the timers a head holds inline count");
    let next = stored.state.clone();
    write(&mut store, |b| {
        b.put_state(writes("p", None, &next, false).unwrap(), None)
    });
    let stored = store.stored(&"p".into(), &Needs::Whole).unwrap().unwrap();
    assert!(stored.in_parts);
    assert_eq!(Arc::unwrap_or_clone(stored.state), whole);
    assert_eq!(store.timers().unwrap().len(), inline, "moved to parts, not doubled");
    write(&mut store, |b| b.delete_pipeline("p", &next));
    assert!(store.stored(&"p".into(), &Needs::Whole).unwrap().is_none());
    assert!(store.pipelines().unwrap().is_empty());
    let left = store.db.iterator(rocksdb::IteratorMode::Start).count();
    assert_eq!(left, 0, "no part outlives its pipeline");
}

#[test]
fn a_part_that_does_not_decode_says_which() {
    let mut state = PipelineState::default();
    let e = add_part(&mut state, b"x2026-11-24", b"{").unwrap_err();
    assert!(e.to_string().contains("2026-11-24"), "{e}");
    assert!(
        matches!(e, PartError::Decode { ref id, .. } if id == "2026-11-24"),
        "{e:?}"
    );
    let e = add_part(&mut state, b"q", b"{}").unwrap_err();
    assert!(matches!(e, PartError::UnknownKind('q')), "{e:?}");
    assert!(e.to_string().contains("unknown kind"));
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
    let in_part = Needs::Part(Vec::new());
    let read = |store: &PartitionStore| store.stored(&"p".into(), &in_part).unwrap().map(|s| (*s.state).clone());
    let mut expected = state.clone();
    expected.read_in_part(&[]);
    assert_eq!(read(&store).unwrap(), expected);
    // What the caller says it wrote is what reads return, without decoding.
    let mut told = expected.clone();
    told.dependents.insert("d".into(), "k".into());
    store.remember(&"p".into(), told.clone().into());
    let before = store.take_state_reads();
    assert_eq!(read(&store).unwrap(), told);
    assert_eq!(store.take_state_reads().cached, 1);
    // A write of one of its parts (a restore's) is read from disk again.
    let (slot, reading) = state.sensors.iter().next().unwrap();
    let value = serde_json::to_vec(reading).unwrap();
    write(&mut store, |b| b.mirror(&part_key("p", SENSOR, slot), Some(&value)));
    assert_eq!(read(&store).unwrap(), expected);
    // Another pipeline's writes leave it cached; a clear forgets everything.
    store.remember(&"p".into(), told.clone().into());
    write(&mut store, |b| b.delete_pipeline("q", &state));
    assert_eq!(read(&store).unwrap(), told);
    assert!(store.pipeline("q").unwrap().is_none());
    store.clear().unwrap();
    assert!(read(&store).is_none());
    // A whole read is never kept: the read models' reads do not fill the cache.
    assert_eq!(before.whole, 0);
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

    const KEYS: [&str; 3] = ["rows", "ready", "a@2026-11-21"];

    /// A reading of key `KEYS[key]`, scoped to `DATES[date]` (or undated when `date` is past
    /// them), received at minute `minute`.
    fn reading(key: usize, date: usize, minute: u8) -> (String, StoredSensor) {
        let scope: Option<crate::core::execution::ExecutionDate> = DATES.get(date).map(|d| d.parse().unwrap());
        let sensor = StoredSensor {
            data: json!({"count": minute}).as_object().unwrap().clone().into(),
            received_at: at(minute),
            date: scope.map(|s| s.day),
            hour: scope.and_then(|s| s.hour),
            ..Default::default()
        };
        (sensor.slot(KEYS[key]), sensor)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Readings read in part from the store are those a read in part of the whole keeps,
        /// and answer as the whole does or note that they cannot: a slot, a key's latest,
        /// the count, the readings an execution of a day read sees.
        #[test]
        fn readings_read_in_part_answer_as_the_whole_or_say_they_cannot(
            stored in prop::collection::vec((0..KEYS.len(), 0..DATES.len() + 1, any::<u8>()), 0..30),
            asked in prop::collection::vec((0..DATES.len(), any::<bool>()), 0..3),
        ) {
            let (_dir, store) = store();
            let mut store = store.with_state_cache(0);
            let mut state = PipelineState::default();
            for (key, date, minute) in stored {
                let (slot, sensor) = reading(key, date, minute);
                state.sensors.insert(slot, sensor.into());
            }
            write(&mut store, |b| b.put_pipeline("p", &state, false).unwrap());
            // Each a day read whole, or one date read (with its day's daily date, for an hour).
            let spans: Vec<Span> = (asked.iter())
                .flat_map(|(d, whole)| {
                    let date: crate::core::execution::ExecutionDate = DATES[*d].parse().unwrap();
                    match whole {
                        true => vec![Span::Day(date.day)],
                        false => Span::of(date),
                    }
                })
                .collect();
            let read = store.stored(&"p".into(), &Needs::Part(spans.clone())).unwrap().unwrap();
            let mut expected = state.clone();
            expected.read_in_part(&spans);
            prop_assert_eq!(&*read.state, &expected);
            let part = &read.state.sensors;
            let whole = &state.sensors;
            let noted = |f: &dyn Fn() -> bool| crate::core::lifecycle::noting_unloaded(f);
            prop_assert_eq!(noted(&|| part.len() == whole.len()), (true, false));
            for key in KEYS {
                let latest = |r: &crate::core::lifecycle::Readings| r.latest_of(key).map(|(slot, _)| slot.to_string());
                prop_assert_eq!(noted(&|| latest(part) == latest(whole)), (true, false), "latest of {}", key);
            }
            prop_assert!(part.oldest_day() <= whole.oldest_day() || whole.oldest_day().is_none());
            for (key, date, minute) in (0..KEYS.len()).flat_map(|k| (0..=DATES.len()).map(move |d| (k, d, 0))) {
                let (slot, _) = reading(key, date, minute);
                let (same, asked) = noted(&|| part.get(&slot) == whole.get(&slot));
                prop_assert!(same || asked, "slot {} answered otherwise without noting", slot);
            }
            for span in &spans {
                let seen = |r: &crate::core::lifecycle::Readings| match span {
                    Span::Day(day) => r.of_day(*day).map(|(slot, _)| slot.to_string()).collect::<Vec<_>>(),
                    Span::Date(date) => r.of_date(*date).map(|(slot, _)| slot.to_string()).collect(),
                };
                prop_assert_eq!(noted(&|| seen(part) == seen(whole)), (true, false), "the readings of {:?}", span);
            }
            // A day not read whole is noted when asked whole, whatever of it was read.
            for date in DATES {
                let day = date.parse::<crate::core::execution::ExecutionDate>().unwrap().day;
                let (_, asked) = noted(&|| part.of_day(day).count() > 0);
                prop_assert_eq!(asked, !spans.contains(&Span::Day(day)), "the whole of {}", day);
            }
        }

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
