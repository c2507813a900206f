//! `sluice alerts slack|webhook`: a consumer of the events topic that tells people.
//!
//! Slack gets one Block Kit message per event through `chat.postMessage`, threaded per
//! execution (pipeline, schedule, date): the first message of an execution starts the
//! thread, the rest reply in it. Thread ids and SLA-breach marks live in RocksDB under
//! `--state-dir`, so a restart keeps threading and suppression. A webhook gets the event's
//! JSON. Both retry while the receiver is throttling or failing (honouring `Retry-After`)
//! and commit an event's offset only once it is delivered or deliberately skipped, so a
//! crash re-sends rather than loses.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rocksdb::DB;
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::core::events::{Event, EventType};
use crate::runtime::codec::{Codec, Family};
use crate::runtime::kafka::{self, Connection};
use crate::runtime::processor::shutdown_signal;
use crate::runtime::topics::Topics;

/// What is sent when `--type` is not given: the earlier design's alerted set (interlock
/// `deploy/terraform/eventbridge.tf` lines 82-128, the `alert_events` rule) restricted to the
/// types Sluice has (it has no SFN_TIMEOUT or BASELINE_CAPTURE_FAILED), plus Sluice's own
/// JOB_TIMEOUT, STALE_RUN, CONFIG_REJECTED, the SLA forecast's SLA_AT_RISK and
/// SLA_RECOVERED, the sensor anomalies, and the warnings of `warn` rules.
pub const DEFAULT_TYPES: &[&str] = &[
    "SLA_WARNING",
    "SLA_BREACH",
    "SLA_MET",
    "JOB_FAILED",
    "VALIDATION_EXHAUSTED",
    "RETRY_EXHAUSTED",
    "INFRA_FAILURE",
    "SCHEDULE_MISSED",
    "DATA_DRIFT",
    "JOB_POLL_EXHAUSTED",
    "POST_RUN_DRIFT",
    "POST_RUN_DRIFT_INFLIGHT",
    "POST_RUN_FAILED",
    "POST_RUN_SENSOR_MISSING",
    "RERUN_ACCEPTED",
    "RERUN_REJECTED",
    "JOB_COMPLETED",
    "LATE_DATA_ARRIVAL",
    "TRIGGER_RECOVERED",
    "PIPELINE_EXCLUDED",
    "SENSOR_DEADLINE_EXPIRED",
    "IRREGULAR_SCHEDULE_MISSED",
    "RELATIVE_SLA_WARNING",
    "RELATIVE_SLA_BREACH",
    "DRY_RUN_WOULD_TRIGGER",
    "DRY_RUN_LATE_DATA",
    "DRY_RUN_SLA_PROJECTION",
    "DRY_RUN_DRIFT",
    "DRY_RUN_COMPLETED",
    "DRY_RUN_WOULD_RERUN",
    "DRY_RUN_RERUN_REJECTED",
    "DRY_RUN_WOULD_RETRY",
    "DRY_RUN_RETRY_EXHAUSTED",
    // Sluice's own
    "JOB_TIMEOUT",
    "STALE_RUN",
    "CONFIG_REJECTED",
    "SLA_AT_RISK",
    "SLA_RECOVERED",
    "SENSOR_FLAPPING",
    "UNKNOWN_SENSOR",
    "STALE_SENSOR_WARNING",
    "VALIDATION_WARNED",
    "POST_RUN_WARNED",
    "EVALUATION_SLA_WARNING",
    "EVALUATION_SLA_BREACH",
];

#[derive(Subcommand)]
pub enum AlertsCommand {
    /// Post events to a Slack channel, one thread per pipeline execution.
    Slack(SlackArgs),
    /// POST each event's JSON to a URL.
    Webhook(WebhookArgs),
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
}

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
        default_value = "https://slack.com/api",
        hide_default_value = false
    )]
    api: String,
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

/// The token, never printed: its debug form is redacted.
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

fn slack_token(file: Option<&Path>) -> Result<Secret> {
    let token = match file {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading --token-file {}", path.display()))?
        }
        None => std::env::var("SLACK_BOT_TOKEN")
            .context("no Slack token: set SLACK_BOT_TOKEN or pass --token-file FILE (a bot token with chat:write)")?,
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        bail!("the Slack token is empty");
    }
    Ok(Secret(token))
}

/// Where an event is delivered.
enum Sink {
    Slack {
        api: String,
        channel: String,
        token: Secret,
    },
    Webhook {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// The execution an event belongs to: its Slack thread.
pub fn thread_key(event: &Event) -> String {
    format!(
        "{}/{}/{}",
        event.pipeline_id,
        event.schedule_id.as_deref().unwrap_or("-"),
        event.date.as_deref().unwrap_or("-")
    )
}

/// Whether `event` is sent, given the breach marks so far; SLA warnings after a breach of
/// the same execution say nothing new.
pub fn suppressed(event: &Event, breached: bool) -> bool {
    breached && matches!(event.kind, EventType::SLA_WARNING | EventType::RELATIVE_SLA_WARNING)
}

fn marks_breach(event: &Event) -> bool {
    matches!(event.kind, EventType::SLA_BREACH | EventType::RELATIVE_SLA_BREACH)
}

/// Whether a reply in an execution's thread is also shown in the channel (Slack's
/// `reply_broadcast`): a breach, and a run that ended needing a person (no retries left,
/// validation never passed). Not JOB_FAILED, which is retried or followed by
/// RETRY_EXHAUSTED, nor INFRA_FAILURE, which an outage raises for many pipelines at once.
/// The earlier design kept every reply inside the thread.
pub fn broadcasts(event: &Event) -> bool {
    matches!(
        event.kind,
        EventType::SLA_BREACH
            | EventType::RELATIVE_SLA_BREACH
            | EventType::EVALUATION_SLA_BREACH
            | EventType::RETRY_EXHAUSTED
            | EventType::VALIDATION_EXHAUSTED
    )
}

/// What to check about an SLA_AT_RISK: what the date waits for (and which upstream is late)
/// before its job runs, the job itself once it does.
fn at_risk_hint(event: &Event, status: &str) -> String {
    let list = |name: &str| {
        (event.detail.get(name).and_then(Value::as_array))
            .map(|items| items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
            .filter(|items| !items.is_empty())
    };
    let usual = event
        .detail
        .get("usualTriggerAt")
        .and_then(Value::as_str)
        .unwrap_or("its usual time");
    match event.detail.get("basis").and_then(Value::as_str) {
        Some("running") => {
            "the job is slower than 9 in 10 past runs that got this far: check it in its orchestrator".into()
        }
        _ => match (list("upstreams"), list("waitingFor")) {
            (Some(upstreams), _) => format!(
                "waiting for upstream {upstreams} (it usually starts by {usual}): check why it is late ({status})"
            ),
            (None, Some(keys)) => format!(
                "waiting for {keys} (it usually starts by {usual}): check the producer of that sensor data ({status})"
            ),
            (None, None) => format!("not started yet (it usually starts by {usual}): check its trigger ({status})"),
        },
    }
}

/// `word` as one shell word: as it is when it needs no quoting, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '+'));
    match plain {
        true => word.to_string(),
        false => format!("'{}'", word.replace('\'', r"'\''")),
    }
}

/// `PIPELINE DATE` of `event`'s execution for `sluice rerun|cancel` (the pipeline's own
/// schedule is the one its events name), `DATE` when the event has none.
fn execution_args(event: &Event) -> String {
    let date = event.date.as_deref().map(shell_word);
    format!(
        "{} {}",
        shell_word(&event.pipeline_id),
        date.as_deref().unwrap_or("DATE")
    )
}

/// What the on-call person should do next about `event`, if anything; Slack shows it as
/// `→ hint`. The earlier design put an `actionHint` into a few events' detail (interlock
/// `internal/lambda/sla/alert.go`, `internal/lambda/watchdog/*.go`) and its dispatcher
/// appended it (`internal/lambda/alert/format.go`); here it is derived from the event and
/// names Sluice's commands. Reruns are suggested where `sluice rerun` accepts them: after a
/// failure, exhaustion or stale run, a closed trigger window, or once the run's input
/// sensors changed.
pub fn action_hint(event: &Event) -> Option<String> {
    use EventType::*;
    let text = |name: &str| event.detail.get(name).and_then(Value::as_str);
    let flag = |name: &str| event.detail.get(name).and_then(Value::as_bool);
    let status = format!("`sluice status {}`", shell_word(&event.pipeline_id));
    let execution = execution_args(event);
    let rerun = format!("`sluice rerun {execution}`");
    let date = event.date.as_deref().unwrap_or("the date");
    let hint = match event.kind {
        SLA_WARNING | SLA_BREACH => {
            let breach = event.kind == SLA_BREACH;
            match text("phase") {
                Some("notStarted") if breach => {
                    format!("not started: investigate the trigger — did its sensor arrive? ({status})")
                }
                Some("notStarted") => format!("not started: check the sensor data its trigger waits for ({status})"),
                Some("awaitingRules") => {
                    format!("waiting for its validation rules: check the sensor data they read ({status})")
                }
                Some("awaitingTrigger" | "awaitingJob") if breach => {
                    "the job is still running and will finish late: check it is not stuck in its orchestrator".into()
                }
                Some("awaitingTrigger" | "awaitingJob") => "the job is running and may still finish in time".into(),
                Some("failed" | "validationExhausted" | "stale") => {
                    format!("the run ended without success (see this thread): fix the cause, then rerun: {rerun}")
                }
                Some("skipped") => format!("nothing ran for this date (see this thread); to run it now: {rerun}"),
                _ => format!("see where the run is: {status}"),
            }
        }
        SLA_AT_RISK => at_risk_hint(event, &status),
        VALIDATION_WARNED => "a rule of severity warn failed; the run goes on: check that data before its output is used".into(),
        POST_RUN_WARNED => format!(
            "the run's output passed its post-run checks but a rule of severity warn failed: check the data; if it needs fixing, rerun: {rerun}"
        ),
        SENSOR_FLAPPING => {
            let sensor = text("key").unwrap_or("the sensor");
            let held = match event.detail.get("holdForSeconds").and_then(Value::as_i64) {
                Some(s) => format!("; the trigger waits until it keeps still for {s} s"),
                None => String::new(),
            };
            format!(
                "{sensor} keeps changing between passing and failing: check its producer for two writers or a value hovering at the rule's threshold{held}"
            )
        }
        UNKNOWN_SENSOR => {
            let sensor = text("key").unwrap_or("this key");
            match text("didYouMean") {
                Some(meant) => format!(
                    "nothing reads {sensor}: if it is a misspelling of {meant}, fix the producer's key (or the rule's)"
                ),
                None => format!(
                    "nothing reads {sensor}: a producer publishing for the wrong pipeline, or a rule that should read it; `anomalies.unknownSensors: false` silences this"
                ),
            }
        }
        STALE_SENSOR_WARNING => {
            let sensor = text("key").unwrap_or("a sensor");
            let usual = event.detail.get("usualIntervalSeconds").and_then(Value::as_f64).unwrap_or(0.0);
            let closes = text("windowClosesAt").unwrap_or("its end");
            format!(
                "{sensor} usually arrives every {usual} s and has gone quiet: check its producer before the evaluation window closes at {closes} ({status})"
            )
        }
        EVALUATION_SLA_WARNING | EVALUATION_SLA_BREACH => {
            format!("not ready yet: check the sensor data its validation rules wait for ({status})")
        }
        RELATIVE_SLA_WARNING => {
            format!("close to maxDuration since its first sensor: check the run is progressing ({status})")
        }
        RELATIVE_SLA_BREACH => format!(
            "past maxDuration since its first sensor arrived: find what holds it, failing rules or a slow job ({status})"
        ),
        SCHEDULE_MISSED if flag("started") == Some(true) => {
            "started late, now: check why Sluice was not running when it was due".into()
        }
        SCHEDULE_MISSED => format!(
            "nothing started {date}: check the upstream that publishes the trigger sensor; the run starts when it arrives"
        ),
        IRREGULAR_SCHEDULE_MISSED => format!(
            "inclusion date {date} has no trigger: check the upstream that publishes the trigger sensor; the run starts when it arrives"
        ),
        SENSOR_DEADLINE_EXPIRED => format!(
            "trigger window closed: no sensor starts {date} any more; once its data is ready, rerun: {rerun}"
        ),
        VALIDATION_EXHAUSTED => format!(
            "the validation rules did not pass in the window: check the failing sensors ({status}), then rerun: {rerun}"
        ),
        JOB_FAILED if flag("willRetry") == Some(true) => {
            "Sluice retries it: check the job's logs if the next attempt fails too".into()
        }
        JOB_TIMEOUT if flag("willRetry") == Some(true) => {
            "Sluice retries it: check why the job is slow or stuck if the next attempt times out too".into()
        }
        JOB_FAILED | JOB_TIMEOUT | RETRY_EXHAUSTED => {
            format!("check the job's logs and fix the cause, then rerun: {rerun}")
        }
        JOB_POLL_EXHAUSTED => "no outcome within the poll window: check the job in its orchestrator".into(),
        INFRA_FAILURE => format!(
            "the job's target could not be reached or refused the call: check it and Sluice's access to it, then rerun: {rerun}"
        ),
        STALE_RUN => format!(
            "no progress, and Sluice no longer watches it: check whether the job still runs in its orchestrator before a rerun: {rerun}"
        ),
        RERUN_REJECTED => {
            let rejection = text("rejection").unwrap_or("see the message");
            let next = if rejection.contains("still in progress") {
                format!(": wait for it to end, or `sluice cancel {execution}` it first")
            } else if rejection.contains("maxManualReruns") {
                ": raise job.maxManualReruns in the config to allow more".into()
            } else if rejection.contains("no sensor data changed") {
                ": publish the corrected sensor data first; the same inputs give the same result".into()
            } else {
                String::new()
            };
            format!("nothing was started — {rejection}{next}")
        }
        POST_RUN_SENSOR_MISSING => {
            let sensors = event
                .detail
                .get("sensors")
                .and_then(Value::as_array)
                .map(|keys| keys.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .filter(|keys| !keys.is_empty())
                .unwrap_or_else(|| "the post-run sensors".into());
            format!("post-run data has not arrived in time, so the run is unchecked: check the upstream that publishes {sensors}")
        }
        POST_RUN_FAILED => format!(
            "the run's output failed its post-run rules: check the data; once its inputs are corrected, rerun: {rerun}"
        ),
        POST_RUN_DRIFT if flag("rerun") == Some(true) => {
            "Sluice reruns it on the changed data: its outcome follows in this thread".into()
        }
        POST_RUN_DRIFT => format!(
            "maxDriftReruns is spent: check the upstream data; {rerun} reruns it if its input sensors changed"
        ),
        POST_RUN_DRIFT_INFLIGHT => "the data moved while the run is in progress: check its result when it ends".into(),
        LATE_DATA_ARRIVAL => format!("to use the new data, rerun: {rerun}"),
        TRIGGER_RECOVERED => {
            "nothing to do: its start was missed, and Sluice started it from the trigger that had arrived".into()
        }
        CONFIG_REJECTED => {
            let kept = match flag("previousConfigKept") {
                Some(true) => "; the previous config stays in force",
                Some(false) => "; the pipeline has no config in force",
                None => "",
            };
            format!("fix the YAML (`sluice config validate DIR`) and publish it again (`sluice config apply DIR`){kept}")
        }
        _ => return None,
    };
    Some(hint)
}

/// `text` made literal for Slack's mrkdwn (`&`, `<` and `>` are its control characters).
fn mrkdwn_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The Block Kit message for `event` (`text` is the notification and fallback); `thread` is
/// the execution's thread, if its first message is already posted.
pub fn slack_message(channel: &str, event: &Event, thread: Option<&str>) -> Value {
    let icon = match event.kind {
        EventType::SLA_BREACH | EventType::RELATIVE_SLA_BREACH | EventType::EVALUATION_SLA_BREACH => ":rotating_light:",
        EventType::SLA_WARNING | EventType::RELATIVE_SLA_WARNING | EventType::EVALUATION_SLA_WARNING => ":warning:",
        EventType::SLA_AT_RISK | EventType::STALE_SENSOR_WARNING => ":hourglass_flowing_sand:",
        EventType::SENSOR_FLAPPING
        | EventType::UNKNOWN_SENSOR
        | EventType::VALIDATION_WARNED
        | EventType::POST_RUN_WARNED => ":warning:",
        EventType::JOB_COMPLETED | EventType::SLA_MET | EventType::SLA_RECOVERED | EventType::POST_RUN_PASSED => {
            ":white_check_mark:"
        }
        _ => ":x:",
    };
    let execution = match (&event.schedule_id, &event.date) {
        (Some(s), Some(d)) => format!(" · {s} {d}"),
        (None, Some(d)) => format!(" · {d}"),
        _ => String::new(),
    };
    let hint = action_hint(event).map(|h| format!("→ {}", mrkdwn_escape(&h)));
    let mut text = format!(
        "{icon} {} · {}{execution}: {}",
        event.kind.name(),
        event.pipeline_id,
        event.message
    );
    if let Some(hint) = &hint {
        text.push('\n');
        text.push_str(hint);
    }
    let mut context = vec![format!("event `{}`", event.event_id)];
    if let Some(run) = &event.run_id {
        context.push(format!("run `{run}`"));
    }
    if let Some(attempt) = event.attempt {
        context.push(format!("attempt {attempt}"));
    }
    context.push(format!(
        "<!date^{}^{{date_short_pretty}} {{time_secs}}|{}>",
        event.timestamp.timestamp(),
        event.timestamp.to_rfc3339()
    ));
    let mut blocks = vec![json!({"type": "section", "text": {"type": "mrkdwn",
        "text": format!("{icon} *{}* · *{}*{execution}\n{}", event.kind.name(), event.pipeline_id, event.message)}})];
    if let Some(hint) = &hint {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": hint}}));
    }
    blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": context.join(" · ")}]}));
    let mut message = json!({
        "channel": channel,
        "text": text,
        "blocks": blocks,
        "unfurl_links": false,
    });
    if let Some(ts) = thread {
        message["thread_ts"] = json!(ts);
        if broadcasts(event) {
            message["reply_broadcast"] = json!(true);
        }
    }
    message
}

pub async fn run(kafka: &Connection, topics: &Topics, codec: &Codec, command: AlertsCommand) -> Result<ExitCode> {
    let (sink, common, default_group) = match command {
        AlertsCommand::Slack(args) => (
            Sink::Slack {
                api: args.api.trim_end_matches('/').to_string(),
                channel: args.channel,
                token: slack_token(args.token_file.as_deref())?,
            },
            args.common,
            "sluice-alerts-slack",
        ),
        AlertsCommand::Webhook(args) => {
            let headers = args.headers.iter().map(|h| header(h)).collect::<Result<Vec<_>>>()?;
            (
                Sink::Webhook { url: args.url, headers },
                args.common,
                "sluice-alerts-webhook",
            )
        }
    };
    let types = if common.types.is_empty() {
        DEFAULT_TYPES
            .iter()
            .map(|t| EventType::parse(t).expect("a known type"))
            .collect()
    } else {
        common
            .types
            .iter()
            .map(|t| EventType::parse(t).with_context(|| format!("unknown event type {t:?} in --type")))
            .collect::<Result<Vec<_>>>()?
    };
    std::fs::create_dir_all(&common.state_dir)
        .with_context(|| format!("creating --state-dir {}", common.state_dir.display()))?;
    let state = DB::open_default(&common.state_dir)
        .with_context(|| format!("opening the alert state in {}", common.state_dir.display()))?;
    let group = common.group.unwrap_or_else(|| default_group.to_string());
    let consumer: StreamConsumer = kafka
        .config(kafka::Role::Consumer)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set(
            "auto.offset.reset",
            match common.from {
                From::Beginning => "earliest",
                From::End => "latest",
            },
        )
        .create()
        .context("creating the events consumer")?;
    kafka::partition_counts(consumer.client(), &[topics.events.as_str()])?;
    consumer
        .subscribe(&[topics.events.as_str()])
        .context("subscribing to the events topic")?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .context("building the HTTP client")?;
    info!(topic = %topics.events, %group, "sending alerts");
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        let message = tokio::select! {
            _ = &mut stop => {
                // Leave with the offsets of what was delivered committed, and leave the group
                // at once (on drop) so a restart takes the partitions back without a wait.
                let _ = consumer.commit_consumer_state(CommitMode::Sync);
                return Ok(ExitCode::SUCCESS);
            }
            m = consumer.recv() => m.context("reading events")?,
        };
        let at = format!("{}/{}@{}", message.topic(), message.partition(), message.offset());
        let event = match message.payload() {
            None => None,
            Some(payload) => {
                let mut backoff = Duration::from_millis(200);
                loop {
                    match codec.decode(Family::Events, payload).await {
                        Ok(json) => break serde_json::from_slice::<Event>(&json).map_err(|e| e.to_string()).ok(),
                        // Not the event's fault (the schema registry is down or refuses the
                        // credentials): wait for it rather than lose an alert.
                        Err(e) if !e.blames_record() => {
                            warn!(%at, error = %e, "the schema registry cannot answer for an event; retrying");
                            tokio::select! {
                                // Uncommitted: the event is read again on restart.
                                _ = &mut stop => return Ok(ExitCode::SUCCESS),
                                _ = tokio::time::sleep(backoff) => {}
                            }
                            backoff = (backoff * 2).min(Duration::from_secs(10));
                        }
                        Err(e) => {
                            warn!(%at, error = %e, "skipping an undecodable event");
                            break None;
                        }
                    }
                }
            }
        };
        if let Some(event) = event.filter(|e| types.contains(&e.kind)) {
            deliver(&client, &sink, &state, &event, &mut stop).await?;
        }
        consumer
            .commit_message(&message, CommitMode::Async)
            .with_context(|| format!("committing {at}"))?;
    }
}

fn header(spec: &str) -> Result<(String, String)> {
    let (name, value) = spec
        .split_once('=')
        .with_context(|| format!("--header {spec:?} is not NAME=VALUE"))?;
    let value = match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the value of header {name} from {path}"))?
            .trim()
            .to_string(),
        None => value.to_string(),
    };
    Ok((name.trim().to_string(), value))
}

/// Sends one event, retrying until it is delivered, deliberately skipped, or the sink says
/// it can never work (an error that names the fix).
async fn deliver(
    client: &reqwest::Client,
    sink: &Sink,
    state: &DB,
    event: &Event,
    stop: &mut std::pin::Pin<&mut impl std::future::Future>,
) -> Result<()> {
    let thread_key = thread_key(event);
    let breach_key = format!("b/{thread_key}");
    if suppressed(event, state.get(&breach_key)?.is_some()) {
        info!(pipeline = %event.pipeline_id, event = event.kind.name(), "suppressed: the SLA is already breached");
        return Ok(());
    }
    let mut backoff = Duration::from_secs(1);
    loop {
        let attempt = match sink {
            Sink::Slack { api, channel, token } => {
                let thread = state
                    .get(format!("t/{thread_key}"))?
                    .map(|t| String::from_utf8_lossy(&t).into_owned());
                let body = slack_message(channel, event, thread.as_deref());
                let sent = client
                    .post(format!("{api}/chat.postMessage"))
                    .bearer_auth(&token.0)
                    .header(reqwest::header::CONTENT_TYPE, "application/json; charset=utf-8")
                    .body(body.to_string())
                    .send()
                    .await;
                slack_outcome(sent).await.and_then(|ts| match (thread, ts) {
                    // The execution's first message: its ts is the thread from now on.
                    (None, Some(ts)) => state
                        .put(format!("t/{thread_key}"), ts.as_bytes())
                        .map_err(|e| Outcome::Fatal(format!("keeping the thread id: {e}"))),
                    _ => Ok(()),
                })
            }
            Sink::Webhook { url, headers } => {
                let mut request = client
                    .post(url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(serde_json::to_vec(event).expect("events serialise"));
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                webhook_outcome(request.send().await)
            }
        };
        match attempt {
            Ok(()) => break,
            Err(Outcome::Fatal(e)) => bail!("{e}"),
            Err(Outcome::Skip(reason)) => {
                warn!(pipeline = %event.pipeline_id, event = event.kind.name(), %reason, "not delivered; skipped");
                break;
            }
            Err(Outcome::Retry { reason, after }) => {
                let wait = after.unwrap_or(backoff);
                warn!(pipeline = %event.pipeline_id, event = event.kind.name(), %reason, wait_ms = wait.as_millis() as u64, "delivery failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.as_mut() => bail!("stopped while retrying a delivery (it is sent again on the next start)"),
                }
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
    if marks_breach(event) {
        state.put(&breach_key, b"1")?;
    }
    // Keep `stop` usable by the caller after a select on it here.
    let _ = stop.as_mut().now_or_never();
    Ok(())
}

enum Outcome {
    Retry { reason: String, after: Option<Duration> },
    Skip(String),
    Fatal(String),
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Slack's answer: the message's `ts` on success.
async fn slack_outcome(sent: reqwest::Result<reqwest::Response>) -> Result<Option<String>, Outcome> {
    let response = sent.map_err(|e| Outcome::Retry {
        reason: format!("Slack unreachable: {e}"),
        after: None,
    })?;
    let status = response.status();
    if status.as_u16() == 429 {
        let after = retry_after(&response);
        return Err(Outcome::Retry {
            reason: "rate limited by Slack".into(),
            after: after.or(Some(Duration::from_secs(1))),
        });
    }
    if status.is_server_error() {
        return Err(Outcome::Retry {
            reason: format!("Slack answered HTTP {status}"),
            after: retry_after(&response),
        });
    }
    let unreadable = |e: String| Outcome::Retry {
        reason: format!("unreadable answer from Slack: {e}"),
        after: None,
    };
    let bytes = response.bytes().await.map_err(|e| unreadable(e.to_string()))?;
    let answer: Value = serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
    if answer["ok"] == true {
        return Ok(answer["ts"].as_str().map(str::to_string));
    }
    let error = answer["error"].as_str().unwrap_or("unknown_error").to_string();
    Err(match error.as_str() {
        "invalid_auth" | "not_authed" | "account_inactive" | "token_revoked" | "token_expired" | "missing_scope" => {
            Outcome::Fatal(format!(
                "Slack refuses the token ({error}): use a bot token with chat:write"
            ))
        }
        "channel_not_found" | "not_in_channel" | "is_archived" => Outcome::Fatal(format!(
            "Slack cannot post to the channel ({error}): check --channel and invite the bot to it"
        )),
        "ratelimited" | "internal_error" | "fatal_error" | "service_unavailable" | "request_timeout" => {
            Outcome::Retry {
                reason: format!("Slack: {error}"),
                after: None,
            }
        }
        _ => Outcome::Skip(format!("Slack rejected the message: {error}")),
    })
}

fn webhook_outcome(sent: reqwest::Result<reqwest::Response>) -> Result<(), Outcome> {
    let response = sent.map_err(|e| Outcome::Retry {
        reason: format!("webhook unreachable: {e}"),
        after: None,
    })?;
    let status = response.status();
    match status.as_u16() {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 => Err(Outcome::Retry {
            reason: format!("webhook answered HTTP {status}"),
            after: retry_after(&response),
        }),
        _ => Err(Outcome::Fatal(format!(
            "the webhook refuses events (HTTP {status}): check --url and --header"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::core::events::Category;

    fn event(kind: EventType) -> Event {
        Event {
            event_id: "e1".into(),
            kind,
            category: kind.category(),
            pipeline_id: "gold".into(),
            schedule_id: Some("daily".into()),
            date: Some("2026-11-21".into()),
            run_id: Some("gold.daily.2026-11-21.2".into()),
            attempt: Some(2),
            timestamp: Utc.with_ymd_and_hms(2026, 11, 21, 6, 0, 0).unwrap(),
            message: "past the deadline".into(),
            detail: Default::default(),
        }
    }

    #[test]
    fn messages_thread_per_execution_and_warnings_after_a_breach_are_dropped() {
        let breach = event(EventType::SLA_BREACH);
        assert_eq!(thread_key(&breach), "gold/daily/2026-11-21");
        let m = slack_message("C1", &breach, Some("171.5"));
        assert_eq!(m["thread_ts"], "171.5");
        assert_eq!(m["channel"], "C1");
        assert!(m["text"]
            .as_str()
            .unwrap()
            .starts_with(":rotating_light: SLA_BREACH · gold · daily 2026-11-21"));
        let context = m["blocks"][2]["elements"][0]["text"].as_str().unwrap();
        assert!(
            context.contains("run `gold.daily.2026-11-21.2`") && context.contains("attempt 2"),
            "{context}"
        );
        assert!(slack_message("C1", &breach, None).get("thread_ts").is_none());
        assert!(suppressed(&event(EventType::SLA_WARNING), true));
        assert!(!suppressed(&event(EventType::SLA_WARNING), false));
        assert!(!suppressed(&breach, true));
        assert!(DEFAULT_TYPES.iter().all(|t| EventType::parse(t).is_some()));
    }

    fn with(kind: EventType, detail: Value) -> Event {
        Event {
            detail: detail.as_object().unwrap().clone(),
            ..event(kind)
        }
    }

    fn hint(kind: EventType, detail: Value) -> String {
        action_hint(&with(kind, detail)).unwrap_or_default()
    }

    #[test]
    fn the_default_types_are_the_earlier_designs_alerted_set_plus_sluices_own() {
        let defaults: Vec<EventType> = DEFAULT_TYPES.iter().map(|t| EventType::parse(t).unwrap()).collect();
        for t in EventType::ALL.iter().filter(|t| t.category() == Category::DryRun) {
            assert!(defaults.contains(t), "{t:?}");
        }
        use EventType::*;
        for t in [
            SLA_MET,
            RERUN_ACCEPTED,
            RERUN_REJECTED,
            LATE_DATA_ARRIVAL,
            TRIGGER_RECOVERED,
            PIPELINE_EXCLUDED,
        ] {
            assert!(defaults.contains(&t), "{t:?}");
        }
        for t in [
            JOB_TIMEOUT,
            STALE_RUN,
            CONFIG_REJECTED,
            SLA_AT_RISK,
            SLA_RECOVERED,
            SENSOR_FLAPPING,
            UNKNOWN_SENSOR,
            STALE_SENSOR_WARNING,
            VALIDATION_WARNED,
            POST_RUN_WARNED,
            EVALUATION_SLA_WARNING,
            EVALUATION_SLA_BREACH,
        ] {
            assert!(defaults.contains(&t), "Sluice's own {t:?}");
        }
        // What needs nobody's attention stays out.
        for t in [
            VALIDATION_PASSED,
            JOB_TRIGGERED,
            POST_RUN_PASSED,
            CONFIG_ACCEPTED,
            INPUT_REJECTED,
            RUN_CANCELLED,
        ] {
            assert!(!defaults.contains(&t), "{t:?}");
        }
        let unique: std::collections::HashSet<_> = defaults.iter().collect();
        assert_eq!(unique.len(), defaults.len(), "no type twice");
    }

    #[test]
    fn sla_hints_depend_on_how_far_the_run_got() {
        use EventType::*;
        let not_started = json!({"phase": "notStarted"});
        assert!(hint(SLA_WARNING, not_started.clone()).starts_with("not started: check the sensor data"));
        let breach = hint(SLA_BREACH, not_started);
        assert!(breach.starts_with("not started: investigate the trigger"), "{breach}");
        assert!(breach.contains("`sluice status gold`"), "{breach}");
        assert_eq!(
            hint(SLA_WARNING, json!({"phase": "awaitingJob"})),
            "the job is running and may still finish in time"
        );
        assert!(hint(SLA_BREACH, json!({"phase": "awaitingTrigger"})).contains("finish late"));
        assert!(hint(SLA_WARNING, json!({"phase": "awaitingRules"})).contains("validation rules"));
        assert!(hint(SLA_BREACH, json!({"phase": "failed"})).ends_with("`sluice rerun gold 2026-11-21`"));
        assert!(hint(SLA_BREACH, json!({"phase": "skipped"})).ends_with("`sluice rerun gold 2026-11-21`"));
        assert!(!hint(SLA_WARNING, json!({"phase": "awaitingJob"})).contains("rerun"));
        assert!(hint(RELATIVE_SLA_BREACH, json!({})).contains("maxDuration since its first sensor"));
        assert_eq!(action_hint(&event(SLA_MET)), None);
    }

    #[test]
    fn sla_at_risk_hints_name_the_late_upstream_or_sensor_or_the_job() {
        use EventType::*;
        let usual = "2026-11-21T07:10:00Z";
        let upstream = hint(
            SLA_AT_RISK,
            json!({"basis": "usualTrigger", "usualTriggerAt": usual,
                   "waitingFor": ["upstream:silver", "upstream:bronze"], "upstreams": ["silver", "bronze"]}),
        );
        assert!(
            upstream.starts_with("waiting for upstream silver, bronze"),
            "{upstream}"
        );
        assert!(
            upstream.contains(usual) && upstream.contains("`sluice status gold`"),
            "{upstream}"
        );
        let sensor = hint(
            SLA_AT_RISK,
            json!({"basis": "usualTrigger", "usualTriggerAt": usual, "waitingFor": ["row-count"], "upstreams": []}),
        );
        assert!(
            sensor.starts_with("waiting for row-count") && sensor.contains("producer"),
            "{sensor}"
        );
        let running = hint(
            SLA_AT_RISK,
            json!({"basis": "running", "waitingFor": [], "upstreams": []}),
        );
        assert!(running.contains("orchestrator"), "{running}");
        assert_eq!(action_hint(&event(SLA_RECOVERED)), None);
    }

    #[test]
    fn sensor_anomaly_hints_say_what_to_check() {
        use EventType::*;
        let typo = hint(UNKNOWN_SENSOR, json!({"key": "row_count", "didYouMean": "row-count"}));
        assert!(typo.contains("misspelling of row-count"), "{typo}");
        let phantom = hint(UNKNOWN_SENSOR, json!({"key": "heartbeat", "didYouMean": null}));
        assert!(phantom.contains("anomalies.unknownSensors: false"), "{phantom}");
        let flapping = hint(SENSOR_FLAPPING, json!({"key": "upstream", "holdForSeconds": 600}));
        assert!(
            flapping.starts_with("upstream keeps changing") && flapping.ends_with("600 s"),
            "{flapping}"
        );
        assert!(!hint(SENSOR_FLAPPING, json!({"key": "upstream", "holdForSeconds": null})).contains("waits"));
        let stale = hint(
            STALE_SENSOR_WARNING,
            json!({"key": "row-count", "usualIntervalSeconds": 300.0, "windowClosesAt": "2026-11-22T09:00:00Z"}),
        );
        assert!(
            stale.contains("every 300 s") && stale.contains("2026-11-22T09:00:00Z"),
            "{stale}"
        );
        assert!(hint(VALIDATION_WARNED, json!({})).contains("the run goes on"));
        assert!(hint(POST_RUN_WARNED, json!({})).ends_with("`sluice rerun gold 2026-11-21`"));
    }

    #[test]
    fn hints_give_the_rerun_command_where_a_rerun_is_what_to_do() {
        use EventType::*;
        let rerun = "`sluice rerun gold 2026-11-21`";
        for kind in [
            VALIDATION_EXHAUSTED,
            RETRY_EXHAUSTED,
            INFRA_FAILURE,
            STALE_RUN,
            LATE_DATA_ARRIVAL,
        ] {
            assert!(
                hint(kind, json!({})).contains(rerun),
                "{kind:?}: {}",
                hint(kind, json!({}))
            );
        }
        let failed = hint(JOB_FAILED, json!({"willRetry": false}));
        assert!(failed.contains("job's logs") && failed.contains(rerun), "{failed}");
        let retried = hint(JOB_FAILED, json!({"willRetry": true}));
        assert!(retried.contains("retries") && !retried.contains("rerun"), "{retried}");
        assert_eq!(
            hint(SENSOR_DEADLINE_EXPIRED, json!({})),
            format!(
                "trigger window closed: no sensor starts 2026-11-21 any more; once its data is ready, rerun: {rerun}"
            )
        );
        // A run still to come, or already running: no rerun to suggest.
        let missed = hint(SCHEDULE_MISSED, json!({"expectedDate": "2026-11-21"}));
        assert!(missed.contains("trigger sensor") && !missed.contains(rerun), "{missed}");
        assert!(hint(SCHEDULE_MISSED, json!({"started": true})).starts_with("started late"));
        assert!(hint(IRREGULAR_SCHEDULE_MISSED, json!({})).contains("inclusion date 2026-11-21"));
        assert!(hint(POST_RUN_DRIFT, json!({"rerun": true})).contains("Sluice reruns it"));
        assert!(hint(POST_RUN_DRIFT, json!({"rerun": false})).contains(rerun));
        assert!(hint(POST_RUN_SENSOR_MISSING, json!({"sensors": ["audit"]})).ends_with("publishes audit"));
        assert!(hint(TRIGGER_RECOVERED, json!({})).starts_with("nothing to do"));
        // An hourly execution, and ids that need quoting for a shell.
        let hourly = Event {
            date: Some("2026-11-21T05".into()),
            pipeline_id: "it's".into(),
            ..event(LATE_DATA_ARRIVAL)
        };
        assert_eq!(
            action_hint(&hourly).unwrap(),
            r"to use the new data, rerun: `sluice rerun 'it'\''s' 2026-11-21T05`"
        );
    }

    #[test]
    fn a_rejected_rerun_says_why_and_what_next() {
        use EventType::*;
        let busy = hint(
            RERUN_REJECTED,
            json!({"rejection": "execution daily/2026-11-21 is still in progress (awaitingJob)"}),
        );
        assert!(
            busy.contains("still in progress") && busy.contains("`sluice cancel gold 2026-11-21`"),
            "{busy}"
        );
        let spent = hint(
            RERUN_REJECTED,
            json!({"rejection": "maxManualReruns (3) is spent for daily/2026-11-21"}),
        );
        assert!(
            spent.ends_with("raise job.maxManualReruns in the config to allow more"),
            "{spent}"
        );
        let same = hint(
            RERUN_REJECTED,
            json!({"rejection": "no sensor data changed since daily/2026-11-21 completed"}),
        );
        assert!(same.contains("publish the corrected sensor data"), "{same}");
        assert_eq!(
            hint(
                RERUN_REJECTED,
                json!({"rejection": "no execution daily/2026-11-21 to rerun"})
            ),
            "nothing was started — no execution daily/2026-11-21 to rerun"
        );
    }

    #[test]
    fn the_hint_has_its_own_block_and_ends_the_fallback_text() {
        let failed = with(EventType::RETRY_EXHAUSTED, json!({}));
        let m = slack_message("C1", &failed, None);
        let hint = "→ check the job's logs and fix the cause, then rerun: `sluice rerun gold 2026-11-21`";
        assert!(
            m["text"].as_str().unwrap().ends_with(&format!("\n{hint}")),
            "{}",
            m["text"]
        );
        assert_eq!(
            m["blocks"][1],
            json!({"type": "section", "text": {"type": "mrkdwn", "text": hint}})
        );
        assert_eq!(m["blocks"][2]["type"], "context");
        // No hint, no hint block; mrkdwn control characters in a hint are made literal.
        let completed = slack_message("C1", &event(EventType::JOB_COMPLETED), None);
        assert_eq!(completed["blocks"].as_array().unwrap().len(), 2);
        assert!(!completed["text"].as_str().unwrap().contains('→'));
        let odd = with(EventType::RERUN_REJECTED, json!({"rejection": "<!channel> & more"}));
        let text = slack_message("C1", &odd, None)["blocks"][1]["text"]["text"].clone();
        assert_eq!(text, "→ nothing was started — &lt;!channel&gt; &amp; more");
    }

    #[test]
    fn only_a_breach_or_an_ended_run_replying_in_a_thread_is_broadcast_to_the_channel() {
        use EventType::*;
        for kind in [SLA_BREACH, RELATIVE_SLA_BREACH, RETRY_EXHAUSTED, VALIDATION_EXHAUSTED] {
            let reply = slack_message("C1", &event(kind), Some("171.5"));
            assert_eq!(reply["reply_broadcast"], true, "{kind:?}");
            // The thread's first message is in the channel already.
            let first = slack_message("C1", &event(kind), None);
            assert!(first.get("reply_broadcast").is_none(), "{kind:?}");
        }
        for kind in [SLA_WARNING, JOB_FAILED, INFRA_FAILURE, SLA_MET, JOB_COMPLETED] {
            let reply = slack_message("C1", &event(kind), Some("171.5"));
            assert!(reply.get("reply_broadcast").is_none(), "{kind:?}");
        }
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let token = Secret("xoxb-123-secret".into());
        assert_eq!(format!("{token:?}"), "Secret(***)");
    }
}
