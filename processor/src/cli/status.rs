//! `sluice status [PIPELINE]`: what the pipeline API of a running instance says, as a table
//! for people or JSON for scripts. Any instance answers for every pipeline (it gathers the
//! list from its peers and forwards a pipeline's detail to its owner).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::Value;

use super::events::Output;
use crate::core::status::PipelineSummary;

#[derive(Args)]
pub struct StatusArgs {
    /// One pipeline: its config, latest sensors, executions, timers and recent events.
    /// Without it: every pipeline with the state of its latest execution.
    pipeline: Option<String>,
    /// Base URL of any running instance's HTTP API (`sluice run --http`).
    #[arg(long, env = "SLUICE_API", default_value = "http://127.0.0.1:9464")]
    api: String,
    /// Only pipelines of this owner.
    #[arg(long)]
    owner: Option<String>,
    /// Only pipelines whose latest execution is in this state (waiting, running, completed,
    /// failed, …; idle: configured, nothing run yet).
    #[arg(long)]
    state: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// A file whose first token is sent as `Authorization: Bearer` (instances started with
    /// --api-token-file need one).
    #[arg(long, env = "SLUICE_API_TOKEN_FILE", value_name = "FILE")]
    api_token_file: Option<std::path::PathBuf>,
}

pub async fn run(args: StatusArgs) -> Result<ExitCode> {
    let base = args.api.trim_end_matches('/');
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(path) = &args.api_token_file {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let token = crate::runtime::access::tokens_in(&text)
            .next()
            .with_context(|| format!("{} holds no token", path.display()))?;
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .with_context(|| format!("the token in {} is not a valid header value", path.display()))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .default_headers(headers)
        .build()
        .context("building the HTTP client")?;
    let body = match &args.pipeline {
        Some(id) => get_json(&client, base, &format!("{base}/api/pipelines/{}", encode(id))).await?,
        None => {
            // Every page of the list, in one body.
            let mut query = url::form_urlencoded::Serializer::new(String::new());
            for (name, value) in [("owner", &args.owner), ("state", &args.state)] {
                if let Some(value) = value {
                    query.append_pair(name, value);
                }
            }
            let query = query.finish();
            let mut pipelines = Vec::new();
            loop {
                let url = format!("{base}/api/pipelines?{query}&limit=1000&offset={}", pipelines.len());
                let mut page = get_json(&client, base, &url).await?;
                let listed = page["pipelines"].as_array_mut().map(std::mem::take).unwrap_or_default();
                let done = listed.is_empty()
                    || page["total"]
                        .as_u64()
                        .is_none_or(|t| (pipelines.len() + listed.len()) as u64 >= t);
                pipelines.extend(listed);
                if done {
                    page["pipelines"] = Value::Array(pipelines);
                    page["offset"] = Value::from(0);
                    break page;
                }
            }
        }
    };
    match args.output {
        Output::Json => println!("{body}"),
        Output::Table if args.pipeline.is_some() => print!("{}", pipeline_table(&body, Utc::now())),
        Output::Table => {
            let pipelines: Vec<PipelineSummary> =
                serde_json::from_value(body["pipelines"].clone()).context("reading the pipeline list")?;
            print!("{}", list_table(&pipelines, Utc::now()));
            for instance in body["instances"].as_array().into_iter().flatten() {
                if instance["ok"] == false {
                    eprintln!(
                        "warning: instance {} did not answer ({}); its pipelines are missing from this list",
                        instance["instance"].as_str().unwrap_or("?"),
                        instance["error"].as_str().unwrap_or("no reason given")
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// GETs `url` from the API at `base`: its JSON body, or an error that says what to do.
async fn get_json(client: &reqwest::Client, base: &str, url: &str) -> Result<Value> {
    let response = client.get(url).send().await.with_context(|| {
        format!("cannot reach the Sluice API at {base}: is `sluice run --http ADDR` running there? Point --api (or SLUICE_API) at one of its instances")
    })?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .with_context(|| format!("reading {url}'s answer"))?;
    let body: Value = serde_json::from_slice(&bytes).with_context(|| {
        format!("{url} answered HTTP {status} with something other than JSON: is --api a Sluice instance?")
    })?;
    if !status.is_success() {
        let why = body["error"].as_str().unwrap_or("no reason given");
        let hint = match status {
            reqwest::StatusCode::NOT_FOUND => "; `sluice status` lists the pipelines there are",
            reqwest::StatusCode::UNAUTHORIZED => "; give a token with --api-token-file (env SLUICE_API_TOKEN_FILE)",
            _ => "",
        };
        bail!("{why} (HTTP {status}){hint}");
    }
    Ok(body)
}

fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}

/// `in 5m` / `3m ago`, to the second, largest two units.
fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let delta = at - now;
    let secs = delta.num_seconds().unsigned_abs();
    let text = match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86400, secs % 86400 / 3600),
    };
    if delta.num_seconds() >= 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// One line per pipeline (its latest execution), and the counts by state.
pub fn list_table(pipelines: &[PipelineSummary], now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<28} {:<14} {:<21} {:<11} {:>7}  NEXT",
        "PIPELINE", "OWNER", "STATE", "DATE", "ATTEMPT"
    );
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for p in pipelines {
        let latest = p.executions.first();
        let state = p.state();
        *counts.entry(state).or_default() += 1;
        let state = if p.dry_run {
            format!("{state} (dry run)")
        } else {
            state.to_string()
        };
        let next = p
            .next_timer
            .as_ref()
            .map(|t| format!("{} {}", t.kind, relative(t.at, now)))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<28} {:<14} {:<21} {:<11} {:>7}  {next}",
            p.pipeline_id,
            p.owner.as_deref().unwrap_or("-"),
            state,
            latest.map(|e| e.date.as_str()).unwrap_or("-"),
            latest.map(|e| e.attempt.to_string()).unwrap_or_else(|| "-".into()),
        );
    }
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    let _ = writeln!(out, "{} pipelines: {}", pipelines.len(), counts.join(", "));
    out
}

/// One pipeline's detail from `/api/pipelines/{id}`.
pub fn pipeline_table(view: &Value, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let time = |v: &Value| {
        v.as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let summary = &view["summary"];
    let _ = writeln!(
        out,
        "pipeline {}  owner {}  partition {}  served by {}{}",
        text(&view["pipelineId"]),
        text(&summary["owner"]),
        view["partition"],
        text(&view["servedBy"]),
        if summary["dryRun"] == true { "  (dry run)" } else { "" }
    );
    if summary["configured"] == false {
        let _ = writeln!(out, "  no config yet: only sensors have arrived for this id");
    }
    let _ = writeln!(out, "\nexecutions:");
    let executions = summary["executions"].as_array().cloned().unwrap_or_default();
    if executions.is_empty() {
        let _ = writeln!(out, "  none open or recent");
    }
    for e in &executions {
        let since = time(&e["since"]).map(|t| relative(t, now)).unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<10} {:<13} {:<21} attempt {}  since {since}{}{}",
            text(&e["scheduleId"]),
            text(&e["date"]),
            text(&e["state"]),
            e["attempt"],
            e["runId"].as_str().map(|r| format!("  run {r}")).unwrap_or_default(),
            e["reason"].as_str().map(|r| format!("  ({r})")).unwrap_or_default(),
        );
    }
    let _ = writeln!(out, "\nsensors:");
    for s in view["sensors"].as_array().into_iter().flatten() {
        let received = time(&s["receivedAt"]).map(|t| relative(t, now)).unwrap_or_default();
        let scope = s["scope"].as_str().map(|d| format!(" [{d}]")).unwrap_or_default();
        let _ = writeln!(out, "  {}{scope}  {}  received {received}", text(&s["key"]), s["data"]);
    }
    let _ = writeln!(out, "\ntimers:");
    for t in view["timers"].as_array().into_iter().flatten() {
        let at = time(&t["at"]).map(|at| relative(at, now)).unwrap_or_default();
        let date = t["date"].as_str().map(|d| format!(" {d}")).unwrap_or_default();
        let _ = writeln!(out, "  {}{date}  {}  ({at})", text(&t["kind"]), text(&t["at"]));
    }
    let _ = writeln!(out, "\nrecent events:");
    for e in view["recentEvents"].as_array().into_iter().flatten() {
        let at = time(&e["timestamp"])
            .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_default();
        let _ = writeln!(out, "  {at}  {:<22} {}", text(&e["type"]), text(&e["message"]));
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn tables_show_the_latest_state_countdowns_and_counts() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let pipelines: Vec<PipelineSummary> = serde_json::from_value(serde_json::json!([
            {"pipelineId": "gold", "configured": true, "owner": "finance", "dryRun": false,
             "executions": [{"scheduleId": "daily", "date": "2026-11-22", "state": "running", "attempt": 2,
                             "since": "2026-11-22T11:58:00Z", "runId": "r-2"}],
             "nextTimer": {"kind": "slaBreach", "at": "2026-11-22T13:30:00Z", "date": "2026-11-22"}},
            {"pipelineId": "silver", "configured": true, "dryRun": true, "executions": []},
            {"pipelineId": "orphan", "configured": false, "dryRun": false, "executions": []}
        ]))
        .unwrap();
        let table = list_table(&pipelines, now);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("gold") && lines[1].contains("running"), "{table}");
        assert!(lines[1].contains("slaBreach in 1h30m"), "{table}");
        assert!(lines[2].contains("idle (dry run)"), "{table}");
        assert!(lines[3].contains("unconfigured"), "{table}");
        assert_eq!(lines[4], "3 pipelines: idle 1, running 1, unconfigured 1");
        assert_eq!(relative(now - chrono::TimeDelta::seconds(90), now), "1m30s ago");
        assert_eq!(relative(now + chrono::TimeDelta::days(2), now), "in 2d00h");
    }
}
