//! SENSOR_FLAPPING, UNKNOWN_SENSOR and STALE_SENSOR_WARNING on a simulated clock.

use chrono::TimeDelta;
use serde_json::{json, Value};

use super::{merge, pipeline, t0, Sim};
use crate::core::events::EventType::*;

/// `gold` (trigger `upstream`, rules `upstream` ready and `row-count` >= 1000, a 1-hour
/// window evaluated every 5 minutes) with `anomalies` patched in.
fn gold(anomalies: Value) -> Value {
    let mut config = pipeline(0);
    merge(&mut config, json!({"anomalies": anomalies}));
    config
}

fn rows(sim: &mut Sim, count: u32) {
    sim.sensor("gold", "row-count", json!({"count": count}));
}

#[test]
fn sensor_flapping_once_when_a_rules_result_changes_more_than_allowed_within_the_window() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"flapping": {"changes": 3, "window": "30m"}})));
    rows(&mut sim, 10);
    sim.sensor("gold", "upstream", json!({"status": "running"}));
    // The execution opens on the trigger; the row count then goes 10 → 2000 → 10 → 2000 → 10
    // with `upstream` not ready, so nothing triggers while it flaps.
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.sensor("gold", "upstream", json!({"status": "held"}));
    for (minute, count) in [(1, 2000), (2, 10), (3, 2000)] {
        sim.advance_to(t0() + TimeDelta::minutes(minute));
        rows(&mut sim, count);
    }
    assert!(sim.of(SENSOR_FLAPPING).is_empty(), "three changes are allowed");
    sim.advance_to(t0() + TimeDelta::minutes(4));
    rows(&mut sim, 10);
    assert_eq!(sim.of(SENSOR_FLAPPING).len(), 1, "{:?}", sim.types());
    let flapping = sim.of(SENSOR_FLAPPING)[0];
    assert_eq!(flapping.detail["key"], json!("row-count"));
    assert_eq!(flapping.detail["changes"], json!(4));
    let seen: Vec<Value> = flapping.detail["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["seen"].clone())
        .collect();
    assert_eq!(seen, [json!(2000), json!(10), json!(2000), json!(10)]);
    assert_eq!(flapping.date.as_deref(), Some("2026-11-22"));
    // Once per key and execution.
    for (minute, count) in [(5, 2000), (6, 10)] {
        sim.advance_to(t0() + TimeDelta::minutes(minute));
        rows(&mut sim, count);
    }
    assert_eq!(sim.of(SENSOR_FLAPPING).len(), 1);
}

#[test]
fn sensor_flapping_counts_only_changes_within_the_window() {
    let mut sim = Sim::new();
    sim.config(gold(json!({"flapping": {"changes": 2, "window": "10m"}})));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim.sensor("gold", "upstream", json!({"status": "held"}));
    rows(&mut sim, 10);
    // The row count changes every 6 minutes: never more than two changes within 10 minutes.
    for (i, count) in [2000, 10, 2000, 10, 2000].into_iter().enumerate() {
        sim.advance_to(t0() + TimeDelta::minutes(6 * (i as i64 + 1)));
        rows(&mut sim, count);
    }
    assert!(sim.of(SENSOR_FLAPPING).is_empty(), "{:?}", sim.types());
    let flips = &sim.states["gold"].executions["stream/2026-11-22"].flips;
    assert_eq!(flips.len(), 2, "older changes are forgotten: {flips:?}");
}

#[test]
fn sensor_flapping_holds_the_trigger_until_the_sensor_keeps_still_for_hold_for() {
    let mut sim = Sim::new();
    sim.config(gold(
        json!({"flapping": {"changes": 1, "window": "30m", "holdFor": "10m"}}),
    ));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    rows(&mut sim, 10);
    sim.advance_to(t0() + TimeDelta::minutes(1));
    sim.sensor("gold", "upstream", json!({"status": "held"}));
    sim.advance_to(t0() + TimeDelta::minutes(2));
    rows(&mut sim, 2000);
    sim.advance_to(t0() + TimeDelta::minutes(3));
    // `upstream` changed twice (ready → held → ready): flapping, and everything passes now.
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    assert_eq!(sim.of(SENSOR_FLAPPING).len(), 1);
    assert_eq!(sim.of(SENSOR_FLAPPING)[0].detail["key"], json!("upstream"));
    assert_eq!(sim.of(SENSOR_FLAPPING)[0].detail["holdForSeconds"], json!(600));
    assert!(sim.of(VALIDATION_PASSED).is_empty(), "held while it flaps");
    assert!(sim.triggers().is_empty());
    // Still 10 minutes after its last change: it passes then, by the evaluation timer.
    sim.advance_to(t0() + TimeDelta::minutes(12));
    assert!(sim.of(VALIDATION_PASSED).is_empty());
    sim.advance_to(t0() + TimeDelta::minutes(14));
    assert_eq!(sim.of(VALIDATION_PASSED).len(), 1);
    assert_eq!(sim.of(VALIDATION_PASSED)[0].timestamp, t0() + TimeDelta::minutes(13));
    assert_eq!(sim.triggers().len(), 1);
    sim.assert_timers_agree("gold");
}

#[test]
fn sensor_flapping_is_off_unless_configured() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    for minute in 1..=6 {
        sim.advance_to(t0() + TimeDelta::minutes(minute));
        let status = if minute % 2 == 0 { "ready" } else { "held" };
        sim.sensor("gold", "upstream", json!({"status": status}));
    }
    assert!(sim.of(SENSOR_FLAPPING).is_empty());
    assert!(sim.states["gold"].executions["stream/2026-11-22"].flips.is_empty());
}

#[test]
fn unknown_sensor_once_per_key_and_day_naming_the_key_it_likely_meant() {
    let mut sim = Sim::new();
    sim.config(gold(json!({})));
    sim.sensor("gold", "row_count", json!({"count": 5000}));
    sim.sensor("gold", "row_count", json!({"count": 6000}));
    sim.sensor("gold", "heartbeat", json!({"ok": true}));
    let unknown = sim.of(UNKNOWN_SENSOR);
    assert_eq!(unknown.len(), 2, "{:?}", sim.types());
    assert_eq!(unknown[0].detail["key"], json!("row_count"));
    assert_eq!(unknown[0].detail["didYouMean"], json!("row-count"));
    assert!(
        unknown[0].message.contains("did you mean \"row-count\""),
        "{}",
        unknown[0].message
    );
    assert_eq!(unknown[0].detail["knownKeys"], json!(["row-count", "upstream"]));
    assert_eq!(unknown[1].detail["didYouMean"], Value::Null);
    assert_eq!(unknown[0].date, None, "about the pipeline, not an execution");
    // Known keys never are; the next day the unknown one is reported again.
    sim.sensor("gold", "row-count", json!({"count": 5000}));
    sim.advance(TimeDelta::hours(24));
    sim.sensor("gold", "row_count", json!({"count": 7000}));
    assert_eq!(sim.of(UNKNOWN_SENSOR).len(), 3);
    // Switched off, nothing.
    let mut quiet = Sim::new();
    quiet.config(gold(json!({"unknownSensors": false})));
    quiet.sensor("gold", "row_count", json!({"count": 5000}));
    assert!(quiet.of(UNKNOWN_SENSOR).is_empty());
}

#[test]
fn unknown_sensor_is_not_told_for_keys_the_pipeline_expects() {
    // The IoT example's machines each publish a status no rule reads.
    let mut sim = Sim::new();
    sim.config(gold(json!({"expectedSensors": ["machine_*_status", "heartbeat"]})));
    for key in ["machine_01_status", "machine_12_status", "heartbeat"] {
        sim.sensor("gold", key, json!({"ok": true}));
    }
    assert!(sim.of(UNKNOWN_SENSOR).is_empty(), "{:?}", sim.types());
    // A key the patterns do not name still is.
    sim.sensor("gold", "machine_01_temp", json!({"c": 40}));
    assert_eq!(sim.of(UNKNOWN_SENSOR).len(), 1);
}

#[test]
fn unknown_sensor_counts_post_run_and_dependency_keys_as_known() {
    let mut sim = Sim::new();
    let mut config = gold(json!({}));
    config["postRun"] = json!({"rules": [{"key": "quality", "check": "gte", "field": "score", "value": 1}]});
    config["dependsOn"] = json!(["silver"]);
    sim.config(config);
    sim.sensor("gold", "quality", json!({"score": 2}));
    sim.sensor("gold", "upstream:silver", json!({"status": "succeeded"}));
    assert!(sim.of(UNKNOWN_SENSOR).is_empty(), "{:?}", sim.types());
}

/// `row-count` readings every 5 minutes from t0 - 50m to t0 - 5m: a cadence of 5 minutes.
fn regular_rows(sim: &mut Sim) {
    for i in (1..=10).rev() {
        sim.advance_to(t0() - TimeDelta::minutes(5 * i));
        rows(sim, 10);
    }
}

#[test]
fn stale_sensor_warning_when_a_rules_sensor_is_silent_for_twice_its_usual_interval() {
    let mut sim = Sim::starting_at(t0() - TimeDelta::hours(1));
    sim.config(gold(json!({})));
    regular_rows(&mut sim);
    sim.advance_to(t0());
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    // Last update at t0 - 5m, usually every 5 minutes: stale at t0 + 5m.
    sim.advance_to(t0() + TimeDelta::minutes(4));
    assert!(sim.of(STALE_SENSOR_WARNING).is_empty());
    sim.advance_to(t0() + TimeDelta::minutes(30));
    let stale = sim.of(STALE_SENSOR_WARNING);
    assert_eq!(stale.len(), 1, "once per key and execution: {:?}", sim.types());
    assert_eq!(stale[0].timestamp, t0() + TimeDelta::minutes(5));
    assert_eq!(stale[0].detail["key"], json!("row-count"));
    assert_eq!(stale[0].detail["usualIntervalSeconds"], json!(300.0));
    assert_eq!(stale[0].detail["silentSeconds"], json!(600.0));
    assert_eq!(stale[0].detail["windowClosesAt"], json!(t0() + TimeDelta::hours(1)));
    // `upstream` has no cadence yet (one reading): never stale.
    sim.assert_timers_agree("gold");
}

#[test]
fn stale_sensor_warning_is_put_off_by_each_update_and_never_after_validation_ends() {
    let mut sim = Sim::starting_at(t0() - TimeDelta::hours(1));
    sim.config(gold(json!({})));
    regular_rows(&mut sim);
    sim.advance_to(t0());
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    // It keeps coming every 4 minutes: never stale.
    for minute in [4, 8, 12] {
        sim.advance_to(t0() + TimeDelta::minutes(minute));
        rows(&mut sim, 10);
    }
    assert!(sim.of(STALE_SENSOR_WARNING).is_empty());
    // It passes, and the run starts: the check is gone.
    rows(&mut sim, 2000);
    assert_eq!(sim.triggers().len(), 1);
    sim.advance_to(t0() + TimeDelta::hours(2));
    assert!(sim.of(STALE_SENSOR_WARNING).is_empty());
    assert!(!sim
        .timers
        .iter()
        .any(|t| matches!(t.kind, crate::core::timers::TimerKind::StaleSensorCheck { .. })));
    // Switched off, nothing even when silent.
    let mut quiet = Sim::starting_at(t0() - TimeDelta::hours(1));
    quiet.config(gold(json!({"staleSensors": false})));
    regular_rows(&mut quiet);
    quiet.advance_to(t0());
    quiet.sensor("gold", "upstream", json!({"status": "ready"}));
    quiet.advance_to(t0() + TimeDelta::hours(2));
    assert!(quiet.of(STALE_SENSOR_WARNING).is_empty());
}
