//! Evaluators on a simulated clock: when they are called, how their answers, failures and
//! expiry are judged, and when they stop.

use chrono::TimeDelta;
use serde_json::{json, Value};

use super::schedule_and_sla::cron;
use super::*;
use crate::core::records::EVALUATOR_SOURCE;

/// `daily` at 09:00 UTC, no producer: its one rule asks the warehouse itself.
fn warehouse(evaluator: Value) -> Value {
    let mut config = cron("0 9 * * *", json!({}));
    config["schedule"]["timezone"] = json!("UTC");
    config["schedule"]["evaluation"] = json!({"window": "2h", "interval": "5m"});
    config["validation"]["rules"] = json!([{
        "key": "rows", "check": "gte", "field": "count", "value": 1000, "evaluator": evaluator
    }]);
    config
}

/// [`warehouse`] with a second rule, on a producer's `upstream`, that keeps the run waiting
/// after the evaluator answered.
fn with_producer_rule(evaluator: Value) -> Value {
    let mut config = warehouse(evaluator);
    let rules = config["validation"]["rules"].as_array_mut().unwrap();
    rules.push(json!({"key": "upstream", "check": "equals", "field": "status", "value": "ready"}));
    config
}

fn http(extra: Value) -> Value {
    let mut evaluator = json!({"type": "http", "url": "https://warehouse.example/rows?day=${DATE}", "every": "10m"});
    merge(&mut evaluator, extra);
    evaluator
}

const DAY: &str = "2026-11-22";

fn nine() -> DateTime<Utc> {
    at("2026-11-22T09:00:00Z")
}

impl Sim {
    /// The evaluator calls asked for so far, as (key, url or command).
    fn calls(&self) -> Vec<(String, Value)> {
        (self.effects.iter())
            .filter_map(|e| match e {
                Effect::Evaluate(call) => Some((call.key.clone(), call.request.config.json())),
                _ => None,
            })
            .collect()
    }

    /// What the runtime writes back: an evaluator's answer (or failure) for today.
    fn answer(&mut self, key: &str, data: Value, error: Option<&str>) -> Decision {
        let reading = SensorReading {
            pipeline_id: "daily".into(),
            key: key.into(),
            data: data.as_object().unwrap().clone(),
            date: Some(chrono::NaiveDate::parse_from_str(DAY, "%Y-%m-%d").unwrap()),
            timestamp: Some(self.now),
            source: Some(EVALUATOR_SOURCE.into()),
            error: error.map(str::to_string),
            ..Default::default()
        };
        self.input("daily", Input::SensorReceived(reading))
    }

    fn evaluator_due(&self, key: &str) -> Option<DateTime<Utc>> {
        self.due(
            "daily",
            &TimerKind::EvaluatorDue {
                execution: crate::core::execution::id("cron", DAY),
                key: key.into(),
            },
        )
    }

    fn latest_reason(&self) -> String {
        let e = &self.states["daily"].executions[&crate::core::execution::id("cron", DAY)];
        let verdict = e.last_verdict.as_ref().expect("evaluated");
        verdict.results[0].reason.clone().unwrap_or_default()
    }
}

#[test]
fn an_evaluator_is_called_when_evaluation_begins_then_every_interval_until_the_rules_pass() {
    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    sim.config(warehouse(http(json!({}))));
    sim.advance_to(nine() - TimeDelta::seconds(1));
    assert!(sim.calls().is_empty(), "nothing is asked before the execution begins");

    sim.advance_to(nine());
    let calls = sim.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "rows");
    assert_eq!(
        calls[0].1["url"],
        json!("https://warehouse.example/rows?day=2026-11-22"),
        "run variables rendered"
    );
    assert_eq!(calls[0].1["method"], json!("GET"), "an http evaluator GETs by default");
    assert_eq!(sim.evaluator_due("rows"), Some(nine() + TimeDelta::minutes(10)));

    // Every 10 minutes, not on the 5-minute evaluation interval.
    sim.advance_to(nine() + TimeDelta::minutes(9));
    assert_eq!(sim.calls().len(), 1);
    sim.advance_to(nine() + TimeDelta::minutes(30));
    assert_eq!(sim.calls().len(), 4);
    assert!(sim.triggers().is_empty());
    assert!(sim.latest_reason().contains("no reading"), "{}", sim.latest_reason());

    // An answer too low holds the trigger; a good one fires it and the calls stop.
    sim.answer("rows", json!({"count": 10}), None);
    assert!(sim.triggers().is_empty());
    assert_eq!(sim.latest_reason(), "count is 10 but must be >= 1000");
    sim.answer("rows", json!({"count": 5000}), None);
    assert_eq!(sim.triggers().len(), 1);
    assert_eq!(sim.of(VALIDATION_PASSED).len(), 1);
    assert_eq!(sim.evaluator_due("rows"), None, "the calls stop once the rules pass");
    sim.advance_to(nine() + TimeDelta::hours(3));
    assert_eq!(sim.calls().len(), 4);
    sim.assert_timers_agree("daily");
}

#[test]
fn an_answer_older_than_its_ttl_fails_the_rule_as_expired() {
    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    sim.config(with_producer_rule(http(json!({"ttl": "30m", "every": "1h"}))));
    sim.advance_to(nine());
    sim.answer("rows", json!({"count": 5000}), None);
    assert!(sim.triggers().is_empty());

    // 31 minutes on, the answer no longer counts: the producer's reading alone cannot
    // trigger the run.
    sim.advance_to(nine() + TimeDelta::minutes(31));
    sim.sensor_scoped("daily", "upstream", json!({"status": "ready"}), Some(DAY), None, None);
    assert!(sim.triggers().is_empty(), "an expired answer holds the trigger");
    let reason = sim.latest_reason();
    assert!(
        reason.starts_with("expired: the answer is 31m old, older than the evaluator's ttl of 30m"),
        "{reason}"
    );

    // Within its ttl the same answer passes.
    sim.answer("rows", json!({"count": 5000}), None);
    assert_eq!(sim.triggers().len(), 1);
}

#[test]
fn a_failed_call_fails_the_rule_with_its_reason_and_is_retried_with_the_trigger_retry_policy() {
    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    let mut config = warehouse(http(json!({"every": "1h"})));
    config["job"]["triggerRetry"] = json!({"interval": "30s", "backoffRate": 2, "maxAttempts": 2});
    sim.config(config);
    sim.advance_to(nine());
    assert_eq!(sim.calls().len(), 1);

    sim.answer(
        "rows",
        json!({}),
        Some("the evaluator answered 503 Service Unavailable"),
    );
    assert_eq!(
        sim.latest_reason(),
        "evaluator failed: the evaluator answered 503 Service Unavailable"
    );
    assert_eq!(
        sim.evaluator_due("rows"),
        Some(nine() + TimeDelta::seconds(30)),
        "first retry"
    );
    sim.advance_to(nine() + TimeDelta::seconds(30));
    assert_eq!(sim.calls().len(), 2);

    sim.answer("rows", json!({}), Some("request timed out"));
    let second = sim.now + TimeDelta::seconds(60);
    assert_eq!(sim.evaluator_due("rows"), Some(second), "backoff doubles");
    sim.advance_to(second);
    assert_eq!(sim.calls().len(), 3);

    // Retries spent: back to `every`.
    sim.answer("rows", json!({}), Some("request timed out"));
    assert_eq!(sim.evaluator_due("rows"), Some(second + TimeDelta::hours(1)));
    assert!(sim.triggers().is_empty());
    assert_eq!(sim.states["daily"].sensors[&format!("rows@{DAY}")].failures, 3);

    // An answer ends the failure streak and passes.
    sim.answer("rows", json!({"count": 1000}), None);
    assert_eq!(sim.triggers().len(), 1);
    assert_eq!(sim.states["daily"].sensors[&format!("rows@{DAY}")].failures, 0);
}

#[test]
fn the_window_closing_stops_the_calls_and_a_config_change_arms_or_drops_them() {
    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    sim.config(warehouse(http(json!({"every": "30m"}))));
    sim.advance_to(nine() + TimeDelta::minutes(45));
    assert_eq!(sim.calls().len(), 2);

    // The config drops the evaluator: no more calls. Bringing it back calls at once.
    let mut plain = warehouse(json!(null));
    plain["validation"]["rules"][0]
        .as_object_mut()
        .unwrap()
        .remove("evaluator");
    sim.config(plain);
    assert_eq!(sim.evaluator_due("rows"), None);
    sim.advance_to(nine() + TimeDelta::minutes(80));
    assert_eq!(sim.calls().len(), 2);
    sim.config(warehouse(http(json!({"every": "30m"}))));
    assert_eq!(sim.calls().len(), 3);

    sim.advance_to(nine() + TimeDelta::hours(3));
    assert_eq!(sim.of(VALIDATION_EXHAUSTED).len(), 1);
    let calls = sim.calls().len();
    assert_eq!(sim.evaluator_due("rows"), None, "the window closed");
    sim.advance_to(nine() + TimeDelta::hours(6));
    assert_eq!(sim.calls().len(), calls);
    sim.assert_timers_agree("daily");
}

#[test]
fn a_command_evaluator_is_a_command_jobs_settings_and_a_warn_rule_does_not_hold() {
    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    let mut config = warehouse(json!({"type": "command", "command": "./check-rows ${DATE}", "timeout": "10s"}));
    config["validation"]["rules"][0]["severity"] = json!("warn");
    sim.config(config);
    sim.advance_to(nine());
    // A lone warn rule passes at once, before any call: nothing is asked.
    assert_eq!(sim.triggers().len(), 1);
    assert!(sim.calls().is_empty(), "rules that already pass need no answer");

    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    sim.config(warehouse(
        json!({"type": "command", "command": "./check-rows ${DATE}", "timeout": "10s"}),
    ));
    sim.advance_to(nine());
    let calls = sim.calls();
    assert_eq!(calls[0].1["command"], json!("./check-rows 2026-11-22"));
    assert_eq!(
        calls[0].1["timeout"],
        json!(10),
        "a duration timeout is read as seconds"
    );
}

#[test]
fn a_failed_call_does_not_displace_an_answer_still_within_its_ttl() {
    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    sim.config(with_producer_rule(http(json!({"ttl": "30m"}))));
    sim.advance_to(nine());
    sim.answer("rows", json!({"count": 5000}), None);

    // A call fails 5 minutes on: it counts and is retried, but the answer stands.
    sim.advance(TimeDelta::minutes(5));
    sim.answer("rows", json!({}), Some("request timed out"));
    let kept = &sim.states["daily"].sensors[&format!("rows@{DAY}")];
    assert_eq!(
        (kept.data["count"].clone(), kept.error.clone(), kept.failures),
        (json!(5000), None, 1)
    );
    assert_eq!(
        sim.evaluator_due("rows"),
        Some(sim.now + TimeDelta::seconds(30)),
        "retried"
    );
    sim.sensor_scoped("daily", "upstream", json!({"status": "ready"}), Some(DAY), None, None);
    assert_eq!(sim.triggers().len(), 1, "the answer within its ttl still counts");

    // Past the ttl a failure takes the answer's place.
    let mut sim = Sim::starting_at(at("2026-11-22T08:00:00Z"));
    sim.config(warehouse(http(json!({"ttl": "30m", "every": "1h"}))));
    sim.advance_to(nine());
    sim.answer("rows", json!({"count": 10}), None);
    sim.advance(TimeDelta::minutes(31));
    sim.answer("rows", json!({}), Some("request timed out"));
    assert_eq!(sim.latest_reason(), "evaluator failed: request timed out");
}
