//! The config file (`--config FILE`, env `SLUICE_CONFIG`): TOML holding any of the command
//! line's settings by their long flag name, and a `[kafka]` table of librdkafka properties.
//!
//! ```toml
//! brokers = "b-1.example:9096"
//! state-dir = "/var/lib/sluice"
//! batch-size = 500
//! allow-target = ["10.0.0.0/8"]
//!
//! [kafka]
//! "security.protocol" = "SASL_SSL"
//! "sasl.mechanism" = "SCRAM-SHA-512"
//! "sasl.username" = "sluice"
//! "sasl.password" = "${file:/run/secrets/kafka-password}"
//! ```
//!
//! Precedence: a flag, then the environment, then the file, then the default. The file's
//! settings become environment defaults (each flag's `SLUICE_*` variable, when unset) before
//! the command line is parsed, so every setting is read one way, by clap.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// What the file holds beyond the flags: the `[kafka]` table.
#[derive(Debug, Default)]
pub struct FileSettings {
    pub kafka: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("reading the config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The config file named by `--config` in `args` or by `SLUICE_CONFIG`, if any: its flags are
/// set as environment defaults (see the module docs), its `[kafka]` table returned. Call it
/// before any thread starts (it sets environment variables).
pub fn load(args: &[String]) -> Result<FileSettings, SettingsError> {
    let path = config_path(args).or_else(|| std::env::var_os("SLUICE_CONFIG").map(PathBuf::from));
    let Some(path) = path else {
        return Ok(FileSettings::default());
    };
    let text = std::fs::read_to_string(&path).map_err(|source| SettingsError::Read {
        path: path.clone(),
        source,
    })?;
    let (defaults, settings) = parse(&path, &text, &flag_envs())?;
    for (env, value) in defaults {
        if std::env::var_os(&env).is_none() {
            std::env::set_var(env, value);
        }
    }
    Ok(settings)
}

/// `--config PATH` or `--config=PATH` among the arguments.
fn config_path(args: &[String]) -> Option<PathBuf> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    None
}

/// Every flag that has an environment variable, by long name, over all commands. Where
/// another command has a flag of the same name for something else (`alerts --state-dir`),
/// the key means `run`'s: the file is first of all the processor's.
fn flag_envs() -> BTreeMap<String, String> {
    fn collect(command: &clap::Command, into: &mut BTreeMap<String, String>) {
        for arg in command.get_arguments() {
            if let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) {
                into.insert(long.to_string(), env.to_string_lossy().into_owned());
            }
        }
        for sub in command.get_subcommands() {
            collect(sub, into);
        }
    }
    let cli = crate::cli::Cli::command();
    let mut envs = BTreeMap::new();
    collect(&cli, &mut envs);
    if let Some(run) = cli.find_subcommand("run") {
        collect(run, &mut envs);
    }
    envs
}

/// The file's flags as (environment variable, value) and its `[kafka]` table.
fn parse(
    path: &Path,
    text: &str,
    envs: &BTreeMap<String, String>,
) -> Result<(Vec<(String, String)>, FileSettings), SettingsError> {
    let invalid = |message: String| SettingsError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| invalid(e.to_string()))?;
    let mut defaults = Vec::new();
    let mut settings = FileSettings::default();
    for (key, value) in table {
        if key == "kafka" {
            let toml::Value::Table(properties) = value else {
                return Err(invalid("[kafka] must be a table of librdkafka properties".into()));
            };
            for (name, value) in properties {
                let value = scalar(&value)
                    .ok_or_else(|| invalid(format!("kafka property {name}: expected a string, number or boolean")))?;
                settings.kafka.push((name, value));
            }
            continue;
        }
        let flag = key.replace('_', "-");
        if flag == "config" {
            return Err(invalid("`config` cannot name another config file".into()));
        }
        let env = envs.get(&flag).ok_or_else(|| {
            invalid(format!(
                "unknown setting {key:?} (settings are the long flags of `sluice --help` and `sluice run --help`, without the dashes; librdkafka properties go in [kafka])"
            ))
        })?;
        let value = match &value {
            toml::Value::Array(items) => items
                .iter()
                .map(|v| scalar(v).ok_or_else(|| invalid(format!("{key}: expected a list of strings or numbers"))))
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            v => scalar(v).ok_or_else(|| invalid(format!("{key}: expected a string, number, boolean or list")))?,
        };
        defaults.push((env.clone(), value));
    }
    Ok((defaults, settings))
}

fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<(Vec<(String, String)>, FileSettings), SettingsError> {
        parse(Path::new("sluice.toml"), text, &flag_envs())
    }

    #[test]
    fn flags_become_their_environment_variables_and_kafka_properties_are_kept() {
        let (defaults, settings) = parsed(
            r#"
            brokers = "b1:9092,b2:9092"
            state_dir = "/var/lib/sluice"
            batch-size = 250
            allow-target = ["10.0.0.0/8", "127.0.0.0/8"]
            [kafka]
            "security.protocol" = "SASL_SSL"
            "sasl.password" = "${file:/run/secrets/kafka}"
            "socket.keepalive.enable" = true
            "#,
        )
        .unwrap();
        let defaults: BTreeMap<_, _> = defaults.into_iter().collect();
        assert_eq!(defaults["SLUICE_BROKERS"], "b1:9092,b2:9092");
        assert_eq!(defaults["SLUICE_STATE_DIR"], "/var/lib/sluice");
        assert_eq!(defaults["SLUICE_BATCH_SIZE"], "250");
        assert_eq!(defaults["SLUICE_ALLOW_TARGETS"], "10.0.0.0/8,127.0.0.0/8");
        assert_eq!(
            settings.kafka,
            [
                ("sasl.password".into(), "${file:/run/secrets/kafka}".into()),
                ("security.protocol".into(), "SASL_SSL".into()),
                ("socket.keepalive.enable".into(), "true".into()),
            ]
        );
    }

    #[test]
    fn every_run_setting_can_come_from_the_file() {
        let envs = flag_envs();
        let run = crate::cli::Cli::command();
        let run = run.find_subcommand("run").unwrap();
        for arg in run.get_arguments() {
            if let Some(long) = arg.get_long() {
                assert!(
                    envs.contains_key(long),
                    "--{long} has no environment variable, so no config-file key"
                );
            }
        }
    }

    #[test]
    fn mistakes_name_the_file_and_the_key() {
        let e = parsed("bach-size = 3").unwrap_err().to_string();
        assert!(e.contains("sluice.toml") && e.contains("\"bach-size\""), "{e}");
        let e = parsed("brokers = { a = 1 }").unwrap_err().to_string();
        assert!(e.contains("brokers"), "{e}");
        let e = parsed("kafka = 3").unwrap_err().to_string();
        assert!(e.contains("[kafka]"), "{e}");
        assert!(parsed("brokers = ").is_err());
    }

    #[test]
    fn the_config_flag_is_found_in_either_spelling() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            config_path(&args(&["sluice", "--config", "a.toml", "run"])),
            Some("a.toml".into())
        );
        assert_eq!(
            config_path(&args(&["sluice", "run", "--config=b.toml"])),
            Some("b.toml".into())
        );
        assert_eq!(config_path(&args(&["sluice", "run", "--", "--config", "c"])), None);
    }
}
