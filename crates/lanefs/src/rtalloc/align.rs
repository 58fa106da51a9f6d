//! Extent size hints: how a write's block range grows before it asks the realtime
//! allocator (XFS's `xfs_bmap_extsize_align` and `xfs_rtallocate_align`, in our words).
//!
//! A file with a hint of `align` blocks (at least the rt extent size) allocates whole
//! hint-aligned pieces: the range's start is rounded down and its end up to multiples of
//! the hint in file offsets, then clipped to the hole it lies in (never over a neighbouring
//! mapping). The blocks outside the asked range are mapped unwritten by the caller. The
//! request's `prod` is the hint in rt extents when the widened range is hint-aligned at
//! both ends, else 1; `minlen` covers at least the first asked block.

use super::RtRequest;

/// A widened allocation: file blocks `[off, off + len)` and the request for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Widened {
    /// First file block to map.
    pub off: u64,
    /// File blocks to map (a multiple of `rextsize`).
    pub len: u64,
    /// The request in rt extents (goal unset).
    pub req: RtRequest,
}

/// Widen the asked file blocks `[off, off + len)`, which lie in the hole
/// `[hole_start, hole_end)`, for a hint of `align` blocks on a device of `rextsize`-block
/// extents, asking at most `max_len` blocks. `None` when the hole cannot hold a whole rt
/// extent around the first asked block (the caller maps without the hint).
pub fn widen(
    off: u64,
    len: u64,
    hole_start: u64,
    hole_end: u64,
    align: u64,
    rextsize: u64,
    max_len: u64,
) -> Option<Widened> {
    debug_assert!(len > 0 && hole_start <= off && off + len <= hole_end);
    let align = align.max(rextsize).max(1);
    let end = off + len;
    let mut a = off - off % align;
    let mut e = end.div_ceil(align) * align;
    // Keep under the longest extent, in whole hints, at least one (the outer loop maps
    // the rest).
    let hints = ((e - a) / align).min(max_len / align).max(1);
    e = a + hints * align;
    a = a.max(hole_start);
    e = e.min(hole_end);
    // Whole rt extents: move the start up, then the end in, to multiples of rextsize.
    a = a.div_ceil(rextsize) * rextsize;
    e -= e % rextsize;
    if a > off || e <= off {
        return None;
    }
    let alen = e - a;
    let prod = if a.is_multiple_of(align) && alen.is_multiple_of(align) {
        align / rextsize
    } else {
        1
    };
    let maxlen = alen / rextsize;
    // At least the rt extents up to and including the first asked block.
    let mut minlen = (off - a) / rextsize + 1;
    if prod > 1 {
        minlen = minlen.div_ceil(prod) * prod;
    }
    let (minlen, prod) = if minlen > maxlen {
        (maxlen, 1)
    } else {
        (minlen, prod)
    };
    // The widened range holds the first asked block in whole rt extents, and the request
    // can be met (the allocator refuses one with minlen over maxlen).
    debug_assert!(
        a <= off && off < e && a.is_multiple_of(rextsize) && alen.is_multiple_of(rextsize),
        "widened {a}..{e} around {off}"
    );
    debug_assert!(minlen >= 1 && minlen <= maxlen - maxlen % prod);
    Some(Widened {
        off: a,
        len: alen,
        req: RtRequest {
            goal: None,
            minlen,
            maxlen: maxlen - maxlen % prod,
            prod,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_write_grows_to_its_hint() {
        // 16-block hint, 1-block extents: block 5 becomes blocks 0..16.
        let w = widen(5, 1, 0, 1000, 16, 1, 32768).unwrap();
        assert_eq!((w.off, w.len), (0, 16));
        assert_eq!((w.req.minlen, w.req.maxlen, w.req.prod), (16, 16, 16));
        // Across a hint boundary: 14..18 becomes 0..32.
        let w = widen(14, 4, 0, 1000, 16, 1, 32768).unwrap();
        assert_eq!((w.off, w.len), (0, 32));
    }

    #[test]
    fn the_hole_clips_the_growth() {
        // A mapping ends at 3 and the next starts at 12: 5..6 grows to 3..12, unaligned.
        let w = widen(5, 1, 3, 12, 16, 1, 32768).unwrap();
        assert_eq!((w.off, w.len), (3, 9));
        assert_eq!(w.req.prod, 1);
        assert_eq!((w.req.minlen, w.req.maxlen), (3, 9));
    }

    #[test]
    fn rt_extents_stay_whole() {
        // 4-block rt extents, no larger hint: 6..7 is extent 1 (blocks 4..8).
        let w = widen(6, 1, 0, 100, 1, 4, 32768).unwrap();
        assert_eq!((w.off, w.len), (4, 4));
        assert_eq!((w.req.minlen, w.req.maxlen), (1, 1));
        // A hole too small for a whole extent around the block.
        assert_eq!(widen(6, 1, 5, 7, 1, 4, 32768), None);
        // Requests are capped in whole hints.
        let w = widen(0, 100_000, 0, 200_000, 64, 1, 32768).unwrap();
        assert_eq!(w.len, 32768);
        assert_eq!(w.req.prod, 64);
        // A hint that does not divide the cap: the most whole hints under it.
        let w = widen(0, 100_000, 0, 200_000, 48, 1, 32768).unwrap();
        assert_eq!(w.len, 32768 / 48 * 48);
        // A cap under one hint: one hint still.
        let w = widen(0, 1000, 0, 2000, 64, 1, 32).unwrap();
        assert_eq!(w.len, 64);
    }
}
