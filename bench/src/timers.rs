//! Timer precision: SLA_BREACH event time minus its deadline, with many timers pending.
//!
//! Most pipelines' deadlines are hours away (their breach and warning timers stay pending);
//! a measured group shares a deadline at the next minute boundary, as pipelines sharing a
//! morning deadline do, so they come due together.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};

use crate::measure::{metric, percentiles};
use crate::{kafka_io, target, wait, workload, Args, Run, Sizes};

pub fn run(args: &Args, sluice: &Path, sizes: &Sizes, report: &mut String) -> Result<()> {
    let target = target::start();
    let mut run = Run::new(args, sluice, "timers")?;
    let producer = kafka_io::producer(&run.brokers);
    let topic = run.topic("config");
    let send = |i: usize, clock: &str| {
        let id = workload::pipeline_id(i);
        let config = workload::with_deadline(workload::config(&id, &target.url), clock);
        kafka_io::send(&producer, &topic, &id, &config);
    };
    let far = clock(Utc::now() + TimeDelta::hours(3));
    let pending = sizes.timer_pipelines;
    for i in 0..pending {
        send(i, &far);
    }
    kafka_io::flush(&producer);
    run.start("state")?;
    let (brokers, group) = (run.brokers.clone(), run.group());
    let accepted = |n: usize| kafka_io::committed(&brokers, &group, &topic) >= n as i64;
    wait("the pending pipelines loaded", Duration::from_secs(3600), || {
        accepted(pending)
    })?;

    let deadline = (Utc::now() + TimeDelta::seconds(sizes.timer_margin_s)).duration_trunc(TimeDelta::minutes(1))?
        + TimeDelta::minutes(1);
    let measured = sizes.timer_measured;
    for j in 0..measured {
        send(pending + j, &clock(deadline));
    }
    kafka_io::flush(&producer);
    wait("the measured pipelines loaded", Duration::from_secs(600), || {
        accepted(pending + measured)
    })?;
    if Utc::now() >= deadline {
        bail!("the measured pipelines were accepted after their deadline {deadline}: raise the margin");
    }
    let timers_pending = metric(&run.http, "sluice_timers_pending", "");

    let events = run.topic("events");
    let reader = kafka_io::reader(&run.brokers, &[events.as_str()]);
    let mut lateness = HashMap::new();
    let mut received = Vec::new();
    let within = (deadline - Utc::now()).to_std()? + Duration::from_secs(120);
    let _ = wait("every SLA_BREACH", within, || {
        kafka_io::drain_events(&reader, "SLA_BREACH", |event| {
            let at = |v: &serde_json::Value| v.as_str().and_then(|t| t.parse::<DateTime<Utc>>().ok());
            if let (Some(stamped), Some(due)) = (at(&event["timestamp"]), at(&event["detail"]["deadline"])) {
                if due == deadline {
                    let id = event["pipelineId"].as_str().unwrap_or("").to_string();
                    lateness.insert(id, millis(stamped - due));
                    received.push(millis(Utc::now() - due));
                }
            }
        });
        lateness.len() >= measured
    });
    run.stop();
    let mut stamped: Vec<f64> = lateness.into_values().collect();
    let got = stamped.len();
    let (p50, p99, max) = percentiles(&mut stamped);
    let (r50, r99, rmax) = percentiles(&mut received);
    let _ = writeln!(
        report,
        "\n## Timer precision ({pending} pipelines with deadlines hours away, {timers_pending:.0} timers pending; {measured} more sharing a deadline)\n\n\
         SLA_BREACH timestamp − deadline, over {got} of {measured} breaches: p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms.\n\
         Received by a consumer − deadline: p50 {r50:.1} ms, p99 {r99:.1} ms, max {rmax:.1} ms."
    );
    Ok(())
}

fn clock(at: DateTime<Utc>) -> String {
    at.format("%H:%M").to_string()
}

fn millis(delta: TimeDelta) -> f64 {
    delta.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}
