//! Sluice's own time per record, with no broker: the latency scenario's readings fed from
//! memory at a steady rate, on a simulated clock, through the processor's own partition
//! task (`core::task`: read the pipeline's state from the store's cache of decoded states,
//! else from its parts in RocksDB; decide within the limits; encode the state's writes and
//! the events; arm and fire timers; take the job reports back), its batches written out by
//! the broker-free driver (`sim::driver`: outputs to an in-memory log, each batch to a real
//! RocksDB store). Decoding each record is counted too. Whatever a broker does, a cost per record that grows from one simulated
//! minute to the next grows in Sluice.
//!
//! Each pipeline gets one reading a second (the rate is the number of pipelines), a row
//! count then its trigger, each trigger opening a new hourly execution, as in the latency
//! scenario: over ten minutes a pipeline gathers 300 executions, all kept (the retention is
//! longer than the run).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use chrono::{DateTime, TimeDelta, Utc};
use sluice::core::ids::PipelineId;
use sluice::core::lifecycle::{Effect, Input, Settings};
use sluice::core::partitioning::PartitionId;
use sluice::core::records::{decode_config, decode_job, decode_sensor};
use sluice::core::task::{self, ReleaseKeys, Task};
use sluice::runtime::codec::Codec;
use sluice::runtime::outputs::Encoder;
use sluice::runtime::store::{PartitionStore, StateReads};
use sluice::runtime::topics::Topics;
use sluice::sim::driver::Driver;
use sluice::sim::log::Log;

use crate::workload;

/// How long after its trigger a run reports success (the target answers at once).
const RUN_TAKES: TimeDelta = TimeDelta::seconds(2);
/// Simulated time one batch gathers: the processor's fetch wait.
const BATCH_SPAN: TimeDelta = TimeDelta::milliseconds(10);
/// When the simulated clock starts.
const START: &str = "2026-11-02T12:00:00Z";

/// One simulated minute's figures.
#[derive(Default, Clone, Copy)]
struct Minute {
    /// Records handled: readings, job reports and fired timers.
    records: u64,
    /// Time spent in Sluice's code on them, the batch writes included.
    busy: Duration,
    reads: StateReads,
    /// Decisions made again from the whole state (they asked for more than was read).
    redecided: u64,
}

impl Minute {
    fn micros_per_record(&self) -> f64 {
        self.busy.as_secs_f64() * 1e6 / self.records.max(1) as f64
    }
}

/// The loop's part that is Sluice's: the processor's own partition task (one partition, a
/// real RocksDB store) and the batch in hand, written out through the broker-free driver to
/// an in-memory log.
struct Loop {
    driver: Driver<PartitionStore>,
    /// Job reports due, by when (with a tie-breaking sequence).
    reports: BTreeMap<(DateTime<Utc>, u64), (PipelineId, Vec<u8>)>,
    sequence: u64,
}

/// No release keys: the bench's target answers every call.
struct NoKeys;

impl ReleaseKeys for NoKeys {
    fn next_key(&mut self) -> Option<String> {
        None
    }
}

impl Loop {
    /// Fires the timers due by `now` and takes the job reports due by then, in time order.
    fn catch_up(&mut self, now: DateTime<Utc>) -> Result<u64> {
        let mut handled = 0;
        loop {
            let report = self
                .reports
                .first_key_value()
                .map(|((at, _), _)| *at)
                .filter(|at| *at <= now);
            let timer = self.driver.next_due().filter(|at| *at <= now);
            let report_first = match (report, timer) {
                (None, None) => return Ok(handled),
                (Some(r), Some(t)) => r <= t,
                (report, _) => report.is_some(),
            };
            if report_first {
                let ((at, _), (pipeline, bytes)) = self.reports.pop_first().expect("a report due");
                let record = decode_job(Some(pipeline.as_bytes()), Some(&bytes)).context("a job report")?;
                (self.driver).handle(&pipeline, &Input::JobReported(record), "bench/jobs", at)?;
                handled += 1;
            } else {
                handled += self.driver.fire_due(timer.expect("a timer due"))?;
            }
        }
    }

    /// Writes the batch out (its outputs to the log, its writes to RocksDB) as the processor
    /// does, and takes its triggers: each run reports success `RUN_TAKES` later.
    fn write(&mut self, now: DateTime<Utc>) -> Result<()> {
        let flushed = self.driver.write(now)?;
        self.driver.log.trim();
        for (_, effect) in flushed.effects {
            if let Effect::TriggerJob(request) = effect {
                let report = serde_json::json!({
                    "pipelineId": request.pipeline_id, "scheduleId": request.execution.schedule(),
                    "date": request.execution.date_text(), "runId": request.run_id, "status": "succeeded",
                    "timestamp": (now + RUN_TAKES).to_rfc3339(),
                });
                self.sequence += 1;
                let due = (now + RUN_TAKES, self.sequence);
                self.reports
                    .insert(due, (request.pipeline_id, serde_json::to_vec(&report)?));
            }
        }
        Ok(())
    }

    fn state_reads(&self) -> StateReads {
        (self.driver.task.store(PartitionId::new(0)))
            .map(PartitionStore::state_reads)
            .unwrap_or_default()
    }
}

/// Feeds `rate` readings a second for `seconds` simulated seconds; the figures per minute.
fn run(rate: u64, seconds: u64, cache_bytes: usize) -> Result<Vec<Minute>> {
    let pipelines = rate as usize;
    let total = rate * seconds;
    let days = (total / 2).div_ceil(pipelines as u64).div_ceil(24).max(7);
    let settings = Settings {
        retention: TimeDelta::days(days as i64 + 1),
        ..Settings::default()
    };
    let dir = std::env::temp_dir().join(format!("sluice-bench-steady-{}-{rate}", std::process::id()));
    let topics = Topics::new("bench");
    let encoder = Encoder {
        codec: Codec::json(),
        topics: topics.clone(),
        limits: settings.limits,
    };
    let task_settings = task::Settings {
        decider: settings,
        partitions: 1,
        batch_size: usize::MAX,
        forward_misrouted: true,
        changelog: topics.changelog.clone(),
        dlq: topics.dlq.clone(),
        sensors: topics.sensors.clone(),
        exactly_once: false,
    };
    // A fixed start, not the wall clock's: the timers that come due during the run (a
    // deadline at an hour of the day, say) are then the same in every run.
    let start = DateTime::parse_from_rfc3339(START).expect("a valid start").to_utc();
    let task = Task::new(task_settings, Box::new(encoder), Box::new(NoKeys));
    let store = PartitionStore::open(&dir, PartitionId::new(0))?.with_state_cache(cache_bytes);
    let mut l = Loop {
        driver: Driver::open(task, store, Log::new(1), start)?,
        reports: BTreeMap::new(),
        sequence: 0,
    };
    for i in 0..pipelines {
        let id = workload::pipeline_id(i);
        let config = serde_json::to_vec(&workload::config(&id, "http://127.0.0.1:9"))?;
        let record = decode_config(Some(id.as_bytes()), Some(&config)).context("the bench config")?;
        (l.driver).handle(
            &record.pipeline_id().clone(),
            &Input::ConfigPublished(record),
            "bench/config",
            start,
        )?;
    }
    l.write(start)?;
    let dates: Vec<String> = (0..days)
        .map(|d| (start.date_naive() - chrono::Days::new(d)).to_string())
        .collect();
    let mut minutes = vec![Minute::default(); seconds.div_ceil(60) as usize];
    let mut batch_ends = start + BATCH_SPAN;
    let mut reads = l.state_reads();
    let mut redecided = l.driver.task.redecided();
    for n in 0..total {
        let now = start + TimeDelta::microseconds((n as i64 * 1_000_000) / rate as i64);
        let index = ((now - start).num_seconds() / 60) as usize;
        if index > 0 && n % (rate * 60) == 0 {
            let m = &minutes[index - 1];
            eprintln!(
                "[steady] {rate}/s, minute {index}: {:.1} µs per record, {} reads in part, {} whole, {} decided again",
                m.micros_per_record(),
                m.reads.decoded,
                m.reads.whole,
                m.redecided
            );
        }
        let minute = &mut minutes[index];
        // The record as a producer sent it (not Sluice's time).
        let execution = n / 2;
        let id = workload::pipeline_id(execution as usize % pipelines);
        let slot = execution as usize / pipelines;
        let (date, hour) = (&dates[(slot / 24) % dates.len()], (slot % 24) as u32);
        let value = match n % 2 {
            0 => workload::row_count_at(&id, 5000, date, Some(hour), now),
            _ => workload::trigger(&id, date, Some(hour)),
        };
        let bytes = serde_json::to_vec(&value)?;
        let origin = format!("bench/sensors@{n}");

        let started = Instant::now();
        if now >= batch_ends {
            l.write(now)?;
            batch_ends = now + BATCH_SPAN;
        }
        minute.records += l.catch_up(now)?;
        let reading = decode_sensor(Some(id.as_bytes()), Some(&bytes)).context("a reading")?;
        let pipeline = reading.pipeline_id.clone();
        (l.driver).handle(&pipeline, &Input::SensorReceived(reading), &origin, now)?;
        minute.records += 1;
        minute.busy += started.elapsed();
        let now_reads = l.state_reads();
        minute.reads.cached += now_reads.cached - reads.cached;
        minute.reads.decoded += now_reads.decoded - reads.decoded;
        minute.reads.whole += now_reads.whole - reads.whole;
        reads = now_reads;
        minute.redecided += l.driver.task.redecided() - redecided;
        redecided = l.driver.task.redecided();
    }
    l.write(start + TimeDelta::seconds(seconds as i64))?;
    drop(l);
    std::fs::remove_dir_all(&dir)?;
    Ok(minutes)
}

/// The steady scenario's report section.
pub fn report(rates: &[u64], seconds: u64, cache_mb: usize, out: &mut String) -> Result<Duration> {
    let started = Instant::now();
    let _ = writeln!(
        out,
        "\n## Sluice's own time per record at a steady rate (in process, no broker; {seconds} simulated s)\n\n\
         One pipeline per reading a second, each trigger a new hourly execution (300 per pipeline \
         after ten minutes); one partition, a real RocksDB store, the processor's state cache \
         ({cache_mb} MiB, `--state-cache-mb`). \
         µs per record: the time in Sluice's code (decode, state read, decide, encode, batch \
         write, timers, job reports) ÷ records handled that simulated minute. In part: state reads \
         the cache missed, read from the parts a decision needs (the live executions, those of \
         the day the record names, the readings); whole: reads of every part (a decision that \
         asked for more, decided again).\n"
    );
    let _ = writeln!(
        out,
        "| readings/s | minute | records | µs per record | ÷ first minute | reads in part | whole reads | decided again | cached reads |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for &rate in rates {
        let minutes = run(rate, seconds, cache_mb << 20)?;
        let first = minutes.first().map(Minute::micros_per_record).unwrap_or(1.0);
        for (i, m) in minutes.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {rate} | {} | {} | {:.1} | {:.2} | {} | {} | {} | {} |",
                i + 1,
                m.records,
                m.micros_per_record(),
                m.micros_per_record() / first,
                m.reads.decoded,
                m.reads.whole,
                m.redecided,
                m.reads.cached,
            );
        }
        let last = minutes.last().map(Minute::micros_per_record).unwrap_or(1.0);
        let busy: Duration = minutes.iter().map(|m| m.busy).sum();
        let records: u64 = minutes.iter().map(|m| m.records).sum();
        let _ = writeln!(
            out,
            "| {rate} | all | {records} | {:.1} | last ÷ first {:.2} | | | | |",
            busy.as_secs_f64() * 1e6 / records.max(1) as f64,
            last / first
        );
    }
    Ok(started.elapsed())
}
