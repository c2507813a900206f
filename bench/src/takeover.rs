//! Taking over partitions: how long until every partition is decided on again when an
//! instance joins the group, when one leaves it cleanly (a rolling deploy), and when one
//! dies (the group notices only at its session timeout).
//!
//! Each step is timed to the moment a probe on every partition (a reading and a trigger for
//! a new hourly execution of one pipeline per partition) has its VALIDATION_PASSED.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use rdkafka::consumer::BaseConsumer;
use sluice::core::partitioning::partition_for;

use crate::{execution_of, kafka_io, produce_backlog, target, today, wait, workload, Args, Run, Sizes};

const PROBE_WAIT: Duration = Duration::from_secs(600);

pub fn run(args: &Args, sluice: &Path, sizes: &Sizes, report: &mut String) -> Result<()> {
    let target = target::start();
    let mut run = Run::new(args, sluice, "takeover")?;
    let pipelines = sizes.takeover_pipelines;
    let records = produce_backlog(&run, pipelines, pipelines * 2, &target.url);
    run.start("state")?;
    let (brokers, group, sensors) = (run.brokers.clone(), run.group(), run.topic("sensors"));
    wait("the pipelines loaded", Duration::from_secs(3600), || {
        kafka_io::committed(&brokers, &group, &sensors) >= records as i64
    })?;
    let events = run.topic("events");
    let prober = Prober {
        brokers: run.brokers.clone(),
        sensors: sensors.clone(),
        reader: kafka_io::reader(&run.brokers, &[events.as_str()]),
        probes: one_per_partition(pipelines, kafka_io::partitions(&run.brokers, &sensors)),
    };

    // A second instance, empty state directory, joins while the first runs.
    let started = Instant::now();
    let mut b = run.spawn("b")?;
    wait("the new instance serving", Duration::from_secs(600), || b.serving())?;
    let join_ready = started.elapsed().as_secs_f64();
    prober.probe(1, PROBE_WAIT)?;
    let join = started.elapsed().as_secs_f64();

    // The first leaves cleanly: the second takes its partitions.
    let stopped = Instant::now();
    run.stop();
    prober.probe(2, PROBE_WAIT)?;
    let handover = stopped.elapsed().as_secs_f64();

    // A third joins, then the second dies: the third should take everything once the
    // session timeout passes (tansu 0.6 never reassigns a dead member's partitions: a pair
    // of plain librdkafka consumers shows the same, so the wait is bounded).
    let c = run.spawn("c")?;
    wait("the third instance serving", Duration::from_secs(600), || c.serving())?;
    let killed = Instant::now();
    b.signal("-KILL");
    let failover = match prober.probe(3, Duration::from_secs(sizes.failover_wait_s)) {
        Ok(()) => format!("{:.1}", killed.elapsed().as_secs_f64()),
        Err(_) => format!(
            "not within {} s (the broker did not reassign them)",
            sizes.failover_wait_s
        ),
    };
    drop(c);

    let _ = writeln!(
        report,
        "\n## Partition takeover ({pipelines} pipelines, {} partitions)\n\n\
         | step | s |\n| --- | ---: |\n\
         | a new instance joins: start → serving (rebalanced, its partitions restored) | {join_ready:.1} |\n\
         | a new instance joins: start → decisions on every partition | {join:.1} |\n\
         | an instance stops cleanly: SIGTERM → decisions on every partition | {handover:.1} |\n\
         | an instance dies: SIGKILL → decisions on every partition (session timeout 10 s) | {failover} |",
        prober.probes.len()
    );
    Ok(())
}

/// The first pipeline on each partition.
fn one_per_partition(pipelines: usize, partitions: i32) -> Vec<String> {
    let mut seen = HashSet::new();
    (0..pipelines)
        .map(workload::pipeline_id)
        .filter(|id| seen.insert(partition_for(id.as_bytes(), partitions)))
        .collect()
}

struct Prober {
    brokers: String,
    sensors: String,
    reader: BaseConsumer,
    probes: Vec<String>,
}

impl Prober {
    /// Sends each probe pipeline a reading and a trigger for hour `hour` of today, and waits
    /// for all their VALIDATION_PASSED.
    fn probe(&self, hour: u32, within: Duration) -> Result<()> {
        let producer = kafka_io::producer(&self.brokers);
        let (sensors, date) = (&self.sensors, today());
        let mut waiting = HashSet::new();
        for id in &self.probes {
            kafka_io::send(
                &producer,
                sensors,
                id,
                &workload::row_count(id, 5000, &date, Some(hour)),
            );
            kafka_io::send(&producer, sensors, id, &workload::trigger(id, &date, Some(hour)));
            waiting.insert(format!("{id}|{date}T{hour:02}"));
        }
        kafka_io::flush(&producer);
        wait("decisions on every partition", within, || {
            kafka_io::drain_events(&self.reader, "VALIDATION_PASSED", |event| {
                waiting.remove(&execution_of(event));
            });
            waiting.is_empty()
        })?;
        Ok(())
    }
}
