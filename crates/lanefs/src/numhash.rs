//! Hashing of number keys (inode and block numbers) for the engine's hash maps.
//!
//! The standard library's default hasher (SipHash-1-3, keyed per map against hash
//! flooding) costs tens of nanoseconds per lookup; the keys here are numbers the engine
//! itself hands out, not input an attacker picks. [`NumHash`] is SplitMix64's finalizer:
//! two multiplies and three shifts, every output bit depending on every input bit. That
//! matters where a map sits behind a sharding step: the buffer cache picks a shard from
//! the top bits of a Fibonacci product ([`fib_bits`]), and hashbrown takes its tags from
//! the top bits of the map's hash and its buckets from the low bits, so a map hash that
//! shared those bits with the shard choice would give every block of a shard one tag.

use std::hash::{BuildHasher, Hasher};

/// 2^64 over the golden ratio, odd.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The top `bits` bits of `v` times 2^64 over the golden ratio (Fibonacci hashing): an
/// index into `2^bits` slots that spreads runs of consecutive numbers evenly (the middle
/// bits of the product do not: they repeat along such runs).
pub fn fib_bits(v: u64, bits: u32) -> usize {
    debug_assert!((1..=63).contains(&bits), "{bits} bits");
    (v.wrapping_mul(GOLDEN) >> (64 - bits)) as usize
}

/// SplitMix64's finalizer of `v`.
pub fn mix(v: u64) -> u64 {
    let mut z = v.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The hash for maps keyed by a `u64` number.
#[derive(Default, Clone, Copy, Debug)]
pub struct NumHash;

/// The hasher of [`NumHash`].
#[derive(Default)]
pub struct NumHasher(u64);

impl Hasher for NumHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Keys other than one u64 (the engine's maps have none): FNV-1a, then mixed.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        self.0 = mix(self.0);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(v);
    }
}

impl BuildHasher for NumHash {
    type Hasher = NumHasher;
    fn build_hasher(&self) -> NumHasher {
        NumHasher(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_shards_numbers_keep_their_tags_and_buckets_apart() {
        // The numbers of 100,000 consecutive ones that land in one of 64 shards: their
        // hashbrown tags (top 7 bits) and buckets (low 10 bits) still spread.
        let b = NumHash;
        let shard: Vec<u64> = (5_000_000..5_100_000u64)
            .filter(|&v| fib_bits(v, 6) == 17)
            .collect();
        assert!(shard.len() > 1_000, "{} numbers in the shard", shard.len());
        let tags: HashSet<u64> = shard.iter().map(|&v| b.hash_one(v) >> 57).collect();
        let buckets: HashSet<u64> = shard.iter().map(|&v| b.hash_one(v) & 1023).collect();
        assert!(tags.len() >= 120, "{} of 128 tags", tags.len());
        assert!(buckets.len() >= 700, "{} of 1024 buckets", buckets.len());
    }

    #[test]
    fn fibonacci_bits_spread_a_run_of_numbers() {
        // 65,536 consecutive numbers into 65,536 slots: Fibonacci hashing spaces them
        // almost evenly (a random hash would fill 63 % of the slots, and the product's
        // middle bits a seventh).
        let mut per = vec![0u32; 1 << 16];
        for v in 250_000..250_000 + 65_536u64 {
            per[fib_bits(v, 16)] += 1;
        }
        let used = per.iter().filter(|&&n| n > 0).count();
        assert!(used > 65_536 * 85 / 100, "{used} of 65,536 slots");
        assert!(per.iter().all(|&n| n <= 2), "a slot took three");
    }
}
