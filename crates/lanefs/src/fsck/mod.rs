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
use crate::disk::blockmap as bmap;
use crate::disk::extent::{self, Extent, Index, Node};
use crate::disk::geometry::Geometry;
use crate::disk::group::{self, GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use crate::disk::inode::{
    DiskInode, FL_APPEND, FL_EA_INODE, FL_EXTENTS, FL_HUGE_FILE, FL_IMMUTABLE, FL_INDEX,
    FL_INLINE_DATA,
};
use crate::disk::mmp;
use crate::disk::superblock::{
    compat, incompat, ro_compat, Superblock, FLAG_UNSIGNED_HASH, SB_OFFSET, SB_SIZE,
};
use crate::disk::{dir, hash, jbd2, le16, le32, test_bit};
use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Instant;

mod backup;
mod bitmaps;
mod blockmap;
mod claims;
mod dirs;
mod geo;
mod inodes;
mod links;
mod pass0;
mod quota;
mod reserved;
mod rt;
mod xattr;

use claims::*;

pub use backup::{check_backup, BackupView};
pub(crate) use geo::*;

/// Inode flag: encrypted (from the ext4 headers; `disk` does not name it).
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
const BADBLOCKS_INO: u32 = crate::disk::inode::reserved::BAD_BLOCKS;
/// The root directory (`crate::types::ROOT_INO`, as the checker's u32 inode numbers).
const ROOT_INO: u32 = crate::disk::inode::reserved::ROOT;
const RESIZE_INO: u32 = crate::disk::inode::reserved::RESIZE;
const JOURNAL_INO: u32 = crate::disk::inode::reserved::JOURNAL;
const DX_BLOCK_MASK: u32 = 0x0FFF_FFFF;
/// `s_state` bits.
const STATE_VALID: u16 = 0x1;
const STATE_ERROR: u16 = 0x2;
/// COMPAT bits `disk` does not name (values from the ext4 headers).
const COMPAT_ORPHAN_FILE: u32 = 0x1000;

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
        debug_assert!(self.scope.is_none(), "problem scopes do not nest");
        self.scope = Some((limit, 0));
    }
    /// Close the scope; returns how many problems it dropped (counted as omitted).
    fn end_scope(&mut self) -> u64 {
        self.scope.take().map_or(0, |(_, dropped)| dropped)
    }
}

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
    /// A realtime file: its data extents are rt-device blocks (`rt.rs`).
    rt: bool,
}

/// A directory found in pass 1, checked in pass 2.
struct DirRec {
    ino: u32,
    seed: u32,
    indexed: bool,
    runs: Vec<Run>,
    /// An inline directory's parent and entry areas (no blocks).
    inline: Option<crate::disk::inline::Dir>,
}

/// References to one xattr block.
struct XattrRef {
    refs: u64,
    stored: u32,
    valid: bool,
    first: u32,
    /// Blocks its entries' value inodes charge to each user's i_blocks.
    ea_blocks: u64,
    /// Value inodes its entries name, charged to each user's quota.
    ea_inodes: u64,
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
    geo: Geometry,
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
    /// References to each value inode that checked out.
    ea_counts: HashMap<u32, u64>,
    /// Value inodes (EA_INODE flag, ea_inode feature): stored reference count, and whether
    /// ctime equals atime (old Lustre-style value inodes keep no count).
    ea_inodes: HashMap<u32, (u64, bool)>,
    /// Blocks listed by the bad blocks inode.
    bad_blocks: Vec<Run>,
    /// Whether dtimes below the inode count are taken as orphan links (e2fsck's
    /// low_dtime_check: off when the superblock's own times are that small).
    low_dtime_check: bool,
    /// Directory blocks pass 2 may still parse, and whether it ran out.
    dir_budget: u64,
    dir_budget_spent: bool,
    /// The realtime device's claims and files (an image with `lanefs_rtdev`).
    rt: Option<rt::RtFsck>,
    /// Usage counted per quota type and id, and each quota file's map (`quota.rs`).
    quota: quota::QuotaFsck,
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
    let geo = geometry(&sb, dev.size())?;
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
    c.timed("realtime", Checker::pass_rt)?;
    c.timed("quota", Checker::pass_quota)?;
    Ok(c.finish())
}

/// Refuse features whose on-disk structures the checker does not parse.
fn check_supported(sb: &Superblock) -> Result<()> {
    let unsupported_incompat = incompat::COMPRESSION
        | incompat::JOURNAL_DEV
        | incompat::DIRDATA
        | incompat::ENCRYPT
        | incompat::CASEFOLD;
    let bad = sb.feature_incompat() & unsupported_incompat;
    if bad != 0 {
        let names = crate::disk::superblock::feature_names(bad, incompat::NAMES);
        return Err(Error::Unsupported(format!(
            "fsck does not check features: {names}"
        )));
    }
    // Blocks shared between files and verity's trees past the end of files would read as
    // duplicate blocks and bad sizes; a read-only-compatible bit with no name here is a
    // structure nobody told the checker about.
    let known: u32 = ro_compat::NAMES
        .iter()
        .map(|&(b, _)| b)
        .fold(0, |a, b| a | b);
    let unchecked = ro_compat::SHARED_BLOCKS | ro_compat::VERITY | !known;
    let bad = sb.feature_ro_compat() & unchecked;
    if bad != 0 {
        let names = crate::disk::superblock::feature_names(bad, ro_compat::NAMES);
        return Err(Error::Unsupported(format!(
            "fsck does not check features: {names}"
        )));
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
    debug_assert!(ranges.len() <= total, "{} ranges of {total}", ranges.len());
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
    debug_assert!(
        n <= computed.len() * 8 && n <= ondisk.len() * 8,
        "{n} bits of maps of {} and {} bytes",
        computed.len(),
        ondisk.len()
    );
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
    fn new(dev: &'a dyn BlockDevice, sb: Superblock, geo: Geometry, verbose: bool) -> Checker<'a> {
        let n = geo.inodes() as usize + 1;
        let claims = Claims::new(geo.blocks);
        let geo_blocks = geo.blocks;
        let busted = |t: u32| t != 0 && t < sb.inodes_count();
        let low_dtime_check = !(busted(sb.wtime()) || busted(sb.mtime()) || busted(sb.mkfs_time()));
        let mut out = Sink::default();
        let rt = match rt::RtFsck::for_image(&sb) {
            Some(Ok(r)) => Some(r),
            Some(Err(why)) => {
                out.add("RT_GEOMETRY_BAD", why);
                None
            }
            None => None,
        };
        Checker {
            dev,
            sb,
            geo,
            out,
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
            ea_counts: HashMap::new(),
            ea_inodes: HashMap::new(),
            bad_blocks: Vec::new(),
            low_dtime_check,
            dir_budget: 2 * geo_blocks,
            dir_budget_spent: false,
            rt,
            quota: Default::default(),
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
            inodes_total: self.geo.inodes(),
            blocks_total: self.geo.blocks,
            // As e2fsck (blocks_count - free): the blocks before the first data block
            // (block 0 with 1 KiB blocks) count as used.
            blocks_used: self.claims.count() + u64::from(self.geo.first_data_block),
            groups: self.geo.groups,
            ..FsckReport::default()
        };
        // Each block is claimed once in a map of the file system's blocks.
        debug_assert!(
            r.blocks_used <= r.blocks_total,
            "{} blocks counted used of {}",
            r.blocks_used,
            r.blocks_total
        );
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
        debug_assert!(
            r.inodes_used <= r.inodes_total,
            "inode table past the inodes"
        );
        r
    }

    fn read_block(&self, b: u64) -> Result<Vec<u8>> {
        read_blocks(self.dev, &self.geo, b, 1)
    }

    fn inode_in_use(&self, ino: u64) -> bool {
        self.kind.get(ino as usize).is_some_and(|&k| k != K_FREE)
    }
}
