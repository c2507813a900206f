//! Stopping: the signals that ask for it, and how a batch under way is let finish within
//! the grace.

use std::time::Duration;

use anyhow::Result;
use tracing::{info, warn};

/// Whether the loop goes on after a batch, or stops (a shutdown came while it ran).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Finished {
    Running,
    Stopping,
}

/// Runs one batch, `work`. A shutdown meanwhile lets it finish within `grace`: its events
/// may already be out (outputs are acknowledged before the store is written), and a clean
/// stop leaves the store current with them rather than for a restore to mend. Past the
/// grace (a broker gone) the batch is left unfinished: a crash, which the applied-offset
/// watermark and the changelog already cover.
pub(super) async fn finish(
    work: impl std::future::Future<Output = Result<()>>,
    shutdown: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    grace: Duration,
    what: &str,
) -> Result<Finished> {
    tokio::pin!(work);
    tokio::select! {
        biased;
        done = &mut work => return done.map(|()| Finished::Running),
        () = shutdown => {}
    }
    match tokio::time::timeout(grace, work).await {
        Ok(done) => done.map(|()| Finished::Stopping),
        Err(_) => {
            warn!("stopping with {what} unfinished after the {grace:?} grace; it is redone on restart");
            Ok(Finished::Stopping)
        }
    }
}

/// Waits for SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT received"),
        _ = term.recv() => info!("SIGTERM received"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A batch that takes `takes` and says when it is done.
    async fn batch(takes: Duration, done: &AtomicBool) -> Result<()> {
        tokio::time::sleep(takes).await;
        done.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn run(takes: Duration, shutdown_after: Option<Duration>) -> (Finished, bool) {
        let done = AtomicBool::new(false);
        let shutdown = async {
            match shutdown_after {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(shutdown);
        let grace = Duration::from_secs(30);
        let finished = finish(batch(takes, &done), shutdown.as_mut(), grace, "a batch")
            .await
            .unwrap();
        (finished, done.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_without_a_shutdown_runs_on() {
        assert_eq!(run(Duration::from_secs(2), None).await, (Finished::Running, true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_lets_the_batch_under_way_finish_within_the_grace() {
        // Stopping mid-batch used to drop it after its events were out and before its state
        // was written: the store of a cleanly stopped instance missed what it had published.
        let started = tokio::time::Instant::now();
        let got = run(Duration::from_secs(5), Some(Duration::from_secs(1))).await;
        assert_eq!(got, (Finished::Stopping, true));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_stuck_past_the_grace_is_left_unfinished() {
        let started = tokio::time::Instant::now();
        let got = run(Duration::from_secs(3600), Some(Duration::from_secs(1))).await;
        assert_eq!(got, (Finished::Stopping, false));
        assert_eq!(started.elapsed(), Duration::from_secs(31));
    }
}
