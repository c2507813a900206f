//! The routes file of `sluice alerts route`: named targets (a Slack channel through the bot,
//! a Slack incoming webhook, a webhook, PagerDuty, Opsgenie) and routes that send events to
//! them by the pipeline's owner, its id, and the event's type.
//!
//! Every route whose conditions all hold sends the event to its targets (a target named by
//! several matching routes gets it once); an event no route takes goes to `unmatched`, so a
//! pipeline nobody routed still reaches someone. Bounded at read: names, counts and sizes.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::core::events::{Event, EventType};
use crate::core::wildcard::wildcard;

/// What a route sends when it names no `types`: what needs a person (failures, breaches,
/// exhaustion, missed schedules, an SLA at risk, a rejected config). Successes only when a
/// route asks for them, but for incident targets (PagerDuty, Opsgenie), which also get what
/// closes an incident.
pub const QUIET_TYPES: &[EventType] = &[
    EventType::SLA_BREACH,
    EventType::RELATIVE_SLA_BREACH,
    EventType::EVALUATION_SLA_BREACH,
    EventType::SLA_AT_RISK,
    EventType::JOB_FAILED,
    EventType::JOB_TIMEOUT,
    EventType::JOB_POLL_EXHAUSTED,
    EventType::JOB_STATUS_UNKNOWN,
    EventType::RETRY_EXHAUSTED,
    EventType::VALIDATION_EXHAUSTED,
    EventType::INFRA_FAILURE,
    EventType::POST_RUN_FAILED,
    EventType::SCHEDULE_MISSED,
    EventType::IRREGULAR_SCHEDULE_MISSED,
    EventType::SENSOR_DEADLINE_EXPIRED,
    EventType::STALE_RUN,
    EventType::CONFIG_REJECTED,
];

/// What closes an execution's incident at PagerDuty and Opsgenie.
pub const RESOLVING_TYPES: &[EventType] = &[EventType::JOB_COMPLETED, EventType::SLA_MET];

const MAX_TARGETS: usize = 100;
const MAX_ROUTES: usize = 1_000;
const MAX_NAME: usize = 63;
const MAX_TEXT: usize = 2_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    targets: BTreeMap<String, TargetSpec>,
    #[serde(default)]
    routes: Vec<RouteSpec>,
    #[serde(default)]
    unmatched: Vec<String>,
}

/// Where a target delivers. Secrets are never in the file: each names a file holding one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TargetSpec {
    /// Slack's Web API (`chat.postMessage`): one thread per execution.
    #[serde(rename_all = "camelCase")]
    Slack {
        channel: String,
        token_file: PathBuf,
        #[serde(default)]
        mention: Option<String>,
        #[serde(default)]
        api: Option<String>,
    },
    /// A Slack incoming webhook (its URL is the secret): no threads.
    #[serde(rename_all = "camelCase")]
    SlackWebhook {
        url_file: PathBuf,
        #[serde(default)]
        mention: Option<String>,
    },
    /// The event's JSON, POSTed.
    #[serde(rename_all = "camelCase")]
    Webhook {
        url: String,
        /// NAME → VALUE; a value of `@FILE` is read from FILE.
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
    /// PagerDuty Events API v2: one incident per execution.
    #[serde(rename_all = "camelCase")]
    Pagerduty {
        routing_key_file: PathBuf,
        #[serde(default)]
        url: Option<String>,
    },
    /// Opsgenie's Alert API: one alert per execution (its alias), closed by success.
    #[serde(rename_all = "camelCase")]
    Opsgenie {
        api_key_file: PathBuf,
        /// `https://api.opsgenie.com` (default) or `https://api.eu.opsgenie.com`.
        #[serde(default)]
        url: Option<String>,
    },
}

impl TargetSpec {
    /// Whether the target keeps incidents open until a success closes them.
    pub fn incidents(&self) -> bool {
        matches!(self, TargetSpec::Pagerduty { .. } | TargetSpec::Opsgenie { .. })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RouteSpec {
    #[serde(default)]
    owner: Option<OneOrMany>,
    #[serde(default)]
    pipeline: Option<OneOrMany>,
    #[serde(default)]
    types: Option<Vec<String>>,
    to: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// One route, checked.
#[derive(Debug, Clone)]
pub struct Route {
    /// Owners (exact); empty: any.
    owners: Vec<String>,
    /// Pipeline ids, `*` matching any run of characters; empty: any.
    pipelines: Vec<String>,
    /// `None`: the quiet set (plus what resolves, for incident targets).
    types: Option<Vec<EventType>>,
    to: Vec<String>,
}

/// The routes file, checked: every route names known targets, every type is known.
#[derive(Debug, Clone)]
pub struct Routes {
    pub targets: BTreeMap<String, TargetSpec>,
    routes: Vec<Route>,
    unmatched: Vec<String>,
}

/// The owner of each pipeline, as its config says (`pipeline.owner`).
pub type Owners = HashMap<String, String>;

impl Routes {
    pub fn read(path: &Path) -> Result<Routes> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading --routes {}", path.display()))?;
        Routes::parse(&text).with_context(|| format!("in --routes {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Routes> {
        let file: File = crate::core::config::yaml::from_str(text).map_err(anyhow::Error::msg)?;
        if file.targets.is_empty() {
            bail!("no targets");
        }
        if file.targets.len() > MAX_TARGETS || file.routes.len() > MAX_ROUTES {
            bail!("at most {MAX_TARGETS} targets and {MAX_ROUTES} routes");
        }
        for (name, spec) in &file.targets {
            let named = !name.is_empty() && name.len() <= MAX_NAME;
            if !named || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                bail!("target name {name:?}: 1 to {MAX_NAME} letters, digits, '-' or '_' (it names the target's consumer group and state folder)");
            }
            check_target(name, spec)?;
        }
        let known = |list: &[String], what: &str| -> Result<()> {
            if list.is_empty() {
                bail!("{what}: `to` names no target");
            }
            for t in list {
                if !file.targets.contains_key(t) {
                    let names: Vec<&String> = file.targets.keys().collect();
                    bail!("{what}: unknown target {t:?} (targets: {names:?})");
                }
            }
            Ok(())
        };
        let mut routes = Vec::new();
        for (i, spec) in file.routes.into_iter().enumerate() {
            let what = format!("route {}", i + 1);
            known(&spec.to, &what)?;
            let types = match spec.types {
                None => None,
                Some(names) => Some(
                    names
                        .iter()
                        .map(|t| EventType::parse(t).with_context(|| format!("{what}: unknown event type {t:?}")))
                        .collect::<Result<Vec<_>>>()?,
                ),
            };
            let owners = spec.owner.map(OneOrMany::into_vec).unwrap_or_default();
            let pipelines = spec.pipeline.map(OneOrMany::into_vec).unwrap_or_default();
            if owners
                .iter()
                .chain(&pipelines)
                .any(|s| s.is_empty() || s.len() > MAX_TEXT)
            {
                bail!("{what}: an empty or over-long owner or pipeline");
            }
            routes.push(Route {
                owners,
                pipelines,
                types,
                to: spec.to,
            });
        }
        if !file.unmatched.is_empty() {
            known(&file.unmatched, "unmatched")?;
        }
        if routes.is_empty() && file.unmatched.is_empty() {
            bail!("no routes and no `unmatched` targets: nothing would be sent");
        }
        Ok(Routes {
            targets: file.targets,
            routes,
            unmatched: file.unmatched,
        })
    }

    /// Whether `target` gets `event`, given the pipelines' owners.
    pub fn sends(&self, target: &str, event: &Event, owners: &Owners) -> bool {
        let incidents = self.targets.get(target).is_some_and(TargetSpec::incidents);
        let wanted = |types: &Option<Vec<EventType>>| match types {
            Some(types) => types.contains(&event.kind),
            None => QUIET_TYPES.contains(&event.kind) || (incidents && RESOLVING_TYPES.contains(&event.kind)),
        };
        let owner = owners.get(event.pipeline_id.as_str());
        let matching: Vec<&Route> = self
            .routes
            .iter()
            .filter(|r| r.owners.is_empty() || owner.is_some_and(|o| r.owners.contains(o)))
            .filter(|r| r.pipelines.is_empty() || r.pipelines.iter().any(|p| wildcard(p, &event.pipeline_id)))
            .collect();
        if matching.is_empty() {
            return self.unmatched.iter().any(|t| t == target) && wanted(&None);
        }
        matching
            .iter()
            .any(|r| r.to.iter().any(|t| t == target) && wanted(&r.types))
    }

    /// One line: the targets and how many routes send to each.
    pub fn describe(&self) -> String {
        let targets: Vec<String> = self
            .targets
            .keys()
            .map(|t| {
                let routes = self.routes.iter().filter(|r| r.to.contains(t)).count();
                let unmatched = if self.unmatched.contains(t) { ", unmatched" } else { "" };
                format!("{t} ({routes} routes{unmatched})")
            })
            .collect();
        format!("{} targets: {}", targets.len(), targets.join(", "))
    }

    /// Whether any route looks at owners (then the config topic is read for them).
    pub fn needs_owners(&self) -> bool {
        self.routes.iter().any(|r| !r.owners.is_empty())
    }
}

fn check_target(name: &str, spec: &TargetSpec) -> Result<()> {
    let texts: Vec<&str> = match spec {
        TargetSpec::Slack {
            channel, mention, api, ..
        } => [Some(channel.as_str()), mention.as_deref(), api.as_deref()]
            .into_iter()
            .flatten()
            .collect(),
        TargetSpec::SlackWebhook { mention, .. } => mention.iter().map(String::as_str).collect(),
        TargetSpec::Webhook { url, headers } => std::iter::once(url.as_str())
            .chain(headers.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]))
            .collect(),
        TargetSpec::Pagerduty { url, .. } | TargetSpec::Opsgenie { url, .. } => {
            url.iter().map(String::as_str).collect()
        }
    };
    if texts.iter().any(|t| t.len() > MAX_TEXT) {
        bail!("target {name}: a value over {MAX_TEXT} bytes");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(pipeline: &str, kind: &str) -> Event {
        serde_json::from_value(json!({
            "eventId": "e", "type": kind, "category": "job", "pipelineId": pipeline,
            "timestamp": "2026-11-27T00:00:00Z", "message": "m"
        }))
        .unwrap()
    }

    const FILE: &str = r#"
targets:
  analytics: {type: slack, channel: C1, tokenFile: /t, mention: "<!subteam^S1>"}
  finance: {type: slack-webhook, urlFile: /u}
  oncall: {type: pagerduty, routingKeyFile: /k}
  everyone: {type: webhook, url: "http://x"}
routes:
  - owner: analytics-team
    to: [analytics, oncall]
  - pipeline: "fin-*-daily"
    types: [JOB_FAILED, JOB_COMPLETED]
    to: [finance]
unmatched: [everyone]
"#;

    #[test]
    fn routes_send_by_owner_pipeline_and_type_and_the_rest_goes_to_unmatched() {
        let routes = Routes::parse(FILE).unwrap();
        let owners: Owners = [("gold".to_string(), "analytics-team".to_string())].into();
        let sends = |target, pipeline, kind| routes.sends(target, &event(pipeline, kind), &owners);
        // By owner, quiet by default: failures yes, successes no, but the incident target
        // gets what resolves its incident.
        assert!(sends("analytics", "gold", "JOB_FAILED"));
        assert!(!sends("analytics", "gold", "JOB_COMPLETED"));
        assert!(sends("oncall", "gold", "JOB_COMPLETED"));
        assert!(!sends("finance", "gold", "JOB_FAILED"));
        // By pipeline pattern, only the types asked for.
        assert!(sends("finance", "fin-orders-daily", "JOB_COMPLETED"));
        assert!(!sends("finance", "fin-orders-daily", "SLA_BREACH"));
        assert!(!sends("finance", "fin-orders-hourly", "JOB_FAILED"));
        // Matched by a route, not unmatched; no route: the catch-all, quietly.
        assert!(!sends("everyone", "gold", "JOB_FAILED"));
        assert!(sends("everyone", "silver", "JOB_FAILED"));
        assert!(!sends("everyone", "silver", "JOB_COMPLETED"));
        // An owner unknown (no config read yet): not matched by owner.
        assert!(sends("everyone", "bronze", "SLA_BREACH"));
        assert!(routes.needs_owners());
    }

    #[test]
    fn a_routes_file_that_cannot_work_is_refused_naming_why() {
        let refused = |text: &str, says: &str| {
            let e = format!("{:#}", Routes::parse(text).unwrap_err());
            assert!(e.contains(says), "{e}");
        };
        refused("targets: {}\n", "no targets");
        refused(
            "targets: {a: {type: webhook, url: u}}\nroutes: [{to: [b]}]\n",
            "unknown target \"b\"",
        );
        refused(
            "targets: {a: {type: webhook, url: u}}\nroutes: [{to: [a], types: [NOPE]}]\n",
            "unknown event type",
        );
        refused("targets: {a: {type: webhook, url: u}}\n", "nothing would be sent");
        refused(
            "targets: {\"a b\": {type: webhook, url: u}}\nunmatched: [\"a b\"]\n",
            "target name",
        );
        refused(
            "targets: {a: {type: slack, channel: C, token: xoxb}}\nunmatched: [a]\n",
            "token",
        );
        refused("targets: {a: {type: email, to: x}}\nunmatched: [a]\n", "email");
    }
}
