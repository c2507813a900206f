//! Replay in event time: the decider run again over recorded inputs, with the clock following
//! the records' timestamps and timers firing as event time passes them.
//!
//! Nothing leaves a replay but its events. Effects are not carried out (job outcomes come
//! from the recorded job reports, like any other input) and records the decider would
//! publish to Sluice's own inputs (dependency sensors, subscriptions) are dropped: the ones
//! the live processor published are in the recorded input already. The same inputs in the
//! same order always give the same events, byte for byte.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::apply::{decide_within, Unfit};
use super::events::Event;
use super::execution::RunId;
use super::lifecycle::{Context, Decision, Effect, Input, Needs, PipelineState, Settings, StateChange};
use super::limits::OverLimit;
use super::output::HostError;
use super::partitioning::PartitionId;
use super::timers::{timer_origin, TimerIndex};
use crate::core::ids::PipelineId;

/// Measures a decision's records for a pipeline against the limits, given its state before
/// the decision (none: not stored yet): `Ok(Err(reason))` when one is over (see
/// [`crate::core::apply`]), `Err` when it cannot be measured. A replay is given the live
/// processor's, so that it rejects what the processor rejected.
pub type Fit = Box<dyn FnMut(&str, Option<&PipelineState>, &Decision) -> Result<Result<(), OverLimit>, HostError>>;

/// An input for which no decision could be applied: even its rejection was over a limit, or
/// its decision could not be measured. The live processor stopped there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pipeline {pipeline}: no decision on {origin} could be applied: {reason}")]
pub struct Unapplied {
    pub pipeline: PipelineId,
    pub origin: String,
    pub reason: String,
}

/// The decider with every pipeline's state and pending timers, kept in memory: decisions are
/// taken within the limits as the live processor takes them ([`decide_within`]), applied
/// (state put or deleted, timers set or cancelled), and due timers fired.
///
/// [`Replay`] drives it in event time; the lifecycle tests' simulator drives it by hand. What
/// a decision asks of the world (events, effects, records, a dead letter) is the caller's.
pub struct Engine {
    pub settings: Settings,
    /// The time decisions are taken at. [`Engine::advance`] only moves it forward; a caller
    /// that sets it takes on the decider's contract (time never goes backwards).
    pub now: DateTime<Utc>,
    pub states: BTreeMap<PipelineId, PipelineState>,
    /// Pending timers, named by (partition, pipeline, kind).
    pub timers: TimerIndex,
    /// Measures decisions against the limits; none: every decision fits.
    pub fit: Option<Fit>,
    /// Decide from states read in part, as the store reads them (see
    /// [`crate::core::lifecycle::Executions`]), deciding again from the whole state when a
    /// decision asks for more: what that costs, and that it changes nothing, is tested here.
    pub partial_reads: bool,
    /// With `partial_reads`, whether the days a decision is likely to need are read
    /// ([`Needs`]); if not, only the live executions are.
    pub guess_needs: bool,
    /// Of the decisions made from such states, how many were made again from the whole state.
    pub redecided: usize,
    /// Of the decisions made from such states, how many left some execution out.
    pub decided_partially: usize,
}

impl Engine {
    pub fn new(settings: Settings, now: DateTime<Utc>) -> Self {
        Engine {
            settings,
            now,
            states: BTreeMap::new(),
            timers: TimerIndex::default(),
            fit: None,
            partial_reads: false,
            guess_needs: true,
            redecided: 0,
            decided_partially: 0,
        }
    }

    /// Decides `input` for `pipeline` (on `partition`) at `now`, named `origin`, within the
    /// limits, and applies the decision to the states and timers. Returns the decision.
    pub fn handle(
        &mut self,
        partition: PartitionId,
        pipeline: &PipelineId,
        input: &Input,
        origin: &str,
    ) -> Result<Decision, Unapplied> {
        let stored = self.states.get(pipeline);
        let state = stored.cloned().unwrap_or_default();
        // Read in part only when asked to: a clone of the state otherwise saved.
        let mut partial = None;
        if self.partial_reads {
            let needs = Needs::of(input, self.now);
            let spans = match (self.guess_needs, needs.spans()) {
                (true, None) => None,
                (true, Some(spans)) => Some(spans),
                (false, _) => Some(&[][..]),
            };
            if let Some(spans) = spans {
                let mut read = state.clone();
                read.read_in_part(spans);
                partial = Some(read);
            }
        }
        let ctx = Context {
            now: self.now,
            origin,
            settings: self.settings,
        };
        let unapplied = |reason| Unapplied {
            pipeline: pipeline.into(),
            origin: origin.to_string(),
            reason,
        };
        let fit = &mut self.fit;
        // Measured against the state it was decided from.
        let mut decide_from = |from: &PipelineState, read: Option<&PipelineState>| {
            let measure = |decision: &Decision| fit.as_mut().map_or(Ok(Ok(())), |fit| fit(pipeline, read, decision));
            decide_within(from, pipeline, input, ctx, || origin.to_string(), measure)
        };
        let mut decided = match &partial {
            None => decide_from(&state, stored),
            Some(partial) => {
                self.decided_partially += 1;
                decide_from(partial, stored.map(|_| partial))
            }
        };
        if let Err(Unfit::Partial) = decided {
            self.redecided += 1;
            decided = decide_from(&state, stored);
        }
        let decision = match decided {
            Ok((decision, ())) => decision,
            Err(Unfit::Failed(reason)) => return Err(unapplied(format!("it could not be measured: {reason}"))),
            Err(Unfit::EvenItsRejection { reason }) => {
                return Err(unapplied(format!("even its rejection is over a limit: {reason}")))
            }
            // A whole state has nothing unloaded: never.
            Err(Unfit::Partial) => return Err(unapplied("its state was read in part".to_string())),
        };
        self.apply(partition, pipeline, &decision);
        Ok(decision)
    }

    fn apply(&mut self, partition: PartitionId, pipeline: &str, decision: &Decision) {
        match &decision.state {
            StateChange::Unchanged => {}
            StateChange::Put(state) => {
                let mut state = (**state).clone();
                // What a read in part left out is unchanged: taken back from the state read.
                if let Some(read) = self.states.get(pipeline).filter(|_| state.is_partial()) {
                    state.fill(read);
                }
                self.states.insert(pipeline.into(), state);
            }
            StateChange::Delete => {
                self.states.remove(pipeline);
            }
        }
        self.timers.apply(partition, pipeline, &decision.timers);
    }

    /// Moves `now` forward to `to`, firing every timer due by then, earliest first, each at
    /// its own due time and under its [`timer_origin`] (a timer armed by another fires too if
    /// it is due by `to`). `each` receives every fired timer's decision, in order.
    pub fn advance(&mut self, to: DateTime<Utc>, mut each: impl FnMut(Decision)) -> Result<(), Unapplied> {
        while let Some(timer) = self.timers.pop_due(to, 1).pop() {
            self.now = self.now.max(timer.at);
            let origin = timer_origin(&timer.pipeline, &timer.kind, timer.at);
            let input = Input::TimerFired(timer.kind);
            each(self.handle(timer.partition, &timer.pipeline, &input, &origin)?);
        }
        self.now = self.now.max(to);
        Ok(())
    }
}

/// The decider, its state and its timers, driven in event time.
pub struct Replay {
    engine: Engine,
    /// Every trigger the replay requested, and whether a recorded report answered it.
    triggers: BTreeMap<RunId, bool>,
    counts: Counts,
}

/// What a replay went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub inputs: u64,
    pub timers_fired: u64,
    /// Effects the live processor would have carried out (triggers, status checks).
    pub effects_skipped: u64,
    /// Records it would have published to Sluice's own inputs.
    pub records_skipped: u64,
}

impl Replay {
    /// A replay whose event time starts at `start`, whose decisions are measured against
    /// the limits by `fit` (the live processor's; none: every decision fits).
    pub fn new(settings: Settings, start: DateTime<Utc>, fit: Option<Fit>) -> Self {
        let mut engine = Engine::new(settings, start);
        engine.fit = fit;
        Replay {
            engine,
            triggers: BTreeMap::new(),
            counts: Counts::default(),
        }
    }

    /// Event time: the latest record timestamp or timer due time seen (it never goes back).
    pub fn now(&self) -> DateTime<Utc> {
        self.engine.now
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Moves event time forward to `to`, firing every timer due by then, earliest first,
    /// each at its own due time (a timer armed by another fires too if it is due by `to`).
    pub fn advance(&mut self, to: DateTime<Utc>, out: &mut Vec<Event>) -> Result<(), Unapplied> {
        let (counts, triggers) = (&mut self.counts, &mut self.triggers);
        self.engine.advance(to, |decision| {
            counts.timers_fired += 1;
            keep_events(decision, counts, triggers, out);
        })
    }

    /// Hands one recorded input to the decider at event time `at` (its record's timestamp),
    /// after the timers due by then. `origin` is what the live processor named the record
    /// (see `timer_origin` for timers), so the events carry the same ids.
    pub fn input(
        &mut self,
        at: DateTime<Utc>,
        partition: PartitionId,
        pipeline: &PipelineId,
        input: &Input,
        origin: &str,
        out: &mut Vec<Event>,
    ) -> Result<(), Unapplied> {
        self.advance(at, out)?;
        self.counts.inputs += 1;
        if let Input::JobReported(report) = input {
            if let Some(answered) = self.triggers.get_mut(&report.run_id) {
                *answered = true;
            }
        }
        let decision = self.engine.handle(partition, pipeline, input, origin)?;
        keep_events(decision, &mut self.counts, &mut self.triggers, out);
        Ok(())
    }

    /// A pipeline's state as the replay left it.
    pub fn state(&self, pipeline: &str) -> Option<&PipelineState> {
        self.engine.states.get(pipeline)
    }

    /// Every pipeline's state, by id.
    pub fn states(&self) -> &BTreeMap<PipelineId, PipelineState> {
        &self.engine.states
    }

    /// Triggers the replay requested that no recorded job report answered: runs the live
    /// processor never started, whose outcome a replay cannot know.
    pub fn unanswered_triggers(&self) -> Vec<&str> {
        self.triggers
            .iter()
            .filter(|(_, answered)| !**answered)
            .map(|(run, _)| run.as_str())
            .collect()
    }
}

/// Keeps a decision's events; counts (and for triggers, notes) what a replay leaves out.
fn keep_events(decision: Decision, counts: &mut Counts, triggers: &mut BTreeMap<RunId, bool>, out: &mut Vec<Event>) {
    out.extend(decision.events);
    for effect in &decision.effects {
        counts.effects_skipped += 1;
        if let Effect::TriggerJob(request) = effect {
            triggers.entry(request.run_id.clone()).or_insert(false);
        }
    }
    counts.records_skipped += decision.records.len() as u64;
}

#[cfg(test)]
mod tests;
