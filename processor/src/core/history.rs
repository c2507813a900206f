//! A pipeline's recent runs, and the SLA forecast made from them.
//!
//! Each date's first success is kept: when its job was first triggered, measured from the
//! start of its execution date (so "the trigger usually comes at 02:10"), and how long it
//! took from that trigger to success (retries included: that is what the deadline sees).
//! The forecast is a projection of the completion time from those figures; it is pure, so
//! its tests need no clock and no decider.

use std::collections::VecDeque;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::execution::ExecutionDate;

/// How many runs are kept: about a month of a daily pipeline.
pub const HISTORY_RUNS: usize = 30;

/// How many runs a forecast needs unless `sla.forecast.minRuns` says otherwise.
pub const DEFAULT_MIN_RUNS: usize = 5;

/// The quantile of durations a forecast uses: nine runs in ten finished sooner.
const DURATION_QUANTILE: f64 = 0.9;

/// The recent successful runs of a pipeline, oldest first, at most [`HISTORY_RUNS`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunHistory {
    pub runs: VecDeque<PastRun>,
}

/// One date's first successful run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PastRun {
    /// The execution date (stored as `YYYY-MM-DD` or `YYYY-MM-DDTHH`).
    pub date: ExecutionDate,
    /// Seconds from the start of the execution date to the first trigger.
    pub triggered_after: i64,
    /// Seconds from the first trigger to success.
    pub duration: i64,
}

impl RunHistory {
    /// Keeps a date's first success; a rerun of a date already kept changes nothing (its
    /// trigger time says when someone asked, not when the data came).
    pub fn record(&mut self, run: PastRun) {
        if self.runs.iter().any(|r| r.date == run.date) {
            return;
        }
        self.runs.push_back(run);
        while self.runs.len() > HISTORY_RUNS {
            self.runs.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    fn durations(&self) -> Vec<i64> {
        let mut durations: Vec<i64> = self.runs.iter().map(|r| r.duration).collect();
        durations.sort_unstable();
        durations
    }
}

/// What a forecast is based on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Basis {
    /// No trigger yet: the usual trigger time (or now, if later) plus the p90 duration.
    UsualTrigger,
    /// The job runs: the trigger time plus the p90 duration of past runs that took at least
    /// as long as this one has so far.
    Running,
    /// The job has run longer than any run on record: only "not before now" is known.
    BeyondHistory,
}

/// A projected completion and the figures it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forecast {
    pub projected: DateTime<Utc>,
    pub basis: Basis,
    /// How many past runs it used.
    pub runs: usize,
    /// The p90 of the durations it used (all runs, or those at least as long as the run so far).
    pub duration_p90: Option<TimeDelta>,
    /// When the trigger usually comes for this date (the median of past runs).
    pub usual_trigger: DateTime<Utc>,
    /// When the projection next changes while nothing else happens: the forecast is made
    /// again then. `None` when it no longer changes before `deadline`.
    pub next_change: Option<DateTime<Utc>>,
}

impl Forecast {
    /// Whether the projected completion passes `deadline` (completing at it meets it).
    pub fn misses(&self, deadline: DateTime<Utc>) -> bool {
        self.projected > deadline
    }
}

/// The forecast for one execution date: `date_start` is the start of the date,
/// `triggered_at` the first trigger of its job if there was one. `None` with fewer than
/// `min_runs` runs on record.
pub fn forecast(
    history: &RunHistory,
    min_runs: usize,
    date_start: DateTime<Utc>,
    triggered_at: Option<DateTime<Utc>>,
    deadline: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<Forecast> {
    if history.len() < min_runs.max(1) {
        return None;
    }
    let mut offsets: Vec<i64> = history.runs.iter().map(|r| r.triggered_after).collect();
    offsets.sort_unstable();
    let usual_trigger = date_start + TimeDelta::seconds(quantile(&offsets, 0.5)?);
    let durations = history.durations();
    let before_deadline = |at: DateTime<Utc>| Some(at).filter(|at| *at < deadline);
    let forecast = match triggered_at {
        None => {
            let p90 = TimeDelta::seconds(quantile(&durations, DURATION_QUANTILE)?);
            // Constant until the usual trigger time, then it moves with the clock: it passes
            // the deadline one second after `deadline - p90`.
            let crossing = deadline - p90 + TimeDelta::seconds(1);
            Forecast {
                projected: now.max(usual_trigger) + p90,
                basis: Basis::UsualTrigger,
                runs: durations.len(),
                duration_p90: Some(p90),
                usual_trigger,
                next_change: before_deadline(crossing.max(usual_trigger)).filter(|at| *at > now),
            }
        }
        Some(start) => {
            let elapsed = (now - start).num_seconds();
            // Runs that took at least as long as this one has so far: it is like them.
            let longer: Vec<i64> = durations.iter().copied().filter(|d| *d >= elapsed).collect();
            match quantile(&longer, DURATION_QUANTILE) {
                Some(p90) => Forecast {
                    projected: start + TimeDelta::seconds(p90),
                    basis: Basis::Running,
                    runs: longer.len(),
                    duration_p90: Some(TimeDelta::seconds(p90)),
                    usual_trigger,
                    // The shortest of them drops out when the run outlasts it.
                    next_change: before_deadline(start + TimeDelta::seconds(longer[0] + 1)),
                },
                None => Forecast {
                    projected: now,
                    basis: Basis::BeyondHistory,
                    runs: 0,
                    duration_p90: None,
                    usual_trigger,
                    next_change: None,
                },
            }
        }
    };
    Some(forecast)
}

/// The `q` quantile of sorted `values` by the nearest-rank method (a value that occurred).
fn quantile(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    // Nearest rank: the smallest value with at least q of the values at or below it.
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(hour: i64, minute: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(0, 0).unwrap() + TimeDelta::hours(hour) + TimeDelta::minutes(minute)
    }

    /// The `i`th date of the history's tests.
    fn date(i: usize) -> ExecutionDate {
        let first = chrono::NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        ExecutionDate::daily(first + TimeDelta::days(i as i64))
    }

    /// Runs triggered at 02:00 + i minutes, each taking `minutes[i]`.
    fn history(minutes: &[i64]) -> RunHistory {
        let mut h = RunHistory::default();
        for (i, m) in minutes.iter().enumerate() {
            h.record(PastRun {
                date: date(i),
                triggered_after: 2 * 3600 + 60 * i as i64,
                duration: 60 * m,
            });
        }
        h
    }

    #[test]
    fn quantiles_are_values_that_occurred_by_nearest_rank() {
        let v = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];
        assert_eq!(quantile(&v, 0.9), Some(90));
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v[..1], 0.9), Some(10));
        assert_eq!(quantile(&v[..3], 0.9), Some(30));
        assert_eq!(quantile(&[], 0.9), None);
    }

    #[test]
    fn history_keeps_each_dates_first_success_and_at_most_its_bound() {
        let mut h = history(&[30; HISTORY_RUNS + 5]);
        assert_eq!(h.len(), HISTORY_RUNS);
        assert_eq!(h.runs[0].date, date(5), "the oldest went first");
        h.record(PastRun {
            date: date(HISTORY_RUNS + 4),
            triggered_after: 99_999,
            duration: 1,
        });
        assert_eq!(h.len(), HISTORY_RUNS);
        assert_eq!(h.runs.back().unwrap().duration, 30 * 60, "a rerun changes nothing");
    }

    #[test]
    fn no_forecast_before_enough_runs() {
        let h = history(&[30, 40, 50, 60]);
        assert_eq!(forecast(&h, 5, at(0, 0), None, at(6, 0), at(1, 0)), None);
        assert!(forecast(&h, 4, at(0, 0), None, at(6, 0), at(1, 0)).is_some());
    }

    #[test]
    fn before_the_trigger_the_usual_trigger_time_plus_the_p90_duration() {
        // Triggers at 02:00..02:09 (median 02:04), durations 10..100 minutes (p90 90).
        let h = history(&[10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
        let f = forecast(&h, 5, at(0, 0), None, at(4, 0), at(1, 0)).unwrap();
        assert_eq!(f.usual_trigger, at(2, 4));
        assert_eq!(f.duration_p90, Some(TimeDelta::minutes(90)));
        assert_eq!((f.projected, f.basis), (at(3, 34), Basis::UsualTrigger));
        assert!(!f.misses(at(4, 0)));
        // It passes the deadline one second after 04:00 - 90m = 02:30.
        assert_eq!(f.next_change, Some(at(2, 30) + TimeDelta::seconds(1)));
        let later = forecast(&h, 5, at(0, 0), None, at(4, 0), f.next_change.unwrap()).unwrap();
        assert!(later.misses(at(4, 0)));
        assert_eq!(later.next_change, None);
        // A deadline too early for the usual trigger time: at risk from the start.
        let early = forecast(&h, 5, at(0, 0), None, at(3, 0), at(0, 30)).unwrap();
        assert!(early.misses(at(3, 0)));
    }

    #[test]
    fn while_running_the_p90_of_the_runs_that_took_longer_than_this_one_so_far() {
        let h = history(&[10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
        let start = at(2, 0);
        let f = forecast(&h, 5, at(0, 0), Some(start), at(4, 0), start).unwrap();
        assert_eq!((f.projected, f.basis, f.runs), (at(3, 30), Basis::Running, 10));
        assert_eq!(
            f.next_change,
            Some(at(2, 10) + TimeDelta::seconds(1)),
            "when the 10-minute run drops out"
        );
        // 75 minutes in: only the 80, 90 and 100-minute runs are like this one.
        let f = forecast(&h, 5, at(0, 0), Some(start), at(4, 0), at(3, 15)).unwrap();
        assert_eq!((f.projected, f.runs), (at(3, 40), 3));
        assert_eq!(f.next_change, Some(at(3, 20) + TimeDelta::seconds(1)));
        // Exactly 80 minutes in, the 80-minute run still counts; a second later it does not.
        let f = forecast(&h, 5, at(0, 0), Some(start), at(4, 0), at(3, 20)).unwrap();
        assert_eq!((f.projected, f.runs), (at(3, 40), 3));
        // Runs on record that took no time at all: one just started is like them.
        let instant = history(&[0, 0, 0, 0, 0]);
        let f = forecast(&instant, 5, at(0, 0), Some(start), at(4, 0), start).unwrap();
        assert_eq!((f.projected, f.basis), (start, Basis::Running));
        // Longer than every run on record: nothing but "not before now".
        let f = forecast(&h, 5, at(0, 0), Some(start), at(4, 0), at(3, 45)).unwrap();
        assert_eq!(
            (f.projected, f.basis, f.next_change),
            (at(3, 45), Basis::BeyondHistory, None)
        );
    }

    #[test]
    fn the_projection_never_decreases_while_a_run_goes_on() {
        let h = history(&[12, 95, 33, 47, 47, 150, 61, 18, 29, 88, 70]);
        let start = at(2, 0);
        let mut last = None;
        for minute in 0..200 {
            let now = start + TimeDelta::minutes(minute);
            let f = forecast(&h, 5, at(0, 0), Some(start), at(9, 0), now).unwrap();
            assert!(f.projected >= now, "never in the past");
            if let Some(previous) = last {
                assert!(f.projected >= previous, "minute {minute}: {} < {previous}", f.projected);
            }
            last = Some(f.projected);
        }
    }
}
