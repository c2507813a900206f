//! SENSOR_FLAPPING / UNKNOWN_SENSOR / STALE_SENSOR_WARNING: sensors that misbehave in ways
//! no rule catches (anomalies.*).
//!
//! - Flapping: a rule's result for one key changes more than `changes` times within
//!   `window` while the execution validates; reported once per key and execution, with the
//!   values seen. With `holdFor`, passing rules do not trigger until the flapping key's
//!   rules have kept their result that long.
//! - Unknown: a sensor key no trigger, rule, dependency or post-run rule reads (a typo, a
//!   phantom producer) and `expectedSensors` does not name; once per key and day, naming the
//!   nearest known key.
//! - Stale: a rule's sensor silent for more than twice its usual interval (the median of
//!   its last intervals, learned from its arrivals) while the execution validates; once per
//!   key and execution, before the window closes.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Decider, StoredSensor};
use crate::core::config::PipelineConfig;
use crate::core::duration::format_duration;
use crate::core::events::detail::{Flapping, StaleSensor, UnknownSensor};
use crate::core::events::EventType;
use crate::core::execution::ExecutionId;
use crate::core::rules::Verdict;
use crate::core::timers::TimerKind;
use crate::core::wildcard::wildcard;

/// How many arrival intervals a sensor reading keeps: its cadence.
pub const CADENCE_SAMPLES: usize = 10;
/// How many intervals a cadence needs before a sensor can be called stale.
const MIN_CADENCE_SAMPLES: usize = 5;
/// Stale after this many usual intervals of silence.
const STALE_FACTOR: i32 = 2;
/// The most result changes an execution remembers.
const MAX_FLIPS: usize = 64;
/// How many unknown keys are remembered (each with the day it was last reported).
const REMEMBERED_UNKNOWN: usize = 64;

/// One change of a rule's result during an execution's validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Flip {
    pub key: String,
    pub at: DateTime<Utc>,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<Value>,
}

impl StoredSensor {
    /// The reading that replaces `previous` (the same slot's, else the key's latest in
    /// another slot) carries its cadence on, with the interval since it.
    pub(super) fn continue_cadence(&mut self, previous: Option<&StoredSensor>) {
        let Some(previous) = previous else { return };
        self.intervals = previous.intervals.clone();
        let interval = (self.received_at - previous.received_at).num_milliseconds();
        if interval > 0 {
            self.intervals.push_back(interval);
        }
        while self.intervals.len() > CADENCE_SAMPLES {
            self.intervals.pop_front();
        }
    }

    /// When this reading has been silent for [`STALE_FACTOR`] usual intervals, once its
    /// cadence is known.
    fn stale_at(&self) -> Option<(DateTime<Utc>, TimeDelta)> {
        if self.intervals.len() < MIN_CADENCE_SAMPLES {
            return None;
        }
        let mut intervals: Vec<i64> = self.intervals.iter().copied().collect();
        intervals.sort_unstable();
        let usual = TimeDelta::milliseconds(intervals[intervals.len() / 2]);
        Some((self.received_at + usual * STALE_FACTOR, usual))
    }
}

impl Decider<'_> {
    /// UNKNOWN_SENSOR for a reading of `key`, which nothing of `config` reads.
    pub(super) fn check_unknown(&mut self, config: &PipelineConfig, key: &str) {
        if !config.anomalies.unknown_sensors {
            return;
        }
        // Every sensor comes through here: the common case allocates nothing.
        if config.input_keys().chain(config.post_run_keys()).any(|k| k == key) {
            return;
        }
        if config.anomalies.expected_sensors.iter().any(|p| wildcard(p, key)) {
            return;
        }
        let mut known: Vec<&str> = config.input_keys().chain(config.post_run_keys()).collect();
        known.sort_unstable();
        known.dedup();
        let today = self.now().with_timezone(&config.schedule.timezone).date_naive();
        if self.state.unknown_sensors.get(key) == Some(&today) {
            return;
        }
        remember_unknown(&mut self.state.unknown_sensors, key, today);
        let nearest = nearest_key(key, &known);
        let hint = nearest.map(|k| format!(" (did you mean {k:?}?)")).unwrap_or_default();
        let message = format!(
            "sensor {key:?} is read by no trigger, rule, dependency or post-run rule of {}{hint}",
            self.pipeline_id
        );
        let info = UnknownSensor {
            key: key.into(),
            known_keys: known.iter().map(|k| k.to_string()).collect(),
            did_you_mean: nearest.map(String::from),
        };
        self.emit(EventType::UNKNOWN_SENSOR, None, message, info);
    }

    /// Notes which rule results changed since the execution's last verdict; SENSOR_FLAPPING
    /// when a key's changed more than `changes` times within `window`.
    pub(super) fn note_flips(&mut self, id: &ExecutionId, verdict: &Verdict) {
        let Some(flapping) = self.config().and_then(|c| c.anomalies.flapping) else {
            return;
        };
        let now = self.now();
        let Some(execution) = self.state.executions.get_mut(id) else {
            return;
        };
        let Some(previous) = execution.last_verdict.as_ref() else {
            return;
        };
        let changed: Vec<Flip> = verdict
            .results
            .iter()
            .filter(|r| {
                previous
                    .results
                    .iter()
                    .any(|p| (&p.key, &p.check, &p.field) == (&r.key, &r.check, &r.field) && p.passed != r.passed)
            })
            .map(|r| Flip {
                key: r.key.clone(),
                at: now,
                passed: r.passed,
                seen: r.seen.clone(),
            })
            .collect();
        if changed.is_empty() {
            return;
        }
        execution.flips.extend(changed.iter().cloned());
        execution.flips.retain(|f| f.at > now - flapping.window);
        let excess = execution.flips.len().saturating_sub(MAX_FLIPS);
        execution.flips.drain(..excess);
        let mut newly = Vec::new();
        for flip in &changed {
            let within: Vec<&Flip> = execution.flips.iter().filter(|f| f.key == flip.key).collect();
            if within.len() > flapping.changes as usize && !execution.flapping.contains(&flip.key) {
                newly.push((flip.key.clone(), within.into_iter().cloned().collect::<Vec<_>>()));
            }
        }
        for (sensor, flips) in newly {
            if let Some(e) = self.state.executions.get_mut(id) {
                e.flapping.push(sensor.clone());
            }
            let message = format!(
                "sensor {sensor:?} flapped: its rules' result changed {} times within {}",
                flips.len(),
                format_duration(flapping.window)
            );
            let info = Flapping {
                key: sensor,
                changes: flips.len(),
                window_seconds: flapping.window.num_seconds(),
                values: flips,
                hold_for_seconds: flapping.hold_for.map(|h| h.num_seconds()),
            };
            self.emit(EventType::SENSOR_FLAPPING, Some(id), message, info);
        }
    }

    /// Until when a flapping sensor holds the trigger back (`anomalies.flapping.holdFor`),
    /// and which: the last change of any id reported flapping, plus `holdFor`.
    pub(super) fn flapping_hold(&self, id: &ExecutionId) -> Option<(DateTime<Utc>, String)> {
        let hold = self.config()?.anomalies.flapping?.hold_for?;
        let execution = self.state.executions.get(id)?;
        (execution.flips.iter())
            .filter(|f| execution.flapping.contains(&f.key))
            .map(|f| (f.at + hold, f.key.clone()))
            .max()
            .filter(|(until, _)| *until > self.now())
    }

    /// STALE_SENSOR_WARNING for the execution `id`'s rule sensors that overstayed their
    /// usual interval; arms the check for the next one that would.
    pub(super) fn check_stale(&mut self, id: &ExecutionId) {
        let timer = TimerKind::StaleSensorCheck { execution: id.clone() };
        let Some(config) = self.state.config.clone().filter(|c| c.anomalies.stale_sensors) else {
            return;
        };
        let Some(execution) = self.validating(id) else {
            self.cancel_timer(timer);
            return;
        };
        let (closes, warned) = (execution.window_closes_at, execution.stale.clone());
        let now = self.now();
        let slots = self.read_slots(id.date());
        let mut due: Vec<(String, DateTime<Utc>, TimeDelta, DateTime<Utc>)> = Vec::new();
        for rule in &config.validation.rules {
            if warned.contains(&rule.key) || due.iter().any(|(k, ..)| *k == rule.key) {
                continue;
            }
            if let Some((at, usual)) = slots.get(rule.key.as_str()).and_then(|s| s.stale_at()) {
                let last = slots[rule.key.as_str()].received_at;
                due.push((rule.key.clone(), at, usual, last));
            }
        }
        for (sensor, _, usual, last) in due.iter().filter(|(_, at, ..)| *at <= now) {
            if let Some(e) = self.state.executions.get_mut(id) {
                e.stale.push(sensor.clone());
            }
            let message = format!(
                "sensor {sensor:?} has not been updated for {} (it usually is every {}); the evaluation window closes at {}",
                format_duration(now - *last),
                format_duration(*usual),
                closes.to_rfc3339()
            );
            let info = StaleSensor {
                key: sensor.clone(),
                last_update: *last,
                silent_seconds: seconds(now - *last),
                usual_interval_seconds: seconds(*usual),
                window_closes_at: closes,
            };
            self.emit(EventType::STALE_SENSOR_WARNING, Some(id), message, info);
        }
        match due
            .iter()
            .map(|(_, at, ..)| *at)
            .filter(|at| *at > now && *at < closes)
            .min()
        {
            Some(at) => self.set_timer(timer, at),
            None => self.cancel_timer(timer),
        }
    }
}

/// A duration in seconds, to the millisecond.
fn seconds(d: TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}

/// Remembers that `key` was reported on `day`, forgetting the longest-unreported keys
/// beyond [`REMEMBERED_UNKNOWN`].
fn remember_unknown(reported: &mut BTreeMap<String, NaiveDate>, key: &str, day: NaiveDate) {
    reported.insert(key.to_string(), day);
    while reported.len() > REMEMBERED_UNKNOWN {
        let oldest = (reported.iter())
            .min_by_key(|(k, d)| (**d, (*k).clone()))
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => reported.remove(&k),
            None => break,
        };
    }
}

/// The known key `key` is most likely a misspelling of: within a third of its length in
/// edits (at least two).
fn nearest_key<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let most = (key.chars().count() / 3).max(2);
    (known.iter())
        .map(|k| (strsim::levenshtein(key, k), *k))
        .filter(|(distance, _)| *distance <= most)
        .min()
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_known_key_is_a_likely_misspelling_or_none() {
        let known = ["row-count", "upstream", "upstream:silver"];
        assert_eq!(nearest_key("row_count", &known), Some("row-count"));
        assert_eq!(nearest_key("upstrem", &known), Some("upstream"));
        assert_eq!(nearest_key("latency", &known), None);
    }

    #[test]
    fn unknown_keys_are_remembered_up_to_a_bound_the_longest_unreported_going_first() {
        let day = |d| NaiveDate::from_ymd_opt(2026, 11, d).unwrap();
        let mut reported = BTreeMap::new();
        remember_unknown(&mut reported, "old", day(1));
        for i in 0..REMEMBERED_UNKNOWN {
            remember_unknown(&mut reported, &format!("k{i}"), day(2));
        }
        assert_eq!(reported.len(), REMEMBERED_UNKNOWN);
        assert!(!reported.contains_key("old"));
    }

    #[test]
    fn a_cadence_is_carried_on_and_bounded_and_needs_five_intervals() {
        let t = |s| DateTime::from_timestamp(s, 0).unwrap();
        let reading = |at| StoredSensor {
            received_at: t(at),
            ..Default::default()
        };
        let mut last = reading(0);
        for i in 1..=4 {
            let mut next = reading(i * 60);
            next.continue_cadence(Some(&last));
            last = next;
        }
        assert_eq!(last.stale_at(), None, "four intervals are not a cadence yet");
        for i in 5..=20 {
            let mut next = reading(i * 60 + if i % 2 == 0 { 30 } else { 0 });
            next.continue_cadence(Some(&last));
            last = next;
        }
        assert_eq!(last.intervals.len(), CADENCE_SAMPLES);
        let (at, usual) = last.stale_at().unwrap();
        assert_eq!(usual, TimeDelta::seconds(90), "the median of 30 s and 90 s gaps");
        assert_eq!(at, last.received_at + TimeDelta::seconds(180));
    }
}
