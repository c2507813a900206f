//! `aws` jobs (being written).

use serde_json::Value;

use super::{Call, CallError, Outcome};

pub async fn trigger(call: &Call<'_>) -> Result<Outcome, CallError> {
    Err(CallError::Permanent(format!(
        "{} jobs are not written yet",
        call.request.kind.name()
    )))
}

pub async fn status(call: &Call<'_>, _handle: &Value) -> Result<Outcome, CallError> {
    Err(CallError::Permanent(format!(
        "{} jobs are not written yet",
        call.request.kind.name()
    )))
}

/// The AWS resource a job's calls go to (stub until the AWS clients land).
pub fn target(kind: crate::core::config::JobKind, _config: &serde_json::Map<String, Value>) -> String {
    kind.name().to_string()
}
