//! How a pipeline's state holds its executions and its readings' data: decoded, or as the
//! JSON they were stored as (an execution with only its phase read).
//!
//! A decision touches one or two executions of a history that can be a week long (168 for
//! an hourly pipeline), but reading a state from its parts used to decode every execution:
//! about 8 µs each, so a record whose pipeline had left the store's cache cost in proportion
//! to its history (issue 42). An execution read from the store stays JSON until a decision
//! reads or changes it; the decider's scans over every execution look at the phase only
//! ([`HeldExecution::phase`]), which is read ahead because it is small. A reading's data
//! ([`SensorData`]) likewise: the rules read the few readings of the execution they judge,
//! while every reading of the history is read from the store with the state.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Execution, Phase};

/// An execution in a pipeline's state. Copy-on-write as [`super::Shared`]: a decision's copy
/// of the state shares every execution it does not change, and two that share one are equal
/// without decoding or comparing it.
#[derive(Clone)]
pub struct HeldExecution(Arc<Held>);

/// The execution is boxed in both forms: inline it was 384 bytes of every execution held as
/// its JSON, decoded or not (most of a week's history never is).
enum Held {
    Decoded(Box<Execution>),
    /// As the store holds it: the execution's JSON, its phase read ahead, and the execution
    /// once something needed it.
    Stored {
        json: Box<str>,
        phase: Phase,
        decoded: OnceLock<Box<Execution>>,
    },
}

impl HeldExecution {
    /// An execution the store holds as `json` (what an earlier [`Execution`] was serialised
    /// as) with its `phase`, as recorded beside it; only that phase is read from the JSON
    /// when none was recorded. `Err` if it does not read.
    ///
    /// A recorded phase is checked against the execution's own when a decision decodes it
    /// (it differs only in a store Sluice did not write: see [`Deref`]).
    pub fn from_stored(json: Box<str>, phase: Option<Phase>) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize)]
        struct PhaseOf {
            phase: Phase,
        }
        let phase = match phase {
            Some(phase) => phase,
            None => serde_json::from_str::<PhaseOf>(&json)?.phase,
        };
        Ok(HeldExecution(Arc::new(Held::Stored {
            json,
            phase,
            decoded: OnceLock::new(),
        })))
    }

    /// Its phase, without decoding the rest.
    pub fn phase(&self) -> &Phase {
        match &*self.0 {
            Held::Decoded(e) => &e.phase,
            Held::Stored { phase, decoded, .. } => decoded.get().map_or(phase, |e| &e.phase),
        }
    }

    /// Whether it was decoded (made, changed or read since it was read from the store).
    pub fn is_decoded(&self) -> bool {
        match &*self.0 {
            Held::Decoded(_) => true,
            Held::Stored { decoded, .. } => decoded.get().is_some(),
        }
    }

    /// A rough size in memory, for bounding caches of states.
    pub fn estimated_size(&self) -> usize {
        match &*self.0 {
            Held::Stored { json, decoded, .. } if decoded.get().is_none() => 96 + json.len(),
            _ => 1536,
        }
    }
}

impl From<Execution> for HeldExecution {
    fn from(execution: Execution) -> Self {
        HeldExecution(Arc::new(Held::Decoded(Box::new(execution))))
    }
}

impl Deref for HeldExecution {
    type Target = Execution;

    /// The execution, decoded the first time it is needed.
    ///
    /// # Panics
    /// If the stored JSON does not decode, or its phase is not the one recorded beside it.
    /// Both were written by Sluice's own serialiser, from the same execution; failing here
    /// means the store is corrupt, which stops the processor as a state that does not decode
    /// always has (`StoreError::Corrupt`).
    fn deref(&self) -> &Execution {
        let corrupt = |why: &dyn std::fmt::Display| -> ! {
            panic!("corrupt state: a stored execution {why}; stop the processor and delete its state directory to restore it from the changelog")
        };
        match &*self.0 {
            Held::Decoded(e) => e,
            Held::Stored { json, phase, decoded } => decoded.get_or_init(|| {
                let e: Execution =
                    serde_json::from_str(json).unwrap_or_else(|e| corrupt(&format_args!("does not decode ({e})")));
                if e.phase != *phase {
                    corrupt(&"is not in the phase recorded beside it");
                }
                Box::new(e)
            }),
        }
    }
}

impl DerefMut for HeldExecution {
    fn deref_mut(&mut self) -> &mut Execution {
        let _ = &**self;
        let held = Arc::make_mut(&mut self.0);
        if let Held::Stored { decoded, .. } = held {
            let execution = decoded.take().expect("decoded above");
            *held = Held::Decoded(execution);
        }
        match held {
            Held::Decoded(e) => e,
            Held::Stored { .. } => unreachable!("made decoded above"),
        }
    }
}

/// Copied only to be changed ([`Arc::make_mut`]), and only once decoded: the copy keeps the
/// execution, not the JSON it no longer matches.
impl Clone for Held {
    fn clone(&self) -> Self {
        match self {
            Held::Decoded(e) => Held::Decoded(e.clone()),
            Held::Stored { json, phase, decoded } => match decoded.get() {
                Some(e) => Held::Decoded(e.clone()),
                None => Held::Stored {
                    json: json.clone(),
                    phase: phase.clone(),
                    decoded: OnceLock::new(),
                },
            },
        }
    }
}

impl PartialEq for HeldExecution {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || **self == **other
    }
}

impl std::fmt::Debug for HeldExecution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for HeldExecution {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for HeldExecution {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Execution::deserialize(deserializer).map(HeldExecution::from)
    }
}

/// A sensor reading's data (a JSON object): as it was stored until a rule, a merge or a
/// status reads it, then decoded once. Equal by content.
#[derive(Clone, Default)]
pub struct SensorData {
    /// The object as stored, while it is what `decoded` would be.
    stored: Option<Box<RawValue>>,
    decoded: OnceLock<Map<String, Value>>,
}

impl SensorData {
    /// Whether it was decoded (made, or read since it was read from the store).
    pub fn is_decoded(&self) -> bool {
        self.decoded.get().is_some()
    }

    /// A rough size in memory, for bounding caches of states.
    pub fn estimated_size(&self) -> usize {
        match (&self.stored, self.is_decoded()) {
            (Some(stored), false) => 32 + stored.get().len(),
            _ => 512,
        }
    }
}

impl From<Map<String, Value>> for SensorData {
    fn from(data: Map<String, Value>) -> Self {
        SensorData {
            stored: None,
            decoded: OnceLock::from(data),
        }
    }
}

impl Deref for SensorData {
    type Target = Map<String, Value>;

    /// The data, decoded the first time it is needed. Checked to be a JSON object when it was
    /// read ([`Deserialize`]), so decoding it cannot fail.
    fn deref(&self) -> &Map<String, Value> {
        self.decoded.get_or_init(|| {
            let stored = self.stored.as_deref().map_or("{}", RawValue::get);
            serde_json::from_str(stored).expect("checked to be a JSON object when read")
        })
    }
}

impl DerefMut for SensorData {
    /// Decoded, and no longer what was stored.
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        let _ = &**self;
        self.stored = None;
        self.decoded.get_mut().expect("decoded above")
    }
}

impl PartialEq for SensorData {
    fn eq(&self, other: &Self) -> bool {
        match (&self.stored, &other.stored) {
            (Some(a), Some(b)) if a.get() == b.get() => true,
            _ => **self == **other,
        }
    }
}

impl std::fmt::Debug for SensorData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for SensorData {
    /// As stored when it is (the same text decoding it and writing it again would give).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match (&self.stored, self.decoded.get()) {
            (Some(stored), None) => stored.serialize(serializer),
            _ => (**self).serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for SensorData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = Box::<RawValue>::deserialize(deserializer)?;
        if !stored.get().starts_with('{') {
            return Err(serde::de::Error::custom("a reading's data is not a JSON object"));
        }
        Ok(SensorData {
            stored: Some(stored),
            decoded: OnceLock::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};

    use super::*;
    use crate::core::execution::id;

    fn succeeded() -> Execution {
        let at = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_000);
        let mut e = Execution::new(id("daily", "2024-10-04"), at, TimeDelta::hours(1));
        e.phase = Phase::Succeeded { at };
        e.attempt = 2;
        e
    }

    fn stored(e: &Execution) -> HeldExecution {
        HeldExecution::from_stored(serde_json::to_string(e).unwrap().into(), None).unwrap()
    }

    #[test]
    fn a_stored_execution_tells_its_phase_and_decodes_when_read() {
        let e = succeeded();
        let held = stored(&e);
        assert_eq!(*held.phase(), e.phase);
        assert!(!held.is_decoded(), "the phase alone does not decode it");
        let copy = held.clone();
        assert_eq!(held.attempt, 2);
        assert!(held.is_decoded() && copy.is_decoded(), "a copy shares the decoding");
        assert_eq!(*held, e);
        assert!(
            HeldExecution::from_stored("{\"attempt\": 1}".into(), None).is_err(),
            "no phase"
        );
    }

    #[test]
    fn changing_a_stored_execution_leaves_the_copies_that_share_it_as_they_were() {
        let e = succeeded();
        let before = stored(&e);
        let mut after = before.clone();
        assert_eq!(before, after, "shared: equal");
        after.phase = Phase::AwaitingRules;
        assert_eq!(*after.phase(), Phase::AwaitingRules, "the phase follows the change");
        assert_eq!(*before.phase(), e.phase);
        assert_ne!(before, after);
        // Equal values held apart compare equal, decoded or not.
        assert_eq!(stored(&e), HeldExecution::from(e.clone()));
        assert!(stored(&e).estimated_size() < HeldExecution::from(e).estimated_size());
    }

    #[test]
    #[should_panic(expected = "corrupt state")]
    fn a_stored_execution_that_does_not_decode_stops_as_a_corrupt_store_does() {
        let held = HeldExecution::from_stored("{\"phase\": {\"phase\": \"awaitingRules\"}}".into(), None).unwrap();
        let _ = held.attempt;
    }

    #[test]
    #[should_panic(expected = "corrupt state: a stored execution is not in the phase recorded")]
    fn a_stored_execution_in_another_phase_than_recorded_stops_as_a_corrupt_store_does() {
        let e = succeeded();
        let json = serde_json::to_string(&e).unwrap().into();
        let held = HeldExecution::from_stored(json, Some(Phase::AwaitingRules)).unwrap();
        assert_eq!(*held.phase(), Phase::AwaitingRules, "the recorded phase, read ahead");
        let _ = held.attempt;
    }

    #[test]
    fn a_readings_data_is_kept_as_stored_until_read_and_written_back_the_same() {
        let text = r#"{"count":5000,"updatedAt":"2026-11-24T08:00:00Z","nested":{"a":[1,2]}}"#;
        let data: SensorData = serde_json::from_str(text).unwrap();
        assert!(!data.is_decoded(), "read as stored");
        assert_eq!(serde_json::to_string(&data).unwrap(), text, "written back untouched");
        assert!(!data.is_decoded(), "writing it back does not decode it");
        let map: Map<String, Value> = serde_json::from_str(text).unwrap();
        assert!(data.estimated_size() < SensorData::from(map.clone()).estimated_size());
        assert_eq!(data, SensorData::from(map.clone()), "equal by content");
        assert!(data.is_decoded());
        assert_eq!(data["count"], 5000);
        // Read from a value (a status, a test) as from text.
        let from_value: SensorData = serde_json::from_value(Value::Object(map)).unwrap();
        assert_eq!(from_value["nested"]["a"][1], 2);
        for not_an_object in ["[1]", "7", "\"text\"", "null"] {
            assert!(
                serde_json::from_str::<SensorData>(not_an_object).is_err(),
                "{not_an_object}"
            );
        }
    }

    #[test]
    fn changing_stored_data_writes_the_change() {
        let mut data: SensorData = serde_json::from_str(r#"{"count":1}"#).unwrap();
        let before = data.clone();
        data.insert("count".into(), Value::from(2));
        assert_eq!(serde_json::to_string(&data).unwrap(), r#"{"count":2}"#);
        assert_ne!(data, before);
        assert_eq!(
            serde_json::to_string(&before).unwrap(),
            r#"{"count":1}"#,
            "the copy is as it was"
        );
    }
}
