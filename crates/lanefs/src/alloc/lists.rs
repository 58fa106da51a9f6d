//! `mb_optimize_scan`: groups indexed by largest free order and by average fragment
//! order, so a pass visits only groups that can serve it.
//!
//! Each order has a set of groups, one atomic bit per group, indexed by group number
//! (what Linux 6.17 made of its per-order lists with XArrays). A walk ORs the sets of
//! every acceptable order word by word and yields groups in group order from the goal,
//! wrapping: allocators starting from different goals walk different groups, instead of
//! all taking the head of one list. Readers take no lock. Membership is moved under the
//! group's lock after every change of its buddy, and is only a hint: every group found
//! here is checked again under its lock (a stale bit costs a look, never a wrong
//! allocation). A group not in any set is still found by the linear passes. Moves that
//! race on one word are checked by a loom model (`tests/loom_lists.rs`).

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// A set of groups.
pub struct GroupSet {
    words: Box<[AtomicU64]>,
}

impl GroupSet {
    /// An empty set for `n` groups.
    pub fn new(n: u32) -> GroupSet {
        GroupSet {
            words: (0..(n as usize).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// A set holding groups `0..n`.
    pub fn full(n: u32) -> GroupSet {
        let s = GroupSet::new(n);
        for g in 0..n {
            s.insert(g);
        }
        s
    }

    /// Add group `g`.
    pub fn insert(&self, g: u32) {
        self.words[g as usize / 64].fetch_or(1 << (g % 64), Ordering::Relaxed);
    }

    /// Remove group `g`.
    pub fn remove(&self, g: u32) {
        self.words[g as usize / 64].fetch_and(!(1 << (g % 64)), Ordering::Relaxed);
    }

    /// Whether `g` is in the set.
    pub fn contains(&self, g: u32) -> bool {
        self.words[g as usize / 64].load(Ordering::Relaxed) >> (g % 64) & 1 != 0
    }

    fn word(&self, w: usize) -> u64 {
        self.words[w].load(Ordering::Relaxed)
    }
}

/// Groups in any of `sets`, from `start` to the last group, then from 0 to `start`.
pub fn walk<'a>(sets: &'a [&'a GroupSet], n: u32, start: u32) -> impl Iterator<Item = u32> + 'a {
    let start = if start >= n { 0 } else { start };
    let segs = [(start, n), (0, start)];
    segs.into_iter().flat_map(move |(lo, hi)| {
        let mut next = lo;
        std::iter::from_fn(move || {
            while next < hi {
                let w = next as usize / 64;
                let bits = sets.iter().fold(0u64, |a, s| a | s.word(w)) & (u64::MAX << (next % 64));
                if bits != 0 {
                    let g = (w * 64) as u32 + bits.trailing_zeros();
                    if g >= hi {
                        next = hi;
                        return None;
                    }
                    next = g + 1;
                    return Some(g);
                }
                next = (w as u32 + 1) * 64;
            }
            None
        })
    })
}

/// Average fragment order of a run of `len` blocks: ext4's `fls(len) - 2`, clamped.
pub fn avg_order(len: u32, orders: usize) -> usize {
    let fls = 32 - len.leading_zeros() as usize;
    fls.saturating_sub(2).min(orders - 1)
}

/// The per-order sets.
pub struct ScanLists {
    /// Groups by largest free order.
    pub largest: Vec<GroupSet>,
    /// Groups by average fragment order (groups with nothing free are in none).
    pub avg: Vec<GroupSet>,
    /// Groups whose buddy is not built yet: candidates for every order.
    pub unbuilt: GroupSet,
}

impl ScanLists {
    /// Empty lists; every group unbuilt.
    pub fn new(groups: u32, orders: usize) -> ScanLists {
        ScanLists {
            largest: (0..orders).map(|_| GroupSet::new(groups)).collect(),
            avg: (0..orders).map(|_| GroupSet::new(groups)).collect(),
            unbuilt: GroupSet::full(groups),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_is_ordered_and_wraps() {
        let a = GroupSet::new(200);
        let b = GroupSet::new(200);
        for g in [3, 70, 150] {
            a.insert(g);
        }
        for g in [5, 70, 199] {
            b.insert(g);
        }
        let sets = [&a, &b];
        let got: Vec<u32> = walk(&sets, 200, 71).collect();
        assert_eq!(got, vec![150, 199, 3, 5, 70]);
        let got: Vec<u32> = walk(&sets, 200, 0).collect();
        assert_eq!(got, vec![3, 5, 70, 150, 199]);
        a.remove(150);
        assert!(!a.contains(150) && a.contains(70));
        let got: Vec<u32> = walk(&sets[..1], 200, 100).collect();
        assert_eq!(got, vec![3, 70]);
    }

    #[test]
    fn avg_order_matches_ext4() {
        assert_eq!(avg_order(1, 14), 0);
        assert_eq!(avg_order(2, 14), 0);
        assert_eq!(avg_order(4, 14), 1);
        assert_eq!(avg_order(32768, 14), 13);
        assert_eq!(avg_order(1 << 20, 14), 13);
    }
}
