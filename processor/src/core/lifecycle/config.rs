//! CONFIG_ACCEPTED / CONFIG_REJECTED: a config arriving on `sluice.config`.
//!
//! A new config applies at the next decision point: open executions keep their state and
//! are evaluated with the new rules from then on; pipeline-level timers (cron, expected
//! start, trigger deadline, SLA chain) are re-armed from now, and the SLA timers of every
//! execution that still owes its deadline are recomputed, so no timer of the old config is
//! left behind.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::schedule::day_excluded;
use super::{Decider, Phase};
use crate::core::config::{self, Parsed, Problem, Variables};
use crate::core::events::detail::{ConfigAccepted, ConfigDeleted, ConfigRejected};
use crate::core::events::{clip, EventType, REASON_LIMIT};
use crate::core::execution::ExecutionId;
use crate::core::records::{ConfigRecord, Rejection};
use crate::core::timers::TimerKind;

impl Decider<'_> {
    pub(super) fn on_config(&mut self, record: &ConfigRecord) {
        match record {
            ConfigRecord::Delete { .. } => self.on_config_deleted(),
            ConfigRecord::Put { config, .. } => self.on_config_put(config),
            ConfigRecord::Unreadable { reason, .. } => self.reject_config(vec![Problem {
                path: String::new(),
                reason: reason.clone(),
            }]),
        }
    }

    fn on_config_put(&mut self, raw: &Value) {
        let parsed = match self.parse_config(raw) {
            Ok(parsed) => parsed,
            Err(problems) => {
                self.reject_config(problems);
                return;
            }
        };
        let first = self.state.config.is_none();
        let warnings: Vec<String> = parsed.warnings.iter().map(Problem::to_string).collect();
        let detail = ConfigAccepted {
            warnings,
            replaced: !first,
        };
        self.emit(
            EventType::CONFIG_ACCEPTED,
            None,
            format!("config accepted for {}", self.pipeline_id),
            detail,
        );
        let before = self.state.config.replace(std::sync::Arc::new(parsed.config));
        self.cancel_timer(TimerKind::Forget);
        let after = self.state.config.clone();
        self.sync_subscriptions(before.as_deref(), after.as_deref());
        self.rearm_timers();
        // Sensors that arrived before the pipeline was known (or that the new trigger now
        // accepts) start their executions now.
        self.recover_stored_triggers();
    }

    /// The config `raw` holds, or every problem that keeps it from being used here: what
    /// it is, whether it is this pipeline's, and whether it fits the limits.
    fn parse_config(&self, raw: &Value) -> Result<Parsed, Vec<Problem>> {
        let parsed = config::parse(raw, Variables::MustBeResolved).map_err(|e| e.problems)?;
        let mut problems = Vec::new();
        if parsed.config.id != *self.pipeline_id {
            problems.push(Problem {
                path: "pipeline.id".into(),
                reason: format!(
                    "{:?} differs from the record key {:?}",
                    parsed.config.id, self.pipeline_id
                ),
            });
        }
        problems.extend(self.ctx.settings.limits.check_config(&parsed.config));
        match problems.is_empty() {
            true => Ok(parsed),
            false => Err(problems),
        }
    }

    /// Re-arms the pipeline's timers from the config now in force: the schedule's, and the
    /// SLA timers of every execution that still owes its deadline.
    fn rearm_timers(&mut self) {
        self.cancel_timers(|t| {
            matches!(
                t,
                TimerKind::SlaWarning { .. }
                    | TimerKind::SlaBreach { .. }
                    | TimerKind::SlaForecast { .. }
                    | TimerKind::EvaluationSlaWarning { .. }
                    | TimerKind::EvaluationSlaBreach { .. }
                    | TimerKind::RelativeSlaWarning { .. }
                    | TimerKind::RelativeSlaBreach { .. }
            )
        });
        self.arm_schedule();
        self.rearm_evaluators();
        // SLAs are per date, not per run: a failed, exhausted or stale execution still owes its
        // deadline, so re-arm every execution not completed, cancelled or dormant (forward-only).
        let config = self.state.config.clone();
        let owed: Vec<ExecutionId> = self
            .state
            .executions
            .iter()
            .filter(|(_, e)| !e.phase().is_completed() && !matches!(e.phase(), Phase::Cancelled { .. }))
            .filter(|(id, _)| config.as_ref().is_some_and(|c| day_excluded(c, id.date()).is_none()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in owed {
            self.arm_sla(&id);
        }
    }

    /// CONFIG_REJECTED with every problem; the record goes to the dead-letter topic and the
    /// config in force (if any) stays.
    fn reject_config(&mut self, mut problems: Vec<Problem>) {
        // Bounded: a config may quote huge values or have thousands of problems.
        const MOST_PROBLEMS: usize = 20;
        let more = problems.len().saturating_sub(MOST_PROBLEMS);
        problems.truncate(MOST_PROBLEMS);
        for p in &mut problems {
            p.path = clip(&p.path, REASON_LIMIT / 4);
            p.reason = clip(&p.reason, REASON_LIMIT);
        }
        let mut summary: Vec<String> = problems.iter().map(Problem::to_string).collect();
        if more > 0 {
            summary.push(format!("and {more} more problems"));
        }
        let kept = if self.state.config.is_some() {
            "the previous config stays in force"
        } else {
            "the pipeline has no config in force"
        };
        let detail = ConfigRejected {
            problems,
            previous_config_kept: self.state.config.is_some(),
        };
        self.emit(
            EventType::CONFIG_REJECTED,
            None,
            format!("config rejected ({kept}): {}", summary.join("; ")),
            detail,
        );
        self.dead_letter = Some(format!("invalid config: {}", summary.join("; ")));
        self.rejection = Some(Rejection::Config);
    }

    /// The config is gone, and with it the pipeline's timers and the executions that never
    /// triggered. The executions that did are kept until their retention ends
    /// (open ones too, no longer watched): a config applied again meanwhile must not start a
    /// date that ran, nor one whose job may still run, a second time, under the run id the
    /// job system has already seen (issue 60, item 3). With nothing to keep, the state goes.
    fn on_config_deleted(&mut self) {
        self.cancel_timers(|_| true);
        let before = self.state.config.clone();
        self.sync_subscriptions(before.as_deref(), None);
        let had_config = self.state.config.is_some();
        let ran: Vec<(ExecutionId, DateTime<Utc>)> = (self.state.executions.iter())
            .filter(|(_, e)| e.attempt > 0)
            .map(|(id, e)| (id.clone(), e.phase_since))
            .collect();
        // Expiry is reckoned under the config that ran them (its timezone and post-run
        // retention), before it goes; an open one's from when it entered its phase.
        let expiries: Vec<(ExecutionId, DateTime<Utc>)> = (ran.iter())
            .map(|(id, since)| (id.clone(), self.expires_at(id, *since)))
            .collect();
        let open = (self.state.executions.values()).filter_map(|e| e.phase.run_id().cloned());
        self.ended_runs.extend(open.collect::<Vec<_>>());
        let detail = ConfigDeleted {
            deleted: true,
            had_config,
            kept_executions: ran.len(),
        };
        let kept = match ran.len() {
            0 => "its state is dropped".to_string(),
            n => format!(
                "its state is dropped but for the {n} execution(s) that triggered, kept until their retention ends so that a config applied again does not run their dates again"
            ),
        };
        self.emit(
            EventType::CONFIG_ACCEPTED,
            None,
            format!("config deleted for {}: {kept}", self.pipeline_id),
            detail,
        );
        if ran.is_empty() {
            self.delete = true;
            return;
        }
        let keep: std::collections::HashSet<&ExecutionId> = ran.iter().map(|(id, _)| id).collect();
        let dropped: Vec<ExecutionId> = (self.state.executions.keys())
            .filter(|id| !keep.contains(id))
            .cloned()
            .collect();
        for id in dropped {
            self.state.executions.remove(&id);
            self.state.forecasts.remove(&id);
        }
        // The readings stay: the same reading again after a new apply is no late data.
        // They go with the kept executions' expiry (and the rest with the state).
        self.state.config = None;
        self.state.unknown_sensors.clear();
        for (id, at) in expiries {
            self.set_timer(TimerKind::Expire { execution: id }, at);
        }
    }
}
