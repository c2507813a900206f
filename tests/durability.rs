//! Durability under things going wrong, with real processes and a real broker: SIGKILL at
//! random moments, instances joining and leaving, a state directory deleted, the broker
//! cut off and back, a target slower than a rebalance. Each scenario runs the same
//! workload as an uninterrupted reference run and must end with the same set of `eventId`s
//! (each always naming the same event type and execution), exactly the bad records in the
//! dead-letter topic, and every run called once where the calls land: the target counts
//! requests per run and ignores the `Idempotency-Key` Sluice sends, as many targets do. The
//! one call that may land twice is one in flight when its process was SIGKILLed (see the
//! README's "What a crash can still cause"). Last, reading a partition's history on a broker
//! (tansu) that misplaces its beginning.

mod support;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use serde_json::{json, Value};
use sluice::core::events::{Event, EventType};
use sluice::core::partitioning::PartitionId;
use sluice::core::PipelineState;
use sluice::runtime::store::{PartitionStore, StoreBatch};
use support::{command_job, day, free_port, http_get, pipeline, scripted_server, serve, wait_until, OwnBroker, World};

/// Pipelines in the workload, and sensor readings per pipeline: 200 × 24 = 4,800 sensor
/// records, plus 200 configs and the 400 job reports the processor's executor writes.
const PIPELINES: usize = 200;
const READINGS: usize = 24;
/// One malformed record every this many sensor records.
const BAD_EVERY: usize = 250;
/// Deadline for a whole workload run, kills and restarts included.
const RUN_DEADLINE: Duration = Duration::from_secs(420);

fn pipeline_id(i: usize) -> String {
    format!("p{i:03}")
}

/// The tests' usual pipeline with an `http` job at `target`, and an evaluation interval
/// long enough that no timer fires during a run (timer events would differ between runs).
/// A trigger's call is short (3 s tries, one retry): a run whose call was in flight at a
/// SIGKILL waits for the call's deadline (about 20 s) before its next owner calls again.
fn config(id: &str, target: &str) -> Value {
    let job = json!({"type": "http", "config": {"url": format!("{target}/{id}"), "timeout": 3}, "maxRetries": 0,
                     "triggerRetry": {"interval": "1s", "maxAttempts": 1}});
    let mut config = pipeline(id, job);
    config["schedule"]["evaluation"] = json!({"window": "2h", "interval": "30m"});
    config
}

/// A record to produce: topic (without prefix), key, value.
type Record = (&'static str, String, Vec<u8>);

/// The sensor records, in the order produced (the same in every run, so offsets match):
/// row counts that grow past the threshold, then the trigger; malformed records in between.
fn sensor_records() -> (Vec<Record>, BTreeSet<Vec<u8>>) {
    let mut records = Vec::new();
    let mut bad = BTreeSet::new();
    for round in 0..READINGS {
        for i in 0..PIPELINES {
            let id = pipeline_id(i);
            let data = if round + 1 == READINGS {
                json!({"pipelineId": id, "key": "upstream", "date": day(), "data": {"status": "ready"}})
            } else {
                let count = (round + 1) * 100;
                json!({"pipelineId": id, "key": "row-count", "date": day(), "data": {"count": count}})
            };
            records.push(("sensors", id.clone(), serde_json::to_vec(&data).unwrap()));
            if records.len() % BAD_EVERY == 0 {
                let value = format!("{{\"pipelineId\": \"{id}\", \"key\": broken record {}", bad.len()).into_bytes();
                bad.insert(value.clone());
                records.push(("sensors", id, value));
            }
        }
    }
    (records, bad)
}

/// What a run left behind.
struct Outcome {
    event_ids: BTreeSet<String>,
    /// Per event id, the type and execution of every event read with it.
    identities: BTreeMap<String, BTreeSet<String>>,
    events_read: usize,
    /// Distinct source coordinates and payloads of dead letters.
    dead_letter_sources: BTreeSet<String>,
    dead_letter_payloads: BTreeSet<Vec<u8>>,
    /// When each call landed at the job target, per pipeline (each pipeline's one run).
    calls: BTreeMap<String, Vec<Instant>>,
    /// What every pipeline's executions came to (set for the reference run).
    outcomes: Option<BTreeMap<String, Vec<String>>>,
}

/// A job target that answers after `delay` and counts calls per pipeline where they land,
/// whatever idempotency key they carry.
struct Target {
    url: String,
    calls: Arc<Mutex<BTreeMap<String, Vec<Instant>>>>,
}

impl Target {
    fn answering_after(delay: Duration) -> Target {
        Target::answering_each_after(move |_| delay)
    }

    /// A target that answers a call of each pipeline after `delay(pipeline)`.
    fn answering_each_after(delay: impl Fn(&str) -> Duration + Send + Sync + 'static) -> Target {
        let calls: Arc<Mutex<BTreeMap<String, Vec<Instant>>>> = Arc::default();
        let seen = calls.clone();
        let base = serve(move |request| {
            assert!(
                request.header("idempotency-key").is_some(),
                "a trigger without an idempotency key"
            );
            let pipeline = request.path.rsplit('/').next().unwrap_or_default().to_string();
            seen.lock()
                .unwrap()
                .entry(pipeline.clone())
                .or_default()
                .push(Instant::now());
            std::thread::sleep(delay(&pipeline));
            (200, "{}".to_string())
        });
        Target {
            url: format!("{base}/run"),
            calls,
        }
    }

    fn fast() -> Target {
        Target::answering_after(Duration::ZERO)
    }

    fn calls(&self) -> BTreeMap<String, Vec<Instant>> {
        self.calls.lock().unwrap().clone()
    }

    fn total(&self) -> usize {
        self.calls.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// Events of every pipeline once each has completed its job.
fn all_completed(events: &[Event]) -> bool {
    let done: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.kind == EventType::JOB_COMPLETED)
        .map(|e| e.pipeline_id.as_str())
        .collect();
    done.len() == PIPELINES
}

/// The input records the events say were rejected, as `partition@offset`.
fn rejected_sources(events: &[Event]) -> BTreeSet<String> {
    events
        .iter()
        .filter(|e| e.kind == EventType::INPUT_REJECTED)
        .filter_map(|e| e.detail.get("source")?.as_str()?.split_once('/'))
        .map(|(_, at)| at.to_string())
        .collect()
}

fn count(events: &[Event], kind: EventType) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

/// Sensor records are produced in this many chunks, with a disturbance after each.
const CHUNKS: usize = 8;

/// Runs the workload in `w`: publishes the configs, starts the processor(s) with `start`,
/// and publishes the sensors in chunks, calling `disturb` with the chunk number (0 = the
/// configs) after each while the processor is busy with it; then waits until every
/// pipeline completed. `disturb` may kill, start or stop processes.
fn run(
    w: &mut World,
    target: &Target,
    start: impl FnOnce(&mut World),
    mut disturb: impl FnMut(&mut World, Moment),
) -> Outcome {
    let configs: Vec<_> = (0..PIPELINES)
        .map(|i| {
            let id = pipeline_id(i);
            let value = serde_json::to_vec(&config(&id, &target.url)).unwrap();
            ("config", id, value)
        })
        .collect();
    w.produce_many(&configs);
    start(w);
    let deadline = Instant::now() + RUN_DEADLINE;
    disturb(w, Moment { chunk: 0, produced: 0 });
    w.wait_for_all("every CONFIG_ACCEPTED", deadline, |es| {
        count(es, EventType::CONFIG_ACCEPTED) >= PIPELINES
    });
    let (sensors, bad) = sensor_records();
    let mut produced = 0;
    for (k, chunk) in sensors.chunks(sensors.len().div_ceil(CHUNKS)).enumerate() {
        w.produce_many(chunk);
        produced += chunk.len() as i64;
        disturb(w, Moment { chunk: k + 1, produced });
    }
    w.wait_for_all("every JOB_COMPLETED", deadline, all_completed);
    // Every bad record is rejected with an event and a dead letter, written in one batch:
    // a shortfall of events means records were never read, of dead letters that they were.
    let events = w.wait_for_all("an INPUT_REJECTED per bad record", deadline, |es| {
        rejected_sources(es).len() >= bad.len()
    });
    let source = |headers: &[(String, String)]| -> String {
        let h: HashMap<&str, &str> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert!(!h["error"].is_empty(), "a dead letter without a reason");
        format!("{}@{}", h["source.partition"], h["source.offset"])
    };
    // A crash may re-send the dead letters of the batch it interrupted: read until every
    // distinct source record is there.
    let mut letters: Vec<support::DeadLetter> = Vec::new();
    loop {
        let distinct: BTreeSet<String> = letters.iter().map(|(_, h)| source(h)).collect();
        if distinct.len() >= bad.len() {
            break;
        }
        let more = w.dead_letters_within(letters.len() + bad.len() - distinct.len(), support::DEADLINE);
        if more.len() <= letters.len() {
            let rejected = rejected_sources(&events);
            panic!(
                "[{}] dead letters: {} distinct of {}; rejected (INPUT_REJECTED) without a dead letter: {:?}; the DLQ's watermarks: {:?}\n{}",
                w.name,
                distinct.len(),
                bad.len(),
                rejected.difference(&distinct).collect::<Vec<_>>(),
                w.watermarks("dlq", 0),
                w.log_tail()
            );
        }
        letters = more;
    }
    let dead_letter_sources: BTreeSet<String> = letters.iter().map(|(_, h)| source(h)).collect();
    let dead_letter_payloads = letters.into_iter().filter_map(|(v, _)| v).collect();
    assert_eq!(
        dead_letter_payloads, bad,
        "[{}] the DLQ holds exactly the bad records",
        w.name
    );
    let mut identities: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in &events {
        let identity = format!("{} {:?}/{:?}", e.kind.name(), e.schedule_id, e.date);
        identities.entry(e.event_id.clone()).or_default().insert(identity);
    }
    Outcome {
        event_ids: events.iter().map(|e| e.event_id.clone()).collect(),
        identities,
        events_read: events.len(),
        dead_letter_sources,
        dead_letter_payloads,
        calls: target.calls(),
        outcomes: None,
    }
}

/// Where a run stands when it is disturbed: the sensor chunk just produced (0 = only the
/// configs) and how many sensor records have been produced in all.
#[derive(Debug, Clone, Copy)]
struct Moment {
    chunk: usize,
    produced: i64,
}

/// Waits until the processor has handled `more` sensor records beyond those it had (or all
/// produced so far): it is busy with the chunk just produced.
fn wait_for_more(w: &mut World, at: Moment, more: usize) {
    let target = (w.committed("sensors") + more as i64).min(at.produced);
    wait_until(
        "the processor to progress",
        RUN_DEADLINE,
        || w.log_tail(),
        || w.committed("sensors") >= target,
    );
}

/// The uninterrupted run every scenario is compared with, computed once per test binary.
fn reference() -> Arc<Outcome> {
    static REFERENCE: Mutex<Option<Arc<Outcome>>> = Mutex::new(None);
    let mut slot = REFERENCE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(outcome) = slot.as_ref() {
        return outcome.clone();
    }
    let mut w = World::new("reference");
    let target = Target::fast();
    let mut outcome = run(&mut w, &target, World::start, |_, _| {});
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    outcome.outcomes = Some(outcomes(&states_in(w.state.path())));
    let outcome = Arc::new(outcome);
    *slot = Some(outcome.clone());
    outcome
}

/// The checks every scenario ends with. `kills`: when processes were SIGKILLed; a call
/// landing a second time is excused only for a run whose first call was in flight then.
fn assert_same_as_reference(name: &str, got: &Outcome, log: &str, kills: &[Instant]) {
    let want = reference();
    let missing: Vec<_> = want.event_ids.difference(&got.event_ids).take(5).collect();
    let extra: Vec<_> = got.event_ids.difference(&want.event_ids).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "[{name}] event ids differ from the uninterrupted run: {} vs {} distinct; missing e.g. {missing:?}, extra e.g. {extra:?}\nlog tail:\n{}",
        got.event_ids.len(),
        want.event_ids.len(),
        log.lines().rev().take(30).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(
        got.dead_letter_sources.len(),
        want.dead_letter_sources.len(),
        "[{name}] DLQ sources"
    );
    assert_eq!(
        got.dead_letter_payloads, want.dead_letter_payloads,
        "[{name}] DLQ payloads"
    );
    for (id, identities) in &got.identities {
        assert_eq!(
            identities.len(),
            1,
            "[{name}] event id {id} names different events: {identities:?}"
        );
    }
    // Every pipeline's run was called, and once, counted where the calls landed.
    let called: BTreeSet<&String> = got.calls.keys().collect();
    let expected: BTreeSet<String> = (0..PIPELINES).map(pipeline_id).collect();
    assert_eq!(called, expected.iter().collect(), "[{name}] runs called at the target");
    let twice: Vec<(&String, &Vec<Instant>)> = got.calls.iter().filter(|(_, at)| at.len() > 1).collect();
    // In flight at a kill: the call landed within moments of it (a request already on the
    // wire lands after its sender died).
    let near = |a: Instant, b: Instant| a.saturating_duration_since(b).max(b.saturating_duration_since(a));
    let excused = |first: Instant| kills.iter().any(|k| near(*k, first) <= Duration::from_secs(2));
    let duplicates: usize = twice.iter().map(|(_, at)| at.len() - 1).sum();
    eprintln!(
        "[{name}] {} distinct events ({} read, re-sends included), {} dead letters, {} runs called, {duplicates} second calls at the target",
        got.event_ids.len(),
        got.events_read,
        got.dead_letter_payloads.len(),
        got.calls.len(),
    );
    if !twice.is_empty() {
        let path = std::env::temp_dir().join(format!("sluice-durability-{name}.log"));
        let _ = std::fs::write(&path, log);
        eprintln!("[{name}] the processors' log is in {}", path.display());
    }
    for (pipeline, at) in twice {
        let trail: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(pipeline.as_str()) && (l.contains("trigger") || l.contains("journaled")))
            .collect();
        assert!(
            at.len() == 2 && excused(at[0]),
            "[{name}] {pipeline}'s run was called {} times, and its first call was not in flight at a SIGKILL (calls at {:?} after the first; kills {:?} away from it)\n{}",
            at.len(),
            at.iter().map(|t| t.duration_since(at[0])).collect::<Vec<_>>(),
            kills.iter().map(|k| near(*k, at[0])).collect::<Vec<_>>(),
            trail.join("\n")
        );
    }
}

fn sigkill(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

fn sigterm(mut child: Child, w: &World) {
    sigterm_child(&mut child, w);
}

fn sigterm_child(child: &mut Child, w: &World) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = exit_of(child, w);
    assert_eq!(status.code(), Some(0), "clean stop\n{}", w.log_tail());
}

/// Waits for `child` to exit.
fn exit_of(child: &mut Child, w: &World) -> std::process::ExitStatus {
    let mut status = None;
    wait_until(
        "the instance to exit",
        Duration::from_secs(120),
        || w.log_tail(),
        || {
            status = child.try_wait().unwrap();
            status.is_some()
        },
    );
    status.unwrap()
}

/// A small deterministic generator (xorshift), so a failing run can be repeated.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The arguments of the static group member most scenarios run as. Its session outlasts a
/// restart by far: tansu 0.6 hands a rejoining static member its predecessor's member id
/// with the predecessor's time of last contact, so the new member's first heartbeat (some
/// 6 s after joining: tansu holds a static member's join and sync 3 s each) expires it when
/// the predecessor's last heartbeat is a session timeout old (10 s in client.properties);
/// the group is then left with a leader that is no member and never assigns again (seen
/// once in `a_lost_state_directory_is_restored_from_the_changelog`). Kafka refreshes a
/// member's session on its join.
const STATIC: &[&str] = &["--instance", "only", "--kafka-property", "session.timeout.ms=30000"];

/// Starts the world's processor as a static group member, so that a restart after SIGKILL
/// takes the partitions back at once.
fn start_static(w: &mut World) {
    let child = w.spawn(w.state.path(), STATIC);
    assert!(w.swap_processor(Some(child)).is_none());
}

#[test]
fn sigkill_at_random_moments_loses_and_doubles_nothing() {
    reference();
    let mut w = World::new("crash");
    let target = Target::fast();
    let seed = std::env::var("SLUICE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    let mut rng = Rng(seed);
    let mut kills = Vec::new();
    let outcome = run(&mut w, &target, start_static, |w, at| {
        // Kill during the configs and during every other chunk of sensors, a random number
        // of records into it (the processor is mid-batch, mid-write or mid-trigger).
        if at.chunk % 2 == 0 {
            if at.chunk == 0 {
                let accepted = 1 + rng.below(PIPELINES as u64 - 1) as usize;
                w.wait_for_all("some configs", Instant::now() + RUN_DEADLINE, |es| {
                    count(es, EventType::CONFIG_ACCEPTED) >= accepted
                });
            } else {
                wait_for_more(w, at, 1 + rng.below(300) as usize);
            }
            let mut child = w.swap_processor(None).expect("processor running");
            kills.push(Instant::now());
            sigkill(&mut child);
            start_static(w);
        }
    });
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let killed = kills.len();
    eprintln!("[crash] seed {seed}: {killed} SIGKILLs");
    assert!(killed >= 5, "only {killed} kills happened");
    assert_same_as_reference("crash", &outcome, &w.log(), &kills);
    assert_state_restores("crash", &w, w.state.path(), Some(STATIC));
}

/// Every pipeline's state in the partition stores under `dir` (the instance using it must
/// be stopped).
fn states_in(dir: &Path) -> BTreeMap<String, PipelineState> {
    let mut states = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(p) = name
            .strip_prefix("partition-")
            .and_then(|p| p.parse().ok())
            .map(PartitionId::new)
        else {
            continue;
        };
        let store = PartitionStore::open(dir, p).unwrap();
        for id in store.pipelines().unwrap() {
            let state = store.pipeline(&id).unwrap().unwrap();
            assert!(
                states.insert(id.clone(), state).is_none(),
                "{id} held by two partition stores"
            );
        }
    }
    states
}

/// The state a new instance with an empty state directory restores from the changelog
/// (every partition assigned to it, then stopped cleanly). `extra`: its arguments (the
/// static member id the stopped instance had, whose partitions only it gets back).
fn restored_from_scratch(w: &World, partitions: usize, extra: &[&str]) -> BTreeMap<String, PipelineState> {
    let dir = tempfile::tempdir().unwrap();
    let opened = occurrences(w, "partition assigned");
    let mut fresh = w.spawn(dir.path(), extra);
    wait_log(w, "partition assigned", opened + partitions);
    sigterm_child(&mut fresh, w);
    states_in(dir.path())
}

/// What an execution came to, without the times a run happened to take.
fn outcomes(states: &BTreeMap<String, PipelineState>) -> BTreeMap<String, Vec<String>> {
    states
        .iter()
        .map(|(id, s)| {
            let mut seen: Vec<String> = s
                .executions
                .iter()
                .map(|(key, e)| {
                    format!(
                        "{key} {} attempt {} retries {}",
                        e.phase.name(),
                        e.attempt,
                        e.retries_used
                    )
                })
                .collect();
            seen.extend(s.sensors.iter().map(|(k, v)| format!("sensor {k} = {:?}", v.data)));
            (id.clone(), seen)
        })
        .collect()
}

/// After a scenario: the live state (the stopped instance's stores under `live`) comes to
/// the same outcomes as the uninterrupted run and, when `restore` gives the static member id
/// the instance had (or none), equals what a new instance restores from the changelog,
/// pipeline by pipeline.
fn assert_state_restores(name: &str, w: &World, live: &Path, restore: Option<&[&str]>) {
    // Every partition has a store once a whole run went through.
    let partitions = std::fs::read_dir(live).unwrap().count();
    let live = states_in(live);
    assert_eq!(live.len(), PIPELINES, "[{name}] every pipeline has state");
    let reference = reference();
    let want = reference.outcomes.as_ref().expect("the reference run's outcomes");
    assert_eq!(
        &outcomes(&live),
        want,
        "[{name}] outcomes differ from the uninterrupted run"
    );
    let Some(extra) = restore else { return };
    let restored = restored_from_scratch(w, partitions, extra);
    for (id, state) in &live {
        assert_eq!(
            restored.get(id),
            Some(state),
            "[{name}] {id}: restored state differs from the live state"
        );
    }
    assert_eq!(restored.len(), live.len(), "[{name}] restored pipelines");
}

/// How often `needle` occurs in the processors' log.
fn occurrences(w: &World, needle: &str) -> usize {
    w.log().matches(needle).count()
}

/// Waits until the processors' log holds `needle` at least `n` times: a rebalance finished.
fn wait_log(w: &World, needle: &str, n: usize) {
    wait_until(
        &format!("{n} × {needle:?} in the log"),
        Duration::from_secs(120),
        || w.log_tail(),
        || occurrences(w, needle) >= n,
    );
}

#[test]
fn instances_join_and_leave_under_load() {
    reference();
    let mut w = World::new("rebalance");
    let target = Target::fast();
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let others: RefCell<Vec<Child>> = RefCell::new(Vec::new());
    let mut stage = 0;
    let mut live_dir = None;
    const ASSIGNED: &str = "partition assigned";
    const REVOKED: &str = "partition revoked";
    let outcome = run(
        &mut w,
        &target,
        |w| {
            w.start();
            wait_log(w, ASSIGNED, 3);
            // One becomes two: the first gives up partitions, the second gets some.
            others.borrow_mut().push(w.spawn(dirs[0].path(), &[]));
            wait_log(w, REVOKED, 3);
            wait_log(w, ASSIGNED, 6);
        },
        |w, at| {
            let mut others = others.borrow_mut();
            if at.chunk == 2 {
                // Two become three, mid-chunk.
                wait_for_more(w, at, 100);
                let (revoked, assigned) = (occurrences(w, REVOKED), occurrences(w, ASSIGNED));
                others.push(w.spawn(dirs[1].path(), &[]));
                wait_log(w, REVOKED, revoked + 3);
                wait_log(w, ASSIGNED, assigned + 3);
                stage = 1;
            } else if at.chunk == 5 {
                // Three become one: the first two leave cleanly, mid-chunk.
                wait_for_more(w, at, 100);
                let assigned = occurrences(w, ASSIGNED);
                let first = w.swap_processor(others.pop()).expect("processor running");
                live_dir = Some(dirs[1].path().to_path_buf());
                sigterm(first, w);
                sigterm(others.pop().unwrap(), w);
                wait_log(w, ASSIGNED, assigned + 2);
                stage = 2;
            }
        },
    );
    assert_eq!(stage, 2, "every stage happened");
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let log = w.log();
    let restored = log.matches("full_restore=false").count() + log.matches("full_restore=true").count();
    eprintln!("[rebalance] {restored} partition openings");
    assert_same_as_reference("rebalance", &outcome, &log, &[]);
    assert_state_restores("rebalance", &w, &live_dir.expect("the last instance"), Some(&[]));
}

#[test]
fn a_lost_state_directory_is_restored_from_the_changelog() {
    reference();
    let mut w = World::new("restore");
    let target = Target::fast();
    let mut killed = None;
    let outcome = run(&mut w, &target, start_static, |w, at| {
        if at.chunk == CHUNKS / 2 {
            wait_for_more(w, at, 100);
            let mut child = w.swap_processor(None).expect("processor running");
            killed = Some(Instant::now());
            sigkill(&mut child);
            wipe(w.state.path());
            start_static(w);
        }
    });
    let kills: Vec<Instant> = killed.into_iter().collect();
    assert!(!kills.is_empty());
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let log = w.log();
    let restored: u64 = log
        .lines()
        .filter(|l| l.contains("full_restore=true"))
        .filter_map(|l| l.split("restored_records=").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert!(restored > 0, "a full restore from the changelog happened:\n{log}");
    eprintln!("[restore] {restored} changelog records restored");
    assert_same_as_reference("restore", &outcome, &log, &kills);
    assert_state_restores("restore", &w, w.state.path(), Some(STATIC));
}

fn wipe(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
    }
}

/// A TCP proxy between the clients and the broker that can cut every client off and let
/// them back: what a client sees of a network partition, or of a broker restart that keeps
/// its producer state (as Kafka's does). tansu itself is not restarted: its SQLite engine,
/// restarted under load, panics on the next batch of a producer that saw the outage
/// ("more or less than one row" in idempotent_message_check) and stops serving.
struct Partition {
    /// The connections forwarded now, and whether new ones are cut off; one lock, so that
    /// no connection is let through while a cut is made.
    state: Arc<Mutex<(bool, Vec<TcpStream>)>>,
}

impl Partition {
    fn start(port: u16, upstream: u16) -> Partition {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let state: Arc<Mutex<(bool, Vec<TcpStream>)>> = Arc::default();
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let mut state = shared.lock().unwrap();
                // Cut off: accepted and closed at once, as a broker going down does.
                if state.0 {
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                forward(&client, &server);
                state.1.extend([client, server]);
            }
        });
        Partition { state }
    }

    /// Closes every forwarded connection and refuses new ones until [`Partition::heal`].
    fn cut(&self) {
        let mut state = self.state.lock().unwrap();
        state.0 = true;
        for stream in state.1.drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.state.lock().unwrap().0 = false;
    }
}

/// Copies bytes both ways between a client and the broker until either side closes.
fn forward(client: &TcpStream, server: &TcpStream) {
    for (from, to) in [(client, server), (server, client)] {
        let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Both);
        });
    }
}

/// A TCP proxy in front of the broker that can cut off the clients of one process only,
/// told apart by the `client.id` of the first request each connection makes (a Kafka
/// request header: size, api key, version, correlation id, then the client id as a
/// length-prefixed string). What a network partition looks like to one instance while
/// another, and the broker, carry on.
struct ClientCut {
    state: Arc<Mutex<Cuts>>,
}

/// The client ids cut off, and each forwarded connection with its client id.
#[derive(Default)]
struct Cuts {
    off: BTreeSet<String>,
    open: Vec<(String, TcpStream)>,
}

impl ClientCut {
    fn start(port: u16, upstream: u16) -> ClientCut {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let state: Arc<Mutex<Cuts>> = Arc::default();
        let shared = state.clone();
        std::thread::spawn(move || {
            for mut client in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut head = [0u8; 14];
                    if client.read_exact(&mut head).is_err() {
                        return;
                    }
                    let len = i16::from_be_bytes([head[12], head[13]]).max(0) as usize;
                    let mut id = vec![0u8; len];
                    if client.read_exact(&mut id).is_err() {
                        return;
                    }
                    let id = String::from_utf8_lossy(&id).into_owned();
                    let mut state = shared.lock().unwrap();
                    // Cut off: closed at once, as an unreachable broker's connections are.
                    if state.off.contains(&id) {
                        return;
                    }
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        return;
                    };
                    if server
                        .write_all(&head)
                        .and_then(|()| server.write_all(id.as_bytes()))
                        .is_err()
                    {
                        return;
                    }
                    forward(&client, &server);
                    state.open.extend([(id.clone(), client), (id, server)]);
                });
            }
        });
        ClientCut { state }
    }

    /// Cuts every connection of clients with `client_id`, and refuses their new ones.
    fn cut(&self, client_id: &str) {
        let mut state = self.state.lock().unwrap();
        state.off.insert(client_id.to_string());
        state.open.retain(|(id, stream)| {
            let cut = id == client_id;
            if cut {
                let _ = stream.shutdown(Shutdown::Both);
            }
            !cut
        });
    }
}

fn wait_probe(addr: &str, path: &str, want: u16, w: &World) {
    wait_until(
        &format!("{path} to answer {want}"),
        Duration::from_secs(90),
        || w.log_tail(),
        || http_get(addr, path).is_some_and(|(status, _)| status == want),
    );
}

/// The broker goes away mid-run (every connection cut, new ones closed at once) and comes
/// back: the processor says so (not ready) but stays alive, then carries on, and the run
/// ends as the uninterrupted one did, with state a new instance restores.
#[test]
fn the_broker_cut_off_and_back_mid_run() {
    reference();
    let broker = OwnBroker::new();
    let partition = Partition::start(broker.port, broker.listen);
    let brokers = broker.start();
    let mut w = World::on_broker("broker-away", &brokers);
    let target = Target::fast();
    let health = format!("127.0.0.1:{}", free_port());
    let mut done = false;
    let outcome = run(
        &mut w,
        &target,
        |w| {
            let child = w.spawn(w.state.path(), &[&["--http", health.as_str()], STATIC].concat());
            w.swap_processor(Some(child));
        },
        |w, at| {
            if at.chunk == CHUNKS / 2 {
                done = true;
                wait_for_more(w, at, 100);
                wait_probe(&health, "/readyz", 200, w);
                partition.cut();
                // The processor notices, says so (not ready), and keeps running: alive, so
                // that no orchestrator restarts it for a broker's outage.
                wait_probe(&health, "/readyz", 503, w);
                let (status, body) = http_get(&health, "/readyz").unwrap();
                assert!(status == 503 && body.contains("broker unreachable"), "{body}");
                assert_eq!(http_get(&health, "/healthz").map(|(s, _)| s), Some(200));
                partition.heal();
                wait_probe(&health, "/readyz", 200, w);
            }
        },
    );
    assert!(done);
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    assert_same_as_reference("broker-away", &outcome, &w.log(), &[]);
    assert_state_restores("broker-away", &w, w.state.path(), Some(STATIC));
}

/// A target slower than a rebalance: while its calls are in flight (and more wait behind
/// the per-target bound), a second instance joins and the eager rebalance revokes every
/// partition. The first instance lets its partitions go only once its calls have reported,
/// the new owners read those reports, and no run is called twice.
#[test]
fn calls_in_flight_during_a_rebalance_land_once() {
    const SLOW: usize = 8;
    let mut w = World::new("slow-target");
    let target = Target::answering_after(Duration::from_secs(5));
    for i in 0..SLOW {
        let mut slow = config(&pipeline_id(i), &target.url);
        slow["job"]["config"]["timeout"] = json!(10);
        w.config(&slow);
    }
    w.start();
    let deadline = Instant::now() + RUN_DEADLINE;
    w.wait_for_all("every CONFIG_ACCEPTED", deadline, |es| {
        count(es, EventType::CONFIG_ACCEPTED) >= SLOW
    });
    for i in 0..SLOW {
        w.sensor(&pipeline_id(i), "row-count", json!({"count": 5000}));
        w.sensor(&pipeline_id(i), "upstream", json!({"status": "ready"}));
    }
    // The first calls are in flight (4 at a time reach the target; the rest wait).
    wait_until(
        "calls in flight",
        Duration::from_secs(60),
        || w.log_tail(),
        || target.total() >= 1,
    );
    let dir = tempfile::tempdir().unwrap();
    let revoked = occurrences(&w, "partition revoked");
    let mut other = w.spawn(dir.path(), &[]);
    wait_log(&w, "partition revoked", revoked + 1);
    let events = w.wait_for_all("every JOB_COMPLETED", deadline, |es| {
        count(es, EventType::JOB_COMPLETED) >= SLOW
    });
    sigterm_child(&mut other, &w);
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let calls = target.calls();
    let second: usize = calls.values().map(|at| at.len() - 1).sum();
    eprintln!(
        "[slow-target] {} runs called, {second} second calls at the target",
        calls.len()
    );
    assert_eq!(calls.len(), SLOW, "every run was called");
    for (pipeline, at) in &calls {
        assert_eq!(at.len(), 1, "{pipeline}'s run was called {} times", at.len());
    }
    assert!(
        w.log().contains("waiting for their in-flight triggers to report"),
        "the revocation waited: {}",
        w.log_tail()
    );
    let triggered: BTreeSet<&String> = events
        .iter()
        .filter(|e| e.kind == EventType::JOB_TRIGGERED)
        .map(|e| &e.event_id)
        .collect();
    assert_eq!(triggered.len(), SLOW, "one JOB_TRIGGERED per run");
}

/// A SIGKILL while two triggers wait for the one slot a slow call holds: the waiting calls
/// never began (no start mark on the jobs topic), so the restarted owner makes them soon
/// after their time to begin (30 s), not at their deadlines (about 6 minutes, the default
/// retry policy's); the slow call, which reached the target, is left to its deadline.
/// Counted at the target: every run called once. Before start marks, the waiting calls
/// went out only at their deadlines.
#[test]
fn after_a_crash_the_calls_that_never_began_go_out_within_seconds() {
    let mut w = World::new("never-began");
    let slow = pipeline_id(0);
    let waiting = [pipeline_id(1), pipeline_id(2)];
    let held = slow.clone();
    let target = Target::answering_each_after(move |p| match p == held {
        true => Duration::from_secs(600),
        false => Duration::ZERO,
    });
    for id in std::iter::once(&slow).chain(&waiting) {
        // The default retry policy: a deadline about 6 minutes after the request.
        let job = json!({"type": "http", "config": {"url": format!("{}/{id}", target.url)}});
        w.config(&pipeline(id, job));
    }
    let args = [STATIC, &["--max-calls-per-target", "1"]].concat();
    let child = w.spawn(w.state.path(), &args);
    assert!(w.swap_processor(Some(child)).is_none());
    w.wait_for_all("every CONFIG_ACCEPTED", Instant::now() + RUN_DEADLINE, |es| {
        count(es, EventType::CONFIG_ACCEPTED) >= 3
    });
    let ready = |w: &mut World, id: &str| {
        w.sensor(id, "row-count", json!({"count": 5000}));
        w.sensor(id, "upstream", json!({"status": "ready"}));
    };
    ready(&mut w, &slow);
    wait_until(
        "the slow call at the target",
        Duration::from_secs(60),
        || w.log_tail(),
        || target.total() >= 1,
    );
    for id in &waiting {
        ready(&mut w, id);
    }
    // Both in the executor, queued behind the slow call for the target's one slot.
    wait_log(&w, "triggering job", 3);
    assert_eq!(target.total(), 1, "{:?}", target.calls());
    sigkill(&mut w.swap_processor(None).unwrap());
    let killed = Instant::now();
    let child = w.spawn(w.state.path(), &args);
    w.swap_processor(Some(child));
    wait_until(
        "the calls that never began made by the restarted owner",
        Duration::from_secs(120),
        || format!("{:?}\n{}", target.calls(), w.log_tail()),
        || waiting.iter().all(|id| target.calls().contains_key(id)),
    );
    let calls = target.calls();
    eprintln!(
        "[never-began] waiting calls made {:?} after the SIGKILL",
        waiting.iter().map(|id| calls[id][0] - killed).collect::<Vec<_>>()
    );
    for (pipeline, at) in &calls {
        assert_eq!(at.len(), 1, "{pipeline}'s run was called {} times", at.len());
    }
    // Its start mark kept it from being requested with the others (it would be by now):
    // it waits for its deadline, minutes away.
    let requested = |id: &str| {
        (w.log().lines())
            .filter(|l| l.contains(&format!("effect{{pipeline={id} ")) && l.contains("triggering job"))
            .count()
    };
    assert_eq!(requested(&slow), 1, "{}", w.log_tail());
    assert_eq!(requested(&waiting[0]), 2, "{}", w.log_tail());
}

/// A trigger still queued for the target's one slot at its time to begin (30 s) is let go
/// by its own executor (released, `begun: false`) and requested again by the same owner,
/// with no crash and no rebalance: it is called once, when the slow call frees the slot.
#[test]
fn a_trigger_queued_past_its_time_to_begin_is_requested_again_and_called_once() {
    let mut w = World::new("requeued");
    let (slow, queued) = (pipeline_id(0), pipeline_id(1));
    let held = slow.clone();
    let target = Target::answering_each_after(move |p| match p == held {
        true => Duration::from_secs(45),
        false => Duration::ZERO,
    });
    for id in [&slow, &queued] {
        let job = json!({"type": "http", "config": {"url": format!("{}/{id}", target.url), "timeout": 60}});
        w.config(&pipeline(id, job));
    }
    let child = w.spawn(w.state.path(), &["--max-calls-per-target", "1"]);
    assert!(w.swap_processor(Some(child)).is_none());
    w.wait_for_all("every CONFIG_ACCEPTED", Instant::now() + RUN_DEADLINE, |es| {
        count(es, EventType::CONFIG_ACCEPTED) >= 2
    });
    for id in [&slow, &queued] {
        w.sensor(id, "row-count", json!({"count": 5000}));
        w.sensor(id, "upstream", json!({"status": "ready"}));
        if *id == slow {
            wait_until(
                "the slow call at the target",
                Duration::from_secs(60),
                || w.log_tail(),
                || target.total() >= 1,
            );
        }
    }
    wait_log(&w, "could not begin by its time to begin: requesting it again", 1);
    w.wait_for(&queued, "JOB_COMPLETED", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_COMPLETED)
    });
    let calls = target.calls();
    assert_eq!(calls.get(&queued).map(Vec::len), Some(1), "{calls:?}");
    assert_eq!(calls.get(&slow).map(Vec::len), Some(1), "{calls:?}");
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

/// A trigger retrying (its target answered 503) when its partition is revoked: the old
/// executor stops retrying and says so (a `released` report), and the run's next owner
/// calls once, at once. Before, the old executor retried beside the new owner's call.
#[test]
fn a_call_retrying_through_a_rebalance_is_let_go_and_made_once() {
    // Long enough that a rebalance on a loaded machine (joins, the 2 s grace) ends well within it.
    const BACKOFF: Duration = Duration::from_secs(40);
    let mut w = World::new("released");
    let target = scripted_server();
    target.script("/p000", &[(503, "busy"), (200, "{}")]);
    let mut p000 = config("p000", &target.base);
    p000["job"]["triggerRetry"] = json!({"interval": format!("{}s", BACKOFF.as_secs()), "maxAttempts": 3});
    w.config(&p000);
    let first = w.spawn(w.state.path(), &["--shutdown-grace", "2s"]);
    w.swap_processor(Some(first));
    w.wait_for("p000", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
    });
    w.sensor("p000", "row-count", json!({"count": 5000}));
    w.sensor("p000", "upstream", json!({"status": "ready"}));
    let calls = || target.requests_to("POST /p000").len();
    wait_until(
        "the first call",
        Duration::from_secs(60),
        || w.log_tail(),
        || calls() >= 1,
    );
    let refused = Instant::now();
    // The call waits for its retry; a second instance joins and the partitions move.
    let dir = tempfile::tempdir().unwrap();
    let mut other = w.spawn(dir.path(), &["--shutdown-grace", "2s"]);
    w.wait_for("p000", "JOB_COMPLETED", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_COMPLETED)
    });
    assert!(
        refused.elapsed() < BACKOFF,
        "the next owner called at once, not after the old one's backoff"
    );
    // Past the moment the old executor would have retried: no third call comes.
    let third = Instant::now() + (BACKOFF + Duration::from_secs(5)).saturating_sub(refused.elapsed());
    while Instant::now() < third && calls() <= 2 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = w.log();
    sigterm_child(&mut other, &w);
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    assert_eq!(
        calls(),
        2,
        "the refused call, and one call by the next owner\n{}",
        w.log_tail()
    );
    assert!(log.contains("released"), "the old executor let go: {}", w.log_tail());
    assert!(
        log.contains("the previous owner let a journaled trigger go"),
        "{}",
        w.log_tail()
    );
}

/// A world whose static processor runs `p000` (an `http` job at a fast target) with its
/// config accepted.
fn p000_accepted(name: &str) -> (World, Target) {
    let mut w = World::new(name);
    let target = Target::fast();
    w.config(&config("p000", &target.url));
    start_static(&mut w);
    w.wait_for("p000", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
    });
    (w, target)
}

/// Waits for the world's processor to stop on a fatal error: exit 1, after closing its
/// clients. Returns the log.
fn exits_fatally(w: &mut World) -> String {
    let mut child = w.swap_processor(None).expect("processor running");
    let status = exit_of(&mut child, w);
    let log = w.log();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("stopped"), "the clients were closed first: {log}");
    log
}

/// A zombie: an instance whose partition a newer owner has fenced (the fence written here
/// by hand, as an opening owner writes it) finds the fence among its own changelog writes,
/// gives the partition up before its state, its input offsets and its triggers, and stops
/// (exit 1): a process that lost partitions without being told trusts none of its timers
/// and in-flight work. Restarted, it restores the partition in full, reads the inputs
/// again, and the run is called once.
#[test]
fn an_instance_that_finds_a_newer_fence_gives_the_partition_up_and_stops() {
    let (mut w, target) = p000_accepted("zombie");
    let p = sluice::core::partitioning::partition_for(b"p000", w.partitions()).number();
    w.produce_to_partition("changelog", p, "n/newer-owner/1/1", b"fence");
    w.sensor("p000", "row-count", json!({"count": 5000}));
    w.sensor("p000", "upstream", json!({"status": "ready"}));
    let log = exits_fatally(&mut w);
    assert!(log.contains("a newer owner fenced this partition"), "{log}");
    // The batch stopped before its triggers: nothing reached the target, and nothing will
    // from that batch (its effects were dropped with it).
    assert_eq!(target.total(), 0, "a fenced instance triggered a job");
    start_static(&mut w);
    w.wait_for("p000", "the job, after the partition came back", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_COMPLETED)
    });
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let log = w.log();
    let reopened = log
        .lines()
        .rfind(|l| l.contains("partition assigned") && l.contains(&format!("partition={p} ")))
        .expect("the partition was opened again");
    assert!(
        reopened.contains("full_restore=true"),
        "a disowned store is restored in full: {reopened}"
    );
    assert_eq!(
        target.calls().get("p000").map(Vec::len),
        Some(1),
        "the run was called once"
    );
}

/// An owner that writes nothing still reads its changelog (`--changelog-watch`): a record
/// another writer put there after the owner's last one (a zombie's write of a key the owner
/// holds) is written over at once, so that compaction never keeps it as the key's last
/// record; and a newer owner's fence makes the idle owner give the partition up and stop,
/// with no input to set it off.
#[test]
fn an_idle_owner_writes_over_a_zombies_record_and_stops_at_a_newer_fence() {
    let mut w = World::new("idle-watch");
    let target = Target::fast();
    w.config(&config("p000", &target.url));
    let child = w.spawn(w.state.path(), &[STATIC, &["--changelog-watch", "1s"]].concat());
    assert!(w.swap_processor(Some(child)).is_none());
    w.wait_for("p000", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
    });
    let p = sluice::core::partitioning::partition_for(b"p000", w.partitions()).number();
    // A key the owner holds: the config topic's applied offset, on p000's partition.
    let key = format!("o/{}", w.topic("config"));
    let zombie = w.watermarks("changelog", p).1;
    w.produce_to_partition("changelog", p, &key, &999i64.to_be_bytes());
    wait_until(
        "the zombie's record written over",
        Duration::from_secs(60),
        || w.log_tail(),
        || occurrences(&w, "those keys are written again") >= 1 && w.watermarks("changelog", p).1 > zombie + 2,
    );
    // The record after the zombie's is the owner's write of the same key, then its marker.
    let records = w.records("changelog", p, zombie);
    let last = records.iter().rposition(|(k, _)| k.as_deref() == Some(key.as_bytes()));
    assert!(
        last.is_some_and(|at| at > 0),
        "the owner wrote {key} after the zombie: {records:?}"
    );
    let (_, value) = &records[last.unwrap()];
    assert_ne!(value.as_deref(), Some(&999i64.to_be_bytes()[..]), "with its own value");

    w.produce_to_partition("changelog", p, "n/newer-owner/1/1", b"fence");
    let log = exits_fatally(&mut w);
    assert!(log.contains("a newer owner fenced this partition"), "{log}");
    assert_eq!(target.total(), 0);
}

/// tansu 0.6 cannot commit a transaction (no EndTxn), so `exactly-once` must stop with a
/// message that names the way out, after closing cleanly, rather than loop or lose the batch.
#[test]
fn exactly_once_on_a_broker_without_transactions_stops_with_a_clear_message() {
    let w = World::new("exactly-once");
    let target = Target::fast();
    w.config(&config("p000", &target.url));
    let mut child = w.spawn(w.state.path(), &["--guarantee", "exactly-once", "--instance", "eos"]);
    let status = exit_of(&mut child, &w);
    let log = w.log();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("--guarantee effectively-once"), "{log}");
    assert!(log.contains("EndTxn"), "the broker's refusal is named: {log}");
    assert!(log.contains("stopped"), "the clients were closed first: {log}");
    // What this broker cannot show: that the aborted batch stays invisible. tansu 0.6 does
    // not filter aborted records for read_committed readers (DESIGN.md, Broker).
}

/// A changelog that deletes by age would drop every pipeline's state once it is older than
/// the retention (and one without a compaction lag could compact away what a zombie's write
/// shadows): `run` refuses it at start, naming what is wrong and the fix.
#[test]
fn run_refuses_a_changelog_that_would_lose_state() {
    let prefix = support::unique("changelog-delete");
    support::create_topics_with(
        &prefix,
        &[("changelog", 3)],
        &[("cleanup.policy", "delete"), ("retention.ms", "604800000")],
    );
    let status = support::sluice_on(&support::brokers())
        .args([
            "topics",
            "apply",
            "--dir",
            "topics",
            "--drift",
            "warn",
            "--topic-prefix",
            &prefix,
        ])
        .status()
        .unwrap();
    assert!(status.success(), "topics apply");
    let w = World::with_topics("changelog-delete", prefix);
    let mut child = w.spawn(w.state.path(), &[]);
    let status = exit_of(&mut child, &w);
    let log = w.log();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("would lose state") && log.contains("not compact"), "{log}");
    assert!(
        log.contains("min.compaction.lag.ms=86400000"),
        "the fix is named: {log}"
    );
}

/// A live owner cut off from Kafka while its command waits for its slot: to the next owner
/// it is an owner that crashed. The old executor cannot get the command's start mark onto
/// the jobs topic, so it never starts the command; the next owner, finding no mark once the
/// call's time to begin has passed, runs it at once (not at the deadline). Counted at the
/// target (a command recording its start and end): one start, the next owner's, which runs
/// to its end. (A command whose mark landed before the cut and that then cannot report
/// itself running is killed by the trigger's deadline: `Work::run_command`.)
#[test]
fn an_owner_cut_off_from_kafka_starts_no_command_and_the_next_owner_runs_it_once() {
    let broker = OwnBroker::new();
    let proxy = ClientCut::start(broker.port, broker.listen);
    let brokers = broker.start();
    let mut w = World::on_broker("cut-owner", &brokers);
    let marks = tempfile::tempdir().unwrap();
    let log = marks.path().join("runs");
    // The blocker holds the one trigger slot for a few seconds, so the victim's command
    // starts after the cut and cannot report itself running.
    let blocker = command_job("sleep 6", 0);
    let mut victim = command_job(
        &format!(
            "echo \"start $$\" >> {0}; sleep 2; echo \"end $$\" >> {0}",
            log.display()
        ),
        0,
    );
    victim["config"]["timeout"] = json!(120);
    w.config(&pipeline("blocker", blocker));
    w.config(&pipeline("victim", victim));
    let owner = ["--instance", "cut", "--max-concurrent-triggers", "1"];
    let a = w.spawn(
        w.state.path(),
        &[&owner[..], &["--kafka-property", "client.id=sluice-cut-off"]].concat(),
    );
    assert!(w.swap_processor(Some(a)).is_none());
    for p in ["blocker", "victim"] {
        w.wait_for(p, "CONFIG_ACCEPTED", |es| {
            es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
        });
    }
    for p in ["blocker", "victim"] {
        w.sensor(p, "row-count", json!({"count": 5000}));
        w.sensor(p, "upstream", json!({"status": "ready"}));
    }
    // The blocker running (its report landed: JOB_TRIGGERED is said on it), and the victim's
    // call decided and journaled, waiting for the slot.
    w.wait_for("blocker", "the blocker running", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_TRIGGERED)
    });
    wait_until(
        "the victim's call",
        Duration::from_secs(60),
        || w.log_tail(),
        || (w.log().lines()).any(|l| l.contains("effect{pipeline=victim") && l.contains("triggering job")),
    );
    proxy.cut("sluice-cut-off");
    let starts = || -> Vec<String> {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.strip_prefix("start ").map(str::to_string))
            .collect()
    };
    wait_log(&w, "command not begun: its start mark was not on the jobs topic", 1);
    assert!(
        starts().is_empty(),
        "the cut-off owner started its command: {:?}",
        starts()
    );
    // The next owner, once the cut-off one has noticed its session is gone (so the group no
    // longer counts on it): the same instance name, which static membership hands the
    // partitions. tansu 0.6 sometimes revokes them again as the old member expires and
    // never hands them back (see Running: a crashed member's partitions); a restart of the
    // next owner takes them again, as the README says to do there.
    wait_log(&w, "partitions revoked: waiting for their in-flight triggers", 1);
    let dir = tempfile::tempdir().unwrap();
    let mut next = w.spawn(dir.path(), &owner);
    for restart in 0.. {
        let deadline = Instant::now() + Duration::from_secs(75);
        while starts().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if !starts().is_empty() {
            break;
        }
        assert!(restart < 2, "the next owner's command never started\n{}", w.log_tail());
        let _ = next.kill();
        let _ = next.wait();
        next = w.spawn(dir.path(), &owner);
    }
    let ends = |text: &str| text.lines().filter(|l| l.starts_with("end ")).count();
    wait_until(
        "the next owner's command ended",
        Duration::from_secs(60),
        || w.log_tail(),
        || ends(&std::fs::read_to_string(&log).unwrap_or_default()) == 1,
    );
    assert_eq!(starts().len(), 1, "one start, the next owner's");
    sigterm_child(&mut next, &w);
}

/// A store current with a changelog offset beyond the partition's end belongs to a
/// changelog that is gone (the topic was recreated): the processor stops, naming the fix,
/// rather than clearing the state or skipping input silently.
#[test]
fn a_store_ahead_of_its_changelog_stops_the_processor_naming_the_fix() {
    let (w, _target) = p000_accepted("ahead");
    assert_ahead_stops(
        w,
        |batch| batch.set_checkpoint(1_000_000, chrono::Utc::now()),
        &["beyond the partition's end"],
    );
}

/// So does a store that applied an input beyond its partition's end (the input topic was
/// recreated: every new record up to the old watermark would be skipped as applied). A
/// store current with its input just after one batch of many records is not taken for one,
/// although tansu 0.6 then reports the partition's end short.
#[test]
fn a_store_ahead_of_its_input_stops_the_processor_naming_the_fix() {
    let (mut w, _target) = p000_accepted("input-ahead");
    let reading =
        serde_json::to_vec(&json!({"pipelineId": "p000", "key": "row-count", "data": {"count": 1}, "date": day()}))
            .unwrap();
    let sensors = w.topic("sensors");
    // The world's producer sends one record per batch; this one batches them.
    let batched: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", support::brokers())
        .set("partitioner", sluice::runtime::kafka::PARTITIONER)
        .set("linger.ms", "100")
        .create()
        .unwrap();
    for _ in 0..200 {
        batched
            .send(BaseRecord::to(&sensors).key("p000").payload(&reading))
            .unwrap();
    }
    batched.flush(Duration::from_secs(10)).unwrap();
    wait_until(
        "the readings are applied",
        Duration::from_secs(60),
        || w.log_tail(),
        || w.committed("sensors") >= 200,
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    start_static(&mut w);
    wait_log(&w, "partition assigned: state opened", 2 * w.partitions() as usize);
    assert_ahead_stops(
        w,
        |batch| batch.set_applied_offset(&sensors, 1_000_000),
        &[&format!("of {sensors} ends at offset"), "applied up to offset 1000000"],
    );
}

/// Stops `w`'s processor, edits p000's store with `edit`, and starts it again: it must stop
/// naming everything in `what` and the fix, and keep the state.
fn assert_ahead_stops(mut w: World, edit: impl FnOnce(&mut StoreBatch), what: &[&str]) {
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let p = sluice::core::partitioning::partition_for(b"p000", w.partitions());
    let mut store = PartitionStore::open(w.state.path(), p).unwrap();
    let mut batch = StoreBatch::default();
    edit(&mut batch);
    store.write(batch).unwrap();
    drop(store);
    start_static(&mut w);
    let log = exits_fatally(&mut w);
    assert!(
        what.iter().all(|w| log.contains(w)) && log.contains("sluice reset --from-scratch"),
        "{log}"
    );
    // The state was not cleared.
    let store = PartitionStore::open(w.state.path(), p).unwrap();
    assert!(store.pipeline("p000").unwrap().is_some(), "the state is kept");
}

/// Corrupt local state is fatal: the processor closes and exits 1 naming the directory and
/// the remedy; deleting the directory restores the state from the changelog.
#[test]
fn corrupt_state_stops_the_processor_and_the_changelog_mends_it() {
    let (mut w, _target) = p000_accepted("corrupt");
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    // Overwrite the pipeline's state in whichever partition holds it.
    let mut corrupted = None;
    for entry in std::fs::read_dir(w.state.path()).unwrap() {
        let dir = entry.unwrap().path();
        let p: i32 = dir.file_name().unwrap().to_str().unwrap()["partition-".len()..]
            .parse()
            .unwrap();
        let mut store = sluice::runtime::store::PartitionStore::open(w.state.path(), PartitionId::new(p)).unwrap();
        if store.pipeline("p000").unwrap().is_some() {
            let mut batch = StoreBatch::default();
            batch.mirror(b"p/p000", Some(b"{not state"));
            store.write(batch).unwrap();
            corrupted = Some(dir);
        }
    }
    let corrupted = corrupted.expect("the pipeline's state was stored");
    start_static(&mut w);
    w.sensor("p000", "row-count", json!({"count": 5}));
    let log = exits_fatally(&mut w);
    assert!(
        log.contains("corrupt state") && log.contains("delete that directory"),
        "{log}"
    );
    // The remedy: delete the directory; the changelog has the state, and the sensor is
    // processed against it.
    std::fs::remove_dir_all(&corrupted).unwrap();
    start_static(&mut w);
    w.sensor("p000", "row-count", json!({"count": 5000}));
    w.sensor("p000", "upstream", json!({"status": "ready"}));
    w.wait_for("p000", "the job", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_COMPLETED)
    });
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

/// The pipeline ids `addr`'s API lists, once it answers with every instance heard from.
fn listed(addr: &str) -> Option<BTreeSet<String>> {
    let (status, body) = http_get(addr, "/api/pipelines")?;
    let page: Value = serde_json::from_str(&body).ok()?;
    if status != 200 || page["complete"] != true {
        return None;
    }
    let ids = page["pipelines"].as_array()?.iter();
    Some(
        ids.filter_map(|p| Some(p["pipelineId"].as_str()?.to_string()))
            .collect(),
    )
}

/// A changelog batch whose owner crashed before marking it complete is not restored, and
/// the next owner writes its keys over, so that no later restore (nor compaction, which
/// keeps only the last of every key) lets it take effect.
#[test]
fn an_unfinished_changelog_batch_never_takes_effect() {
    let mut w = World::new("unfinished");
    let addr = format!("127.0.0.1:{}", free_port());
    let start = |w: &mut World, dir: &Path| {
        let child = w.spawn(dir, &["--http", &addr]);
        assert!(w.swap_processor(Some(child)).is_none());
    };
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    w.config(&pipeline("gold", support::command_job("true", 0)));
    start(&mut w, dirs[0].path());
    let only_gold = BTreeSet::from(["gold".to_string()]);
    wait_until(
        "gold listed",
        Duration::from_secs(60),
        || w.log_tail(),
        || listed(&addr).as_ref() == Some(&only_gold),
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());

    // What a crashed owner left: a state write with no batch end marker after it.
    let p = sluice::core::partitioning::partition_for(b"gold", w.partitions()).number();
    w.produce_to_partition("changelog", p, "p/ghost", b"{}");

    // A new owner with no local state restores in full: the ghost is skipped...
    start(&mut w, dirs[1].path());
    wait_until(
        "gold listed, no ghost",
        Duration::from_secs(60),
        || w.log_tail(),
        || listed(&addr).as_ref() == Some(&only_gold),
    );
    assert!(w.log().contains("never marked complete"), "{}", w.log_tail());
    // ...and written over with the owner's next batch.
    w.sensor("gold", "row-count", json!({"count": 10}));
    wait_until(
        "the sensor handled",
        Duration::from_secs(60),
        || w.log_tail(),
        || w.committed("sensors") >= 1,
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());

    // Another full restore, with the unfinished write now followed by complete batches.
    start(&mut w, dirs[2].path());
    wait_until(
        "gold listed, still no ghost",
        Duration::from_secs(60),
        || w.log_tail(),
        || listed(&addr).as_ref() == Some(&only_gold),
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}

/// A partition that cannot be opened (its store locked by another process, as when an
/// instance that is letting go of it has not exited yet) does not hold up the others: their
/// pipelines run meanwhile, and it opens, with its input read from where it was, once the
/// lock is released.
#[test]
fn a_partition_that_cannot_be_opened_does_not_hold_up_the_others() {
    let mut w = World::new("locked");
    let target = Target::fast();
    let partitions = w.partitions();
    let of = |id: &str| sluice::core::partitioning::partition_for(id.as_bytes(), partitions);
    let (open, locked) = ("p000", (1..).map(pipeline_id).find(|id| of(id) != of("p000")).unwrap());
    let lock = PartitionStore::open(w.state.path(), of(&locked)).unwrap();
    for id in [open, locked.as_str()] {
        w.config(&config(id, &target.url));
        w.sensor(id, "row-count", json!({"count": 5000}));
        w.sensor(id, "upstream", json!({"status": "ready"}));
    }
    start_static(&mut w);
    w.wait_for(open, "the job of the partition that opened", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_COMPLETED)
    });
    wait_log(&w, "opening the local state failed; retrying", 2);
    assert!(
        w.events_seen().iter().all(|e| e.pipeline_id != locked),
        "nothing of the locked partition was decided yet"
    );
    drop(lock);
    w.wait_for(&locked, "the job, once its partition opened", |es| {
        es.iter().any(|e| e.kind == EventType::JOB_COMPLETED)
    });
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    for id in [open, locked.as_str()] {
        assert_eq!(target.calls().get(id).map(Vec::len), Some(1), "{id} was called once");
    }
}

/// Pipelines in the timer workload: half become ready mid-window, half never do.
const TIMED: usize = 40;
/// Their evaluation window: rules evaluated every second for this long.
const WINDOW: Duration = Duration::from_secs(60);

/// A workload decided by timers: every pipeline's rules are evaluated every second for a
/// minute after its first sensor (2,400 timers), while a second instance joins and leaves and the processor is
/// SIGKILLed three times. Half the pipelines get their last reading mid-window and are
/// triggered; the other half are closed by the window's last timer (VALIDATION_EXHAUSTED).
/// Each run is called once where the calls land, each exhaustion has one eventId, no
/// eventId names two events, and the state restores from the changelog as it is live.
#[test]
fn timers_firing_through_sigkills_and_a_rebalance_double_nothing() {
    let mut w = World::new("timers");
    let target = Target::fast();
    let ids: Vec<String> = (0..TIMED).map(pipeline_id).collect();
    let ready = |i: usize| i.is_multiple_of(2);
    let configs: Vec<_> = ids
        .iter()
        .map(|id| {
            let mut config = config(id, &target.url);
            config["schedule"]["evaluation"] = json!({"window": format!("{}s", WINDOW.as_secs()), "interval": "1s"});
            ("config", id.clone(), serde_json::to_vec(&config).unwrap())
        })
        .collect();
    w.produce_many(&configs);
    start_static(&mut w);
    w.wait_for_all("every CONFIG_ACCEPTED", Instant::now() + RUN_DEADLINE, |es| {
        count(es, EventType::CONFIG_ACCEPTED) >= TIMED
    });
    let reading = |id: &str, key: &str, data: Value| {
        let record = json!({"pipelineId": id, "key": key, "data": data, "date": day()});
        ("sensors", id.to_string(), serde_json::to_vec(&record).unwrap())
    };
    // Every execution opens now, and its rules fail until its row count comes.
    let upstream: Vec<_> = ids
        .iter()
        .map(|id| reading(id, "upstream", json!({"status": "ready"})))
        .collect();
    w.produce_many(&upstream);
    let started = Instant::now();
    let at =
        |since_start: Duration| std::thread::sleep((started + since_start).saturating_duration_since(Instant::now()));
    let mut kills = Vec::new();
    let kill = |w: &mut World, kills: &mut Vec<Instant>| {
        let mut child = w.swap_processor(None).expect("processor running");
        kills.push(Instant::now());
        sigkill(&mut child);
        start_static(w);
    };
    // A second instance joins and leaves, and the processor is killed: each as soon as the
    // last is done. Then the row counts, and two more kills late in the window (the last
    // just before the window's last timers).
    let other_dir = tempfile::tempdir().unwrap();
    let revoked = occurrences(&w, "partition revoked");
    let mut other = w.spawn(other_dir.path(), &[]);
    wait_log(&w, "partition revoked", revoked + 1);
    sigterm_child(&mut other, &w);
    kill(&mut w, &mut kills);
    let counts: Vec<_> = (0..TIMED)
        .filter(|i| ready(*i))
        .map(|i| reading(&ids[i], "row-count", json!({"count": 5000})))
        .collect();
    w.produce_many(&counts);
    assert!(
        started.elapsed() < WINDOW - Duration::from_secs(15),
        "the rebalance took {:?}, too long for the window",
        started.elapsed()
    );
    at(WINDOW - Duration::from_secs(10));
    kill(&mut w, &mut kills);
    at(WINDOW - Duration::from_secs(1));
    kill(&mut w, &mut kills);
    w.wait_for_all("every pipeline decided", Instant::now() + RUN_DEADLINE, |es| {
        ids.iter().enumerate().all(|(i, id)| {
            let kind = if ready(i) {
                EventType::JOB_COMPLETED
            } else {
                EventType::VALIDATION_EXHAUSTED
            };
            es.iter().any(|e| &e.pipeline_id == id && e.kind == kind)
        })
    });
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
    let events = w.events_seen().to_vec();
    let mut identities: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for e in &events {
        let identity = format!("{} {} {:?}/{:?}", e.kind.name(), e.pipeline_id, e.schedule_id, e.date);
        identities.entry(&e.event_id).or_default().insert(identity);
    }
    for (id, names) in &identities {
        assert_eq!(names.len(), 1, "event id {id} names different events: {names:?}");
    }
    let calls = target.calls();
    let near_kill = |t: Instant| {
        kills
            .iter()
            .any(|k| k.saturating_duration_since(t).max(t.saturating_duration_since(*k)) <= Duration::from_secs(2))
    };
    let mut second_calls = 0;
    for (i, id) in ids.iter().enumerate() {
        let distinct = |kind: EventType| {
            events
                .iter()
                .filter(|e| &e.pipeline_id == id && e.kind == kind)
                .map(|e| &e.event_id)
                .collect::<BTreeSet<_>>()
                .len()
        };
        let landed = calls.get(id).map_or(&[][..], Vec::as_slice);
        if ready(i) {
            second_calls += landed.len().saturating_sub(1);
            assert!(
                landed.len() == 1 || (landed.len() == 2 && near_kill(landed[0])),
                "{id}'s run was called {} times",
                landed.len()
            );
            assert_eq!(distinct(EventType::JOB_TRIGGERED), 1, "{id}: one JOB_TRIGGERED");
            assert_eq!(
                distinct(EventType::VALIDATION_EXHAUSTED),
                0,
                "{id} was ready in its window"
            );
        } else {
            assert!(landed.is_empty(), "{id} was never ready, yet called");
            assert_eq!(distinct(EventType::VALIDATION_EXHAUSTED), 1, "{id}: one exhaustion");
        }
    }
    eprintln!(
        "[timers] {} kills, {} distinct events, {second_calls} second calls at the target",
        kills.len(),
        identities.len()
    );
    let live = states_in(w.state.path());
    let partitions = std::fs::read_dir(w.state.path()).unwrap().count();
    let restored = restored_from_scratch(&w, partitions, STATIC);
    assert_eq!(live.len(), TIMED, "every pipeline has state");
    for (id, state) in &live {
        assert_eq!(
            restored.get(id),
            Some(state),
            "{id}: restored state differs from the live state"
        );
    }
}

/// tansu 0.6 answers "the beginning" of a partition (ListOffsets earliest) with the batch it
/// stored first in time. Two producers racing on a fresh one-partition topic, a large record
/// given offset 0 and still being stored while small ones after it are stored, make it name
/// a later offset, as instances sharing the dead-letter topic can. The race is made again on
/// fresh topics until it shows; then Sluice's history reader, told the broker is tansu,
/// starts at offset 0 and reads every record, where the broker's beginning misses the first.
///
/// Not in the CI suite: it needs the broker's race to happen, and racing tansu with 900 KB
/// records once cost a fresh machine its broker (AllBrokersDown) and the whole run. What it
/// guards, that a history read on tansu starts at 0, is `tansu_workarounds_cost_kafka_nothing`
/// (a unit test of the reader's start); this one shows the broker still needs it:
/// `deploy/test.sh --test durability -- --ignored history_reads_miss_nothing`.
#[test]
#[ignore = "provokes a tansu race; run by hand with --ignored"]
fn history_reads_miss_nothing_when_tansu_misplaces_a_partitions_beginning() {
    use sluice::runtime::kafka::{self, Connection, Quirks, Start};

    let w = World::new("beginning");
    let producer = || -> BaseProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &w.brokers)
            .set("enable.idempotence", "true")
            .set("linger.ms", "0")
            .set("compression.type", "none")
            .set("message.max.bytes", "2000000")
            .create()
            .unwrap()
    };
    let (large, small) = (producer(), producer());
    let broker = Connection::plaintext(&w.brokers);
    let as_reported = kafka::reader(&broker, &format!("{}as-reported", w.prefix)).unwrap();
    let on_tansu = kafka::reader(
        &broker.clone().with_quirks(Quirks::Tansu),
        &format!("{}on-tansu", w.prefix),
    )
    .unwrap();
    let read_all = |reader: &kafka::Reader, topic: &str| -> Vec<i64> {
        let (start, _) = reader.range(topic, PartitionId::new(0)).unwrap();
        let starts = [Start {
            topic: topic.to_string(),
            partition: PartitionId::new(0),
            offset: start,
        }];
        kafka::read_span(reader, &starts)
            .unwrap()
            .iter()
            .map(rdkafka::Message::offset)
            .collect()
    };
    const SMALL: usize = 3;
    let payload = vec![b'x'; 900_000];
    let deadline = Instant::now() + Duration::from_secs(240);
    for trial in 0.. {
        assert!(
            Instant::now() < deadline,
            "tansu named offset 0 as the beginning in all {trial} tries: the race this test needs did not happen (is the broker still tansu 0.6?)"
        );
        let name = format!("beginning-{trial}");
        support::create_topics(&w.prefix, &[(&name, 1)]);
        let topic = w.topic(&name);
        for p in [&large, &small] {
            p.client()
                .fetch_metadata(Some(&topic), Duration::from_secs(10))
                .unwrap();
        }
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                large
                    .send(BaseRecord::<(), [u8]>::to(&topic).payload(&payload[..]))
                    .unwrap();
                large.flush(Duration::from_secs(30)).unwrap();
            });
            s.spawn(|| {
                start.wait();
                // The window (the large record given its offset, not yet stored) moves with
                // the machine's speed: each try aims at another moment in it.
                std::thread::sleep(Duration::from_micros(250 * (trial % 8)));
                for _ in 0..SMALL {
                    small
                        .send(BaseRecord::<(), [u8]>::to(&topic).payload(&b"s"[..]))
                        .unwrap();
                    small.flush(Duration::from_secs(30)).unwrap();
                }
            });
        });
        let (low, _) = as_reported.range(&topic, PartitionId::new(0)).unwrap();
        if low == 0 {
            continue;
        }
        let all: Vec<i64> = (0..=SMALL as i64).collect();
        let missed = read_all(&as_reported, &topic);
        assert!(missed.len() < all.len(), "reading from offset {low} read {missed:?}");
        assert_eq!(read_all(&on_tansu, &topic), all, "after {trial} tries");
        eprintln!("[beginning] tansu named offset {low} the beginning after {trial} tries; from there {missed:?} is read, from offset 0 {all:?}");
        return;
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to a process.
fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal}");
}

/// A zombie on the real broker: the owner is paused (SIGSTOP) and a replacement starts with
/// the same `--instance`, which static membership hands the partitions at once; the cron
/// time passes and the replacement runs the job. When the paused process wakes (SIGCONT)
/// with that cron time overdue in its timers, it must not call the target, and it exits
/// non-zero rather than go on. Counted at the target; and a fresh restore of the changelog
/// equals the replacement's state (the zombie's writes never win).
#[test]
fn a_paused_owner_replaced_under_its_instance_calls_nothing_when_it_wakes_and_exits() {
    let mut w = World::new("sigstop");
    let target = Target::fast();
    let boundary = w.next_minute_in(Duration::from_secs(40));
    let job =
        json!({"type": "http", "config": {"url": format!("{}/p000", target.url), "timeout": 10}, "maxRetries": 0});
    w.config(&json!({
        "pipeline": {"id": "p000", "owner": "tests"},
        "schedule": {"cron": "* * * * *", "timezone": "UTC", "evaluation": {"window": "10m", "interval": "1m"}},
        "validation": {"trigger": "ALL", "rules": []},
        "job": job
    }));
    let partitions = w.partitions() as usize;
    start_static(&mut w);
    w.wait_for("p000", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
    });
    wait_log(&w, "partition assigned", partitions);
    let mut paused = w.swap_processor(None).expect("processor running");
    signal(&paused, "-STOP");
    let dir = tempfile::tempdir().unwrap();
    let mut replacement = w.spawn(dir.path(), STATIC);
    wait_log(&w, "partition assigned", 2 * partitions);
    let date = boundary.format("%Y-%m-%dT%H").to_string();
    w.wait_for_until(
        "p000",
        "the replacement's run at the cron time",
        w.instant_at(boundary) + Duration::from_secs(90),
        |es| {
            es.iter()
                .any(|e| e.kind == EventType::JOB_COMPLETED && e.date.as_deref() == Some(date.as_str()))
        },
    );
    assert_eq!(target.total(), 1, "the replacement called the run once");
    signal(&paused, "-CONT");
    let status = exit_of(&mut paused, &w);
    assert_eq!(status.code(), Some(1), "the woken zombie stops\n{}", w.log_tail());
    assert_eq!(target.total(), 1, "the woken zombie called the target");
    sigterm_child(&mut replacement, &w);
    let live = states_in(dir.path());
    let restored = restored_from_scratch(&w, partitions, STATIC);
    assert!(live.contains_key("p000"), "the replacement holds p000");
    assert_eq!(restored, live, "a fresh restore equals the replacement's state");
    assert_eq!(target.total(), 1, "one call in all");
}
