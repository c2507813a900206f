//! Effects: job triggers per second sustained against a loopback HTTP target, against two
//! ceilings: the same calls made by a plain HTTP client (the same library, the same bound on
//! calls in flight to one target), and a Kafka → HTTP pass-through that reads the same
//! backlog and calls each trigger's job with no rules, no state and no events. The second is
//! the fair one: both it and sluice read Kafka, so its ratio measures what Sluice adds.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::TopicPartitionList;

use crate::measure::metric;
use crate::passthrough::BATCH;
use crate::target::Target;
use crate::{fresh_broker, kafka_io, produce_backlog, produce_readings, target, wait, workload, Args, Run, Sizes};

/// `sluice run`'s default `--max-calls-per-target`: every benchmark job has the same host.
const PER_TARGET: usize = 4;

pub fn run(args: &Args, sluice: &Path, sizes: &Sizes, report: &mut String) -> Result<()> {
    let jobs = sizes.trigger_pipelines;
    let target = target::start();
    let ceiling = client_ceiling(&target.url, jobs)?;
    target.reset();
    let kafka_ceiling = kafka_http_ceiling(&fresh_broker(args)?, sluice, jobs, &target)?;
    target.reset();

    let mut run = Run::new(&fresh_broker(args)?, sluice, "triggers")?;
    let records = produce_backlog(&run, jobs, jobs * 2, &target.url);
    run.start("state")?;
    wait("every job triggered", Duration::from_secs(1800), || {
        target.count() >= jobs as u64
    })?;
    let (rate, calls) = target.rate();
    let (brokers, group, sensors) = (run.brokers.clone(), run.group(), run.topic("sensors"));
    wait("the backlog committed", Duration::from_secs(600), || {
        kafka_io::committed(&brokers, &group, &sensors) >= records as i64
    })?;
    let batches = metric(&run.http, "sluice_batch_seconds_count", "");
    let in_batches = metric(&run.http, "sluice_batch_seconds_sum", "");
    let in_commits = metric(&run.http, "sluice_commit_seconds_sum", "");
    let records_in = metric(&run.http, "sluice_records_in_total", "");
    run.stop();
    let _ = writeln!(
        report,
        "\n## Job triggers ({jobs} pipelines, each triggering one `http` job on a loopback target)\n\n\
         | what | triggers/s | ratio |\n| --- | ---: | ---: |\n\
         | the same POSTs from one HTTP client, {PER_TARGET} in flight | {ceiling:.0} | {:.2} |\n\
         | Kafka → HTTP pass-through: the same backlog read, each trigger's job called, {PER_TARGET} in flight, offsets committed per batch (the ceiling) | {kafka_ceiling:.0} | 1.00 |\n\
         | sluice, decisions to calls ({calls} calls, {PER_TARGET} in flight per target) | {rate:.0} | {:.2} |",
        ceiling / kafka_ceiling,
        rate / kafka_ceiling
    );
    let _ = writeln!(
        report,
        "\nsluice: {records_in:.0} records in (readings, configs and its own job reports) in {batches:.0} batches, {in_batches:.2} s inside batches, of which {in_commits:.2} s producing and awaiting acknowledgements."
    );
    Ok(())
}

/// The Kafka → HTTP pass-through over a backlog like sluice's (row counts, then a trigger per
/// pipeline, on fresh topics): read in batches with sluice's consumer settings, each
/// trigger's job POSTed (`PER_TARGET` in flight), each batch's offsets committed once its
/// calls answered. Calls/s at the target, as sluice's rate is measured.
fn kafka_http_ceiling(args: &Args, sluice: &Path, jobs: usize, target: &Target) -> Result<f64> {
    let run = Run::new(args, sluice, "triggers-ceiling")?;
    produce_readings(&run, jobs, jobs * 2);
    client_runtime()?.block_on(async {
        let consumer: StreamConsumer = sluice::runtime::kafka::input_consumer_config(&run.kafka, &run.group())
            .create()
            .context("creating the ceiling's consumer")?;
        consumer.subscribe(&[run.topic("sensors").as_str()])?;
        let client = reqwest::Client::new();
        let limit = Arc::new(tokio::sync::Semaphore::new(PER_TARGET));
        let mut called = 0;
        while called < jobs {
            let mut batch = vec![consumer.recv().await?.detach()];
            while batch.len() < BATCH {
                match consumer.recv().now_or_never() {
                    Some(m) => batch.push(m?.detach()),
                    None => break,
                }
            }
            let mut calls = tokio::task::JoinSet::new();
            for m in &batch {
                let reading: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default())?;
                if reading["key"] != "upstream" {
                    continue;
                }
                let id = reading["pipelineId"]
                    .as_str()
                    .context("a reading without its pipeline")?;
                let (client, limit) = (client.clone(), limit.clone());
                let (url, body) = (format!("{}/run/{id}", target.url), job_body(id));
                calls.spawn(async move {
                    let _slot = limit.acquire_owned().await.expect("open");
                    post(&client, &url, body).await
                });
            }
            while let Some(done) = calls.join_next().await {
                done.context("a call task")?.context("a ceiling call")?;
                called += 1;
            }
            let mut offsets = TopicPartitionList::new();
            for m in &batch {
                offsets.add_partition_offset(m.topic(), m.partition(), rdkafka::Offset::Offset(m.offset() + 1))?;
            }
            consumer.commit(&offsets, CommitMode::Async)?;
        }
        anyhow::Ok(())
    })?;
    Ok(target.rate().0)
}

/// The ceilings' runtime: one worker thread, for an HTTP client.
fn client_runtime() -> Result<tokio::runtime::Runtime> {
    // The workspace builds reqwest with rustls and no default provider (as `sluice` does).
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?)
}

/// The body of the benchmark's job call for pipeline `id`.
fn job_body(id: &str) -> String {
    format!("{{\"pipeline\": \"{id}\", \"run\": \"bench\"}}")
}

/// POSTs `body` to `url` as the `http` job does: a JSON body, an error on any non-2xx.
async fn post(client: &reqwest::Client, url: &str, body: String) -> reqwest::Result<reqwest::Response> {
    (client.post(url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?
        .error_for_status()
}

/// POSTs the benchmark's job body to each pipeline's URL, `PER_TARGET` at a time: calls/s.
fn client_ceiling(url: &str, jobs: usize) -> Result<f64> {
    client_runtime()?.block_on(async {
        let client = reqwest::Client::new();
        let limit = Arc::new(tokio::sync::Semaphore::new(PER_TARGET));
        let started = Instant::now();
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..jobs {
            let id = workload::pipeline_id(i);
            let (client, limit) = (client.clone(), limit.clone());
            let url = format!("{url}/run/{id}");
            calls.spawn(async move {
                let _slot = limit.acquire_owned().await.expect("open");
                post(&client, &url, job_body(&id)).await
            });
        }
        while let Some(done) = calls.join_next().await {
            done.context("a call task")?.context("a ceiling call")?;
        }
        Ok(jobs as f64 / started.elapsed().as_secs_f64())
    })
}
