//! Which partition a pipeline's records belong on.
//!
//! Every input topic is partitioned by the pipeline id with the Java client's default
//! partitioner (murmur2), so one task owns all of a pipeline's records. A record produced
//! with another partitioner (librdkafka's default, for one) lands elsewhere, away from its
//! pipeline's state; the processor rejects it rather than split the pipeline in two.

use serde::{Deserialize, Serialize};

/// A partition's number. Input topics and the changelog are co-partitioned (partition n of
/// each belongs to the same task), so one number names a task's partition on all of them.
/// A type of its own because a partition is not an offset, a count or an epoch, all `i32`s
/// or `i64`s too: the compiler keeps them apart. Serialised and printed (`Display` and
/// `Debug` alike, so messages and logs read as before) as the bare number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PartitionId(i32);

impl PartitionId {
    pub const fn new(number: i32) -> Self {
        PartitionId(number)
    }

    /// The number, for librdkafka, which takes and gives partitions as `i32`s.
    pub const fn number(self) -> i32 {
        self.0
    }
}

impl From<i32> for PartitionId {
    fn from(number: i32) -> Self {
        PartitionId(number)
    }
}

impl std::fmt::Display for PartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for PartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

/// Kafka's murmur2 hash (`org.apache.kafka.common.utils.Utils.murmur2`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: i32 = 0x5bd1_e995;
    let length = data.len() as i32;
    let mut h: i32 = (SEED as i32) ^ length;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= ((k as u32) >> 24) as i32;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= (*byte as i32) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= ((h as u32) >> 13) as i32;
    h = h.wrapping_mul(M);
    h ^= ((h as u32) >> 15) as i32;
    h
}

/// The partition the Java client's default partitioner picks for `key`.
pub fn partition_for(key: &[u8], partitions: i32) -> PartitionId {
    PartitionId((murmur2(key) & 0x7fff_ffff) % partitions.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_kafkas_reference_values() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key), hash, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn a_partition_is_written_and_printed_as_its_bare_number() {
        let p = PartitionId::new(7);
        assert_eq!(serde_json::to_string(&p).unwrap(), "7");
        assert_eq!(serde_json::from_str::<PartitionId>("7").unwrap(), p);
        assert_eq!(p.to_string(), "7");
        assert_eq!(format!("{p:>3} {:?}", [p]), "  7 [7]");
    }

    #[test]
    fn partitions_are_in_range() {
        for key in ["", "a", "gold-revenue", "orders-daily"] {
            let p = partition_for(key.as_bytes(), 3);
            assert!((0..3).contains(&p.number()), "{key}: {p}");
        }
    }
}
