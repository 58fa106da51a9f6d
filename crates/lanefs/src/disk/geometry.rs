//! The geometry of a file system, derived once from its superblock: group sizes, where
//! each group's superblock and descriptor copies sit (sparse_super, sparse_super2,
//! meta_bg), and which checksums descriptors and metadata carry. The engine, mkfs, fsck
//! and info all place blocks through this one type.

use super::group::{Backups, DescCsum};
use super::superblock::{compat, incompat, ro_compat, Superblock};

/// Fixed geometry of a file system.
#[derive(Clone, Debug)]
pub struct Geometry {
    /// Block size.
    pub bs: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Blocks per group.
    pub bpg: u32,
    /// Inodes per group.
    pub ipg: u32,
    /// Number of groups.
    pub groups: u32,
    /// First data block (1 for 1 KiB blocks, else 0).
    pub first_data_block: u32,
    /// Inode size.
    pub inode_size: u32,
    /// Descriptor size.
    pub desc_size: u32,
    /// metadata_csum on.
    pub csum: bool,
    /// The checksum group descriptors carry (none, uninit_bg's crc16, metadata_csum's).
    pub desc_csum: DescCsum,
    /// Checksum seed.
    pub seed: u32,
    /// First non-reserved inode.
    pub first_ino: u32,
    /// Which groups hold superblock and descriptor backups.
    pub backups: Backups,
    /// Blocks the descriptor table takes.
    pub gdt_blocks: u32,
    /// Reserved GDT blocks after each descriptor table copy (resize_inode).
    pub reserved_gdt: u32,
    /// meta_bg: descriptor blocks from `first_meta_bg` on live in their meta group.
    pub meta_bg: bool,
    /// First descriptor block kept in its meta group (meta_bg only).
    pub first_meta_bg: u32,
    /// Blocks per allocation cluster (bigalloc; 1 otherwise).
    pub cluster_ratio: u32,
    /// log2 of the groups in a flex group (flex_bg; 0 without it: one group each).
    pub flex_log: u32,
}

impl Geometry {
    /// The geometry `sb` describes (fields bounded by `Superblock::decode`).
    pub fn from_superblock(sb: &Superblock) -> Geometry {
        let groups = sb.group_count();
        let desc_size = sb.desc_size();
        let bs = sb.block_size();
        let csum = sb.metadata_csum();
        let desc_csum = if csum {
            DescCsum::Crc32c(sb.csum_seed())
        } else if sb.has_ro_compat(ro_compat::GDT_CSUM) {
            DescCsum::Crc16(sb.uuid())
        } else {
            DescCsum::None
        };
        let meta_bg = sb.has_incompat(incompat::META_BG);
        // Bounded by Superblock::decode, which every caller's superblock passed.
        debug_assert!(
            (1024..=65536).contains(&bs) && bs.is_power_of_two(),
            "block size {bs}"
        );
        debug_assert!(
            desc_size >= 32 && desc_size <= bs && desc_size.is_power_of_two(),
            "descriptor size {desc_size}"
        );
        debug_assert!(
            groups >= 1 && sb.blocks_per_group() >= 1 && sb.inodes_per_group() >= 1,
            "{groups} groups of {} blocks, {} inodes",
            sb.blocks_per_group(),
            sb.inodes_per_group()
        );
        Geometry {
            bs,
            blocks: sb.blocks_count(),
            bpg: sb.blocks_per_group(),
            ipg: sb.inodes_per_group(),
            groups,
            first_data_block: sb.first_data_block(),
            inode_size: sb.inode_size_or_default(),
            desc_size,
            csum,
            desc_csum,
            seed: sb.csum_seed(),
            first_ino: sb.first_ino_or_default(),
            backups: sb.backups(),
            gdt_blocks: (u64::from(groups) * u64::from(desc_size)).div_ceil(u64::from(bs)) as u32,
            reserved_gdt: if sb.has_compat(compat::RESIZE_INODE) {
                u32::from(sb.reserved_gdt_blocks())
            } else {
                0
            },
            meta_bg,
            first_meta_bg: if meta_bg { sb.first_meta_bg() } else { 0 },
            cluster_ratio: if sb.has_ro_compat(ro_compat::BIGALLOC) {
                1 << sb
                    .log_cluster_size()
                    .saturating_sub(sb.log_block_size())
                    .min(16)
            } else {
                1
            },
            flex_log: if sb.has_incompat(incompat::FLEX_BG) {
                u32::from(sb.log_groups_per_flex()).min(31)
            } else {
                0
            },
        }
    }

    /// First block of group `g`.
    pub fn group_first(&self, g: u32) -> u64 {
        debug_assert!(g < self.groups, "group {g} of {}", self.groups);
        u64::from(self.first_data_block) + u64::from(g) * u64::from(self.bpg)
    }
    /// Number of blocks in group `g` (the last one may be short).
    pub fn group_len(&self, g: u32) -> u32 {
        let start = self.group_first(g);
        (self.blocks - start).min(u64::from(self.bpg)) as u32
    }
    /// Group holding block `b`.
    pub fn group_of_block(&self, b: u64) -> u32 {
        debug_assert!(
            b >= u64::from(self.first_data_block) && b < self.blocks,
            "block {b} outside the file system ({} blocks)",
            self.blocks
        );
        ((b - u64::from(self.first_data_block)) / u64::from(self.bpg)) as u32
    }
    /// Group holding inode `ino`.
    pub fn group_of_inode(&self, ino: u64) -> u32 {
        debug_assert!(
            ino >= 1 && ino <= self.inodes(),
            "inode {ino} outside 1..={}",
            self.inodes()
        );
        ((ino - 1) / u64::from(self.ipg)) as u32
    }
    /// Blocks each group's inode table takes.
    pub fn itable_blocks(&self) -> u64 {
        (u64::from(self.ipg) * u64::from(self.inode_size)).div_ceil(u64::from(self.bs))
    }
    /// Descriptors per block.
    pub fn descs_per_block(&self) -> u32 {
        self.bs / self.desc_size
    }
    /// Total inodes.
    pub fn inodes(&self) -> u64 {
        u64::from(self.ipg) * u64::from(self.groups)
    }

    /// Where descriptor block `i` of the primary table lives (ext4's descriptor_loc):
    /// after the primary superblock, or with meta_bg from `first_meta_bg` on in the first
    /// group of its meta group, after that group's superblock copy if it has one.
    pub fn gdt_block(&self, i: u32) -> u64 {
        debug_assert!(
            i < self.gdt_blocks,
            "descriptor block {i} of {}",
            self.gdt_blocks
        );
        if !self.meta_bg || i < self.first_meta_bg {
            // After the primary superblock's block (ext4's descriptor_loc): block 1 on
            // 1 KiB blocks, even with bigalloc, whose group 0 starts at block 0.
            return super::superblock::location(self.bs).0 + 1 + u64::from(i);
        }
        let g = self.descs_per_block() * i;
        self.group_first(g) + u64::from(self.backups.has_super(g))
    }

    /// The blocks at the start of group `g` that hold its superblock copy and descriptor
    /// blocks (old-style table and reserved blocks, or its meta_bg descriptor block):
    /// (first block, count). ext2fs_super_and_bgd_loc2's layout.
    pub fn base_meta(&self, g: u32) -> (u64, u64) {
        let p = self.base_meta_parts(g);
        (
            p.super_block.0,
            p.super_block.1 + p.descriptors.1 + p.reserved.1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(meta_bg: bool) -> Geometry {
        Geometry {
            bs: 1024,
            blocks: 8192 * 64,
            bpg: 8192,
            ipg: 2048,
            groups: 64,
            first_data_block: 1,
            inode_size: 128,
            desc_size: 32,
            csum: false,
            desc_csum: DescCsum::None,
            seed: 0,
            first_ino: 11,
            backups: Backups::Sparse,
            gdt_blocks: 2,
            reserved_gdt: if meta_bg { 0 } else { 5 },
            meta_bg,
            first_meta_bg: 0,
            cluster_ratio: 1,
            flex_log: 0,
        }
    }

    #[test]
    fn classic_layout() {
        let g = geo(false);
        assert_eq!(g.gdt_block(0), 2);
        assert_eq!(g.gdt_block(1), 3);
        assert_eq!(g.base_meta(0), (1, 1 + 2 + 5));
        assert_eq!(g.base_meta(2), (1 + 2 * 8192, 0));
        assert_eq!(g.base_meta(3), (1 + 3 * 8192, 8));
    }

    #[test]
    fn meta_bg_layout() {
        // 32 descriptors per 1 KiB block: meta groups of 32 groups, descriptor copies in
        // groups 0, 1 and 31 of each.
        let g = geo(true);
        assert_eq!(g.gdt_block(0), 2);
        assert_eq!(g.gdt_block(1), 1 + 32 * 8192);
        assert_eq!(g.base_meta(0), (1, 2));
        assert_eq!(g.base_meta(1), (1 + 8192, 2));
        assert_eq!(g.base_meta(2), (1 + 2 * 8192, 0));
        assert_eq!(g.base_meta(31), (1 + 31 * 8192, 1));
        assert_eq!(g.base_meta(32), (1 + 32 * 8192, 1));
        assert_eq!(g.base_meta(25), (1 + 25 * 8192, 1));
    }
}

// Helpers for the checker and the report (fsck, info), which walk images they do not trust.
impl Geometry {
    /// Block size in bytes, as a u64 for offset arithmetic.
    pub fn block_bytes(&self) -> u64 {
        u64::from(self.bs)
    }

    /// Whether `[start, start+len)` lies inside the file system (from the first data block
    /// to the last block), without overflowing on hostile values.
    pub fn in_fs(&self, start: u64, len: u64) -> bool {
        start >= u64::from(self.first_data_block)
            && start.checked_add(len).is_some_and(|e| e <= self.blocks)
    }

    /// Groups other than 0 that hold a superblock copy (the resize inode lists their
    /// reserved GDT blocks).
    pub fn backup_groups(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.groups).filter(|&g| self.backups.has_super(g))
    }

    /// Group `g`'s superblock copy (if any) and the descriptor and reserved GDT blocks
    /// after it, as ext2fs_super_and_bgd_loc2 places them: without meta_bg (or in a meta
    /// group before `first_meta_bg`) a group with a superblock copy holds the old-style
    /// table (`first_meta_bg` blocks of it with meta_bg, else the whole table and the
    /// reserved GDT blocks); from `first_meta_bg` on, groups 0, 1 and the last of each
    /// meta group hold that meta group's one descriptor block. Counts are clamped to
    /// the group.
    pub fn base_meta_parts(&self, g: u32) -> BaseMeta {
        let start = self.group_first(g);
        let len = u64::from(self.group_len(g));
        let sup = u64::from(self.backups.has_super(g)).min(len);
        let per = self.descs_per_block().max(1);
        let mut desc = 0u64;
        let mut reserved = 0u64;
        if !self.meta_bg || g / per < self.first_meta_bg {
            if sup == 1 {
                if self.meta_bg {
                    desc = u64::from(self.first_meta_bg.min(self.gdt_blocks));
                } else {
                    desc = u64::from(self.gdt_blocks);
                    reserved = u64::from(self.reserved_gdt);
                }
            }
        } else {
            let r = g % per;
            if r == 0 || r == 1 || r == per - 1 {
                desc = 1;
            }
        }
        let desc = desc.min(len - sup);
        let reserved = reserved.min(len - sup - desc);
        BaseMeta {
            super_block: (start, sup),
            descriptors: (start + sup, desc),
            reserved: (start + sup + desc, reserved),
        }
    }
}

/// The metadata at the start of a group, split by kind: each is (first block, count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseMeta {
    /// The superblock copy (count 0 or 1).
    pub super_block: (u64, u64),
    /// Descriptor blocks (the old-style table copy, or the group's meta_bg block).
    pub descriptors: (u64, u64),
    /// Reserved GDT blocks (resize_inode).
    pub reserved: (u64, u64),
}
