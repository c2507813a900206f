//! `sluice rerun|cancel PIPELINE DATE`: ask the processor to run an execution again or to
//! stop it, with a record on the commands topic; the answer is an event.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use super::publish;
use crate::core::execution::ExecutionDate;
use crate::core::records::{CommandKind, CommandRecord};
use crate::runtime::codec::{Codec, Family};
use crate::runtime::kafka::Connection;
use crate::runtime::topics::Topics;

/// `sluice rerun|cancel PIPELINE DATE`.
#[derive(Args)]
pub struct ExecutionCommandArgs {
    /// Pipeline id (also the record key).
    pipeline: String,
    /// Execution date: YYYY-MM-DD, or YYYY-MM-DDTHH for hourly executions.
    date: String,
    /// Why, for the audit trail in the events.
    #[arg(long)]
    reason: Option<String>,
    /// Who asks (default: $USER).
    #[arg(long, env = "USER")]
    requested_by: Option<String>,
    /// Schedule id (cron or stream); by default the pipeline's own.
    #[arg(long)]
    schedule: Option<String>,
    /// rerun only: run a completed date again although none of its inputs changed (the
    /// job's code was fixed); still within maxManualReruns.
    #[arg(long)]
    force: bool,
}

pub async fn run(
    kafka: &Connection,
    topics: &Topics,
    codec: &Codec,
    command: CommandKind,
    args: ExecutionCommandArgs,
) -> Result<ExitCode> {
    let date = args
        .date
        .parse::<ExecutionDate>()
        .ok()
        .with_context(|| format!("{:?} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH)", args.date))?
        .to_string();
    if args.force && command != CommandKind::Rerun {
        anyhow::bail!("--force is for rerun only");
    }
    let record = CommandRecord {
        pipeline_id: args.pipeline.clone(),
        command,
        schedule_id: args.schedule,
        date,
        reason: args.reason,
        requested_by: args.requested_by,
        subscriber: None,
        key: None,
        force: args.force,
    };
    let json = serde_json::to_value(&record)?;
    let code = publish(kafka, codec, Family::Commands, &topics.commands, &args.pipeline, &json).await?;
    eprintln!(
        "{} requested; the answer appears in `sluice events tail` (pipeline {})",
        command.name(),
        args.pipeline
    );
    Ok(code)
}
