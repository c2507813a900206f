//! `sluice job put`: publish a job run report, as a job runner does.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Subcommand, ValueEnum};

use super::publish;
use crate::core::records::{FailureCategory, JobRecord, JobStatus};
use crate::runtime::codec::{Codec, Family};
use crate::runtime::kafka::Connection;
use crate::runtime::topics::Topics;

#[derive(Subcommand)]
pub enum JobCommand {
    /// Report a job run's status: sluice job put PIPELINE --run-id R --date D --status S
    Put {
        /// Pipeline id (also the record key).
        pipeline: String,
        /// The run id Sluice gave the attempt (`${RUN_ID}` in job config).
        #[arg(long)]
        run_id: String,
        /// Execution date: YYYY-MM-DD, or YYYY-MM-DDTHH for hourly executions.
        #[arg(long)]
        date: String,
        #[arg(long, value_enum)]
        status: StatusArg,
        /// Schedule id: stream (sensor-triggered) or cron.
        #[arg(long, default_value = "stream")]
        schedule: String,
        /// Failure category, for failed runs: picks the retry budget.
        #[arg(long, value_enum)]
        category: Option<CategoryArg>,
        #[arg(long)]
        message: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum StatusArg {
    Running,
    Succeeded,
    Failed,
    Timeout,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum CategoryArg {
    Permanent,
    Transient,
    Timeout,
}

pub async fn run(kafka: &Connection, topics: &Topics, codec: &Codec, command: JobCommand) -> Result<ExitCode> {
    let JobCommand::Put {
        pipeline,
        run_id,
        date,
        status,
        schedule,
        category,
        message,
    } = command;
    let record = JobRecord {
        pipeline_id: pipeline.as_str().into(),
        schedule_id: schedule,
        date,
        run_id: run_id.into(),
        status: match status {
            StatusArg::Running => JobStatus::Running,
            StatusArg::Succeeded => JobStatus::Succeeded,
            StatusArg::Failed => JobStatus::Failed,
            StatusArg::Timeout => JobStatus::Timeout,
        },
        failure_category: category.map(|c| match c {
            CategoryArg::Permanent => FailureCategory::Permanent,
            CategoryArg::Transient => FailureCategory::Transient,
            CategoryArg::Timeout => FailureCategory::Timeout,
        }),
        message,
        metadata: None,
        timestamp: chrono::Utc::now(),
    };
    let json = serde_json::to_value(&record)?;
    publish(kafka, codec, Family::Jobs, &topics.jobs, &pipeline, &json).await
}
