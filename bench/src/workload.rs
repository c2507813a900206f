//! The workload: realistic pipeline configs and the sensor readings that drive them.

use serde_json::{json, Value};

pub fn pipeline_id(i: usize) -> String {
    format!("bench-{i:06}")
}

/// A pipeline as teams write them: a trigger sensor, three rules (status, row count,
/// freshness), an SLA, and an `http` job at `target`.
pub fn config(id: &str, target: &str) -> Value {
    json!({
        "pipeline": {"id": id, "owner": "bench", "description": "benchmark pipeline"},
        "schedule": {
            "timezone": "UTC",
            "trigger": {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            "evaluation": {"window": "1h", "interval": "5m"}
        },
        "sla": {"deadline": "23:59", "deadlineDay": "dataDate", "expectedDuration": "30m"},
        "validation": {"trigger": "ALL", "rules": [
            {"key": "upstream", "check": "equals", "field": "status", "value": "ready"},
            {"key": "row-count", "check": "gte", "field": "count", "value": 1000},
            {"key": "row-count", "check": "age_lt", "field": "updatedAt", "value": "2h"}
        ]},
        "job": {"type": "http", "config": {"url": format!("{target}/run/{id}"), "method": "POST",
                "body": "{\"pipeline\": \"${PIPELINE}\", \"run\": \"${RUN_ID}\"}"}, "maxRetries": 0}
    })
}

/// A row-count reading for one execution (`date`, optional `hour`), updated now.
pub fn row_count(id: &str, count: u64, date: &str, hour: Option<u32>) -> Value {
    row_count_at(id, count, date, hour, chrono::Utc::now())
}

/// [`row_count`], updated at `updated` (a simulated clock's time).
pub fn row_count_at(
    id: &str,
    count: u64,
    date: &str,
    hour: Option<u32>,
    updated: chrono::DateTime<chrono::Utc>,
) -> Value {
    let updated = updated.to_rfc3339();
    sensor(
        id,
        "row-count",
        json!({"count": count, "updatedAt": updated}),
        date,
        hour,
    )
}

/// The trigger reading that starts the execution's evaluation.
pub fn trigger(id: &str, date: &str, hour: Option<u32>) -> Value {
    sensor(id, "upstream", json!({"status": "ready"}), date, hour)
}

fn sensor(id: &str, key: &str, data: Value, date: &str, hour: Option<u32>) -> Value {
    let mut record = json!({"pipelineId": id, "key": key, "data": data, "date": date});
    if let Some(h) = hour {
        record["hour"] = json!(h);
    }
    record
}

/// `config` with its SLA deadline at `clock` (`HH:MM`, UTC).
pub fn with_deadline(mut config: Value, clock: &str) -> Value {
    config["sla"]["deadline"] = json!(clock);
    config
}
