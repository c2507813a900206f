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
    (0..2_000).find_map(|seed| {
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
        totals.add(&report);
        if !report.violations.is_empty() {
            failed.push((*seed, report.violations));
        }
    }
    eprintln!("[sim] {} seeds, {}", seeds.len(), totals.summary());
    assert!(
        failed.is_empty(),
        "{} seeds broke an invariant (replay one with SLUICE_SIM_SEED=<seed>): {:#?}",
        failed.len(),
        failed.iter().take(3).collect::<Vec<_>>()
    );
    // The faults that matter happened, often enough to mean something.
    for fault in [
        "crash",
        "pause",
        "rebalance",
        "compaction",
        "redelivery",
        "clock jump",
        "lost acknowledgement",
        "report twice",
    ] {
        assert!(
            totals.faults.get(fault).copied().unwrap_or(0) >= seeds.len() as u64 / 10,
            "{fault}: {:?}",
            totals.faults
        );
    }
    // And every way of giving a partition up (`core::ownership`, the batch's fence check).
    for why in [
        ZOMBIE_TOLD,
        ZOMBIE_OPENING,
        ZOMBIE_WATCHING,
        ZOMBIE_BATCH,
        LEFT_WHILE_OPENING,
    ] {
        assert!(
            totals.given_up.get(why).copied().unwrap_or(0) > 0,
            "{why}: {:?}",
            totals.given_up
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

/// The violations of the first seed on which the fault `put_back` sets breaks an invariant;
/// fails when none does within the budget, or when that seed breaks one without the fault too.
fn assert_caught(name: &str, put_back: impl FnOnce(&mut Historic)) -> Vec<Violation> {
    let mut historic = Historic::default();
    put_back(&mut historic);
    let (seed, violations) = caught(historic).unwrap_or_else(|| panic!("{name} went unnoticed"));
    eprintln!("[sim] {name}: caught on seed {seed}: {violations:?}");
    assert_eq!(
        run(seed, Historic::default()).violations,
        vec![],
        "seed {seed} without {name}"
    );
    violations
}

#[test]
fn the_rebalance_re_request_is_caught() {
    let violations = assert_caught("the rebalance re-request", |h| h.rerequest_at_once = true);
    assert!(violations.iter().any(|v| matches!(v, Violation::CalledTwice { .. })));
}

#[test]
fn the_unfenced_changelog_writer_is_caught() {
    assert_caught("the unfenced changelog writer", |h| h.unfenced = true);
}

#[test]
fn the_stale_watermark_is_caught() {
    let violations = assert_caught("the stale watermark", |h| h.stale_watermark = true);
    assert!(violations.iter().any(|v| matches!(v, Violation::State { .. })));
}

/// Found by this simulator: a write that does not count could compact away the value it
/// shadows before anyone repaired it. The changelog now keeps records for
/// `min.compaction.lag.ms`, and owners repair at once.
#[test]
fn the_compaction_of_a_shadowed_value_is_caught() {
    assert_caught("compaction without a lag", |h| h.compaction_without_lag = true);
}

/// Found by this simulator once its runs ended in a quiet spell instead of two records more:
/// an owner that writes nothing never saw a zombie's write after its last batch, and once the
/// compaction lag passed, compaction kept that write as its key's last. Owners now watch
/// their changelog while idle (`Writer::watched`).
#[test]
fn an_idle_owner_that_never_watches_its_changelog_is_caught() {
    let violations = assert_caught("the unwatched idle owner", |h| h.unwatched_idle_owner = true);
    assert!(
        violations
            .iter()
            .any(|v| matches!(v, Violation::Restore { .. } | Violation::State { .. })),
        "{violations:?}"
    );
}

/// Found by this simulator (one seed in 20,000 before inputs arrived through the faults):
/// an owner restored its state from scratch and wrote its repairs, but a newer owner had
/// fenced it meanwhile; that owner found them between its fence and its acceptance, and lost
/// the partition before writing them again. Reopening, it restored from its checkpoint (past
/// those records) and forgot them; compaction later kept the zombie's writes. Keys to repair
/// are now kept with the checkpoint.
#[test]
fn repairs_found_before_a_reopening_are_not_forgotten() {
    assert_caught("forgotten repairs", |h| h.repairs_forgotten_on_reopening = true);
}
