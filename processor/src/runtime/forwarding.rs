//! The runtime's side of forwarding misrouted records ([`crate::core::forwarding`] holds
//! the rules): reading the mark on a copy, and making the copy of a record.

use std::collections::HashSet;

use rdkafka::message::{Headers, Message, OwnedMessage};
use tracing::warn;

use crate::core::forwarding::{self, Forwarded};

/// What happens to a keyed record on another partition than its key's (`run --misrouted`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Misrouted {
    /// Produce a copy to the key's partition of the same topic, where its pipeline's task
    /// applies it (once, even when a crash makes it forwarded again).
    #[default]
    Forward,
    /// Reject it to the dead-letter topic, naming the partitioner to use.
    Reject,
}

/// The mark of a forwarded copy, if `message` is one.
pub fn copy_mark(message: &OwnedMessage) -> Option<Forwarded> {
    message
        .headers()?
        .iter()
        .find(|h| h.key == forwarding::HEADER)
        .and_then(|h| Forwarded::parse(h.value?))
}

/// The producer's headers, and the mark of where the copy came from.
pub fn copy_headers(message: &OwnedMessage, mark: &Forwarded) -> Vec<(String, Vec<u8>)> {
    let mut headers: Vec<(String, Vec<u8>)> = message
        .headers()
        .map(|h| {
            h.iter()
                .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                .collect()
        })
        .unwrap_or_default();
    headers.push((forwarding::HEADER.to_string(), mark.header_value().into_bytes()));
    headers
}

/// Keys already logged as misrouted, so a producer's every record does not log: a record
/// does not name its producer, so the key (a pipeline, one producer's in practice) stands in.
#[derive(Default)]
pub struct Warned(HashSet<(String, Vec<u8>)>);

/// Most keys remembered; past it, the set starts again (a key may then log again).
const WARNED_KEYS: usize = 10_000;

impl Warned {
    pub fn misrouted(&mut self, topic: &str, key: &[u8], partition: i32, owner: i32) {
        if self.0.len() >= WARNED_KEYS {
            self.0.clear();
        }
        if self.0.insert((topic.to_string(), key.to_vec())) {
            warn!(
                %topic,
                key = %String::from_utf8_lossy(key),
                partition,
                owner,
                "a producer partitions with another hash than murmur2 (librdkafka's default is CRC32): its records are forwarded to their key's partition, which costs a second write; set partitioner=murmur2_random on that producer (logged once per key)"
            );
        }
    }
}
