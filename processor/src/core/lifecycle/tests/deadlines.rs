//! The earlier AWS variant's deadlines on a simulated clock: EVALUATION_SLA_WARNING,
//! EVALUATION_SLA_BREACH and `validationTimeout` (where VALIDATION_EXHAUSTED comes).

use chrono::TimeDelta;
use serde_json::{json, Value};

use super::{merge, pipeline, t0, Sim};
use crate::core::events::EventType::*;
use crate::core::timers::TimerKind;

/// `gold` (rules: `upstream` ready and `row-count` >= 1000; a 1-hour window, UTC) with
/// `sla` patched in; its trigger arrives at t0 (08:00Z), with no row count.
fn started(sla: Value) -> Sim {
    let mut config = pipeline(0);
    merge(&mut config, json!({"sla": sla}));
    let mut sim = Sim::new();
    sim.config(config);
    sim.sensor("gold", "upstream", json!({"status": "ready"}));
    sim
}

fn at(minutes: i64) -> chrono::DateTime<chrono::Utc> {
    t0() + TimeDelta::minutes(minutes)
}

#[test]
fn evaluation_sla_warning_and_evaluation_sla_breach_while_the_rules_still_fail() {
    let mut sim = started(json!({"evaluationDeadline": "+30m", "atRiskLeadTime": "10m"}));
    sim.advance_to(at(61));
    let kinds: Vec<_> = sim
        .types()
        .into_iter()
        .filter(|k| matches!(k, EVALUATION_SLA_WARNING | EVALUATION_SLA_BREACH | VALIDATION_EXHAUSTED))
        .collect();
    assert_eq!(
        kinds,
        [EVALUATION_SLA_WARNING, EVALUATION_SLA_BREACH, VALIDATION_EXHAUSTED]
    );
    let warning = sim.of(EVALUATION_SLA_WARNING)[0];
    assert_eq!(warning.timestamp, at(20));
    let breach = sim.of(EVALUATION_SLA_BREACH)[0];
    assert_eq!(breach.timestamp, at(30));
    assert_eq!(breach.detail["deadline"], json!(at(30)));
    assert!(
        breach.message.contains("no reading of sensor \"row-count\""),
        "{}",
        breach.message
    );
    assert_eq!(
        sim.of(VALIDATION_EXHAUSTED)[0].timestamp,
        at(60),
        "alerts only: evaluation went on"
    );
    sim.assert_timers_agree("gold");
}

#[test]
fn evaluation_sla_breach_is_not_reported_once_the_rules_passed() {
    let mut sim = started(json!({"evaluationDeadline": "+30m", "atRiskLeadTime": "10m"}));
    sim.advance_to(at(5));
    sim.sensor("gold", "row-count", json!({"count": 2000}));
    assert_eq!(sim.of(VALIDATION_PASSED).len(), 1);
    assert!(!sim.timers.iter().any(|t| matches!(
        t.kind,
        TimerKind::EvaluationSlaWarning { .. } | TimerKind::EvaluationSlaBreach { .. }
    )));
    sim.advance_to(at(90));
    assert!(sim.of(EVALUATION_SLA_WARNING).is_empty() && sim.of(EVALUATION_SLA_BREACH).is_empty());
}

#[test]
fn evaluation_sla_breach_at_a_time_of_day_on_the_execution_date() {
    let mut sim = started(json!({"evaluationDeadline": "08:45", "deadlineDay": "dataDate"}));
    sim.advance_to(at(50));
    assert_eq!(sim.of(EVALUATION_SLA_BREACH).len(), 1);
    assert_eq!(sim.of(EVALUATION_SLA_BREACH)[0].timestamp, at(45));
    assert!(
        sim.of(EVALUATION_SLA_WARNING).is_empty(),
        "no atRiskLeadTime, no warning"
    );
}

#[test]
fn validation_exhausted_at_the_validation_timeout_when_it_comes_before_the_window_closes() {
    let mut sim = started(json!({"validationTimeout": "+15m"}));
    sim.advance_to(at(61));
    assert_eq!(sim.of(VALIDATION_EXHAUSTED).len(), 1);
    assert_eq!(sim.of(VALIDATION_EXHAUSTED)[0].timestamp, at(15));
    // A timeout after the window's end changes nothing.
    let mut sim = started(json!({"validationTimeout": "+2h"}));
    sim.advance_to(at(121));
    assert_eq!(sim.of(VALIDATION_EXHAUSTED)[0].timestamp, at(60));
}
