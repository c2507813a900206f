//! The recent events the API and the page show per pipeline. They are kept in memory (the
//! events topic is the record), bounded as a whole so memory does not grow with the number of
//! pipelines, and filled in the background from the tail of the events topic whenever a
//! partition is opened, so that a restarted or new owner's timelines are not empty.
//!
//! The read-back runs on its own task and consumer, one partition at a time: a partition open
//! never waits for it, and a takeover of many partitions does not start many consumers.

use std::collections::{HashSet, VecDeque};

use anyhow::Result;
use rdkafka::Message;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tracing::{debug, warn};

use super::codec::{Codec, Family};
use super::kafka::{self, Connection};
use crate::core::events::Event;
use crate::core::partitioning::PartitionId;

/// Events shown per pipeline (enough for a day's timeline of an execution).
pub const PER_PIPELINE: usize = 50;
/// Events kept across all pipelines.
pub const KEPT: usize = 10_000;
/// Events read back from each opened partition of the events topic.
const TAIL: i64 = 2_000;

/// The latest events of the owned pipelines, newest last.
#[derive(Default)]
pub struct RecentEvents {
    events: VecDeque<Event>,
}

impl RecentEvents {
    /// An event just published.
    pub fn push(&mut self, event: Event) {
        if self.events.len() == KEPT {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// Events read back from the events topic, oldest first: older than those published since
    /// (which are newest last already), so they go in front, less any already kept. Where the
    /// total is over [`KEPT`], the oldest go.
    pub fn backfill(&mut self, older: Vec<Event>) {
        let kept: HashSet<&str> = self.events.iter().map(|e| e.event_id.as_str()).collect();
        let fresh: Vec<Event> = older
            .into_iter()
            .filter(|e| !kept.contains(e.event_id.as_str()))
            .collect();
        for event in fresh.into_iter().rev() {
            self.events.push_front(event);
        }
        while self.events.len() > KEPT {
            self.events.pop_front();
        }
    }

    /// Forgets the events of the pipelines `keep` says no to (a revoked partition's).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.events.retain(|e| keep(&e.pipeline_id));
    }

    /// The pipeline's latest [`PER_PIPELINE`] events kept, oldest first.
    pub fn of(&self, pipeline: &str) -> Vec<&Event> {
        let mut events: Vec<&Event> = self
            .events
            .iter()
            .rev()
            .filter(|e| e.pipeline_id == pipeline)
            .take(PER_PIPELINE)
            .collect();
        events.reverse();
        events
    }
}

/// Reads the tail of events-topic partitions in the background: ask with [`TailReader::read`],
/// collect from [`TailReader::loaded`].
pub struct TailReader {
    requests: UnboundedSender<PartitionId>,
    pub loaded: UnboundedReceiver<(PartitionId, Vec<Event>)>,
}

impl TailReader {
    /// Starts the reader's task. The events topic must be partitioned like the inputs: its
    /// partition `p` then holds exactly the events of input partition `p`'s pipelines.
    pub fn start(kafka: Connection, topic: String, codec: Codec) -> TailReader {
        let (requests, mut asked) = unbounded_channel::<PartitionId>();
        let (done, loaded) = unbounded_channel();
        tokio::spawn(async move {
            let mut consumer: Option<kafka::Reader> = None;
            while let Some(p) = asked.recv().await {
                let (topic2, kafka2) = (topic.clone(), kafka.clone());
                let taken = consumer.take();
                let read = tokio::task::spawn_blocking(move || {
                    let consumer = match taken {
                        Some(c) => c,
                        None => kafka::reader(&kafka2, "sluice-recent-events")?,
                    };
                    let messages = read_tail(&consumer, &topic2, p);
                    Ok::<_, anyhow::Error>((consumer, messages))
                })
                .await;
                let messages = match read {
                    // Kept while more reads wait (partitions open in bursts), then let go: an
                    // idle client is not polled, so it could not take fresh MSK IAM tokens,
                    // and its broker connections would outlive their sign-in.
                    Ok(Ok((c, messages))) => {
                        consumer = (!asked.is_empty()).then_some(c);
                        messages
                    }
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(e.into()),
                };
                let events = match messages {
                    Ok(messages) => decode(&codec, &messages).await,
                    Err(e) => {
                        warn!(partition = p.number(), error = %format!("{e:#}"), "could not read recent events back for the page; its timelines start empty");
                        continue;
                    }
                };
                debug!(partition = p.number(), events = events.len(), "recent events read back");
                if done.send((p, events)).is_err() {
                    return;
                }
            }
        });
        TailReader { requests, loaded }
    }

    /// Asks for partition `p`'s tail.
    pub fn read(&self, p: PartitionId) {
        let _ = self.requests.send(p);
    }
}

/// The last [`TAIL`] records of the partition, or none when it is empty.
fn read_tail(consumer: &kafka::Reader, topic: &str, p: PartitionId) -> Result<Vec<rdkafka::message::OwnedMessage>> {
    let (low, high) = consumer.range(topic, p)?;
    if high <= low {
        return Ok(Vec::new());
    }
    let start = kafka::Start {
        topic: topic.to_string(),
        partition: p,
        offset: (high - TAIL).max(low),
    };
    kafka::read_span(consumer, &[start])
}

/// The events among the records; anything else (a record another writer put there) is skipped.
async fn decode(codec: &Codec, messages: &[rdkafka::message::OwnedMessage]) -> Vec<Event> {
    let mut events = Vec::new();
    for message in messages {
        let Some(payload) = message.payload() else { continue };
        let Ok(json) = codec.decode(Family::Events, payload).await else {
            continue;
        };
        if let Ok(event) = serde_json::from_slice::<Event>(&json) {
            events.push(event);
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::events::{Category, EventType};

    fn event(id: &str, pipeline: &str) -> Event {
        Event {
            event_id: id.into(),
            kind: EventType::JOB_TRIGGERED,
            category: Category::Job,
            pipeline_id: pipeline.into(),
            schedule_id: None,
            date: None,
            run_id: None,
            attempt: None,
            timestamp: chrono::DateTime::UNIX_EPOCH,
            message: String::new(),
            detail: Default::default(),
        }
    }

    fn ids(events: Vec<&Event>) -> Vec<&str> {
        events.into_iter().map(|e| e.event_id.as_str()).collect()
    }

    #[test]
    fn read_back_events_go_before_those_published_since_without_duplicates() {
        let mut recent = RecentEvents::default();
        recent.push(event("c", "p"));
        recent.push(event("d", "p"));
        // The read-back saw c too: it was on the topic when the tail was read.
        recent.backfill(vec![event("a", "p"), event("b", "p"), event("c", "p")]);
        assert_eq!(ids(recent.of("p")), ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_pipeline_shows_its_latest_events_and_the_whole_stays_bounded() {
        let mut recent = RecentEvents::default();
        for i in 0..KEPT {
            recent.push(event(&format!("x{i}"), "other"));
        }
        recent.push(event("new", "p"));
        assert_eq!(recent.events.len(), KEPT);
        recent.backfill((0..PER_PIPELINE + 5).map(|i| event(&format!("old{i}"), "p")).collect());
        assert_eq!(recent.events.len(), KEPT, "a read-back never grows past the bound");
        // The bound drops the oldest: the read-back went in front, so it is what went.
        assert_eq!(ids(recent.of("p")), ["new"]);
        recent.retain(|p| p != "p");
        assert!(recent.of("p").is_empty());
        let shown = recent.of("other");
        assert_eq!(shown.len(), PER_PIPELINE);
        assert_eq!(shown.last().unwrap().event_id, format!("x{}", KEPT - 1));
    }
}
