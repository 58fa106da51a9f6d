//! The realtime device pass (lanefs's own; seed 003): realtime files' extents are rt-device
//! blocks, claimed here rather than in the image's block claims, and checked against the
//! rt bitmap and summary kept in reserved inodes 9 and 10. The pass rebuilds both files
//! from the claims (every rt extent no file owns is free, extent 0 holds the device's
//! header) and compares them block by block: an extent two files claim, an extent used but
//! marked free or free but marked used, and a summary counter that differs from a rebuild
//! are each reported. The data device itself is not read: everything checked is in the
//! image.

use super::*;
use crate::disk::rtdev::{self, RtGeometry, RtSuper, RT_BITMAP_INO, RT_SUMMARY_INO};

/// What pass 1 collects for the rt pass.
pub(super) struct RtFsck {
    /// The geometry the superblock records.
    pub geo: RtGeometry,
    /// Realtime files' data: (first block, blocks, inode), device blocks.
    pub claims: Vec<(u64, u64, u32)>,
    /// The bitmap and summary files' runs (from pass 1).
    pub files: [Vec<Run>; 2],
}

impl RtFsck {
    /// The rt state of an image, when its superblock has the rt feature and a geometry.
    pub(super) fn for_image(sb: &Superblock) -> Option<std::result::Result<RtFsck, String>> {
        if !sb.has_incompat(rtdev::RTDEV_INCOMPAT) {
            return None;
        }
        Some(match RtSuper::decode(&sb.raw[..]) {
            Ok(Some(s)) => Ok(RtFsck {
                geo: RtGeometry::new(sb.block_size(), &s),
                claims: Vec::new(),
                files: [Vec::new(), Vec::new()],
            }),
            Ok(None) => Err("lanefs_rtdev is set but the realtime geometry is missing".into()),
            Err(e) => Err(e.to_string()),
        })
    }

    /// Whether device blocks `[pblk, pblk+len)` lie in the rt device's data extents.
    pub(super) fn in_device(&self, pblk: u64, len: u64) -> bool {
        let r = u64::from(self.geo.rextsize);
        pblk >= r
            && pblk
                .checked_add(len)
                .is_some_and(|e| e <= self.geo.rextents * r)
    }
}

impl Checker<'_> {
    /// The rt reserved inodes are special files of this image.
    pub(super) fn rt_special(&mut self) {
        if self.rt.is_some() {
            self.special.insert(RT_BITMAP_INO);
            self.special.insert(RT_SUMMARY_INO);
        }
    }

    /// Whether `inode` keeps its data on the rt device.
    pub(super) fn is_rt(&self, inode: &DiskInode) -> bool {
        self.rt.is_some() && rtdev::is_rt_file(inode.mode(), inode.flags())
    }

    /// Keep the bitmap or summary file's runs, walked in pass 1.
    pub(super) fn rt_keep_runs(&mut self, ino: u32, w: &Walk) {
        if let Some(rt) = self.rt.as_mut() {
            let k = match ino {
                RT_BITMAP_INO => 0,
                RT_SUMMARY_INO => 1,
                _ => return,
            };
            rt.files[k] = w.runs.clone();
        }
    }

    /// Read `n` blocks of an rt metadata file from its runs, one read per run (`None`: a
    /// block unmapped).
    fn rt_file(&mut self, k: usize, n: u64) -> Result<Option<Vec<Vec<u8>>>> {
        let Some(rt) = self.rt.as_ref() else {
            return Ok(None);
        };
        let runs = &rt.files[k];
        let bs = self.geo.block_bytes() as usize;
        let mut out = Vec::with_capacity(n as usize);
        let mut f = 0;
        while f < n {
            let Some(p) = Self::lookup(runs, f) else {
                return Ok(None);
            };
            let r = &runs[runs.partition_point(|r| r.lblk + r.len <= f)];
            let len = (r.lblk + r.len - f).min(n - f);
            let data = read_blocks(self.dev, &self.geo, p, len)?;
            out.extend(data.chunks(bs).map(<[u8]>::to_vec));
            f += len;
        }
        debug_assert_eq!(out.len() as u64, n, "rt file blocks read");
        Ok(Some(out))
    }

    /// The rt pass: double claims, then bitmap and summary against a rebuild.
    pub(super) fn pass_rt(&mut self) -> Result<()> {
        let Some(geo) = self.rt.as_ref().map(|rt| rt.geo) else {
            return Ok(());
        };
        if !self.rt_geometry_fits(&geo) {
            return Ok(());
        }
        let mut claims = self
            .rt
            .as_mut()
            .map(|rt| std::mem::take(&mut rt.claims))
            .unwrap_or_default();
        let rext = u64::from(geo.rextsize);
        claims.sort_unstable();
        let used = self.rt_used_runs(&claims, rext);
        // Claims were range-checked (in_device) and sorted: runs ascend inside the device.
        debug_assert!(
            used.windows(2).all(|w| w[0].1 < w[1].0)
                && used.last().is_some_and(|u| u.1 <= geo.rextents),
            "used rt runs out of order or past the device"
        );
        let free = free_runs(&used, geo.rextents);
        let (want_bm, want_sum) = rtdev::build_files(&geo, &free);
        let Some((bm, sum)) = self.rt_read_files(&geo)? else {
            return Ok(());
        };
        self.rt_compare_bitmap(&geo, &want_bm, &bm);
        self.rt_compare_summary(&geo, &want_sum, &sum);
        let free_extents: u64 = free.iter().map(|r| r.1).sum();
        self.out.note(
            "RT_SPACE",
            format!(
                "rt device: {free_extents}/{} extents of {rext} blocks free, {} rt files' runs",
                geo.rextents,
                claims.len()
            ),
        );
        Ok(())
    }

    /// Whether the bitmap and summary files of geometry `geo` fit the image (they are
    /// files of it); reported when not, and then not rebuilt (that rebuild sizes its
    /// buffers from the geometry).
    fn rt_geometry_fits(&mut self, geo: &RtGeometry) -> bool {
        let image_blocks = self.geo.blocks;
        if geo.bitmap_blocks() > image_blocks || geo.summary_blocks() > image_blocks {
            self.out.add(
                "RT_GEOMETRY_BAD",
                format!(
                    "realtime geometry needs {} bitmap and {} summary blocks, more than the \
                     image's {image_blocks}",
                    geo.bitmap_blocks(),
                    geo.summary_blocks()
                ),
            );
            return false;
        }
        true
    }

    /// The used rt extents of the sorted `claims` as maximal runs (start, end), extent 0
    /// (the device's header) first. A claim overlapping an earlier one's blocks, or
    /// sharing an rt extent with another file's, is reported as a double use (one file's
    /// records may split an rt extent: their written states differ).
    fn rt_used_runs(&mut self, claims: &[(u64, u64, u32)], rext: u64) -> Vec<(u64, u64)> {
        debug_assert!(claims.is_sorted(), "rt claims unsorted");
        let mut used: Vec<(u64, u64)> = vec![(0, 1)];
        let (mut end_blk, mut last_owner) = (rext, 0u32);
        for &(p, len, ino) in claims {
            let (a, b) = (p / rext, (p + len).div_ceil(rext));
            let (ua, ub) = used[used.len() - 1];
            if p < end_blk || (a < ub && ino != last_owner) {
                self.out.add(
                    "RT_EXTENT_DUP",
                    format!(
                        "inode {ino}: rt extents {a}..{} also claimed by inode {last_owner}",
                        b.min(ub)
                    ),
                );
            }
            if a <= ub {
                let n = used.len() - 1;
                used[n] = (ua, ub.max(b));
            } else {
                used.push((a, b));
            }
            end_blk = end_blk.max(p + len);
            last_owner = ino;
        }
        used
    }

    /// The rt bitmap and summary files' blocks, read through their runs; `None` (and a
    /// report) when one does not map all its blocks.
    fn rt_read_files(&mut self, geo: &RtGeometry) -> Result<Option<RtFiles>> {
        let Some(bm) = self.rt_file(0, geo.bitmap_blocks())? else {
            self.out.add(
                "RT_FILE_BAD",
                format!(
                    "rt bitmap inode {RT_BITMAP_INO} does not map its {} blocks",
                    geo.bitmap_blocks()
                ),
            );
            return Ok(None);
        };
        let Some(sum) = self.rt_file(1, geo.summary_blocks())? else {
            self.out.add(
                "RT_FILE_BAD",
                format!(
                    "rt summary inode {RT_SUMMARY_INO} does not map its {} blocks",
                    geo.summary_blocks()
                ),
            );
            return Ok(None);
        };
        Ok(Some((bm, sum)))
    }

    /// Compare the bitmap `bm` with the rebuild `want`, group by group (a group's
    /// extents start a new bitmap block), and report the extents that differ.
    fn rt_compare_bitmap(&mut self, geo: &RtGeometry, want: &[Vec<u8>], bm: &[Vec<u8>]) {
        debug_assert_eq!(want.len(), bm.len(), "rt bitmap blocks");
        let bits = geo.bits_per_block() as usize;
        let mut ranges = Vec::new();
        let mut total = 0;
        for g in 0..geo.groups() {
            let ext = geo.extents_in(g);
            let base = u64::from(g) * geo.group_extents();
            for bb in 0..geo.bmblocks_in(g) {
                let f = geo.bitmap_fblock(g, bb) as usize;
                let n = (ext - u64::from(bb) * bits as u64).min(bits as u64) as usize;
                // Set bits are free extents: diff the free maps, then flip the sign, so
                // `+` names an extent in use but marked free.
                let (r, t) = diff_bits(&want[f], &bm[f], n, base + u64::from(bb) * bits as u64);
                total += t;
                ranges.extend(r.into_iter().map(|(a, b, plus)| (a, b, !plus)));
            }
        }
        if total > 0 {
            ranges.truncate(MAX_RANGES);
            let msg = format!(
                "rt bitmap differences (extents): {}",
                fmt_ranges(&ranges, total)
            );
            self.out.add("RT_BITMAP_MISMATCH", msg);
        }
    }

    /// Compare the summary `sum` with the rebuild `want` counter by counter, and report
    /// how many differ and the first.
    fn rt_compare_summary(&mut self, geo: &RtGeometry, want: &[Vec<u8>], sum: &[Vec<u8>]) {
        debug_assert_eq!(want.len(), sum.len(), "rt summary blocks");
        let bs = geo.block_size as usize;
        let mut wrong = 0u64;
        let mut first = None;
        for (f, (w, h)) in want.iter().zip(sum).enumerate() {
            for off in (0..bs).step_by(4) {
                let (a, b) = (rtdev::counter(w, off), rtdev::counter(h, off));
                if a != b {
                    wrong += 1;
                    first.get_or_insert((f, off, b, a));
                }
            }
        }
        if let Some((f, off, have, want)) = first {
            self.out.add(
                "RT_SUMMARY_MISMATCH",
                format!(
                    "rt summary: {wrong} counter(s) differ from a rebuild, first in block {f} \
                     at byte {off}: {have}, should be {want}"
                ),
            );
        }
    }
}

/// The rt bitmap's and summary's blocks, as read.
type RtFiles = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// The free rt extents of a device of `rextents` extents whose used ones are `used`
/// (ascending, disjoint runs): the gaps between them, as (start, length).
fn free_runs(used: &[(u64, u64)], rextents: u64) -> Vec<(u64, u64)> {
    let mut free = Vec::new();
    let mut x = 0;
    for &(a, b) in used {
        if a > x {
            free.push((x, a - x));
        }
        x = x.max(b);
    }
    if x < rextents {
        free.push((x, rextents - x));
    }
    // Free and used runs cover the device once.
    debug_assert_eq!(
        free.iter().map(|r| r.1).sum::<u64>() + used.iter().map(|u| u.1 - u.0).sum::<u64>(),
        rextents,
        "free and used rt extents"
    );
    free
}
