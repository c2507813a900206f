//! Copy-on-write values and maps for the parts of a state that grow with its history.

use std::borrow::Borrow;
use std::cmp::Ordering;
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

/// Most entries a chunk of a [`SharedMap`] holds before it splits in two.
const CHUNK: usize = 64;

/// An ordered map whose copies share its entries in chunks, as [`Shared`] shares one value:
/// a decision copies its pipeline's state, and a week of executions and readings costs the
/// copy a few dozen reference counts, not an entry each. Changing an entry copies only its
/// chunk if another map shares it; [`Self::changes`] skips the chunks two maps share, so
/// telling what a decision changed costs the chunks it touched, not the history.
///
/// It behaves as a `BTreeMap` (the same order, the same answers; `tests` check it against
/// one) and is stored as one: a JSON object in key order.
#[derive(Clone)]
pub struct SharedMap<K, V> {
    /// Sorted, disjoint and in order: every key of a chunk is below every key of the next.
    /// None is empty.
    chunks: Vec<Arc<Vec<(K, V)>>>,
    len: usize,
}

impl<K, V> Default for SharedMap<K, V> {
    fn default() -> Self {
        SharedMap {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<K: Ord + Clone, V: Clone> SharedMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk that holds `key` if any does: the first whose last key is not below it.
    fn chunk_of<Q: Ord + ?Sized>(&self, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
    {
        let at = self
            .chunks
            .partition_point(|c| c.last().is_some_and(|(k, _)| k.borrow() < key));
        (at < self.chunks.len()).then_some(at)
    }

    /// Where `key` is, or would go: its chunk and the result of searching that chunk.
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Option<(usize, Result<usize, usize>)>
    where
        K: Borrow<Q>,
    {
        let c = self.chunk_of(key)?;
        Some((c, self.chunks[c].binary_search_by(|(k, _)| k.borrow().cmp(key))))
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.get_key_value(key).map(|(_, v)| v)
    }

    pub fn get_key_value<Q: Ord + ?Sized>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
    {
        match self.find(key)? {
            (c, Ok(i)) => Some(pair(&self.chunks[c][i])),
            _ => None,
        }
    }

    /// The entries from `start` on, in key order: a lookup, then a walk.
    pub fn range_from<Q: Ord + ?Sized>(&self, start: &Q) -> Range<'_, K, V>
    where
        K: Borrow<Q>,
    {
        let (c, i) = match self.find(start) {
            Some((c, Ok(i) | Err(i))) => (c, i),
            None => (self.chunks.len(), 0),
        };
        let first = self.chunks.get(c).map_or(&[][..], |chunk| &chunk[i..]);
        let rest = self.chunks.get(c + 1..).unwrap_or_default();
        (first.iter().map(pair as Pair<K, V>)).chain(rest.iter().flat_map(chunk_entries as ChunkEntries<K, V>))
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.get(key).is_some()
    }

    /// The entry of `key` to change, its chunk copied first if another map shares it.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        match self.find(key)? {
            (c, Ok(i)) => Some(&mut Arc::make_mut(&mut self.chunks[c])[i].1),
            _ => None,
        }
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        // A key above every chunk's goes into the last one.
        let c = match self.chunk_of(&key) {
            Some(c) => c,
            None if self.chunks.is_empty() => {
                // Grown as entries come: most states hold a few executions and readings, and a
                // chunk made for 64 was most of a cached state's memory.
                self.chunks.push(Arc::new(Vec::new()));
                0
            }
            None => self.chunks.len() - 1,
        };
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        let i = match chunk.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => return Some(std::mem::replace(&mut chunk[i].1, value)),
            Err(i) => i,
        };
        self.len += 1;
        if chunk.len() < CHUNK {
            if chunk.len() == chunk.capacity() {
                // Doubling, but never past a full chunk (a chunk copied on write is exact).
                let grown = (2 * chunk.len()).clamp(4, CHUNK);
                chunk.reserve_exact(grown - chunk.len());
            }
            chunk.insert(i, (key, value));
            return None;
        }
        // Full: split before inserting, so no chunk's allocation grows past CHUNK entries.
        let half = CHUNK / 2;
        let mut upper = chunk.split_off(half);
        match i <= half {
            true => chunk.insert(i, (key, value)),
            false => upper.insert(i - half, (key, value)),
        }
        self.chunks.insert(c + 1, Arc::new(upper));
        None
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let (c, Ok(i)) = self.find(key)? else {
            return None;
        };
        let (_, value) = Arc::make_mut(&mut self.chunks[c]).remove(i);
        self.len -= 1;
        self.tidy(c);
        Some(value)
    }

    /// After chunk `c` lost entries: an empty chunk goes, and a small one joins its
    /// neighbour when both fit in one, so a history expiring from its oldest end does not
    /// leave many small chunks behind.
    fn tidy(&mut self, c: usize) {
        if self.chunks[c].is_empty() {
            self.chunks.remove(c);
            return;
        }
        let next = c + 1;
        if self.chunks[c].len() < CHUNK / 4
            && next < self.chunks.len()
            && self.chunks[c].len() + self.chunks[next].len() <= CHUNK
        {
            let upper = self.chunks.remove(next);
            let chunk = Arc::make_mut(&mut self.chunks[c]);
            // Exactly: doubling could take a merged chunk's allocation past a full one.
            chunk.reserve_exact(upper.len());
            chunk.extend(upper.iter().cloned());
        }
    }

    /// Keeps the entries `keep` accepts, each asked once, in key order. A chunk that keeps
    /// all of them stays shared.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let mut c = 0;
        while c < self.chunks.len() {
            let Some(first) = self.chunks[c].iter().position(|(k, v)| !keep(k, v)) else {
                c += 1;
                continue;
            };
            let chunk = Arc::make_mut(&mut self.chunks[c]);
            let before = chunk.len();
            // Those before `first` were kept and `first` was not: the rest are asked now.
            let mut at = 0;
            chunk.retain(|(k, v)| {
                at += 1;
                match (at - 1).cmp(&first) {
                    Ordering::Less => true,
                    Ordering::Equal => false,
                    Ordering::Greater => keep(k, v),
                }
            });
            self.len -= before - chunk.len();
            if chunk.is_empty() {
                self.chunks.remove(c);
            } else {
                c += 1;
            }
        }
        // Joined once every chunk is filtered: a chunk joined earlier would skip `keep`.
        let mut c = 0;
        while c + 1 < self.chunks.len() {
            let joined = self.chunks.len();
            self.tidy(c);
            if self.chunks.len() == joined {
                c += 1;
            }
        }
    }

    pub fn iter(&self) -> Iter<'_, K, V> {
        self.chunks.iter().flat_map(chunk_entries as ChunkEntries<K, V>)
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.iter().next()
    }

    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let (key, _) = self.first_key_value()?;
        let key = key.clone();
        let value = self.remove(&key)?;
        Some((key, value))
    }

    /// The entries of `self` (before) and `after` that differ, in key order: key, value
    /// before, value after. The chunks both share are skipped whole.
    pub fn changes<'m>(&'m self, after: &'m Self) -> Vec<(&'m K, Option<&'m V>, Option<&'m V>)>
    where
        V: PartialEq,
    {
        let mut out = Vec::new();
        let (mut old, mut new) = (Cursor::new(&self.chunks), Cursor::new(&after.chunks));
        loop {
            if let (Some(a), Some(b)) = (old.whole_chunk(), new.whole_chunk()) {
                if Arc::ptr_eq(a, b) {
                    old.skip_chunk();
                    new.skip_chunk();
                    continue;
                }
            }
            let order = match (old.peek(), new.peek()) {
                (None, None) => return out,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((a, _)), Some((b, _))) => a.cmp(b),
            };
            match order {
                Ordering::Less => {
                    let (key, was) = old.take();
                    out.push((key, Some(was), None));
                }
                Ordering::Greater => {
                    let (key, is) = new.take();
                    out.push((key, None, Some(is)));
                }
                Ordering::Equal => {
                    let ((_, was), (key, is)) = (old.take(), new.take());
                    if was != is {
                        out.push((key, Some(was), Some(is)));
                    }
                }
            }
        }
    }
}

/// A walk over a [`SharedMap`]'s chunks that can step over a whole chunk.
struct Cursor<'m, K, V> {
    chunks: &'m [Arc<Vec<(K, V)>>],
    chunk: usize,
    entry: usize,
}

impl<'m, K, V> Cursor<'m, K, V> {
    fn new(chunks: &'m [Arc<Vec<(K, V)>>]) -> Self {
        Cursor {
            chunks,
            chunk: 0,
            entry: 0,
        }
    }

    /// The chunk ahead, when the walk is at its start.
    fn whole_chunk(&self) -> Option<&'m Arc<Vec<(K, V)>>> {
        (self.entry == 0).then(|| self.chunks.get(self.chunk)).flatten()
    }

    fn skip_chunk(&mut self) {
        self.chunk += 1;
        self.entry = 0;
    }

    fn peek(&self) -> Option<(&'m K, &'m V)> {
        let (k, v) = self.chunks.get(self.chunk)?.get(self.entry)?;
        Some((k, v))
    }

    /// The entry ahead, which [`Self::peek`] saw.
    fn take(&mut self) -> (&'m K, &'m V) {
        let entry = self.peek().expect("peeked");
        self.entry += 1;
        if self.entry == self.chunks[self.chunk].len() {
            self.skip_chunk();
        }
        entry
    }
}

impl<K: Ord + Clone + Borrow<Q>, V: Clone, Q: Ord + ?Sized> std::ops::Index<&Q> for SharedMap<K, V> {
    type Output = V;

    /// The value of `key`; panics if there is none, as a `BTreeMap` does.
    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

impl<K: Ord + Clone, V: Clone + PartialEq> PartialEq for SharedMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.changes(other).is_empty()
    }
}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for SharedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut map = SharedMap::new();
        for (k, v) in entries {
            map.insert(k, v);
        }
        map
    }
}

/// The entries of a [`SharedMap`] in key order.
pub type Iter<'m, K, V> =
    std::iter::FlatMap<std::slice::Iter<'m, Arc<Vec<(K, V)>>>, Entries<'m, K, V>, ChunkEntries<'m, K, V>>;
/// The entries of a [`SharedMap`] from a key on ([`SharedMap::range_from`]).
pub type Range<'m, K, V> = std::iter::Chain<Entries<'m, K, V>, Iter<'m, K, V>>;
type Entries<'m, K, V> = std::iter::Map<std::slice::Iter<'m, (K, V)>, Pair<'m, K, V>>;
type Pair<'m, K, V> = fn(&'m (K, V)) -> (&'m K, &'m V);
type ChunkEntries<'m, K, V> = fn(&'m Arc<Vec<(K, V)>>) -> Entries<'m, K, V>;

fn pair<K, V>((k, v): &(K, V)) -> (&K, &V) {
    (k, v)
}

fn chunk_entries<K, V>(chunk: &Arc<Vec<(K, V)>>) -> Entries<'_, K, V> {
    chunk.iter().map(pair as Pair<K, V>)
}

impl<'m, K: Ord + Clone, V: Clone> IntoIterator for &'m SharedMap<K, V> {
    type Item = (&'m K, &'m V);
    type IntoIter = Iter<'m, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Ord + Clone + std::fmt::Debug, V: Clone + std::fmt::Debug> std::fmt::Debug for SharedMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Ord + Clone + Serialize, V: Clone + Serialize> Serialize for SharedMap<K, V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de, K: Ord + Clone + Deserialize<'de>, V: Clone + Deserialize<'de>> Deserialize<'de> for SharedMap<K, V> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // As a BTreeMap reads a map: in any order, the last of a repeated key winning.
        let entries = std::collections::BTreeMap::<K, V>::deserialize(deserializer)?;
        Ok(entries.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Change(u16),
        Retain(u16),
        PopFirst,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let key = 0u16..400;
        let op = prop_oneof![
            6 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => key.clone().prop_map(Op::Remove),
            2 => key.clone().prop_map(Op::Change),
            1 => (1u16..20).prop_map(Op::Retain),
            1 => Just(Op::PopFirst),
        ];
        proptest::collection::vec(op, 0..300)
    }

    /// Applies `op` to both maps: each answer must be the same.
    fn apply(map: &mut SharedMap<u16, u32>, model: &mut BTreeMap<u16, u32>, op: &Op) {
        match *op {
            Op::Insert(k, v) => assert_eq!(map.insert(k, v), model.insert(k, v)),
            Op::Remove(k) => assert_eq!(map.remove(&k), model.remove(&k)),
            Op::Change(k) => {
                if let Some(v) = map.get_mut(&k) {
                    *v = v.wrapping_add(1);
                }
                if let Some(v) = model.get_mut(&k) {
                    *v = v.wrapping_add(1);
                }
            }
            Op::Retain(m) => {
                let mut asked = Vec::new();
                map.retain(|k, _| {
                    asked.push(*k);
                    k % m != 0
                });
                assert!(asked.iter().eq(model.keys()), "each entry asked once, in key order");
                model.retain(|k, _| k % m != 0);
            }
            Op::PopFirst => assert_eq!(map.pop_first(), model.pop_first()),
        }
    }

    fn same(map: &SharedMap<u16, u32>, model: &BTreeMap<u16, u32>) {
        assert_eq!(map.len(), model.len());
        assert!(map.iter().eq(model.iter()), "in the same order");
        assert!(map.iter().rev().eq(model.iter().rev()));
        for k in 0..400 {
            assert_eq!(map.get(&k), model.get(&k));
            assert_eq!(map.get_key_value(&k), model.get_key_value(&k));
            assert_eq!(map.contains_key(&k), model.contains_key(&k));
            assert!(map.range_from(&k).eq(model.range(k..)), "from {k}");
        }
        for pair in map.chunks.windows(2) {
            assert!(
                pair[0].last().unwrap().0 < pair[1].first().unwrap().0,
                "chunks in order"
            );
        }
        assert!(map.chunks.iter().all(|c| !c.is_empty() && c.len() <= CHUNK));
        assert!(
            map.chunks.iter().all(|c| c.capacity() <= CHUNK),
            "no chunk allocates past a full one"
        );
    }

    proptest! {
        /// A SharedMap answers as a BTreeMap does, and a copy changed apart from it tells
        /// exactly the entries that differ, whatever chunks the two share.
        #[test]
        fn a_shared_map_answers_as_a_btree_map_and_tells_what_a_copy_changed(history in ops(), decision in ops()) {
            let (mut map, mut model) = (SharedMap::new(), BTreeMap::new());
            for op in &history {
                apply(&mut map, &mut model, op);
            }
            same(&map, &model);
            let (before, before_model) = (map.clone(), model.clone());
            for op in &decision {
                apply(&mut map, &mut model, op);
            }
            same(&map, &model);
            same(&before, &before_model);
            let mut expected = Vec::new();
            let keys: std::collections::BTreeSet<_> = before_model.keys().chain(model.keys()).collect();
            for k in keys {
                let (was, is) = (before_model.get(k), model.get(k));
                if was != is {
                    expected.push((k, was, is));
                }
            }
            prop_assert_eq!(before.changes(&map), expected.clone());
            prop_assert_eq!(before == map, expected.is_empty());
            // Read back as stored: a JSON object in key order.
            let json = serde_json::to_string(&map).unwrap();
            prop_assert_eq!(&json, &serde_json::to_string(&model).unwrap());
            let read: SharedMap<u16, u32> = serde_json::from_str(&json).unwrap();
            same(&read, &model);
        }
    }

    /// Most states hold a few executions and readings: their maps allocate for those, not
    /// for a full chunk each.
    #[test]
    fn a_small_map_allocates_for_what_it_holds() {
        let mut map: SharedMap<u32, u32> = SharedMap::new();
        map.insert(1, 1);
        assert!(map.chunks[0].capacity() <= 4, "{}", map.chunks[0].capacity());
        for k in 2..=CHUNK as u32 {
            map.insert(k, k);
        }
        assert_eq!(map.chunks.len(), 1);
        assert_eq!(map.chunks[0].capacity(), CHUNK, "grown to a full chunk, not past it");
    }

    /// What sharing buys: a copy shares every chunk, a change copies one, and telling what
    /// changed visits the entries of that chunk only.
    #[test]
    fn a_copy_changed_in_one_entry_shares_every_other_chunk() {
        let map: SharedMap<u32, Shared<u32>> = (0..10 * CHUNK as u32).map(|k| (k, Shared::new(k))).collect();
        let mut copy = map.clone();
        assert!(map.chunks.iter().zip(&copy.chunks).all(|(a, b)| Arc::ptr_eq(a, b)));
        **copy.get_mut(&5).unwrap() += 1;
        let shared = (map.chunks.iter().zip(&copy.chunks))
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(
            shared,
            map.chunks.len() - 1,
            "only the changed entry's chunk was copied"
        );
        assert_eq!(*map.get(&5).unwrap().deref(), 5, "the original is untouched");
        let changes = map.changes(&copy);
        assert_eq!(changes.len(), 1);
        assert_eq!(*changes[0].0, 5);
    }

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
