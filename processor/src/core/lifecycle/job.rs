//! JOB_TRIGGERED / JOB_COMPLETED / JOB_FAILED / JOB_TIMEOUT / RETRY_EXHAUSTED: reports on
//! `sluice.jobs` move a run forward; nothing else does.

use serde_json::json;

use super::{detail, execution_key, Decider, Phase};
use crate::core::events::EventType;
use crate::core::records::{FailureCategory, JobRecord, JobStatus};

impl Decider<'_> {
    pub(super) fn on_job(&mut self, record: &JobRecord) {
        let key = execution_key(&record.schedule_id, &record.date);
        let Some(execution) = self.state.executions.get(&key) else {
            let reason = format!("no execution {key} of pipeline {} to report on", self.pipeline_id);
            self.reject(&format!("job report {}", record.run_id), &reason);
            return;
        };
        if execution.phase.run_id() != Some(record.run_id.as_str()) {
            // An earlier attempt's late report, or a re-delivery after the run ended.
            self.notes.push(format!(
                "job report for run {} ignored: execution {key} is {:?}",
                record.run_id, execution.phase
            ));
            return;
        }
        let triggering = matches!(execution.phase, Phase::AwaitingTrigger { .. });
        let mut info = detail([("status", json!(record.status))]);
        if let Some(m) = &record.metadata {
            info.insert("metadata".into(), m.clone());
        }
        if let Some(m) = &record.message {
            info.insert("jobMessage".into(), json!(m));
        }
        match record.status {
            JobStatus::Running if triggering => self.job_started(&key, info),
            JobStatus::Running => self.notes.push(format!("run {} still running", record.run_id)),
            JobStatus::Succeeded => {
                if triggering {
                    self.job_started(&key, info.clone());
                }
                if let Some(e) = self.state.executions.get_mut(&key) {
                    e.phase = Phase::Succeeded { at: self.ctx.now };
                }
                let message = record.message.clone().unwrap_or_else(|| "job succeeded".into());
                self.emit_for_run(EventType::JOB_COMPLETED, &key, &record.run_id, message, info);
            }
            JobStatus::Failed | JobStatus::Timeout => self.job_failed(&key, record, info),
        }
    }

    fn job_started(&mut self, key: &str, info: serde_json::Map<String, serde_json::Value>) {
        let Some(execution) = self.state.executions.get_mut(key) else {
            return;
        };
        let Some(run_id) = execution.phase.run_id().map(str::to_string) else {
            return;
        };
        execution.phase = Phase::AwaitingJob { run_id: run_id.clone() };
        let message = format!("job started (attempt {})", execution.attempt);
        self.emit(EventType::JOB_TRIGGERED, Some(key), message, info);
    }

    /// Emits an event about a run whose execution may already have left the phase that
    /// names the run id (it just ended), so the id is set explicitly.
    fn emit_for_run(
        &mut self,
        kind: EventType,
        key: &str,
        run_id: &str,
        message: String,
        info: serde_json::Map<String, serde_json::Value>,
    ) {
        self.emit(kind, Some(key), message, info);
        if let Some(event) = self.events.last_mut() {
            event.run_id = Some(run_id.to_string());
        }
    }

    fn job_failed(&mut self, key: &str, record: &JobRecord, mut info: serde_json::Map<String, serde_json::Value>) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        let now = self.ctx.now;
        let Some(execution) = self.state.executions.get_mut(key) else {
            return;
        };
        let category = record.failure_category.unwrap_or(match record.status {
            JobStatus::Timeout => FailureCategory::Timeout,
            _ => FailureCategory::Transient,
        });
        info.insert("failureCategory".into(), json!(category));
        // PERMANENT failures spend the code budget; everything else the general one.
        let (budget, limit, used) = match category {
            FailureCategory::Permanent => (
                "maxCodeRetries",
                config.job.max_code_retries,
                &mut execution.code_retries_used,
            ),
            _ => ("maxRetries", config.job.max_retries, &mut execution.retries_used),
        };
        let retry = *used < limit;
        if retry {
            *used += 1;
        }
        let spent = *used;
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
            execution.phase = Phase::Failed {
                at: now,
                reason: reason.clone(),
            };
        }
        info.insert("willRetry".into(), json!(retry));
        self.emit_for_run(
            kind,
            key,
            &record.run_id,
            format!("attempt {attempt} failed: {reason}"),
            info,
        );
        if retry {
            self.start_attempt(key);
        } else {
            let detail = detail([
                ("budget", json!(budget)),
                ("limit", json!(limit)),
                ("used", json!(spent)),
            ]);
            let message = format!("no retries left: {budget} ({limit}) is spent");
            self.emit_for_run(EventType::RETRY_EXHAUSTED, key, &record.run_id, message, detail);
        }
    }
}
