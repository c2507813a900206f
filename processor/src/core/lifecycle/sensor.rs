//! A sensor reading arrives: store it, start an execution if it meets the trigger
//! condition, and re-evaluate executions awaiting their rules.

use chrono::DateTime;
use chrono::Utc;

use super::{execution_key, Decider, Execution, Phase, StoredSensor};
use crate::core::records::SensorReading;
use crate::core::rules;

impl Decider<'_> {
    pub(super) fn on_sensor(&mut self, reading: &SensorReading) {
        let stored = StoredSensor {
            data: reading.data.clone(),
            received_at: self.now(),
            date: reading.date,
            hour: reading.hour,
            timestamp: reading.timestamp,
        };
        self.state.sensors.insert(reading.key.clone(), stored);
        if self.state.config.is_none() {
            self.notes.push(format!(
                "sensor {:?} kept until pipeline {} has a config",
                reading.key, self.pipeline_id
            ));
            return;
        }
        let started = self.start_if_triggered(&reading.key);
        // Executions already waiting may pass now; a new one was evaluated when it started.
        let waiting: Vec<String> = self
            .state
            .executions
            .iter()
            .filter(|(key, e)| e.phase == Phase::AwaitingRules && Some(*key) != started.as_ref())
            .map(|(key, _)| key.clone())
            .collect();
        for key in waiting {
            self.evaluate(&key, false);
        }
    }

    /// On first config: the stored trigger sensor (if any) may start an execution.
    pub(super) fn start_from_stored_trigger(&mut self) {
        if let Some(key) = self
            .state
            .config
            .as_ref()
            .and_then(|c| c.schedule.trigger.as_ref())
            .map(|t| t.key.clone())
        {
            self.start_if_triggered(&key);
        }
    }

    /// Starts the execution the sensor `key` triggers, unless it exists already.
    /// Returns the key of a newly started execution.
    fn start_if_triggered(&mut self, key: &str) -> Option<String> {
        let config = self.state.config.as_ref()?;
        let trigger = config.schedule.trigger.as_ref().filter(|t| t.key == key)?;
        let sensor = self.state.sensors.get(key)?;
        let readings = std::collections::BTreeMap::from([(key.to_string(), &sensor.data)]);
        let result = rules::evaluate(trigger, &readings, self.now());
        if !result.passed {
            self.notes.push(format!(
                "trigger condition not met: {}",
                result.reason.unwrap_or_default()
            ));
            return None;
        }
        let schedule_id = config.schedule_id().to_string();
        let date = execution_date(sensor, config.schedule.timezone, self.now());
        let exec_key = execution_key(&schedule_id, &date);
        if self.state.executions.contains_key(&exec_key) {
            self.notes
                .push(format!("execution {exec_key} exists: trigger sensor changes nothing"));
            return None;
        }
        let window = config.schedule.evaluation.window;
        let execution = Execution {
            schedule_id,
            date,
            started_at: self.now(),
            window_closes_at: self.now() + window,
            next_evaluation_at: None,
            attempt: 0,
            retries_used: 0,
            code_retries_used: 0,
            phase: Phase::AwaitingRules,
            last_verdict: None,
        };
        self.state.executions.insert(exec_key.clone(), execution);
        self.evaluate(&exec_key, true);
        Some(exec_key)
    }
}

/// The execution date a sensor scopes: its own date (and hour), else the day of its
/// timestamp, else today, in the schedule's timezone.
fn execution_date(sensor: &StoredSensor, tz: chrono_tz::Tz, now: DateTime<Utc>) -> String {
    let day = sensor
        .date
        .unwrap_or_else(|| sensor.timestamp.unwrap_or(now).with_timezone(&tz).date_naive());
    match sensor.hour {
        Some(hour) => format!("{}T{hour:02}", day.format("%Y-%m-%d")),
        None => day.format("%Y-%m-%d").to_string(),
    }
}
