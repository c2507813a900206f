//! The operator page's API with many pipelines: the time to answer each request the page
//! makes (the list's first page, a name filter, a state filter, one pipeline, the page
//! itself), against `/healthz` on the same server as the floor (an answer that touches no
//! state).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::measure::{http_get, percentiles};
use crate::{kafka_io, produce_backlog, target, wait, workload, Args, Run, Sizes};

/// Requests timed per path.
const SAMPLES: usize = 40;

pub fn run(args: &Args, sluice: &Path, sizes: &Sizes, report: &mut String) -> Result<()> {
    let pipelines = sizes.page_pipelines;
    let target = target::start();
    let mut run = Run::new(args, sluice, "page")?;
    let records = produce_backlog(&run, pipelines, pipelines * 2, &target.url);
    run.start("state")?;
    let (brokers, group, sensors) = (run.brokers.clone(), run.group(), run.topic("sensors"));
    wait("the pipelines loaded", Duration::from_secs(1800), || {
        kafka_io::committed(&brokers, &group, &sensors) >= records as i64
    })?;
    // Measured idle: every job's report handled (the backlog ends with one run each).
    let reader = kafka_io::reader(&brokers, &[&run.topic("events")]);
    let mut completed = HashSet::new();
    wait("every job completed", Duration::from_secs(1800), || {
        kafka_io::drain_events(&reader, "JOB_COMPLETED", |e| {
            completed.insert(e["pipelineId"].as_str().unwrap_or_default().to_string());
        });
        completed.len() >= pipelines
    })?;
    let one = workload::pipeline_id(pipelines / 2);
    let paths = [
        ("`/healthz` (floor)", "/healthz".to_string()),
        ("the page (`/`)", "/".to_string()),
        ("list, first page of 100", "/api/pipelines".to_string()),
        ("list, name filter (1 match)", format!("/api/pipelines?q={one}")),
        ("list, state filter", "/api/pipelines?state=completed".to_string()),
        ("list, page 10", "/api/pipelines?offset=900".to_string()),
        ("one pipeline", format!("/api/pipelines/{one}")),
    ];
    let _ = writeln!(
        report,
        "\n## Operator page ({pipelines} pipelines, one instance, {SAMPLES} sequential requests each)\n\n\
         | request | p50 ms | p99 ms | bytes | p50 ratio to `/healthz` |\n| --- | ---: | ---: | ---: | ---: |"
    );
    let mut floor = 0.0;
    for (name, path) in paths {
        let mut samples = Vec::with_capacity(SAMPLES);
        let mut bytes = 0;
        for _ in 0..SAMPLES {
            let started = Instant::now();
            let Some((200, body)) = http_get(&run.http, &path) else {
                bail!("GET {path} did not answer 200");
            };
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            bytes = body.len();
        }
        let (p50, p99, _) = percentiles(&mut samples);
        if floor == 0.0 {
            floor = p50;
        }
        let _ = writeln!(
            report,
            "| {name} | {p50:.2} | {p99:.2} | {bytes} | {:.1} |",
            p50 / floor
        );
    }
    run.stop();
    Ok(())
}
