//! Flags and value parsers that several commands share.

use std::time::Duration;

use clap::Args;

use crate::core::duration::parse_duration;
use crate::core::lifecycle::Settings as DeciderSettings;
use crate::core::limits::Limits;

/// The decider's settings, shared by `run` and the commands that replay its decisions.
#[derive(Args)]
pub struct DeciderArgs {
    /// How far a sensor's timestamp may run ahead of this processor's clock before the
    /// record is rejected (a clock in the future would make stale data look fresh).
    #[arg(long, env = "SLUICE_MAX_CLOCK_SKEW", default_value = "5m", value_parser = parse_delta)]
    max_clock_skew: chrono::TimeDelta,
    /// How long a finished execution (and the sensors of its date) is kept for reruns, late
    /// data and post-run checks before it is pruned (the old design's TTL).
    #[arg(long, env = "SLUICE_RETENTION", default_value = "7d", value_parser = parse_delta)]
    retention: chrono::TimeDelta,
    /// Largest sensor reading, job report or command record accepted, in bytes; a larger one
    /// is rejected to the dead-letter topic.
    #[arg(long, env = "SLUICE_MAX_RECORD_BYTES", default_value_t = Limits::default().record_bytes)]
    max_record_bytes: usize,
    /// Largest pipeline config record accepted, in bytes.
    #[arg(long, env = "SLUICE_MAX_CONFIG_BYTES", default_value_t = Limits::default().config_bytes)]
    max_config_bytes: usize,
    /// Most rules in one config (validation and postRun together).
    #[arg(long, env = "SLUICE_MAX_RULES", default_value_t = Limits::default().rules)]
    max_rules: usize,
    /// Most sensor readings one pipeline keeps (each date's reading of a key counts).
    #[arg(long, env = "SLUICE_MAX_SENSORS_PER_PIPELINE", default_value_t = Limits::default().sensors)]
    max_sensors_per_pipeline: usize,
    /// Largest job config once its templates are expanded, in bytes.
    #[arg(long, env = "SLUICE_MAX_TEMPLATE_BYTES", default_value_t = Limits::default().expansion_bytes)]
    max_template_bytes: usize,
    /// Largest record of a pipeline's stored state, in bytes: its head, or one execution,
    /// sensor reading or timer (each one changelog record: keep it under the changelog
    /// topic's max.message.bytes); an input that would grow one further is rejected to the
    /// dead-letter topic.
    #[arg(long, env = "SLUICE_MAX_STATE_BYTES", default_value_t = Limits::default().state_bytes)]
    max_state_bytes: usize,
    /// Largest record Sluice produces, in bytes, key and headers included: an event, a
    /// forwarded copy, a changelog record. Keep it at or under the producer's and the
    /// topics' message.max.bytes; an input whose decision would produce a larger record is
    /// rejected to the dead-letter topic.
    #[arg(long, env = "SLUICE_MAX_MESSAGE_BYTES", default_value_t = Limits::default().message_bytes)]
    max_message_bytes: usize,
}

impl DeciderArgs {
    pub fn settings(&self) -> DeciderSettings {
        DeciderSettings {
            max_clock_skew: self.max_clock_skew,
            retention: self.retention,
            limits: Limits {
                record_bytes: self.max_record_bytes,
                config_bytes: self.max_config_bytes,
                rules: self.max_rules,
                sensors: self.max_sensors_per_pipeline,
                expansion_bytes: self.max_template_bytes,
                state_bytes: self.max_state_bytes,
                message_bytes: self.max_message_bytes,
            },
        }
    }
}

pub fn parse_delta(text: &str) -> Result<chrono::TimeDelta, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

pub fn parse_var(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{text:?} is not NAME=VALUE"))
}

pub fn parse_std_duration(text: &str) -> Result<Duration, String> {
    parse_duration(text)
        .map_err(|e| e.to_string())?
        .to_std()
        .map_err(|e| e.to_string())
}
