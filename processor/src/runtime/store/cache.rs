//! A cache by pipeline bounded by an estimate of its entries' size in memory: past its
//! budget it evicts entries at random until the new one fits. The store keeps two: decoded
//! states and parsed configs.
//!
//! At random, not least recently used: the loop visits pipelines in cycles (every hourly
//! pipeline once an hour, a steady feed round the pipelines), and a cycle longer than the
//! cache would make LRU miss every time; random eviction keeps about capacity ÷ cycle of
//! the hits. It also never empties the cache at once, which made every pipeline decode its
//! whole history in the same few batches (a latency spike each time it filled).

use std::collections::HashMap;

use crate::core::ids::PipelineId;

pub struct RandomCache<V> {
    entries: HashMap<PipelineId, Cached<V>>,
    /// The cached pipelines, for picking one at random; each entry knows its index here.
    keys: Vec<PipelineId>,
    bytes: usize,
    budget: usize,
    rng: fastrand::Rng,
}

struct Cached<V> {
    value: V,
    size: usize,
    /// Where the pipeline is in [`RandomCache::keys`].
    slot: usize,
}

impl<V> RandomCache<V> {
    pub fn new(budget: usize, rng: fastrand::Rng) -> Self {
        RandomCache {
            entries: HashMap::new(),
            keys: Vec::new(),
            bytes: 0,
            budget,
            rng,
        }
    }

    pub fn get(&self, pipeline: &str) -> Option<&V> {
        self.entries.get(pipeline).map(|cached| &cached.value)
    }

    /// Keeps `value` (of estimated `size` bytes) for `pipeline`, evicting others at random
    /// until it fits; one larger than the whole budget is kept alone.
    pub fn insert(&mut self, pipeline: &PipelineId, value: V, size: usize) {
        self.remove(pipeline);
        while self.bytes + size > self.budget && !self.keys.is_empty() {
            let victim = self.keys[self.rng.usize(..self.keys.len())].clone();
            self.remove(&victim);
        }
        self.bytes += size;
        let slot = self.keys.len();
        self.keys.push(pipeline.clone());
        self.entries.insert(pipeline.clone(), Cached { value, size, slot });
    }

    pub fn remove(&mut self, pipeline: &str) {
        let Some(gone) = self.entries.remove(pipeline) else {
            return;
        };
        self.bytes -= gone.size;
        self.keys.swap_remove(gone.slot);
        // The last key moved into the freed slot.
        if let Some(moved) = self.keys.get(gone.slot) {
            self.entries.get_mut(moved.as_str()).expect("every key is cached").slot = gone.slot;
        }
    }

    /// Forgets every entry; the budget stays.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.keys.clear();
        self.bytes = 0;
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The cache's own account of itself, checked against what it holds.
    #[cfg(test)]
    pub fn assert_consistent(&self) {
        assert_eq!(self.keys.len(), self.entries.len());
        for (slot, key) in self.keys.iter().enumerate() {
            assert_eq!(self.entries[key.as_str()].slot, slot, "{key} knows its slot");
        }
        assert_eq!(self.bytes, self.entries.values().map(|c| c.size).sum::<usize>());
        assert!(self.bytes <= self.budget || self.entries.len() == 1);
    }

    /// A cached pipeline, the `n`th in the cache's own order.
    #[cfg(test)]
    pub fn key(&self, n: usize) -> &str {
        &self.keys[n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_cache_lets_go_of_one_entry_at_a_time() {
        let mut cache = RandomCache::new(100, fastrand::Rng::with_seed(7));
        for i in 0..10 {
            cache.insert(&format!("p{i}").into(), i, 10);
        }
        cache.assert_consistent();
        assert_eq!(cache.len(), 10, "ten fit");
        // Past the budget, one goes for each that comes: never the whole cache at once.
        for i in 10..1_000 {
            cache.insert(&format!("p{i}").into(), i, 10);
            cache.assert_consistent();
            assert_eq!(cache.len(), 10);
            assert_eq!(cache.get(&format!("p{i}")), Some(&i), "the newest is kept");
        }
        // Writing a cached pipeline again replaces it rather than counting it twice.
        let kept = PipelineId::from(cache.key(3));
        cache.insert(&kept, 0, 10);
        cache.assert_consistent();
        assert_eq!(cache.len(), 10);
        cache.remove(&kept);
        cache.assert_consistent();
        assert!(cache.get(&kept).is_none());
        assert_eq!(cache.len(), 9);
        // An entry larger than the budget is kept alone; cleared, the budget stays.
        cache.insert(&"big".into(), 0, 1_000);
        cache.assert_consistent();
        assert_eq!(cache.len(), 1);
        cache.clear();
        cache.assert_consistent();
        for i in 0..11 {
            cache.insert(&format!("p{i}").into(), i, 10);
        }
        assert_eq!(cache.len(), 10);
    }

    #[test]
    fn a_cache_cycled_through_keeps_some_hits() {
        // 100 pipelines visited in turn through a cache with room for 50: random eviction
        // keeps some of each cycle (least-recently-used, and emptying when full, keep none).
        let mut cache = RandomCache::new(50, fastrand::Rng::with_seed(11));
        let mut hits = 0;
        for round in 0..20 {
            for i in 0..100 {
                let pipeline = PipelineId::from(format!("p{i}"));
                if cache.get(&pipeline).is_some() {
                    hits += usize::from(round > 0);
                } else {
                    cache.insert(&pipeline, (), 1);
                }
            }
        }
        cache.assert_consistent();
        assert!(hits > 19 * 100 / 5, "{hits} hits of 1900 visits after the first round");
    }
}
