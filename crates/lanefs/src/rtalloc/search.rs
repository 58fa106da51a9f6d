//! The searches of one rt group: exact, by bitmap block, near a goal, and by size, as XFS's
//! `xfs_rtalloc.c` makes them, with the series' changes under `lean`. All lengths and
//! positions are in rt extents, relative to the group.

use super::bitmap::Ctx;
use crate::disk::rtdev::highbit64;
use crate::error::Result;

/// A found extent: start and length.
pub(super) type Found = Option<(u64, u64)>;

fn align_len(len: u64, prod: u64) -> u64 {
    if prod > 1 {
        len - len % prod
    } else {
        len
    }
}

impl Ctx<'_> {
    /// `len` from `start`, kept inside the group and a multiple of `prod`.
    fn clamp_len(&self, start: u64, len: u64, prod: u64) -> u64 {
        align_len(self.ext.min(start + len) - start, prod)
    }

    /// Mark `[start, start + len)` allocated out of the free run holding it, moving the
    /// run's summary count to its remainders (XFS's `xfs_rtallocate_range`).
    pub(super) fn allocate_range(&mut self, start: u64, len: u64) -> Result<()> {
        let end = start + len - 1;
        let pre = self.find_back(start)?;
        let post = self.find_forw(end, self.ext - 1)?;
        // The range lies in one free run (the search checked it free, under the lock).
        debug_assert!(
            pre <= start && post >= end,
            "run {pre}..={post} around {start}..={end}"
        );
        self.modify_summary(highbit64(post + 1 - pre), self.block_of(pre), -1)?;
        if pre < start {
            self.modify_summary(highbit64(start - pre), self.block_of(pre), 1)?;
        }
        if post > end {
            self.modify_summary(highbit64(post - end), self.block_of(end + 1), 1)?;
        }
        self.modify_range(start, len, false)
    }

    /// Mark `[start, start + len)` free, merging it with its free neighbours in the
    /// summary (XFS's `xfs_rtfree_range`).
    pub(super) fn free_range(&mut self, start: u64, len: u64) -> Result<()> {
        let end = start + len - 1;
        self.modify_range(start, len, true)?;
        let pre = self.find_back(start)?;
        let post = self.find_forw(end, self.ext - 1)?;
        debug_assert!(
            pre <= start && post >= end,
            "run {pre}..={post} around {start}..={end}"
        );
        if pre < start {
            self.modify_summary(highbit64(start - pre), self.block_of(pre), -1)?;
        }
        if post > end {
            self.modify_summary(highbit64(post - end), self.block_of(end + 1), -1)?;
        }
        self.modify_summary(highbit64(post + 1 - pre), self.block_of(pre), 1)
    }

    /// An extent of `minlen..=maxlen` (a multiple of `prod` when shorter than `maxlen`)
    /// starting in bitmap block `bbno`: the first run holding `maxlen`, else the longest
    /// (the first of equals). Returns the extent, or the next extent worth trying.
    ///
    /// `cap` (lean, patch 4) is an upper bound on the length of any run this call can
    /// use; a run that long is the longest, so the walk stops at the first one. XFS passes
    /// the cap as `maxlen` instead, which picks a different extent when `prod` > 1 (the
    /// first run reaching the aligned cap, not the first longest) or near the group's end;
    /// stopping only at a run of the full cap, and not in the group's last `maxlen`
    /// extents, keeps every decision the plain algorithm's.
    fn extent_block(
        &mut self,
        bbno: u64,
        minlen: u64,
        maxlen: u64,
        prod: u64,
        cap: Option<u64>,
    ) -> Result<(Found, u64)> {
        let bits = 1u64 << self.blkbit_log();
        let first = bbno * bits;
        let end = self.ext.min(first + bits) - 1;
        let cap = cap.filter(|&c| c < maxlen && end + maxlen <= self.ext);
        let (mut best, mut bestlen) = (None, 0u64);
        let mut next = first;
        let mut i = first;
        while i <= end {
            let scanlen = self.clamp_len(i, maxlen, prod);
            if scanlen < minlen {
                break;
            }
            let (free, n) = self.check_range(i, scanlen, true)?;
            next = n;
            if free {
                return Ok((Some((i, scanlen)), next));
            }
            if minlen < maxlen {
                let thislen = next - i;
                if thislen >= minlen && thislen > bestlen {
                    best = Some(i);
                    bestlen = thislen;
                    if cap.is_some_and(|c| thislen >= c) {
                        break;
                    }
                }
            }
            if next >= end {
                break;
            }
            i = self.find_forw(next, end)? + 1;
        }
        let Some(b) = best else {
            return Ok((None, next));
        };
        let len = align_len(bestlen, prod);
        if len < minlen {
            return Ok((None, next));
        }
        debug_assert!(
            len <= maxlen && b + len <= self.ext,
            "rt block {bbno}: {len} extents at {b} for {minlen}..={maxlen}"
        );
        Ok((Some((b, len)), next))
    }

    /// `minlen..=maxlen` extents from exactly `start` (XFS's
    /// `xfs_rtallocate_extent_exact`).
    fn extent_exact(&mut self, start: u64, minlen: u64, maxlen: u64, prod: u64) -> Result<Found> {
        let scanlen = self.clamp_len(start, maxlen, prod);
        if scanlen < minlen {
            return Ok(None);
        }
        let (free, next) = self.check_range(start, scanlen, true)?;
        if free {
            return Ok(Some((start, scanlen)));
        }
        let len = next - start;
        if len < minlen {
            return Ok(None);
        }
        let len = align_len(len, prod);
        Ok((len >= minlen).then_some((start, len)))
    }

    /// An extent as near `start` as the bitmap blocks allow (XFS's
    /// `xfs_rtallocate_extent_near`): exactly there, else in the blocks at distance
    /// 0, +1, -1, +2, -2, ... that the summary says hold a long enough run.
    pub(super) fn extent_near(
        &mut self,
        start: u64,
        minlen: u64,
        maxlen: u64,
        prod: u64,
    ) -> Result<Found> {
        debug_assert!(minlen > 0 && minlen.is_multiple_of(prod) && maxlen.is_multiple_of(prod));
        let start = start.min(self.ext - 1);
        if let Some(f) = self.extent_exact(start, minlen, maxlen, prod)? {
            return Ok(Some(f));
        }
        let bbno = self.block_of(start) as i64;
        let nblocks = self.bmblocks as i64;
        let log2len = highbit64(minlen);
        let top = self.levels - 1;
        let mut i: i64 = 0;
        // lean: the lowest block of the negative side already tried, less one.
        let mut j: i64 = -1;
        loop {
            let b = (bbno + i) as u64;
            if let Some(maxlog) = self.any_summary(log2len, top, b)? {
                if self.lean {
                    // Patch 4: no run starting here is longer than this.
                    let cap = (1u64 << (maxlog + 1)) - 1;
                    if i >= 0 {
                        let (f, _) = self.extent_block(b, minlen, maxlen, prod, Some(cap))?;
                        if f.is_some() {
                            return Ok(f);
                        }
                    } else {
                        // Patches 5 and 6: the run found here reaches at most `maxblocks`
                        // blocks up, and blocks above `j` were tried already.
                        let maxblocks: i64 = if maxlog == 0 {
                            0
                        } else if maxlog < self.blkbit_log() {
                            1
                        } else {
                            2i64 << (maxlog - self.blkbit_log())
                        };
                        j = (i + maxblocks).min(j);
                        while j >= i {
                            let bj = (bbno + j) as u64;
                            let (f, _) = self.extent_block(bj, minlen, maxlen, prod, Some(cap))?;
                            if f.is_some() {
                                return Ok(f);
                            }
                            j -= 1;
                        }
                    }
                } else if i >= 0 {
                    let (f, _) = self.extent_block(b, minlen, maxlen, prod, None)?;
                    if f.is_some() {
                        return Ok(f);
                    }
                } else {
                    // The run found here may end in a block nearer the goal: try every
                    // block between without runs of its own, then this one.
                    let mut jj = -1;
                    while jj > i {
                        let bj = (bbno + jj) as u64;
                        if self.any_summary(log2len, top, bj)?.is_none() {
                            let (f, _) = self.extent_block(bj, minlen, maxlen, prod, None)?;
                            if f.is_some() {
                                return Ok(f);
                            }
                        }
                        jj -= 1;
                    }
                    let (f, _) = self.extent_block(b, minlen, maxlen, prod, None)?;
                    if f.is_some() {
                        return Ok(f);
                    }
                }
            }
            // Next block: alternate sides while both have blocks left.
            if i > 0 && bbno - i >= 0 {
                i = -i;
            } else if i > 0 && bbno + i < nblocks - 1 {
                i += 1;
            } else if i <= 0 && bbno - i < nblocks - 1 {
                i = 1 - i;
            } else if i <= 0 && bbno + i > 0 {
                i -= 1;
            } else {
                return Ok(None);
            }
        }
    }

    /// One allocation in this group: near `goal` (a group extent above 0; XFS takes extent 0
    /// for no goal), else by size. The extent is taken unless part of it is busy, freed by
    /// a transaction that has not committed, this one included (`Err(Busy)`: nothing
    /// changed): until that commit the extent may still hold a committed file's data, which
    /// new data written there before the commit would destroy if the power went (the rule
    /// ext4's and XFS's busy extents keep for data).
    pub(super) fn allocate(
        &mut self,
        goal: Option<u64>,
        minlen: u64,
        maxlen: u64,
        prod: u64,
    ) -> Result<Option<std::result::Result<(u64, u64), super::RtOutcome>>> {
        let mut found = match goal.filter(|&x| x > 0) {
            Some(x) => self.extent_near(x, minlen, maxlen, prod)?,
            None => None,
        };
        if found.is_none() {
            found = self.extent_size(minlen, maxlen, prod)?;
        }
        let Some((start, len)) = found else {
            return Ok(None);
        };
        debug_assert!(
            len >= minlen && len <= maxlen && start + len <= self.ext,
            "rt group {}: search chose {len} extents at {start}",
            self.g
        );
        let busy = |&(s, l, _): &(u64, u64, u64)| s < start + len && start < s + l;
        if self.st.busy.iter().any(busy) {
            return Ok(Some(Err(super::RtOutcome::Busy)));
        }
        self.allocate_range(start, len)?;
        Ok(Some(Ok((start, len))))
    }

    /// Try every bitmap block with a run at summary level `l` (XFS's
    /// `xfs_rtalloc_sumlevel`).
    fn sumlevel(&mut self, l: u32, minlen: u64, maxlen: u64, prod: u64) -> Result<Found> {
        let mut i = 0u64;
        while i < self.bmblocks {
            if self.get_summary(l, i)? != 0 {
                let (f, n) = self.extent_block(i, minlen, maxlen, prod, None)?;
                if f.is_some() {
                    return Ok(f);
                }
                let nb = self.block_of(n);
                if nb > i + 1 {
                    i = nb - 1;
                }
            }
            i += 1;
        }
        Ok(None)
    }

    /// An extent anywhere in the group, `maxlen` if any run holds it, else the longest
    /// level by level down to `minlen` (XFS's `xfs_rtallocate_extent_size`).
    pub(super) fn extent_size(&mut self, minlen: u64, maxlen: u64, prod: u64) -> Result<Found> {
        debug_assert!(
            minlen > 0 && maxlen > 0 && minlen.is_multiple_of(prod) && maxlen.is_multiple_of(prod)
        );
        for l in highbit64(maxlen)..self.levels {
            if let Some(f) = self.sumlevel(l, minlen, maxlen, prod)? {
                return Ok(Some(f));
            }
        }
        let maxlen = maxlen - 1;
        if minlen > maxlen {
            return Ok(None);
        }
        let mut l = highbit64(maxlen) as i64;
        while l >= i64::from(highbit64(minlen)) {
            let lo = minlen.max(1 << l);
            let hi = maxlen.min((1 << (l + 1)) - 1);
            if let Some(f) = self.sumlevel(l as u32, lo, hi, prod)? {
                return Ok(Some(f));
            }
            l -= 1;
        }
        Ok(None)
    }
}
