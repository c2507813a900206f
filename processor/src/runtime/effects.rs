//! Carries out the decider's effects outside it. A trigger's or status check's outcome is
//! never returned to the decider directly: it is written as a record on `sluice.jobs`, and
//! only that record moves the run forward (the journal).
//!
//! Around every call to a job target ([`super::jobs`]) the executor puts:
//! - **retries** with exponential backoff for infrastructure failures ([`CallError::Infra`]:
//!   unreachable, 5xx, throttling, concurrency limits), per the request's policy (triggers
//!   30 s ×2, 3 retries; status checks 2 s ×2, 3 retries, by default). Spent, a trigger is
//!   reported failed with category INFRA, which the decider turns into INFRA_FAILURE; a
//!   status check is reported `unknown` (the job may still run: the decider checks again,
//!   backing off). These retries never spend the job's own `maxRetries`;
//! - **bounded concurrency**: at most `max_concurrent` calls at once, and at most
//!   `per_target` to any one target (a host, a Glue job, a state machine), so a burst of
//!   pipelines cannot exceed a target's limits or let one target take every slot;
//! - a **circuit breaker** per target: after [`BREAKER_THRESHOLD`] infrastructure failures
//!   in a row, calls to it fail at once for [`BREAKER_COOLDOWN`], so a dead endpoint costs
//!   its own pipelines retries, not everyone's slots and timeouts.
//!
//! - **one call per run at a time**: the executor keeps the run ids of the triggers it has
//!   in flight ([`InFlight`]) and never starts a second call for one; a partition being
//!   revoked waits for its in-flight triggers to report before it is let go (see
//!   [`InFlight::wait_for`]), so its next owner reads their reports instead of calling again.
//! - **a deadline and a release**: a trigger's call ends by the request's `deadline` (no try
//!   starts later, none runs past it). A partition let go with calls still in flight
//!   releases them ([`InFlight::release`]): each stops at once if it waits (for a slot or a
//!   retry's backoff), or after the try it is making, and writes a `released` report naming
//!   the deadline it gave up. Until that report, an answer or the deadline, the run's next
//!   owner does not make the call (see `Processor::resume_triggers`).
//!
//! An evaluator's call ([`Effect::Evaluate`]) goes through the same bounds and breaker, is
//! made once (the decider arms its retry), and its answer, or why there is none, is written
//! on `sluice.sensors` as a reading with source `evaluator` ([`jobs::evaluator`]).
//!
//! Secrets (`${env:NAME}`, names allowed by `--allow-env` only) are resolved at the moment
//! of the call and never leave it: not in logs, reports or state; a report that quotes one
//! (a command's output, a target's error) has it replaced by `***` ([`jobs::secrets`]).
//! Job types the operator turned off (`--disable-job-type`) fail their triggers and
//! evaluators, PERMANENT, without running.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::Result;
use ipnet::IpNet;
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{info, warn, Instrument};

use super::clock::Clock;
use super::codec::{Codec, Family};
use super::jobs::{self, Call, CallError, Client, Guard, KafkaTopics, Outcome, Redactor, SecretPolicy};
use super::kafka::RenewableProducer;
use super::telemetry::Telemetry;
use crate::core::config::{JobConfig, JobKind, RetryPolicy};
use crate::core::execution::RunId;
use crate::core::lifecycle::{Effect, EvaluatorCall, TriggerRequest};
use crate::core::partitioning::PartitionId;
use crate::core::records::{FailureCategory, JobRecord, JobStatus, SensorRecord, EVALUATOR_SOURCE};
use crate::core::task::ReleaseKeys;
use crate::runtime::backoff::Backoff;

/// Infrastructure failures in a row that open a target's circuit.
pub const BREAKER_THRESHOLD: u32 = 5;
/// How long an open circuit refuses calls before letting one through again.
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Settings {
    /// Calls to job targets in flight at once, over all targets.
    pub max_concurrent: usize,
    /// Calls in flight at once to any one target.
    pub per_target: usize,
    /// Address ranges job URLs may reach although the SSRF guard refuses them by default
    /// (loopback, link-local, metadata).
    pub allowed_targets: Vec<IpNet>,
    /// The proxy job requests go through (a URL); none: they go direct, whatever
    /// `HTTP(S)_PROXY` says.
    pub job_proxy: Option<String>,
    /// Which `${env:NAME}` secrets jobs may read.
    pub secrets: SecretPolicy,
    /// Job types whose triggers and evaluators fail without running.
    pub disabled_job_types: Vec<JobKind>,
    /// The topics `kafka` jobs may write.
    pub kafka_topics: KafkaTopics,
}

pub struct Executor {
    producer: RenewableProducer,
    jobs_topic: String,
    /// Where evaluators' answers are written.
    sensors_topic: String,
    codec: Codec,
    client: Client,
    limits: Arc<Limits>,
    secrets: Arc<SecretPolicy>,
    disabled: Arc<[JobKind]>,
    /// Runs with a status check, or evaluators with a call, in flight: one due while the
    /// last is still being made is skipped, not stacked.
    checking: Arc<Mutex<HashSet<RunId>>>,
    /// Triggers in flight, by run id.
    in_flight: Arc<InFlight>,
    tasks: JoinSet<()>,
    telemetry: Arc<Telemetry>,
    /// Stamps the job reports.
    clock: Clock,
}

impl Executor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        producer: RenewableProducer,
        jobs_topic: String,
        sensors_topic: String,
        settings: Settings,
        codec: Codec,
        telemetry: Arc<Telemetry>,
        in_flight: Arc<InFlight>,
        clock: Clock,
    ) -> Result<Self> {
        Ok(Executor {
            producer,
            jobs_topic,
            sensors_topic,
            codec,
            client: Client::new(
                Guard::new(settings.allowed_targets.clone()).with_kafka_topics(settings.kafka_topics.clone()),
                settings.job_proxy.as_deref(),
            )?,
            limits: Arc::new(Limits::new(settings.max_concurrent, settings.per_target).reporting_to(telemetry.clone())),
            secrets: Arc::new(settings.secrets),
            disabled: settings.disabled_job_types.into(),
            checking: Arc::new(Mutex::new(HashSet::new())),
            in_flight,
            tasks: JoinSet::new(),
            telemetry,
            clock,
        })
    }

    /// Carries out `effect` for a pipeline of input partition `partition`. A trigger whose
    /// run already has a call in flight here is not started again.
    pub fn spawn(&mut self, effect: Effect, partition: PartitionId) {
        // The request to carry out and, for a status check, the run's handle; nothing when
        // the run has a call of the same kind in flight already.
        let (request, handle, release) = match effect {
            Effect::TriggerJob(request) => {
                let Some(release) = self.in_flight.start(&request.run_id, partition) else {
                    info!(run_id = %request.run_id, "trigger not requested again: its call is still in flight");
                    return;
                };
                (request, None, Some(release))
            }
            Effect::CheckJob(check) => {
                if !self.checking_starts(&check.request.run_id, "status check skipped") {
                    return;
                }
                (check.request, Some(check.handle), None)
            }
            Effect::Evaluate(call) => return self.evaluate(call),
        };
        let work = self.work(request);
        let checking = self.checking.clone();
        let in_flight = self.in_flight.clone();
        let telemetry = self.telemetry.clone();
        telemetry.effect_started();
        let r = &work.request;
        let job_type = r.config.kind().name();
        let started = tokio::time::Instant::now();
        let span = tracing::info_span!(
            "effect",
            pipeline = %r.pipeline_id,
            schedule = %r.execution.schedule(),
            date = %r.execution.date_text(),
            run_id = %r.run_id,
            check = handle.is_some()
        );
        self.tasks.spawn(
            async move {
                let outcome = match (&handle, release) {
                    (Some(handle), _) => {
                        let outcome = work.check(handle).await;
                        checking.lock().unwrap().remove(&work.request.run_id);
                        outcome
                    }
                    (None, release) => {
                        let mut stop = Stop::at(work.deadline(), release).starting_by(work.start_by());
                        work.trigger(&mut stop).await
                    }
                };
                // A trigger stays in flight until its report is on the broker (the run's
                // next owner reads it there); a released one no longer is: it calls nothing,
                // and the run may be requested again as soon as the report is read.
                let trigger = handle.is_none();
                let released = outcome.as_ref().is_some_and(|o| o.status == JobStatus::Released);
                if trigger && released {
                    in_flight.finish(&work.request.run_id);
                }
                if let Some(outcome) = outcome {
                    let seconds = started.elapsed().as_secs_f64();
                    telemetry.effect_outcome(job_type, outcome.status.as_str(), seconds);
                    work.report(outcome).await;
                }
                if trigger && !released {
                    in_flight.finish(&work.request.run_id);
                }
                telemetry.effect_finished();
            }
            .instrument(span),
        );
        // Reap finished tasks so the set does not grow.
        while self.tasks.try_join_next().is_some() {}
    }

    fn work(&self, request: TriggerRequest) -> Work {
        Work {
            producer: self.producer.clone(),
            topic: self.jobs_topic.clone(),
            sensors_topic: self.sensors_topic.clone(),
            codec: self.codec.clone(),
            client: self.client.clone(),
            limits: self.limits.clone(),
            secrets: self.secrets.clone(),
            disabled: self.disabled.clone(),
            clock: self.clock.clone(),
            telemetry: self.telemetry.clone(),
            request,
        }
    }

    /// Asks an evaluator and writes its answer (or why there is none) as a reading.
    fn evaluate(&mut self, call: EvaluatorCall) {
        let run_id = call.request.run_id.clone();
        if !self.checking_starts(&run_id, "evaluator not called") {
            return;
        }
        let work = self.work(call.request);
        let checking = self.checking.clone();
        let span = tracing::info_span!(
            "evaluator",
            pipeline = %work.request.pipeline_id,
            date = %work.request.execution.date_text(),
            key = %call.key,
        );
        self.tasks.spawn(
            async move {
                let reading = work.evaluate(&call.key).await;
                work.write_reading(reading).await;
                checking.lock().unwrap().remove(&run_id);
            }
            .instrument(span),
        );
        while self.tasks.try_join_next().is_some() {}
    }

    /// Registers a status check or an evaluator's call for `run_id`; false, and says so, when
    /// the previous one is still in flight: it is skipped, not stacked.
    fn checking_starts(&self, run_id: &str, skipped: &str) -> bool {
        let starts = self.checking.lock().unwrap().insert(run_id.into());
        if !starts {
            info!(run_id, "{skipped}: the previous one is still in flight");
        }
        starts
    }

    /// The runs of `run_ids` ended: their calls in flight stop trying again.
    pub fn end(&self, run_ids: &[RunId]) {
        let told = self.in_flight.end(run_ids);
        if told > 0 {
            info!(told, "calls of runs that ended told to stop trying again");
        }
    }

    /// Waits for in-flight effects, at most `grace`; then releases the triggers still in
    /// flight (see [`Self::let_go`]).
    pub async fn drain(&mut self, grace: Duration) {
        if !self.join_all(grace).await {
            warn!(
                in_flight = self.tasks.len(),
                "shutdown grace elapsed with effects in flight: releasing their triggers"
            );
            self.let_go().await;
        }
    }

    /// Releases every trigger in flight and gives them [`RELEASE_WAIT`] to stop and say so;
    /// what is still running then (a try that outlasts it) is cut, and its run's next owner
    /// waits for the call's deadline.
    pub async fn let_go(&mut self) {
        let released = self.in_flight.release_all();
        if released > 0 {
            info!(released, "triggers in flight released");
        }
        if !self.join_all(RELEASE_WAIT).await {
            warn!(
                in_flight = self.tasks.len(),
                "effects still in flight cut: their runs wait for their calls' deadlines"
            );
            self.tasks.abort_all();
            // Nothing is in flight any more: closing must not wait for these.
            self.in_flight.runs.lock().unwrap().clear();
        }
    }

    /// Waits for every task, at most `wait`; whether they all ended.
    async fn join_all(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = self.tasks.join_next() => if next.is_none() { return true },
                _ = &mut deadline => return false,
            }
        }
    }
}

/// Whether a trigger's answer is a failure of the job at once that may pass when tried again:
/// failed or timed out, but not refused (PERMANENT).
fn failed_at_once(outcome: &Outcome) -> bool {
    matches!(outcome.status, JobStatus::Failed | JobStatus::Timeout)
        && outcome.category != Some(FailureCategory::Permanent)
}

/// A call that got no answer: the target refused the question (PERMANENT) or could not be
/// asked until the retries were spent (INFRA).
#[derive(Debug)]
struct NoAnswer {
    category: FailureCategory,
    message: String,
    metadata: Option<Value>,
}

impl NoAnswer {
    /// For a trigger: the run failed to start (INFRA_FAILURE, or a PERMANENT failure).
    fn failed(self) -> Outcome {
        Outcome {
            metadata: self.metadata,
            ..Outcome::failed(Some(self.category), self.message)
        }
    }

    /// For a status check: the job's status is unknown, never its outcome.
    fn unknown(self) -> Outcome {
        Outcome {
            metadata: self.metadata,
            ..Outcome::unknown(self.category, self.message)
        }
    }
}

/// How long released triggers get to stop and write their `released` reports.
pub const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Why a trigger's call stops before an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// Its partition was let go.
    Released,
    /// Its deadline came.
    Deadline,
    /// Its run ended (cancelled, its poll window closed, stale, the pipeline deleted): a
    /// failing trigger or command is not tried again.
    Ended,
    /// Its start mark was not acknowledged by its time to begin (it waited for a slot, or
    /// the broker for the mark): it makes no call, and lets it go to be requested again.
    NotBegun,
}

/// What a trigger in flight is told: nothing yet, or why to stop (the first reason stands).
type Signal = Option<Stopped>;

/// When a trigger's call stops: at its deadline, when its partition is let go or when its
/// run ends. Status checks and evaluators have none of these ([`Stop::never`]).
struct Stop {
    deadline: Option<Instant>,
    release: Option<watch::Receiver<Signal>>,
    /// A trigger's time to begin, until its start mark is acknowledged (then `None`).
    start_by: Option<Instant>,
}

impl Stop {
    fn never() -> Self {
        Stop {
            deadline: None,
            release: None,
            start_by: None,
        }
    }

    fn at(deadline: Option<Instant>, release: Option<watch::Receiver<Signal>>) -> Self {
        Stop {
            deadline,
            release,
            start_by: None,
        }
    }

    /// The call's first try waits for its start mark, acknowledged by `start_by`.
    fn starting_by(self, start_by: Option<Instant>) -> Self {
        Stop { start_by, ..self }
    }

    /// Whether the call has to stop now.
    fn now(&self) -> Option<Stopped> {
        if let Some(why) = self.release.as_ref().and_then(|r| *r.borrow()) {
            return Some(why);
        }
        self.deadline
            .filter(|d| *d <= Instant::now())
            .map(|_| Stopped::Deadline)
    }

    /// Resolves when the call's run has ended (never, for a call that has no run to end).
    async fn ended(&mut self) {
        let ended = match &mut self.release {
            Some(release) => release.wait_for(|r| *r == Some(Stopped::Ended)).await.is_ok(),
            None => false,
        };
        if !ended {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves when the call has to stop (a trigger not yet marked: at its time to begin
    /// too, see [`Work::begin`]).
    async fn reached(&mut self) -> Stopped {
        let deadline = self.deadline;
        let start_by = self.start_by;
        let told = async {
            let told = match &mut self.release {
                Some(release) => release.wait_for(|r| r.is_some()).await.ok().and_then(|r| *r),
                None => None,
            };
            // A sender gone (the run no longer in flight) stops nothing.
            match told {
                Some(why) => why,
                None => std::future::pending().await,
            }
        };
        let at = async |at: Option<Instant>| match at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        };
        tokio::select! {
            why = told => why,
            _ = at(deadline) => Stopped::Deadline,
            _ = at(start_by) => Stopped::NotBegun,
        }
    }
}

/// Tells a call in flight to stop for `why`, unless it was told already; whether it was.
fn tell(release: &watch::Sender<Signal>, why: Stopped) -> bool {
    release.send_if_modified(|signal| match signal {
        Some(_) => false,
        None => {
            *signal = Some(why);
            true
        }
    })
}

/// The run ids of the triggers in flight, with the input partition of their pipeline and
/// the switch that releases them.
#[derive(Default)]
pub struct InFlight {
    runs: Mutex<HashMap<String, (PartitionId, watch::Sender<Signal>)>>,
    finished: Condvar,
}

impl InFlight {
    /// Registers a call for `run_id`: what tells it it was released; `None` when one is in
    /// flight already.
    fn start(&self, run_id: &str, partition: PartitionId) -> Option<watch::Receiver<Signal>> {
        let mut runs = self.runs.lock().unwrap();
        if runs.contains_key(run_id) {
            return None;
        }
        let (release, released) = watch::channel(None);
        runs.insert(run_id.to_string(), (partition, release));
        Some(released)
    }

    fn finish(&self, run_id: &str) {
        self.runs.lock().unwrap().remove(run_id);
        self.finished.notify_all();
    }

    /// How many triggers of `partitions` are in flight.
    pub fn count(&self, partitions: &[PartitionId]) -> usize {
        let runs = self.runs.lock().unwrap();
        runs.values().filter(|(p, _)| partitions.contains(p)).count()
    }

    /// Tells the triggers of `partitions` in flight that their partition was let go: they
    /// stop retrying and say so (see [`Stop`]). Returns how many were told.
    pub fn release(&self, partitions: &[PartitionId]) -> usize {
        self.release_where(|p| partitions.contains(&p))
    }

    fn release_all(&self) -> usize {
        self.release_where(|_| true)
    }

    /// Releases the triggers in flight whose partition `which` names; how many were not
    /// released already.
    fn release_where(&self, which: impl Fn(PartitionId) -> bool) -> usize {
        let runs = self.runs.lock().unwrap();
        let told = runs.values().filter(|(p, _)| which(*p));
        told.filter(|(_, release)| tell(release, Stopped::Released)).count()
    }

    /// Tells the calls of `run_ids` in flight that their runs ended: a failing trigger or
    /// command is not tried again ([`Stopped::Ended`]). Returns how many were told.
    pub fn end(&self, run_ids: &[RunId]) -> usize {
        let runs = self.runs.lock().unwrap();
        let told = run_ids.iter().filter_map(|run| runs.get(run.as_str()));
        told.filter(|(_, release)| tell(release, Stopped::Ended)).count()
    }

    /// Blocks until no trigger of `partitions` is in flight (their reports are written), or
    /// `timeout` passes; returns how many are still in flight. Called while a partition is
    /// revoked: its next owner consumes the jobs topic up to its end before deciding that a
    /// journaled trigger has no report, so a report written before the hand-over is seen
    /// there and the call is not made twice.
    pub fn wait_for(&self, partitions: &[PartitionId], timeout: Duration) -> usize {
        let deadline = std::time::Instant::now() + timeout;
        let mut runs = self.runs.lock().unwrap();
        loop {
            let left = runs.values().filter(|(p, _)| partitions.contains(p)).count();
            let now = std::time::Instant::now();
            if left == 0 || now >= deadline {
                return left;
            }
            runs = self.finished.wait_timeout(runs, deadline - now).unwrap().0;
        }
    }
}

/// One effect being carried out.
struct Work {
    producer: RenewableProducer,
    topic: String,
    sensors_topic: String,
    codec: Codec,
    client: Client,
    limits: Arc<Limits>,
    secrets: Arc<SecretPolicy>,
    disabled: Arc<[JobKind]>,
    clock: Clock,
    telemetry: Arc<Telemetry>,
    request: TriggerRequest,
}

impl Work {
    /// Starts the run; `None` when the outcome was already reported (a command reports
    /// running itself, then its end).
    async fn trigger(&self, stop: &mut Stop) -> Option<Outcome> {
        let r = &self.request;
        info!(job = r.kind().name(), "triggering job");
        let (config, redactor) = match self.prepare() {
            Ok(prepared) => prepared,
            Err(reason) => return Some(Outcome::failed(Some(FailureCategory::Permanent), reason)),
        };
        let call = self.call(&config, &redactor);
        let outcome = if r.kind() == JobKind::Command {
            self.run_command(&call, stop).await
        } else {
            self.with_retries("trigger", r.retry, &call, stop, true, || jobs::trigger(&call))
                .await
                .unwrap_or_else(NoAnswer::failed)
        };
        Some(outcome.redacted(&redactor))
    }

    /// The request's deadline on the runtime's clock (`None`: journaled before deadlines).
    fn deadline(&self) -> Option<Instant> {
        Some(Instant::now() + self.clock.until(self.request.deadline?))
    }

    /// The request's time to begin on the runtime's clock (`None`: journaled before marks).
    fn start_by(&self) -> Option<Instant> {
        self.request.deadline?;
        Some(Instant::now() + self.clock.until(self.request.start_by?))
    }

    /// Before a trigger's first try, once it holds its slot (or before its first wait to
    /// retry, when the target's circuit refused it): its start mark, acknowledged on the
    /// jobs topic by its time to begin, or no call at all ([`Stopped::NotBegun`]). A new
    /// owner that finds no mark after that time makes the call itself at once (see
    /// [`crate::core::handover`]); one that finds it waits for the deadline. Only a call
    /// queued for a slot is let go this way: it has made no try, and spends no retry.
    async fn begin(&self, stop: &mut Stop) -> Result<(), Stopped> {
        let (Some(by), Some(deadline)) = (stop.start_by, self.request.deadline) else {
            return Ok(());
        };
        if Instant::now() >= by {
            return Err(Stopped::NotBegun);
        }
        match tokio::time::timeout_at(by, self.report(Outcome::calling(deadline))).await {
            Ok(()) => {
                stop.start_by = None;
                Ok(())
            }
            Err(_) => Err(Stopped::NotBegun),
        }
    }

    /// What a trigger stopped before an answer reports: `released` (naming the deadline it
    /// gave up, so that the run's next owner can tell it from an older call's), or a failure
    /// at the deadline.
    fn stopped(&self, why: Stopped, what: &str, tries: u32, last_error: Option<&str>) -> Outcome {
        match why {
            Stopped::Released => {
                info!(run_id = %self.request.run_id, tries, "{what} released: its partition was let go");
                Outcome::released(self.request.deadline, self.request.release_key.as_deref())
            }
            Stopped::Deadline => {
                warn!(run_id = %self.request.run_id, tries, "{what} gave up at its deadline");
                let error = last_error.map_or_else(String::new, |e| format!(": {e}"));
                Outcome::failed(
                    Some(FailureCategory::Infra),
                    format!("{what} gave up at its deadline after {tries} tries{error}"),
                )
                .with("tries", json!(tries))
            }
            Stopped::NotBegun => {
                warn!(run_id = %self.request.run_id, "{what} not begun: its start mark was not on the jobs topic by its time to begin (waiting for a slot, or for the broker); let go, to be requested again");
                Outcome::not_begun(self.request.deadline, self.request.release_key.as_deref())
            }
            Stopped::Ended => {
                info!(run_id = %self.request.run_id, tries, "{what} not tried again: its run ended");
                let error = last_error.map_or_else(String::new, |e| format!(": {e}"));
                Outcome::failed(
                    None,
                    format!("{what} not tried again after {tries} tries: its run ended{error}"),
                )
                .with("tries", json!(tries))
            }
        }
    }

    /// One status check of a running job. A check that could not ask (its retries spent,
    /// the question refused, the job type turned off, a secret unreadable) reports the
    /// status `unknown`, never a failure: the job may still be running (JOB_STATUS_UNKNOWN).
    async fn check(&self, handle: &Value) -> Option<Outcome> {
        let r = &self.request;
        let (config, redactor) = match self.prepare() {
            Ok(prepared) => prepared,
            Err(reason) => return Some(Outcome::unknown(FailureCategory::Permanent, reason)),
        };
        let call = self.call(&config, &redactor);
        let outcome = self
            .with_retries("status check", r.status_retry, &call, &mut Stop::never(), false, || {
                jobs::status(&call, handle)
            })
            .await;
        Some(outcome.unwrap_or_else(NoAnswer::unknown).redacted(&redactor))
    }

    /// The request's job config with its secrets resolved, and what to redact from its
    /// reports; why not, when its type is turned off or a secret cannot be read.
    fn prepare(&self) -> Result<(JobConfig, Redactor), String> {
        let kind = self.request.config.kind();
        if self.disabled.contains(&kind) {
            return Err(format!(
                "{0} jobs and evaluators are turned off on this processor (run --disable-job-type {0})",
                kind.name()
            ));
        }
        self.secrets.resolve(&self.request.config)
    }

    fn call<'a>(&'a self, config: &'a JobConfig, redactor: &'a Redactor) -> Call<'a> {
        Call {
            request: &self.request,
            config,
            client: &self.client,
            producer: Some(&self.producer),
            redactor,
        }
    }

    /// Makes `attempt` until it answers, fails permanently, the policy's retries are spent
    /// or `stop` says; each try holds a concurrency slot and passes the target's breaker.
    /// With `failures_retried` (triggers), an answer that the job failed at once (a Lambda
    /// function error, a synchronous run that failed, but not a PERMANENT refusal) is tried
    /// again too, as the earlier design's state machine retried any trigger error; spent,
    /// the last failure is the outcome. No answer at all (refused, or retries spent on
    /// infrastructure errors) is [`NoAnswer`]: the caller says what that means for the run.
    #[allow(clippy::too_many_arguments)]
    async fn with_retries<F, Fut>(
        &self,
        what: &str,
        policy: RetryPolicy,
        call: &Call<'_>,
        stop: &mut Stop,
        failures_retried: bool,
        attempt: F,
    ) -> Result<Outcome, NoAnswer>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Outcome, CallError>>,
    {
        let r = &self.request;
        let target = jobs::target(call.config);
        let mut retries = 0;
        let mut last_error = None;
        loop {
            let begin = async |stop: &mut Stop| self.begin(stop).await;
            let answer = match self.limits.call_until(&target, &attempt, stop, begin).await {
                Ok(answer) => answer,
                Err(why) => return Ok(self.stopped(why, what, retries, last_error.as_deref())),
            };
            let (error, failure) = match answer {
                Ok(outcome) if failures_retried && failed_at_once(&outcome) => {
                    let said = outcome
                        .message
                        .clone()
                        .unwrap_or_else(|| outcome.status.as_str().to_string());
                    (format!("the job failed at once: {said}"), Some(outcome))
                }
                Ok(outcome) => return Ok(outcome),
                Err(CallError::Permanent(reason)) => {
                    return Err(NoAnswer {
                        category: FailureCategory::Permanent,
                        message: format!("{what} refused: {reason}"),
                        metadata: None,
                    })
                }
                Err(CallError::Infra(reason)) => (reason, None),
            };
            retries += 1;
            // A trigger the target's open circuit refused before its first try is marked
            // before it waits to retry: its retries may go on until the deadline.
            if let Err(why) = self.begin(stop).await {
                return Ok(self.stopped(why, what, retries, Some(error.as_str())));
            }
            match policy.delay(retries) {
                Some(wait) => {
                    warn!(run_id = %r.run_id, target, error = %error, retry = retries, wait_ms = wait.as_millis() as u64, "{what} failed; retrying");
                    last_error = Some(error);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        why = stop.reached() => return Ok(self.stopped(why, what, retries, last_error.as_deref())),
                    }
                }
                None => {
                    let tries = retries;
                    warn!(run_id = %r.run_id, target, error = %error, tries, "{what} failed; retries spent");
                    if let Some(failure) = failure {
                        return Ok(failure.with("tries", json!(tries)));
                    }
                    return Err(NoAnswer {
                        category: FailureCategory::Infra,
                        message: format!("{what} failed {tries} time(s), retries spent: {error}"),
                        metadata: Some(json!({"target": target, "tries": tries})),
                    });
                }
            }
        }
    }

    /// One call of the evaluator of sensor `key`, through the target's bound and breaker:
    /// the reading to write, its `error` set when there is no answer.
    async fn evaluate(&self, key: &str) -> SensorRecord {
        let r = &self.request;
        let answer = match self.prepare() {
            Err(reason) => Err(reason),
            Ok((config, redactor)) => {
                let call = self.call(&config, &redactor);
                // Commands share the host: each evaluator command is its own target, so one
                // failing cannot open the circuit of another's.
                let target = match config.kind() {
                    JobKind::Command => format!("evaluator:{}/{key}", r.pipeline_id),
                    _ => jobs::target(&config),
                };
                (self.limits.call(&target, &|| jobs::evaluator::ask(&call, key)).await)
                    .map_err(|e| redactor.redact(&e.to_string()))
            }
        };
        if let Err(reason) = &answer {
            warn!(key, error = %reason, "evaluator failed");
        }
        let date = r.execution.date();
        let (data, error) = match answer {
            Ok(data) => (data, None),
            Err(reason) => (Default::default(), Some(reason)),
        };
        SensorRecord {
            pipeline_id: r.pipeline_id.clone(),
            key: key.to_string(),
            data,
            date: Some(date.day.to_string()),
            hour: date.hour.map(Value::from),
            timestamp: Some(Value::from(self.clock.now().to_rfc3339())),
            source: Some(EVALUATOR_SOURCE.to_string()),
            error,
            merge: None,
        }
    }

    /// Writes an evaluator's reading on the sensors topic.
    async fn write_reading(&self, reading: SensorRecord) {
        let json = serde_json::to_value(&reading).expect("sensor records serialise");
        self.write(Family::Sensors, &self.sensors_topic, json).await
    }

    /// Runs a command job: it reports running, then its end. A run that fails (exit ≠ 0
    /// but 126/127, or killed at its timeout) is run again after `job.triggerRetry`'s waits
    /// (the earlier design ran commands inside its trigger step, whose retries covered
    /// them); spent, the last failure is the outcome.
    async fn run_command(&self, call: &Call<'_>, stop: &mut Stop) -> Outcome {
        // A command holds its slot while it runs; commands share the host, not a target.
        // Once started it runs to its end here, released or not: it reports that itself,
        // and its run no longer awaits a trigger anyone could request again.
        let slot = tokio::select! {
            slot = self.limits.overall.clone().acquire_owned() => slot,
            why = stop.reached() => return self.stopped(why, "command", 0, None),
        };
        if let Some(why) = stop.now() {
            return self.stopped(why, "command", 0, None);
        }
        if let Err(why) = self.begin(stop).await {
            return self.stopped(why, "command", 0, None);
        }
        let mut slot = Some(slot);
        let mut retries = 0;
        loop {
            let held = match slot.take() {
                Some(slot) => slot,
                None => self.limits.overall.clone().acquire_owned().await,
            };
            let outcome = match jobs::command::start(call) {
                Err(e) => return Outcome::failed(Some(FailureCategory::Permanent), e.to_string()),
                Ok(child) => {
                    let running = self.report(Outcome::running(Value::Null).with("pid", json!(child.id())));
                    // Until its "running" is on the broker the run still awaits its trigger,
                    // which the run's next owner requests again after the deadline: a command
                    // this executor cannot report by then (an owner cut off from Kafka) is
                    // killed first, with all it started, and not tried again. A retry's
                    // report has the budget a first try has to start and report.
                    let by = match retries {
                        0 => stop.deadline,
                        _ => Some(Instant::now() + COMMAND_REPORT_BUDGET),
                    };
                    let reported = match by {
                        Some(by) => tokio::time::timeout_at(by, running).await.is_ok(),
                        None => {
                            running.await;
                            true
                        }
                    };
                    if !reported {
                        jobs::command::kill(&child);
                        warn!(run_id = %self.request.run_id, "the command's running report could not be written by its deadline: killed, so that the run's next owner runs it alone");
                        return Outcome::failed(
                            Some(FailureCategory::Infra),
                            "the command's running report could not be written by the trigger's deadline (cut off from Kafka?): the command was killed, so that the run's next owner runs it alone",
                        );
                    }
                    jobs::command::wait(call, child).await
                }
            };
            drop(held);
            if !failed_at_once(&outcome) {
                return outcome;
            }
            retries += 1;
            // A run that ended meanwhile (cancelled, its poll window closed) is never run again.
            let ended = || {
                info!(run_id = %self.request.run_id, tries = retries, "command not run again: its run ended");
                outcome.clone().with("tries", json!(retries))
            };
            if stop.now() == Some(Stopped::Ended) {
                return ended();
            }
            // Nor by an executor whose partition was let go: the run is its next owner's.
            if stop.now() == Some(Stopped::Released) {
                info!(run_id = %self.request.run_id, tries = retries, "command not run again: its partition was let go");
                return outcome.with("tries", json!(retries));
            }
            match self.request.retry.delay(retries) {
                Some(wait) => {
                    warn!(run_id = %self.request.run_id, retry = retries, wait_ms = wait.as_millis() as u64,
                        error = outcome.message.as_deref().unwrap_or_default(), "command failed; running it again");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stop.ended() => return ended(),
                    }
                }
                None => return outcome.with("tries", json!(retries)),
            }
        }
    }

    /// Writes one report on `sluice.jobs`.
    async fn report(&self, mut outcome: Outcome) {
        let r = &self.request;
        // A command's "running" has no handle to keep: it reports its end itself.
        if let Some(Value::Object(m)) = &mut outcome.metadata {
            if m.get("handle") == Some(&Value::Null) {
                m.remove("handle");
            }
        }
        let record = JobRecord {
            pipeline_id: r.pipeline_id.clone(),
            schedule_id: r.execution.schedule().to_string(),
            date: r.execution.date_text().to_string(),
            run_id: r.run_id.clone(),
            status: outcome.status,
            failure_category: outcome.category,
            message: outcome.message,
            metadata: outcome.metadata,
            timestamp: self.clock.now(),
        };
        let json = serde_json::to_value(&record).expect("job records serialise");
        self.write(Family::Jobs, &self.topic, json).await
    }

    /// Writes one record about the run's pipeline, keyed by its id, until the broker has it:
    /// a report is the journal, and a lost one would strand the run; a lost reading would
    /// leave its rules waiting for the next call.
    async fn write(&self, family: Family, topic: &str, json: Value) {
        let r = &self.request;
        let bytes = match self.codec.encode(family, topic, &json) {
            Ok(bytes) => bytes,
            Err(e) => {
                // Cannot happen for the schemas this build ships; JSON still reads everywhere.
                warn!(run_id = %r.run_id, error = %e, "{} record written as JSON", family.name());
                serde_json::to_vec(&json).expect("records serialise")
            }
        };
        let mut backoff = Backoff::outage();
        loop {
            match self
                .producer
                .send(topic, Some(r.pipeline_id.as_bytes()), Some(&bytes), &[])
                .await
            {
                Ok(_) => return self.telemetry.record_out(topic, 1),
                Err(e) => {
                    warn!(run_id = %r.run_id, error = %e, "could not write a {} record; retrying", family.name());
                    backoff.wait().await;
                }
            }
        }
    }
}

/// How long a command retry has to report itself running before it is killed: a first
/// try's budget to start and report (the trigger deadline's share for a command).
const COMMAND_REPORT_BUDGET: Duration = Duration::from_secs(30);

/// Concurrency slots (overall and per target) and each target's circuit breaker.
struct Limits {
    overall: Arc<Semaphore>,
    per_target: usize,
    targets: Mutex<HashMap<String, Target>>,
    /// Where circuits opening and closing show (`sluice_circuit_open`).
    telemetry: Option<Arc<Telemetry>>,
}

struct Target {
    slots: Arc<Semaphore>,
    failures_in_a_row: u32,
    open_until: Option<Instant>,
    last_error: String,
}

/// Held while a call is in flight.
struct Slot {
    _overall: tokio::sync::OwnedSemaphorePermit,
    _target: tokio::sync::OwnedSemaphorePermit,
}

impl Limits {
    fn new(overall: usize, per_target: usize) -> Self {
        Limits {
            overall: Arc::new(Semaphore::new(overall.max(1))),
            per_target: per_target.max(1),
            targets: Mutex::new(HashMap::new()),
            telemetry: None,
        }
    }

    fn reporting_to(self, telemetry: Arc<Telemetry>) -> Self {
        Limits {
            telemetry: Some(telemetry),
            ..self
        }
    }

    fn circuit(&self, target: &str, open: bool) {
        if let Some(t) = &self.telemetry {
            t.circuit(target, open);
        }
    }

    async fn slot(&self, target: &str) -> Slot {
        let slots = {
            let mut targets = self.targets.lock().unwrap();
            let entry = targets.entry(target.to_string()).or_insert_with(|| Target {
                slots: Arc::new(Semaphore::new(self.per_target)),
                failures_in_a_row: 0,
                open_until: None,
                last_error: String::new(),
            });
            entry.slots.clone()
        };
        // The target's slot first: a call queued behind a slow target holds no overall slot.
        let target_permit = slots.acquire_owned().await.expect("semaphores are never closed");
        let overall = self
            .overall
            .clone()
            .acquire_owned()
            .await
            .expect("semaphores are never closed");
        Slot {
            _overall: overall,
            _target: target_permit,
        }
    }

    /// One call through the target's breaker, holding a slot.
    async fn call<T, F, Fut>(&self, target: &str, attempt: &F) -> Result<T, CallError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let answer = (self.call_until(target, attempt, &mut Stop::never(), async |_: &mut Stop| Ok(()))).await;
        answer.unwrap_or_else(|_| unreachable!("a call that never stops stopped"))
    }

    /// [`Self::call`], unless `stop` says so before the call is made (waiting for a slot
    /// included). A call being made is not cut when released (it may have reached the
    /// target: its answer is worth reporting), but is at the deadline. `begin` goes first
    /// once the slot is held (a trigger's start mark, see [`Work::begin`]).
    async fn call_until<T, F, Fut>(
        &self,
        target: &str,
        attempt: &F,
        stop: &mut Stop,
        begin: impl AsyncFnOnce(&mut Stop) -> Result<(), Stopped>,
    ) -> Result<Result<T, CallError>, Stopped>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        if let Some(why) = stop.now() {
            return Err(why);
        }
        if let Some(refusal) = self.open(target) {
            return Ok(Err(CallError::Infra(refusal)));
        }
        let answer = {
            let _slot = tokio::select! {
                slot = self.slot(target) => slot,
                why = stop.reached() => return Err(why),
            };
            begin(stop).await?;
            match stop.deadline {
                None => attempt().await,
                Some(deadline) => (tokio::time::timeout_at(deadline, attempt()).await)
                    .unwrap_or_else(|_| Err(CallError::Infra("no answer by the call's deadline".into()))),
            }
        };
        self.record(target, &answer);
        Ok(answer)
    }

    /// Why calls to `target` fail at once, if its circuit is open.
    fn open(&self, target: &str) -> Option<String> {
        let targets = self.targets.lock().unwrap();
        let t = targets.get(target)?;
        let until = t.open_until.filter(|u| *u > Instant::now())?;
        Some(format!(
            "circuit open for {target} for another {}s after {} failures in a row (last: {})",
            until.saturating_duration_since(Instant::now()).as_secs().max(1),
            t.failures_in_a_row,
            t.last_error
        ))
    }

    fn record<T>(&self, target: &str, answer: &Result<T, CallError>) {
        let mut targets = self.targets.lock().unwrap();
        let Some(t) = targets.get_mut(target) else { return };
        match answer {
            Err(CallError::Infra(reason)) => {
                t.failures_in_a_row += 1;
                t.last_error = reason.clone();
                if t.failures_in_a_row >= BREAKER_THRESHOLD {
                    if t.open_until.is_none_or(|u| u <= Instant::now()) {
                        warn!(
                            target,
                            failures = t.failures_in_a_row,
                            cooldown_s = BREAKER_COOLDOWN.as_secs(),
                            "circuit opened"
                        );
                        self.circuit(target, true);
                    }
                    t.open_until = Some(Instant::now() + BREAKER_COOLDOWN);
                }
            }
            _ => {
                if t.open_until.is_some() {
                    info!(target, "circuit closed: the target answers again");
                    self.circuit(target, false);
                }
                t.failures_in_a_row = 0;
                t.open_until = None;
            }
        }
    }
}

/// Release keys drawn from the operating system's random source (see
/// `TriggerRequest::release_key`).
pub struct OsKeys;

impl ReleaseKeys for OsKeys {
    fn next_key(&mut self) -> Option<String> {
        let mut bytes = [0u8; 16];
        // Without a random source the key is left out: the release then needs only the
        // deadline, as before keys were (and says so).
        match getrandom::fill(&mut bytes) {
            Ok(()) => Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
            Err(e) => {
                warn!(error = %e, "no random source for a trigger's release key");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

    use futures::FutureExt;

    use super::*;

    fn infra() -> Result<Outcome, CallError> {
        Err(CallError::Infra("503".into()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_target_failing_in_a_row_opens_its_circuit_for_the_cooldown_only() {
        let telemetry = Telemetry::new();
        let limits = Limits::new(4, 2).reporting_to(telemetry.clone());
        let shown = |state: &str| {
            let text = telemetry.encode_text();
            text.contains(&format!("sluice_circuit_open{{target=\"dead\"}} {state}"))
        };
        let calls = std::sync::atomic::AtomicU32::new(0);
        let failing = || async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            infra()
        };
        for _ in 0..BREAKER_THRESHOLD {
            assert!(limits.call("dead", &failing).await.is_err());
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), BREAKER_THRESHOLD);
        // Open: refused without a call.
        let refused = limits.call("dead", &failing).await.unwrap_err();
        assert!(
            matches!(&refused, CallError::Infra(m) if m.contains("circuit open for dead")),
            "{refused:?}"
        );
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), BREAKER_THRESHOLD);
        assert!(shown("1"), "{}", telemetry.encode_text());
        // Other targets are not affected.
        let fine = || async { Ok(Outcome::succeeded("ok")) };
        assert!(limits.call("alive", &fine).await.is_ok());
        // After the cooldown one call goes through; a success closes the circuit.
        tokio::time::advance(BREAKER_COOLDOWN + Duration::from_millis(1)).await;
        assert!(limits.call("dead", &fine).await.is_ok());
        assert!(limits.open("dead").is_none());
        assert!(shown("0"), "{}", telemetry.encode_text());
        // Permanent refusals are the caller's fault, not the target's: they do not count.
        let bad = || async { Err::<Outcome, _>(CallError::Permanent("404".into())) };
        for _ in 0..BREAKER_THRESHOLD + 1 {
            let _ = limits.call("picky", &bad).await;
        }
        assert!(limits.open("picky").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn calls_to_one_target_never_exceed_its_bound() {
        let limits = Arc::new(Limits::new(10, 2));
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        for _ in 0..8 {
            let (limits, in_flight, peak) = (limits.clone(), in_flight.clone(), peak.clone());
            tasks.spawn(async move {
                let slow = || async {
                    let now = in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    peak.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    Ok(Outcome::succeeded("ok"))
                };
                limits.call("glue:etl", &slow).await.unwrap();
            });
        }
        while tasks.join_next().await.is_some() {}
        assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_run_has_one_call_in_flight_and_revocation_waits_for_it() {
        let p = PartitionId::new;
        let in_flight = Arc::new(InFlight::default());
        assert!(in_flight.start("p.s.d.1", p(3)).is_some());
        assert!(
            in_flight.start("p.s.d.1", p(3)).is_none(),
            "a second call for the same run"
        );
        assert!(in_flight.start("q.s.d.1", p(4)).is_some());
        assert_eq!(in_flight.count(&[p(3)]), 1);
        assert_eq!(
            in_flight.wait_for(&[p(5)], Duration::from_secs(60)),
            0,
            "nothing of partition 5"
        );
        assert_eq!(in_flight.wait_for(&[p(3)], Duration::ZERO), 1, "bounded by the timeout");
        let finisher = {
            let in_flight = in_flight.clone();
            std::thread::spawn(move || in_flight.finish("p.s.d.1"))
        };
        assert_eq!(in_flight.wait_for(&[p(3)], Duration::from_secs(60)), 0);
        finisher.join().unwrap();
        assert!(
            in_flight.start("p.s.d.1", p(3)).is_some(),
            "a finished run may be requested again"
        );
        assert_eq!(in_flight.count(&[p(3), p(4)]), 2);
    }

    #[test]
    fn only_the_revoked_partitions_calls_are_released() {
        let p = PartitionId::new;
        let in_flight = InFlight::default();
        let three = in_flight.start("p.s.d.1", p(3)).unwrap();
        let four = in_flight.start("q.s.d.1", p(4)).unwrap();
        assert_eq!(in_flight.release(&[p(3), p(5)]), 1);
        assert!(three.borrow().is_some() && four.borrow().is_none());
        assert_eq!(in_flight.release(&[p(3)]), 0, "told once");
        assert_eq!(in_flight.release_all(), 1);
        assert!(four.borrow().is_some());
    }

    /// A trigger of an `http` job, with the default retry policy (30 s, ×2, 3 retries).
    fn work() -> Work {
        let request = TriggerRequest::new(
            "p",
            &crate::core::execution::id("daily", "2026-11-26"),
            1,
            JobConfig::from_json(JobKind::Http, &json!({"url": "http://target.test/run"})).unwrap(),
        );
        let producer = RenewableProducer::fixed(
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", "127.0.0.1:1")
                .create_with_context(crate::runtime::kafka::Watch::default())
                .unwrap(),
        );
        Work {
            producer,
            topic: "sluice.jobs".into(),
            sensors_topic: "sluice.sensors".into(),
            codec: Codec::json(),
            client: Client::new(Guard::new(Vec::new()), None).unwrap(),
            limits: Arc::new(Limits::new(4, 2)),
            secrets: Arc::new(SecretPolicy::default()),
            disabled: Arc::new([]),
            clock: Clock::system(),
            telemetry: Telemetry::new(),
            request,
        }
    }

    type Attempt = futures::future::BoxFuture<'static, Result<Outcome, CallError>>;

    /// Tries made, and an attempt answering `answer(n)` on its `n`th try (from 0).
    fn counted(answer: impl Fn(usize) -> Attempt) -> (Arc<AtomicU32>, impl Fn() -> Attempt) {
        let tries = Arc::new(AtomicU32::new(0));
        let counted = tries.clone();
        (tries, move || answer(counted.fetch_add(1, SeqCst) as usize))
    }

    /// Tries made, and the attempt: each try takes `takes`, then fails as a 503 would.
    fn failing(takes: Duration) -> (Arc<AtomicU32>, impl Fn() -> Attempt) {
        counted(move |_| {
            async move {
                tokio::time::sleep(takes).await;
                infra()
            }
            .boxed()
        })
    }

    /// Runs `work`'s retries of `attempt` in a task, stopped by `stop`.
    fn retrying(
        work: Work,
        attempt: impl Fn() -> futures::future::BoxFuture<'static, Result<Outcome, CallError>> + Send + Sync + 'static,
        mut stop: Stop,
    ) -> tokio::task::JoinHandle<Outcome> {
        tokio::spawn(async move {
            let (config, redactor) = (work.request.config.clone(), Redactor::default());
            let call = work.call(&config, &redactor);
            work.with_retries("trigger", work.request.retry, &call, &mut stop, true, attempt)
                .await
                .unwrap_or_else(NoAnswer::failed)
        })
    }

    /// A trigger journaled with a time to begin, 30 s from now, its deadline minutes away.
    fn work_starting_by() -> Work {
        let mut w = work();
        let now = chrono::Utc::now();
        w.request.deadline = Some(now + chrono::TimeDelta::minutes(5));
        w.request.start_by = Some(now + chrono::TimeDelta::seconds(30));
        w
    }

    fn let_go_unbegun(outcome: &Outcome) -> bool {
        let begun = outcome
            .metadata
            .as_ref()
            .and_then(|m| m.get(crate::core::handover::BEGUN));
        outcome.status == JobStatus::Released && begun == Some(&json!(false))
    }

    /// Its start mark cannot reach the jobs topic (the broker is unreachable) by its time
    /// to begin: the trigger makes no call, and lets it go saying it never began, for its
    /// owner to request it again (a new owner, finding no mark, calls at once).
    #[tokio::test(start_paused = true)]
    async fn a_trigger_whose_start_mark_does_not_land_in_time_makes_no_call() {
        let (tries, attempt) = failing(Duration::ZERO);
        let w = work_starting_by();
        let stop = Stop::at(w.deadline(), None).starting_by(w.start_by());
        let outcome = retrying(w, attempt, stop).await.unwrap();
        assert!(let_go_unbegun(&outcome), "{outcome:?}");
        assert_eq!(tries.load(SeqCst), 0, "no call");
    }

    /// Still queued for the target's slot at its time to begin: let go there, no call.
    #[tokio::test(start_paused = true)]
    async fn a_trigger_still_waiting_for_a_slot_at_its_time_to_begin_makes_no_call() {
        let w = work_starting_by();
        // Both of the target's slots held by calls that take two minutes.
        let target = jobs::target(&w.request.config);
        let mut held = Vec::new();
        for _ in 0..2 {
            let (tries, hog) = failing(Duration::from_secs(120));
            held.push(tries);
            let (limits, target) = (w.limits.clone(), target.clone());
            tokio::spawn(async move {
                let _ = limits.call(&target, &hog).await;
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            held.iter().map(|t| t.load(SeqCst)).sum::<u32>(),
            2,
            "the slots are held"
        );
        let (tries, attempt) = failing(Duration::ZERO);
        let started = Instant::now();
        let stop = Stop::at(w.deadline(), None).starting_by(w.start_by());
        let outcome = retrying(w, attempt, stop).await.unwrap();
        assert!(let_go_unbegun(&outcome), "{outcome:?}");
        assert_eq!(tries.load(SeqCst), 0, "no call");
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(31),
            "let go at its time to begin, not when a slot came: {waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_trigger_makes_no_further_try_and_says_so() {
        let (tries, attempt) = failing(Duration::ZERO);
        let (release, released) = watch::channel(None);
        let task = retrying(work(), attempt, Stop::at(None, Some(released)));
        // The first try failed; the retry waits its 30 s backoff.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(tries.load(SeqCst), 1);
        release.send_replace(Some(Stopped::Released));
        let outcome = task.await.unwrap();
        assert_eq!(outcome.status, JobStatus::Released, "{outcome:?}");
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(tries.load(SeqCst), 1, "no retry after the release");
    }

    #[tokio::test(start_paused = true)]
    async fn a_try_being_made_when_released_runs_to_its_answer_and_is_the_last() {
        let (tries, attempt) = failing(Duration::from_secs(20));
        let (release, released) = watch::channel(None);
        let task = retrying(work(), attempt, Stop::at(None, Some(released)));
        tokio::time::sleep(Duration::from_secs(5)).await;
        release.send_replace(Some(Stopped::Released));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!task.is_finished(), "the try in progress is not cut");
        let outcome = task.await.unwrap();
        assert_eq!((outcome.status, tries.load(SeqCst)), (JobStatus::Released, 1));
        // A try that answers is reported as it answered, released or not.
        let (release, released) = watch::channel(None);
        let slow_success = || {
            async {
                tokio::time::sleep(Duration::from_secs(20)).await;
                Ok(Outcome::succeeded("accepted"))
            }
            .boxed()
        };
        let task = retrying(work(), slow_success, Stop::at(None, Some(released)));
        tokio::time::sleep(Duration::from_secs(5)).await;
        release.send_replace(Some(Stopped::Released));
        assert_eq!(task.await.unwrap().status, JobStatus::Succeeded);
    }

    /// A trigger the job fails at once, whose run ends (cancelled) while it waits to try
    /// again: no further try, and its report says why; told through [`InFlight::end`].
    #[tokio::test(start_paused = true)]
    async fn a_failing_trigger_whose_run_ended_is_not_tried_again() {
        let in_flight = InFlight::default();
        let error = Outcome::failed(None, "function error (Unhandled): boom");
        let (tries, attempt) = answering(vec![error]);
        let told = in_flight.start("p.s.d.1", PartitionId::new(0)).unwrap();
        let task = retrying(work(), attempt, Stop::at(None, Some(told)));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(tries.load(SeqCst), 1);
        assert_eq!(in_flight.end(&["other.run".into(), "p.s.d.1".into()]), 1);
        let outcome = task.await.unwrap();
        assert_eq!(outcome.status, JobStatus::Failed);
        assert!(
            outcome.message.as_deref().unwrap().contains("its run ended"),
            "{outcome:?}"
        );
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(tries.load(SeqCst), 1, "no retry after the run ended");
        assert_eq!(in_flight.end(&["p.s.d.1".into()]), 0, "told once");
    }

    /// An attempt answering `answers` in turn (the last repeating), counting its tries.
    fn answering(answers: Vec<Outcome>) -> (Arc<AtomicU32>, impl Fn() -> Attempt) {
        counted(move |n| {
            let answer = answers[n.min(answers.len() - 1)].clone();
            async move { Ok(answer) }.boxed()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_trigger_the_job_fails_at_once_is_tried_again_before_it_costs_a_run() {
        // A Lambda function error on a cold start, then the function runs.
        let error = Outcome::failed(None, "function error (Unhandled): Task timed out after 3.00 seconds");
        let (tries, attempt) = answering(vec![error.clone(), Outcome::succeeded("accepted")]);
        let outcome = retrying(work(), attempt, Stop::never()).await.unwrap();
        assert_eq!((outcome.status, tries.load(SeqCst)), (JobStatus::Succeeded, 2));
        // Failing every time: the policy's retries (3), then the last failure is the outcome.
        let (tries, attempt) = answering(vec![error]);
        let outcome = retrying(work(), attempt, Stop::never()).await.unwrap();
        assert_eq!(
            (outcome.status, outcome.category, tries.load(SeqCst)),
            (JobStatus::Failed, None, 4)
        );
        assert!(
            outcome.message.as_deref().unwrap().contains("function error"),
            "{outcome:?}"
        );
        // A refusal is not tried again: the same request would be refused the same way.
        let refused = Outcome::failed(Some(FailureCategory::Permanent), "no such function");
        let (tries, attempt) = answering(vec![refused]);
        let outcome = retrying(work(), attempt, Stop::never()).await.unwrap();
        assert_eq!(
            (outcome.category, tries.load(SeqCst)),
            (Some(FailureCategory::Permanent), 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_try_starts_after_the_deadline_and_none_outlasts_it() {
        // Tries at 0, 30 and 90 s; the next would be at 210 s, past the deadline at 100 s.
        let (tries, attempt) = failing(Duration::ZERO);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(100);
        let outcome = retrying(work(), attempt, Stop::at(Some(deadline), None)).await.unwrap();
        assert_eq!(tries.load(SeqCst), 3);
        assert_eq!(Instant::now(), deadline, "it gave up at the deadline, not later");
        assert_eq!(
            (outcome.status, outcome.category),
            (JobStatus::Failed, Some(FailureCategory::Infra))
        );
        assert!(
            outcome
                .message
                .as_deref()
                .unwrap()
                .contains("deadline after 3 tries: 503"),
            "{outcome:?}"
        );
        // A try that hangs is cut at the deadline.
        let (tries, attempt) = failing(Duration::from_secs(3600));
        let deadline = Instant::now() + Duration::from_secs(100);
        let outcome = retrying(work(), attempt, Stop::at(Some(deadline), None)).await.unwrap();
        assert_eq!((tries.load(SeqCst), Instant::now()), (1, deadline));
        assert_eq!(outcome.status, JobStatus::Failed);
    }
}
