//! The inode bitmaps in memory: a group's atomic search and live bitmaps ([`SearchMap`]),
//! laid out in cache lines of one chunk of inodes each, read without a lock and claimed
//! by test-and-set, and the plain per-chunk bitmap of a transaction's fresh inodes
//! ([`BitLine`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Inodes in a chunk: one cache line (eight words) of the search bitmap.
pub(super) const CHUNK: usize = 512;

/// Search-bitmap words in a chunk.
pub(super) const CHUNK_WORDS: usize = CHUNK / 64;

/// One chunk's words of a plain bitmap, alone on a cache line.
#[repr(align(64))]
#[derive(Clone, Copy, Default)]
pub(super) struct BitLine([u64; CHUNK_WORDS]);

impl BitLine {
    /// Bit `i` of a map of lines, its word and mask.
    pub(super) fn locate(map: &mut [BitLine], i: usize) -> (&mut u64, u64) {
        (&mut map[i / CHUNK].0[i % CHUNK / 64], 1 << (i % 64))
    }
}

/// A group's search bitmap: a bit per inode, set when in use, laid out in cache lines of
/// one chunk each, so lanes filling different chunks never write the same line.
pub(super) struct SearchMap(Box<[SearchLine]>);

/// One chunk's words, alone on a cache line.
#[repr(align(64))]
pub(super) struct SearchLine([AtomicU64; CHUNK_WORDS]);

impl SearchMap {
    /// A map of `bits` bits whose word `w` starts as `init(w)`; the words of the last
    /// line past the last bit's word read as all used.
    pub(super) fn new(bits: usize, init: impl Fn(usize) -> u64) -> SearchMap {
        let words = bits.div_ceil(64);
        SearchMap(
            (0..words.div_ceil(CHUNK_WORDS))
                .map(|l| {
                    SearchLine(std::array::from_fn(|i| {
                        let w = l * CHUNK_WORDS + i;
                        AtomicU64::new(if w < words { init(w) } else { u64::MAX })
                    }))
                })
                .collect(),
        )
    }

    /// Word `w`.
    pub(super) fn word(&self, w: usize) -> &AtomicU64 {
        &self.0[w / CHUNK_WORDS].0[w % CHUNK_WORDS]
    }

    /// Word `w`, or all set past the map's end.
    pub(super) fn word_or_full(&self, w: usize) -> u64 {
        self.0
            .get(w / CHUNK_WORDS)
            .map_or(u64::MAX, |l| l.0[w % CHUNK_WORDS].load(Ordering::Relaxed))
    }

    /// Clear bits among the first `bits`.
    pub(super) fn zeros(&self, bits: usize) -> usize {
        (0..bits.div_ceil(64))
            .map(|w| {
                let n = (bits - w * 64).min(64);
                let mask = if n == 64 { !0 } else { (1u64 << n) - 1 };
                (!self.word(w).load(Ordering::Relaxed) & mask).count_ones() as usize
            })
            .sum()
    }

    /// Whether bit `i` is set.
    pub(super) fn test(&self, i: usize) -> bool {
        self.word(i / 64).load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    /// Clear bit `i`.
    pub(super) fn clear(&self, i: usize) {
        let was = self
            .word(i / 64)
            .fetch_and(!(1 << (i % 64)), Ordering::Release);
        // Callers clear a bit they know set, under the group's lock (the only place
        // bits are cleared).
        debug_assert!(was & (1 << (i % 64)) != 0, "inode bit {i} cleared twice");
    }

    /// Whether chunk `c` is entirely free from bit `first` on (the bits before it are
    /// group 0's reserved inodes).
    pub(super) fn chunk_free(&self, c: usize, first: usize) -> bool {
        self.0[c].0.iter().enumerate().all(|(i, w)| {
            let base = (c * CHUNK_WORDS + i) * 64;
            let below = first.saturating_sub(base).min(64);
            let skip = if below == 64 { !0 } else { (1u64 << below) - 1 };
            w.load(Ordering::Relaxed) & !skip == 0
        })
    }
}

/// Atomically set bit `i`; whether it was already set.
pub(super) fn test_and_set(words: &SearchMap, i: usize) -> bool {
    let m = 1u64 << (i % 64);
    words.word(i / 64).fetch_or(m, Ordering::AcqRel) & m != 0
}

/// The first zero bit of `words` in `[from, end)`, read without a lock.
pub(super) fn find_zero_atomic(words: &SearchMap, from: usize, end: usize) -> Option<usize> {
    let mut i = from;
    while i < end {
        let w = words.word(i / 64).load(Ordering::Acquire) | ((1u64 << (i % 64)) - 1);
        if w != u64::MAX {
            let bit = (i / 64) * 64 + (!w).trailing_zeros() as usize;
            return (bit < end).then_some(bit);
        }
        i = (i / 64 + 1) * 64;
    }
    None
}
