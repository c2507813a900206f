//! Bounded state: an execution that has ended is kept for the retention (`--retention`,
//! default [`RETENTION`]; the old design's TTLs) because reruns, late data,
//! post-run checks and SLA alerts need it, and then forgotten with the sensors scoped to its
//! date. A sensor for a date older than the retention cannot start an execution: its run may
//! have happened and been forgotten, and running it again would not be safe.

use chrono::TimeDelta;

use super::Decider;
use crate::core::execution::ExecutionDate;
use crate::core::timers::TimerKind;

/// How long an ended execution is kept unless `--retention` says otherwise.
pub const RETENTION: TimeDelta = TimeDelta::days(7);

impl Decider<'_> {
    /// How long ended executions are kept under the config in force: the retention, or
    /// longer when the post-run sensor timeout needs it.
    fn retention(&self) -> TimeDelta {
        let post_run = self
            .config()
            .and_then(|c| c.post_run.as_ref())
            .map(|p| p.sensor_timeout);
        let retention = self.ctx.settings.retention;
        post_run.map_or(retention, |t| retention.max(t + TimeDelta::days(1)))
    }

    /// Arms (for an ended execution) or cancels (for an open one) its expiry.
    pub(super) fn arm_expiry(&mut self, key: &str) {
        let Some(e) = self.state.executions.get(key) else {
            return;
        };
        let kind = TimerKind::Expire {
            schedule_id: e.schedule_id.clone(),
            date: e.date.clone(),
        };
        match e.phase.is_open() {
            true => self.cancel_timer(kind),
            false => {
                let at = e.phase_since + self.retention();
                self.set_timer(kind, at);
            }
        }
    }

    pub(super) fn on_expire(&mut self, key: &str) {
        let Some(e) = self.state.executions.get(key) else {
            return;
        };
        if e.phase.is_open() {
            return;
        }
        let due = e.phase_since + self.retention();
        if self.now() < due {
            // The retention grew with a config change: wait the rest.
            self.arm_expiry(key);
            return;
        }
        let date = ExecutionDate::canonical(&e.date);
        let phase = e.phase.name();
        self.cancel_execution_timers(key, |_| true);
        self.state.executions.remove(key);
        self.state.forecasts.remove(key);
        let day = date.map(ExecutionDate::whole_day);
        let day_in_use = self
            .state
            .executions
            .values()
            .any(|e| ExecutionDate::canonical(&e.date).map(ExecutionDate::whole_day) == day);
        self.state.sensors.retain(|_, s| {
            let scope = s.scope();
            scope.is_none() || (scope != date && (scope != day || day_in_use))
        });
        self.notes
            .push(format!("execution {key} ({phase}) expired after the retention"));
    }

    /// Whether `date` is too old to start an execution (see the module comment).
    pub(super) fn beyond_retention(&self, date: ExecutionDate) -> bool {
        let tz = self.config().map(|c| c.schedule.timezone).unwrap_or(chrono_tz::UTC);
        let today = self.now().with_timezone(&tz).date_naive();
        date.day + self.retention() < today
    }
}
