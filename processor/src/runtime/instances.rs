//! Which instance owns which partitions, and where its HTTP API answers: the directory that
//! lets any instance forward an API request to the pipeline's owner.
//!
//! Each instance publishes a [`Member`] record to the compacted `instances` topic (key = its
//! name) whenever its partitions change and every [`HEARTBEAT`], and a tombstone when it stops;
//! every instance tails the topic. A record older than [`EXPIRY`] is ignored, so an instance
//! that crashed stops being named as an owner without anyone cleaning up after it.
//!
//! Anyone who may write the topic can publish a record, and a forwarded request carries the
//! caller's bearer token; so a record is believed only when its URL matches a configured
//! [`PeerPattern`] (`run --peer`): a name only the deployment's own instances can hold. Other
//! records are ignored (and logged once), whatever partitions they claim.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::TopicPartitionList;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::clock::Clock;
use super::kafka::{self, Connection, RenewableProducer};
use super::telemetry::Telemetry;
use crate::core::partitioning::PartitionId;

/// How often an instance says it is still there.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// After this long without a record, an instance is taken to be gone.
pub const EXPIRY: Duration = Duration::from_secs(45);

/// How far another instance's clock may run ahead of this one's before a warning: its
/// timers (SLA deadlines among them) fire early by as much once it owns a partition.
pub const SKEW_WARNING: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// How far the clock of the instance that wrote `m` is at least ahead of this one's, read at
/// `now`: its record's time less `now` (the record took time to arrive, so the writer's
/// clock is ahead by at least that; negative says nothing: the writer may be behind, or the
/// record old). `None` for this instance's own records and another group's.
pub fn clock_ahead(m: &Member, me: &str, group: &str, now: DateTime<Utc>) -> Option<chrono::TimeDelta> {
    (m.instance != me && m.group == group).then(|| m.at - now)
}

/// One instance as published on the `instances` topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub instance: String,
    /// The consumer group: instances of other deployments sharing the topic are ignored.
    pub group: String,
    /// Base URL of its HTTP API, e.g. `http://sluice-0.sluice:9464`.
    pub url: String,
    pub partitions: Vec<PartitionId>,
    pub at: DateTime<Utc>,
}

/// A `--peer` pattern: where API requests may be forwarded. `SCHEME://HOST[:PORT]`, where
/// HOST may start with `*.` (any one DNS label) and PORT may be `*` (any port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPattern {
    scheme: String,
    host: String,
    /// `None`: any port.
    port: Option<u16>,
}

impl std::str::FromStr for PeerPattern {
    type Err = String;

    fn from_str(text: &str) -> Result<PeerPattern, String> {
        let bad = |why: &str| format!("--peer {text:?}: {why} (e.g. http://*.sluice.NAMESPACE.svc:9464)");
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return Err(bad("the scheme is http or https")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest).to_ascii_lowercase();
        if rest.contains(['/', '?', '#', '@']) {
            return Err(bad("a peer is a scheme, a host and a port, nothing more"));
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) if !rest.ends_with(']') => (host.to_string(), Some(port)),
            _ => (rest.clone(), None),
        };
        let port = match port {
            None => Some(default_port),
            Some("*") => None,
            Some(p) => Some(p.parse().map_err(|_| bad("the port is a number or *"))?),
        };
        let wildcard = host.strip_prefix("*.").unwrap_or(&host);
        if wildcard.is_empty() || wildcard.contains('*') {
            return Err(bad("the host is a name, an address, or *. and a name"));
        }
        Ok(PeerPattern { scheme, host, port })
    }
}

impl PeerPattern {
    /// Whether `url`, an instance's advertised base URL, matches.
    pub fn admits(&self, url: &str) -> bool {
        let Ok(url) = url::Url::parse(url) else { return false };
        let Some(host) = url.host_str() else { return false };
        let host_matches = match self.host.strip_prefix('*') {
            Some(suffix) => host
                .strip_suffix(suffix)
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            None => host == self.host,
        };
        url.scheme() == self.scheme
            && host_matches
            && self.port.is_none_or(|p| url.port_or_known_default() == Some(p))
            && url.username().is_empty()
            && url.password().is_none()
            && matches!(url.path(), "" | "/")
            && url.query().is_none()
            && url.fragment().is_none()
    }
}

/// The instances known from the topic, this one included.
pub struct Directory {
    me: String,
    /// The processor's clock: records are stamped and aged by it.
    clock: Clock,
    group: String,
    peers: Vec<PeerPattern>,
    members: RwLock<HashMap<String, Member>>,
    /// Records ignored for their URL (instance, URL), logged once each.
    ignored: RwLock<HashSet<(String, String)>>,
}

/// Most ignored records remembered; past it, the set starts again (one may then log again).
const IGNORED: usize = 1_000;

impl Directory {
    /// `peers`: the URLs requests may be forwarded to, with the caller's token.
    pub fn new(me: &str, group: &str, peers: Vec<PeerPattern>, clock: Clock) -> Arc<Directory> {
        Arc::new(Directory {
            me: me.to_string(),
            clock,
            group: group.to_string(),
            peers,
            members: RwLock::new(HashMap::new()),
            ignored: RwLock::new(HashSet::new()),
        })
    }

    /// Applies one record of the topic (`None` = tombstone). A record of another group is
    /// skipped; one that names another instance than its key, or a URL no `--peer` admits,
    /// takes its key's entry away.
    pub fn apply(&self, instance: &str, member: Option<Member>) {
        if member.as_ref().is_some_and(|m| m.group != self.group) {
            return;
        }
        let member = member.filter(|m| self.believes(instance, m));
        let mut members = self.members.write().expect("directory lock");
        match member {
            Some(m) => {
                members.insert(instance.to_string(), m);
            }
            None => {
                members.remove(instance);
            }
        }
    }

    /// Whether a record of this group under key `instance` is one of the deployment's own.
    fn believes(&self, instance: &str, m: &Member) -> bool {
        if m.instance == self.me || (m.instance == instance && self.peers.iter().any(|p| p.admits(&m.url))) {
            return true;
        }
        let mut ignored = self.ignored.write().expect("directory lock");
        if ignored.len() >= IGNORED {
            ignored.clear();
        }
        if ignored.insert((instance.to_string(), m.url.clone())) {
            warn!(
                key = instance,
                instance = %m.instance,
                url = %m.url,
                "ignoring an instance record whose URL no --peer admits (or whose key is not its instance): API requests, which carry the caller's token, are not forwarded there; if it is one of yours, add a --peer that admits it"
            );
        }
        false
    }

    /// The time on the processor's clock, which records are stamped and aged by.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The other live instances of this group.
    pub fn peers(&self, now: DateTime<Utc>) -> Vec<Member> {
        let mut peers: Vec<Member> = self.live(now).into_iter().filter(|m| m.instance != self.me).collect();
        peers.sort_by(|a, b| a.instance.cmp(&b.instance));
        peers
    }

    /// The live instance (other than this one) that says it owns `partition`; the newest
    /// claim wins while a rebalance moves it.
    pub fn owner(&self, partition: PartitionId, now: DateTime<Utc>) -> Option<Member> {
        self.peers(now)
            .into_iter()
            .filter(|m| m.partitions.contains(&partition))
            .max_by_key(|m| m.at)
    }

    fn live(&self, now: DateTime<Utc>) -> Vec<Member> {
        let expiry = chrono::TimeDelta::from_std(EXPIRY).expect("a small duration");
        // A record from far ahead of this clock would never expire and win every claim.
        self.members
            .read()
            .expect("directory lock")
            .values()
            .filter(|m| now - m.at < expiry && m.at - now < expiry)
            .cloned()
            .collect()
    }
}

/// The record instance `me` of `group` last published among `records` (key and member; a
/// tombstone or an undecodable value is `None`), if it is younger than [`EXPIRY`] at `now`:
/// a process under that name may still run.
pub fn fresh_record(
    records: impl IntoIterator<Item = (String, Option<Member>)>,
    me: &str,
    group: &str,
    now: DateTime<Utc>,
) -> Option<Member> {
    let last = records.into_iter().filter(|(key, _)| key == me).last()?.1?;
    let expiry = chrono::TimeDelta::from_std(EXPIRY).expect("a small duration");
    (last.group == group && last.instance == me && now - last.at < expiry).then_some(last)
}

/// Every record of the directory `topic`, in order: key and member (`None`: a tombstone or
/// an undecodable value).
pub fn read_records(kafka: &Connection, topic: &str) -> anyhow::Result<Vec<(String, Option<Member>)>> {
    let reader = kafka::reader(kafka, "sluice-instance-directory")?;
    let start = kafka::Start {
        topic: topic.to_string(),
        partition: PartitionId::new(0),
        offset: 0,
    };
    let records = kafka::read_span(&reader, &[start])?;
    Ok((records.iter())
        .filter_map(|m| {
            let key = String::from_utf8_lossy(m.key()?).into_owned();
            Some((key, m.payload().and_then(|p| serde_json::from_slice(p).ok())))
        })
        .collect())
}

/// Publishes this instance (on every change of `owned` and every heartbeat, a tombstone once
/// `stopped` flips) and keeps `directory` up to date from the topic, until stopped.
pub async fn run(
    kafka: Connection,
    topic: String,
    me: Member,
    directory: Arc<Directory>,
    mut owned: watch::Receiver<Vec<PartitionId>>,
    mut stopped: watch::Receiver<bool>,
    telemetry: Arc<Telemetry>,
) {
    let clock = directory.clock.clone();
    // Peers whose clock runs ahead past the warning, warned about once until they come back.
    let mut ahead_of_me: HashSet<String> = HashSet::new();
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
                publish(&producer, &topic, &me, &partitions, clock.now()).await;
            }
            changed = owned.changed() => {
                if changed.is_err() { break }
                let partitions = owned.borrow_and_update().clone();
                publish(&producer, &topic, &me, &partitions, clock.now()).await;
            }
            message = consumer.recv() => match message {
                Ok(m) => {
                    let Some(key) = m.key().map(|k| String::from_utf8_lossy(k).into_owned()) else { continue };
                    let member = m.payload().and_then(|p| serde_json::from_slice::<Member>(p).ok());
                    if member.is_none() && m.payload().is_some() {
                        warn!(topic, offset = m.offset(), "skipping an undecodable instance record");
                        continue;
                    }
                    if let Some(ahead) = (member.as_ref()).and_then(|m| clock_ahead(m, &me.instance, &me.group, clock.now())) {
                        let peer = &member.as_ref().expect("a member").instance;
                        telemetry.peer_clock_ahead(peer, ahead.as_seconds_f64());
                        if ahead <= SKEW_WARNING {
                            ahead_of_me.remove(peer);
                        } else if ahead_of_me.insert(peer.clone()) {
                            warn!(peer, ahead_seconds = ahead.as_seconds_f64(), "another instance's clock runs ahead of this one's: its timers (SLA deadlines, schedules) fire early by as much; keep every instance on NTP (said once, until it comes back)");
                        }
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
    if let Err(e) = producer.send(&topic, Some(me.instance.as_bytes()), None, &[]).await {
        debug!(error = %format!("{e:#}"), "could not withdraw from the instance directory");
    }
}

fn clients(kafka: &Connection, topic: &str) -> anyhow::Result<(RenewableProducer, StreamConsumer<kafka::Plain>)> {
    let producer = RenewableProducer::new(kafka)?;
    let consumer: StreamConsumer<kafka::Plain> = kafka.consumer(
        kafka
            .config(kafka::Role::Consumer)
            .set("group.id", "sluice-instance-directory")
            .set("enable.auto.commit", "false"),
    )?;
    kafka::partition_counts(consumer.client(), &[topic])?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, kafka.beginning())?;
    consumer.assign(&list)?;
    Ok((producer, consumer))
}

async fn publish(
    producer: &RenewableProducer,
    topic: &str,
    me: &Member,
    partitions: &[PartitionId],
    at: DateTime<Utc>,
) {
    let record = Member {
        partitions: partitions.to_vec(),
        at,
        ..me.clone()
    };
    let value = serde_json::to_vec(&record).expect("a member serialises");
    if let Err(e) = producer
        .send(topic, Some(me.instance.as_bytes()), Some(&value), &[])
        .await
    {
        warn!(error = %format!("{e:#}"), "could not publish to the instance directory; retrying at the next heartbeat");
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn a_fresh_record_of_the_same_name_and_group_says_a_namesake_may_run() {
        let now = Utc.with_ymd_and_hms(2026, 11, 28, 10, 0, 0).unwrap();
        let member = |instance: &str, group: &str, age: i64| Member {
            instance: instance.into(),
            group: group.into(),
            url: "http://sluice-0:9464".into(),
            partitions: vec![PartitionId::new(0)],
            at: now - chrono::TimeDelta::seconds(age),
        };
        let record = |m: Member| (m.instance.clone(), Some(m));
        let fresh = member("sluice-0", "g", 10);
        assert_eq!(
            fresh_record([record(fresh.clone())], "sluice-0", "g", now),
            Some(fresh.clone())
        );
        assert_eq!(
            fresh_record([record(member("sluice-0", "g", 46))], "sluice-0", "g", now),
            None,
            "expired"
        );
        assert_eq!(
            fresh_record([record(member("sluice-0", "other", 1))], "sluice-0", "g", now),
            None,
            "another group's"
        );
        assert_eq!(
            fresh_record([record(member("sluice-1", "g", 1))], "sluice-0", "g", now),
            None,
            "another name"
        );
        // Stopped cleanly: its tombstone is its last word.
        let stopped = [record(fresh.clone()), ("sluice-0".to_string(), None)];
        assert_eq!(fresh_record(stopped, "sluice-0", "g", now), None);
        // A record keyed with the name but naming another instance is not it.
        let forged = ("sluice-0".to_string(), Some(member("sluice-9", "g", 1)));
        assert_eq!(fresh_record([forged], "sluice-0", "g", now), None);
    }

    #[test]
    fn a_peer_clock_ahead_is_measured_from_its_records() {
        let now = Utc.with_ymd_and_hms(2026, 11, 26, 10, 0, 0).unwrap();
        let s = chrono::TimeDelta::seconds;
        let ahead = |name: &str, group: &str, at| clock_ahead(&member(name, group, &[], at), "me", "g", now);
        assert_eq!(
            ahead("b", "g", now + s(7)),
            Some(s(7)),
            "written 7 s in this clock's future"
        );
        assert_eq!(
            ahead("b", "g", now - s(31)),
            Some(s(-31)),
            "behind, or read back from the past: exported as 0"
        );
        assert_eq!(ahead("me", "g", now + s(7)), None, "its own");
        assert_eq!(ahead("b", "other", now + s(7)), None, "another deployment's");
    }

    fn member(name: &str, group: &str, partitions: &[i32], at: DateTime<Utc>) -> Member {
        Member {
            instance: name.into(),
            group: group.into(),
            url: format!("http://{name}:9464"),
            partitions: partitions.iter().copied().map(PartitionId::new).collect(),
            at,
        }
    }

    #[test]
    fn a_members_partitions_are_published_as_bare_numbers() {
        let at = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let published = serde_json::to_value(member("a", "sluice", &[0, 2], at)).unwrap();
        assert_eq!(published["partitions"], serde_json::json!([0, 2]));
        let read: Member = serde_json::from_value(published).unwrap();
        assert_eq!(read.partitions, [PartitionId::new(0), PartitionId::new(2)]);
    }

    #[test]
    fn owners_are_live_peers_of_the_group_and_the_newest_claim_wins() {
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let peers = ["http://b:9464", "http://c:9464", "http://x:9464"].map(|p| p.parse::<PeerPattern>().unwrap());
        let d = Directory::new("a", "sluice", peers.to_vec(), Clock::system());
        d.apply("a", Some(member("a", "sluice", &[0], t0)));
        d.apply("b", Some(member("b", "sluice", &[1], t0)));
        d.apply("x", Some(member("x", "other", &[2], t0)));
        d.apply(
            "c",
            Some(member("c", "sluice", &[1, 2], t0 + chrono::TimeDelta::seconds(5))),
        );
        let now = t0 + chrono::TimeDelta::seconds(10);
        assert_eq!(
            d.owner(PartitionId::new(0), now),
            None,
            "this instance is not its own peer"
        );
        assert_eq!(d.owner(PartitionId::new(1), now).map(|m| m.instance), Some("c".into()));
        assert_eq!(
            d.owner(PartitionId::new(2), now).map(|m| m.instance),
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
        assert_eq!(d.owner(PartitionId::new(1), now).map(|m| m.instance), Some("b".into()));
    }

    #[test]
    fn a_record_is_believed_only_at_a_peer_url_under_its_own_name_and_not_from_the_future() {
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let peers = vec!["http://*.sluice.prod.svc:9464".parse().unwrap()];
        let d = Directory::new("a", "sluice", peers, Clock::system());
        let at = |name: &str, url: &str, at| Member {
            url: url.into(),
            ..member(name, "sluice", &[0, 1, 2], at)
        };
        d.apply("b", Some(at("b", "http://b.sluice.prod.svc:9464", t0)));
        d.apply("evil", Some(at("evil", "http://evil.example:9464", t0)));
        d.apply("c", Some(at("b", "http://c.sluice.prod.svc:9464", t0)));
        let names = |now| d.peers(now).into_iter().map(|m| m.instance).collect::<Vec<_>>();
        assert_eq!(
            names(t0),
            ["b"],
            "a foreign URL, and a key that is not its instance, are ignored"
        );
        // A later record under b's name pointing elsewhere takes b's entry away.
        d.apply("b", Some(at("b", "http://b.sluice.prod.svc.evil.example:9464", t0)));
        assert!(names(t0).is_empty());
        d.apply(
            "d",
            Some(at(
                "d",
                "http://d.sluice.prod.svc:9464",
                t0 + chrono::TimeDelta::hours(1),
            )),
        );
        assert!(names(t0).is_empty(), "a record from an hour ahead is not believed");
    }

    #[test]
    fn peer_patterns_match_scheme_host_and_port_exactly_but_for_their_wildcards() {
        let admits = |pattern: &str, url: &str| pattern.parse::<PeerPattern>().unwrap().admits(url);
        assert!(admits(
            "http://*.sluice.ns.svc:9464",
            "http://sluice-0.sluice.ns.svc:9464"
        ));
        assert!(admits(
            "http://*.sluice.ns.svc:9464",
            "http://SLUICE-0.sluice.ns.svc:9464/"
        ));
        for url in [
            "http://a.b.sluice.ns.svc:9464",
            "http://.sluice.ns.svc:9464",
            "http://sluice.ns.svc:9464",
            "https://sluice-0.sluice.ns.svc:9464",
            "http://sluice-0.sluice.ns.svc:9465",
            "http://sluice-0.sluice.ns.svc.evil:9464",
            "http://u:p@sluice-0.sluice.ns.svc:9464",
            "http://sluice-0.sluice.ns.svc:9464/api",
            "not a url",
        ] {
            assert!(!admits("http://*.sluice.ns.svc:9464", url), "{url}");
        }
        assert!(admits("http://127.0.0.1:*", "http://127.0.0.1:41000"));
        assert!(!admits("http://127.0.0.1:*", "http://127.0.0.2:41000"));
        assert!(admits("https://api.example", "https://api.example:443"));
        assert!(!admits("https://api.example", "https://api.example:8443"));
        assert!(admits("http://[::1]:9464", "http://[::1]:9464"));
        for bad in [
            "sluice-0:9464",
            "ftp://x",
            "http://*",
            "http://a.*.b",
            "http://x:port",
            "http://x/api",
        ] {
            assert!(bad.parse::<PeerPattern>().is_err(), "{bad}");
        }
    }
}
