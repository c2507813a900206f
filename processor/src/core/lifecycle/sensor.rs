//! INPUT_REJECTED (a timestamp from the future, a date beyond the retention, one sensor too
//! many), LATE_DATA_ARRIVAL / DRY_RUN_LATE_DATA, and the routing of every sensor: it may
//! start an execution (see [`schedule`](super::schedule)), re-evaluate waiting ones, or be a
//! post-run reading (see [`post_run`](super::post_run)).

use chrono::{DateTime, NaiveDate, Utc};

use super::{Decider, StoredSensor};
use crate::core::config::{PipelineConfig, INCLUSION_LOOKBACK_DAYS};
use crate::core::duration::format_duration;
use crate::core::events::detail::Sensor;
use crate::core::events::EventType;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::records::{Rejection, SensorReading};

impl Decider<'_> {
    pub(super) fn on_sensor(&mut self, reading: &SensorReading) {
        let now = self.now();
        let mut stored = StoredSensor {
            data: reading.data.clone().into(),
            received_at: now,
            date: reading.date,
            hour: reading.hour,
            timestamp: reading.timestamp,
            intervals: Default::default(),
            source: reading.source.clone(),
            error: reading.error.clone(),
            failures: 0,
        };
        if !self.state.sensors.contains_key(&stored.slot(&reading.key)) {
            // A new slot: first make room by forgetting what the retention no longer covers.
            self.prune_stale_readings();
        }
        if let Some((kind, reason)) = self.sensor_refusal(&reading.key, &stored) {
            self.reject(&format!("sensor {}", reading.key), &reason, kind);
            return;
        }
        let slot = stored.slot(&reading.key);
        // Counted from many writers (the earlier design's DynamoDB ADD): added to what is stored.
        match (reading.merge).apply(self.state.sensors.get(&slot).map(|s| &*s.data), &stored.data) {
            Ok(merged) => stored.data = merged.into(),
            Err(over) => {
                self.reject(
                    &format!("sensor {}", reading.key),
                    &over.to_string(),
                    Rejection::TooLarge,
                );
                return;
            }
        }
        // The cadence goes on from this slot's last reading, else the key's latest elsewhere
        // (a new date's first reading).
        let before = (self.state.sensors.get(&slot).map(|s| &**s))
            .or_else(|| self.state.sensors.latest_of(&reading.key).map(|(_, sensor)| sensor));
        stored.continue_cadence(before);
        if stored.error.is_some() {
            stored.failures = self.state.sensors.get(&slot).map_or(0, |s| s.failures) + 1;
            // A failed call counts, but an answer still within its ttl stays trusted.
            if let Some(trusted) = self.trusted_answer(&reading.key, &slot) {
                stored = StoredSensor {
                    failures: stored.failures,
                    ..trusted
                };
            }
        }
        let previous = self.state.sensors.insert(slot, stored.clone().into());
        let unchanged = previous.is_some_and(|p| p.data == stored.data);
        if unchanged {
            self.notes.push(format!("sensor {:?} re-sent unchanged", reading.key));
        }
        // Shared, not copied: the checks below borrow the decider mutably.
        let Some(config) = self.state.config.clone() else {
            self.notes.push(format!(
                "sensor {:?} kept until pipeline {} has a config (for the retention at most)",
                reading.key, self.pipeline_id
            ));
            self.arm_forget();
            return;
        };
        self.check_unknown(&config, &reading.key);
        let mut date = execution_date(&stored, config.schedule.undated_zone(), now);
        if stored.scope().is_none() {
            if let Some(inclusion) = self.recent_inclusion_date(&config, date.day) {
                self.notes.push(format!(
                    "undated sensor {:?} on {}, not an inclusion date, counts for the most recent one, {inclusion}",
                    reading.key, date.day
                ));
                date = ExecutionDate::daily(inclusion);
            }
        }
        let id = ExecutionId::new(config.schedule_id(), date);
        if self.is_post_run_key(&reading.key) {
            // An undated post-run reading belongs to the latest run that succeeded, which
            // may be yesterday's when it arrives after midnight.
            let target = match stored.scope() {
                Some(_) => date,
                None => self.latest_completed_date().unwrap_or(date),
            };
            if self.on_post_run_sensor(&reading.key, target) {
                return;
            }
        }
        let started = self.start_from_sensor(&reading.key, date);
        // A re-send of the reading already reported as late is not news.
        if started.is_none() && !unchanged {
            self.late_data(&id, &reading.key);
        }
        // Executions already waiting may pass now: any, for an undated reading; the one of
        // its date for a dated reading.
        let only = stored.scope().is_some().then_some(&id);
        if reading.error.is_some() {
            self.retry_evaluator(&reading.key, only, stored.failures);
        }
        // Only a validation rule's own sensor moves when its execution would be stale.
        let rule_sensor = config.validation.rules.iter().any(|r| r.key == reading.key);
        self.reevaluate_waiting(only, started.as_ref(), rule_sensor);
    }

    /// Why the reading `stored` of sensor `key` cannot be kept: a timestamp from the future,
    /// a date beyond the retention, or no room for another sensor.
    fn sensor_refusal(&self, key: &str, stored: &StoredSensor) -> Option<(Rejection, String)> {
        let now = self.now();
        let skew = self.ctx.settings.max_clock_skew;
        if let Some(at) = stored.timestamp.filter(|at| *at > now + skew) {
            // A clock running ahead would make stale data look fresh to every age_* rule.
            let why = format!(
                "sensor {key:?} has timestamp {} which is {} in the future (more than the allowed clock skew of {})",
                at.to_rfc3339(),
                format_duration(at - now),
                format_duration(skew)
            );
            return Some((Rejection::Invalid, why));
        }
        // A backfill of the date keeps its execution: its readings count for it.
        let kept = |d: ExecutionDate| (self.state.executions.keys()).any(|id| id.date().day == d.day);
        if let Some(date) = stored.scope().filter(|d| self.beyond_horizon(*d)) {
            let why = format!(
                "sensor {key:?} is for {date}, more than the execution retention ({} days) ahead: kept until that date came and went, it would hold a slot of --max-sensors-per-pipeline all the while; send it nearer its date",
                self.retention().num_days()
            );
            return Some((Rejection::Refused, why));
        }
        if let Some(date) = stored.scope().filter(|d| self.beyond_retention(*d) && !kept(*d)) {
            let why = format!(
                "sensor {key:?} is for {date}, older than the execution retention: a run for that date may have happened and been forgotten, so it cannot start or change one (`sluice backfill` starts the date on purpose)"
            );
            return Some((Rejection::Refused, why));
        }
        if self.state.sensors.contains_key(&stored.slot(key)) {
            return None;
        }
        let limit = self.ctx.settings.limits.check_sensors(self.state.sensors.len()).err()?;
        Some((Rejection::TooLarge, limit.to_string()))
    }

    /// Evaluates again the executions awaiting rules (`only` that one, when named), except
    /// one just `started`: it was evaluated when it started.
    /// `rule_sensor`: the reading is of a validation rule's sensor, so the executions' stale
    /// checks move.
    fn reevaluate_waiting(&mut self, only: Option<&ExecutionId>, started: Option<&ExecutionId>, rule_sensor: bool) {
        let now = self.now();
        let waiting = self.awaiting_rules(only);
        for k in waiting.into_iter().filter(|k| Some(k) != started) {
            // A cron execution's relative SLA starts with its first sensor.
            let first = self
                .state
                .executions
                .get_mut(&k)
                .filter(|e| e.first_sensor_at.is_none())
                .map(|e| e.first_sensor_at = Some(now))
                .is_some();
            if first {
                self.arm_relative_sla(&k);
            }
            self.evaluate(&k, false);
            if rule_sensor {
                self.check_stale(&k);
            }
        }
    }

    /// The date of the most recent execution that completed or is re-running after a success.
    /// The inclusion date an undated reading on `day` counts for, as Interlock's
    /// `MostRecentInclusionDate` chose: when `day` is not one, the most recent inclusion date
    /// at most [`INCLUSION_LOOKBACK_DAYS`] before it, unless its execution has ended (the
    /// reading is then no news for it). A month-end "ready" that lands after midnight still
    /// starts month-end's run.
    fn recent_inclusion_date(&self, config: &PipelineConfig, day: NaiveDate) -> Option<NaiveDate> {
        let include = &config.schedule.include_dates;
        if include.is_empty() || include.contains(&day) {
            return None;
        }
        let recent = (include.iter())
            .filter(|d| **d < day && (day - **d).num_days() <= INCLUSION_LOOKBACK_DAYS)
            .max()?;
        let id = ExecutionId::new(config.schedule_id(), ExecutionDate::daily(*recent));
        let ended = (self.state.executions.get(&id)).is_some_and(|e| !e.phase().is_open() && !e.restart_on_trigger);
        (!ended).then_some(*recent)
    }

    fn latest_completed_date(&self) -> Option<ExecutionDate> {
        self.state
            .executions
            .iter()
            .filter(|(_, e)| e.phase().is_completed() || (e.phase().is_running() && e.baseline.is_some()))
            .map(|(id, _)| id.date())
            .max()
    }

    /// LATE_DATA_ARRIVAL: a sensor the run depended on changed after the run completed.
    fn late_data(&mut self, id: &ExecutionId, sensor_key: &str) {
        let Some(config) = self.config() else { return };
        if !config.input_keys().any(|k| k == sensor_key) {
            return;
        }
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        if !execution.phase.is_completed() {
            return;
        }
        let seen = self.inputs_digest(id.date());
        if execution.completed_inputs.as_deref() == Some(seen.as_str()) {
            return;
        }
        if execution.late_data_told {
            self.notes.push(format!(
                "sensor {sensor_key:?} changed again after the run completed: told once already"
            ));
            return;
        }
        if let Some(e) = self.state.executions.get_mut(id) {
            e.late_data_told = true;
        }
        let kind = self.dry_or(EventType::LATE_DATA_ARRIVAL, EventType::DRY_RUN_LATE_DATA);
        let message = format!("sensor {sensor_key:?} changed after the run completed");
        let info = Sensor {
            sensor: sensor_key.into(),
        };
        self.emit(kind, Some(id), message, info);
        // As the earlier design did: a rerun on the drift budget.
        self.drift_rerun(
            id,
            &format!("late data: sensor {sensor_key:?} changed after the run completed"),
        );
    }
}

/// The execution date a sensor scopes: its own date (and hour), else the day of its
/// timestamp, else today, in `tz` (the schedule's [`undated_zone`](crate::core::config::Schedule::undated_zone)).
pub(super) fn execution_date(sensor: &StoredSensor, tz: chrono_tz::Tz, now: DateTime<Utc>) -> ExecutionDate {
    sensor.scope().unwrap_or_else(|| {
        let day = sensor.timestamp.unwrap_or(now).with_timezone(&tz).date_naive();
        ExecutionDate::daily(day)
    })
}
