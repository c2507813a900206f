//! `sluice alerts slack|webhook|pagerduty|route`: the command line of the alert delivery
//! service ([`crate::alerts`]). Its flags, and a `run` that makes the service's
//! [`Settings`] and [`Sink`] from them and hands over; what is sent, and how, is the
//! service's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use super::args::parse_std_duration;
use crate::alerts::routes::Routes;
use crate::alerts::{self, parse_ui_url, Settings, Sink, Start, PAGERDUTY_URL, SLACK_API};
use crate::core::events::EventType;
use crate::runtime::codec::Codec;
use crate::runtime::kafka::Connection;
use crate::runtime::topics::Topics;

#[derive(Subcommand)]
pub enum AlertsCommand {
    /// Post events to a Slack channel, one thread per pipeline execution.
    Slack(SlackArgs),
    /// POST each event's JSON to a URL.
    Webhook(WebhookArgs),
    /// Open and resolve PagerDuty incidents (Events API v2), one per pipeline execution.
    Pagerduty(PagerDutyArgs),
    /// Send each event to the targets a routes file names for its pipeline's owner, its id
    /// and its type (Slack, Slack incoming webhooks, webhooks, PagerDuty, Opsgenie).
    Route(RouteArgs),
}

impl AlertsCommand {
    /// Whether the command needs no broker (`route --check`).
    pub fn offline(&self) -> bool {
        matches!(self, AlertsCommand::Route(args) if args.check)
    }
}

#[derive(Args)]
pub struct RouteArgs {
    /// The routes file (YAML): `targets`, `routes` and `unmatched` (see the README, Alerts).
    #[arg(long, env = "SLUICE_ALERT_ROUTES", value_name = "FILE")]
    routes: PathBuf,
    /// Check the routes file (targets, routes, types) and print what it sends where, then
    /// exit: reads no secret and no topic (for a repository's CI).
    #[arg(long)]
    check: bool,
    /// The operator page's base URL: each alert links to its pipeline's page.
    #[arg(long, env = "SLUICE_UI_URL", value_name = "URL", value_parser = parse_ui_url)]
    ui_url: Option<String>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args)]
pub struct PagerDutyArgs {
    /// A file holding the integration's routing key (else PAGERDUTY_ROUTING_KEY).
    #[arg(long, value_name = "FILE")]
    routing_key_file: Option<PathBuf>,
    /// The Events API's enqueue URL (EU accounts: https://events.eu.pagerduty.com/v2/enqueue).
    #[arg(long, env = "SLUICE_PAGERDUTY_URL", default_value = PAGERDUTY_URL)]
    url: String,
    /// The operator page's base URL: each incident links to its pipeline's page.
    #[arg(long, env = "SLUICE_UI_URL", value_name = "URL", value_parser = parse_ui_url)]
    ui_url: Option<String>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args)]
pub struct CommonArgs {
    /// Only these event types (repeatable or comma-separated). Default: the earlier design's
    /// alerted types (SLA warnings, breaches and SLA_MET, failures and exhaustion, missed
    /// schedules and trigger deadlines, post-run, reruns, late data, recovered triggers,
    /// exclusions, JOB_COMPLETED, every DRY_RUN_*) plus JOB_TIMEOUT, STALE_RUN and
    /// CONFIG_REJECTED.
    #[arg(long = "type", value_delimiter = ',')]
    types: Vec<String>,
    /// Consumer group: instances sharing it share the work; each group gets every event.
    #[arg(long, env = "SLUICE_ALERTS_GROUP")]
    group: Option<String>,
    /// Where a new group starts: only events to come, or every retained one.
    #[arg(long, value_enum, default_value_t = From::End)]
    from: From,
    /// Where thread ids and breach marks are kept (RocksDB).
    #[arg(long, env = "SLUICE_ALERTS_STATE_DIR", default_value = ".sluice/alerts")]
    state_dir: PathBuf,
    /// How long an event the target keeps failing (5xx, unreachable) is retried before it
    /// is dead-lettered with the last reason, so later events are not held up for ever.
    #[arg(long, default_value = "1h", value_parser = parse_std_duration)]
    give_up_after: Duration,
    /// Serve /healthz, /readyz (every target running) and /metrics (delivered, failed,
    /// dead-lettered, lag per target) on this address.
    #[arg(long, env = "SLUICE_ALERTS_HTTP", value_name = "ADDR")]
    http: Option<SocketAddr>,
}

/// `--from`'s values: the service's [`Start`].
#[derive(Clone, Copy, clap::ValueEnum)]
enum From {
    Beginning,
    End,
}

#[derive(Args)]
pub struct SlackArgs {
    /// Channel id or name to post to.
    #[arg(long, env = "SLUICE_SLACK_CHANNEL")]
    channel: String,
    /// A file holding the bot token (else SLACK_BOT_TOKEN). Needs chat:write.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Slack's Web API base URL (a proxy's, or a test server's).
    #[arg(
        long,
        env = "SLUICE_SLACK_API",
        default_value = SLACK_API,
        hide_default_value = false
    )]
    api: String,
    /// The operator page's base URL: each message links to its pipeline's page.
    #[arg(long, env = "SLUICE_UI_URL", value_name = "URL", value_parser = parse_ui_url)]
    ui_url: Option<String>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args)]
pub struct WebhookArgs {
    /// Where to POST each event (its JSON form).
    #[arg(long, env = "SLUICE_WEBHOOK_URL")]
    url: String,
    /// Extra request headers, NAME=VALUE (repeatable); a value of @FILE is read from FILE.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    #[command(flatten)]
    common: CommonArgs,
}

pub async fn run(kafka: &Connection, topics: &Topics, codec: &Codec, command: AlertsCommand) -> Result<ExitCode> {
    // The sink first: a secret or header that cannot be read is told before a bad --type.
    let (sink, common) = match command {
        AlertsCommand::Route(args) => return route(kafka, topics, codec, args).await,
        AlertsCommand::Slack(args) => (
            Sink::slack(&args.api, args.channel, args.token_file.as_deref(), args.ui_url)?,
            args.common,
        ),
        AlertsCommand::Webhook(args) => (Sink::webhook(args.url, &args.headers)?, args.common),
        AlertsCommand::Pagerduty(args) => (
            Sink::pagerduty(args.url, args.routing_key_file.as_deref(), args.ui_url)?,
            args.common,
        ),
    };
    let types = if common.types.is_empty() {
        None
    } else {
        let parse = |t: &String| EventType::parse(t).with_context(|| format!("unknown event type {t:?} in --type"));
        Some(common.types.iter().map(parse).collect::<Result<Vec<_>>>()?)
    };
    alerts::forward(kafka, topics, codec, sink, types, settings(common)).await?;
    Ok(ExitCode::SUCCESS)
}

fn settings(common: CommonArgs) -> Settings {
    Settings {
        group: common.group,
        state_dir: common.state_dir,
        from: match common.from {
            From::Beginning => Start::Beginning,
            From::End => Start::End,
        },
        give_up_after: common.give_up_after,
        http: common.http,
    }
}

/// `alerts route`: the routes file read and checked here, so `--check` needs nothing else.
async fn route(kafka: &Connection, topics: &Topics, codec: &Codec, args: RouteArgs) -> Result<ExitCode> {
    if !args.common.types.is_empty() {
        bail!("--type does not apply to `alerts route`: each route names its `types`");
    }
    let routes = Routes::read(&args.routes)?;
    if args.check {
        println!("{}: {}", args.routes.display(), routes.describe());
        return Ok(ExitCode::SUCCESS);
    }
    alerts::route(kafka, topics, codec, routes, args.ui_url, settings(args.common)).await?;
    Ok(ExitCode::SUCCESS)
}
