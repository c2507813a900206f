//! Evaluators: sensors Sluice asks for itself. No event of its own: an evaluator's answer is
//! an ordinary reading, and the validation events (VALIDATION_PASSED, VALIDATION_EXHAUSTED,
//! VALIDATION_WARNED) carry what the rules made of it.
//!
//! While an execution evaluates, each evaluator is called at once and then every `every`
//! (the `EvaluatorDue` timer, durable like every timer). The call is an
//! [`Effect::Evaluate`], carried out by the runtime, which writes the answer on
//! `sluice.sensors` as a reading of the rule's key with source `evaluator`; the rules judge
//! it as they judge any reading. Since the answers are recorded, a replay needs no calls.
//!
//! - A call that failed or timed out comes back as a reading with an `error`: the key's
//!   rules fail with it, and the next call comes after the job's trigger retry wait
//!   (`job.triggerRetry`: 30 s, ×2, 3 retries by default) while the policy lasts, then on
//!   `every` again. It never blocks anything else.
//! - An answer older than the evaluator's `ttl` fails the key's rules as expired.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::job::render_request;
use super::{Decider, Effect, EvaluatorCall, StoredSensor};
use crate::core::config::{Evaluator, Mode, PipelineConfig};
use crate::core::duration::format_duration;
use crate::core::execution::ExecutionId;
use crate::core::rules::{self, Verdict};
use crate::core::timers::TimerKind;

impl Decider<'_> {
    /// Calls each evaluator of an execution that has begun evaluating.
    pub(super) fn start_evaluators(&mut self, id: &ExecutionId) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        for evaluator in &config.validation.evaluators {
            self.call_evaluator(&config, id, evaluator);
        }
    }

    /// `EvaluatorDue`: the evaluator of `sensor` is called again, if its execution still
    /// evaluates and the config still has it.
    pub(super) fn on_evaluator_due(&mut self, id: &ExecutionId, sensor: &str) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        if let Some(evaluator) = config.validation.evaluator(sensor) {
            self.call_evaluator(&config, id, evaluator);
        }
    }

    /// One call of `evaluator` for execution `id`, and the next one armed `every` later.
    fn call_evaluator(&mut self, config: &PipelineConfig, id: &ExecutionId, evaluator: &Evaluator) {
        let Some(execution) = self.validating(id) else {
            return;
        };
        let timer = evaluator_timer(id, &evaluator.key);
        let run_id = evaluator_run_id(self.pipeline_id, id, &evaluator.key);
        match render_request(self.pipeline_id, config, &evaluator.call, execution, &run_id) {
            Ok(request) => self.effects.push(Effect::Evaluate(EvaluatorCall {
                request,
                key: evaluator.key.clone(),
            })),
            // Rendering checks what the reader checked already: this cannot fail for a
            // config that was accepted, and is noted rather than hidden.
            Err(e) => self
                .notes
                .push(format!("{id}: evaluator of {:?} does not render: {e}", evaluator.key)),
        }
        let next = self.now() + evaluator.every.unwrap_or(config.schedule.evaluation.interval);
        self.set_timer(timer, next);
    }

    /// A failed answer of `sensor`'s evaluator (`failures` in a row) for the executions it
    /// scopes: the next call comes after the trigger retry policy's wait, if that is sooner
    /// than the one armed.
    pub(super) fn retry_evaluator(&mut self, sensor: &str, only: Option<&ExecutionId>, failures: u32) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        if config.validation.evaluator(sensor).is_none() {
            return;
        }
        let Some(wait) = config.job.trigger_retry.delay(failures) else {
            return;
        };
        let at = self.now() + chrono::TimeDelta::from_std(wait).unwrap_or_default();
        for id in self.awaiting_rules(only) {
            let timer = evaluator_timer(&id, sensor);
            let armed = self.state.due(&timer);
            if armed.is_none_or(|armed| at < armed) {
                self.set_timer(timer, at);
            }
        }
    }

    /// The answer kept at `slot` when it is still within its evaluator's `ttl`: a failed
    /// call does not take its place (the earlier AWS variant trusted a result until it
    /// expired). Without a `ttl` an answer has no term, so a failure does replace it.
    pub(super) fn trusted_answer(&self, sensor: &str, slot: &str) -> Option<StoredSensor> {
        let ttl = self.config()?.validation.evaluator(sensor)?.ttl?;
        let kept = self.state.sensors.get(slot)?;
        (kept.error.is_none() && unusable(kept, Some(ttl), self.now()).is_none()).then(|| (**kept).clone())
    }

    /// After a config change: executions that evaluate call the evaluators they lack a timer
    /// for, and stop calling the ones the config dropped.
    pub(super) fn rearm_evaluators(&mut self) {
        let config = self.state.config.clone();
        let has = |sensor: &str| {
            config
                .as_ref()
                .is_some_and(|c| c.validation.evaluator(sensor).is_some())
        };
        self.cancel_timers(|t| matches!(t, TimerKind::EvaluatorDue { key, .. } if !has(key)));
        let Some(config) = config else {
            return;
        };
        for id in self.awaiting_rules(None) {
            for evaluator in &config.validation.evaluators {
                let armed = self.state.due(&evaluator_timer(&id, &evaluator.key)).is_some();
                if !armed {
                    self.call_evaluator(&config, &id, evaluator);
                }
            }
        }
    }
}

/// What the rules cannot see of the readings an execution's rules read (`slots`): an error
/// instead of an answer, or an answer past its evaluator's `ttl`. Those keys' rules fail with
/// that reason instead of "no reading".
pub(super) fn unusable_readings(
    config: &PipelineConfig,
    slots: &BTreeMap<&str, &StoredSensor>,
    now: DateTime<Utc>,
) -> Vec<(String, String)> {
    (slots.iter())
        .filter_map(|(sensor, stored)| {
            let ttl = config.validation.evaluator(sensor).and_then(|e| e.ttl);
            unusable(stored, ttl, now).map(|why| (sensor.to_string(), why))
        })
        .collect()
}

/// Why a reading cannot satisfy a rule, if it cannot.
fn unusable(stored: &StoredSensor, ttl: Option<chrono::TimeDelta>, now: DateTime<Utc>) -> Option<String> {
    let by_evaluator = stored.source.as_deref() == Some(crate::core::records::EVALUATOR_SOURCE);
    if let Some(error) = &stored.error {
        let who = if by_evaluator {
            "evaluator failed"
        } else {
            "sensor reports an error"
        };
        return Some(format!("{who}: {error}"));
    }
    let ttl = ttl?;
    let answered = stored.timestamp.unwrap_or(stored.received_at);
    let age = now - answered;
    (age > ttl).then(|| {
        format!(
            "expired: the answer is {} old, older than the evaluator's ttl of {}",
            format_duration(age),
            format_duration(ttl)
        )
    })
}

/// Fails the rules of the keys `unusable` names, with its reason, and judges the verdict
/// again.
pub(super) fn judge_unusable(verdict: &mut Verdict, unusable: &[(String, String)], mode: Mode) {
    if unusable.is_empty() {
        return;
    }
    for result in &mut verdict.results {
        if let Some((_, why)) = unusable.iter().find(|(k, _)| *k == result.key) {
            result.passed = false;
            result.seen = None;
            result.reason = Some(why.clone());
        }
    }
    verdict.passed = rules::decides(mode, &verdict.results);
}

/// The run id an evaluator's calls carry (`Idempotency-Key`, `SLUICE_RUN_ID`): one per
/// execution and sensor id.
pub fn evaluator_run_id(pipeline_id: &str, execution: &ExecutionId, sensor: &str) -> String {
    let (schedule_id, date) = (execution.schedule(), execution.date_text());
    format!("{pipeline_id}.{schedule_id}.{date}.evaluator.{sensor}")
}

fn evaluator_timer(id: &ExecutionId, sensor: &str) -> TimerKind {
    TimerKind::EvaluatorDue {
        execution: id.clone(),
        key: sensor.to_string(),
    }
}
