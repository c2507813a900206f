//! "How is this pipeline doing?": the read model behind the HTTP API and `sluice status`,
//! derived from a pipeline's state alone (so any instance that owns it answers the same).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::lifecycle::{Execution, PendingTimer, Phase, PipelineState};

/// One line of the pipeline list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineSummary {
    pub pipeline_id: String,
    /// False while only sensors have arrived for an id no config names yet.
    pub configured: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
    /// Open and recent executions, newest date first.
    pub executions: Vec<ExecutionSummary>,
    /// The soonest pending timer of the pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_timer: Option<TimerSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionSummary {
    pub schedule_id: String,
    pub date: String,
    /// See [`state_name`].
    pub state: String,
    pub attempt: u32,
    /// When the current state began.
    pub since: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Why it failed, went stale or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerSummary {
    /// The timer's kind, e.g. `slaBreach`.
    pub kind: String,
    pub at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
}

/// One latest reading, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SensorView {
    pub key: String,
    /// The execution date (`YYYY-MM-DD[THH]`) the reading is for, when the producer named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    pub data: serde_json::Map<String, serde_json::Value>,
    pub received_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<DateTime<Utc>>,
}

/// The latest readings of `state`, by key then scope.
pub fn sensors(state: &PipelineState) -> Vec<SensorView> {
    state
        .sensors
        .iter()
        .map(|(slot, sensor)| {
            let (key, scope) = sensor.split_slot(slot);
            SensorView {
                key: key.to_string(),
                scope: scope.map(str::to_string),
                data: sensor.data.clone(),
                received_at: sensor.received_at,
                timestamp: sensor.timestamp,
            }
        })
        .collect()
}

/// Every pending timer of `state`, soonest first.
pub fn timers(state: &PipelineState) -> Vec<TimerSummary> {
    let mut timers: Vec<TimerSummary> = state.timers.iter().map(timer_summary).collect();
    timers.sort_by_key(|t| t.at);
    timers
}

fn timer_summary(t: &PendingTimer) -> TimerSummary {
    TimerSummary {
        kind: timer_kind_name(&t.timer.encode()),
        at: t.at,
        date: t.timer.execution().map(|(_, date)| date.to_string()),
    }
}

/// The operator's word for a phase: waiting (for its rules), triggering, running, completed,
/// failed, validation-exhausted, dry-run, cancelled, stale, excluded.
pub fn state_name(phase: &Phase) -> &'static str {
    match phase {
        Phase::AwaitingRules => "waiting",
        Phase::AwaitingTrigger { .. } => "triggering",
        Phase::AwaitingJob { .. } => "running",
        Phase::Succeeded { .. } => "completed",
        Phase::Failed { .. } => "failed",
        Phase::ValidationExhausted { .. } => "validation-exhausted",
        Phase::WouldHaveTriggered { .. } => "dry-run",
        Phase::Cancelled { .. } => "cancelled",
        Phase::Stale { .. } => "stale",
        Phase::Skipped { .. } => "excluded",
    }
}

fn execution_summary(execution: &Execution) -> ExecutionSummary {
    let reason = match &execution.phase {
        Phase::Failed { reason, .. } | Phase::Stale { reason, .. } | Phase::Skipped { reason, .. } => {
            Some(reason.clone())
        }
        _ => None,
    };
    ExecutionSummary {
        schedule_id: execution.schedule_id.clone(),
        date: execution.date.clone(),
        state: state_name(&execution.phase).to_string(),
        attempt: execution.attempt,
        since: execution.phase_since,
        run_id: execution.phase.run_id().map(str::to_string),
        reason,
    }
}

/// The summary of `state`, pipeline `pipeline_id`.
pub fn summarize(pipeline_id: &str, state: &PipelineState) -> PipelineSummary {
    let mut executions: Vec<ExecutionSummary> = state.executions.values().map(execution_summary).collect();
    executions.sort_by(|a, b| b.date.cmp(&a.date).then_with(|| a.schedule_id.cmp(&b.schedule_id)));
    let next_timer = state.timers.iter().min_by_key(|t| t.at).map(timer_summary);
    let config = state.config.as_deref();
    PipelineSummary {
        pipeline_id: pipeline_id.to_string(),
        configured: config.is_some(),
        owner: config.and_then(|c| c.owner.clone()),
        description: config.and_then(|c| c.description.clone()),
        dry_run: config.is_some_and(|c| c.dry_run),
        executions,
        next_timer,
    }
}

/// A timer's kind as its tagged form names it (`{"kind":"slaBreach",…}` → `slaBreach`).
fn timer_kind_name(encoded: &str) -> String {
    serde_json::from_str::<serde_json::Value>(encoded)
        .ok()
        .and_then(|v| v["kind"].as_str().map(str::to_string))
        .unwrap_or_else(|| encoded.to_string())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::core::timers::TimerKind;

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 20, h, 0, 0).unwrap()
    }

    fn execution(date: &str, phase: Phase) -> Execution {
        let mut e: Execution = serde_json::from_value(serde_json::json!({
            "scheduleId": "stream", "date": date, "startedAt": at(1), "windowClosesAt": at(2),
            "attempt": 2, "retriesUsed": 0, "codeRetriesUsed": 0, "phase": {"phase": "awaitingRules"},
        }))
        .expect("an execution");
        e.phase = phase;
        e.phase_since = at(3);
        e
    }

    #[test]
    fn summaries_name_states_newest_date_first_with_the_soonest_timer() {
        let mut state = PipelineState::default();
        state.executions.insert(
            "a".into(),
            execution(
                "2026-11-19",
                Phase::Failed {
                    at: at(3),
                    reason: "exit 3".into(),
                },
            ),
        );
        state.executions.insert(
            "b".into(),
            execution("2026-11-20", Phase::AwaitingJob { run_id: "run-7".into() }),
        );
        state.timers = vec![
            PendingTimer {
                timer: TimerKind::SlaBreach {
                    schedule_id: "stream".into(),
                    date: "2026-11-20".into(),
                },
                at: at(10),
            },
            PendingTimer {
                timer: TimerKind::CronTick,
                at: at(8),
            },
        ];
        let summary = summarize("gold", &state);
        assert!(!summary.configured);
        let states: Vec<_> = summary
            .executions
            .iter()
            .map(|e| {
                (
                    e.date.as_str(),
                    e.state.as_str(),
                    e.run_id.as_deref(),
                    e.reason.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                ("2026-11-20", "running", Some("run-7"), None),
                ("2026-11-19", "failed", None, Some("exit 3"))
            ]
        );
        let next = summary.next_timer.expect("a timer");
        assert_eq!((next.kind.as_str(), next.at, next.date), ("cronTick", at(8), None));
        state.timers.remove(1);
        let next = summarize("gold", &state).next_timer.expect("a timer");
        assert_eq!(
            (next.kind.as_str(), next.date.as_deref()),
            ("slaBreach", Some("2026-11-20"))
        );
    }
}
