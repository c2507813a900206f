//! The alert delivery service behind `sluice alerts slack|webhook|pagerduty|route`:
//! consumers of the events topic that tell people. [`route()`] reads a routes file
//! (`routes.rs`) and sends each event to the targets its routes name; [`forward()`] sends
//! everything of the chosen types to one target. Each target is forwarded by `forward.rs`.
//! The command line only makes the [`Settings`] and the [`Sink`] from its flags; nothing here
//! uses it.
//!
//! Slack gets one Block Kit message per event through `chat.postMessage`, threaded per
//! execution (pipeline, schedule, date): the first message of an execution starts the
//! thread, the rest reply in it. Thread ids and SLA-breach marks live in RocksDB under
//! `--state-dir`, so a restart keeps threading and suppression. A webhook gets the event's
//! JSON. PagerDuty gets Events API v2 events, one incident per execution: failures and
//! breaches trigger it, a completed run or a met SLA resolves it. Each retries while the receiver is throttling or failing (honouring `Retry-After`)
//! and commit an event's offset only once it is delivered or deliberately skipped, so a
//! crash re-sends rather than loses.

mod forward;
pub mod routes;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rocksdb::DB;
use serde_json::{json, Value};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::core::events::{Event, EventType};
use crate::core::hints::hint_of;
use crate::runtime::backoff::Backoff;
use crate::runtime::codec::Codec;
use crate::runtime::kafka::Connection;
use crate::runtime::topics::Topics;
use forward::{Target, Wants};
use routes::{Routes, TargetSpec};

/// What is sent when `--type` is not given: the earlier design's alerted set (interlock
/// `deploy/terraform/eventbridge.tf` lines 82-128, the `alert_events` rule) restricted to the
/// types Sluice has (it has no SFN_TIMEOUT or BASELINE_CAPTURE_FAILED) and without its
/// DRY_RUN_* types (a dry run shadows a live orchestrator: it pages no one unless a
/// `--type` asks for them), plus Sluice's own JOB_TIMEOUT, STALE_RUN, CONFIG_REJECTED, the
/// SLA forecast's SLA_AT_RISK and SLA_RECOVERED, the sensor anomalies, the warnings of
/// `warn` rules and JOB_STATUS_UNKNOWN.
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
    "JOB_STATUS_UNKNOWN",
];

/// What `alerts pagerduty` sends when `--type` is not given: what should wake someone
/// (failures, breaches, exhaustion, missed schedules, stale runs), and what resolves it.
pub const PAGERDUTY_TYPES: &[&str] = &[
    "SLA_BREACH",
    "EVALUATION_SLA_BREACH",
    "JOB_FAILED",
    "JOB_TIMEOUT",
    "RETRY_EXHAUSTED",
    "INFRA_FAILURE",
    "VALIDATION_EXHAUSTED",
    "POST_RUN_FAILED",
    "SCHEDULE_MISSED",
    "IRREGULAR_SCHEDULE_MISSED",
    "STALE_RUN",
    "JOB_COMPLETED",
    "SLA_MET",
];

/// Slack's Web API base URL where none is named (`--api`, a Slack target's `api`).
pub const SLACK_API: &str = "https://slack.com/api";
/// PagerDuty's Events API v2 enqueue URL where none is named (`--url`, a PagerDuty target's
/// `url`).
pub const PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";
const OPSGENIE_URL: &str = "https://api.opsgenie.com";

/// What every forwarder of one `sluice alerts` command shares: the flags all of them take.
pub struct Settings {
    /// The consumer group: instances sharing it share the work; each group gets every event.
    /// `None`: the command's own (`sluice-alerts-slack`, ...; `sluice-alerts` for [`route`],
    /// whose targets each get `GROUP.TARGET`).
    pub group: Option<String>,
    /// Where thread ids and breach marks are kept (RocksDB); [`route`] keeps each target's in
    /// `STATE_DIR/TARGET`.
    pub state_dir: PathBuf,
    /// Where a new group starts.
    pub from: Start,
    /// How long an event the target keeps failing (5xx, unreachable) is retried before it is
    /// dead-lettered with the last reason, so later events are not held up for ever.
    pub give_up_after: Duration,
    /// Where /healthz, /readyz (every target running) and /metrics are served, if anywhere.
    pub http: Option<SocketAddr>,
}

/// Where a new consumer group starts in the events topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Every retained event.
    Beginning,
    /// Only events to come.
    End,
}

/// The token, never printed: its debug form is redacted.
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A sink's secret, from `file` (the `flag` that named it) or the environment's `variable`;
/// `what` names it in messages, `hint` says what it must be. Trimmed; empty is an error.
fn secret(file: Option<&Path>, flag: &str, variable: &str, what: &str, hint: &str) -> Result<Secret> {
    let value = match file {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {flag} {}", path.display()))?,
        None => {
            std::env::var(variable).with_context(|| format!("no {what}: set {variable} or pass {flag} FILE{hint}"))?
        }
    };
    let value = value.trim().to_string();
    if value.is_empty() {
        bail!("the {what} is empty");
    }
    Ok(Secret(value))
}

fn slack_token(file: Option<&Path>) -> Result<Secret> {
    let hint = " (a bot token with chat:write)";
    secret(file, "--token-file", "SLACK_BOT_TOKEN", "Slack token", hint)
}

/// Where an event is delivered, with what each message carries beside the event.
pub enum Sink {
    Slack {
        api: String,
        channel: String,
        token: Secret,
        extras: Extras,
    },
    /// A Slack incoming webhook: the URL is the secret; no threads.
    SlackWebhook { url: Secret, extras: Extras },
    Webhook {
        url: String,
        headers: Vec<(String, String)>,
    },
    PagerDuty {
        url: String,
        routing_key: Secret,
        ui_url: Option<String>,
    },
    Opsgenie {
        url: String,
        api_key: Secret,
        ui_url: Option<String>,
    },
}

impl Sink {
    /// A Slack channel through the bot (`sluice alerts slack`), at the Web API under `api`;
    /// the token read from `token_file`, else SLACK_BOT_TOKEN.
    pub fn slack(api: &str, channel: String, token_file: Option<&Path>, ui_url: Option<String>) -> Result<Sink> {
        Ok(Sink::Slack {
            api: api.trim_end_matches('/').to_string(),
            channel,
            token: slack_token(token_file)?,
            extras: Extras { mention: None, ui_url },
        })
    }

    /// A webhook (`sluice alerts webhook`): `headers` as `--header` takes them, NAME=VALUE, a
    /// value of @FILE read from FILE.
    pub fn webhook(url: String, headers: &[String]) -> Result<Sink> {
        let headers = headers.iter().map(|h| header(h)).collect::<Result<Vec<_>>>()?;
        Ok(Sink::Webhook { url, headers })
    }

    /// PagerDuty's Events API v2 at `url` (`sluice alerts pagerduty`); the routing key read
    /// from `routing_key_file`, else PAGERDUTY_ROUTING_KEY.
    pub fn pagerduty(url: String, routing_key_file: Option<&Path>, ui_url: Option<String>) -> Result<Sink> {
        Ok(Sink::PagerDuty {
            url,
            routing_key: routing_key(routing_key_file)?,
            ui_url,
        })
    }

    /// The sink's kind, which names a lone target and its default consumer group.
    fn kind(&self) -> &'static str {
        match self {
            Sink::Slack { .. } => "slack",
            Sink::SlackWebhook { .. } => "slack-webhook",
            Sink::Webhook { .. } => "webhook",
            Sink::PagerDuty { .. } => "pagerduty",
            Sink::Opsgenie { .. } => "opsgenie",
        }
    }
}

/// What a Slack message adds to the event: a mention (a user group, `<!here>`) on what needs
/// a person, and a link to the pipeline's page.
#[derive(Default, Clone)]
pub struct Extras {
    mention: Option<String>,
    ui_url: Option<String>,
}

/// `--ui-url`: an http(s) URL without user info, query or fragment, so the links built on
/// it point under it and nowhere else. The links are built here, so the check is here too;
/// the command line parses the flag with it.
pub fn parse_ui_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err("an http or https URL is needed".into());
    }
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() {
        return Err("no user info, query or fragment: the operator page's base URL only".into());
    }
    Ok(url.to_string())
}

/// The pipeline's page under the operator page's base URL, its id one percent-encoded path
/// segment (the URL was checked by [`parse_ui_url`]).
fn page_link(ui_url: &str, event: &Event) -> String {
    let Ok(mut url) = url::Url::parse(ui_url) else {
        return String::new();
    };
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().push("pipelines").push(&event.pipeline_id);
    }
    url.to_string()
}

/// A Slack mrkdwn link: the URL escaped and its `|` encoded, so neither can end the link or
/// start another.
fn slack_link(url: &str, label: &str) -> String {
    format!("<{}|{}>", mrkdwn_escape(url).replace('|', "%7C"), mrkdwn_escape(label))
}

/// The routing key, from `file` or PAGERDUTY_ROUTING_KEY.
fn routing_key(file: Option<&Path>) -> Result<Secret> {
    let hint = " (an Events API v2 integration key)";
    secret(
        file,
        "--routing-key-file",
        "PAGERDUTY_ROUTING_KEY",
        "PagerDuty routing key",
        hint,
    )
}

/// Whether `event` resolves its execution's incident rather than raising it.
fn resolves(event: &Event) -> bool {
    matches!(event.kind, EventType::JOB_COMPLETED | EventType::SLA_MET)
}

/// PagerDuty's limit on a summary.
const SUMMARY_LIMIT: usize = 1024;

/// An Events API v2 event for `event`: deduplicated per execution ([`thread_key`]), so the
/// failures and breaches of one run update one incident and its success resolves it.
/// Every text is a JSON string (nothing a job wrote can break the payload), the summary cut
/// to PagerDuty's limit.
pub fn pagerduty_event(routing_key: &str, event: &Event, ui_url: Option<&str>) -> Value {
    let dedup_key = format!("sluice/{}", thread_key(event));
    if resolves(event) {
        return json!({"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup_key});
    }
    let severity = match event.kind {
        EventType::SLA_BREACH
        | EventType::EVALUATION_SLA_BREACH
        | EventType::RETRY_EXHAUSTED
        | EventType::VALIDATION_EXHAUSTED
        | EventType::INFRA_FAILURE => "critical",
        EventType::JOB_FAILED | EventType::JOB_TIMEOUT | EventType::POST_RUN_FAILED => "error",
        _ => "warning",
    };
    let when = [event.schedule_id.as_deref(), event.date.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    let mut summary = format!(
        "{} · {} · {when}: {}",
        event.kind.name(),
        event.pipeline_id,
        event.message
    );
    if summary.len() > SUMMARY_LIMIT {
        let mut cut = SUMMARY_LIMIT - 3;
        while !summary.is_char_boundary(cut) {
            cut -= 1;
        }
        summary.truncate(cut);
        summary.push_str("...");
    }
    let mut details = event.detail.clone();
    details.insert("eventId".into(), json!(event.event_id));
    details.extend(event.run_id.as_ref().map(|r| ("runId".to_string(), json!(r))));
    details.extend(event.attempt.map(|a| ("attempt".to_string(), json!(a))));
    let mut body = json!({
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "payload": {
            "summary": summary,
            "source": format!("sluice/{}", event.pipeline_id),
            "severity": severity,
            "timestamp": event.timestamp,
            "component": event.pipeline_id,
            "class": event.kind.name(),
            "custom_details": details,
        },
    });
    if let Some(ui) = ui_url {
        body["links"] = json!([{
            "href": page_link(ui, event),
            "text": format!("{} in Sluice", event.pipeline_id),
        }]);
    }
    body
}

/// Opsgenie's limit on an alert's message (longer is cut by Opsgenie itself) and alias.
const OPSGENIE_MESSAGE_LIMIT: usize = 130;

/// The Opsgenie request for `event`: the path under the API's base URL and the body. One
/// alert per execution (its alias, as PagerDuty's dedup key): failures and breaches create
/// it (Opsgenie counts repeats of an open alias), a success closes it.
pub fn opsgenie_request(event: &Event, ui_url: Option<&str>) -> (String, Value) {
    let alias = format!("sluice/{}", thread_key(event));
    if resolves(event) {
        let path = format!("/v2/alerts/{}/close?identifierType=alias", percent_encode(&alias));
        let note = format!("{}: {}", event.kind.name(), event.message);
        return (path, json!({"source": "sluice", "note": clip_chars(&note, 25_000)}));
    }
    let priority = match event.kind {
        EventType::SLA_BREACH
        | EventType::EVALUATION_SLA_BREACH
        | EventType::RETRY_EXHAUSTED
        | EventType::VALIDATION_EXHAUSTED
        | EventType::INFRA_FAILURE => "P1",
        EventType::JOB_FAILED | EventType::JOB_TIMEOUT | EventType::POST_RUN_FAILED => "P2",
        _ => "P3",
    };
    let message = format!("{} · {}", event.kind.name(), event.pipeline_id);
    let mut details = serde_json::Map::new();
    details.insert("eventId".into(), json!(event.event_id));
    for (k, v) in [
        ("schedule", event.schedule_id.as_deref()),
        ("date", event.date.as_deref()),
        ("runId", event.run_id.as_deref()),
    ] {
        if let Some(v) = v {
            details.insert(k.into(), json!(v));
        }
    }
    if let Some(ui) = ui_url {
        details.insert("page".into(), json!(page_link(ui, event)));
    }
    let body = json!({
        "message": clip_chars(&message, OPSGENIE_MESSAGE_LIMIT),
        "alias": alias,
        "description": clip_chars(&event.message, 15_000),
        "priority": priority,
        "source": "sluice",
        "entity": event.pipeline_id,
        "tags": ["sluice", event.kind.name()],
        "details": details,
    });
    ("/v2/alerts".to_string(), body)
}

/// `text` cut to at most `limit` characters.
fn clip_chars(text: &str, limit: usize) -> String {
    text.chars().take(limit).collect()
}

/// `text` made one URL path segment.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
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

/// `text` made literal for Slack's mrkdwn (`&`, `<` and `>` are its control characters).
fn mrkdwn_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The Block Kit message for `event` (`text` is the notification and fallback); `thread` is
/// the execution's thread, if its first message is already posted. `channel` is `None` for
/// an incoming webhook, which posts where it was made for. The event's own texts (a job's
/// error output, an orchestrator's message) are escaped: they cannot mention or link.
fn slack_message(channel: Option<&str>, event: &Event, thread: Option<&str>, extras: &Extras) -> Value {
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
    let hint = hint_of(event).map(|h| format!("→ {}", mrkdwn_escape(&h)));
    let message = mrkdwn_escape(&event.message);
    let pipeline = mrkdwn_escape(&event.pipeline_id);
    let execution = mrkdwn_escape(&execution);
    // A mention only on what needs a person, never on a success or a warning.
    let mention = extras
        .mention
        .as_deref()
        .filter(|_| routes::QUIET_TYPES.contains(&event.kind))
        .map(|m| format!("{m} "))
        .unwrap_or_default();
    let mut text = format!(
        "{mention}{icon} {} · {pipeline}{execution}: {message}",
        event.kind.name()
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
    if let Some(ui) = &extras.ui_url {
        context.push(slack_link(&page_link(ui, event), "pipeline page"));
    }
    let mut blocks = vec![json!({"type": "section", "text": {"type": "mrkdwn",
        "text": format!("{mention}{icon} *{}* · *{pipeline}*{execution}\n{message}", event.kind.name())}})];
    if let Some(hint) = &hint {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": hint}}));
    }
    blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": context.join(" · ")}]}));
    let mut message = json!({
        "text": text,
        "blocks": blocks,
        "unfurl_links": false,
    });
    if let Some(channel) = channel {
        message["channel"] = json!(channel);
    }
    if let Some(ts) = thread {
        message["thread_ts"] = json!(ts);
        if broadcasts(event) {
            message["reply_broadcast"] = json!(true);
        }
    }
    message
}

/// `sluice alerts slack|webhook|pagerduty`: every event of `types` to `sink` until a shutdown
/// signal; `None` sends the sink's defaults ([`PAGERDUTY_TYPES`] to PagerDuty, else
/// [`DEFAULT_TYPES`]).
pub async fn forward(
    kafka: &Connection,
    topics: &Topics,
    codec: &Codec,
    sink: Sink,
    types: Option<Vec<EventType>>,
    settings: Settings,
) -> Result<()> {
    let defaults = match sink {
        Sink::PagerDuty { .. } => PAGERDUTY_TYPES,
        _ => DEFAULT_TYPES,
    };
    let types: Vec<EventType> = types.unwrap_or_else(|| {
        defaults
            .iter()
            .map(|t| EventType::parse(t).expect("a known type"))
            .collect()
    });
    let name = sink.kind().to_string();
    let target = Target {
        group: settings
            .group
            .clone()
            .unwrap_or_else(|| format!("sluice-alerts-{name}")),
        name,
        sink,
        wants: Box::new(move |e: &Event| types.contains(&e.kind)),
        state_dir: settings.state_dir.clone(),
    };
    forward::run(kafka, topics, codec, vec![target], &settings, None).await
}

/// `sluice alerts route`: one forwarder per target of the routes file, each in its own
/// consumer group (`GROUP.TARGET`) with its own state (`STATE_DIR/TARGET`).
pub async fn route(
    kafka: &Connection,
    topics: &Topics,
    codec: &Codec,
    routes: Routes,
    ui_url: Option<String>,
    settings: Settings,
) -> Result<()> {
    let routes = Arc::new(routes);
    // Read from the config topic only when a route names an owner.
    let owners = Arc::new(forward::OwnersBook::default());
    let follow = routes.needs_owners().then(|| owners.clone());
    let group = settings.group.clone().unwrap_or_else(|| "sluice-alerts".to_string());
    let mut targets = Vec::new();
    for (name, spec) in &routes.targets {
        let sink = sink_of(name, spec, ui_url.clone())?;
        let (routes, owners, target) = (routes.clone(), owners.clone(), name.clone());
        let wants: Wants = Box::new(move |e: &Event| {
            owners.look_up(&e.pipeline_id, std::time::Instant::now());
            routes.sends(&target, e, &owners.owners())
        });
        targets.push(Target {
            name: name.clone(),
            sink,
            wants,
            group: format!("{group}.{name}"),
            state_dir: settings.state_dir.join(name),
        });
    }
    forward::run(kafka, topics, codec, targets, &settings, follow).await
}

/// The sink of a routes file's target, its secrets read from their files.
fn sink_of(name: &str, spec: &TargetSpec, ui_url: Option<String>) -> Result<Sink> {
    let read = |path: &Path, what: &str| -> Result<Secret> {
        let flag = format!("target {name}'s {what}");
        secret(Some(path), &flag, "", what, "")
    };
    Ok(match spec {
        TargetSpec::Slack {
            channel,
            token_file,
            mention,
            api,
        } => Sink::Slack {
            api: api.as_deref().unwrap_or(SLACK_API).trim_end_matches('/').to_string(),
            channel: channel.clone(),
            token: read(token_file, "tokenFile")?,
            extras: Extras {
                mention: mention.clone(),
                ui_url,
            },
        },
        TargetSpec::SlackWebhook { url_file, mention } => Sink::SlackWebhook {
            url: read(url_file, "urlFile")?,
            extras: Extras {
                mention: mention.clone(),
                ui_url,
            },
        },
        TargetSpec::Webhook { url, headers } => Sink::Webhook {
            url: url.clone(),
            headers: headers
                .iter()
                .map(|(k, v)| header(&format!("{k}={v}")))
                .collect::<Result<_>>()?,
        },
        TargetSpec::Pagerduty { routing_key_file, url } => Sink::PagerDuty {
            url: url.clone().unwrap_or_else(|| PAGERDUTY_URL.to_string()),
            routing_key: read(routing_key_file, "routingKeyFile")?,
            ui_url,
        },
        TargetSpec::Opsgenie { api_key_file, url } => Sink::Opsgenie {
            url: url.as_deref().unwrap_or(OPSGENIE_URL).trim_end_matches('/').to_string(),
            api_key: read(api_key_file, "apiKeyFile")?,
            ui_url,
        },
    })
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

/// What became of one event at its target.
enum Delivery {
    Delivered,
    /// Not sent: an SLA warning after the execution's breach.
    Suppressed,
    /// The target refused it for good (a 400): to be dead-lettered. `failures`: attempts.
    Refused {
        reason: String,
        failures: u64,
    },
    /// Still failing at the deadline: to be dead-lettered so later events go on.
    GaveUp {
        reason: String,
        failures: u64,
    },
    /// Stopped while retrying: uncommitted, sent again on the next start.
    Stopped,
}

/// Sends one event, retrying until it is delivered, refused, `give_up_at` passes, or the
/// sink says it can never work (an error that names the fix).
async fn deliver(
    client: &reqwest::Client,
    sink: &Sink,
    state: &DB,
    event: &Event,
    give_up_at: Instant,
    stop: &mut watch::Receiver<bool>,
) -> Result<Delivery> {
    let thread_key = thread_key(event);
    let breach_key = format!("b/{thread_key}");
    if suppressed(event, state.get(&breach_key)?.is_some()) {
        info!(pipeline = %event.pipeline_id, event = event.kind.name(), "suppressed: the SLA is already breached");
        return Ok(Delivery::Suppressed);
    }
    // A target that keeps failing is asked again at most once a minute.
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
    let mut failures = 0;
    loop {
        let attempt = match sink {
            Sink::Slack {
                api,
                channel,
                token,
                extras,
            } => {
                let thread = state
                    .get(format!("t/{thread_key}"))?
                    .map(|t| String::from_utf8_lossy(&t).into_owned());
                let body = slack_message(Some(channel), event, thread.as_deref(), extras);
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
            Sink::SlackWebhook { url, extras } => {
                let body = slack_message(None, event, None, extras);
                let sent = client
                    .post(&url.0)
                    .header(reqwest::header::CONTENT_TYPE, "application/json; charset=utf-8")
                    .body(body.to_string())
                    .send()
                    .await;
                slack_webhook_outcome(sent).await
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
            Sink::PagerDuty {
                url,
                routing_key,
                ui_url,
            } => {
                let body = pagerduty_event(&routing_key.0, event, ui_url.as_deref());
                let sent = client
                    .post(url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string())
                    .send()
                    .await;
                incident_outcome(
                    "PagerDuty",
                    "--routing-key-file (an Events API v2 integration key) and --url",
                    sent,
                )
                .await
            }
            Sink::Opsgenie { url, api_key, ui_url } => {
                let (path, body) = opsgenie_request(event, ui_url.as_deref());
                let sent = client
                    .post(format!("{url}{path}"))
                    .header(reqwest::header::AUTHORIZATION, format!("GenieKey {}", api_key.0))
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string())
                    .send()
                    .await;
                incident_outcome(
                    "Opsgenie",
                    "the target's apiKeyFile (an API integration key) and url",
                    sent,
                )
                .await
            }
        };
        match attempt {
            Ok(()) => break,
            Err(Outcome::Fatal(e)) => bail!("{e}"),
            Err(Outcome::Skip(reason)) => {
                warn!(pipeline = %event.pipeline_id, event = event.kind.name(), %reason, "refused by the target");
                return Ok(Delivery::Refused {
                    reason,
                    failures: failures + 1,
                });
            }
            Err(Outcome::Retry { reason, after }) => {
                failures += 1;
                let wait = after.unwrap_or_else(|| backoff.next_wait());
                if Instant::now() + wait > give_up_at {
                    let reason = format!("still failing after {failures} attempts: {reason}");
                    return Ok(Delivery::GaveUp { reason, failures });
                }
                warn!(pipeline = %event.pipeline_id, event = event.kind.name(), %reason, wait_ms = wait.as_millis() as u64, "delivery failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.wait_for(|s| *s) => return Ok(Delivery::Stopped),
                }
            }
        }
    }
    if marks_breach(event) {
        state.put(&breach_key, b"1")?;
    }
    Ok(Delivery::Delivered)
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

/// PagerDuty's and Opsgenie's answer: 2xx taken; 408, 429 and 5xx retried; 400 and 422 an
/// event it will never take (refused, its reason kept); anything else a key or URL to fix
/// (`check` says which).
async fn incident_outcome(service: &str, check: &str, sent: reqwest::Result<reqwest::Response>) -> Result<(), Outcome> {
    let response = sent.map_err(|e| Outcome::Retry {
        reason: format!("{service} unreachable: {e}"),
        after: None,
    })?;
    let status = response.status();
    let after = retry_after(&response);
    let answer = response.text().await.unwrap_or_default();
    let answer: String = answer.chars().take(500).collect();
    match status.as_u16() {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 => Err(Outcome::Retry {
            reason: format!("{service} answered HTTP {status}"),
            after,
        }),
        400 | 422 => Err(Outcome::Skip(format!(
            "{service} refused the event (HTTP {status}): {answer}"
        ))),
        _ => Err(Outcome::Fatal(format!(
            "{service} refuses events (HTTP {status}): check {check}"
        ))),
    }
}

/// A Slack incoming webhook's answer: 200 `ok`; 429 and 5xx retried; 400 (`invalid_payload`
/// and the like) refused; 403, 404 and 410 (revoked, removed, archived) a URL to replace.
async fn slack_webhook_outcome(sent: reqwest::Result<reqwest::Response>) -> Result<(), Outcome> {
    let response = sent.map_err(|e| Outcome::Retry {
        reason: format!("Slack unreachable: {e}"),
        after: None,
    })?;
    let status = response.status();
    let after = retry_after(&response);
    let answer: String = response.text().await.unwrap_or_default().chars().take(200).collect();
    match status.as_u16() {
        200..=299 => Ok(()),
        429 => Err(Outcome::Retry {
            reason: "rate limited by Slack".into(),
            after: after.or(Some(Duration::from_secs(1))),
        }),
        500..=599 => Err(Outcome::Retry {
            reason: format!("Slack answered HTTP {status}"),
            after,
        }),
        400 => Err(Outcome::Skip(format!("Slack refused the message (HTTP 400): {answer}"))),
        _ => Err(Outcome::Fatal(format!(
            "Slack refuses the incoming webhook (HTTP {status}: {answer}): make a new one and put its URL in the target's urlFile"
        ))),
    }
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
    use super::*;
    use crate::core::events::Category;
    use crate::core::hints::samples::{event, with};

    #[test]
    fn messages_thread_per_execution_and_warnings_after_a_breach_are_dropped() {
        let breach = event(EventType::SLA_BREACH);
        assert_eq!(thread_key(&breach), "gold/daily/2026-11-21");
        let m = slack_message(Some("C1"), &breach, Some("171.5"), &Extras::default());
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
        assert!(slack_message(Some("C1"), &breach, None, &Extras::default())
            .get("thread_ts")
            .is_none());
        assert!(suppressed(&event(EventType::SLA_WARNING), true));
        assert!(!suppressed(&event(EventType::SLA_WARNING), false));
        assert!(!suppressed(&breach, true));
        assert!(DEFAULT_TYPES.iter().all(|t| EventType::parse(t).is_some()));
    }

    #[test]
    fn opsgenie_gets_one_alert_per_execution_created_by_failures_and_closed_by_success() {
        let (path, created) = opsgenie_request(&event(EventType::SLA_BREACH), Some("https://sluice.example/"));
        assert_eq!(path, "/v2/alerts");
        assert_eq!(created["alias"], "sluice/gold/daily/2026-11-21");
        assert_eq!(created["priority"], "P1");
        assert_eq!(created["entity"], "gold");
        assert_eq!(created["details"]["page"], "https://sluice.example/pipelines/gold");
        assert_eq!(
            opsgenie_request(&event(EventType::JOB_FAILED), None).1["priority"],
            "P2"
        );
        let mut long = event(EventType::JOB_FAILED);
        long.pipeline_id = "p".repeat(500).into();
        let message = opsgenie_request(&long, None).1["message"].as_str().unwrap().to_string();
        assert_eq!(message.chars().count(), OPSGENIE_MESSAGE_LIMIT);
        let (path, closed) = opsgenie_request(&event(EventType::JOB_COMPLETED), None);
        assert_eq!(
            path,
            "/v2/alerts/sluice%2Fgold%2Fdaily%2F2026-11-21/close?identifierType=alias"
        );
        assert_eq!(closed["source"], "sluice");
        assert!(closed.get("priority").is_none());
    }

    #[test]
    fn a_webhook_message_has_no_channel_and_mentions_only_what_needs_a_person() {
        let extras = Extras {
            mention: Some("<!subteam^S1>".into()),
            ui_url: Some("https://sluice.example".into()),
        };
        let failed = slack_message(None, &event(EventType::JOB_FAILED), None, &extras);
        assert!(failed.get("channel").is_none());
        assert!(failed["text"]
            .as_str()
            .unwrap()
            .starts_with("<!subteam^S1> :x: JOB_FAILED"));
        assert!(failed["blocks"]
            .to_string()
            .contains("<https://sluice.example/pipelines/gold|pipeline page>"));
        let done = slack_message(None, &event(EventType::JOB_COMPLETED), None, &extras);
        assert!(!done["text"].as_str().unwrap().contains("subteam"));
        let mut hostile = event(EventType::JOB_FAILED);
        hostile.message = "<!everyone> <https://x|y> & more".into();
        let text = slack_message(None, &hostile, None, &Extras::default())["text"].to_string();
        assert!(!text.contains("<!everyone>") && !text.contains("<https://x"), "{text}");
    }

    #[test]
    fn the_ui_url_cannot_inject_a_link_or_a_mention() {
        for refused in [
            "javascript:alert(1)",
            "https://u:p@ops.example",
            "https://ops.example/?x=<!here>",
            "ops",
        ] {
            assert!(parse_ui_url(refused).is_err(), "{refused}");
        }
        // A path may hold what ends a Slack link: it stays inside the one link.
        let ui = parse_ui_url("https://ops.example/x|<!channel>&").unwrap();
        let extras = Extras {
            mention: None,
            ui_url: Some(ui),
        };
        let mut odd = event(EventType::JOB_FAILED);
        odd.pipeline_id = "a|b>c".into();
        let message = slack_message(None, &odd, None, &extras);
        let blocks = message["blocks"].as_array().unwrap();
        let context = blocks.last().unwrap()["elements"][0]["text"]
            .as_str()
            .unwrap()
            .to_string();
        let link = context.rsplit(" · ").next().unwrap();
        assert_eq!(
            link,
            "<https://ops.example/x%7C%3C!channel%3E&amp;/pipelines/a%7Cb%3Ec|pipeline page>"
        );
        assert_eq!(
            page_link("https://ops.example/ui/", &odd),
            "https://ops.example/ui/pipelines/a|b%3Ec"
        );
    }

    #[test]
    fn pagerduty_gets_one_incident_per_execution_raised_by_failures_and_resolved_by_success() {
        let breach = event(EventType::SLA_BREACH);
        let raised = pagerduty_event("R0UTING", &breach, Some("https://sluice.example/"));
        assert_eq!(raised["event_action"], "trigger");
        assert_eq!(raised["routing_key"], "R0UTING");
        assert_eq!(raised["dedup_key"], "sluice/gold/daily/2026-11-21");
        assert_eq!(raised["payload"]["severity"], "critical");
        assert_eq!(raised["payload"]["class"], "SLA_BREACH");
        assert_eq!(raised["payload"]["source"], "sluice/gold");
        assert!(raised["payload"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("SLA_BREACH · gold · daily 2026-11-21: "));
        assert_eq!(raised["links"][0]["href"], "https://sluice.example/pipelines/gold");
        let failed = pagerduty_event("R0UTING", &event(EventType::JOB_FAILED), None);
        assert_eq!(
            (failed["payload"]["severity"].as_str(), failed.get("links")),
            (Some("error"), None)
        );
        let done = pagerduty_event("R0UTING", &event(EventType::JOB_COMPLETED), None);
        assert_eq!(done["event_action"], "resolve");
        assert_eq!(done["dedup_key"], raised["dedup_key"], "the same incident");
        // A job's text is data in a JSON string, cut to PagerDuty's limit on a character.
        let mut noisy = event(EventType::JOB_FAILED);
        noisy.message = format!("\"}}]{}", "é".repeat(2000));
        let body = pagerduty_event("R0UTING", &noisy, None);
        let summary = body["payload"]["summary"].as_str().unwrap();
        assert!(
            summary.len() <= SUMMARY_LIMIT && summary.ends_with("..."),
            "{}",
            summary.len()
        );
        assert!(serde_json::from_str::<Value>(&body.to_string()).is_ok());
        assert!(PAGERDUTY_TYPES.iter().all(|t| EventType::parse(t).is_some()));
    }

    #[test]
    fn the_default_types_are_the_earlier_designs_alerted_set_plus_sluices_own() {
        let defaults: Vec<EventType> = DEFAULT_TYPES.iter().map(|t| EventType::parse(t).unwrap()).collect();
        // A dry run pages no one: no DRY_RUN_* type is sent unless `--type` asks for it.
        for t in EventType::ALL.iter().filter(|t| t.category() == Category::DryRun) {
            assert!(!defaults.contains(t), "{t:?}");
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
    fn the_hint_has_its_own_block_and_ends_the_fallback_text() {
        let failed = with(EventType::RETRY_EXHAUSTED, json!({}));
        let m = slack_message(Some("C1"), &failed, None, &Extras::default());
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
        let completed = slack_message(Some("C1"), &event(EventType::JOB_COMPLETED), None, &Extras::default());
        assert_eq!(completed["blocks"].as_array().unwrap().len(), 2);
        assert!(!completed["text"].as_str().unwrap().contains('→'));
        let odd = with(EventType::RERUN_REJECTED, json!({"rejection": "<!channel> & more"}));
        let text = slack_message(Some("C1"), &odd, None, &Extras::default())["blocks"][1]["text"]["text"].clone();
        assert_eq!(text, "→ nothing was started — &lt;!channel&gt; &amp; more");
    }

    #[test]
    fn only_a_breach_or_an_ended_run_replying_in_a_thread_is_broadcast_to_the_channel() {
        use EventType::*;
        for kind in [SLA_BREACH, RELATIVE_SLA_BREACH, RETRY_EXHAUSTED, VALIDATION_EXHAUSTED] {
            let reply = slack_message(Some("C1"), &event(kind), Some("171.5"), &Extras::default());
            assert_eq!(reply["reply_broadcast"], true, "{kind:?}");
            // The thread's first message is in the channel already.
            let first = slack_message(Some("C1"), &event(kind), None, &Extras::default());
            assert!(first.get("reply_broadcast").is_none(), "{kind:?}");
        }
        for kind in [SLA_WARNING, JOB_FAILED, INFRA_FAILURE, SLA_MET, JOB_COMPLETED] {
            let reply = slack_message(Some("C1"), &event(kind), Some("171.5"), &Extras::default());
            assert!(reply.get("reply_broadcast").is_none(), "{kind:?}");
        }
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let token = Secret("xoxb-123-secret".into());
        assert_eq!(format!("{token:?}"), "Secret(***)");
    }
}
