//! Bounded state: an execution that has ended is kept for the retention (`--retention`,
//! default [`RETENTION`]; the old design's TTLs) because reruns, late data,
//! post-run checks and SLA alerts need it, and then forgotten with the sensors scoped to its
//! date. A sensor for a date older than the retention cannot start an execution: its run may
//! have happened and been forgotten, and running it again would not be safe.

use std::collections::HashSet;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::{Decider, StoredSensor};
use crate::core::config::ClockTime;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::schedule::local_instant;
use crate::core::timers::TimerKind;

/// How long an ended execution is kept unless `--retention` says otherwise.
pub const RETENTION: TimeDelta = TimeDelta::days(7);

impl Decider<'_> {
    /// How long ended executions are kept under the config in force: the retention, or
    /// longer when the post-run sensor timeout needs it.
    pub(super) fn retention(&self) -> TimeDelta {
        let post_run = self
            .config()
            .and_then(|c| c.post_run.as_ref())
            .map(|p| p.sensor_timeout);
        let retention = self.ctx.settings.retention;
        post_run.map_or(retention, |t| retention.max(t + TimeDelta::days(1)))
    }

    /// Arms (for an ended execution) or cancels (for an open one) its expiry.
    pub(super) fn arm_expiry(&mut self, id: &ExecutionId) {
        let Some(e) = self.state.executions.get(id) else {
            return;
        };
        let kind = TimerKind::Expire { execution: id.clone() };
        match e.phase.is_open() {
            true => self.cancel_timer(kind),
            false => {
                let at = self.expires_at(id, e.phase_since);
                self.set_timer(kind, at);
            }
        }
    }

    /// When an execution of `id` that ended at `ended` is forgotten: the retention after it
    /// ended, and never before its date is older than the retention. Before, a date that
    /// ran on its day was forgotten a day before its readings were refused, and in that gap
    /// the same reading started it again under the run id it had (issue 60, item 3).
    pub(super) fn expires_at(&self, id: &ExecutionId, ended: DateTime<Utc>) -> DateTime<Utc> {
        let tz = self.config().map(|c| c.schedule.timezone).unwrap_or(chrono_tz::UTC);
        let retention = self.retention();
        // The first day on which `beyond_retention` holds for the date.
        let cutoff = id.date().day + TimeDelta::days(retention.num_days() + 1);
        let midnight = ClockTime { hour: 0, minute: 0 };
        (ended + retention).max(local_instant(cutoff, midnight, tz))
    }

    pub(super) fn on_expire(&mut self, id: &ExecutionId) {
        let Some(e) = self.state.executions.get(id) else {
            return;
        };
        // An open execution waits for its end, unless its config was deleted: then nothing
        // will end it, and it was kept only so that its date is not run again.
        let deleted = self.config().is_none();
        if e.phase.is_open() && !deleted {
            return;
        }
        let due = self.expires_at(id, e.phase_since);
        if self.now() < due {
            // The retention grew with a config change: wait the rest.
            self.arm_expiry(id);
            return;
        }
        let date = id.date();
        let phase = e.phase.name();
        self.cancel_execution_timers(id, |_| true);
        self.state.executions.remove(id);
        self.state.forecasts.remove(id);
        let day_in_use = self.state.executions.any_of_day(date.day);
        // The date's own readings go, and, once no execution of the day is left, every
        // reading of the day: a daily pipeline's hour-scoped readings (a `dependsOn` on an
        // hourly upstream) have no execution of their own to expire with.
        self.state
            .sensors
            .retain_of_day(date.day, |s| s.scope() != Some(date) && day_in_use);
        self.notes
            .push(format!("execution {id} ({phase}) expired after the retention"));
        // A deleted pipeline's last kept execution: nothing of it is left to keep (but the
        // readings a downstream's subscription still needs, for the retention).
        if deleted && self.state.executions.is_empty() {
            match self.state.dependents.is_empty() {
                true => self.delete = true,
                false => self.arm_forget(),
            }
        }
    }

    /// The days some execution is kept for (every execution's: noted when read in part).
    fn days_in_use(&self) -> HashSet<NaiveDate> {
        (self.state.executions.keys()).map(|id| id.date().day).collect()
    }

    /// Forgets the readings scoped to a day older than the retention that no execution is
    /// kept for: readings for a date that never ran (a producer's backfill, an upstream's
    /// every hour) have no execution to expire with, and would fill the pipeline's
    /// `--max-sensors-per-pipeline` until it refused every new date.
    pub(super) fn prune_stale_readings(&mut self) {
        let oldest_kept = self.today() - self.retention();
        let received_before = self.now() - self.retention();
        // Undated readings of keys the config does not read (a producer's stray keys, one
        // new key a day) have no date to expire with: they go once received that long ago.
        let unread = |slot: &str, s: &StoredSensor| {
            s.date.is_none()
                && s.received_at < received_before
                && self
                    .config()
                    .is_none_or(|c| !c.input_keys().chain(c.post_run_keys()).any(|k| k == s.key_in(slot)))
        };
        // Every new slot asks: the days in use are gathered only when a reading is that old.
        // Read in part, the undated readings are all here and the head knows the oldest day.
        let loaded = self.state.sensors.loaded();
        let any_old = (self.state.sensors.oldest_day()).is_some_and(|day| day < oldest_kept)
            || (loaded.iter()).any(|(slot, s)| s.date.is_none() && unread(slot, s));
        if !any_old {
            return;
        }
        let in_use = self.days_in_use();
        let stale: Vec<String> = (self.state.sensors.iter())
            .filter(|(slot, s)| {
                (s.scope()).is_some_and(|d| d.day < oldest_kept && !in_use.contains(&d.day)) || unread(slot, s)
            })
            .map(|(slot, _)| slot.clone())
            .collect();
        if stale.is_empty() {
            return;
        }
        for slot in &stale {
            self.state.sensors.remove(slot);
        }
        self.notes.push(format!(
            "{} readings of days older than the retention with no execution, or of keys nothing reads received before it, forgotten",
            stale.len()
        ));
    }

    /// Keeps a pipeline without a config from holding readings for ever: its readings are
    /// forgotten once older than the retention (see [`Self::on_forget`]), checked when the
    /// oldest of them comes of that age.
    pub(super) fn arm_forget(&mut self) {
        if self.state.config.is_some() {
            self.cancel_timer(TimerKind::Forget);
            return;
        }
        match self.state.sensors.values().map(|s| s.received_at).min() {
            Some(oldest) => {
                let at = oldest + self.retention();
                self.set_timer(TimerKind::Forget, at);
            }
            None => self.cancel_timer(TimerKind::Forget),
        }
    }

    /// A pipeline without a config (never given one, or deleted): its readings older than
    /// the retention go, and its state with them once nothing else is kept (no execution
    /// kept after a deletion, no downstream subscribed to it).
    pub(super) fn on_forget(&mut self) {
        if self.state.config.is_some() {
            return;
        }
        let oldest_kept = self.now() - self.retention();
        let before = self.state.sensors.len();
        self.state.sensors.retain(|_, s| s.received_at > oldest_kept);
        let forgotten = before - self.state.sensors.len();
        if forgotten > 0 {
            self.notes.push(format!(
                "{forgotten} readings of a pipeline without a config forgotten after the retention"
            ));
        }
        let empty =
            self.state.sensors.is_empty() && self.state.executions.is_empty() && self.state.dependents.is_empty();
        if empty {
            self.delete = true;
            return;
        }
        self.arm_forget();
    }

    /// Whether `date` is too far ahead to be kept: its slot would be held until the date
    /// came and went (a reading dated years ahead, for good), filling
    /// `--max-sensors-per-pipeline`.
    pub(super) fn beyond_horizon(&self, date: ExecutionDate) -> bool {
        date.day > self.today() + self.retention()
    }

    /// Whether `date` is too old to start an execution (see the module comment).
    pub(super) fn beyond_retention(&self, date: ExecutionDate) -> bool {
        date.day < self.today() - self.retention()
    }

    /// Today in the schedule's timezone.
    fn today(&self) -> NaiveDate {
        let tz = self.config().map(|c| c.schedule.timezone).unwrap_or(chrono_tz::UTC);
        self.now().with_timezone(&tz).date_naive()
    }
}
