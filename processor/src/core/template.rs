//! `${NAME}` templates in job config.
//!
//! Three kinds of placeholder, resolved at three moments:
//! * deployment variables (`${environment}`): by `config apply --var name=value`;
//! * run variables (`${DATE}`, `${DATE_COMPACT}`, `${HOUR}`, `${PIPELINE}`, `${SCHEDULE}`,
//!   `${RUN_ID}`): by the core when it asks for a trigger ([`render_run`]);
//! * secrets (`${env:NAME}`): by the runtime at the moment of the request, so they never
//!   reach state, events or logs. `${INTERLOCK_NAME}` (Interlock's spelling: it expanded
//!   environment variables whose names start with `INTERLOCK_`, internal/trigger/trigger.go)
//!   is the same secret as `${env:INTERLOCK_NAME}`: [`render_value`] hands every lookup the
//!   `env:` form ([`canonical`]), so whatever resolves `env:` secrets resolves both alike.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

use super::execution::ExecutionId;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    #[error("unclosed ${{ in {0:?}")]
    Unclosed(String),
    #[error("empty ${{}} in {0:?}")]
    Empty(String),
}

pub const RUN_VARIABLES: [&str; 6] = ["DATE", "DATE_COMPACT", "HOUR", "PIPELINE", "SCHEDULE", "RUN_ID"];

/// The prefix of the environment variables Interlock expanded in job settings.
pub const INTERLOCK_PREFIX: &str = "INTERLOCK_";

/// True for placeholders resolved after apply time: run variables and secrets (`env:NAME`,
/// `INTERLOCK_NAME`).
pub fn is_builtin(name: &str) -> bool {
    RUN_VARIABLES.contains(&name) || name.starts_with("env:") || name.starts_with(INTERLOCK_PREFIX)
}

/// The name a lookup sees for a placeholder: `INTERLOCK_NAME` becomes `env:INTERLOCK_NAME`
/// (the same environment variable, read at request time); every other name is unchanged.
pub fn canonical(name: &str) -> Cow<'_, str> {
    if name.starts_with(INTERLOCK_PREFIX) {
        Cow::Owned(format!("env:{name}"))
    } else {
        Cow::Borrowed(name)
    }
}

/// The names of every `${...}` in `text`, in order.
pub fn placeholders(text: &str) -> Result<Vec<String>, TemplateError> {
    let mut names = Vec::new();
    scan(text, |name| {
        names.push(name.to_string());
        None
    })?;
    Ok(names)
}

/// Replaces the placeholders for which `lookup` has a value; the rest stay as written.
fn scan(text: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| TemplateError::Unclosed(text.to_string()))?;
        let name = after[..end].trim();
        if name.is_empty() {
            return Err(TemplateError::Empty(text.to_string()));
        }
        match lookup(name) {
            Some(value) => out.push_str(&value),
            None => out.push_str(&rest[start..start + 2 + end + 1]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Applies `lookup` to every string inside a JSON value; `lookup` sees each name in its
/// [`canonical`] form.
pub fn render_value(value: &Value, lookup: &mut dyn FnMut(&str) -> Option<String>) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(s) => Value::String(scan(s, |name| lookup(&canonical(name)))?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| render_value(v, lookup))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render_value(v, lookup)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

/// Substitutes deployment variables; returns the names still unresolved.
pub fn substitute_deployment(
    value: &Value,
    vars: &BTreeMap<String, String>,
) -> Result<(Value, Vec<String>), TemplateError> {
    let mut unresolved = Vec::new();
    let out = render_value(value, &mut |name| {
        if is_builtin(name) {
            return None;
        }
        let found = vars.get(name).cloned();
        if found.is_none() && !unresolved.iter().any(|n| n == name) {
            unresolved.push(name.to_string());
        }
        found
    })?;
    Ok((out, unresolved))
}

/// The run variables of one job attempt.
#[derive(Debug, Clone)]
pub struct RunVariables<'a> {
    pub pipeline: &'a str,
    pub execution: &'a ExecutionId,
    pub run_id: &'a str,
}

/// Expands run variables; secrets (`${env:...}`, `${INTERLOCK_...}`) are left for the runtime.
pub fn render_run(value: &Value, run: &RunVariables<'_>) -> Result<Value, TemplateError> {
    let date = run.execution.date();
    render_value(value, &mut |name| match name {
        "DATE" => Some(date.whole_day().to_string()),
        // Interlock's `par_day` (internal/lambda/orchestrator/trigger.go).
        "DATE_COMPACT" => Some(date.compact_day()),
        "HOUR" => Some(date.hour.map(|h| format!("{h:02}")).unwrap_or_default()),
        "PIPELINE" => Some(run.pipeline.to_string()),
        "SCHEDULE" => Some(run.execution.schedule().to_string()),
        "RUN_ID" => Some(run.run_id.to_string()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::execution::{id, ExecutionDate};
    use serde_json::json;

    #[test]
    fn finds_every_placeholder() {
        assert_eq!(
            placeholders("a ${DATE} b ${env:TOKEN}${x}").unwrap(),
            ["DATE", "env:TOKEN", "x"]
        );
        assert!(matches!(placeholders("oops ${DATE"), Err(TemplateError::Unclosed(_))));
        assert!(matches!(placeholders("${}"), Err(TemplateError::Empty(_))));
    }

    #[test]
    fn deployment_variables_resolve_and_report_the_missing() {
        let vars = BTreeMap::from([("environment".to_string(), "prod".to_string())]);
        let config = json!({"url": "https://${environment}.example/${DATE}", "h": ["${region}"]});
        let (out, missing) = substitute_deployment(&config, &vars).unwrap();
        assert_eq!(out, json!({"url": "https://prod.example/${DATE}", "h": ["${region}"]}));
        assert_eq!(missing, ["region"]);
    }

    #[test]
    fn run_variables_expand_and_secrets_stay() {
        let run = RunVariables {
            pipeline: "p",
            execution: &id("stream", "2026-03-03T10"),
            run_id: "r1",
        };
        let out = render_run(
            &json!({"body": "${PIPELINE}/${DATE}/${HOUR}/${RUN_ID}/${SCHEDULE} ${env:SECRET}"}),
            &run,
        )
        .unwrap();
        assert_eq!(out, json!({"body": "p/2026-03-03/10/r1/stream ${env:SECRET}"}));
    }

    #[test]
    fn date_compact_is_the_day_without_dashes_daily_or_hourly() {
        let config = json!({"args": ["--par_day=${DATE_COMPACT}", "${HOUR}", "${DATE}"]});
        for (date, expect) in [
            ("2026-03-03", json!({"args": ["--par_day=20260303", "", "2026-03-03"]})),
            (
                "2026-03-03T10",
                json!({"args": ["--par_day=20260303", "10", "2026-03-03"]}),
            ),
        ] {
            let run = RunVariables {
                pipeline: "p",
                execution: &id("cron", date),
                run_id: "r1",
            };
            assert_eq!(render_run(&config, &run).unwrap(), expect, "{date}");
        }
        assert!(is_builtin("DATE_COMPACT"));
        let hourly = ExecutionDate::canonical("2026-03-03T10").unwrap();
        assert_eq!(
            (hourly.whole_day().to_string(), hourly.hour),
            ("2026-03-03".to_string(), Some(10))
        );
        let daily = ExecutionDate::canonical("2026-03-03").unwrap();
        assert_eq!(
            (daily.whole_day().to_string(), daily.hour),
            ("2026-03-03".to_string(), None)
        );
        assert_eq!(daily.compact_day(), "20260303");
    }

    #[test]
    fn interlock_variables_are_env_secrets() {
        assert!(is_builtin("INTERLOCK_TOKEN"));
        assert!(!is_builtin("INTERLOCKED"), "only the INTERLOCK_ prefix");
        assert_eq!(canonical("INTERLOCK_TOKEN"), "env:INTERLOCK_TOKEN");
        assert_eq!(canonical("env:TOKEN"), "env:TOKEN");
        assert_eq!(canonical("DATE"), "DATE");
        // Not a deployment variable, and left for the runtime by the run variables.
        let config = json!({"h": "Bearer ${INTERLOCK_TOKEN}", "d": "${DATE}"});
        let (out, missing) = substitute_deployment(&config, &BTreeMap::new()).unwrap();
        assert_eq!((out, missing), (config.clone(), vec![]));
        let run = RunVariables {
            pipeline: "p",
            execution: &id("stream", "2026-03-03"),
            run_id: "r1",
        };
        let rendered = render_run(&config, &run).unwrap();
        assert_eq!(rendered, json!({"h": "Bearer ${INTERLOCK_TOKEN}", "d": "2026-03-03"}));
        // A resolver of `env:` secrets (as the runtime's is) resolves both spellings alike,
        // and sees an unset one under its `env:` name.
        let environment = BTreeMap::from([("INTERLOCK_TOKEN", "t0k")]);
        let mut asked = Vec::new();
        let out = render_value(
            &json!(["${INTERLOCK_TOKEN}", "${env:INTERLOCK_TOKEN}", "${INTERLOCK_UNSET}"]),
            &mut |name| {
                asked.push(name.to_string());
                let var = name.strip_prefix("env:")?;
                environment.get(var).map(|v| v.to_string())
            },
        )
        .unwrap();
        assert_eq!(out, json!(["t0k", "t0k", "${INTERLOCK_UNSET}"]));
        assert_eq!(
            asked,
            ["env:INTERLOCK_TOKEN", "env:INTERLOCK_TOKEN", "env:INTERLOCK_UNSET"]
        );
        assert_eq!(
            placeholders("${INTERLOCK_TOKEN}").unwrap(),
            ["INTERLOCK_TOKEN"],
            "names are reported as written"
        );
    }
}
