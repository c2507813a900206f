//! Sluice: a pipeline safety controller that runs as a stateful stream processor on Kafka.
//!
//! The crate has layers, each using only the ones below it (`main.rs` → [`cli`] →
//! [`alerts`]/[`runtime`] → [`core`]; the `layers` test below checks the imports):
//!
//! - [`core`]: the pure lifecycle. Every rule lives here, as a function from state, input and
//!   time to a decision; no Kafka, RocksDB, HTTP or wall clock (`core/mod.rs`'s `purity` test).
//! - [`runtime`]: the plumbing that feeds the core records and timers and carries out what it
//!   decides: Kafka clients, RocksDB stores, the changelog, timers, effects (job triggers), the
//!   HTTP API, telemetry.
//! - [`alerts`]: the alert delivery service, built on the runtime: consumers of the events
//!   topic that forward events to Slack, webhooks, PagerDuty and Opsgenie.
//! - [`cli`]: the `sluice` command line, one file per command (`run`, `config`, `replay`,
//!   `reset`, `alerts`, ...), each owning its flags.

pub mod alerts;
pub mod cli;
pub mod core;
pub mod runtime;
pub mod sim;

#[cfg(test)]
mod layers {
    //! Rust lets any module use any other in the crate, so this test keeps the layers apart:
    //! the runtime and the alerts service never use the command line, the core neither.

    use std::path::Path;

    /// Every `.rs` file under `dir` whose text names one of `forbidden`, with the name.
    fn offences(dir: &str, forbidden: &[&str]) -> Vec<String> {
        let mut found = Vec::new();
        let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for word in forbidden.iter().filter(|w| text.contains(**w)) {
                        found.push(format!("{} uses {word}", path.display()));
                    }
                }
            }
        }
        found
    }

    #[test]
    fn the_runtime_never_uses_the_command_line() {
        let found = offences("runtime", &["crate::cli", "super::cli", "super::super::cli"]);
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn the_alerts_service_never_uses_the_command_line() {
        let found = offences("alerts", &["crate::cli", "super::cli"]);
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn the_core_never_uses_the_runtime_or_the_command_line() {
        let found = offences(
            "core",
            &["crate::runtime", "crate::cli", "super::runtime", "super::cli"],
        );
        assert!(found.is_empty(), "{found:#?}");
    }
}

#[cfg(test)]
mod schema_examples {
    //! Every example in `schemas/examples` must decode with the code that reads the topic.

    use std::path::Path;

    use crate::core::{config, events::Event, records};

    fn example(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../schemas/examples")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn every_example_decodes() {
        let key = Some(b"gold-revenue".as_slice());
        records::decode_sensor(key, Some(&example("sensor.json"))).unwrap();
        let failed = records::decode_sensor(key, Some(&example("sensor-evaluator.json"))).unwrap();
        assert_eq!(failed.source.as_deref(), Some(records::EVALUATOR_SOURCE));
        assert!(failed.error.is_some_and(|e| e.contains("503")));
        let added = records::decode_sensor(key, Some(&example("sensor-merge.json"))).unwrap();
        assert_eq!(added.merge, records::Merge::Add);
        records::decode_job(key, Some(&example("job.json"))).unwrap();
        records::decode_command(key, Some(&example("command.json"))).unwrap();
        let config: serde_json::Value = serde_json::from_slice(&example("config.json")).unwrap();
        config::PipelineConfig::from_json(&config).unwrap();
        let event: Event = serde_json::from_slice(&example("event.json")).unwrap();
        assert_eq!(event.kind.category(), event.category);
    }
}
