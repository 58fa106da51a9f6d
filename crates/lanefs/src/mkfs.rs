//! `mkfs`: format a device as ext4 the way Debian 12's `mkfs.ext4` does, minus
//! `resize_inode`.
//!
//! Features: has_journal ext_attr dir_index filetype extent 64bit flex_bg sparse_super
//! large_file huge_file dir_nlink extra_isize metadata_csum. Geometry: 4 KiB blocks,
//! 32768 blocks per group, 256-byte inodes, 64-byte group descriptors, 16 groups per
//! flex group.
//!
//! Layout:
//! - block 0: the superblock at byte 1024; the group descriptor table (GDT) from block 1.
//!   Groups 1 and powers of 3, 5 and 7 hold a copy of both (no reserved GDT blocks).
//! - flex group `f` (groups `16f..16f+16`): from the first free block of group `16f`,
//!   the 16 block bitmaps, then the 16 inode bitmaps, then the 16 inode tables.
//! - every block bitmap is written and initialized; group 0's inode bitmap and table are
//!   written (the table is zeroed), the other groups are `INODE_UNINIT` with an empty
//!   inode bitmap on disk and their tables left as they are (no `ITABLE_ZEROED`).
//! - the root directory and `lost+found` take the first free blocks after group 0's
//!   metadata; the journal (inode 8, zeroed, jbd2 v2 superblock in its first block) starts
//!   at the flex group in the middle of the file system.

use crate::dev::BlockDevice;
use crate::disk::extent::{self, Extent, Index, Node};
use crate::disk::group::{self, GroupDesc, BG_INODE_UNINIT, BG_INODE_ZEROED};
use crate::disk::inode::{DiskInode, FL_EXTENTS};
use crate::disk::superblock::{compat, incompat, ro_compat, Superblock, FLAG_SIGNED_HASH, MAGIC};
use crate::disk::{count_ones, dir, jbd2, le32, put16, put32, set_bit};
use crate::error::{Error, Result};
use crate::types::Timespec;

/// Block size in bytes.
const BS: usize = 4096;
/// Block size in bytes, as a block-address multiplier.
const BLOCK_SIZE: u64 = BS as u64;
/// Blocks (and bits of a block bitmap) per group.
const BPG: u64 = 32768;
/// Inode size in bytes.
const INODE_SIZE: usize = 256;
/// Inodes in one inode table block.
const INODES_PER_BLOCK: u32 = (BS / INODE_SIZE) as u32;
/// Group descriptor size in bytes.
const DESC_SIZE: usize = 64;
/// log2 of the groups in a flex group.
const LOG_FLEX: u8 = 4;
/// Groups in a flex group.
const FLEX: u32 = 1 << LOG_FLEX;
/// First inode number not reserved.
const FIRST_INO: u32 = 11;
/// Root directory inode.
const ROOT_INO: u32 = 2;
/// Journal inode.
const JOURNAL_INO: u32 = 8;
/// lost+found inode (the first non-reserved one, as mke2fs does).
const LPF_INO: u32 = 11;
/// Blocks of lost+found (16 KiB, as mke2fs makes it).
const LPF_BLOCKS: u64 = 4;
/// Smallest file system: mke2fs makes no default journal below 2048 blocks.
const MIN_BLOCKS: u64 = 2048;
/// Largest file system: 16 TiB keeps the inode count in 32 bits.
const MAX_BLOCKS: u64 = 1 << 32;
/// Smallest journal jbd2 accepts.
const MIN_JOURNAL: u32 = 1024;
/// Largest journal mke2fs makes.
const MAX_JOURNAL: u32 = 10_240_000;
/// `s_def_hash_version`: half_md4.
const HASH_HALF_MD4: u8 = 1;
/// `s_default_mount_opts`: user_xattr (0x4) | acl (0x8).
const DEFM_USER_XATTR_ACL: u32 = 0x0C;
/// `s_jnl_backup_type`: EXT3_JNL_BACKUP_BLOCKS.
const JNL_BACKUP_BLOCKS: u8 = 1;
/// Bytes per zero-fill write.
const CHUNK: usize = 4 << 20;
/// A last group smaller than its metadata plus this many blocks is dropped (mke2fs rule).
const LAST_GROUP_SLACK: u64 = 50;

/// What to format: everything else is fixed (see the module documentation).
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// Volume label, at most 16 bytes.
    pub label: String,
    /// Bytes of file system per inode (1024 ..= 64 MiB).
    pub inode_ratio: u64,
    /// Journal size in blocks; `None` picks mke2fs's default for the file system size.
    pub journal_blocks: Option<u32>,
    /// Percentage of blocks reserved for root (0 ..= 50).
    pub reserved_percent: u32,
}

impl Default for MkfsOptions {
    /// No label, one inode per 16 KiB, default journal, 5% reserved.
    fn default() -> MkfsOptions {
        MkfsOptions {
            label: String::new(),
            inode_ratio: 16384,
            journal_blocks: None,
            reserved_percent: 5,
        }
    }
}

/// Format `dev` as an empty ext4 file system with `lost+found`.
///
/// Errors with `Error::Invalid` when the options are out of range or the device is too
/// small (below 8 MiB, or without room for the journal) or too big (above 16 TiB).
pub fn format(dev: &dyn BlockDevice, opts: &MkfsOptions) -> Result<()> {
    let geo = Geometry::new(dev.size(), opts)?;
    let plan = Plan::new(&geo, opts)?;
    let now = Timespec::now();
    let mut sb = new_superblock(&geo, opts, now)?;
    let mut out = Out { dev, written: 0 };
    let journal = write_files(&mut out, &geo, &plan, &sb, now)?;
    set_journal_backup(&mut sb, &journal);
    let gdt = write_groups(&mut out, &geo, &plan, &mut sb)?;
    write_superblocks(&mut out, &geo, &mut sb, &gdt)?;
    dev.flush()
}

/// An `Error::Invalid` with `msg`.
fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// Fixed shape of the file system: sizes and counts.
struct Geometry {
    /// Blocks in the file system.
    blocks: u64,
    /// Block groups.
    groups: u32,
    /// Inodes per group.
    ipg: u32,
    /// Inode table blocks per group.
    itb: u64,
    /// Blocks of the group descriptor table.
    gdt_blocks: u64,
}

impl Geometry {
    /// Geometry for a device of `dev_size` bytes, dropping a too-small last group.
    fn new(dev_size: u64, opts: &MkfsOptions) -> Result<Geometry> {
        check_options(opts)?;
        let mut blocks = dev_size / BLOCK_SIZE;
        if blocks < MIN_BLOCKS {
            return Err(invalid(format!(
                "device too small: {dev_size} bytes, mkfs needs at least {} bytes",
                MIN_BLOCKS * BLOCK_SIZE
            )));
        }
        if blocks > MAX_BLOCKS {
            return Err(invalid(format!(
                "device too big: {dev_size} bytes, the layout holds at most {} bytes",
                MAX_BLOCKS * BLOCK_SIZE
            )));
        }
        loop {
            let geo = Geometry::for_blocks(blocks, opts.inode_ratio)?;
            let rem = blocks % BPG;
            let overhead = 2 + geo.itb + geo.super_blocks(geo.groups - 1);
            if geo.groups > 1 && rem != 0 && rem < overhead + LAST_GROUP_SLACK {
                blocks -= rem;
                continue;
            }
            return Ok(geo);
        }
    }

    /// Group count, inodes per group (rounded to fill whole table blocks) and GDT size.
    fn for_blocks(blocks: u64, inode_ratio: u64) -> Result<Geometry> {
        let groups = blocks.div_ceil(BPG);
        let inodes = (blocks * BLOCK_SIZE / inode_ratio).max(u64::from(FIRST_INO) + 1);
        let per_block = u64::from(INODES_PER_BLOCK);
        let mut ipg = inodes.div_ceil(groups).min(BS as u64 * 8);
        ipg = ipg.div_ceil(per_block) * per_block;
        // The total inode count is a 32-bit field.
        ipg = ipg.min(u64::from(u32::MAX) / groups / per_block * per_block);
        if ipg < per_block {
            return Err(invalid(format!(
                "too many groups ({groups}) for 32-bit inode numbers"
            )));
        }
        Ok(Geometry {
            blocks,
            groups: groups as u32, // at most 2^32 / 2^15
            ipg: ipg as u32,       // at most 32768
            itb: ipg / per_block,
            gdt_blocks: (groups * DESC_SIZE as u64).div_ceil(BLOCK_SIZE),
        })
    }

    /// First block of group `g`.
    fn group_start(&self, g: u32) -> u64 {
        u64::from(g) * BPG
    }

    /// One past the last block of group `g`.
    fn group_end(&self, g: u32) -> u64 {
        (self.group_start(g) + BPG).min(self.blocks)
    }

    /// Blocks the superblock and GDT copies take at the start of group `g`.
    fn super_blocks(&self, g: u32) -> u64 {
        if group::has_super(g, true) {
            1 + self.gdt_blocks
        } else {
            0
        }
    }

    /// Total inodes (fits in 32 bits by construction).
    fn inodes(&self) -> u32 {
        self.groups * self.ipg
    }

    /// The first start at or after `start` where `n` blocks avoid every superblock copy.
    fn skip_backups(&self, mut start: u64, n: u64) -> u64 {
        'again: loop {
            let (first, last) = ((start / BPG) as u32, ((start + n - 1) / BPG) as u32);
            for g in first..=last {
                let (s, e) = (
                    self.group_start(g),
                    self.group_start(g) + self.super_blocks(g),
                );
                if start < e && s < start + n {
                    start = e;
                    continue 'again;
                }
            }
            return start;
        }
    }
}

/// Reject options mke2fs would reject.
fn check_options(opts: &MkfsOptions) -> Result<()> {
    if opts.label.len() > 16 {
        return Err(invalid(format!(
            "label {:?} is longer than 16 bytes",
            opts.label
        )));
    }
    if !(1024..=64 << 20).contains(&opts.inode_ratio) {
        return Err(invalid(format!(
            "inode ratio {} out of range 1024..=67108864",
            opts.inode_ratio
        )));
    }
    if opts.reserved_percent > 50 {
        return Err(invalid(format!(
            "reserved percentage {} above 50",
            opts.reserved_percent
        )));
    }
    Ok(())
}

/// mke2fs's default journal size in blocks for a file system of `blocks` blocks.
fn default_journal_blocks(blocks: u64) -> u32 {
    const TABLE: [(u64, u32); 7] = [
        (32768, 1024),
        (256 << 10, 4096),
        (512 << 10, 8192),
        (4096 << 10, 16384),
        (8192 << 10, 32768),
        (16384 << 10, 65536),
        (32768 << 10, 131072),
    ];
    TABLE
        .iter()
        .find(|(limit, _)| blocks < *limit)
        .map_or(262144, |&(_, j)| j)
}

/// The journal size: the requested one (checked against mke2fs's limits) or the default.
fn journal_blocks(geo: &Geometry, opts: &MkfsOptions) -> Result<u32> {
    let Some(n) = opts.journal_blocks else {
        return Ok(default_journal_blocks(geo.blocks));
    };
    let max = MAX_JOURNAL.min((geo.blocks / 2) as u32);
    if n < MIN_JOURNAL || n > max {
        return Err(invalid(format!(
            "journal of {n} blocks out of range {MIN_JOURNAL}..={max}"
        )));
    }
    Ok(n)
}

/// Where a group's bitmaps and inode table live.
#[derive(Clone, Copy)]
struct GroupMeta {
    block_bitmap: u64,
    inode_bitmap: u64,
    inode_table: u64,
}

/// Used block ranges `[start, end)`, sorted and disjoint once normalized.
struct Space {
    blocks: u64,
    used: Vec<(u64, u64)>,
}

impl Space {
    /// Sort and merge the ranges pushed so far.
    fn normalize(&mut self) {
        self.used.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.used.len());
        for &(s, e) in &self.used {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.used = merged;
    }

    /// Mark `[s, e)` used, keeping the list sorted (the range must be free).
    fn take(&mut self, s: u64, e: u64) {
        let i = self.used.partition_point(|r| r.0 < s);
        self.used.insert(i, (s, e));
    }

    /// Free ranges inside `[from, to)`.
    fn gaps(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
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
        for &(s, e) in &runs {
            self.take(s, e);
        }
        Some(runs)
    }
}

/// Where everything goes: group metadata, directories and the journal.
struct Plan {
    meta: Vec<GroupMeta>,
    space: Space,
    root_block: u64,
    lpf_block: u64,
    journal: Vec<(u64, u64)>,
    journal_leaf: Option<u64>,
    journal_blocks: u32,
}

impl Plan {
    /// Lay out the group metadata, then the directories and the journal.
    fn new(geo: &Geometry, opts: &MkfsOptions) -> Result<Plan> {
        let journal_blocks = journal_blocks(geo, opts)?;
        let (meta, mut space) = place_metadata(geo)?;
        let too_small = |what: &str| invalid(format!("device too small: no room for {what}"));
        let root_block = space
            .alloc_run(0, 1)
            .ok_or_else(|| too_small("the root directory"))?;
        let lpf_block = space
            .alloc_run(0, LPF_BLOCKS)
            .ok_or_else(|| too_small("lost+found"))?;
        let journal = space
            .alloc_runs(journal_goal(geo), u64::from(journal_blocks))
            .ok_or_else(|| too_small(&format!("a journal of {journal_blocks} blocks")))?;
        let mut plan = Plan {
            meta,
            space,
            root_block,
            lpf_block,
            journal,
            journal_leaf: None,
            journal_blocks,
        };
        plan.place_journal_leaf()?;
        Ok(plan)
    }

    /// A journal of more than 4 extents needs an extent tree block.
    fn place_journal_leaf(&mut self) -> Result<()> {
        let extents = journal_extents(&self.journal);
        if extents.len() > extent::block_capacity(BS) {
            return Err(invalid(format!(
                "free space too fragmented: journal needs {} extents",
                extents.len()
            )));
        }
        if extents.len() > 4 {
            let goal = self.journal.last().map_or(0, |r| r.1);
            let leaf = self.space.alloc_run(goal, 1);
            self.journal_leaf = Some(leaf.ok_or_else(|| {
                invalid("device too small: no room for the journal's extent block")
            })?);
        }
        Ok(())
    }
}

/// Superblock copies and every flex group's bitmaps and inode tables, as used space.
fn place_metadata(geo: &Geometry) -> Result<(Vec<GroupMeta>, Space)> {
    let mut space = Space {
        blocks: geo.blocks,
        used: Vec::new(),
    };
    for g in 0..geo.groups {
        let n = geo.super_blocks(g);
        if n > 0 {
            space
                .used
                .push((geo.group_start(g), geo.group_start(g) + n));
        }
    }
    let mut meta = Vec::with_capacity(geo.groups as usize);
    for f in 0..geo.groups.div_ceil(FLEX) {
        place_flex(geo, f, &mut meta, &mut space.used)?;
    }
    space.normalize();
    Ok((meta, space))
}

/// Place flex group `f`'s bitmaps and inode tables from the first free block of its
/// first group, skipping superblock copies, and record them as used.
fn place_flex(
    geo: &Geometry,
    f: u32,
    meta: &mut Vec<GroupMeta>,
    used: &mut Vec<(u64, u64)>,
) -> Result<()> {
    let (g0, g1) = (f * FLEX, ((f + 1) * FLEX).min(geo.groups));
    let k = u64::from(g1 - g0);
    let block_bitmap = geo.skip_backups(geo.group_start(g0) + geo.super_blocks(g0), k);
    let inode_bitmap = geo.skip_backups(block_bitmap + k, k);
    used.push((block_bitmap, block_bitmap + k));
    used.push((inode_bitmap, inode_bitmap + k));
    let mut cur = inode_bitmap + k;
    for i in 0..k {
        let inode_table = geo.skip_backups(cur, geo.itb);
        cur = inode_table + geo.itb;
        used.push((inode_table, cur));
        meta.push(GroupMeta {
            block_bitmap: block_bitmap + i,
            inode_bitmap: inode_bitmap + i,
            inode_table,
        });
    }
    if cur > geo.group_end(g1 - 1) {
        return Err(invalid(format!(
            "device too small for the inode tables of groups {g0}..{g1} (raise the inode ratio)"
        )));
    }
    Ok(())
}

/// First block of the flex group in the middle of the file system (0 for one flex group).
fn journal_goal(geo: &Geometry) -> u64 {
    if geo.groups <= FLEX {
        return 0;
    }
    geo.group_start((geo.groups / 2) & !(FLEX - 1))
}

/// The journal's runs as extents of at most 32768 blocks.
fn journal_extents(runs: &[(u64, u64)]) -> Vec<Extent> {
    let mut out = Vec::new();
    let mut lblk: u64 = 0;
    for &(s, e) in runs {
        let mut p = s;
        while p < e {
            let len = (e - p).min(u64::from(extent::MAX_INIT_LEN));
            // The journal is at most 10,240,000 blocks, so logical blocks fit in 32 bits.
            out.push(Extent {
                lblk: lblk as u32,
                len: len as u32,
                pblk: p,
                unwritten: false,
            });
            lblk += len;
            p += len;
        }
    }
    out
}

/// Counts device writes for `s_kbytes_written`.
struct Out<'a> {
    dev: &'a dyn BlockDevice,
    written: u64,
}

impl Out<'_> {
    /// Write `data` at block `block`.
    fn put(&mut self, block: u64, data: &[u8]) -> Result<()> {
        self.dev.write_at(block * BLOCK_SIZE, data)?;
        self.written += data.len() as u64;
        Ok(())
    }

    /// Zero `[start, end)` in large writes (as mke2fs does on a device without discard).
    fn zero(&mut self, start: u64, end: u64) -> Result<()> {
        let per = (CHUNK / BS) as u64;
        let zeros = vec![0u8; CHUNK.min((end - start) as usize * BS)];
        let mut b = start;
        while b < end {
            let n = (end - b).min(per);
            self.put(b, &zeros[..n as usize * BS])?;
            b += n;
        }
        Ok(())
    }
}

/// 32 random bytes from /dev/urandom, or mixed from the clock and process if unavailable.
fn random_bytes() -> [u8; 32] {
    use std::io::Read;
    let mut b = [0u8; 32];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return b;
        }
    }
    let now = Timespec::now();
    let mut x =
        ((now.sec as u64) << 30) ^ u64::from(now.nsec) ^ (u64::from(std::process::id()) << 40);
    x ^= &b as *const _ as u64;
    for chunk in b.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    b
}

/// Stamp RFC 4122 version 4 bits on 16 random bytes.
fn uuid_v4(b: &[u8]) -> [u8; 16] {
    let mut u = [0u8; 16];
    u.copy_from_slice(&b[..16]);
    u[6] = (u[6] & 0x0F) | 0x40;
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

/// The superblock without free counts, journal backup and checksum.
fn new_superblock(geo: &Geometry, opts: &MkfsOptions, now: Timespec) -> Result<Superblock> {
    let mut sb = Superblock::zeroed();
    sb.set_feature_compat(compat::HAS_JOURNAL | compat::EXT_ATTR | compat::DIR_INDEX);
    sb.set_feature_incompat(
        incompat::FILETYPE | incompat::EXTENTS | incompat::BIT64 | incompat::FLEX_BG,
    );
    sb.set_feature_ro_compat(
        ro_compat::SPARSE_SUPER
            | ro_compat::LARGE_FILE
            | ro_compat::HUGE_FILE
            | ro_compat::DIR_NLINK
            | ro_compat::EXTRA_ISIZE
            | ro_compat::METADATA_CSUM,
    );
    set_geometry(&mut sb, geo, opts);
    set_identity(&mut sb, opts)?;
    set_times(&mut sb, now);
    Ok(sb)
}

/// Sizes, counts and the fixed layout parameters.
fn set_geometry(sb: &mut Superblock, geo: &Geometry, opts: &MkfsOptions) {
    sb.set_inodes_count(geo.inodes());
    sb.set_blocks_count(geo.blocks);
    sb.set_r_blocks_count(geo.blocks * u64::from(opts.reserved_percent) / 100);
    sb.set_first_data_block(0);
    sb.set_log_block_size(2);
    sb.set_log_cluster_size(2);
    sb.set_blocks_per_group(BPG as u32);
    sb.set_clusters_per_group(BPG as u32);
    sb.set_inodes_per_group(geo.ipg);
    sb.set_first_ino(FIRST_INO);
    sb.set_inode_size(INODE_SIZE as u16);
    sb.set_desc_size_raw(DESC_SIZE as u16);
    sb.set_log_groups_per_flex(LOG_FLEX);
    sb.set_min_extra_isize(32);
    sb.set_want_extra_isize(32);
    sb.set_journal_inum(JOURNAL_INO);
}

/// Magic, state, policies, UUID, hash seed and label.
fn set_identity(sb: &mut Superblock, opts: &MkfsOptions) -> Result<()> {
    sb.set_magic(MAGIC);
    sb.set_state(1); // clean
    sb.set_errors(1); // continue
    sb.set_max_mnt_count(0xFFFF);
    sb.set_creator_os(0);
    sb.set_rev_level(1);
    sb.set_default_mount_opts(DEFM_USER_XATTR_ACL);
    sb.set_flags(FLAG_SIGNED_HASH);
    sb.set_def_hash_version(HASH_HALF_MD4);
    sb.set_checksum_type(1); // crc32c
    let rnd = random_bytes();
    sb.set_uuid(uuid_v4(&rnd[..16]));
    let seed = uuid_v4(&rnd[16..]);
    sb.set_hash_seed([0, 1, 2, 3].map(|i| le32(&seed, 4 * i)));
    // s_volume_name: 16 bytes at 0x78, NUL padded (no setter in `disk`).
    let label = opts.label.as_bytes();
    if label.len() > 16 {
        return Err(invalid("label longer than 16 bytes"));
    }
    sb.raw[0x78..0x78 + label.len()].copy_from_slice(label);
    Ok(())
}

/// Creation, write and last-check times (with their high bytes).
fn set_times(sb: &mut Superblock, now: Timespec) {
    let (lo, hi) = (now.sec as u32, ((now.sec >> 32) & 0xFF) as u8);
    sb.set_mkfs_time(lo);
    sb.set_wtime(lo);
    sb.set_lastcheck(lo);
    // s_wtime_hi (0x274), s_mkfs_time_hi (0x276), s_lastcheck_hi (0x277).
    sb.raw[0x274] = hi;
    sb.raw[0x276] = hi;
    sb.raw[0x277] = hi;
}

/// `s_jnl_blocks`: the journal inode's i_block words, then i_size high and low.
fn set_journal_backup(sb: &mut Superblock, journal: &DiskInode) {
    sb.set_jnl_backup_type(JNL_BACKUP_BLOCKS);
    for i in 0..15 {
        sb.set_jnl_block(i, le32(journal.iblock(), 4 * i));
    }
    sb.set_jnl_block(15, (journal.size() >> 32) as u32);
    sb.set_jnl_block(16, journal.size() as u32);
}

/// An inode with times, links and mode, as the engine writes new ones.
fn new_inode(mode: u16, links: u16, now: Timespec) -> DiskInode {
    let mut i = DiskInode::new(INODE_SIZE);
    i.set_mode(mode);
    i.set_links(links);
    i.set_atime(now);
    i.set_ctime(now);
    i.set_mtime(now);
    i.set_crtime(now);
    i
}

/// A reserved inode as mke2fs leaves it: no extra fields; inode 1 carries the times.
fn reserved_inode(ino: u32, now: Timespec, seed: u32) -> DiskInode {
    let mut i = DiskInode::new(INODE_SIZE);
    put16(&mut i.raw, 0x80, 0); // i_extra_isize = 0
    if ino == 1 {
        let t = Timespec {
            sec: now.sec,
            nsec: 0,
        };
        i.set_atime(t);
        i.set_ctime(t);
        i.set_mtime(t);
    }
    i.update_checksum(seed, ino);
    i
}

/// Point an inode's extent root at `extents` (at most 4) and count its blocks.
fn set_extents(i: &mut DiskInode, extents: &[Extent], tree_blocks: u64) {
    i.set_flags(FL_EXTENTS);
    encode_root(i, &Node::Leaf(extents.to_vec()));
    let data: u64 = extents.iter().map(|e| u64::from(e.len)).sum();
    i.set_blocks_512((data + tree_blocks) * (BLOCK_SIZE / 512), BS as u32);
}

/// Write `node` as the extent root in i_block.
fn encode_root(i: &mut DiskInode, node: &Node) {
    extent::encode_node(i.iblock_mut(), node);
}

/// A directory inode over `blocks` contiguous blocks from `start`.
fn dir_inode(mode: u16, links: u16, start: u64, blocks: u64, now: Timespec) -> DiskInode {
    let mut i = new_inode(0o040000 | mode, links, now);
    let e = Extent {
        lblk: 0,
        len: blocks as u32,
        pblk: start,
        unwritten: false,
    };
    set_extents(&mut i, &[e], 0);
    i.set_size(blocks * BLOCK_SIZE);
    i
}

/// A leaf directory block holding `entries` (ino, name), the last one spanning to the tail.
fn dir_block(entries: &[(u32, &[u8])], inode_seed: u32) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    let end = dir::entries_end(BS, true);
    let mut off = 0;
    for (n, &(ino, name)) in entries.iter().enumerate() {
        let rec = if n + 1 == entries.len() {
            end - off
        } else {
            dir::rec_len_for(name.len()).max(12)
        };
        dir::put_entry(&mut b, off, ino, rec, 2, name); // 2 = directory
        off += rec;
    }
    dir::init_tail(&mut b);
    dir::set_leaf_csum(inode_seed, &mut b);
    b
}

/// Write group 0's inode table, the directories and the journal; returns the journal inode.
fn write_files(
    out: &mut Out,
    geo: &Geometry,
    plan: &Plan,
    sb: &Superblock,
    now: Timespec,
) -> Result<DiskInode> {
    let seed = sb.csum_seed();
    let root = dir_inode(0o755, 3, plan.root_block, 1, now);
    let lpf = dir_inode(0o700, 2, plan.lpf_block, LPF_BLOCKS, now);
    let root_seed = root.csum_seed(seed, ROOT_INO);
    let lpf_seed = lpf.csum_seed(seed, LPF_INO);
    let root_dir: [(u32, &[u8]); 3] = [
        (ROOT_INO, b"."),
        (ROOT_INO, b".."),
        (LPF_INO, b"lost+found"),
    ];
    out.put(plan.root_block, &dir_block(&root_dir, root_seed))?;
    out.put(plan.lpf_block, &lpf_blocks(lpf_seed))?;
    let (journal, leaf) = journal_inode(plan, now, seed);
    if let (Some(at), Some(block)) = (plan.journal_leaf, leaf) {
        out.put(at, &block)?;
    }
    write_journal(out, plan, sb.uuid())?;
    let mut inodes = [(ROOT_INO, root), (LPF_INO, lpf), (JOURNAL_INO, journal)];
    for (ino, i) in inodes.iter_mut() {
        i.update_checksum(seed, *ino);
    }
    write_inode_table(out, geo, plan, &inodes, now, seed)?;
    let [_, _, (_, journal)] = inodes;
    Ok(journal)
}

/// lost+found's blocks: "." and "..", then empty leaves, each with its checksum tail.
fn lpf_blocks(inode_seed: u32) -> Vec<u8> {
    let mut v = dir_block(&[(LPF_INO, b"."), (ROOT_INO, b"..")], inode_seed);
    for _ in 1..LPF_BLOCKS {
        let mut b = vec![0u8; BS];
        dir::init_empty_leaf(&mut b, true);
        dir::set_leaf_csum(inode_seed, &mut b);
        v.extend_from_slice(&b);
    }
    v
}

/// The journal inode and, for more than 4 extents, its checksummed leaf block.
fn journal_inode(plan: &Plan, now: Timespec, fs_seed: u32) -> (DiskInode, Option<Vec<u8>>) {
    let mut i = new_inode(0o100600, 1, now);
    let extents = journal_extents(&plan.journal);
    i.set_size(u64::from(plan.journal_blocks) * BLOCK_SIZE);
    let Some(leaf_at) = plan.journal_leaf else {
        set_extents(&mut i, &extents, 0);
        return (i, None);
    };
    i.set_flags(FL_EXTENTS);
    encode_root(
        &mut i,
        &Node::Index(
            1,
            vec![Index {
                lblk: 0,
                child: leaf_at,
            }],
        ),
    );
    let sectors = (u64::from(plan.journal_blocks) + 1) * (BLOCK_SIZE / 512);
    i.set_blocks_512(sectors, BS as u32);
    let mut leaf = vec![0u8; BS];
    extent::encode_block(&mut leaf, &Node::Leaf(extents));
    extent::set_block_csum(i.csum_seed(fs_seed, JOURNAL_INO), &mut leaf);
    (i, Some(leaf))
}

/// Zero the journal and write its superblock.
fn write_journal(out: &mut Out, plan: &Plan, uuid: [u8; 16]) -> Result<()> {
    for &(s, e) in &plan.journal {
        out.zero(s, e)?;
    }
    let mut jsb = vec![0u8; BS];
    jbd2::format_superblock(&mut jsb, BS as u32, plan.journal_blocks, uuid);
    out.put(plan.journal[0].0, &jsb)
}

/// Group 0's inode table: inodes 1..=11 in its first block, zeros after.
fn write_inode_table(
    out: &mut Out,
    geo: &Geometry,
    plan: &Plan,
    inodes: &[(u32, DiskInode)],
    now: Timespec,
    seed: u32,
) -> Result<()> {
    let mut first = vec![0u8; BS];
    for ino in 1..=FIRST_INO {
        let own = inodes
            .iter()
            .find(|(n, _)| *n == ino)
            .map(|(_, i)| i.clone());
        let i = own.unwrap_or_else(|| reserved_inode(ino, now, seed));
        let off = (ino as usize - 1) * INODE_SIZE;
        first[off..off + INODE_SIZE].copy_from_slice(&i.raw);
    }
    let table = plan.meta[0].inode_table;
    out.put(table, &first)?;
    out.zero(table + 1, table + geo.itb)
}

/// Set bits `[from, to)`.
fn set_bits(map: &mut [u8], from: usize, to: usize) {
    let mut i = from;
    while i < to && i & 7 != 0 {
        set_bit(map, i);
        i += 1;
    }
    let whole = (to - i) / 8;
    map[i / 8..i / 8 + whole].fill(0xFF);
    i += whole * 8;
    while i < to {
        set_bit(map, i);
        i += 1;
    }
}

/// Build group `g`'s block bitmap into `map`; returns its free block count.
fn block_bitmap(geo: &Geometry, used: &[(u64, u64)], g: u32, map: &mut [u8]) -> u32 {
    map.fill(0);
    let (gs, ge) = (geo.group_start(g), geo.group_end(g));
    for &(s, e) in &used[used.partition_point(|r| r.1 <= gs)..] {
        if s >= ge {
            break;
        }
        set_bits(map, (s.max(gs) - gs) as usize, (e.min(ge) - gs) as usize);
    }
    let n = (ge - gs) as usize;
    let free = n - count_ones(map, n);
    set_bits(map, n, BPG as usize); // past the end of the file system
    free as u32
}

/// An inode bitmap with `used` inodes taken and the padding past `ipg` set.
fn inode_bitmap(geo: &Geometry, used: u32) -> Vec<u8> {
    let mut m = vec![0u8; BS];
    set_bits(&mut m, 0, used as usize);
    set_bits(&mut m, geo.ipg as usize, BS * 8);
    m
}

/// Write every bitmap, fill the descriptors and the superblock's free counts; returns the GDT.
fn write_groups(
    out: &mut Out,
    geo: &Geometry,
    plan: &Plan,
    sb: &mut Superblock,
) -> Result<Vec<u8>> {
    let seed = sb.csum_seed();
    let mut gdt = vec![0u8; geo.gdt_blocks as usize * BS];
    let ib_first = inode_bitmap(geo, FIRST_INO);
    let ib_rest = inode_bitmap(geo, 0);
    let mut free_blocks: u64 = 0;
    for f in 0..geo.groups.div_ceil(FLEX) {
        let (g0, g1) = (f * FLEX, ((f + 1) * FLEX).min(geo.groups));
        let k = (g1 - g0) as usize;
        let (mut bbs, mut ibs) = (vec![0u8; k * BS], vec![0u8; k * BS]);
        for g in g0..g1 {
            let at = (g - g0) as usize * BS;
            let bb = &mut bbs[at..at + BS];
            let free = block_bitmap(geo, &plan.space.used, g, bb);
            free_blocks += u64::from(free);
            let ib = if g == 0 { &ib_first } else { &ib_rest };
            ibs[at..at + BS].copy_from_slice(ib);
            let d = descriptor(geo, plan.meta[g as usize], g, free, bb, ib, seed);
            gdt[g as usize * DESC_SIZE..(g as usize + 1) * DESC_SIZE].copy_from_slice(&d.raw);
        }
        out.put(plan.meta[g0 as usize].block_bitmap, &bbs)?;
        out.put(plan.meta[g0 as usize].inode_bitmap, &ibs)?;
    }
    sb.set_free_blocks_count(free_blocks);
    sb.set_free_inodes_count(geo.inodes() - FIRST_INO);
    // s_overhead_clusters (u32 at 0x248), as mke2fs sets it: every used block but the
    // directories' data.
    let overhead = geo.blocks - free_blocks - 1 - LPF_BLOCKS;
    put32(
        &mut sb.raw[..],
        0x248,
        overhead.min(u64::from(u32::MAX)) as u32,
    );
    Ok(gdt)
}

/// Group `g`'s descriptor with counts, flags and all three checksums.
fn descriptor(
    geo: &Geometry,
    m: GroupMeta,
    g: u32,
    free: u32,
    bb: &[u8],
    ib: &[u8],
    seed: u32,
) -> GroupDesc {
    let mut d = GroupDesc::zeroed(DESC_SIZE);
    d.set_block_bitmap(m.block_bitmap);
    d.set_inode_bitmap(m.inode_bitmap);
    d.set_inode_table(m.inode_table);
    d.set_free_blocks(free);
    if g == 0 {
        d.set_free_inodes(geo.ipg - FIRST_INO);
        d.set_used_dirs(2);
        d.set_itable_unused(geo.ipg - FIRST_INO);
        d.set_flags(BG_INODE_ZEROED);
    } else {
        d.set_free_inodes(geo.ipg);
        d.set_itable_unused(geo.ipg);
        d.set_flags(BG_INODE_UNINIT);
    }
    d.set_block_bitmap_csum(group::bitmap_csum(seed, bb, (BPG / 8) as usize, true));
    d.set_inode_bitmap_csum(group::bitmap_csum(seed, ib, geo.ipg as usize / 8, true));
    d.update_checksum(seed, g);
    d
}

/// Write the superblock and GDT copies, then the primary superblock and GDT last.
fn write_superblocks(out: &mut Out, geo: &Geometry, sb: &mut Superblock, gdt: &[u8]) -> Result<()> {
    let backups: Vec<u32> = (1..geo.groups)
        .filter(|&g| group::has_super(g, true))
        .collect();
    let copy_bytes = (1 + geo.gdt_blocks) * BLOCK_SIZE;
    let total = out.written + copy_bytes * (backups.len() as u64 + 1);
    sb.set_kbytes_written(total / 1024);
    let mut buf = vec![0u8; copy_bytes as usize];
    buf[BS..].copy_from_slice(gdt);
    for g in backups {
        // A backup sits at the start of its group's first block, naming its group.
        let mut copy = sb.clone();
        copy.set_block_group_nr(g as u16);
        copy.update_checksum();
        buf[..1024].copy_from_slice(&copy.raw[..]);
        out.put(geo.group_start(g), &buf)?;
    }
    sb.update_checksum();
    buf[..BS].fill(0);
    buf[1024..2048].copy_from_slice(&sb.raw[..]);
    out.put(0, &buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_journal_sizes_follow_mke2fs() {
        assert_eq!(default_journal_blocks(8192), 1024);
        assert_eq!(default_journal_blocks(76800), 4096);
        assert_eq!(default_journal_blocks(1 << 20), 16384);
        assert_eq!(default_journal_blocks(5 << 20), 32768);
        assert_eq!(default_journal_blocks(1 << 30), 262144);
    }

    #[test]
    fn geometry_of_4g() {
        let g = Geometry::new(4 << 30, &MkfsOptions::default()).unwrap();
        assert_eq!((g.groups, g.ipg, g.itb, g.gdt_blocks), (32, 8192, 512, 1));
    }

    #[test]
    fn space_allocation_skips_used_ranges() {
        let mut s = Space {
            blocks: 100,
            used: vec![(0, 10), (12, 20), (10, 11)],
        };
        s.normalize();
        assert_eq!(s.used, vec![(0, 11), (12, 20)]);
        assert_eq!(s.alloc_run(0, 2), Some(20));
        assert_eq!(s.alloc_run(0, 1), Some(11));
        assert_eq!(s.alloc_runs(95, 10), Some(vec![(95, 100), (22, 27)]));
        assert_eq!(s.alloc_run(0, 100), None);
    }

    #[test]
    fn set_bits_ranges() {
        let mut m = vec![0u8; 8];
        set_bits(&mut m, 3, 21);
        assert_eq!(count_ones(&m, 64), 18);
        assert!(!crate::disk::test_bit(&m, 2) && crate::disk::test_bit(&m, 20));
        assert!(!crate::disk::test_bit(&m, 21));
    }
}
