//! Freeing blocks: a range of a file or of metadata given back to its group (kept busy
//! until the freeing transaction commits, except data blocks the same uncommitted
//! transaction allocated), and the commit that makes them allocatable again.

use super::{Allocator, StreamGoal};
use crate::disk::group::BG_BLOCK_UNINIT;
use crate::disk::{clear_bit, test_bit};
use crate::error::{Error, Result};
use crate::journal::Handle;
use std::sync::atomic::Ordering;

impl Allocator {
    /// Free `len` blocks from `start` (may cross groups). `metadata` drops cached copies.
    pub fn free_blocks_range(
        &self,
        h: &Handle,
        start: u64,
        len: u64,
        metadata: bool,
    ) -> Result<()> {
        if start < u64::from(self.geo.first_data_block) || start + len > self.geo.blocks {
            return Err(Error::corrupt(
                "extent",
                start,
                format!("free of {len} blocks out of range"),
            ));
        }
        if metadata {
            for b in start..start + len {
                self.bufs.forget(b);
                h.revoke(b);
            }
        }
        // The baseline's one lock, shared with the allocation goal (ext4's s_md_lock
        // around its freed-extent list before the seed).
        let _md = (self.opts.stream == StreamGoal::Global).then(|| self.global_goal.lock());
        let mut b = start;
        while b < start + len {
            let g = self.geo.group_of_block(b);
            let gend = self.geo.group_first(g) + u64::from(self.geo.group_len(g));
            let n = (start + len).min(gend) - b;
            let off = (b - self.geo.group_first(g)) as usize;
            self.free_in_group(h, g, off, n as usize, metadata)?;
            b += n;
        }
        Ok(())
    }

    fn free_in_group(
        &self,
        h: &Handle,
        g: u32,
        off: usize,
        n: usize,
        metadata: bool,
    ) -> Result<()> {
        let grp = &self.groups[g as usize];
        debug_assert!(
            n > 0 && off + n <= self.geo.group_len(g) as usize,
            "group {g}: freeing {n} blocks at {off}"
        );
        let (mut guard, bm) = self.lock_group_wait(g)?;
        let st = &mut *guard;
        let tid = h.tid();
        let mut freed = 0;
        // Blocks this same (uncommitted) transaction allocated were never pointed to by
        // committed metadata: data blocks are allocatable again at once. The others wait
        // for the commit in `busy_blocks`, and so do freed metadata blocks: their revoke
        // is in this transaction, and replay drops every copy of a block logged in a
        // transaction that revokes it, so a reuse as metadata before the commit would be
        // lost in a crash (jbd2 cancels such a revoke instead).
        let mut now: Vec<(u32, u32)> = Vec::new();
        let mut busy: Vec<(u32, u32)> = Vec::new();
        {
            let mut map = bm.write();
            if st.d.flags() & BG_BLOCK_UNINIT != 0 {
                self.init_block_bitmap(g, &mut map);
                st.d.set_flags(st.d.flags() & !BG_BLOCK_UNINIT);
            }
            let mut fresh = match st.fresh.as_mut() {
                Some((t, m)) if *t == tid => Some(m),
                _ => None,
            };
            for i in off..off + n {
                if !test_bit(&map, i) {
                    continue;
                }
                clear_bit(&mut map, i);
                freed += 1;
                let runs = match fresh.as_mut().filter(|m| test_bit(m, i)) {
                    Some(m) => {
                        clear_bit(m, i);
                        if metadata {
                            &mut busy
                        } else {
                            &mut now
                        }
                    }
                    None => &mut busy,
                };
                match runs.last_mut() {
                    Some((s, l)) if (*s + *l) as usize == i => *l += 1,
                    _ => runs.push((i as u32, 1)),
                }
            }
        }
        h.dirty(bm);
        let free = st.d.free_blocks() + freed as u32;
        st.d.set_free_blocks(free);
        grp.free_blocks.store(free, Ordering::Relaxed);
        self.touch(h, g, super::PENDING_BLOCK);
        let b = st.buddy.as_mut().expect("lock_group builds the buddy");
        for &(s, l) in &now {
            let was_used = b.set(s as usize, (s + l) as usize, true);
            // Allocated by this transaction (its `fresh` bits), so used in the buddy.
            debug_assert_eq!(
                was_used, l,
                "group {g}: blocks {s}+{l} freed at once were free in the buddy"
            );
        }
        if !busy.is_empty() {
            st.busy_blocks
                .extend(busy.iter().map(|&(s, l)| (s, l, tid)));
            grp.has_busy.store(true, Ordering::Release);
        }
        self.publish(g, st);
        if freed != n {
            return Err(Error::corrupt(
                "block bitmap",
                grp.block_bitmap,
                format!(
                    "freeing {n} blocks of group {g} found {} already free",
                    n - freed
                ),
            ));
        }
        Ok(())
    }

    /// Transaction `tid` committed: blocks it (and earlier ones) freed become allocatable.
    pub fn release_committed(&self, tid: u64) {
        for g in &self.groups {
            if !g.has_busy.load(Ordering::Acquire) {
                continue;
            }
            let mut guard = g.desc.lock();
            let st = &mut *guard;
            if let Some(b) = st.buddy.as_mut() {
                for &(o, n, _) in st.busy_blocks.iter().filter(|b| b.2 <= tid) {
                    let was_used = b.set(o as usize, (o + n) as usize, true);
                    // Busy blocks stay used in the buddy until their commit: this one.
                    debug_assert_eq!(
                        was_used, n,
                        "group {}: busy blocks {o}+{n} were free in the buddy",
                        g.no
                    );
                }
            }
            st.busy_blocks.retain(|b| b.2 > tid);
            if st.busy_blocks.is_empty() {
                g.has_busy.store(false, Ordering::Release);
            }
            self.publish(g.no, st);
        }
    }
}
