//! Bounds on what one input may hold, so that no record, config or template can make the
//! processor hold unbounded memory. Exceeding one is an INPUT_REJECTED (the record goes to the
//! dead-letter topic) or a CONFIG_REJECTED that names the limit and the flag that raises it;
//! nothing is truncated or dropped silently.

use super::config::{PipelineConfig, Problem};
use super::execution::{ExecutionDate, ExecutionId};
use super::lifecycle::run_id;
use super::template::{render_run, RunVariables};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one sensor reading, job report or command record (`--max-record-bytes`).
    pub record_bytes: usize,
    /// Bytes of one pipeline config record (`--max-config-bytes`).
    pub config_bytes: usize,
    /// Rules of one config, validation and post-run together (`--max-rules`).
    pub rules: usize,
    /// Sensor readings one pipeline keeps, counting each date's reading of a key apart
    /// (`--max-sensors-per-pipeline`).
    pub sensors: usize,
    /// Bytes of a job's config once its templates are expanded (`--max-template-bytes`).
    pub expansion_bytes: usize,
    /// Bytes of one record of a pipeline's stored state (`--max-state-bytes`): its head, or
    /// one execution, sensor reading or timer; each is one changelog record, which must fit
    /// the broker's largest message.
    pub state_bytes: usize,
    /// Bytes of one record Sluice produces (`--max-message-bytes`): an event, a forwarded
    /// copy, a record to its own inputs, a changelog record with its key. An input whose
    /// decision would produce a larger one is rejected before anything of it is applied,
    /// so no output is ever left out of a batch that counts as done.
    pub message_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            record_bytes: 1 << 20,
            config_bytes: 256 << 10,
            rules: 100,
            sensors: 1_000,
            expansion_bytes: 64 << 10,
            // Under Kafka's default largest message (1 MB), with room for the record's key,
            // headers and batch overhead.
            state_bytes: 900 << 10,
            // librdkafka's default message.max.bytes, which its producer enforces itself.
            message_bytes: 1_000_000,
        }
    }
}

/// A record, or what a decision would write, over one of the [`Limits`]: the verdict that
/// rejects the input (INPUT_REJECTED, `too_large`), in words that name the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    #[error("record of {len} bytes is over the limit of {limit} bytes ({flag})")]
    Record {
        len: usize,
        limit: usize,
        flag: &'static str,
    },
    #[error("a record of the pipeline's state would grow to {len} bytes, over the limit of {limit} bytes (--max-state-bytes): each changelog record must fit the broker's largest message; the state is left as it was")]
    State { len: usize, limit: usize },
    #[error("{what} of {len} bytes would be over the limit of {limit} bytes (--max-message-bytes, the broker's largest message); nothing of the record was applied")]
    Message {
        what: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("the pipeline keeps {kept} sensor readings already, the limit (--max-sensors-per-pipeline); readings of a key for another date count apart, and expire with their executions")]
    Sensors { kept: usize },
}

impl Limits {
    /// Why an input record of `len` bytes is refused, if it is (`config`: a pipeline config).
    pub fn check_record(&self, config: bool, len: usize) -> Result<(), OverLimit> {
        let (limit, flag) = match config {
            true => (self.config_bytes, "--max-config-bytes"),
            false => (self.record_bytes, "--max-record-bytes"),
        };
        match len > limit {
            true => Err(OverLimit::Record { len, limit, flag }),
            false => Ok(()),
        }
    }

    /// Why an input is refused whose decision would store a record of `len` bytes of pipeline
    /// state.
    pub fn check_state(&self, len: usize) -> Result<(), OverLimit> {
        match len > self.state_bytes {
            true => Err(OverLimit::State {
                len,
                limit: self.state_bytes,
            }),
            false => Ok(()),
        }
    }

    /// Why an input is refused whose decision would produce a record of `len` bytes (`what`
    /// names it: "an event", "a forwarded copy").
    pub fn check_message(&self, what: &'static str, len: usize) -> Result<(), OverLimit> {
        match len > self.message_bytes {
            true => Err(OverLimit::Message {
                what,
                len,
                limit: self.message_bytes,
            }),
            false => Ok(()),
        }
    }

    /// Why a new sensor reading is refused when the pipeline keeps `kept` already.
    pub fn check_sensors(&self, kept: usize) -> Result<(), OverLimit> {
        match kept >= self.sensors {
            true => Err(OverLimit::Sensors { kept }),
            false => Ok(()),
        }
    }

    /// A valid config's problems with the limits: its rule count, and the size of its job
    /// config expanded with the longest run variables it can get.
    pub fn check_config(&self, config: &PipelineConfig) -> Vec<Problem> {
        let mut problems = Vec::new();
        let rules = config.validation.rules.len() + config.post_run.as_ref().map_or(0, |p| p.rules.len());
        if rules > self.rules {
            problems.push(Problem {
                path: "validation.rules".into(),
                reason: format!(
                    "{rules} rules (validation and postRun together), more than the limit of {} (--max-rules)",
                    self.rules
                ),
            });
        }
        // The longest date is an hourly one.
        let day = chrono::NaiveDate::from_ymd_opt(2000, 1, 1).expect("a valid day");
        let id = ExecutionId::new(config.schedule_id(), ExecutionDate::hourly(day, 0));
        let longest = RunVariables {
            pipeline: &config.id,
            execution: &id,
            run_id: &run_id(&config.id, &id, u32::MAX, Some(i64::MAX)),
        };
        if let Ok(expanded) = render_run(&config.job.config.json(), &longest) {
            let bytes = expanded.to_string().len();
            if bytes > self.expansion_bytes {
                problems.push(Problem {
                    path: "job.config".into(),
                    reason: format!(
                        "expands to {bytes} bytes with the run variables, more than the limit of {} bytes (--max-template-bytes)",
                        self.expansion_bytes
                    ),
                });
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn config(rules: usize, url: &str) -> PipelineConfig {
        let rules: Vec<Value> = (0..rules)
            .map(|i| json!({"key": format!("k{i}"), "check": "exists"}))
            .collect();
        let raw = json!({
            "pipeline": {"id": "limited"},
            "schedule": {"trigger": {"key": "k0", "check": "exists"}},
            "validation": {"trigger": "ALL", "rules": rules},
            "job": {"type": "http", "config": {"url": url}}
        });
        PipelineConfig::from_json(&raw).unwrap().config
    }

    #[test]
    fn records_over_their_limit_are_refused_naming_it() {
        let limits = Limits {
            record_bytes: 10,
            config_bytes: 20,
            ..Limits::default()
        };
        assert!(limits.check_record(false, 10).is_ok());
        let e = limits.check_record(false, 11).unwrap_err().to_string();
        assert!(e.contains("11 bytes") && e.contains("--max-record-bytes"), "{e}");
        assert!(limits.check_record(true, 20).is_ok());
        assert!(limits
            .check_record(true, 21)
            .unwrap_err()
            .to_string()
            .contains("--max-config-bytes"));
    }

    #[test]
    fn a_config_with_too_many_rules_or_too_large_an_expansion_has_problems() {
        let limits = Limits {
            rules: 3,
            expansion_bytes: 200,
            ..Limits::default()
        };
        assert!(limits.check_config(&config(3, "https://x/${DATE}")).is_empty());
        let problems = limits.check_config(&config(4, "https://x/${DATE}"));
        assert_eq!(problems.len(), 1);
        assert!(problems[0].reason.contains("--max-rules"), "{}", problems[0]);
        // Each ${RUN_ID} grows by the run id: under the limit as written, over it expanded.
        let url = format!("https://x/{}", "${RUN_ID}".repeat(8));
        assert!(url.len() < 200);
        let problems = limits.check_config(&config(1, &url));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, "job.config");
        assert!(problems[0].reason.contains("--max-template-bytes"), "{}", problems[0]);
    }

    #[test]
    fn a_pipeline_keeps_at_most_its_limit_of_sensor_readings() {
        let limits = Limits {
            sensors: 2,
            ..Limits::default()
        };
        assert!(limits.check_sensors(1).is_ok());
        assert!(limits
            .check_sensors(2)
            .unwrap_err()
            .to_string()
            .contains("--max-sensors-per-pipeline"));
    }

    #[test]
    fn a_state_over_its_limit_is_refused_naming_it_and_the_default_fits_a_kafka_message() {
        let limits = Limits {
            state_bytes: 100,
            ..Limits::default()
        };
        assert!(limits.check_state(100).is_ok());
        let reason = limits.check_state(101).unwrap_err().to_string();
        assert!(
            reason.contains("--max-state-bytes") && reason.contains("101 bytes"),
            "{reason}"
        );
        // Kafka's default largest message is 1,048,588 bytes.
        assert!(Limits::default().state_bytes < 1_048_588);
    }
}
