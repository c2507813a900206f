//! `sluice events tail`: print lifecycle events, as JSON lines or a readable table.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Args, Subcommand, ValueEnum};
use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::core::duration::parse_duration;
use crate::core::events::{Event, EventType};
use crate::core::partitioning::PartitionId;
use crate::runtime::codec::{Codec, Family};
use crate::runtime::kafka::{self, Connection};
use crate::runtime::topics::Topics;

#[derive(Args)]
pub struct TailArgs {
    /// Where to start reading: the oldest retained event, or only events to come.
    #[arg(long, value_enum, default_value_t = Start::Beginning, conflicts_with_all = ["from_time", "from_offset"])]
    from: Start,
    /// Start at the first event at or after this time: RFC 3339 (2026-11-21T08:00:00Z), a
    /// date (2026-11-21, midnight UTC), or a duration ago (90m, 6h, 2d).
    #[arg(long, value_name = "TIME", value_parser = parse_time, conflicts_with = "from_offset")]
    from_time: Option<DateTime<Utc>>,
    /// Start partition P at offset O (repeatable, e.g. --from-offset 0:1200 --from-offset
    /// 2:950); partitions not named start at the beginning.
    #[arg(long, value_name = "P:O", value_parser = parse_partition_offset)]
    from_offset: Vec<(i32, i64)>,
    /// Keep waiting for new events (until Ctrl-C).
    #[arg(long)]
    follow: bool,
    /// Only this pipeline's events.
    #[arg(long)]
    pipeline: Option<String>,
    /// Only events of these types (repeatable), e.g. --type JOB_FAILED.
    #[arg(long = "type")]
    types: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Clone, Copy, ValueEnum)]
enum Start {
    Beginning,
    End,
}

/// `json` (one record per line) or a readable `table`.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    Json,
    Table,
}

#[derive(Subcommand)]
pub enum EventsCommand {
    /// Print lifecycle events.
    Tail(TailArgs),
}

pub async fn run(kafka: &Connection, topics: &Topics, codec: &Codec, args: TailArgs) -> Result<ExitCode> {
    let consumer = kafka::Reader::create(
        kafka
            .config(kafka::Role::Consumer)
            .set("group.id", "sluice-events-tail")
            .set("enable.auto.commit", "false"),
        kafka,
    )
    .context("creating consumer")?;
    let topic = topics.events.as_str();
    let counts = kafka::partition_counts(consumer.client(), &[topic])?;
    let partitions = counts[0].1 as i32;
    if let Some((p, _)) = args.from_offset.iter().find(|(p, _)| *p < 0 || *p >= partitions) {
        bail!(
            "--from-offset names partition {p}, but {topic} has partitions 0 to {}",
            partitions - 1
        );
    }
    if let Some(kind) = args.types.iter().find(|t| EventType::parse(t).is_none()) {
        let known: Vec<&str> = EventType::ALL.iter().map(|t| t.name()).collect();
        bail!("unknown event type {kind:?}; known types: {}", known.join(", "));
    }
    let at_time = match args.from_time {
        Some(time) => Some(offsets_at(&consumer, topic, partitions, time)?),
        None => None,
    };
    let mut list = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..partitions {
        let (low, high) = consumer.range(topic, PartitionId::new(p))?;
        let named = args.from_offset.iter().find(|(q, _)| *q == p).map(|(_, o)| *o);
        let start = match (named, &at_time, args.from) {
            // An offset below the retained range starts at the oldest retained one.
            (Some(offset), _, _) => offset.clamp(low, high),
            (None, Some(at_time), _) => at_time[p as usize].unwrap_or(high),
            (None, None, Start::Beginning) => low,
            (None, None, Start::End) => high,
        };
        list.add_partition_offset(topic, p, Offset::Offset(start))?;
        ends.push((p, high, start >= high));
    }
    consumer.assign(&list)?;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    // Without --follow the end is the high watermark as first seen, and then a poll that
    // finds nothing more: tansu 0.6 reports a watermark short of the end after
    // multi-record batches.
    let mut idle = false;
    loop {
        if !args.follow && idle && ends.iter().all(|(_, _, done)| *done) {
            return Ok(ExitCode::SUCCESS);
        }
        if (&mut stop).now_or_never().is_some() {
            return Ok(ExitCode::SUCCESS);
        }
        let polled = tokio::task::block_in_place(|| consumer.poll(Duration::from_millis(200)));
        idle = polled.is_none();
        let Some(message) = polled else {
            continue;
        };
        let message = message.context("reading events")?;
        if let Some(end) = ends.iter_mut().find(|(p, _, _)| *p == message.partition()) {
            if message.offset() + 1 >= end.1 {
                end.2 = true;
            }
        }
        // The broker's offset for a time can be coarse (tansu answers by batch append time),
        // so records stamped before the asked-for time are skipped here as well.
        if let (Some(from), Some(stamp)) = (args.from_time, message.timestamp().to_millis()) {
            if stamp < from.timestamp_millis() {
                continue;
            }
        }
        let Some(payload) = message.payload() else { continue };
        let decoded = match codec.decode(Family::Events, payload).await {
            Ok(json) => serde_json::from_slice::<Event>(&json)
                .map(|e| (e, json))
                .map_err(|e| e.to_string()),
            // Not the record's fault: the registry cannot answer (down, refusing the
            // credentials); stop rather than skip records that are fine.
            Err(e) if !e.blames_record() => return Err(anyhow::Error::new(e).context("reading events")),
            Err(e) => Err(e.to_string()),
        };
        let (event, payload) = match decoded {
            Ok(decoded) => decoded,
            Err(e) => {
                eprintln!(
                    "skipping undecodable record at {topic}/{}@{}: {e}",
                    message.partition(),
                    message.offset()
                );
                continue;
            }
        };
        if args.pipeline.as_ref().is_some_and(|p| *p != event.pipeline_id) {
            continue;
        }
        if !args.types.is_empty() && !args.types.iter().any(|t| EventType::parse(t) == Some(event.kind)) {
            continue;
        }
        match args.output {
            Output::Json => println!("{}", String::from_utf8_lossy(&payload)),
            Output::Table => println!(
                "{}  {:<22} {:<20} {:<13} {}",
                event.timestamp.format("%H:%M:%S%.3f"),
                event.kind.name(),
                event.pipeline_id,
                event.date.as_deref().unwrap_or("-"),
                event.message
            ),
        }
    }
}

/// Per partition, the first offset whose record is at or after `time` (`None`: none yet).
pub(crate) fn offsets_at<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: i32,
    time: DateTime<Utc>,
) -> Result<Vec<Option<i64>>> {
    let mut query = TopicPartitionList::new();
    for p in 0..partitions {
        query.add_partition_offset(topic, p, Offset::Offset(time.timestamp_millis()))?;
    }
    let found = consumer
        .offsets_for_times(query, kafka::METADATA_TIMEOUT)
        .with_context(|| format!("looking up the offsets of {topic} at {time}"))?;
    Ok((0..partitions)
        .map(|p| match found.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => Some(o),
            _ => None,
        })
        .collect())
}

/// RFC 3339, a date (midnight UTC) or a duration before now.
pub(crate) fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(day.and_hms_opt(0, 0, 0).expect("midnight").and_utc());
    }
    match parse_duration(text) {
        Ok(ago) => Ok(Utc::now() - ago),
        Err(_) => Err(format!(
            "{text:?} is not a time: use RFC 3339 (2026-11-21T08:00:00Z), a date (2026-11-21) or a duration ago (90m, 6h, 2d)"
        )),
    }
}

fn parse_partition_offset(text: &str) -> Result<(i32, i64), String> {
    let bad = || format!("{text:?} is not PARTITION:OFFSET, e.g. 0:1200");
    let (p, o) = text.split_once(':').ok_or_else(bad)?;
    let p: i32 = p.trim().parse().map_err(|_| bad())?;
    let o: i64 = o.trim().parse().map_err(|_| bad())?;
    if o < 0 {
        return Err(bad());
    }
    Ok((p, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_points_parse_or_say_what_is_expected() {
        assert_eq!(parse_partition_offset("2:950"), Ok((2, 950)));
        assert!(parse_partition_offset("2").unwrap_err().contains("PARTITION:OFFSET"));
        assert!(parse_partition_offset("2:-1").is_err());
        assert_eq!(
            parse_time("2026-11-21T08:00:00+01:00").unwrap().to_rfc3339(),
            "2026-11-21T07:00:00+00:00"
        );
        assert_eq!(
            parse_time("2026-11-21").unwrap().to_rfc3339(),
            "2026-11-21T00:00:00+00:00"
        );
        let ago = Utc::now() - parse_time("90m").unwrap();
        assert!((89..=91).contains(&ago.num_minutes()), "{ago}");
        assert!(parse_time("yesterday").unwrap_err().contains("RFC 3339"));
    }
}
