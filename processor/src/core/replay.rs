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

use super::events::Event;
use super::lifecycle::{decide, Context, Decision, Effect, Input, PipelineState, Settings, StateChange};
use super::timers::{timer_origin, TimerIndex, TimerOp};

/// The decider, its state and its timers, driven in event time.
pub struct Replay {
    settings: Settings,
    now: DateTime<Utc>,
    states: BTreeMap<String, PipelineState>,
    timers: TimerIndex,
    /// Every trigger the replay requested, and whether a recorded report answered it.
    triggers: BTreeMap<String, bool>,
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
    /// A replay whose event time starts at `start`.
    pub fn new(settings: Settings, start: DateTime<Utc>) -> Self {
        Replay {
            settings,
            now: start,
            states: BTreeMap::new(),
            timers: TimerIndex::default(),
            triggers: BTreeMap::new(),
            counts: Counts::default(),
        }
    }

    /// Event time: the latest record timestamp or timer due time seen (it never goes back).
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Moves event time forward to `to`, firing every timer due by then, earliest first,
    /// each at its own due time (a timer armed by another fires too if it is due by `to`).
    pub fn advance(&mut self, to: DateTime<Utc>, out: &mut Vec<Event>) {
        while let Some(timer) = self.timers.pop_due(to, 1).pop() {
            self.now = self.now.max(timer.at);
            self.counts.timers_fired += 1;
            let origin = timer_origin(&timer.pipeline, &timer.kind, timer.at);
            let input = Input::TimerFired(timer.kind);
            self.decide(timer.partition, &timer.pipeline, &input, &origin, out);
        }
        self.now = self.now.max(to);
    }

    /// Hands one recorded input to the decider at event time `at` (its record's timestamp),
    /// after the timers due by then. `origin` is what the live processor named the record
    /// (see `timer_origin` for timers), so the events carry the same ids.
    pub fn input(
        &mut self,
        at: DateTime<Utc>,
        partition: i32,
        pipeline: &str,
        input: &Input,
        origin: &str,
        out: &mut Vec<Event>,
    ) {
        self.advance(at, out);
        self.counts.inputs += 1;
        if let Input::JobReported(report) = input {
            if let Some(answered) = self.triggers.get_mut(&report.run_id) {
                *answered = true;
            }
        }
        self.decide(partition, pipeline, input, origin, out);
    }

    /// A pipeline's state as the replay left it.
    pub fn state(&self, pipeline: &str) -> Option<&PipelineState> {
        self.states.get(pipeline)
    }

    /// Every pipeline's state, by id.
    pub fn states(&self) -> &BTreeMap<String, PipelineState> {
        &self.states
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

    fn decide(&mut self, partition: i32, pipeline: &str, input: &Input, origin: &str, out: &mut Vec<Event>) {
        let state = self.states.get(pipeline).cloned().unwrap_or_default();
        let ctx = Context {
            now: self.now,
            origin,
            settings: self.settings,
        };
        let decision = decide(&state, pipeline, input, ctx);
        self.apply(partition, pipeline, decision, out);
    }

    fn apply(&mut self, partition: i32, pipeline: &str, decision: Decision, out: &mut Vec<Event>) {
        out.extend(decision.events);
        match decision.state {
            StateChange::Unchanged => {}
            StateChange::Put(state) => {
                self.states.insert(pipeline.to_string(), *state);
            }
            StateChange::Delete => {
                self.states.remove(pipeline);
            }
        }
        for op in decision.timers {
            match op {
                TimerOp::Set { kind, at } => {
                    self.timers.set(partition, pipeline, &kind, at);
                }
                TimerOp::Cancel { kind } => {
                    self.timers.cancel(partition, pipeline, &kind);
                }
            }
        }
        for effect in &decision.effects {
            self.counts.effects_skipped += 1;
            if let Effect::TriggerJob(request) = effect {
                self.triggers.entry(request.run_id.clone()).or_insert(false);
            }
        }
        self.counts.records_skipped += decision.records.len() as u64;
    }
}

#[cfg(test)]
mod tests;
