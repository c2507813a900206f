//! Logs and telemetry of a real processor: JSON log lines carry the pipeline (and run) in
//! their span fields, and spans and metrics go over OTLP/HTTP to a loopback receiver.

use std::time::Duration;

use serde_json::{json, Value};
use sluice::core::events::EventType;

use crate::support::{pipeline, scripted_server, wait_until, World};

#[test]
fn json_logs_carry_the_pipeline_and_otlp_receives_spans_and_metrics() {
    let otlp = scripted_server();
    // An empty 200 is a valid OTLP/HTTP answer (no partial success to report).
    otlp.script("/v1/traces", &[(200, "")]);
    otlp.script("/v1/metrics", &[(200, "")]);
    let mut w = World::new("telemetry");
    w.env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), otlp.base.clone()),
        ("OTEL_METRIC_EXPORT_INTERVAL".into(), "500".into()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
        ("OTEL_SERVICE_NAME".into(), "orders-sluice".into()),
    ];
    let job = json!({"type": "command", "config": {"command": "true", "timeout": 30}});
    w.config(&pipeline("otel-a", job));
    let child = w.spawn(w.state.path(), &["--log-format", "json", "--instance", "otel"]);
    w.swap_processor(Some(child));
    w.wait_for("otel-a", "CONFIG_ACCEPTED", |es| {
        es.iter().any(|e| e.kind == EventType::CONFIG_ACCEPTED)
    });

    // Every line is a JSON object; the event's line names its pipeline in the span.
    let lines: Vec<Value> = w
        .log()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let accepted = lines
        .iter()
        .find(|l| l["event"] == "CONFIG_ACCEPTED")
        .unwrap_or_else(|| panic!("no CONFIG_ACCEPTED line in {lines:?}"));
    assert_eq!(accepted["span"]["name"], "pipeline", "{accepted}");
    assert_eq!(accepted["span"]["pipeline"], "otel-a", "{accepted}");
    assert_eq!(accepted["level"], "INFO");

    // The exporters post protobuf: the span names its pipeline, the metrics keep their names,
    // and both name the service as OTEL_SERVICE_NAME says.
    let posted = |path: &str, needles: &[&str]| {
        otlp.requests_to(&format!("POST {path}"))
            .iter()
            .any(|r| r.contains("application/x-protobuf") && needles.iter().all(|n| r.contains(n)))
    };
    wait_until(
        "spans and metrics at the OTLP receiver",
        Duration::from_secs(30),
        || {
            let all = otlp.requests.lock().unwrap();
            let paths: Vec<&str> = all.iter().filter_map(|r| r.lines().next()).collect();
            format!("requests so far: {paths:?}\n{}", w.log_tail())
        },
        || {
            posted("/v1/traces", &["pipeline", "otel-a", "orders-sluice"])
                && posted(
                    "/v1/metrics",
                    &[
                        "orders-sluice",
                        "sluice_records_in",
                        "sluice_batch_seconds",
                        "sluice_timers_pending",
                    ],
                )
        },
    );
    assert_eq!(w.stop().code(), Some(0), "{}", w.log_tail());
}
