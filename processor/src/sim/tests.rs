//! The simulator over many seeds (`SLUICE_SIM_SEEDS`, default 300; one seed alone with
//! `SLUICE_SIM_SEED`), and the historic faults it must catch within that budget.

use super::*;

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("SLUICE_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let n = (std::env::var("SLUICE_SIM_SEEDS").ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    (0..n).collect()
}

/// The first seed (of those run) on which `historic` breaks an invariant.
fn caught(historic: Historic) -> Option<(u64, Vec<Violation>)> {
    (0..300).find_map(|seed| {
        let report = run(seed, historic);
        (!report.violations.is_empty()).then_some((seed, report.violations))
    })
}

#[test]
fn every_seed_keeps_the_invariants() {
    let mut totals = Report::default();
    let mut failed = Vec::new();
    let seeds = seeds();
    for seed in &seeds {
        let report = run(*seed, Historic::default());
        totals.steps += report.steps;
        totals.calls += report.calls;
        totals.repeated_after_a_cut += report.repeated_after_a_cut;
        totals.takeovers += report.takeovers;
        for (fault, n) in report.faults {
            *totals.faults.entry(fault).or_default() += n;
        }
        if !report.violations.is_empty() {
            failed.push((*seed, report.violations));
        }
    }
    eprintln!(
        "[sim] {} seeds, {} steps, {} take-overs, {} calls ({} repeated after a cut), faults {:?}",
        seeds.len(),
        totals.steps,
        totals.takeovers,
        totals.calls,
        totals.repeated_after_a_cut,
        totals.faults
    );
    assert!(
        failed.is_empty(),
        "{} seeds broke an invariant (replay one with SLUICE_SIM_SEED=<seed>): {:#?}",
        failed.len(),
        failed.iter().take(3).collect::<Vec<_>>()
    );
    // The faults that matter happened, often enough to mean something.
    for fault in ["crash", "pause", "rebalance", "compaction", "redelivery", "clock jump"] {
        assert!(
            totals.faults.get(fault).copied().unwrap_or(0) >= seeds.len() as u64 / 10,
            "{fault}: {:?}",
            totals.faults
        );
    }
}

/// `SLUICE_SIM_SEED=<seed> cargo test -p sluice --lib sim::tests::trace -- --nocapture`
/// prints what the seed did, step by step.
#[test]
fn trace() {
    if let Some(seed) = std::env::var("SLUICE_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        let report = run_traced(seed, Historic::default());
        for line in &report.trace {
            eprintln!("{line}");
        }
        eprintln!("{:?}", report.violations);
    }
}

#[test]
fn a_seed_replays_exactly() {
    assert_eq!(run(7, Historic::default()), run(7, Historic::default()));
    assert_ne!(run(7, Historic::default()).faults, run(8, Historic::default()).faults);
}

/// The violations of the first seed on which `historic` breaks an invariant; fails when none
/// does within the budget.
fn assert_caught(historic: Historic, name: &str) -> Vec<Violation> {
    let (seed, violations) = caught(historic).unwrap_or_else(|| panic!("{name} went unnoticed"));
    eprintln!("[sim] {name}: caught on seed {seed}: {violations:?}");
    violations
}

#[test]
fn the_rebalance_re_request_is_caught() {
    let historic = Historic {
        rerequest_at_once: true,
        ..Historic::default()
    };
    let violations = assert_caught(historic, "the rebalance re-request");
    assert!(violations.iter().any(|v| matches!(v, Violation::CalledTwice { .. })));
}

#[test]
fn the_unfenced_changelog_writer_is_caught() {
    let historic = Historic {
        unfenced: true,
        ..Historic::default()
    };
    assert_caught(historic, "the unfenced changelog writer");
}

#[test]
fn the_stale_watermark_is_caught() {
    let historic = Historic {
        stale_watermark: true,
        ..Historic::default()
    };
    let violations = assert_caught(historic, "the stale watermark");
    assert!(violations.iter().any(|v| matches!(v, Violation::State { .. })));
}

/// Found by this simulator: a write that does not count could compact away the value it
/// shadows before anyone repaired it. The changelog now keeps records for
/// `min.compaction.lag.ms`, and owners repair at once.
#[test]
fn the_compaction_of_a_shadowed_value_is_caught_and_its_seeds_pass_now() {
    let historic = Historic {
        compaction_without_lag: true,
        ..Historic::default()
    };
    assert_caught(historic, "compaction without a lag");
    for seed in [19, 28] {
        assert_eq!(run(seed, Historic::default()).violations, vec![], "seed {seed}");
    }
}
