//! `sluice sensor put`: publish one sensor reading.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::Value;

use super::args::parse_var;
use super::publish;
use crate::core::records::SensorRecord;
use crate::runtime::codec::{Codec, Family};
use crate::runtime::kafka::Connection;
use crate::runtime::topics::Topics;

#[derive(Subcommand)]
pub enum SensorCommand {
    /// Publish one reading: sluice sensor put PIPELINE KEY field=value...
    Put {
        /// Pipeline id (also the record key).
        pipeline: String,
        /// Sensor key, as named by the pipeline's rules.
        key: String,
        /// Data fields; values that parse as JSON (numbers, true, "quoted") keep their type.
        #[arg(value_name = "FIELD=VALUE", value_parser = parse_var)]
        fields: Vec<(String, String)>,
        /// Execution date (YYYY-MM-DD); default: today in the pipeline's timezone.
        #[arg(long)]
        date: Option<String>,
        /// Execution hour (00-23): makes the execution hourly.
        #[arg(long)]
        hour: Option<String>,
    },
}

pub async fn run(kafka: &Connection, topics: &Topics, codec: &Codec, command: SensorCommand) -> Result<ExitCode> {
    let SensorCommand::Put {
        pipeline,
        key,
        fields,
        date,
        hour,
    } = command;
    let record = SensorRecord {
        pipeline_id: pipeline.clone(),
        key,
        data: fields.into_iter().map(|(k, v)| (k, typed_value(&v))).collect(),
        date,
        hour: hour.map(Value::String),
        timestamp: Some(Value::String(chrono::Utc::now().to_rfc3339())),
    };
    let json = serde_json::to_value(&record)?;
    publish(kafka, codec, Family::Sensors, &topics.sensors, &pipeline, &json).await
}

/// `field=value`: JSON scalars keep their type, anything else is a string.
fn typed_value(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::String(_) | Value::Null)) => v,
        _ => Value::String(text.to_string()),
    }
}
