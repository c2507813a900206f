//! The `sluice` command line: one binary for the processor and the tools around it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use serde_json::Value;

use crate::calendars::{self, Calendars, ResolveError};
use crate::core::config::{self, Parsed, Problem, Variables};
use crate::core::duration::parse_duration;
use crate::core::execution::ExecutionDate;
use crate::core::lifecycle::Settings as DeciderSettings;
use crate::core::limits::Limits;
use crate::core::records::{CommandKind, CommandRecord, FailureCategory, JobRecord, JobStatus, SensorRecord};
use crate::core::template;
use crate::runtime::access::{self, Access};
use crate::runtime::api::{self, Api, Commands};
use crate::runtime::codec::{Codec, Family, Formats};
use crate::runtime::effects::Settings as EffectSettings;
use crate::runtime::http::{self as http_server, Telemetry};
use crate::runtime::instances::{self, Directory, Member};
use crate::runtime::kafka::Connection;
use crate::runtime::observability::{self, LogFormat};
use crate::runtime::processor::{shutdown_signal, Guarantee, Processor, Settings};
use crate::runtime::topics::{load_definitions, Topics};
use crate::runtime::{alerts, events_tail, kafka, replay, reset, status, ui};
use crate::settings_file;

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
    /// Kafka bootstrap servers.
    #[arg(long, global = true, env = "SLUICE_BROKERS", default_value = "localhost:9092")]
    brokers: String,
    /// A librdkafka property for every Kafka client (TLS, SASL, timeouts), e.g.
    /// `security.protocol=SASL_SSL`; repeatable, over the config file's `[kafka]` table. A
    /// value `${env:NAME}` or `${file:PATH}` is read from there (for secrets).
    #[arg(long = "kafka-property", global = true, value_name = "NAME=VALUE", value_parser = parse_var)]
    kafka_properties: Vec<(String, String)>,
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
    /// single-object encoding.
    #[arg(long, global = true, env = "SLUICE_SCHEMA_REGISTRY_URL", value_name = "URL")]
    schema_registry_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the processor.
    Run(RunArgs),
    /// Create or check topics from their definitions.
    Topics {
        #[command(subcommand)]
        command: TopicsCommand,
    },
    /// Validate pipeline configs, or publish them to the config topic.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Publish sensor readings.
    Sensor {
        #[command(subcommand)]
        command: SensorCommand,
    },
    /// Publish job run reports (what a job runner does).
    Job {
        #[command(subcommand)]
        command: JobCommand,
    },
    /// Ask for an execution to run again: RERUN_ACCEPTED or RERUN_REJECTED (with the reason)
    /// follows on the events topic.
    Rerun(ExecutionCommandArgs),
    /// Stop evaluating or watching an execution: RUN_CANCELLED follows on the events topic.
    Cancel(ExecutionCommandArgs),
    /// Tell people: post lifecycle events to Slack (threaded per execution) or a webhook.
    Alerts {
        #[command(subcommand)]
        command: alerts::AlertsCommand,
    },
    /// Show pipelines and their executions, from a running instance's HTTP API.
    Status(status::StatusArgs),
    /// Read lifecycle events.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Run the decider again over recorded inputs, in event time, effects off: what did
    /// (or would, with --pipelines) the configs decide? --diff compares with what happened.
    Replay(replay::ReplayArgs),
    /// Put a stopped consumer group back to a point in time, state and input offsets
    /// together, so that the next start reprocesses from there (--dry-run prints the plan).
    Reset(reset::ResetArgs),
}

/// The decider's settings, shared by `run` and the commands that replay its decisions.
#[derive(Args)]
pub(crate) struct DeciderArgs {
    /// How far a sensor's timestamp may run ahead of this processor's clock before the
    /// record is rejected (a clock in the future would make stale data look fresh).
    #[arg(long, env = "SLUICE_MAX_CLOCK_SKEW", default_value = "5m", value_parser = parse_delta)]
    max_clock_skew: chrono::TimeDelta,
    /// How long a finished execution (and the sensors of its date) is kept for reruns, late
    /// data and post-run checks before it is pruned (the old design's TTL).
    #[arg(long, env = "SLUICE_RETENTION", default_value = "7d", value_parser = parse_delta)]
    retention: chrono::TimeDelta,
    /// Largest sensor reading, job report or command record accepted, in bytes; a larger one
    /// is rejected to the dead-letter topic.
    #[arg(long, env = "SLUICE_MAX_RECORD_BYTES", default_value_t = Limits::default().record_bytes)]
    max_record_bytes: usize,
    /// Largest pipeline config record accepted, in bytes.
    #[arg(long, env = "SLUICE_MAX_CONFIG_BYTES", default_value_t = Limits::default().config_bytes)]
    max_config_bytes: usize,
    /// Most rules in one config (validation and postRun together).
    #[arg(long, env = "SLUICE_MAX_RULES", default_value_t = Limits::default().rules)]
    max_rules: usize,
    /// Most sensor readings one pipeline keeps (each date's reading of a key counts).
    #[arg(long, env = "SLUICE_MAX_SENSORS_PER_PIPELINE", default_value_t = Limits::default().sensors)]
    max_sensors_per_pipeline: usize,
    /// Largest job config once its templates are expanded, in bytes.
    #[arg(long, env = "SLUICE_MAX_TEMPLATE_BYTES", default_value_t = Limits::default().expansion_bytes)]
    max_template_bytes: usize,
    /// Largest state one pipeline may store, in bytes (one changelog record: keep it under
    /// the changelog topic's max.message.bytes); an input that would grow it further is
    /// rejected to the dead-letter topic.
    #[arg(long, env = "SLUICE_MAX_STATE_BYTES", default_value_t = Limits::default().state_bytes)]
    max_state_bytes: usize,
}

impl DeciderArgs {
    pub(crate) fn settings(&self) -> DeciderSettings {
        DeciderSettings {
            max_clock_skew: self.max_clock_skew,
            retention: self.retention,
            limits: Limits {
                record_bytes: self.max_record_bytes,
                config_bytes: self.max_config_bytes,
                rules: self.max_rules,
                sensors: self.max_sensors_per_pipeline,
                expansion_bytes: self.max_template_bytes,
                state_bytes: self.max_state_bytes,
            },
        }
    }
}

pub(crate) fn parse_delta(text: &str) -> Result<chrono::TimeDelta, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// `sluice rerun|cancel PIPELINE DATE`.
#[derive(Args)]
struct ExecutionCommandArgs {
    /// Pipeline id (also the record key).
    pipeline: String,
    /// Execution date: YYYY-MM-DD, or YYYY-MM-DDTHH for hourly executions.
    date: String,
    /// Why, for the audit trail in the events.
    #[arg(long)]
    reason: Option<String>,
    /// Who asks (default: $USER).
    #[arg(long, env = "USER")]
    requested_by: Option<String>,
    /// Schedule id (cron or stream); by default the pipeline's own.
    #[arg(long)]
    schedule: Option<String>,
}

#[derive(Args)]
struct RunArgs {
    /// Where per-partition RocksDB state lives.
    #[arg(long, env = "SLUICE_STATE_DIR", default_value = ".sluice/state")]
    state_dir: PathBuf,
    /// Consumer group shared by every instance.
    #[arg(long, env = "SLUICE_GROUP", default_value = "sluice")]
    group: String,
    /// Most input records (or due timers) handled per batch.
    #[arg(long, env = "SLUICE_BATCH_SIZE", default_value_t = 500)]
    batch_size: usize,
    /// Most calls to job targets (triggers and status checks) in flight at once.
    #[arg(long, env = "SLUICE_MAX_CONCURRENT_TRIGGERS", default_value_t = 16)]
    max_concurrent_triggers: usize,
    /// Most calls in flight at once to any one target (a host, a Glue job, a state
    /// machine), so a burst of pipelines cannot exceed its limits.
    #[arg(long, env = "SLUICE_MAX_CALLS_PER_TARGET", default_value_t = 4)]
    max_calls_per_target: usize,
    /// Lets job URLs reach an address range the SSRF guard refuses by default (loopback,
    /// link-local, cloud metadata), e.g. `127.0.0.0/8` for a job runner on the same host.
    /// Repeatable; env: comma-separated.
    #[arg(
        long = "allow-target",
        value_name = "CIDR",
        env = "SLUICE_ALLOW_TARGETS",
        value_delimiter = ','
    )]
    allow_targets: Vec<ipnet::IpNet>,
    /// How long shutdown waits for in-flight triggers (e.g. 30s).
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_std_duration)]
    shutdown_grace: Duration,
    #[command(flatten)]
    decider: DeciderArgs,
    /// effectively-once works with any broker (a crash may re-send the last batch's events,
    /// with the same eventId); exactly-once needs a broker with full transaction support.
    #[arg(long, env = "SLUICE_GUARANTEE", value_enum, default_value = "effectively-once")]
    guarantee: Guarantee,
    /// This instance's stable name, unique in the group: makes it a static group member (a
    /// restart takes the partitions back at once) and names its transactions under
    /// exactly-once. Default: the host name, and dynamic membership.
    #[arg(long, env = "SLUICE_INSTANCE")]
    instance: Option<String>,
    /// Serve /healthz, /readyz, /metrics, the pipeline API (/api/pipelines) and the page on
    /// this address: HOST:PORT, or a bare PORT for loopback (127.0.0.1). Binding another
    /// address without --api-token-file logs a warning: the API would be open to the network.
    #[arg(long, env = "SLUICE_HTTP", value_name = "ADDR", value_parser = parse_http_addr)]
    http: Option<std::net::SocketAddr>,
    /// Tokens (one per line) that may read the API, the page's data and /metrics. With this
    /// or --api-write-token-file, every request but /healthz, /readyz and the page's static
    /// files needs `Authorization: Bearer TOKEN`. Give every instance the same files.
    #[arg(long, env = "SLUICE_API_TOKEN_FILE", value_name = "FILE")]
    api_token_file: Option<PathBuf>,
    /// Tokens that may also rerun and cancel executions (POST /api/pipelines/ID/rerun and
    /// /cancel). Without it the API is read-only.
    #[arg(long, env = "SLUICE_API_WRITE_TOKEN_FILE", value_name = "FILE")]
    api_write_token_file: Option<PathBuf>,
    /// How other instances reach this one's HTTP API, to forward requests for the pipelines
    /// it owns (e.g. http://sluice-0.sluice:9464). Default: http://ADDR of --http, with the
    /// host name in place of an unspecified address.
    #[arg(long, env = "SLUICE_ADVERTISE_URL", value_name = "URL")]
    advertise_url: Option<String>,
}

fn default_instance() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sluice".into())
}

/// The URL peers use for this instance's API: `--advertise-url`, else derived from `--http`.
fn advertise_url(flag: Option<String>, http: std::net::SocketAddr) -> String {
    flag.unwrap_or_else(|| {
        let host = match http.ip() {
            ip if ip.is_unspecified() => default_instance(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        format!("http://{host}:{}", http.port())
    })
}

/// `--http`: `HOST:PORT`, or a bare `PORT` (or `:PORT`) on loopback.
fn parse_http_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    let port = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse()
        .map_err(|_| format!("{text:?} is neither HOST:PORT (127.0.0.1:9464) nor a port"))
}

/// `run --http` and who may use it.
struct HttpOptions {
    addr: std::net::SocketAddr,
    advertise: Option<String>,
    access: Arc<Access>,
}

/// `sluice run`: the processor, and the HTTP endpoints and pipeline API beside it when asked
/// for.
async fn run(settings: Settings, http: Option<HttpOptions>) -> Result<ExitCode> {
    let telemetry = Telemetry::new();
    let _metrics_export = observability::export_metrics(telemetry.clone())?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let (kafka, directory_topic, group, instance) = (
        settings.kafka.clone(),
        settings.topics.instances.clone(),
        settings.group.clone(),
        settings.instance.clone(),
    );
    // Schemas are registered before the first batch: an incompatible one stops startup here.
    let t = &settings.topics;
    let families = [
        (Family::Events, t.events.as_str()),
        (Family::Sensors, t.sensors.as_str()),
        (Family::Jobs, t.jobs.as_str()),
        (Family::Commands, t.commands.as_str()),
    ];
    settings.codec.prepare(&families).await?;
    let (commands_topic, codec) = (settings.topics.commands.clone(), settings.codec.clone());
    let processor = Processor::start(settings, telemetry.clone())?;
    if let Some(HttpOptions {
        addr,
        advertise,
        access,
    }) = http
    {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding --http {addr}"))?;
        if !addr.ip().is_loopback() && !access.required() {
            tracing::warn!(%addr, "the API and the page are open to anyone who can reach {addr}: give --api-token-file to require a token");
        }
        let url = advertise_url(advertise, addr);
        tracing::info!(%addr, %url, "serving /healthz, /readyz, /metrics and /api/pipelines");
        let directory = Directory::new(&instance, &group);
        let me = Member {
            instance: instance.clone(),
            group,
            url,
            partitions: Vec::new(),
            at: chrono::Utc::now(),
        };
        tokio::spawn(instances::run(
            kafka.clone(),
            directory_topic,
            me,
            directory.clone(),
            processor.owned_partitions(),
            stopped.clone(),
        ));
        // The probes and the page's static files are open; the data needs a token when tokens
        // are set (see runtime::access).
        let commands = Commands {
            producer: kafka::producer(&kafka)?,
            topic: commands_topic,
            codec,
        };
        let api = Api::new(processor.queries(), directory, &instance, access.clone(), commands)?;
        let guarded = http_server::metrics_route(telemetry.clone())
            .merge(api::routes(api))
            .route_layer(axum::middleware::from_fn_with_state(access, access::guard));
        let app = http_server::probes(telemetry).merge(guarded).merge(ui::routes());
        let stopped = stopped.clone();
        tokio::spawn(async move {
            if let Err(e) = http_server::serve(listener, app, wait(stopped)).await {
                tracing::error!("HTTP server failed: {e:#}");
            }
        });
    }
    processor.run(wait(stopped)).await?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
enum TopicsCommand {
    /// Create missing topics and check existing ones.
    Apply {
        #[arg(long, default_value = "topics")]
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Report every problem in the pipeline YAML files of DIR; exits 1 if any.
    Validate {
        dir: PathBuf,
        /// Folder of calendar files (name, days, dates) that pipelines name; default:
        /// calendars/ beside the pipelines folder (DIR/../calendars).
        #[arg(long, value_name = "DIR")]
        calendars: Option<PathBuf>,
    },
    /// Validate, then publish every config in DIR to the config topic, calendars resolved.
    Apply {
        dir: PathBuf,
        /// Deployment variable for ${name} placeholders (repeatable).
        #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
        vars: Vec<(String, String)>,
        /// Folder of calendar files (name, days, dates) that pipelines name; default:
        /// calendars/ beside the pipelines folder (DIR/../calendars).
        #[arg(long, value_name = "DIR")]
        calendars: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SensorCommand {
    /// Publish one reading: sluice sensor put PIPELINE KEY field=value...
    Put {
        /// Pipeline id (also the record key).
        pipeline: String,
        /// Sensor key, as named by the pipeline's rules.
        key: String,
        /// Data fields; values that parse as JSON (numbers, true, "quoted") keep their type.
        #[arg(value_name = "FIELD=VALUE", value_parser = parse_var)]
        fields: Vec<(String, String)>,
        /// Execution date (YYYY-MM-DD); default: today in the pipeline's timezone.
        #[arg(long)]
        date: Option<String>,
        /// Execution hour (00-23): makes the execution hourly.
        #[arg(long)]
        hour: Option<String>,
    },
}

#[derive(Subcommand)]
enum JobCommand {
    /// Report a job run's status: sluice job put PIPELINE --run-id R --date D --status S
    Put {
        /// Pipeline id (also the record key).
        pipeline: String,
        /// The run id Sluice gave the attempt (`${RUN_ID}` in job config).
        #[arg(long)]
        run_id: String,
        /// Execution date: YYYY-MM-DD, or YYYY-MM-DDTHH for hourly executions.
        #[arg(long)]
        date: String,
        #[arg(long, value_enum)]
        status: StatusArg,
        /// Schedule id: stream (sensor-triggered) or cron.
        #[arg(long, default_value = "stream")]
        schedule: String,
        /// Failure category, for failed runs: picks the retry budget.
        #[arg(long, value_enum)]
        category: Option<CategoryArg>,
        #[arg(long)]
        message: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum StatusArg {
    Running,
    Succeeded,
    Failed,
    Timeout,
}

#[derive(Clone, Copy, ValueEnum)]
enum CategoryArg {
    Permanent,
    Transient,
    Timeout,
}

#[derive(Subcommand)]
enum EventsCommand {
    /// Print lifecycle events.
    Tail(events_tail::TailArgs),
}

pub(crate) fn parse_var(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{text:?} is not NAME=VALUE"))
}

fn parse_std_duration(text: &str) -> Result<Duration, String> {
    parse_duration(text)
        .map_err(|e| e.to_string())?
        .to_std()
        .map_err(|e| e.to_string())
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
    // The command line's properties after the file's: the last value of a name is the one used.
    let mut properties = file_properties;
    properties.extend(cli.kafka_properties.iter().cloned());
    let kafka = &Connection::new(&cli.brokers, &properties)?;
    let offline = matches!(
        cli.command,
        Command::Status(_)
            | Command::Config {
                command: ConfigCommand::Validate { .. }
            }
    );
    if !offline {
        let check = kafka.clone();
        tokio::task::spawn_blocking(move || kafka::check_connection(&check)).await??;
    }
    let formats = Formats::parse(&cli.formats).map_err(anyhow::Error::msg)?;
    let codec = Codec::new(formats, cli.schema_registry_url.as_deref())?;
    match cli.command {
        Command::Run(args) => {
            let settings = Settings {
                kafka: kafka.clone(),
                group: args.group,
                static_member: args.instance.clone(),
                instance: args.instance.unwrap_or_else(default_instance),
                guarantee: args.guarantee,
                topics,
                state_dir: args.state_dir,
                batch_size: args.batch_size.max(1),
                effects: EffectSettings {
                    max_concurrent: args.max_concurrent_triggers.max(1),
                    per_target: args.max_calls_per_target.max(1),
                    allowed_targets: args.allow_targets,
                },
                shutdown_grace: args.shutdown_grace,
                decider: args.decider.settings(),
                codec,
            };
            let http = match args.http {
                Some(addr) => Some(HttpOptions {
                    addr,
                    advertise: args.advertise_url,
                    access: Arc::new(Access::from_files(
                        args.api_token_file.as_deref(),
                        args.api_write_token_file.as_deref(),
                    )?),
                }),
                None => None,
            };
            run(settings, http).await
        }
        Command::Topics {
            command: TopicsCommand::Apply { dir },
        } => {
            let defs = load_definitions(&dir)?;
            let reports = kafka::apply_topics(kafka, &topics, &defs).await?;
            let mut drifted = 0;
            for r in &reports {
                match (r.created, &r.unchecked, r.drift.is_empty()) {
                    (true, _, _) => println!("{}: created", r.name),
                    (false, Some(why), _) => println!("{}: exists; configs not checked ({why})", r.name),
                    (false, None, true) => println!("{}: exists, matches", r.name),
                    (false, None, false) => {
                        drifted += 1;
                        for d in &r.drift {
                            println!("{}: drift: {d}", r.name);
                        }
                    }
                }
            }
            if drifted > 0 {
                eprintln!(
                    "error: {drifted} existing topic(s) differ from {}; Sluice does not change existing topics' configs: alter them with your Kafka tools (kafka-configs --alter --entity-type topics --entity-name NAME --add-config KEY=VALUE), or change the definitions",
                    dir.display()
                );
                return Ok(ExitCode::FAILURE);
            }
            println!("{} topics ready under prefix {:?}", defs.len(), topics.prefix);
            Ok(ExitCode::SUCCESS)
        }
        Command::Config {
            command: ConfigCommand::Validate { dir, calendars },
        } => Ok(validate(&dir, calendars.as_deref())),
        Command::Config {
            command: ConfigCommand::Apply { dir, vars, calendars },
        } => apply(&dir, calendars.as_deref(), &vars.into_iter().collect(), kafka, &topics).await,
        Command::Sensor {
            command:
                SensorCommand::Put {
                    pipeline,
                    key,
                    fields,
                    date,
                    hour,
                },
        } => {
            let record = SensorRecord {
                pipeline_id: pipeline.clone(),
                key,
                data: fields.into_iter().map(|(k, v)| (k, typed_value(&v))).collect(),
                date,
                hour: hour.map(Value::String),
                timestamp: Some(Value::String(chrono::Utc::now().to_rfc3339())),
            };
            let json = serde_json::to_value(&record)?;
            publish(kafka, &codec, Family::Sensors, &topics.sensors, &pipeline, &json).await
        }
        Command::Job {
            command:
                JobCommand::Put {
                    pipeline,
                    run_id,
                    date,
                    status,
                    schedule,
                    category,
                    message,
                },
        } => {
            let record = JobRecord {
                pipeline_id: pipeline.clone(),
                schedule_id: schedule,
                date,
                run_id,
                status: match status {
                    StatusArg::Running => JobStatus::Running,
                    StatusArg::Succeeded => JobStatus::Succeeded,
                    StatusArg::Failed => JobStatus::Failed,
                    StatusArg::Timeout => JobStatus::Timeout,
                },
                failure_category: category.map(|c| match c {
                    CategoryArg::Permanent => FailureCategory::Permanent,
                    CategoryArg::Transient => FailureCategory::Transient,
                    CategoryArg::Timeout => FailureCategory::Timeout,
                }),
                message,
                metadata: None,
                timestamp: chrono::Utc::now(),
            };
            let json = serde_json::to_value(&record)?;
            publish(kafka, &codec, Family::Jobs, &topics.jobs, &pipeline, &json).await
        }
        Command::Rerun(args) => publish_command(kafka, &codec, &topics, CommandKind::Rerun, args).await,
        Command::Cancel(args) => publish_command(kafka, &codec, &topics, CommandKind::Cancel, args).await,
        Command::Status(args) => status::run(args).await,
        Command::Replay(args) => replay::run(kafka, &topics, &codec, args).await,
        Command::Reset(args) => reset::run(kafka, &topics, &codec, args).await,
        Command::Alerts { command } => alerts::run(kafka, &topics, &codec, command).await,
        Command::Events {
            command: EventsCommand::Tail(args),
        } => events_tail::run(kafka, &topics, &codec, args).await,
    }
}

async fn publish_command(
    kafka: &Connection,
    codec: &Codec,
    topics: &Topics,
    command: CommandKind,
    args: ExecutionCommandArgs,
) -> Result<ExitCode> {
    let date = args
        .date
        .parse::<ExecutionDate>()
        .ok()
        .with_context(|| format!("{:?} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH)", args.date))?
        .to_string();
    let record = CommandRecord {
        pipeline_id: args.pipeline.clone(),
        command,
        schedule_id: args.schedule,
        date,
        reason: args.reason,
        requested_by: args.requested_by,
        subscriber: None,
        key: None,
    };
    let json = serde_json::to_value(&record)?;
    let code = publish(kafka, codec, Family::Commands, &topics.commands, &args.pipeline, &json).await?;
    eprintln!(
        "{} requested; the answer appears in `sluice events tail` (pipeline {})",
        command.name(),
        args.pipeline
    );
    Ok(code)
}

/// `field=value`: JSON scalars keep their type, anything else is a string.
fn typed_value(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::String(_) | Value::Null)) => v,
        _ => Value::String(text.to_string()),
    }
}

/// Publishes one record of `family` in the format `codec` writes it.
async fn publish(
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

/// One pipeline file read from disk, parsed or with its problems.
struct LoadedFile {
    path: PathBuf,
    json: Option<Value>,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

fn pipeline_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading pipeline folder {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no pipeline files (*.yaml, *.yml) in {}", dir.display());
    }
    Ok(files)
}

/// Where the calendars pipelines name come from, for one `config validate` or `apply`.
enum CalendarSource {
    Loaded(Calendars),
    /// The default folder does not exist: fine until a pipeline names a calendar.
    Missing(PathBuf),
    /// The folder has errors (already reported).
    Broken(PathBuf),
}

/// `calendars/` beside the pipelines folder: `DIR/../calendars`, written without the `..`
/// when DIR ends in a folder name (`examples/pipelines` -> `examples/calendars`).
fn default_calendars_dir(pipelines: &Path) -> PathBuf {
    match pipelines.components().next_back() {
        Some(std::path::Component::Normal(_)) => pipelines
            .parent()
            .map(|p| p.join("calendars"))
            .unwrap_or_else(|| PathBuf::from("calendars")),
        _ => pipelines.join("..").join("calendars"),
    }
}

/// How many calendar problems [`load_calendars`] printed, and in how many files.
#[derive(Default)]
struct CalendarErrors {
    problems: usize,
    files: usize,
}

/// Loads the calendars for `pipelines`; an explicit `--calendars` folder must exist. Calendar
/// errors and warnings are printed here.
fn load_calendars(
    pipelines: &Path,
    flag: Option<&Path>,
    progress: Progress,
) -> Result<(CalendarSource, CalendarErrors)> {
    let dir = match flag {
        Some(dir) => {
            if !dir.is_dir() {
                bail!("--calendars {}: no such folder", dir.display());
            }
            dir.to_path_buf()
        }
        None => {
            let dir = default_calendars_dir(pipelines);
            if !dir.exists() {
                return Ok((CalendarSource::Missing(dir), CalendarErrors::default()));
            }
            dir
        }
    };
    match Calendars::load_dir(&dir) {
        Ok(calendars) => {
            for w in &calendars.warnings {
                eprintln!("warning: {w}");
            }
            progress.say(format!(
                "calendars from {}: {}",
                dir.display(),
                if calendars.is_empty() {
                    "none".to_string()
                } else {
                    calendars.names().join(", ")
                }
            ));
            Ok((CalendarSource::Loaded(calendars), CalendarErrors::default()))
        }
        Err(e) => {
            for w in &e.warnings {
                eprintln!("warning: {w}");
            }
            let mut files: Vec<&Path> = Vec::new();
            for error in &e.errors {
                eprintln!("error: {error}");
                if !files.contains(&error.file()) {
                    files.push(error.file());
                }
            }
            let errors = CalendarErrors {
                problems: e.errors.len(),
                files: files.len(),
            };
            Ok((CalendarSource::Broken(dir), errors))
        }
    }
}

/// Replaces the calendar names in `json` by the calendars (see [`Calendars::resolve`]).
/// Problems go to `file`; returns the field paths they are about, so the parser's own
/// complaint about an unresolved name there is not reported twice.
fn resolve_calendars(json: &mut Value, source: &CalendarSource, mode: Variables, file: &mut LoadedFile) -> Vec<String> {
    match source {
        CalendarSource::Loaded(calendars) => {
            let resolution = calendars.resolve(json, mode);
            file.warnings.extend(resolution.warnings);
            let fields = resolution.errors.iter().map(|e| e.field().to_string()).collect();
            file.problems
                .extend(resolution.errors.iter().map(ResolveError::to_problem));
            fields
        }
        CalendarSource::Missing(dir) | CalendarSource::Broken(dir) => {
            let why = match source {
                CalendarSource::Missing(_) => format!(
                    "there is no calendars folder at {} (the default, beside the pipelines folder): pass --calendars DIR",
                    dir.display()
                ),
                _ => format!("the calendars in {} have errors (above)", dir.display()),
            };
            calendars::references(json)
                .into_iter()
                .map(|r| {
                    file.problems.push(Problem {
                        path: r.field.to_string(),
                        reason: format!("calendar {:?} cannot be resolved: {why}", r.name),
                    });
                    r.field.to_string()
                })
                .collect()
        }
    }
}

/// Reads and checks every pipeline file; with `vars`, deployment variables are substituted
/// and must all resolve. Calendar names are resolved from `calendars`, and a name that
/// cannot be is a problem.
fn load(dir: &Path, vars: Option<&BTreeMap<String, String>>, calendars: &CalendarSource) -> Result<Vec<LoadedFile>> {
    let mut loaded = Vec::new();
    for path in pipeline_files(dir)? {
        let mut file = LoadedFile {
            path: path.clone(),
            json: None,
            problems: Vec::new(),
            warnings: Vec::new(),
        };
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let json = match config::yaml_to_json(&text) {
            Ok(v) => v,
            Err(p) => {
                file.problems.push(p);
                loaded.push(file);
                continue;
            }
        };
        let (mut json, mode) = match vars {
            None => (json, Variables::MayBeUnresolved),
            Some(vars) => match template::substitute_deployment(&json, vars) {
                Ok((substituted, _)) => (substituted, Variables::MustBeResolved),
                Err(e) => {
                    file.problems.push(Problem {
                        path: String::new(),
                        reason: e.to_string(),
                    });
                    loaded.push(file);
                    continue;
                }
            },
        };
        let calendar_fields = resolve_calendars(&mut json, calendars, mode, &mut file);
        match config::parse(&json, mode) {
            Ok(Parsed { warnings, config }) => {
                // The processor's default limits: a config over them would be rejected there.
                let limits = Limits::default();
                file.problems.extend(limits.check_config(&config));
                let bytes = json.to_string().len();
                if let Err(reason) = limits.check_record(true, bytes) {
                    file.problems.push(Problem {
                        path: String::new(),
                        reason,
                    });
                }
                file.warnings.extend(warnings);
                file.json = Some(json);
            }
            Err(e) => file
                .problems
                .extend(e.problems.into_iter().filter(|p| !calendar_fields.contains(&p.path))),
        }
        loaded.push(file);
    }
    // Two files claiming one pipeline id would overwrite each other on the topic.
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in &mut loaded {
        let Some(id) = file
            .json
            .as_ref()
            .and_then(|j| j.pointer("/pipeline/id"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        if let Some(first) = seen.get(id) {
            file.problems.push(Problem {
                path: "pipeline.id".into(),
                reason: format!("{id:?} is also defined in {}", first.display()),
            });
        } else {
            seen.insert(id.to_string(), file.path.clone());
        }
    }
    Ok(loaded)
}

fn report(loaded: &[LoadedFile], progress: Progress) -> usize {
    let mut errors = 0;
    for file in loaded {
        for w in &file.warnings {
            eprintln!("warning: {}: {w}", file.path.display());
        }
        for p in &file.problems {
            eprintln!("error: {}: {p}", file.path.display());
            errors += 1;
        }
        if file.problems.is_empty() {
            progress.say(format!("ok: {}", file.path.display()));
        }
    }
    errors
}

fn validate(dir: &Path, calendars: Option<&Path>) -> ExitCode {
    let loaded = load_calendars(dir, calendars, Progress::Stdout)
        .and_then(|(source, calendar_errors)| Ok((load(dir, None, &source)?, calendar_errors)));
    match loaded {
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
        Ok((loaded, calendar_errors)) => {
            let errors = report(&loaded, Progress::Stdout) + calendar_errors.problems;
            if errors > 0 {
                eprintln!(
                    "{errors} problem(s) in {} file(s)",
                    loaded.iter().filter(|f| !f.problems.is_empty()).count() + calendar_errors.files
                );
                ExitCode::FAILURE
            } else {
                println!("{} pipeline(s) valid", loaded.len());
                ExitCode::SUCCESS
            }
        }
    }
}

async fn apply(
    dir: &Path,
    calendars: Option<&Path>,
    vars: &BTreeMap<String, String>,
    kafka: &Connection,
    topics: &Topics,
) -> Result<ExitCode> {
    let Some(configs) = publishable_configs(dir, calendars, vars, Progress::Stdout)? else {
        return Ok(ExitCode::FAILURE);
    };
    let producer = kafka::producer(kafka)?;
    for (path, id, json) in &configs {
        let bytes = serde_json::to_vec(json)?;
        kafka::send(&producer, &topics.config, Some(id.as_bytes()), Some(&bytes), &[]).await?;
        println!("applied {id} from {} to {}", path.display(), topics.config);
    }
    Ok(ExitCode::SUCCESS)
}

/// The configs of `dir` as `config apply` publishes them (file, pipeline id, JSON with
/// calendars resolved and variables expanded); `None` when a problem was reported, and
/// then nothing may be published.
pub(crate) fn publishable_configs(
    dir: &Path,
    calendars: Option<&Path>,
    vars: &BTreeMap<String, String>,
    progress: Progress,
) -> Result<Option<Vec<(PathBuf, String, Value)>>> {
    let (source, calendar_errors) = load_calendars(dir, calendars, progress)?;
    let loaded = load(dir, Some(vars), &source)?;
    let errors = report(&loaded, progress) + calendar_errors.problems;
    if errors > 0 {
        eprintln!("{errors} problem(s): nothing was published");
        return Ok(None);
    }
    let mut configs = Vec::new();
    for file in loaded {
        let json = file
            .json
            .ok_or_else(|| anyhow!("{} did not parse", file.path.display()))?;
        let id = json
            .pointer("/pipeline/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        configs.push((file.path, id, json));
    }
    Ok(Some(configs))
}

/// Where progress lines go: stdout, or stderr when stdout carries data (replayed events).
#[derive(Clone, Copy)]
pub(crate) enum Progress {
    Stdout,
    Stderr,
}

impl Progress {
    fn say(self, line: String) {
        match self {
            Progress::Stdout => println!("{line}"),
            Progress::Stderr => eprintln!("{line}"),
        }
    }
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
            command: ConfigCommand::Apply { calendars, vars, .. },
        } = cli.command
        else {
            panic!("not config apply");
        };
        assert_eq!(calendars, Some(PathBuf::from("c")));
        assert_eq!(vars, [("a".to_string(), "b".to_string())]);
    }

    #[test]
    fn calendars_default_to_the_folder_beside_the_pipelines() {
        let cases = [
            ("examples/pipelines", "examples/calendars"),
            ("examples/pipelines/", "examples/calendars"),
            ("pipelines", "calendars"),
            ("/srv/sluice/pipelines", "/srv/sluice/calendars"),
            (".", "./../calendars"),
            ("examples/..", "examples/../../calendars"),
        ];
        for (pipelines, calendars) in cases {
            assert_eq!(
                default_calendars_dir(Path::new(pipelines)),
                PathBuf::from(calendars),
                "{pipelines}"
            );
        }
    }
}
