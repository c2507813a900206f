//! `sluice-bench`: runs workloads against the real `sluice` binary on a real broker, and the
//! same workloads against baselines in the same run, and reports figures and ratios.
//!
//! Scenarios (each on fresh topics under its own prefix):
//! - `steady`: in process, no broker: the latency scenario's readings fed from memory at
//!   1,000 and 10,000 a second on a simulated clock, through the loop's own work and a real
//!   RocksDB store: Sluice's time per record, per simulated minute.
//! - `history`: in process, no broker: what one reading costs each stage of the loop on a
//!   pipeline with more and more executions (a cost that grows with the history makes
//!   latency grow under constant load).
//! - `throughput`: a backlog of configs and sensor readings, processed to committed output;
//!   the baseline is a pass-through consumer→producer with the processor's client settings
//!   and batch size, committing per batch.
//! - `latency`: readings at a fixed rate; sensor sent → VALIDATION_PASSED received.
//! - `scale`: many pipelines: resident memory, state size, and the time a new instance with
//!   an empty state directory takes to restore them from the changelog.
//! - `timers`: SLA_BREACH event time minus its deadline with many timers pending.
//! - `takeover`: an instance joining, leaving and dying: time until every partition is
//!   decided on again.
//! - `triggers`: job triggers/s against a loopback HTTP target; the baseline is the same
//!   calls from a plain HTTP client with the same bound on calls in flight.
//! - `page`: the operator page's requests with many pipelines, against `/healthz`.

mod history;
mod kafka_io;
mod measure;
mod page;
mod passthrough;
mod steady;
mod takeover;
mod target;
mod timers;
mod triggers;
mod workload;

/// The processor's allocator (see its `main.rs`): the in-process scenarios (`steady`,
/// `history`) time Sluice's code as the processor runs it, and glibc's malloc spends a
/// share of that loop that grows with the heap's churn. Counted where a scenario asks
/// (`history`: what a decoded state holds).
#[global_allocator]
static ALLOCATOR: measure::Counting<mimalloc::MiMalloc> = measure::Counting::new(mimalloc::MiMalloc);

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use rdkafka::message::Message;
use sluice::runtime::kafka::{Connection, Quirks};

use measure::{http_get, metric, percentiles};

#[derive(Parser, Clone)]
#[command(about = "Benchmarks Sluice against baselines on a real broker")]
struct Args {
    /// Kafka bootstrap servers (deploy/bench.sh starts a local broker and sets this).
    #[arg(long, env = "SLUICE_BENCH_BROKERS")]
    brokers: String,
    /// Workarounds for the broker's known bugs, as `sluice --broker-quirks` (deploy/bench.sh
    /// runs tansu, and says so); sluice and the pass-through baseline both get them.
    #[arg(long, env = "SLUICE_BROKER_QUIRKS", value_enum, default_value_t = Quirks::None)]
    broker_quirks: Quirks,
    /// The `sluice` binary; default: the one beside this binary.
    #[arg(long)]
    sluice: Option<PathBuf>,
    /// Small figures, to check the harness itself works (seconds, not minutes).
    #[arg(long)]
    quick: bool,
    /// A Python with `quixstreams` installed, for the Python peers (deploy/bench.sh
    /// makes one); without it that baseline is skipped and the report says so.
    #[arg(long, env = "SLUICE_BENCH_PYTHON")]
    python: Option<PathBuf>,
    /// Write the results (Markdown) here as well as to stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// How long the latency scenario sends readings, in seconds (default 30, or 2 with
    /// --quick); runs over a minute report p99 per minute, e.g. 600 for the steady-rate run.
    #[arg(long)]
    latency_seconds: Option<u64>,
    /// Readings a second the latency scenario sends (default 1000, or 100 with --quick): the
    /// highest rate the broker holds for the whole run (see bench/results/latency-10min.md).
    #[arg(long)]
    latency_rate: Option<u64>,
    /// The local broker's directory, which deploy/bench.sh starts it in: given, each variant
    /// a scenario compares (sluice, the pass-through floor, the loaded pass-through) runs on a
    /// fresh broker of its own, started again there with deploy/local-broker.sh (its settings
    /// from the environment), so none inherits the records another stored.
    #[arg(long, env = "SLUICE_BENCH_BROKER_DIR")]
    broker_dir: Option<PathBuf>,
    /// Simulated seconds of the steady scenario (default 600, or 5 with --quick).
    #[arg(long)]
    steady_seconds: Option<u64>,
    /// Readings a second of the steady scenario, one run each (default 1000,10000, or
    /// 100,1000 with --quick).
    #[arg(long, value_delimiter = ',')]
    steady_rates: Vec<u64>,
    /// The steady scenario's state cache, MiB (`sluice run --state-cache-mb`; default its
    /// default, 16).
    #[arg(long, default_value_t = sluice::runtime::store::STATE_CACHE_BYTES >> 20)]
    steady_cache_mb: usize,
    /// Pipeline counts of the scale scenario (default 10000,100000, or 500 with --quick),
    /// e.g. 1000000 to measure a million.
    #[arg(long, value_delimiter = ',')]
    scale: Vec<usize>,
    /// The scale scenario loads the configs only: no readings, no job runs (for a million
    /// pipelines, whose runs would hold the local broker's memory).
    #[arg(long)]
    configs_only: bool,
    /// Pipelines of the timers scenario whose deadlines stay hours away, two timers pending
    /// each (default 100000, or 500 with --quick), e.g. 500000 for a million timers pending.
    #[arg(long)]
    timer_pipelines: Option<usize>,
    /// Scenarios to run (default: all).
    #[arg(value_parser = SCENARIOS)]
    scenarios: Vec<String>,
}

const SCENARIOS: [&str; 9] = [
    "steady",
    "history",
    "throughput",
    "latency",
    "timers",
    "triggers",
    "takeover",
    "page",
    "scale",
];

struct Sizes {
    rounds: usize,
    throughput_pipelines: usize,
    throughput_records: usize,
    latency_pipelines: usize,
    latency_rate: u64,
    latency_seconds: u64,
    scale: Vec<usize>,
    timer_pipelines: usize,
    timer_measured: usize,
    /// The measured deadline is the first minute boundary at least this far ahead.
    timer_margin_s: i64,
    takeover_pipelines: usize,
    /// How long the takeover scenario waits for a dead member's partitions to move.
    failover_wait_s: u64,
    trigger_pipelines: usize,
    page_pipelines: usize,
    /// Executions in the pipeline the history scenario times a reading on.
    history: Vec<usize>,
    history_rounds: usize,
    /// Readings a second the steady scenario feeds, one run each.
    steady_rates: Vec<u64>,
    steady_seconds: u64,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                rounds: 1,
                throughput_pipelines: 50,
                throughput_records: 2_000,
                latency_pipelines: 20,
                latency_rate: 100,
                latency_seconds: 2,
                scale: vec![500],
                timer_pipelines: 500,
                timer_measured: 20,
                timer_margin_s: 10,
                takeover_pipelines: 100,
                failover_wait_s: 20,
                trigger_pipelines: 100,
                page_pipelines: 500,
                history: vec![1, 24],
                history_rounds: 3,
                steady_rates: vec![100, 1_000],
                steady_seconds: 5,
            }
        } else {
            Sizes {
                rounds: 3,
                throughput_pipelines: 1_000,
                throughput_records: 100_000,
                latency_pipelines: 1_000,
                latency_rate: 1_000,
                latency_seconds: 30,
                scale: vec![10_000, 100_000],
                timer_pipelines: 100_000,
                timer_measured: 1_000,
                timer_margin_s: 30,
                takeover_pipelines: 10_000,
                failover_wait_s: 60,
                trigger_pipelines: 5_000,
                page_pipelines: 5_000,
                history: vec![1, 24, 168, 720],
                history_rounds: 51,
                steady_rates: vec![1_000, 10_000],
                steady_seconds: 600,
            }
        }
    }
}

/// One scenario's world: its topic prefix, state directory and the processor.
struct Run {
    brokers: String,
    /// The broker as sluice's own clients reach it (with its quirks).
    kafka: Connection,
    sluice: PathBuf,
    prefix: String,
    dir: PathBuf,
    http: String,
    child: Option<Child>,
    /// Environment of every `sluice run` the run starts, beyond the defaults.
    env: Vec<(String, String)>,
}

/// What `--broker-quirks` calls `quirks`.
fn quirks_name(quirks: Quirks) -> String {
    let value = quirks.to_possible_value().expect("every quirk has a name");
    value.get_name().to_string()
}

/// Another `sluice run` in the same group as the run's own (see `Run::spawn`).
struct Instance {
    http: String,
    child: Child,
}

impl Instance {
    fn ready(&self) -> bool {
        ready(&self.http)
    }

    /// Serving at least one partition, with everything it owns restored.
    fn serving(&self) -> bool {
        metric(&self.http, "sluice_partitions_owned", "") > 0.0 && self.ready()
    }

    fn signal(&mut self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ready(http: &str) -> bool {
    http_get(http, "/readyz").is_some_and(|(s, _)| s == 200)
}

fn free_http() -> Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    Ok(format!("127.0.0.1:{port}"))
}

impl Run {
    fn new(args: &Args, sluice: &Path, name: &str) -> Result<Run> {
        let prefix = format!(
            "bench-{name}-{}-{}.",
            std::process::id(),
            chrono::Utc::now().timestamp_millis()
        );
        let dir = std::env::temp_dir().join(prefix.trim_end_matches('.'));
        std::fs::create_dir_all(&dir)?;
        let status = Command::new(sluice)
            .args(["topics", "apply", "--dir"])
            .arg(repo().join("topics"))
            .args(["--topic-prefix", &prefix, "--brokers", &args.brokers])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("sluice topics apply failed for {prefix}");
        }
        Ok(Run {
            brokers: args.brokers.clone(),
            kafka: connection(&args.brokers)?.with_quirks(args.broker_quirks),
            sluice: sluice.to_path_buf(),
            prefix,
            dir,
            http: free_http()?,
            child: None,
            env: Vec::new(),
        })
    }

    fn topic(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn group(&self) -> String {
        format!("{}group", self.prefix)
    }

    /// Starts `sluice run` (state in `state`), logging to the run's directory.
    fn start(&mut self, state: &str) -> Result<()> {
        self.child = Some(self.launch(state, &self.http)?);
        Ok(())
    }

    /// Starts another instance in the run's group with its own state directory (`name`)
    /// and HTTP port.
    fn spawn(&self, name: &str) -> Result<Instance> {
        let http = free_http()?;
        let child = self.launch(name, &http)?;
        Ok(Instance { http, child })
    }

    /// `sluice run` as deployed by default: dynamic group membership (no `--instance`).
    fn launch(&self, state: &str, http: &str) -> Result<Child> {
        let log = std::fs::File::create(self.dir.join(format!("{state}.log")))?;
        Command::new(&self.sluice)
            .args([
                "run",
                "--brokers",
                &self.brokers,
                "--topic-prefix",
                &self.prefix,
                "--group",
                &self.group(),
            ])
            .arg("--state-dir")
            .arg(self.dir.join(state))
            .args(["--http", http, "--log", "warn"])
            .env("SLUICE_ALLOW_TARGETS", "127.0.0.0/8")
            .env("SLUICE_BROKER_QUIRKS", quirks_name(self.kafka.quirks()))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting sluice run")
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    fn ready(&self) -> bool {
        ready(&self.http)
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let _ = child.wait();
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How the harness's own Kafka clients (the pass-through baselines) connect: with the
/// client settings sluice gets (`SLUICE_COMMAND_CONFIG`, as deploy/bench.sh sets it), so a
/// baseline differs from sluice in what it does with records, not in how its clients talk.
fn connection(brokers: &str) -> Result<Connection> {
    let properties = match std::env::var_os("SLUICE_COMMAND_CONFIG") {
        Some(path) => sluice::cli::client_properties::load(Path::new(&path))?.kafka,
        None => Vec::new(),
    };
    Ok(Connection::new(brokers, &properties)?)
}

/// `args` on a fresh broker, when the bench runs its own (`--broker-dir`): the local broker
/// stopped, its data removed and started again; else `args` as they are.
fn fresh_broker(args: &Args) -> Result<Args> {
    let Some(dir) = &args.broker_dir else {
        return Ok(args.clone());
    };
    let script = repo().join("deploy/local-broker.sh");
    let stopped = Command::new(&script)
        .arg("stop")
        .env("SLUICE_BROKER_DIR", dir)
        .stdout(Stdio::null())
        .status()?;
    if !stopped.success() {
        bail!("{} stop failed", script.display());
    }
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    let started = Command::new(&script)
        .arg("start")
        .env("SLUICE_BROKER_DIR", dir)
        .env("SLUICE_BROKER_PORT", "auto")
        .stderr(Stdio::inherit())
        .output()?;
    if !started.status.success() {
        bail!("{} start failed", script.display());
    }
    let brokers = String::from_utf8(started.stdout)?.trim().to_string();
    Ok(Args {
        brokers,
        ..args.clone()
    })
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Waits for `done`, checking every 20 ms, failing after `within`.
fn wait(what: &str, within: Duration, mut done: impl FnMut() -> bool) -> Result<Instant> {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("timed out after {within:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `pipelineId|date` of an event, the key the scenarios wait on.
fn execution_of(event: &serde_json::Value) -> String {
    format!(
        "{}|{}",
        event["pipelineId"].as_str().unwrap_or(""),
        event["date"].as_str().unwrap_or("")
    )
}

fn today() -> String {
    chrono::Utc::now().date_naive().to_string()
}

/// The backlog: every pipeline's config, then `records` readings spread over the pipelines,
/// ending with each pipeline's trigger (so each runs its job once).
fn produce_backlog(run: &Run, pipelines: usize, records: usize, target: &str) -> usize {
    produce_configs(run, pipelines, target);
    produce_readings(run, pipelines, records)
}

/// A config for each of `pipelines`, whose jobs call `target`.
fn produce_configs(run: &Run, pipelines: usize, target: &str) {
    let producer = kafka_io::producer(&run.brokers);
    let config = run.topic("config");
    for i in 0..pipelines {
        let id = workload::pipeline_id(i);
        kafka_io::send(&producer, &config, &id, &workload::config(&id, target));
    }
    kafka_io::flush(&producer);
}

/// `records` sensor readings over `pipelines`: row counts, then a trigger for each (which
/// runs its job). Returns how many it sent.
fn produce_readings(run: &Run, pipelines: usize, records: usize) -> usize {
    let producer = kafka_io::producer(&run.brokers);
    let sensors = run.topic("sensors");
    let date = today();
    let readings = records.saturating_sub(pipelines);
    for n in 0..readings {
        let id = workload::pipeline_id(n % pipelines);
        kafka_io::send(
            &producer,
            &sensors,
            &id,
            &workload::row_count(&id, 1000 + n as u64, &date, None),
        );
    }
    for i in 0..pipelines {
        let id = workload::pipeline_id(i);
        kafka_io::send(&producer, &sensors, &id, &workload::trigger(&id, &date, None));
    }
    kafka_io::flush(&producer);
    readings + pipelines
}

/// One sluice run over the backlog: records/s from the first consumed to all committed, and
/// where the time went.
struct SluiceRound {
    rate: f64,
    seconds: f64,
    batches: f64,
    in_batches: f64,
    in_commits: f64,
    peak_rss: f64,
    /// Records sluice wrote (events, changelog, job requests) per record it read.
    written_per_input: f64,
}

fn sluice_round(args: &Args, sluice: &Path, sizes: &Sizes, target: &str) -> Result<SluiceRound> {
    let mut run = Run::new(args, sluice, "throughput")?;
    let sensors = produce_backlog(&run, sizes.throughput_pipelines, sizes.throughput_records, target);
    run.start("state")?;
    let first = wait("the first record", Duration::from_secs(120), || {
        metric(&run.http, "sluice_records_in_total", "") > 0.0
    })?;
    let (brokers, group, topic) = (run.brokers.clone(), run.group(), run.topic("sensors"));
    let done = wait("the backlog committed", Duration::from_secs(1800), || {
        kafka_io::committed(&brokers, &group, &topic) >= sensors as i64
    })?;
    let seconds = (done - first).as_secs_f64();
    let round = SluiceRound {
        rate: (sensors + sizes.throughput_pipelines) as f64 / seconds,
        seconds,
        batches: metric(&run.http, "sluice_batch_seconds_count", ""),
        in_batches: metric(&run.http, "sluice_batch_seconds_sum", ""),
        in_commits: metric(&run.http, "sluice_commit_seconds_sum", ""),
        peak_rss: measure::rss_mib(run.pid()).1,
        written_per_input: records_written(&run, (sensors + sizes.throughput_pipelines) as u64).1,
    };
    run.stop();
    Ok(round)
}

/// The pass-through over the same backlog, writing `per_input` records for each it reads
/// (the copy and the rest to a side topic, as sluice writes events and changelog records):
/// records/s and batches.
fn passthrough_round(args: &Args, sluice: &Path, sizes: &Sizes, target: &str, per_input: f64) -> Result<(f64, usize)> {
    let base = Run::new(args, sluice, "passthrough")?;
    let n = produce_backlog(&base, sizes.throughput_pipelines, sizes.throughput_records, target);
    let total = n + sizes.throughput_pipelines;
    let inputs = [base.topic("config"), base.topic("sensors")];
    let extra = passthrough::Extra {
        topic: base.topic("changelog"),
        per_input: (per_input - 1.0).max(0.0),
    };
    let (elapsed, batches) =
        passthrough::run(&base.kafka, &inputs, &base.topic("events"), Some(extra), |n| n >= total)?;
    Ok((total as f64 / elapsed.as_secs_f64(), batches))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// Records/s over a backlog, sluice and its baselines alternating for a few rounds (a run on
/// 2 cores shared with the broker is noisy); medians are reported.
fn throughput(args: &Args, sluice: &Path, sizes: &Sizes, report: &mut String) -> Result<()> {
    let target = target::start();
    let (mut ours, mut ceilings, mut rounds) = (Vec::new(), Vec::new(), Vec::new());
    let mut peers: Vec<Vec<f64>> = vec![Vec::new(); PEERS.len()];
    let mut batches = 0;
    for _ in 0..sizes.rounds {
        let round = sluice_round(&fresh_broker(args)?, sluice, sizes, &target.url)?;
        ours.push(round.rate);
        let per_input = round.written_per_input;
        rounds.push(round);
        let (ceiling, b) = passthrough_round(&fresh_broker(args)?, sluice, sizes, &target.url, per_input)?;
        ceilings.push(ceiling);
        batches = b;
        if let Some(python) = &args.python {
            for ((_, script), rates) in PEERS.iter().zip(&mut peers) {
                rates.push(peer(&fresh_broker(args)?, sluice, sizes, python, script, &target.url)?);
            }
        }
    }
    let all = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", ");
    let (sluice_rate, ceiling) = (median(&mut ours.clone()), median(&mut ceilings.clone()));
    let typical = rounds
        .iter()
        .min_by(|a, b| (a.rate - sluice_rate).abs().total_cmp(&(b.rate - sluice_rate).abs()))
        .expect("a round");
    let total = sizes.throughput_records + sizes.throughput_pipelines;
    let _ = writeln!(
        report,
        "\n## Throughput (backlog of {total} input records, {} pipelines; median of {} rounds)\n",
        sizes.throughput_pipelines, sizes.rounds
    );
    let _ = writeln!(
        report,
        "| what | records/s | ratio | rounds |\n| --- | ---: | ---: | --- |"
    );
    let _ = writeln!(
        report,
        "| pass-through consumer→producer writing {:.1} records per input (a copy of each, and more when sluice wrote more: it wrote {:.1}), with sluice's headers and its two awaited rounds per batch (the ceiling) | {ceiling:.0} | 1.00 | {} |",
        typical.written_per_input.max(1.0),
        typical.written_per_input,
        all(&ceilings)
    );
    let _ = writeln!(
        report,
        "| sluice, effectively-once | {sluice_rate:.0} | {:.2} | {} |",
        sluice_rate / ceiling,
        all(&ours)
    );
    if args.python.is_none() {
        let _ = writeln!(report, "\nPython peers skipped: no --python with quixstreams.");
    } else {
        let mut versus = Vec::new();
        for ((name, _), rates) in PEERS.iter().zip(&peers) {
            let rate = median(&mut rates.clone());
            let _ = writeln!(
                report,
                "| {name} | {rate:.0} | {:.2} | {} |",
                rate / ceiling,
                all(rates)
            );
            versus.push(format!(
                "{} {:.1}×",
                name.split(" (").next().unwrap_or(name),
                sluice_rate / rate
            ));
        }
        let _ = writeln!(report, "\nsluice ÷ each peer: {}", versus.join(", "));
    }
    let _ = writeln!(
        report,
        "\nsluice (its median round): {:.2} s from first record to last commit in {:.0} batches ({batches} for the pass-through), {:.2} s inside batches, of which {:.2} s producing and awaiting acknowledgements; peak RSS {:.0} MiB. {} job triggers answered by the loopback target.",
        typical.seconds, typical.batches, typical.in_batches, typical.in_commits, typical.peak_rss,
        target.count()
    );
    let _ = writeln!(
        report,
        "exactly-once: not measurable on this broker (tansu 0.6 has no EndTxn)."
    );
    Ok(())
}

/// The Python peers of the throughput scenario: the same readiness workload written as a
/// team would with Quix Streams, and as the fastest hand-written loop (confluent-kafka with
/// rocksdict, batch by batch, its state changes to a changelog as Quix's and Sluice's are).
/// Both live in `bench/peers/` and take the same arguments.
const PEERS: [(&str, &str); 2] = [
    ("Quix Streams (Python, RocksDB state)", "readiness.py"),
    (
        "confluent-kafka consumer loop (Python, RocksDB state)",
        "consumer_loop.py",
    ),
];

/// The same backlog through a peer's script: sensor records/s from its first record to its
/// group's commit of the last.
fn peer(args: &Args, sluice: &Path, sizes: &Sizes, python: &Path, script: &str, target: &str) -> Result<f64> {
    let run = Run::new(args, sluice, "peer")?;
    let sensors = produce_backlog(&run, sizes.throughput_pipelines, sizes.throughput_records, target);
    let configs: Vec<serde_json::Value> = (0..sizes.throughput_pipelines)
        .map(|i| workload::config(&workload::pipeline_id(i), target))
        .collect();
    let configs_path = run.dir.join("configs.json");
    std::fs::write(&configs_path, serde_json::to_vec(&configs)?)?;
    let group = run.group();
    let mut child = Command::new(python)
        .arg(repo().join("bench/peers").join(script))
        .args([&run.brokers, &run.topic("sensors"), &run.topic("events"), &group])
        .arg(&configs_path)
        .arg(run.dir.join("peer-state"))
        .arg(run.topic("changelog"))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(run.dir.join("peer.log"))?)
        .spawn()
        .with_context(|| format!("starting {script}"))?;
    let stdout = child.stdout.take().expect("piped");
    let first = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("first ").and_then(|t| t.parse::<f64>().ok()))
    });
    let (brokers, topic) = (run.brokers.clone(), run.topic("sensors"));
    let finished = wait(
        &format!("{script} to commit the backlog"),
        Duration::from_secs(3600),
        || kafka_io::committed(&brokers, &group, &topic) >= sensors as i64,
    );
    let end = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
    finished?;
    let first = first
        .join()
        .ok()
        .flatten()
        .with_context(|| format!("{script} never said it started"))?;
    // It did the work, not only the reading: every pipeline's execution passed.
    let reader = kafka_io::reader(&run.brokers, &[&run.topic("events")]);
    let mut passed = std::collections::HashSet::new();
    wait(
        &format!("{script}'s VALIDATION_PASSED for every pipeline"),
        Duration::from_secs(60),
        || {
            kafka_io::drain_events(&reader, "VALIDATION_PASSED", |e| {
                passed.insert(e["pipelineId"].to_string());
            });
            passed.len() >= sizes.throughput_pipelines
        },
    )?;
    Ok(sensors as f64 / (end - first))
}

/// Sensor sent → VALIDATION_PASSED received, at a fixed rate of readings.
fn latency(args: &Args, sluice: &Path, sizes: &Sizes, report: &mut String) -> Result<()> {
    let target = target::start();
    let mut run = Run::new(args, sluice, "latency")?;
    let producer = kafka_io::producer(&run.brokers);
    for i in 0..sizes.latency_pipelines {
        let id = workload::pipeline_id(i);
        kafka_io::send(
            &producer,
            &run.topic("config"),
            &id,
            &workload::config(&id, &target.url),
        );
    }
    kafka_io::flush(&producer);
    // Each trigger opens a new hourly execution: a long run spans more days than the default
    // retention keeps, so the run keeps them all (the state grows for the whole run).
    let total = sizes.latency_rate * sizes.latency_seconds;
    let slots = (total / 2).div_ceil(sizes.latency_pipelines as u64);
    let days = slots.div_ceil(24).max(7);
    run.env.push(("SLUICE_RETENTION".into(), format!("{}d", days + 1)));
    run.start("state")?;
    wait("the processor ready", Duration::from_secs(120), || run.ready())?;
    let events = run.topic("events");
    let reader = kafka_io::reader(&run.brokers, &[events.as_str()]);
    let accepted = sizes.latency_pipelines as f64;
    wait("every config accepted", Duration::from_secs(300), || {
        metric(&run.http, "sluice_records_in_total", "config") >= accepted
    })?;
    while reader.poll(Duration::from_millis(200)).is_some() {}

    // Readings at the rate: per execution a row count then its trigger; executions are
    // hourly and spread over the last days' dates, so each trigger opens a new one.
    let dates: Vec<String> = (0..days)
        .map(|d| (chrono::Utc::now().date_naive() - chrono::Days::new(d)).to_string())
        .collect();
    let interval = Duration::from_secs_f64(1.0 / sizes.latency_rate as f64);
    let mut sent: HashMap<String, Instant> = HashMap::new();
    // Sluice's own time per record, from its metrics at each window's start.
    let own = || {
        let busy = |part| metric(&run.http, &format!("sluice_record_busy_seconds_{part}"), "");
        (busy("sum"), busy("count"))
    };
    let window = Duration::from_secs(Latencies::window(sizes).0);
    let mut own_at = vec![own()];
    let start = Instant::now();
    let mut next_window = start + window;
    let sensors = run.topic("sensors");
    let mut received = Vec::new();
    let drain = |received: &mut Vec<(String, Instant)>| {
        kafka_io::drain_events(&reader, "VALIDATION_PASSED", |event| {
            received.push((execution_of(event), Instant::now()))
        })
    };
    for n in 0..total {
        let execution = n / 2;
        let id = workload::pipeline_id(execution as usize % sizes.latency_pipelines);
        let slot = execution as usize / sizes.latency_pipelines;
        let (date, hour) = (&dates[(slot / 24) % dates.len()], (slot % 24) as u32);
        if n % 2 == 0 {
            kafka_io::send(
                &producer,
                &sensors,
                &id,
                &workload::row_count(&id, 5000, date, Some(hour)),
            );
        } else {
            kafka_io::send(&producer, &sensors, &id, &workload::trigger(&id, date, Some(hour)));
            producer.poll(Duration::ZERO);
            sent.insert(format!("{id}|{date}T{hour:02}"), Instant::now());
        }
        producer.poll(Duration::ZERO);
        drain(&mut received);
        if Instant::now() >= next_window {
            own_at.push(own());
            next_window += window;
        }
        let due = start + interval * (n as u32 + 1);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let unsent = kafka_io::flush_while(&producer, || drain(&mut received));
    let expected = sent.len();
    let _ = wait("every VALIDATION_PASSED", Duration::from_secs(120), || {
        drain(&mut received);
        received.len() >= expected
    });
    own_at.push(own());
    let own_us: Vec<f64> = (own_at.windows(2))
        .filter(|w| w[1].1 > w[0].1)
        .map(|w| (w[1].0 - w[0].0) / (w[1].1 - w[0].1) * 1e6)
        .collect();
    let own_drift = match (own_us.first(), own_us.last()) {
        (Some(first), Some(last)) => last / first,
        _ => f64::NAN,
    };
    let own_us = own_us
        .iter()
        .map(|us| format!("{us:.0}"))
        .collect::<Vec<_>>()
        .join(", ");
    // (seconds into the sending, latency in ms if it arrived) of each execution started.
    let mut first: HashMap<&str, Instant> = HashMap::new();
    for (key, at) in &received {
        first.entry(key.as_str()).or_insert(*at);
    }
    let samples: Vec<(f64, Option<f64>)> = sent
        .iter()
        .map(|(key, s)| {
            let latency = (first.get(key.as_str())).map(|at| at.saturating_duration_since(*s).as_secs_f64() * 1000.0);
            (s.duration_since(start).as_secs_f64(), latency)
        })
        .collect();
    let (written, per_reading) = records_written(&run, total);
    run.stop();
    let ours = Latencies::of(&samples, sizes);
    let floor = Latencies::of(&passthrough_latency(&fresh_broker(args)?, sluice, sizes, None)?, sizes);
    // The control: the pass-through writing as many records per reading as sluice did,
    // the extra ones to a side topic. Its growth is the broker's, not the processor's.
    let loaded = Latencies::of(
        &passthrough_latency(&fresh_broker(args)?, sluice, sizes, Some(per_reading - 1.0))?,
        sizes,
    );
    let _ = writeln!(
        report,
        "\n## Latency ({} readings/s for {} s, {} pipelines; broker storage {})\n\n\
         | what | p50 ms | p99 ms | max ms | p99 last {unit} ÷ first | never arrived |\n| --- | ---: | ---: | ---: | ---: | ---: |\n\
         | pass-through at the same rate, record sent → copy received ({} of {total} records; the floor) | {} |\n\
         | the pass-through also writing {:.1} more records per reading to another topic, as sluice does ({} of {total}) | {} |\n\
         | sluice, trigger sent → VALIDATION_PASSED received ({} of {expected} executions) | {} |\n\n\
         All include two client hops: the bench producer's linger of 5 ms and the reader's fetch. \
         A record or execution that never arrived (waited for up to 2 minutes after the last was sent) counts \
         as ∞ in every percentile of its window and of the whole. \
         Records sluice wrote per reading sent: {written}.\n\n\
         p99 ms per {unit} of sending:\n\n\
         * pass-through: {}\n* pass-through writing as much as sluice: {}\n* sluice: {}\n\n\
         Sluice's own µs per input record per {unit} (`sluice_record_busy_seconds`: its batches' time \
         outside waits on the broker; the last window includes the drain): {own_us} (last ÷ first {own_drift:.2}){}",
        sizes.latency_rate,
        sizes.latency_seconds,
        sizes.latency_pipelines,
        std::env::var("SLUICE_BROKER_STORAGE").unwrap_or_else(|_| "memory".into()),
        floor.count,
        floor.row(),
        per_reading - 1.0,
        loaded.count,
        loaded.row(),
        ours.count,
        ours.row(),
        floor.per_window,
        loaded.per_window,
        ours.per_window,
        if unsent > 0 {
            format!(
                "\n\nThe broker had still not taken {unsent} of the readings two minutes after the last was queued: \
                 it did not hold the rate (their executions count as never arrived)."
            )
        } else {
            String::new()
        },
        unit = Latencies::window(sizes).1,
    );
    Ok(())
}

/// Latencies of one run, whole and per window of sending. A sample that never arrived is
/// censored: it counts as longer than any that did (∞), in its window and in the whole, so a
/// run that loses records cannot show a better percentile for it.
struct Latencies {
    /// Samples that arrived.
    count: usize,
    /// Samples that never arrived.
    censored: usize,
    p50: f64,
    p99: f64,
    max: f64,
    /// p99 per window, comma-separated.
    per_window: String,
    /// The last window's p99 ÷ the first's.
    drift: f64,
}

impl Latencies {
    /// Per second, or per minute in runs over a minute.
    fn window(sizes: &Sizes) -> (u64, &'static str) {
        if sizes.latency_seconds > 60 {
            (60, "minute")
        } else {
            (1, "second")
        }
    }

    /// From (seconds into the sending, latency ms if it arrived) samples, one per record or
    /// execution sent.
    fn of(samples: &[(f64, Option<f64>)], sizes: &Sizes) -> Latencies {
        let (window, _) = Self::window(sizes);
        let mut by_window: Vec<Vec<f64>> = vec![Vec::new(); (sizes.latency_seconds / window) as usize + 1];
        let latency = |l: &Option<f64>| l.unwrap_or(f64::INFINITY);
        for (sent, l) in samples {
            let w = ((*sent as u64 / window) as usize).min(by_window.len() - 1);
            by_window[w].push(latency(l));
        }
        let p99s: Vec<f64> = by_window
            .iter_mut()
            .filter(|l| !l.is_empty())
            .map(|l| percentiles(l).1)
            .collect();
        let mut all: Vec<f64> = samples.iter().map(|(_, l)| latency(l)).collect();
        let (p50, p99, max) = percentiles(&mut all);
        let censored = samples.iter().filter(|(_, l)| l.is_none()).count();
        Latencies {
            count: samples.len() - censored,
            censored,
            p50,
            p99,
            max,
            per_window: p99s.iter().map(|p| ms(*p, 0)).collect::<Vec<_>>().join(", "),
            drift: match (p99s.first(), p99s.last()) {
                (Some(first), Some(last)) if *first > 0.0 => last / first,
                _ => f64::NAN,
            },
        }
    }

    /// The table's cells: p50, p99, max, drift, never arrived.
    fn row(&self) -> String {
        format!(
            "{} | {} | {} | {:.2} | {}",
            ms(self.p50, 1),
            ms(self.p99, 1),
            ms(self.max, 1),
            self.drift,
            self.censored
        )
    }
}

/// Milliseconds with `decimals`, or ∞ for a censored sample.
fn ms(value: f64, decimals: usize) -> String {
    match value.is_finite() {
        true => format!("{value:.decimals$}"),
        false => "∞".into(),
    }
}

/// What the processor wrote per reading sent, by topic ("1.50 events, ...") and in all.
fn records_written(run: &Run, readings: u64) -> (String, f64) {
    let per_topic: Vec<(&str, f64)> = ["events", "changelog", "jobs"]
        .iter()
        .map(|name| {
            let filter = format!("topic=\"{}\"", run.topic(name));
            let n = metric(&run.http, "sluice_records_out_total", &filter);
            (*name, n / readings.max(1) as f64)
        })
        .collect();
    let text = per_topic
        .iter()
        .map(|(name, n)| format!("{n:.2} {name}"))
        .collect::<Vec<_>>();
    (text.join(", "), per_topic.iter().map(|(_, n)| n).sum())
}

/// The floor under the latency: records at the same rate through the pass-through (same
/// clients, same batching), writing `extra` more records per input to a side topic when
/// given: (seconds into the sending, sent → copy received in ms) per record.
fn passthrough_latency(
    args: &Args,
    sluice: &Path,
    sizes: &Sizes,
    extra: Option<f64>,
) -> Result<Vec<(f64, Option<f64>)>> {
    let base = Run::new(args, sluice, "latency-passthrough")?;
    let (input, output) = (base.topic("sensors"), base.topic("events"));
    let extra = extra.map(|per_input| passthrough::Extra {
        topic: base.topic("changelog"),
        per_input,
    });
    let stop_after = Arc::new(AtomicUsize::new(usize::MAX));
    let copier = {
        let (kafka, inputs, output, stop_after) =
            (base.kafka.clone(), [input.clone()], output.clone(), stop_after.clone());
        std::thread::spawn(move || {
            passthrough::run(&kafka, &inputs, &output, extra, |n| {
                n >= stop_after.load(Ordering::Relaxed)
            })
        })
    };
    let producer = kafka_io::producer(&base.brokers);
    let reader = kafka_io::reader(&base.brokers, &[output.as_str()]);
    // Until the pass-through has joined its group, records would wait for it.
    let mut warm_ups = 0;
    wait("the pass-through copying", Duration::from_secs(120), || {
        kafka_io::send(&producer, &input, "warm-up", &serde_json::json!({}));
        warm_ups += 1;
        producer.poll(Duration::ZERO);
        reader.poll(Duration::from_millis(100)).is_some_and(|m| m.is_ok())
    })?;
    let total = (sizes.latency_rate * sizes.latency_seconds) as usize;
    stop_after.store(warm_ups + total, Ordering::Relaxed);
    let interval = Duration::from_secs_f64(1.0 / sizes.latency_rate as f64);
    let mut sent_at = Vec::with_capacity(total);
    // Per record sent, ms to its first copy.
    let mut latencies: Vec<Option<f64>> = vec![None; total];
    let mut arrived = 0;
    let start = Instant::now();
    let mut drain = |latencies: &mut Vec<Option<f64>>, sent_at: &[Instant]| {
        while let Some(Ok(m)) = reader.poll(Duration::ZERO) {
            let n = m.key().and_then(|k| std::str::from_utf8(k).ok()?.parse::<usize>().ok());
            if let Some((n, at)) = n.and_then(|n| Some((n, sent_at.get(n)?))) {
                if latencies[n].is_none() {
                    latencies[n] = Some(at.elapsed().as_secs_f64() * 1000.0);
                    arrived += 1;
                }
            }
        }
        arrived
    };
    for n in 0..total {
        kafka_io::send(&producer, &input, &n.to_string(), &serde_json::json!({"n": n}));
        sent_at.push(Instant::now());
        producer.poll(Duration::ZERO);
        drain(&mut latencies, &sent_at);
        let due = start + interval * (n as u32 + 1);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    // Records the broker never took count as never arrived.
    let _unsent = kafka_io::flush_while(&producer, || {
        drain(&mut latencies, &sent_at);
    });
    let _ = wait("every copy", Duration::from_secs(120), || {
        drain(&mut latencies, &sent_at) >= total
    });
    // Short of every copy, it would wait for records that never come: leave it.
    if drain(&mut latencies, &sent_at) >= total {
        copier
            .join()
            .map_err(|_| anyhow::anyhow!("the pass-through panicked"))??;
    }
    Ok((sent_at.iter().map(|at| at.duration_since(start).as_secs_f64()))
        .zip(latencies)
        .collect())
}

/// Memory and state for many pipelines: their configs loaded, then a run of each, then a
/// restore from the changelog.
fn scale(args: &Args, sluice: &Path, sizes: &Sizes, report: &mut String) -> Result<()> {
    let _ = writeln!(report, "\n## Scale\n\n| pipelines | config load s | runs s | RSS MiB (peak) | state MiB | restore s |\n| ---: | ---: | ---: | ---: | ---: | ---: |");
    for &pipelines in &sizes.scale {
        let target = target::start();
        let mut run = Run::new(args, sluice, &format!("scale{pipelines}"))?;
        let (brokers, group) = (run.brokers.clone(), run.group());
        produce_configs(&run, pipelines, &target.url);
        let started = Instant::now();
        run.start("state")?;
        let configs = run.topic("config");
        wait("the configs loaded", Duration::from_secs(3600), || {
            kafka_io::committed(&brokers, &group, &configs) >= pipelines as i64
        })?;
        let loaded = started.elapsed().as_secs_f64();
        let runs = if args.configs_only {
            "—".to_string()
        } else {
            let records = produce_readings(&run, pipelines, pipelines * 2);
            let started = Instant::now();
            let sensors = run.topic("sensors");
            wait("the runs", Duration::from_secs(3600), || {
                kafka_io::committed(&brokers, &group, &sensors) >= records as i64
            })?;
            format!("{:.1}", started.elapsed().as_secs_f64())
        };
        let (rss, peak) = measure::rss_mib(run.pid());
        let state = measure::dir_size(&run.dir.join("state")) as f64 / 1_048_576.0;
        run.stop();
        // A new instance: empty state directory, everything from the changelog.
        let restore_started = Instant::now();
        run.start("fresh")?;
        wait("the restore", Duration::from_secs(3600), || run.ready())?;
        let restore = restore_started.elapsed().as_secs_f64();
        run.stop();
        let _ = writeln!(
            report,
            "| {pipelines} | {loaded:.1} | {runs} | {rss:.0} ({peak:.0}) | {state:.1} | {restore:.1} |"
        );
    }
    let _ = writeln!(
        report,
        "\nconfig load s: from the start of `sluice run` (group join included) to every config committed. \
         runs s: then a row count and a trigger for each pipeline, each run calling its job on a loopback \
         target, until the last reading is committed (— with --configs-only). RSS after the runs. restore s: from the start of a new \
         process with an empty state directory to /readyz 200 (group join included)."
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let sluice = match &args.sluice {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("sluice"),
    };
    if !sluice.exists() {
        bail!(
            "no sluice binary at {}: build it (cargo build --release -p sluice) or pass --sluice",
            sluice.display()
        );
    }
    let mut sizes = Sizes::new(args.quick);
    if let Some(seconds) = args.latency_seconds {
        sizes.latency_seconds = seconds.max(1);
    }
    if let Some(rate) = args.latency_rate {
        sizes.latency_rate = rate.max(1);
    }
    if !args.scale.is_empty() {
        sizes.scale = args.scale.clone();
    }
    if let Some(pipelines) = args.timer_pipelines {
        sizes.timer_pipelines = pipelines;
    }
    if let Some(seconds) = args.steady_seconds {
        sizes.steady_seconds = seconds.max(1);
    }
    if !args.steady_rates.is_empty() {
        sizes.steady_rates = args.steady_rates.clone();
    }
    let chosen: Vec<&str> = if args.scenarios.is_empty() {
        SCENARIOS.to_vec()
    } else {
        args.scenarios.iter().map(String::as_str).collect()
    };
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# Sluice benchmark\n\n{} · {} · {} CPUs · broker {}{}",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        std::env::consts::ARCH,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        args.brokers,
        if args.quick {
            " · --quick (harness check, not figures)"
        } else {
            ""
        }
    );
    for scenario in chosen {
        let result = match scenario {
            "steady" => steady::report(
                &sizes.steady_rates,
                sizes.steady_seconds,
                args.steady_cache_mb,
                &mut report,
            )
            .map(|_| ()),
            "history" => history::report(&sizes.history, sizes.history_rounds, &mut report).map(|_| ()),
            "throughput" => throughput(&args, &sluice, &sizes, &mut report),
            "latency" => latency(&args, &sluice, &sizes, &mut report),
            "timers" => timers::run(&args, &sluice, &sizes, &mut report),
            "triggers" => triggers::run(&args, &sluice, &sizes, &mut report),
            "takeover" => takeover::run(&args, &sluice, &sizes, &mut report),
            "page" => page::run(&args, &sluice, &sizes, &mut report),
            _ => scale(&args, &sluice, &sizes, &mut report),
        };
        result.with_context(|| format!("scenario {scenario}"))?;
    }
    print!("{report}");
    if let Some(out) = &args.out {
        std::fs::write(out, &report).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record that never arrived counts as longer than any that did: losing the slow ones
    /// cannot make a run look faster.
    #[test]
    fn samples_that_never_arrived_count_as_the_slowest() {
        let sizes = Sizes::new(true);
        // 100 samples a second over 2 s: the first second all arrive in 10 ms; in the second,
        // 97 arrive in 10 ms, one in 50 ms, and two never do.
        let mut samples: Vec<(f64, Option<f64>)> = (0..200).map(|n| (n as f64 / 100.0, Some(10.0))).collect();
        samples[150].1 = Some(50.0);
        samples[198].1 = None;
        samples[199].1 = None;
        let l = Latencies::of(&samples, &sizes);
        assert_eq!((l.count, l.censored), (198, 2));
        assert_eq!((l.p50, l.max), (10.0, f64::INFINITY));
        assert_eq!(l.per_window, "10, ∞", "the second's p99 is a lost one");
        assert_eq!(l.row(), "10.0 | 50.0 | ∞ | inf | 2");
        let arrived: Vec<_> = samples.iter().filter(|(_, l)| l.is_some()).copied().collect();
        assert_eq!(
            Latencies::of(&arrived, &sizes).per_window,
            "10, 10",
            "dropping them would hide them"
        );
    }
}
