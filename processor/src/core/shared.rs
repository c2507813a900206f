//! Copy-on-write values for the parts of a state that grow with its history.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A value shared between a state and its copies until one of them changes it: a decision
/// copies its pipeline's state, and the copy shares every execution and reading the
/// decision does not touch. Writing through it (`DerefMut`) copies the value first if
/// another state shares it. Two that share a value are equal without comparing it, so
/// telling what a decision changed costs the entries it touched, not the whole history.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    pub fn new(value: T) -> Self {
        Shared(Arc::new(value))
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Shared::new(value)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shares_until_written_and_equal_values_compare_equal() {
        let a = Shared::new(vec![1, 2]);
        let mut b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, b);
        b.push(3);
        assert!(!Arc::ptr_eq(&a.0, &b.0), "writing copied");
        assert_eq!(*a, vec![1, 2], "the original is untouched");
        assert_ne!(a, b);
        // Equal values in separate allocations are still equal.
        assert_eq!(Shared::new(vec![1, 2]), a);
    }
}
