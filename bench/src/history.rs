//! The cost of one decision as a pipeline's history grows, in process (no broker): each
//! stage the loop runs for a reading, timed on a pipeline holding N executions. Under
//! constant load, a stage whose cost grows with N makes latency grow as the history does
//! (issue 23's latency growth); the figures are ratios against N = 1 in the same run.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use sluice::core::ids::PipelineId;
use sluice::core::lifecycle::{decide, Context, Decision, Effect, Input, Needs, PipelineState, Settings, StateChange};
use sluice::core::partitioning::PartitionId;
use sluice::core::records::{decode_config, decode_job, decode_sensor};
use sluice::core::status::summarize;
use sluice::runtime::store::{parts, PartitionStore, StoreBatch};

use crate::workload;

/// One pipeline's state with `executions` hourly executions, each triggered and reported
/// succeeded, built by the decider from the records a team would send.
struct Pipeline {
    id: PipelineId,
    state: PipelineState,
    now: DateTime<Utc>,
    settings: Settings,
}

impl Pipeline {
    fn new(executions: usize) -> Result<Pipeline> {
        let id = workload::pipeline_id(0);
        let settings = Settings {
            // Long enough to keep every execution built.
            retention: TimeDelta::days(executions as i64 / 24 + 30),
            ..Settings::default()
        };
        let mut p = Pipeline {
            state: PipelineState::default(),
            now: Utc::now(),
            settings,
            id: id.into(),
        };
        let config = serde_json::to_vec(&workload::config(&p.id, "http://127.0.0.1:9"))?;
        let record = decode_config(Some(p.id.as_bytes()), Some(&config)).context("the bench config")?;
        let _ = p.apply(&Input::ConfigPublished(record));
        for slot in 0..executions {
            p.execution(slot)?;
        }
        Ok(p)
    }

    /// The readings of execution `slot` (an hour back from today), its trigger's report.
    fn execution(&mut self, slot: usize) -> Result<()> {
        let _ = self.apply(&self.reading(slot, false)?);
        let decision = self.apply(&self.reading(slot, true)?);
        for effect in decision.effects {
            if let Effect::TriggerJob(request) = effect {
                let report = serde_json::json!({
                    "pipelineId": request.pipeline_id, "scheduleId": request.execution.schedule(),
                    "date": request.execution.date_text(), "runId": request.run_id, "status": "succeeded",
                    "timestamp": self.now.to_rfc3339(),
                });
                let bytes = serde_json::to_vec(&report)?;
                let record = decode_job(Some(self.id.as_bytes()), Some(&bytes)).context("a report")?;
                let _ = self.apply(&Input::JobReported(record));
            }
        }
        Ok(())
    }

    fn reading(&self, slot: usize, trigger: bool) -> Result<Input> {
        let day = (self.now - TimeDelta::hours(slot as i64 + 1)).date_naive().to_string();
        let hour = Some(((slot + 1) % 24) as u32);
        let value: Value = match trigger {
            true => workload::trigger(&self.id, &day, hour),
            false => workload::row_count(&self.id, 5000, &day, hour),
        };
        let bytes = serde_json::to_vec(&value)?;
        let reading = decode_sensor(Some(self.id.as_bytes()), Some(&bytes)).context("a reading")?;
        Ok(Input::SensorReceived(reading))
    }

    fn decide(&self, input: &Input) -> Decision {
        let ctx = Context {
            now: self.now,
            origin: "bench",
            settings: self.settings,
        };
        decide(&self.state, &self.id, input, ctx)
    }

    fn apply(&mut self, input: &Input) -> Decision {
        let mut decision = self.decide(input);
        if let StateChange::Put(state) = std::mem::replace(&mut decision.state, StateChange::Unchanged) {
            self.state = *state;
        }
        decision
    }
}

/// Per-stage cost of one reading, µs (median of `rounds`).
struct Costs {
    decode: f64,
    /// Bytes the decoded state holds on the heap (its config included), and the store's
    /// cache's estimate of it.
    held: isize,
    estimate: usize,
    decide: f64,
    diff: f64,
    summary: f64,
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn time(rounds: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..rounds)
            .map(|_| {
                let started = Instant::now();
                f();
                started.elapsed().as_secs_f64() * 1e6
            })
            .collect(),
    )
}

/// The stages a reading costs the loop on a pipeline with `executions` executions: decoding
/// its state from the store (a cache miss), deciding, the writes the decision makes, and
/// the operator page's summary of the state it leaves.
fn costs(executions: usize, rounds: usize) -> Result<Costs> {
    let p = Pipeline::new(executions)?;
    let reading = p.reading(executions, false)?;
    let dir = std::env::temp_dir().join(format!("sluice-bench-history-{}-{executions}", std::process::id()));
    let mut store = PartitionStore::open(&dir, PartitionId::new(0))?;
    let mut batch = StoreBatch::default();
    batch.put_pipeline(&p.id, &p.state, true)?;
    store.write(batch)?;
    // What a decoded state holds, and what the cache thinks it does (a fresh store: no
    // config parsed yet, so its config counts, as the estimate counts it).
    drop(store);
    store = PartitionStore::open(&dir, PartitionId::new(0))?;
    // Read for what the reading needs, as the loop reads it (see `Needs`).
    let needs = Needs::of(&reading, p.now);
    let (state, held) = crate::measure::heap_held_by(|| store.stored(&p.id, &needs));
    let estimate = state?.map_or(0, |s| sluice::runtime::store::estimated_size(&s.state));
    let mut decodes = Vec::new();
    for _ in 0..rounds {
        // Reopened each round (not timed): nothing cached.
        drop(store);
        store = PartitionStore::open(&dir, PartitionId::new(0))?;
        let started = Instant::now();
        std::hint::black_box(store.stored(&p.id, &needs)?);
        decodes.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let decode = median(decodes);
    drop(store);
    std::fs::remove_dir_all(&dir)?;
    let decided = p.decide(&reading);
    let decide_cost = time(rounds, || {
        let _ = std::hint::black_box(p.decide(&reading));
    });
    let after = match &decided.state {
        StateChange::Put(state) => state.as_ref().clone(),
        _ => p.state.clone(),
    };
    let diff = time(rounds, || {
        std::hint::black_box(parts::writes(&p.id, Some(&p.state), &after, false).expect("encodable"));
    });
    let summary = time(rounds, || {
        std::hint::black_box(summarize(&p.id, &after));
    });
    Ok(Costs {
        decode,
        held,
        estimate,
        decide: decide_cost,
        diff,
        summary,
    })
}

/// The history scenario's report section.
pub fn report(sizes: &[usize], rounds: usize, out: &mut String) -> Result<Duration> {
    use std::fmt::Write as _;
    let started = Instant::now();
    let _ = writeln!(
        out,
        "\n## Cost of a reading as the history grows (in process, one pipeline; median of {rounds})\n\n\
         | executions | decide µs | writes µs | decide + writes µs | ÷ first | decode µs | ÷ first | summary µs | decoded KiB | cache's estimate ÷ decoded |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut first = None;
    for &n in sizes {
        let c = costs(n, rounds)?;
        let hot = c.decide + c.diff;
        let (hot_base, decode_base) = *first.get_or_insert((hot, c.decode));
        let _ = writeln!(
            out,
            "| {n} | {:.1} | {:.1} | {hot:.1} | {:.2} | {:.1} | {:.2} | {:.1} | {:.1} | {:.2} |",
            c.decide,
            c.diff,
            hot / hot_base,
            c.decode,
            c.decode / decode_base,
            c.summary,
            c.held as f64 / 1024.0,
            c.estimate as f64 / c.held.max(1) as f64,
        );
    }
    let _ = writeln!(
        out,
        "\ndecide: the decider on the next reading; writes: the parts that decision writes (decide + \
         writes is what every reading costs the loop); decode: the state read from its parts in \
         RocksDB, only on a miss of the store's cache of decoded states; summary: the operator \
         page's summary of the state, made when a list asks for a pipeline changed since; \
         decoded KiB: the heap a state read from the store holds (bytes asked of the allocator, \
         its parsed config included), which the store's cache of decoded states estimates to \
         keep to its budget."
    );
    Ok(started.elapsed())
}
