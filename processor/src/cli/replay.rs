//! `sluice replay`: the decider run again over the recorded inputs of a span, in event time
//! ([`crate::core::replay`]), with its events written out or compared with the events
//! recorded for the same span ([`crate::core::diff`]).
//!
//! The state at the start of the span is rebuilt the same way: the inputs before it are
//! replayed too (from the oldest retained record, or `--warm-up-from`), and their events
//! are left out. Configs come from the config topic, every retained one, or from a folder
//! (`--pipelines`), which replaces the topic's entirely. The whole span is read into memory
//! before it is replayed, ordered by record timestamp (then topic, partition and offset), so
//! the same log always replays the same way.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use chrono::{DateTime, TimeDelta, Utc};
use clap::Args;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};

use super::args::{parse_delta, parse_var, DeciderArgs};
use super::config::{publishable_configs, Folders, Progress};
use super::events::{offsets_at, parse_time};
use crate::core::diff::{diff, Window};
use crate::core::events::Event;
use crate::core::ids::PipelineId;
use crate::core::lifecycle::Input;
use crate::core::limits::Limits;
use crate::core::partitioning::PartitionId;
use crate::core::records::ConfigRecord;
use crate::core::replay::{Replay, Unapplied};
use crate::core::task::origin_of;
use crate::runtime::codec::{Codec, Family};
use crate::runtime::input::read_input;
use crate::runtime::kafka::{self, Connection, Reader, Start};
use crate::runtime::outputs::replay_fit;
use crate::runtime::topics::{InputTopic, Topics};

#[derive(Args)]
pub struct ReplayArgs {
    /// Start of the span whose events are output: RFC 3339, a date (midnight UTC) or a
    /// duration ago (2d). Default: the oldest retained input.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    from: Option<DateTime<Utc>>,
    /// Start at the time of the record at TOPIC:P:O instead (TOPIC: config, sensors, jobs or
    /// commands); repeatable, the earliest counts.
    #[arg(long, value_name = "TOPIC:P:O", value_parser = parse_position, conflicts_with = "from")]
    from_offset: Vec<(InputTopic, i32, i64)>,
    /// End of the span: inputs after it are not read, and event time runs up to it, so
    /// timers due by then fire. Default: the end of the log; event time then stops at the
    /// last input's timestamp.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    to: Option<DateTime<Utc>>,
    /// End at the time of the record at TOPIC:P:O instead; repeatable, the latest counts.
    #[arg(long, value_name = "TOPIC:P:O", value_parser = parse_position, conflicts_with = "to")]
    to_offset: Vec<(InputTopic, i32, i64)>,
    /// Rebuild the state at the start of the span from the inputs since this time only
    /// (configs always from the whole config topic). Default: the oldest retained input.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    warm_up_from: Option<DateTime<Utc>>,
    /// Take the pipeline configs from this folder (as `config apply` would publish them)
    /// instead of the config topic: what would these configs have done?
    #[arg(long, value_name = "DIR")]
    pipelines: Option<PathBuf>,
    /// Calendars for --pipelines (default: DIR/../calendars).
    #[arg(long, value_name = "DIR", requires = "pipelines")]
    calendars: Option<PathBuf>,
    /// Archetypes for --pipelines (default: DIR/../archetypes).
    #[arg(long, value_name = "DIR", requires = "pipelines")]
    archetypes: Option<PathBuf>,
    /// Deployment variable for ${name} placeholders in --pipelines (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var, requires = "pipelines")]
    vars: Vec<(String, String)>,
    /// Only these pipelines (repeatable).
    #[arg(long = "pipeline", value_name = "ID")]
    only: Vec<String>,
    /// Write the replayed events, as JSON lines, to this file (`-`: standard output, the
    /// default unless --diff or --output-topic is given).
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Produce the replayed events to this topic (keyed by pipeline id, encoded like
    /// events). Never the events topic itself unless --allow-events-topic.
    #[arg(long, value_name = "TOPIC")]
    output_topic: Option<String>,
    /// Allow --output-topic to be the live events topic.
    #[arg(long, requires = "output_topic")]
    allow_events_topic: bool,
    /// Compare the replayed events with those recorded on the events topic for the same
    /// span, and print what would change, per pipeline.
    #[arg(long)]
    diff: bool,
    /// How far apart in time a recorded and a replayed event may be and still count as the
    /// same decision.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_delta)]
    tolerance: TimeDelta,
    /// With --diff, exit 1 when the replay changed something.
    #[arg(long, requires = "diff")]
    exit_code: bool,
    #[command(flatten)]
    decider: DeciderArgs,
}

/// `sensors:0:1200`.
pub(crate) fn parse_position(text: &str) -> Result<(InputTopic, i32, i64), String> {
    let bad = || {
        format!(
            "{text:?} is not TOPIC:PARTITION:OFFSET, e.g. sensors:0:1200 (TOPIC: config, sensors, jobs or commands)"
        )
    };
    let mut parts = text.splitn(3, ':');
    let (Some(topic), Some(p), Some(o)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let topic = InputTopic::ALL
        .into_iter()
        .find(|t| t.role() == topic.trim())
        .ok_or_else(bad)?;
    let p: i32 = p.trim().parse().map_err(|_| bad())?;
    let o: i64 = o.trim().parse().map_err(|_| bad())?;
    if p < 0 || o < 0 {
        return Err(bad());
    }
    Ok((topic, p, o))
}

/// One input record, decoded, at its place in event time.
pub(crate) struct Recorded {
    pub at: DateTime<Utc>,
    pub kind: InputTopic,
    pub partition: PartitionId,
    pub offset: i64,
    pub pipeline: PipelineId,
    pub input: Input,
}

impl Recorded {
    /// Hands the record to `replay` under the origin the live processor gives it.
    pub fn replay_into(&self, replay: &mut Replay, out: &mut Vec<Event>) -> Result<(), Unapplied> {
        let origin = origin_of(self.kind.role(), self.partition, self.offset, &self.input);
        replay.input(self.at, self.partition, &self.pipeline, &self.input, &origin, out)
    }
}

pub async fn run(kafka: &Connection, topics: &Topics, codec: &Codec, args: ReplayArgs) -> Result<ExitCode> {
    if let Some(topic) = &args.output_topic {
        if *topic == topics.events && !args.allow_events_topic {
            bail!("--output-topic {topic} is the live events topic: replayed events would mix with real ones; pass --allow-events-topic if that is really wanted");
        }
    }
    let overrides = match &args.pipelines {
        Some(dir) => {
            let vars = args.vars.iter().cloned().collect();
            let folders = Folders {
                calendars: args.calendars.as_deref(),
                archetypes: args.archetypes.as_deref(),
            };
            match publishable_configs(dir, folders, &vars, Progress::Stderr)? {
                Some(configs) => Some(configs),
                None => return Ok(ExitCode::FAILURE),
            }
        }
        None => None,
    };
    let consumer = kafka::reader(kafka, "sluice-replay")?;
    let inputs = topics.inputs();
    let partitions = kafka::check_copartitioned(&kafka::partition_counts(consumer.client(), &inputs)?)? as i32;
    let from = match args.from {
        Some(t) => Some(t),
        None => time_of_positions(kafka, topics, partitions, &args.from_offset)?
            .into_iter()
            .min(),
    };
    let to = match args.to {
        Some(t) => Some(t),
        None => time_of_positions(kafka, topics, partitions, &args.to_offset)?
            .into_iter()
            .max(),
    };
    if let (Some(from), Some(to)) = (from, to) {
        if to < from {
            bail!("the span ends ({to}) before it starts ({from})");
        }
    }

    let records = read_inputs(&consumer, topics, codec, partitions, &args, overrides.is_some()).await?;
    let warm_up_from = args.warm_up_from.unwrap_or(DateTime::<Utc>::MIN_UTC);
    let first = records
        .iter()
        .map(|r| r.at)
        .filter(|at| *at >= warm_up_from)
        .min()
        .or(from)
        .unwrap_or_else(|| to.unwrap_or(warm_up_from));
    let start = match args.warm_up_from {
        Some(t) => t.min(first),
        None => first,
    };
    // Decisions are measured as the live processor measures them: an input it rejected as
    // too large is rejected here too.
    let settings = args.decider.settings();
    let mut replay = Replay::new(settings, start, Some(replay_fit(codec, topics, settings.limits)));
    let mut events = Vec::new();
    for (_, id, json) in overrides.iter().flatten() {
        if args.only.is_empty() || args.only.contains(id) {
            let id = PipelineId::from(id);
            let input = Input::ConfigPublished(ConfigRecord::Put {
                pipeline_id: id.clone(),
                config: json.clone(),
            });
            let partition = crate::core::partitioning::partition_for(id.as_bytes(), partitions);
            replay.input(
                start,
                partition,
                &id,
                &input,
                &format!("replay-config/{id}"),
                &mut events,
            )?;
        }
    }
    for r in &records {
        if to.is_some_and(|to| r.at > to) {
            continue;
        }
        r.replay_into(&mut replay, &mut events)?;
    }
    if let Some(to) = to {
        replay.advance(to, &mut events)?;
    }
    let window = Window {
        from: from.unwrap_or(start),
        to: replay.now(),
        // Without --to the span ends with the log, and the live events of its last inputs
        // are stamped a little after them.
        recorded_to: match to {
            Some(to) => to,
            None => replay.now() + args.tolerance,
        },
    };
    events.retain(|e| window.contains(e.timestamp));

    let counts = replay.counts();
    eprintln!(
        "replayed {} inputs and {} timers in event time from {} to {} ({} before {} rebuilt the state); {} events in the span; {} effects and {} records to Sluice's inputs not carried out",
        counts.inputs,
        counts.timers_fired,
        stamp(start),
        stamp(window.to),
        records.iter().filter(|r| r.at < window.from).count(),
        stamp(window.from),
        events.len(),
        counts.effects_skipped,
        counts.records_skipped,
    );
    let unanswered = replay.unanswered_triggers();
    if !unanswered.is_empty() {
        eprintln!(
            "{} trigger(s) have no recorded job report, so their outcome is unknown: {}",
            unanswered.len(),
            unanswered.join(", ")
        );
    }

    match (&args.output, args.diff || args.output_topic.is_some()) {
        (Some(path), _) if path.as_os_str() != "-" => write_lines(
            &mut std::io::BufWriter::new(
                std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
            ),
            &events,
        )
        .with_context(|| format!("writing {}", path.display()))?,
        (Some(_), _) | (None, false) => write_lines(&mut std::io::stdout().lock(), &events)?,
        (None, true) => {}
    }
    if let Some(topic) = &args.output_topic {
        produce(kafka, codec, topic, &events).await?;
        eprintln!("{} events produced to {topic}", events.len());
    }
    if args.diff {
        let recorded = recorded_events(&consumer, topics, codec, window, args.tolerance, &args.only).await?;
        let report = diff(&recorded, &events, window, args.tolerance);
        print!("{report}");
        if args.exit_code && report.changed() {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn write_lines(out: &mut impl Write, events: &[Event]) -> Result<()> {
    for e in events {
        serde_json::to_writer(&mut *out, e)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

async fn produce(kafka: &Connection, codec: &Codec, topic: &str, events: &[Event]) -> Result<()> {
    let producer = kafka::producer(kafka)?;
    kafka::partition_counts(producer.client(), &[topic])?;
    for e in events {
        let value = codec.encode(Family::Events, topic, &serde_json::to_value(e)?)?;
        kafka::send(
            &producer,
            topic,
            Some(e.pipeline_id.as_bytes()),
            Some(&value),
            &[("type", e.kind.name().as_bytes())],
        )
        .await
        .with_context(|| format!("producing to {topic}"))?;
    }
    Ok(())
}

/// The timestamps of the records at `positions`.
pub(crate) fn time_of_positions(
    kafka: &Connection,
    topics: &Topics,
    partitions: i32,
    positions: &[(InputTopic, i32, i64)],
) -> Result<Vec<DateTime<Utc>>> {
    let mut times = Vec::new();
    for (kind, p, offset) in positions {
        let topic = topics.input(*kind);
        if *p >= partitions {
            bail!("{topic} has partitions 0 to {}, not {p}", partitions - 1);
        }
        let consumer = kafka::reader(kafka, "sluice-replay")?;
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, *p, Offset::Offset(*offset))?;
        consumer.assign(&list)?;
        let deadline = std::time::Instant::now() + kafka::METADATA_TIMEOUT;
        let message = loop {
            if let Some(m) = consumer.poll(std::time::Duration::from_millis(200)) {
                break m.with_context(|| format!("reading {topic}/{p}@{offset}"))?;
            }
            if std::time::Instant::now() > deadline {
                bail!("no record at {topic}/{p}@{offset} (past the end of the partition?)");
            }
        };
        times.push(timestamp(&message).with_context(|| format!("{topic}/{p}@{offset} has no timestamp"))?);
    }
    Ok(times)
}

fn timestamp(message: &impl Message) -> Option<DateTime<Utc>> {
    message
        .timestamp()
        .to_millis()
        .and_then(DateTime::<Utc>::from_timestamp_millis)
}

/// Every input record to replay, decoded and in event-time order. Configs are read from the
/// beginning (unless `--pipelines` replaces them), the other inputs from `--warm-up-from`.
async fn read_inputs(
    consumer: &Reader,
    topics: &Topics,
    codec: &Codec,
    partitions: i32,
    args: &ReplayArgs,
    configs_overridden: bool,
) -> Result<Vec<Recorded>> {
    let mut starts = Vec::new();
    for kind in InputTopic::ALL {
        if kind == InputTopic::Config && configs_overridden {
            continue;
        }
        let topic = topics.input(kind);
        let at = match (kind, args.warm_up_from) {
            (InputTopic::Config, _) | (_, None) => vec![Some(0); partitions as usize],
            (_, Some(t)) => offsets_at(consumer, topic, partitions, t)?,
        };
        for (p, offset) in at.into_iter().enumerate() {
            starts.push(Start {
                topic: topic.to_string(),
                partition: PartitionId::new(p as i32),
                offset: offset.unwrap_or(i64::MAX),
            });
        }
    }
    let warm_up_from = args.warm_up_from;
    decoded_in_order(
        consumer,
        topics,
        codec,
        partitions,
        &args.decider.settings().limits,
        &starts,
        |kind, at, pipeline| {
            // The broker's offset for a time can be coarse: what is older is dropped here.
            !(kind != InputTopic::Config && warm_up_from.is_some_and(|w| at < w))
                && (args.only.is_empty() || args.only.iter().any(|id| id == pipeline))
        },
    )
    .await
}

/// Reads the input partitions from `starts` to their ends, decodes the records that `keep`
/// (topic, timestamp, pipeline) accepts, and orders them as a replay takes them: by
/// timestamp, then topic, partition and offset.
pub(crate) async fn decoded_in_order(
    consumer: &Reader,
    topics: &Topics,
    codec: &Codec,
    partitions: i32,
    limits: &Limits,
    starts: &[Start],
    keep: impl Fn(InputTopic, DateTime<Utc>, &str) -> bool,
) -> Result<Vec<Recorded>> {
    let messages = tokio::task::block_in_place(|| kafka::read_span(consumer, starts))?;
    let mut records = Vec::with_capacity(messages.len());
    for message in &messages {
        let Some(kind) = topics.input_kind(message.topic()) else {
            continue;
        };
        let at = timestamp(message).unwrap_or(DateTime::<Utc>::MIN_UTC);
        // A registry that cannot answer stops the replay: its records are not bad input.
        let (pipeline, input) = read_input(codec, kind, message, partitions, limits).await?;
        if !keep(kind, at, &pipeline) {
            continue;
        }
        records.push(Recorded {
            at,
            kind,
            partition: PartitionId::new(message.partition()),
            offset: message.offset(),
            pipeline,
            input,
        });
    }
    let order = |k: InputTopic| k as u8;
    records.sort_by(|a, b| {
        (a.at, order(a.kind), a.partition, a.offset).cmp(&(b.at, order(b.kind), b.partition, b.offset))
    });
    Ok(records)
}

/// The events recorded on the events topic from a little before the window to a little
/// after it (by the tolerance), so that pairs across its edges still meet.
async fn recorded_events(
    consumer: &Reader,
    topics: &Topics,
    codec: &Codec,
    window: Window,
    tolerance: TimeDelta,
    only: &[String],
) -> Result<Vec<Event>> {
    let topic = topics.events.as_str();
    let partitions = kafka::partition_counts(consumer.client(), &[topic])?[0].1 as i32;
    let (from, to) = (window.from - tolerance, window.recorded_to.max(window.to + tolerance));
    // Records are appended after the decision they carry: an event of `from` is stored later.
    let starts = offsets_at(consumer, topic, partitions, from)?
        .into_iter()
        .enumerate()
        .map(|(p, offset)| Start {
            topic: topic.to_string(),
            partition: PartitionId::new(p as i32),
            offset: offset.unwrap_or(i64::MAX),
        })
        .collect::<Vec<_>>();
    let messages = tokio::task::block_in_place(|| kafka::read_span(consumer, &starts))?;
    let mut events = Vec::new();
    let mut undecodable = BTreeSet::new();
    for message in &messages {
        let Some(payload) = message.payload() else { continue };
        let event = match codec.decode(Family::Events, payload).await {
            Ok(json) => serde_json::from_slice::<Event>(&json).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match event {
            Ok(e)
                if e.timestamp >= from
                    && e.timestamp <= to
                    && (only.is_empty() || only.iter().any(|id| *id == e.pipeline_id)) =>
            {
                events.push(e)
            }
            Ok(_) => {}
            Err(e) => {
                undecodable.insert(format!("{topic}/{}@{}: {e}", message.partition(), message.offset()));
            }
        }
    }
    if !undecodable.is_empty() {
        eprintln!(
            "{} recorded event(s) could not be read and are left out of the diff, e.g. {}",
            undecodable.len(),
            undecodable.first().map(String::as_str).unwrap_or_default()
        );
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_parse_or_say_what_is_expected() {
        assert_eq!(parse_position("sensors:0:1200"), Ok((InputTopic::Sensors, 0, 1200)));
        assert_eq!(parse_position("config:3:0"), Ok((InputTopic::Config, 3, 0)));
        assert!(parse_position("events:0:1")
            .unwrap_err()
            .contains("TOPIC:PARTITION:OFFSET"));
        assert!(parse_position("sensors:0").is_err());
        assert!(parse_position("sensors:-1:5").is_err());
    }
}
