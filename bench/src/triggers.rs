//! Effects: job triggers per second sustained against a loopback HTTP target, against the
//! same calls made by a plain HTTP client (the same library, the same bound on calls in
//! flight to one target) as the ceiling.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::measure::metric;
use crate::{kafka_io, produce_backlog, target, wait, workload, Args, Run, Sizes};

/// `sluice run`'s default `--max-calls-per-target`: every benchmark job has the same host.
const PER_TARGET: usize = 4;

pub fn run(args: &Args, sluice: &Path, sizes: &Sizes, report: &mut String) -> Result<()> {
    let jobs = sizes.trigger_pipelines;
    let target = target::start();
    let ceiling = client_ceiling(&target.url, jobs)?;
    target.reset();

    let mut run = Run::new(args, sluice, "triggers")?;
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
         | the same POSTs from one HTTP client, {PER_TARGET} in flight (ceiling) | {ceiling:.0} | 1.00 |\n\
         | sluice, decisions to calls ({calls} calls, {PER_TARGET} in flight per target) | {rate:.0} | {:.2} |",
        rate / ceiling
    );
    let _ = writeln!(
        report,
        "\nsluice: {records_in:.0} records in (readings, configs and its own job reports) in {batches:.0} batches, {in_batches:.2} s inside batches, of which {in_commits:.2} s producing and awaiting acknowledgements."
    );
    Ok(())
}

/// POSTs the benchmark's job body to each pipeline's URL, `PER_TARGET` at a time: calls/s.
fn client_ceiling(url: &str, jobs: usize) -> Result<f64> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    // The workspace builds reqwest with rustls and no default provider (as `sluice` does).
    let _ = rustls::crypto::ring::default_provider().install_default();
    runtime.block_on(async {
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
                let body = format!("{{\"pipeline\": \"{id}\", \"run\": \"bench\"}}");
                client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?
                    .error_for_status()
            });
        }
        while let Some(done) = calls.join_next().await {
            done.context("a call task")?.context("a ceiling call")?;
        }
        Ok(jobs as f64 / started.elapsed().as_secs_f64())
    })
}
