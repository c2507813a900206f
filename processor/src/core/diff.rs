//! What a replay would change: its events set against the events recorded for the same span,
//! pipeline by pipeline.
//!
//! Events are paired by identity first (the same `eventId`), then by what they say (type,
//! schedule, date and run) at the nearest time. A pair more than the tolerance apart is
//! *retimed*; a pair within it that differs only in `eventId` is the same decision reached
//! from a timer armed in event time rather than on the wall clock (the live processor arms
//! timers from the moment it handled a record, a replay from the record's timestamp).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};

use super::events::Event;

/// The span compared: events stamped from `from` up to and including `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Where recorded events stop belonging to the span: `to`, or a little later when the
    /// span ends with the log, because the live processor stamps an event when it handled
    /// the record, after the record's own time.
    pub recorded_to: DateTime<Utc>,
}

impl Window {
    pub fn new(from: DateTime<Utc>, to: DateTime<Utc>) -> Self {
        Window {
            from,
            to,
            recorded_to: to,
        }
    }

    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.from <= t && t <= self.to
    }

    fn holds_recorded(&self, t: DateTime<Utc>) -> bool {
        self.from <= t && t <= self.recorded_to
    }
}

/// One pipeline's differences.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PipelineDiff {
    /// Pairs with the same id, within the tolerance.
    pub same: usize,
    /// The same decision within the tolerance, under another `eventId` (recorded, replayed).
    pub reidentified: Vec<(Event, Event)>,
    /// Recorded, and not reached by the replay.
    pub missing: Vec<Event>,
    /// Reached by the replay, and not recorded.
    pub extra: Vec<Event>,
    /// The same decision at a time more than the tolerance away (recorded, replayed).
    pub retimed: Vec<(Event, Event)>,
}

impl PipelineDiff {
    /// Whether the replay decided anything differently (new ids alone are not a change).
    pub fn changed(&self) -> bool {
        !(self.missing.is_empty() && self.extra.is_empty() && self.retimed.is_empty())
    }
}

/// Every pipeline's differences, by pipeline id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Diff {
    pub window: Option<Window>,
    pub tolerance: TimeDelta,
    pub pipelines: BTreeMap<String, PipelineDiff>,
}

impl Diff {
    pub fn changed(&self) -> bool {
        self.pipelines.values().any(PipelineDiff::changed)
    }
}

/// Compares `replayed` with `recorded`. Events outside `window` that find no partner are
/// left out on both sides: the caller may pass recorded events from a little beyond the
/// window, so that one a live processor published just across its edge still pairs up.
/// A recorded event is compared by time only when no partner has its id, so a replay that
/// reproduces the live ids is matched exactly, whatever the tolerance.
pub fn diff(recorded: &[Event], replayed: &[Event], window: Window, tolerance: TimeDelta) -> Diff {
    let mut by_pipeline: BTreeMap<&str, (Vec<&Event>, Vec<&Event>)> = BTreeMap::new();
    for e in recorded {
        by_pipeline.entry(&e.pipeline_id).or_default().0.push(e);
    }
    for e in replayed {
        by_pipeline.entry(&e.pipeline_id).or_default().1.push(e);
    }
    let pipelines = by_pipeline
        .into_iter()
        .map(|(id, (rec, rep))| (id.to_string(), pipeline_diff(rec, rep, window, tolerance)))
        .filter(|(_, d)| d.same + d.reidentified.len() + d.missing.len() + d.extra.len() + d.retimed.len() > 0)
        .collect();
    Diff {
        window: Some(window),
        tolerance,
        pipelines,
    }
}

/// What an event says, without when or under which id.
fn identity(e: &Event) -> (&str, Option<&str>, Option<&str>, Option<&str>) {
    (
        e.kind.name(),
        e.schedule_id.as_deref(),
        e.date.as_deref(),
        e.run_id.as_deref(),
    )
}

fn pipeline_diff(recorded: Vec<&Event>, replayed: Vec<&Event>, window: Window, tolerance: TimeDelta) -> PipelineDiff {
    let mut d = PipelineDiff::default();
    let close = |a: &Event, b: &Event| (a.timestamp - b.timestamp).abs() <= tolerance;
    let (rest_recorded, rest_replayed) = d.pair_by_id(recorded, replayed, close);
    // The rest by what they say: the nearest within the tolerance, then in order.
    let mut groups: BTreeMap<_, (Vec<&Event>, Vec<&Event>)> = BTreeMap::new();
    for r in rest_recorded {
        groups.entry(identity(r)).or_default().0.push(r);
    }
    for p in rest_replayed {
        groups.entry(identity(p)).or_default().1.push(p);
    }
    for (_, (rec, rep)) in groups {
        d.pair_by_time(rec, rep, window, close);
    }
    for list in [&mut d.missing, &mut d.extra] {
        list.sort_by(|a, b| (a.timestamp, &a.event_id).cmp(&(b.timestamp, &b.event_id)));
    }
    for list in [&mut d.retimed, &mut d.reidentified] {
        list.sort_by(|a, b| (a.0.timestamp, &a.0.event_id).cmp(&(b.0.timestamp, &b.0.event_id)));
    }
    d
}

impl PipelineDiff {
    /// Pairs events with the same id: the same decision from the same input. Returns the
    /// events left unpaired (recorded, replayed).
    fn pair_by_id<'e>(
        &mut self,
        recorded: Vec<&'e Event>,
        replayed: Vec<&'e Event>,
        close: impl Fn(&Event, &Event) -> bool,
    ) -> (Vec<&'e Event>, Vec<&'e Event>) {
        let ids: BTreeMap<&str, &Event> = replayed.iter().map(|e| (e.event_id.as_str(), *e)).collect();
        let mut paired: BTreeSet<&str> = BTreeSet::new();
        let mut rest_recorded = Vec::new();
        for r in recorded {
            match ids.get(r.event_id.as_str()) {
                Some(p) if paired.insert(&r.event_id) => match close(r, p) {
                    true => self.same += 1,
                    false => self.retimed.push((r.clone(), (*p).clone())),
                },
                _ => rest_recorded.push(r),
            }
        }
        let rest_replayed = replayed
            .into_iter()
            .filter(|e| !paired.contains(e.event_id.as_str()))
            .collect();
        (rest_recorded, rest_replayed)
    }

    /// Pairs events that say the same thing in time order: within the tolerance they are
    /// reidentified; of the rest inside `window`, pairs are retimed and the others missing
    /// (recorded) or extra (replayed).
    fn pair_by_time(
        &mut self,
        mut rec: Vec<&Event>,
        mut rep: Vec<&Event>,
        window: Window,
        close: impl Fn(&Event, &Event) -> bool,
    ) {
        rec.sort_by_key(|e| e.timestamp);
        rep.sort_by_key(|e| e.timestamp);
        let (mut i, mut j) = (0, 0);
        let (mut left_rec, mut left_rep) = (Vec::new(), Vec::new());
        while i < rec.len() && j < rep.len() {
            if close(rec[i], rep[j]) {
                self.reidentified.push((rec[i].clone(), rep[j].clone()));
                (i, j) = (i + 1, j + 1);
            } else if rec[i].timestamp < rep[j].timestamp {
                left_rec.push(rec[i]);
                i += 1;
            } else {
                left_rep.push(rep[j]);
                j += 1;
            }
        }
        left_rec.extend(&rec[i..]);
        left_rep.extend(&rep[j..]);
        left_rec.retain(|e| window.holds_recorded(e.timestamp));
        left_rep.retain(|e| window.contains(e.timestamp));
        let pairs = left_rec.len().min(left_rep.len());
        for (r, p) in left_rec.iter().zip(&left_rep) {
            self.retimed.push(((*r).clone(), (*p).clone()));
        }
        self.missing.extend(left_rec[pairs..].iter().map(|e| (*e).clone()));
        self.extra.extend(left_rep[pairs..].iter().map(|e| (*e).clone()));
    }
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `+1.250s`, `-300.000s`.
fn signed_seconds(delta: TimeDelta) -> String {
    format!("{:+.3}s", delta.num_milliseconds() as f64 / 1000.0)
}

/// The event's type and the execution (and run) it is about.
fn subject(e: &Event) -> String {
    let mut s = format!("{:<24}", e.kind.name());
    if let (Some(schedule), Some(date)) = (&e.schedule_id, &e.date) {
        s.push_str(&format!(" {schedule}/{date}"));
    }
    if let Some(run) = &e.run_id {
        s.push_str(&format!(" run {run}"));
    }
    s
}

impl fmt::Display for PipelineDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.missing {
            writeln!(
                f,
                "  - {}  at {}: recorded, not replayed",
                subject(e),
                stamp(e.timestamp)
            )?;
        }
        for e in &self.extra {
            writeln!(
                f,
                "  + {}  at {}: replayed, not recorded",
                subject(e),
                stamp(e.timestamp)
            )?;
        }
        for (r, p) in &self.retimed {
            writeln!(
                f,
                "  ~ {}  recorded at {}, replayed at {} ({})",
                subject(r),
                stamp(r.timestamp),
                stamp(p.timestamp),
                signed_seconds(p.timestamp - r.timestamp)
            )?;
        }
        for (r, p) in &self.reidentified {
            writeln!(
                f,
                "  = {}  {} apart, eventId {} recorded, {} replayed: the same decision from a cause named differently (a timer armed in event time rather than on the wall clock, or a config from a folder)",
                subject(r),
                signed_seconds(p.timestamp - r.timestamp),
                r.event_id,
                p.event_id
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut total = PipelineDiff::default();
        let mut changed = 0;
        for (id, d) in &self.pipelines {
            changed += usize::from(d.changed());
            writeln!(
                f,
                "{id}: {}{}",
                counts(d),
                if d.changed() { "" } else { " (unchanged)" }
            )?;
            write!(f, "{d}")?;
            total.same += d.same;
            total.reidentified.extend(d.reidentified.iter().cloned());
            total.missing.extend(d.missing.iter().cloned());
            total.extra.extend(d.extra.iter().cloned());
            total.retimed.extend(d.retimed.iter().cloned());
        }
        if let Some(w) = self.window {
            write!(f, "span {} to {}, ", stamp(w.from), stamp(w.to))?;
        }
        writeln!(
            f,
            "tolerance {}: {} pipelines, {changed} changed; {}",
            signed_seconds(self.tolerance).trim_start_matches('+'),
            self.pipelines.len(),
            counts(&total)
        )
    }
}

fn counts(d: &PipelineDiff) -> String {
    format!(
        "{} same, {} missing, {} extra, {} retimed, {} with another eventId",
        d.same + d.reidentified.len(),
        d.missing.len(),
        d.extra.len(),
        d.retimed.len(),
        d.reidentified.len()
    )
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;
    use crate::core::events::EventType;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_795_000_000 + seconds, 0).unwrap()
    }

    fn event(id: &str, kind: EventType, pipeline: &str, seconds: i64) -> Event {
        Event {
            event_id: id.into(),
            kind,
            category: kind.category(),
            pipeline_id: pipeline.into(),
            schedule_id: Some("stream".into()),
            date: Some("2026-11-22".into()),
            run_id: None,
            attempt: None,
            timestamp: at(seconds),
            message: String::new(),
            detail: Map::new(),
        }
    }

    fn window() -> Window {
        Window::new(at(0), at(1000))
    }

    #[test]
    fn identical_spans_have_no_changes() {
        let events = vec![
            event("a", EventType::CONFIG_ACCEPTED, "gold", 1),
            event("b", EventType::VALIDATION_PASSED, "gold", 2),
        ];
        let d = diff(&events, &events, window(), TimeDelta::seconds(5));
        assert!(!d.changed());
        assert_eq!(d.pipelines["gold"].same, 2);
        assert!(
            d.to_string()
                .contains("gold: 2 same, 0 missing, 0 extra, 0 retimed, 0 with another eventId (unchanged)"),
            "{d}"
        );
    }

    #[test]
    fn missing_extra_and_retimed_are_told_apart_per_pipeline() {
        let recorded = vec![
            event("a", EventType::CONFIG_ACCEPTED, "gold", 1),
            event("b", EventType::SLA_BREACH, "gold", 100),
            event("c", EventType::JOB_TRIGGERED, "gold", 200),
            event("d", EventType::CONFIG_ACCEPTED, "silver", 1),
        ];
        let replayed = vec![
            event("a", EventType::CONFIG_ACCEPTED, "gold", 1),
            event("x", EventType::JOB_TRIGGERED, "gold", 500),
            event("y", EventType::VALIDATION_PASSED, "gold", 490),
            event("d", EventType::CONFIG_ACCEPTED, "silver", 1),
        ];
        let d = diff(&recorded, &replayed, window(), TimeDelta::seconds(5));
        assert!(d.changed());
        let gold = &d.pipelines["gold"];
        assert_eq!(
            gold.missing.iter().map(|e| e.kind).collect::<Vec<_>>(),
            [EventType::SLA_BREACH]
        );
        assert_eq!(
            gold.extra.iter().map(|e| e.kind).collect::<Vec<_>>(),
            [EventType::VALIDATION_PASSED]
        );
        assert_eq!(gold.retimed.len(), 1);
        assert_eq!(
            (gold.retimed[0].0.event_id.as_str(), gold.retimed[0].1.event_id.as_str()),
            ("c", "x")
        );
        assert!(!d.pipelines["silver"].changed());
        let text = d.to_string();
        assert!(text.contains("~ JOB_TRIGGERED"), "{text}");
        assert!(text.contains("(+300.000s)"), "{text}");
        assert!(text.contains("- SLA_BREACH"), "{text}");
        assert!(text.contains("+ VALIDATION_PASSED"), "{text}");
        assert!(text.contains("2 pipelines, 1 changed"), "{text}");
    }

    #[test]
    fn a_new_id_within_the_tolerance_is_the_same_decision() {
        let recorded = vec![event("live", EventType::VALIDATION_EXHAUSTED, "gold", 600)];
        let replayed = vec![event("replay", EventType::VALIDATION_EXHAUSTED, "gold", 599)];
        let d = diff(&recorded, &replayed, window(), TimeDelta::seconds(5));
        assert!(!d.changed(), "{d}");
        assert_eq!(d.pipelines["gold"].reidentified.len(), 1);
        assert!(
            d.to_string()
                .contains("a timer armed in event time rather than on the wall clock"),
            "{d}"
        );
    }

    #[test]
    fn unpaired_events_beyond_the_window_are_left_out() {
        // Recorded a little past the end (the caller widens the recorded span): no partner,
        // but not missing either.
        let recorded = vec![
            event("late", EventType::INPUT_REJECTED, "gold", 1002),
            event("early", EventType::INPUT_REJECTED, "gold", -2),
            event("in", EventType::INPUT_REJECTED, "gold", 10),
        ];
        let replayed = vec![event("in2", EventType::INPUT_REJECTED, "gold", 11)];
        let d = diff(&recorded, &replayed, window(), TimeDelta::seconds(5));
        assert!(!d.changed(), "{d}");
        // The nearest in time pairs up, not the first in order.
        assert_eq!(d.pipelines["gold"].reidentified[0].0.event_id, "in");
        // A span that ends with the log: what the live processor stamped just after its last
        // input still counts.
        let open_ended = Window {
            recorded_to: at(1005),
            ..window()
        };
        let d = diff(&recorded, &replayed, open_ended, TimeDelta::seconds(5));
        assert_eq!(d.pipelines["gold"].missing[0].event_id, "late", "{d}");
    }
}
