//! `sluice reset`: puts a stopped consumer group back to a point in time, so that a restart
//! reprocesses the inputs from there (a bad config fixed, a bug fixed, a topic repaired).
//!
//! Offsets and state move together, or a restart would apply inputs to the wrong state. Per
//! partition, the state at the point is taken either from the changelog (the state after
//! the last batch written before the point that applied no input from at or after it: the
//! "matching point", whose applied offsets say where each input resumes) or rebuilt from
//! scratch by replaying every input before the point in event time
//! ([`crate::core::replay`]). It is then written to the changelog as
//! one batch that overwrites the current state key by key, and the group's offsets are
//! committed where the state leaves off. Instances restore from the changelog when they
//! start, so their local stores pick the batch up like any other.
//!
//! Journaled triggers are left out of the state put back: a reset never sends a trigger
//! again by itself (a run that was waiting for its trigger's report finds the report among
//! the inputs it reprocesses, or the watchdog closes it).

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use clap::Args;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::events::{offsets_at, parse_time};
use super::replay::{decoded_in_order, parse_position, time_of_positions};
use crate::core::changelog::{Entry, Lineage, Restore};
use crate::core::partitioning::{partition_for, PartitionId};
use crate::core::replay::Replay;
use crate::runtime::changelog;
use crate::runtime::codec::Codec;
use crate::runtime::kafka::{self, Connection, Reader, Start};
use crate::runtime::outputs::replay_fit;
use crate::runtime::store::{self, StoreBatch};
use crate::runtime::topics::{InputTopic, Topics};

#[derive(Args)]
pub struct ResetArgs {
    /// The consumer group of the processors to reset; every instance must be stopped.
    #[arg(long, env = "SLUICE_GROUP", default_value = "sluice")]
    group: String,
    /// The point to go back to: RFC 3339, a date (midnight UTC) or a duration ago (6h).
    #[arg(long, value_name = "TIME", value_parser = parse_time, required_unless_present = "to_offset")]
    to_time: Option<DateTime<Utc>>,
    /// The point as the time of the record at TOPIC:P:O (TOPIC: config, sensors, jobs or
    /// commands); repeatable, the earliest counts.
    #[arg(long, value_name = "TOPIC:P:O", value_parser = parse_position, conflicts_with = "to_time")]
    to_offset: Vec<(InputTopic, i32, i64)>,
    /// Rebuild the state by replaying every input before the point, instead of taking it
    /// from the changelog (needed when the changelog no longer holds its history).
    #[arg(long)]
    from_scratch: bool,
    /// Carry the plan out. Without it the plan is printed and nothing changes, as with
    /// Kafka's own `kafka-consumer-groups --reset-offsets`.
    #[arg(long)]
    execute: bool,
    /// Print the plan and change nothing (the default; kept for scripts written for it).
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    #[command(flatten)]
    decider: super::args::DeciderArgs,
}

/// What a reset does to one partition.
struct PartitionPlan {
    partition: PartitionId,
    /// Where the state comes from, in words.
    basis: String,
    /// Per input topic: where it resumes, and its end now.
    positions: Vec<(String, i64, i64)>,
    /// The changelog batch that puts the state back (`None`: delete the key).
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The batches of the changelog's newest epoch that count: what the reset's own epoch
    /// accepts before its batch.
    accept: Lineage,
    pipelines: usize,
    timers: usize,
}

pub async fn run(kafka: &Connection, topics: &Topics, codec: &Codec, args: ResetArgs) -> Result<ExitCode> {
    let consumer = kafka::reader(kafka, &format!("{}-reset", args.group))?;
    let inputs = topics.inputs();
    let partitions = kafka::check_copartitioned(&kafka::partition_counts(consumer.client(), &inputs)?)? as i32;
    kafka::partition_counts(consumer.client(), &[&topics.changelog])?;
    ensure_stopped(&consumer, &args.group)?;
    let point = match args.to_time {
        Some(t) => t,
        None => time_of_positions(kafka, topics, partitions, &args.to_offset)?
            .into_iter()
            .min()
            .context("--to-time or --to-offset is needed")?,
    };
    let targets = first_offsets_at(&consumer, &inputs, partitions, point)?;
    let plans = match args.from_scratch {
        false => {
            let mut plans = Vec::new();
            for p in (0..partitions).map(PartitionId::new) {
                plans.push(from_changelog(&consumer, topics, p, point, &targets)?);
            }
            plans
        }
        true => from_scratch(&consumer, topics, codec, partitions, &targets, &args).await?,
    };
    println!(
        "reset of group {} to {} ({}):",
        args.group,
        point.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        if args.from_scratch {
            "state rebuilt from the inputs"
        } else {
            "state from the changelog"
        }
    );
    for plan in &plans {
        let deletes = plan.writes.iter().filter(|(_, v)| v.is_none()).count();
        println!(
            "partition {}: {}; {} pipelines, {} timers; {} changelog writes ({} puts, {deletes} deletes)",
            plan.partition,
            plan.basis,
            plan.pipelines,
            plan.timers,
            plan.writes.len(),
            plan.writes.len() - deletes
        );
        for (topic, at, end) in &plan.positions {
            println!("  {topic} resumes at offset {at} ({} records to reprocess)", end - at);
        }
    }
    if !args.execute {
        println!("plan only: nothing written (add --execute to carry it out)");
        return Ok(ExitCode::SUCCESS);
    }
    let producer = kafka::producer(kafka)?;
    for plan in &plans {
        write_batch(&producer, &topics.changelog, &args.group, plan).await?;
    }
    let mut list = TopicPartitionList::new();
    for plan in &plans {
        for (topic, at, _) in &plan.positions {
            list.add_partition_offset(topic, plan.partition.number(), Offset::Offset(*at))?;
        }
    }
    let committer: BaseConsumer<kafka::Plain> = kafka
        .consumer(
            kafka
                .config(kafka::Role::Consumer)
                .set("group.id", &args.group)
                .set("enable.auto.commit", "false"),
        )
        .context("creating Kafka consumer")?;
    tokio::task::block_in_place(|| committer.commit(&list, CommitMode::Sync))
        .with_context(|| format!("committing the offsets of group {}", args.group))?;
    println!("done: start the processors of group {} to reprocess", args.group);
    Ok(ExitCode::SUCCESS)
}

/// Per input topic and partition: the first offset whose record is stamped at or after
/// `point` (the end when none is), and the end. The broker's answer for a time is only a
/// starting point (tansu answers by batch append time, so it can be early): the records
/// from there are read to find the exact one.
fn first_offsets_at(
    consumer: &Reader,
    inputs: &[&str],
    partitions: i32,
    point: DateTime<Utc>,
) -> Result<BTreeMap<(String, PartitionId), (i64, i64)>> {
    let mut starts = Vec::new();
    let mut targets = BTreeMap::new();
    for topic in inputs {
        for (p, offset) in offsets_at(consumer, topic, partitions, point)?.into_iter().enumerate() {
            let p = PartitionId::new(p as i32);
            let (_, high) = consumer.fetch_watermarks(topic, p.number(), kafka::METADATA_TIMEOUT)?;
            targets.insert((topic.to_string(), p), (high, high));
            starts.push(Start {
                topic: topic.to_string(),
                partition: p,
                offset: offset.unwrap_or(high).min(high),
            });
        }
    }
    let messages = tokio::task::block_in_place(|| kafka::read_span(consumer, &starts))?;
    for m in &messages {
        let stamp = m.timestamp().to_millis().unwrap_or(i64::MIN);
        if let Some((target, _)) = targets.get_mut(&(m.topic().to_string(), PartitionId::new(m.partition()))) {
            if stamp >= point.timestamp_millis() && m.offset() < *target {
                *target = m.offset();
            }
        }
    }
    Ok(targets)
}

/// Refuses to reset a group with members: a running processor would overwrite the reset.
fn ensure_stopped<C: ConsumerContext>(consumer: &BaseConsumer<C>, group: &str) -> Result<()> {
    let groups = tokio::task::block_in_place(|| consumer.fetch_group_list(Some(group), kafka::METADATA_TIMEOUT))
        .with_context(|| format!("asking the broker about group {group}"))?;
    if let Some(g) = groups.groups().iter().find(|g| g.name() == group) {
        if !g.members().is_empty() {
            let members: Vec<&str> = g.members().iter().map(|m| m.client_id()).collect();
            bail!(
                "group {group} has {} active member(s) ({}): stop every `sluice run` of the group first",
                members.len(),
                members.join(", ")
            );
        }
    }
    Ok(())
}

/// One changelog record: offset, what it is, and timestamp (ms).
type ChangelogRecord = (i64, Entry, i64);

/// The lineage a restore of `records` ends with.
fn lineage_of(records: &[ChangelogRecord]) -> Lineage {
    let mut rules = Restore::full();
    for (_, entry, _) in records {
        // A restore from the beginning never diverges.
        let _ = rules.push(entry.clone());
    }
    rules.lineage()
}

/// Every record of one changelog partition, in order.
fn changelog_records(consumer: &Reader, topic: &str, p: PartitionId) -> Result<Vec<ChangelogRecord>> {
    // Offset 0: the read starts at the partition's first offset ([`kafka::read_span`] clamps).
    let start = Start {
        topic: topic.to_string(),
        partition: p,
        offset: 0,
    };
    let messages = tokio::task::block_in_place(|| kafka::read_span(consumer, &[start]))?;
    Ok(messages
        .iter()
        .filter_map(|m| {
            let stamp = m.timestamp().to_millis().unwrap_or(i64::MIN);
            let entry = changelog::entry(m.offset(), m.key()?, m.payload(), changelog::batch_of(m))?;
            Some((m.offset(), entry, stamp))
        })
        .collect())
}

/// The batch that turns the changelog's current state into `image`: every key it holds that
/// `image` lacks is deleted, every key of `image` written.
fn overwrite(records: &[ChangelogRecord], image: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let current: BTreeSet<&Vec<u8>> = records
        .iter()
        .filter_map(|(_, entry, _)| match entry {
            Entry::Write { key, .. } => Some(key),
            _ => None,
        })
        .collect();
    let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = current
        .into_iter()
        .filter(|k| !image.contains_key(*k))
        .map(|k| (k.clone(), None))
        .collect();
    writes.extend(image.iter().map(|(k, v)| (k.clone(), Some(v.clone()))));
    writes
}

/// Pipelines and pending timers in a state image (timers are parts of the states).
fn counts(image: &BTreeMap<Vec<u8>, Vec<u8>>) -> (usize, usize) {
    let pipelines = image.keys().filter(|k| store::parts::is_head(k)).count();
    let timers = (image.iter())
        .map(|(k, v)| store::parts::timers_of(k, v).map_or(0, |t| t.len()))
        .sum();
    (pipelines, timers)
}

/// The applied offset an `o/<topic>` changelog record holds.
fn applied(key: &[u8], value: Option<&[u8]>) -> Option<(String, i64)> {
    let topic = key.strip_prefix(b"o/")?;
    let raw = <[u8; 8]>::try_from(value?).ok()?;
    Some((String::from_utf8_lossy(topic).into_owned(), i64::from_be_bytes(raw)))
}

/// The state after the last complete batch written before `point` that applied no input at
/// or after its topic's target, from the changelog's history.
fn from_changelog(
    consumer: &Reader,
    topics: &Topics,
    p: PartitionId,
    point: DateTime<Utc>,
    targets: &BTreeMap<(String, PartitionId), (i64, i64)>,
) -> Result<PartitionPlan> {
    let topic = &topics.changelog;
    let records = changelog_records(consumer, topic, p)?;
    // The history must be whole: a compacted or expired changelog keeps only the latest value
    // of each key, and its batches can no longer be told apart.
    let (low, _) = consumer.range(topic, p)?;
    let gap = records.windows(2).find(|w| w[1].0 != w[0].0 + 1).map(|w| w[0].0 + 1);
    if low > 0 || records.first().is_some_and(|r| r.0 > 0) || gap.is_some() {
        bail!(
            "{topic} partition {p} no longer holds its whole history (it starts at offset {low}{}: compacted or expired): use --from-scratch, which rebuilds the state from the inputs",
            gap.map(|g| format!(", offset {g} is missing")).unwrap_or_default()
        );
    }
    let mut image: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rules = Restore::full();
    let mut basis = format!("state before the first changelog batch of {topic}/{p} (empty)");
    let mut reached = BTreeMap::new();
    for (offset, entry, stamp) in &records {
        let batch = rules
            .push(entry.clone())
            .map_err(|why| anyhow::anyhow!("{topic} partition {p}: {why}"))?;
        if batch.is_empty() {
            continue;
        }
        let past_target =
            |(input, applied): (String, i64)| targets.get(&(input, p)).is_some_and(|(target, _)| applied >= *target);
        if *stamp >= point.timestamp_millis()
            || batch
                .iter()
                .filter_map(|(k, v)| applied(k, v.as_deref()))
                .any(past_target)
        {
            break;
        }
        for (key, value) in batch {
            if let Some((input, offset)) = applied(&key, value.as_deref()) {
                reached.insert(input, offset);
            }
            match value {
                Some(v) => image.insert(key, v),
                None => image.remove(&key),
            };
        }
        basis = format!("state after the changelog batch ending at {topic}/{p}@{offset}");
    }
    image.retain(|k, _| !k.starts_with(b"e/"));
    let positions = topics
        .inputs()
        .iter()
        .map(|t| {
            let end = targets.get(&(t.to_string(), p)).map_or(0, |(_, high)| *high);
            (t.to_string(), reached.get(*t).map_or(0, |o| o + 1), end)
        })
        .collect();
    let (pipelines, timers) = counts(&image);
    Ok(PartitionPlan {
        partition: p,
        basis,
        positions,
        writes: overwrite(&records, &image),
        accept: lineage_of(&records),
        pipelines,
        timers,
    })
}

/// The state every input before its target leads to, replayed in event time.
async fn from_scratch(
    consumer: &Reader,
    topics: &Topics,
    codec: &Codec,
    partitions: i32,
    targets: &BTreeMap<(String, PartitionId), (i64, i64)>,
    args: &ResetArgs,
) -> Result<Vec<PartitionPlan>> {
    let starts: Vec<Start> = targets
        .keys()
        .map(|(topic, p)| Start {
            topic: topic.clone(),
            partition: *p,
            offset: 0,
        })
        .collect();
    let records = decoded_in_order(
        consumer,
        topics,
        codec,
        partitions,
        &args.decider.settings().limits,
        &starts,
        |_, _, _| true,
    )
    .await?;
    let before: Vec<_> = records
        .into_iter()
        .filter(|r| {
            let topic = topics.input(r.kind).to_string();
            targets
                .get(&(topic, r.partition))
                .is_some_and(|(target, _)| r.offset < *target)
        })
        .collect();
    let start = before.first().map_or(DateTime::<Utc>::MIN_UTC, |r| r.at);
    let settings = args.decider.settings();
    let fit = replay_fit(codec, topics, settings.limits);
    let mut replay = Replay::new(settings, start, Some(fit));
    let mut events = Vec::new();
    for r in &before {
        r.replay_into(&mut replay, &mut events)?;
    }
    let mut plans = Vec::new();
    for p in (0..partitions).map(PartitionId::new) {
        let mut batch = StoreBatch::default();
        for (id, state) in replay.states() {
            if partition_for(id.as_bytes(), partitions) != p {
                continue;
            }
            batch.put_pipeline(id, state, true)?;
        }
        let mut positions = Vec::new();
        for kind in InputTopic::ALL {
            let topic = topics.input(kind);
            let (target, high) = targets.get(&(topic.to_string(), p)).copied().unwrap_or((0, 0));
            if target > 0 {
                batch.set_applied_offset(topic, target - 1);
            }
            positions.push((topic.to_string(), target, high));
        }
        let image: BTreeMap<Vec<u8>, Vec<u8>> = batch
            .changes()
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
            .collect();
        let records = changelog_records(consumer, &topics.changelog, p)?;
        let (pipelines, timers) = counts(&image);
        let replayed = before.iter().filter(|r| r.partition == p).count();
        plans.push(PartitionPlan {
            partition: p,
            basis: format!("state from replaying its {replayed} inputs before the point"),
            positions,
            writes: overwrite(&records, &image),
            accept: lineage_of(&records),
            pipelines,
            timers,
        });
    }
    Ok(plans)
}

/// Writes the plan's batch to the changelog partition as the first batch of an epoch of
/// its own (fence, acceptance of the newest epoch's batches, the writes, their end marker),
/// so that the processors' restore rules take it over whatever was written before.
async fn write_batch(producer: &kafka::Producer, topic: &str, group: &str, plan: &PartitionPlan) -> Result<()> {
    let p = plan.partition;
    let send = |key: Vec<u8>, value: Option<Vec<u8>>, headers: Vec<(&'static str, Vec<u8>)>| async move {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        kafka::send_to(producer, topic, Some(p), Some(&key), value.as_deref(), &headers)
            .await
            .with_context(|| format!("writing to {topic}/{p}"))
    };
    if plan.writes.is_empty() {
        return Ok(());
    }
    let (key, value) = changelog::fence(&format!("{group}-reset"), chrono::Utc::now());
    let (_, fence) = send(key, Some(value), Vec::new()).await?;
    let epoch = crate::core::changelog::epoch_at(fence);
    let (key, value) = changelog::acceptance(plan.accept);
    send(key, Some(value), Vec::new()).await?;
    let mut first = None;
    for (key, value) in &plan.writes {
        let header = vec![(changelog::BATCH_HEADER, changelog::batch_header(epoch, 1))];
        let (_, offset) = send(key.clone(), value.clone(), header).await?;
        first = Some(first.map_or(offset, |f: i64| f.min(offset)));
    }
    let (key, value) = changelog::marker(epoch, 1, first.unwrap_or(fence));
    send(key, Some(value), Vec::new()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overwrite_deletes_what_the_image_lacks_and_writes_the_rest() {
        let write = |key: &[u8], value: Option<&[u8]>| Entry::Write {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
            epoch: 1,
            seq: 1,
        };
        let records = vec![
            (0, Entry::Fence { epoch: 1 }, 0),
            (1, write(b"p/a", Some(b"1")), 0),
            (2, write(b"p/b", Some(b"2")), 0),
            (3, Entry::Marker { epoch: 1, seq: 1 }, 0),
            (4, write(b"t/x", None), 0),
        ];
        assert_eq!(lineage_of(&records), Lineage { epoch: 1, through: 1 });
        let image: BTreeMap<Vec<u8>, Vec<u8>> = [(b"p/a".to_vec(), b"0".to_vec())].into();
        let writes = overwrite(&records, &image);
        assert_eq!(
            writes,
            [
                (b"p/b".to_vec(), None),
                (b"t/x".to_vec(), None),
                (b"p/a".to_vec(), Some(b"0".to_vec()))
            ]
        );
        assert_eq!(
            applied(b"o/sensors", Some(&7i64.to_be_bytes())),
            Some(("sensors".into(), 7))
        );
        assert_eq!(applied(b"p/sensors", Some(&7i64.to_be_bytes())), None);
    }
}
