//! `${NAME}` templates in job config.
//!
//! Three kinds of placeholder, resolved at three moments:
//! * deployment variables (`${environment}`): by `config apply --var name=value`;
//! * run variables (`${DATE}`, `${HOUR}`, `${PIPELINE}`, `${SCHEDULE}`, `${RUN_ID}`): by the
//!   core when it asks for a trigger ([`render_run`]);
//! * secrets (`${env:NAME}`): by the runtime at the moment of the request, so they never
//!   reach state, events or logs.

use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    #[error("unclosed ${{ in {0:?}")]
    Unclosed(String),
    #[error("empty ${{}} in {0:?}")]
    Empty(String),
}

pub const RUN_VARIABLES: [&str; 5] = ["DATE", "HOUR", "PIPELINE", "SCHEDULE", "RUN_ID"];

/// True for placeholders resolved after apply time: run variables and `env:` secrets.
pub fn is_builtin(name: &str) -> bool {
    RUN_VARIABLES.contains(&name) || name.starts_with("env:")
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

/// Applies `lookup` to every string inside a JSON value.
pub fn render_value(value: &Value, lookup: &mut dyn FnMut(&str) -> Option<String>) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(s) => Value::String(scan(s, &mut *lookup)?),
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
    pub schedule: &'a str,
    /// The execution date, `YYYY-MM-DD` or `YYYY-MM-DDTHH`.
    pub date: &'a str,
    pub run_id: &'a str,
}

/// Expands run variables; `${env:...}` is left for the runtime.
pub fn render_run(value: &Value, run: &RunVariables<'_>) -> Result<Value, TemplateError> {
    let (day, hour) = match run.date.split_once('T') {
        Some((d, h)) => (d, h),
        None => (run.date, ""),
    };
    render_value(value, &mut |name| match name {
        "DATE" => Some(day.to_string()),
        "HOUR" => Some(hour.to_string()),
        "PIPELINE" => Some(run.pipeline.to_string()),
        "SCHEDULE" => Some(run.schedule.to_string()),
        "RUN_ID" => Some(run.run_id.to_string()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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
            schedule: "stream",
            date: "2026-03-03T10",
            run_id: "r1",
        };
        let out = render_run(
            &json!({"body": "${PIPELINE}/${DATE}/${HOUR}/${RUN_ID}/${SCHEDULE} ${env:SECRET}"}),
            &run,
        )
        .unwrap();
        assert_eq!(out, json!({"body": "p/2026-03-03/10/r1/stream ${env:SECRET}"}));
    }
}
