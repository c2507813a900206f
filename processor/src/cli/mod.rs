//! The `sluice` command line: one binary for the processor and the tools around it, one file
//! per command. Commands use [`crate::runtime`] (and through it [`crate::core`]), and
//! `alerts` the alert delivery service [`crate::alerts`]; nothing in the runtime or the
//! service uses the command line (`main.rs` → `cli` → `alerts`/`runtime` → `core`, never
//! upward; the `layers` test in `lib.rs` checks it).

pub mod alerts;
pub mod archetypes;
pub mod args;
pub mod calendars;
pub mod client_properties;
pub mod config;
pub mod events;
pub mod job;
pub mod replay;
pub mod rerun;
pub mod reset;
pub mod run;
pub mod sensor;
pub mod settings_file;
pub mod status;
pub mod topics;
pub mod traits;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::Value;

use crate::cli::client_properties::{ClientProperties, RegistryProperties};
use crate::core::records::CommandKind;
use crate::runtime::codec::{Codec, Family, Formats, Registry, RegistrySettings};
use crate::runtime::kafka::{self, Connection, Quirks};
use crate::runtime::observability::{self, LogFormat};
use crate::runtime::topics::Topics;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Pipeline safety controller on Kafka",
    propagate_version = true
)]
pub(crate) struct Cli {
    /// A TOML file of settings: any long flag by name (`state-dir = "/var/lib/sluice"`) and a
    /// `[kafka]` table of librdkafka properties. Flags and the environment override it.
    #[arg(long, global = true, env = "SLUICE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Kafka bootstrap servers [default: `bootstrap.servers` of --command-config, else
    /// localhost:9092].
    #[arg(long, visible_alias = "bootstrap-server", global = true, env = "SLUICE_BROKERS")]
    brokers: Option<String>,
    /// A Java client properties file, as Kafka's own tools take and Confluent Cloud's
    /// console hands out (`bootstrap.servers`, `security.protocol`, `sasl.jaas.config` with
    /// PLAIN or SCRAM credentials, PKCS#12 key stores, `schema.registry.url` and
    /// `basic.auth.*`): read over the config file's `[kafka]` table, under
    /// `--kafka-property` and the `--schema-registry-*` flags.
    #[arg(long, global = true, env = "SLUICE_COMMAND_CONFIG", value_name = "FILE")]
    command_config: Option<PathBuf>,
    /// A librdkafka property for every Kafka client (TLS, SASL, timeouts), e.g.
    /// `security.protocol=SASL_SSL`; repeatable, over the config file's `[kafka]` table. A
    /// value `${env:NAME}` or `${file:PATH}` is read from there (for secrets).
    #[arg(long = "kafka-property", global = true, value_name = "NAME=VALUE", value_parser = args::parse_var)]
    kafka_properties: Vec<(String, String)>,
    /// Workarounds for a broker with known bugs: `none` for Kafka (and brokers that behave
    /// like it), `tansu` for the local test broker (see the README's Kafka section).
    #[arg(long, global = true, env = "SLUICE_BROKER_QUIRKS", value_enum, default_value_t = Quirks::None)]
    broker_quirks: Quirks,
    /// Prefix of every Sluice topic.
    #[arg(long, global = true, env = "SLUICE_TOPIC_PREFIX", default_value = "sluice.")]
    topic_prefix: String,
    /// Log filter (tracing's EnvFilter syntax), e.g. info or sluice=debug.
    #[arg(long, global = true, env = "SLUICE_LOG", default_value = "info")]
    log: String,
    /// Log lines as readable text or as JSON objects (pipeline, execution and run ids in
    /// their span fields). Traces and metrics also go over OTLP when
    /// OTEL_EXPORTER_OTLP_ENDPOINT is set.
    #[arg(long, global = true, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    log_format: LogFormat,
    /// How records are written, per family: `json` (default), `avro`, or `json-connect`
    /// (JSON in Kafka Connect's schema/payload envelope); `avro` alone sets every family,
    /// `events=json-connect` one (families: events, sensors, jobs, commands). Comma-separated
    /// or repeated. Records are read in any of these formats whatever this says.
    #[arg(
        long = "format",
        global = true,
        env = "SLUICE_FORMAT",
        value_name = "[FAMILY=]FORMAT",
        value_delimiter = ','
    )]
    formats: Vec<String>,
    /// Schema registry base URL: Avro records are then framed with the registry's schema id
    /// (subject <topic>-value), and schemas registered on startup. Without it, Avro uses
    /// single-object encoding. User info in it (`https://USER:PASSWORD@host`) is taken as
    /// basic auth and never shown.
    #[arg(long, global = true, env = "SLUICE_SCHEMA_REGISTRY_URL", value_name = "URL")]
    schema_registry_url: Option<String>,
    /// Basic auth for the schema registry, as `USER:PASSWORD` (Confluent's
    /// `basic.auth.user.info`); `${env:NAME}` or `${file:PATH}` reads it from there.
    #[arg(
        long,
        global = true,
        env = "SLUICE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO",
        value_name = "USER:PASSWORD"
    )]
    schema_registry_basic_auth_user_info: Option<String>,
    /// A bearer token for the schema registry; `${env:NAME}` or `${file:PATH}` reads it from
    /// there.
    #[arg(
        long,
        global = true,
        env = "SLUICE_SCHEMA_REGISTRY_BEARER_TOKEN",
        value_name = "TOKEN"
    )]
    schema_registry_bearer_token: Option<String>,
    /// `false` for a governed registry: Sluice registers nothing, and writes with each
    /// subject's latest version (Confluent's `auto.register.schemas=false` with
    /// `use.latest.version=true`), stopping at startup if that version cannot hold Sluice's
    /// records [default: --command-config's `auto.register.schemas`, else true].
    #[arg(
        long,
        global = true,
        env = "SLUICE_SCHEMA_REGISTRY_AUTO_REGISTER",
        value_name = "BOOL",
        action = clap::ArgAction::Set
    )]
    schema_registry_auto_register: Option<bool>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the processor.
    Run(run::RunArgs),
    /// Create or check topics from their definitions.
    Topics {
        #[command(subcommand)]
        command: topics::TopicsCommand,
    },
    /// Validate pipeline configs, or publish them to the config topic.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// Publish sensor readings.
    Sensor {
        #[command(subcommand)]
        command: sensor::SensorCommand,
    },
    /// Publish job run reports (what a job runner does).
    Job {
        #[command(subcommand)]
        command: job::JobCommand,
    },
    /// Ask for an execution to run again: RERUN_ACCEPTED or RERUN_REJECTED (with the reason)
    /// follows on the events topic.
    Rerun(rerun::ExecutionCommandArgs),
    /// Start each date from FROM to TO on purpose, older than the execution retention too
    /// (a rerun with `backfill`): RERUN_ACCEPTED or RERUN_REJECTED follows for each.
    Backfill(rerun::BackfillArgs),
    /// Stop evaluating or watching an execution: RUN_CANCELLED follows on the events topic.
    Cancel(rerun::ExecutionCommandArgs),
    /// Tell people: post lifecycle events to Slack (threaded per execution), webhooks,
    /// PagerDuty or Opsgenie, routed by owner, pipeline and type.
    Alerts {
        #[command(subcommand)]
        command: alerts::AlertsCommand,
    },
    /// Show pipelines and their executions, from a running instance's HTTP API.
    Status(status::StatusArgs),
    /// Read lifecycle events.
    Events {
        #[command(subcommand)]
        command: events::EventsCommand,
    },
    /// Run the decider again over recorded inputs, in event time, effects off: what did
    /// (or would, with --pipelines) the configs decide? --diff compares with what happened.
    Replay(replay::ReplayArgs),
    /// Put a stopped consumer group back to a point in time, state and input offsets
    /// together, so that the next start reprocesses from there (it prints the plan; --execute carries it out).
    Reset(reset::ResetArgs),
}

/// Reads the config file into the environment while the process has one thread, then parses
/// the command line and runs it.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let file = match settings_file::load(&args) {
        Ok(file) => file,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Environment values are never shown in --help: the config file puts its settings
    // there, and a URL or a value may carry a credential.
    let matches = hide_env_values(Cli::command()).get_matches_from(&args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(start(cli, file))
}

fn hide_env_values(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| arg.hide_env_values(true))
        .mut_subcommands(hide_env_values)
}

async fn start(cli: Cli, file: settings_file::FileSettings) -> ExitCode {
    // Before any TLS client is built (the OTLP exporter builds one at once).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Held to the end: dropping it flushes the spans still buffered for OTLP.
    let _exporters = match observability::init(&cli.log, cli.log_format) {
        Ok(exporters) => exporters,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match dispatch(cli, file.kafka).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli, file_properties: Vec<(String, String)>) -> Result<ExitCode> {
    let topics = Topics::new(&cli.topic_prefix);
    // The command line's properties after the files': the last value of a name is the one used.
    let mut properties = file_properties;
    let client = match &cli.command_config {
        Some(path) => client_properties::load(path)?,
        None => ClientProperties::default(),
    };
    if !client.skipped.is_empty() {
        tracing::warn!(
            skipped = ?client.skipped,
            "--command-config: skipping Java client settings with no meaning here (Sluice's record formats are set with --format)"
        );
    }
    properties.extend(client.kafka);
    properties.extend(cli.kafka_properties.iter().cloned());
    let brokers = (cli.brokers.clone().or(client.bootstrap_servers)).unwrap_or_else(|| "localhost:9092".into());
    let kafka = &Connection::new(&brokers, &properties)?.with_quirks(cli.broker_quirks);
    let offline = matches!(
        cli.command,
        Command::Status(_)
            | Command::Config {
                command: config::ConfigCommand::Validate { .. }
            }
    ) || matches!(&cli.command, Command::Alerts { command } if command.offline());
    if !offline {
        kafka.start_tokens().await?;
        let check = kafka.clone();
        tokio::task::spawn_blocking(move || kafka::check_connection(&check)).await??;
    }
    let formats = Formats::parse(&cli.formats).map_err(anyhow::Error::msg)?;
    let codec = Codec::with_registry(formats, registry(&cli, client.registry)?);
    match cli.command {
        Command::Run(args) => run::command(kafka, topics, codec, args).await,
        Command::Topics { command } => topics::run(kafka, &topics, command).await,
        Command::Config { command } => config::run(kafka, &topics, command).await,
        Command::Sensor { command } => sensor::run(kafka, &topics, &codec, command).await,
        Command::Job { command } => job::run(kafka, &topics, &codec, command).await,
        Command::Rerun(args) => rerun::run(kafka, &topics, &codec, CommandKind::Rerun, args).await,
        Command::Backfill(args) => rerun::backfill(kafka, &topics, &codec, args).await,
        Command::Cancel(args) => rerun::run(kafka, &topics, &codec, CommandKind::Cancel, args).await,
        Command::Status(args) => status::run(args).await,
        Command::Replay(args) => replay::run(kafka, &topics, &codec, args).await,
        Command::Reset(args) => reset::run(kafka, &topics, &codec, args).await,
        Command::Alerts { command } => alerts::run(kafka, &topics, &codec, command).await,
        Command::Events {
            command: events::EventsCommand::Tail(args),
        } => events::run(kafka, &topics, &codec, args).await,
    }
}

/// The schema registry the flags name, else the one `--command-config` names (`file`),
/// with its credentials read; none without a URL. A flag's credentials replace the file's
/// (one credential is used, so they are not mixed).
fn registry(cli: &Cli, file: RegistryProperties) -> Result<Option<Registry>> {
    registry_settings(cli, file)?
        .map(|s| Registry::connect(&s))
        .transpose()
        .map_err(Into::into)
}

fn registry_settings(cli: &Cli, file: RegistryProperties) -> Result<Option<RegistrySettings>> {
    let flag_credentials =
        cli.schema_registry_basic_auth_user_info.is_some() || cli.schema_registry_bearer_token.is_some();
    let (basic_auth_user_info, bearer_token) = match flag_credentials {
        true => (
            cli.schema_registry_basic_auth_user_info.clone(),
            cli.schema_registry_bearer_token.clone(),
        ),
        false => (file.basic_auth_user_info, file.bearer_token),
    };
    let Some(url) = cli.schema_registry_url.clone().or(file.url) else {
        if basic_auth_user_info.is_some() || bearer_token.is_some() {
            anyhow::bail!("schema registry credentials are given without --schema-registry-url (or schema.registry.url in --command-config)");
        }
        return Ok(None);
    };
    let settings = RegistrySettings {
        url,
        basic_auth_user_info,
        bearer_token,
        auto_register: (cli.schema_registry_auto_register.or(file.auto_register)).unwrap_or(true),
    };
    Ok(Some(settings))
}

/// Publishes one record of `family` in the format `codec` writes it.
pub(crate) async fn publish(
    kafka: &Connection,
    codec: &Codec,
    family: Family,
    topic: &str,
    key: &str,
    record: &Value,
) -> Result<ExitCode> {
    codec.prepare(&[(family, topic)]).await?;
    let value = codec.encode(family, topic, record)?;
    let producer = kafka::producer(kafka)?;
    let (partition, offset) = kafka::send(&producer, topic, Some(key.as_bytes()), Some(&value), &[]).await?;
    println!("published to {topic} partition {partition} offset {offset}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["sluice", "config", "apply", "p", "--calendars", "c", "--var", "a=b"]).unwrap();
        let Command::Config {
            command: config::ConfigCommand::Apply { calendars, vars, .. },
        } = cli.command
        else {
            panic!("not config apply");
        };
        assert_eq!(calendars, Some(std::path::PathBuf::from("c")));
        assert_eq!(vars, [("a".to_string(), "b".to_string())]);
    }

    #[test]
    fn an_idle_owners_changelog_watch_is_bounded_by_the_compaction_lag() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["sluice", "run"], args].concat());
        let Command::Run(run) = parse(&[]).unwrap().command else {
            panic!("not run")
        };
        assert_eq!(run.changelog_watch(), std::time::Duration::from_secs(15 * 60));
        let Command::Run(run) = parse(&["--changelog-watch", "1s"]).unwrap().command else {
            panic!("not run")
        };
        assert_eq!(run.changelog_watch(), std::time::Duration::from_secs(1));
        for refused in ["0s", "7h", "1d"] {
            let e = parse(&["--changelog-watch", refused]).err().expect(refused).to_string();
            assert!(e.contains("at most 6h"), "{e}");
        }
    }

    #[test]
    fn the_schema_registry_flags_over_the_client_properties_file() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["sluice"], args, &["status"]].concat()).unwrap();
        let none = RegistryProperties::default;
        let cli = parse(&[]);
        assert!(registry(&cli, none()).unwrap().is_none());
        let cli = parse(&[
            "--schema-registry-url",
            "http://127.0.0.1:8081",
            "--schema-registry-auto-register",
            "false",
            "--schema-registry-bearer-token",
            "t0ken",
        ]);
        let shown = format!("{:?}", registry(&cli, none()).unwrap().unwrap());
        assert!(shown.contains("bearer") && !shown.contains("t0ken"), "{shown}");
        let settings = registry_settings(&cli, none()).unwrap().unwrap();
        assert!(!settings.auto_register);
        let cli = parse(&["--schema-registry-basic-auth-user-info", "u:hunter2"]);
        let e = registry(&cli, none()).unwrap_err().to_string();
        assert!(
            e.contains("without --schema-registry-url") && !e.contains("hunter2"),
            "{e}"
        );
        // The file's registry, auto-registering by default; the flags win over it, and a
        // flag's credential replaces the file's rather than joining it.
        let file = || RegistryProperties {
            url: Some("https://sr.example".into()),
            basic_auth_user_info: Some("file:secret".into()),
            bearer_token: None,
            auto_register: None,
        };
        let settings = registry_settings(&parse(&[]), file()).unwrap().unwrap();
        assert_eq!(settings.url, "https://sr.example");
        assert_eq!(settings.basic_auth_user_info.as_deref(), Some("file:secret"));
        assert!(settings.auto_register, "auto-registers by default");
        let cli = parse(&[
            "--schema-registry-url",
            "https://other.example",
            "--schema-registry-bearer-token",
            "t",
        ]);
        let settings = registry_settings(&cli, file()).unwrap().unwrap();
        assert_eq!(settings.url, "https://other.example");
        assert_eq!(
            (settings.basic_auth_user_info, settings.bearer_token.as_deref()),
            (None, Some("t"))
        );
        let governed = RegistryProperties {
            auto_register: Some(false),
            ..file()
        };
        assert!(!registry_settings(&parse(&[]), governed).unwrap().unwrap().auto_register);
    }
}
