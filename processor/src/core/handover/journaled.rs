//! The journaled triggers an owner found when it opened its partitions, from their finding
//! to their end: requested again, forgotten, or left to a newer owner. The rules of when are
//! [`super::Waiting`]'s; this is their bookkeeping, which the runtime only drives: it says
//! what it read (reports, releases, where a jobs topic ends) and what it knows when a
//! trigger falls due (the assignment, the changelog's fences, the run's state).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{marks, releases, Resume, Waiting};
use crate::core::execution::RunId;
use crate::core::lifecycle::{Effect, TriggerRequest};
use crate::core::partitioning::PartitionId;
use crate::core::records::{JobReport, JobStatus};

/// One journaled trigger on its way to being settled.
#[derive(Debug, Clone)]
pub struct Found {
    partition: PartitionId,
    request: Box<TriggerRequest>,
    /// Where the partition's jobs topic ended when the store was opened (or, once the
    /// call's deadline passed, then): every report written before is read once the
    /// consumer is past it.
    jobs_end: i64,
    waiting: Waiting,
}

impl Found {
    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    pub fn request(&self) -> &TriggerRequest {
        &self.request
    }
}

/// What a report read on a partition means for its journaled triggers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// The previous executor let a call go; `found`: it was the call journaled here, which
    /// may now be requested again at once.
    Released { found: bool },
    /// A call's start mark: `found`, it was the call journaled here, which may be under
    /// way until its deadline.
    Marked { found: bool },
    /// The run's outcome is known: its trigger leaves the journal (the runtime deletes the
    /// entry in the report's batch) and is never requested again.
    Answered,
}

/// What a journaled trigger needs next from the runtime.
#[derive(Debug, Clone)]
pub enum Step {
    /// The call's deadline (or, unmarked, its time to begin) has passed: the runtime
    /// measures where `partition`'s jobs topic ends now and says so ([`Journaled::measured`]);
    /// the trigger then waits until the topic is read up to there, so that a report (or a
    /// mark) written by then is seen first.
    MeasureJobsEnd { partition: PartitionId, run_id: RunId },
    /// It waits for nothing more: the runtime settles it ([`Journaled::settle`]).
    Due(Found),
}

/// How a due trigger was settled.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// Its partition is no longer this owner's: its new owner settles it.
    LeftToNewOwner,
    /// The changelog could not be read to look for a newer owner: it waits (it is never
    /// requested blind).
    Waits,
    /// A newer owner fenced the partition: the runtime gives it up, requesting nothing.
    Fenced,
    /// Its run still awaits a report: requested again, same idempotency key, with a new
    /// deadline that the runtime journals before the call (a later owner then leaves the
    /// call to this one until that deadline).
    Again(Box<Effect>),
    /// Its run no longer awaits it (the report came, or the run moved on): its journal
    /// entry is deleted with the next batch ([`Journaled::take_stale`]).
    Forgotten,
}

/// The journaled triggers of the partitions an owner holds.
#[derive(Debug, Default)]
pub struct Journaled {
    found: Vec<Found>,
    /// Journal entries to delete with the next batch, by partition.
    stale: BTreeMap<PartitionId, Vec<RunId>>,
}

impl Journaled {
    /// The triggers journaled in partition `partition`'s store, found when it was opened
    /// with its jobs topic ending at `jobs_end`. Returns those whose call the previous owner
    /// may still be making at `now`, with how long they are left to it.
    pub fn found(
        &mut self,
        partition: PartitionId,
        journaled: impl IntoIterator<Item = Effect>,
        jobs_end: i64,
        now: DateTime<Utc>,
    ) -> Vec<(RunId, DateTime<Utc>)> {
        let mut left = Vec::new();
        for effect in journaled {
            let request = Box::new(effect.request().clone());
            if let Resume::Until(at) = Waiting::default().resume(&request, now) {
                left.push((request.run_id.clone(), at));
            }
            self.found.push(Found {
                partition,
                request,
                jobs_end,
                waiting: Waiting::default(),
            });
        }
        left
    }

    /// A trigger journaled by this owner whose own executor let its call go before it
    /// began (see [`super::never_began`]): settled like a released one, requested again at once
    /// while its run still awaits it.
    pub fn let_go_unbegun(&mut self, partition: PartitionId, journaled: Effect) {
        self.found.push(Found {
            partition,
            request: Box::new(journaled.request().clone()),
            jobs_end: 0,
            waiting: Waiting {
                released: true,
                ..Waiting::default()
            },
        });
    }

    /// Partition `partition` is no longer this owner's: its triggers and stale entries are
    /// its next owner's.
    pub fn closed(&mut self, partition: PartitionId) {
        self.found.retain(|f| f.partition != partition);
        self.stale.remove(&partition);
    }

    /// A report on the jobs topic of `partition` was read.
    pub fn reported(&mut self, partition: PartitionId, report: &JobReport) -> Reported {
        // Notes `fact` on the trigger of `partition` that `is_of` names; whether there is one.
        let mut note = |is_of: fn(&JobReport, &TriggerRequest) -> bool, fact: fn(&mut Waiting)| {
            let found = (self.found.iter_mut()).find(|f| f.partition == partition && is_of(report, &f.request));
            found.map(|f| fact(&mut f.waiting)).is_some()
        };
        match report.status {
            JobStatus::Released => {
                let found = note(releases, |w| w.released = true);
                return Reported::Released { found };
            }
            JobStatus::Calling => {
                let found = note(marks, |w| w.marked = true);
                return Reported::Marked { found };
            }
            _ => {}
        }
        self.found
            .retain(|f| !(f.partition == partition && f.request.run_id == report.run_id));
        Reported::Answered
    }

    /// Every trigger's next step at `now`. `read_to(partition, end)`: whether the
    /// partition's jobs topic has been read up to `end`. Due triggers leave the set (the
    /// runtime settles each); the others stay.
    pub fn poll(&mut self, now: DateTime<Utc>, read_to: impl Fn(PartitionId, i64) -> bool) -> Vec<Step> {
        let mut steps = Vec::new();
        for found in std::mem::take(&mut self.found) {
            if !read_to(found.partition, found.jobs_end) {
                self.found.push(found);
                continue;
            }
            match found.waiting.resume(&found.request, now) {
                Resume::Now => steps.push(Step::Due(found)),
                Resume::Until(_) => self.found.push(found),
                Resume::ReadToEnd => {
                    steps.push(Step::MeasureJobsEnd {
                        partition: found.partition,
                        run_id: found.request.run_id.clone(),
                    });
                    self.found.push(found);
                }
            }
        }
        steps
    }

    /// Where `partition`'s jobs topic ends, measured at `now` for `run_id`'s trigger after
    /// its deadline or its time to begin: it waits until the topic is read up to there.
    pub fn measured(&mut self, partition: PartitionId, run_id: &str, end: i64, now: DateTime<Utc>) {
        for f in &mut self.found {
            if f.partition == partition && f.request.run_id == run_id {
                f.jobs_end = end;
                f.waiting.end_measured_at = Some(now);
            }
        }
    }

    /// Settles a due trigger at `now`, asking only what it needs, in the rules' order: is the
    /// partition still assigned; has a newer owner fenced it (`None`: the changelog could not
    /// be read); does the run still await the trigger.
    pub fn settle<E>(
        &mut self,
        due: Found,
        now: DateTime<Utc>,
        assigned: bool,
        fenced: impl FnOnce() -> Option<bool>,
        awaited: impl FnOnce(&TriggerRequest) -> Result<bool, E>,
    ) -> Result<Settled, E> {
        if !assigned {
            return Ok(Settled::LeftToNewOwner);
        }
        match fenced() {
            Some(false) => {}
            None => {
                self.found.push(due);
                return Ok(Settled::Waits);
            }
            Some(true) => return Ok(Settled::Fenced),
        }
        if awaited(&due.request)? {
            return Ok(Settled::Again(Box::new(Effect::TriggerJob(due.request.made_from(now)))));
        }
        (self.stale.entry(due.partition).or_default()).push(due.request.run_id);
        Ok(Settled::Forgotten)
    }

    /// The journal entries to delete with the next batch, by partition.
    pub fn take_stale(&mut self) -> BTreeMap<PartitionId, Vec<RunId>> {
        std::mem::take(&mut self.stale)
    }

    /// No trigger waits.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use chrono::TimeDelta;
    use serde_json::json;

    use super::*;
    use crate::core::config::{JobConfig, JobKind};
    use crate::core::handover::CLOCK_SKEW_ALLOWANCE;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    const P0: PartitionId = PartitionId::new(0);
    const P1: PartitionId = PartitionId::new(1);
    const OPENED: &str = "2026-11-26T10:00:00Z";
    const DEADLINE: &str = "2026-11-26T10:05:00Z";

    fn trigger(run: u32, deadline: Option<&str>) -> Effect {
        let config = JobConfig::from_json(JobKind::Http, &json!({"url": "http://x"})).unwrap();
        Effect::TriggerJob(TriggerRequest {
            deadline: deadline.map(at),
            ..TriggerRequest::new("p", &crate::core::execution::id("daily", "2026-11-26"), run, config)
        })
    }

    fn run_id(run: u32) -> RunId {
        trigger(run, None).request().run_id.clone()
    }

    fn report(run: u32, status: JobStatus, deadline: Option<&str>) -> JobReport {
        crate::core::records::JobRecord {
            pipeline_id: "p".into(),
            schedule_id: "daily".into(),
            date: "2026-11-26".into(),
            run_id: run_id(run),
            status,
            failure_category: None,
            message: None,
            metadata: deadline.map(|d| json!({ "deadline": d })),
            timestamp: at(OPENED),
        }
        .parse()
        .unwrap()
    }

    /// Partition 0 opened with one trigger journaled (`deadline`), its jobs topic ending at 10.
    fn opened(deadline: Option<&str>) -> Journaled {
        let mut j = Journaled::default();
        j.found(P0, [trigger(1, deadline)], 10, at(OPENED));
        j
    }

    fn due(steps: Vec<Step>) -> Vec<Found> {
        (steps.into_iter())
            .filter_map(|s| match s {
                Step::Due(f) => Some(f),
                Step::MeasureJobsEnd { .. } => None,
            })
            .collect()
    }

    fn settle(j: &mut Journaled, found: Found, assigned: bool, fenced: Option<bool>, awaited: bool) -> Settled {
        j.settle(found, at(OPENED), assigned, || fenced, |_| Ok::<_, Infallible>(awaited))
            .unwrap()
    }

    #[test]
    fn a_trigger_is_left_to_the_previous_owner_until_its_deadline_and_the_clocks_allowance() {
        let mut j = Journaled::default();
        let left = j.found(P0, [trigger(1, Some(DEADLINE)), trigger(2, None)], 10, at(OPENED));
        assert_eq!(left, vec![(run_id(1), at(DEADLINE) + CLOCK_SKEW_ALLOWANCE)]);
        let steps = j.poll(at(OPENED), |_, _| true);
        let due = due(steps);
        assert_eq!(due.len(), 1, "the trigger journaled without a deadline is due at once");
        assert_eq!(due[0].request().run_id, run_id(2));
        assert!(!j.is_empty(), "the other waits");
    }

    #[test]
    fn a_trigger_waits_until_its_jobs_topic_is_read_to_where_it_ended_at_the_opening() {
        let mut j = opened(None);
        let asked = std::cell::RefCell::new(Vec::new());
        assert!(j
            .poll(at(OPENED), |p, end| {
                asked.borrow_mut().push((p, end));
                false
            })
            .is_empty());
        assert_eq!(asked.into_inner(), vec![(P0, 10)]);
        assert_eq!(due(j.poll(at(OPENED), |_, end| end <= 10)).len(), 1);
        assert!(j.is_empty());
    }

    #[test]
    fn past_its_deadline_the_jobs_topic_is_measured_again_and_read_to_there_first() {
        let mut j = opened(Some(DEADLINE));
        let later = at(DEADLINE) + CLOCK_SKEW_ALLOWANCE;
        let steps = j.poll(later, |_, _| true);
        assert!(
            matches!(&steps[..], [Step::MeasureJobsEnd { partition: P0, run_id: id }] if *id == run_id(1)),
            "{steps:?}"
        );
        // Not measured (the broker did not answer): it asks again.
        assert!(matches!(&j.poll(later, |_, _| true)[..], [Step::MeasureJobsEnd { .. }]));
        j.measured(P0, &run_id(1), 25, later);
        assert!(j.poll(later, |_, end| end <= 10).is_empty(), "read to 10 only");
        assert_eq!(due(j.poll(later, |_, end| end <= 25)).len(), 1);
    }

    /// A call with a time to begin and no start mark is due once that time has passed and
    /// the jobs topic is read to where it ended then; one whose mark is read waits for its
    /// deadline; one this owner's executor let go before it began is due at once.
    #[test]
    fn a_start_mark_leaves_a_call_to_its_deadline_and_an_unbegun_one_is_due_soon() {
        let start_by = at(OPENED) + TimeDelta::seconds(30);
        let with_start = |run| match trigger(run, Some(DEADLINE)) {
            Effect::TriggerJob(r) => Effect::TriggerJob(TriggerRequest {
                start_by: Some(start_by),
                ..r
            }),
            other => other,
        };
        let mut j = Journaled::default();
        assert_eq!(
            j.found(P0, [with_start(1), with_start(2)], 10, at(OPENED)),
            vec![
                (run_id(1), start_by + CLOCK_SKEW_ALLOWANCE),
                (run_id(2), start_by + CLOCK_SKEW_ALLOWANCE)
            ]
        );
        let mut mark = report(2, JobStatus::Calling, Some(DEADLINE));
        assert_eq!(j.reported(P0, &mark), Reported::Marked { found: true });
        mark.run_id = run_id(3);
        assert_eq!(j.reported(P0, &mark), Reported::Marked { found: false });
        let later = start_by + CLOCK_SKEW_ALLOWANCE;
        let steps = j.poll(later, |_, _| true);
        assert!(
            matches!(&steps[..], [Step::MeasureJobsEnd { run_id: id, .. }] if *id == run_id(1)),
            "{steps:?}"
        );
        j.measured(P0, &run_id(1), 12, later);
        let made = due(j.poll(later, |_, end| end <= 12));
        assert_eq!(
            made.iter().map(|f| f.request().run_id.clone()).collect::<Vec<_>>(),
            vec![run_id(1)]
        );
        assert!(
            due(j.poll(later, |_, _| true)).is_empty(),
            "the marked call waits for its deadline"
        );
        // An owner's own executor let a call go before it began: due at once.
        let mut own = Journaled::default();
        own.let_go_unbegun(P0, with_start(4));
        assert_eq!(due(own.poll(at(OPENED), |_, _| true)).len(), 1);
    }

    #[test]
    fn a_release_of_the_journaled_call_makes_it_due_at_once() {
        let mut j = opened(Some(DEADLINE));
        let older = report(1, JobStatus::Released, Some("2026-11-26T10:01:00Z"));
        assert_eq!(j.reported(P0, &older), Reported::Released { found: false });
        assert!(j.poll(at(OPENED), |_, _| true).is_empty());
        let other_partition = report(1, JobStatus::Released, Some(DEADLINE));
        assert_eq!(j.reported(P1, &other_partition), Reported::Released { found: false });
        assert_eq!(j.reported(P0, &other_partition), Reported::Released { found: true });
        assert_eq!(due(j.poll(at(OPENED), |_, _| true)).len(), 1);
    }

    #[test]
    fn a_report_forgets_the_trigger_for_good() {
        let mut j = opened(Some(DEADLINE));
        assert_eq!(
            j.reported(P0, &report(1, JobStatus::Succeeded, None)),
            Reported::Answered
        );
        assert!(j.is_empty());
        let much_later = at(DEADLINE) + TimeDelta::hours(1);
        assert!(j.poll(much_later, |_, _| true).is_empty());
    }

    #[test]
    fn a_due_trigger_of_a_partition_no_longer_assigned_is_left_to_its_new_owner_unasked() {
        let mut j = opened(None);
        let found = due(j.poll(at(OPENED), |_, _| true)).remove(0);
        let settled = j.settle(
            found,
            at(OPENED),
            false,
            || panic!("the changelog is not read for a partition not held"),
            |_| -> Result<bool, Infallible> { panic!("the store is not read either") },
        );
        assert_eq!(settled, Ok(Settled::LeftToNewOwner));
        assert!(j.is_empty() && j.take_stale().is_empty());
    }

    #[test]
    fn a_due_trigger_waits_while_the_changelog_cannot_be_read() {
        let mut j = opened(None);
        let found = due(j.poll(at(OPENED), |_, _| true)).remove(0);
        assert_eq!(settle(&mut j, found, true, None, true), Settled::Waits);
        assert_eq!(due(j.poll(at(OPENED), |_, _| true)).len(), 1, "asked again");
    }

    #[test]
    fn a_newer_fence_gives_the_partition_up_and_requests_nothing() {
        let mut j = opened(None);
        let found = due(j.poll(at(OPENED), |_, _| true)).remove(0);
        assert_eq!(settle(&mut j, found, true, Some(true), true), Settled::Fenced);
        assert!(j.is_empty() && j.take_stale().is_empty());
    }

    #[test]
    fn a_trigger_its_run_still_awaits_is_requested_again_with_the_same_key_and_a_new_deadline() {
        let mut j = opened(Some(DEADLINE));
        j.reported(P0, &report(1, JobStatus::Released, Some(DEADLINE)));
        let found = due(j.poll(at(OPENED), |_, _| true)).remove(0);
        let now = at(OPENED) + TimeDelta::minutes(1);
        let settled = j.settle(found, now, true, || Some(false), |_| Ok::<_, Infallible>(true));
        let Ok(Settled::Again(again)) = settled else {
            panic!("{settled:?}")
        };
        let Effect::TriggerJob(again) = *again else {
            panic!("{again:?}")
        };
        let journaled = trigger(1, Some(DEADLINE));
        assert_eq!(again.run_id, journaled.request().run_id, "the same idempotency key");
        assert_eq!(again.deadline, journaled.request().clone().made_from(now).deadline);
        assert!(again.deadline > Some(now));
        assert!(j.is_empty());
    }

    #[test]
    fn a_trigger_its_run_no_longer_awaits_is_forgotten_and_its_entry_deleted_with_the_next_batch() {
        let mut j = opened(None);
        let found = due(j.poll(at(OPENED), |_, _| true)).remove(0);
        assert_eq!(settle(&mut j, found, true, Some(false), false), Settled::Forgotten);
        assert_eq!(j.take_stale(), BTreeMap::from([(P0, vec![run_id(1)])]));
        assert!(j.take_stale().is_empty(), "taken once");
    }

    #[test]
    fn a_closed_partition_takes_its_triggers_and_stale_entries_with_it() {
        let mut j = Journaled::default();
        j.found(P0, [trigger(1, None), trigger(2, None)], 10, at(OPENED));
        j.found(P1, [trigger(3, Some(DEADLINE))], 10, at(OPENED));
        let mut due = due(j.poll(at(OPENED), |_, _| true));
        settle(&mut j, due.remove(0), true, Some(false), false);
        j.closed(P0);
        assert!(j.take_stale().is_empty());
        assert!(!j.is_empty(), "partition 1's trigger stays");
        j.closed(P1);
        assert!(j.is_empty());
    }
}
