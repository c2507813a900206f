//! `sluice sensor put`: publish one sensor reading, or many as JSON lines from stdin.

use std::process::ExitCode;

use std::io::BufRead;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use serde_json::Value;

use super::args::parse_var;
use super::publish;
use crate::core::partitioning::PartitionId;
use crate::core::records::{producer_reading, SensorRecord};
use crate::runtime::codec::{Codec, Family};
use crate::runtime::kafka::{self, Connection};
use crate::runtime::topics::Topics;

#[derive(Subcommand)]
pub enum SensorCommand {
    /// Publish one reading: sluice sensor put PIPELINE KEY field=value... Or many:
    /// `sluice sensor put -` reads one sensor record per line of stdin, as JSON in the
    /// topic's form (`{"pipelineId": .., "key": .., "data": {..}, "date": ..}`).
    Put {
        /// Pipeline id (also the record key), or `-` for JSON lines on stdin.
        pipeline: String,
        /// Sensor key, as named by the pipeline's rules.
        key: Option<String>,
        /// Data fields; values that parse as JSON (numbers, true, "quoted") keep their type.
        #[arg(value_name = "FIELD=VALUE", value_parser = parse_var)]
        fields: Vec<(String, String)>,
        /// Execution date (YYYY-MM-DD); default: today in the pipeline's timezone.
        #[arg(long)]
        date: Option<String>,
        /// Execution hour (00-23): makes the execution hourly.
        #[arg(long)]
        hour: Option<String>,
        /// `add`: the numbers are added to the stored reading's (a count from many
        /// writers, as DynamoDB's ADD kept one); default: the reading replaces it.
        #[arg(long, value_name = "replace|add")]
        merge: Option<String>,
    },
}

pub async fn run(kafka: &Connection, topics: &Topics, codec: &Codec, command: SensorCommand) -> Result<ExitCode> {
    let SensorCommand::Put {
        pipeline,
        key,
        fields,
        date,
        hour,
        merge,
    } = command;
    if pipeline == "-" {
        if key.is_some() || !fields.is_empty() || date.is_some() || hour.is_some() || merge.is_some() {
            bail!("`sensor put -` takes every field from its JSON lines: give no KEY, FIELD=VALUE, --date, --hour or --merge");
        }
        return put_lines(kafka, topics, codec, std::io::stdin().lock()).await;
    }
    let key = key.context("KEY is needed (or `-` as PIPELINE, for JSON lines on stdin)")?;
    let record = SensorRecord {
        pipeline_id: pipeline.as_str().into(),
        key,
        data: fields.into_iter().map(|(k, v)| (k, typed_value(&v))).collect(),
        date,
        hour: hour.map(Value::String),
        timestamp: Some(now()),
        source: None,
        error: None,
        merge,
    };
    let json = serde_json::to_value(&record)?;
    publish(kafka, codec, Family::Sensors, &topics.sensors, &pipeline, &json).await
}

fn now() -> Value {
    Value::String(chrono::Utc::now().to_rfc3339())
}

/// Most readings sent before their acknowledgements are awaited.
const IN_FLIGHT: usize = 10_000;

/// Publishes every line of `input` that is a valid sensor record (checked as the processor
/// checks it; without a timestamp it gets the time it was read), keyed by its pipeline.
/// A line that is not is named on stderr and skipped; any makes the exit code 1.
async fn put_lines(kafka: &Connection, topics: &Topics, codec: &Codec, input: impl BufRead) -> Result<ExitCode> {
    codec.prepare(&[(Family::Sensors, &topics.sensors)]).await?;
    let producer = kafka::producer(kafka)?;
    let (mut published, mut refused) = (0usize, 0usize);
    let mut sending = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let record = match sensor_line(&line) {
            Ok(record) => record,
            Err(why) => {
                eprintln!("line {}: {why}", i + 1);
                refused += 1;
                continue;
            }
        };
        let value = codec.encode(Family::Sensors, &topics.sensors, &serde_json::to_value(&record)?)?;
        let producer = &producer;
        let topic = topics.sensors.as_str();
        sending.push(async move {
            kafka::send(producer, topic, Some(record.pipeline_id.as_bytes()), Some(&value), &[]).await
        });
        if sending.len() == IN_FLIGHT {
            published += await_all(std::mem::take(&mut sending)).await?;
        }
    }
    published += await_all(sending).await?;
    println!("published {published} readings to {}", topics.sensors);
    if refused > 0 {
        eprintln!("{refused} line(s) refused; nothing of them was published");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

async fn await_all<F>(sends: Vec<F>) -> Result<usize>
where
    F: std::future::Future<Output = Result<(PartitionId, i64), kafka::ProduceError>>,
{
    let n = sends.len();
    for result in futures::future::join_all(sends).await {
        result?;
    }
    Ok(n)
}

/// One line as a sensor record, or why the processor would reject it.
fn sensor_line(line: &str) -> Result<SensorRecord, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not a sensor record: {e}"))?;
    producer_reading(value, chrono::Utc::now()).map_err(|e| e.to_string())
}

/// `field=value`: JSON scalars keep their type, anything else is a string.
fn typed_value(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::String(_) | Value::Null)) => v,
        _ => Value::String(text.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_checked_as_the_processor_checks_a_reading() {
        let ok = sensor_line(r#"{"pipelineId": "p", "key": "row-count", "data": {"count": 3}, "date": "2026-11-24"}"#)
            .unwrap();
        assert_eq!((ok.pipeline_id.as_str(), ok.key.as_str()), ("p", "row-count"));
        assert!(ok.timestamp.is_some(), "stamped when read");
        let kept = sensor_line(r#"{"pipelineId": "p", "key": "k", "timestamp": "2026-11-24T06:00:00Z"}"#).unwrap();
        assert_eq!(kept.timestamp, Some(Value::String("2026-11-24T06:00:00Z".into())));
        for (line, why) in [
            ("{not json", "not a sensor record"),
            (r#"{"pipelineId": "p"}"#, "missing field `key`"),
            (r#"{"pipelineId": "p", "key": " "}"#, "must not be empty"),
            (r#"{"pipelineId": "p", "key": "k", "date": "24.11.2026"}"#, "YYYY-MM-DD"),
        ] {
            let e = sensor_line(line).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
    }
}
