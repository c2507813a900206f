//! Which instance owns which partitions, and where its HTTP API answers: the directory that
//! lets any instance forward an API request to the pipeline's owner.
//!
//! Each instance publishes a [`Member`] record to the compacted `instances` topic (key = its
//! name) whenever its partitions change and every [`HEARTBEAT`], and a tombstone when it stops;
//! every instance tails the topic. A record older than [`EXPIRY`] is ignored, so an instance
//! that crashed stops being named as an owner without anyone cleaning up after it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::FutureProducer;
use rdkafka::TopicPartitionList;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::kafka::{self, Connection};

/// How often an instance says it is still there.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// After this long without a record, an instance is taken to be gone.
pub const EXPIRY: Duration = Duration::from_secs(45);

/// One instance as published on the `instances` topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub instance: String,
    /// The consumer group: instances of other deployments sharing the topic are ignored.
    pub group: String,
    /// Base URL of its HTTP API, e.g. `http://sluice-0.sluice:9464`.
    pub url: String,
    pub partitions: Vec<i32>,
    pub at: DateTime<Utc>,
}

/// The instances known from the topic, this one included.
pub struct Directory {
    me: String,
    group: String,
    members: RwLock<HashMap<String, Member>>,
}

impl Directory {
    pub fn new(me: &str, group: &str) -> Arc<Directory> {
        Arc::new(Directory {
            me: me.to_string(),
            group: group.to_string(),
            members: RwLock::new(HashMap::new()),
        })
    }

    /// Applies one record of the topic (`None` = tombstone).
    pub fn apply(&self, instance: &str, member: Option<Member>) {
        let mut members = self.members.write().expect("directory lock");
        match member {
            Some(m) if m.group == self.group => {
                members.insert(instance.to_string(), m);
            }
            Some(_) => {}
            None => {
                members.remove(instance);
            }
        }
    }

    /// The other live instances of this group.
    pub fn peers(&self, now: DateTime<Utc>) -> Vec<Member> {
        let mut peers: Vec<Member> = self.live(now).into_iter().filter(|m| m.instance != self.me).collect();
        peers.sort_by(|a, b| a.instance.cmp(&b.instance));
        peers
    }

    /// The live instance (other than this one) that says it owns `partition`; the newest
    /// claim wins while a rebalance moves it.
    pub fn owner(&self, partition: i32, now: DateTime<Utc>) -> Option<Member> {
        self.peers(now)
            .into_iter()
            .filter(|m| m.partitions.contains(&partition))
            .max_by_key(|m| m.at)
    }

    fn live(&self, now: DateTime<Utc>) -> Vec<Member> {
        let expiry = chrono::TimeDelta::from_std(EXPIRY).expect("a small duration");
        self.members
            .read()
            .expect("directory lock")
            .values()
            .filter(|m| now - m.at < expiry)
            .cloned()
            .collect()
    }
}

/// Publishes this instance (on every change of `owned` and every heartbeat, a tombstone once
/// `stopped` flips) and keeps `directory` up to date from the topic, until stopped.
pub async fn run(
    kafka: Connection,
    topic: String,
    me: Member,
    directory: Arc<Directory>,
    mut owned: watch::Receiver<Vec<i32>>,
    mut stopped: watch::Receiver<bool>,
) {
    let (producer, consumer) = match clients(&kafka, &topic) {
        Ok(clients) => clients,
        Err(e) => {
            warn!(
                "the instance directory is off ({e:#}): API requests for pipelines of other instances are not forwarded; run `sluice topics apply` to create {topic}"
            );
            return;
        }
    };
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    loop {
        tokio::select! {
            // Drop the borrow guard inside: a held guard would make this future !Send.
            _ = async { stopped.wait_for(|s| *s).await.map(|_| ()) } => break,
            _ = heartbeat.tick() => {
                // Clone first: the borrow guard must not live across the await.
                let partitions = owned.borrow().clone();
                publish(&producer, &topic, &me, &partitions).await;
            }
            changed = owned.changed() => {
                if changed.is_err() { break }
                let partitions = owned.borrow_and_update().clone();
                publish(&producer, &topic, &me, &partitions).await;
            }
            message = consumer.recv() => match message {
                Ok(m) => {
                    let Some(key) = m.key().map(|k| String::from_utf8_lossy(k).into_owned()) else { continue };
                    let member = m.payload().and_then(|p| serde_json::from_slice::<Member>(p).ok());
                    if member.is_none() && m.payload().is_some() {
                        warn!(topic, offset = m.offset(), "skipping an undecodable instance record");
                        continue;
                    }
                    directory.apply(&key, member);
                }
                Err(e) => {
                    debug!(error = %e, "reading the instance directory");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
    // Gone: peers stop forwarding here at once rather than after the expiry.
    if let Err(e) = kafka::send(&producer, &topic, Some(me.instance.as_bytes()), None, &[]).await {
        debug!(error = %format!("{e:#}"), "could not withdraw from the instance directory");
    }
}

fn clients(kafka: &Connection, topic: &str) -> anyhow::Result<(FutureProducer, StreamConsumer)> {
    let producer = kafka::producer(kafka)?;
    let consumer: StreamConsumer = kafka
        .config(kafka::Role::Consumer)
        .set("group.id", "sluice-instance-directory")
        .set("enable.auto.commit", "false")
        .create()?;
    kafka::partition_counts(consumer.client(), &[topic])?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, kafka.beginning())?;
    consumer.assign(&list)?;
    Ok((producer, consumer))
}

async fn publish(producer: &FutureProducer, topic: &str, me: &Member, partitions: &[i32]) {
    let record = Member {
        partitions: partitions.to_vec(),
        at: Utc::now(),
        ..me.clone()
    };
    let value = serde_json::to_vec(&record).expect("a member serialises");
    if let Err(e) = kafka::send(producer, topic, Some(me.instance.as_bytes()), Some(&value), &[]).await {
        warn!(error = %format!("{e:#}"), "could not publish to the instance directory; retrying at the next heartbeat");
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn member(name: &str, group: &str, partitions: &[i32], at: DateTime<Utc>) -> Member {
        Member {
            instance: name.into(),
            group: group.into(),
            url: format!("http://{name}:9464"),
            partitions: partitions.to_vec(),
            at,
        }
    }

    #[test]
    fn owners_are_live_peers_of_the_group_and_the_newest_claim_wins() {
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let d = Directory::new("a", "sluice");
        d.apply("a", Some(member("a", "sluice", &[0], t0)));
        d.apply("b", Some(member("b", "sluice", &[1], t0)));
        d.apply("x", Some(member("x", "other", &[2], t0)));
        d.apply(
            "c",
            Some(member("c", "sluice", &[1, 2], t0 + chrono::TimeDelta::seconds(5))),
        );
        let now = t0 + chrono::TimeDelta::seconds(10);
        assert_eq!(d.owner(0, now), None, "this instance is not its own peer");
        assert_eq!(d.owner(1, now).map(|m| m.instance), Some("c".into()));
        assert_eq!(
            d.owner(2, now).map(|m| m.instance),
            Some("c".into()),
            "other groups ignored"
        );
        let names: Vec<_> = d.peers(now).into_iter().map(|m| m.instance).collect();
        assert_eq!(names, ["b", "c"]);
        // Expiry: b's record is too old by now, c's is not yet.
        let later = t0 + chrono::TimeDelta::seconds(47);
        assert_eq!(d.peers(later).len(), 1);
        // A tombstone removes at once.
        d.apply("c", None);
        assert_eq!(d.owner(1, now).map(|m| m.instance), Some("b".into()));
    }
}
