//! JOB_TRIGGERED / JOB_COMPLETED / JOB_FAILED / JOB_TIMEOUT / RETRY_EXHAUSTED /
//! JOB_POLL_EXHAUSTED / JOB_STATUS_UNKNOWN / INFRA_FAILURE / STALE_RUN, and in a dry run
//! DRY_RUN_COMPLETED / DRY_RUN_WOULD_RETRY / DRY_RUN_RETRY_EXHAUSTED: reports on
//! `sluice.jobs` move a run forward; status checks are timers; the poll window and the
//! watchdog make sure no run is left hanging.
//!
//! A status check that could not ask (the job system's status API down, throttling, a
//! refused question) is never the job's outcome: the job may still be running, and ending
//! the run would let the next trigger start a second copy beside it. As Interlock's
//! `checkjob.go` kept polling, the checks go on, backing off, until the job answers or the
//! poll window closes (JOB_POLL_EXHAUSTED, never retried).

use chrono::TimeDelta;
use sha2::{Digest, Sha256};

use super::schedule::STALE_GRACE;
use super::{Decider, Effect, Execution, Phase, StatusCheck, TriggerRequest, MAX_INFRA_RESTARTS, MAX_TRIGGER_RELEASES};
use crate::core::config::{JobConfig, JobKind, PipelineConfig, RenderError};
use crate::core::events::detail::{
    DryRunCompleted, DryRunRetry, JobFailed, JobInfraFailure, PollExhausted, Report, RetryBudget, RetryExhausted,
    StaleRun, StatusUnknown,
};
use crate::core::events::{Detail, EventType};
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::records::{FailureCategory, JobReport, JobStatus, Rejection};
use crate::core::template::{render_run, RunVariables};
use crate::core::timers::TimerKind;

impl Decider<'_> {
    pub(super) fn on_job(&mut self, record: &JobReport) {
        let id = &record.execution;
        let Some(execution) = self.state.executions.get(id) else {
            let reason = format!("no execution {id} of pipeline {} to report on", self.pipeline_id);
            self.reject(&format!("job report {}", record.run_id), &reason, Rejection::Refused);
            return;
        };
        if self.config().is_some_and(|c| c.dry_run) {
            self.observe_dry_run_job(id, record);
            return;
        }
        let ended = matches!(
            record.status,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Timeout
        );
        if ended && execution.unreported_run.as_deref() == Some(record.run_id.as_str()) {
            self.report_after_end(id, record);
            return;
        }
        if execution.phase.run_id() != Some(&record.run_id) {
            // An earlier attempt's late report, or a re-delivery after the run ended.
            self.notes.push(format!(
                "job report for run {} ignored: execution {id} is {}",
                record.run_id,
                execution.phase.name()
            ));
            return;
        }
        let triggering = matches!(execution.phase, Phase::AwaitingTrigger { .. });
        if record.status == JobStatus::Unknown {
            match triggering {
                true => self
                    .notes
                    .push(format!("run {}: a status check before its start", record.run_id)),
                false => self.status_unknown(id, record),
            }
            return;
        }
        if !matches!(record.status, JobStatus::Released | JobStatus::Calling) {
            self.status_answered(id);
        }
        let info = report_of(record);
        if let Some(handle) = record.metadata.as_ref().and_then(|m| m.get("handle")) {
            if let Some(e) = self.state.executions.get_mut(id) {
                e.job_handle = Some(handle.clone());
            }
        }
        match record.status {
            JobStatus::Running if triggering => self.job_started(id, info),
            JobStatus::Running => self.notes.push(format!("run {} still running", record.run_id)),
            // The runtime acts on it (the trigger may be requested again); the run is as it was.
            JobStatus::Released => self.notes.push(format!(
                "run {}: an executor that lost its partition let its trigger go",
                record.run_id
            )),
            // The runtime acts on it (a new owner knows the call may have begun).
            JobStatus::Calling => self
                .notes
                .push(format!("run {}: its trigger's call begins", record.run_id)),
            JobStatus::Failed if record.failure_category == Some(FailureCategory::Infra) => {
                self.infra_failure(id, record, info)
            }
            JobStatus::Succeeded => {
                if triggering {
                    self.job_started(id, info.clone());
                }
                self.job_succeeded(id, record, info);
            }
            JobStatus::Failed | JobStatus::Timeout => {
                // The trigger itself failed: the call answered the failure (a synchronous
                // job), or the command the trigger runs ended so.
                let command = self.config().is_some_and(|c| c.job.config.kind() == JobKind::Command);
                self.job_failed(id, record, info, triggering || command)
            }
            JobStatus::Unknown => unreachable!("handled above"),
        }
    }

    /// JOB_STATUS_UNKNOWN: a status check of the running job could not ask its job system,
    /// its own retries spent, or the question was refused (PERMANENT: permissions, a run the
    /// target no longer knows). The run goes on; the next check backs off. Told once per run
    /// (a flapping status API does not repeat it), and again when the target refuses the
    /// question (a person must act).
    fn status_unknown(&mut self, id: &ExecutionId, record: &JobReport) {
        let now = self.now();
        let Some(interval) = self.config().map(|c| c.job.poll_interval) else {
            return;
        };
        let Some(e) = self.state.executions.get_mut(id) else {
            return;
        };
        let category = record.failure_category.unwrap_or(FailureCategory::Infra);
        e.unanswered_checks = e.unanswered_checks.saturating_add(1);
        let failures = e.unanswered_checks;
        let tell = match e.unknown_told {
            None => true,
            Some(told) => told != category && category == FailureCategory::Permanent,
        };
        if tell {
            e.unknown_told = Some(category);
        }
        let next_check = now + status_check_backoff(interval, failures);
        let check = TimerKind::JobStatusCheck {
            execution: id.clone(),
            run_id: record.run_id.clone(),
        };
        self.set_timer(check, next_check);
        let reason = record
            .message
            .clone()
            .unwrap_or_else(|| "the job system did not answer".into());
        if !tell {
            self.notes.push(format!(
                "run {}: status check {failures} in a row unanswered ({reason}); next at {}",
                record.run_id,
                next_check.to_rfc3339()
            ));
            return;
        }
        let refused = category == FailureCategory::Permanent;
        let info = StatusUnknown {
            report: report_of(record),
            failure_category: category,
            unanswered_checks: failures,
            next_check_at: next_check,
            action_needed: refused,
        };
        let message = match refused {
            true => format!(
                "the job system refused the status check of run {}: {reason}; the run goes on (the job may still be running) and is checked again until its poll window closes",
                record.run_id
            ),
            false => format!(
                "the status of run {} could not be checked: {reason}; the run goes on (the job may still be running) and is checked again, backing off, until its poll window closes",
                record.run_id
            ),
        };
        self.emit(EventType::JOB_STATUS_UNKNOWN, Some(id), message, info);
    }

    /// A report answered how the run is doing: a streak of unanswered checks ends.
    fn status_answered(&mut self, id: &ExecutionId) {
        if let Some(e) = self.state.executions.get_mut(id) {
            if e.unanswered_checks > 0 {
                let n = e.unanswered_checks;
                self.notes
                    .push(format!("the job system answers again after {n} unanswered check(s)"));
            }
            e.unanswered_checks = 0;
        }
    }

    /// JOB_TRIGGERED: the job runs; its poll window starts.
    fn job_started(&mut self, id: &ExecutionId, info: Report) {
        let now = self.now();
        let Some(poll_window) = self.config().map(|c| c.job.poll_window) else {
            return;
        };
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        let Some(run_id) = execution.phase.run_id().cloned() else {
            return;
        };
        let message = format!("job started (attempt {})", execution.attempt);
        let poll = TimerKind::JobPollWindow {
            execution: id.clone(),
            run_id: run_id.clone(),
        };
        let check = execution.job_handle.is_some().then(|| TimerKind::JobStatusCheck {
            execution: id.clone(),
            run_id: run_id.clone(),
        });
        self.enter(id, Phase::AwaitingJob { run_id });
        if let Some(e) = self.state.executions.get_mut(id) {
            e.first_triggered_at.get_or_insert(now);
            e.unanswered_checks = 0;
            e.unknown_told = None;
        }
        self.set_timer(poll, now + poll_window);
        // A trigger that answered with a handle is watched by status checks; one without
        // (command, kafka, a runner that reports itself) reports on its own.
        if let (Some(check), Some(interval)) = (check, self.config().map(|c| c.job.poll_interval)) {
            self.set_timer(check, now + interval);
        }
        self.set_watchdog(id, now + poll_window + STALE_GRACE);
        self.emit(EventType::JOB_TRIGGERED, Some(id), message, info);
        self.forecast_sla(id);
    }

    /// JOB_COMPLETED, then everything a success sets off: SLA_MET, the post-run baseline and
    /// the downstream pipelines' dependency sensors.
    fn job_succeeded(&mut self, id: &ExecutionId, record: &JobReport, info: Report) {
        let now = self.now();
        if !self.state.executions.contains_key(id) {
            return;
        }
        let digest = self.inputs_digest(id.date());
        self.enter(id, Phase::Succeeded { at: now });
        if let Some(e) = self.state.executions.get_mut(id) {
            e.completed_inputs = Some(digest);
            e.late_data_told = false;
        }
        self.cancel_run_timers(id);
        let message = record.message.clone().unwrap_or_else(|| "job succeeded".into());
        self.emit_for_run(EventType::JOB_COMPLETED, id, &record.run_id, message, info);
        self.record_run(id);
        self.sla_on_completion(id);
        self.capture_baseline(id);
        self.notify_dependents(id, &record.run_id);
    }

    /// Emits an event about a run whose execution may already have left the phase that
    /// names the run id (it just ended), so the id is set explicitly.
    fn emit_for_run(
        &mut self,
        kind: EventType,
        id: &ExecutionId,
        run_id: &str,
        message: String,
        info: impl Into<Detail>,
    ) {
        self.emit(kind, Some(id), message, info);
        if let Some(event) = self.events.last_mut() {
            event.run_id = Some(run_id.into());
        }
    }

    /// JOB_FAILED / JOB_TIMEOUT, and RETRY_EXHAUSTED once the budget is spent. A trigger
    /// that kept failing (`trigger_failed`) then releases a sensor-started date as Interlock
    /// released its trigger lock: the next trigger sensor that holds starts it again, at most
    /// [`MAX_TRIGGER_RELEASES`] times. The job has ended (the function answered, the command
    /// exited), so nothing runs beside a new attempt.
    fn job_failed(&mut self, id: &ExecutionId, record: &JobReport, report: Report, trigger_failed: bool) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        let Some(execution) = self.state.executions.get_mut(id) else {
            return;
        };
        let category = failure_category(record);
        let (budget, limit, retry, spent) = spend_retry(&config, category, execution);
        let attempt = execution.attempt;
        let kind = if record.status == JobStatus::Timeout {
            EventType::JOB_TIMEOUT
        } else {
            EventType::JOB_FAILED
        };
        let reason = record
            .message
            .clone()
            .unwrap_or_else(|| format!("job reported {}", record.status.as_str()));
        if !retry {
            self.end_failed(id, reason.clone());
        }
        let info = JobFailed {
            report,
            failure_category: category,
            will_retry: retry,
        };
        let message = match retry {
            true => format!("attempt {attempt} failed: {reason}; retried once the rules pass again"),
            false => format!("attempt {attempt} failed: {reason}"),
        };
        self.emit_for_run(kind, id, &record.run_id, message, info);
        if retry {
            // As the earlier design's retry restarted at evaluation: the next attempt starts
            // only once the rules pass on the sensors as they are now, in a fresh window
            // (VALIDATION_PASSED again; VALIDATION_EXHAUSTED if they never do).
            self.enter(id, Phase::AwaitingRules);
            self.begin_window(id);
        } else {
            let released = if trigger_failed { self.release_date(id) } else { None };
            let detail = RetryExhausted {
                budget,
                limit,
                used: spent,
                restart_on_trigger: released.is_some(),
                trigger_releases: released,
            };
            let mut message = format!("no retries left: {budget} ({limit}) is spent");
            if let Some(n) = released {
                message.push_str(&format!(
                    "; the trigger failed, so the date is released: the next trigger sensor starts it again (release {n} of {MAX_TRIGGER_RELEASES})"
                ));
            }
            self.emit_for_run(EventType::RETRY_EXHAUSTED, id, &record.run_id, message, detail);
        }
    }

    /// A status check is due: ask again (the effect), and arm the next check first, so a
    /// check whose answer is lost (a crash, a dropped report) is simply asked again.
    pub(super) fn on_status_check_due(&mut self, id: &ExecutionId, run_id: &str) {
        let now = self.now();
        let Some(config) = self.state.config.clone() else {
            return;
        };
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        let (Phase::AwaitingJob { run_id: running }, Some(handle)) = (&execution.phase, &execution.job_handle) else {
            self.notes.push(format!("status check of {run_id} has nothing to do"));
            return;
        };
        if running != run_id {
            self.notes
                .push(format!("status check of {run_id} is for an earlier run"));
            return;
        }
        let Ok(request) = job_request(self.pipeline_id, &config, execution, run_id) else {
            // The trigger rendered this config; a config changed since is checked on apply.
            self.notes.push(format!("job config of {run_id} no longer renders"));
            return;
        };
        let handle = handle.clone();
        let next = TimerKind::JobStatusCheck {
            execution: id.clone(),
            run_id: run_id.into(),
        };
        self.set_timer(next, now + config.job.poll_interval);
        self.effects.push(Effect::CheckJob(StatusCheck { request, handle }));
    }

    /// INFRA_FAILURE: the target could not be reached or asked and the executor's retries
    /// are spent. The run ends cleanly; the job's own retries are not for outages. As the
    /// earlier design released its trigger lock, the date is not closed: the next trigger
    /// sensor that holds starts it again, up to [`MAX_INFRA_RESTARTS`] times.
    fn infra_failure(&mut self, id: &ExecutionId, record: &JobReport, report: Report) {
        let reason = record
            .message
            .clone()
            .unwrap_or_else(|| "the job target could not be reached".into());
        self.end_failed(id, reason.clone());
        let sensor_started = self.config().is_some_and(|c| c.schedule.sensor_started());
        let Some(e) = self.state.executions.get_mut(id) else {
            return;
        };
        e.infra_failures += 1;
        e.restart_on_trigger = sensor_started && e.infra_failures <= MAX_INFRA_RESTARTS;
        let info = JobInfraFailure {
            report,
            failure_category: FailureCategory::Infra,
            restart_on_trigger: e.restart_on_trigger,
            infra_failures: e.infra_failures,
        };
        self.emit_for_run(EventType::INFRA_FAILURE, id, &record.run_id, reason, info);
    }

    /// Releases a sensor-started date whose trigger kept failing for its next trigger
    /// sensor; how many releases that makes, or `None` when it stays closed (a cron
    /// pipeline, or [`MAX_TRIGGER_RELEASES`] reached).
    fn release_date(&mut self, id: &ExecutionId) -> Option<u32> {
        let sensor_started = self.config().is_some_and(|c| c.schedule.sensor_started());
        let e = self.state.executions.get_mut(id)?;
        if !sensor_started || e.trigger_releases >= MAX_TRIGGER_RELEASES {
            return None;
        }
        e.trigger_releases += 1;
        e.restart_on_trigger = true;
        Some(e.trigger_releases)
    }

    /// Ends an execution as failed: nothing moves it along any more.
    pub(super) fn end_failed(&mut self, id: &ExecutionId, reason: String) {
        let at = self.now();
        self.enter(id, Phase::Failed { at, reason });
        self.cancel_run_timers(id);
    }

    /// JOB_POLL_EXHAUSTED: the job ran for its whole poll window without an outcome. As in
    /// the earlier design, the run ends there, never retried: the job may still be running,
    /// and a second attempt would run beside it. Its report, if one comes later, is told
    /// (JOB_REPORT_AFTER_END). With `job.retryAfterPollWindow` the job is watched on instead,
    /// and its own end decides (a failure may then spend `maxRetries`); one without status
    /// checks cannot be watched, and ends as without the option.
    pub(super) fn on_poll_window_closed(&mut self, id: &ExecutionId, run_id: &str) {
        let now = self.now();
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        if execution.phase != (Phase::AwaitingJob { run_id: run_id.into() }) {
            self.notes
                .push(format!("poll window of {run_id} closed after the run ended"));
            return;
        }
        let watched = execution.job_handle.is_some();
        let Some(job) = self.config().map(|c| c.job.clone()) else {
            return;
        };
        let window = job.poll_window.num_seconds();
        let watch_on = job.retry_after_poll_window && watched;
        let info = PollExhausted {
            poll_window_seconds: window,
            will_watch_on: watch_on,
        };
        if watch_on {
            let message = format!(
                "no outcome for run {run_id} within the job poll window ({window}s): watching it until it ends (retryAfterPollWindow)"
            );
            self.emit_for_run(EventType::JOB_POLL_EXHAUSTED, id, run_id, message, info.clone());
            // Another window for the watchdog; the status checks go on.
            self.set_watchdog(id, now + job.poll_window + STALE_GRACE);
            return;
        }
        let message = format!(
            "no outcome for run {run_id} within the job poll window ({window}s): the run ends, not retried (the job may still be running)"
        );
        self.end_failed(id, message.clone());
        if let Some(e) = self.state.executions.get_mut(id) {
            e.unreported_run = Some(run_id.to_string());
        }
        self.emit_for_run(EventType::JOB_POLL_EXHAUSTED, id, run_id, message, info);
    }

    /// JOB_REPORT_AFTER_END: the job of a run that ended without its outcome (its poll window
    /// closed) reported after all. Told once; the execution stays as it ended (a success
    /// does not start dependents: rerun the date to adopt it).
    fn report_after_end(&mut self, id: &ExecutionId, record: &JobReport) {
        if let Some(e) = self.state.executions.get_mut(id) {
            e.unreported_run = None;
        }
        let info = report_of(record);
        let message = format!(
            "run {} reported {} after it had ended at its poll window",
            record.run_id,
            record.status.as_str()
        );
        self.emit_for_run(EventType::JOB_REPORT_AFTER_END, id, &record.run_id, message, info);
    }

    /// STALE_RUN: an execution still open when its watchdog fires has nothing left that could
    /// move it (a trigger that never reported, a lost timer): close it rather than hang.
    pub(super) fn on_watchdog(&mut self, id: &ExecutionId) {
        let now = self.now();
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        if !execution.phase.is_open() {
            return;
        }
        let phase = execution.phase.name();
        let since = execution.phase_since;
        let run_id = execution.phase.run_id().cloned();
        let reason = format!("no progress in phase {phase} since {}", since.to_rfc3339());
        let info = StaleRun {
            phase: phase.into(),
            since,
        };
        match run_id {
            Some(run_id) => self.emit_for_run(EventType::STALE_RUN, id, &run_id, reason.clone(), info),
            None => self.emit(EventType::STALE_RUN, Some(id), reason.clone(), info),
        }
        self.enter(id, Phase::Stale { at: now, reason });
        self.cancel_run_timers(id);
    }

    /// Dry run: Sluice triggered nothing, but the job the old orchestrator still runs reports
    /// here; say what Sluice would have done with each outcome.
    fn observe_dry_run_job(&mut self, id: &ExecutionId, record: &JobReport) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        let Some(execution) = self.state.executions.get_mut(id) else {
            return;
        };
        let report = report_of(record);
        match record.status {
            JobStatus::Running | JobStatus::Released | JobStatus::Unknown | JobStatus::Calling => self
                .notes
                .push(format!("dry run: {} {}", record.run_id, record.status.as_str())),
            JobStatus::Succeeded => {
                let info = DryRunCompleted {
                    report,
                    sla: self.sla_verdict(id, self.now()),
                };
                let message = "dry run: the job completed".to_string();
                self.emit_for_run(EventType::DRY_RUN_COMPLETED, id, &record.run_id, message, info);
                // The job really ran (under the old orchestrator): downstream pipelines may go.
                self.notify_dependents(id, &record.run_id);
            }
            JobStatus::Failed | JobStatus::Timeout => {
                let category = failure_category(record);
                let (budget, limit, retry, _) = spend_retry(&config, category, execution);
                let info = DryRunRetry {
                    report,
                    failure_category: category,
                    budget,
                    limit,
                };
                let (kind, message) = match retry {
                    true => (EventType::DRY_RUN_WOULD_RETRY, "dry run: Sluice would retry this job"),
                    false => (
                        EventType::DRY_RUN_RETRY_EXHAUSTED,
                        "dry run: Sluice would not retry: the budget is spent",
                    ),
                };
                self.emit_for_run(kind, id, &record.run_id, message.into(), info);
            }
        }
    }

    /// A digest of the sensor data an execution's rules read, to tell later whether it changed.
    pub(super) fn inputs_digest(&self, date: ExecutionDate) -> String {
        let Some(config) = self.config() else {
            return String::new();
        };
        let readings = self.readings(date);
        let mut hasher = Sha256::new();
        let mut keys: Vec<&str> = config.input_keys().collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            hasher.update(key.as_bytes());
            hasher.update([0]);
            if let Some(data) = readings.get(key) {
                hasher.update(serde_json::to_vec(data).unwrap_or_default());
            }
            hasher.update([0]);
        }
        hasher.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
    }
}

/// The most a status check backs off after checks that could not ask: the job's end is
/// noticed at most this late once its job system answers again.
pub const MAX_STATUS_CHECK_BACKOFF: TimeDelta = TimeDelta::minutes(5);

/// When the next status check comes after `failures` in a row that could not ask: the poll
/// interval doubled per failure, up to [`MAX_STATUS_CHECK_BACKOFF`] (or the interval, when
/// that is longer). Deterministic: the executor's own retries within a check add jitter.
pub fn status_check_backoff(interval: TimeDelta, failures: u32) -> TimeDelta {
    let cap = interval.max(MAX_STATUS_CHECK_BACKOFF);
    let factor = 1i32 << failures.min(16);
    interval.checked_mul(factor).map_or(cap, |d| d.min(cap))
}

/// What every event about a job report tells of it.
fn report_of(record: &JobReport) -> Report {
    Report {
        status: record.status,
        metadata: record.metadata.clone(),
        job_message: record.message.clone(),
    }
}

fn failure_category(record: &JobReport) -> FailureCategory {
    record.failure_category.unwrap_or(match record.status {
        JobStatus::Timeout => FailureCategory::Timeout,
        _ => FailureCategory::Transient,
    })
}

/// Spends one retry from the budget a failure category draws on: PERMANENT failures spend
/// `maxCodeRetries`, everything else `maxRetries`. Returns (budget, limit, retry?, used).
fn spend_retry(
    config: &PipelineConfig,
    category: FailureCategory,
    execution: &mut super::Execution,
) -> (RetryBudget, u32, bool, u32) {
    let (budget, limit, used) = match category {
        FailureCategory::Permanent => (
            RetryBudget::MaxCodeRetries,
            config.job.max_code_retries,
            &mut execution.code_retries_used,
        ),
        _ => (
            RetryBudget::MaxRetries,
            config.job.max_retries,
            &mut execution.retries_used,
        ),
    };
    let retry = *used < limit;
    if retry {
        *used += 1;
    }
    (budget, limit, retry, *used)
}

/// The request for run `run_id` of `execution`, the job config rendered with the run's
/// variables. Triggers and status checks send the same request.
pub(super) fn job_request(
    pipeline_id: &str,
    config: &PipelineConfig,
    execution: &Execution,
    run_id: &str,
) -> Result<TriggerRequest, RenderError> {
    render_request(pipeline_id, config, &config.job.config, execution, run_id)
}

/// The request for a call of `call` (the job, or an evaluator) about `execution`, rendered
/// with the run's variables, with the job's retry policies.
pub(super) fn render_request(
    pipeline_id: &str,
    config: &PipelineConfig,
    call: &JobConfig,
    execution: &Execution,
    run_id: &str,
) -> Result<TriggerRequest, RenderError> {
    let vars = RunVariables {
        pipeline: pipeline_id,
        execution: &execution.id,
        run_id,
    };
    let rendered = call.rendered(|json| render_run(json, &vars))?;
    Ok(TriggerRequest {
        run_id: run_id.into(),
        retry: config.job.trigger_retry,
        status_retry: config.job.status_retry,
        ..TriggerRequest::new(pipeline_id, &execution.id, execution.attempt, rendered)
    })
}
