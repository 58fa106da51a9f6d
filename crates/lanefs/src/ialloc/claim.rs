//! Claiming an inode: the group a new inode goes to tried first, then the others, and a
//! free bit of the group claimed by test-and-set under its inode lock (the two policies
//! of the module documentation), with the counters and the fresh-inode map it moves.

use super::searchmap::{find_zero_atomic, test_and_set, BitLine, SearchMap, CHUNK};
use super::{IGroup, IState, InodeAllocator, Maps, Want};
use crate::alloc::Allocator;
use crate::error::{Error, Result};
use crate::journal::Handle;
use crate::types::IallocPolicy;
use std::sync::atomic::Ordering;

impl InodeAllocator {
    /// Allocate an inode for `want` (its directory's last-allocation hint is updated).
    pub fn alloc(&self, h: &Handle, al: &Allocator, want: Want<'_>) -> Result<u64> {
        let g0 = if want.is_dir {
            self.find_group_orlov(&want, al)
        } else {
            self.find_group_other(&want, al)
        };
        let Some(g0) = g0 else {
            return Err(Error::NoInodes);
        };
        let n = self.geo.groups;
        debug_assert!(g0 < n, "group choice {g0} of {n}");
        want.last.store(g0, Ordering::Relaxed);
        for i in 0..n {
            let g = (g0 + i) % n;
            if !self.groups[g as usize].has_free.load(Ordering::Relaxed) {
                continue;
            }
            if let Some(bit) = self.claim_in(h, al, g, want.is_dir)? {
                return Ok(u64::from(g) * u64::from(self.geo.ipg) + u64::from(bit) + 1);
            }
        }
        Err(Error::NoInodes)
    }

    /// Claim a free bit of group `g` (see the module comment for the two policies).
    fn claim_in(&self, h: &Handle, al: &Allocator, g: u32, is_dir: bool) -> Result<Option<u32>> {
        let grp = &self.groups[g as usize];
        let maps = self.maps(g)?;
        let used = &maps.used;
        let ib = self.ibuf(g)?;
        let ipg = self.geo.ipg as usize;
        let first = if g == 0 {
            self.geo.first_ino as usize - 1
        } else {
            0
        };
        let mut from = match self.policy {
            IallocPolicy::Optimistic => {
                let cursor = self.cursor(g).load(Ordering::Relaxed) as usize;
                chunk_start(cursor, used, first, ipg)
            }
            IallocPolicy::Locked => first,
        };
        // (`first` itself may lie past the group on a corrupt superblock: the group then
        // reads as full.)
        debug_assert!(
            from == first || (first..ipg).contains(&from),
            "group {g}: search start {from} outside {first}..{ipg}"
        );
        loop {
            let Some(bit) = find_zero_atomic(used, from, ipg) else {
                if from > first && self.policy == IallocPolicy::Optimistic {
                    // The chunk's bits went to other threads: the whole group, once.
                    from = first;
                    continue;
                }
                return Ok(None);
            };
            // What ext4 does here, between the search and the lock: journal write
            // access to the bitmap and descriptor blocks (both written at the seal).
            h.dirty(ib);
            al.dirty_desc(h, g);
            let mut st = grp.st.lock();
            if grp.free.load(Ordering::Relaxed) == 0 {
                return Ok(None);
            }
            let got = if !test_and_set(used, bit) {
                Some(bit)
            } else {
                self.lost_races.fetch_add(1, Ordering::Relaxed);
                match self.policy {
                    // Search again with the lock held: the bit found cannot be stolen.
                    IallocPolicy::Optimistic => {
                        let again = find_zero_atomic(used, first, ipg);
                        if let Some(b) = again {
                            let was = test_and_set(used, b);
                            debug_assert!(!was, "group {g}: bit {b} taken under the lock");
                        }
                        again
                    }
                    IallocPolicy::Locked => None,
                }
            };
            if let Some(b) = got {
                // A reserved inode (group 0, below the first) or a bit past the group
                // handed out would overwrite an inode in use or another group's table.
                assert!(
                    (first..ipg).contains(&b),
                    "group {g}: claimed inode bit {b} outside {first}..{ipg}"
                );
            }
            let Some(bit) = got else {
                drop(st);
                match self.policy {
                    IallocPolicy::Optimistic => return Ok(None),
                    IallocPolicy::Locked => {
                        from = bit + 1;
                        continue;
                    }
                }
            };
            let fresh = if self.policy == IallocPolicy::Locked {
                // Before 2017 the bit was set in one locked section and the counters
                // updated in a second one.
                set_live(maps, &mut st, g, bit);
                drop(st);
                st = grp.st.lock();
                self.account_alloc(h, grp, &mut st, bit, is_dir)
            } else {
                set_live(maps, &mut st, g, bit);
                let fresh = self.account_alloc(h, grp, &mut st, bit, is_dir);
                self.cursor(g).store(bit as u32 + 1, Ordering::Relaxed);
                fresh
            };
            drop(st);
            if let Some(blk) = fresh {
                // Outside the group's lock: a neighbour claimed meanwhile finds the
                // block cached (or caches it first, and then it is kept).
                h.dirty(&self.bufs.get_new_keep(blk));
            }
            return Ok(Some(bit as u32));
        }
    }

    /// The counters after `bit` was claimed (under the group's inode lock).
    /// Returns the inode table block to take without reading ([`Self::fresh_block`]).
    fn account_alloc(
        &self,
        h: &Handle,
        grp: &IGroup,
        st: &mut IState,
        bit: usize,
        is_dir: bool,
    ) -> Option<u64> {
        // The counters change only under the lock: a load and a store, no atomic update.
        // A count below the bitmap's free bits (a corrupt descriptor, `skew` > 0) can
        // reach 0 with bits still free; it stays 0.
        let free = grp.free.load(Ordering::Relaxed);
        debug_assert!(free > 0 || st.skew > 0, "free inode count underflow");
        grp.free.store(free.saturating_sub(1), Ordering::Relaxed);
        if free == 1 {
            grp.has_free.store(false, Ordering::Relaxed);
        }
        if is_dir {
            let dirs = grp.dirs.load(Ordering::Relaxed);
            grp.dirs.store(dirs + 1, Ordering::Relaxed);
        }
        // itable_unused counts the never-used inodes at the table's end (ext4_claim_inode).
        let used_upto = self.geo.ipg - st.itable_unused.min(self.geo.ipg);
        if bit as u32 >= used_upto {
            st.itable_unused = self.geo.ipg - bit as u32 - 1;
        }
        // A used inode is never counted in the unused tail (mke2fs's lazy table init
        // would skip zeroing it).
        debug_assert!(
            (bit as u32) < self.geo.ipg - st.itable_unused,
            "inode bit {bit} in the unused tail of {}",
            st.itable_unused
        );
        let tid = h.tid();
        let lines = (self.geo.ipg as usize).div_ceil(CHUNK);
        if !matches!(&st.fresh, Some((t, _)) if *t == tid) {
            st.fresh = Some((tid, vec![BitLine::default(); lines].into_boxed_slice()));
        }
        if let Some((_, map)) = st.fresh.as_mut() {
            let (w, m) = BitLine::locate(map, bit);
            *w |= m;
        }
        grp.pending.store(true, Ordering::Release);
        self.fresh_block(grp, bit)
    }

    /// When every other inode of `bit`'s table block is free, the block's old bytes do
    /// not matter: the caller takes it without reading (ext4's `__ext4_get_inode_loc`
    /// does the same, checking the bitmap). Most creates land in such blocks, which on a
    /// fresh image the device has never written. Decided under the group's lock; the
    /// block is taken after it (kept if a neighbour claimed since has cached it) and
    /// pinned in the transaction, so it is not evicted before the new inode is stored.
    fn fresh_block(&self, grp: &IGroup, bit: usize) -> Option<u64> {
        let maps = grp.maps.get()?;
        let used = &maps.used;
        let ipb = (self.geo.bs / self.geo.inode_size) as usize;
        let first = bit / ipb * ipb;
        let end = (first + ipb).min(self.geo.ipg as usize);
        let busy = (first..end).any(|i| i != bit && used.test(i));
        if busy {
            return None;
        }
        // An inode in use now is in `used` too (which adds the frees not yet committed).
        debug_assert!(
            (first..end).all(|i| i == bit || !maps.live.test(i)),
            "inode table block of bit {bit}: a neighbour is live"
        );
        Some(grp.table + (first / ipb) as u64)
    }
}

/// Set `bit` in the live bitmap (under the group's lock): the group's bitmap is
/// initialized from then on (the seal writes all of it).
fn set_live(maps: &Maps, st: &mut IState, g: u32, bit: usize) {
    st.uninit = false;
    let was = test_and_set(&maps.live, bit);
    debug_assert!(!was, "group {g}: inode bit {bit} already live");
}

/// Where a thread lane starts searching a group whose bit after its last inode there
/// is `cursor` (0: none yet). The lane's first inode in the group goes where ext4's
/// would, the first free one from `first`, so a mount that makes a few files fills the
/// table from its start. After that: the lane's chunk (the [`CHUNK`] inodes of one line
/// of the search bitmap: 32 4 KiB table blocks of 256-byte inodes) while it has a free
/// bit at or after the cursor; otherwise the first entirely free chunk (group 0's first
/// counted from `first`), else `first` (ext4's search). Two lanes that start together
/// share a chunk until it fills, then part. Each lane keeps a chunk per group, so a thread moving between groups fills
/// each chunk densely. Threads creating in one group so fill different inode table
/// blocks and write different lines of the search bitmap instead of interleaving in the
/// same ones (XFS allocates inodes in chunks of 64 for the same reason; a chunk of a
/// whole line also keeps the lanes' test-and-sets off each other's line, which with
/// chunks of one word cost two threads creating in one directory's group a quarter of
/// their rate). A hint only: the bit is still claimed by test-and-set.
pub(super) fn chunk_start(cursor: usize, used: &SearchMap, first: usize, ipg: usize) -> usize {
    if cursor == 0 {
        return first;
    }
    let chunk_end = (cursor / CHUNK + 1) * CHUNK;
    if cursor > first
        && !cursor.is_multiple_of(CHUNK)
        && find_zero_atomic(used, cursor, chunk_end.min(ipg)).is_some()
    {
        return cursor;
    }
    (first / CHUNK..ipg / CHUNK)
        .find(|&c| used.chunk_free(c, first))
        .map_or(first, |c| (c * CHUNK).max(first))
}
