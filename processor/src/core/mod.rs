//! The pure core: every rule of the pipeline lifecycle, and nothing else.
//!
//! Nothing in this module performs I/O or reads the wall clock: time is an argument, inputs
//! are decoded records and fired timers, outputs are values ([`lifecycle::Decision`]) that the
//! runtime carries out. The `purity` test below checks the imports.

pub mod admission;
pub mod apply;
pub mod batch;
pub mod changelog;
pub mod clock_watch;
pub mod config;
pub mod diff;
pub mod duration;
pub mod events;
pub mod execution;
pub mod forwarding;
pub mod graph;
pub mod handover;
pub mod hints;
pub mod history;
pub mod ids;
pub mod lifecycle;
pub mod limits;
pub mod output;
pub mod ownership;
pub mod partitioning;
pub mod records;
pub mod replay;
pub mod rules;
pub mod schedule;
pub mod shared;
pub mod state;
pub mod status;
pub mod task;
pub mod template;
pub mod timers;
pub mod wildcard;

pub use lifecycle::{decide, Decision, Input, PipelineState};

#[cfg(test)]
mod purity {
    //! The compiler cannot stop the core from importing I/O crates, so this test does.

    use std::path::Path;

    const FORBIDDEN: [&str; 10] = [
        "tokio::",
        "rdkafka::",
        "rocksdb::",
        "reqwest::",
        "std::fs",
        "std::net",
        "std::process",
        "SystemTime",
        "Utc::now",
        "Local::now",
    ];

    fn check(dir: &Path, offences: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                check(&path, offences);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Tests may read fixtures from disk; the shipped code may not.
            let shipped = text.split("#[cfg(test)]").next().unwrap_or_default();
            let is_test_file = path.file_name().is_some_and(|n| n == "tests.rs")
                || path
                    .strip_prefix(core_dir())
                    .is_ok_and(|p| p.components().any(|c| c.as_os_str() == "tests"));
            for word in FORBIDDEN {
                if !is_test_file && shipped.contains(word) {
                    offences.push(format!("{} uses {word}", path.display()));
                }
            }
        }
    }

    fn core_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core")
    }

    #[test]
    fn core_is_pure() {
        let mut offences = Vec::new();
        check(&core_dir(), &mut offences);
        assert!(offences.is_empty(), "{offences:#?}");
    }
}
