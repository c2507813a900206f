//! Whether the processor's clock can be trusted, judged from what it sees: the clock's own
//! steps (measured against a monotonic clock, which no step moves) and the times its
//! producers stamp their records with. Obeyed, a clock stepped forward would expire
//! executions en masse (every retention ends at once), and one running behind its
//! producers would dead-letter every timestamped reading as "from the future". Caught:
//! - a forward step of more than [`STEP`] holds retention expiry for [`HOLD`] after it (an
//!   expiry due meanwhile fires at the hold's end, once the step has been alerted on and the
//!   clock had time to be put right), and is said (a warning, `sluice_clock_steps_total`);
//! - a clock behind most of its recent inputs' stamps by more than the allowed skew widens
//!   that allowance by as much (at most [`MAX_WIDENING`]) and is said
//!   (`sluice_clock_behind_inputs_seconds`): one producer's clock ahead still has its
//!   readings refused, every producer's clock "ahead" means this one is behind.
//!
//! The runtime feeds it the clock's readings and the records' stamps, and acts on its
//! answers; the rules are here.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::timers::TimerKind;

/// A jump of the clock against the monotonic clock larger than this is a step (NTP slews
/// smaller corrections; a VM restored or a clock set by hand jumps).
pub const STEP: TimeDelta = TimeDelta::minutes(2);
/// How long after a forward step retention expiry is held.
pub const HOLD: TimeDelta = TimeDelta::hours(1);
/// The most the allowance for readings stamped in the future is widened by.
pub const MAX_WIDENING: TimeDelta = TimeDelta::hours(1);
/// The recent input stamps kept.
const STAMPS: usize = 256;
/// The stamps needed before the clock is judged against them.
const MIN_STAMPS: usize = 8;

/// A step of the clock: when (on the clock, after the step) and by how much (forward > 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub at: DateTime<Utc>,
    pub by: TimeDelta,
}

/// What the processor has seen of its clock (see the module's comment).
#[derive(Debug, Default)]
pub struct ClockWatch {
    /// The clock's time less the monotonic time, at the last reading.
    offset: Option<TimeDelta>,
    /// The last forward step.
    forward: Option<Step>,
    /// How far ahead of the clock each recent input was stamped (negative: behind).
    leads: VecDeque<TimeDelta>,
}

impl ClockWatch {
    /// The clock read `now` when `elapsed` had passed on a monotonic clock (from any fixed
    /// origin). Returns the step, if the clock jumped since its last reading.
    pub fn read(&mut self, now: DateTime<Utc>, elapsed: Duration) -> Option<Step> {
        let monotonic = TimeDelta::from_std(elapsed).unwrap_or(TimeDelta::MAX);
        let offset = (now - DateTime::UNIX_EPOCH).checked_sub(&monotonic)?;
        let moved = offset.checked_sub(&self.offset.replace(offset)?)?;
        if moved.abs() <= STEP {
            return None;
        }
        let step = Step { at: now, by: moved };
        if moved > TimeDelta::zero() {
            self.forward = Some(step);
        }
        Some(step)
    }

    /// Until when retention expiry is held at `now`: within [`HOLD`] of a forward step.
    pub fn expiry_held_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let until = self.forward?.at.checked_add_signed(HOLD)?;
        (now < until).then_some(until)
    }

    /// An input record its producer stamped `stamped`, read at `now`.
    pub fn stamped(&mut self, stamped: DateTime<Utc>, now: DateTime<Utc>) {
        if self.leads.len() == STAMPS {
            self.leads.pop_front();
        }
        self.leads.push_back(stamped.signed_duration_since(now));
    }

    /// How far this clock runs behind its recent inputs' stamps, when most of them lead it
    /// by more than `allowance` (the median of their leads); `None` otherwise. A backlog
    /// read late leads by less, never more: it cannot make a clock look behind.
    pub fn behind_inputs(&self, allowance: TimeDelta) -> Option<TimeDelta> {
        if self.leads.len() < MIN_STAMPS {
            return None;
        }
        let mut leads: Vec<TimeDelta> = self.leads.iter().copied().collect();
        let middle = leads.len() / 2;
        let (_, median, _) = leads.select_nth_unstable(middle);
        (*median > allowance).then_some(*median)
    }

    /// How far this clock runs behind its inputs (see [`Self::behind_inputs`]), and the
    /// allowance for readings stamped in the future that follows: `allowance`, widened by
    /// as much (at most [`MAX_WIDENING`]).
    pub fn judge(&self, allowance: TimeDelta) -> (Option<TimeDelta>, TimeDelta) {
        let behind = self.behind_inputs(allowance);
        (
            behind,
            allowance + behind.map_or(TimeDelta::zero(), |b| b.min(MAX_WIDENING)),
        )
    }

    /// Until when timer `kind`, due at `now`, is held: a retention expiry within [`HOLD`]
    /// of a forward step (every other timer fires as due).
    pub fn held_until(&self, kind: &TimerKind, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match kind {
            TimerKind::Expire { .. } => self.expiry_held_until(now),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    const T0: &str = "2026-11-28T10:00:00Z";

    #[test]
    fn a_forward_step_holds_expiry_for_an_hour_and_slewing_is_no_step() {
        let mut w = ClockWatch::default();
        let t0 = at(T0);
        assert_eq!(w.read(t0, Duration::from_secs(100)), None, "the first reading");
        // A second a second, and a slew of 30 s over an hour: no step.
        assert_eq!(w.read(t0 + TimeDelta::seconds(1), Duration::from_secs(101)), None);
        assert_eq!(w.read(t0 + TimeDelta::seconds(3631), Duration::from_secs(3701)), None);
        assert_eq!(w.expiry_held_until(t0 + TimeDelta::seconds(3631)), None);
        // Three days forward within a second.
        let after = t0 + TimeDelta::days(3) + TimeDelta::seconds(3632);
        let step = w.read(after, Duration::from_secs(3702)).expect("a step");
        assert_eq!(step.by, TimeDelta::days(3));
        assert_eq!(w.expiry_held_until(after), Some(after + HOLD));
        assert_eq!(w.expiry_held_until(after + TimeDelta::minutes(59)), Some(after + HOLD));
        assert_eq!(w.expiry_held_until(after + HOLD), None, "held an hour, then fires");
        let expire = TimerKind::Expire {
            execution: crate::core::execution::id("daily", "2026-11-28"),
        };
        assert_eq!(w.held_until(&expire, after), Some(after + HOLD));
        assert_eq!(
            w.held_until(&TimerKind::Forget, after),
            None,
            "only retention expiry is held"
        );
        // A step back is said, and holds nothing (the decider's time never goes back).
        let mut back = ClockWatch::default();
        back.read(t0, Duration::from_secs(10));
        let step = back
            .read(t0 - TimeDelta::hours(1), Duration::from_secs(11))
            .expect("a step");
        assert_eq!(step.by, -TimeDelta::hours(1) - TimeDelta::seconds(1));
        assert_eq!(back.expiry_held_until(t0), None);
    }

    #[test]
    fn a_clock_behind_most_of_its_inputs_widens_the_future_allowance_by_as_much() {
        let skew = TimeDelta::minutes(5);
        let now = at(T0);
        let mut w = ClockWatch::default();
        // Seven stamps 10 minutes ahead: too few to judge.
        for _ in 0..7 {
            w.stamped(now + TimeDelta::minutes(10), now);
        }
        assert_eq!(w.judge(skew).1, skew);
        w.stamped(now + TimeDelta::minutes(10), now);
        assert_eq!(w.behind_inputs(skew), Some(TimeDelta::minutes(10)));
        assert_eq!(w.judge(skew).1, TimeDelta::minutes(15));
        // One producer far ahead among many on time: the clock is not behind.
        let mut one = ClockWatch::default();
        for i in 0..20 {
            let lead = if i % 4 == 0 {
                TimeDelta::hours(3)
            } else {
                TimeDelta::seconds(-1)
            };
            one.stamped(now + lead, now);
        }
        assert_eq!(one.judge(skew).1, skew);
        // A backlog read late: stamps behind the clock say nothing against it.
        let mut backlog = ClockWatch::default();
        for _ in 0..STAMPS {
            backlog.stamped(now - TimeDelta::hours(2), now);
        }
        assert_eq!(backlog.behind_inputs(skew), None);
        // Widened at most by MAX_WIDENING; only the recent STAMPS count.
        let mut far = ClockWatch::default();
        for _ in 0..STAMPS {
            far.stamped(now + TimeDelta::days(2), now);
        }
        assert_eq!(far.judge(skew).1, skew + MAX_WIDENING);
        for _ in 0..STAMPS {
            far.stamped(now, now);
        }
        assert_eq!(far.judge(skew).1, skew);
    }
}
