//! Which secrets a job may read, and keeping them out of what it reports.
//!
//! - `${env:NAME}` (and `${INTERLOCK_NAME}`) resolves only names the operator allowed
//!   (`run --allow-env NAME`, a trailing `*` matching a prefix): a pipeline config is
//!   written by many teams, and without the list any of them could send the processor's
//!   own Kafka, registry or cloud credentials to a URL of their choosing.
//! - What a job reports (a command's output, a target's error) passes through a
//!   [`Redactor`] holding the values it resolved and the processor's own credentials, so an
//!   echoed secret reaches events and job records as `***`.
//! - The API shows a config's secrets as their `${env:NAME}` placeholders; one written
//!   literally into a config ([`hide_literal_secrets`]) as `***`.

use serde_json::Value;

use crate::core::config::JobConfig;
use crate::core::template::{canonical, placeholders, render_value};

/// What a redacted secret is replaced with.
pub const REDACTED: &str = "***";
/// Values shorter than this are not redacted: replacing every `ab` in a command's output
/// would garble it and hide nothing worth hiding.
const MIN_REDACTED_LEN: usize = 4;
/// The same for variables taken for credentials by their names only: `SOME_TOKEN_MODE=true`
/// must not hide every `true`.
const MIN_GUESSED_LEN: usize = 8;

/// The `${env:NAME}` names jobs may read (`--allow-env`), and the processor's credentials
/// to redact from reports.
#[derive(Clone, Default)]
pub struct SecretPolicy {
    allowed: Vec<String>,
    credentials: Vec<String>,
}

impl SecretPolicy {
    /// `allowed`: names, or prefixes ending in `*` (`PARTNER_*`; `*` alone allows all).
    /// `credentials`: values of the processor's own secrets (its Kafka properties'); the
    /// values of its environment variables named like credentials are added.
    pub fn new(allowed: Vec<String>, mut credentials: Vec<String>) -> Self {
        credentials.extend(
            std::env::vars()
                .filter(|(name, value)| names_a_credential(name) && value.len() >= MIN_GUESSED_LEN)
                .map(|(_, value)| value),
        );
        SecretPolicy { allowed, credentials }
    }

    pub fn allows(&self, name: &str) -> bool {
        self.allowed.iter().any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => pattern == name,
        })
    }

    /// Expands `${env:NAME}` from the environment, for allowed names; also the redactor
    /// for the call's reports. Errors name the variables, never a value.
    pub fn resolve(&self, config: &JobConfig) -> Result<(JobConfig, Redactor), String> {
        let (mut missing, mut refused, mut values) = (Vec::new(), Vec::new(), Vec::new());
        let resolved = config
            .rendered(|json| {
                render_value(json, &mut |name| {
                    let var = name.strip_prefix("env:")?;
                    if !self.allows(var) {
                        if !refused.iter().any(|r| r == var) {
                            refused.push(var.to_string());
                        }
                        return None;
                    }
                    let value = std::env::var(var).ok();
                    match &value {
                        Some(v) => values.push(v.clone()),
                        None => missing.push(var.to_string()),
                    }
                    value
                })
            })
            .map_err(|e| e.to_string())?;
        if !refused.is_empty() {
            let flags: Vec<String> = refused.iter().map(|n| format!("--allow-env {n}")).collect();
            return Err(format!(
                "secret environment variable(s) not allowed on this processor: {} (start it with {})",
                refused.join(", "),
                flags.join(" ")
            ));
        }
        if !missing.is_empty() {
            return Err(format!(
                "secret environment variable(s) not set: {}",
                missing.join(", ")
            ));
        }
        values.extend(self.credentials.iter().cloned());
        Ok((resolved, Redactor::new(values)))
    }
}

/// Replaces, in a pipeline config's JSON, the values of settings that hold secrets (every
/// `headers` and `env` entry; `token`, `password`, `secret`, `apiKey` and the like) that
/// read no `${env:NAME}` secret: such a value is the secret itself. In any URL, so too the
/// user info and the values of query parameters named like a credential
/// (`https://user:pw@host/?token=…`).
pub fn hide_literal_secrets(value: &mut Value) {
    let Value::Object(map) = value else {
        match value {
            Value::Array(items) => items.iter_mut().for_each(hide_literal_secrets),
            Value::String(text) => {
                if let Some(hidden) = hide_url_secrets(text) {
                    *text = hidden;
                }
            }
            _ => {}
        }
        return;
    };
    for (key, value) in map.iter_mut() {
        let lower = key.to_ascii_lowercase();
        match value {
            Value::Object(entries) if lower == "headers" || lower == "env" => {
                entries.values_mut().for_each(hide_literal);
            }
            value
                if ["token", "password", "secret", "apikey", "api_key"]
                    .iter()
                    .any(|s| lower.contains(s)) =>
            {
                hide_literal(value)
            }
            value => hide_literal_secrets(value),
        }
    }
}

/// Query parameters whose values are credentials: AWS and Azure signatures, OAuth codes
/// and tokens, API keys.
const CREDENTIAL_PARAMETERS: [&str; 9] = [
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "sig",
    "signature",
    "credential",
    "auth",
];

/// `text` with its URL's literal credentials hidden, when it is a URL holding any; `None`
/// otherwise. A placeholder (`${env:NAME}`, `${DATE}`) is no secret and stays as written.
fn hide_url_secrets(text: &str) -> Option<String> {
    // Placeholders stand in as plain words while the URL is parsed: their `:` and braces
    // would otherwise be read as URL syntax.
    let mut originals = Vec::new();
    let mut masked = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start..].find('}') else { break };
        masked.push_str(&rest[..start]);
        masked.push_str(&format!("sluiceplaceholder{}x", originals.len()));
        originals.push(&rest[start..start + len + 1]);
        rest = &rest[start + len + 1..];
    }
    masked.push_str(rest);
    let mut url = url::Url::parse(&masked).ok().filter(|u| !u.cannot_be_a_base())?;
    let literal = |value: &str| !value.is_empty() && !value.contains("sluiceplaceholder");
    let mut changed = false;
    if literal(url.username()) {
        changed |= url.set_username(REDACTED).is_ok();
    }
    if url.password().is_some_and(literal) {
        changed |= url.set_password(Some(REDACTED)).is_ok();
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let lower = name.to_ascii_lowercase();
                let secret = CREDENTIAL_PARAMETERS.iter().any(|c| lower.contains(c)) && literal(&value);
                changed |= secret;
                (
                    name.into_owned(),
                    if secret {
                        REDACTED.to_string()
                    } else {
                        value.into_owned()
                    },
                )
            })
            .collect();
        if changed {
            url.query_pairs_mut().clear().extend_pairs(pairs);
        }
    }
    if !changed {
        return None;
    }
    // Restored last first, so `…1x` is not found inside `…10x`.
    let mut hidden = url.to_string();
    for (i, original) in originals.iter().enumerate().rev() {
        hidden = hidden.replace(&format!("sluiceplaceholder{i}x"), original);
    }
    Some(hidden)
}

fn hide_literal(value: &mut Value) {
    let reads_a_secret =
        |text: &str| placeholders(text).is_ok_and(|names| names.iter().any(|n| canonical(n).starts_with("env:")));
    match value {
        Value::String(text) if reads_a_secret(text) => {}
        Value::Null => {}
        other => *other = Value::String(REDACTED.into()),
    }
}

/// Environment variables whose values are the processor's credentials (AWS keys, Kafka
/// and registry passwords, Slack and API tokens), by name.
fn names_a_credential(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    [
        "PASSWORD",
        "SECRET",
        "TOKEN",
        "CREDENTIAL",
        "ACCESS_KEY",
        "API_KEY",
        "USER_INFO",
    ]
    .iter()
    .any(|part| name.contains(part))
}

// Both hold secret values: their Debug output shows how many, never which.
impl std::fmt::Debug for SecretPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretPolicy")
            .field("allowed", &self.allowed)
            .field("credentials", &self.credentials.len())
            .finish()
    }
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor").field("values", &self.values.len()).finish()
    }
}

/// Replaces known secret values in texts with [`REDACTED`].
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret containing another is replaced whole.
    values: Vec<String>,
}

impl Redactor {
    /// Redacts nothing: for calls made outside the executor (tests, tools).
    pub fn none() -> &'static Redactor {
        static NONE: Redactor = Redactor { values: Vec::new() };
        &NONE
    }

    pub fn new(mut values: Vec<String>) -> Self {
        values.retain(|v| v.len() >= MIN_REDACTED_LEN);
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Redactor { values }
    }

    pub fn redact(&self, text: &str) -> String {
        self.values
            .iter()
            .fold(text.to_string(), |text, secret| text.replace(secret.as_str(), REDACTED))
    }

    /// Redacts every string in `value`, in place.
    pub fn redact_value(&self, value: &mut Value) {
        match value {
            Value::String(s) => *s = self.redact(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.redact_value(v)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::config::JobKind;

    fn command(config: Value) -> JobConfig {
        JobConfig::from_json(JobKind::Command, &config).unwrap()
    }

    #[test]
    fn allowed_names_are_exact_or_a_prefix() {
        let policy = SecretPolicy::new(vec!["DW_TOKEN".into(), "PARTNER_*".into()], vec![]);
        assert!(policy.allows("DW_TOKEN"));
        assert!(policy.allows("PARTNER_KEY"));
        assert!(!policy.allows("DW_TOKEN_2"));
        assert!(!policy.allows("KAFKA_SASL_PASSWORD"));
        assert!(!SecretPolicy::default().allows("PATH"));
        assert!(SecretPolicy::new(vec!["*".into()], vec![]).allows("ANYTHING"));
    }

    #[test]
    fn secrets_resolve_only_when_allowed_and_errors_name_not_show() {
        // PATH is set in every test environment; the other name is not.
        let path = std::env::var("PATH").unwrap();
        let allowed = SecretPolicy::new(vec!["PATH".into(), "SLUICE_SURELY_*".into()], vec![]);
        let config = command(json!({"command": "${env:PATH}", "b": "x-${env:SLUICE_SURELY_UNSET_VAR}"}));
        let error = allowed.resolve(&config).unwrap_err();
        assert_eq!(error, "secret environment variable(s) not set: SLUICE_SURELY_UNSET_VAR");
        let (resolved, redactor) = allowed.resolve(&command(json!({"command": "${env:PATH}"}))).unwrap();
        assert_eq!(resolved.json()["command"], json!(path));
        assert_eq!(redactor.redact(&format!("echo {path}!")), "echo ***!");

        let refused = SecretPolicy::default()
            .resolve(&command(json!({"command": "echo ${env:PATH} ${INTERLOCK_TOKEN}"})))
            .unwrap_err();
        assert_eq!(
            refused,
            "secret environment variable(s) not allowed on this processor: PATH, INTERLOCK_TOKEN \
             (start it with --allow-env PATH --allow-env INTERLOCK_TOKEN)"
        );
        assert!(!refused.contains(&path));
    }

    #[test]
    fn redaction_replaces_every_known_value_longest_first_and_skips_short_ones() {
        let redactor = Redactor::new(vec!["s3cret".into(), "s3cret-longer".into(), "ab".into()]);
        assert_eq!(redactor.redact("a s3cret-longer, a s3cret, ab"), "a ***, a ***, ab");
        let mut value = json!({"stderr": "token s3cret", "n": 1, "list": ["s3cret"]});
        redactor.redact_value(&mut value);
        assert_eq!(value, json!({"stderr": "token ***", "n": 1, "list": ["***"]}));
    }

    #[test]
    fn the_api_shows_secret_placeholders_and_hides_literal_secrets() {
        let mut config = json!({
            "pipeline": {"id": "p", "description": "token rotation"},
            "job": {"type": "airflow", "config": {
                "url": "https://airflow",
                "password": "hunter22",
                "token": "${env:AIRFLOW_TOKEN}",
                "headers": {"Authorization": "Bearer abc123", "X-Key": "${INTERLOCK_KEY}", "X-Day": "${DATE}"},
                "env": {"PARTNER": "${env:PARTNER_KEY}", "PLAIN": "literal"},
            }},
            "validation": {"rules": [{"key": "k", "evaluator": {"type": "http", "url": "https://x",
                "headers": {"apiKey": "lit3ral"}}}]},
        });
        hide_literal_secrets(&mut config);
        assert_eq!(
            config,
            json!({
                "pipeline": {"id": "p", "description": "token rotation"},
                "job": {"type": "airflow", "config": {
                    "url": "https://airflow",
                    "password": "***",
                    "token": "${env:AIRFLOW_TOKEN}",
                    "headers": {"Authorization": "***", "X-Key": "${INTERLOCK_KEY}", "X-Day": "***"},
                    "env": {"PARTNER": "${env:PARTNER_KEY}", "PLAIN": "***"},
                }},
                "validation": {"rules": [{"key": "k", "evaluator": {"type": "http", "url": "https://x",
                    "headers": {"apiKey": "***"}}}]},
            })
        );
    }

    #[test]
    fn the_api_hides_credentials_written_into_urls() {
        let mut config = json!({"job": {"type": "http", "config": {
            "url": "https://deploy:hunter22@ci.example/hooks/run?job=gold&token=abc123&X-Amz-Signature=f00d",
            "statusUrl": "https://${env:CI_USER}:${env:CI_PASS}@ci.example/status?day=${DATE}",
            "callback": "https://ci.example/done?day=${DATE}&apiKey=k3y",
            "body": ["https://ghp_T0KEN@git.example/repo.git", "not a url"],
        }}});
        hide_literal_secrets(&mut config);
        let job = &config["job"]["config"];
        assert_eq!(
            job["url"],
            "https://***:***@ci.example/hooks/run?job=gold&token=***&X-Amz-Signature=***"
        );
        assert_eq!(
            job["statusUrl"], "https://${env:CI_USER}:${env:CI_PASS}@ci.example/status?day=${DATE}",
            "placeholders are no secret, and a URL without one is left as written"
        );
        assert_eq!(job["callback"], "https://ci.example/done?day=${DATE}&apiKey=***");
        assert_eq!(job["body"], json!(["https://***@git.example/repo.git", "not a url"]));
    }

    #[test]
    fn the_processors_credentials_are_redacted_too() {
        let policy = SecretPolicy::new(vec![], vec!["kafka-pa55word".into()]);
        let (_, redactor) = policy.resolve(&command(json!({"command": "true"}))).unwrap();
        assert_eq!(redactor.redact("got kafka-pa55word"), "got ***");
        assert!(names_a_credential("KAFKA_SASL_PASSWORD"));
        assert!(names_a_credential("AWS_SECRET_ACCESS_KEY"));
        assert!(names_a_credential("SLACK_BOT_TOKEN"));
        assert!(!names_a_credential("PATH"));
    }
}
