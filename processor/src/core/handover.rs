//! A journaled trigger found by a partition's new owner (after a crash, a restart or a
//! hand-over): when it may be requested again.
//!
//! Its call may still be made by the partition's previous owner: a try that outlasted the
//! revocation, a retry's backoff, a process paused and woken. Calling again then would make
//! the call twice. So the new owner requests it again only when:
//! - a report on the run was read: the outcome is known, and nothing is requested (the
//!   runtime forgets the trigger);
//! - the previous executor said it let go: a `released` report naming the deadline of the
//!   very request the journal holds (an older call's release says nothing of a newer one);
//! - the call's deadline has passed (by more than [`CLOCK_SKEW_ALLOWANCE`], as the two
//!   owners' clocks may differ), and the jobs topic has been read up to where it ended then,
//!   so that a report written by the deadline is seen first;
//! - the call never began: its time to begin ([`TriggerRequest::start_by`]) has passed by
//!   the same allowance, and the jobs topic, read up to where it ended then, holds no start
//!   mark of it (a `calling` report naming its deadline). The executor makes no try whose
//!   mark it did not have acknowledged by then, so none can come later: after a crash, the
//!   calls still queued for a slot go out within seconds instead of at their deadlines.
//!
//! A request journaled before deadlines were has none: the jobs topic read up to where it
//! ended at the opening is enough, as before.

use chrono::{DateTime, TimeDelta, Utc};

pub use journaled::{Found, Journaled, Reported, Settled, Step};

use super::lifecycle::{Effect, TriggerRequest};
use super::records::{JobReport, JobStatus};

mod journaled;

/// How far instances' clocks may differ: a new owner waits this much past a call's deadline
/// before it calls again.
pub const CLOCK_SKEW_ALLOWANCE: TimeDelta = TimeDelta::seconds(5);

/// What a journaled trigger waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Nothing more: request it again now.
    Now,
    /// The previous owner's release or the call's deadline (at the time given).
    Until(DateTime<Utc>),
    /// The deadline has passed: the jobs topic has to be read up to where it ends now.
    ReadToEnd,
}

/// A journaled trigger's progress towards being requested again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Waiting {
    /// A `released` report of this very request was read.
    pub released: bool,
    /// A start mark of this very request was read: its call may have begun.
    pub marked: bool,
    /// When (on this owner's clock) the jobs topic's end that the runtime now reads up to
    /// was measured.
    pub end_measured_at: Option<DateTime<Utc>>,
}

impl Waiting {
    /// What `request` still waits for at `now`, its jobs topic read up to the end the
    /// runtime last measured.
    pub fn resume(&self, request: &TriggerRequest, now: DateTime<Utc>) -> Resume {
        let Some(deadline) = request.deadline else {
            return Resume::Now;
        };
        if self.released {
            return Resume::Now;
        }
        // Unmarked, the call is not under way once its time to begin is past; marked (or
        // journaled before marks were), it may be until its deadline.
        let until = match request.start_by {
            Some(start_by) if !self.marked => start_by.min(deadline),
            _ => deadline,
        };
        let after = until.checked_add_signed(CLOCK_SKEW_ALLOWANCE).unwrap_or(until);
        if now < after {
            return Resume::Until(after);
        }
        match self.end_measured_at {
            Some(measured) if measured >= after => Resume::Now,
            _ => Resume::ReadToEnd,
        }
    }
}

/// The field of a `released` report that says (`false`) its call never began: its own
/// executor let it go at its time to begin, and its owner requests it again.
pub const BEGUN: &str = "begun";

/// Whether `report` says its call never began (see [`BEGUN`]).
pub fn never_began(report: &JobReport) -> bool {
    let begun = report.metadata.as_ref().and_then(|m| m.get(BEGUN)?.as_bool());
    report.status == JobStatus::Released && begun == Some(false)
}

/// Whether `report` is the start mark of `request`'s call: a `calling` report of its run
/// naming its deadline.
pub fn marks(report: &JobReport, request: &TriggerRequest) -> bool {
    report.status == JobStatus::Calling
        && report.run_id == request.run_id
        && request.deadline.is_some()
        && named_deadline(report) == request.deadline
}

/// The journal entry to write when `report` is the start mark of the journaled `effect`:
/// the same request without its time to begin, so that an owner that opens the partition
/// after this mark's offset was committed (and never reads the mark) still leaves the call
/// to its deadline. `None`: not its mark.
pub fn journal_marked(report: &JobReport, effect: Effect) -> Option<Effect> {
    let Effect::TriggerJob(mut request) = effect else {
        return None;
    };
    if !marks(report, &request) || request.start_by.is_none() {
        return None;
    }
    request.start_by = None;
    Some(Effect::TriggerJob(request))
}

/// The deadline a report's `metadata.deadline` names.
fn named_deadline(report: &JobReport) -> Option<DateTime<Utc>> {
    let named = report.metadata.as_ref()?.get("deadline")?.as_str()?;
    DateTime::parse_from_rfc3339(named).ok().map(|d| d.with_timezone(&Utc))
}

/// Whether `report` is the release of `request`'s call: a `released` report of its run
/// naming its deadline and carrying its release key (the secret journaled with it; a
/// request journaled before keys were needs only the deadline).
pub fn releases(report: &JobReport, request: &TriggerRequest) -> bool {
    let field = |name: &str| (report.metadata.as_ref()).and_then(|m| m.get(name)?.as_str());
    let named = named_deadline(report);
    let keyed = match &request.release_key {
        Some(key) => field("releaseKey") == Some(key.as_str()),
        None => true,
    };
    report.status == JobStatus::Released
        && report.run_id == request.run_id
        && request.deadline.is_some()
        && named == request.deadline
        && keyed
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::core::config::JobConfig;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn request(deadline: Option<&str>) -> TriggerRequest {
        let config = JobConfig::from_json(crate::core::config::JobKind::Http, &json!({"url": "http://x"})).unwrap();
        TriggerRequest {
            deadline: deadline.map(at),
            ..TriggerRequest::new("p", &crate::core::execution::id("daily", "2026-11-26"), 1, config)
        }
    }

    fn released(run_id: &str, deadline: Option<&str>) -> JobReport {
        crate::core::records::JobRecord {
            pipeline_id: "p".into(),
            schedule_id: "daily".into(),
            date: "2026-11-26".into(),
            run_id: run_id.into(),
            status: JobStatus::Released,
            failure_category: None,
            message: None,
            metadata: deadline.map(|d| json!({ "deadline": d })),
            timestamp: at("2026-11-26T10:00:00Z"),
        }
        .parse()
        .unwrap()
    }

    #[test]
    fn a_call_is_left_to_its_maker_until_its_deadline_and_the_reports_before_it_are_read() {
        let r = request(Some("2026-11-26T10:05:00Z"));
        let mut w = Waiting::default();
        let before = at("2026-11-26T10:04:59Z");
        assert_eq!(w.resume(&r, before), Resume::Until(at("2026-11-26T10:05:05Z")));
        // Past the deadline but within the clocks' allowance: still the old owner's.
        assert_eq!(
            w.resume(&r, at("2026-11-26T10:05:04Z")),
            Resume::Until(at("2026-11-26T10:05:05Z"))
        );
        // Past both: the jobs topic is read up to its end first.
        assert_eq!(w.resume(&r, at("2026-11-26T10:05:05Z")), Resume::ReadToEnd);
        w.end_measured_at = Some(at("2026-11-26T10:05:05Z"));
        assert_eq!(w.resume(&r, at("2026-11-26T10:05:06Z")), Resume::Now);
    }

    #[test]
    fn a_release_of_the_same_request_lets_it_be_requested_at_once() {
        let r = request(Some("2026-11-26T10:05:00Z"));
        let w = Waiting {
            released: true,
            ..Waiting::default()
        };
        assert_eq!(w.resume(&r, at("2026-11-26T10:00:00Z")), Resume::Now);
        assert!(releases(&released(&r.run_id, Some("2026-11-26T10:05:00.000Z")), &r));
        assert!(releases(&released(&r.run_id, Some("2026-11-26T12:05:00+02:00")), &r));
        // As the executor writes it: to the nanosecond.
        let precise = request(Some("2026-11-26T10:05:00.123456789Z"));
        let written = JobReport {
            metadata: Some(
                json!({"deadline": precise.deadline.unwrap().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)}),
            ),
            ..released(&precise.run_id, None)
        };
        assert!(releases(&written, &precise));
        assert!(!releases(
            &released(&precise.run_id, Some("2026-11-26T10:05:00.123Z")),
            &precise
        ));
    }

    /// The run id is public and the deadline can be worked out from JOB_TRIGGERED's time and
    /// the config: a release naming both but not the key journaled with the call (only in
    /// Sluice's changelog) releases nothing, so no writer of the jobs topic can make the
    /// next owner call while the old call may still run.
    #[test]
    fn a_release_forged_from_public_data_releases_nothing() {
        let r = TriggerRequest {
            release_key: Some("4f1c0e7a9b2d".into()),
            ..request(Some("2026-11-26T10:05:00Z"))
        };
        let forged = released(&r.run_id, Some("2026-11-26T10:05:00Z"));
        assert!(!releases(&forged, &r));
        let mut guessed = forged.clone();
        guessed.metadata = Some(json!({"deadline": "2026-11-26T10:05:00Z", "releaseKey": "0000"}));
        assert!(!releases(&guessed, &r));
        let mut real = forged;
        real.metadata = Some(json!({"deadline": "2026-11-26T10:05:00Z", "releaseKey": "4f1c0e7a9b2d"}));
        assert!(releases(&real, &r));
        // Made again (a new call), the request has no key until the runtime journals one.
        assert_eq!(r.made_from(at("2026-11-26T10:10:00Z")).release_key, None);
    }

    #[test]
    fn a_release_of_another_call_releases_nothing() {
        let r = request(Some("2026-11-26T10:05:00Z"));
        // An older call of the same run (re-requested since, with a new deadline).
        assert!(!releases(&released(&r.run_id, Some("2026-11-26T10:01:00Z")), &r));
        assert!(!releases(&released(&r.run_id, None), &r));
        assert!(!releases(&released(&r.run_id, Some("soon")), &r));
        assert!(!releases(
            &released("p.daily.2026-11-26.2", Some("2026-11-26T10:05:00Z")),
            &r
        ));
        let mut succeeded = released(&r.run_id, Some("2026-11-26T10:05:00Z"));
        succeeded.status = JobStatus::Succeeded;
        assert!(!releases(&succeeded, &r), "a report is not a release");
        // A request journaled before deadlines is not released by anything: it needs not be.
        assert!(!releases(
            &released(&r.run_id, Some("2026-11-26T10:05:00Z")),
            &request(None)
        ));
        assert_eq!(
            Waiting::default().resume(&request(None), at("2026-11-26T10:00:00Z")),
            Resume::Now
        );
    }

    /// A call journaled with a time to begin: without its start mark, it is made again
    /// once that time (and the clocks' allowance) has passed and the jobs topic is read up
    /// to where it ended then, minutes before its deadline; a mark read on the way sends it
    /// back to waiting for the deadline.
    #[test]
    fn a_call_that_never_began_is_made_again_soon_after_its_time_to_begin() {
        let r = TriggerRequest {
            start_by: Some(at("2026-11-26T10:00:30Z")),
            ..request(Some("2026-11-26T10:05:00Z"))
        };
        let mut w = Waiting::default();
        assert_eq!(
            w.resume(&r, at("2026-11-26T10:00:10Z")),
            Resume::Until(at("2026-11-26T10:00:35Z"))
        );
        assert_eq!(w.resume(&r, at("2026-11-26T10:00:35Z")), Resume::ReadToEnd);
        // An end measured before the time to begin had passed may lack a mark written since.
        w.end_measured_at = Some(at("2026-11-26T10:00:34Z"));
        assert_eq!(w.resume(&r, at("2026-11-26T10:00:36Z")), Resume::ReadToEnd);
        w.end_measured_at = Some(at("2026-11-26T10:00:36Z"));
        assert_eq!(w.resume(&r, at("2026-11-26T10:00:37Z")), Resume::Now);
        // Its mark read up to there: the call may be under way until its deadline.
        w.marked = true;
        assert_eq!(
            w.resume(&r, at("2026-11-26T10:00:37Z")),
            Resume::Until(at("2026-11-26T10:05:05Z"))
        );
        assert_eq!(w.resume(&r, at("2026-11-26T10:05:05Z")), Resume::ReadToEnd);
        w.end_measured_at = Some(at("2026-11-26T10:05:05Z"));
        assert_eq!(w.resume(&r, at("2026-11-26T10:05:06Z")), Resume::Now);

        let mark = |run_id: &str, deadline: &str| JobReport {
            status: JobStatus::Calling,
            ..released(run_id, Some(deadline))
        };
        assert!(marks(&mark(&r.run_id, "2026-11-26T10:05:00Z"), &r));
        assert!(
            !marks(&mark(&r.run_id, "2026-11-26T10:01:00Z"), &r),
            "an older call's mark"
        );
        assert!(!marks(&mark("p.daily.2026-11-26.2", "2026-11-26T10:05:00Z"), &r));
        assert!(!marks(&released(&r.run_id, Some("2026-11-26T10:05:00Z")), &r));
        // Read by an owner, the mark is kept in the journal (an owner opening the partition
        // after its offset was committed never reads it): the call is left to its deadline.
        let journaled = Effect::TriggerJob(r.clone());
        let kept = journal_marked(&mark(&r.run_id, "2026-11-26T10:05:00Z"), journaled.clone());
        let Some(Effect::TriggerJob(kept)) = kept else {
            panic!("the mark is journaled: {kept:?}")
        };
        assert_eq!((kept.start_by, kept.deadline), (None, r.deadline));
        assert_eq!(
            Waiting::default().resume(&kept, at("2026-11-26T10:00:40Z")),
            Resume::Until(at("2026-11-26T10:05:05Z"))
        );
        assert!(journal_marked(&mark(&r.run_id, "2026-11-26T10:01:00Z"), journaled).is_none());
        // Made again, a request has a new time to begin.
        let made = r.made_from(at("2026-11-26T10:10:00Z"));
        assert_eq!(made.start_by, Some(at("2026-11-26T10:10:30Z")));
    }

    /// One hand-over, in whole seconds of true time from the request: what the previous
    /// owner's executor did with the call, and how the new owner saw it.
    #[derive(Debug, Clone)]
    struct Handover {
        /// The call's deadline, on the old owner's clock.
        deadline: i64,
        /// The call's time to begin, on the old owner's clock (`None`: journaled before
        /// start marks were), and how long its mark takes to be acknowledged.
        start_by: Option<i64>,
        mark_lag: i64,
        /// Each clock's error against true time (the two differ by at most the allowance).
        old_skew: i64,
        new_skew: i64,
        /// The old executor's tries: when each would start (after the previous one's end)
        /// and how long it would take; the last one answers (success or failure).
        tries: Vec<(i64, i64)>,
        /// When the old owner lost the partition (revoked, releasing its call) or died.
        lost_at: i64,
        crashed: bool,
        /// How long a `released` report takes to be read by the new owner.
        read_lag: i64,
    }

    /// What the old executor made of the call, by the executor's rules: no try starts
    /// after the deadline, one running past it is cut there; the tries spent, the deadline
    /// passed or a try succeeded, it reports the outcome; revoked, it finishes the try under
    /// way and says it let go (a `released` report); crashed, it stops. Returns the tries
    /// made (true-time intervals), when an outcome or a release was written, and when
    /// the start mark landed. With a time to begin, the first try waits for its mark (sent
    /// once it holds its slot); a mark not acknowledged by then makes no call and lets it go.
    fn old_executor(h: &Handover) -> Executed {
        let deadline = h.deadline - h.old_skew; // in true time
        let (mut made, mut at, mut mark) = (Vec::new(), 0, None);
        let stopped = |made, at: i64, mark| match h.crashed {
            true => (made, None, None, mark),
            false => (made, None, Some(at.max(h.lost_at)), mark),
        };
        for (i, (gap, took)) in h.tries.iter().enumerate() {
            let mut start = at + gap;
            if start >= h.lost_at {
                return stopped(made, at, mark);
            }
            if let (0, Some(start_by)) = (i, h.start_by) {
                // Sent before any crash, the mark lands even if its sender dies first.
                let acked = start + h.mark_lag;
                mark = Some(acked);
                if h.crashed && h.lost_at <= acked {
                    return (made, None, None, mark);
                }
                if acked > start_by - h.old_skew {
                    return (made, None, Some(acked.max(h.lost_at)), mark);
                }
                start = acked;
                if start >= h.lost_at {
                    return stopped(made, at, mark);
                }
            }
            if start > deadline {
                return (made, Some(at.max(deadline)), None, mark);
            }
            let end = (start + took).min(deadline);
            if h.crashed && h.lost_at < end {
                made.push((start, h.lost_at));
                return (made, None, None, mark);
            }
            made.push((start, end));
            at = end;
            let last = i + 1 == h.tries.len();
            if last || start + took > deadline {
                return (made, Some(end), None, mark);
            }
            if end >= h.lost_at {
                return stopped(made, end, mark);
            }
        }
        unreachable!("the last try ends the call")
    }

    /// When the new owner, opened as the old one lost the partition and following the rule
    /// second by second, calls again (`None`: it saw the outcome and never does).
    fn new_owner(h: &Handover, outcome: Option<i64>, released: Option<i64>, mark: Option<i64>) -> Option<i64> {
        let t0 = at("2026-11-26T10:00:00Z");
        let r = request(None);
        let r = TriggerRequest {
            deadline: Some(t0 + TimeDelta::seconds(h.deadline)),
            start_by: h.start_by.map(|s| t0 + TimeDelta::seconds(s)),
            ..r
        };
        let mut waiting = Waiting::default();
        // Reports the new owner has read: written by the end it measured (or read since).
        let mut read_up_to = h.lost_at;
        for t in h.lost_at..h.lost_at + 2_000 {
            if outcome.is_some_and(|w| w <= read_up_to) {
                return None;
            }
            waiting.released = released.is_some_and(|w| w + h.read_lag <= t);
            waiting.marked = mark.is_some_and(|m| m <= read_up_to || m + h.read_lag <= t);
            let now = t0 + TimeDelta::seconds(t + h.new_skew);
            match waiting.resume(&r, now) {
                Resume::Now => return Some(t),
                Resume::Until(_) => {}
                Resume::ReadToEnd => {
                    read_up_to = t;
                    waiting.end_measured_at = Some(now);
                    if outcome.is_some_and(|w| w <= read_up_to) {
                        return None;
                    }
                }
            }
        }
        panic!("the new owner never decided: {h:?}")
    }

    /// The old executor's tries, outcome, release and start mark (see [`old_executor`]).
    type Executed = (Vec<(i64, i64)>, Option<i64>, Option<i64>, Option<i64>);

    fn handover() -> impl Strategy<Value = Handover> {
        let half = CLOCK_SKEW_ALLOWANCE.num_seconds() / 2;
        (
            30i64..400,
            prop::option::of(1i64..60),
            0i64..20,
            -half..=half,
            -half..=half,
            prop::collection::vec((0i64..60, 1i64..120), 1..5),
            0i64..500,
            any::<bool>(),
            0i64..30,
        )
            .prop_map(
                |(deadline, start_by, mark_lag, old_skew, new_skew, tries, lost_at, crashed, read_lag)| Handover {
                    deadline,
                    start_by,
                    mark_lag,
                    old_skew,
                    new_skew,
                    tries,
                    lost_at,
                    crashed,
                    read_lag,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        /// Whatever the old owner's executor did (tries cut at the deadline, a revocation
        /// that lets the try under way finish, a crash, an outcome) and however the two
        /// clocks differ within the allowance, the new owner calls again only once no try of
        /// the old one can be under way or start, and never once the call has an outcome.
        #[test]
        fn a_call_handed_over_is_made_again_only_when_the_old_one_cannot_be(h in handover()) {
            let (made, outcome, released, mark) = old_executor(&h);
            if let Some(t) = new_owner(&h, outcome, released, mark) {
                for (start, end) in &made {
                    prop_assert!(*end <= t, "the new call at {t} overlaps the old try {start}..{end}: {h:?}");
                }
                prop_assert!(outcome.is_none(), "called again after an outcome written at {outcome:?}: {h:?}");
            }
        }
    }

    #[test]
    fn a_calls_budget_covers_every_try_and_backoff() {
        let r = request(None);
        // Default policy: 4 tries of 30 s, backoffs 30 + 60 + 120 s, 10 s for a slot.
        assert_eq!(r.call_budget(), std::time::Duration::from_secs(4 * 30 + 210 + 10));
        let made = r.made_from(at("2026-11-26T10:00:00Z"));
        assert_eq!(made.deadline, Some(at("2026-11-26T10:05:40Z")));
    }
}
