//! `sluice rerun|cancel PIPELINE DATE`: ask the processor to run an execution again or to
//! stop it, with a record on the commands topic; the answer is an event.

use std::process::ExitCode;

use anyhow::{Context, Result};
use chrono::NaiveDate;
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
    /// rerun only: a backfill, which may start a date older than the execution retention
    /// (whether it ran is forgotten), with run ids of its own.
    #[arg(long)]
    backfill: bool,
}

/// `sluice backfill PIPELINE FROM TO`.
#[derive(Args)]
pub struct BackfillArgs {
    /// Pipeline id (also the record key).
    pipeline: String,
    /// First date, YYYY-MM-DD.
    from: NaiveDate,
    /// Last date, YYYY-MM-DD (inclusive).
    to: NaiveDate,
    /// Why, for the audit trail in the events.
    #[arg(long)]
    reason: Option<String>,
    /// Who asks (default: $USER).
    #[arg(long, env = "USER")]
    requested_by: Option<String>,
    /// Each hour of each day (YYYY-MM-DDTHH): for an hourly pipeline.
    #[arg(long)]
    hourly: bool,
}

/// The most days one backfill asks for: a year, so a typo in a year cannot start decades.
const MAX_BACKFILL_DAYS: i64 = 366;

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
    if (args.force || args.backfill) && command != CommandKind::Rerun {
        anyhow::bail!("--force and --backfill are for rerun only");
    }
    let record = CommandRecord {
        pipeline_id: args.pipeline.as_str().into(),
        command,
        schedule_id: args.schedule,
        date,
        reason: args.reason,
        requested_by: args.requested_by,
        subscriber: None,
        key: None,
        force: args.force,
        backfill: args.backfill,
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

/// Asks for a rerun with `backfill` of each day from `from` to `to`: each is answered by
/// RERUN_ACCEPTED or RERUN_REJECTED, as a rerun is, with the same limits.
pub async fn backfill(kafka: &Connection, topics: &Topics, codec: &Codec, args: BackfillArgs) -> Result<ExitCode> {
    let days = (args.to - args.from).num_days() + 1;
    if days < 1 {
        anyhow::bail!("{} is before {}: give FROM first", args.to, args.from);
    }
    if days > MAX_BACKFILL_DAYS {
        anyhow::bail!(
            "{days} days from {} to {}: at most {MAX_BACKFILL_DAYS} per backfill",
            args.from,
            args.to
        );
    }
    let hours: Vec<Option<u32>> = match args.hourly {
        true => (0..24).map(Some).collect(),
        false => vec![None],
    };
    let dates = (args.from.iter_days().take(days as usize))
        .flat_map(|day| hours.iter().map(move |hour| ExecutionDate { day, hour: *hour }));
    let mut asked = 0;
    for date in dates {
        asked += 1;
        let record = CommandRecord {
            pipeline_id: args.pipeline.as_str().into(),
            command: CommandKind::Rerun,
            schedule_id: None,
            date: date.to_string(),
            reason: args.reason.clone(),
            requested_by: args.requested_by.clone(),
            subscriber: None,
            key: None,
            force: false,
            backfill: true,
        };
        let json = serde_json::to_value(&record)?;
        let code = publish(kafka, codec, Family::Commands, &topics.commands, &args.pipeline, &json).await?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    eprintln!(
        "backfill of {asked} dates ({} to {}) requested; each is answered by RERUN_ACCEPTED or RERUN_REJECTED in `sluice events tail` (pipeline {})",
        args.from, args.to, args.pipeline
    );
    Ok(ExitCode::SUCCESS)
}
