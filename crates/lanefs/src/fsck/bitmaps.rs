//! Pass 5: bitmaps and summary counts against what the passes counted.

use super::*;

impl Checker<'_> {
    pub(super) fn pass_bitmaps(&mut self) -> Result<()> {
        debug_assert_eq!(
            self.groups.len(),
            self.geo.groups as usize,
            "groups checked"
        );
        let mut free_blocks = 0u64;
        for start in (0..self.geo.groups).step_by(1024) {
            let end = (start + 1024).min(self.geo.groups);
            let maps = self.load_block_bitmaps(start, end)?;
            for (g, map) in (start..end).zip(maps) {
                free_blocks += self.check_block_group(g, map);
            }
        }
        let mut free_inodes = 0u64;
        for g in 0..self.geo.groups {
            free_inodes += self.check_inode_group(g);
        }
        debug_assert!(
            free_blocks <= self.geo.blocks && free_inodes <= self.geo.inodes(),
            "counted {free_blocks} free blocks, {free_inodes} free inodes"
        );
        if self.sb.free_blocks_count() != free_blocks {
            self.out.note(
                "SB_FREE_BLOCKS",
                format!(
                    "superblock free blocks {}, counted {free_blocks}",
                    self.sb.free_blocks_count()
                ),
            );
        }
        if u64::from(self.sb.free_inodes_count()) != free_inodes {
            self.out.note(
                "SB_FREE_INODES",
                format!(
                    "superblock free inodes {}, counted {free_inodes}",
                    self.sb.free_inodes_count()
                ),
            );
        }
        Ok(())
    }

    pub(super) fn load_block_bitmaps(&mut self, start: u32, end: u32) -> Result<Vec<Bitmap>> {
        debug_assert!(
            start < end && end <= self.geo.groups,
            "groups {start}..{end}"
        );
        let mut out: Vec<Bitmap> = Vec::new();
        let mut want = Vec::new();
        for g in start..end {
            let gi = &self.groups[g as usize];
            out.push(if gi.flags & BG_BLOCK_UNINIT != 0 {
                Bitmap::Uninit
            } else {
                Bitmap::Unreadable
            });
            if gi.flags & BG_BLOCK_UNINIT == 0 && gi.bb_ok {
                want.push((g, gi.desc.block_bitmap()));
            }
        }
        let blocks: Vec<u64> = want.iter().map(|&(_, b)| b).collect();
        let maps = read_scattered(self.dev, &self.geo, &blocks)?;
        debug_assert_eq!(maps.len(), want.len(), "bitmaps read");
        for (&(g, _), map) in want.iter().zip(maps) {
            self.verify_bitmap_csum(g, &map, true);
            self.check_bitmap_padding(g, &map, true);
            out[(g - start) as usize] = Bitmap::Loaded(map);
        }
        Ok(out)
    }

    /// Compare group `g`'s computed block usage with its bitmap; returns its free blocks.
    pub(super) fn check_block_group(&mut self, g: u32, map: Bitmap) -> u64 {
        let (first, len) = (self.geo.group_first(g), u64::from(self.geo.group_len(g)));
        let mut computed = vec![0u8; (len as usize).div_ceil(8)];
        for i in 0..len {
            if self.claims.is_used(first + i) {
                crate::disk::set_bit(&mut computed, i as usize);
            }
        }
        let used = crate::disk::count_ones(&computed, len as usize) as u64;
        let ondisk = match map {
            Bitmap::Loaded(m) => Some(m),
            Bitmap::Uninit => Some(group::uninit_block_bitmap(
                &self.geo,
                g,
                &self.groups[g as usize].desc,
            )),
            Bitmap::Unreadable => None,
        };
        if let Some(m) = ondisk {
            let (ranges, total) = diff_bits(&computed, &m, len as usize, first);
            if total > 0 {
                self.out.add(
                    "BLOCK_BITMAP_MISMATCH",
                    format!(
                        "group {g}: block bitmap differences: {}",
                        fmt_ranges(&ranges, total)
                    ),
                );
            }
        }
        let stored = u64::from(self.groups[g as usize].desc.free_blocks());
        if stored != len - used {
            self.out.add(
                "GROUP_FREE_BLOCKS",
                format!(
                    "group {g}: free blocks count is {stored}, counted {}",
                    len - used
                ),
            );
        }
        len - used
    }

    /// Compare group `g`'s computed inode usage with its bitmap and counters; returns its
    /// free inodes.
    pub(super) fn check_inode_group(&mut self, g: u32) -> u64 {
        let ipg = u64::from(self.geo.ipg) as usize;
        let base = g as usize * ipg + 1;
        debug_assert!(
            base + ipg <= self.kind.len(),
            "group {g} past the inode table"
        );
        let mut computed = vec![0u8; ipg.div_ceil(8)];
        let mut dirs = 0u64;
        for i in 0..ipg {
            let k = self.kind[base + i];
            if k != K_FREE {
                crate::disk::set_bit(&mut computed, i);
            }
            dirs += u64::from(k == FT_DIR);
        }
        let used = crate::disk::count_ones(&computed, ipg) as u64;
        let gi = &self.groups[g as usize];
        let ondisk = match &gi.ibitmap {
            Bitmap::Loaded(m) => Some(m.clone()),
            Bitmap::Uninit => Some(vec![0u8; ipg.div_ceil(8)]),
            Bitmap::Unreadable => None,
        };
        let (stored_free, stored_dirs) = (
            u64::from(gi.desc.free_inodes()),
            u64::from(gi.desc.used_dirs()),
        );
        if let Some(m) = ondisk {
            let (ranges, total) = diff_bits(&computed, &m, ipg, base as u64);
            if total > 0 {
                self.out.add(
                    "INODE_BITMAP_MISMATCH",
                    format!(
                        "group {g}: inode bitmap differences: {}",
                        fmt_ranges(&ranges, total)
                    ),
                );
            }
        }
        let free = u64::from(self.geo.ipg) - used;
        if stored_free != free {
            self.out.add(
                "GROUP_FREE_INODES",
                format!("group {g}: free inodes count is {stored_free}, counted {free}"),
            );
        }
        if stored_dirs != dirs {
            self.out.add(
                "GROUP_DIRS_COUNT",
                format!("group {g}: directories count is {stored_dirs}, counted {dirs}"),
            );
        }
        free
    }
}
