//! Where a pipeline runs otherwise than the earlier design ran it, named at `config
//! validate` so a team moving over sees it before a run does (or does not) happen: the
//! days it skips (Interlock applied no holiday calendar, and inclusion dates did not gate
//! its triggers), and the bounds Sluice puts where Interlock had none.

use chrono::{Datelike, NaiveDate, TimeDelta};

use super::{PipelineConfig, Problem, INCLUSION_LOOKBACK_DAYS};
use crate::core::lifecycle::MAX_TRIGGER_RELEASES;

/// How far ahead the skipped days are counted.
pub const HORIZON_DAYS: i64 = 365;
/// How many of them are named.
const NAMED: usize = 5;

/// Warnings naming the days from `from` (for [`HORIZON_DAYS`]) that `config` skips where
/// the earlier design would have run.
pub fn days_skipped_unlike_interlock(config: &PipelineConfig, from: NaiveDate) -> Vec<Problem> {
    let mut warnings = Vec::new();
    if let Some(calendar) = &config.exclusions.calendar {
        let skipped: Vec<NaiveDate> = (0..HORIZON_DAYS)
            .filter_map(|d| from.checked_add_signed(TimeDelta::days(d)))
            .filter(|day| calendar.days.contains(&day.weekday()) || calendar.dates.contains(day))
            .collect();
        if !skipped.is_empty() {
            warnings.push(Problem {
                path: "exclusions.calendar".into(),
                reason: format!(
                    "calendar {:?} skips {} in the next {HORIZON_DAYS} days that the earlier design ran (it applied no holiday calendar): {}",
                    calendar.name,
                    count(skipped.len()),
                    named(&skipped)
                ),
            });
        }
    }
    let include = &config.schedule.include_dates;
    if config.schedule.trigger.is_some() && !include.is_empty() {
        let ahead = include.iter().filter(|d| **d >= from).count();
        warnings.push(Problem {
            path: "schedule.include.dates".into(),
            reason: format!(
                "the trigger starts runs only on the inclusion dates ({ahead} ahead); the earlier design's trigger ran on any day. An undated reading up to {INCLUSION_LOOKBACK_DAYS} days after an inclusion date counts for it"
            ),
        });
    }
    warnings
}

/// Warnings naming where `config`'s runs are bounded unlike the earlier design's: a failing
/// trigger's releases of its date, old dates, and what a dry run publishes.
pub fn runs_unlike_interlock(config: &PipelineConfig) -> Vec<Problem> {
    let mut warnings = Vec::new();
    if config.schedule.trigger.is_some() {
        warnings.push(Problem {
            path: "schedule.trigger".into(),
            reason: format!(
                "a trigger that keeps failing releases its date for the next trigger sensor at most {MAX_TRIGGER_RELEASES} times, then the date waits for a rerun (the earlier design released it without bound); a reading dated older than the execution retention starts nothing (`sluice backfill` starts such dates)"
            ),
        });
    }
    if config.dry_run {
        warnings.push(Problem {
            path: "dryRun".into(),
            reason: "what the earlier design's dry run only logged or skipped (rules that never pass, a missed schedule, an unknown sensor) is published as DRY_RUN_WOULD_REPORT, which pages no one".into(),
        });
    }
    warnings
}

fn count(days: usize) -> String {
    match days {
        1 => "1 day".into(),
        n => format!("{n} days"),
    }
}

fn named(days: &[NaiveDate]) -> String {
    let shown: Vec<String> = days.iter().take(NAMED).map(NaiveDate::to_string).collect();
    match days.len().saturating_sub(NAMED) {
        0 => shown.join(", "),
        more => format!("{}, … ({more} more)", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::config::{parse, Variables};

    fn config(patch: serde_json::Value) -> PipelineConfig {
        let mut raw = json!({
            "pipeline": {"id": "p1", "owner": "me"},
            "schedule": {"trigger": {"key": "k", "check": "exists"}},
            "job": {"type": "command", "config": {"command": "true"}}
        });
        for (k, v) in patch.as_object().unwrap() {
            raw[k] = v.clone();
        }
        parse(&raw, Variables::MustBeResolved).unwrap().config
    }

    fn day(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn a_holiday_calendar_names_the_days_it_skips() {
        let holidays = config(
            json!({"exclusions": {"calendar": {"name": "us", "dates": ["2026-12-25", "2027-01-01", "2025-12-25", "2028-01-01"]}}}),
        );
        let said = days_skipped_unlike_interlock(&holidays, day("2026-11-26"));
        assert_eq!(said.len(), 1);
        assert_eq!(said[0].path, "exclusions.calendar");
        assert!(
            said[0].reason.contains("skips 2 days in the next 365 days"),
            "{}",
            said[0].reason
        );
        assert!(
            said[0].reason.ends_with(": 2026-12-25, 2027-01-01"),
            "{}",
            said[0].reason
        );
        let weekends =
            config(json!({"exclusions": {"calendar": {"name": "weekends", "days": ["saturday", "sunday"]}}}));
        let said = days_skipped_unlike_interlock(&weekends, day("2026-11-26"));
        assert!(said[0].reason.contains("skips 104 days"), "{}", said[0].reason);
        assert!(
            said[0]
                .reason
                .contains("2026-11-28, 2026-11-29, 2026-12-05, 2026-12-06, 2026-12-12, … (99 more)"),
            "{}",
            said[0].reason
        );
        assert!(days_skipped_unlike_interlock(&config(json!({})), day("2026-11-26")).is_empty());
    }

    #[test]
    fn inclusion_dates_gating_a_trigger_are_named() {
        let month_ends = config(
            json!({"schedule": {"trigger": {"key": "k", "check": "exists"}, "include": {"dates": ["2026-10-31", "2026-11-30", "2026-12-31"]}}}),
        );
        let said = days_skipped_unlike_interlock(&month_ends, day("2026-11-26"));
        assert_eq!(said.len(), 1);
        assert_eq!(said[0].path, "schedule.include.dates");
        assert!(said[0].reason.contains("(2 ahead)"), "{}", said[0].reason);
    }

    #[test]
    fn bounds_the_earlier_design_did_not_have_are_named_where_they_apply() {
        let paths =
            |c: &PipelineConfig| -> Vec<String> { runs_unlike_interlock(c).into_iter().map(|w| w.path).collect() };
        assert_eq!(paths(&config(json!({}))), ["schedule.trigger"]);
        let said = &runs_unlike_interlock(&config(json!({})))[0].reason;
        assert!(
            said.contains("at most 3 times") && said.contains("sluice backfill"),
            "{said}"
        );
        assert_eq!(paths(&config(json!({"dryRun": true}))), ["schedule.trigger", "dryRun"]);
        let cron = config(json!({"schedule": {"cron": "0 6 * * *"}}));
        assert!(paths(&cron).is_empty());
    }
}
