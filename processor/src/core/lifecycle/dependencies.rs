//! `dependsOn`: when an upstream execution succeeds, Sluice publishes a sensor to each
//! downstream pipeline for the same date (and hour), so chains and fan-in need no glue code.
//!
//! The upstream's state may live on another partition, so the link is made through the log:
//! a downstream config sends `subscribe` to each upstream on `sluice.commands`; the upstream
//! keeps its dependents and, on every success, sends `{status: succeeded, ...}` under the
//! expected key on `sluice.sensors`. A new subscriber is sent the completions the upstream
//! still holds, so the order in which configs are applied does not matter.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Decider, Outbound, OutboundTopic, Phase};
use crate::core::config::PipelineConfig;
use crate::core::execution::{ExecutionDate, ExecutionId, RunId};
use crate::core::ids::PipelineId;
use crate::core::records::CommandKind;

impl Decider<'_> {
    /// Sends `subscribe` for every upstream of the new config (the upstream ignores a repeat,
    /// and a repeat heals an upstream that was deleted and re-created) and `unsubscribe` for
    /// the ones removed (`after` is `None` when the pipeline is deleted).
    pub(super) fn sync_subscriptions(&mut self, before: Option<&PipelineConfig>, after: Option<&PipelineConfig>) {
        let wanted = |c: Option<&PipelineConfig>| -> BTreeMap<PipelineId, String> {
            c.map(|c| {
                c.depends_on
                    .iter()
                    .map(|d| (d.pipeline.clone(), d.key.clone()))
                    .collect()
            })
            .unwrap_or_default()
        };
        let (old, new) = (wanted(before), wanted(after));
        for (upstream, key) in &new {
            self.send_command(upstream, CommandKind::Subscribe, Some(key));
        }
        for upstream in old.keys().filter(|u| !new.contains_key(*u)) {
            self.send_command(upstream, CommandKind::Unsubscribe, None);
        }
    }

    fn send_command(&mut self, upstream: &str, command: CommandKind, key: Option<&str>) {
        let mut value = json!({
            "pipelineId": upstream,
            "command": command.name(),
            "subscriber": self.pipeline_id,
            "requestedBy": "sluice",
        });
        if let Some(key) = key {
            value["key"] = json!(key);
        }
        self.records.push(Outbound {
            topic: OutboundTopic::Commands,
            key: upstream.to_string(),
            value,
        });
    }

    pub(super) fn on_unsubscribe(&mut self, subscriber: &PipelineId) {
        self.state.dependents.remove(subscriber.as_str());
        self.notes
            .push(format!("{subscriber} no longer depends on {}", self.pipeline_id));
    }

    pub(super) fn on_subscribe(&mut self, subscriber: &PipelineId, key: &str) {
        if self.state.dependents.get(subscriber.as_str()).map(String::as_str) == Some(key) {
            return;
        }
        self.state.dependents.insert(subscriber.clone(), key.to_string());
        self.notes
            .push(format!("{subscriber} depends on {} (sensor {key:?})", self.pipeline_id));
        // Only recent completions: a new subscriber is not handed weeks of backfill.
        let since = self.now() - chrono::TimeDelta::days(1);
        let done: Vec<(ExecutionDate, RunId)> = self
            .state
            .executions
            .values()
            .filter(|e| matches!(e.phase(), Phase::Succeeded { at } if *at >= since))
            .map(|e| (e.id.date(), e.run_id(self.pipeline_id)))
            .collect();
        for (date, run_id) in done {
            self.publish_completion(subscriber, key, date, &run_id);
        }
    }

    /// On success: tell every dependent that this date is done.
    pub(super) fn notify_dependents(&mut self, id: &ExecutionId, run_id: &str) {
        let dependents: Vec<(PipelineId, String)> = self.state.dependents.clone().into_iter().collect();
        for (subscriber, sensor_key) in dependents {
            self.publish_completion(&subscriber, &sensor_key, id.date(), run_id);
        }
    }

    fn publish_completion(&mut self, subscriber: &str, sensor_key: &str, date: ExecutionDate, run_id: &str) {
        let mut value = json!({
            "pipelineId": subscriber,
            "key": sensor_key,
            "date": date.whole_day().to_string(),
            "timestamp": self.now(),
            "data": {
                "status": "succeeded",
                "upstream": self.pipeline_id,
                "runId": run_id,
                "date": date,
                "completedAt": self.now(),
            },
        });
        if let Some(hour) = date.hour {
            value["hour"] = json!(hour);
        }
        self.records.push(Outbound {
            topic: OutboundTopic::Sensors,
            key: subscriber.to_string(),
            value,
        });
    }
}
