//! Replay driven by recorded inputs at their own times: no clock but the records'.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{json, Value};

use super::*;
use crate::core::events::EventType::{self, *};
use crate::core::lifecycle::tests::{merge, pipeline};
use crate::core::records::{ConfigRecord, JobRecord, JobStatus, SensorReading};

fn t(minutes: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
        + TimeDelta::minutes(minutes)
}

/// The lifecycle tests' pipeline (interval 5m), with a 30-minute window and one retry.
fn config() -> Input {
    let mut config = pipeline(1);
    merge(&mut config, json!({"schedule": {"evaluation": {"window": "30m"}}}));
    Input::ConfigPublished(ConfigRecord::Put {
        pipeline_id: "gold".into(),
        config,
    })
}

fn sensor(key: &str, data: Value) -> Input {
    Input::SensorReceived(SensorReading {
        pipeline_id: "gold".into(),
        key: key.into(),
        data: data.as_object().unwrap().clone(),
        date: None,
        hour: None,
        timestamp: None,
        ..Default::default()
    })
}

fn report(attempt: u32, status: JobStatus, at: DateTime<Utc>) -> Input {
    Input::JobReported(
        JobRecord {
            pipeline_id: "gold".into(),
            schedule_id: "stream".into(),
            date: "2026-11-22".into(),
            run_id: format!("gold.stream.2026-11-22.{attempt}").into(),
            status,
            failure_category: None,
            message: None,
            metadata: None,
            timestamp: at,
        }
        .parse()
        .unwrap(),
    )
}

/// Feeds `records` (event time in minutes, input) in order, then lets event time run to
/// `end`; returns the events and the replay.
fn replay(records: &[(i64, Input)], end: DateTime<Utc>) -> (Vec<Event>, Replay) {
    replay_within(records, end, None).unwrap()
}

/// As [`replay`], with decisions measured by `fit`.
fn replay_within(
    records: &[(i64, Input)],
    end: DateTime<Utc>,
    fit: Option<Fit>,
) -> Result<(Vec<Event>, Replay), Unapplied> {
    let mut replay = Replay::new(Settings::default(), t(0), fit);
    let mut out = Vec::new();
    for (i, (minute, input)) in records.iter().enumerate() {
        replay.input(
            t(*minute),
            PartitionId::new(0),
            &"gold".into(),
            input,
            &format!("sensors/0@{i}"),
            &mut out,
        )?;
    }
    replay.advance(end, &mut out)?;
    Ok((out, replay))
}

/// A measure that finds any decision with a `kind` event over the limit.
fn refusing(kind: EventType) -> Fit {
    Box::new(move |_, _, decision| {
        Ok(match decision.events.iter().any(|e| e.kind == kind) {
            true => Err(OverLimit::Message {
                what: "an event",
                len: 2_000_000,
                limit: 1_000_000,
            }),
            false => Ok(()),
        })
    })
}

#[test]
fn an_input_whose_decision_is_over_a_limit_is_rejected_as_the_live_processor_rejects_it() {
    let records = evaluated(5000);
    let (plain, replayed) = replay(&records, t(3));
    assert_eq!(types(&plain), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(replayed.unanswered_triggers().len(), 1);
    let (out, replay) = replay_within(&records, t(3), Some(refusing(VALIDATION_PASSED))).unwrap();
    assert_eq!(types(&out), [CONFIG_ACCEPTED, INPUT_REJECTED]);
    let rejected: Vec<&Event> = out.iter().filter(|e| e.kind == EventType::INPUT_REJECTED).collect();
    assert_eq!(rejected.len(), 1, "{:?}", types(&out));
    assert!(rejected[0].message.contains("sensors/0@2") && rejected[0].message.contains("--max-message-bytes"));
    assert!(replay.unanswered_triggers().is_empty(), "nothing was triggered");
}

#[test]
fn an_input_not_even_its_rejection_fits_stops_the_replay_where_the_processor_stopped() {
    let records = [(0, config()), (1, sensor("row-count", json!({"count": 5000})))];
    // Every decision with an event is over the limit: the config's and its rejection's alike.
    let fit: Fit = Box::new(|_, _, d| {
        Ok(match d.events.is_empty() {
            true => Ok(()),
            false => Err(OverLimit::Message {
                what: "an event",
                len: 200,
                limit: 100,
            }),
        })
    });
    let err = replay_within(&records, t(2), Some(fit))
        .err()
        .expect("the replay stops");
    assert_eq!(err.origin, "sensors/0@0");
    assert!(err.reason.contains("even its rejection"), "{err}");
    let broken: Fit = Box::new(|_, _, _| Err("the registry is unreachable".into()));
    let err = replay_within(&records, t(2), Some(broken))
        .err()
        .expect("the replay stops");
    assert!(
        err.reason
            .contains("could not be measured: the registry is unreachable"),
        "{err}"
    );
}

/// The config at 08:00, a row count of `count` at 08:01 and the upstream ready at 08:02.
fn evaluated(count: u64) -> [(i64, Input); 3] {
    [
        (0, config()),
        (1, sensor("row-count", json!({ "count": count }))),
        (2, sensor("upstream", json!({"status": "ready"}))),
    ]
}

fn types(events: &[Event]) -> Vec<EventType> {
    events.iter().map(|e| e.kind).collect()
}

#[test]
fn timers_fire_at_their_due_time_as_event_time_passes() {
    let records = evaluated(10);
    let (events, replay) = replay(&records, t(60));
    assert_eq!(types(&events), [CONFIG_ACCEPTED, VALIDATION_EXHAUSTED]);
    let exhausted = &events[1];
    assert_eq!(
        exhausted.timestamp,
        t(32),
        "the window (30m from the trigger at 08:02) closes in event time"
    );
    assert!(exhausted.message.contains("count is 10"), "{}", exhausted.message);
    // Interval evaluations at 08:07, 08:12, … 08:27 and the window close at 08:32.
    assert!(replay.counts().timers_fired >= 6, "{:?}", replay.counts());
    assert_eq!(replay.now(), t(60));
}

#[test]
fn a_timer_due_before_a_record_fires_before_it() {
    let records = [
        (0, config()),
        (1, sensor("row-count", json!({"count": 10}))),
        (2, sensor("upstream", json!({"status": "ready"}))),
        // After the window closed: the fixing sensor comes too late.
        (40, sensor("row-count", json!({"count": 5000}))),
    ];
    let (events, _) = replay(&records, t(40));
    assert_eq!(types(&events), [CONFIG_ACCEPTED, VALIDATION_EXHAUSTED]);
    let records = [
        (0, config()),
        (1, sensor("row-count", json!({"count": 10}))),
        (2, sensor("upstream", json!({"status": "ready"}))),
        (20, sensor("row-count", json!({"count": 5000}))),
    ];
    // (Until 08:35, when the watchdog would close a trigger no report answered.)
    let (events, _) = replay(&records, t(30));
    assert_eq!(types(&events), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(events[1].timestamp, t(20));
}

#[test]
fn outcomes_come_from_recorded_reports_and_unanswered_triggers_are_listed() {
    let passing = [
        (0, config()),
        (1, sensor("row-count", json!({"count": 5000}))),
        (2, sensor("upstream", json!({"status": "ready"}))),
    ];
    let (events, replay_without) = replay(&passing, t(3));
    assert_eq!(types(&events), [CONFIG_ACCEPTED, VALIDATION_PASSED]);
    assert_eq!(replay_without.unanswered_triggers(), ["gold.stream.2026-11-22.1"]);
    assert_eq!(replay_without.counts().effects_skipped, 1);

    let mut records = passing.to_vec();
    records.push((3, report(1, JobStatus::Running, t(3))));
    records.push((9, report(1, JobStatus::Failed, t(9))));
    records.push((10, report(2, JobStatus::Running, t(10))));
    records.push((15, report(2, JobStatus::Succeeded, t(15))));
    let (events, replay) = replay(&records, t(16));
    assert_eq!(
        types(&events),
        [
            CONFIG_ACCEPTED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_FAILED,
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            JOB_COMPLETED
        ]
    );
    assert!(
        replay.unanswered_triggers().is_empty(),
        "{:?}",
        replay.unanswered_triggers()
    );
    assert_eq!(events[6].timestamp, t(15));
    assert!(replay.state("gold").unwrap().executions["stream/2026-11-22"]
        .phase
        .is_completed());
}

#[test]
fn the_same_inputs_replay_to_the_same_bytes() {
    let records = [
        (0, config()),
        (1, sensor("row-count", json!({"count": 10}))),
        (2, sensor("upstream", json!({"status": "ready"}))),
        (50, sensor("row-count", json!({"count": 50}))),
    ];
    let text = |events: Vec<Event>| {
        events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (first, _) = replay(&records, t(120));
    let (second, _) = replay(&records, t(120));
    assert!(!first.is_empty());
    assert_eq!(text(first), text(second));
}

#[test]
fn event_ids_follow_the_live_origins() {
    let records = [(0, config())];
    let (events, _) = replay(&records, t(1));
    assert_eq!(
        events[0].event_id,
        crate::core::events::event_id("sensors/0@0", events[0].kind, None, 0)
    );
}

/// The sensor anomalies replay from the recorded inputs alone, in event time: the cadence
/// is learned from the records' own times, and the stale check fires when event time
/// passes it.
#[test]
fn stale_sensor_warning_and_unknown_sensor_replay_in_event_time() {
    let mut records = vec![(0, config()), (2, sensor("rowcount", json!({"count": 10})))];
    for minute in [1, 6, 11, 16, 21, 26] {
        records.push((minute, sensor("row-count", json!({"count": 10}))));
    }
    records.sort_by_key(|(minute, _)| *minute);
    records.push((27, sensor("upstream", json!({"status": "ready"}))));
    let (events, _) = replay(&records, t(45));
    assert_eq!(types(&events), [CONFIG_ACCEPTED, UNKNOWN_SENSOR, STALE_SENSOR_WARNING]);
    assert_eq!(events[1].timestamp, t(2));
    assert_eq!(events[1].detail["didYouMean"], json!("row-count"));
    assert_eq!(events[2].timestamp, t(36), "twice the 5-minute cadence after 08:26");
    let (again, _) = replay(&records, t(45));
    assert_eq!(again, events, "the same bytes, ids included");
}
