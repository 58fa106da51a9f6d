//! Reseal: recompute every checksum of a whole image in memory, so that bytes changed
//! without regard to checksums (a fuzzer's mutations, a test's corruption) reach the
//! checks behind them instead of stopping at the first checksum.
//!
//! Best effort, and bounded by the image: every block number read from it is checked
//! against its size, the extent walk against a depth of 5 and a visited set, and a
//! structure too damaged to follow is left as it is (what it breaks, the reader reports).
//! Covered: the superblock, group descriptors and their bitmap checksums, every inode,
//! extent tree blocks, directory leaves and htree blocks, xattr blocks, and the journal
//! superblock.

use super::blockmap;
use super::dir::{self, DX_NODE_COUNT_OFF, DX_ROOT_COUNT_OFF};
use super::extent::{self, Node};
use super::geometry::Geometry;
use super::group::{bitmap_csum, GroupDesc};
use super::inode::{DiskInode, FL_EXTENTS, FL_INDEX, FL_INLINE_DATA};
use super::jbd2::JournalSuper;
use super::superblock::{Superblock, SB_OFFSET, SB_SIZE};
use super::{le16, le32, put32};
use std::collections::HashSet;

/// Deepest extent tree followed (ext4 allows 5 levels).
const MAX_DEPTH: u16 = 5;
/// Most blocks of one directory resealed (a hostile map could name millions).
const MAX_DIR_BLOCKS: u64 = 1 << 16;

/// Recompute every checksum in `img` (a whole image) in place. Returns false when the
/// superblock is too damaged to find anything else (then only its own checksum is set).
pub fn reseal(img: &mut [u8]) -> bool {
    let sb_at = SB_OFFSET as usize;
    if img.len() < sb_at + SB_SIZE {
        return false;
    }
    let mut sb = Superblock::zeroed();
    sb.raw.copy_from_slice(&img[sb_at..sb_at + SB_SIZE]);
    sb.update_checksum();
    img[sb_at..sb_at + SB_SIZE].copy_from_slice(&sb.raw[..]);
    let Ok(sb) = Superblock::decode(&img[sb_at..sb_at + SB_SIZE], img.len() as u64) else {
        return false;
    };
    let geo = Geometry::from_superblock(&sb);
    let mut r = Resealer {
        img,
        bs: geo.bs as usize,
        csum: geo.csum,
        seed: geo.seed,
        geo,
    };
    let inodes = r.groups();
    if r.csum {
        let mut seen = HashSet::new();
        for (ino, d) in inodes {
            r.inode_blocks(ino, &d, &mut seen);
        }
        r.journal(&sb);
    }
    true
}

struct Resealer<'a> {
    img: &'a mut [u8],
    geo: Geometry,
    bs: usize,
    csum: bool,
    seed: u32,
}

impl Resealer<'_> {
    /// Block `b`'s bytes, when the image holds it.
    fn block(&mut self, b: u64) -> Option<&mut [u8]> {
        block(self.img, self.bs, b)
    }

    /// Every group: its inodes' checksums, its bitmaps' checksums, its descriptor's.
    /// Returns the inodes in use (mode set, linked), for the walk of their blocks.
    fn groups(&mut self) -> Vec<(u32, DiskInode)> {
        let g = &self.geo;
        let (dsz, dpb, isz) = (
            g.desc_size as usize,
            g.descs_per_block(),
            g.inode_size as usize,
        );
        let (ipg, cpg) = (g.ipg as usize, (g.bpg / g.cluster_ratio.max(1)) as usize);
        let wide = dsz >= 64;
        // Bounded by Superblock::decode: whole inodes per block, bitmaps inside a block.
        debug_assert!(
            self.bs.is_multiple_of(isz) && cpg <= self.bs * 8 && ipg <= self.bs * 8,
            "geometry past what decode allows: {:?}",
            self.geo
        );
        let mut used = Vec::new();
        for grp in 0..self.geo.groups {
            let loc = self.geo.gdt_block(grp / dpb);
            let off = (grp % dpb) as usize * dsz;
            debug_assert!(off + dsz <= self.bs, "descriptor {grp} past its block");
            let Some(raw) = self.block(loc).map(|b| b[off..off + dsz].to_vec()) else {
                continue;
            };
            let mut d = GroupDesc { raw };
            let it = d.inode_table();
            let (bs, csum, seed) = (self.bs, self.csum, self.seed);
            for i in 0..ipg {
                let ino = (grp as usize * ipg + i + 1) as u32;
                let Some(b) = block(self.img, bs, it + (i * isz / bs) as u64) else {
                    break;
                };
                let slot = &mut b[(i * isz) % bs..][..isz];
                if slot.iter().all(|&x| x == 0) {
                    continue;
                }
                let mut inode = DiskInode::from_bytes(slot);
                if csum {
                    inode.update_checksum(seed, ino);
                    slot.copy_from_slice(&inode.raw);
                }
                if inode.mode() != 0 && inode.links() > 0 {
                    used.push((ino, inode));
                }
            }
            if self.csum {
                let seed = self.seed;
                if let Some(b) = self.block(d.block_bitmap()) {
                    d.set_block_bitmap_csum(bitmap_csum(seed, b, cpg / 8, wide));
                }
                if let Some(b) = self.block(d.inode_bitmap()) {
                    d.set_inode_bitmap_csum(bitmap_csum(seed, b, ipg / 8, wide));
                }
            }
            d.seal(self.geo.desc_csum, grp);
            if let Some(b) = self.block(loc) {
                b[off..off + dsz].copy_from_slice(&d.raw);
            }
        }
        used
    }

    /// The blocks inode `ino` owns that carry a checksum: its extent tree, a directory's
    /// blocks, its xattr block.
    fn inode_blocks(&mut self, ino: u32, d: &DiskInode, seen: &mut HashSet<u64>) {
        debug_assert!(
            ino >= 1 && u64::from(ino) <= self.geo.inodes(),
            "inode {ino} outside the file system"
        );
        let seed = self.seed;
        let iseed = d.csum_seed(seed, ino);
        let acl = d.file_acl();
        if acl != 0 && seen.insert(acl) {
            if let Some(b) = self.block(acl) {
                if le32(b, 0) == super::xattr::MAGIC {
                    let c = super::xattr::block_csum(seed, acl, b);
                    put32(b, 16, c);
                }
            }
        }
        let is_dir = d.mode() & 0xF000 == 0x4000;
        if d.flags() & FL_INLINE_DATA != 0 {
            return;
        }
        let mut data = Vec::new();
        if d.flags() & FL_EXTENTS != 0 {
            if let Ok(root) = extent::decode_node(d.iblock(), 0) {
                self.extent_node(&root, iseed, 0, is_dir, &mut data, seen);
            }
        } else if is_dir {
            let (bs, nblk) = (self.bs, (self.img.len() / self.bs) as u64);
            let img = &*self.img;
            let mut read = |b: u64| {
                let at = usize::try_from(b).unwrap_or(usize::MAX).saturating_mul(bs);
                img.get(at..at.saturating_add(bs))
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| {
                        crate::error::Error::io_other(
                            format!("reading block {b}"),
                            "past the image",
                        )
                    })
            };
            let first = u64::from(self.geo.first_data_block);
            let map = blockmap::decode(d.iblock(), bs, first, nblk, u64::from(ino), &mut read);
            if let Ok((runs, _)) = map {
                data.extend(runs.iter().map(|r| (r.lblk, r.pblk, u64::from(r.len))));
            }
        }
        if !is_dir {
            return;
        }
        let indexed = d.flags() & FL_INDEX != 0;
        let mut left = MAX_DIR_BLOCKS;
        for (lblk, pblk, len) in data {
            for k in 0..len.min(left) {
                left -= 1;
                let root = indexed && lblk == 0 && k == 0;
                if let Some(b) = self.block(pblk + k) {
                    dir_block(iseed, b, root);
                }
            }
        }
    }

    /// An extent tree node (the root in the inode, or a block already resealed by its
    /// parent's walk): its children blocks, their checksums; a directory's data runs.
    fn extent_node(
        &mut self,
        node: &Node,
        iseed: u32,
        depth: u16,
        is_dir: bool,
        data: &mut Vec<(u32, u64, u64)>,
        seen: &mut HashSet<u64>,
    ) {
        match node {
            Node::Leaf(exts) => {
                if is_dir {
                    data.extend(exts.iter().map(|e| (e.lblk, e.pblk, u64::from(e.len))));
                }
            }
            Node::Index(_, idx) => {
                debug_assert!(depth <= MAX_DEPTH, "extent walk at depth {depth}");
                if depth >= MAX_DEPTH {
                    return;
                }
                for i in idx {
                    if !seen.insert(i.child) {
                        continue;
                    }
                    let Some(b) = self.block(i.child) else {
                        continue;
                    };
                    extent::set_block_csum(iseed, b);
                    if let Ok(child) = extent::decode_node(b, i.child) {
                        self.extent_node(&child, iseed, depth + 1, is_dir, data, seen);
                    }
                }
            }
        }
    }

    /// The journal superblock's checksum (the first block of the journal inode).
    fn journal(&mut self, sb: &Superblock) {
        let j = sb.journal_inum();
        if j == 0 || u64::from(j) > self.geo.inodes() {
            return;
        }
        let (ipg, isz) = (self.geo.ipg, self.geo.inode_size as usize);
        let grp = (j - 1) / ipg;
        debug_assert!(grp < self.geo.groups, "journal inode {j} in group {grp}");
        let loc = self.geo.gdt_block(grp / self.geo.descs_per_block());
        let off = (grp % self.geo.descs_per_block()) as usize * self.geo.desc_size as usize;
        let dsz = self.geo.desc_size as usize;
        let Some(raw) = self.block(loc).map(|b| b[off..off + dsz].to_vec()) else {
            return;
        };
        let it = GroupDesc { raw }.inode_table();
        let i = ((j - 1) % ipg) as usize;
        let bs = self.bs;
        let Some(d) = self
            .block(it + (i * isz / bs) as u64)
            .map(|b| DiskInode::from_bytes(&b[(i * isz) % bs..][..isz]))
        else {
            return;
        };
        let first = match extent::decode_node(d.iblock(), 0) {
            Ok(Node::Leaf(e)) if d.flags() & FL_EXTENTS != 0 => e.first().map(|e| e.pblk),
            _ if d.flags() & FL_EXTENTS == 0 => Some(u64::from(le32(d.iblock(), 0))),
            _ => None,
        };
        let Some(b) = first.and_then(|p| self.block(p)) else {
            return;
        };
        if let Ok(mut js) = JournalSuper::decode(&b[..1024]) {
            js.update_checksum();
            b[..1024].copy_from_slice(&js.raw);
        }
    }
}

/// Block `b` of `img` (blocks of `bs` bytes), when the image holds it.
fn block(img: &mut [u8], bs: usize, b: u64) -> Option<&mut [u8]> {
    let start = usize::try_from(b).ok()?.checked_mul(bs)?;
    img.get_mut(start..start.checked_add(bs)?)
}

/// A directory block: an htree root or interior node gets its dx checksum, a leaf with a
/// checksum tail its leaf checksum.
fn dir_block(iseed: u32, b: &mut [u8], root: bool) {
    let bs = b.len();
    if root {
        // The root's count sits after "." and "..", at DX_ROOT_COUNT_OFF.
        dir::set_dx_csum(iseed, b, DX_ROOT_COUNT_OFF);
    } else if le32(b, 0) == 0 && usize::from(le16(b, 4)) == bs && bs > DX_NODE_COUNT_OFF + 8 {
        dir::set_dx_csum(iseed, b, DX_NODE_COUNT_OFF);
    } else if dir::has_tail(b) {
        dir::set_leaf_csum(iseed, b);
    }
}
