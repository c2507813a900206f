//! The job target: a loopback HTTP server that answers every trigger at once, counting the
//! calls and noting when the first and the latest arrived.

use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Default)]
struct Hits {
    count: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

pub struct Target {
    pub url: String,
    hits: Arc<Mutex<Hits>>,
}

impl Target {
    pub fn count(&self) -> u64 {
        self.hits.lock().expect("not poisoned").count
    }

    /// Calls per second from the first call to the latest, and the number of calls.
    pub fn rate(&self) -> (f64, u64) {
        let hits = self.hits.lock().expect("not poisoned");
        match (hits.first, hits.last) {
            (Some(first), Some(last)) if last > first => (
                hits.count.saturating_sub(1) as f64 / (last - first).as_secs_f64(),
                hits.count,
            ),
            _ => (0.0, hits.count),
        }
    }

    /// Forgets the calls so far.
    pub fn reset(&self) {
        *self.hits.lock().expect("not poisoned") = Hits::default();
    }
}

/// Starts the server on its own thread and runtime.
pub fn start() -> Target {
    let hits = Arc::new(Mutex::new(Hits::default()));
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
                let now = Instant::now();
                let mut hits = counter.lock().expect("not poisoned");
                hits.count += 1;
                hits.first.get_or_insert(now);
                hits.last = Some(now);
                async { "ok" }
            });
            let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
            axum::serve(listener, app).await.expect("the target serves");
        });
    });
    Target { url, hits }
}
