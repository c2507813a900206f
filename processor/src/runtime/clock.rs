//! The runtime's time. The core never reads a clock: the processor asks this one for the
//! decider's `now`, sleeps on it until the next timer is due, and stamps job reports with it.
//!
//! It is the system clock, shifted by `--clock-offset` when one is given: the processor then
//! lives that far ahead of the wall clock, so a test (or a rehearsal of tomorrow's schedule)
//! reaches an SLA deadline or a cron time in seconds instead of waiting for it. Timers are
//! durable at their due time on this clock; every instance of a group must use the same
//! offset.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// The system clock, shifted by a fixed offset (none by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Clock {
    offset: TimeDelta,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Clock::default()
    }

    /// The system clock plus `offset`.
    pub fn shifted(offset: TimeDelta) -> Self {
        Clock { offset }
    }

    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
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
