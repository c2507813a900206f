//! `kafka` jobs: a job request record on a topic of the user's (`job.config.topic`), keyed
//! by pipeline id, for a runner that consumes it, does the work and reports back on
//! `sluice.jobs` with the run id it was given. The request is
//! `{pipelineId, scheduleId, date, runId, attempt, payload}` (`payload` from
//! `job.config.payload`), with a `sluice-run-id` header and any `job.config.headers`.
//! A runner should treat `runId` as an idempotency key: after a crash Sluice may publish
//! the same request again.

use serde_json::{json, Value};

use super::{Call, CallError, Outcome};
use crate::core::config::{JobKind, JobSettings};

pub async fn trigger(call: &Call<'_>) -> Result<Outcome, CallError> {
    let JobSettings::Kafka(job) = call.config.settings() else {
        return Err(call.not_for(JobKind::Kafka));
    };
    let topic = super::usable(&job.topic)?.as_str();
    call.client.kafka_topic(topic)?;
    let extra = super::usable(&job.headers)?;
    let Some(producer) = call.producer else {
        return Err(CallError::Permanent("kafka jobs need a producer".into()));
    };
    let r = call.request;
    let value = json!({
        "pipelineId": r.pipeline_id,
        "scheduleId": r.execution.schedule(),
        "date": r.execution.date_text(),
        "runId": r.run_id,
        "attempt": r.attempt,
        "payload": job.payload.clone().unwrap_or(Value::Null),
    });
    let mut headers = vec![("sluice-run-id".to_string(), r.run_id.as_bytes().to_vec())];
    for (name, v) in extra {
        headers.push((name.clone(), v.as_bytes().to_vec()));
    }
    let bytes = serde_json::to_vec(&value).expect("job requests serialise");
    let borrowed: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
    let (partition, offset) = producer
        .send(topic, Some(r.pipeline_id.as_bytes()), Some(&bytes), &borrowed)
        .await
        .map_err(|e| match e.too_large() {
            true => CallError::Permanent(format!("the job request is too large for topic {topic}: {e}")),
            false => CallError::Infra(format!("publishing the job request to {topic} failed: {e}")),
        })?;
    // No handle: the runner reports by itself, nothing to poll.
    Ok(Outcome {
        status: crate::core::records::JobStatus::Running,
        category: None,
        message: Some(format!("job request published to {topic}")),
        metadata: Some(json!({ "topic": topic, "partition": partition, "offset": offset })),
    })
}
