//! When executions start, and what is said when they do not: the cron tick that opens an
//! execution, PIPELINE_EXCLUDED on dormant days, SCHEDULE_MISSED / IRREGULAR_SCHEDULE_MISSED
//! at the expected start, SENSOR_DEADLINE_EXPIRED when the trigger window closes, and
//! TRIGGER_RECOVERED when the conditions already hold but nothing started.
//!
//! Every pipeline-level timer is armed forward-only from the moment the config is accepted,
//! so a new pipeline or a restored state never alerts about the past.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::{Decider, Execution, Phase};
use crate::core::config::{ClockTime, Deadline, ExcludeBy, PipelineConfig, SCHEDULE_IDS};
use crate::core::events::detail::{NotStarted, Reason, Sensor, StartMissed, StartedLate, TriggerWindowClosed};
use crate::core::events::EventType;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::rules;
use crate::core::schedule::{local_instant, next_daily, sla_deadline};
use crate::core::timers::TimerKind;

/// How long past its window (or poll window) an execution may sit before the watchdog
/// calls it stale.
pub(super) const STALE_GRACE: TimeDelta = TimeDelta::minutes(10);

impl Decider<'_> {
    /// Re-arms the pipeline-level timers from now on, for the config in force.
    pub(super) fn arm_schedule(&mut self) {
        self.cancel_timers(|t| t.execution().is_none());
        let Some(config) = self.state.config.clone() else {
            return;
        };
        let now = self.now();
        let tz = config.schedule.timezone;
        if let Some(cron) = config.schedule.cron.as_ref() {
            if let Some(next) = cron.next_after(now, tz) {
                self.set_timer(TimerKind::CronTick, next);
            }
        }
        if let Some((date, at)) = next_start_check(&config, now) {
            self.set_timer(TimerKind::StartCheck { date }, at);
        }
        self.arm_trigger_deadline(&config);
        self.arm_sla_chain();
    }

    pub(super) fn on_timer(&mut self, kind: &TimerKind, due: DateTime<Utc>) {
        match kind {
            TimerKind::Evaluate { execution } => match self.state.executions.get(execution) {
                Some(e) if e.phase == Phase::AwaitingRules => self.evaluate(execution, true),
                _ => self
                    .notes
                    .push(format!("evaluation timer for {execution} has nothing to do")),
            },
            TimerKind::CronTick => self.on_cron_tick(due),
            TimerKind::StartCheck { date } => self.on_start_check(*date),
            TimerKind::TriggerDeadline { date } => self.on_trigger_deadline(*date),
            TimerKind::SlaWarning { execution } => self.on_sla_warning(execution),
            TimerKind::SlaBreach { execution } => self.on_sla_breach(execution),
            TimerKind::SlaForecast { execution } => self.forecast_sla(execution),
            TimerKind::EvaluationSlaWarning { execution } => self.on_evaluation_deadline(execution, false),
            TimerKind::EvaluationSlaBreach { execution } => self.on_evaluation_deadline(execution, true),
            TimerKind::RelativeSlaWarning { execution } => self.on_relative_sla(execution, false),
            TimerKind::RelativeSlaBreach { execution } => self.on_relative_sla(execution, true),
            TimerKind::JobPollWindow { execution, run_id } => self.on_poll_window_closed(execution, run_id),
            TimerKind::JobStatusCheck { execution, run_id } => self.on_status_check_due(execution, run_id),
            TimerKind::Watchdog { execution } => self.on_watchdog(execution),
            TimerKind::StaleSensorCheck { execution } => self.check_stale(execution),
            TimerKind::EvaluatorDue { execution, key } => self.on_evaluator_due(execution, key),
            TimerKind::PostRunTimeout { execution } => self.on_post_run_timeout(execution),
            TimerKind::Expire { execution } => self.on_expire(execution),
            TimerKind::Forget => self.on_forget(),
        }
    }

    /// A cron occurrence: open its execution (or say why not) and arm the next one.
    fn on_cron_tick(&mut self, due: DateTime<Utc>) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        let Some(cron) = config.schedule.cron.as_ref() else {
            return;
        };
        let now = self.now();
        let tz = config.schedule.timezone;
        if let Some(next) = cron.next_after(now.max(due), tz) {
            self.set_timer(TimerKind::CronTick, next);
        }
        let id = ExecutionId::new(config.schedule_id(), cron.execution_date(due, tz));
        if config.schedule.trigger.is_some() {
            self.trigger_missed_cron(&config, &id, due);
            return;
        }
        if self.state.executions.contains_key(&id) {
            let date = id.date();
            self.notes
                .push(format!("cron occurrence {date}: execution {id} exists"));
            return;
        }
        if let Some(ran) = self.ran_under_another_schedule(&id) {
            self.notes.push(format!(
                "cron occurrence {id} not started: {ran} ran that date under the former schedule"
            ));
            return;
        }
        if let Some(reason) = day_excluded(&config, id.date()) {
            self.exclude(&id, reason, false);
            return;
        }
        let late = now - due;
        if late > config.schedule.evaluation.window {
            // The processor was not running when the occurrence was due (or its timer was
            // lost): say so, once, then run it now rather than not at all.
            // Occurrences after this one that also passed are not run (the next tick is the
            // first one after now), but they are counted here rather than skipped silently.
            let mut skipped = 0u32;
            let mut at = due;
            while let Some(next) = cron.next_after(at, tz).filter(|n| *n <= now && skipped < 10_000) {
                skipped += 1;
                at = next;
            }
            let detail = StartedLate {
                expected_at: due,
                late_by_seconds: late.num_seconds(),
                started: true,
                later_occurrences_skipped: skipped,
            };
            let message = format!(
                "cron occurrence due at {} was not started on time (running it now; {skipped} later occurrences also passed and are not run)",
                due.to_rfc3339()
            );
            self.emit(EventType::SCHEDULE_MISSED, Some(&id), message, detail);
        }
        // A relative SLA without a trigger is measured from the cron start.
        self.open_execution(&id, Some(due));
    }

    /// SCHEDULE_MISSED for a pipeline with both `cron` and `trigger`: its trigger sensor
    /// starts the day's execution at any time, and the cron time is when nothing having
    /// started is reported (the earlier design's path: interlock
    /// `internal/lambda/watchdog/missed.go`; no code of it started a run at the cron time).
    fn trigger_missed_cron(&mut self, config: &PipelineConfig, id: &ExecutionId, due: DateTime<Utc>) {
        let date = id.date();
        if self.day_started(config, date) {
            self.notes
                .push(format!("cron occurrence {date}: the trigger started it"));
            return;
        }
        if let Some(reason) = day_excluded(config, date) {
            self.notes.push(format!("cron occurrence {date} not checked: {reason}"));
            return;
        }
        let message = format!(
            "no execution for {date} by its cron time {}: the trigger sensor has not started it",
            due.to_rfc3339()
        );
        let info = NotStarted {
            expected_at: due,
            started: false,
        };
        self.emit(EventType::SCHEDULE_MISSED, Some(id), message, info);
    }

    /// The expected start of a day passed: recover, or report the miss.
    fn on_start_check(&mut self, date: ExecutionDate) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        if let Some((next, at)) = next_start_check(&config, self.now()) {
            self.set_timer(TimerKind::StartCheck { date: next }, at);
        }
        let id = ExecutionId::new(config.schedule_id(), date);
        if self.day_started(&config, date) {
            return;
        }
        if let Some(reason) = day_excluded(&config, date) {
            self.notes.push(format!("{date} not checked: {reason}"));
            return;
        }
        if self.recover(&config, &id) {
            return;
        }
        let irregular = !config.schedule.include_dates.is_empty();
        let kind = match irregular {
            true => EventType::IRREGULAR_SCHEDULE_MISSED,
            false => EventType::SCHEDULE_MISSED,
        };
        let message = match irregular {
            true => format!("inclusion date {date} passed its expected start with no execution"),
            false => format!("no execution for {date} by its expected start"),
        };
        self.emit(kind, Some(&id), message, StartMissed { expected_date: date });
    }

    /// The next `schedule.trigger.deadline` still ahead: `HH:MM` closes each day's trigger
    /// window, `:MM` each hour's (hour H's at H+1:MM, as for SLAs).
    fn arm_trigger_deadline(&mut self, config: &PipelineConfig) {
        let Some(deadline) = config.schedule.trigger_deadline else {
            return;
        };
        let tz = config.schedule.timezone;
        let hourly = matches!(deadline, Deadline::Hourly { .. });
        let next = super::sla::next_date_due(self.now(), tz, hourly, |date| match deadline {
            Deadline::Daily(time) => Some(local_instant(date.day, time, tz)),
            Deadline::Hourly { .. } => sla_deadline(date, deadline, tz, None),
        });
        if let Some((date, at)) = next {
            self.set_timer(TimerKind::TriggerDeadline { date }, at);
        }
    }

    /// `schedule.trigger.deadline` passed with nothing started for the day: no sensor may
    /// start it any more.
    fn on_trigger_deadline(&mut self, date: ExecutionDate) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        self.arm_trigger_deadline(&config);
        let id = ExecutionId::new(config.schedule_id(), date);
        // For a daily date, an hourly execution of the day counts as the day having started;
        // an hourly date is its own hour only.
        let started = self.state.executions.contains_key(&id)
            || (date.hour.is_none() && self.has_execution(config.schedule_id(), date.day));
        if started || day_excluded(&config, date).is_some() {
            return;
        }
        let reason = format!("the trigger window for {date} closed before any trigger sensor arrived");
        let execution = Execution::skipped(id.clone(), self.now(), reason.clone());
        self.state.executions.insert(id.clone(), execution.into());
        self.arm_expiry(&id);
        // The earlier design's runbook: a rerun restarts a closed window
        // (interlock internal/lambda/watchdog/sla.go, closeSensorTriggerWindow).
        let rerun = format!("sluice rerun {} {date}", self.pipeline_id);
        self.emit(
            EventType::SENSOR_DEADLINE_EXPIRED,
            Some(&id),
            format!("{reason}: rerun to restart it ({rerun})"),
            TriggerWindowClosed { rerun_command: rerun },
        );
    }

    /// Whether the day of `date` has an execution, daily or of any of its hours.
    fn day_started(&self, config: &PipelineConfig, date: ExecutionDate) -> bool {
        self.has_execution(config.schedule_id(), date.day)
    }

    /// An execution of `id`'s date under another schedule that started a run (the pipeline
    /// was switched between cron and sensor-started): the date ran, so only a rerun of it
    /// may run it again (issue 60, item 3).
    fn ran_under_another_schedule(&self, id: &ExecutionId) -> Option<ExecutionId> {
        // Looked up by id, not by day: a read in part of the one date answers it.
        (SCHEDULE_IDS.iter().filter(|s| **s != id.schedule()))
            .map(|schedule| ExecutionId::new(schedule, id.date()))
            .find(|other| self.state.executions.get(other).is_some_and(|e| e.attempt > 0))
    }

    /// Whether `schedule` has an execution of `day`.
    fn has_execution(&self, schedule: &str, day: NaiveDate) -> bool {
        self.state.executions.on_day(schedule, day).next().is_some()
    }

    /// Starts the execution a sensor `sensor_key` scoped to `date` triggers, unless it exists
    /// already. Returns a newly started execution.
    pub(super) fn start_from_sensor(&mut self, sensor_key: &str, date: ExecutionDate) -> Option<ExecutionId> {
        let config = self.state.config.clone()?;
        if !config.schedule.sensor_started() || !starts_on(&config, sensor_key) {
            return None;
        }
        let id = ExecutionId::new(config.schedule_id(), date);
        let holds = self.trigger_holds(&config, sensor_key, date);
        let existing = self.state.executions.get(&id);
        // Passed over on an excluded run day: the trigger on a later day may start it.
        let passed_over = existing.is_some_and(|e| matches!(e.phase, Phase::Skipped { .. }) && e.restart_on_trigger);
        if holds && (existing.is_none() || passed_over || existing.is_some_and(|e| e.restart_on_trigger)) {
            if let Some(reason) = self.trigger_excluded(&config, date) {
                if passed_over {
                    self.notes
                        .push(format!("trigger for {date} passed over again: {reason}"));
                } else if existing.is_none() {
                    self.exclude(&id, reason, config.schedule.exclude_by == ExcludeBy::RunDay);
                } else {
                    self.notes.push(format!("{id} is not started again today: {reason}"));
                }
                return None;
            }
        }
        if passed_over && holds {
            // Opened afresh below, over the record of the day it was passed over.
            self.cancel_timers(|t| t.execution() == Some(&id));
        }
        if let Some(existing) = self.state.executions.get(&id).filter(|_| !(passed_over && holds)) {
            if existing.restart_on_trigger && holds {
                // An outage ended it: the trigger starts it again, its rules first.
                if let Some(e) = self.state.executions.get_mut(&id) {
                    e.restart_on_trigger = false;
                }
                self.enter(&id, Phase::AwaitingRules);
                self.begin_window(&id);
                return Some(id);
            }
            let phase = existing.phase.name();
            self.notes.push(format!(
                "execution {id} exists ({phase}): trigger sensor changes nothing"
            ));
            return None;
        }
        if !holds {
            return None;
        }
        if let Some(ran) = self.ran_under_another_schedule(&id) {
            self.notes.push(format!(
                "{id} not started: {ran} ran that date under the pipeline's former schedule (rerun it to run it again)"
            ));
            return None;
        }
        self.open_execution(&id, Some(self.now()));
        Some(id)
    }

    /// Why a trigger sensor may not start `date` now: not an inclusion date, or excluded by
    /// the day [`ExcludeBy`] names (the day the trigger arrives, by default).
    fn trigger_excluded(&self, config: &PipelineConfig, date: ExecutionDate) -> Option<String> {
        match config.schedule.exclude_by {
            ExcludeBy::DataDate => day_excluded(config, date),
            ExcludeBy::RunDay => {
                let today = self.now().with_timezone(&config.schedule.timezone).date_naive();
                not_included(config, date.day).or_else(|| {
                    (config.exclusions.excludes(today))
                        .map(|reason| format!("the trigger arrived on {today}: {reason}"))
                })
            }
        }
    }

    /// TRIGGER_RECOVERED: a config arrived (or changed) and stored sensors already satisfy its
    /// trigger for today or later, with no execution: start it rather than wait for a re-send.
    pub(super) fn recover_stored_triggers(&mut self) {
        let Some(config) = self.state.config.clone() else {
            return;
        };
        if !config.schedule.sensor_started() {
            return;
        }
        let zone = config.schedule.undated_zone();
        let today = self.now().with_timezone(&zone).date_naive();
        let mut dates: Vec<ExecutionDate> = self
            .state
            .sensors
            .iter()
            .filter(|(slot, s)| starts_on(&config, s.key_in(slot)))
            .map(|(_, s)| super::sensor::execution_date(s, zone, s.received_at))
            .filter(|date| date.day >= today)
            .collect();
        dates.sort();
        dates.dedup();
        for date in dates {
            let id = ExecutionId::new(config.schedule_id(), date);
            let fresh = !self.state.executions.contains_key(&id) && self.ran_under_another_schedule(&id).is_none();
            if fresh && self.trigger_excluded(&config, date).is_none() {
                self.recover(&config, &id);
            }
        }
    }

    /// Starts `date`'s execution with TRIGGER_RECOVERED if its trigger holds now on a reading
    /// that belongs to `date` (an undated reading received yesterday started yesterday's run).
    fn recover(&mut self, config: &PipelineConfig, id: &ExecutionId) -> bool {
        let date = id.date();
        let Some(sensor_key) =
            trigger_keys(config).find(|k| self.has_reading_for(config, k, date) && self.trigger_holds(config, k, date))
        else {
            return false;
        };
        let message = format!("trigger {sensor_key:?} holds for {date} but nothing had started: starting now");
        self.emit(
            EventType::TRIGGER_RECOVERED,
            Some(id),
            message,
            Sensor {
                sensor: sensor_key.into(),
            },
        );
        // The relative SLA counts from when the trigger's data arrived, not from now.
        let arrived = self.readings_received_at(sensor_key, date);
        self.open_execution(id, Some(arrived.unwrap_or(self.now())));
        true
    }

    /// Whether a stored reading of `sensor_key` belongs to `date`: scoped to it, else
    /// timestamped or received on it.
    fn has_reading_for(&self, config: &PipelineConfig, sensor_key: &str, date: ExecutionDate) -> bool {
        let tz = config.schedule.undated_zone();
        (self.state.readings_of(sensor_key)).any(|(_, s)| super::sensor::execution_date(s, tz, s.received_at) == date)
    }

    /// When the reading of `sensor_key` that `date`'s rules see arrived.
    fn readings_received_at(&self, sensor_key: &str, date: ExecutionDate) -> Option<DateTime<Utc>> {
        let (date, day) = (Some(date), Some(date.whole_day()));
        (self.state.readings_of(sensor_key))
            .filter(|(_, s)| s.scope().is_none() || s.scope() == date || s.scope() == day)
            .map(|(_, s)| s.received_at)
            .max()
    }

    fn trigger_holds(&self, config: &PipelineConfig, sensor_key: &str, date: ExecutionDate) -> bool {
        let readings = self.readings(date);
        match &config.schedule.trigger {
            Some(trigger) if trigger.key == sensor_key => rules::evaluate(trigger, &readings, self.moment()).passed,
            // Without a trigger, a dependency's completion report starts the execution.
            None => readings.contains_key(sensor_key),
            Some(_) => false,
        }
    }

    /// PIPELINE_EXCLUDED: `id` is dormant for `reason`. The date is kept as skipped so the
    /// same day is reported once; `passed_over`: only for today (the trigger arrived on an
    /// excluded day), so a trigger on a later day may still start it.
    fn exclude(&mut self, id: &ExecutionId, reason: String, passed_over: bool) {
        let mut execution = Execution::skipped(id.clone(), self.now(), reason.clone());
        execution.restart_on_trigger = passed_over;
        self.state.executions.insert(id.clone(), execution.into());
        self.arm_expiry(id);
        let message = format!("{} is dormant ({reason}): nothing runs", id.date());
        self.emit(EventType::PIPELINE_EXCLUDED, Some(id), message, Reason { reason });
    }

    /// Opens an execution: SLA timers, the watchdog, and the first evaluation.
    /// `first_sensor` is when the sensor that started it arrived (relative SLAs count from it).
    pub(super) fn open_execution(&mut self, id: &ExecutionId, first_sensor: Option<DateTime<Utc>>) {
        let Some(config) = self.state.config.as_ref() else {
            return;
        };
        let now = self.now();
        let mut execution = Execution::new(id.clone(), now, config.schedule.evaluation.window);
        execution.first_sensor_at = first_sensor;
        self.state.executions.insert(id.clone(), execution.into());
        self.arm_sla(id);
        self.begin_window(id);
    }

    /// Starts an execution's evaluation window from now: the watchdog behind it, and the
    /// first evaluation (which arms the interval timer).
    pub(super) fn begin_window(&mut self, id: &ExecutionId) {
        let now = self.now();
        let Some(window) = self.config().map(|c| c.schedule.evaluation.window) else {
            return;
        };
        // `sla.validationTimeout` stops evaluation earlier, if it comes first.
        let closes = match self.validation_timeout(id, now) {
            Some(timeout) => (now + window).min(timeout),
            None => now + window,
        };
        let Some(e) = self.state.executions.get_mut(id) else {
            return;
        };
        e.window_closes_at = closes;
        self.set_watchdog(id, closes + STALE_GRACE);
        self.arm_evaluation_deadline(id);
        self.evaluate(id, true);
        self.start_evaluators(id);
        self.check_stale(id);
    }

    pub(super) fn set_watchdog(&mut self, id: &ExecutionId, at: DateTime<Utc>) {
        let execution = id.clone();
        self.set_timer(TimerKind::Watchdog { execution }, at);
    }
}

/// The sensor keys that can start an execution: the trigger, else every dependency.
pub(super) fn trigger_keys(config: &PipelineConfig) -> impl Iterator<Item = &str> {
    let trigger = config.schedule.trigger.iter().map(|t| t.key.as_str());
    let deps = config
        .depends_on
        .iter()
        .filter(|_| config.schedule.trigger.is_none())
        .map(|d| d.key.as_str());
    trigger.chain(deps)
}

fn starts_on(config: &PipelineConfig, sensor_key: &str) -> bool {
    trigger_keys(config).any(|k| k == sensor_key)
}

/// Why `date` is dormant: an exclusion, or not one of the inclusion dates.
pub(super) fn day_excluded(config: &PipelineConfig, date: ExecutionDate) -> Option<String> {
    dormant(config, date.day)
}

/// Why `day` is dormant (see [`day_excluded`]).
pub(super) fn dormant(config: &PipelineConfig, day: NaiveDate) -> Option<String> {
    not_included(config, day).or_else(|| config.exclusions.excludes(day))
}

/// Why `day` is not one of the pipeline's inclusion dates, when it has some.
fn not_included(config: &PipelineConfig, day: NaiveDate) -> Option<String> {
    let include = &config.schedule.include_dates;
    (!include.is_empty() && !include.contains(&day)).then(|| format!("{day} is not one of the inclusion dates"))
}

/// The next expected-start check after `now`: at `schedule.time` each day, or (irregular
/// schedules) at `schedule.time` or the end of each inclusion date.
fn next_start_check(config: &PipelineConfig, now: DateTime<Utc>) -> Option<(ExecutionDate, DateTime<Utc>)> {
    let tz = config.schedule.timezone;
    let expected = config.schedule.expected_start;
    if config.schedule.include_dates.is_empty() {
        let (day, at) = next_daily(now, expected?, tz);
        return Some((ExecutionDate::daily(day), at));
    }
    let end_of_day = |day: NaiveDate| match expected {
        Some(time) => local_instant(day, time, tz),
        None => local_instant(day.succ_opt().unwrap_or(day), ClockTime { hour: 0, minute: 0 }, tz),
    };
    config
        .schedule
        .include_dates
        .iter()
        .map(|day| (*day, end_of_day(*day)))
        .filter(|(_, at)| *at > now)
        .min_by_key(|(_, at)| *at)
        .map(|(day, at)| (ExecutionDate::daily(day), at))
}
