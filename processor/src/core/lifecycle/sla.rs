//! SLA_WARNING / SLA_BREACH / SLA_MET, RELATIVE_SLA_WARNING / RELATIVE_SLA_BREACH, and in a
//! dry run DRY_RUN_SLA_PROJECTION.
//!
//! Absolute SLAs are per date, not per run, so they are armed whether or not any data ever
//! arrives: a cron pipeline arms them when its occurrence opens the execution, a sensor-driven
//! one keeps a chain of timers running from one date's deadline to the next. Alert hygiene:
//! no warning at or after the deadline, nothing after completion, nothing after a failure
//! that ended the date (the failure was the alert, as Interlock cancelled its SLA schedules
//! when a run ended), SLA_MET only when a job ran and finished before the deadline, each
//! alert at most once per execution.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use chrono_tz::Tz;

use super::schedule::dormant;
use super::{Decider, Phase};
use crate::core::config::{ClockTime, Deadline, DeadlineDay, PipelineConfig, SCHEDULE_IDS};
use crate::core::duration::format_duration;
use crate::core::events::detail::{RelativeSla, SlaAlert, SlaMet, SlaProjection, SlaVerdict};
use crate::core::events::EventType;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::schedule::sla_deadline;
use crate::core::timers::TimerKind;

impl Decider<'_> {
    /// Arms the SLA timers of one execution date (absolute, and relative once its first
    /// sensor is known), forward-only.
    pub(super) fn arm_sla(&mut self, id: &ExecutionId) {
        let now = self.now();
        let Some(config) = self.config().filter(|c| !c.dry_run) else {
            return;
        };
        if let Some(deadline) = deadline_of(config, id.date()) {
            let expected = config.sla.as_ref().and_then(|s| s.expected_duration);
            if deadline > now {
                self.set_timer(TimerKind::SlaBreach { execution: id.clone() }, deadline);
            }
            if let Some(warn_at) = expected.map(|e| deadline - e).filter(|at| *at > now) {
                self.set_timer(TimerKind::SlaWarning { execution: id.clone() }, warn_at);
            }
            self.forecast_sla(id);
        }
        self.arm_relative_sla(id);
        self.arm_evaluation_deadline(id);
    }

    /// RELATIVE_SLA timers, measured from the execution's first sensor.
    pub(super) fn arm_relative_sla(&mut self, id: &ExecutionId) {
        let Some(config) = self.config().filter(|c| !c.dry_run) else {
            return;
        };
        let Some(sla) = config.sla.as_ref() else { return };
        let Some(max) = sla.max_duration else { return };
        let expected = sla.expected_duration;
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        let Some(first) = execution.first_sensor_at else {
            return;
        };
        let now = self.now();
        if first + max > now {
            self.set_timer(TimerKind::RelativeSlaBreach { execution: id.clone() }, first + max);
        }
        let warn_at = first + relative_warning_offset(max, expected);
        if warn_at > now {
            self.set_timer(TimerKind::RelativeSlaWarning { execution: id.clone() }, warn_at);
        }
    }

    /// Pipelines whose executions sensors start (and irregular ones): arm the next date whose
    /// deadline is still ahead, whether or not anything starts it.
    pub(super) fn arm_sla_chain(&mut self) {
        let Some(config) = self.config().filter(|c| c.schedule.sensor_started() && !c.dry_run) else {
            return;
        };
        let Some(deadline) = config.sla.as_ref().and_then(|s| s.deadline) else {
            return;
        };
        let now = self.now();
        let hourly = matches!(deadline, Deadline::Hourly { .. });
        let next = next_date_due(now, config.schedule.timezone, hourly, |date| {
            let id = ExecutionId::new(config.schedule_id(), date);
            let done = self.state.executions.phase(&id).is_some_and(Phase::is_completed);
            deadline_of(config, date).filter(|_| dormant(config, date.day).is_none() && !done)
        });
        if let Some((date, _)) = next {
            self.arm_sla(&ExecutionId::new(config.schedule_id(), date));
        }
    }

    pub(super) fn on_sla_warning(&mut self, id: &ExecutionId) {
        let Some((date, deadline)) = self.alertable_deadline(id) else {
            return;
        };
        if self.state.executions.get(id).is_some_and(|e| e.sla.warned) || self.now() >= deadline {
            return;
        }
        let left = deadline - self.now();
        let message = format!(
            "{date} is not complete and its SLA deadline {} is {} away",
            deadline.to_rfc3339(),
            format_duration(left)
        );
        let info = self.alert_detail(id, deadline);
        self.emit(EventType::SLA_WARNING, Some(id), message, info);
        if let Some(e) = self.state.executions.get_mut(id) {
            e.sla.warned = true;
        }
    }

    pub(super) fn on_sla_breach(&mut self, id: &ExecutionId) {
        if let Some((date, deadline)) = self.alertable_deadline(id) {
            let message = format!("{date} missed its SLA deadline {}", deadline.to_rfc3339());
            let info = self.alert_detail(id, deadline);
            self.emit(EventType::SLA_BREACH, Some(id), message, info);
            if let Some(e) = self.state.executions.get_mut(id) {
                e.sla.breached = true;
            }
            self.cancel_sla_warning(id);
        }
        self.arm_sla_chain();
    }

    /// The date and deadline of `id` if an alert about it is due: the day is not dormant,
    /// nothing completed, no breach reported yet.
    fn alertable_deadline(&self, id: &ExecutionId) -> Option<(ExecutionDate, DateTime<Utc>)> {
        let config = self.config().filter(|c| !c.dry_run)?;
        let date = id.date();
        if dormant(config, date.day).is_some() {
            return None;
        }
        if let Some(e) = self.state.executions.get(id) {
            if e.phase.is_completed() || e.sla.breached || failure_told(e) {
                return None;
            }
        }
        // A daily deadline over a day run as hourly executions: each hour carries its own
        // alerts (naming the hour that is late), so the day itself says nothing.
        if !self.state.executions.contains_key(id) && date.hour.is_none() {
            let mut of_day = SCHEDULE_IDS
                .iter()
                .flat_map(|s| self.state.executions.on_day(s, date.day));
            if of_day.any(|(id, _)| id.date().hour.is_some()) {
                return None;
            }
        }
        Some((date, deadline_of(config, date)?))
    }

    fn alert_detail(&self, id: &ExecutionId, deadline: DateTime<Utc>) -> SlaAlert {
        let phase = self
            .state
            .executions
            .get(id)
            .map(|e| e.phase.name())
            .unwrap_or("notStarted");
        let expected = self
            .config()
            .and_then(|c| c.sla.as_ref())
            .and_then(|s| s.expected_duration)
            .map(|d| d.num_seconds());
        SlaAlert {
            deadline,
            expected_duration_seconds: expected,
            phase: phase.into(),
        }
    }

    pub(super) fn on_relative_sla(&mut self, id: &ExecutionId, breach: bool) {
        let Some(max) = self.config().and_then(|c| c.sla.as_ref()).and_then(|s| s.max_duration) else {
            return;
        };
        let now = self.now();
        let Some(execution) = self.state.executions.get_mut(id) else {
            return;
        };
        let already = alerted(breach, execution.sla.relative_warned, execution.sla.relative_breached);
        if execution.phase.is_completed() || already || failure_told(execution) {
            return;
        }
        let Some(first) = execution.first_sensor_at else {
            return;
        };
        let date = execution.id.date();
        let (kind, verb) = match breach {
            true => {
                execution.sla.relative_breached = true;
                (EventType::RELATIVE_SLA_BREACH, "exceeded")
            }
            false => {
                execution.sla.relative_warned = true;
                (EventType::RELATIVE_SLA_WARNING, "is close to")
            }
        };
        let message = format!(
            "{date} has run {} since its first sensor and {verb} its maxDuration of {}",
            format_duration(now - first),
            format_duration(max)
        );
        let info = RelativeSla {
            first_sensor_at: first,
            max_duration_seconds: max.num_seconds(),
            elapsed_seconds: (now - first).num_seconds(),
        };
        self.emit(kind, Some(id), message, info);
    }

    /// SLA_MET: the job completed before its deadline, with no breach reported.
    pub(super) fn sla_on_completion(&mut self, id: &ExecutionId) {
        let now = self.now();
        // Shared, not copied: the decider is borrowed again below.
        let Some(config) = self.state.config.clone().filter(|c| !c.dry_run) else {
            return;
        };
        let config = &*config;
        let Some(deadline) = deadline_of(config, id.date()) else {
            return;
        };
        let Some(execution) = self.state.executions.get_mut(id) else {
            return;
        };
        if execution.sla.breached || execution.sla.met || now > deadline {
            return;
        }
        execution.sla.met = true;
        let warned = execution.sla.warned;
        let at_risk = self.state.forecasts.get(id).is_some_and(|m| m.at_risk);
        let message = format!(
            "completed {} before the SLA deadline {}",
            format_duration(deadline - now),
            deadline.to_rfc3339()
        );
        let info = SlaMet {
            deadline,
            margin_seconds: (deadline - now).num_seconds(),
            warned,
            at_risk,
        };
        self.emit(EventType::SLA_MET, Some(id), message, info);
        self.cancel_sla_warning(id);
        // Met, the date needs no breach alert (it would find the date complete and say
        // nothing), and a pending timer keeps its execution live: read with every decision
        // of its pipeline until the deadline, an hourly pipeline's whole day under a daily
        // deadline. Kept when it is a link of the SLA chain (it arms the next date owed when
        // it fires). A rerun arms it again ([`Self::rearm_met_sla`]).
        if !chain_link(config, id.date()) {
            self.cancel_execution_timers(id, |t| matches!(t, TimerKind::SlaBreach { .. }));
        }
    }

    /// A rerun of a date whose SLA was met: the breach alert cancelled when it was met is
    /// armed again while the deadline is ahead, as it would have stayed armed (a rerun still
    /// running at the deadline is late).
    pub(super) fn rearm_met_sla(&mut self, id: &ExecutionId) {
        let now = self.now();
        let Some(config) = self.config().filter(|c| !c.dry_run) else {
            return;
        };
        let Some(deadline) = deadline_of(config, id.date()).filter(|at| *at > now) else {
            return;
        };
        if self.state.executions.get(id).is_some_and(|e| e.sla.met) {
            self.set_timer(TimerKind::SlaBreach { execution: id.clone() }, deadline);
        }
    }

    /// A settled SLA needs no warning and no forecast.
    fn cancel_sla_warning(&mut self, id: &ExecutionId) {
        self.cancel_execution_timers(id, |t| {
            matches!(t, TimerKind::SlaWarning { .. } | TimerKind::SlaForecast { .. })
        });
    }

    /// DRY_RUN_SLA_PROJECTION: had the job started now and run for `expectedDuration`,
    /// would it have met the deadline, and by how much.
    pub(super) fn project_sla(&mut self, id: &ExecutionId) {
        let Some(sla) = self.config().and_then(|c| c.sla.clone()) else {
            return;
        };
        let now = self.now();
        let projected = now + sla.expected_duration.unwrap_or_default();
        let Some(verdict) = self.sla_verdict(id, projected) else {
            return;
        };
        let message = match verdict.met {
            true => "dry run: the job would meet its SLA deadline",
            false => "dry run: the job would miss its SLA deadline",
        };
        let info = SlaProjection {
            verdict,
            projected_completion: projected,
        };
        self.emit(EventType::DRY_RUN_SLA_PROJECTION, Some(id), message, info);
    }

    /// The verdict on a completion at `at`; `None` without a deadline.
    pub(super) fn sla_verdict(&self, id: &ExecutionId, at: DateTime<Utc>) -> Option<SlaVerdict> {
        let deadline = self.config().and_then(|c| deadline_of(c, id.date()))?;
        Some(SlaVerdict::at(deadline, at))
    }
}

/// The SLA deadline of an execution date under `config`.
pub(crate) fn deadline_of(config: &PipelineConfig, date: ExecutionDate) -> Option<DateTime<Utc>> {
    deadline_at(config, date, config.sla.as_ref()?.deadline?)
}

/// When `deadline` falls for an execution date, by the SLA's rules (its timezone, and
/// `sla.deadlineDay` for a daily one).
pub(super) fn deadline_at(config: &PipelineConfig, date: ExecutionDate, deadline: Deadline) -> Option<DateTime<Utc>> {
    let sla = config.sla.as_ref()?;
    let tz = sla.timezone.unwrap_or(config.schedule.timezone);
    match (deadline, sla.deadline_day) {
        // Hourly deadlines (`:MM`) are measured from the hour itself, whatever the day rule.
        (Deadline::Daily(_), DeadlineDay::NextDay) => {
            let next = ExecutionDate::daily(date.day.succ_opt()?);
            sla_deadline(next, deadline, tz, None)
        }
        _ => sla_deadline(date, deadline, tz, day_start(config, date.day, tz)),
    }
}

/// When a day's work starts (cron time, else `schedule.time`): a deadline at or before it
/// belongs to the next day.
fn day_start(config: &PipelineConfig, day: NaiveDate, tz: Tz) -> Option<ClockTime> {
    if let Some(cron) = config.schedule.cron.as_ref() {
        if !cron.is_sub_daily() {
            let midnight = crate::core::schedule::local_instant(day, ClockTime { hour: 0, minute: 0 }, tz);
            let first = cron.next_after(midnight - TimeDelta::seconds(1), tz)?;
            let local = first.with_timezone(&tz);
            if local.date_naive() == day {
                use chrono::Timelike;
                return Some(ClockTime {
                    hour: local.hour(),
                    minute: local.minute(),
                });
            }
        }
        return None;
    }
    config.schedule.expected_start
}

/// When RELATIVE_SLA_WARNING fires, after the first sensor: `expectedDuration` before the
/// breach when that fits, else at three quarters of `maxDuration`.
fn relative_warning_offset(max: TimeDelta, expected: Option<TimeDelta>) -> TimeDelta {
    match expected {
        Some(e) if e < max => max - e,
        _ => max * 3 / 4,
    }
}

/// The first daily (or hourly) execution date, from about now on, whose instant `due_at`
/// gives is after `now`. `due_at` returns `None` for dates to pass over.
/// Whether the SLA breach of `date` is a link of its pipeline's chain ([`Decider::arm_sla_chain`]):
/// a sensor-started pipeline's dates of its deadline's kind (hourly under an hourly deadline,
/// daily under a daily one).
fn chain_link(config: &PipelineConfig, date: ExecutionDate) -> bool {
    let deadline = config.sla.as_ref().and_then(|s| s.deadline);
    let hourly = deadline.map(|d| matches!(d, Deadline::Hourly { .. }));
    config.schedule.sensor_started() && hourly.is_some_and(|hourly| hourly == date.hour.is_some())
}

pub(super) fn next_date_due(
    now: DateTime<Utc>,
    tz: Tz,
    hourly: bool,
    due_at: impl Fn(ExecutionDate) -> Option<DateTime<Utc>>,
) -> Option<(ExecutionDate, DateTime<Utc>)> {
    let local = now.with_timezone(&tz).naive_local();
    // Start a little in the past: a deadline can roll over into the next day or hour.
    let mut date = match hourly {
        true => back_hours(ExecutionDate::hourly(local.date(), chrono::Timelike::hour(&local)), 2),
        false => ExecutionDate::daily(local.date().pred_opt().unwrap_or(local.date())),
    };
    let limit = if hourly { 24 * 400 } else { 400 };
    for _ in 0..limit {
        if let Some(at) = due_at(date).filter(|at| *at > now) {
            return Some((date, at));
        }
        date = next_date(date);
    }
    None
}

fn next_date(date: ExecutionDate) -> ExecutionDate {
    match date.hour {
        None => ExecutionDate::daily(date.day.succ_opt().unwrap_or(date.day)),
        Some(23) => ExecutionDate::hourly(date.day.succ_opt().unwrap_or(date.day), 0),
        Some(h) => ExecutionDate::hourly(date.day, h + 1),
    }
}

fn back_hours(date: ExecutionDate, hours: u32) -> ExecutionDate {
    let mut d = date;
    for _ in 0..hours {
        d = match d.hour {
            Some(0) => ExecutionDate::hourly(d.day.pred_opt().unwrap_or(d.day), 23),
            Some(h) => ExecutionDate::hourly(d.day, h - 1),
            None => d,
        };
    }
    d
}

/// Whether a warning (`breach` false) or breach is said already: nothing warns after its
/// breach, and neither repeats.
pub(super) fn alerted(breach: bool, warned: bool, breached: bool) -> bool {
    breached || (!breach && warned)
}

/// Whether `execution` ended without success and for good (failed, exhausted or cancelled,
/// and no trigger sensor will start it again): what ended it was the alert, so no SLA alert
/// follows, as Interlock cancelled its SLA schedules when a run ended. A date released for
/// its next trigger sensor may still be late, and so may a stale run (Sluice lost track of
/// it; Interlock's watchdog left its SLA schedules in place too).
fn failure_told(execution: &super::Execution) -> bool {
    use super::Phase;
    let ended = matches!(
        execution.phase,
        Phase::Failed { .. } | Phase::ValidationExhausted { .. } | Phase::Cancelled { .. }
    );
    ended && !execution.restart_on_trigger
}
