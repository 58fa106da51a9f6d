//! Block allocation: seed 000's multiblock allocator.
//!
//! A request has a goal block and a length. In order:
//! 1. **Preallocation**: a file's next logical block may already be reserved for it.
//! 2. **Exact goal**: the blocks right after the file's previous extent, under the goal
//!    group's lock (waited for, as ext4's `find_by_goal`). A request that continues an
//!    extent takes whatever is free there.
//! 3. **Stream goal**: a streaming file (larger than 16 blocks) that missed its goal
//!    starts the search from its stream goal instead (`StreamGoal`).
//! 4. **Criteria passes** over groups, each accepting what ext4's accepts:
//!    power-of-two aligned (a free aligned chunk from the buddy), goal length fast (average
//!    free run at least the length), best available length (the same at lengths trimmed
//!    by up to 3 orders), goal length slow (enough free blocks), any free. The first four
//!    try each group's lock and skip a busy group (`mb_trylock`); the last waits, so
//!    free space in busy groups is never missed. Groups come from the scan lists
//!    (`mb_optimize_scan`) or a linear walk from the goal group.
//! 5. **ENOSPC** only after every group was refused and every preallocation discarded.
//!
//! Blocks found beyond what the request uses become the file's preallocation.

use super::buddy::Buddy;
use super::lists::{avg_order, walk, GroupSet};
use super::{Allocator, GroupState, PaRef, Prealloc};
use crate::buf::Buf;
use crate::disk::group::BG_BLOCK_UNINIT;
use crate::disk::{set_bit, test_bit};
use crate::error::{Error, Result};
use crate::journal::Handle;
use crate::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Complex scan: stop after this many free runs (`s_mb_max_to_scan`).
const MAX_TO_SCAN: usize = 200;
/// Complex scan: with a run of the goal length in hand, stop after this many.
const MIN_TO_SCAN: usize = 10;
/// Power-of-two requests from this order on use the aligned pass (`mb_order2_req`).
const ORDER2_REQS: usize = 2;
/// Best-available pass: trim the goal by up to this many orders.
const BEST_AVAIL_TRIM: usize = 3;
/// A file larger than this many blocks streams (`mb_stream_req`).
pub const STREAM_REQ: u64 = 16;

/// The criteria passes, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cr {
    Power2Aligned,
    GoalLenFast,
    BestAvailLen,
    GoalLenSlow,
    AnyFree,
}

/// One allocation request.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// Goal block.
    pub goal: u64,
    /// Blocks to look for (normalized: may exceed `used`).
    pub len: u32,
    /// Blocks the caller uses now (at most `len`); the rest of what is found becomes a
    /// preallocation when `pa_for` is set.
    pub used: u32,
    /// The goal continues an extent: take any free run starting there.
    pub merge: bool,
    /// Streaming file (inode, its own last allocation end): on a missed goal, search
    /// from its stream goal.
    pub stream: Option<(u64, u64)>,
    /// Preallocate the surplus for the file's logical blocks after `used` from this
    /// logical block on.
    pub pa_for: Option<u32>,
}

/// What a file's data allocation needs from the file.
#[derive(Clone, Copy, Debug)]
pub struct DataRequest {
    /// Inode number.
    pub ino: u64,
    /// First logical block.
    pub lblk: u32,
    /// Blocks needed now.
    pub want: u32,
    /// Logical blocks free from `lblk` before the next mapped one (room to normalize).
    pub room: u32,
    /// Goal block: after the file's extent left of `lblk`, if any.
    pub goal: Option<u64>,
    /// The file's own last allocation end (0: none).
    pub own_goal: u64,
    /// The file's predicted size in blocks (max of `lblk + want` and its size).
    pub size_blocks: u64,
    /// Normalize and preallocate (writes; not fallocate, as ext4).
    pub normalize: bool,
}

/// What a search took.
#[derive(Clone, Copy, Debug)]
struct Found {
    /// Group.
    g: u32,
    /// Offset in the group.
    off: usize,
    /// Blocks the request uses.
    used: usize,
    /// The preallocation made from the surplus.
    pa: Option<u64>,
}

/// Normalized window for a file of `size` blocks (ext4's `normalize_request`, in
/// blocks of `bs`): 16 KiB .. 1 MiB rounded up to a power of two from logical 0, then
/// 2, 4 or 8 MiB windows aligned to their size. Returns the window's (start, length).
fn normalize(lblk: u32, want: u32, size: u64, bs: u32) -> (u64, u64) {
    let kib = |k: u64| (k << 10) / u64::from(bs);
    let bytes = size * u64::from(bs);
    let win = if bytes <= 1 << 20 {
        let b = bytes.max(16 << 10).next_power_of_two();
        return (0, kib(b >> 10).max(1));
    } else if bytes <= 4 << 20 {
        kib(2 << 10)
    } else if bytes <= 8 << 20 {
        kib(4 << 10)
    } else if u64::from(want) <= kib(8 << 10) {
        kib(8 << 10)
    } else {
        return (u64::from(lblk), u64::from(want));
    };
    ((u64::from(lblk) / win) * win, win)
}

impl Allocator {
    /// Allocate up to `want` contiguous blocks for metadata, as near `goal` as possible.
    /// Returns the first block and the length obtained (at least 1).
    pub fn alloc_blocks(&self, h: &Handle, goal: u64, want: u32) -> Result<(u64, u32)> {
        self.allocate(
            h,
            &Request {
                goal,
                len: want,
                used: want,
                merge: false,
                stream: None,
                pa_for: None,
            },
        )
        .map(|f| {
            let p = self.geo.group_first(f.g) + f.off as u64;
            // Handing out a block outside the file system's data blocks would overwrite
            // the superblock area or run past the device.
            assert!(
                p >= u64::from(self.geo.first_data_block) && p + f.used as u64 <= self.geo.blocks,
                "allocation of {} blocks at {p} outside the file system",
                f.used
            );
            debug_assert!(f.used >= 1 && f.used <= want as usize);
            (p, f.used as u32)
        })
    }

    /// Allocate one block of a file's contents that the extent tree does not hold for
    /// it (a directory's or a symlink's block, an xattr block) near `goal`: metadata to
    /// the allocator, but left out of the reserve as data is (ext4 lets only the
    /// extent tree's own splits into it).
    pub fn alloc_content_block(&self, h: &Handle, goal: u64) -> Result<u64> {
        if self.data_allowance(1) == 0 {
            return Err(Error::NoSpace);
        }
        self.alloc_blocks(h, goal, 1).map(|(p, _)| p)
    }

    /// Allocate blocks for file data, leaving the reserve free (`reserve.rs`): its
    /// preallocation first, then a search with the request normalized and the surplus
    /// preallocated. `pa` is the file's
    /// preallocation handle, updated. Returns the first block and the length (>= 1).
    pub fn alloc_data(
        &self,
        h: &Handle,
        r: &DataRequest,
        pa: &mut Option<PaRef>,
    ) -> Result<(u64, u32)> {
        let fits = self.data_allowance(u64::from(r.want)) as u32;
        debug_assert!(fits <= r.want, "the reserve allowed {fits} of {}", r.want);
        if fits == 0 {
            return Err(Error::NoSpace);
        }
        let shrunk;
        let r = if fits < r.want {
            shrunk = DataRequest { want: fits, ..*r };
            &shrunk
        } else {
            r
        };
        if let Some(p) = *pa {
            if let Some(found) = self.use_pa(h, p, r.lblk, r.want)? {
                return Ok(found);
            }
            *pa = None;
        }
        let stream = r.size_blocks > STREAM_REQ;
        // A file with nothing to continue starts at its stream goal (lanefs keeps small
        // files of one writer together this way instead of ext4's per-CPU groups).
        let goal = r
            .goal
            .unwrap_or_else(|| match self.stream_goal(r.ino, r.own_goal) {
                0 => self.geo.group_first(self.geo.group_of_inode(r.ino)),
                g => g,
            });
        let mut len = r.want;
        if r.normalize {
            let (ws, wl) = normalize(r.lblk, r.want, r.size_blocks, self.geo.bs);
            debug_assert!(
                ws <= u64::from(r.lblk) && u64::from(r.lblk) < ws + wl,
                "normalized window {ws}+{wl} misses block {}",
                r.lblk
            );
            let end = (ws + wl).min(u64::from(r.lblk) + u64::from(r.room));
            len = (end.saturating_sub(u64::from(r.lblk)) as u32).clamp(r.want, self.geo.bpg);
        }
        let req = Request {
            goal,
            len,
            used: r.want,
            merge: r.goal.is_some(),
            stream: stream.then_some((r.ino, r.own_goal)),
            pa_for: (len > r.want).then_some(r.lblk),
        };
        let f = self.allocate(h, &req)?;
        let p = self.geo.group_first(f.g) + f.off as u64;
        debug_assert!(f.used >= 1 && f.used <= r.want as usize);
        if stream {
            self.set_stream_goal(r.ino, p + f.used as u64);
        }
        *pa = f.pa.map(|id| PaRef { group: f.g, id });
        Ok((p, f.used as u32))
    }

    /// Serve logical block `lblk` from preallocation `p`. `None` when `p` is gone or does
    /// not continue at `lblk` (then it is discarded).
    fn use_pa(&self, h: &Handle, p: PaRef, lblk: u32, want: u32) -> Result<Option<(u64, u32)>> {
        let (mut st, bm) = self.lock_group_wait(p.group)?;
        let Some(i) = st.pas.iter().position(|x| x.id == p.id) else {
            return Ok(None);
        };
        let pa = st.pas[i];
        if pa.lnext != lblk {
            self.drop_pa(p.group, &mut st, i);
            return Ok(None);
        }
        let n = want.min(pa.left);
        debug_assert!(
            n > 0 && pa.off + pa.left <= self.geo.group_len(p.group),
            "preallocation {pa:?} of group {} empty or past its end",
            p.group
        );
        self.mark_used(h, p.group, &mut st, bm, pa.off as usize, n as usize)?;
        let x = &mut st.pas[i];
        x.lnext += n;
        x.off += n;
        x.left -= n;
        if x.left == 0 {
            st.pas.swap_remove(i);
            self.pa_count.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(Some((self.geo.group_first(p.group) + u64::from(pa.off), n)))
    }

    /// Remove preallocation `i` of group `g` and give its blocks back.
    fn drop_pa(&self, g: u32, st: &mut GroupState, i: usize) {
        let pa = st.pas.swap_remove(i);
        self.pa_count.fetch_sub(1, Ordering::Relaxed);
        if pa.left > 0 {
            if let Some(b) = st.buddy.as_mut() {
                let was_used = b.set(pa.off as usize, (pa.off + pa.left) as usize, true);
                debug_assert_eq!(
                    was_used, pa.left,
                    "group {g}: preallocated blocks {pa:?} were free in the buddy"
                );
            }
            self.publish(g, st);
        }
    }

    /// Discard a file's preallocation (truncate, last close, delete).
    pub fn discard_pa(&self, pa: &mut Option<PaRef>) {
        let Some(p) = pa.take() else { return };
        let mut st = self.groups[p.group as usize].desc.lock();
        if let Some(i) = st.pas.iter().position(|x| x.id == p.id) {
            self.drop_pa(p.group, &mut st, i);
        }
    }

    /// Discard every preallocation (before reporting ENOSPC). Whether any existed.
    fn discard_all_pas(&self) -> bool {
        if self.pa_count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        for grp in &self.groups {
            let mut st = grp.desc.lock();
            while !st.pas.is_empty() {
                self.drop_pa(grp.no, &mut st, 0);
            }
        }
        true
    }

    /// The search, with the ENOSPC retry after discarding preallocations.
    fn allocate(&self, h: &Handle, r: &Request) -> Result<Found> {
        debug_assert!(r.used > 0 && r.len >= r.used);
        let mut r = *r;
        r.len = r.len.min(self.geo.bpg);
        r.used = r.used.min(r.len);
        if r.goal >= self.geo.blocks || r.goal < u64::from(self.geo.first_data_block) {
            r.goal = u64::from(self.geo.first_data_block);
        }
        debug_assert!(r.goal < self.geo.blocks && r.used > 0);
        loop {
            if let Some(f) = self.search(h, &r)? {
                // Cheap, and a run past the group's end would mark another group's blocks.
                assert!(
                    f.used > 0
                        && f.used <= r.used as usize
                        && f.off + f.used <= self.geo.group_len(f.g) as usize,
                    "group {}: found {} blocks at {} for a request of {}",
                    f.g,
                    f.used,
                    f.off,
                    r.used
                );
                return Ok(f);
            }
            if !self.discard_all_pas() {
                return Err(Error::NoSpace);
            }
        }
    }

    fn search(&self, h: &Handle, r: &Request) -> Result<Option<Found>> {
        let g0 = self.geo.group_of_block(r.goal);
        let off0 = (r.goal - self.geo.group_first(g0)) as usize;
        // Exact goal, waiting for the lock.
        {
            let (mut st, bm) = self.lock_group_wait(g0)?;
            let b = st.buddy.as_ref().expect("lock_group builds the buddy");
            let run = b.run_at(off0, r.len as usize);
            if run >= r.len as usize || (r.merge && run > 0) {
                return self.take(h, g0, &mut st, bm, off0, run, r).map(Some);
            }
        }
        // Stream goal.
        let (g0, off0) = match r.stream {
            Some((ino, own)) => match self.stream_goal(ino, own) {
                0 => (g0, off0),
                s if s < self.geo.blocks && s >= u64::from(self.geo.first_data_block) => {
                    let g = self.geo.group_of_block(s);
                    (g, (s - self.geo.group_first(g)) as usize)
                }
                _ => (g0, off0),
            },
            None => (g0, off0),
        };
        let order = r.len.trailing_zeros() as usize;
        let first = if r.len.is_power_of_two() && order >= ORDER2_REQS && order < self.orders {
            Cr::Power2Aligned
        } else {
            Cr::GoalLenFast
        };
        let mut best: Option<(u32, usize)> = None;
        for cr in [
            Cr::Power2Aligned,
            Cr::GoalLenFast,
            Cr::BestAvailLen,
            Cr::GoalLenSlow,
            Cr::AnyFree,
        ] {
            if cr == Cr::Power2Aligned && first != cr {
                continue;
            }
            if cr == Cr::AnyFree {
                // The longest run seen by the slower passes, before taking any run.
                if let Some((g, _)) = best {
                    if let Some(f) = self.take_longest(h, g, r)? {
                        return Ok(Some(f));
                    }
                }
            }
            let lens: Vec<u32> = if cr == Cr::BestAvailLen {
                let top = 31 - r.len.leading_zeros() as usize;
                let floor = r.used.max(1);
                (top.saturating_sub(BEST_AVAIL_TRIM)..=top)
                    .rev()
                    .map(|o| 1u32 << o)
                    .filter(|&l| l < r.len && l >= floor)
                    .collect()
            } else {
                vec![r.len]
            };
            for len in lens {
                if let Some(f) = self.pass(h, cr, len, g0, off0, r, &mut best)? {
                    return Ok(Some(f));
                }
            }
        }
        Ok(None)
    }

    /// One pass of criteria `cr` for runs of `len` blocks over the groups it may use.
    #[allow(clippy::too_many_arguments)]
    fn pass(
        &self,
        h: &Handle,
        cr: Cr,
        len: u32,
        g0: u32,
        off0: usize,
        r: &Request,
        best: &mut Option<(u32, usize)>,
    ) -> Result<Option<Found>> {
        let n = self.geo.groups;
        let try_only = self.opts.trylock && cr != Cr::AnyFree;
        let listed = self.opts.optimize_scan
            && matches!(cr, Cr::Power2Aligned | Cr::GoalLenFast | Cr::BestAvailLen);
        let mut visit = |g: u32| -> Result<Option<Found>> {
            let grp = &self.groups[g as usize];
            // The unlocked predicate (a hint; `scan_one` checks again under the lock).
            let avail = grp.avail.load(Ordering::Relaxed);
            let ok = match cr {
                Cr::Power2Aligned => {
                    avail >= len
                        && grp.largest.load(Ordering::Relaxed) >= len.trailing_zeros() as i32
                }
                Cr::GoalLenFast | Cr::BestAvailLen => {
                    avail >= len && avail / grp.frags.load(Ordering::Relaxed).max(1) >= len
                }
                Cr::GoalLenSlow => avail >= len,
                Cr::AnyFree => avail > 0,
            };
            if !ok {
                return Ok(None);
            }
            let start = if g == g0 { off0 } else { 0 };
            let mut seen = None;
            let f = self.scan_one(h, g, start, cr, len, r, try_only, &mut seen)?;
            if let Some(l) = seen {
                if best.is_none_or(|(_, bl)| l > bl) {
                    *best = Some((g, l));
                }
            }
            Ok(f)
        };
        if listed {
            let sets: Vec<&GroupSet> = match cr {
                Cr::Power2Aligned => self.lists.largest[len.trailing_zeros() as usize..]
                    .iter()
                    .chain([&self.lists.unbuilt])
                    .collect(),
                _ => self.lists.avg[avg_order(len, self.orders)..]
                    .iter()
                    .chain([&self.lists.unbuilt])
                    .collect(),
            };
            for g in walk(&sets, n, g0) {
                if let Some(f) = visit(g)? {
                    return Ok(Some(f));
                }
            }
        } else {
            for i in 0..n {
                if let Some(f) = visit((g0 + i) % n)? {
                    return Ok(Some(f));
                }
            }
        }
        Ok(None)
    }

    /// Lock group `g` (or skip it when `try_only` and busy), check criteria `cr` under
    /// the lock and scan it. `seen` gets the longest run shorter than `len` seen.
    #[allow(clippy::too_many_arguments)]
    fn scan_one(
        &self,
        h: &Handle,
        g: u32,
        start: usize,
        cr: Cr,
        len: u32,
        r: &Request,
        try_only: bool,
        seen: &mut Option<usize>,
    ) -> Result<Option<Found>> {
        let Some((mut st, bm)) = self.lock_group(g, try_only)? else {
            return Ok(None);
        };
        let b = st.buddy.as_ref().expect("lock_group builds the buddy");
        let len = len as usize;
        let pos = match cr {
            Cr::Power2Aligned => {
                let k = len.trailing_zeros() as usize;
                if b.nfree() < len as u32 || b.largest_order().is_none_or(|o| o < k) {
                    return Ok(None);
                }
                b.find_aligned(k, start).map(|o| (o, len))
            }
            Cr::GoalLenFast | Cr::BestAvailLen => {
                if b.avg_fragment() < len as u32 {
                    return Ok(None);
                }
                complex_scan(b, start, len, seen)
            }
            Cr::GoalLenSlow => {
                if b.nfree() < len as u32 {
                    return Ok(None);
                }
                complex_scan(b, start, len, seen)
            }
            Cr::AnyFree => b.runs_from(start).next().map(|(s, l)| (s, l.min(len))),
        };
        match pos {
            Some((s, l)) => {
                debug_assert!(
                    l > 0 && l <= len && s + l <= self.geo.group_len(g) as usize,
                    "group {g}: criteria {cr:?} chose {l} blocks at {s}"
                );
                self.take(h, g, &mut st, bm, s, l, r).map(Some)
            }
            None => Ok(None),
        }
    }

    /// Lock group `g` with its buddy built, waiting for the lock.
    pub(super) fn lock_group_wait(
        &self,
        g: u32,
    ) -> Result<(MutexGuard<'_, GroupState>, &Arc<Buf>)> {
        match self.lock_group(g, false)? {
            Some(x) => Ok(x),
            None => unreachable!("a waiting lock always succeeds"),
        }
    }

    /// Lock group `g` with its buddy built. `None` when `try_only` and the lock is held.
    pub(super) fn lock_group(
        &self,
        g: u32,
        try_only: bool,
    ) -> Result<Option<(MutexGuard<'_, GroupState>, &Arc<Buf>)>> {
        let grp = &self.groups[g as usize];
        let bm = self.block_buf(g)?;
        let mut st = if try_only {
            match grp.desc.try_lock() {
                Some(s) => s,
                None => return Ok(None),
            }
        } else {
            grp.desc.lock()
        };
        if st.buddy.is_none() {
            let mut map = bm.write();
            if st.d.flags() & BG_BLOCK_UNINIT != 0 {
                self.init_block_bitmap(g, &mut map);
            }
            let mut view = map.to_vec();
            for i in self.geo.group_len(g) as usize..view.len() * 8 {
                set_bit(&mut view, i);
            }
            for &(o, n, _) in &st.busy_blocks {
                for i in o..o + n {
                    set_bit(&mut view, i as usize);
                }
            }
            st.buddy = Some(Buddy::build(&view, self.orders));
            self.lists.unbuilt.remove(g);
            self.publish(g, &mut st);
        }
        Ok(Some((st, bm)))
    }

    /// After a change of group `g`'s buddy: the unlocked counters and the scan lists.
    pub(super) fn publish(&self, g: u32, st: &mut GroupState) {
        let Some(b) = st.buddy.as_ref() else { return };
        let grp = &self.groups[g as usize];
        grp.avail.store(b.nfree(), Ordering::Relaxed);
        grp.frags.store(b.fragments(), Ordering::Relaxed);
        let largest = b.largest_order();
        grp.largest
            .store(largest.map_or(-1, |o| o as i32), Ordering::Relaxed);
        if !self.opts.optimize_scan {
            return;
        }
        let avg = (b.nfree() > 0).then(|| avg_order(b.avg_fragment(), self.orders) as u8);
        let largest = largest.map(|o| o as u8);
        let (old_l, old_a) = st.listed;
        if old_l != largest {
            if let Some(o) = old_l {
                self.lists.largest[o as usize].remove(g);
            }
            if let Some(o) = largest {
                self.lists.largest[o as usize].insert(g);
            }
        }
        if old_a != avg {
            if let Some(o) = old_a {
                self.lists.avg[o as usize].remove(g);
            }
            if let Some(o) = avg {
                self.lists.avg[o as usize].insert(g);
            }
        }
        st.listed = (largest, avg);
    }

    /// Take `n` blocks at `off` of group `g` found by a search: the request uses up to
    /// `r.used`, the rest becomes a preallocation. Returns what the caller gets.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &self,
        h: &Handle,
        g: u32,
        st: &mut GroupState,
        bm: &Arc<Buf>,
        off: usize,
        n: usize,
        r: &Request,
    ) -> Result<Found> {
        let used = n.min(r.used as usize);
        let was_free =
            st.buddy
                .as_mut()
                .expect("lock_group builds the buddy")
                .set(off, off + n, false);
        debug_assert_eq!(
            was_free as usize, n,
            "group {g}: blocks {off}+{n} taken were not all free in the buddy"
        );
        self.mark_used(h, g, st, bm, off, used)?;
        let mut pa = None;
        if let Some(lblk) = r.pa_for.filter(|_| n > used) {
            let id = self.next_pa.fetch_add(1, Ordering::Relaxed);
            pa = Some(id);
            st.pas.push(Prealloc {
                id,
                lnext: lblk + used as u32,
                off: (off + used) as u32,
                left: (n - used) as u32,
            });
            self.pa_count.fetch_add(1, Ordering::Relaxed);
        }
        self.publish(g, st);
        Ok(Found { g, off, used, pa })
    }

    /// The longest of the first `MAX_TO_SCAN` runs of group `g` (ext4's
    /// `try_best_found`, after the passes that wanted the full length).
    fn take_longest(&self, h: &Handle, g: u32, r: &Request) -> Result<Option<Found>> {
        let (mut st, bm) = self.lock_group_wait(g)?;
        let b = st.buddy.as_ref().expect("lock_group builds the buddy");
        let best = b.runs_from(0).take(MAX_TO_SCAN).max_by_key(|&(_, l)| l);
        match best {
            Some((s, l)) => {
                let n = l.min(r.len as usize);
                debug_assert!(n > 0, "group {g}: an empty free run at {s}");
                self.take(h, g, &mut st, bm, s, n, r).map(Some)
            }
            None => Ok(None),
        }
    }

    /// Set `n` bitmap bits at `off` of group `g` (already used in the buddy), update the
    /// descriptor and remember them as allocated by this transaction.
    #[allow(clippy::too_many_arguments)]
    fn mark_used(
        &self,
        h: &Handle,
        g: u32,
        st: &mut GroupState,
        bm: &Arc<Buf>,
        off: usize,
        n: usize,
    ) -> Result<()> {
        let grp = &self.groups[g as usize];
        debug_assert!(
            n > 0 && off + n <= self.geo.group_len(g) as usize,
            "group {g}: marking {n} blocks at {off}"
        );
        // The caller took the run from the buddy first (a search's find or a
        // preallocation, both used there): nobody else can be handed these blocks.
        debug_assert!(
            st.buddy
                .as_ref()
                .is_none_or(|b| (off..off + n).all(|i| !b.is_free(i))),
            "group {g}: blocks {off}+{n} marked in the bitmap are free in the buddy"
        );
        {
            let mut map = bm.write();
            if st.d.flags() & BG_BLOCK_UNINIT != 0 {
                self.init_block_bitmap(g, &mut map);
            }
            if let Some(i) = (off..off + n).find(|&i| test_bit(&map, i)) {
                return Err(Error::corrupt(
                    "block bitmap",
                    grp.block_bitmap,
                    format!("block {i} of group {g} is in use but the allocator had it free"),
                ));
            }
            for i in off..off + n {
                set_bit(&mut map, i);
            }
            // Reuse the previous transaction's bitmap: no allocation under the lock.
            let tid = h.tid();
            let (t, m) = st
                .fresh
                .get_or_insert_with(|| (tid, vec![0u8; map.len()].into_boxed_slice()));
            if *t != tid {
                *t = tid;
                m.fill(0);
            }
            for i in off..off + n {
                set_bit(m, i);
            }
        }
        h.dirty(bm);
        let d = &mut st.d;
        d.set_flags(d.flags() & !BG_BLOCK_UNINIT);
        let free = d.free_blocks().checked_sub(n as u32).ok_or_else(|| {
            Error::corrupt(
                "group descriptor",
                u64::from(g),
                "free block count below bitmap",
            )
        })?;
        d.set_free_blocks(free);
        grp.free_blocks.store(free, Ordering::Relaxed);
        self.touch(h, g, super::PENDING_BLOCK);
        Ok(())
    }
}

/// Walk free runs from `start` as ext4's complex scan does: an exact fit wins; else the
/// smallest run of at least `len`, once `MIN_TO_SCAN` runs were seen; at most
/// `MAX_TO_SCAN` runs. `seen` gets the longest shorter run when none fits.
fn complex_scan(
    b: &Buddy,
    start: usize,
    len: usize,
    seen: &mut Option<usize>,
) -> Option<(usize, usize)> {
    let mut cand: Option<(usize, usize)> = None;
    let mut longest = 0;
    for (i, (s, l)) in b.runs_from(start).enumerate() {
        if l == len {
            return Some((s, len));
        }
        if l > len && cand.is_none_or(|(_, cl)| l < cl) {
            cand = Some((s, l));
        }
        longest = longest.max(l);
        if (cand.is_some() && i + 1 >= MIN_TO_SCAN) || i + 1 >= MAX_TO_SCAN {
            break;
        }
    }
    if cand.is_none() && longest > 0 {
        *seen = Some(longest);
    }
    cand.map(|(s, _)| (s, len))
}
