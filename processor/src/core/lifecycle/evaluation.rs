//! VALIDATION_PASSED / VALIDATION_EXHAUSTED: rules evaluated on each sensor and on each
//! interval until the window closes; then the trigger (or, in a dry run, what it would be).

use std::collections::BTreeMap;

use serde_json::json;

use super::{detail, run_id, Decider, Effect, Phase, TriggerRequest};
use crate::core::events::EventType;
use crate::core::rules;
use crate::core::template::{render_run, RunVariables};
use crate::core::timers::TimerKind;

impl Decider<'_> {
    pub(super) fn on_timer(&mut self, kind: &TimerKind) {
        match kind {
            TimerKind::Evaluate { schedule_id, date } => {
                let key = super::execution_key(schedule_id, date);
                match self.state.executions.get(&key) {
                    Some(e) if e.phase == Phase::AwaitingRules => self.evaluate(&key, true),
                    _ => self.notes.push(format!("evaluation timer for {key} has nothing to do")),
                }
            }
        }
    }

    /// Evaluates an execution's rules. `on_schedule` is true at the start and on interval
    /// timers: only then is the next evaluation scheduled (sensor-driven evaluations leave
    /// the interval alone) and can the window close.
    pub(super) fn evaluate(&mut self, key: &str, on_schedule: bool) {
        let Some(config) = self.state.config.as_ref() else {
            return;
        };
        let now = self.now();
        let interval = config.schedule.evaluation.interval;
        let readings: BTreeMap<String, _> = self.state.sensors.iter().map(|(k, s)| (k.clone(), &s.data)).collect();
        let verdict = rules::evaluate_all(config.validation.mode, &config.validation.rules, &readings, now);
        let Some(execution) = self.state.executions.get_mut(key) else {
            return;
        };
        let timer = TimerKind::Evaluate {
            schedule_id: execution.schedule_id.clone(),
            date: execution.date.clone(),
        };
        execution.last_verdict = Some(verdict.clone());
        let results = json!(verdict.results);

        if verdict.passed {
            execution.next_evaluation_at = None;
            self.cancel_timer(timer);
            self.emit(
                EventType::VALIDATION_PASSED,
                Some(key),
                "all validation rules passed",
                detail([("results", results)]),
            );
            self.start_attempt(key);
            return;
        }
        if !on_schedule {
            return;
        }
        if now >= execution.window_closes_at {
            execution.phase = Phase::ValidationExhausted { at: now };
            execution.next_evaluation_at = None;
            let message = format!("evaluation window closed without passing: {}", verdict.failures());
            self.emit(
                EventType::VALIDATION_EXHAUSTED,
                Some(key),
                message,
                detail([("results", results)]),
            );
            return;
        }
        let next = (now + interval).min(execution.window_closes_at);
        execution.next_evaluation_at = Some(next);
        self.set_timer(timer, next);
    }

    /// Starts the next job attempt of an execution (or, in a dry run, reports it).
    pub(super) fn start_attempt(&mut self, key: &str) {
        let now = self.now();
        let pipeline_id = self.pipeline_id;
        let (Some(config), Some(execution)) = (self.state.config.as_ref(), self.state.executions.get_mut(key)) else {
            return;
        };
        let kind = config.job.kind;
        if config.dry_run {
            execution.phase = Phase::WouldHaveTriggered { at: now };
            let detail = detail([("jobType", json!(kind.name()))]);
            self.emit(
                EventType::DRY_RUN_WOULD_TRIGGER,
                Some(key),
                "dry run: the job would be triggered now",
                detail,
            );
            return;
        }
        execution.attempt += 1;
        let run_id = run_id(pipeline_id, &execution.schedule_id, &execution.date, execution.attempt);
        let vars = RunVariables {
            pipeline: pipeline_id,
            schedule: &execution.schedule_id,
            date: &execution.date,
            run_id: &run_id,
        };
        let rendered = render_run(&serde_json::Value::Object(config.job.config.clone()), &vars)
            .map_err(|e| format!("job config does not render: {e}"))
            .and_then(|rendered| match kind.can_trigger() {
                true => Ok(rendered),
                false => Err(format!("{} jobs cannot be triggered by this build", kind.name())),
            });
        let request = TriggerRequest {
            pipeline_id: pipeline_id.to_string(),
            schedule_id: execution.schedule_id.clone(),
            date: execution.date.clone(),
            run_id: run_id.clone(),
            attempt: execution.attempt,
            kind,
            config: serde_json::Value::Null,
        };
        // Awaiting the trigger first, so that an INFRA_FAILURE names the run it refused.
        execution.phase = Phase::AwaitingTrigger { run_id };
        match rendered {
            Ok(config) => self
                .effects
                .push(Effect::TriggerJob(TriggerRequest { config, ..request })),
            Err(reason) => {
                let message = format!("job not triggered: {reason}");
                self.emit(
                    EventType::INFRA_FAILURE,
                    Some(key),
                    message,
                    detail([("reason", json!(reason))]),
                );
                if let Some(execution) = self.state.executions.get_mut(key) {
                    execution.phase = Phase::Failed { at: now, reason };
                }
            }
        }
    }
}
