//! The input path of the partition task: which records a batch applies, where each is
//! decided (forwarded, a copy applied before, rejected), and a decision added to the batch.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tracing::{debug, info, warn};

use super::*;
use crate::core::ids::PipelineId;

impl<S: Store> Task<S> {
    /// A record the host fetched, `role` its input's role (see [`origin_of`]; `assigned`: the
    /// consumer's assignment holds its topic-partition): admitted ([`Task::admit`]), then
    /// routed ([`Task::route`]). What is left to the host comes back as a [`Take`].
    pub fn take(
        &mut self,
        staged: &mut Staged,
        record: &dyn Record,
        role: &str,
        assigned: bool,
        now: DateTime<Utc>,
    ) -> Result<Take> {
        let (topic, p, offset) = (record.topic(), record.partition(), record.offset());
        match self.admit(staged, topic, p, offset, assigned)? {
            Admission::Apply => self.route(staged, record, role, now),
            Admission::ReadAgainWhenOpen => Ok(Take::ReadAgainWhenOpen),
            _ => Ok(Take::Done),
        }
    }

    /// Which of a batch's records are applied ([`admission`]): one of a partition not
    /// assigned, given up, not open yet or applied before is passed over. `assigned`: the
    /// consumer's assignment holds the record's topic-partition.
    pub fn admit(
        &mut self,
        staged: &mut Staged,
        topic: &str,
        p: PartitionId,
        offset: i64,
        assigned: bool,
    ) -> Result<Admission> {
        let key = (topic.to_string(), p);
        let owned = self.partitions.get_mut(&p);
        let partition = admission::Partition {
            assigned,
            abandoned: self.abandoned.contains(&p),
            open: owned.is_some(),
            applied: owned.as_ref().and_then(|o| o.store.applied_offset(topic)),
            seen_in_batch: staged.commits.get(&key).copied(),
            delivered: owned.as_ref().and_then(|o| o.delivered.get(topic).copied()),
        };
        let admitted = admission::admit(&partition, offset);
        if let Some(owned) = owned.filter(|_| !matches!(admitted, Admission::WentBack { .. })) {
            match owned.delivered.get_mut(topic) {
                Some(delivered) => *delivered = offset,
                None => {
                    owned.delivered.insert(topic.to_string(), offset);
                }
            }
        }
        if admitted.commits() {
            *staged.tallies.records_in.entry(key.0.clone()).or_default() += 1;
            staged.commits.insert(key, offset);
        }
        match admitted {
            Admission::NotAssigned => {
                debug!(%topic, p = p.number(), offset, "partition no longer assigned: left to its new owner")
            }
            Admission::GivenUp => {
                debug!(%topic, p = p.number(), offset, "partition given up to a newer owner: left to it")
            }
            Admission::AlreadyApplied => debug!(%topic, p = p.number(), offset, "already applied: skipped"),
            // Nothing of the batch counts: its records are not committed, and on restart the
            // opening's check (InputAhead) stops it again until the state is rebuilt.
            Admission::WentBack { from } => {
                return Err(TaskError::InputWentBack {
                    partition: p,
                    topic: topic.to_string(),
                    from,
                    offset,
                    applied: partition.applied.unwrap_or(from),
                })
            }
            Admission::Apply => staged.store(p).set_applied_offset(topic, offset),
            Admission::ReadAgainWhenOpen => {}
        }
        Ok(admitted)
    }

    /// Forwards a record on another partition than its key's (under `--misrouted forward`;
    /// a copy that is still misrouted is rejected, as under `reject`); a forwarded copy's
    /// mark is checked next ([`Take::CheckMark`]).
    /// `role`: the input's role (see [`origin_of`]).
    fn route(&mut self, staged: &mut Staged, record: &dyn Record, role: &str, now: DateTime<Utc>) -> Result<Take> {
        let (topic, p, offset) = (record.topic(), record.partition(), record.offset());
        let mark = copy_mark(record);
        if let Some(key) = record.key() {
            let owner = partition_for(key, self.settings.partitions);
            if owner != p {
                if mark.is_some() || !self.settings.forward_misrouted {
                    return Ok(Take::Decode);
                }
                let durable = self.store(p).and_then(|s| s.applied_offset(topic)).unwrap_or(-1);
                let mark = Forwarded {
                    partition: p,
                    offset,
                    durable,
                };
                let copy = Output {
                    topic: topic.to_string(),
                    partition: Some(owner),
                    key: Some(key.to_vec()),
                    value: record.value().map(<[u8]>::to_vec),
                    headers: copy_headers(record, &mark),
                };
                // A copy the broker would refuse is not forwarded: the record is rejected
                // here as misrouted, to the dead-letter topic.
                let limits = self.settings.decider.limits;
                if let Err(reason) = limits.check_message("a forwarded copy", copy.size()) {
                    warn!(%topic, p = p.number(), offset, "{reason}");
                    return Ok(Take::Decode);
                }
                staged.outputs.push(copy);
                *staged.tallies.forwarded.entry(topic.to_string()).or_default() += 1;
                return Ok(Take::Forwarded { owner });
            }
        }
        match mark {
            None => Ok(Take::Decode),
            Some(Ok(mark)) => Ok(Take::CheckMark(mark)),
            Some(Err(implausible)) => self.rejected_copy(staged, record, role, implausible, now),
        }
    }

    /// A forwarded copy's [`Take::CheckMark`] answered with `checked`, its mark against where
    /// its partition ends: a copy applied before is passed over; one whose mark Sluice
    /// cannot have written is rejected before it moves a window.
    pub fn take_marked(
        &mut self,
        staged: &mut Staged,
        record: &dyn Record,
        role: &str,
        checked: Result<Forwarded, Implausible>,
        now: DateTime<Utc>,
    ) -> Result<Take> {
        let mark = match checked {
            Ok(mark) => mark,
            Err(implausible) => return self.rejected_copy(staged, record, role, implausible, now),
        };
        let (topic, p) = (record.topic(), record.partition());
        let Some(store) = self.store(p) else {
            return Ok(Take::Done);
        };
        let slot = (p, topic.to_string(), mark.partition);
        let window = match staged.windows.entry(slot) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(
                (store.forward_window(topic, mark.partition))
                    .map_err(|source| TaskError::Store { partition: p, source })?,
            ),
        };
        let advances = window.advances(&mark);
        let new = window.admit(&mark);
        // A duplicate that teaches the window nothing writes nothing.
        if new || advances {
            let window = window.clone();
            staged.store(p).set_forward_window(topic, mark.partition, &window);
        }
        if new {
            return Ok(Take::Decode);
        }
        debug!(%topic, p = p.number(), offset = record.offset(), from = mark.partition.number(), at = mark.offset, "forwarded copy applied before: skipped");
        *staged
            .tallies
            .forwarded_duplicates
            .entry(topic.to_string())
            .or_default() += 1;
        Ok(Take::Done)
    }

    /// A copy whose mark Sluice cannot have written: rejected here, to the dead-letter topic.
    fn rejected_copy(
        &mut self,
        staged: &mut Staged,
        record: &dyn Record,
        role: &str,
        implausible: Implausible,
        now: DateTime<Utc>,
    ) -> Result<Take> {
        let rejected = Input::Rejected {
            source: source_of(record),
            reason: implausible.to_string(),
            kind: Rejection::Invalid,
        };
        let origin = origin_of(role, record.partition(), record.offset(), &rejected);
        let pipeline = rejected_pipeline(record.key());
        self.decide(
            staged,
            record.partition(),
            &pipeline,
            &rejected,
            &origin,
            now,
            Some(record),
        )?;
        Ok(Take::Done)
    }

    /// Decides what `input` means for `pipeline` and adds the decision to the batch. A
    /// decision whose state would not fit one changelog record is not applied: the input is
    /// rejected instead (INPUT_REJECTED, and the record to the dead-letter topic), naming the
    /// limit, so that no changelog write is ever left out of a batch marked complete.
    #[allow(clippy::too_many_arguments)]
    pub fn decide(
        &mut self,
        staged: &mut Staged,
        p: PartitionId,
        pipeline: &PipelineId,
        input: &Input,
        origin: &str,
        now: DateTime<Utc>,
        source: Option<&dyn Record>,
    ) -> Result<()> {
        if let Input::JobReported(report) = input {
            self.reported(staged, p, report)?;
        }
        let needs = Needs::of(input, now);
        let mut stored = self.state(staged, p, pipeline, &needs)?;
        let ctx = Context {
            now,
            origin,
            settings: DeciderSettings {
                max_clock_skew: self.future_allowance,
                ..self.settings.decider
            },
        };
        let source_name = || source.map_or_else(|| origin.to_string(), source_of);
        let mut decided = self.decide_from(&stored, pipeline, input, ctx, source_name);
        if let Err(Unfit::Partial) = decided {
            // The decision asked for more than the state was read with: decided again from
            // the whole state (see `Executions`).
            stored = self.filled(p, pipeline, stored)?;
            self.redecided += 1;
            decided = self.decide_from(&stored, pipeline, input, ctx, source_name);
        }
        let before = Before {
            state: &stored.state,
            in_parts: stored.in_parts,
            head_stale: stored.head_stale,
        };
        match decided {
            Ok((decision, encoded)) => self.apply(staged, p, pipeline, before, decision, encoded, source),
            Err(Unfit::Failed(source)) => Err(TaskError::Encode {
                pipeline: pipeline.into(),
                source,
            }),
            Err(Unfit::EvenItsRejection { reason }) => Err(TaskError::EvenItsRejection {
                pipeline: pipeline.clone(),
                reason,
            }),
            // A whole state answers every question: never.
            Err(Unfit::Partial) => Err(TaskError::Store {
                partition: p,
                source: format!("the state of {pipeline}, read whole, was taken for one read in part").into(),
            }),
        }
    }

    /// Decides `input` from `stored`, within the limits (see [`apply::decide_within`]).
    fn decide_from(
        &self,
        stored: &Stored,
        pipeline: &PipelineId,
        input: &Input,
        ctx: Context<'_>,
        source: impl FnOnce() -> String,
    ) -> Result<(Decision, Encoded), Unfit<HostError>> {
        let before = Before {
            state: &stored.state,
            in_parts: stored.in_parts,
            head_stale: stored.head_stale,
        };
        let fit = |decision: &Decision| self.encoder.encode(pipeline, before, decision);
        apply::decide_within(&stored.state, pipeline, input, ctx, source, fit)
    }

    /// `stored`, read in part, with what it left out read from the store: those removed
    /// since the read (by this batch) stay removed.
    fn filled(&self, p: PartitionId, pipeline: &PipelineId, mut stored: Stored) -> Result<Stored> {
        let whole = match self.store(p) {
            Some(store) => {
                (store.stored(pipeline, &Needs::Whole)).map_err(|source| TaskError::Store { partition: p, source })?
            }
            None => None,
        };
        let whole = whole.map(|w| w.state).unwrap_or_default();
        let head_off = Arc::make_mut(&mut stored.state).fill(&whole);
        stored.head_stale |= head_off;
        Ok(stored)
    }

    /// What a job report means for the journaled trigger of its run.
    fn reported(
        &mut self,
        staged: &mut Staged,
        p: PartitionId,
        report: &crate::core::records::JobReport,
    ) -> Result<()> {
        let store_err = |source| TaskError::Store { partition: p, source };
        match self.journaled.reported(p, report) {
            Reported::Released { found: true } => {
                info!(partition = p.number(), run_id = %report.run_id, "the previous owner let a journaled trigger go")
            }
            Reported::Released { found: false } => {
                // This owner's executor could not begin the call in time: it asks again.
                let journaled = match (self.store(p), handover::never_began(report)) {
                    (Some(store), true) => store.effect(&report.run_id).map_err(store_err)?,
                    _ => None,
                };
                match journaled.filter(|e| handover::releases(report, e.request())) {
                    Some(effect) => {
                        info!(partition = p.number(), run_id = %report.run_id, "a trigger's call could not begin by its time to begin: requesting it again");
                        self.journaled.let_go_unbegun(p, effect);
                    }
                    None => {
                        debug!(partition = p.number(), run_id = %report.run_id, "a release of no call awaited here (an older call's, or of a run that moved on)")
                    }
                }
            }
            Reported::Marked { found } => {
                if found {
                    info!(partition = p.number(), run_id = %report.run_id, "a journaled trigger's start mark: its call began at the previous owner, and is left to it until its release, a report, or its deadline");
                }
                // Kept in the journal with the mark's offset: an owner that opens the
                // partition later never reads the mark again.
                let journaled = match self.store(p) {
                    Some(store) => store.effect(&report.run_id).map_err(store_err)?,
                    None => None,
                };
                if let Some(marked) = journaled.and_then(|e| handover::journal_marked(report, e)) {
                    staged.store(p).put_effect(&report.run_id, &marked)?;
                }
            }
            // The trigger's outcome is known: it leaves the journal, never requested again.
            Reported::Answered => staged.store(p).delete_effect(&report.run_id),
        }
        Ok(())
    }

    /// A pipeline's state: from this batch if it touched it, else from the store, read for
    /// `needs`; and whether the store (with the batch) holds it in parts, which a write then
    /// only updates (a state not stored at all is written whole: its head too).
    fn state(&self, staged: &Staged, p: PartitionId, pipeline: &PipelineId, needs: &Needs) -> Result<Stored> {
        if let Some(state) = staged.states.get(&(p, pipeline.clone())) {
            return Ok(match state {
                Some(state) => Stored {
                    state: state.clone(),
                    in_parts: true,
                    head_stale: false,
                },
                None => Stored::default(),
            });
        }
        let Some(store) = self.store(p) else {
            return Ok(Stored::default());
        };
        Ok((store.stored(pipeline, needs))
            .map_err(|source| TaskError::Store { partition: p, source })?
            .unwrap_or_default())
    }

    /// Adds one decision that fits (see [`apply::decide_within`]) to the batch, in the order
    /// its parts are written: events and dead letter, state, timers, outbound records,
    /// effects.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        staged: &mut Staged,
        p: PartitionId,
        pipeline: &PipelineId,
        before: Before<'_>,
        decision: Decision,
        encoded: Encoded,
        source: Option<&dyn Record>,
    ) -> Result<()> {
        let Encoded {
            writes,
            events,
            records,
        } = encoded;
        // Every line logged while applying carries the pipeline (and, on events, the execution
        // and run), in text and JSON logs and in exported traces.
        let _span = tracing::info_span!("pipeline", pipeline = pipeline.as_str()).entered();
        for note in &decision.notes {
            debug!("{note}");
        }
        log_events(&decision.events);
        staged.outputs.extend(events);
        if decision.events.iter().any(|e| e.kind.is_sla_breach()) {
            // A breach never changes the config: the one in force before it names the owner.
            let owner = before.state.config.as_ref().and_then(|c| c.owner.clone());
            (staged.learned.owners).insert(pipeline.clone(), owner.unwrap_or_default());
        }
        staged.learned.events.extend(decision.events);
        if let (Some(reason), Some(record)) = (&decision.dead_letter, source) {
            let kind = decision.rejection.map_or("unknown", Rejection::as_str);
            staged.tallies.dead_letters.push((record.topic().to_string(), kind));
            let largest = self.settings.decider.limits.message_bytes;
            let letter = dead_letter(&self.settings.dlq, record, reason, largest);
            if letter.value.is_none() && record.value().is_some() {
                warn!(
                    size = record.value().map_or(0, <[u8]>::len),
                    "dead letter too large for the broker: sent without its value"
                );
            }
            staged.outputs.push(letter);
        }
        self.apply_state(staged, p, pipeline, decision.state, writes, before.state);
        // The store needs no write of its own: the timers are parts of the state written.
        self.timers.apply(p, pipeline, &decision.timers);
        staged.outputs.extend(records);
        for effect in decision.effects {
            // Triggers are journaled; status checks are not (their timer asks again).
            let effect = self.with_release_key(effect);
            if let Effect::TriggerJob(request) = &effect {
                staged.store(p).put_effect(&request.run_id, &effect)?;
            }
            staged.effects.push((p, effect));
        }
        staged.ended_runs.extend(decision.ended_runs);
        Ok(())
    }

    /// Adds a state change to the partition's store batch.
    fn apply_state(
        &self,
        staged: &mut Staged,
        p: PartitionId,
        pipeline: &PipelineId,
        change: StateChange,
        writes: Vec<Write>,
        before: &PipelineState,
    ) {
        let key = (p, pipeline.clone());
        let state = match change {
            StateChange::Unchanged => return,
            StateChange::Put(state) => {
                // The config is written only when it is not the one stored (or being stored)
                // already.
                let held = |config| match staged.configs.get(&key) {
                    Some(staged) => Arc::ptr_eq(staged, config),
                    None => self.store(p).is_some_and(|s| s.holds_config(pipeline, config)),
                };
                let new_config = match &state.config {
                    Some(config) if !held(config) => {
                        staged.configs.insert(key.clone(), config.clone());
                        Some((pipeline.as_str(), config.as_ref()))
                    }
                    _ => None,
                };
                staged.stores.entry(p).or_default().put_state(writes, new_config);
                Some(Arc::from(state))
            }
            StateChange::Delete => {
                staged.store(p).delete_pipeline(pipeline, before);
                staged.configs.remove(&key);
                None
            }
        };
        staged.learned.changed.insert(key.clone());
        staged.states.insert(key, state);
    }

    /// A trigger with a release key of its own (see `TriggerRequest::release_key`); other
    /// effects as they are.
    pub(super) fn with_release_key(&mut self, effect: Effect) -> Effect {
        match effect {
            Effect::TriggerJob(mut request) => {
                request.release_key = self.keys.next_key();
                Effect::TriggerJob(request)
            }
            other => other,
        }
    }
}
