//! POST_RUN_BASELINE_CAPTURED / POST_RUN_PASSED / POST_RUN_WARNED / POST_RUN_FAILED /
//! POST_RUN_DRIFT /
//! POST_RUN_DRIFT_INFLIGHT / POST_RUN_SENSOR_MISSING, and DRY_RUN_DRIFT: watching a date's
//! data after its job succeeded.

use serde_json::{Map, Value};

use super::{Decider, Phase};
use crate::core::config::{Mode, PostRun};
use crate::core::events::detail::{
    Baseline, Drift, DriftAfterRun, DriftRerunAccepted, DriftRerunRejected, RerunRequest, Results, SensorsMissing,
};
use crate::core::events::EventType;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::rules::{self, Verdict};
use crate::core::timers::TimerKind;

impl Decider<'_> {
    pub(super) fn is_post_run_key(&self, sensor_key: &str) -> bool {
        self.config()
            .is_some_and(|c| c.post_run_keys().any(|k| k == sensor_key))
    }

    /// POST_RUN_BASELINE_CAPTURED: on success, the post-run sensors' current values become
    /// the baseline later readings are compared with; POST_RUN_SENSOR_MISSING is armed.
    pub(super) fn capture_baseline(&mut self, id: &ExecutionId) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        let Some(post_run) = &config.post_run else {
            return;
        };
        // `postRun: {rules: []}` watches nothing, as in the earlier design
        // (interlock internal/lambda/postrun_baseline.go, watchdog/postrun.go).
        if post_run.rules.is_empty() {
            return;
        }
        if !self.state.executions.contains_key(id) {
            return;
        }
        let readings = self.readings(id.date());
        let baseline: Map<String, Value> = config
            .post_run_keys()
            .filter_map(|k| {
                readings
                    .get(k)
                    .map(|data| (k.to_string(), Value::Object((*data).clone())))
            })
            .collect();
        if let Some(e) = self.state.executions.get_mut(id) {
            e.baseline = Some(baseline.clone());
            e.post_run_seen = false;
        }
        // As the earlier design did: nothing to compare with (no post-run sensor yet) is no
        // baseline, and no POST_RUN_SENSOR_MISSING; neither is an hourly run's (its watchdog
        // checked today's daily run only). The post-run rules still judge what comes.
        if baseline.is_empty() {
            self.notes
                .push(format!("{id}: no post-run sensor to take a baseline of"));
            return;
        }
        if id.date().hour.is_none() {
            let timeout = TimerKind::PostRunTimeout { execution: id.clone() };
            self.set_timer(timeout, self.now() + post_run.sensor_timeout);
        }
        let message = format!("post-run baseline captured ({} sensors)", baseline.len());
        self.emit(
            EventType::POST_RUN_BASELINE_CAPTURED,
            Some(id),
            message,
            Baseline { baseline },
        );
    }

    /// A post-run sensor for `date`. Returns false when no run of that date has succeeded
    /// or is re-running, so the sensor is handled like any other.
    pub(super) fn on_post_run_sensor(&mut self, sensor_key: &str, date: ExecutionDate) -> bool {
        let Some(config) = self.state.config.clone() else {
            return false;
        };
        let Some(post_run) = config.post_run.clone() else {
            return false;
        };
        let id = ExecutionId::new(config.schedule_id(), date);
        let Some(execution) = self.state.executions.get(&id) else {
            return false;
        };
        let readings = self.readings(date);
        let Some(current) = readings.get(sensor_key).map(|d| (*d).clone()) else {
            return false;
        };
        let verdict = rules::evaluate_all(Mode::All, &post_run.rules, &readings, self.moment());
        let drift = drift(execution.baseline.as_ref(), sensor_key, &current, &post_run);
        if execution.phase.is_running() {
            if let Some((b, n)) = drift {
                self.drifted_in_flight(&id, sensor_key, &post_run, b, n);
            }
            return true;
        }
        if !execution.phase.is_completed() {
            return false;
        }
        self.post_run_checked(&id, sensor_key, current, verdict);
        if let Some((b, n)) = drift {
            self.drifted(&id, sensor_key, &post_run.drift_field, b, n, post_run.drift_threshold);
        }
        true
    }

    /// POST_RUN_PASSED / POST_RUN_FAILED: the post-run checks of a completed run, on a reading
    /// of `sensor_key` (`current`), which is its own baseline if the run had none for it.
    fn post_run_checked(&mut self, id: &ExecutionId, sensor_key: &str, current: Map<String, Value>, verdict: Verdict) {
        if let Some(e) = self.state.executions.get_mut(id) {
            e.post_run_seen = true;
            // A sensor first seen after the run is its own baseline.
            let baseline = e.baseline.get_or_insert_with(Map::new);
            if !baseline.contains_key(sensor_key) {
                baseline.insert(sensor_key.into(), Value::Object(current));
            }
        }
        self.cancel_execution_timers(id, |t| matches!(t, TimerKind::PostRunTimeout { .. }));
        // Three outcomes, as a quality gate: passed, warned (a `warn` rule failed), failed.
        let (kind, message) = match (verdict.passed, verdict.warnings().is_empty()) {
            (true, true) => (EventType::POST_RUN_PASSED, "post-run checks passed".to_string()),
            (true, false) => (
                EventType::POST_RUN_WARNED,
                format!("post-run checks passed with warnings: {}", verdict.warning_text()),
            ),
            (false, _) => (
                EventType::POST_RUN_FAILED,
                format!("post-run checks failed: {}", verdict.failures()),
            ),
        };
        let info = Results {
            results: verdict.results,
        };
        self.emit(kind, Some(id), message, info);
    }

    /// POST_RUN_DRIFT_INFLIGHT: the data a successful run used moved while a run of the date
    /// is in progress.
    fn drifted_in_flight(&mut self, id: &ExecutionId, sensor_key: &str, post_run: &PostRun, before: f64, now: f64) {
        let message = format!(
            "{sensor_key}.{} moved from {before} to {now} while a run is in progress",
            post_run.drift_field
        );
        let info = Drift::new(sensor_key, &post_run.drift_field, before, now, post_run.drift_threshold);
        self.emit(EventType::POST_RUN_DRIFT_INFLIGHT, Some(id), message, info);
    }

    /// POST_RUN_DRIFT (or DRY_RUN_DRIFT): the data a successful run used has changed by more
    /// than `driftThreshold`; rerun within `maxDriftReruns`.
    fn drifted(&mut self, id: &ExecutionId, sensor_key: &str, field: &str, before: f64, now: f64, threshold: f64) {
        let Some(config) = self.config() else { return };
        let limit = config.job.max_drift_reruns;
        let dry = config.dry_run;
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        let rerun = execution.drift_reruns_used < limit;
        let info = DriftAfterRun {
            drift: Drift::new(sensor_key, field, before, now, threshold),
            rerun,
            max_drift_reruns: limit,
        };
        let kind = self.dry_or(EventType::POST_RUN_DRIFT, EventType::DRY_RUN_DRIFT);
        let outcome = match (rerun, dry) {
            (true, false) => "rerunning".to_string(),
            (true, true) => "a rerun would start".to_string(),
            (false, _) => format!("no rerun: maxDriftReruns ({limit}) is spent"),
        };
        let message = format!("{sensor_key}.{field} drifted from {before} to {now} after the run: {outcome}");
        self.emit(kind, Some(id), message, info);
        if rerun && !dry {
            self.drift_rerun(
                id,
                &format!("post-run drift: {sensor_key}.{field} moved from {before} to {now}"),
            );
        }
    }

    /// A rerun on the drift budget (`maxDriftReruns`), for data that changed after the run
    /// completed: RERUN_ACCEPTED and the date evaluated again, or RERUN_REJECTED once the
    /// budget is spent. Nothing in a dry run (its DRY_RUN_* event said what would happen).
    pub(super) fn drift_rerun(&mut self, id: &ExecutionId, reason: &str) {
        let Some(config) = self.config() else { return };
        let (limit, dry) = (config.job.max_drift_reruns, config.dry_run);
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        if dry {
            return;
        }
        let used = execution.drift_reruns_used;
        let request = RerunRequest {
            requested_by: Some("sluice".into()),
            reason: Some(reason.into()),
            force: false,
            backfill: false,
        };
        if used >= limit {
            let refusal = format!("maxDriftReruns ({limit}) is spent");
            let message = format!("rerun rejected: {refusal}");
            let info = DriftRerunRejected {
                request,
                max_drift_reruns: limit,
                rejection: refusal,
            };
            self.emit(EventType::RERUN_REJECTED, Some(id), message, info);
            return;
        }
        let info = DriftRerunAccepted {
            request,
            max_drift_reruns: limit,
            drift_reruns_used: used + 1,
        };
        let message = format!("rerun of {id} accepted ({reason}; {} of {limit})", used + 1);
        self.emit(EventType::RERUN_ACCEPTED, Some(id), message, info);
        if let Some(e) = self.state.executions.get_mut(id) {
            e.drift_reruns_used += 1;
        }
        self.restart(id);
    }

    /// POST_RUN_SENSOR_MISSING: `sensorTimeout` passed after success with no post-run sensor.
    pub(super) fn on_post_run_timeout(&mut self, id: &ExecutionId) {
        let Some(timeout) = self
            .config()
            .and_then(|c| c.post_run.as_ref())
            .map(|p| p.sensor_timeout)
        else {
            return;
        };
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        if !matches!(execution.phase, Phase::Succeeded { .. }) || execution.post_run_seen {
            return;
        }
        let keys: Vec<String> = self
            .config()
            .map(|c| c.post_run_keys().map(String::from).collect())
            .unwrap_or_default();
        let message = format!(
            "no post-run sensor ({}) within {} of the run's success",
            keys.join(", "),
            crate::core::duration::format_duration(timeout)
        );
        self.emit(
            EventType::POST_RUN_SENSOR_MISSING,
            Some(id),
            message,
            SensorsMissing { sensors: keys },
        );
    }
}

/// How `sensor_key`'s drift field moved from `baseline` to `current` (before, now), when it
/// moved by more than the threshold.
fn drift(
    baseline: Option<&Map<String, Value>>,
    sensor_key: &str,
    current: &Map<String, Value>,
    post_run: &PostRun,
) -> Option<(f64, f64)> {
    let before = baseline
        .and_then(|b| b.get(sensor_key))
        .and_then(|d| rules::field(d.as_object()?, &post_run.drift_field))
        .and_then(rules::as_number)?;
    let now = rules::field(current, &post_run.drift_field).and_then(rules::as_number)?;
    ((now - before).abs() > post_run.drift_threshold).then_some((before, now))
}
