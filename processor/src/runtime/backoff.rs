//! How long to wait before trying again something that failed for a reason outside Sluice
//! (a broker, a schema registry, a webhook that does not answer): exponentially longer
//! waits up to a cap (backon's schedule), each drawn at random below its bound ("full
//! jitter"), so that instances that failed together do not retry together.
//!
//! Every retry loop of the runtime waits with this; what to retry, and when to give up,
//! stays with each loop, since that differs (a batch waits for as long as an outage lasts;
//! the registry's preparation gives up after its patience).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

pub struct Backoff {
    bounds: ExponentialBackoff,
    cap: Duration,
    rng: fastrand::Rng,
}

impl Backoff {
    /// Waits bounded by `first`, then twice that each time, up to `cap`.
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff::with_rng(first, cap, fastrand::Rng::new())
    }

    /// 200 ms doubling to 10 s: for a broker or a registry that does not answer, while the
    /// work waits for it.
    pub fn outage() -> Backoff {
        Backoff::new(Duration::from_millis(200), Duration::from_secs(10))
    }

    fn with_rng(first: Duration, cap: Duration, rng: fastrand::Rng) -> Backoff {
        let bounds = (ExponentialBuilder::default())
            .with_min_delay(first)
            .with_max_delay(cap)
            .with_factor(2.0)
            .without_max_times()
            .build();
        Backoff { bounds, cap, rng }
    }

    /// The next wait: at random up to the next bound.
    pub fn next_wait(&mut self) -> Duration {
        let bound = self.bounds.next().unwrap_or(self.cap);
        bound.mul_f64(self.rng.f64())
    }

    /// Sleeps the next wait.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_wait()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_drawn_below_bounds_that_double_to_the_cap() {
        let first = Duration::from_millis(200);
        let cap = Duration::from_secs(10);
        let bound = |attempt: u32| (first * 2u32.pow(attempt.min(10))).min(cap);
        for seed in 0..200 {
            let mut backoff = Backoff::with_rng(first, cap, fastrand::Rng::with_seed(seed));
            let waits: Vec<Duration> = (0..12).map(|_| backoff.next_wait()).collect();
            for (attempt, wait) in waits.iter().enumerate() {
                assert!(
                    *wait <= bound(attempt as u32),
                    "seed {seed}: wait {attempt} is {wait:?}"
                );
            }
        }
        // Jittered: over many draws the waits at the cap spread over it, not at one value.
        let mut backoff = Backoff::with_rng(first, cap, fastrand::Rng::with_seed(7));
        let late: Vec<Duration> = (0..400).map(|_| backoff.next_wait()).skip(10).collect();
        let (low, high) = (late.iter().min().unwrap(), late.iter().max().unwrap());
        assert!(*low < cap / 10 && *high > cap * 9 / 10, "{low:?}..{high:?}");
        let mean = late.iter().sum::<Duration>() / late.len() as u32;
        assert!(mean > cap * 4 / 10 && mean < cap * 6 / 10, "mean {mean:?}");
    }
}
