//! EVALUATION_SLA_WARNING / EVALUATION_SLA_BREACH, and `sla.validationTimeout`: the deadlines
//! of the earlier AWS variant that Sluice's own SLA machinery did not already have.
//!
//! - `evaluationDeadline`: readiness (VALIDATION_PASSED) not reached by then is
//!   EVALUATION_SLA_BREACH, `atRiskLeadTime` before it EVALUATION_SLA_WARNING; alerts only,
//!   evaluation goes on.
//! - `validationTimeout`: a hard stop of evaluation, which is the evaluation window's end:
//!   the window closes then if that comes first (VALIDATION_EXHAUSTED).
//! - `completionDeadline` is the SLA deadline (`HH:MM`) or the relative SLA (a duration), and
//!   `atRiskLeadTime` the SLA warning's lead: the config reader maps them there.
//!
//! A time of day falls on the execution's date by the SLA deadline's rules (its timezone,
//! `deadlineDay`); a duration counts from when evaluation began (a rerun begins it again).

use chrono::{DateTime, Utc};

use super::sla::{alerted, deadline_at};
use super::{Decider, Phase};
use crate::core::config::{Deadline, PipelineConfig, SlaTime};
use crate::core::duration::format_duration;
use crate::core::events::detail::EvaluationDeadline;
use crate::core::events::EventType;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::timers::TimerKind;

impl Decider<'_> {
    /// Arms EVALUATION_SLA_WARNING and EVALUATION_SLA_BREACH for an execution that is
    /// validating, forward-only.
    pub(super) fn arm_evaluation_deadline(&mut self, id: &ExecutionId) {
        let Some(config) = self.state.config.clone().filter(|c| !c.dry_run) else {
            return;
        };
        let Some(sla) = config.sla.as_ref() else { return };
        let (Some(at), Some(execution)) = (sla.evaluation_deadline, self.state.executions.get(id)) else {
            return;
        };
        if execution.phase != Phase::AwaitingRules || execution.sla.evaluation_breached {
            return;
        }
        let warned = execution.sla.evaluation_warned;
        let Some(due) = resolve(&config, id.date(), execution.phase_since, at) else {
            return;
        };
        let now = self.now();
        if due > now {
            self.set_timer(TimerKind::EvaluationSlaBreach { execution: id.clone() }, due);
        }
        let warn_at = sla.at_risk_lead_time.map(|lead| due - lead).filter(|at| *at > now);
        if let (Some(warn_at), false) = (warn_at, warned) {
            self.set_timer(TimerKind::EvaluationSlaWarning { execution: id.clone() }, warn_at);
        }
    }

    /// EVALUATION_SLA_WARNING (`breach` false) or EVALUATION_SLA_BREACH: the execution is
    /// still validating at its evaluation deadline (or `atRiskLeadTime` before it).
    pub(super) fn on_evaluation_deadline(&mut self, id: &ExecutionId, breach: bool) {
        let Some(config) = self.state.config.clone().filter(|c| !c.dry_run) else {
            return;
        };
        let Some(at) = config.sla.as_ref().and_then(|s| s.evaluation_deadline) else {
            return;
        };
        let now = self.now();
        let Some(execution) = self.state.executions.get_mut(id) else {
            return;
        };
        let already = alerted(
            breach,
            execution.sla.evaluation_warned,
            execution.sla.evaluation_breached,
        );
        if execution.phase != Phase::AwaitingRules || already {
            return;
        }
        let Some(due) = resolve(&config, id.date(), execution.phase_since, at) else {
            return;
        };
        let failing = execution
            .last_verdict
            .as_ref()
            .map(|v| v.failures())
            .unwrap_or_default();
        let (kind, said) = match breach {
            true => {
                execution.sla.evaluation_breached = true;
                (EventType::EVALUATION_SLA_BREACH, "missed".to_string())
            }
            false => {
                execution.sla.evaluation_warned = true;
                (
                    EventType::EVALUATION_SLA_WARNING,
                    format!("is {} away from", format_duration(due - now)),
                )
            }
        };
        let message = format!(
            "{} is not ready and {said} its evaluation deadline {}: {}",
            id.date(),
            due.to_rfc3339(),
            if failing.is_empty() {
                "no evaluation yet".to_string()
            } else {
                failing
            }
        );
        let info = EvaluationDeadline {
            deadline: due,
            evaluation_began: execution.phase_since,
            window_closes_at: execution.window_closes_at,
        };
        self.emit(kind, Some(id), message, info);
    }

    /// When evaluation begun at `began` must stop (`sla.validationTimeout`), if set.
    pub(super) fn validation_timeout(&self, id: &ExecutionId, began: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let config = self.config()?;
        let at = config.sla.as_ref()?.validation_timeout?;
        resolve(config, id.date(), began, at)
    }
}

/// The instant of a deadline of the earlier variant for the execution `date` whose
/// evaluation began at `began`.
fn resolve(config: &PipelineConfig, date: ExecutionDate, began: DateTime<Utc>, at: SlaTime) -> Option<DateTime<Utc>> {
    match at {
        SlaTime::After(after) => Some(began + after),
        SlaTime::At(time) => deadline_at(config, date, Deadline::Daily(time)),
    }
}
