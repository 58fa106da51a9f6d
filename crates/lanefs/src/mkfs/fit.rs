//! The smallest file system that holds a tree: what a tree needs ([`TreeNeeds`], totalled
//! by the caller's walk of its source), what a file system of a given size would offer
//! once formatted ([`capacity`]), and the search between them ([`min_size`]).
//!
//! The needs are an upper bound of what the engine's copy allocates, counted in the
//! format's own units for each block size the search tries: a file's data blocks
//! (its data runs rounded out to whole blocks) and its map (extent leaf blocks past
//! the four extents an inode holds, or a block map's indirect blocks); a directory's
//! blocks (entries packed as ext4 packs them, doubled for an indexed directory whose
//! leaves splits leave half full, plus its root and index blocks); a symlink's block
//! when its target does not fit the inode; an xattr block for an inode whose xattrs do
//! not fit beside it. Inodes are counted once per host inode (hard links share one).

use super::{layout, params, prepare, MkfsOptions, Prepared};
use crate::disk::superblock::{compat, incompat, ro_compat};
use crate::error::{Error, Result};

/// The longest extent ext4 writes for initialized data (`EXT_INIT_MAX_LEN`).
const MAX_EXTENT: u64 = 32768;
/// Size of an inode's fixed part and the `i_extra_isize` mkfs sets.
const INODE_BASE: u64 = 128 + 32;
/// Bytes of a symlink target kept in the inode (`i_block`, less its terminator).
const FAST_SYMLINK: u64 = 59;
/// The tightest granularity sizes are searched in (mke2fs takes whole pages).
const STEP: u64 = 4096;

/// What a file system of some size offers once formatted, and the format facts the
/// needs of a tree are counted in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Bytes the file system takes (blocks times block size).
    pub bytes: u64,
    /// Block size.
    pub block_size: u32,
    /// Blocks per group.
    pub blocks_per_group: u32,
    /// Blocks free after formatting (root, lost+found, the journal already placed).
    pub free_blocks: u64,
    /// Inodes in all.
    pub inodes: u64,
    /// Inode size.
    pub inode_size: u32,
    /// Bytes of file system per inode that the size class (or `-i`) gives.
    pub inode_ratio: u64,
    /// Files map their blocks with extent trees (else block maps).
    pub extents: bool,
    /// Directory blocks end in a checksum tail (metadata_csum).
    pub csum: bool,
    /// Large directories are hashed trees (dir_index).
    pub dir_index: bool,
}

/// What a format with `opts` on a device of `size` bytes would offer; nothing is written.
/// Errors as [`super::format()`] would.
pub fn capacity(opts: &MkfsOptions, size: u64) -> Result<Capacity> {
    let Prepared { sb, geo, plan, .. } = prepare(opts, size)?;
    debug_assert!(
        geo.blocks * u64::from(geo.bs) <= size,
        "{} blocks do not fit {size} bytes",
        geo.blocks
    );
    Ok(Capacity {
        bytes: geo.blocks * u64::from(geo.bs),
        block_size: geo.bs,
        blocks_per_group: geo.bpg,
        free_blocks: plan.space.free(),
        inodes: u64::from(geo.ipg) * u64::from(geo.groups),
        inode_size: geo.inode_size,
        inode_ratio: params::inode_ratio(opts, size)?,
        extents: sb.has_incompat(incompat::EXTENTS),
        csum: sb.has_ro_compat(ro_compat::METADATA_CSUM),
        dir_index: sb.has_compat(compat::DIR_INDEX),
    })
}

/// One regular file's data, as the runs of bytes that hold data (holes left out).
#[derive(Clone, Debug)]
struct FileNeed {
    /// `(offset, length)` of each data run, in order; empty for an empty file.
    runs: Vec<(u64, u64)>,
}

/// What a tree needs of a file system, totalled as its source is walked.
#[derive(Clone, Debug, Default)]
pub struct TreeNeeds {
    files: Vec<FileNeed>,
    /// Per directory (the root included): the bytes of its entries' records, as
    /// `8 + name length` each (rounded per block size when counted).
    dirs: Vec<Vec<u16>>,
    /// Targets too long for the inode.
    long_symlinks: u64,
    /// Per inode with xattrs: the bytes of its entries (name, value, entry header).
    xattrs: Vec<u64>,
    /// Inodes other than the root.
    inodes: u64,
}

impl TreeNeeds {
    /// An empty tree: its root directory only.
    pub fn new() -> TreeNeeds {
        TreeNeeds {
            dirs: vec![Vec::new()],
            ..TreeNeeds::default()
        }
    }

    /// A new inode (not the root): a regular file, a directory, a symlink, a device
    /// node, a FIFO or a socket. A hard link to an inode already counted is not one.
    pub fn inode(&mut self) {
        self.inodes += 1;
    }

    /// A name of `len` bytes in directory `dir` (an index [`TreeNeeds::dir`] gave; 0
    /// is the root).
    pub fn entry(&mut self, dir: usize, len: usize) {
        debug_assert!((1..=255).contains(&len), "name of {len} bytes");
        self.dirs[dir].push(len as u16);
    }

    /// A new directory (its inode counted by [`TreeNeeds::inode`]); its index for
    /// [`TreeNeeds::entry`].
    pub fn dir(&mut self) -> usize {
        self.dirs.push(Vec::new());
        self.dirs.len() - 1
    }

    /// A regular file whose data lies in `runs` (`(offset, length)` in bytes, in
    /// order; a dense file of `n` bytes is `[(0, n)]`).
    pub fn file(&mut self, runs: Vec<(u64, u64)>) {
        debug_assert!(runs.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
        let runs = runs.into_iter().filter(|r| r.1 > 0).collect();
        self.files.push(FileNeed { runs });
    }

    /// A symlink to a target of `len` bytes.
    pub fn symlink(&mut self, len: usize) {
        if len as u64 > FAST_SYMLINK {
            self.long_symlinks += 1;
        }
    }

    /// An inode's xattrs: each as its full name's length and its value's length.
    pub fn xattrs(&mut self, entries: impl IntoIterator<Item = (usize, usize)>) {
        // ext4_xattr_entry: 16 bytes, the name (its prefix as an index, counted in
        // full here: an upper bound), both rounded to 4; the value rounded to 4.
        let bytes: u64 = entries
            .into_iter()
            .map(|(name, value)| {
                (16 + name as u64).next_multiple_of(4) + (value as u64).next_multiple_of(4)
            })
            .sum();
        if bytes > 0 {
            self.xattrs.push(bytes);
        }
    }

    /// Inodes the tree takes besides the root.
    pub fn inodes(&self) -> u64 {
        self.inodes
    }

    /// Bytes of file data (before rounding to blocks).
    pub fn data_bytes(&self) -> u64 {
        self.files.iter().flat_map(|f| &f.runs).map(|r| r.1).sum()
    }

    /// Blocks the tree takes in a file system with `cap`'s format (an upper bound).
    pub fn blocks(&self, cap: &Capacity) -> u64 {
        let files: u64 = self.files.iter().map(|f| file_blocks(f, cap)).sum();
        let dirs: u64 = self.dirs.iter().map(|d| dir_blocks(d, cap)).sum();
        // Room for xattrs beside the inode: what follows its fixed part, less the
        // in-inode header's magic and the 4-byte terminator.
        let room = u64::from(cap.inode_size).saturating_sub(INODE_BASE + 8);
        // One block each for the rest: xattrs that do not fit one block are refused by
        // the copy, as ext4 refuses them.
        let xattr_blocks = self.xattrs.iter().filter(|&&b| b > room).count() as u64;
        files + dirs + self.long_symlinks + xattr_blocks
    }
}

/// Data and map blocks of one file.
fn file_blocks(f: &FileNeed, cap: &Capacity) -> u64 {
    let bs = u64::from(cap.block_size);
    let mut data = 0;
    let mut last_end = None::<u64>;
    for &(off, len) in &f.runs {
        let (first, end) = (off / bs, (off + len).div_ceil(bs));
        // Runs sharing a block count it once.
        let first = last_end.map_or(first, |e| first.max(e));
        data += end.saturating_sub(first);
        last_end = Some(end.max(last_end.unwrap_or(0)));
    }
    let logical_end = last_end.unwrap_or(0);
    data + if cap.extents {
        extent_map_blocks(f.runs.len() as u64, data, cap)
    } else {
        block_map_blocks(logical_end, bs)
    }
}

/// Extent tree blocks beyond the inode for `data` blocks in `runs` source runs: each
/// run may split at the longest extent and at each group's metadata it crosses.
fn extent_map_blocks(runs: u64, data: u64, cap: &Capacity) -> u64 {
    let extents = runs + data / MAX_EXTENT + data / u64::from(cap.blocks_per_group) + 1;
    if extents <= 4 {
        return 0;
    }
    let per_block = (u64::from(cap.block_size) - 12) / 12;
    // Each level must shrink for the loop to end: at least 85 per 1 KiB block.
    debug_assert!(per_block > 4, "{per_block} extents per block");
    let (mut level, mut total) = (extents, 0);
    while level > 4 {
        level = level.div_ceil(per_block);
        total += level;
    }
    total
}

/// Indirect blocks of a block map reaching logical block `end` (dense: an upper bound).
fn block_map_blocks(end: u64, bs: u64) -> u64 {
    let apb = bs / 4;
    debug_assert!(apb >= 256, "{apb} pointers per block");
    let mut past = end.saturating_sub(12);
    if past == 0 {
        return 0;
    }
    let single = past.min(apb);
    past -= single;
    let mut total = 1;
    if past > 0 {
        let double = past.min(apb * apb);
        past -= double;
        total += 1 + double.div_ceil(apb);
    }
    if past > 0 {
        total += 1 + past.div_ceil(apb * apb) + past.div_ceil(apb);
    }
    total
}

/// Blocks of one directory whose entries have names of the given lengths.
fn dir_blocks(names: &[u16], cap: &Capacity) -> u64 {
    let bs = u64::from(cap.block_size);
    let usable = bs - if cap.csum { 12 } else { 0 };
    // Records never span blocks: pack them in order ("." and ".." first, 12 bytes
    // each; each name 8 bytes more, rounded to 4), a record that does not fit starting
    // the next block.
    let (mut linear, mut used) = (1u64, 24u64);
    let mut largest = 12u64;
    for &n in names {
        let rec = (8 + u64::from(n)).next_multiple_of(4);
        largest = largest.max(rec);
        if used + rec > usable {
            linear += 1;
            used = 0;
        }
        used += rec;
    }
    if linear <= 1 {
        return 1;
    }
    // Hashed: a root block; leaves split by entry count, so a half may hold as little as
    // half its entries of the smallest records: twice the packed blocks, and as many
    // more as the largest record leaves unused per block; index blocks split in half
    // too. A linear directory is its packed blocks.
    let blocks = if cap.dir_index {
        let leaves = 2 * linear + (2 * linear * largest).div_ceil(usable);
        let per_index = (bs - 16) / 8;
        1 + leaves + (2 * leaves).div_ceil(per_index)
    } else {
        linear
    };
    // Its own extent leaf when its blocks lie in more than four runs.
    blocks
        + u64::from(cap.extents && blocks > 4)
        + if cap.extents {
            0
        } else {
            block_map_blocks(blocks, bs)
        }
}

/// Free space asked for beyond the tree's needs (`--size min+SLACK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slack {
    /// This many bytes more.
    Bytes(u64),
    /// This percentage of the minimum more.
    Percent(u32),
}

/// The size [`min_size`] found and the options to format it with.
#[derive(Clone, Debug)]
pub struct Fit {
    /// Bytes of the device (a multiple of 4 KiB).
    pub size: u64,
    /// The options with the inode count set (when `-N` and `-i` were left open): the
    /// tree's inodes, the reserved ones, and one per inode-ratio bytes of slack.
    pub opts: MkfsOptions,
    /// What the file system offers.
    pub capacity: Capacity,
    /// Blocks the tree needs.
    pub needed_blocks: u64,
}

/// The smallest size (in 4 KiB steps) of a file system made with `opts` that holds
/// `needs` with `slack` free beyond them.
///
/// The block size and inode ratio follow the size class of each size tried, as mke2fs
/// picks them from the device's size, so every class below the answer is searched.
/// The inode count is what the tree takes plus the slack's share (unless `-N` or `-i`
/// fix it); a small margin of blocks covers the allocator placing a file's blocks in
/// more runs than counted.
pub fn min_size(opts: &MkfsOptions, needs: &TreeNeeds, slack: Slack) -> Result<Fit> {
    if opts.features.split(',').any(|f| f.trim() == "bigalloc") {
        return Err(Error::Invalid(
            "a minimal size is not computed with bigalloc (give --size)".into(),
        ));
    }
    let wanted = u64::from(layout::FIRST_INO) + needs.inodes;
    if let Some(n) = opts.inodes.filter(|&n| n < wanted) {
        return Err(Error::Invalid(format!(
            "-N {n} is fewer inodes than the tree needs ({wanted}, the reserved ones included)"
        )));
    }
    let bytes = match slack {
        Slack::Bytes(b) => b,
        Slack::Percent(0) => 0,
        Slack::Percent(p) => {
            let min = search(opts, needs, 0)?;
            min.size * u64::from(p) / 100
        }
    };
    search(opts, needs, bytes)
}

/// The smallest fit with `slack` bytes free beyond the needs.
fn search(opts: &MkfsOptions, needs: &TreeNeeds, slack: u64) -> Result<Fit> {
    let bounds = bounds();
    let mut lo = 0;
    for &top in &bounds {
        let top = top - STEP;
        if top < lo {
            continue;
        }
        if try_fit(opts, needs, slack, top)?.is_none() {
            lo = top + STEP;
            continue;
        }
        // `high` fits; every size below `low` was tried or skipped.
        let (mut low, mut high) = (lo / STEP, top / STEP);
        while low < high {
            let mid = low + (high - low) / 2;
            if try_fit(opts, needs, slack, mid * STEP)?.is_some() {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        let size = high * STEP;
        return try_fit(opts, needs, slack, size)?
            .ok_or_else(|| Error::Invalid(format!("no fit found at {size} bytes")));
    }
    // Nothing fits: the options' own error at the largest size, if they have one.
    let last = bounds[bounds.len() - 1];
    capacity(opts, last - STEP)?;
    Err(Error::Invalid(format!(
        "the tree needs more than {last} bytes"
    )))
}

/// The sizes where what a file system offers may step down as the size grows: the
/// size classes (mke2fs.conf's floppy, small, default, big and huge pick block size and
/// inode ratio) and the default journal's steps (for 1, 2 and 4 KiB blocks). Between
/// two of them more size never offers less (a dropped last group offers the same), so
/// the first span whose largest size fits holds the smallest fit.
fn bounds() -> Vec<u64> {
    const CLASSES: [u64; 5] = [3 << 20, 512 << 20, 4 << 40, 16 << 40, 1 << 50];
    let mut b: Vec<u64> = CLASSES.to_vec();
    for bs in [1024u64, 2048, 4096] {
        b.extend(super::JOURNAL_SIZES.iter().map(|&(blocks, _)| blocks * bs));
    }
    b.sort_unstable();
    b.dedup();
    // search() steps below each bound by STEP.
    debug_assert!(b[0] > STEP && b.iter().all(|x| x.is_multiple_of(STEP)));
    b
}

/// The fit at `size`, or `None` when the tree does not fit (or the size is refused as
/// too small).
fn try_fit(opts: &MkfsOptions, needs: &TreeNeeds, slack: u64, size: u64) -> Result<Option<Fit>> {
    let Ok(ratio) = params::inode_ratio(opts, size) else {
        return Ok(None);
    };
    // lost+found and the reserved inodes come first; then the tree's.
    let wanted = u64::from(layout::FIRST_INO) + needs.inodes;
    let mut opts = opts.clone();
    let chosen = opts.inodes.is_none() && opts.inode_ratio.is_none();
    let wanted_all = wanted + slack / ratio;
    if chosen {
        opts.inodes = Some(wanted_all);
    }
    let mut cap = match capacity(&opts, size) {
        Ok(c) => c,
        Err(Error::Invalid(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    // Whole inode-table blocks in multiples of 8 per group may round the count down
    // (as mke2fs's -N does): ask for more, at least 8 per group each time (one step of
    // the rounding).
    let groups = (cap.bytes / u64::from(cap.block_size)).div_ceil(u64::from(cap.blocks_per_group));
    debug_assert!(groups >= 1, "capacity of no group: {cap:?}");
    for _ in 0..8 {
        if !chosen || cap.inodes >= wanted_all {
            break;
        }
        let more = (wanted_all - cap.inodes).max(8 * groups);
        opts.inodes = opts.inodes.map(|n| n + more);
        cap = match capacity(&opts, size) {
            Ok(c) => c,
            Err(Error::Invalid(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
    }
    let bs = u64::from(cap.block_size);
    let needed = needs.blocks(&cap);
    // The margin: the allocator may split files more than counted when it fills the
    // last groups; a 256th and a group's worth of extent leaves.
    let margin = needed / 256 + 64;
    let fits = cap.inodes >= wanted && cap.free_blocks >= needed + margin + slack.div_ceil(bs);
    Ok(fits.then_some(Fit {
        size,
        opts,
        capacity: cap,
        needed_blocks: needed,
    }))
}
