//! `sluice events tail`: print lifecycle events, as JSON lines or a readable table.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::kafka;
use super::topics::Topics;
use crate::core::events::Event;

#[derive(Args)]
pub struct TailArgs {
    /// Where to start reading.
    #[arg(long, value_enum, default_value_t = Start::Beginning)]
    from: Start,
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

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Output {
    Json,
    Table,
}

pub async fn run(brokers: &str, topics: &Topics, args: TailArgs) -> Result<ExitCode> {
    let consumer: BaseConsumer = kafka::base_config(brokers)
        .set("group.id", "sluice-events-tail")
        .set("enable.auto.commit", "false")
        .create()
        .context("creating consumer")?;
    let topic = topics.events.as_str();
    let counts = kafka::partition_counts(consumer.client(), &[topic])?;
    let partitions = counts[0].1 as i32;
    let mut list = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, kafka::METADATA_TIMEOUT)?;
        let start = match args.from {
            Start::Beginning => Offset::Offset(low),
            Start::End => Offset::Offset(high),
        };
        list.add_partition_offset(topic, p, start)?;
        ends.push((p, high, matches!(args.from, Start::End) || high <= low));
    }
    consumer.assign(&list)?;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        if !args.follow && ends.iter().all(|(_, _, done)| *done) {
            return Ok(ExitCode::SUCCESS);
        }
        if (&mut stop).now_or_never().is_some() {
            return Ok(ExitCode::SUCCESS);
        }
        let Some(message) = tokio::task::block_in_place(|| consumer.poll(Duration::from_millis(200))) else {
            continue;
        };
        let message = message.context("reading events")?;
        if let Some(end) = ends.iter_mut().find(|(p, _, _)| *p == message.partition()) {
            if message.offset() + 1 >= end.1 {
                end.2 = true;
            }
        }
        let Some(payload) = message.payload() else { continue };
        let Ok(event) = serde_json::from_slice::<Event>(payload) else {
            eprintln!(
                "skipping undecodable record at {topic}/{}@{}",
                message.partition(),
                message.offset()
            );
            continue;
        };
        if args.pipeline.as_ref().is_some_and(|p| *p != event.pipeline_id) {
            continue;
        }
        if !args.types.is_empty() && !args.types.iter().any(|t| t.eq_ignore_ascii_case(event.kind.name())) {
            continue;
        }
        match args.output {
            Output::Json => println!("{}", String::from_utf8_lossy(payload)),
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
