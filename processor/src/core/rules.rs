//! Readiness rules: each check against the latest reading of a sensor key.
//!
//! Numbers compare as numbers whether they arrive as ints, floats or numeric strings;
//! timestamps may be RFC 3339 strings or epoch seconds/milliseconds. A missing sensor or
//! field fails the rule with a reason, and every result says what was seen.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::config::{AgeBound, Check, Mode, Rule, Severity};
use super::duration::format_duration;

/// The result of one rule, as it appears in event details and pipeline state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleResult {
    pub key: String,
    pub check: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub passed: bool,
    /// The value the rule saw, if the sensor and field were there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seen: Option<Value>,
    /// Why it failed; absent when it passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `warn` for a rule whose failure only warns; absent for an `error`.
    #[serde(default, skip_serializing_if = "Severity::is_error")]
    pub severity: Severity,
}

/// The combined result of a rule set under ALL or ANY.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub passed: bool,
    pub results: Vec<RuleResult>,
}

impl Verdict {
    /// One line naming each failing `error` rule and why, for event messages.
    pub fn failures(&self) -> String {
        failing(self.results.iter().filter(|r| r.severity.is_error()))
    }

    /// The failing `warn` rules: what VALIDATION_WARNED and POST_RUN_WARNED report.
    pub fn warnings(&self) -> Vec<&RuleResult> {
        (self.results.iter())
            .filter(|r| !r.passed && r.severity == Severity::Warn)
            .collect()
    }

    /// One line naming each failing `warn` rule and why.
    pub fn warning_text(&self) -> String {
        failing(self.warnings().into_iter())
    }
}

fn failing<'r>(results: impl Iterator<Item = &'r RuleResult>) -> String {
    let parts: Vec<String> = results
        .filter(|r| !r.passed)
        .map(|r| format!("{}: {}", r.key, r.reason.as_deref().unwrap_or("failed")))
        .collect();
    parts.join("; ")
}

/// Reads a number from a JSON number or a numeric string.
pub fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        _ => None,
    }
}

/// Reads a timestamp: RFC 3339, or epoch seconds / milliseconds (as number or string).
pub fn as_timestamp(v: &Value) -> Option<DateTime<Utc>> {
    if let Some(s) = v.as_str() {
        if let Ok(t) = DateTime::parse_from_rfc3339(s.trim()) {
            return Some(t.with_timezone(&Utc));
        }
    }
    let n = as_number(v)?;
    // Below 1e11 a value is seconds (until the year 5138); above, milliseconds.
    let ms = if n.abs() < 1e11 { n * 1000.0 } else { n };
    DateTime::from_timestamp_millis(ms.round() as i64)
}

/// Looks a field up in sensor data: the exact key first, then a dotted path (`a.b.c`).
pub fn field<'a>(data: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(v) = data.get(name) {
        return Some(v);
    }
    let mut parts = name.split('.');
    let mut current = data.get(parts.next()?)?;
    for part in parts {
        current = current.as_object()?.get(part)?;
    }
    Some(current)
}

fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The time rules are evaluated at, and how far ahead of it a timestamp may be before it is
/// treated as a clock error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    pub now: DateTime<Utc>,
    pub max_skew: TimeDelta,
}

impl From<DateTime<Utc>> for Moment {
    fn from(now: DateTime<Utc>) -> Self {
        Moment {
            now,
            max_skew: TimeDelta::minutes(5),
        }
    }
}

/// Evaluates one rule against the latest sensor readings.
pub fn evaluate(rule: &Rule, sensors: &BTreeMap<String, &Map<String, Value>>, at: impl Into<Moment>) -> RuleResult {
    let at = at.into();
    let mut result = RuleResult {
        key: rule.key.clone(),
        check: rule.check_name.to_string(),
        field: rule.field.clone(),
        passed: false,
        seen: None,
        reason: None,
        severity: rule.severity,
    };
    let Some(data) = sensors.get(&rule.key) else {
        result.reason = Some(format!("no reading of sensor {:?} yet", rule.key));
        return result;
    };
    let failure = match (&rule.check, rule.field.as_deref()) {
        (Check::Exists, _) => None,
        (_, None) => Some("rule has no field".to_string()),
        (check, Some(name)) => match field(data, name) {
            None | Some(Value::Null) => Some(format!("field {name:?} is missing from sensor {:?}", rule.key)),
            Some(seen) => {
                result.seen = Some(seen.clone());
                check_value(check, name, seen, at)
            }
        },
    };
    result.passed = failure.is_none();
    result.reason = failure;
    result
}

/// `None` when the value satisfies the check, else why not.
fn check_value(check: &Check, name: &str, seen: &Value, moment: Moment) -> Option<String> {
    let now = moment.now;
    match check {
        Check::Exists => None,
        Check::Equals(expected) => {
            let equal = match (as_number(seen), as_number(expected)) {
                (Some(a), Some(b)) => a == b,
                _ => render(seen) == render(expected),
            };
            (!equal).then(|| format!("{name} is {} but must equal {}", render(seen), render(expected)))
        }
        Check::Compare(cmp, threshold) => match as_number(seen) {
            None => Some(format!("{name} is {} which is not a number", render(seen))),
            Some(actual) if cmp.holds(actual, *threshold) => None,
            Some(actual) => Some(format!("{name} is {actual} but must be {} {threshold}", cmp.symbol())),
        },
        Check::Size(cmp, threshold) => match seen {
            Value::Array(members) if cmp.holds(members.len() as f64, *threshold) => None,
            Value::Array(members) => Some(format!(
                "{name} has {} members but must have {} {threshold}",
                members.len(),
                cmp.symbol()
            )),
            other => Some(format!("{name} is {} which is not a list", render(other))),
        },
        Check::ContainsAll(expected) => match seen {
            Value::Array(members) => {
                let missing: Vec<String> = (expected.iter())
                    .filter(|want| !members.iter().any(|m| same_member(m, want)))
                    .map(render)
                    .collect();
                (!missing.is_empty()).then(|| {
                    let shown = missing.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
                    let more = missing.len().saturating_sub(10);
                    let more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    };
                    format!(
                        "{name} lacks {} of {} members: {shown}{more}",
                        missing.len(),
                        expected.len()
                    )
                })
            }
            other => Some(format!("{name} is {} which is not a list", render(other))),
        },
        Check::Age(bound, limit) => match as_timestamp(seen) {
            None => Some(format!(
                "{name} is {} which is not a timestamp (RFC 3339 or epoch seconds/millis)",
                render(seen)
            )),
            // A timestamp from the future is a clock error, never proof of freshness.
            Some(at) if at > now + moment.max_skew => Some(format!(
                "{name} is {} in the future (beyond the allowed clock skew of {}): not trusted",
                format_duration(at - now),
                format_duration(moment.max_skew)
            )),
            Some(at) => {
                let age = (now - at).max(TimeDelta::zero());
                let ok = match bound {
                    AgeBound::YoungerThan => age < *limit,
                    AgeBound::OlderThan => age > *limit,
                };
                let relation = if matches!(bound, AgeBound::YoungerThan) {
                    "younger"
                } else {
                    "older"
                };
                (!ok).then(|| {
                    format!(
                        "{name} is {} old but must be {relation} than {}",
                        format_duration(age),
                        format_duration(*limit)
                    )
                })
            }
        },
    }
}

/// Whether a list member is the expected one: numbers by value (`5` is `5.0`), anything
/// else as written (`"05"` is not `5`).
fn same_member(member: &Value, expected: &Value) -> bool {
    match (member, expected) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => member == expected,
    }
}

/// Evaluates a rule set: ALL needs every rule, ANY at least one (ANY of nothing fails,
/// ALL of nothing passes). Only `error` rules decide; `warn` rules are evaluated and
/// reported, and a set of `warn` rules alone passes.
pub fn evaluate_all(
    mode: Mode,
    rules: &[Rule],
    sensors: &BTreeMap<String, &Map<String, Value>>,
    at: impl Into<Moment>,
) -> Verdict {
    let at = at.into();
    let results: Vec<RuleResult> = rules.iter().map(|r| evaluate(r, sensors, at)).collect();
    Verdict {
        passed: decides(mode, &results),
        results,
    }
}

/// Whether rule results pass under `mode`: only `error` rules decide, and a set of `warn`
/// rules alone passes.
pub fn decides(mode: Mode, results: &[RuleResult]) -> bool {
    let mut deciding = results.iter().filter(|r| r.severity.is_error()).peekable();
    match mode {
        _ if deciding.peek().is_none() && !results.is_empty() => true,
        Mode::All => deciding.all(|r| r.passed),
        Mode::Any => deciding.any(|r| r.passed),
        Mode::Majority => {
            let (passed, total) = deciding.fold((0, 0), |(p, t), r| (p + usize::from(r.passed), t + 1));
            passed * 2 >= total
        }
    }
}

#[cfg(test)]
mod tests;
