//! `sluice run`: the processor, and the HTTP endpoints and pipeline API beside it when asked
//! for.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::args::{parse_delta, parse_std_duration, DeciderArgs};
use crate::core::config::JobKind;
use crate::core::duration::format_duration;
use crate::runtime::access::{self, Access};
use crate::runtime::api::{self, Api, Publishing};
use crate::runtime::clock::Clock;
use crate::runtime::codec::{Codec, Family};
use crate::runtime::effects::Settings as EffectSettings;
use crate::runtime::forwarding::Misrouted;
use crate::runtime::http as http_server;
use crate::runtime::instances::{self, Directory, Member, PeerPattern};
use crate::runtime::jobs::{KafkaTopics, SecretPolicy};
use crate::runtime::kafka::{self, Connection};
use crate::runtime::observability;
use crate::runtime::processor::{shutdown_signal, Guarantee, Processor, Settings};
use crate::runtime::telemetry::Telemetry;
use crate::runtime::topics::Topics;
use crate::runtime::ui;

#[derive(Args)]
pub struct RunArgs {
    /// Where per-partition RocksDB state lives.
    #[arg(long, env = "SLUICE_STATE_DIR", default_value = ".sluice/state")]
    state_dir: PathBuf,
    /// MiB of decoded pipeline states kept in memory per partition owned (an estimate of
    /// their size; a state is kept as read in part: its live executions, a day's, its
    /// readings). A state the cache misses is read from its parts in RocksDB: raise it when
    /// `sluice_state_reads_total`'s `decoded` reads are many and memory allows.
    #[arg(long, env = "SLUICE_STATE_CACHE_MB", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    state_cache_mb: u32,
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
    /// Sends job requests (and evaluators') through this proxy (a URL). Without it they go
    /// direct: `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` are ignored, since the SSRF guard
    /// sees the addresses the processor connects to, and behind a proxy it would see only
    /// the proxy's.
    #[arg(long, env = "SLUICE_JOB_PROXY", value_name = "URL")]
    job_proxy: Option<String>,
    /// Lets `${env:NAME}` (and `${INTERLOCK_NAME}`) in job and evaluator configs read the
    /// variable NAME; a trailing `*` allows a prefix (`PARTNER_*`). Any other name fails the
    /// trigger, naming this flag. Repeatable; env: comma-separated.
    #[arg(
        long = "allow-env",
        value_name = "NAME",
        env = "SLUICE_ALLOW_ENV",
        value_delimiter = ','
    )]
    allow_env: Vec<String>,
    /// Turns a job type off (e.g. `command`, which runs shell commands on this host): its
    /// triggers and evaluators fail, PERMANENT, without running. Repeatable; env:
    /// comma-separated.
    #[arg(
        long = "disable-job-type",
        value_name = "TYPE",
        env = "SLUICE_DISABLE_JOB_TYPES",
        value_delimiter = ',',
        value_parser = parse_job_kind
    )]
    disable_job_types: Vec<JobKind>,
    /// The topics `kafka` jobs may publish to (`*` matches any run of characters), e.g.
    /// `jobs.*`: a job aimed at any other is refused, PERMANENT. Without it, any topic but
    /// Sluice's own and the broker's. Repeatable; env: comma-separated.
    #[arg(
        long = "kafka-job-topic",
        value_name = "PATTERN",
        env = "SLUICE_KAFKA_JOB_TOPICS",
        value_delimiter = ','
    )]
    kafka_job_topics: Vec<String>,
    /// How long shutdown waits for the batch under way, and then for in-flight triggers (e.g. 30s).
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_std_duration)]
    shutdown_grace: Duration,
    /// `/healthz` fails when the processing loop has not turned for this long while not
    /// waiting on the broker (a stuck loop: restarting helps). A broker outage fails only
    /// `/readyz`.
    #[arg(long, env = "SLUICE_STUCK_AFTER", default_value = "2m", value_parser = parse_std_duration)]
    stuck_after: Duration,
    /// How often an owner that writes nothing reads what other writers (a zombie, a crashed
    /// batch) put on its changelog partitions since its own last record, to write those keys
    /// again before compaction could keep the others' record: at most 6h, a quarter of the
    /// changelog's `min.compaction.lag.ms`.
    #[arg(long, env = "SLUICE_CHANGELOG_WATCH", default_value = "15m", value_parser = parse_changelog_watch)]
    changelog_watch: Duration,
    /// How long one input record waits for the schema registry to serve its schema: past
    /// it, if the registry answers otherwise (it refuses only this record's schema id), the
    /// record is dead-lettered with the reason instead of holding every partition up. A
    /// registry that answers nothing is waited for.
    #[arg(long, env = "SLUICE_RECORD_PATIENCE", default_value = "60s", value_parser = parse_std_duration)]
    record_patience: Duration,
    /// A keyed record on another partition than its key's (its producer hashes keys with
    /// another function than the Java client's murmur2, e.g. librdkafka's CRC32 default):
    /// `forward` produces a copy to its key's partition, applied there once; `reject` sends
    /// it to the dead-letter topic.
    #[arg(long, env = "SLUICE_MISROUTED", value_enum, default_value_t = Misrouted::Forward)]
    misrouted: Misrouted,
    #[command(flatten)]
    decider: DeciderArgs,
    /// Runs the processor's clock this far ahead of the system clock (e.g. `90s`), so that
    /// SLA deadlines and cron times come sooner: for tests and rehearsals of a schedule, not
    /// for a live group. Every instance of a group must use the same offset.
    #[arg(long, env = "SLUICE_CLOCK_OFFSET", value_name = "DURATION", value_parser = parse_delta)]
    clock_offset: Option<chrono::TimeDelta>,
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
    /// Which other instances' --advertise-url API requests may be forwarded to, with the
    /// caller's token: SCHEME://HOST[:PORT], HOST may start with `*.` (one DNS label), PORT
    /// may be `*`; e.g. http://*.sluice.NAMESPACE.svc:9464. Repeat it, or separate with
    /// commas. An instance advertising another URL is ignored (and logged); without this
    /// flag no request is forwarded.
    #[arg(long = "peer", env = "SLUICE_PEERS", value_name = "URL", value_delimiter = ',')]
    peers: Vec<PeerPattern>,
}

impl RunArgs {
    /// `--changelog-watch`.
    pub fn changelog_watch(&self) -> Duration {
        self.changelog_watch
    }
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

/// A watch interval: above nothing, at most [`changelog::WATCH_AT_MOST`].
fn parse_changelog_watch(text: &str) -> Result<Duration, String> {
    let every = parse_std_duration(text)?;
    let most = crate::runtime::changelog::WATCH_AT_MOST;
    match every.is_zero() || every > most {
        true => Err(format!(
            "{text}: must be above 0 and at most {}h, a quarter of the changelog's min.compaction.lag.ms",
            most.as_secs() / 3600
        )),
        false => Ok(every),
    }
}

fn parse_job_kind(text: &str) -> Result<JobKind, String> {
    JobKind::parse(text.trim()).ok_or_else(|| format!("{text:?} is not a job type ({})", JobKind::names().join(", ")))
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
    peers: Vec<PeerPattern>,
    access: Arc<Access>,
}

/// `sluice run`: the processor, and the HTTP endpoints and pipeline API beside it when asked
/// for.
/// Refuses to start on a changelog that would lose state (see `changelog::config_faults`);
/// a broker that does not describe its configs is warned about, not refused.
async fn check_changelog(settings: &Settings) -> Result<()> {
    let topic = &settings.topics.changelog;
    match kafka::topic_configs(&settings.kafka, topic).await {
        Ok(configs) => {
            let faults = crate::runtime::changelog::config_faults(&configs);
            if !faults.is_empty() {
                let kept = crate::runtime::changelog::SHADOWED_KEPT.num_milliseconds();
                bail!(
                    "the changelog topic {topic} would lose state: {}. Set cleanup.policy=compact, min.compaction.lag.ms={kept} and delete.retention.ms={kept} (`sluice topics apply` reports the drift; `kafka-configs --alter --entity-type topics --entity-name {topic} --add-config ...` fixes it)",
                    faults.join("; ")
                );
            }
        }
        Err(reason) => {
            tracing::warn!(%topic, %reason, "could not check the changelog topic's configs (compaction, compaction lag): a changelog that is not compacted loses state")
        }
    }
    Ok(())
}

/// Refuses to start beside a live process under the same `--instance` of the group: it would
/// fence that one in turn (static membership and exactly-once's transactional id hand the
/// name to the newest), and the two would take the partitions from each other. Live: its
/// directory record is younger than the expiry and its URL answers `/healthz` within 2 s.
/// Only a URL this instance advertises itself, or one `--peer` admits, is asked (the
/// directory's writers do not choose where this process connects). A crashed or paused
/// predecessor does not answer, and is replaced as before.
async fn refuse_a_live_namesake(
    kafka: &Connection,
    topic: &str,
    (instance, group): (&str, &str),
    url: &str,
    peers: &[PeerPattern],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<()> {
    let records = match tokio::task::block_in_place(|| instances::read_records(kafka, topic)) {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!("could not read the instance directory {topic} to look for a live process under --instance {instance} ({e:#}): starting");
            return Ok(());
        }
    };
    let Some(other) = instances::fresh_record(records, instance, group, now) else {
        return Ok(());
    };
    if other.url != url && !peers.iter().any(|p| p.admits(&other.url)) {
        tracing::warn!(other = %other.url, "a recent directory record names this --instance at a URL no --peer admits: not asked whether it runs");
        return Ok(());
    }
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(NAMESAKE_PROBE)
        .build()?;
    let health = format!("{}/healthz", other.url.trim_end_matches('/'));
    let live = (client.get(&health).send().await).is_ok_and(|r| r.status().is_success());
    if live {
        bail!(
            "another process runs as --instance {instance} of group {group} ({health} answers, and its directory record is {} old): a second one would fence it in turn, and the two would take the partitions from each other. Give each instance of a group its own --instance, or stop the other first",
            format_duration(now - other.at)
        );
    }
    Ok(())
}

/// How long a process under this instance's name gets to answer before it is taken to be
/// gone (crashed, or paused: see [`refuse_a_live_namesake`]).
const NAMESAKE_PROBE: Duration = Duration::from_secs(2);

async fn run(settings: Settings, http: Option<HttpOptions>, stuck_after: Duration) -> Result<ExitCode> {
    // Before any command job runs: its environment is cleared, and this keeps it from reading
    // the processor's through /proc.
    if let Err(e) = crate::runtime::jobs::command::hide_processor() {
        tracing::warn!(
            "could not make the processor non-dumpable ({e}): command jobs may read its environment through /proc"
        );
    }
    // The exporting meter provider first: the telemetry's instruments come from it.
    let _metrics_export = observability::export_metrics()?;
    let telemetry = Telemetry::new();
    telemetry.set_stuck_after(stuck_after);
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
    check_changelog(&settings).await?;
    if let Some(h) = &http {
        let url = advertise_url(h.advertise.clone(), h.addr);
        let now = settings.clock.now();
        refuse_a_live_namesake(&kafka, &directory_topic, (&instance, &group), &url, &h.peers, now).await?;
    }
    let (commands_topic, sensors_topic) = (settings.topics.commands.clone(), settings.topics.sensors.clone());
    let limits = settings.decider.limits;
    let codec = settings.codec.clone();
    let processor = Processor::start(settings, telemetry.clone())?;
    if let Some(HttpOptions {
        addr,
        advertise,
        peers,
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
        let directory = Directory::new(&instance, &group, peers, processor.clock());
        let me = Member {
            instance: instance.clone(),
            group,
            url,
            partitions: Vec::new(),
            at: directory.now(),
        };
        tokio::spawn(instances::run(
            kafka.clone(),
            directory_topic,
            me,
            directory.clone(),
            processor.owned_partitions(),
            stopped.clone(),
            telemetry.clone(),
        ));
        // The probes and the page's static files are open; the data needs a token when tokens
        // are set (see runtime::access).
        let publishing = Publishing {
            producer: kafka::RenewableProducer::new(&kafka)?,
            codec,
            commands: commands_topic,
            sensors: sensors_topic,
            limits,
        };
        let api = Api::new(processor.queries(), directory, &instance, access.clone(), publishing)?;
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

/// Runs the processor with the settings of `args`.
pub async fn command(kafka: &Connection, topics: Topics, codec: Codec, args: RunArgs) -> Result<ExitCode> {
    let own_topics: Vec<String> = topics.all().iter().map(|t| t.to_string()).collect();
    let settings = Settings {
        kafka: kafka.clone(),
        group: args.group,
        static_member: args.instance.clone(),
        instance: args.instance.unwrap_or_else(default_instance),
        guarantee: args.guarantee,
        topics,
        state_dir: args.state_dir,
        state_cache_bytes: (args.state_cache_mb as usize) << 20,
        batch_size: args.batch_size.max(1),
        effects: EffectSettings {
            max_concurrent: args.max_concurrent_triggers.max(1),
            per_target: args.max_calls_per_target.max(1),
            allowed_targets: args.allow_targets,
            job_proxy: args.job_proxy,
            secrets: SecretPolicy::new(args.allow_env, kafka.secret_values()),
            disabled_job_types: args.disable_job_types,
            kafka_topics: KafkaTopics {
                own: own_topics,
                allowed: args.kafka_job_topics,
            },
        },
        shutdown_grace: args.shutdown_grace,
        changelog_watch: args.changelog_watch,
        record_patience: args.record_patience,
        decider: args.decider.settings(),
        codec,
        clock: args.clock_offset.map_or_else(Clock::system, Clock::shifted),
        misrouted: args.misrouted,
    };
    let http = match args.http {
        Some(addr) => Some(HttpOptions {
            addr,
            advertise: args.advertise_url,
            peers: args.peers,
            access: Arc::new(Access::from_files(
                args.api_token_file.as_deref(),
                args.api_write_token_file.as_deref(),
            )?),
        }),
        None => None,
    };
    run(settings, http, args.stuck_after).await
}
