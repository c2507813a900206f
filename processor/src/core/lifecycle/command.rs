//! RERUN_ACCEPTED / RERUN_REJECTED (DRY_RUN_WOULD_RERUN / DRY_RUN_RERUN_REJECTED in a dry
//! run) and RUN_CANCELLED: operators' commands from `sluice.commands`. Subscriptions between
//! pipelines arrive there too (see [`dependencies`](super::dependencies)).

use serde_json::json;

use super::schedule::day_excluded;
use super::{detail, execution_key, Decider, Phase};
use crate::core::events::EventType;
use crate::core::execution::ExecutionDate;
use crate::core::records::{CommandKind, CommandRecord, Rejection};
use crate::core::timers::TimerKind;

impl Decider<'_> {
    pub(super) fn on_command(&mut self, record: &CommandRecord) {
        match record.command {
            CommandKind::Rerun => self.on_rerun(record),
            CommandKind::Cancel => self.on_cancel(record),
            CommandKind::Subscribe | CommandKind::Unsubscribe => self.on_subscription(record),
        }
    }

    fn command_key(&self, record: &CommandRecord) -> Option<String> {
        let config = self.config()?;
        let schedule_id = record.schedule_id.as_deref().unwrap_or(config.schedule_id());
        Some(execution_key(schedule_id, &record.date))
    }

    /// Why a command names a schedule the pipeline does not have, if it does. A pipeline has
    /// one schedule (`cron` or `stream`); a rerun under another would start the job beside
    /// the date's real execution, with new run ids and its own rerun budget.
    fn foreign_schedule(&self, record: &CommandRecord) -> Option<String> {
        let own = self.config()?.schedule_id();
        let named = record.schedule_id.as_deref().filter(|s| *s != own)?;
        Some(format!(
            "pipeline {} has no schedule {named:?}: its schedule is {own:?}",
            self.pipeline_id
        ))
    }

    fn on_rerun(&mut self, record: &CommandRecord) {
        let Some(key) = self.command_key(record) else {
            let reason = format!("pipeline {} has no config", self.pipeline_id);
            self.reject(
                &format!("command rerun for {}", record.date),
                &reason,
                Rejection::Refused,
            );
            return;
        };
        let Some(config) = self.config() else { return };
        let limit = config.job.max_manual_reruns;
        let dry = config.dry_run;
        let mut info = detail([
            ("requestedBy", json!(record.requested_by)),
            ("reason", json!(record.reason)),
        ]);
        if record.force {
            info.insert("force".into(), json!(true));
        }
        let refusal =
            (self.foreign_schedule(record)).or_else(|| self.rerun_refusal(&key, &record.date, limit, record.force));
        if let Some(refusal) = refusal {
            info.insert("rejection".into(), json!(refusal));
            let kind = self.dry_or(EventType::RERUN_REJECTED, EventType::DRY_RUN_RERUN_REJECTED);
            self.emit(kind, Some(&key), format!("rerun rejected: {refusal}"), info);
            return;
        }
        let existing = self
            .state
            .executions
            .get(&key)
            .map(|e| (e.manual_reruns_used, e.phase.clone()));
        let used = existing.as_ref().map(|(n, _)| n + 1).unwrap_or(1);
        info.insert("manualRerunsUsed".into(), json!(used));
        info.insert("maxManualReruns".into(), json!(limit));
        let kind = self.dry_or(EventType::RERUN_ACCEPTED, EventType::DRY_RUN_WOULD_RERUN);
        let message = match (dry, &existing) {
            (true, _) => format!("dry run: a rerun of {key} would start"),
            (false, None) => {
                format!("rerun of {key} accepted: the date had no execution, starting it ({used} of {limit})")
            }
            (false, Some(_)) => format!("rerun of {key} accepted ({used} of {limit})"),
        };
        self.emit(kind, Some(&key), message, info);
        if dry {
            return;
        }
        match existing {
            None => self.open_execution(&key, None),
            Some((_, phase)) => {
                // A date that never started has no SLA timers yet.
                let never_started = matches!(phase, Phase::Skipped { .. });
                self.restart(&key);
                if never_started {
                    self.arm_sla(&key);
                }
            }
        }
        if let Some(e) = self.state.executions.get_mut(&key) {
            e.manual_reruns_used = used;
        }
    }

    /// Why execution `key` (of `date`) may not be rerun, within `limit` manual reruns.
    fn rerun_refusal(&self, key: &str, date: &str, limit: u32, force: bool) -> Option<String> {
        let config = self.config()?;
        match self.state.executions.get(key) {
            // Reruns are how the earlier design's runbooks start a date that never ran (a
            // RERUN_REQUEST item; interlock internal/lambda/stream/rerun.go): accept it when
            // the date could have run.
            None => self
                .unrunnable_date(date)
                .or_else(|| (limit == 0).then(|| format!("maxManualReruns is 0 for {key}"))),
            Some(e) if e.phase.is_open() => Some(format!("execution {key} is still in progress ({})", e.phase.name())),
            // A date skipped because its trigger window closed (SENSOR_DEADLINE_EXPIRED) may
            // be rerun; a dormant one may not.
            Some(e) if matches!(e.phase, Phase::Skipped { .. }) && day_excluded(config, &e.date).is_some() => {
                Some(format!("execution {key} did not run: {}", skipped_reason(&e.phase)))
            }
            Some(e) if e.manual_reruns_used >= limit => Some(format!("maxManualReruns ({limit}) is spent for {key}")),
            // A completed run is rerun only when its inputs changed: the same data would give
            // the same result.
            Some(e)
                if !force
                    && e.phase.is_completed()
                    && e.completed_inputs.as_deref() == Some(&self.inputs_digest(&e.date)) =>
            {
                Some(format!("no sensor data changed since {key} completed"))
            }
            Some(_) => None,
        }
    }

    /// Why no run can be started for `date`, which has no execution: dormant, in the
    /// future, or older than the retention (a run may have happened and been forgotten).
    fn unrunnable_date(&self, date: &str) -> Option<String> {
        let config = self.config()?;
        if let Some(reason) = day_excluded(config, date) {
            return Some(format!("{date} is dormant: {reason}"));
        }
        let today = self.now().with_timezone(&config.schedule.timezone).date_naive();
        let parsed = ExecutionDate::canonical(date);
        if parsed.is_some_and(|d| d.day > today) {
            return Some(format!("{date} is in the future"));
        }
        if parsed.is_some_and(|d| self.beyond_retention(d)) {
            return Some(format!("{date} is older than the execution retention"));
        }
        None
    }

    /// RUN_CANCELLED: evaluation or job watching stops for the execution; a job already
    /// started is not stopped (Sluice cannot), and its later reports are ignored.
    fn on_cancel(&mut self, record: &CommandRecord) {
        let key = self.command_key(record);
        // An execution of a schedule the pipeline had before its config changed may still be
        // cancelled; naming a schedule with no execution is refused with the reason.
        if let Some(reason) = self.foreign_schedule(record) {
            if key.as_ref().and_then(|k| self.state.executions.get(k)).is_none() {
                let source = format!("command cancel for {}", record.date);
                self.reject(&source, &reason, Rejection::Refused);
                return;
            }
        }
        let open = key
            .as_ref()
            .and_then(|k| self.state.executions.get(k))
            .filter(|e| e.phase.is_open());
        let Some(execution) = open else {
            let what = key.unwrap_or_else(|| record.date.clone());
            let reason = format!("nothing to cancel: no execution {what} in progress");
            self.reject(
                &format!("command cancel for {}", record.date),
                &reason,
                Rejection::Refused,
            );
            return;
        };
        let key = key.unwrap_or_default();
        let phase = execution.phase.name();
        let run_id = execution.phase.run_id().map(str::to_string);
        self.cancel_execution_timers(&key, |_| true);
        let info = detail([
            ("phase", json!(phase)),
            ("runId", json!(run_id)),
            ("requestedBy", json!(record.requested_by)),
            ("reason", json!(record.reason)),
        ]);
        self.emit(
            EventType::RUN_CANCELLED,
            Some(&key),
            format!("{key} cancelled while {phase}"),
            info,
        );
        self.enter(&key, Phase::Cancelled { at: self.now() });
    }

    /// Starts an ended execution again: a fresh evaluation window and fresh retry budgets;
    /// attempts keep counting so every run id stays unique.
    pub(super) fn restart(&mut self, key: &str) {
        let now = self.now();
        let Some(e) = self.state.executions.get_mut(key) else {
            return;
        };
        e.retries_used = 0;
        e.code_retries_used = 0;
        e.infra_failures = 0;
        e.restart_on_trigger = false;
        e.post_run_seen = false;
        e.enter(Phase::AwaitingRules, now);
        self.arm_expiry(key);
        self.cancel_execution_timers(key, |t| matches!(t, TimerKind::PostRunTimeout { .. }));
        self.begin_window(key);
    }
}

fn skipped_reason(phase: &Phase) -> &str {
    match phase {
        Phase::Skipped { reason, .. } => reason,
        _ => "",
    }
}
