//! The job target: a loopback HTTP server that answers every trigger at once and counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub struct Target {
    pub url: String,
    hits: Arc<AtomicU64>,
}

impl Target {
    pub fn count(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

/// Starts the server on its own thread and runtime.
pub fn start() -> Target {
    let hits = Arc::new(AtomicU64::new(0));
    let counter = hits.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    listener.set_nonblocking(true).expect("non-blocking");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let app = axum::Router::new().fallback(move || {
                counter.fetch_add(1, Ordering::Relaxed);
                async { "ok" }
            });
            let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
            axum::serve(listener, app).await.expect("the target serves");
        });
    });
    Target { url, hits }
}
