//! An input record as the partition task reads it: where it was read, its key, value,
//! headers and producer's timestamp. The runtime's Kafka messages and the simulator's
//! records both are one.

use chrono::{DateTime, Utc};

use crate::core::forwarding::{self, Forwarded, Implausible};
use crate::core::lifecycle::Input;
use crate::core::output::Output;
use crate::core::partitioning::PartitionId;

pub trait Record {
    fn topic(&self) -> &str;
    fn partition(&self) -> PartitionId;
    fn offset(&self) -> i64;
    fn key(&self) -> Option<&[u8]>;
    fn value(&self) -> Option<&[u8]>;
    /// Its headers, in order (a header without a value has an empty one).
    fn headers(&self) -> Vec<(&str, &[u8])>;
    /// When its producer stamped it, if it says.
    fn timestamp(&self) -> Option<DateTime<Utc>>;
}

/// Where a record was read: `topic/partition@offset`.
pub fn source_of(record: &dyn Record) -> String {
    format!("{}/{}@{}", record.topic(), record.partition(), record.offset())
}

/// The origin an input's events are identified by (their `eventId` derives from it):
/// `role/partition@offset`. A job report is identified by its run and status rather than its
/// offset: a trigger requested again after a crash, or a runner that reports twice, yields
/// the same events, which consumers deduplicate by `eventId`.
pub fn origin_of(role: &str, p: PartitionId, offset: i64, input: &Input) -> String {
    match input {
        Input::JobReported(r) => format!("{role}/{}/{}/{}", r.pipeline_id, r.run_id, r.status.as_str()),
        _ => format!("{role}/{p}@{offset}"),
    }
}

/// The forwarding mark of a copy, if the record is one (see [`crate::core::forwarding`]).
pub fn copy_mark(record: &dyn Record) -> Option<Result<Forwarded, Implausible>> {
    let (_, value) = record.headers().into_iter().find(|(k, _)| *k == forwarding::HEADER)?;
    Some(Forwarded::parse(value))
}

/// The headers of a forwarded copy: the record's own, and the mark.
pub fn copy_headers(record: &dyn Record, mark: &Forwarded) -> Vec<(String, Vec<u8>)> {
    let mut headers: Vec<(String, Vec<u8>)> = (record.headers().into_iter())
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    headers.push((forwarding::HEADER.to_string(), mark.header_value().into_bytes()));
    headers
}

/// Drops a dead letter's value, too large for the broker; its headers say so, and where the
/// record is at its source. Returns the size dropped.
pub fn omit_value(output: &mut Output) -> usize {
    let size = output.value.take().map_or(0, |v| v.len());
    output.headers.push((
        "value.omitted".into(),
        format!("{size} bytes: too large for the dead-letter topic; read it at its source coordinates").into_bytes(),
    ));
    size
}

/// The dead letter of `record`: its key, value and headers as they were, with the reason
/// and where it was read. One that would be over `largest` bytes goes without its value
/// (and, if still over, without the producer's headers), saying so: it must fit the broker.
pub fn dead_letter(topic: &str, record: &dyn Record, reason: &str, largest: usize) -> Output {
    let mut headers = vec![
        ("error".to_string(), reason.as_bytes().to_vec()),
        ("source.topic".to_string(), record.topic().as_bytes().to_vec()),
        (
            "source.partition".to_string(),
            record.partition().to_string().into_bytes(),
        ),
        ("source.offset".to_string(), record.offset().to_string().into_bytes()),
    ];
    // Keep the producer's own headers too, so the record can be replayed as it was.
    for (key, value) in record.headers() {
        headers.push((format!("original.{key}"), value.to_vec()));
    }
    let mut output = Output {
        topic: topic.to_string(),
        partition: None,
        key: record.key().map(<[u8]>::to_vec),
        value: record.value().map(<[u8]>::to_vec),
        headers,
    };
    if output.size() > largest {
        omit_value(&mut output);
    }
    if output.size() > largest {
        let size: usize = (output.headers.iter())
            .filter(|(k, _)| k.starts_with("original."))
            .map(|(k, v)| k.len() + v.len())
            .sum();
        output.headers.retain(|(k, _)| !k.starts_with("original."));
        output.headers.push((
            "headers.omitted".into(),
            format!("{size} bytes of the record's own headers: too large for the dead-letter topic").into_bytes(),
        ));
    }
    output
}
