use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{json, Map, Value};

use super::*;
use crate::core::config::{AgeBound, Comparison, Severity};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn rule(check: Check, name: &'static str) -> Rule {
    Rule {
        key: "s".into(),
        field: Some("v".into()),
        check,
        check_name: name,
        severity: Severity::Error,
    }
}

fn run(rule: &Rule, data: Option<Value>) -> RuleResult {
    let data: Option<Map<String, Value>> = data.map(|d| d.as_object().unwrap().clone());
    let sensors: BTreeMap<String, &Map<String, Value>> = data.iter().map(|d| ("s".to_string(), d)).collect();
    evaluate(rule, &sensors, now())
}

#[test]
fn numbers_compare_as_numbers_in_any_form() {
    let gte = rule(Check::Compare(Comparison::Gte, 1000.0), "gte");
    for (value, passed) in [
        (json!(1000), true),
        (json!(999.5), false),
        (json!("1000.0"), true),
        (json!(" 1e3 "), true),
        (json!("12"), false),
    ] {
        assert_eq!(run(&gte, Some(json!({"v": value}))).passed, passed, "{value}");
    }
    let lt = rule(Check::Compare(Comparison::Lt, 5.0), "lt");
    assert!(run(&lt, Some(json!({"v": 4.99}))).passed);
    assert!(!run(&lt, Some(json!({"v": 5}))).passed);
    let gt = rule(Check::Compare(Comparison::Gt, 0.0), "gt");
    let r = run(&gt, Some(json!({"v": "lots"})));
    assert_eq!(r.reason.as_deref(), Some("v is lots which is not a number"));
    let lte = rule(Check::Compare(Comparison::Lte, 100.0), "lte");
    assert!(run(&lte, Some(json!({"v": "100"}))).passed);
}

#[test]
fn equals_compares_numbers_numerically_and_the_rest_as_text() {
    let eq = |v: Value| rule(Check::Equals(v), "equals");
    assert!(run(&eq(json!("ready")), Some(json!({"v": "ready"}))).passed);
    assert!(run(&eq(json!(1000)), Some(json!({"v": "1000.0"}))).passed);
    assert!(run(&eq(json!(true)), Some(json!({"v": "true"}))).passed);
    let r = run(&eq(json!("ready")), Some(json!({"v": "running"})));
    assert_eq!(r.reason.as_deref(), Some("v is running but must equal ready"));
    assert_eq!(r.seen, Some(json!("running")));
}

#[test]
fn missing_sensors_and_fields_fail_with_a_reason() {
    let eq = rule(Check::Equals(json!("x")), "equals");
    assert_eq!(run(&eq, None).reason.as_deref(), Some("no reading of sensor \"s\" yet"));
    assert_eq!(
        run(&eq, Some(json!({"w": 1}))).reason.as_deref(),
        Some("field \"v\" is missing from sensor \"s\"")
    );
    assert!(!run(&eq, Some(json!({"v": null}))).passed);
    let exists = Rule {
        key: "s".into(),
        field: None,
        check: Check::Exists,
        check_name: "exists",
        severity: Severity::Error,
    };
    assert!(run(&exists, Some(json!({}))).passed);
    assert!(!run(&exists, None).passed);
}

#[test]
fn nested_fields_are_reachable_by_dotted_path() {
    let gte = Rule {
        field: Some("stats.rows".into()),
        ..rule(Check::Compare(Comparison::Gte, 1.0), "gte")
    };
    assert!(run(&gte, Some(json!({"stats": {"rows": 3}}))).passed);
}

#[test]
fn ages_accept_rfc3339_and_epoch_seconds_or_millis() {
    let young = rule(Check::Age(AgeBound::YoungerThan, TimeDelta::hours(2)), "age_lt");
    let old = rule(Check::Age(AgeBound::OlderThan, TimeDelta::hours(2)), "age_gt");
    let hour_ago = now() - TimeDelta::hours(1);
    let three_hours_ago = now() - TimeDelta::hours(3);
    for v in [
        json!(hour_ago.to_rfc3339()),
        json!(hour_ago.timestamp()),
        json!(hour_ago.timestamp_millis()),
        json!(hour_ago.timestamp().to_string()),
    ] {
        assert!(run(&young, Some(json!({"v": v}))).passed, "{v}");
        assert!(!run(&old, Some(json!({"v": v}))).passed, "{v}");
    }
    let r = run(&young, Some(json!({"v": three_hours_ago.to_rfc3339()})));
    assert_eq!(r.reason.as_deref(), Some("v is 3h old but must be younger than 2h"));
    assert!(run(&old, Some(json!({"v": "2026-11-22T09:00:00+00:00"}))).passed);
    let r = run(&young, Some(json!({"v": "yesterday"})));
    assert!(r.reason.unwrap().contains("not a timestamp"));
}

#[test]
fn all_and_any_combine_results() {
    let pass = Rule {
        key: "a".into(),
        field: None,
        check: Check::Exists,
        check_name: "exists",
        severity: Severity::Error,
    };
    let fail = Rule {
        key: "b".into(),
        ..pass.clone()
    };
    let data = Map::new();
    let sensors = BTreeMap::from([("a".to_string(), &data)]);
    let rules = [pass.clone(), fail.clone()];
    assert!(!evaluate_all(Mode::All, &rules, &sensors, now()).passed);
    assert!(evaluate_all(Mode::Any, &rules, &sensors, now()).passed);
    assert!(evaluate_all(Mode::All, &[], &sensors, now()).passed);
    assert!(!evaluate_all(Mode::Any, &[], &sensors, now()).passed);
    let verdict = evaluate_all(Mode::All, &rules, &sensors, now());
    assert_eq!(verdict.failures(), "b: no reading of sensor \"b\" yet");
}

#[test]
fn warn_rules_are_reported_but_never_decide() {
    let present = Rule {
        key: "a".into(),
        field: None,
        check: Check::Exists,
        check_name: "exists",
        severity: Severity::Error,
    };
    let absent_warn = Rule {
        key: "b".into(),
        severity: Severity::Warn,
        ..present.clone()
    };
    let data = Map::new();
    let sensors = BTreeMap::from([("a".to_string(), &data)]);
    for mode in [Mode::All, Mode::Any] {
        let verdict = evaluate_all(mode, &[present.clone(), absent_warn.clone()], &sensors, now());
        assert!(verdict.passed, "{mode:?}: a failing warn rule holds nothing");
        assert_eq!(verdict.failures(), "");
        assert_eq!(verdict.warning_text(), "b: no reading of sensor \"b\" yet");
        // Warn rules alone pass whatever they find.
        assert!(evaluate_all(mode, std::slice::from_ref(&absent_warn), &sensors, now()).passed);
    }
    let failing_error = Rule {
        key: "c".into(),
        ..present.clone()
    };
    let verdict = evaluate_all(Mode::All, &[failing_error, absent_warn], &sensors, now());
    assert!(!verdict.passed);
    assert_eq!(
        verdict.failures(),
        "c: no reading of sensor \"c\" yet",
        "warnings are not failures"
    );
    assert_eq!(
        serde_json::to_value(&verdict.results[1]).unwrap()["severity"],
        json!("warn")
    );
    assert!(serde_json::to_value(&verdict.results[0])
        .unwrap()
        .get("severity")
        .is_none());
}

#[test]
fn a_timestamp_in_the_future_never_satisfies_an_age_check() {
    let young = rule(Check::Age(AgeBound::YoungerThan, TimeDelta::hours(2)), "age_lt");
    let old = rule(Check::Age(AgeBound::OlderThan, TimeDelta::minutes(1)), "age_gt");
    for ahead in [TimeDelta::minutes(6), TimeDelta::hours(1), TimeDelta::days(400)] {
        let at = now() + ahead;
        for v in [
            json!(at.to_rfc3339()),
            json!(at.timestamp()),
            json!(at.timestamp_millis()),
        ] {
            let r = run(&young, Some(json!({"v": v})));
            assert!(!r.passed, "{v} is {ahead} ahead");
            assert!(r.reason.as_deref().unwrap().contains("in the future"), "{:?}", r.reason);
            assert!(!run(&old, Some(json!({"v": v}))).passed, "{v}");
        }
    }
    // Within the allowed clock skew a timestamp counts as just now: fresh, never old.
    let skewed = json!((now() + TimeDelta::minutes(4)).to_rfc3339());
    assert!(run(&young, Some(json!({"v": skewed}))).passed);
    assert!(!run(&old, Some(json!({"v": skewed}))).passed);
    // The skew is the moment's: with none allowed, a minute ahead is already untrusted.
    let strict = Moment {
        now: now(),
        max_skew: TimeDelta::zero(),
    };
    let data = json!({"v": (now() + TimeDelta::minutes(1)).to_rfc3339()});
    let data = data.as_object().unwrap();
    let sensors = BTreeMap::from([("s".to_string(), data)]);
    assert!(!evaluate(&young, &sensors, strict).passed);
}

#[test]
fn majority_needs_half_of_the_deciding_rules_rounded_up() {
    let result = |passed: bool, severity: Severity| RuleResult {
        key: "k".into(),
        check: "exists".into(),
        field: None,
        passed,
        seen: None,
        reason: None,
        severity,
    };
    let of = |passes: &[bool]| -> Vec<RuleResult> { passes.iter().map(|p| result(*p, Severity::Error)).collect() };
    assert!(decides(Mode::Majority, &of(&[true, true, false])));
    assert!(decides(Mode::Majority, &of(&[true, false])));
    assert!(!decides(Mode::Majority, &of(&[true, false, false])));
    // Warn rules do not count either way.
    let mut results = of(&[true, false, false]);
    results.push(result(true, Severity::Warn));
    results.push(result(true, Severity::Warn));
    assert!(!decides(Mode::Majority, &results));
}
