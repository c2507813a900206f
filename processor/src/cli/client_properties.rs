//! `--command-config FILE`: the Java client properties file that Kafka's own tools take
//! (`kafka-topics --command-config client.properties`), read into librdkafka properties.
//!
//! Most names are the same in both clients. `sasl.jaas.config` is Java's way of giving SASL
//! credentials: its PLAIN and SCRAM login modules become `sasl.username`/`sasl.password`.
//! Java key stores (`ssl.truststore.*`, `ssl.keystore.*`) have no librdkafka equivalent
//! and are refused with the PEM settings to use instead, rather than ignored.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PropertiesError {
    #[error("reading --command-config {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("--command-config {path} line {line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// Java-only properties and what librdkafka takes instead.
const JAVA_ONLY: &[(&str, &str)] = &[
    ("ssl.truststore.", "ssl.ca.location (a PEM file)"),
    (
        "ssl.keystore.",
        "ssl.certificate.location and ssl.key.location (PEM files)",
    ),
    (
        "sasl.login.callback.handler.class",
        "sasl.oauthbearer.* (librdkafka's OIDC settings)",
    ),
    (
        "sasl.client.callback.handler.class",
        "sasl.oauthbearer.* (librdkafka's OIDC settings)",
    ),
];

/// Properties that belong to the command line, not to a client.
const COMMAND_LINE: &[(&str, &str)] = &[("bootstrap.servers", "--bootstrap-server (or --brokers)")];

/// Reads `path` as a Java properties file into librdkafka (name, value) pairs, in file order.
pub fn load(path: &Path) -> Result<Vec<(String, String)>, PropertiesError> {
    let text = std::fs::read_to_string(path).map_err(|source| PropertiesError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|(line, message)| PropertiesError::Invalid {
        path: path.to_path_buf(),
        line,
        message,
    })
}

/// The properties of `text`, or the (1-based) line of the first problem and what it is.
/// Secret values never appear in a message.
fn parse(text: &str) -> Result<Vec<(String, String)>, (usize, String)> {
    let mut properties = Vec::new();
    for (line, entry) in logical_lines(text) {
        let (name, value) = split_entry(&entry);
        if name.is_empty() {
            return Err((line, "expected NAME=VALUE".into()));
        }
        if let Some((_, instead)) = JAVA_ONLY.iter().find(|(p, _)| name.starts_with(p)) {
            return Err((
                line,
                format!("{name} is a Java client setting; librdkafka takes {instead}"),
            ));
        }
        if let Some((_, instead)) = COMMAND_LINE.iter().find(|(p, _)| name == *p) {
            return Err((line, format!("{name}: give it with {instead}")));
        }
        if name == "sasl.jaas.config" {
            let credentials = jaas_credentials(&value).map_err(|m| (line, format!("sasl.jaas.config: {m}")))?;
            properties.extend(credentials);
        } else {
            properties.push((name, value));
        }
    }
    Ok(properties)
}

/// Entries with their first line number: comments (`#`, `!`) and blank lines dropped, lines
/// ending in an odd number of backslashes joined with the next (leading blanks dropped).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut entries = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        let (start, mut entry) = match pending.take() {
            Some((start, so_far)) => (start, so_far + trimmed),
            None if trimmed.is_empty() || trimmed.starts_with(['#', '!']) => continue,
            None => (i + 1, trimmed.to_string()),
        };
        let trailing = entry.chars().rev().take_while(|c| *c == '\\').count();
        if trailing % 2 == 1 {
            entry.pop();
            pending = Some((start, entry));
        } else {
            entries.push((start, entry));
        }
    }
    entries.extend(pending);
    entries
}

/// Splits at the first unescaped `=`, `:` or blank, and unescapes both sides.
fn split_entry(entry: &str) -> (String, String) {
    let mut escaped = false;
    let mut cut = None;
    for (i, c) in entry.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '=' | ':' | ' ' | '\t' => {
                cut = Some(i);
                break;
            }
            _ => {}
        }
    }
    let Some(cut) = cut else {
        return (unescape(entry), String::new());
    };
    let rest = entry[cut..].trim_start_matches([' ', '\t']);
    let rest = rest
        .strip_prefix(['=', ':'])
        .map_or(rest, |r| r.trim_start_matches([' ', '\t']));
    (unescape(&entry[..cut]), unescape(rest.trim_end()))
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// `username`/`password` of a PLAIN or SCRAM login module, as librdkafka's properties.
fn jaas_credentials(jaas: &str) -> Result<Vec<(String, String)>, String> {
    let module = jaas.split_whitespace().next().unwrap_or_default();
    if !(module.ends_with("PlainLoginModule") || module.ends_with("ScramLoginModule")) {
        let module = if module.is_empty() { "none" } else { module };
        return Err(format!(
            "login module {module} is not supported: give PLAIN or SCRAM credentials, or set librdkafka's sasl.* properties (OAUTHBEARER: sasl.oauthbearer.*)"
        ));
    }
    let option = |name: &str| -> Result<String, String> {
        let at = jaas
            .find(&format!("{name}="))
            .ok_or_else(|| format!("{module} has no {name}"))?;
        let rest = &jaas[at + name.len() + 1..];
        let quoted = rest
            .strip_prefix('"')
            .and_then(|r| r.find('"').map(|end| r[..end].to_string()));
        quoted.ok_or_else(|| format!("{name} must be a double-quoted value"))
    };
    Ok(vec![
        ("sasl.username".to_string(), option("username")?),
        ("sasl.password".to_string(), option("password")?),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_kafka_tools_client_properties_file_becomes_librdkafka_properties() {
        let text = r#"
# Confluent Cloud, as its console writes it
security.protocol=SASL_SSL
sasl.mechanism = PLAIN
! another comment style
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
    username="ABCKEY" password="s3cr=t:pass";
session.timeout.ms: 45000
client.dns.lookup use_all_dns_ips
ssl.endpoint.identification.algorithm=https
"#;
        assert_eq!(
            parse(text).unwrap(),
            pairs(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", "ABCKEY"),
                ("sasl.password", "s3cr=t:pass"),
                ("session.timeout.ms", "45000"),
                ("client.dns.lookup", "use_all_dns_ips"),
                ("ssl.endpoint.identification.algorithm", "https"),
            ])
        );
        let scram = "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p\";";
        assert_eq!(
            parse(scram).unwrap(),
            pairs(&[("sasl.username", "u"), ("sasl.password", "p")])
        );
    }

    #[test]
    fn java_only_settings_are_refused_with_what_to_use_and_secrets_never_shown() {
        let (line, message) = parse("a=b\nssl.truststore.location=/etc/kafka/truststore.jks\n").unwrap_err();
        assert_eq!(line, 2);
        assert!(message.contains("ssl.ca.location"), "{message}");
        let (_, message) = parse("bootstrap.servers=b:9092").unwrap_err();
        assert!(message.contains("--bootstrap-server"), "{message}");
        let oauth = "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientSecret=\"hunter2\";";
        let (_, message) = parse(oauth).unwrap_err();
        assert!(
            message.contains("OAuthBearerLoginModule") && !message.contains("hunter2"),
            "{message}"
        );
        let unquoted = "sasl.jaas.config=x.PlainLoginModule required username=u password=hunter2;";
        let (_, message) = parse(unquoted).unwrap_err();
        assert!(
            message.contains("double-quoted") && !message.contains("hunter2"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_file_names_itself() {
        let e = load(Path::new("/nonexistent/client.properties"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/client.properties"), "{e}");
    }
}
