//! The realtime device's extent allocator (seed 003: XFS's realtime allocator).
//!
//! Free space is the rt bitmap and summary ([`crate::disk::rtdev`]), cached and journaled
//! as metadata blocks. The device is cut into rt groups, each allocated under its own lock
//! (class `rtgroup`): an allocation tries its goal's group (or the next group of a rotor
//! when it has no goal), near the goal or by size as XFS does, then the other groups in
//! order without a goal (XFS's `xfs_rtallocate_rtgs`).
//!
//! Two policies make the same decision for every state and request:
//! - [`RtAllocPolicy::Plain`], `rt_alloc=plain`: the algorithm of Linux 6.4;
//! - [`RtAllocPolicy::Lean`] (default): the six changes of the 2023 series (Linux 6.7):
//!   the last bitmap block cached across primitives, the summary cache inverted to an upper
//!   bound, the summary probe returning the highest level it found, the block search
//!   stopping at a run as long as the summary allows, no re-tries of blocks already tried,
//!   and the search for the end of an extent bounded by what its level can reach.
//!
//! [`RtStats`] counts bitmap and summary block fetches (deterministic) and folds every
//! decision into a hash that must be equal under both policies.

pub mod align;
mod bitmap;
mod search;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::buf::BufCache;
use crate::disk::rtdev::{bit, counter, highbit64, word, RtGeometry};
use crate::error::{Error, Result};
use crate::journal::Handle;
use crate::sync::{Mutex, RTGROUP};
use bitmap::Ctx;

/// Which realtime allocator runs (seed 003's variants).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RtAllocPolicy {
    /// Linux 6.4's algorithm (`rt_alloc=plain`).
    Plain,
    /// The 2023 series' six changes, the same decisions with less work (default).
    #[default]
    Lean,
}

impl RtAllocPolicy {
    /// The option value naming this policy.
    pub fn name(self) -> &'static str {
        match self {
            RtAllocPolicy::Plain => "plain",
            RtAllocPolicy::Lean => "lean",
        }
    }

    /// Parse an option value.
    pub fn parse(s: &str) -> Option<RtAllocPolicy> {
        match s {
            "plain" => Some(RtAllocPolicy::Plain),
            "lean" => Some(RtAllocPolicy::Lean),
            _ => None,
        }
    }
}

/// An allocation request, in rt extents of the whole device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtRequest {
    /// Allocate as near this extent as possible (None: anywhere, by size).
    pub goal: Option<u64>,
    /// The shortest acceptable extent.
    pub minlen: u64,
    /// The longest wanted.
    pub maxlen: u64,
    /// A shorter extent's length is a multiple of this (the extent size hint), and so are
    /// `minlen` and `maxlen`.
    pub prod: u64,
}

/// What an allocation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtOutcome {
    /// `len` extents from `start` are now the caller's.
    Got {
        /// First rt extent of the device.
        start: u64,
        /// Rt extents.
        len: u64,
    },
    /// No free extent satisfies the request.
    NoSpace,
    /// The extent the search chose was freed by a transaction that has not committed:
    /// commit it and ask again (the same search then makes the same choice).
    Busy,
}

/// Counters of the allocator (sums over groups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtStats {
    /// Allocations made.
    pub allocations: u64,
    /// Extents freed (calls).
    pub frees: u64,
    /// Bitmap blocks fetched by allocations (not frees).
    pub bitmap_reads: u64,
    /// Summary blocks fetched by allocations.
    pub summary_reads: u64,
    /// Free rt extents.
    pub free_extents: u64,
    /// Rt extents on the device.
    pub extents: u64,
    /// Hash of every allocation's (start, length), chained per group in its order and
    /// folded over groups in group order.
    pub decisions: u64,
}

/// One group's state, under its lock.
pub(crate) struct GroupState {
    /// Summary cache, a byte per bitmap block (lower bound under `plain`, upper under
    /// `lean`).
    rsum_cache: Vec<u8>,
    /// Extents freed by transactions that have not committed: (start, len, tid).
    busy: Vec<(u64, u64, u64)>,
    allocations: u64,
    frees: u64,
    bitmap_reads: u64,
    summary_reads: u64,
    hash: u64,
}

/// One group: its lock and the counters read without it, alone on their cache lines, so
/// threads allocating in different groups share no line (with the locks in one vector and
/// the counters in others, eight groups' free counts shared a line that every allocation
/// wrote).
#[repr(align(128))]
struct RtGroup {
    st: Mutex<GroupState>,
    /// Free extents: written under the lock, read without it.
    free: AtomicU64,
    /// The group may hold busy extents (set under its lock, read without it), so a commit
    /// skips the groups it has nothing to release in.
    has_busy: AtomicBool,
}

/// The realtime allocator of a mounted image.
pub struct RtAlloc {
    geo: RtGeometry,
    bufs: Arc<BufCache>,
    /// Image block of each bitmap-file block.
    bitmap: Vec<u64>,
    /// Image block of each summary-file block.
    summary: Vec<u64>,
    lean: bool,
    groups: Vec<RtGroup>,
    rotor: AtomicU64,
}

fn mix(h: u64, a: u64, b: u64) -> u64 {
    let mut x = h ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.rotate_left(29);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 27)
}

impl RtAlloc {
    /// The allocator over the bitmap and summary files whose blocks sit at the given image
    /// blocks; reads the bitmap once to count free extents.
    pub fn new(
        geo: RtGeometry,
        bufs: Arc<BufCache>,
        bitmap: Vec<u64>,
        summary: Vec<u64>,
        policy: RtAllocPolicy,
    ) -> Result<RtAlloc> {
        if (bitmap.len() as u64) < geo.bitmap_blocks()
            || (summary.len() as u64) < geo.summary_blocks()
        {
            return Err(Error::corrupt(
                "rt bitmap",
                bitmap.len() as u64,
                format!(
                    "bitmap has {} blocks and summary {}, the geometry needs {} and {}",
                    bitmap.len(),
                    summary.len(),
                    geo.bitmap_blocks(),
                    geo.summary_blocks()
                ),
            ));
        }
        let lean = policy == RtAllocPolicy::Lean;
        let mut a = RtAlloc {
            geo,
            bufs,
            bitmap,
            summary,
            lean,
            groups: Vec::new(),
            rotor: AtomicU64::new(0),
        };
        for g in 0..geo.groups() {
            let free = a.count_free(g)?;
            a.groups.push(RtGroup {
                free: AtomicU64::new(free),
                has_busy: AtomicBool::new(false),
                st: Mutex::new(
                    &RTGROUP,
                    GroupState {
                        rsum_cache: vec![if lean { 0xFF } else { 0 }; geo.bmblocks_in(g) as usize],
                        busy: Vec::new(),
                        allocations: 0,
                        frees: 0,
                        bitmap_reads: 0,
                        summary_reads: 0,
                        hash: 0,
                    },
                ),
            });
        }
        Ok(a)
    }

    /// The geometry.
    pub fn geometry(&self) -> &RtGeometry {
        &self.geo
    }

    fn count_free(&self, g: u32) -> Result<u64> {
        let bits = self.geo.bits_per_block();
        let ext = self.geo.extents_in(g);
        let mut n = 0;
        for bb in 0..u64::from(self.geo.bmblocks_in(g)) {
            let f = self.geo.bitmap_fblock(g, bb as u32);
            let buf = self.bufs.get(self.bitmap[f as usize])?;
            let d = buf.read();
            let in_block = (ext - bb * bits).min(bits);
            let full = (in_block / 64) as usize;
            n += (0..full)
                .map(|w| u64::from(word(&d, w).count_ones()))
                .sum::<u64>();
            n += (full as u64 * 64..in_block)
                .filter(|&i| bit(&d, i as usize))
                .count() as u64;
        }
        Ok(n)
    }

    /// Allocate per `req` inside transaction `h`.
    pub fn allocate(&self, h: &Handle, req: &RtRequest) -> Result<RtOutcome> {
        let prod = req.prod.max(1);
        if req.minlen == 0
            || req.maxlen < req.minlen
            || !req.minlen.is_multiple_of(prod)
            || !req.maxlen.is_multiple_of(prod)
        {
            return Err(Error::Invalid(format!("bad rt allocation request {req:?}")));
        }
        let ngroups = self.groups.len() as u64;
        let gext = self.geo.group_extents();
        let (first, mut goal) = match req.goal {
            Some(x) if x < self.geo.rextents => (x / gext, Some(x % gext)),
            _ => (self.rotor.fetch_add(1, Ordering::Relaxed) % ngroups, None),
        };
        let mut g = first;
        // A group whose choice is busy (freed, not yet committed) is passed over like a
        // full one; only when no group has space is the caller told to commit and retry.
        let mut busy = false;
        loop {
            match self.allocate_in(h, g as u32, goal, req.minlen, req.maxlen, prod)? {
                Some(RtOutcome::Busy) => busy = true,
                Some(o) => return Ok(o),
                None => {}
            }
            goal = None;
            g = (g + 1) % ngroups;
            if g == first {
                return Ok(if busy {
                    RtOutcome::Busy
                } else {
                    RtOutcome::NoSpace
                });
            }
        }
    }

    fn allocate_in(
        &self,
        h: &Handle,
        g: u32,
        goal: Option<u64>,
        minlen: u64,
        maxlen: u64,
        prod: u64,
    ) -> Result<Option<RtOutcome>> {
        let grp = &self.groups[g as usize];
        if grp.free.load(Ordering::Relaxed) < minlen {
            return Ok(None);
        }
        let mut guard = grp.st.lock();
        let st = &mut *guard;
        let mut c = Ctx::new(self, g, st, h);
        let r = c.allocate(goal, minlen, maxlen, prod);
        let (bm, sm) = (c.bm_reads, c.sum_reads);
        drop(c);
        st.bitmap_reads += bm;
        st.summary_reads += sm;
        let (start, len) = match r? {
            Some(Ok(found)) => found,
            Some(Err(busy)) => return Ok(Some(busy)),
            None => return Ok(None),
        };
        // Marked allocated in the bitmap already: a run past the group or off the request
        // would hand out extents of a neighbour or more than the caller maps.
        assert!(
            len >= minlen && len <= maxlen && start + len <= self.geo.extents_in(g),
            "rt group {g}: allocated {len} extents at {start} for {minlen}..={maxlen}"
        );
        let free = &grp.free;
        let left = free.load(Ordering::Relaxed);
        debug_assert!(left >= len);
        // Written only under the group's lock.
        free.store(left - len, Ordering::Relaxed);
        st.allocations += 1;
        let dev_start = u64::from(g) * self.geo.group_extents() + start;
        st.hash = mix(st.hash, dev_start, len);
        Ok(Some(RtOutcome::Got {
            start: dev_start,
            len,
        }))
    }

    /// Free `len` extents from `start` (device extents) in transaction `h`; they are not
    /// handed to another transaction before `h`'s commits.
    pub fn free(&self, h: &Handle, start: u64, len: u64) -> Result<()> {
        if len == 0 || start + len > self.geo.rextents || start == 0 {
            return Err(Error::corrupt(
                "rt extent",
                start,
                format!("free of {len} rt extents out of range"),
            ));
        }
        let gext = self.geo.group_extents();
        let mut x = start;
        while x < start + len {
            let g = (x / gext) as u32;
            let local = x % gext;
            let n = (start + len - x).min(gext - local);
            let grp = &self.groups[g as usize];
            let mut guard = grp.st.lock();
            let st = &mut *guard;
            let mut c = Ctx::new(self, g, st, h);
            let (ok, bad) = c.check_range(local, n, false)?;
            if !ok {
                return Err(Error::corrupt(
                    "rt bitmap",
                    u64::from(g) * gext + bad,
                    "freeing an rt extent that is already free",
                ));
            }
            c.free_range(local, n)?;
            drop(c);
            st.busy.push((local, n, h.tid()));
            grp.has_busy.store(true, Ordering::Release);
            st.frees += 1;
            let free = &grp.free;
            let now = free.load(Ordering::Relaxed) + n;
            // Counted from the bitmap at mount, moved by checked ranges since.
            debug_assert!(
                now <= self.geo.extents_in(g),
                "rt group {g}: {now} free extents of {}",
                self.geo.extents_in(g)
            );
            free.store(now, Ordering::Relaxed);
            x += n;
        }
        Ok(())
    }

    /// Transaction `tid` committed: the extents it freed may be handed out.
    pub fn committed(&self, tid: u64) {
        for grp in &self.groups {
            if !grp.has_busy.load(Ordering::Acquire) {
                continue;
            }
            let mut st = grp.st.lock();
            st.busy.retain(|&(_, _, t)| t > tid);
            if st.busy.is_empty() {
                grp.has_busy.store(false, Ordering::Release);
            }
        }
    }

    /// Whether some freed extents wait for their transaction to commit (an allocation
    /// that found no space may then succeed after a commit).
    pub fn has_busy(&self) -> bool {
        self.groups
            .iter()
            .any(|g| g.has_busy.load(Ordering::Acquire))
    }

    /// Sums of every group's counters.
    pub fn stats(&self) -> RtStats {
        let mut s = RtStats {
            extents: self.geo.rextents,
            ..RtStats::default()
        };
        for grp in &self.groups {
            let st = grp.st.lock();
            s.free_extents += grp.free.load(Ordering::Relaxed);
            s.allocations += st.allocations;
            s.frees += st.frees;
            s.bitmap_reads += st.bitmap_reads;
            s.summary_reads += st.summary_reads;
            s.decisions = mix(s.decisions, st.hash, st.allocations);
        }
        s
    }

    /// Free extents (a racy sum, for statfs).
    pub fn free_extents(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.free.load(Ordering::Relaxed))
            .sum()
    }

    /// Free runs by log2 length over the whole device, from the summary.
    pub fn histogram(&self) -> Result<Vec<u64>> {
        let mut h = vec![0u64; self.geo.levels() as usize];
        for g in 0..self.geo.groups() {
            let _st = self.groups[g as usize].st.lock();
            for log in 0..self.geo.levels_in(g) {
                for bb in 0..self.geo.bmblocks_in(g) {
                    let (f, off) = self.geo.summary_at(g, log, bb);
                    let buf = self.bufs.get(self.summary[f as usize])?;
                    h[log as usize] += u64::from(counter(&buf.read(), off));
                }
            }
        }
        Ok(h)
    }

    /// Check every group: the summary equals a rebuild from the bitmap, the free count
    /// matches, and the summary cache's bounds hold. Errors name the first difference.
    pub fn check(&self) -> Result<()> {
        for g in 0..self.geo.groups() {
            let st = self.groups[g as usize].st.lock();
            let runs = self.free_runs(g)?;
            let free: u64 = runs.iter().map(|r| r.1).sum();
            let counted = self.groups[g as usize].free.load(Ordering::Relaxed);
            if free != counted {
                return Err(Error::corrupt(
                    "rt bitmap",
                    u64::from(g),
                    format!("group {g} has {free} free extents, the allocator counts {counted}"),
                ));
            }
            let bmb = self.geo.bmblocks_in(g) as usize;
            let levels = self.geo.levels_in(g);
            let mut want = vec![0u32; levels as usize * bmb];
            let bl = self.geo.blkbit_log();
            for &(s, l) in &runs {
                want[highbit64(l) as usize * bmb + (s >> bl) as usize] += 1;
            }
            for log in 0..levels {
                for bb in 0..bmb {
                    let (f, off) = self.geo.summary_at(g, log, bb as u32);
                    let buf = self.bufs.get(self.summary[f as usize])?;
                    let have = counter(&buf.read(), off);
                    let w = want[log as usize * bmb + bb];
                    if have != w {
                        return Err(Error::corrupt(
                            "rt summary",
                            u64::from(g),
                            format!(
                                "group {g} summary [{log}][{bb}] is {have}, the bitmap makes {w}"
                            ),
                        ));
                    }
                    let c = u32::from(st.rsum_cache[bb]);
                    let bound_ok = if self.lean {
                        w == 0 || log < c
                    } else {
                        w == 0 || log >= c
                    };
                    if !bound_ok {
                        return Err(Error::corrupt(
                            "rt summary",
                            u64::from(g),
                            format!("group {g} block {bb}: level {log} has runs but the cache bound is {c}"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The maximal free runs of group `g` as (start, len), group-relative.
    pub fn free_runs(&self, g: u32) -> Result<Vec<(u64, u64)>> {
        let bits = self.geo.bits_per_block();
        let ext = self.geo.extents_in(g);
        let mut runs = Vec::new();
        let mut cur: Option<u64> = None;
        for bb in 0..u64::from(self.geo.bmblocks_in(g)) {
            let f = self.geo.bitmap_fblock(g, bb as u32);
            let buf = self.bufs.get(self.bitmap[f as usize])?;
            let d = buf.read();
            for i in 0..bits.min(ext - bb * bits) {
                let x = bb * bits + i;
                match (bit(&d, i as usize), cur) {
                    (true, None) => cur = Some(x),
                    (false, Some(s)) => {
                        runs.push((s, x - s));
                        cur = None;
                    }
                    _ => {}
                }
            }
        }
        if let Some(s) = cur {
            runs.push((s, ext - s));
        }
        Ok(runs)
    }
}

#[cfg(test)]
mod tests;
