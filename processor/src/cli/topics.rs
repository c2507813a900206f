//! `sluice topics apply`: create missing topics and report drift in existing ones.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

use crate::runtime::kafka::{self, Connection};
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
    },
}

pub async fn run(kafka: &Connection, topics: &Topics, command: TopicsCommand) -> Result<ExitCode> {
    let TopicsCommand::Apply {
        dir,
        replication_factor,
        min_insync_replicas,
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
    let mut drifted = 0;
    for r in &reports {
        match (r.created, &r.unchecked, r.drift.is_empty()) {
            (true, _, _) => println!("{}: created", r.name),
            (false, Some(why), _) => println!("{}: exists; configs not checked ({why})", r.name),
            (false, None, true) => println!("{}: exists, matches", r.name),
            (false, None, false) => {
                drifted += 1;
                for d in &r.drift {
                    println!("{}: drift: {d}", r.name);
                }
            }
        }
    }
    if drifted > 0 {
        eprintln!(
            "error: {drifted} existing topic(s) differ from {}; Sluice does not change existing topics' configs: alter them with your Kafka tools (kafka-configs --alter --entity-type topics --entity-name NAME --add-config KEY=VALUE), or change the definitions",
            dir.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    println!("{} topics ready under prefix {:?}", defs.len(), topics.prefix);
    Ok(ExitCode::SUCCESS)
}
