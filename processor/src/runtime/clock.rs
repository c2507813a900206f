//! The runtime's time. The core never reads a clock: the processor asks this one for the
//! decider's `now`, sleeps on it until the next timer is due, and stamps job reports with it.
//!
//! It is the system clock, shifted by `--clock-offset` when one is given: the processor then
//! lives that far ahead of the wall clock, so a test (or a rehearsal of tomorrow's schedule)
//! reaches an SLA deadline or a cron time in seconds instead of waiting for it. Timers are
//! durable at their due time on this clock; every instance of a group must use the same
//! offset.
//!
//! Runtime code asks a [`Clock`] for the time, never the machine (so a test or the
//! simulator can give it a [`Manual`] one). The one exception is an AWS request signature,
//! whose time AWS checks against its own: that is the machine's.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// Where the runtime's time comes from, as restate's and Kafka Streams' `Time`: the system
/// clock in production, one moved by hand in tests and the simulator. Runtime code asks a
/// [`Clock`] for the time; none reads the machine's clock itself.
pub trait Time: Debug + Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock plus a fixed offset.
#[derive(Debug)]
struct System {
    offset: TimeDelta,
}

impl Time for System {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
    }
}

/// A clock that moves only when told to: for tests and the simulator.
#[derive(Debug)]
pub struct Manual {
    now: Mutex<DateTime<Utc>>,
}

impl Manual {
    pub fn set(&self, at: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    pub fn advance(&self, by: TimeDelta) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) += by;
    }
}

impl Time for Manual {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The runtime's clock: cheap to clone, every clone reading the same [`Time`].
#[derive(Debug, Clone)]
pub struct Clock(Arc<dyn Time>);

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Clock::shifted(TimeDelta::zero())
    }

    /// The system clock plus `offset`.
    pub fn shifted(offset: TimeDelta) -> Self {
        Clock(Arc::new(System { offset }))
    }

    /// A clock standing at `start` until its [`Manual`] moves it.
    pub fn manual(start: DateTime<Utc>) -> (Self, Arc<Manual>) {
        let manual = Arc::new(Manual { now: Mutex::new(start) });
        (Clock(manual.clone()), manual)
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.0.now()
    }

    /// How long until this clock reads `at` (zero once it has).
    pub fn until(&self, at: DateTime<Utc>) -> Duration {
        (at - self.now()).to_std().unwrap_or(Duration::ZERO)
    }
}

/// The longest the processing loop sleeps before it reads the clock again. Timers are due
/// at times on the clock, but a sleep runs on the machine's monotonic time: a clock stepped
/// forward while the loop slept towards a far timer would hold back every timer the step
/// made due until that sleep ended.
pub const CLOCK_CHECK: Duration = Duration::from_secs(1);

/// How long to sleep, at `now` on the clock, before looking at the timer due at `due`: until
/// it is due, but never longer than [`CLOCK_CHECK`], so the loop follows the clock's steps.
pub fn wake_in(now: DateTime<Utc>, due: DateTime<Utc>) -> Duration {
    (due - now).to_std().unwrap_or(Duration::ZERO).min(CLOCK_CHECK)
}

/// The decider's time: a [`Clock`] that never goes backwards, whatever the system clock does
/// (an NTP step back must not fire a timer twice or date an event before its cause).
#[derive(Debug)]
pub struct Monotonic {
    clock: Clock,
    last: DateTime<Utc>,
}

impl Monotonic {
    pub fn new(clock: Clock) -> Self {
        Monotonic {
            clock,
            last: DateTime::<Utc>::MIN_UTC,
        }
    }

    pub fn now(&mut self) -> DateTime<Utc> {
        self.last = self.last.max(self.clock.now());
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shifted_clock_runs_ahead_of_the_system_clock_by_its_offset() {
        let ahead = Clock::shifted(TimeDelta::minutes(90));
        let (before, shifted, after) = (Utc::now(), ahead.now(), Utc::now());
        assert!(shifted >= before + TimeDelta::minutes(90) && shifted <= after + TimeDelta::minutes(90));
        let due = Utc::now() + TimeDelta::minutes(90) + TimeDelta::seconds(30);
        let wait = ahead.until(due);
        assert!(
            wait <= Duration::from_secs(30) && wait > Duration::from_secs(25),
            "{wait:?}"
        );
        assert_eq!(
            Clock::system().until(Utc::now()),
            Duration::ZERO,
            "a passed time is due now"
        );
    }

    /// Time is an input: no runtime code but this module reads the machine's clock, except
    /// for an AWS request signature, an MSK IAM token and AWS credentials' expiry (AWS
    /// judges them by its own).
    #[test]
    fn only_the_clock_reads_the_machines_time() {
        fn check(dir: &std::path::Path, offences: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    check(&path, offences);
                    continue;
                }
                if path.file_name().is_some_and(|n| n == "clock.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let shipped = text.split("#[cfg(test)]").next().unwrap_or_default();
                let signing = path.ends_with("jobs/aws/mod.rs")
                    || path.ends_with("jobs/aws/credentials.rs")
                    || path.ends_with("runtime/msk_iam.rs");
                for word in ["Utc::now", "Local::now", "SystemTime::now"] {
                    let allowed = usize::from(signing && word == "SystemTime::now");
                    if shipped.matches(word).count() > allowed {
                        offences.push(format!("{} reads {word}", path.display()));
                    }
                }
            }
        }
        let mut offences = Vec::new();
        check(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime"),
            &mut offences,
        );
        assert!(offences.is_empty(), "{offences:#?}");
    }

    #[test]
    fn a_manual_clock_moves_only_when_told_and_monotonic_time_never_goes_back() {
        let t0 = DateTime::parse_from_rfc3339("2026-11-26T08:00:00Z").unwrap().to_utc();
        let (clock, hand) = Clock::manual(t0);
        let copy = clock.clone();
        assert_eq!(clock.now(), t0);
        hand.advance(TimeDelta::minutes(5));
        assert_eq!(copy.now(), t0 + TimeDelta::minutes(5), "clones read the same time");
        assert_eq!(clock.until(t0 + TimeDelta::minutes(6)), Duration::from_secs(60));
        let mut time = Monotonic::new(clock.clone());
        assert_eq!(time.now(), t0 + TimeDelta::minutes(5));
        hand.set(t0);
        assert_eq!(time.now(), t0 + TimeDelta::minutes(5), "a step back is not followed");
        hand.set(t0 + TimeDelta::hours(1));
        assert_eq!(time.now(), t0 + TimeDelta::hours(1));
    }

    /// The loop's timer wait on a simulated clock that steps: a step forward past a far
    /// timer's due time is seen within [`CLOCK_CHECK`], and a step back never makes a timer
    /// due early.
    #[test]
    fn the_timer_wait_follows_the_clocks_steps() {
        let t0 = DateTime::parse_from_rfc3339("2026-11-26T08:00:00Z").unwrap().to_utc();
        let due = t0 + TimeDelta::hours(2);
        // Simulated: the loop sleeps what wake_in says, and the clock moves by that much,
        // plus a step of +1h50m after its first sleep.
        let (mut now, mut slept, mut turns) = (t0, Duration::ZERO, 0);
        while now < due {
            let wait = wake_in(now, due);
            assert!(wait <= CLOCK_CHECK);
            slept += wait;
            now += TimeDelta::from_std(wait).unwrap();
            if turns == 0 {
                now += TimeDelta::minutes(110);
            }
            turns += 1;
        }
        assert!(
            slept <= Duration::from_secs(10 * 60 + 2),
            "the timer came {slept:?} after the step, not after the 2h the first wait aimed at"
        );
        // Stepped back an hour: the timer is an hour further away, never due now.
        let back = due - TimeDelta::hours(1);
        assert_eq!(wake_in(back, due), CLOCK_CHECK);
        assert_eq!(wake_in(due, due), Duration::ZERO);
    }

    #[test]
    fn the_deciders_time_never_goes_back() {
        let mut time = Monotonic::new(Clock::shifted(TimeDelta::hours(1)));
        let first = time.now();
        time.clock = Clock::system();
        assert_eq!(time.now(), first, "an hour back on the clock holds the decider's time");
        time.clock = Clock::shifted(TimeDelta::hours(2));
        assert!(time.now() > first);
    }
}
