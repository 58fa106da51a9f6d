//! The bitmap and summary primitives of one rt group, read through the buffer cache.
//!
//! XFS's `xfs_rtbitmap.c` in our words: find the end of a run forward or backward, check a
//! range, set a range, and read or change a summary counter. Every fetch of a bitmap or
//! summary block that the call's buffer cache ([`Ctx`]) does not already hold counts as a
//! read; that count is the deterministic cost measure of the benchmark.
//!
//! - `plain` (Linux 6.4): each primitive fetches the bitmap blocks it walks afresh; only
//!   the summary has a one-entry cache per allocation call.
//! - `lean` (Linux 6.7, patch 1): the last bitmap block and the last summary block stay
//!   with the call until it ends.

use std::sync::Arc;

use super::GroupState;
use crate::buf::Buf;
use crate::disk::rtdev::{bit, counter, set_counter, set_word, word, RtGeometry};
use crate::error::{Error, Result};
use crate::journal::Handle;

/// One allocator call's view of one group: the group's locked state, the cached buffers
/// and the read counters.
pub(super) struct Ctx<'a> {
    pub(super) a: &'a super::RtAlloc,
    pub(super) g: u32,
    pub(super) st: &'a mut GroupState,
    pub(super) h: &'a Handle<'a>,
    /// Rt extents in this group.
    pub(super) ext: u64,
    /// Bitmap blocks in this group.
    pub(super) bmblocks: u64,
    /// Summary levels of this group.
    pub(super) levels: u32,
    pub(super) lean: bool,
    bm: Option<(u64, Arc<Buf>)>,
    sum: Option<(u64, Arc<Buf>)>,
    pub(super) bm_reads: u64,
    pub(super) sum_reads: u64,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(
        a: &'a super::RtAlloc,
        g: u32,
        st: &'a mut GroupState,
        h: &'a Handle<'a>,
    ) -> Ctx<'a> {
        let geo = &a.geo;
        Ctx {
            a,
            g,
            st,
            h,
            ext: geo.extents_in(g),
            bmblocks: u64::from(geo.bmblocks_in(g)),
            levels: geo.levels_in(g),
            lean: a.lean,
            bm: None,
            sum: None,
            bm_reads: 0,
            sum_reads: 0,
        }
    }

    fn geo(&self) -> &RtGeometry {
        &self.a.geo
    }

    /// Bits per bitmap block, as a shift.
    pub(super) fn blkbit_log(&self) -> u32 {
        self.geo().blkbit_log()
    }

    /// The bitmap block holding group extent `x`.
    pub(super) fn block_of(&self, x: u64) -> u64 {
        x >> self.blkbit_log()
    }

    /// A primitive starts: `plain` drops the bitmap block it held (each of XFS 6.4's
    /// primitives read its blocks afresh).
    fn begin(&mut self) {
        if !self.lean {
            self.bm = None;
        }
    }

    /// The bitmap block `bbno` of this group.
    fn bm_block(&mut self, bbno: u64) -> Result<Arc<Buf>> {
        debug_assert!(bbno < self.bmblocks);
        if let Some((b, buf)) = &self.bm {
            if *b == bbno {
                return Ok(buf.clone());
            }
        }
        let f = self.a.geo.bitmap_fblock(self.g, bbno as u32);
        let buf = self.a.bufs.get(self.a.bitmap[f as usize])?;
        self.bm_reads += 1;
        self.bm = Some((bbno, buf.clone()));
        Ok(buf)
    }

    /// The summary block holding counter `[log][bbno]`, and the counter's offset in it.
    fn sum_block(&mut self, log: u32, bbno: u64) -> Result<(Arc<Buf>, usize)> {
        debug_assert!(
            log < self.levels && bbno < self.bmblocks,
            "rt group {}: summary [{log}][{bbno}] outside {}x{}",
            self.g,
            self.levels,
            self.bmblocks
        );
        let (f, off) = self.a.geo.summary_at(self.g, log, bbno as u32);
        if let Some((b, buf)) = &self.sum {
            if *b == f {
                return Ok((buf.clone(), off));
            }
        }
        let buf = self.a.bufs.get(self.a.summary[f as usize])?;
        self.sum_reads += 1;
        self.sum = Some((f, buf.clone()));
        Ok((buf, off))
    }

    /// All ones when extent `x` is free, zero when allocated: XOR a word with it and the
    /// set bits are the extents in the other state. Fetches `x`'s block, which the
    /// primitive calling it then walks from (no second read).
    fn flip_at(&mut self, x: u64) -> Result<u64> {
        debug_assert!(x < self.ext, "rt group {}: extent {x} past its end", self.g);
        let bits = 1u64 << self.blkbit_log();
        let buf = self.bm_block(self.block_of(x))?;
        let free = bit(&buf.read(), (x % bits) as usize);
        Ok(if free { !0 } else { 0 })
    }

    /// The last extent of the run (free or allocated, as `start` is) that holds `start`,
    /// looking no further than `limit` (XFS's `xfs_rtfind_forw`).
    pub(super) fn find_forw(&mut self, start: u64, limit: u64) -> Result<u64> {
        debug_assert!(start <= limit && limit < self.ext);
        self.begin();
        let bits = 1u64 << self.blkbit_log();
        let flip = self.flip_at(start)?;
        let mut pos = start;
        loop {
            let bb = self.block_of(pos);
            let stop = limit.min((bb + 1) * bits - 1);
            let buf = self.bm_block(bb)?;
            let d = buf.read();
            let base = bb * bits;
            let (mut i, last) = (pos - base, stop - base);
            while i <= last {
                let wi = (i / 64) as usize;
                let mut x = word(&d, wi) ^ flip;
                x &= !0u64 << (i % 64);
                if x != 0 {
                    let hit = wi as u64 * 64 + u64::from(x.trailing_zeros());
                    if hit <= last {
                        return Ok(base + hit - 1);
                    }
                    return Ok(stop);
                }
                i = (wi as u64 + 1) * 64;
            }
            if stop == limit {
                return Ok(limit);
            }
            pos = stop + 1;
        }
    }

    /// The first extent of the run (free or allocated, as `start` is) that holds `start`
    /// (XFS's `xfs_rtfind_back`, limit 0).
    pub(super) fn find_back(&mut self, start: u64) -> Result<u64> {
        debug_assert!(start < self.ext);
        self.begin();
        let bits = 1u64 << self.blkbit_log();
        let flip = self.flip_at(start)?;
        let mut pos = start;
        loop {
            let bb = self.block_of(pos);
            let base = bb * bits;
            let buf = self.bm_block(bb)?;
            let d = buf.read();
            // Walk words down from pos to the block's first extent.
            let mut i = pos - base;
            loop {
                let wi = (i / 64) as usize;
                let mut x = word(&d, wi) ^ flip;
                let keep = i % 64;
                x &= if keep == 63 {
                    !0
                } else {
                    (1u64 << (keep + 1)) - 1
                };
                if x != 0 {
                    let hit = wi as u64 * 64 + 63 - u64::from(x.leading_zeros());
                    return Ok(base + hit + 1);
                }
                if wi == 0 {
                    break;
                }
                i = wi as u64 * 64 - 1;
            }
            if bb == 0 {
                return Ok(0);
            }
            pos = base - 1;
        }
    }

    /// Whether `[start, start + len)` is all free (`val`) or all allocated; when not, the
    /// first extent that differs (XFS's `xfs_rtcheck_range`). Returns `(ok, next)`.
    pub(super) fn check_range(&mut self, start: u64, len: u64, val: bool) -> Result<(bool, u64)> {
        debug_assert!(len > 0 && start + len <= self.ext);
        self.begin();
        let bits = 1u64 << self.blkbit_log();
        let flip = if val { !0u64 } else { 0 };
        let end = start + len; // exclusive
        let mut pos = start;
        while pos < end {
            let bb = self.block_of(pos);
            let base = bb * bits;
            let stop = end.min(base + bits); // exclusive
            let buf = self.bm_block(bb)?;
            let d = buf.read();
            let mut i = pos - base;
            let last = stop - base;
            while i < last {
                let wi = (i / 64) as usize;
                let mut x = word(&d, wi) ^ flip;
                x &= !0u64 << (i % 64);
                let wend = (wi as u64 + 1) * 64;
                if wend > last {
                    x &= (1u64 << (last % 64)) - 1;
                }
                if x != 0 {
                    let hit = wi as u64 * 64 + u64::from(x.trailing_zeros());
                    return Ok((false, base + hit));
                }
                i = wend;
            }
            pos = stop;
        }
        Ok((true, end))
    }

    /// Mark `[start, start + len)` free (`val`) or allocated (XFS's `xfs_rtmodify_range`).
    pub(super) fn modify_range(&mut self, start: u64, len: u64, val: bool) -> Result<()> {
        debug_assert!(len > 0 && start + len <= self.ext);
        self.begin();
        let bits = 1u64 << self.blkbit_log();
        let end = start + len;
        let mut pos = start;
        while pos < end {
            let bb = self.block_of(pos);
            let base = bb * bits;
            let stop = end.min(base + bits);
            let buf = self.bm_block(bb)?;
            {
                let mut d = buf.write();
                let mut i = pos - base;
                let last = stop - base;
                while i < last {
                    let wi = (i / 64) as usize;
                    let wend = (wi as u64 + 1) * 64;
                    let mut mask = !0u64 << (i % 64);
                    if wend > last {
                        mask &= (1u64 << (last % 64)) - 1;
                    }
                    let old = word(&d, wi);
                    let new = if val { old | mask } else { old & !mask };
                    debug_assert_eq!(
                        old & mask,
                        if val { 0 } else { mask },
                        "rt group {}: extents {}.. changed to {} were not all {}",
                        self.g,
                        base + i,
                        if val { "free" } else { "allocated" },
                        if val { "allocated" } else { "free" },
                    );
                    set_word(&mut d, wi, new);
                    i = wend;
                }
            }
            self.h.dirty(&buf);
            pos = stop;
        }
        Ok(())
    }

    /// The summary counter `[log][bbno]` (XFS's `xfs_rtget_summary`).
    pub(super) fn get_summary(&mut self, log: u32, bbno: u64) -> Result<u32> {
        let (buf, off) = self.sum_block(log, bbno)?;
        let v = counter(&buf.read(), off);
        Ok(v)
    }

    /// Add `delta` to the summary counter `[log][bbno]`, keeping the summary cache's bound
    /// (XFS's `xfs_rtmodify_summary`).
    pub(super) fn modify_summary(&mut self, log: u32, bbno: u64, delta: i32) -> Result<()> {
        debug_assert!(log < self.levels);
        let (buf, off) = self.sum_block(log, bbno)?;
        let v = {
            let mut d = buf.write();
            let old = counter(&d, off);
            let v = old.checked_add_signed(delta).ok_or_else(|| {
                Error::corrupt(
                    "rt summary",
                    u64::from(self.g),
                    format!("counter [{log}][{bbno}] = {old} cannot change by {delta}"),
                )
            })?;
            set_counter(&mut d, off, v);
            v
        };
        self.h.dirty(&buf);
        let lean = self.lean;
        let c = &mut self.st.rsum_cache[bbno as usize];
        if self.lean {
            // Upper bound: every level >= *c is empty.
            if v == 0 && log + 1 == u32::from(*c) {
                *c = log as u8;
            }
            if v != 0 && log >= u32::from(*c) {
                *c = (log + 1) as u8;
            }
        } else {
            // Lower bound: every level < *c is empty.
            if v == 0 && log == u32::from(*c) {
                *c += 1;
            }
            if v != 0 && log < u32::from(*c) {
                *c = log as u8;
            }
        }
        // The cache's bound holds for the level just changed (`check` verifies them all).
        debug_assert!(
            v == 0
                || if lean {
                    log < u32::from(*c)
                } else {
                    log >= u32::from(*c)
                },
            "rt summary cache bound {} misses level {log} of block {bbno}",
            *c
        );
        Ok(())
    }

    /// Whether any free run of level in `[low, high]` starts in bitmap block `bbno`, and a
    /// level that has one (XFS's `xfs_rtany_summary`).
    ///
    /// `plain` scans up from the lower-bound cache and finds the lowest such level (its
    /// callers use only whether there is one); `lean` (patches 2 and 3) scans down from the
    /// upper-bound cache and finds the highest, which bounds the longest run starting there.
    pub(super) fn any_summary(&mut self, low: u32, high: u32, bbno: u64) -> Result<Option<u32>> {
        debug_assert!(bbno < self.bmblocks && high < self.levels);
        let c = u32::from(self.st.rsum_cache[bbno as usize]);
        if self.lean {
            let high = high.min(c.saturating_sub(1));
            if c == 0 || low > high {
                return Ok(None);
            }
            let mut found = None;
            for log in (low..=high).rev() {
                if self.get_summary(log, bbno)? != 0 {
                    found = Some(log);
                    break;
                }
            }
            let bound = found.map_or(low, |l| l + 1);
            if bound < c {
                self.st.rsum_cache[bbno as usize] = bound as u8;
            }
            return Ok(found);
        }
        let from = low.max(c);
        let mut found = None;
        let mut log = from;
        while log <= high {
            if self.get_summary(log, bbno)? != 0 {
                found = Some(log);
                break;
            }
            log += 1;
        }
        // 6.4 raised the bound to `log` here even when the scan began above it (at `low`),
        // claiming the unscanned levels below `low` empty: a later request with a smaller
        // minimum then skipped a block that had runs for it. Raise it only when the scan
        // covered every level from the old bound (the one change to 6.4 we make: with it
        // both variants decide alike).
        if low <= c && log > c {
            self.st.rsum_cache[bbno as usize] = log.min(255) as u8;
        }
        Ok(found)
    }
}
