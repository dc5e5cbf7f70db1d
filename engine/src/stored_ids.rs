//! HIST-5: which request ids may have a row in the store, so that an admission or cancel
//! naming a new id needs no store lookup (HIST-2) before it goes on.
//!
//! A Bloom filter: an id inserted is always reported as maybe stored (no false negatives); an
//! id never inserted is reported as maybe stored with a small probability (about 1.8 % with a
//! million ids, more beyond), which only costs the lookup HIST-2 makes today. The engine
//! inserts every id it asks the store to write (`PutRequest`, before the commit), and the
//! runtime seeds it once from every id the store holds; until that seed is complete
//! (`Input::HistorySeed { complete: true }`), every id not in memory is looked up.
//!
//! Hand-written (50 lines) rather than a crate: the engine must stay deterministic (the
//! Bloom filter crates seed their hashers from a random source), and a request id is a UUID
//! whose 128 bits, mixed, are the hashes (time-based UUIDs too: both hashes depend on both
//! halves). Ids chosen to collide, or a flood of them, can only make calls look up, never let
//! one skip.

use crate::ids::RequestId;

/// 2^23 bits: 1 MiB, allocated at the first insert.
const BITS_LOG2: u32 = 23;
/// Probes per id: the best number for about a million ids in 2^23 bits ((2^23 / 10^6) ln 2,
/// about 5.8): about 1.8 % false positives there, 0.0006 % at 200,000 ids, 19 % at two million.
const PROBES: u64 = 6;

#[derive(Clone, Default, PartialEq, Eq)]
pub struct StoredIds {
    /// Empty until the first insert.
    words: Vec<u64>,
    /// HIST-5: every id in the store was inserted (the runtime's seed is complete).
    seeded: bool,
}

impl std::fmt::Debug for StoredIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoredIds {{ allocated: {}, seeded: {} }}", !self.words.is_empty(), self.seeded)
    }
}

impl StoredIds {
    /// Remembers that `id` may be in the store from now on.
    pub fn insert(&mut self, id: &RequestId) {
        if self.words.is_empty() {
            self.words = vec![0; 1 << (BITS_LOG2 - 6)];
        }
        for bit in probes(id) {
            self.words[bit >> 6] |= 1 << (bit & 63);
        }
        debug_assert!(self.may_contain(id), "HIST-5: an inserted id is always maybe stored");
    }

    /// False only for an id that was never inserted.
    pub fn may_contain(&self, id: &RequestId) -> bool {
        !self.words.is_empty() && probes(id).all(|bit| self.words[bit >> 6] & (1 << (bit & 63)) != 0)
    }

    /// HIST-5: true once every id the store held at the seed's read was inserted, so a
    /// `false` from [`StoredIds::may_contain`] proves the id has no row.
    pub fn is_seeded(&self) -> bool {
        self.seeded
    }

    pub(crate) fn mark_seeded(&mut self) {
        self.seeded = true;
    }
}

/// The bit positions of `id`: double hashing over the two mixed halves of its 128 bits.
fn probes(id: &RequestId) -> impl Iterator<Item = usize> {
    let value = id.as_str().bytes().filter(u8::is_ascii_hexdigit).fold(0u128, |acc, digit| (acc << 4) | u128::from(hex_value(digit)));
    let (high, low) = ((value >> 64) as u64, value as u64);
    let first = mix(high ^ mix(low));
    let step = mix(low ^ mix(high ^ 0x9e37_79b9_7f4a_7c15)) | 1;
    let mask = (1u64 << BITS_LOG2) - 1;
    (0..PROBES).map(move |i| (first.wrapping_add(i.wrapping_mul(step)) & mask) as usize)
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        _ => (digit | 0x20) - b'a' + 10,
    }
}

/// splitmix64's finaliser: every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: u128) -> RequestId {
        let hex = format!("{n:032x}");
        RequestId::parse(&format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])).expect("uuid")
    }

    proptest! {
        /// HIST-5: no false negatives, whatever was inserted before or after.
        #[test]
        fn hist_5_an_inserted_id_is_always_maybe_stored(ids in proptest::collection::vec(any::<u128>(), 1..200)) {
            let mut stored = StoredIds::default();
            for n in &ids {
                stored.insert(&id(*n));
            }
            for n in &ids {
                prop_assert!(stored.may_contain(&id(*n)));
            }
        }
    }

    #[test]
    fn hist_5_an_empty_filter_contains_nothing_and_is_not_seeded() {
        let stored = StoredIds::default();
        assert!(!stored.may_contain(&id(1)));
        assert!(!stored.is_seeded());
    }

    /// Of 20,000 new ids (`make(100_000..120_000)`), how many a filter holding
    /// `make(0..100_000)` reports stored.
    fn false_positives(make: impl Fn(u128) -> u128) -> usize {
        let mut stored = StoredIds::default();
        for n in 0..100_000u128 {
            stored.insert(&id(make(n)));
        }
        (100_000..120_000u128).filter(|n| stored.may_contain(&id(make(*n)))).count()
    }

    /// HIST-5: the filter is worth having: with 100,000 ids, far fewer than 1 % of new ids
    /// would still be looked up (the expected rate is well under 0.001 %).
    #[test]
    fn hist_5_new_ids_are_rarely_reported_stored() {
        let false_positives = false_positives(|n| n.wrapping_mul(0x2545_f491_4f6c_dd1d_9e37_79b9_7f4a_7c15));
        assert!(false_positives < 200, "{false_positives} of 20,000 new ids were reported stored");
    }

    /// HIST-5: ids that differ only in their first half (time-based UUIDs of one node: the
    /// clock moves, the node and clock sequence stay) spread as well as random ones.
    #[test]
    fn hist_5_time_based_ids_are_rarely_reported_stored() {
        let node = 0x8f3a_1c2b_4d5e_6f70u128;
        let false_positives = false_positives(|n| (n << 64) | node);
        assert!(false_positives < 200, "{false_positives} of 20,000 new ids were reported stored");
    }

    #[test]
    fn hist_5_case_and_spelling_do_not_change_the_probes() {
        let lower = RequestId::parse("0f0e0d0c-0b0a-4908-8706-050403020100").expect("uuid");
        let upper = RequestId::parse("0F0E0D0C-0B0A-4908-8706-050403020100").expect("uuid");
        let mut stored = StoredIds::default();
        stored.insert(&lower);
        assert!(stored.may_contain(&upper), "RequestId::parse canonicalises, and the probes read the digits only");
    }
}
