//! A long run of Sluice's deterministic simulator of the partition task (`sluice::sim::world`): as many seeds as fit in
//! the time given, on every core, with a line of progress a minute. Each seed that breaks an
//! invariant is listed with how to replay it exactly; the exit code is 1 if there is one.
//!
//! ```sh
//! cargo run --release -p sluice-bench --bin sim-soak -- --minutes 60
//! ```
//!
//! The first seed defaults to one derived from today's date, so that each day's soak covers
//! new seeds and any of them can be run again (`--from-seed`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use sluice::sim::{run, Breach, Historic, Outcomes};

#[derive(Parser)]
#[command(about = "Runs Sluice's deterministic simulator over many seeds for a while")]
struct Args {
    /// How long to run, in minutes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// The first seed (then upwards); default: one derived from today's date.
    #[arg(long)]
    from_seed: Option<u64>,
    /// Threads running seeds; default: one per core.
    #[arg(long)]
    threads: Option<usize>,
    /// Also write the results (Markdown) here.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
}

/// What the threads found, merged.
#[derive(Default)]
struct Found {
    totals: Outcomes,
    seeds: u64,
    broken: Vec<(u64, Vec<Breach>)>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let first = args.from_seed.unwrap_or_else(todays_seed);
    let threads = (args.threads)
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    let until = Duration::from_secs_f64(args.minutes.max(0.0) * 60.0);
    let started = Instant::now();
    let next = AtomicU64::new(first);
    let found = Mutex::new(Found::default());
    eprintln!(
        "sim-soak: seeds from {first} upwards on {threads} threads for {} minutes",
        args.minutes
    );
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while started.elapsed() < until {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    let outcome = run(seed, Historic::default());
                    let mut found = found.lock().expect("no thread panics holding it");
                    found.totals.add(&outcome);
                    found.seeds += 1;
                    if !outcome.breaches.is_empty() {
                        eprintln!("sim-soak: seed {seed} broke an invariant: {:?}", outcome.breaches);
                        found.broken.push((seed, outcome.breaches));
                    }
                }
            });
        }
        let mut minute = 1;
        while started.elapsed() < until {
            std::thread::sleep(Duration::from_millis(200));
            if started.elapsed() >= Duration::from_secs(60 * minute) {
                let found = found.lock().expect("no thread panics holding it");
                eprintln!(
                    "sim-soak: minute {minute}: {} seeds, {} broken",
                    found.seeds,
                    found.broken.len()
                );
                minute += 1;
            }
        }
    });
    let found = found.into_inner().expect("no thread panicked holding it");
    let report = markdown(&found, first, threads, started.elapsed());
    print!("{report}");
    if let Some(path) = &args.output {
        std::fs::write(path, &report).with_context(|| format!("writing {}", path.display()))?;
    }
    if !found.broken.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

/// Days since 1970 times a million: each day's seeds are new, and a day's never overlap the
/// next day's unless a soak runs more than a million seeds.
fn todays_seed() -> u64 {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    days * 1_000_000
}

fn markdown(found: &Found, first: u64, threads: usize, took: Duration) -> String {
    let mut out = String::from("## Simulator soak\n\n");
    let last = first + found.seeds.saturating_sub(1);
    out += &format!(
        "{} seeds ({first}–{last}) in {:.1} minutes on {threads} threads: {} ({:.0} seeds/s).\n\n",
        found.seeds,
        took.as_secs_f64() / 60.0,
        found.totals.summary(),
        found.seeds as f64 / took.as_secs_f64().max(0.001),
    );
    if found.broken.is_empty() {
        out += "No invariant broken.\n";
    } else {
        out += &format!("**{} seeds broke an invariant.** Replay one with `SLUICE_SIM_SEED=<seed> cargo test -p sluice --lib sim::world::tests::trace -- --nocapture` prints it step by step:\n\n", found.broken.len());
        let mut broken = found.broken.clone();
        broken.sort_by_key(|(seed, _)| *seed);
        for (seed, breaches) in broken.iter().take(20) {
            out += &format!("- seed {seed}: {breaches:?}\n");
        }
    }
    out
}
