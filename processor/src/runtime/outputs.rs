//! What a decision produces, encoded for its topics and measured against the limits: its
//! events, its records to Sluice's own inputs and its state's changelog writes. The live
//! processor writes them; `sluice replay` measures them only, so that it rejects what the
//! processor rejected (see [`crate::core::apply`]).

use anyhow::Result;
use tracing::warn;

use super::codec::{Codec, Family};
use super::topics::Topics;
use crate::core::events::Event;
use crate::core::lifecycle::{Decision, Outbound, OutboundTopic, StateChange};
use crate::core::limits::{Limits, OverLimit};
use crate::core::output::{Encode, HostError};
use crate::core::replay::Fit;
use crate::core::state::parts;
use crate::core::PipelineState;

pub use crate::core::output::{Before, Encoded, Output};

/// Encodes decisions' records for their topics.
#[derive(Clone)]
pub struct Encoder {
    pub codec: Codec,
    pub topics: Topics,
    pub limits: Limits,
}

impl Encode for Encoder {
    fn encode(
        &self,
        pipeline: &str,
        before: Before<'_>,
        decision: &Decision,
    ) -> Result<Result<Encoded, OverLimit>, HostError> {
        Encoder::encode(self, pipeline, before, decision).map_err(Into::into)
    }
}

impl Encoder {
    /// Encodes what `decision` would write for `pipeline`; `Ok(Err(over))` when a record
    /// of it is over a limit (`--max-state-bytes`, `--max-message-bytes`), measured before
    /// anything of it is applied.
    pub fn encode(
        &self,
        pipeline: &str,
        before: Before<'_>,
        decision: &Decision,
    ) -> anyhow::Result<Result<Encoded, OverLimit>> {
        let writes = match &decision.state {
            StateChange::Put(state) => {
                let stored = before.in_parts.then_some(before.state);
                let writes = parts::writes(pipeline, stored, state, before.head_stale)?;
                // Each write is one changelog record: its key counts as much as its value.
                let largest = writes
                    .iter()
                    .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                    .max();
                if let Err(reason) = self.limits.check_state(largest.unwrap_or(0)) {
                    warn!(pipeline, "{reason}");
                    return Ok(Err(reason));
                }
                writes
            }
            _ => Vec::new(),
        };
        let events = self.events(pipeline, &decision.events)?;
        let records = self.records(&decision.records)?;
        for (what, output) in
            (events.iter().map(|o| ("an event", o))).chain(records.iter().map(|o| ("a record to Sluice's inputs", o)))
        {
            if let Err(reason) = self.limits.check_message(what, output.size()) {
                warn!(pipeline, "{reason}");
                return Ok(Err(reason));
            }
        }
        Ok(Ok(Encoded {
            writes,
            events,
            records,
        }))
    }

    /// The events as records of the events topic.
    pub fn events(&self, pipeline: &str, events: &[Event]) -> Result<Vec<Output>> {
        let topic = &self.topics.events;
        events
            .iter()
            .map(|event| {
                let value = self
                    .codec
                    .encode(Family::Events, topic, &serde_json::to_value(event)?)?;
                Ok(Output {
                    topic: topic.clone(),
                    partition: None,
                    key: Some(pipeline.as_bytes().to_vec()),
                    value: Some(value),
                    headers: vec![("type".into(), event.kind.name().as_bytes().to_vec())],
                })
            })
            .collect()
    }

    /// Records the decider publishes to Sluice's own inputs (dependency sensors,
    /// subscriptions), encoded for their topics.
    pub fn records(&self, records: &[Outbound]) -> Result<Vec<Output>> {
        records
            .iter()
            .map(|record| {
                let (family, topic) = match record.topic {
                    OutboundTopic::Sensors => (Family::Sensors, &self.topics.sensors),
                    OutboundTopic::Commands => (Family::Commands, &self.topics.commands),
                };
                Ok(Output {
                    topic: topic.clone(),
                    partition: None,
                    key: Some(record.key.as_bytes().to_vec()),
                    value: Some(self.codec.encode(family, topic, &record.value)?),
                    headers: Vec::new(),
                })
            })
            .collect()
    }
}

/// The live processor's measure of decisions, for a replay ([`Fit`]): a pipeline already
/// stored is taken as stored in parts, as the processor stores it.
pub fn replay_fit(codec: &Codec, topics: &Topics, limits: Limits) -> Fit {
    let encoder = Encoder {
        codec: codec.clone(),
        topics: topics.clone(),
        limits,
    };
    Box::new(move |pipeline, stored, decision| {
        let empty = PipelineState::default();
        let before = Before {
            state: stored.unwrap_or(&empty),
            in_parts: stored.is_some(),
            head_stale: false,
        };
        Ok(encoder.encode(pipeline, before, decision)?.map(drop))
    })
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::core::lifecycle::tests::pipeline;
    use crate::core::lifecycle::{decide, Context, Input, Settings};
    use crate::core::records::ConfigRecord;

    /// A pipeline's config accepted: a state to write and a CONFIG_ACCEPTED event.
    fn accepted() -> Decision {
        let input = Input::ConfigPublished(ConfigRecord::Put {
            pipeline_id: "gold".into(),
            config: pipeline(1),
        });
        let ctx = Context {
            now: DateTime::parse_from_rfc3339("2026-11-26T10:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            origin: "config/0@0",
            settings: Settings::default(),
        };
        decide(&PipelineState::default(), &"gold".into(), &input, ctx)
    }

    fn measured(limits: Limits) -> Result<(), String> {
        let mut fit = replay_fit(&Codec::json(), &Topics::new("sluice."), limits);
        fit("gold", None, &accepted())
            .expect("the JSON codec encodes")
            .map_err(|over| over.to_string())
    }

    #[test]
    fn replay_measures_events_and_state_as_the_processor_does() {
        assert_eq!(measured(Limits::default()), Ok(()));
        let events = measured(Limits {
            message_bytes: 200,
            ..Limits::default()
        })
        .unwrap_err();
        assert!(
            events.starts_with("an event of") && events.contains("--max-message-bytes"),
            "{events}"
        );
        let state = measured(Limits {
            state_bytes: 10,
            ..Limits::default()
        })
        .unwrap_err();
        assert!(state.contains("--max-state-bytes"), "{state}");

        // The processor's own measure is the same encoder's.
        let encoder = Encoder {
            codec: Codec::json(),
            topics: Topics::new("sluice."),
            limits: Limits::default(),
        };
        let before = Before {
            state: &PipelineState::default(),
            in_parts: false,
            head_stale: false,
        };
        let encoded = encoder.encode("gold", before, &accepted()).unwrap().unwrap();
        assert_eq!(encoded.events.len(), 1);
        assert_eq!(
            encoded.events[0].headers,
            [("type".to_string(), b"CONFIG_ACCEPTED".to_vec())]
        );
        assert!(!encoded.writes.is_empty());
    }
}
