//! A group's allocatable space in memory: mballoc's buddy, in our own layout.
//!
//! `free[k]` has one bit per naturally aligned chunk of 2^k blocks, set when every block
//! of the chunk is allocatable. Order 0 is the allocation view: the on-disk bitmap plus
//! blocks freed by uncommitted transactions plus unused preallocations, all "used". A
//! chunk is *maximal* at order k when it is free and its parent chunk (order k+1) is not
//! (or k is the top order): ext4's buddy bit. `counters[k]` counts maximal chunks, so
//! the largest free order is the highest k with a nonzero counter. `fragments` counts
//! maximal runs of free blocks. Every update is incremental and touches only the words
//! that hold the changed range and its ancestors; the result always equals
//! [`Buddy::build`] from the same view (tested here and under threads in
//! `tests/alloc_variants.rs`).

/// Orders kept for 4 KiB blocks: chunks of 1 block up to 2^13 (a quarter of a group),
/// ext4's `MB_NUM_ORDERS` = blocksize_bits + 2.
pub fn orders_for(block_size: u32) -> usize {
    block_size.trailing_zeros() as usize + 2
}

/// The free-space index of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buddy {
    /// Per order, the entirely-free bitmap, 64 chunks per word.
    free: Vec<Box<[u64]>>,
    /// Blocks covered by order 0 (the bitmap's size in bits; a power of two).
    bits: usize,
    /// Maximal free chunks per order.
    counters: Vec<u32>,
    /// Allocatable blocks.
    nfree: u32,
    /// Maximal runs of allocatable blocks.
    fragments: u32,
}

/// Spread the 32 bits of `x` to the even bit positions of a u64.
fn spread(x: u32) -> u64 {
    let mut x = u64::from(x);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// Gather the even bit positions of `x` into 32 bits (inverse of `spread`).
fn gather(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// Mask of bits `[lo, hi)` inside one word (`hi` up to 64).
fn mask(lo: usize, hi: usize) -> u64 {
    let top = if hi >= 64 { u64::MAX } else { (1u64 << hi) - 1 };
    top & !((1u64 << lo) - 1)
}

impl Buddy {
    /// Build from an ext4-style bitmap (`used`, bit set = not allocatable) of
    /// `used.len() * 8` blocks, with `orders` orders.
    pub fn build(used: &[u8], orders: usize) -> Buddy {
        let bits = used.len() * 8;
        assert!(bits.is_power_of_two() && bits >= 64 && orders >= 1);
        let orders = orders.min(bits.trailing_zeros() as usize + 1);
        let mut free: Vec<Box<[u64]>> = (0..orders)
            .map(|k| vec![0u64; (bits >> k).div_ceil(64)].into_boxed_slice())
            .collect();
        for (w, chunk) in used.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            free[0][w] = !u64::from_le_bytes(b);
        }
        let mut bd = Buddy {
            free,
            bits,
            counters: vec![0; orders],
            nfree: 0,
            fragments: 0,
        };
        for k in 1..orders {
            for w in 0..bd.free[k].len() {
                bd.derive(k, w);
            }
        }
        bd.nfree = bd.free[0].iter().map(|w| w.count_ones()).sum();
        for k in 0..orders {
            bd.counters[k] = (0..bd.free[k].len()).map(|w| bd.maximal(k, w)).sum();
        }
        bd.fragments = (0..bd.free[0].len()).map(|w| bd.starts(w)).sum();
        debug_assert!(bd.consistent(), "a built buddy's counters disagree");
        bd
    }

    /// Whether the counters agree with each other: every allocatable block lies in
    /// exactly one maximal chunk, and every run holds at least one block.
    fn consistent(&self) -> bool {
        let in_chunks: u64 = self
            .counters
            .iter()
            .enumerate()
            .map(|(k, &c)| u64::from(c) << k)
            .sum();
        in_chunks == u64::from(self.nfree) && self.fragments <= self.nfree
    }

    /// Recompute word `w` of order `k` (k >= 1) from order k-1.
    fn derive(&mut self, k: usize, w: usize) {
        self.free[k][w] = self.derived(k, w);
    }

    /// Word `w` of order `k` (k >= 1) as order k-1 makes it.
    fn derived(&self, k: usize, w: usize) -> u64 {
        let child = &self.free[k - 1];
        let lo = child[2 * w];
        let hi = child.get(2 * w + 1).copied().unwrap_or(0);
        let v = u64::from(gather(lo & (lo >> 1))) | (u64::from(gather(hi & (hi >> 1))) << 32);
        let n = self.bits >> k;
        if n >= (w + 1) * 64 {
            v
        } else {
            v & mask(0, n - w * 64)
        }
    }

    /// Maximal chunks of order `k` that a change of blocks `[s, e)` can affect.
    fn count(&self, k: usize, s: usize, e: usize) -> u32 {
        self.affected(k, s, e).map(|w| self.maximal(k, w)).sum()
    }

    /// Maximal chunks in word `w` of order `k`.
    fn maximal(&self, k: usize, w: usize) -> u32 {
        let f = self.free[k][w];
        if k + 1 == self.free.len() {
            return f.count_ones();
        }
        let parent = (self.free[k + 1][w / 2] >> ((w % 2) * 32)) as u32;
        match parent {
            0 => f.count_ones(),
            u32::MAX => 0,
            _ => {
                let p = spread(parent);
                (f & !(p | (p << 1))).count_ones()
            }
        }
    }

    /// Starts of free runs in word `w` of order 0.
    fn starts(&self, w: usize) -> u32 {
        let f = &self.free[0];
        let prev = if w == 0 { 0 } else { f[w - 1] >> 63 };
        (f[w] & !((f[w] << 1) | prev)).count_ones()
    }

    /// Words of order `k` whose maximal bits can change when blocks `[s, e)` change.
    fn affected(&self, k: usize, s: usize, e: usize) -> std::ops::RangeInclusive<usize> {
        let (lo, hi) = if k + 1 == self.free.len() {
            (s >> k, (e - 1) >> k)
        } else {
            ((s >> (k + 1)) << 1, (((e - 1) >> (k + 1)) << 1) | 1)
        };
        let last = self.free[k].len() - 1;
        (lo / 64).min(last)..=(hi / 64).min(last)
    }

    /// Mark blocks `[s, e)` free (`free`) or used. Returns how many changed state.
    ///
    /// Bottom-up: order 0, then each order from the one below, stopping at the first
    /// order whose words do not change (nothing above it can). Each changed order's
    /// maximal-chunk counter moves by the difference over the words it can affect.
    pub fn set(&mut self, s: usize, e: usize, free: bool) -> u32 {
        assert!(
            s < e && e <= self.bits,
            "buddy range {s}..{e} of {}",
            self.bits
        );
        let orders = self.free.len();
        let fw = s / 64..=(e.min(self.bits - 1)) / 64;
        let starts_before: u32 = fw.clone().map(|w| self.starts(w)).sum();
        let mut before = self.count(0, s, e);
        let mut changed = 0;
        for w in s / 64..=(e - 1) / 64 {
            let m = mask(s.max(w * 64) - w * 64, e.min(w * 64 + 64) - w * 64);
            let old = self.free[0][w];
            let new = if free { old | m } else { old & !m };
            changed += (old ^ new).count_ones();
            self.free[0][w] = new;
        }
        for k in 1..=orders {
            let words = (s >> k) / 64..=((e - 1) >> k) / 64;
            let moved = k < orders && words.clone().any(|w| self.derived(k, w) != self.free[k][w]);
            let before_k = if moved { self.count(k, s, e) } else { 0 };
            if moved {
                for w in words {
                    self.derive(k, w);
                }
            }
            let after = self.count(k - 1, s, e);
            self.counters[k - 1] = self.counters[k - 1] + after - before;
            if !moved {
                break;
            }
            before = before_k;
        }
        let starts_after: u32 = fw.map(|w| self.starts(w)).sum();
        self.fragments = self.fragments + starts_after - starts_before;
        if free {
            self.nfree += changed;
        } else {
            self.nfree -= changed;
        }
        debug_assert!(
            self.nfree as usize <= self.bits && self.consistent(),
            "buddy counters after setting {s}..{e} {}",
            if free { "free" } else { "used" }
        );
        changed
    }

    /// Allocatable blocks.
    pub fn nfree(&self) -> u32 {
        self.nfree
    }

    /// Maximal runs of allocatable blocks.
    pub fn fragments(&self) -> u32 {
        self.fragments
    }

    /// Maximal free chunks of each order.
    pub fn counters(&self) -> &[u32] {
        &self.counters
    }

    /// Highest order with a free chunk; `None` when nothing is allocatable.
    pub fn largest_order(&self) -> Option<usize> {
        self.counters.iter().rposition(|&c| c > 0)
    }

    /// Average free run in blocks (0 when nothing is free).
    pub fn avg_fragment(&self) -> u32 {
        self.nfree.checked_div(self.fragments).unwrap_or(0)
    }

    /// Orders kept.
    pub fn orders(&self) -> usize {
        self.free.len()
    }

    /// Whether block `i` is allocatable.
    pub fn is_free(&self, i: usize) -> bool {
        self.free[0][i / 64] >> (i % 64) & 1 != 0
    }

    /// First allocatable block in `[from, to)`.
    fn next_free(&self, from: usize, to: usize) -> Option<usize> {
        self.next_with(from, to, false)
    }

    /// First used block in `[from, to)`.
    fn next_used(&self, from: usize, to: usize) -> Option<usize> {
        self.next_with(from, to, true)
    }

    fn next_with(&self, from: usize, to: usize, used: bool) -> Option<usize> {
        let f = &self.free[0];
        let mut w = from / 64;
        let mut cur = (if used { !f.get(w)? } else { *f.get(w)? }) & !((1u64 << (from % 64)) - 1);
        loop {
            if cur != 0 {
                let i = w * 64 + cur.trailing_zeros() as usize;
                return (i < to).then_some(i);
            }
            w += 1;
            if w * 64 >= to {
                return None;
            }
            cur = if used { !f[w] } else { f[w] };
        }
    }

    /// Length of the free run starting at `off`, counting at most `max` blocks.
    pub fn run_at(&self, off: usize, max: usize) -> usize {
        if off >= self.bits || !self.is_free(off) {
            return 0;
        }
        let to = (off + max).min(self.bits);
        self.next_used(off, to).unwrap_or(to) - off
    }

    /// A free aligned chunk of order `k`, the first at or after `near` (wrapping).
    pub fn find_aligned(&self, k: usize, near: usize) -> Option<usize> {
        let f = self.free.get(k)?;
        let n = self.bits >> k;
        let start = (near >> k).min(n - 1);
        let scan = |lo: usize, hi: usize| -> Option<usize> {
            let mut i = lo;
            while i < hi {
                let w = i / 64;
                let cur = f[w] & !((1u64 << (i % 64)) - 1);
                if cur != 0 {
                    let j = w * 64 + cur.trailing_zeros() as usize;
                    return (j < hi).then_some(j);
                }
                i = (w + 1) * 64;
            }
            None
        };
        let found = scan(start, n).or_else(|| scan(0, start)).map(|i| i << k);
        debug_assert!(
            found.is_none_or(|o| self.run_at(o, 1 << k) == 1 << k),
            "aligned chunk of order {k} at {found:?} is not all free"
        );
        found
    }

    /// Free runs from `from` to the end, then from 0 to `from` (a run crossing `from`
    /// is seen from `from`), each as (start, length).
    pub fn runs_from(&self, from: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let from = from.min(self.bits);
        let mut segs = [(from, self.bits), (0, from)].into_iter();
        let mut cur: Option<(usize, usize)> = segs.next();
        std::iter::from_fn(move || loop {
            let (i, hi) = cur?;
            if let Some(s) = self.next_free(i, hi) {
                let e = self.next_used(s, hi).unwrap_or(hi);
                cur = Some((e, hi));
                return Some((s, e - s));
            }
            cur = segs.next();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive_counts(used: &[bool], orders: usize) -> (Vec<u32>, u32, u32) {
        let n = used.len();
        let free_at = |k: usize, i: usize| (i << k..(i + 1) << k).all(|b| !used[b]);
        let mut c = vec![0; orders];
        for (k, ck) in c.iter_mut().enumerate() {
            for i in 0..n >> k {
                let parent_free = k + 1 < orders && free_at(k + 1, i / 2);
                if free_at(k, i) && !parent_free {
                    *ck += 1;
                }
            }
        }
        let nfree = used.iter().filter(|u| !**u).count() as u32;
        let frags = (0..n)
            .filter(|&i| !used[i] && (i == 0 || used[i - 1]))
            .count() as u32;
        (c, nfree, frags)
    }

    fn to_map(used: &[bool]) -> Vec<u8> {
        let mut m = vec![0u8; used.len() / 8];
        for (i, &u) in used.iter().enumerate() {
            if u {
                m[i / 8] |= 1 << (i % 8);
            }
        }
        m
    }

    #[test]
    fn spread_and_gather_are_inverse() {
        for x in [0u32, 1, 0x8000_0001, 0xdead_beef, u32::MAX] {
            assert_eq!(gather(spread(x)), x);
        }
        assert_eq!(spread(0b11), 0b101);
    }

    #[test]
    fn empty_group_is_one_top_chunk_per_quarter() {
        let b = Buddy::build(&[0u8; 4096], orders_for(4096));
        assert_eq!(b.orders(), 14);
        assert_eq!(b.counters()[13], 4);
        assert_eq!(b.counters().iter().sum::<u32>(), 4);
        assert_eq!((b.nfree(), b.fragments()), (32768, 1));
        assert_eq!(b.largest_order(), Some(13));
        let full = Buddy::build(&[0xffu8; 4096], 14);
        assert_eq!(
            (full.nfree(), full.fragments(), full.largest_order()),
            (0, 0, None)
        );
    }

    proptest! {
        #[test]
        fn incremental_updates_equal_a_rebuild(
            ops in proptest::collection::vec((0usize..1024, 1usize..200, any::<bool>()), 1..60),
            init in proptest::collection::vec(any::<bool>(), 1024),
        ) {
            let orders = 8;
            let mut used = init.clone();
            let mut b = Buddy::build(&to_map(&used), orders);
            for (s, n, free) in ops {
                let e = (s + n).min(1024);
                let changed = b.set(s, e, free);
                let before = used[s..e].iter().filter(|u| **u == free).count() as u32;
                prop_assert_eq!(changed, before);
                used[s..e].iter_mut().for_each(|u| *u = !free);
                let rebuilt = Buddy::build(&to_map(&used), orders);
                prop_assert_eq!(&b, &rebuilt);
                let (c, nfree, frags) = naive_counts(&used, orders);
                prop_assert_eq!(b.counters(), &c[..]);
                prop_assert_eq!((b.nfree(), b.fragments()), (nfree, frags));
            }
            let runs: Vec<_> = b.runs_from(300).collect();
            let total: usize = runs.iter().map(|r| r.1).sum();
            prop_assert_eq!(total as u32, b.nfree());
            for (s, l) in runs {
                prop_assert!((s..s + l).all(|i| !used[i]));
                prop_assert_eq!(b.run_at(s, l), l);
            }
        }
    }

    #[test]
    fn aligned_search_wraps_from_near() {
        let mut used = vec![true; 1024];
        used[64..128].iter_mut().for_each(|u| *u = false);
        used[512..600].iter_mut().for_each(|u| *u = false);
        let b = Buddy::build(&to_map(&used), 8);
        assert_eq!(b.find_aligned(5, 0), Some(64));
        assert_eq!(b.find_aligned(5, 200), Some(512));
        assert_eq!(b.find_aligned(6, 700), Some(64));
        assert_eq!(b.find_aligned(7, 0), None);
        assert_eq!(b.run_at(512, 1000), 88);
        assert_eq!(b.run_at(513, 10), 10);
        assert_eq!(b.run_at(600, 10), 0);
    }
}
