//! Block mapping, the inode layer's half of file data (ext4's `ext4_map_blocks` and
//! `ext4_ext_remove_space`): find the holes of a logical range, build the allocation
//! request for each (goal, size, normalisation), insert the extents, keep `i_blocks`
//! exact, and undo a mapping a later step could not finish.
//!
//! Callers hold the inode's state lock and a journal handle. The page cache is not
//! touched here: a caller that unmaps blocks drops their pages first (as ext4's
//! truncate drops the page cache before it removes extents).

use crate::alloc::blocks::DataRequest;
use crate::alloc::Allocator;
use crate::disk::extent::{Extent, MAX_INIT_LEN, MAX_UNWRITTEN_LEN};
use crate::disk::rtdev::is_rt_file;
use crate::error::{Error, Result};
use crate::extmap::{ExtentMap, Mapping};
use crate::inode::{Inode, InodeState};
use crate::journal::Handle;
use crate::rtalloc::{align, RtAlloc, RtOutcome, RtRequest};
use std::sync::atomic::Ordering;

/// A block's state before a write mapped it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prior {
    /// Mapped and written: the write overwrites it.
    Written,
    /// Mapped unwritten (fallocated): reads as zeros until written.
    Unwritten,
    /// Not mapped.
    Hole,
}

fn extents(st: &mut InodeState) -> Result<&mut ExtentMap> {
    st.ext
        .as_mut()
        .ok_or_else(|| Error::Unsupported("no extents".into()))
}

/// What each block of `[first, last]` is before a write maps it.
pub fn prior_blocks(st: &InodeState, first: u64, last: u64) -> Vec<Prior> {
    let ext = st.ext.as_ref();
    (first..=last)
        .map(|b| match ext.map(|e| e.map(b as u32)) {
            Some(Mapping::Mapped(_, false, _)) => Prior::Written,
            Some(Mapping::Mapped(_, true, _)) => Prior::Unwritten,
            _ => Prior::Hole,
        })
        .collect()
}

/// Ranges of `[first, end)` mapped to nothing.
pub fn holes(st: &InodeState, first: u64, end: u64) -> Vec<(u64, u64)> {
    let Some(ext) = st.ext.as_ref() else {
        return Vec::new();
    };
    let mut v = Vec::new();
    let mut l = first;
    while l < end {
        match ext.map(l as u32) {
            Mapping::Mapped(_, _, left) => l += u64::from(left),
            Mapping::Hole(n) => {
                let e = (l + n).min(end);
                v.push((l, e));
                l = e;
            }
        }
    }
    v
}

/// Map every hole in `[first, first+count)` with new blocks (unwritten if asked):
/// ext4_map_blocks with EXT4_GET_BLOCKS_CREATE. On an error part way, what was mapped
/// stays mapped; the caller undoes it (`undo`) or keeps it (fallocate, as ext4). A
/// realtime file's blocks come from `rt`, the mount's realtime allocator.
#[allow(clippy::too_many_arguments)]
pub fn map_blocks(
    al: &Allocator,
    rt: Option<&RtAlloc>,
    h: &Handle,
    i: &Inode,
    st: &mut InodeState,
    first: u64,
    count: u64,
    unwritten: bool,
) -> Result<()> {
    if let Some(rt) = realtime(rt, st) {
        return map_rt(rt, h, st, first, count, unwritten, al.geo.bs);
    }
    let bs = al.geo.bs;
    let bsu = u64::from(bs);
    let max = if unwritten {
        MAX_UNWRITTEN_LEN
    } else {
        MAX_INIT_LEN
    };
    let mut l = first;
    let end = first + count;
    while l < end {
        let ext = extents(st)?;
        let (hole, room) = match ext.map(l as u32) {
            Mapping::Mapped(_, _, left) => {
                l += u64::from(left);
                continue;
            }
            Mapping::Hole(n) => (n.min(end - l), n),
        };
        let want = hole.min(u64::from(max)) as u32;
        let req = DataRequest {
            ino: i.ino,
            lblk: l as u32,
            want,
            room: room.min(u64::from(max)) as u32,
            // Continue the file's own extents; else the allocator's stream goal.
            goal: ext.goal_for(l as u32),
            own_goal: i.last_alloc.load(Ordering::Relaxed),
            size_blocks: (l + u64::from(want)).max(st.d.size().div_ceil(bsu)),
            // As ext4: fallocate is not normalized.
            normalize: !unwritten,
        };
        let (p, got) = al.alloc_data(h, &req, &mut st.pa)?;
        debug_assert!(got >= 1 && got <= want, "allocator gave {got} of {want}");
        i.last_alloc.store(p + u64::from(got), Ordering::Relaxed);
        extents(st)?.insert(Extent {
            lblk: l as u32,
            len: got,
            pblk: p,
            unwritten,
        });
        st.ext_dirty = true;
        let sectors = st.d.blocks_512(bs) + u64::from(got) * u64::from(bs / 512);
        st.d.set_blocks_512(sectors, bs);
        l += u64::from(got);
    }
    Ok(())
}

/// Map logical block `lblk` (a hole) to one new metadata-like block: a directory's
/// next block, a long symlink's target. The goal continues the inode's extents, else
/// the start of its group. Returns the block.
pub fn map_one_block(
    al: &Allocator,
    h: &Handle,
    ino: u64,
    st: &mut InodeState,
    lblk: u32,
) -> Result<u64> {
    let geo = &al.geo;
    let ext = extents(st)?;
    debug_assert!(
        matches!(ext.map(lblk), Mapping::Hole(_)),
        "block {lblk} mapped"
    );
    let goal = ext
        .goal_for(lblk)
        .unwrap_or_else(|| geo.group_first(geo.group_of_inode(ino)));
    let p = al.alloc_content_block(h, goal)?;
    ext.insert(Extent {
        lblk,
        len: 1,
        pblk: p,
        unwritten: false,
    });
    st.ext_dirty = true;
    let sectors = st.d.blocks_512(geo.bs) + u64::from(geo.bs / 512);
    st.d.set_blocks_512(sectors, geo.bs);
    Ok(p)
}

/// Free the blocks of `[a, b)` (ext4_ext_remove_space); returns how many. What the
/// inode had preallocated goes back first, as ext4's truncate does. `meta`: the blocks
/// held metadata (a directory's), so their frees are journalled as such.
pub fn unmap_blocks(
    al: &Allocator,
    rt: Option<&RtAlloc>,
    h: &Handle,
    st: &mut InodeState,
    a: u64,
    b: u64,
    meta: bool,
) -> Result<u64> {
    if b <= a {
        return Ok(0);
    }
    let bs = al.geo.bs;
    if let Some(rt) = realtime(rt, st) {
        return unmap_rt(rt, h, st, a, b, bs);
    }
    al.discard_pa(&mut st.pa);
    let freed = extents(st)?.remove_range(a as u32, b);
    let mut n = 0u64;
    for (p, len) in freed {
        al.free_blocks_range(h, p, u64::from(len), meta)?;
        n += u64::from(len);
    }
    if n > 0 {
        st.ext_dirty = true;
        // Saturating: a damaged image's i_blocks may undercount its extents.
        let sectors = st.d.blocks_512(bs).saturating_sub(n * u64::from(bs / 512));
        st.d.set_blocks_512(sectors, bs);
    }
    Ok(n)
}

/// Undo what a write did to the map of `[first, ..)`: blocks that were holes are
/// freed, blocks that were unwritten are unwritten again. No page of the range may
/// exist yet (the write copies its data only after the map is final).
pub fn undo(
    al: &Allocator,
    rt: Option<&RtAlloc>,
    h: &Handle,
    st: &mut InodeState,
    first: u64,
    prior: &[Prior],
) -> Result<()> {
    for (k, &p) in prior.iter().enumerate() {
        let l = first + k as u64;
        match p {
            Prior::Hole => {
                unmap_blocks(al, rt, h, st, l, l + 1, false)?;
            }
            Prior::Unwritten => extents(st)?.mark_unwritten(l as u32, 1),
            Prior::Written => {}
        }
    }
    st.ext_dirty = true;
    Ok(())
}

/// The realtime allocator `rt` (the mount's, if it has an rt device), when `st` is a
/// realtime file.
fn realtime<'a>(rt: Option<&'a RtAlloc>, st: &InodeState) -> Option<&'a RtAlloc> {
    if !is_rt_file(st.d.mode(), st.d.flags()) {
        return None;
    }
    rt
}

/// Add `blocks` (positive or negative) to the inode's `i_blocks`.
fn count_blocks(st: &mut InodeState, blocks: i64, bs: u32) {
    let per = i64::from(bs / 512);
    let sectors = (st.d.blocks_512(bs) as i64)
        .saturating_add(blocks * per)
        .max(0);
    st.d.set_blocks_512(sectors as u64, bs);
}

/// Insert `[lblk, lblk+len)` at `pblk`, cut into extents no longer than the format allows.
fn insert_run(ext: &mut ExtentMap, lblk: u64, len: u64, pblk: u64, unwritten: bool) {
    let max = u64::from(if unwritten {
        MAX_UNWRITTEN_LEN
    } else {
        MAX_INIT_LEN
    });
    let mut k = 0;
    while k < len {
        let n = (len - k).min(max);
        ext.insert(Extent {
            lblk: (lblk + k) as u32,
            len: n as u32,
            pblk: pblk + k,
            unwritten,
        });
        k += n;
    }
}

/// `map_blocks` for a realtime file (XFS's `xfs_bmap_rtalloc`): each hole is widened to
/// whole rt extents aligned to the extent size hint (`align::widen`), asked of the rt
/// allocator near the end of the previous extent, and mapped; blocks outside the asked
/// range are mapped unwritten. A realtime file's mapping is always made of whole rt
/// extents whose file offset and device block agree modulo the rt extent size.
fn map_rt(
    rt: &RtAlloc,
    h: &Handle,
    st: &mut InodeState,
    first: u64,
    count: u64,
    unwritten: bool,
    bs: u32,
) -> Result<()> {
    let geo = *rt.geometry();
    let rext = u64::from(geo.rextsize);
    let hint = u64::from(st.d.extsize()).max(rext).div_ceil(rext) * rext;
    // One call asks at most an unwritten extent's worth (in whole hints; the loop goes on).
    let max_len = (u64::from(MAX_UNWRITTEN_LEN) / hint).max(1) * hint;
    let end = first + count;
    let mut l = first;
    while l < end {
        let ext = extents(st)?;
        let hole = match ext.map(l as u32) {
            Mapping::Mapped(_, _, left) => {
                l += u64::from(left);
                continue;
            }
            Mapping::Hole(n) => n,
        };
        let hole_start = ext.prev_end(l as u32);
        let want = hole.min(end - l);
        let w =
            align::widen(l, want, hole_start, l + hole, hint, rext, max_len).ok_or_else(|| {
                Error::corrupt(
                    "extent map",
                    0,
                    format!("realtime hole at block {l} is not made of whole rt extents"),
                )
            })?;
        // Continue the previous extent on the device when there is one (xfs_bmap_adjacent).
        let goal = ext
            .goal_for(w.off as u32)
            .map(|p| p / rext)
            .filter(|&x| x > 0 && x < geo.rextents);
        let mut w = w;
        let mut outcome = rt.allocate(h, &RtRequest { goal, ..w.req })?;
        if outcome == RtOutcome::NoSpace && hint > rext {
            // No hint-sized free run anywhere: map without the hint rather than fail
            // (xfs_bmap_rtalloc retries unaligned on ENOSPC).
            if let Some(plain) = align::widen(l, want, hole_start, l + hole, rext, rext, max_len) {
                w = plain;
                outcome = rt.allocate(h, &RtRequest { goal, ..w.req })?;
            }
        }
        let (start, len) = match outcome {
            RtOutcome::Got { start, len } => (start, len),
            // Busy: the chosen space waits for a commit; `retry_nospace` commits and asks
            // again, when the search makes the same choice.
            RtOutcome::NoSpace | RtOutcome::Busy => return Err(Error::NoSpace),
        };
        let (off, blocks, pblk) = (w.off, len * rext, start * rext);
        debug_assert!(
            off <= l && off + blocks > l,
            "rt allocation misses block {l}"
        );
        // A realtime mapping is whole rt extents, file offset and device block alike.
        debug_assert!(
            off.is_multiple_of(rext) && start > 0 && len >= w.req.minlen && len <= w.req.maxlen,
            "rt mapping at {off} of {len} extents from {start} for {:?}",
            w.req
        );
        let ext = extents(st)?;
        let asked_end = (l + want).min(off + blocks);
        insert_run(ext, off, l - off, pblk, true);
        insert_run(ext, l, asked_end - l, pblk + (l - off), unwritten);
        insert_run(
            ext,
            asked_end,
            off + blocks - asked_end,
            pblk + (asked_end - off),
            true,
        );
        st.ext_dirty = true;
        count_blocks(st, blocks as i64, bs);
        l = off + blocks;
    }
    Ok(())
}

/// `unmap_blocks` for a realtime file: the whole rt extents inside `[a, b)` are freed;
/// the blocks of rt extents it covers only in part stay mapped, unwritten (they read as
/// zeros), as XFS does when a punch or truncate splits an rt extent.
fn unmap_rt(rt: &RtAlloc, h: &Handle, st: &mut InodeState, a: u64, b: u64, bs: u32) -> Result<u64> {
    let rext = u64::from(rt.geometry().rextsize);
    // Past the last block, the whole tail (delete and truncate pass 2^32 or more).
    let fb = if b >= 1 << 32 { b } else { b - b % rext };
    let fa = a.div_ceil(rext) * rext;
    let ext = extents(st)?;
    let mut edges = vec![(a, fa.min(b))];
    if fb >= fa {
        edges.push((fb.max(a), b));
    }
    for (x, y) in edges {
        if y > x {
            ext.mark_unwritten(x as u32, (y - x).min(u64::from(u32::MAX)) as u32);
        }
    }
    let freed = if fb > fa {
        ext.remove_range(fa.min(u64::from(u32::MAX)) as u32, fb)
    } else {
        Vec::new()
    };
    st.ext_dirty = true;
    // Records of one rt extent may differ in written state: free physical runs whole.
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (p, len) in freed {
        match runs.last_mut() {
            Some((q, n)) if *q + *n == p => *n += u64::from(len),
            _ => runs.push((p, u64::from(len))),
        }
    }
    let mut n = 0u64;
    for (p, len) in runs {
        if p % rext != 0 || len % rext != 0 {
            return Err(Error::corrupt(
                "extent map",
                p,
                format!("realtime extent of {len} blocks at {p} is not whole rt extents"),
            ));
        }
        rt.free(h, p / rext, len / rext)?;
        n += len;
    }
    count_blocks(st, -(n as i64), bs);
    Ok(n)
}
