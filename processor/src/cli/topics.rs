//! `sluice topics apply`: create missing topics and report drift in existing ones.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

use super::events::Output;
use crate::runtime::kafka::{self, Connection, TopicReport};
use crate::runtime::topics::{check_replication, load_definitions, Replication, Topics};

#[derive(Subcommand)]
pub enum TopicsCommand {
    /// Create missing topics and check existing ones.
    Apply {
        #[arg(long, default_value = "topics")]
        dir: PathBuf,
        /// Copies of each partition for the topics whose definition names none (default:
        /// the broker's `default.replication.factor`). Production: 3.
        #[arg(long, env = "SLUICE_REPLICATION_FACTOR")]
        replication_factor: Option<i16>,
        /// `min.insync.replicas` for the topics whose definition names none (default: the
        /// broker's). Production: 2, with a factor of 3.
        #[arg(long, env = "SLUICE_MIN_INSYNC_REPLICAS")]
        min_insync_replicas: Option<i16>,
        /// `json`: one JSON document on stdout, each topic with its state (created,
        /// matches, drift with the differences, unchecked with the reason).
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// What drift in existing topics does: `fail` (exit 1) or `warn` (report it and
        /// exit 0, so a setup step goes on to publish the pipelines).
        #[arg(long, value_enum, default_value_t = Drift::Fail)]
        drift: Drift,
    },
}

/// `topics apply --drift`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Drift {
    Fail,
    Warn,
}

pub async fn run(kafka: &Connection, topics: &Topics, command: TopicsCommand) -> Result<ExitCode> {
    let TopicsCommand::Apply {
        dir,
        replication_factor,
        min_insync_replicas,
        output,
        drift,
    } = command;
    let fallback = Replication {
        factor: replication_factor,
        min_insync: min_insync_replicas,
    };
    let defs = load_definitions(&dir)?
        .into_iter()
        .map(|d| d.with_replication(fallback))
        .collect::<Vec<_>>();
    for d in &defs {
        check_replication(&d.name, d.replication_factor, d.min_insync_replicas)?;
    }
    let reports = kafka::apply_topics(kafka, topics, &defs).await?;
    let drifted = reports
        .iter()
        .filter(|r| !r.created && r.unchecked.is_none() && !r.drift.is_empty())
        .count();
    match output {
        Output::Table => print_reports(&reports),
        Output::Json => println!("{}", reports_json(&reports, &topics.prefix)),
    }
    if drifted > 0 {
        let level = match drift {
            Drift::Fail => "error",
            Drift::Warn => "warning",
        };
        eprintln!(
            "{level}: {drifted} existing topic(s) differ from {}; Sluice does not change existing topics' configs: alter them with your Kafka tools (kafka-configs --alter --entity-type topics --entity-name NAME --add-config KEY=VALUE), or change the definitions",
            dir.display()
        );
        if drift == Drift::Fail {
            return Ok(ExitCode::FAILURE);
        }
    }
    if output == Output::Table {
        println!("{} topics ready under prefix {:?}", defs.len(), topics.prefix);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_reports(reports: &[TopicReport]) {
    for r in reports {
        match (r.created, &r.unchecked, r.drift.is_empty()) {
            (true, _, _) => println!("{}: created", r.name),
            (false, Some(why), _) => println!("{}: exists; configs not checked ({why})", r.name),
            (false, None, true) => println!("{}: exists, matches", r.name),
            (false, None, false) => {
                for d in &r.drift {
                    println!("{}: drift: {d}", r.name);
                }
            }
        }
    }
}

/// `{"ready": bool, "prefix": .., "topics": [{"topic", "state", "drift", "reason"}]}`.
fn reports_json(reports: &[TopicReport], prefix: &str) -> serde_json::Value {
    let topics: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            let state = match (r.created, &r.unchecked, r.drift.is_empty()) {
                (true, _, _) => "created",
                (false, Some(_), _) => "unchecked",
                (false, None, true) => "matches",
                (false, None, false) => "drift",
            };
            serde_json::json!({"topic": r.name, "state": state, "drift": r.drift, "reason": r.unchecked})
        })
        .collect();
    let ready = topics.iter().all(|t| t["state"] != "drift");
    serde_json::json!({"ready": ready, "prefix": prefix, "topics": topics})
}
