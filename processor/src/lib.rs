//! Sluice: a pipeline safety controller that runs as a stateful stream processor on Kafka.
//!
//! [`core`] is the pure lifecycle (no Kafka, RocksDB, HTTP or wall clock); [`runtime`] is the
//! thin plumbing that feeds it records and timers and carries out what it decides.

pub mod calendars;
pub mod cli;
pub mod core;
pub mod runtime;
pub mod settings_file;

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
        records::decode_job(key, Some(&example("job.json"))).unwrap();
        records::decode_command(key, Some(&example("command.json"))).unwrap();
        let config: serde_json::Value = serde_json::from_slice(&example("config.json")).unwrap();
        config::PipelineConfig::from_json(&config).unwrap();
        let event: Event = serde_json::from_slice(&example("event.json")).unwrap();
        assert_eq!(event.kind.category(), event.category);
    }
}
