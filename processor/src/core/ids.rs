//! Identities that travel as text: a pipeline's id and a job attempt's run id.
//!
//! Each is its own type so the compiler keeps a pipeline id from standing in for a run id,
//! a sensor key or a date. Both serialise as their bare text, so no record, event or stored
//! byte changes, and both share their text: timers, requests, events and copies of a state
//! clone them often.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Declares an id type over shared text, with the conversions and comparisons a `String`
/// field had, so a field can change type without its readers changing.
macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                $name(text.into())
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                $name(text.into())
            }
        }

        impl From<&String> for $name {
            fn from(text: &String) -> Self {
                $name(text.as_str().into())
            }
        }

        impl From<&$name> for $name {
            fn from(id: &$name) -> Self {
                id.clone()
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                *self.0 == **other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == &*other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                **self == *other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == &*other.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:?})"), &*self.0)
            }
        }
    };
}

text_id! {
    /// A pipeline's id: the key of its records on every input topic (so its partition), of
    /// its state and of its timers.
    PipelineId
}

text_id! {
    /// The id of one attempt of an execution's job ([`crate::core::lifecycle::run_id`] makes
    /// it): the idempotency key a job target sees, what reports name, what the journal keys
    /// a call by.
    RunId
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_serialise_as_their_bare_text_and_compare_with_text() {
        let id = PipelineId::from("orders-daily");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"orders-daily\"");
        assert_eq!(serde_json::from_str::<PipelineId>("\"orders-daily\"").unwrap(), id);
        assert_eq!(id, "orders-daily");
        assert_eq!("orders-daily", id);
        assert_eq!(format!("{id} {id:?}"), "orders-daily PipelineId(\"orders-daily\")");
        let map: std::collections::BTreeMap<PipelineId, u8> = [(id.clone(), 1)].into();
        assert_eq!(map.get("orders-daily"), Some(&1), "looked up by text");
    }
}
