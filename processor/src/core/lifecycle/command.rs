//! RERUN_ACCEPTED / RERUN_REJECTED (DRY_RUN_WOULD_RERUN / DRY_RUN_RERUN_REJECTED in a dry
//! run) and RUN_CANCELLED: operators' commands from `sluice.commands`. Subscriptions between
//! pipelines arrive there too (see [`dependencies`](super::dependencies)).

use super::schedule::day_excluded;
use super::{Decider, Phase};
use crate::core::events::detail::{Cancelled, RerunAccepted, RerunRejected, RerunRequest};
use crate::core::events::EventType;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::records::{Cancel, Command, CommandOf, NamedExecution, Rejection, Rerun};
use crate::core::timers::TimerKind;

/// Why a command names no execution: without a config there is no schedule to name one by.
#[derive(Debug, thiserror::Error)]
#[error("pipeline {0} has no config")]
struct NoConfig(String);

impl Decider<'_> {
    pub(super) fn on_command(&mut self, command: &Command) {
        let requested_by = command.requested_by.as_ref();
        match &command.kind {
            CommandOf::Rerun(rerun) => self.on_rerun(rerun, requested_by),
            CommandOf::Cancel(cancel) => self.on_cancel(cancel, requested_by),
            CommandOf::Subscribe { subscriber, key } => self.on_subscribe(subscriber, key),
            CommandOf::Unsubscribe { subscriber } => self.on_unsubscribe(subscriber),
        }
    }

    /// The execution a command names: of its schedule (the pipeline's own unless it says)
    /// and date.
    fn command_execution(&self, named: &NamedExecution) -> Result<ExecutionId, NoConfig> {
        let config = (self.config()).ok_or_else(|| NoConfig(self.pipeline_id.to_string()))?;
        let schedule_id = named.schedule_id.as_deref().unwrap_or(config.schedule_id());
        Ok(ExecutionId::new(schedule_id, named.date))
    }

    /// Why a command names a schedule the pipeline does not have, if it does. A pipeline has
    /// one schedule (`cron` or `stream`); a rerun under another would start the job beside
    /// the date's real execution, with new run ids and its own rerun budget.
    fn foreign_schedule(&self, named: &NamedExecution) -> Option<String> {
        let own = self.config()?.schedule_id();
        let named = named.schedule_id.as_deref().filter(|s| *s != own)?;
        Some(format!(
            "pipeline {} has no schedule {named:?}: its schedule is {own:?}",
            self.pipeline_id
        ))
    }

    fn on_rerun(&mut self, rerun: &Rerun, requested_by: Option<&String>) {
        let named = &rerun.execution;
        let id = match self.command_execution(named) {
            Ok(id) => id,
            Err(unnamed) => {
                return self.reject(
                    &format!("command rerun for {}", named.date),
                    &unnamed.to_string(),
                    Rejection::Refused,
                )
            }
        };
        let Some(config) = self.config() else { return };
        let limit = config.job.max_manual_reruns;
        let dry = config.dry_run;
        let request = RerunRequest {
            requested_by: requested_by.cloned(),
            reason: rerun.reason.clone(),
            force: rerun.force,
            backfill: rerun.backfill,
        };
        // A date Sluice has forgotten, started on purpose: its runs get their own ids.
        let forgotten = !self.state.executions.contains_key(&id) && self.beyond_retention(id.date());
        let refusal = (self.foreign_schedule(named)).or_else(|| self.rerun_refusal(&id, limit, rerun));
        if let Some(refusal) = refusal {
            let kind = self.dry_or(EventType::RERUN_REJECTED, EventType::DRY_RUN_RERUN_REJECTED);
            let message = format!("rerun rejected: {refusal}");
            let info = RerunRejected {
                request,
                rejection: refusal,
            };
            self.emit(kind, Some(&id), message, info);
            return;
        }
        let existing = self
            .state
            .executions
            .get(&id)
            .map(|e| (e.manual_reruns_used, e.phase.clone()));
        let used = existing.as_ref().map(|(n, _)| n + 1).unwrap_or(1);
        let info = RerunAccepted {
            request,
            manual_reruns_used: used,
            max_manual_reruns: limit,
        };
        let kind = self.dry_or(EventType::RERUN_ACCEPTED, EventType::DRY_RUN_WOULD_RERUN);
        let message = match (dry, &existing) {
            (true, _) => format!("dry run: a rerun of {id} would start"),
            (false, None) => {
                format!("rerun of {id} accepted: the date had no execution, starting it ({used} of {limit})")
            }
            (false, Some(_)) => format!("rerun of {id} accepted ({used} of {limit})"),
        };
        self.emit(kind, Some(&id), message, info);
        if dry {
            return;
        }
        match existing {
            None => {
                self.open_execution(&id, None);
                let at = self.now().timestamp_millis();
                if let Some(e) = self.state.executions.get_mut(&id).filter(|_| forgotten) {
                    e.backfill = Some(at);
                }
            }
            Some((_, phase)) => {
                // A date that never started has no SLA timers yet.
                let never_started = matches!(phase, Phase::Skipped { .. });
                self.restart(&id);
                if never_started {
                    self.arm_sla(&id);
                }
            }
        }
        if let Some(e) = self.state.executions.get_mut(&id) {
            e.manual_reruns_used = used;
        }
    }

    /// Why execution `id` may not be rerun as `rerun` asks, within `limit` manual reruns.
    fn rerun_refusal(&self, id: &ExecutionId, limit: u32, rerun: &Rerun) -> Option<String> {
        let config = self.config()?;
        let force = rerun.force;
        match self.state.executions.get(id) {
            // Reruns are how the earlier design's runbooks start a date that never ran (a
            // RERUN_REQUEST item; interlock internal/lambda/stream/rerun.go): accept it when
            // the date could have run, or, older than the retention, when it is a backfill.
            None => self
                .unrunnable_date(id.date(), rerun.backfill)
                .or_else(|| (limit == 0).then(|| format!("maxManualReruns is 0 for {id}"))),
            Some(e) if e.phase.is_open() => Some(format!("execution {id} is still in progress ({})", e.phase.name())),
            // A date skipped because its trigger window closed (SENSOR_DEADLINE_EXPIRED) may
            // be rerun; a dormant one may not.
            Some(e) if matches!(e.phase, Phase::Skipped { .. }) && day_excluded(config, id.date()).is_some() => {
                Some(format!("execution {id} did not run: {}", skipped_reason(&e.phase)))
            }
            Some(e) if e.manual_reruns_used >= limit => Some(format!("maxManualReruns ({limit}) is spent for {id}")),
            // A completed run is rerun only when its inputs changed: the same data would give
            // the same result.
            Some(e)
                if !force
                    && e.phase.is_completed()
                    && e.completed_inputs.as_deref() == Some(&self.inputs_digest(id.date())) =>
            {
                Some(format!("no sensor data changed since {id} completed"))
            }
            Some(_) => None,
        }
    }

    /// Why no run can be started for `date`, which has no execution: dormant, in the
    /// future, or older than the retention (a run may have happened and been forgotten)
    /// unless this is a `backfill`.
    fn unrunnable_date(&self, date: ExecutionDate, backfill: bool) -> Option<String> {
        let config = self.config()?;
        if let Some(reason) = day_excluded(config, date) {
            return Some(format!("{date} is dormant: {reason}"));
        }
        let today = self.now().with_timezone(&config.schedule.timezone).date_naive();
        if date.day > today {
            return Some(format!("{date} is in the future"));
        }
        if self.beyond_retention(date) && !backfill {
            return Some(format!(
                "{date} is older than the execution retention: whether it ran is forgotten; `sluice backfill` starts it on purpose"
            ));
        }
        None
    }

    /// RUN_CANCELLED: evaluation or job watching stops for the execution; a job already
    /// started is not stopped (Sluice cannot), and its later reports are ignored.
    fn on_cancel(&mut self, cancel: &Cancel, requested_by: Option<&String>) {
        let named = &cancel.execution;
        let id = self.command_execution(named).ok();
        // An execution of a schedule the pipeline had before its config changed may still be
        // cancelled; naming a schedule with no execution is refused with the reason.
        if let Some(reason) = self.foreign_schedule(named) {
            if id.as_ref().and_then(|k| self.state.executions.get(k)).is_none() {
                let source = format!("command cancel for {}", named.date);
                self.reject(&source, &reason, Rejection::Refused);
                return;
            }
        }
        let open = id
            .as_ref()
            .and_then(|k| self.state.executions.get(k))
            .filter(|e| e.phase.is_open());
        let Some(execution) = open else {
            let what = id.map_or_else(|| named.date.to_string(), |id| id.to_string());
            let reason = format!("nothing to cancel: no execution {what} in progress");
            self.reject(
                &format!("command cancel for {}", named.date),
                &reason,
                Rejection::Refused,
            );
            return;
        };
        let Some(id) = id else { return };
        let phase = execution.phase.name();
        let run_id = execution.phase.run_id().cloned();
        self.cancel_execution_timers(&id, |_| true);
        let info = Cancelled {
            phase: phase.into(),
            run_id,
            requested_by: requested_by.cloned(),
            reason: cancel.reason.clone(),
        };
        self.emit(
            EventType::RUN_CANCELLED,
            Some(&id),
            format!("{id} cancelled while {phase}"),
            info,
        );
        self.enter(&id, Phase::Cancelled { at: self.now() });
    }

    /// Starts an ended execution again: a fresh evaluation window and fresh retry budgets;
    /// attempts keep counting so every run id stays unique.
    pub(super) fn restart(&mut self, id: &ExecutionId) {
        let now = self.now();
        let Some(e) = self.state.executions.get_mut(id) else {
            return;
        };
        e.retries_used = 0;
        e.code_retries_used = 0;
        e.infra_failures = 0;
        e.trigger_releases = 0;
        e.restart_on_trigger = false;
        e.post_run_seen = false;
        e.enter(Phase::AwaitingRules, now);
        self.arm_expiry(id);
        self.cancel_execution_timers(id, |t| matches!(t, TimerKind::PostRunTimeout { .. }));
        self.rearm_met_sla(id);
        self.begin_window(id);
    }
}

fn skipped_reason(phase: &Phase) -> &str {
    match phase {
        Phase::Skipped { reason, .. } => reason,
        _ => "",
    }
}
