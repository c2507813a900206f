//! How a pipeline's state holds its executions: decoded, or as the JSON they were stored as
//! with only their phase read.
//!
//! A decision touches one or two executions of a history that can be a week long (168 for
//! an hourly pipeline), but reading a state from its parts used to decode every execution:
//! about 8 µs each, so a record whose pipeline had left the store's cache cost in proportion
//! to its history (issue 42). An execution read from the store stays JSON until a decision
//! reads or changes it; the decider's scans over every execution look at the phase only
//! ([`HeldExecution::phase`]), which is read ahead because it is small.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Execution, Phase};

/// An execution in a pipeline's state. Copy-on-write as [`super::Shared`]: a decision's copy
/// of the state shares every execution it does not change, and two that share one are equal
/// without decoding or comparing it.
#[derive(Clone)]
pub struct HeldExecution(Arc<Held>);

enum Held {
    Decoded(Execution),
    /// As the store holds it: the execution's JSON, its phase read ahead, and the execution
    /// once something needed it.
    Stored {
        json: Box<str>,
        phase: Phase,
        decoded: OnceLock<Execution>,
    },
}

impl HeldExecution {
    /// An execution the store holds as `json` (what an earlier [`Execution`] was serialised
    /// as): only its phase is read now. `Err` if that does not read.
    pub fn from_stored(json: Box<str>) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize)]
        struct PhaseOf {
            phase: Phase,
        }
        let PhaseOf { phase } = serde_json::from_str(&json)?;
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
        HeldExecution(Arc::new(Held::Decoded(execution)))
    }
}

impl Deref for HeldExecution {
    type Target = Execution;

    /// The execution, decoded the first time it is needed.
    ///
    /// # Panics
    /// If the stored JSON does not decode. It was written by Sluice's own serialiser and its
    /// phase has already been read from it; failing here means the store is corrupt, which
    /// stops the processor as a state that does not decode always has (`StoreError::Corrupt`).
    fn deref(&self) -> &Execution {
        match &*self.0 {
            Held::Decoded(e) => e,
            Held::Stored { json, decoded, .. } => decoded.get_or_init(|| {
                serde_json::from_str(json).unwrap_or_else(|e| {
                    panic!("corrupt state: a stored execution does not decode ({e}); stop the processor and delete its state directory to restore it from the changelog")
                })
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
        HeldExecution::from_stored(serde_json::to_string(e).unwrap().into()).unwrap()
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
            HeldExecution::from_stored("{\"attempt\": 1}".into()).is_err(),
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
        let held = HeldExecution::from_stored("{\"phase\": {\"phase\": \"awaitingRules\"}}".into()).unwrap();
        let _ = held.attempt;
    }
}
