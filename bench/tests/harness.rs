//! The harness itself works: `sluice-bench --quick` against the test broker produces every
//! section of the report with figures in it. (The figures of a quick run mean nothing.)

use std::process::Command;

#[test]
fn a_quick_run_reports_every_scenario() {
    let brokers = std::env::var("SLUICE_TEST_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let bench = std::path::Path::new(env!("CARGO_BIN_EXE_sluice-bench"));
    // `cargo test --workspace` builds the sluice binary into the same directory.
    let sluice = bench.with_file_name("sluice");
    let out = tempfile_path();
    let run = Command::new(bench)
        .args(["--quick", "--brokers", &brokers, "--sluice"])
        .arg(&sluice)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report = std::fs::read_to_string(&out).unwrap();
    assert_eq!(report, stdout);
    for section in [
        "## Sluice's own time per record at a steady rate",
        "## Throughput",
        "## Latency",
        "## Timer precision",
        "## Job triggers",
        "## Partition takeover",
        "## Operator page",
        "## Scale",
    ] {
        assert!(report.contains(section), "{report}");
    }
    assert!(
        cell(&report, "| sluice, effectively-once", 3) > 0.0,
        "a throughput ratio"
    );
    assert!(
        report.contains("(100 of 100 executions)"),
        "every execution measured: {report}"
    );
    assert!(report.contains("p99 ms per second of sending:"), "{report}");
    for series in [
        "* pass-through: ",
        "* pass-through writing as much as sluice: ",
        "* sluice: ",
    ] {
        assert!(report.contains(series), "{series} in {report}");
    }
    assert!(report.contains("Records sluice wrote per reading sent: "), "{report}");
    // Sluice's own time per record, from its metrics, in every window of the latency run.
    let own = report
        .lines()
        .find_map(|l| l.strip_prefix("Sluice's own µs per input record per second"))
        .and_then(|l| l.split_once("): "))
        .map(|(_, figures)| figures.split(" (last").next().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("Sluice's own time per record in {report}"));
    assert!(
        own.split(", ").all(|us| us.parse::<f64>().is_ok_and(|us| us > 0.0)),
        "{own}"
    );
    assert!(
        report.contains("over 20 of 20 breaches"),
        "every SLA breach measured: {report}"
    );
    assert!(report.contains("(100 calls,"), "every job triggered once: {report}");
    // The fair ceilings: a Kafka → HTTP pass-through for the triggers, and a pass-through
    // writing at least as many records per input as sluice did for the throughput.
    assert!(
        cell(&report, "| Kafka → HTTP pass-through", 2) > 0.0,
        "a Kafka → HTTP ceiling"
    );
    let per_input = report
        .lines()
        .find_map(|l| l.strip_prefix("| pass-through consumer→producer writing "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("the throughput ceiling's records per input in {report}"));
    assert!(per_input >= 1.0, "at least a copy of each input: {report}");
    // deploy/test.sh installs the Quix Streams baseline and names its Python.
    if std::env::var_os("SLUICE_BENCH_PYTHON").is_some() {
        assert!(report.contains("| Quix Streams"), "{report}");
    }
    let _ = std::fs::remove_file(out);
}

/// The number in column `n` (split at `|`) of the report's table row starting `row`.
fn cell(report: &str, row: &str, n: usize) -> f64 {
    report
        .lines()
        .find(|l| l.starts_with(row))
        .and_then(|l| l.split('|').nth(n))
        .and_then(|r| r.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("a figure in column {n} of {row:?} in {report}"))
}

fn tempfile_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sluice-bench-{}.md", std::process::id()))
}
