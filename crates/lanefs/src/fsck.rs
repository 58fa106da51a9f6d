//! fsck: an independent, read-only consistency checker for ext4 images.
//!
//! The checker never uses the engine's [`crate::Fs`]: it reads raw structures through
//! [`crate::disk`] and cross-checks them in passes modelled on e2fsck:
//!
//! 0. superblock and group descriptors: checksums, geometry, features, and where the bitmaps
//!    and inode tables sit (inside the file system, not overlapping other metadata);
//! 1. every in-use inode: checksum, mode, extent tree or block map, `i_blocks`, size, xattr
//!    block, symlinks and device inodes; every block is claimed in a map of the whole file
//!    system so a block with two owners is found (and both owners named);
//! 2. directories: every block parses, leaf and htree checksums, htree structure and hash
//!    order, `.` and `..`, entry targets and file types, duplicate names;
//! 3. connectivity: every directory reachable from the root, no loops;
//! 4. reference counts: `i_links_count` against the directory entries naming each inode;
//! 5. bitmaps and summary counts: computed usage against the block and inode bitmaps, the
//!    per-group counters and the superblock totals.
//!
//! Everything read from the device is treated as hostile: every loop is bounded, arithmetic
//! on on-disk values is checked, each tree block is walked at most once (it must be claimed
//! before it is read), and memory is proportional to the geometry of a superblock that has
//! been validated against the device size. A corrupt image yields problems or an error, never
//! a panic or a hang.

use crate::dev::BlockDevice;
use crate::disk::extent::{self, Extent, Index, Node};
use crate::disk::group::{self, GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use crate::disk::inode::{DiskInode, FL_EXTENTS, FL_HUGE_FILE, FL_INDEX, FL_INLINE_DATA};
use crate::disk::superblock::{
    compat, incompat, ro_compat, Superblock, FLAG_UNSIGNED_HASH, SB_OFFSET, SB_SIZE,
};
use crate::disk::{crc32c_raw, dir, hash, jbd2, le16, le32, test_bit};
use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Instant;

/// Inode flag: immutable (from the ext4 headers; `disk` does not name it).
const FL_IMMUTABLE: u32 = 0x10;
/// Inode flag: append only.
const FL_APPEND: u32 = 0x20;
/// Inode flag: encrypted.
const FL_ENCRYPT: u32 = 0x800;
/// Inode flag: AFS directory (imagic_inodes).
const FL_IMAGIC: u32 = 0x2000;
/// Inode flag: casefolded directory.
const FL_CASEFOLD: u32 = 0x4000_0000;
/// COMPAT imagic_inodes (not named by `disk`).
const COMPAT_IMAGIC_INODES: u32 = 0x2;
/// COMPAT bits e2fsck accepts: dir_prealloc, imagic_inodes, has_journal, ext_attr,
/// resize_inode, dir_index, sparse_super2, fast_commit, stable_inodes, orphan_file.
const COMPAT_KNOWN: u32 = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x200 | 0x400 | 0x800 | 0x1000;

/// Most problems a report stores; further ones are only counted.
pub const MAX_PROBLEMS: usize = 10_000;
/// Out-of-range blocks tolerated in one inode before its map is abandoned (as e2fsck).
const MAX_BAD_BLOCKS: u32 = 12;
/// Mismatching ranges listed per group in a bitmap problem.
const MAX_RANGES: usize = 8;
/// Largest link count; a directory with more subdirectories keeps 1 (dir_nlink).
const LINK_MAX: u32 = 65_000;
/// Runs overlapping other owners tolerated in one inode before its map is abandoned.
const MAX_CONFLICTS_PER_INODE: u32 = 1000;
/// Problems stored per directory (the rest are counted).
const MAX_PROBLEMS_PER_DIR: u32 = 100;
/// Names remembered per directory for duplicate detection.
const MAX_NAMES_PER_DIR: usize = 1 << 20;
/// Largest single read of inode tables or directory blocks.
const READ_CHUNK: u64 = 4 << 20;
/// Duplicate claims resolved to owners (the rest are counted).
const MAX_DUP_CLAIMS: usize = 10_000;
/// Claim comparisons spent naming the owners of shared blocks.
const MAX_RESOLVE_STEPS: u64 = 20_000_000;
/// Other owners named per owner of shared blocks.
const MAX_OWNERS_LISTED: usize = 8;
/// Longest orphan chain followed.
const MAX_ORPHANS: usize = 100_000;
const BADBLOCKS_INO: u32 = 1;
const ROOT_INO: u32 = 2;
const RESIZE_INO: u32 = 7;
const JOURNAL_INO: u32 = 8;
const XATTR_MAGIC: u32 = 0xEA02_0000;
const DX_BLOCK_MASK: u32 = 0x0FFF_FFFF;
/// `s_state` bits.
const STATE_VALID: u16 = 0x1;
const STATE_ERROR: u16 = 0x2;
/// COMPAT bits `disk` does not name (values from the ext4 headers).
const COMPAT_SPARSE_SUPER2: u32 = 0x200;
const COMPAT_ORPHAN_FILE: u32 = 0x1000;
/// Superblock offsets `disk` has no accessor for (from struct ext4_super_block).
const SB_CHECKSUM_TYPE: usize = 0x175;
const SB_USR_QUOTA_INUM: usize = 0x240;
const SB_GRP_QUOTA_INUM: usize = 0x244;
const SB_PRJ_QUOTA_INUM: usize = 0x26C;
const SB_ORPHAN_FILE_INUM: usize = 0x280;

// Inode kinds in the per-inode table; 1..=7 are the directory-entry file type codes.
const K_FREE: u8 = 0;
const FT_REG: u8 = 1;
const FT_DIR: u8 = 2;
const FT_CHR: u8 = 3;
const FT_BLK: u8 = 4;
const FT_FIFO: u8 = 5;
const FT_SOCK: u8 = 6;
const FT_LNK: u8 = 7;
/// In use, but the mode is invalid.
const K_BAD_MODE: u8 = 8;
/// In use per the bitmap, but its inode table could not be read.
const K_UNKNOWN: u8 = 9;
/// Reserved or special inode (journal, quota, orphan file): in use, never linked.
const K_RESERVED: u8 = 10;

/// Options for [`check`].
#[derive(Debug, Clone, Default)]
pub struct FsckOptions {
    /// Record per-pass timings in [`FsckReport::notes`].
    pub verbose: bool,
}

/// One inconsistency: a stable code and a message naming the structure, block or inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Stable identifier, e.g. `"BLOCK_BITMAP_MISMATCH"`.
    pub code: &'static str,
    /// What is wrong and where.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// What [`check`] found, with usage totals as computed from the structures (not as stored).
#[derive(Debug, Clone, Default)]
pub struct FsckReport {
    /// Inconsistencies e2fsck would fix (each makes the exit code 4).
    pub problems: Vec<Problem>,
    /// Problems found beyond [`MAX_PROBLEMS`] (or beyond one directory's share of 100),
    /// counted but not stored.
    pub problems_omitted: u64,
    /// Informational findings that e2fsck does not count as errors (for example a stale
    /// superblock free count, which the kernel only updates lazily), and timings when verbose.
    pub notes: Vec<Problem>,
    /// Inodes in use (reserved inodes included).
    pub inodes_used: u64,
    /// Inodes in the file system.
    pub inodes_total: u64,
    /// Blocks in use (metadata included).
    pub blocks_used: u64,
    /// Blocks in the file system.
    pub blocks_total: u64,
    /// Directories in use.
    pub dirs: u64,
    /// Regular files in use.
    pub files: u64,
    /// Symbolic links in use.
    pub symlinks: u64,
    /// Character and block devices, FIFOs and sockets in use.
    pub special_files: u64,
    /// Block groups.
    pub groups: u32,
}

impl FsckReport {
    /// Whether no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.problems_omitted == 0
    }

    /// e2fsck-style exit status: 0 clean, 4 errors left uncorrected (fsck never repairs).
    pub fn exit_code(&self) -> i32 {
        if self.is_clean() {
            0
        } else {
            4
        }
    }

    /// Whether a problem with `code` was reported.
    pub fn has(&self, code: &str) -> bool {
        self.problems.iter().any(|p| p.code == code)
    }

    /// One-line summary like e2fsck's last line, with the problem count.
    pub fn summary(&self) -> String {
        let n = self.problems.len() as u64 + self.problems_omitted;
        let verdict = if n == 0 {
            "clean".to_string()
        } else {
            format!("{n} problem(s)")
        };
        format!(
            "{verdict}: {}/{} inodes, {}/{} blocks, {} dirs, {} files, {} symlinks, {} special",
            self.inodes_used,
            self.inodes_total,
            self.blocks_used,
            self.blocks_total,
            self.dirs,
            self.files,
            self.symlinks,
            self.special_files
        )
    }
}

/// Collects problems, storing at most [`MAX_PROBLEMS`], and at most a scope's limit while
/// a scope (one directory) is open, so one garbage structure cannot crowd out the rest.
#[derive(Default)]
struct Sink {
    problems: Vec<Problem>,
    omitted: u64,
    notes: Vec<Problem>,
    /// Open scope: problems it may still store, and how many it dropped.
    scope: Option<(u32, u64)>,
}

impl Sink {
    fn add(&mut self, code: &'static str, message: String) {
        if let Some((left, dropped)) = &mut self.scope {
            if *left == 0 {
                *dropped += 1;
                self.omitted += 1;
                return;
            }
            *left -= 1;
        }
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem { code, message });
        } else {
            self.omitted += 1;
        }
    }
    fn note(&mut self, code: &'static str, message: String) {
        if self.notes.len() < MAX_PROBLEMS {
            self.notes.push(Problem { code, message });
        }
    }
    fn begin_scope(&mut self, limit: u32) {
        self.scope = Some((limit, 0));
    }
    /// Close the scope; returns how many problems it dropped (counted as omitted).
    fn end_scope(&mut self) -> u64 {
        self.scope.take().map_or(0, |(_, dropped)| dropped)
    }
}

// ---------------------------------------------------------------------------------------
// Geometry, shared with `info`.
// ---------------------------------------------------------------------------------------

/// Geometry derived from a superblock that passed [`Superblock::decode`]'s checks.
#[derive(Debug, Clone)]
pub(crate) struct Geo {
    pub(crate) bs: u64,
    pub(crate) blocks: u64,
    pub(crate) first_data: u64,
    pub(crate) bpg: u64,
    pub(crate) ipg: u64,
    pub(crate) isz: u64,
    pub(crate) groups: u32,
    pub(crate) desc_size: u64,
    pub(crate) inodes: u64,
    pub(crate) first_ino: u32,
    pub(crate) csum: bool,
    pub(crate) gdt_csum: bool,
    pub(crate) seed: u32,
    pub(crate) flex: bool,
    pub(crate) sparse: bool,
    pub(crate) gdt_blocks: u64,
    pub(crate) reserved_gdt: u64,
    pub(crate) itable_blocks: u64,
}

impl Geo {
    /// Derive the geometry; an error means the superblock cannot be used at all.
    pub(crate) fn from_sb(sb: &Superblock, dev_size: u64) -> Result<Geo> {
        Self::check_layout(sb)?;
        let geo = Self::compute(sb);
        geo.validate(sb, dev_size)?;
        Ok(geo)
    }

    /// Layouts the checker does not model, and fields it cannot work without.
    fn check_layout(sb: &Superblock) -> Result<()> {
        let bad = |d: String| Err(Error::corrupt("superblock", 0, d));
        if sb.has_ro_compat(ro_compat::BIGALLOC) {
            return Err(Error::Unsupported(
                "bigalloc file systems are not checked".into(),
            ));
        }
        if sb.has_incompat(incompat::META_BG) {
            return Err(Error::Unsupported(
                "meta_bg file systems are not checked".into(),
            ));
        }
        if sb.rev_level() > 1 {
            return bad(format!(
                "revision {} is newer than this checker",
                sb.rev_level()
            ));
        }
        let (bs, first_data) = (sb.block_size(), sb.first_data_block());
        if first_data != u32::from(bs == 1024) {
            return bad(format!(
                "first data block {first_data} invalid for {bs}-byte blocks"
            ));
        }
        let (bpg, ipg) = (sb.blocks_per_group(), sb.inodes_per_group());
        if bpg % 8 != 0 || ipg % 8 != 0 {
            return bad(format!(
                "blocks ({bpg}) or inodes ({ipg}) per group not a multiple of 8"
            ));
        }
        Ok(())
    }

    /// Derive the geometry (every input is bounded by `Superblock::decode`).
    fn compute(sb: &Superblock) -> Geo {
        let bs = u64::from(sb.block_size());
        let old = sb.rev_level() == 0;
        let isz = if old { 128 } else { u64::from(sb.inode_size()) };
        let ipg = u64::from(sb.inodes_per_group());
        let groups = sb.group_count();
        let desc_size = u64::from(sb.desc_size());
        let resize = sb.has_compat(compat::RESIZE_INODE);
        Geo {
            bs,
            blocks: sb.blocks_count(),
            first_data: u64::from(sb.first_data_block()),
            bpg: u64::from(sb.blocks_per_group()),
            ipg,
            isz,
            groups,
            desc_size,
            inodes: u64::from(sb.inodes_count()),
            first_ino: if old { 11 } else { sb.first_ino() },
            csum: sb.metadata_csum(),
            gdt_csum: sb.has_ro_compat(ro_compat::GDT_CSUM),
            seed: sb.csum_seed(),
            flex: sb.has_incompat(incompat::FLEX_BG),
            sparse: sb.has_ro_compat(ro_compat::SPARSE_SUPER),
            gdt_blocks: (u64::from(groups) * desc_size).div_ceil(bs),
            reserved_gdt: if resize {
                u64::from(sb.reserved_gdt_blocks())
            } else {
                0
            },
            itable_blocks: (ipg * isz).div_ceil(bs),
        }
    }

    /// Refuse a geometry the checker cannot walk safely.
    fn validate(&self, sb: &Superblock, dev_size: u64) -> Result<()> {
        let bad = |d: String| Err(Error::corrupt("superblock", 0, d));
        if self.groups == 0 || u64::from(self.first_ino) > self.inodes {
            let (g, f, n) = (self.groups, self.first_ino, self.inodes);
            return bad(format!("{g} groups, first inode {f} of {n}"));
        }
        let base = 1 + self.gdt_blocks + self.reserved_gdt;
        if base >= self.bpg || self.first_data + base > sb.blocks_count() {
            let (d, r) = (self.gdt_blocks, self.reserved_gdt);
            return bad(format!(
                "{d} descriptor + {r} reserved blocks do not fit a group"
            ));
        }
        if self.inodes.saturating_mul(self.isz) > dev_size {
            let (n, s) = (self.inodes, self.isz);
            return bad(format!("inode tables ({n} x {s} bytes) exceed the device"));
        }
        Ok(())
    }

    /// First block of group `g`.
    pub(crate) fn group_first(&self, g: u32) -> u64 {
        self.first_data + u64::from(g) * self.bpg
    }

    /// Blocks in group `g` (the last group may be short).
    pub(crate) fn group_len(&self, g: u32) -> u64 {
        self.bpg
            .min(self.blocks.saturating_sub(self.group_first(g)))
    }

    /// Whether group descriptors carry checksums (and the UNINIT flags mean something).
    pub(crate) fn desc_csum(&self) -> bool {
        self.csum || self.gdt_csum
    }

    /// Whether `[start, start+len)` lies inside the file system.
    pub(crate) fn in_fs(&self, start: u64, len: u64) -> bool {
        start >= self.first_data && start.checked_add(len).is_some_and(|e| e <= self.blocks)
    }

    /// Superblock copy, descriptor blocks and reserved GDT blocks of group `g`.
    pub(crate) fn base_meta(&self, g: u32) -> Vec<(u64, u64, Owner)> {
        if !group::has_super(g, self.sparse) {
            return Vec::new();
        }
        let s = self.group_first(g);
        let mut v = vec![
            (s, 1, Owner::Super(g)),
            (s + 1, self.gdt_blocks, Owner::Gdt(g)),
        ];
        if self.reserved_gdt > 0 {
            v.push((
                s + 1 + self.gdt_blocks,
                self.reserved_gdt,
                Owner::ReservedGdt(g),
            ));
        }
        v
    }

    /// Groups whose superblock backup (and reserved GDT copy) exists, group 0 excluded.
    fn backup_groups(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.groups).filter(|&g| group::has_super(g, self.sparse))
    }
}

/// Read the primary superblock. A checksum mismatch is returned as a problem; bad magic or
/// unusable geometry is an error.
pub(crate) fn load_superblock(dev: &dyn BlockDevice) -> Result<(Superblock, Vec<Problem>)> {
    if dev.size() < SB_OFFSET + SB_SIZE as u64 {
        return Err(Error::corrupt(
            "superblock",
            0,
            "device too small for a superblock",
        ));
    }
    let mut sb = Superblock::zeroed();
    dev.read_at(SB_OFFSET, &mut sb.raw[..])?;
    sb.check_magic()?;
    let mut problems = Vec::new();
    if sb.metadata_csum() && sb.checksum() != sb.compute_checksum() {
        problems.push(Problem {
            code: "SB_CHECKSUM",
            message: format!(
                "superblock checksum {:#010x}, computed {:#010x}",
                sb.checksum(),
                sb.compute_checksum()
            ),
        });
    }
    // Validate the geometry on a copy with a good checksum, so a bad checksum alone is a
    // problem to report rather than a reason to stop.
    let mut fixed = sb.clone();
    fixed.update_checksum();
    Superblock::decode(&fixed.raw[..], dev.size())?;
    Ok((sb, problems))
}

/// Read the group descriptor table.
pub(crate) fn read_group_descs(dev: &dyn BlockDevice, geo: &Geo) -> Result<Vec<GroupDesc>> {
    let buf = read_blocks(dev, geo, geo.first_data + 1, geo.gdt_blocks)?;
    let ds = geo.desc_size as usize;
    let mut v = Vec::with_capacity(geo.groups as usize);
    for g in 0..geo.groups as usize {
        let raw = buf.get(g * ds..(g + 1) * ds).unwrap_or(&[]);
        if raw.len() != ds {
            return Err(Error::corrupt(
                "group descriptors",
                1,
                "table shorter than group count",
            ));
        }
        v.push(GroupDesc { raw: raw.to_vec() });
    }
    Ok(v)
}

/// Read `n` blocks from `start`; the range must lie inside the file system.
pub(crate) fn read_blocks(dev: &dyn BlockDevice, geo: &Geo, start: u64, n: u64) -> Result<Vec<u8>> {
    let bytes = n.checked_mul(geo.bs).filter(|&b| b <= 1 << 31);
    let (Some(bytes), true) = (bytes, geo.in_fs(start, n)) else {
        return Err(Error::corrupt(
            "block range",
            start,
            format!("{n} blocks outside the file system"),
        ));
    };
    let mut buf = vec![0u8; bytes as usize];
    dev.read_at(start * geo.bs, &mut buf)?;
    Ok(buf)
}

/// Read single blocks at scattered locations, coalescing neighbours into larger reads.
pub(crate) fn read_scattered(
    dev: &dyn BlockDevice,
    geo: &Geo,
    blocks: &[u64],
) -> Result<Vec<Vec<u8>>> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&i| blocks[i]);
    let mut out = vec![Vec::new(); blocks.len()];
    let mut k = 0;
    while k < order.len() {
        let start = blocks[order[k]];
        let mut j = k + 1;
        while j < order.len()
            && blocks[order[j]] <= blocks[order[j - 1]] + 1
            && blocks[order[j]] - start < 256
        {
            j += 1;
        }
        let n = blocks[order[j - 1]] - start + 1;
        let buf = read_blocks(dev, geo, start, n)?;
        for &i in &order[k..j] {
            let off = ((blocks[i] - start) * geo.bs) as usize;
            out[i] = buf[off..off + geo.bs as usize].to_vec();
        }
        k = j;
    }
    Ok(out)
}

/// The block bitmap the kernel assumes for a BLOCK_UNINIT group (`ext4_init_block_bitmap`):
/// only the group's superblock copy, descriptors and its own bitmaps and table are used.
pub(crate) fn uninit_block_bitmap(geo: &Geo, g: u32, d: &GroupDesc) -> Vec<u8> {
    let mut map = vec![0u8; geo.bs as usize];
    let first = geo.group_first(g);
    let len = geo.group_len(g);
    let mut mark = |start: u64, n: u64| {
        for b in start..start.saturating_add(n) {
            if b >= first && b - first < len {
                crate::disk::set_bit(&mut map, (b - first) as usize);
            }
        }
    };
    for (s, n, _) in geo.base_meta(g) {
        mark(s, n);
    }
    mark(d.block_bitmap(), 1);
    mark(d.inode_bitmap(), 1);
    mark(d.inode_table(), geo.itable_blocks);
    map
}

/// The uninit_bg (gdt_csum) descriptor checksum: crc16 over uuid, group and descriptor.
fn gdt_crc16(uuid: &[u8], g: u32, raw: &[u8]) -> u16 {
    fn crc16(mut crc: u16, data: &[u8]) -> u16 {
        for &b in data {
            crc ^= u16::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xA001
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }
    let mut c = crc16(0xFFFF, uuid);
    c = crc16(c, &g.to_le_bytes());
    c = crc16(c, &raw[..0x1E]);
    if raw.len() > 0x20 {
        c = crc16(c, &raw[0x20..]);
    }
    c
}

// ---------------------------------------------------------------------------------------
// Block ownership.
// ---------------------------------------------------------------------------------------

/// Who claims a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    Super(u32),
    Gdt(u32),
    ReservedGdt(u32),
    BlockBitmap(u32),
    InodeBitmap(u32),
    InodeTable(u32),
    Inode(u32),
    Xattr(u32),
}

impl Owner {
    fn is_meta(self) -> bool {
        !matches!(self, Owner::Inode(_) | Owner::Xattr(_))
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Super(g) => write!(f, "superblock of group {g}"),
            Owner::Gdt(g) => write!(f, "group descriptors in group {g}"),
            Owner::ReservedGdt(g) => write!(f, "reserved GDT blocks of group {g}"),
            Owner::BlockBitmap(g) => write!(f, "block bitmap of group {g}"),
            Owner::InodeBitmap(g) => write!(f, "inode bitmap of group {g}"),
            Owner::InodeTable(g) => write!(f, "inode table of group {g}"),
            Owner::Inode(i) => write!(f, "inode {i}"),
            Owner::Xattr(i) => write!(f, "xattr block of inode {i}"),
        }
    }
}

/// A bitmap of every block in the file system plus a log of who claimed what, so blocks
/// claimed twice can be traced back to both owners afterwards (like e2fsck pass 1B).
struct Claims {
    bits: Vec<u64>,
    log: Vec<(u64, u64, Owner)>,
    dups: Vec<usize>,
    max_len: u64,
}

impl Claims {
    fn new(blocks: u64) -> Claims {
        Claims {
            bits: vec![0; blocks.div_ceil(64) as usize],
            log: Vec::new(),
            dups: Vec::new(),
            max_len: 0,
        }
    }

    /// Mark `[start, start+len)` (inside the fs) used by `owner`; returns how many of those
    /// blocks were already claimed.
    fn claim(&mut self, start: u64, len: u64, owner: Owner) -> u64 {
        let end = start.saturating_add(len);
        let mut b = start;
        let mut conflicts = 0u64;
        while b < end {
            let bit = b % 64;
            let n = (64 - bit).min(end - b);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            if let Some(w) = self.bits.get_mut((b / 64) as usize) {
                conflicts += u64::from((*w & mask).count_ones());
                *w |= mask;
            }
            b += n;
        }
        self.max_len = self.max_len.max(len);
        if conflicts > 0 {
            self.dups.push(self.log.len());
        }
        self.log.push((start, len, owner));
        conflicts
    }

    fn is_used(&self, b: u64) -> bool {
        self.bits
            .get((b / 64) as usize)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    fn count(&self) -> u64 {
        self.bits.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// For every owner whose claims hit already-claimed blocks: what it shares and with
    /// whom (like e2fsck pass 1B). Bounded in steps and in owners listed; the flag says
    /// whether the step budget ran out.
    fn resolve(&self) -> (Vec<(Owner, Shared)>, bool) {
        let mut order: Vec<usize> = (0..self.log.len()).collect();
        order.sort_by_key(|&i| self.log[i].0);
        let starts: Vec<u64> = order.iter().map(|&i| self.log[i].0).collect();
        let mut by_owner: HashMap<Owner, Shared> = HashMap::new();
        let mut steps = 0u64;
        for &d in self.dups.iter().take(MAX_DUP_CLAIMS) {
            let (ds, dl, downer) = self.log[d];
            let de = ds + dl;
            let lo = starts.partition_point(|&s| s + self.max_len <= ds);
            for &i in order[lo..].iter().take_while(|&&i| self.log[i].0 < de) {
                steps += 1;
                if steps > MAX_RESOLVE_STEPS {
                    return (Self::sorted(by_owner), true);
                }
                let (s, l, owner) = self.log[i];
                let (a, b) = (s.max(ds), (s + l).min(de));
                if i >= d || a >= b {
                    continue;
                }
                by_owner
                    .entry(downer)
                    .or_insert_with(|| Shared::at(a))
                    .add(owner, a, b - a);
            }
        }
        (Self::sorted(by_owner), false)
    }

    fn sorted(m: HashMap<Owner, Shared>) -> Vec<(Owner, Shared)> {
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|(o, _)| *o);
        v
    }
}

/// Blocks one owner shares with earlier claimants.
struct Shared {
    first: u64,
    blocks: u64,
    others: Vec<Owner>,
    more: u64,
}

impl Shared {
    fn at(first: u64) -> Shared {
        Shared {
            first,
            blocks: 0,
            others: Vec::new(),
            more: 0,
        }
    }
    fn add(&mut self, owner: Owner, first: u64, n: u64) {
        self.first = self.first.min(first);
        self.blocks += n;
        if !self.others.contains(&owner) {
            if self.others.len() < MAX_OWNERS_LISTED {
                self.others.push(owner);
            } else {
                self.more += 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Checker state.
// ---------------------------------------------------------------------------------------

/// An on-disk bitmap as the checker sees it.
enum Bitmap {
    /// The group is UNINIT: the bitmap is implied, not stored.
    Uninit,
    /// Its location is invalid: it cannot be compared.
    Unreadable,
    /// The bitmap block as read.
    Loaded(Vec<u8>),
}

/// A group descriptor and what the checker learnt about it.
struct GroupInfo {
    desc: GroupDesc,
    /// Flags as they count (UNINIT flags only mean something with descriptor checksums).
    flags: u16,
    bb_ok: bool,
    ib_ok: bool,
    it_ok: bool,
    ibitmap: Bitmap,
}

/// A run of mapped blocks: logical `lblk..lblk+len` at physical `pblk..`.
#[derive(Clone, Copy, Debug)]
struct Run {
    lblk: u64,
    pblk: u64,
    len: u64,
}

/// What walking one inode's block map found.
#[derive(Default)]
struct Walk {
    ino: u32,
    seed: u32,
    collect: bool,
    /// Data and tree blocks, for i_blocks.
    blocks: u64,
    last_lblk: Option<u64>,
    last_init: Option<u64>,
    runs: Vec<Run>,
    mapped: u64,
    bad: u32,
    aborted: bool,
    /// Runs that overlapped blocks already claimed.
    conflicts: u32,
}

/// A directory found in pass 1, checked in pass 2.
struct DirRec {
    ino: u32,
    seed: u32,
    indexed: bool,
    runs: Vec<Run>,
}

/// References to one xattr block.
struct XattrRef {
    refs: u64,
    stored: u32,
    valid: bool,
    first: u32,
}

/// The htree of one directory: which logical blocks are index nodes and the hash range
/// each leaf must respect.
struct Htree {
    version: u8,
    nodes: HashSet<u64>,
    leaves: HashMap<u64, (u32, u32)>,
}

/// The "." or ".." entry at the start of a directory.
struct Dot<'b> {
    /// 0 for ".", 1 for "..".
    i: usize,
    ino: u32,
    name: &'b [u8],
    /// The byte after the expected name, which must be NUL.
    pad: u8,
    ft: u8,
}

/// Per-directory state while its blocks are parsed.
#[derive(Default)]
struct DirScan {
    names: HashSet<Vec<u8>>,
    dot: bool,
    dotdot: bool,
}

struct Checker<'a> {
    dev: &'a dyn BlockDevice,
    sb: Superblock,
    geo: Geo,
    out: Sink,
    verbose: bool,
    groups: Vec<GroupInfo>,
    claims: Claims,
    kind: Vec<u8>,
    links: Vec<u16>,
    refs: Vec<u16>,
    special: HashSet<u32>,
    dirs: Vec<DirRec>,
    parent: HashMap<u32, u32>,
    dotdot: HashMap<u32, u32>,
    xattrs: HashMap<u64, XattrRef>,
    /// Blocks listed by the bad blocks inode.
    bad_blocks: Vec<Run>,
    /// Whether dtimes below the inode count are taken as orphan links (e2fsck's
    /// low_dtime_check: off when the superblock's own times are that small).
    low_dtime_check: bool,
    /// Directory blocks pass 2 may still parse, and whether it ran out.
    dir_budget: u64,
    dir_budget_spent: bool,
}

/// Check the ext4 image on `dev` without modifying it.
///
/// Returns `Err` only for operational failures: the device cannot be read, the superblock
/// is unusable (bad magic, impossible geometry) or the image uses a feature the checker does
/// not understand. Every inconsistency is a [`Problem`] in the report.
///
/// ```no_run
/// use lanefs::{fsck, FileDevice};
/// let dev = FileDevice::open(std::path::Path::new("fs.img"), true)?;
/// let report = fsck::check(&dev, &fsck::FsckOptions::default())?;
/// for p in &report.problems {
///     println!("{p}");
/// }
/// std::process::exit(report.exit_code());
/// # Ok::<(), lanefs::Error>(())
/// ```
pub fn check(dev: &dyn BlockDevice, opts: &FsckOptions) -> Result<FsckReport> {
    let (sb, sb_problems) = load_superblock(dev)?;
    let geo = Geo::from_sb(&sb, dev.size())?;
    check_supported(&sb)?;
    let mut c = Checker::new(dev, sb, geo, opts.verbose);
    for p in sb_problems {
        c.out.add(p.code, p.message);
    }
    c.timed("superblock", |c| {
        c.pass_superblock();
        Ok(())
    })?;
    c.timed("group descriptors", Checker::pass_groups)?;
    c.timed("inodes", Checker::pass_inodes)?;
    c.timed("directories", Checker::pass_directories)?;
    c.timed("connectivity", |c| {
        c.pass_connectivity();
        c.pass_links();
        Ok(())
    })?;
    c.timed("bitmaps", Checker::pass_bitmaps)?;
    Ok(c.finish())
}

/// Refuse features whose on-disk structures the checker does not parse.
fn check_supported(sb: &Superblock) -> Result<()> {
    let unsupported_incompat = incompat::COMPRESSION
        | incompat::JOURNAL_DEV
        | incompat::MMP
        | incompat::EA_INODE
        | incompat::DIRDATA
        | incompat::INLINE_DATA
        | incompat::ENCRYPT
        | incompat::CASEFOLD;
    let bad = sb.feature_incompat() & unsupported_incompat;
    if bad != 0 {
        let names = crate::disk::superblock::feature_names(bad, incompat::NAMES);
        return Err(Error::Unsupported(format!(
            "fsck does not check features: {names}"
        )));
    }
    if sb.has_compat(COMPAT_SPARSE_SUPER2) {
        return Err(Error::Unsupported(
            "fsck does not check sparse_super2".into(),
        ));
    }
    Ok(())
}

fn mode_ft(mode: u16) -> Option<u8> {
    match mode & 0xF000 {
        0x8000 => Some(FT_REG),
        0x4000 => Some(FT_DIR),
        0x2000 => Some(FT_CHR),
        0x6000 => Some(FT_BLK),
        0x1000 => Some(FT_FIFO),
        0xC000 => Some(FT_SOCK),
        0xA000 => Some(FT_LNK),
        _ => None,
    }
}

fn ft_name(ft: u8) -> &'static str {
    match ft {
        FT_REG => "regular file",
        FT_DIR => "directory",
        FT_CHR => "character device",
        FT_BLK => "block device",
        FT_FIFO => "fifo",
        FT_SOCK => "socket",
        FT_LNK => "symlink",
        _ => "inode",
    }
}

/// Printable form of a directory entry name.
fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// Format `[start, end)` ranges with a sign, e.g. "+100-103 -7".
fn fmt_ranges(ranges: &[(u64, u64, bool)], total: usize) -> String {
    let mut s: Vec<String> = ranges
        .iter()
        .map(|&(a, b, plus)| {
            let sign = if plus { '+' } else { '-' };
            if b - a == 1 {
                format!("{sign}{a}")
            } else {
                format!("{sign}{a}-{}", b - 1)
            }
        })
        .collect();
    if total > ranges.len() {
        s.push(format!("and {} more ranges", total - ranges.len()));
    }
    s.join(" ")
}

/// Differences between `computed` and `ondisk` over the first `n` bits, as ranges offset by
/// `base`: `+` used but marked free, `-` marked used but free.
fn diff_bits(
    computed: &[u8],
    ondisk: &[u8],
    n: usize,
    base: u64,
) -> (Vec<(u64, u64, bool)>, usize) {
    let mut ranges = Vec::new();
    let mut total = 0;
    let mut cur: Option<(u64, u64, bool)> = None;
    let mut i = 0;
    while i < n {
        if i % 8 == 0 && i + 8 <= n && computed.get(i / 8) == ondisk.get(i / 8) {
            i += 8;
            continue;
        }
        let (c, d) = (test_bit(computed, i), test_bit(ondisk, i));
        let at = base + i as u64;
        match cur {
            Some((a, b, plus)) if c != d && b == at && plus == c => cur = Some((a, b + 1, plus)),
            _ => {
                if let Some(r) = cur.take() {
                    total += 1;
                    if ranges.len() < MAX_RANGES {
                        ranges.push(r);
                    }
                }
                if c != d {
                    cur = Some((at, at + 1, c));
                }
            }
        }
        i += 1;
    }
    if let Some(r) = cur {
        total += 1;
        if ranges.len() < MAX_RANGES {
            ranges.push(r);
        }
    }
    (ranges, total)
}

impl<'a> Checker<'a> {
    fn new(dev: &'a dyn BlockDevice, sb: Superblock, geo: Geo, verbose: bool) -> Checker<'a> {
        let n = geo.inodes as usize + 1;
        let claims = Claims::new(geo.blocks);
        let geo_blocks = geo.blocks;
        let busted = |t: u32| t != 0 && t < sb.inodes_count();
        let low_dtime_check = !(busted(sb.wtime()) || busted(sb.mtime()) || busted(sb.mkfs_time()));
        Checker {
            dev,
            sb,
            geo,
            out: Sink::default(),
            verbose,
            groups: Vec::new(),
            claims,
            kind: vec![K_FREE; n],
            links: vec![0; n],
            refs: vec![0; n],
            special: HashSet::new(),
            dirs: Vec::new(),
            parent: HashMap::new(),
            dotdot: HashMap::new(),
            xattrs: HashMap::new(),
            bad_blocks: Vec::new(),
            low_dtime_check,
            dir_budget: 2 * geo_blocks,
            dir_budget_spent: false,
        }
    }

    fn timed(&mut self, name: &str, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        let t = Instant::now();
        f(self)?;
        if self.verbose {
            self.out.note(
                "TIMING",
                format!("pass {name}: {:.3} s", t.elapsed().as_secs_f64()),
            );
        }
        Ok(())
    }

    fn finish(self) -> FsckReport {
        let mut r = FsckReport {
            problems: self.out.problems,
            problems_omitted: self.out.omitted,
            notes: self.out.notes,
            inodes_total: self.geo.inodes,
            blocks_total: self.geo.blocks,
            blocks_used: self.claims.count(),
            groups: self.geo.groups,
            ..FsckReport::default()
        };
        for &k in self.kind.iter().skip(1) {
            match k {
                K_FREE => continue,
                FT_REG => r.files += 1,
                FT_DIR => r.dirs += 1,
                FT_LNK => r.symlinks += 1,
                FT_CHR | FT_BLK | FT_FIFO | FT_SOCK => r.special_files += 1,
                _ => {}
            }
            r.inodes_used += 1;
        }
        r
    }

    fn read_block(&self, b: u64) -> Result<Vec<u8>> {
        read_blocks(self.dev, &self.geo, b, 1)
    }

    fn inode_in_use(&self, ino: u64) -> bool {
        self.kind.get(ino as usize).is_some_and(|&k| k != K_FREE)
    }

    // -----------------------------------------------------------------------------------
    // Pass 0: superblock.
    // -----------------------------------------------------------------------------------

    fn pass_superblock(&mut self) {
        self.check_features();
        let mut p = self.superblock_field_problems();
        p.extend(self.superblock_geometry_problems());
        self.check_journal_fields(&mut p);
        for (code, msg) in p {
            self.out.add(code, msg);
        }
        self.superblock_notes();
        self.collect_special_inodes();
    }

    /// Flags and fields whose values are simply invalid.
    fn superblock_field_problems(&self) -> Vec<(&'static str, String)> {
        let sb = &self.sb;
        let mut p: Vec<(&'static str, String)> = Vec::new();
        if sb.has_incompat(incompat::RECOVER) {
            let msg = "superblock has needs_recovery set: the journal must be replayed";
            p.push(("JOURNAL_NEEDS_RECOVERY", msg.into()));
        }
        if sb.metadata_csum() && sb.raw[SB_CHECKSUM_TYPE] != 1 {
            let msg = format!("checksum type {} is not crc32c", sb.raw[SB_CHECKSUM_TYPE]);
            p.push(("SB_CHECKSUM_TYPE", msg));
        }
        if sb.metadata_csum() && sb.has_ro_compat(ro_compat::GDT_CSUM) {
            p.push((
                "SB_FEATURES",
                "both metadata_csum and uninit_bg are set".into(),
            ));
        }
        let orphan_ino = le32(&sb.raw[..], SB_ORPHAN_FILE_INUM);
        let names_inode =
            orphan_ino >= self.geo.first_ino && u64::from(orphan_ino) <= self.geo.inodes;
        if sb.has_compat(COMPAT_ORPHAN_FILE) && !names_inode {
            let msg = "orphan_file feature is set but the orphan file inode number is invalid";
            p.push(("SB_ORPHAN_FILE", msg.into()));
        }
        if sb.def_hash_version() > 5 {
            let msg = format!("default hash version {} unknown", sb.def_hash_version());
            p.push(("SB_GEOMETRY", msg));
        }
        p
    }

    /// Geometry fields e2fsck validates beyond what the checker itself needs.
    fn superblock_geometry_problems(&self) -> Vec<(&'static str, String)> {
        let sb = &self.sb;
        let mut bad = Vec::new();
        if sb.r_blocks_count() > sb.blocks_count() {
            bad.push(format!(
                "reserved blocks {} exceed block count",
                sb.r_blocks_count()
            ));
        }
        if sb.log_cluster_size() != sb.log_block_size() {
            let (c, b) = (sb.log_cluster_size(), sb.log_block_size());
            bad.push(format!(
                "cluster size log {c} != block size log {b} without bigalloc"
            ));
        }
        let ds = sb.desc_size_raw();
        if ds > 1024 || (ds != 0 && !ds.is_power_of_two()) {
            bad.push(format!("group descriptor size field {ds} invalid"));
        }
        let rgdt = u64::from(sb.reserved_gdt_blocks());
        if rgdt > self.geo.bs / 4 {
            bad.push(format!(
                "reserved GDT blocks {rgdt} exceed {}",
                self.geo.bs / 4
            ));
        }
        if sb.clusters_per_group() != sb.blocks_per_group() {
            let (c, b) = (sb.clusters_per_group(), sb.blocks_per_group());
            bad.push(format!("clusters per group {c} != blocks per group {b}"));
        }
        if sb.log_groups_per_flex() > 31 {
            bad.push(format!(
                "log groups per flex {} too large",
                sb.log_groups_per_flex()
            ));
        }
        bad.into_iter().map(|m| ("SB_GEOMETRY", m)).collect()
    }

    /// Findings e2fsck does not count as errors.
    fn superblock_notes(&mut self) {
        let sb = &self.sb;
        let mut n: Vec<(&'static str, String)> = Vec::new();
        // e2fsck processes orphans as part of recovery and does not count a non-empty list
        // as an error; what the orphans leave behind (zero links, low dtimes, bitmap
        // differences) is reported by the inode and bitmap checks.
        if sb.last_orphan() != 0 {
            n.push((
                "ORPHAN_LIST",
                format!("orphan list is not empty (head inode {})", sb.last_orphan()),
            ));
        }
        if sb.has_ro_compat(ro_compat::ORPHAN_PRESENT) {
            let msg = "orphan_present is set: the orphan file holds inodes to clean up";
            n.push(("ORPHAN_LIST", msg.into()));
        }
        if sb.state() & STATE_ERROR != 0 {
            n.push((
                "SB_ERROR_STATE",
                "superblock records that the kernel found errors".into(),
            ));
        }
        if sb.state() & STATE_VALID == 0 {
            n.push((
                "SB_NOT_CLEAN",
                "file system was not cleanly unmounted".into(),
            ));
        }
        for (code, msg) in n {
            self.out.note(code, msg);
        }
    }

    fn check_features(&mut self) {
        let known = |names: &[(u32, &str)]| names.iter().fold(0u32, |a, (b, _)| a | b);
        let inc = self.sb.feature_incompat() & !known(incompat::NAMES);
        let ro = self.sb.feature_ro_compat() & !known(ro_compat::NAMES);
        if inc != 0 {
            let n = crate::disk::superblock::feature_names(inc, &[]);
            self.out.add(
                "SB_UNKNOWN_FEATURE",
                format!("unknown incompat features: {n}"),
            );
        }
        if ro != 0 {
            let n = crate::disk::superblock::feature_names(ro, &[]);
            self.out.add(
                "SB_UNKNOWN_FEATURE",
                format!("unknown ro_compat features: {n}"),
            );
        }
        // e2fsck also refuses COMPAT bits it does not know (and lazy_bg, exclude_inode,
        // exclude_bitmap, which it never supported).
        let cp = self.sb.feature_compat() & !COMPAT_KNOWN;
        if cp != 0 {
            let n =
                crate::disk::superblock::feature_names(cp, crate::disk::superblock::compat::NAMES);
            self.out.add(
                "SB_UNKNOWN_FEATURE",
                format!("unsupported compat features: {n}"),
            );
        }
    }

    fn check_journal_fields(&self, p: &mut Vec<(&'static str, String)>) {
        let sb = &self.sb;
        let inum = sb.journal_inum();
        if sb.has_compat(compat::HAS_JOURNAL) {
            // e2fsck takes a set journal UUID to mean an external journal.
            let external = sb.raw[0xD0..0xE0].iter().any(|&b| b != 0);
            if external && inum != 0 {
                p.push((
                    "JOURNAL_BAD_INODE",
                    format!("superblock names both journal inode {inum} and an external journal"),
                ));
            } else if inum != JOURNAL_INO && !external {
                p.push((
                    "JOURNAL_BAD_INODE",
                    format!("journal inode number is {inum}, expected {JOURNAL_INO}"),
                ));
            }
        } else if inum != 0 {
            p.push((
                "JOURNAL_BAD_INODE",
                format!("no has_journal feature but journal inode {inum} set"),
            ));
        }
    }

    /// Inodes that hold file-system data and are never linked from a directory.
    fn collect_special_inodes(&mut self) {
        let sb = &self.sb;
        let mut v = Vec::new();
        if sb.has_compat(compat::HAS_JOURNAL) && sb.journal_inum() != 0 {
            v.push(sb.journal_inum());
        }
        if sb.has_ro_compat(ro_compat::QUOTA) {
            for off in [SB_USR_QUOTA_INUM, SB_GRP_QUOTA_INUM, SB_PRJ_QUOTA_INUM] {
                v.push(le32(&sb.raw[..], off));
            }
        }
        if sb.has_compat(COMPAT_ORPHAN_FILE) {
            v.push(le32(&sb.raw[..], SB_ORPHAN_FILE_INUM));
        }
        for ino in v {
            if ino != 0 && u64::from(ino) <= self.geo.inodes && ino != ROOT_INO {
                self.special.insert(ino);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Pass 0: group descriptors and fixed metadata.
    // -----------------------------------------------------------------------------------

    fn pass_groups(&mut self) -> Result<()> {
        let descs = read_group_descs(self.dev, &self.geo)?;
        for (g, desc) in descs.into_iter().enumerate() {
            let info = self.check_desc(g as u32, desc);
            self.groups.push(info);
        }
        self.claim_fixed_metadata();
        Ok(())
    }

    fn check_desc(&mut self, g: u32, desc: GroupDesc) -> GroupInfo {
        self.check_desc_csum(g, &desc);
        let raw_flags = desc.flags();
        let uninit = BG_INODE_UNINIT | BG_BLOCK_UNINIT;
        let flags = if self.geo.desc_csum() {
            raw_flags
        } else {
            raw_flags & !uninit
        };
        // e2fsck offers to fix these two but does not count them as errors.
        if !self.geo.desc_csum() && raw_flags & uninit != 0 {
            self.out.note(
                "GROUP_DESC_FLAGS",
                format!("group {g}: UNINIT flags {raw_flags:#x} without descriptor checksums"),
            );
        }
        if g + 1 == self.geo.groups && flags & BG_BLOCK_UNINIT != 0 {
            self.out.note(
                "GROUP_DESC_FLAGS",
                format!("group {g}: last group has BLOCK_UNINIT set"),
            );
        }
        self.check_desc_counts(g, &desc);
        let bb_ok = self.check_location(g, "block bitmap", desc.block_bitmap(), 1);
        let ib_ok = self.check_location(g, "inode bitmap", desc.inode_bitmap(), 1);
        let it_ok =
            self.check_location(g, "inode table", desc.inode_table(), self.geo.itable_blocks);
        GroupInfo {
            desc,
            flags,
            bb_ok,
            ib_ok,
            it_ok,
            ibitmap: Bitmap::Unreadable,
        }
    }

    fn check_desc_csum(&mut self, g: u32, d: &GroupDesc) {
        let want = if self.geo.csum {
            d.compute_checksum(self.geo.seed, g)
        } else if self.geo.gdt_csum {
            gdt_crc16(&self.sb.uuid(), g, &d.raw)
        } else {
            return;
        };
        if d.checksum() != want {
            self.out.add(
                "GROUP_DESC_CHECKSUM",
                format!(
                    "group {g}: descriptor checksum {:#06x}, computed {want:#06x}",
                    d.checksum()
                ),
            );
        }
    }

    fn check_desc_counts(&mut self, g: u32, d: &GroupDesc) {
        let (ipg, len) = (self.geo.ipg, self.geo.group_len(g));
        let mut bad = Vec::new();
        if u64::from(d.free_blocks()) > len {
            bad.push(format!("free blocks {} > {len} blocks", d.free_blocks()));
        }
        if u64::from(d.free_inodes()) > ipg {
            bad.push(format!("free inodes {} > {ipg} inodes", d.free_inodes()));
        }
        if u64::from(d.used_dirs()) > ipg {
            bad.push(format!("directories {} > {ipg} inodes", d.used_dirs()));
        }
        if self.geo.desc_csum() && d.itable_unused() > d.free_inodes() {
            bad.push(format!(
                "unused inodes {} > free inodes {}",
                d.itable_unused(),
                d.free_inodes()
            ));
        }
        if !bad.is_empty() {
            self.out.add(
                "GROUP_DESC_COUNTS",
                format!("group {g}: {}", bad.join(", ")),
            );
        }
    }

    /// Whether a bitmap or table at `start` (`n` blocks) lies where it may.
    fn check_location(&mut self, g: u32, what: &str, start: u64, n: u64) -> bool {
        if !self.geo.in_fs(start, n) {
            self.out.add(
                "GROUP_META_RANGE",
                format!(
                    "group {g}: {what} at block {start} ({n} blocks) is outside the file system"
                ),
            );
            return false;
        }
        let first = self.geo.group_first(g);
        let inside = start >= first && start + n <= first + self.geo.group_len(g);
        if !self.geo.flex && !inside {
            self.out.add(
                "GROUP_META_RANGE",
                format!("group {g}: {what} at block {start} is not in its group"),
            );
            return false;
        }
        true
    }

    fn claim_fixed_metadata(&mut self) {
        for g in 0..self.geo.groups {
            for (s, n, owner) in self.geo.base_meta(g) {
                if self.geo.in_fs(s, n) {
                    self.claims.claim(s, n, owner);
                }
            }
        }
        for g in 0..self.geo.groups as usize {
            let gi = &self.groups[g];
            let (d, g32) = (&gi.desc, g as u32);
            let mut v = Vec::new();
            if gi.bb_ok {
                v.push((d.block_bitmap(), 1, Owner::BlockBitmap(g32)));
            }
            if gi.ib_ok {
                v.push((d.inode_bitmap(), 1, Owner::InodeBitmap(g32)));
            }
            if gi.it_ok {
                v.push((
                    d.inode_table(),
                    self.geo.itable_blocks,
                    Owner::InodeTable(g32),
                ));
            }
            for (s, n, owner) in v {
                self.claims.claim(s, n, owner);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Pass 1: inodes.
    // -----------------------------------------------------------------------------------

    fn pass_inodes(&mut self) -> Result<()> {
        self.load_inode_bitmaps()?;
        for g in 0..self.geo.groups {
            self.scan_group(g)?;
        }
        self.report_dups();
        self.check_xattr_refs();
        self.check_orphan_chain()?;
        self.check_stray_inode_numbers();
        self.check_bad_blocks_in_tables();
        Ok(())
    }

    /// Quota and orphan-file inode numbers left in the superblock without their feature:
    /// e2fsck still treats the inode they name as special, which breaks it if it is in use.
    fn check_stray_inode_numbers(&mut self) {
        let mut v = Vec::new();
        if !self.sb.has_ro_compat(ro_compat::QUOTA) {
            // (A stray project quota number is accepted by e2fsck.)
            v.push(("SB_QUOTA_INODE", le32(&self.sb.raw[..], SB_USR_QUOTA_INUM)));
            v.push(("SB_QUOTA_INODE", le32(&self.sb.raw[..], SB_GRP_QUOTA_INUM)));
        }
        if !self.sb.has_compat(COMPAT_ORPHAN_FILE) {
            v.push((
                "SB_ORPHAN_FILE",
                le32(&self.sb.raw[..], SB_ORPHAN_FILE_INUM),
            ));
        }
        for (code, ino) in v {
            if ino >= self.geo.first_ino && self.inode_in_use(u64::from(ino)) {
                let msg = format!(
                    "superblock names in-use inode {ino} as a special inode without the feature"
                );
                self.out.add(code, msg);
            }
        }
    }

    /// Blocks the bad blocks inode lists inside an inode table block holding in-use inodes.
    fn check_bad_blocks_in_tables(&mut self) {
        let runs = std::mem::take(&mut self.bad_blocks);
        for g in 0..self.geo.groups {
            let gi = &self.groups[g as usize];
            if !gi.it_ok {
                continue;
            }
            // e2fsck takes every inode in such a block (below the watermark) as in use.
            let it = gi.desc.inode_table();
            let n = (self.initialized_inodes(g) * self.geo.isz).div_ceil(self.geo.bs);
            let hit = runs.iter().find(|r| r.pblk < it + n && it < r.pblk + r.len);
            if let Some(r) = hit {
                let msg = format!(
                    "group {g}: bad block {} lies in the inode table",
                    r.pblk.max(it)
                );
                self.out.add("BADBLOCK_IN_ITABLE", msg);
            }
        }
    }

    /// Read every initialized inode bitmap (in coalesced reads) and verify its checksum.
    fn load_inode_bitmaps(&mut self) -> Result<()> {
        let mut want = Vec::new();
        for (g, gi) in self.groups.iter_mut().enumerate() {
            if gi.flags & BG_INODE_UNINIT != 0 {
                gi.ibitmap = Bitmap::Uninit;
            } else if gi.ib_ok {
                want.push((g, gi.desc.inode_bitmap()));
            }
        }
        for chunk in want.chunks(1024) {
            let blocks: Vec<u64> = chunk.iter().map(|&(_, b)| b).collect();
            let maps = read_scattered(self.dev, &self.geo, &blocks)?;
            for (&(g, _), map) in chunk.iter().zip(maps) {
                self.verify_bitmap_csum(g as u32, &map, false);
                self.check_bitmap_padding(g as u32, &map, false);
                self.groups[g].ibitmap = Bitmap::Loaded(map);
            }
        }
        Ok(())
    }

    /// The bytes of a bitmap block past the group's bits must be 0xff (e2fsck 1.45+ checks
    /// this), and in the last group so must the bits of blocks past the end of the fs.
    fn check_bitmap_padding(&mut self, g: u32, map: &[u8], block: bool) {
        let bits = if block { self.geo.bpg } else { self.geo.ipg } as usize;
        let tail_ok = map
            .get(bits / 8..)
            .is_some_and(|t| t.iter().all(|&b| b == 0xFF));
        let len = if block {
            self.geo.group_len(g) as usize
        } else {
            bits
        };
        let end_ok = (len..bits).all(|i| test_bit(map, i));
        if !tail_ok || !end_ok {
            let (code, what) = if block {
                ("BLOCK_BITMAP_PADDING", "block")
            } else {
                ("INODE_BITMAP_PADDING", "inode")
            };
            self.out.add(
                code,
                format!("group {g}: padding at the end of the {what} bitmap is not set"),
            );
        }
    }

    fn verify_bitmap_csum(&mut self, g: u32, map: &[u8], block: bool) {
        if !self.geo.csum {
            return;
        }
        let d = &self.groups[g as usize].desc;
        let wide = self.geo.desc_size >= 64;
        let (bytes, stored, what, code) = if block {
            (
                self.geo.bpg / 8,
                d.block_bitmap_csum(),
                "block",
                "BLOCK_BITMAP_CSUM",
            )
        } else {
            (
                self.geo.ipg / 8,
                d.inode_bitmap_csum(),
                "inode",
                "INODE_BITMAP_CSUM",
            )
        };
        let want = group::bitmap_csum(self.geo.seed, map, (bytes as usize).min(map.len()), wide);
        if want != stored {
            let at = if block {
                d.block_bitmap()
            } else {
                d.inode_bitmap()
            };
            self.out.add(code, format!("group {g}: {what} bitmap (block {at}) checksum {stored:#010x}, computed {want:#010x}"));
        }
    }

    /// Inodes of group `g` that the table may hold (the rest are known unused).
    fn initialized_inodes(&self, g: u32) -> u64 {
        let gi = &self.groups[g as usize];
        if !self.geo.desc_csum() {
            self.geo.ipg
        } else if gi.flags & BG_INODE_UNINIT != 0 {
            0
        } else {
            self.geo.ipg - u64::from(gi.desc.itable_unused()).min(self.geo.ipg)
        }
    }

    fn bitmap_bit(&self, g: u32, idx: u64) -> bool {
        match &self.groups[g as usize].ibitmap {
            Bitmap::Loaded(m) => (idx as usize) < m.len() * 8 && test_bit(m, idx as usize),
            _ => false,
        }
    }

    /// Read group `g`'s inode table in large chunks and check each inode in it.
    fn scan_group(&mut self, g: u32) -> Result<()> {
        let n_init = self.initialized_inodes(g);
        let base = u64::from(g) * self.geo.ipg;
        if !self.groups[g as usize].it_ok {
            for i in 0..n_init {
                if self.bitmap_bit(g, i) {
                    self.kind[(base + i + 1) as usize] = K_UNKNOWN;
                }
            }
            return Ok(());
        }
        let table = self.groups[g as usize].desc.inode_table();
        let isz = self.geo.isz;
        let per_chunk = (READ_CHUNK / isz).max(1);
        let mut buf = Vec::new();
        let mut i = 0;
        while i < n_init {
            let n = per_chunk.min(n_init - i);
            buf.resize((n * isz) as usize, 0);
            self.dev.read_at(table * self.geo.bs + i * isz, &mut buf)?;
            for k in 0..n {
                let raw = &buf[(k * isz) as usize..((k + 1) * isz) as usize];
                self.scan_inode((base + i + k + 1) as u32, raw)?;
            }
            i += n;
        }
        Ok(())
    }

    /// Decide whether an inode is in use (as e2fsck: it has links) and check it if so.
    fn scan_inode(&mut self, ino: u32, raw: &[u8]) -> Result<()> {
        let inode = DiskInode::from_bytes(raw);
        self.check_inode_csum(ino, &inode);
        if self.is_low_dtime(&inode) {
            let msg = format!(
                "inode {ino} has dtime {} as if on a (lost) orphan list",
                inode.dtime()
            );
            self.out.add("ORPHAN_DTIME", msg);
        }
        if ino < self.geo.first_ino {
            return self.scan_reserved(ino, &inode);
        }
        if self.special.contains(&ino) {
            return self.check_special(ino, &inode);
        }
        // As e2fsck: an inode is in use when it has links, whatever the bitmap says (pass 5
        // reports the bitmap difference).
        if inode.links() == 0 {
            if inode.dtime() == 0 && inode.mode() != 0 {
                self.out.add(
                    "INODE_ZERO_DTIME",
                    format!("deleted inode {ino} has zero dtime"),
                );
            }
            return Ok(());
        }
        self.check_inode(ino, &inode)
    }

    /// A dtime smaller than the inode count is an orphan-list link, not a time.
    fn is_low_dtime(&self, inode: &DiskInode) -> bool {
        let d = inode.dtime();
        self.low_dtime_check && d != 0 && u64::from(d) < self.geo.inodes
    }

    /// Verify an inode slot's checksum. As e2fsck, every slot read is verified, in use or
    /// not, except one whose first 128 bytes are zero (never written).
    fn check_inode_csum(&mut self, ino: u32, inode: &DiskInode) {
        if !self.geo.csum || inode.raw[..128].iter().all(|&b| b == 0) {
            return;
        }
        let (stored, want) = (inode.checksum(), inode.compute_checksum(self.geo.seed, ino));
        if stored != want {
            let msg = format!("inode {ino}: checksum {stored:#010x}, computed {want:#010x}");
            self.out.add("INODE_CHECKSUM", msg);
        }
    }

    fn scan_reserved(&mut self, ino: u32, inode: &DiskInode) -> Result<()> {
        self.kind[ino as usize] = K_RESERVED;
        if ino == BADBLOCKS_INO {
            return self.check_badblocks_inode(inode);
        }
        if ino == ROOT_INO {
            return self.check_root(inode);
        }
        if ino == RESIZE_INO && self.sb.has_compat(compat::RESIZE_INODE) {
            return self.check_resize_inode(inode);
        }
        if self.special.contains(&ino) {
            return self.check_special(ino, inode);
        }
        self.check_unused_reserved(ino, inode)
    }

    /// A reserved inode with no role in this file system, checked as e2fsck does: the
    /// quota and journal slots must be clear, the others must have no mode (5: not a
    /// directory; 7: regular), and whatever they map must agree with i_blocks and i_size.
    fn check_unused_reserved(&mut self, ino: u32, inode: &DiskInode) -> Result<()> {
        self.check_reserved_flags(ino, inode, 0);
        if matches!(ino, 3 | 4 | JOURNAL_INO) {
            if inode.links() != 0 || le32(&inode.raw, 0x1C) != 0 || le32(inode.iblock(), 0) != 0 {
                self.out.add(
                    "RESERVED_INODE_BAD",
                    format!("reserved inode {ino} is not in use but contains data"),
                );
            }
            return Ok(());
        }
        let mode = inode.mode();
        let bad_mode = match ino {
            5 => mode_ft(mode) == Some(FT_DIR),
            RESIZE_INO => mode != 0 && mode_ft(mode) != Some(FT_REG),
            _ => mode != 0,
        };
        if ino == RESIZE_INO && inode.iblock().iter().any(|&b| b != 0) {
            self.out.add(
                "RESIZE_INODE_INVALID",
                "resize inode 7 maps blocks without the resize_inode feature".into(),
            );
        }
        if bad_mode {
            self.out.add(
                "RESERVED_INODE_BAD",
                format!("reserved inode {ino} has mode {mode:#o}"),
            );
        }
        if inode.raw[..128].iter().all(|&b| b == 0) {
            return Ok(());
        }
        // e2fsck reports a bad xattr block number only for inodes some directory names.
        let xattr = self.reserved_xattr_block(ino, inode)?;
        // Only directories and regular files have block maps (ext2fs_inode_has_valid_blocks).
        let w = match mode_ft(mode) {
            Some(FT_REG | FT_DIR) => self.walk_blocks(ino, inode, false)?,
            _ => Walk::default(),
        };
        self.check_iblocks(ino, inode, w.blocks + xattr);
        self.check_size(ino, inode, FT_REG, &w);
        Ok(())
    }

    /// The xattr block of an inode no directory names: e2fsck reports an out-of-range
    /// number only for inodes reached from a directory, so it is ignored here.
    fn reserved_xattr_block(&mut self, ino: u32, inode: &DiskInode) -> Result<u64> {
        if self.geo.in_fs(self.file_acl(inode), 1) {
            self.check_xattr_block(ino, inode)
        } else {
            Ok(0)
        }
    }

    /// Flags no reserved or special inode may carry (they are never directories), plus
    /// `extra` (e.g. ENCRYPT, which makes e2fsck reject a journal).
    fn check_reserved_flags(&mut self, ino: u32, inode: &DiskInode, extra: u32) {
        if inode.flags() & (FL_INDEX | FL_CASEFOLD | extra) != 0 {
            let msg = format!(
                "reserved inode {ino} has invalid flags {:#x}",
                inode.flags()
            );
            self.out.add("INODE_BAD_FLAGS", msg);
        }
    }

    /// The bad blocks inode lists unusable blocks with a classic block map (usually none).
    /// As e2fsck: its owner fields must be clear, and a listed block may lie anywhere (even
    /// in metadata), so listed blocks are only marked used, never reported as shared.
    fn check_badblocks_inode(&mut self, inode: &DiskInode) -> Result<()> {
        let ino = BADBLOCKS_INO;
        if inode.mode() != 0
            || le16(&inode.raw, 0x2) != 0
            || le16(&inode.raw, 0x18) != 0
            || inode.links() != 0
            || inode.flags() & FL_INLINE_DATA != 0
            || le32(&inode.raw, 0x68) != 0
        {
            self.out.add(
                "BADBLOCKS_INODE_INVALID",
                "bad blocks inode 1 has a mode, owner, links or xattr block".into(),
            );
        }
        if inode.iblock().iter().all(|&b| b == 0) {
            return Ok(());
        }
        let mut w = Walk {
            ino,
            collect: true,
            ..Walk::default()
        };
        self.walk_indirect(&mut w, inode)?;
        self.bad_blocks = w.runs;
        Ok(())
    }

    fn check_root(&mut self, inode: &DiskInode) -> Result<()> {
        if inode.mode() == 0 || inode.links() == 0 {
            self.out
                .add("ROOT_MISSING", "root inode 2 is not in use".into());
            return Ok(());
        }
        if mode_ft(inode.mode()) != Some(FT_DIR) {
            self.out.add(
                "ROOT_NOT_DIR",
                format!("root inode 2 has mode {:#o}, not a directory", inode.mode()),
            );
            return Ok(());
        }
        self.check_inode(ROOT_INO, inode)
    }

    /// Check an inode that is in use; records its kind, links and directory blocks.
    fn check_inode(&mut self, ino: u32, inode: &DiskInode) -> Result<()> {
        self.links[ino as usize] = inode.links();
        self.check_extra_isize(ino, inode);
        let Some(ft) = mode_ft(inode.mode()) else {
            self.out.add(
                "INODE_BAD_MODE",
                format!(
                    "inode {ino}: mode {:#o} has no valid file type",
                    inode.mode()
                ),
            );
            self.kind[ino as usize] = K_BAD_MODE;
            return Ok(());
        };
        self.kind[ino as usize] = ft;
        if inode.dtime() != 0 && !self.is_low_dtime(inode) {
            self.out.add(
                "INODE_DTIME_SET",
                format!("inode {ino} is in use but has dtime {} set", inode.dtime()),
            );
        }
        self.check_flags(ino, inode, ft);
        self.check_zero_fields(ino, inode);
        let xattr = self.check_xattr_block(ino, inode)?;
        let walk = match ft {
            FT_REG | FT_DIR => self.walk_blocks(ino, inode, ft == FT_DIR)?,
            FT_LNK => self.check_symlink(ino, inode)?,
            _ => {
                self.check_device(ino, inode, ft);
                Walk::default()
            }
        };
        self.check_iblocks(ino, inode, walk.blocks + xattr);
        self.check_size(ino, inode, ft, &walk);
        if ft == FT_DIR {
            let seed = inode.csum_seed(self.geo.seed, ino);
            let indexed = inode.flags() & FL_INDEX != 0 && self.sb.has_compat(compat::DIR_INDEX);
            self.dirs.push(DirRec {
                ino,
                seed,
                indexed,
                runs: walk.runs,
            });
        }
        Ok(())
    }

    fn check_extra_isize(&mut self, ino: u32, inode: &DiskInode) {
        if self.geo.isz <= 128 {
            return;
        }
        let extra = u64::from(inode.extra_isize());
        // It must cover itself and i_checksum_hi (e2fsck allows 0).
        if (extra != 0 && extra < 4) || extra > self.geo.isz - 128 || extra % 4 != 0 {
            self.out.add(
                "INODE_EXTRA_ISIZE",
                format!(
                    "inode {ino}: i_extra_isize {extra} invalid for {}-byte inodes",
                    self.geo.isz
                ),
            );
            return;
        }
        let area = &inode.raw[(128 + extra) as usize..];
        if area.len() >= 8 && le32(area, 0) == XATTR_MAGIC {
            if let Some(why) = xattr_entries_error(area, 4, 4, true) {
                self.out.add(
                    "XATTR_BAD_ENTRY",
                    format!("inode {ino}: in-inode extended attributes: {why}"),
                );
            }
        }
    }

    /// Fields e2fsck requires to be zero (its "process_bad_inode" checks).
    fn check_zero_fields(&mut self, ino: u32, inode: &DiskInode) {
        let mut bad = Vec::new();
        if le32(&inode.raw, 0x70) != 0 {
            bad.push(format!("i_faddr is {}", le32(&inode.raw, 0x70)));
        }
        if !self.sb.has_incompat(incompat::BIT64) && le16(&inode.raw, 0x76) != 0 {
            bad.push(format!(
                "i_file_acl_hi is {} without 64bit",
                le16(&inode.raw, 0x76)
            ));
        }
        if !self.sb.has_ro_compat(ro_compat::HUGE_FILE) && le16(&inode.raw, 0x74) != 0 {
            bad.push(format!(
                "i_blocks_hi is {} without huge_file",
                le16(&inode.raw, 0x74)
            ));
        }
        if !bad.is_empty() {
            self.out.add(
                "INODE_BAD_FIELD",
                format!("inode {ino}: {} (should be zero)", bad.join(", ")),
            );
        }
    }

    /// The xattr block number (the high half only counts with the 64bit feature).
    fn file_acl(&self, inode: &DiskInode) -> u64 {
        let lo = u64::from(le32(&inode.raw, 0x68));
        if self.sb.has_incompat(incompat::BIT64) {
            lo | (u64::from(le16(&inode.raw, 0x76)) << 32)
        } else {
            lo
        }
    }

    fn check_flags(&mut self, ino: u32, inode: &DiskInode, ft: u8) {
        let fl = inode.flags();
        let mut bad = Vec::new();
        if fl & FL_EXTENTS != 0 && !self.sb.has_incompat(incompat::EXTENTS) {
            bad.push("EXTENTS set without the extent feature");
        }
        if fl & FL_INDEX != 0 && ft != FT_DIR {
            bad.push("INDEX set on a non-directory");
        }
        if fl & FL_INDEX != 0 && ft == FT_DIR && !self.sb.has_compat(compat::DIR_INDEX) {
            bad.push("INDEX set without the dir_index feature");
        }
        if fl & FL_INLINE_DATA != 0 {
            bad.push("INLINE_DATA set without the inline_data feature");
        }
        if fl & FL_IMAGIC != 0 && !self.sb.has_compat(COMPAT_IMAGIC_INODES) {
            bad.push("IMAGIC set without the imagic_inodes feature");
        }
        // Images with these features are refused up front, so the flags are always stray.
        // (e2fsck 1.47 ignores stray VERITY and EA_INODE flags; so does this check.)
        if fl & (FL_ENCRYPT | FL_CASEFOLD) != 0 {
            bad.push("ENCRYPT or CASEFOLD set without the feature");
        }
        if !bad.is_empty() {
            self.out.add(
                "INODE_BAD_FLAGS",
                format!("inode {ino}: flags {fl:#x}: {}", bad.join(", ")),
            );
        }
    }

    /// `i_blocks` in 512-byte units as e2fsck reads it (high bits only with huge_file).
    fn stored_iblocks(&self, inode: &DiskInode) -> u64 {
        let lo = u64::from(le32(&inode.raw, 0x1C));
        if !self.sb.has_ro_compat(ro_compat::HUGE_FILE) {
            return lo;
        }
        let n = lo | (u64::from(le16(&inode.raw, 0x74)) << 32);
        if inode.flags() & FL_HUGE_FILE != 0 {
            n.saturating_mul(self.geo.bs / 512)
        } else {
            n
        }
    }

    fn check_iblocks(&mut self, ino: u32, inode: &DiskInode, counted: u64) {
        let want = counted.saturating_mul(self.geo.bs / 512);
        let have = self.stored_iblocks(inode);
        if want != have {
            self.out.add(
                "INODE_BAD_IBLOCKS",
                format!("inode {ino}: i_blocks is {have}, counted {want} (512-byte units)"),
            );
        }
    }

    fn check_size(&mut self, ino: u32, inode: &DiskInode, ft: u8, w: &Walk) {
        let (size, bs) = (inode.size(), self.geo.bs);
        if ft == FT_DIR {
            let nblk = w.last_lblk.map_or(0, |l| l + 1);
            if size % bs != 0 || size != nblk.saturating_mul(bs) {
                self.out.add(
                    "DIR_BAD_SIZE",
                    format!("directory inode {ino}: size {size}, but {nblk} blocks are mapped"),
                );
            }
            return;
        }
        if ft != FT_REG {
            return;
        }
        if let Some(li) = w.last_init {
            if size < li.saturating_mul(bs) {
                self.out.add(
                    "INODE_BAD_SIZE",
                    format!("inode {ino}: size {size} ends before initialized block {li}"),
                );
                return;
            }
        }
        let per = bs / 4;
        let max = if inode.flags() & FL_EXTENTS != 0 {
            (bs << 32) - 1
        } else {
            (12 + per + per * per + per * per * per)
                .saturating_mul(bs)
                .min(bs << 32)
                - 1
        };
        if size > max {
            self.out.add(
                "INODE_BAD_SIZE",
                format!("inode {ino}: size {size} exceeds the largest mappable {max}"),
            );
        }
    }

    fn check_device(&mut self, ino: u32, inode: &DiskInode, ft: u8) {
        let mut bad = Vec::new();
        if inode.flags() & (FL_INDEX | FL_EXTENTS | FL_INLINE_DATA) != 0 {
            bad.push("has INDEX/EXTENTS/INLINE_DATA flags".to_string());
        }
        // The kernel does not clear the rest of i_block for devices, so (as e2fsck) those
        // words only count when the immutable or append-only flag is set, which can never be
        // set on a device; the flag alone is reported but not counted, as e2fsck does.
        if inode.flags() & (FL_IMMUTABLE | FL_APPEND) != 0 {
            if inode.iblock()[16..].iter().any(|&b| b != 0) {
                bad.push("is immutable/append-only with data past the device number".to_string());
            }
            self.note_immutable(ino);
        }
        if inode.size() != 0 {
            bad.push(format!("size {} is not zero", inode.size()));
        }
        if !bad.is_empty() {
            self.out.add(
                "DEVICE_BAD",
                format!("{} inode {ino}: {}", ft_name(ft), bad.join(", ")),
            );
        }
    }

    fn note_immutable(&mut self, ino: u32) {
        let msg = format!("special file inode {ino} has the immutable or append-only flag");
        self.out.note("SPECIAL_IMMUTABLE", msg);
    }

    fn check_symlink(&mut self, ino: u32, inode: &DiskInode) -> Result<Walk> {
        let size = inode.size();
        if size > 0 && size < crate::disk::inode::IBLOCK_SIZE as u64 {
            let ib = inode.iblock();
            let len = ib.iter().position(|&c| c == 0).unwrap_or(ib.len()) as u64;
            if inode.flags() & (FL_IMMUTABLE | FL_APPEND) != 0 {
                self.note_immutable(ino);
            }
            if inode.flags() & FL_EXTENTS != 0 {
                self.out.add(
                    "SYMLINK_BAD",
                    format!("fast symlink inode {ino} has the EXTENTS flag"),
                );
            } else if len != size {
                self.out.add(
                    "SYMLINK_BAD",
                    format!("fast symlink inode {ino}: size {size}, target is {len} bytes"),
                );
            }
            return Ok(Walk::default());
        }
        let w = self.walk_blocks(ino, inode, true)?;
        if size == 0 || size >= self.geo.bs {
            self.out.add(
                "SYMLINK_BAD",
                format!("symlink inode {ino}: size {size} invalid"),
            );
            return Ok(w);
        }
        let single = w.runs.len() == 1 && w.runs[0].lblk == 0 && w.runs[0].len == 1;
        if !single || w.bad > 0 {
            self.out.add(
                "SYMLINK_BAD",
                format!("symlink inode {ino}: must map exactly block 0"),
            );
            return Ok(w);
        }
        let b = self.read_block(w.runs[0].pblk)?;
        let len = b.iter().position(|&c| c == 0).unwrap_or(b.len()) as u64;
        if len != size {
            self.out.add(
                "SYMLINK_BAD",
                format!("symlink inode {ino}: size {size}, target is {len} bytes"),
            );
        }
        Ok(w)
    }

    /// Check an inode that holds file-system data (journal, quota, orphan file).
    fn check_special(&mut self, ino: u32, inode: &DiskInode) -> Result<()> {
        self.kind[ino as usize] = K_RESERVED;
        self.check_reserved_flags(ino, inode, FL_ENCRYPT);
        let journal = self.sb.has_compat(compat::HAS_JOURNAL) && ino == self.sb.journal_inum();
        if mode_ft(inode.mode()) != Some(FT_REG) || inode.links() == 0 {
            let code = if journal {
                "JOURNAL_BAD_INODE"
            } else {
                "SPECIAL_INODE_BAD"
            };
            self.out.add(
                code,
                format!(
                    "inode {ino} (special) has mode {:#o}, links {}",
                    inode.mode(),
                    inode.links()
                ),
            );
            return Ok(());
        }
        let xattr = self.reserved_xattr_block(ino, inode)?;
        let w = self.walk_blocks(ino, inode, journal)?;
        self.check_iblocks(ino, inode, w.blocks + xattr);
        self.check_size(ino, inode, FT_REG, &w);
        if journal {
            self.check_journal_sb(ino, inode, &w)?;
        }
        Ok(())
    }

    fn check_journal_sb(&mut self, ino: u32, inode: &DiskInode, w: &Walk) -> Result<()> {
        let Some(first) = w.runs.first().filter(|r| r.lblk == 0) else {
            self.out.add(
                "JOURNAL_BAD_INODE",
                format!("journal inode {ino} does not map block 0"),
            );
            return Ok(());
        };
        let b = self.read_block(first.pblk)?;
        match jbd2::needs_recovery(&b) {
            None => self.out.add(
                "JOURNAL_BAD_SUPERBLOCK",
                format!("journal superblock (block {}) has bad magic", first.pblk),
            ),
            Some(true) => self.out.add(
                "JOURNAL_NEEDS_RECOVERY",
                "journal is not empty: it must be replayed".into(),
            ),
            Some(false) => {}
        }
        let be = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let (jbs, maxlen) = (u64::from(be(0xC)), u64::from(be(0x10)));
        let have = inode.size() / self.geo.bs;
        if jbd2::needs_recovery(&b).is_some() && (jbs != self.geo.bs || maxlen > have) {
            self.out.add(
                "JOURNAL_BAD_SUPERBLOCK",
                format!("journal block size {jbs}, length {maxlen}, inode holds {have} blocks"),
            );
        }
        Ok(())
    }

    /// The resize inode: a double-indirect block whose entries are the primary reserved GDT
    /// blocks, each listing its backups (e2fsck's check_resize_inode). Only the double
    /// indirect block is claimed here; the reserved GDT blocks are claimed as metadata.
    fn check_resize_inode(&mut self, inode: &DiskInode) -> Result<()> {
        self.check_reserved_flags(RESIZE_INO, inode, 0);
        // Its size only has to fit a block-mapped file (e2fsck's check_blocks).
        self.check_size(RESIZE_INO, inode, FT_REG, &Walk::default());
        if mode_ft(inode.mode()) != Some(FT_REG) {
            self.out.add(
                "RESIZE_INODE_INVALID",
                format!("resize inode 7 has mode {:#o}", inode.mode()),
            );
            return Ok(());
        }
        let ib = inode.iblock();
        let dind = u64::from(le32(ib, 13 * 4));
        let others = (0..15).filter(|&i| i != 13).any(|i| le32(ib, 4 * i) != 0);
        if others || !self.geo.in_fs(dind, 1) || (dind == 0) != (self.geo.reserved_gdt == 0) {
            self.out.add(
                "RESIZE_INODE_INVALID",
                format!("resize inode 7: block map invalid (double indirect {dind})"),
            );
            return Ok(());
        }
        if dind == 0 {
            return Ok(());
        }
        self.claims.claim(dind, 1, Owner::Inode(RESIZE_INO));
        if let Some(bad) = self.resize_layout_error(dind)? {
            self.out
                .add("RESIZE_INODE_INVALID", format!("resize inode 7: {bad}"));
            return Ok(());
        }
        let backups = self.geo.backup_groups().count() as u64;
        let xattr = self.reserved_xattr_block(RESIZE_INO, inode)?;
        let counted = 1 + self.geo.reserved_gdt * (1 + backups) + xattr;
        self.check_iblocks(RESIZE_INO, inode, counted);
        Ok(())
    }

    fn resize_layout_error(&self, dind: u64) -> Result<Option<String>> {
        let g = &self.geo;
        let per = g.bs / 4;
        let dbuf = self.read_block(dind)?;
        let first = g.first_data + 1 + g.gdt_blocks;
        let ind = read_blocks(self.dev, g, first, g.reserved_gdt)?;
        for i in 0..g.reserved_gdt {
            let pblk = first + i;
            let slot = ((g.gdt_blocks + i) % per) as usize;
            if u64::from(le32(&dbuf, 4 * slot)) != pblk {
                return Ok(Some(format!(
                    "double indirect entry {slot} is not reserved GDT block {pblk}"
                )));
            }
            let blk = &ind[(i * g.bs) as usize..((i + 1) * g.bs) as usize];
            for (k, bg) in g.backup_groups().enumerate() {
                let want = pblk + u64::from(bg) * g.bpg;
                if k as u64 >= per || u64::from(le32(blk, 4 * k)) != want {
                    return Ok(Some(format!(
                        "reserved GDT block {pblk} does not list backup {want}"
                    )));
                }
            }
        }
        Ok(None)
    }

    // -----------------------------------------------------------------------------------
    // Pass 1: block maps.
    // -----------------------------------------------------------------------------------

    fn walk_blocks(&mut self, ino: u32, inode: &DiskInode, collect: bool) -> Result<Walk> {
        let mut w = Walk {
            ino,
            seed: inode.csum_seed(self.geo.seed, ino),
            collect,
            ..Walk::default()
        };
        if inode.flags() & FL_EXTENTS != 0 {
            let root = inode.iblock().to_vec();
            self.extent_node(&mut w, &root, None, None, (0, 1 << 32))?;
        } else {
            self.walk_indirect(&mut w, inode)?;
        }
        Ok(w)
    }

    fn bad_block(&mut self, w: &mut Walk, what: &str, blk: u64) {
        w.bad += 1;
        if w.bad > MAX_BAD_BLOCKS {
            if !w.aborted {
                self.out.add("INODE_TOO_MANY_BAD_BLOCKS", format!("inode {}: more than {MAX_BAD_BLOCKS} invalid blocks, rest of the map skipped", w.ino));
            }
            w.aborted = true;
            return;
        }
        self.out.add(
            "BLOCK_OUT_OF_RANGE",
            format!("inode {}: {what} {blk} is outside the file system", w.ino),
        );
    }

    /// Record `len` data blocks at logical `lblk`, physical `pblk` (already range-checked).
    fn map_data(&mut self, w: &mut Walk, lblk: u64, pblk: u64, len: u64, init: bool) {
        if w.ino == BADBLOCKS_INO {
            for b in pblk..pblk + len {
                if !self.claims.is_used(b) {
                    self.claims.claim(b, 1, Owner::Inode(w.ino));
                }
            }
        } else if self.claims.claim(pblk, len, Owner::Inode(w.ino)) > 0 {
            // Bound the claim log: an inode re-claiming blocks this often is garbage.
            w.conflicts += 1;
            if w.conflicts > MAX_CONFLICTS_PER_INODE && !w.aborted {
                w.aborted = true;
                let msg = format!(
                    "inode {}: more than {MAX_CONFLICTS_PER_INODE} extents overlap other owners, rest of the map skipped",
                    w.ino
                );
                self.out.add("INODE_TOO_MANY_BAD_BLOCKS", msg);
            }
        }
        w.blocks += len;
        let last = lblk + len - 1;
        w.last_lblk = Some(w.last_lblk.map_or(last, |l| l.max(last)));
        if init {
            w.last_init = Some(w.last_init.map_or(last, |l| l.max(last)));
        }
        if !w.collect {
            return;
        }
        w.mapped += len;
        if w.mapped > self.geo.blocks {
            if w.mapped - len <= self.geo.blocks {
                self.out.add(
                    "DIR_TOO_BIG",
                    format!("inode {}: maps more blocks than the file system has", w.ino),
                );
            }
            return;
        }
        match w.runs.last_mut() {
            Some(r) if r.lblk + r.len == lblk && r.pblk + r.len == pblk => r.len += len,
            _ => w.runs.push(Run { lblk, pblk, len }),
        }
    }

    fn extent_node(
        &mut self,
        w: &mut Walk,
        buf: &[u8],
        at: Option<u64>,
        want_depth: Option<u16>,
        range: (u64, u64),
    ) -> Result<()> {
        let place = at.map_or("i_block".to_string(), |b| format!("block {b}"));
        let node = match extent::decode_node(buf, at.unwrap_or(0)) {
            Ok(n) => n,
            Err(e) => {
                self.out.add(
                    "EXTENT_BAD_HEADER",
                    format!("inode {}: extent node in {place}: {e}", w.ino),
                );
                w.bad += 1;
                return Ok(());
            }
        };
        let cap = if at.is_some() {
            extent::block_capacity(buf.len())
        } else {
            extent::node_capacity(buf.len())
        };
        if usize::from(le16(buf, 4)) + 2 < cap {
            self.out.add(
                "EXTENT_BAD_HEADER",
                format!(
                    "inode {}: extent node in {place}: max entries {} below capacity {cap}",
                    w.ino,
                    le16(buf, 4)
                ),
            );
        }
        let depth = match &node {
            Node::Leaf(_) => 0,
            Node::Index(d, _) => *d,
        };
        if want_depth.is_some_and(|d| d != depth) {
            self.out.add(
                "EXTENT_BAD_DEPTH",
                format!(
                    "inode {}: extent node in {place} has depth {depth}, expected {}",
                    w.ino,
                    want_depth.unwrap_or(0)
                ),
            );
            return Ok(());
        }
        if let (Some(b), true) = (at, self.geo.csum) {
            if let Err(e) = extent::verify_block_csum(w.seed, buf, b) {
                self.out
                    .add("EXTENT_CHECKSUM", format!("inode {}: {e}", w.ino));
            }
        }
        match node {
            Node::Leaf(v) => v.iter().for_each(|e| self.leaf_extent(w, e, range)),
            Node::Index(d, v) => {
                for (i, ix) in v.iter().enumerate() {
                    let next = v.get(i + 1).map_or(range.1, |n| u64::from(n.lblk));
                    self.index_entry(w, ix, d, (u64::from(ix.lblk), next), range)?;
                }
            }
        }
        Ok(())
    }

    fn leaf_extent(&mut self, w: &mut Walk, e: &Extent, range: (u64, u64)) {
        if w.aborted {
            return;
        }
        let len = u64::from(e.len);
        if u64::from(e.lblk) < range.0 || e.lend() > range.1 {
            self.out.add(
                "EXTENT_OUT_OF_ORDER",
                format!(
                    "inode {}: extent at logical {} (+{len}) outside its index range {}..{}",
                    w.ino, e.lblk, range.0, range.1
                ),
            );
            return;
        }
        if !self.geo.in_fs(e.pblk, len) {
            self.bad_block(w, "extent at block", e.pblk);
            return;
        }
        self.map_data(w, u64::from(e.lblk), e.pblk, len, !e.unwritten);
    }

    fn index_entry(
        &mut self,
        w: &mut Walk,
        ix: &Index,
        depth: u16,
        child: (u64, u64),
        range: (u64, u64),
    ) -> Result<()> {
        if w.aborted {
            return Ok(());
        }
        if child.0 < range.0 || child.0 >= range.1 {
            self.out.add(
                "EXTENT_OUT_OF_ORDER",
                format!(
                    "inode {}: index key {} outside its range {}..{}",
                    w.ino, child.0, range.0, range.1
                ),
            );
            return Ok(());
        }
        if !self.geo.in_fs(ix.child, 1) {
            self.bad_block(w, "extent tree block", ix.child);
            return Ok(());
        }
        w.blocks += 1;
        // A block already claimed is not descended into: the duplicate is reported, and
        // every tree block being read at most once bounds the walk.
        if self.claims.claim(ix.child, 1, Owner::Inode(w.ino)) > 0 {
            return Ok(());
        }
        let b = self.read_block(ix.child)?;
        let first_key = u64::from(le32(&b, 12));
        if le16(&b, 0) == extent::EXT_MAGIC && le16(&b, 2) > 0 && first_key != child.0 {
            self.out.add(
                "EXTENT_INDEX_START",
                format!(
                    "inode {}: index key {} but child block {} starts at {first_key}",
                    w.ino, child.0, ix.child
                ),
            );
        }
        self.extent_node(w, &b, Some(ix.child), Some(depth.saturating_sub(1)), child)
    }

    /// Walk a classic block map: 12 direct pointers, then single, double, triple indirect.
    fn walk_indirect(&mut self, w: &mut Walk, inode: &DiskInode) -> Result<()> {
        let ib = inode.iblock().to_vec();
        for i in 0..12 {
            self.map_pointer(w, i, u64::from(le32(&ib, 4 * i as usize)));
        }
        let per = self.geo.bs / 4;
        let mut lblk = 12u64;
        for level in 1..=3u32 {
            let b = u64::from(le32(&ib, 4 * (11 + level as usize)));
            if b != 0 {
                self.indirect(w, b, level, lblk)?;
            }
            lblk += per.pow(level);
        }
        Ok(())
    }

    fn map_pointer(&mut self, w: &mut Walk, lblk: u64, pblk: u64) {
        if pblk == 0 || w.aborted {
            return;
        }
        if !self.geo.in_fs(pblk, 1) {
            self.bad_block(w, "block", pblk);
            return;
        }
        self.map_data(w, lblk, pblk, 1, true);
    }

    fn indirect(&mut self, w: &mut Walk, blk: u64, level: u32, lblk: u64) -> Result<()> {
        if w.aborted {
            return Ok(());
        }
        if !self.geo.in_fs(blk, 1) {
            self.bad_block(w, "indirect block", blk);
            return Ok(());
        }
        w.blocks += 1;
        if self.claims.claim(blk, 1, Owner::Inode(w.ino)) > 0 {
            return Ok(());
        }
        let b = self.read_block(blk)?;
        let per = self.geo.bs / 4;
        let span = per.pow(level - 1);
        for i in 0..per {
            let p = u64::from(le32(&b, (4 * i) as usize));
            if p == 0 {
                continue;
            }
            if level == 1 {
                self.map_pointer(w, lblk + i, p);
            } else {
                self.indirect(w, p, level - 1, lblk + i * span)?;
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Pass 1: xattr blocks, duplicates, orphans.
    // -----------------------------------------------------------------------------------

    /// Account the inode's xattr block; returns the blocks to count in i_blocks (0 or 1).
    fn check_xattr_block(&mut self, ino: u32, inode: &DiskInode) -> Result<u64> {
        let b = self.file_acl(inode);
        if b == 0 {
            return Ok(0);
        }
        if !self.sb.has_compat(compat::EXT_ATTR) {
            self.out.add(
                "XATTR_BAD_BLOCK",
                format!("inode {ino}: xattr block {b} without the ext_attr feature"),
            );
            return Ok(0);
        }
        if !self.geo.in_fs(b, 1) {
            self.out.add(
                "XATTR_BAD_BLOCK",
                format!("inode {ino}: xattr block {b} is outside the file system"),
            );
            return Ok(0);
        }
        if let Some(r) = self.xattrs.get_mut(&b) {
            r.refs += 1;
            return Ok(1);
        }
        self.claims.claim(b, 1, Owner::Xattr(ino));
        let buf = self.read_block(b)?;
        let valid = self.check_xattr_contents(ino, b, &buf);
        self.xattrs.insert(
            b,
            XattrRef {
                refs: 1,
                stored: le32(&buf, 4),
                valid,
                first: ino,
            },
        );
        Ok(1)
    }

    fn check_xattr_contents(&mut self, ino: u32, b: u64, buf: &[u8]) -> bool {
        if le32(buf, 0) != XATTR_MAGIC || le32(buf, 8) != 1 {
            self.out.add(
                "XATTR_BAD_BLOCK",
                format!(
                    "inode {ino}: xattr block {b} has magic {:#010x}, h_blocks {}",
                    le32(buf, 0),
                    le32(buf, 8)
                ),
            );
            return false;
        }
        if self.geo.csum {
            let mut c = crc32c_raw(self.geo.seed, &b.to_le_bytes());
            c = crc32c_raw(c, &buf[..0x10]);
            c = crc32c_raw(c, &[0; 4]);
            c = crc32c_raw(c, &buf[0x14..]);
            if c != le32(buf, 0x10) {
                self.out.add(
                    "XATTR_CHECKSUM",
                    format!(
                        "xattr block {b} (inode {ino}): checksum {:#010x}, computed {c:#010x}",
                        le32(buf, 0x10)
                    ),
                );
            }
        }
        if let Some(why) = xattr_entries_error(buf, 32, 0, false) {
            self.out.add(
                "XATTR_BAD_ENTRY",
                format!("xattr block {b} (inode {ino}): {why}"),
            );
        }
        true
    }

    fn check_xattr_refs(&mut self) {
        let mut v: Vec<_> = self
            .xattrs
            .iter()
            .filter(|(_, r)| r.valid && r.refs != u64::from(r.stored))
            .map(|(&b, r)| (b, r.refs, r.stored, r.first))
            .collect();
        v.sort_unstable();
        for (b, refs, stored, first) in v {
            self.out.add("XATTR_REFCOUNT", format!("xattr block {b} (first used by inode {first}): refcount {stored}, referenced by {refs} inodes"));
        }
    }

    fn report_dups(&mut self) {
        if self.claims.dups.len() > MAX_DUP_CLAIMS {
            let msg = format!(
                "{} overlapping claims; only the first {MAX_DUP_CLAIMS} are resolved",
                self.claims.dups.len()
            );
            self.out.add("DUP_BLOCK", msg);
        }
        let (shared, truncated) = self.claims.resolve();
        if truncated {
            self.out
                .add("DUP_BLOCK", "too many overlaps to name every owner".into());
        }
        for (owner, sh) in shared {
            let (meta, files): (Vec<Owner>, Vec<Owner>) =
                sh.others.iter().partition(|o| o.is_meta());
            let more = if sh.more > 0 {
                format!(" and {} more", sh.more)
            } else {
                String::new()
            };
            for (list, code) in [(meta, "BLOCK_IS_METADATA"), (files, "DUP_BLOCK")] {
                if list.is_empty() {
                    continue;
                }
                let code = if owner.is_meta() {
                    "GROUP_META_OVERLAP"
                } else {
                    code
                };
                let names: Vec<String> = list.iter().map(|o| o.to_string()).collect();
                let msg = format!(
                    "{owner}: {} block(s) from {} also claimed by {}{more}",
                    sh.blocks,
                    sh.first,
                    names.join(", ")
                );
                self.out.add(code, msg);
            }
        }
    }

    fn read_inode(&self, ino: u32) -> Result<Option<DiskInode>> {
        let idx = u64::from(ino) - 1;
        let g = (idx / self.geo.ipg) as usize;
        let Some(gi) = self.groups.get(g).filter(|gi| gi.it_ok) else {
            return Ok(None);
        };
        let mut raw = vec![0u8; self.geo.isz as usize];
        let off = gi.desc.inode_table() * self.geo.bs + (idx % self.geo.ipg) * self.geo.isz;
        self.dev.read_at(off, &mut raw)?;
        Ok(Some(DiskInode { raw }))
    }

    /// Follow the orphan chain (head in the superblock, next in each inode's dtime).
    fn check_orphan_chain(&mut self) -> Result<()> {
        let mut ino = self.sb.last_orphan();
        let mut seen = HashSet::new();
        while ino != 0 && seen.len() < MAX_ORPHANS {
            if ino < self.geo.first_ino || u64::from(ino) > self.geo.inodes || !seen.insert(ino) {
                self.out.note(
                    "ORPHAN_LIST",
                    format!("orphan list reaches invalid or repeated inode {ino}"),
                );
                break;
            }
            match self.read_inode(ino)? {
                Some(i) => ino = i.dtime(),
                None => break,
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Pass 2: directories.
    // -----------------------------------------------------------------------------------

    fn pass_directories(&mut self) -> Result<()> {
        let dirs = std::mem::take(&mut self.dirs);
        for d in &dirs {
            self.check_dir(d)?;
        }
        self.dirs = dirs;
        Ok(())
    }

    /// Directory blocks parsed overall are bounded: in a sound file system each block has
    /// one owner, so more than twice the block count means directories share blocks (which
    /// pass 1 reported) and parsing them again would only cost time.
    fn spend_dir_budget(&mut self, n: u64) -> bool {
        if let Some(left) = self.dir_budget.checked_sub(n) {
            self.dir_budget = left;
            return true;
        }
        if !self.dir_budget_spent {
            self.dir_budget_spent = true;
            let msg = "directories map more blocks than the file system holds; scan stopped";
            self.out.add("DIR_SCAN_LIMIT", msg.into());
        }
        false
    }

    fn lookup(runs: &[Run], lblk: u64) -> Option<u64> {
        let i = runs.partition_point(|r| r.lblk + r.len <= lblk);
        runs.get(i)
            .filter(|r| r.lblk <= lblk)
            .map(|r| r.pblk + (lblk - r.lblk))
    }

    /// Check one directory, storing at most [`MAX_PROBLEMS_PER_DIR`] of its problems.
    fn check_dir(&mut self, d: &DirRec) -> Result<()> {
        self.out.begin_scope(MAX_PROBLEMS_PER_DIR);
        let r = self.check_dir_blocks(d);
        let dropped = self.out.end_scope();
        if dropped > 0 {
            let msg = format!(
                "directory inode {}: {dropped} further problems not listed",
                d.ino
            );
            self.out.add("DIR_MORE_PROBLEMS", msg);
        }
        r
    }

    fn check_dir_blocks(&mut self, d: &DirRec) -> Result<()> {
        let nblocks = d.runs.iter().map(|r| r.lblk + r.len).max().unwrap_or(0);
        if nblocks == 0 {
            self.out.add(
                "DIR_NO_BLOCKS",
                format!("directory inode {} has no blocks", d.ino),
            );
            return Ok(());
        }
        let mut expect = 0;
        for r in &d.runs {
            if r.lblk > expect {
                self.out.add(
                    "DIR_HOLE",
                    format!("directory inode {} has a hole at block {expect}", d.ino),
                );
                break;
            }
            expect = r.lblk + r.len;
        }
        let ht = if d.indexed {
            self.scan_htree(d, nblocks)?
        } else {
            None
        };
        let mut st = DirScan::default();
        let per_read = (READ_CHUNK / self.geo.bs).max(1);
        for r in &d.runs {
            let mut k = 0;
            while k < r.len {
                let n = per_read.min(r.len - k);
                if !self.spend_dir_budget(n) {
                    return Ok(());
                }
                let buf = read_blocks(self.dev, &self.geo, r.pblk + k, n)?;
                for (j, blk) in buf.chunks(self.geo.bs as usize).enumerate() {
                    let off = k + j as u64;
                    self.dir_block(d, &mut st, r.lblk + off, r.pblk + off, blk, ht.as_ref());
                }
                k += n;
            }
        }
        for (seen, name) in [(st.dot, "."), (st.dotdot, "..")] {
            if !seen {
                self.out.add(
                    "DIR_NO_DOT",
                    format!("directory inode {}: no '{name}' entry", d.ino),
                );
            }
        }
        Ok(())
    }

    fn dir_block(
        &mut self,
        d: &DirRec,
        st: &mut DirScan,
        lblk: u64,
        pblk: u64,
        b: &[u8],
        ht: Option<&Htree>,
    ) {
        if let Some(h) = ht {
            if h.nodes.contains(&lblk) {
                if lblk == 0 {
                    self.dx_root_dots(d, st, b);
                }
                return;
            }
        }
        let tail = self.geo.csum && self.leaf_tail(d, pblk, b);
        let entries = match dir::parse_block(b, tail, pblk) {
            Ok(v) => v,
            Err(e) => {
                self.out.add(
                    "DIR_BAD_ENTRY",
                    format!("directory inode {}, block {lblk}: {e}", d.ino),
                );
                // Keep the entries before the damage, as e2fsck's salvage does, so one bad
                // record does not orphan everything else in the block.
                salvage_prefix(b, tail)
            }
        };
        let mut hashes: Option<(u32, u32)> = None;
        for (i, e) in entries.iter().enumerate() {
            if lblk == 0 && i < 2 {
                // The byte after the name ("." or "..") must be NUL.
                let pad = b.get(e.off + 8 + i + 1).copied().unwrap_or(0);
                let dot = Dot {
                    i,
                    ino: e.ino,
                    name: &e.name,
                    pad,
                    ft: e.ft,
                };
                self.dot_entry(d, st, dot);
                continue;
            }
            if e.ino == 0 {
                continue;
            }
            self.dir_entry(d, st, e, lblk);
            if let Some(h) = ht {
                let (hv, _) = hash::dirhash(&e.name, h.version, &self.sb.hash_seed());
                hashes = Some(hashes.map_or((hv, hv), |(a, b)| (a.min(hv), b.max(hv))));
            }
        }
        if let Some(h) = ht {
            self.check_leaf_hashes(d, h, lblk, hashes);
        }
    }

    /// An htree leaf must be referenced by the index, and its names must hash into the
    /// range its index entry gives it (inclusive at the top, for hash collisions).
    fn check_leaf_hashes(&mut self, d: &DirRec, h: &Htree, lblk: u64, hashes: Option<(u32, u32)>) {
        let Some(&(lo, hi)) = h.leaves.get(&lblk) else {
            let msg = format!(
                "directory inode {}: block {lblk} is not referenced by the htree",
                d.ino
            );
            self.out.add("HTREE_UNREFERENCED", msg);
            return;
        };
        if let Some((mn, mx)) = hashes.filter(|&(mn, mx)| mn < lo || mx > hi) {
            let msg = format!(
                "directory inode {}: leaf block {lblk} holds hashes {mn:#x}..{mx:#x} outside its index range {lo:#x}..{hi:#x}",
                d.ino
            );
            self.out.add("HTREE_HASH_RANGE", msg);
        }
    }

    /// Verify a leaf's checksum tail; returns whether the tail is present.
    fn leaf_tail(&mut self, d: &DirRec, pblk: u64, b: &[u8]) -> bool {
        if !dir::has_tail(b) {
            self.out.add(
                "DIR_MISSING_TAIL",
                format!(
                    "directory inode {}: block {pblk} has no checksum tail",
                    d.ino
                ),
            );
            return false;
        }
        if let Err(e) = dir::verify_leaf_csum(d.seed, b, pblk) {
            self.out
                .add("DIR_CHECKSUM", format!("directory inode {}: {e}", d.ino));
        }
        true
    }

    fn dx_root_dots(&mut self, d: &DirRec, st: &mut DirScan, b: &[u8]) {
        let name = &b[8..8 + usize::from(b[6]).min(4)];
        self.dot_entry(
            d,
            st,
            Dot {
                i: 0,
                ino: le32(b, 0),
                name,
                pad: b[9],
                ft: b[7],
            },
        );
        let name = &b[20..20 + usize::from(b[18]).min(4)];
        self.dot_entry(
            d,
            st,
            Dot {
                i: 1,
                ino: le32(b, 12),
                name,
                pad: b[22],
                ft: b[19],
            },
        );
    }

    /// The first two entries of block 0: "." naming the directory, ".." naming its parent,
    /// both NUL terminated and typed as directories.
    fn dot_entry(&mut self, d: &DirRec, st: &mut DirScan, e: Dot<'_>) {
        let want: &[u8] = if e.i == 0 { b"." } else { b".." };
        let at = format!("directory inode {}, entry {}", d.ino, show(want));
        if e.name == want {
            if e.pad != 0 {
                self.out
                    .add("DIR_BAD_DOT", format!("{at}: name is not NUL terminated"));
            }
            self.check_entry_type(&at, e.ft, FT_DIR);
        }
        if e.i == 0 {
            st.dot = true;
            if e.name != b"." || e.ino != d.ino {
                self.out.add(
                    "DIR_BAD_DOT",
                    format!(
                        "{at}: first entry is '{}' -> {}, not '.' -> itself",
                        show(e.name),
                        e.ino
                    ),
                );
                return;
            }
            self.bump_ref(d.ino);
            return;
        }
        st.dotdot = true;
        if e.name != b".." {
            self.out.add(
                "DIR_BAD_DOTDOT",
                format!("{at}: second entry is '{}'", show(e.name)),
            );
            return;
        }
        if e.ino == 0 || !self.inode_in_use(u64::from(e.ino)) {
            self.out.add(
                "DIR_BAD_DOTDOT",
                format!("{at}: points to unused inode {}", e.ino),
            );
            return;
        }
        self.dotdot.insert(d.ino, e.ino);
        self.bump_ref(e.ino);
    }

    fn bump_ref(&mut self, ino: u32) {
        if let Some(r) = self.refs.get_mut(ino as usize) {
            *r = r.saturating_add(1);
        }
    }

    fn dir_entry(&mut self, d: &DirRec, st: &mut DirScan, e: &dir::RawEntry, lblk: u64) {
        let (name, ino) = (show(&e.name), e.ino);
        let at = format!("directory inode {}, block {lblk}, entry '{name}'", d.ino);
        if e.name.is_empty() || e.name.contains(&b'/') || e.name.contains(&0) {
            self.out.add("DIR_BAD_NAME", format!("{at}: invalid name"));
        }
        if e.name == b"." || e.name == b".." {
            self.out
                .add("DIR_DUP_DOT", format!("{at}: extra '.' or '..' entry"));
            return;
        }
        if u64::from(ino) > self.geo.inodes
            || ino < self.geo.first_ino
            || self.special.contains(&ino)
        {
            self.out.add(
                "DIR_ENTRY_BAD_INODE",
                format!("{at}: refers to reserved or invalid inode {ino}"),
            );
            return;
        }
        let kind = self.kind[ino as usize];
        if kind == K_FREE {
            self.out.add(
                "DIR_ENTRY_UNUSED_INODE",
                format!("{at}: refers to unused inode {ino}"),
            );
            return;
        }
        self.bump_ref(ino);
        self.check_entry_type(&at, e.ft, kind);
        if st.names.len() < MAX_NAMES_PER_DIR && !st.names.insert(e.name.clone()) {
            self.out
                .add("DIR_DUP_ENTRY", format!("{at}: duplicate name"));
        }
        if kind == FT_DIR {
            if let Some(p) = self.parent.get(&ino) {
                self.out.add(
                    "DIR_MULTIPLY_LINKED",
                    format!("{at}: directory {ino} is already linked from directory {p}"),
                );
            } else {
                self.parent.insert(ino, d.ino);
            }
        }
    }

    fn check_entry_type(&mut self, at: &str, ft: u8, kind: u8) {
        let want = if !self.sb.has_incompat(incompat::FILETYPE) {
            0
        } else if (FT_REG..=FT_LNK).contains(&kind) {
            kind
        } else {
            return;
        };
        if ft == 0 && want != 0 {
            // e2fsck just sets a missing type ("Setting filetype"), not counted as an error.
            self.out
                .note("DIR_ENTRY_NO_TYPE", format!("{at}: no file type recorded"));
        } else if ft != want {
            self.out.add(
                "DIR_ENTRY_BAD_TYPE",
                format!(
                    "{at}: file type {ft}, inode is a {} (type {want})",
                    ft_name(kind)
                ),
            );
        }
    }

    /// Walk the htree index from the root (block 0) down to the leaves, checking each index
    /// block; returns the leaves' hash ranges, or None when the index is unusable.
    fn scan_htree(&mut self, d: &DirRec, nblocks: u64) -> Result<Option<Htree>> {
        let Some(p0) = Self::lookup(&d.runs, 0) else {
            return Ok(None);
        };
        let root = self.read_block(p0)?;
        let info = match dir::decode_root_info(&root, p0) {
            Ok(i) => i,
            Err(e) => {
                self.out
                    .add("HTREE_BAD_ROOT", format!("directory inode {}: {e}", d.ino));
                return Ok(None);
            }
        };
        if let Some(why) = self.dx_root_info_error(&root, info) {
            let msg = format!("directory inode {}: htree root {why}", d.ino);
            self.out.add("HTREE_BAD_ROOT", msg);
            return Ok(None);
        }
        let Some(ents) = self.dx_block(d, &root, dir::DX_ROOT_COUNT_OFF, p0) else {
            return Ok(None);
        };
        let unsigned = self.sb.flags() & FLAG_UNSIGNED_HASH != 0 && info.hash_version <= hash::TEA;
        let version = info.hash_version + if unsigned { 3 } else { 0 };
        let mut ht = Htree {
            version,
            nodes: HashSet::from([0]),
            leaves: HashMap::new(),
        };
        let mut seen = HashSet::from([0u64]);
        let mut level = self.dx_children(d, &ents, (0, 0xFFFF_FFFE), nblocks, &mut seen);
        for _ in 0..info.indirect_levels {
            let mut next = Vec::new();
            for (lblk, range) in level {
                let Some(pb) = Self::lookup(&d.runs, lblk) else {
                    continue;
                };
                if !self.spend_dir_budget(1) {
                    return Ok(None);
                }
                let b = self.read_block(pb)?;
                if let Some(e) = self.dx_block(d, &b, dir::DX_NODE_COUNT_OFF, pb) {
                    ht.nodes.insert(lblk);
                    next.extend(self.dx_children(d, &e, range, nblocks, &mut seen));
                }
            }
            level = next;
        }
        ht.leaves.extend(level);
        Ok(Some(ht))
    }

    /// Root info fields e2fsck's handle_htree rejects beyond `dir::decode_root_info`.
    fn dx_root_info_error(&self, root: &[u8], info: dir::DxRootInfo) -> Option<String> {
        let max_levels = if self.sb.has_incompat(incompat::LARGEDIR) {
            3
        } else {
            2
        };
        if le32(root, 0x18) != 0 {
            Some("reserved field is not zero".into())
        } else if info.hash_version > hash::TEA {
            Some(format!(
                "hash version {} is not legacy, half_md4 or tea",
                info.hash_version
            ))
        } else if info.indirect_levels >= max_levels {
            Some(format!("has {} indirect levels", info.indirect_levels))
        } else if root[0x1F] & 1 != 0 {
            Some("has an incompatible flag set".into())
        } else {
            None
        }
    }

    fn dx_block(
        &mut self,
        d: &DirRec,
        b: &[u8],
        count_off: usize,
        pblk: u64,
    ) -> Option<Vec<(u32, u32)>> {
        if self.geo.csum {
            if let Err(e) = dir::verify_dx_csum(d.seed, b, count_off, pblk) {
                self.out
                    .add("HTREE_CHECKSUM", format!("directory inode {}: {e}", d.ino));
            }
        }
        match dir::decode_dx(b, count_off, self.geo.csum, pblk) {
            Ok(e) => Some(e.entries),
            Err(e) => {
                self.out
                    .add("HTREE_BAD_NODE", format!("directory inode {}: {e}", d.ino));
                None
            }
        }
    }

    /// Children of one index block with the hash range each may hold.
    fn dx_children(
        &mut self,
        d: &DirRec,
        ents: &[(u32, u32)],
        range: (u32, u32),
        nblocks: u64,
        seen: &mut HashSet<u64>,
    ) -> Vec<(u64, (u32, u32))> {
        let mut out = Vec::new();
        let mut prev = range.0;
        for (i, &(h, blk)) in ents.iter().enumerate() {
            let lo = if i == 0 { range.0 } else { h & !1 };
            let hi = ents.get(i + 1).map_or(range.1, |&(n, _)| n & !1);
            if lo < prev || lo < range.0 || lo > range.1 {
                self.out.add(
                    "HTREE_HASH_ORDER",
                    format!(
                        "directory inode {}: index entry {i} hash {lo:#x} out of order",
                        d.ino
                    ),
                );
            }
            prev = prev.max(lo);
            let blk = u64::from(blk & DX_BLOCK_MASK);
            if blk >= nblocks || !seen.insert(blk) {
                self.out.add("HTREE_BAD_NODE", format!("directory inode {}: index entry {i} points to block {blk} (outside the directory or referenced twice)", d.ino));
                continue;
            }
            out.push((blk, (lo, hi.max(lo))));
        }
        out
    }

    // -----------------------------------------------------------------------------------
    // Passes 3 and 4: connectivity and reference counts.
    // -----------------------------------------------------------------------------------

    fn pass_connectivity(&mut self) {
        if self.kind[ROOT_INO as usize] != FT_DIR {
            return;
        }
        if let Some(&dd) = self.dotdot.get(&ROOT_INO) {
            if dd != ROOT_INO {
                self.out.add(
                    "DIR_BAD_DOTDOT",
                    format!("root directory: '..' is {dd}, should be 2"),
                );
            }
        }
        // 0 unknown, 1 on the current path, 2 connected to the root, 3 disconnected.
        let mut color: HashMap<u32, u8> = HashMap::from([(ROOT_INO, 2)]);
        let dirs: Vec<u32> = self.dirs.iter().map(|d| d.ino).collect();
        for &d in &dirs {
            self.resolve_dir(d, &mut color);
        }
        for &d in &dirs {
            let (Some(&p), Some(&dd)) = (self.parent.get(&d), self.dotdot.get(&d)) else {
                continue;
            };
            if d != ROOT_INO && p != dd {
                self.out.add(
                    "DIR_BAD_DOTDOT",
                    format!("directory inode {d}: '..' is {dd}, but it is linked from {p}"),
                );
            }
        }
    }

    /// Follow parents from `d` until a directory of known state; each directory is walked
    /// once overall, so the pass is linear and loops are found.
    fn resolve_dir(&mut self, d: u32, color: &mut HashMap<u32, u8>) {
        let mut path = Vec::new();
        let mut cur = d;
        let verdict = loop {
            match color.get(&cur).copied().unwrap_or(0) {
                2 => break 2,
                3 => break 3,
                1 => {
                    self.out.add("DIR_LOOP", format!("directory inode {cur} is part of a directory loop unreachable from the root"));
                    break 3;
                }
                _ => {}
            }
            color.insert(cur, 1);
            path.push(cur);
            match self.parent.get(&cur) {
                Some(&p) => cur = p,
                None => {
                    self.out.add(
                        "UNATTACHED_INODE",
                        format!("directory inode {cur} is not reachable from the root"),
                    );
                    break 3;
                }
            }
        };
        for p in path {
            color.insert(p, verdict);
        }
    }

    fn pass_links(&mut self) {
        let dir_nlink = self.sb.has_ro_compat(ro_compat::DIR_NLINK);
        for ino in 1..self.kind.len() {
            let kind = self.kind[ino];
            if !(FT_REG..=FT_LNK).contains(&kind)
                || (ino < self.geo.first_ino as usize && ino != ROOT_INO as usize)
            {
                continue;
            }
            let (links, mut counted) = (u32::from(self.links[ino]), u32::from(self.refs[ino]));
            if counted == 0 {
                if kind != FT_DIR {
                    self.out.add(
                        "UNATTACHED_INODE",
                        format!(
                            "inode {ino} ({}, links {links}) is not in any directory",
                            ft_name(kind)
                        ),
                    );
                }
                continue;
            }
            if kind == FT_DIR && counted > LINK_MAX && dir_nlink {
                counted = 1;
            }
            if counted != links {
                self.out.add(
                    "LINK_COUNT",
                    format!(
                        "inode {ino} ({}): i_links_count is {links}, counted {counted}",
                        ft_name(kind)
                    ),
                );
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Pass 5: bitmaps and summary counts.
    // -----------------------------------------------------------------------------------

    fn pass_bitmaps(&mut self) -> Result<()> {
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

    fn load_block_bitmaps(&mut self, start: u32, end: u32) -> Result<Vec<Bitmap>> {
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
        for (&(g, _), map) in want.iter().zip(maps) {
            self.verify_bitmap_csum(g, &map, true);
            self.check_bitmap_padding(g, &map, true);
            out[(g - start) as usize] = Bitmap::Loaded(map);
        }
        Ok(out)
    }

    /// Compare group `g`'s computed block usage with its bitmap; returns its free blocks.
    fn check_block_group(&mut self, g: u32, map: Bitmap) -> u64 {
        let (first, len) = (self.geo.group_first(g), self.geo.group_len(g));
        let mut computed = vec![0u8; (len as usize).div_ceil(8)];
        for i in 0..len {
            if self.claims.is_used(first + i) {
                crate::disk::set_bit(&mut computed, i as usize);
            }
        }
        let used = crate::disk::count_ones(&computed, len as usize) as u64;
        let ondisk = match map {
            Bitmap::Loaded(m) => Some(m),
            Bitmap::Uninit => Some(uninit_block_bitmap(
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
    fn check_inode_group(&mut self, g: u32) -> u64 {
        let ipg = self.geo.ipg as usize;
        let base = g as usize * ipg + 1;
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
        let free = self.geo.ipg - used;
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

/// The valid entries at the start of a leaf block that `dir::parse_block` rejected: the same
/// record checks, stopping at the first bad record instead of failing.
fn salvage_prefix(b: &[u8], csum: bool) -> Vec<dir::RawEntry> {
    let end = dir::entries_end(b.len(), csum);
    let mut out = Vec::new();
    let mut off = 0;
    while off + 8 <= end {
        let rec_len = usize::from(le16(b, off + 4));
        let name_len = usize::from(b[off + 6]);
        if rec_len < 8 || rec_len % 4 != 0 || off + rec_len > end || 8 + name_len > rec_len {
            break;
        }
        out.push(dir::RawEntry {
            off,
            ino: le32(b, off),
            rec_len,
            ft: b[off + 7],
            name: b[off + 8..off + 8 + name_len].to_vec(),
        });
        off += rec_len;
    }
    out
}

/// Hash of an xattr entry (name, then value words), as ext2fs computes it with signed or
/// unsigned name characters.
fn xattr_hash(name: &[u8], value: &[u8], signed: bool) -> u32 {
    let mut h = 0u32;
    for &c in name {
        let c = if signed {
            c as i8 as i32 as u32
        } else {
            u32::from(c)
        };
        h = (h << 5) ^ (h >> 27) ^ c;
    }
    for w in value.chunks_exact(4) {
        h = (h << 16) ^ (h >> 16) ^ le32(w, 0);
    }
    h
}

/// Reserve `[start, start+n)` of an xattr area; false if it leaves the area or overlaps an
/// earlier reservation (e2fsck's "allocation collision").
fn xattr_reserve(regions: &mut Vec<(usize, usize)>, area: usize, start: usize, n: usize) -> bool {
    let Some(end) = start.checked_add(n).filter(|&e| e <= area) else {
        return false;
    };
    if regions.iter().any(|&(a, b)| start < b && a < end) {
        return false;
    }
    regions.push((start, end));
    true
}

/// Validate an xattr entry table (e2fsck's check_ext_attr and check_ea_in_inode): entries
/// from `first`, values at `value_base + e_value_offs`, nothing overlapping, names indexed,
/// hashes matching. `in_inode` allows the zero hash old in-inode entries carry.
fn xattr_entries_error(
    area: &[u8],
    first: usize,
    value_base: usize,
    in_inode: bool,
) -> Option<String> {
    let mut regions = vec![(0, first)];
    let mut off = first;
    while off + 16 <= area.len() && le32(area, off) != 0 {
        let (name_len, index) = (usize::from(area[off]), area[off + 1]);
        let value_offs = usize::from(le16(area, off + 2));
        let (value_inum, value_size) = (le32(area, off + 4), le32(area, off + 8) as usize);
        let len = (16 + name_len + 3) & !3;
        if !xattr_reserve(&mut regions, area.len(), off, len) {
            return Some(format!("entry at {off} overlaps or leaves the area"));
        }
        if index == 0 && !in_inode {
            return Some(format!("entry at {off} has name index 0"));
        }
        if value_inum != 0 {
            return Some(format!(
                "entry at {off} keeps its value in inode {value_inum}"
            ));
        }
        let (vstart, vlen) = (value_base + value_offs, (value_size + 3) & !3);
        if value_size > 0 && !xattr_reserve(&mut regions, area.len(), vstart, vlen) {
            return Some(format!(
                "entry at {off}: value {value_offs}+{value_size} overlaps or leaves the area"
            ));
        }
        let name = &area[off + 16..off + 16 + name_len];
        let value = area
            .get(vstart..vstart + if value_size > 0 { vlen } else { 0 })
            .unwrap_or(&[]);
        let stored = le32(area, off + 12);
        let ok = (in_inode && stored == 0)
            || stored == xattr_hash(name, value, false)
            || stored == xattr_hash(name, value, true);
        if !ok {
            return Some(format!(
                "entry at {off}: hash {stored:#010x} does not match"
            ));
        }
        off += len;
    }
    if !xattr_reserve(&mut regions, area.len(), off, 4) {
        return Some(format!("end marker at {off} overlaps or leaves the area"));
    }
    None
}
