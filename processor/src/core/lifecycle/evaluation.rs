//! VALIDATION_PASSED / VALIDATION_WARNED / VALIDATION_EXHAUSTED: rules evaluated on each
//! sensor and on each interval until the window closes (`warn` rules never hold it: when the
//! `error` rules pass, the failing `warn` ones are reported just before VALIDATION_PASSED);
//! then the trigger (JOB_TRIGGERED follows its report),
//! INFRA_FAILURE when it cannot be requested, or DRY_RUN_WOULD_TRIGGER and
//! DRY_RUN_SLA_PROJECTION in a dry run.

use std::collections::BTreeMap;

use serde_json::Value;

use super::evaluators::{judge_unusable, unusable_readings};
use super::job::job_request;
use super::schedule::STALE_GRACE;
use super::{Decider, Effect, Phase, StoredSensor};
use crate::core::config::{Check, JobKind, Mode, Rule, Severity};
use crate::core::events::detail::{Reason, Results, WouldTrigger};
use crate::core::events::EventType;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::rules::{self, Verdict};
use crate::core::timers::TimerKind;

/// How long a requested trigger may go without any report before the run is stale.
pub(super) const TRIGGER_REPORT_TIMEOUT: chrono::TimeDelta = chrono::TimeDelta::minutes(15);

impl Decider<'_> {
    /// The verdict of an execution's rules: `validation.rules` in their mode, and every
    /// `dependsOn` upstream succeeded for the execution's date.
    fn verdict(&self, date: ExecutionDate) -> Option<Verdict> {
        let config = self.config()?;
        let slots = self.read_slots(date);
        let readings = (slots.iter())
            .map(|(k, sensor)| (k.to_string(), &*sensor.data))
            .collect();
        let now = self.moment();
        let mut verdict = rules::evaluate_all(config.validation.mode, &config.validation.rules, &readings, now);
        let unusable = unusable_readings(config, &slots, now.now);
        judge_unusable(&mut verdict, &unusable, config.validation.mode);
        let upstreams: Vec<Rule> = config
            .depends_on
            .iter()
            .map(|d| Rule {
                key: d.key.clone(),
                field: Some("status".into()),
                check: Check::Equals(Value::from("succeeded")),
                check_name: "equals",
                severity: Severity::Error,
            })
            .collect();
        if !upstreams.is_empty() {
            let deps = rules::evaluate_all(Mode::All, &upstreams, &readings, now);
            verdict.passed &= deps.passed;
            verdict.results.extend(deps.results);
        }
        self.name_readings_of_other_dates(&mut verdict, &slots, date);
        Some(verdict)
    }

    /// A rule failing for want of a reading when the key has one for another date says so:
    /// the earlier design read a key's latest row whatever its date, Sluice reads the
    /// execution's own (or an undated one), and a producer moving over should know which.
    fn name_readings_of_other_dates(
        &self,
        verdict: &mut Verdict,
        seen: &BTreeMap<&str, &StoredSensor>,
        date: ExecutionDate,
    ) {
        for result in verdict
            .results
            .iter_mut()
            .filter(|r| !r.passed && !seen.contains_key(r.key.as_str()))
        {
            // The key has no undated reading (`seen` would hold it): its latest is scoped.
            let latest = self.state.sensors.latest_of(&result.key);
            if let Some(other) = latest.and_then(|(_, sensor)| sensor.scope()) {
                result.reason = Some(format!(
                    "no reading of sensor {:?} for {date}; the latest is for {other} (the earlier design read a key's latest row whatever its date: publish the reading for {date}, or without a date)",
                    result.key
                ));
            }
        }
    }

    /// Evaluates an execution's rules. `on_schedule` is true at the start and on interval
    /// timers: only then is the next evaluation scheduled (sensor-driven evaluations leave
    /// the interval alone) and can the window close.
    pub(super) fn evaluate(&mut self, id: &ExecutionId, on_schedule: bool) {
        if !self.state.executions.contains_key(id) {
            return;
        }
        let Some(verdict) = self.verdict(id.date()) else {
            return;
        };
        let Some(interval) = self.config().map(|c| c.schedule.evaluation.interval) else {
            return;
        };
        let now = self.now();
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        let timer = TimerKind::Evaluate { execution: id.clone() };
        let closes = execution.window_closes_at;
        self.note_flips(id, &verdict);
        if let Some(e) = self.state.executions.get_mut(id) {
            e.last_verdict = Some(verdict.clone());
        }
        let results = Results {
            results: verdict.results.clone(),
        };
        let held = self.flapping_hold(id).filter(|_| verdict.passed);

        if let Some((until, sensor)) = &held {
            // Passing, but on a flapping sensor: look again once it has kept still long enough.
            self.notes.push(format!(
                "{id}: rules pass but sensor {sensor:?} is flapping; held until {until}"
            ));
            if now < closes {
                self.set_timer(timer, (*until).min(closes));
                return;
            }
        }
        if verdict.passed && held.is_none() {
            // Ready: nothing evaluates it again, the evaluation deadline is met, no sensor can
            // be stale for it and no evaluator need be asked.
            self.cancel_execution_timers(id, is_validation_timer);
            let warnings = verdict.warnings();
            if !warnings.is_empty() {
                let message = format!("validation passed with warnings: {}", verdict.warning_text());
                let info = Results {
                    results: warnings.into_iter().cloned().collect(),
                };
                self.emit(EventType::VALIDATION_WARNED, Some(id), message, info);
            }
            self.emit(
                EventType::VALIDATION_PASSED,
                Some(id),
                "all validation rules passed",
                results,
            );
            self.start_attempt(id);
            return;
        }
        if !on_schedule {
            return;
        }
        if now >= closes {
            self.enter(id, Phase::ValidationExhausted { at: now });
            let message = match &held {
                Some((_, sensor)) => format!("evaluation window closed while sensor {sensor:?} was flapping"),
                None => format!("evaluation window closed without passing: {}", verdict.failures()),
            };
            self.emit(EventType::VALIDATION_EXHAUSTED, Some(id), message, results);
            self.cancel_run_timers(id);
            return;
        }
        let next = (now + interval).min(closes);
        self.set_timer(timer, next);
    }

    /// Starts the next job attempt of an execution (or, in a dry run, reports it).
    pub(super) fn start_attempt(&mut self, id: &ExecutionId) {
        let now = self.now();
        let pipeline_id = self.pipeline_id;
        let Some(config) = self.state.config.clone() else {
            return;
        };
        if !self.state.executions.contains_key(id) {
            return;
        }
        if config.dry_run {
            self.would_have_triggered(id, config.job.kind);
            return;
        }
        let Some(execution) = self.state.executions.get_mut(id) else {
            return;
        };
        execution.attempt += 1;
        execution.job_handle = None;
        let run_id = execution.run_id(pipeline_id);
        let request = job_request(pipeline_id, &config, execution, &run_id)
            .map_err(|e| format!("job config does not render: {e}"));
        // Awaiting the trigger first, so that an INFRA_FAILURE names the run it refused.
        self.enter(id, Phase::AwaitingTrigger { run_id });
        match request {
            Ok(request) => {
                let request = request.made_from(now);
                // The trigger's outcome arrives as a record; if none ever does, the run is stale.
                // The executor may spend the trigger retry policy first, and a call may last
                // until its deadline (a synchronous Lambda runs its function meanwhile): the
                // watchdog never closes a run whose call may still be going.
                let retries = chrono::TimeDelta::from_std(config.job.trigger_retry.total()).unwrap_or_default();
                let reported_by = now + TRIGGER_REPORT_TIMEOUT + retries;
                let called_by = request.deadline.map(|d| d + STALE_GRACE).unwrap_or(reported_by);
                self.effects.push(Effect::TriggerJob(request));
                self.set_watchdog(id, reported_by.max(called_by));
            }
            Err(reason) => {
                let message = format!("job not triggered: {reason}");
                self.emit(
                    EventType::INFRA_FAILURE,
                    Some(id),
                    message,
                    Reason { reason: reason.clone() },
                );
                self.end_failed(id, reason);
            }
        }
    }

    /// A dry run's trigger: reported, not requested.
    fn would_have_triggered(&mut self, id: &ExecutionId, kind: JobKind) {
        let now = self.now();
        self.enter(id, Phase::WouldHaveTriggered { at: now });
        self.cancel_run_timers(id);
        let digest = self.inputs_digest(id.date());
        if let Some(e) = self.state.executions.get_mut(id) {
            e.completed_inputs = Some(digest);
        }
        let detail = WouldTrigger { job_type: kind };
        self.emit(
            EventType::DRY_RUN_WOULD_TRIGGER,
            Some(id),
            "dry run: the job would be triggered now",
            detail,
        );
        self.project_sla(id);
    }

    /// Cancels the timers that move an execution along (evaluation, poll window, watchdog),
    /// leaving SLA and post-run timers, which outlive the run.
    pub(super) fn cancel_run_timers(&mut self, id: &ExecutionId) {
        self.cancel_execution_timers(id, |t| {
            is_validation_timer(t)
                || matches!(
                    t,
                    TimerKind::JobPollWindow { .. } | TimerKind::JobStatusCheck { .. } | TimerKind::Watchdog { .. }
                )
        });
    }
}

/// The timers that serve an execution only while it validates.
fn is_validation_timer(t: &TimerKind) -> bool {
    matches!(
        t,
        TimerKind::Evaluate { .. }
            | TimerKind::EvaluationSlaWarning { .. }
            | TimerKind::EvaluationSlaBreach { .. }
            | TimerKind::StaleSensorCheck { .. }
            | TimerKind::EvaluatorDue { .. }
    )
}
