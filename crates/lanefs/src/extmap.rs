//! In-memory extent map of one file: the authority for logical-to-physical mapping
//! while the inode is cached. The on-disk tree is rebuilt from it by `inode::store_tree`.

use crate::disk::extent::{Extent, MAX_INIT_LEN, MAX_UNWRITTEN_LEN};
use std::collections::BTreeMap;

/// Sorted, non-overlapping extents keyed by first logical block.
#[derive(Clone, Debug, Default)]
pub struct ExtentMap {
    map: BTreeMap<u32, Extent>,
    /// Every extent whose first block is below this is as the tree last stored it (the
    /// store rewrites only the leaves at and after it; 0: everything may have changed).
    dirty_from: u32,
}

impl PartialEq for ExtentMap {
    fn eq(&self, other: &ExtentMap) -> bool {
        self.map == other.map
    }
}

impl Eq for ExtentMap {}

/// Result of mapping one logical block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// Not allocated; `len` blocks of hole follow (up to the next extent or `u32::MAX`).
    Hole(u64),
    /// Allocated: physical block, unwritten flag, and blocks left in this extent.
    Mapped(u64, bool, u32),
}

impl ExtentMap {
    /// Build from extents (already sorted and non-overlapping).
    pub fn from_extents(v: Vec<Extent>) -> ExtentMap {
        // What `inode::load_extents` validated (or a block map's runs, cut to size).
        debug_assert!(
            v.windows(2).all(|w| w[0].lend() <= u64::from(w[1].lblk))
                && v.iter()
                    .all(|e| e.len > 0 && e.len <= max_len(e) && e.lend() <= 1 << 32),
            "extents unsorted, overlapping or too long"
        );
        ExtentMap {
            map: v.into_iter().map(|e| (e.lblk, e)).collect(),
            dirty_from: 0,
        }
    }
    /// The lowest first block of an extent added, removed or changed since
    /// [`ExtentMap::mark_stored`] (0 for a new or loaded map: all of it).
    pub fn dirty_from(&self) -> u32 {
        self.dirty_from
    }
    /// The tree now holds every extent as the map has it.
    pub fn mark_stored(&mut self) {
        self.dirty_from = u32::MAX;
    }
    fn touch(&mut self, lblk: u32) {
        self.dirty_from = self.dirty_from.min(lblk);
    }
    /// Extents whose first block is `lblk` or more, in order.
    pub fn range_from(&self, lblk: u32) -> impl Iterator<Item = &Extent> {
        self.map.range(lblk..).map(|(_, e)| e)
    }
    /// All extents in order.
    pub fn extents(&self) -> impl Iterator<Item = &Extent> {
        self.map.values()
    }
    /// Number of extents.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// The extent containing `lblk`, if any.
    pub fn find(&self, lblk: u32) -> Option<Extent> {
        let (_, e) = self.map.range(..=lblk).next_back()?;
        (u64::from(lblk) < e.lend()).then_some(*e)
    }
    /// Extents that end after `lblk`, in order (the one containing it first, if any).
    pub fn from_block(&self, lblk: u32) -> impl Iterator<Item = &Extent> {
        let start = self.find(lblk).map_or(lblk, |e| e.lblk);
        self.map.range(start..).map(|(_, e)| e)
    }
    /// Map one logical block.
    pub fn map(&self, lblk: u32) -> Mapping {
        if let Some(e) = self.find(lblk) {
            return Mapping::Mapped(
                e.pblk + u64::from(lblk - e.lblk),
                e.unwritten,
                e.lblk + e.len - lblk,
            );
        }
        let next = self.map.range(lblk..).next().map(|(k, _)| u64::from(*k));
        Mapping::Hole(next.unwrap_or(1 << 32) - u64::from(lblk))
    }
    /// The physical block right after the extent before `lblk` (allocation goal).
    pub fn goal_for(&self, lblk: u32) -> Option<u64> {
        let (_, e) = self.map.range(..lblk).next_back()?;
        Some(e.pblk + u64::from(lblk - e.lblk))
    }
    /// Where the hole or extent at `lblk` begins after the extent before it: that
    /// extent's end (0 when none is before).
    pub fn prev_end(&self, lblk: u32) -> u64 {
        self.map
            .range(..lblk)
            .next_back()
            .map_or(0, |(_, e)| e.lend())
    }
    /// Highest mapped logical block + 1.
    pub fn end(&self) -> u64 {
        self.map.values().next_back().map_or(0, |e| e.lend())
    }

    /// Insert a new extent over a hole, merging with neighbours when contiguous.
    pub fn insert(&mut self, e: Extent) {
        // The on-disk length field holds no more (an unwritten extent of 32768 blocks
        // would be stored as an empty written one), and logical blocks end at 2^32.
        assert!(
            e.len > 0 && e.len <= max_len(&e),
            "extent {e:?} longer than the format holds"
        );
        debug_assert!(e.lend() <= 1 << 32, "extent {e:?} wraps the logical blocks");
        debug_assert!(
            self.range_is_hole(e.lblk, e.len),
            "insert over mapped range {e:?}"
        );
        let mut e = e;
        if let Some((_, p)) = self.map.range(..e.lblk).next_back() {
            let p = *p;
            if mergeable(&p, &e) {
                self.map.remove(&p.lblk);
                e = Extent {
                    lblk: p.lblk,
                    len: p.len + e.len,
                    pblk: p.pblk,
                    unwritten: e.unwritten,
                };
            }
        }
        if let Some(n) = self.map.get(&(e.lblk + e.len)).copied() {
            if mergeable(&e, &n) {
                self.map.remove(&n.lblk);
                e.len += n.len;
            }
        }
        // A merge with the extent before starts there; the one after is above it.
        self.touch(e.lblk);
        self.map.insert(e.lblk, e);
    }

    fn range_is_hole(&self, lblk: u32, len: u32) -> bool {
        let end = u64::from(lblk) + u64::from(len);
        self.find(lblk).is_none()
            && self
                .map
                .range(lblk..)
                .next()
                .is_none_or(|(k, _)| u64::from(*k) >= end)
    }

    /// Split the extent containing `lblk` so that an extent boundary falls there; returns
    /// whether it split one. The mapping stays the same, in one record more
    /// ([`ExtentMap::join_at`] undoes it).
    pub fn split_at(&mut self, lblk: u32) -> bool {
        let Some(e) = self.find(lblk).filter(|e| e.lblk < lblk) else {
            return false;
        };
        self.touch(e.lblk);
        let head = lblk - e.lblk;
        self.map.insert(e.lblk, Extent { len: head, ..e });
        let tail = Extent {
            lblk,
            len: e.len - head,
            pblk: e.pblk + u64::from(head),
            unwritten: e.unwritten,
        };
        self.map.insert(lblk, tail);
        debug_assert!(head > 0 && tail.len > 0);
        true
    }

    /// Merge the extent starting at `lblk` into the one before it when the two continue
    /// each other (logically and physically, same written state, a length the format
    /// holds); returns whether it did. The mapping stays the same.
    pub fn join_at(&mut self, lblk: u32) -> bool {
        let Some(e) = self.map.get(&lblk).copied() else {
            return false;
        };
        let Some(p) = self.map.range(..lblk).next_back().map(|(_, p)| *p) else {
            return false;
        };
        if !mergeable(&p, &e) {
            return false;
        }
        self.map.remove(&lblk);
        self.touch(p.lblk);
        self.map.insert(
            p.lblk,
            Extent {
                len: p.len + e.len,
                ..p
            },
        );
        true
    }

    /// Move every extent starting at or after `from` down by `by` blocks (the left shift
    /// of ext4's `ext4_ext_shift_extents`, for FALLOC_FL_COLLAPSE_RANGE). The `by` blocks
    /// below `from` must be a hole; the first extent moved merges with the one before it
    /// when the two continue each other, as ext4 merges them.
    pub fn shift_down(&mut self, from: u32, by: u32) {
        assert!(by <= from, "shift of {by} blocks down from block {from}");
        debug_assert!(
            self.range_is_hole(from - by, by),
            "shift down onto mapped blocks {}..{from}",
            from - by
        );
        let tail = self.map.split_off(&from);
        let Some(&first) = tail.keys().next() else {
            return;
        };
        self.touch(first - by);
        for (k, e) in tail {
            self.map.insert(k - by, Extent { lblk: k - by, ..e });
        }
        self.join_at(first - by);
    }

    /// Move every extent starting at or after `from` up by `by` blocks, leaving a hole of
    /// `by` blocks at `from` (the right shift of `ext4_ext_shift_extents`, for
    /// FALLOC_FL_INSERT_RANGE). No extent may straddle `from` (split it first), and the last
    /// one must still end at or below block 2^32 - 1 (the caller checks: EINVAL in ext4).
    pub fn shift_up(&mut self, from: u32, by: u32) {
        debug_assert!(
            self.find(from).is_none_or(|e| e.lblk == from),
            "shift up from block {from} inside an extent"
        );
        assert!(
            self.end() + u64::from(by) <= u64::from(u32::MAX),
            "shift of {by} blocks up past the last logical block"
        );
        let tail = self.map.split_off(&from);
        let Some(&first) = tail.keys().next() else {
            return;
        };
        // Every extent from `first` on moves: the tree changes from its old place.
        self.touch(first);
        for (k, e) in tail {
            self.map.insert(k + by, Extent { lblk: k + by, ..e });
        }
    }

    /// Forget what the last store wrote: the next one rewrites the whole tree (after a
    /// store that failed part way, when the tree's blocks no longer say what they hold).
    pub fn mark_all_changed(&mut self) {
        self.dirty_from = 0;
    }

    /// Split extents at `start` and `end`; returns the keys of the extents inside.
    fn isolate(&mut self, start: u32, end: u64) -> Vec<u32> {
        self.split_at(start);
        if end < 1 << 32 {
            self.split_at(end as u32);
        }
        let keys: Vec<u32> = self
            .map
            .range(start..)
            .take_while(|(k, _)| u64::from(**k) < end)
            .map(|(k, _)| *k)
            .collect();
        debug_assert!(
            keys.iter().all(|k| self.map[k].lend() <= end),
            "an extent straddles the end {end} of an isolated range"
        );
        keys
    }

    /// Remove the mapping of `[start, end)`; returns the freed physical runs.
    pub fn remove_range(&mut self, start: u32, end: u64) -> Vec<(u64, u32)> {
        let keys = self.isolate(start, end);
        if let Some(&k) = keys.first() {
            self.touch(k);
        }
        let freed: Vec<(u64, u32)> = keys
            .iter()
            .filter_map(|k| self.map.remove(k))
            .map(|e| (e.pblk, e.len))
            .collect();
        debug_assert!(
            freed.iter().map(|r| u64::from(r.1)).sum::<u64>()
                <= end.saturating_sub(u64::from(start)),
            "more blocks freed than {start}..{end} holds"
        );
        freed
    }

    /// Mark `[start, start+len)` written (it must be mapped); merges afterwards.
    pub fn mark_written(&mut self, start: u32, len: u32) {
        for k in self.isolate(start, u64::from(start) + u64::from(len)) {
            if let Some(e) = self.map.remove(&k) {
                self.insert(Extent {
                    unwritten: false,
                    ..e
                });
            }
        }
    }

    /// Mark `[start, start+len)` unwritten again (undoing `mark_written`).
    pub fn mark_unwritten(&mut self, start: u32, len: u32) {
        for k in self.isolate(start, u64::from(start) + u64::from(len)) {
            if let Some(e) = self.map.remove(&k) {
                // A written extent may be one block longer than an unwritten one can be
                // (32768 against 32767): such a piece becomes two.
                let mut off = 0;
                while off < e.len {
                    let piece = (e.len - off).min(MAX_UNWRITTEN_LEN);
                    self.insert(Extent {
                        lblk: e.lblk + off,
                        len: piece,
                        pblk: e.pblk + u64::from(off),
                        unwritten: true,
                    });
                    off += piece;
                }
            }
        }
    }

    /// Total mapped blocks.
    pub fn mapped_blocks(&self) -> u64 {
        self.map.values().map(|e| u64::from(e.len)).sum()
    }
}

/// The longest extent of `e`'s kind the on-disk format holds.
fn max_len(e: &Extent) -> u32 {
    if e.unwritten {
        MAX_UNWRITTEN_LEN
    } else {
        MAX_INIT_LEN
    }
}

fn mergeable(a: &Extent, b: &Extent) -> bool {
    let max = max_len(a);
    a.unwritten == b.unwritten
        && a.lend() == u64::from(b.lblk)
        && a.pblk + u64::from(a.len) == b.pblk
        && a.len + b.len <= max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(lblk: u32, len: u32, pblk: u64, unwritten: bool) -> Extent {
        Extent {
            lblk,
            len,
            pblk,
            unwritten,
        }
    }

    #[test]
    fn a_full_written_extent_marked_unwritten_is_split() {
        // Two unwritten halves do not merge (32768 blocks is too long unwritten); written,
        // they make one extent of 32768; unwritten again, it must not stay one.
        let mut m = ExtentMap::default();
        m.insert(e(0, 16384, 1000, true));
        m.insert(e(16384, 16384, 1000 + 16384, true));
        m.mark_written(0, 32768);
        assert_eq!(m.map.len(), 1);
        m.mark_unwritten(0, 32768);
        let all: Vec<Extent> = m.map.values().copied().collect();
        assert!(
            all.iter()
                .all(|x| x.unwritten && x.len <= MAX_UNWRITTEN_LEN),
            "{all:?}"
        );
        assert_eq!(all.iter().map(|x| x.len).sum::<u32>(), 32768);
    }

    #[test]
    fn insert_merges_and_remove_splits() {
        let mut m = ExtentMap::default();
        m.insert(e(0, 2, 100, false));
        m.insert(e(2, 2, 102, false));
        assert_eq!(m.len(), 1);
        m.insert(e(10, 5, 200, true));
        assert_eq!(m.map(11), Mapping::Mapped(201, true, 4));
        assert_eq!(m.map(5), Mapping::Hole(5));
        m.mark_written(11, 2);
        assert_eq!(m.len(), 4);
        assert_eq!(m.map(12), Mapping::Mapped(202, false, 1));
        let freed = m.remove_range(1, 12);
        assert_eq!(freed, vec![(101, 3), (200, 1), (201, 1)]);
        assert_eq!(m.mapped_blocks(), 1 + 1 + 2);
    }

    #[test]
    fn split_join_and_shifts_keep_the_mapping_and_mark_the_change() {
        let mut m = ExtentMap::default();
        m.insert(e(0, 4, 100, false));
        m.insert(e(10, 6, 200, true));
        m.insert(e(20, 2, 300, false));
        m.mark_stored();
        // A split changes the records, not the mapping; a join puts them back.
        assert!(m.split_at(12));
        assert!(!m.split_at(12) && !m.split_at(7));
        assert_eq!((m.len(), m.map(13)), (4, Mapping::Mapped(203, true, 3)));
        assert_eq!(m.dirty_from(), 10);
        assert!(m.join_at(12) && !m.join_at(20));
        assert_eq!(m.len(), 3);
        // Collapse of blocks 4..10 (a hole): what follows moves down 6, and the extent at
        // 10 does not merge with the one at 0 (not physically contiguous).
        m.mark_stored();
        m.shift_down(10, 6);
        assert_eq!(m.map(4), Mapping::Mapped(200, true, 6));
        assert_eq!(m.map(14), Mapping::Mapped(300, false, 2));
        assert_eq!(m.dirty_from(), 4);
        // Insert of 3 blocks at 4: a hole there, the rest up.
        m.mark_stored();
        m.shift_up(4, 3);
        assert_eq!(m.map(4), Mapping::Hole(3));
        assert_eq!(m.map(7), Mapping::Mapped(200, true, 6));
        assert_eq!(m.end(), 19);
        assert_eq!(m.dirty_from(), 4);
        // A shift down that brings contiguous blocks together merges them.
        let mut m = ExtentMap::default();
        m.insert(e(0, 2, 100, false));
        m.insert(e(5, 3, 102, false));
        m.shift_down(5, 3);
        assert_eq!((m.len(), m.map(0)), (1, Mapping::Mapped(100, false, 5)));
        assert_eq!(m.mapped_blocks(), 5);
    }
}
