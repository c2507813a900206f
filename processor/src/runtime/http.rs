//! Operational HTTP endpoints beside the processor: `/healthz` (liveness), `/readyz`
//! (readiness) and `/metrics` (Prometheus, OpenMetrics text).
//!
//! The processor never talks to this server; it updates a shared [`Telemetry`]
//! ([`super::telemetry`]) and the server only reads it.

use std::future::Future;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;

use super::telemetry::{Telemetry, METRICS_CONTENT_TYPE};

/// The probes, open to every caller (orchestrators have no token).
pub fn probes(telemetry: Arc<Telemetry>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(telemetry)
}

/// `/metrics`, which `sluice run` serves behind the API's access rule, beside the pipeline
/// API ([`super::api::routes`]).
pub fn metrics_route(telemetry: Arc<Telemetry>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(telemetry)
}

/// Serves `app` on `listener` until `shutdown` completes, then finishes the requests in flight
/// and returns. The caller binds the listener, so a bad address fails at startup and tests can
/// bind port 0.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving the operational endpoints")
}

async fn healthz(State(telemetry): State<Arc<Telemetry>>) -> Response {
    probe(telemetry.liveness(), "unhealthy")
}

async fn readyz(State(telemetry): State<Arc<Telemetry>>) -> Response {
    probe(telemetry.readiness(), "not ready")
}

/// 200 `{"status":"ok"}`, or 503 with the status and the reason, as JSON.
pub(crate) fn probe(result: Result<(), String>, failed: &str) -> Response {
    let (status, body) = match result {
        Ok(()) => (StatusCode::OK, json!({"status": "ok"})),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": failed, "reason": reason}),
        ),
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn metrics(State(telemetry): State<Arc<Telemetry>>) -> Response {
    match telemetry.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::partitioning::PartitionId;
    use serde_json::Value;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    /// A server on a real loopback port; it accepts as soon as the listener is bound.
    struct Server {
        telemetry: Arc<Telemetry>,
        base: String,
        client: reqwest::Client,
        stop: oneshot::Sender<()>,
        task: JoinHandle<Result<()>>,
    }

    async fn start() -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let telemetry = Telemetry::new();
        let (stop, stopped) = oneshot::channel::<()>();
        let app = probes(telemetry.clone()).merge(metrics_route(telemetry.clone()));
        let task = tokio::spawn(serve(listener, app, async {
            let _ = stopped.await;
        }));
        // No proxy: an http_proxy in the environment must not intercept loopback requests.
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        Server {
            telemetry,
            base,
            client,
            stop,
            task,
        }
    }

    impl Server {
        async fn get(&self, path: &str) -> (u16, Option<String>, String) {
            let response = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_owned());
            (status, content_type, response.text().await.unwrap())
        }

        async fn get_json(&self, path: &str) -> (u16, Value) {
            let (status, content_type, body) = self.get(path).await;
            assert_eq!(content_type.as_deref(), Some("application/json"));
            (status, serde_json::from_str(&body).unwrap())
        }

        async fn stop(self) {
            self.stop.send(()).unwrap();
            self.task.await.unwrap().unwrap();
        }
    }

    /// The sample line for `name` (with its labels), e.g. `sluice_dead_letters_total`.
    fn sample<'a>(exposition: &'a str, series: &str) -> Option<&'a str> {
        exposition
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
    }

    #[tokio::test]
    async fn healthz_fails_on_fatal_never_on_the_broker() {
        let server = start().await;
        assert_eq!(server.get_json("/healthz").await, (200, json!({"status": "ok"})));

        // A broker incident is readiness's business: restarting pods would not end it.
        server.telemetry.broker_down();
        assert_eq!(server.get_json("/healthz").await.0, 200);
        server.telemetry.broker_ok_since(server.telemetry.broker_mark());

        server.telemetry.set_fatal("state store corrupt");
        server.telemetry.set_fatal("a later reason");
        assert_eq!(
            server.get_json("/healthz").await,
            (503, json!({"status": "unhealthy", "reason": "state store corrupt"}))
        );
        // Fatal is forever: a healthy broker does not bring it back.
        server.telemetry.broker_ok_since(server.telemetry.broker_mark());
        assert_eq!(server.get_json("/healthz").await.0, 503);
        server.stop().await;
    }

    #[tokio::test]
    async fn readyz_needs_restored_state_and_health() {
        let server = start().await;
        let gauge = |server: &Server| server.telemetry.encode_text().lines().any(|l| l == "sluice_ready 1");
        assert_eq!(
            server.get_json("/readyz").await,
            (503, json!({"status": "not ready", "reason": "restoring state"}))
        );
        assert!(!gauge(&server));

        server.telemetry.set_ready(true);
        assert_eq!(server.get_json("/readyz").await, (200, json!({"status": "ok"})));
        assert!(gauge(&server), "sluice_ready follows /readyz");

        server.telemetry.broker_down();
        assert_eq!(
            server.get_json("/readyz").await,
            (503, json!({"status": "not ready", "reason": "broker unreachable"}))
        );
        assert!(!gauge(&server));

        server.telemetry.broker_ok_since(server.telemetry.broker_mark());
        assert!(gauge(&server));
        server.telemetry.set_fatal("changelog topic missing");
        assert_eq!(
            server.get_json("/readyz").await,
            (503, json!({"status": "not ready", "reason": "changelog topic missing"}))
        );
        assert!(!gauge(&server));
        server.stop().await;
    }

    #[tokio::test]
    async fn metrics_expose_recorded_values() {
        let server = start().await;
        let t = &server.telemetry;
        let p = PartitionId::new;
        t.records_in("sluice.sensors", 1);
        t.records_in("sluice.sensors", 1);
        t.records_in("sluice.jobs", 1);
        t.record_out("sluice.events", 5);
        t.record_out("sluice.events", 2);
        t.dead_letter("sluice.sensors", "unreadable");
        t.event("JOB_TRIGGERED");
        t.timer_late(0.012);
        t.rebalanced("assigned");
        t.state_size(p(7), 4096);
        t.state_size(p(8), 1024);
        t.partition_revoked(p(8), &["sluice.sensors"]);
        t.batch_latency(0.003);
        t.commit_latency(0.02);
        t.consumer_lag("sluice.sensors", p(2), 130);
        t.consumer_lag("sluice.sensors", p(2), 120);
        t.timers_pending(42);
        for _ in 0..4 {
            t.effect_started();
        }
        t.effect_finished();
        t.effect_outcome("http", "succeeded", 0.2);
        t.effect_outcome("http", "succeeded", 0.3);
        t.restore_progress(p(7), 1500, 20, 2.5);
        t.partitions_owned(4);

        let (status, content_type, body) = server.get("/metrics").await;
        assert_eq!(status, 200);
        assert_eq!(content_type.as_deref(), Some(METRICS_CONTENT_TYPE));
        let expect = [
            (r#"sluice_records_in_total{topic="sluice.sensors"}"#, "2"),
            (r#"sluice_records_in_total{topic="sluice.jobs"}"#, "1"),
            (r#"sluice_records_out_total{topic="sluice.events"}"#, "7"),
            (
                r#"sluice_dead_letters_total{topic="sluice.sensors",reason="unreadable"}"#,
                "1",
            ),
            (r#"sluice_events_total{type="JOB_TRIGGERED"}"#, "1"),
            (r#"sluice_timer_lateness_seconds_bucket{le="0.016"}"#, "1"),
            (r#"sluice_rebalances_total{kind="assigned"}"#, "1"),
            (r#"sluice_state_bytes{partition="7"}"#, "4096"),
            (r#"sluice_trigger_seconds_count{job_type="http"}"#, "2"),
            (r#"sluice_restore_records_remaining{partition="7"}"#, "20"),
            ("sluice_broker_reachable", "1"),
            ("sluice_ready", "0"),
            (r#"sluice_build_info{version="0.1.0"}"#, "1"),
            ("sluice_batch_seconds_count", "1"),
            (r#"sluice_batch_seconds_bucket{le="0.004"}"#, "1"),
            (r#"sluice_batch_seconds_bucket{le="0.002"}"#, "0"),
            (r#"sluice_commit_seconds_bucket{le="0.032"}"#, "1"),
            (r#"sluice_commit_seconds_bucket{le="0.016"}"#, "0"),
            (r#"sluice_consumer_lag{topic="sluice.sensors",partition="2"}"#, "120"),
            ("sluice_timers_pending", "42"),
            ("sluice_effects_in_flight", "3"),
            (r#"sluice_effects_total{job_type="http",outcome="succeeded"}"#, "2"),
            (r#"sluice_restore_records{partition="7"}"#, "1500"),
            (r#"sluice_restore_seconds{partition="7"}"#, "2.5"),
            ("sluice_partitions_owned", "4"),
        ];
        for (series, value) in expect {
            assert_eq!(sample(&body, series), Some(value), "{series} in:\n{body}");
        }
        assert!(body.ends_with("# EOF\n"), "{body}");
        assert!(
            !body.contains(r#"partition="8""#),
            "a revoked partition's series are gone: {body}"
        );
        let rss: f64 = sample(&body, "process_resident_memory_bytes").unwrap().parse().unwrap();
        assert!(rss > 1e6, "the process's resident memory: {rss}");
        assert!(sample(&body, "process_cpu_seconds_total").is_some(), "{body}");

        // A counter moved after a scrape shows its new value on the next one.
        t.dead_letter("sluice.sensors", "unreadable");
        let (_, _, body) = server.get("/metrics").await;
        let dead = r#"sluice_dead_letters_total{topic="sluice.sensors",reason="unreadable"}"#;
        assert_eq!(sample(&body, dead), Some("2"));
        server.stop().await;
    }

    #[tokio::test]
    async fn unknown_paths_and_methods_are_rejected() {
        let server = start().await;
        assert_eq!(server.get("/nope").await.0, 404);
        let response = server
            .client
            .post(format!("{}/healthz", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 405);
        server.stop().await;
    }

    #[tokio::test]
    async fn serve_returns_after_shutdown() {
        let server = start().await;
        assert_eq!(server.get("/healthz").await.0, 200);
        // Returns Ok even with the client's keep-alive connection still open.
        server.stop().await;
    }
}
