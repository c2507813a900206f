//! SLA_AT_RISK / SLA_RECOVERED: the SLA deadline forecast from the pipeline's own history
//! (see [`crate::core::history`]), and the history itself, kept as runs succeed.
//!
//! A date is forecast while its SLA is owed and its deadline is ahead: when its SLA timers
//! are armed, when its job is first triggered, and on an `SlaForecast` timer at the moment
//! the projection next changes. The clock only ever moves a projection later, so once a
//! date is at risk no timer is needed: only a trigger can bring it back (SLA_RECOVERED).
//! Each date gets at most one SLA_AT_RISK and one SLA_RECOVERED; SLA_MET or SLA_BREACH
//! closes the story.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::schedule::{dormant, trigger_keys};
use super::sla::deadline_of;
use super::{Decider, Phase};
use crate::core::config::{ClockTime, PipelineConfig};
use crate::core::duration::format_duration;
use crate::core::events::detail::{self, AtRisk};
use crate::core::events::EventType;
use crate::core::execution::{ExecutionDate, ExecutionId};
use crate::core::history::{forecast, Basis, Forecast, PastRun};
use crate::core::ids::PipelineId;
use crate::core::schedule::local_instant;
use crate::core::timers::TimerKind;

/// How many dates' forecast alerts are remembered: enough for every date whose deadline
/// can still be ahead (hourly pipelines included).
const REMEMBERED_DATES: usize = 48;

/// Which forecast alerts a date has had, so none repeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForecastMarks {
    #[serde(default)]
    pub at_risk: bool,
    #[serde(default)]
    pub recovered: bool,
}

impl Decider<'_> {
    /// Forecasts the completion of execution `id`; emits SLA_AT_RISK or
    /// SLA_RECOVERED when the projection crosses the deadline, and arms the next look.
    pub(super) fn forecast_sla(&mut self, id: &ExecutionId) {
        let Some(config) = self.state.config.clone().filter(|c| !c.dry_run) else {
            return;
        };
        let Some(min_runs) = config.sla.as_ref().and_then(|s| s.forecast) else {
            return;
        };
        let now = self.now();
        let Some(deadline) = deadline_of(&config, id.date()).filter(|d| *d > now) else {
            return;
        };
        if dormant(&config, id.date().day).is_some() {
            return;
        }
        // Ended, or its SLA already settled: nothing left to forecast. (Its phase first: a
        // success forecasts every date still owed, and an ended one need not be read.)
        if self.state.executions.phase(id).is_some_and(|p| !p.is_open()) {
            return;
        }
        let execution = self.state.executions.get(id);
        if execution.is_some_and(|e| e.sla.met || e.sla.breached) {
            return;
        }
        let triggered_at = execution.and_then(|e| e.first_triggered_at);
        let start = date_start(&config, id.date());
        let Some(f) = forecast(&self.state.history, min_runs, start, triggered_at, deadline, now) else {
            return;
        };
        let mut marks = self.state.forecasts.get(id).copied().unwrap_or_default();
        let misses = f.misses(deadline);
        if misses && !marks.at_risk {
            marks.at_risk = true;
            let message = format!(
                "{} is projected to complete at {}, {} after its SLA deadline {} ({})",
                id.date(),
                f.projected.to_rfc3339(),
                format_duration(f.projected - deadline),
                deadline.to_rfc3339(),
                explain(&f)
            );
            let (waiting, upstreams) = self.holding(&config, id);
            let info = AtRisk {
                forecast: forecast_detail(&f, deadline, triggered_at, now),
                waiting_for: waiting,
                upstreams,
            };
            self.emit(EventType::SLA_AT_RISK, Some(id), message, info);
        } else if !misses && marks.at_risk && !marks.recovered {
            marks.recovered = true;
            let message = format!(
                "{} is projected to complete at {}, {} before its SLA deadline {} ({})",
                id.date(),
                f.projected.to_rfc3339(),
                format_duration(deadline - f.projected),
                deadline.to_rfc3339(),
                explain(&f)
            );
            let info = forecast_detail(&f, deadline, triggered_at, now);
            self.emit(EventType::SLA_RECOVERED, Some(id), message, info);
        }
        self.remember(id, marks);
        let timer = TimerKind::SlaForecast { execution: id.clone() };
        // At risk, only a trigger changes the projection for the better (and forecasts
        // again); otherwise look again when the clock moves it.
        match f.next_change.filter(|_| !marks.at_risk) {
            Some(at) => self.set_timer(timer, at),
            None => self.cancel_timer(timer),
        }
    }

    /// What holds the date back: the sensor keys it waits for (its trigger's before it
    /// starts, its failing rules' while it validates; none once the job runs), and the
    /// upstream pipelines among them.
    fn holding(&self, config: &PipelineConfig, id: &ExecutionId) -> (Vec<String>, Vec<PipelineId>) {
        let mut waiting: Vec<String> = match self.state.executions.get(id) {
            None => trigger_keys(config).map(str::to_string).collect(),
            Some(e) if e.phase == Phase::AwaitingRules => (e.last_verdict.iter())
                .flat_map(|v| v.results.iter().filter(|r| !r.passed))
                .map(|r| r.key.clone())
                .collect(),
            Some(_) => Vec::new(),
        };
        waiting.dedup();
        let upstreams = (config.depends_on.iter())
            .filter(|d| waiting.contains(&d.key))
            .map(|d| d.pipeline.clone())
            .collect();
        (waiting, upstreams)
    }

    fn remember(&mut self, id: &ExecutionId, marks: ForecastMarks) {
        if marks == ForecastMarks::default() {
            return;
        }
        self.state.forecasts.insert(id.clone(), marks);
        while self.state.forecasts.len() > REMEMBERED_DATES {
            self.state.forecasts.pop_first();
        }
    }

    /// Keeps a succeeded run in the pipeline's history: when it was first triggered within
    /// its date, and how long it took from there.
    pub(super) fn record_run(&mut self, id: &ExecutionId) {
        let now = self.now();
        let Some(config) = self.state.config.clone() else {
            return;
        };
        let Some(execution) = self.state.executions.get(id) else {
            return;
        };
        let Some(triggered) = execution.first_triggered_at else {
            return;
        };
        let date = id.date();
        let run = PastRun {
            date: id.date(),
            triggered_after: (triggered - date_start(&config, date)).num_seconds(),
            duration: (now - triggered).num_seconds(),
        };
        self.state.history.record(run);
        // The history grew: the dates whose SLA is still owed are forecast again (one may
        // have had too few runs on record to forecast at all).
        let owed: Vec<ExecutionId> = (self.state.timers.values())
            .filter_map(|t| match &t.timer {
                TimerKind::SlaBreach { execution } if execution != id => Some(execution.clone()),
                _ => None,
            })
            .collect();
        for owed in owed {
            self.forecast_sla(&owed);
        }
    }
}

/// The start of an execution date in the schedule's timezone: its midnight, or its hour.
pub(crate) fn date_start(config: &PipelineConfig, date: ExecutionDate) -> DateTime<Utc> {
    let time = ClockTime {
        hour: date.hour.unwrap_or(0),
        minute: 0,
    };
    local_instant(date.day, time, config.schedule.timezone)
}

/// What the projection was made of, in words.
fn explain(f: &Forecast) -> String {
    let p90 = f.duration_p90.map(format_duration).unwrap_or_default();
    match f.basis {
        Basis::UsualTrigger => format!(
            "no trigger yet; it usually comes at {}, and 9 in 10 of the last {} runs took at most {p90}",
            f.usual_trigger.to_rfc3339(),
            f.runs
        ),
        Basis::Running => format!(
            "running; 9 in 10 of the {} past runs that took at least this long finished within {p90} of their trigger",
            f.runs
        ),
        Basis::BeyondHistory => "running longer than any run on record".to_string(),
    }
}

fn forecast_detail(
    f: &Forecast,
    deadline: DateTime<Utc>,
    triggered_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> detail::Forecast {
    detail::Forecast {
        deadline,
        projected_completion: f.projected,
        margin_seconds: (deadline - f.projected).num_seconds(),
        basis: f.basis,
        runs: f.runs,
        p90_duration_seconds: f.duration_p90.map(|d| d.num_seconds()),
        usual_trigger_at: f.usual_trigger,
        triggered_at,
        elapsed_seconds: triggered_at.map(|t| (now - t).num_seconds()),
    }
}
