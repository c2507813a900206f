//! Applying a decision: the one path live processing and `sluice replay` share, so that a
//! replay of the same inputs gives the same events, byte for byte.
//!
//! A decision is applied whole or not at all. One whose records would not fit (a state
//! record over `--max-state-bytes`, an event or a record to Sluice's own inputs over
//! `--max-message-bytes`) is not applied: the input is rejected instead (INPUT_REJECTED,
//! and the record to the dead-letter topic), naming the limit, so that no record is ever
//! left out of a batch that counts as done. The sizes are the caller's to measure (they
//! depend on the state store's layout and the topics' formats); what follows from them is
//! decided here.

use super::lifecycle::{decide, noting_unloaded, Context, Decision, Input, PipelineState, StateChange};
use super::limits::OverLimit;
use super::records::Rejection;
use crate::core::ids::PipelineId;

/// Why no decision could be applied.
#[derive(Debug, PartialEq, Eq)]
pub enum Unfit<E> {
    /// Measuring failed.
    Failed(E),
    /// The input's rejection is itself over a limit (its event cannot be smaller than a
    /// rejection's: a limit set below what any event needs).
    EvenItsRejection { reason: OverLimit },
    /// The state was read without some settled executions, and the decision asked for one
    /// (see [`super::lifecycle::Executions`]): decide again from the state with them loaded.
    Partial,
}

/// Decides `input` for `pipeline` from `state` and measures the decision with `fit`, which
/// returns what it measured (the encoded records, for a caller that writes them) or why a
/// record is over a limit. An unfit decision is replaced by the input's rejection, named
/// after `source` (the record's topic, partition and offset, or a timer's origin).
pub fn decide_within<W, E>(
    state: &PipelineState,
    pipeline: &PipelineId,
    input: &Input,
    ctx: Context<'_>,
    source: impl FnOnce() -> String,
    mut fit: impl FnMut(&Decision) -> Result<Result<W, OverLimit>, E>,
) -> Result<(Decision, W), Unfit<E>> {
    let decide = |input: &Input| match noting_unloaded(|| decide(state, pipeline, input, ctx)) {
        (decision, false) if !moves_timers_not_read(state, &decision) => Ok(decision),
        _ => Err(Unfit::Partial),
    };
    let decision = decide(input)?;
    let reason = match fit(&decision).map_err(Unfit::Failed)? {
        Ok(measured) => return Ok((decision, measured)),
        Err(over) => over,
    };
    let rejected = Input::Rejected {
        source: source(),
        reason: reason.to_string(),
        kind: Rejection::TooLarge,
    };
    let decision = decide(&rejected)?;
    match fit(&decision).map_err(Unfit::Failed)? {
        Ok(measured) => Ok((decision, measured)),
        Err(reason) => Err(Unfit::EvenItsRejection { reason }),
    }
}

fn moves_timers_not_read(state: &PipelineState, decision: &Decision) -> bool {
    matches!(&decision.state, StateChange::Put(after) if state.moves_timers_not_read(after))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use chrono::{DateTime, Utc};
    use serde_json::json;

    use super::*;
    use crate::core::events::EventType;
    use crate::core::lifecycle::Settings;
    use crate::core::records::SensorReading;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-26T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn reading() -> Input {
        Input::SensorReceived(SensorReading {
            pipeline_id: "p".into(),
            key: "rows".into(),
            data: json!({"count": 5}).as_object().unwrap().clone(),
            ..SensorReading::default()
        })
    }

    fn ctx() -> Context<'static> {
        Context {
            now: now(),
            origin: "sensors/0@7",
            settings: Settings::default(),
        }
    }

    fn kinds(d: &Decision) -> Vec<EventType> {
        d.events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn a_decision_that_fits_is_applied_as_decided() {
        let state = PipelineState::default();
        let plain = decide(&state, &"p".into(), &reading(), ctx());
        let (decision, measured) = decide_within(
            &state,
            &"p".into(),
            &reading(),
            ctx(),
            || unreachable!("named only when rejected"),
            |d| Ok::<_, Infallible>(Ok(d.events.len())),
        )
        .unwrap();
        assert_eq!(kinds(&decision), kinds(&plain));
        assert_eq!(measured, plain.events.len());
    }

    #[test]
    fn a_decision_over_a_limit_is_replaced_by_the_inputs_rejection_naming_the_limit() {
        let state = PipelineState::default();
        let mut measured = 0;
        let (decision, ()) = decide_within(
            &state,
            &"p".into(),
            &reading(),
            ctx(),
            || "sensors/0@7".to_string(),
            |d| {
                measured += 1;
                let rejection = kinds(d) == [EventType::INPUT_REJECTED];
                Ok::<_, Infallible>(match rejection {
                    true => Ok(()),
                    false => Err(OverLimit::Message {
                        what: "an event",
                        len: 2_000_000,
                        limit: 1_000_000,
                    }),
                })
            },
        )
        .unwrap();
        assert_eq!(measured, 2, "the decision, then its replacement");
        assert_eq!(kinds(&decision), [EventType::INPUT_REJECTED]);
        let event = &decision.events[0];
        assert!(event.message.contains("--max-message-bytes"), "{}", event.message);
        assert!(
            decision.dead_letter.is_some(),
            "the record goes to the dead-letter topic"
        );
        assert_eq!(decision.rejection, Some(Rejection::TooLarge));
    }

    fn over() -> OverLimit {
        OverLimit::Message {
            what: "an event",
            len: 200,
            limit: 100,
        }
    }

    #[test]
    fn a_rejection_over_a_limit_too_applies_nothing_and_says_why() {
        let unfit = decide_within(
            &PipelineState::default(),
            &"p".into(),
            &reading(),
            ctx(),
            || "sensors/0@7".to_string(),
            |_| Ok::<Result<(), OverLimit>, Infallible>(Err(over())),
        );
        assert_eq!(unfit.unwrap_err(), Unfit::EvenItsRejection { reason: over() });
    }

    #[test]
    fn a_failed_measure_stops_at_once() {
        let mut asked = 0;
        let unfit = decide_within(
            &PipelineState::default(),
            &"p".into(),
            &reading(),
            ctx(),
            String::new,
            |_| {
                asked += 1;
                Err::<Result<(), OverLimit>, _>("codec down")
            },
        );
        assert_eq!(unfit.unwrap_err(), Unfit::Failed("codec down"));
        assert_eq!(asked, 1);
    }
}
