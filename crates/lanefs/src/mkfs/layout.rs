//! Sizes and places: the superblock's geometry fields as mke2fs's ext2fs_initialize sets
//! them (group count, inodes per group, reserved GDT blocks, a too-short last group
//! dropped), then every block the new file system uses, through `disk::geometry::Geometry`
//! derived from that superblock: each group's superblock and descriptor copies
//! (`Geometry::base_meta`), the bitmaps and inode tables (packed per flex group with
//! flex_bg, else at the start of each group), and the files mkfs writes.

use super::params::Params;
use crate::disk::blockmap::{self, Nodes};
use crate::disk::extent::{self, Extent};
use crate::disk::geometry::Geometry;
use crate::disk::superblock::{compat, incompat, ro_compat, Superblock};
use crate::error::{Error, Result};

/// First non-reserved inode (mke2fs's EXT2_GOOD_OLD_FIRST_INO).
pub(super) const FIRST_INO: u32 = crate::disk::inode::reserved::GOOD_OLD_FIRST;
/// log2 of the groups in a flex group (mke2fs's default flex_bg_size 16).
pub(super) const LOG_FLEX: u8 = 4;
/// A last group smaller than its metadata plus this many blocks is dropped (mke2fs rule).
const LAST_GROUP_SLACK: u64 = 50;

/// An `Error::Invalid` with `msg`.
fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// The sizes ext2fs_initialize settles on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sizes {
    pub blocks: u64,
    pub bpg: u32,
    pub groups: u32,
    pub ipg: u32,
    pub reserved_gdt: u32,
    /// meta_bg turned on because the descriptors would not fit (resize_inode then off).
    pub forced_meta_bg: bool,
    /// `s_backup_bgs` for sparse_super2.
    pub backup_bgs: [u32; 2],
}

/// Group count, inodes per group and reserved GDT blocks for `p`, as ext2fs_initialize
/// computes them (including its retries: fewer blocks per group when a group would need
/// more inodes than its bitmap holds, and a last group too short for its metadata cut).
pub(super) fn size(p: &Params) -> Result<Sizes> {
    let bs = u64::from(p.bs);
    let bit64 = p.features.has("64bit");
    let max_blocks: u64 = if bit64 { 1 << 32 } else { (1 << 32) - 1 };
    if p.blocks > max_blocks {
        return Err(invalid(format!(
            "device too big: {} blocks of {bs} bytes, at most {max_blocks}{}",
            p.blocks,
            if bit64 { "" } else { " without 64bit" }
        )));
    }
    let mut blocks = p.blocks;
    // EXT2_MAX_BLOCKS_PER_GROUP: 65528 (a 16-bit count less 8) caps 64 KiB blocks.
    let mut bpg = (bs * 8).min(65528);
    loop {
        match try_size(p, blocks, bpg)? {
            Attempt::Sized(s) => return Ok(s),
            Attempt::Retry { blocks: b, bpg: g } => (blocks, bpg) = (b, g),
        }
    }
}

/// One round of ext2fs_initialize's sizing: the sizes, or the round to try next.
enum Attempt {
    Sized(Sizes),
    /// Again with `blocks` blocks in groups of `bpg` blocks.
    Retry {
        blocks: u64,
        bpg: u64,
    },
}

/// Size `blocks` blocks (of `p.blocks`) in groups of `bpg` blocks: the group count, the
/// inodes per group rounded to whole inode-table blocks, the reserved GDT blocks (or
/// meta_bg forced), and the check that the last group holds its metadata. Asks for
/// another round with smaller groups when a group would need more inodes than its bitmap
/// holds, and with the last group cut when it is too short.
fn try_size(p: &Params, blocks: u64, bpg: u64) -> Result<Attempt> {
    let bs = u64::from(p.bs);
    let fdb = u64::from(p.bs == 1024);
    let desc_size: u64 = if p.features.has("64bit") { 64 } else { 32 };
    if blocks <= fdb {
        return Err(too_small(p));
    }
    let groups = (blocks - fdb).div_ceil(bpg);
    let desc_blocks = groups.div_ceil(bs / desc_size);
    let inodes = p.inodes.max(u64::from(FIRST_INO) + 1);
    let ipg = inodes.div_ceil(groups);
    if ipg > bs * 8 {
        if bpg >= 256 {
            // Smaller groups, from the whole device again (ext2fs_initialize).
            return Ok(Attempt::Retry {
                blocks: p.blocks,
                bpg: bpg - 8,
            });
        }
        return Err(invalid(format!(
            "too many inodes ({inodes}) for {blocks} blocks"
        )));
    }
    let (ipg, itb) = inode_tables(p, ipg, groups)?;
    let mut reserved_gdt = if p.features.has("resize_inode") {
        reserved_gdt_blocks(blocks, fdb, bpg, bs / desc_size, desc_blocks, bs / 4)
    } else {
        0
    };
    let mut forced_meta_bg = false;
    if reserved_gdt + desc_blocks > bpg * 3 / 4 {
        forced_meta_bg = true;
        reserved_gdt = 0;
    }
    let meta_bg = forced_meta_bg || p.features.has("meta_bg");
    let overhead = 3 + itb + reserved_gdt + if meta_bg { 1 } else { desc_blocks };
    if overhead > bpg {
        return Err(invalid(format!(
            "too many inodes ({}): the inode tables do not fit the groups",
            ipg * groups
        )));
    }
    let backup_bgs = sparse_super2_groups(groups as u32);
    let last_has_super = if p.features.has("sparse_super2") {
        true // ext2fs_initialize's rule before s_backup_bgs exists
    } else {
        let g = groups as u32 - 1;
        !p.features.has("sparse_super") || crate::disk::group::has_super(g, true)
    };
    let mut last_overhead = 2 + itb;
    if last_has_super {
        last_overhead += 1 + desc_blocks + reserved_gdt;
    }
    let rem = (blocks - fdb) % bpg;
    if groups == 1 && rem != 0 && rem < last_overhead {
        return Err(too_small(p));
    }
    if rem != 0 && rem < last_overhead + LAST_GROUP_SLACK {
        return Ok(Attempt::Retry {
            blocks: blocks - rem,
            bpg,
        });
    }
    // What Superblock::decode and the 16-bit counts of 32-byte descriptors need.
    debug_assert!(
        groups >= 1 && groups * ipg <= u64::from(u32::MAX),
        "{groups} groups of {ipg} inodes"
    );
    debug_assert!(
        ipg.is_multiple_of(8) && ipg <= bs * 8 && ipg < 1 << 16,
        "{ipg} inodes per group"
    );
    debug_assert!(bpg <= bs * 8 && bpg <= 65528, "{bpg} blocks per group");
    Ok(Attempt::Sized(Sizes {
        blocks,
        bpg: bpg as u32,
        groups: groups as u32,
        ipg: ipg as u32,
        reserved_gdt: reserved_gdt as u32,
        forced_meta_bg,
        backup_bgs,
    }))
}

/// Inodes per group (`ipg` asked) rounded as mke2fs rounds them, to whole inode-table
/// blocks and a multiple of 8 (at least 8, at most what 16-bit counts and 32-bit totals
/// hold), and the inode table's blocks per group. Too few inodes for the reserved ones
/// and lost+found is an error.
fn inode_tables(p: &Params, ipg: u64, groups: u64) -> Result<(u64, u64)> {
    let bs = u64::from(p.bs);
    let isz = u64::from(p.inode_size);
    let mut ipg = ipg.min((1 << 16) - bs / isz);
    let (ipg, itb) = loop {
        let itb = (ipg * isz).div_ceil(bs);
        let mut full = (itb * bs / isz).max(8);
        full &= !7;
        if full * groups > u64::from(u32::MAX) {
            ipg -= 1;
            continue;
        }
        break (full, (full * isz).div_ceil(bs));
    };
    if ipg * groups <= u64::from(FIRST_INO) {
        // Rounding to whole inode-table blocks and multiples of 8 left fewer inodes
        // than the reserved ones and lost+found (mke2fs fails writing them).
        return Err(invalid(format!(
            "too few inodes ({}): at least {} are needed (larger device or -N)",
            ipg * groups,
            FIRST_INO + 1
        )));
    }
    // Whole table blocks of whole inodes.
    debug_assert!(itb * bs >= ipg * isz, "{ipg} inodes in {itb} table blocks");
    Ok((ipg, itb))
}

fn too_small(p: &Params) -> Error {
    invalid(format!(
        "device too small: {} blocks of {} bytes cannot hold a file system",
        p.blocks, p.bs
    ))
}

/// calc_reserved_gdt_blocks: room for the descriptors of a file system 1024 times this
/// size (or 2^32 blocks), at most one indirect block's worth.
fn reserved_gdt_blocks(
    blocks: u64,
    fdb: u64,
    bpg: u64,
    per_block: u64,
    desc_blocks: u64,
    apb: u64,
) -> u64 {
    let mut max_blocks: u64 = 0xFFFF_FFFF;
    if blocks < max_blocks / 1024 {
        max_blocks = blocks * 1024;
    }
    let groups = (max_blocks - fdb).div_ceil(bpg);
    debug_assert!(
        groups.div_ceil(per_block) >= desc_blocks,
        "growth limit below the current table"
    );
    (groups.div_ceil(per_block) - desc_blocks).min(apb)
}

/// sparse_super2's two backup groups: 1 and the last, as ext2fs_initialize settles them.
fn sparse_super2_groups(groups: u32) -> [u32; 2] {
    debug_assert!(groups >= 1, "no groups");
    let mut b = [1u32, u32::MAX];
    for x in b.iter_mut() {
        if *x >= groups {
            *x = groups - 1;
        }
    }
    if b[1] == b[0] {
        b[1] = 0;
    }
    if b[0] > b[1] {
        b.swap(0, 1);
    }
    b
}

/// Fill the geometry and feature fields of `sb` from the sizes.
pub(super) fn set_geometry(sb: &mut Superblock, p: &Params, s: &Sizes) {
    let mut f = p.features;
    if s.forced_meta_bg {
        f.set("meta_bg", true);
        f.set("resize_inode", false);
    }
    sb.set_feature_compat(f.compat);
    sb.set_feature_incompat(f.incompat);
    sb.set_feature_ro_compat(f.ro);
    // The 16-bit fields: a value cut short would describe another layout.
    assert!(
        s.reserved_gdt <= 0xFFFF && p.inode_size <= 0xFFFF,
        "reserved GDT blocks {} or inode size {} past 16 bits",
        s.reserved_gdt,
        p.inode_size
    );
    debug_assert!(
        p.bs >= 1024 && p.bs.is_power_of_two(),
        "block size {}",
        p.bs
    );
    let log = p.bs.trailing_zeros() - 10;
    sb.set_log_block_size(log);
    sb.set_log_cluster_size(log);
    sb.set_first_data_block(u32::from(p.bs == 1024));
    sb.set_blocks_count(s.blocks);
    sb.set_blocks_per_group(s.bpg);
    sb.set_clusters_per_group(s.bpg);
    sb.set_inodes_per_group(s.ipg);
    sb.set_inodes_count(s.ipg * s.groups);
    sb.set_first_ino(FIRST_INO);
    sb.set_inode_size(p.inode_size as u16);
    sb.set_rev_level(1);
    if f.incompat & incompat::BIT64 != 0 {
        sb.set_desc_size_raw(64);
    }
    if f.incompat & incompat::FLEX_BG != 0 {
        sb.set_log_groups_per_flex(LOG_FLEX);
    }
    if f.compat & compat::RESIZE_INODE != 0 {
        sb.set_reserved_gdt_blocks(s.reserved_gdt as u16);
    }
    if f.compat & compat::SPARSE_SUPER2 != 0 {
        sb.set_backup_bg0(s.backup_bgs[0]);
        sb.set_backup_bg1(s.backup_bgs[1]);
    }
    // ext2fs_initialize: the large inode's extra fields whenever they fit.
    if p.inode_size >= 160 {
        sb.set_min_extra_isize(32);
        sb.set_want_extra_isize(32);
    }
    if f.ro & ro_compat::METADATA_CSUM != 0 {
        sb.set_checksum_type(1); // crc32c
    }
}

/// Where a group's bitmaps and inode table live.
#[derive(Clone, Copy, Debug)]
pub(super) struct GroupMeta {
    pub block_bitmap: u64,
    pub inode_bitmap: u64,
    pub inode_table: u64,
}

/// Used block ranges `[start, end)`, sorted and disjoint.
#[derive(Debug)]
pub(super) struct Space {
    pub blocks: u64,
    pub used: Vec<(u64, u64)>,
}

impl Space {
    /// Mark `[s, e)` used (it must be free).
    fn take(&mut self, s: u64, e: u64) {
        debug_assert!(
            s < e && e <= self.blocks,
            "take {s}..{e} of {}",
            self.blocks
        );
        let i = self.used.partition_point(|r| r.0 < s);
        debug_assert!(i == 0 || self.used[i - 1].1 <= s, "{s}..{e} overlaps");
        debug_assert!(
            i == self.used.len() || e <= self.used[i].0,
            "{s}..{e} overlaps"
        );
        self.used.insert(i, (s, e));
    }

    /// Free ranges inside `[from, to)`.
    pub fn gaps(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        debug_assert!(from <= to && to <= self.blocks, "gaps in {from}..{to}");
        let mut out = Vec::new();
        let mut cur = from;
        for &(s, e) in &self.used[self.used.partition_point(|r| r.1 <= from)..] {
            if s >= to {
                break;
            }
            if s > cur {
                out.push((cur, s));
            }
            cur = cur.max(e);
        }
        if cur < to {
            out.push((cur, to));
        }
        out
    }

    /// `n` contiguous free blocks, first searched from `goal`, then from block 0.
    fn alloc_run(&mut self, goal: u64, n: u64) -> Option<u64> {
        debug_assert!(n >= 1 && goal < self.blocks, "run of {n} at {goal}");
        let fits = |g: &(u64, u64)| g.1 - g.0 >= n;
        let gap = self.gaps(goal, self.blocks).into_iter().find(fits);
        let (s, _) = gap.or_else(|| self.gaps(0, goal).into_iter().find(fits))?;
        self.take(s, s + n);
        Some(s)
    }

    /// `n` free blocks in as few runs as the free space allows, from `goal` on, wrapping.
    fn alloc_runs(&mut self, goal: u64, n: u64) -> Option<Vec<(u64, u64)>> {
        let mut runs = Vec::new();
        let mut left = n;
        for (s, e) in self
            .gaps(goal, self.blocks)
            .into_iter()
            .chain(self.gaps(0, goal))
        {
            if left == 0 {
                break;
            }
            let len = (e - s).min(left);
            runs.push((s, s + len));
            left -= len;
        }
        if left > 0 {
            return None;
        }
        debug_assert_eq!(runs.iter().map(|r| r.1 - r.0).sum::<u64>(), n);
        for &(s, e) in &runs {
            self.take(s, e);
        }
        Some(runs)
    }

    /// Free blocks left.
    pub fn free(&self) -> u64 {
        self.blocks - self.used.iter().map(|r| r.1 - r.0).sum::<u64>()
    }
}

/// How a file maps its blocks.
#[derive(Clone, Debug)]
pub(super) enum MapKind {
    /// An extent tree: in the inode, or (more than 4 extents) one leaf block.
    Extents { leaf: Option<u64> },
    /// A direct/indirect block map with its indirect blocks.
    Blocks(Nodes),
}

/// A file's data runs and how they are mapped.
#[derive(Clone, Debug)]
pub(super) struct FileMap {
    pub runs: Vec<Extent>,
    pub kind: MapKind,
}

impl FileMap {
    /// Logical blocks of data.
    pub fn data_blocks(&self) -> u64 {
        self.runs.iter().map(|e| u64::from(e.len)).sum()
    }

    /// Blocks the map itself takes (leaf or indirect blocks).
    pub fn map_blocks(&self) -> u64 {
        match &self.kind {
            MapKind::Extents { leaf } => u64::from(leaf.is_some()),
            MapKind::Blocks(nodes) => nodes.len() as u64,
        }
    }

    /// Physical block of logical block `l` (which must be mapped).
    pub fn pblk(&self, l: u64) -> u64 {
        let e = self
            .runs
            .iter()
            .find(|e| u64::from(e.lblk) <= l && l < e.lend());
        debug_assert!(e.is_some(), "logical block {l} unmapped");
        e.map_or(0, |e| e.pblk + (l - u64::from(e.lblk)))
    }
}

/// Where everything goes.
#[derive(Debug)]
pub(super) struct Plan {
    pub meta: Vec<GroupMeta>,
    pub space: Space,
    pub root: FileMap,
    pub lpf: FileMap,
    /// The resize inode's double-indirect block.
    pub resize_dind: Option<u64>,
    pub journal: Option<FileMap>,
    pub journal_blocks: u32,
    pub mmp: Option<u64>,
}

/// Blocks of lost+found: at least 16 KiB and two blocks, at most 12 (mke2fs's loop).
pub(super) fn lpf_blocks(bs: u32) -> u64 {
    (16384u64.div_ceil(u64::from(bs))).clamp(2, 12)
}

impl Plan {
    /// Lay out the group metadata, then the files in mke2fs's order: root, lost+found,
    /// the resize inode, the journal, the MMP block. A `requested` journal may take at
    /// most half the free blocks (mke2fs's rule for `-J size=`).
    pub fn new(
        geo: &Geometry,
        sb: &Superblock,
        journal_blocks: u32,
        requested: bool,
    ) -> Result<Plan> {
        let flex = sb.has_incompat(incompat::FLEX_BG);
        let extents = sb.has_incompat(incompat::EXTENTS);
        let bs = geo.bs as usize;
        let mut space = Space {
            blocks: geo.blocks,
            used: Vec::new(),
        };
        for g in 0..geo.groups {
            let (s, n) = geo.base_meta(g);
            if n > 0 {
                space.take(s, s + n);
            }
        }
        if geo.first_data_block > 0 {
            space.take(0, u64::from(geo.first_data_block));
        }
        let meta = if flex {
            place_flex(geo, &mut space)?
        } else {
            place_plain(geo, &mut space)?
        };
        let too_small = |what: &str| invalid(format!("device too small: no room for {what}"));
        let goal = geo.group_first(0);
        let root = alloc_file(&mut space, goal, 1, extents, bs)
            .ok_or_else(|| too_small("the root directory"))?;
        let lpf = alloc_file(&mut space, goal, lpf_blocks(geo.bs), extents, bs)
            .ok_or_else(|| too_small("lost+found"))?;
        let resize_dind = if sb.has_compat(compat::RESIZE_INODE) {
            let sb_blk = crate::disk::superblock::location(geo.bs).0;
            let goal =
                sb_blk + u64::from(geo.gdt_blocks + geo.reserved_gdt) + 2 + geo.itable_blocks();
            Some(
                space
                    .alloc_run(goal.min(geo.blocks - 1), 1)
                    .ok_or_else(|| too_small("the resize inode"))?,
            )
        } else {
            None
        };
        let journal = if journal_blocks > 0 {
            let n = u64::from(journal_blocks);
            if requested && n > space.free() / 2 {
                return Err(invalid(format!(
                    "journal of {n} blocks too big: more than half of the {} free blocks",
                    space.free()
                )));
            }
            let goal = if extents {
                journal_goal(geo, flex)
            } else {
                goal
            };
            let j = alloc_file(&mut space, goal, n, extents, bs);
            Some(j.ok_or_else(|| too_small(&format!("a journal of {n} blocks")))?)
        } else {
            None
        };
        let mmp = if sb.has_incompat(incompat::MMP) {
            Some(
                space
                    .alloc_run(0, 1)
                    .ok_or_else(|| too_small("the MMP block"))?,
            )
        } else {
            None
        };
        debug_assert_eq!(meta.len(), geo.groups as usize, "group metadata");
        debug_assert!(
            journal
                .as_ref()
                .is_none_or(|j| j.data_blocks() == u64::from(journal_blocks)),
            "journal map of other than {journal_blocks} blocks"
        );
        debug_assert!(
            root.data_blocks() == 1 && lpf.data_blocks() == lpf_blocks(geo.bs),
            "root or lost+found map"
        );
        Ok(Plan {
            meta,
            space,
            root,
            lpf,
            resize_dind,
            journal,
            journal_blocks,
            mmp,
        })
    }
}

/// Without flex_bg: each group's block bitmap, inode bitmap and inode table follow its
/// superblock and descriptor copies.
fn place_plain(geo: &Geometry, space: &mut Space) -> Result<Vec<GroupMeta>> {
    let itb = geo.itable_blocks();
    let mut meta = Vec::with_capacity(geo.groups as usize);
    for g in 0..geo.groups {
        let first = geo.group_first(g);
        let end = first + u64::from(geo.group_len(g));
        let bb = space.alloc_run(first, 1);
        let ib = space.alloc_run(first, 1);
        let it = space.alloc_run(first, itb);
        match (bb, ib, it) {
            (Some(b), Some(i), Some(t)) if b < end && i < end && t + itb <= end => {
                // Without flex_bg a group's bitmaps and table lie in that group (the
                // kernel refuses them anywhere else); the search starts there.
                debug_assert!(
                    b >= first && i >= first && t >= first,
                    "group {g}'s metadata before the group"
                );
                meta.push(GroupMeta {
                    block_bitmap: b,
                    inode_bitmap: i,
                    inode_table: t,
                })
            }
            _ => {
                return Err(invalid(format!(
                    "group {g} has no room for its bitmaps and inode table (fewer inodes?)"
                )))
            }
        }
    }
    Ok(meta)
}

/// With flex_bg: per flex group, from the first free block of its first group, the block
/// bitmaps, then the inode bitmaps, then the inode tables, each packed.
fn place_flex(geo: &Geometry, space: &mut Space) -> Result<Vec<GroupMeta>> {
    let itb = geo.itable_blocks();
    let per = 1u32 << LOG_FLEX;
    let mut meta = Vec::with_capacity(geo.groups as usize);
    let no_room = |g0: u32| {
        invalid(format!(
            "no room for the bitmaps and inode tables of flex group {} (fewer inodes?)",
            g0 / per
        ))
    };
    for g0 in (0..geo.groups).step_by(per as usize) {
        let g1 = (g0 + per).min(geo.groups);
        let k = u64::from(g1 - g0);
        let start = geo.group_first(g0);
        let bb = space.alloc_run(start, k).ok_or_else(|| no_room(g0))?;
        let ib = space.alloc_run(bb + k, k).ok_or_else(|| no_room(g0))?;
        let mut cur = ib + k;
        for i in 0..k {
            let t = space.alloc_run(cur, itb).ok_or_else(|| no_room(g0))?;
            if t < start || bb < start || ib < start {
                return Err(no_room(g0));
            }
            cur = t + itb;
            debug_assert!(t + itb <= geo.blocks, "inode table {t} past the end");
            meta.push(GroupMeta {
                block_bitmap: bb + i,
                inode_bitmap: ib + i,
                inode_table: t,
            });
        }
    }
    Ok(meta)
}

/// The journal's goal (get_midpoint_journal_block): the group in the middle, rounded down
/// to its flex group when that is past the first.
fn journal_goal(geo: &Geometry, flex: bool) -> u64 {
    debug_assert!(
        geo.blocks > u64::from(geo.first_data_block),
        "empty file system"
    );
    let mid = geo.group_of_block(
        u64::from(geo.first_data_block) + (geo.blocks - u64::from(geo.first_data_block)) / 2,
    );
    let per = 1u32 << LOG_FLEX;
    let g = if flex && mid > per {
        mid & !(per - 1)
    } else {
        mid.saturating_sub(1)
    };
    geo.group_first(g.min(geo.groups - 1))
}

/// Allocate a file of `n` data blocks from `goal`: extents (with a leaf block past four
/// extents), or a block map whose indirect blocks sit before the data they map, as
/// `blockmap::contiguous` lays them out, over whatever free runs there are.
fn alloc_file(space: &mut Space, goal: u64, n: u64, extents: bool, bs: usize) -> Option<FileMap> {
    if extents {
        let phys = space.alloc_runs(goal, n)?;
        let mut runs = Vec::new();
        let mut l = 0u64;
        for (s, e) in phys {
            let mut p = s;
            while p < e {
                let len = (e - p).min(u64::from(extent::MAX_INIT_LEN));
                runs.push(Extent {
                    lblk: l as u32,
                    len: len as u32,
                    pblk: p,
                    unwritten: false,
                });
                l += len;
                p += len;
            }
        }
        debug_assert_eq!(l, n, "extents cover other than {n} blocks");
        if runs.len() > extent::block_capacity(bs) {
            return None;
        }
        let leaf = if runs.len() > 4 {
            let after = runs.last().map_or(goal, |e| e.pblk + u64::from(e.len));
            Some(space.alloc_run(after.min(space.blocks - 1), 1)?)
        } else {
            None
        };
        return Some(FileMap {
            runs,
            kind: MapKind::Extents { leaf },
        });
    }
    let (shape, nodes) = blockmap::contiguous(0, n, bs);
    let total = n + nodes.len() as u64;
    let phys = space.alloc_runs(goal, total)?;
    let at = |v: u64| -> u64 {
        let mut v = v;
        for &(s, e) in &phys {
            if v < e - s {
                return s + v;
            }
            v -= e - s;
        }
        unreachable!("virtual block beyond the allocation")
    };
    let nodes: Nodes = nodes.into_iter().map(|(k, v)| (k, at(v))).collect();
    let mut runs: Vec<Extent> = Vec::new();
    for e in shape {
        for i in 0..u64::from(e.len) {
            let (l, p) = (u64::from(e.lblk) + i, at(e.pblk + i));
            match runs.last_mut() {
                Some(r) if r.pblk + u64::from(r.len) == p => r.len += 1,
                _ => runs.push(Extent {
                    lblk: l as u32,
                    len: 1,
                    pblk: p,
                    unwritten: false,
                }),
            }
        }
    }
    debug_assert_eq!(
        runs.iter().map(|e| u64::from(e.len)).sum::<u64>(),
        n,
        "block map covers other than {n} blocks"
    );
    Some(FileMap {
        runs,
        kind: MapKind::Blocks(nodes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mkfs::params::resolve;
    use crate::mkfs::MkfsOptions;

    fn sizes(bytes: u64, f: impl FnOnce(&mut MkfsOptions)) -> Sizes {
        let mut o = MkfsOptions::mke2fs();
        f(&mut o);
        size(&resolve(&o, bytes).unwrap()).unwrap()
    }

    #[test]
    fn sizes_match_mke2fs() {
        // mke2fs -t ext4, 4 GiB: 32 groups of 32768, 8192 inodes each, 511 reserved GDT.
        let s = sizes(4 << 30, |_| {});
        assert_eq!((s.groups, s.ipg, s.reserved_gdt), (32, 8192, 511));
        // mke2fs -t ext3, 600 MiB: 5 groups, 7680 inodes each, 37 reserved GDT blocks.
        let s = sizes(600 << 20, |o| o.fs_type = Some("ext3".into()));
        assert_eq!(
            (s.blocks, s.groups, s.ipg, s.reserved_gdt),
            (153600, 5, 7680, 37)
        );
        // mke2fs -t ext4, 64 MiB: 1 KiB blocks, 8 groups of 2048 inodes, 256 reserved.
        let s = sizes(64 << 20, |_| {});
        assert_eq!(
            (s.blocks, s.groups, s.ipg, s.reserved_gdt),
            (65536, 8, 2048, 256)
        );
        assert_eq!(sparse_super2_groups(1), [0, 0]);
        assert_eq!(sparse_super2_groups(2), [0, 1]);
        assert_eq!(sparse_super2_groups(10), [1, 9]);
    }

    #[test]
    fn lost_and_found_sizes() {
        assert_eq!([1024, 2048, 4096, 65536].map(lpf_blocks), [12, 8, 4, 2]);
    }

    #[test]
    fn block_mapped_file_over_a_gap() {
        let mut s = Space {
            blocks: 4000,
            used: vec![(0, 10), (20, 30)],
        };
        let f = alloc_file(&mut s, 0, 300, false, 1024).unwrap();
        assert_eq!(f.data_blocks(), 300);
        let MapKind::Blocks(nodes) = &f.kind else {
            panic!("block map")
        };
        // 12 direct, one single-indirect (256), one double with one single under it.
        assert_eq!(nodes.len(), 3);
        assert_eq!(f.pblk(0), 10);
        assert_eq!(f.pblk(9), 19);
        assert_eq!(f.pblk(10), 30);
        assert_eq!(s.free(), 4000 - 20 - 303);
    }
}
