//! Input records as the decider reads them: decoded from any of the formats the codec reads,
//! checked against the record limits, and named by the origin their events' ids derive from.
//! A record that cannot be read becomes a rejection with the reason (for the dead-letter
//! topic), never an error: bad input must not stop the loop. The one error is a schema
//! registry that cannot answer for a record (an outage, refused credentials): the record is
//! not at fault, so it is not rejected; the caller waits and reads it again.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rdkafka::message::{Headers, Message, OwnedMessage};

use tracing::warn;

use super::backoff::Backoff;
use super::codec::{Codec, CodecError};
use super::telemetry::Telemetry;
use super::topics::InputTopic;
use crate::core::ids::PipelineId;
use crate::core::lifecycle::Input;
use crate::core::limits::Limits;
use crate::core::partitioning::PartitionId;
use crate::core::records::{self, rejected_pipeline, Rejection};
use crate::core::task::{source_of, Record};

/// The pipeline an input record is about and the decider's input it holds. Avro and
/// Connect-enveloped records become their JSON form first; what cannot be read is rejected
/// with the reason, like malformed JSON. `Err`: the schema registry could not answer for the
/// record ([`CodecError::blames_record`] is false); try again later.
pub(crate) async fn read_input(
    codec: &Codec,
    kind: InputTopic,
    message: &dyn Record,
    partitions: i32,
    limits: &Limits,
) -> Result<(PipelineId, Input), CodecError> {
    let origin = source_of(message);
    // Measured before anything is decoded: an oversized record is never parsed.
    let size = message.value().map_or(0, <[u8]>::len);
    if let Err(reason) = limits.check_record(kind == InputTopic::Config, size) {
        let rejected = Input::Rejected {
            source: origin,
            reason: reason.to_string(),
            kind: Rejection::TooLarge,
        };
        return Ok((records::rejected_pipeline(message.key()), rejected));
    }
    let payload = match (kind.family(), message.value()) {
        (Some(family), Some(bytes)) => codec.decode(family, bytes).await.map(Some),
        (_, bytes) => Ok(bytes.map(Cow::Borrowed)),
    };
    match payload {
        Ok(payload) => Ok(decode(kind, message, payload.as_deref(), &origin, partitions)),
        Err(e) if !e.blames_record() => Err(e),
        Err(e) => Ok((
            records::rejected_pipeline(message.key()),
            Input::Rejected {
                source: origin,
                reason: e.to_string(),
                kind: Rejection::Unreadable,
            },
        )),
    }
}

/// Decodes an input record into the decider's input; a bad record becomes a rejection.
/// The input a record holds (`value`: its payload in JSON form).
fn decode(
    kind: InputTopic,
    message: &dyn Record,
    value: Option<&[u8]>,
    origin: &str,
    partitions: i32,
) -> (PipelineId, Input) {
    let key = message.key();
    let decoded = records::check_partition(key, message.partition(), partitions).and_then(|()| match kind {
        InputTopic::Config => {
            records::decode_config(key, value).map(|r| (r.pipeline_id().clone(), Input::ConfigPublished(r)))
        }
        InputTopic::Sensors => {
            records::decode_sensor(key, value).map(|r| (r.pipeline_id.clone(), Input::SensorReceived(r)))
        }
        InputTopic::Jobs => records::decode_job(key, value).map(|r| (r.pipeline_id.clone(), Input::JobReported(r))),
        InputTopic::Commands => {
            records::decode_command(key, value).map(|r| (r.pipeline_id.clone(), Input::CommandReceived(r)))
        }
    });
    decoded.unwrap_or_else(|e| {
        (
            records::rejected_pipeline(key),
            Input::Rejected {
                source: origin.to_string(),
                reason: e.to_string(),
                kind: e.rejection(),
            },
        )
    })
}

/// What reading a record patiently needs.
#[derive(Clone, Copy)]
pub(crate) struct Patience<'a> {
    pub codec: &'a Codec,
    pub partitions: i32,
    pub limits: Limits,
    /// How long a record waits for the schema registry before, if the registry answers
    /// otherwise, it is dead-lettered (`--record-patience`).
    pub record_patience: Duration,
}

/// Reads an input record, waiting out a schema registry that cannot answer for it (down,
/// timing out, answering 5xx, refusing the credentials): the record is not at fault, so
/// it is neither rejected nor skipped. The batch waits with it, nothing of it applied,
/// retried with backoff, the loop held up rather than stuck (liveness holds: a restart
/// would not bring the registry back); a stop meanwhile leaves the batch to be redone on
/// restart. The wait is bounded for one record: past `--record-patience`, if the
/// registry answers otherwise and the refusal is not a passing one (403 for its id, a
/// bare 404; not a 5xx), the record is dead-lettered with the reason, so one record never holds
/// every partition of the instance (issue 60, item 2). A registry that answers nothing
/// is an outage: the batch waits on, and readiness says so.
pub(crate) async fn read_patiently(
    kind: InputTopic,
    message: &dyn Record,
    patience: Patience<'_>,
    telemetry: &Telemetry,
) -> (PipelineId, Input) {
    let mut waiting = None;
    let mut backoff = Backoff::outage();
    let since = Instant::now();
    let mut next_probe = patience.record_patience;
    loop {
        let codec = patience.codec;
        match read_input(codec, kind, message, patience.partitions, &patience.limits).await {
            Ok(read) => return read,
            Err(e) if !e.is_transient() && since.elapsed() >= next_probe && codec.registry_answers().await => {
                let waited = since.elapsed().as_secs();
                warn!(
                    topic = message.topic(),
                    partition = message.partition().number(),
                    offset = message.offset(),
                    error = %e,
                    "the schema registry answers, but not for this record: dead-lettered after {waited}s"
                );
                let origin = source_of(message);
                let reason = format!(
                    "the schema registry answers, but not for this record ({e}) after {waited}s: dead-lettered so that it holds nothing else up; produce it again once the registry serves its schema"
                );
                let rejected = Input::Rejected {
                    source: origin,
                    reason,
                    kind: Rejection::Unreadable,
                };
                return (rejected_pipeline(message.key()), rejected);
            }
            Err(e) => {
                if since.elapsed() >= next_probe {
                    // An outage: ask again after as long once more.
                    next_probe = since.elapsed() + patience.record_patience;
                }
                waiting.get_or_insert_with(|| {
                    let record = format!(
                        "{}/{}@{} (the schema registry cannot answer for it: {e}; it is dead-lettered after --record-patience, {}s, if the registry answers otherwise)",
                        message.topic(),
                        message.partition(),
                        message.offset(),
                        patience.record_patience.as_secs()
                    );
                    (telemetry.awaiting_broker(), telemetry.waiting_on_record(record))
                });
                warn!(
                    topic = message.topic(),
                    partition = message.partition().number(),
                    offset = message.offset(),
                    error = %e,
                    "the record cannot be read until the schema registry answers; the batch waits"
                );
                backoff.wait().await;
            }
        }
    }
}

/// A Kafka message as the partition task reads it.
impl Record for OwnedMessage {
    fn topic(&self) -> &str {
        Message::topic(self)
    }

    fn partition(&self) -> PartitionId {
        PartitionId::new(Message::partition(self))
    }

    fn offset(&self) -> i64 {
        Message::offset(self)
    }

    fn key(&self) -> Option<&[u8]> {
        Message::key(self)
    }

    fn value(&self) -> Option<&[u8]> {
        Message::payload(self)
    }

    fn headers(&self) -> Vec<(&str, &[u8])> {
        let Some(headers) = Message::headers(self) else {
            return Vec::new();
        };
        headers.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect()
    }

    fn timestamp(&self) -> Option<DateTime<Utc>> {
        Message::timestamp(self)
            .to_millis()
            .and_then(DateTime::from_timestamp_millis)
    }
}
