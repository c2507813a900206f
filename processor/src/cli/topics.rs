//! `sluice topics apply`: create missing topics and report drift in existing ones.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

use crate::runtime::kafka::{self, Connection};
use crate::runtime::topics::{load_definitions, Topics};

#[derive(Subcommand)]
pub enum TopicsCommand {
    /// Create missing topics and check existing ones.
    Apply {
        #[arg(long, default_value = "topics")]
        dir: PathBuf,
    },
}

pub async fn run(kafka: &Connection, topics: &Topics, command: TopicsCommand) -> Result<ExitCode> {
    let TopicsCommand::Apply { dir } = command;
    let defs = load_definitions(&dir)?;
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
