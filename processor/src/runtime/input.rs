//! Input records as the decider reads them: decoded from any of the formats the codec reads,
//! checked against the record limits, and named by the origin their events' ids derive from.
//! A record that cannot be read becomes a rejection with the reason (for the dead-letter
//! topic), never an error: bad input must not stop the loop. The one error is a schema
//! registry that cannot answer for a record (an outage, refused credentials): the record is
//! not at fault, so it is not rejected; the caller waits and reads it again.

use std::borrow::Cow;

use rdkafka::message::{Message, OwnedMessage};

use super::codec::{Codec, CodecError};
use super::topics::InputTopic;
use crate::core::lifecycle::Input;
use crate::core::limits::Limits;
use crate::core::records::{self, Rejection};

/// The origin an input's events are identified by (their `eventId` derives from it). A job
/// report is identified by its run and status rather than its offset: a trigger requested
/// again after a crash, or a runner that reports twice, yields the same events, which
/// consumers deduplicate by `eventId`.
pub(crate) fn origin_of(kind: InputTopic, p: i32, offset: i64, input: &Input) -> String {
    let role = kind.role();
    match input {
        Input::JobReported(r) => format!("{role}/{}/{}/{}", r.pipeline_id, r.run_id, r.status.as_str()),
        _ => format!("{role}/{p}@{offset}"),
    }
}

/// The pipeline an input record is about and the decider's input it holds. Avro and
/// Connect-enveloped records become their JSON form first; what cannot be read is rejected
/// with the reason, like malformed JSON. `Err`: the schema registry could not answer for the
/// record ([`CodecError::blames_record`] is false); try again later.
pub(crate) async fn read_input(
    codec: &Codec,
    kind: InputTopic,
    message: &OwnedMessage,
    partitions: i32,
    limits: &Limits,
) -> Result<(String, Input), CodecError> {
    let origin = format!("{}/{}@{}", message.topic(), message.partition(), message.offset());
    // Measured before anything is decoded: an oversized record is never parsed.
    let size = message.payload().map_or(0, <[u8]>::len);
    if let Err(reason) = limits.check_record(kind == InputTopic::Config, size) {
        let rejected = Input::Rejected {
            source: origin,
            reason,
            kind: Rejection::TooLarge,
        };
        return Ok((records::rejected_pipeline(message.key()), rejected));
    }
    let payload = match (kind.family(), message.payload()) {
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
    message: &OwnedMessage,
    value: Option<&[u8]>,
    origin: &str,
    partitions: i32,
) -> (String, Input) {
    let key = message.key();
    let decoded = records::check_partition(key, message.partition(), partitions).and_then(|()| match kind {
        InputTopic::Config => {
            records::decode_config(key, value).map(|r| (r.pipeline_id().to_string(), Input::ConfigPublished(r)))
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
