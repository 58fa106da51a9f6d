//! Inode allocation (seed 001): which group a new inode goes to, and how its bit is
//! claimed in that group's inode bitmap.
//!
//! Group choice is ext4's: directories by Orlov over flex groups (top-level ones spread
//! by a hash of the name to the flex group with the fewest directories, others near their
//! parent unless its flex group is crowded), files in their parent's flex group (or the
//! parent's group and a quadratic probe without flex_bg).
//!
//! Each group keeps two atomic copies of its bitmap (`Maps`): `used`, the bitmap plus
//! inodes freed by transactions not yet committed, and `live`, the bitmap as the running
//! transaction leaves it. Searches read `used` without any lock; a bit is claimed by an
//! atomic test-and-set on it under the group's inode lock (class `igroup`), where `live`
//! and the counters change with it. The bitmap block itself is written once per commit,
//! from `live`, when the transaction is sealed ([`InodeAllocator::seal`]), as the
//! descriptor is: threads claiming in one group then share the lock's line, not the
//! block's lock, bytes and flags as well (which cost two threads creating in one group a
//! few percent of their rate).
//! [`IallocPolicy::Optimistic`] (default, the seed) searches again under the lock after a
//! lost race, so the second try cannot lose, and continues each search in the thread's
//! own chunk of 512 inodes of the group (`chunk_start`, ours, as XFS's inode chunks), so
//! threads creating in one group do not interleave in the same table blocks or write the
//! same cache line of the search bitmap;
//! [`IallocPolicy::Locked`] is the loop before 2017, which drops the lock and searches
//! again from the next bit after every lost race, and takes the lock a second time for
//! the counters.
//!
//! The descriptor fields this module owns (free inodes, used directories, itable_unused,
//! INODE_UNINIT, the inode bitmap checksum) are handed to the block allocator's copy of
//! the descriptor once per commit ([`InodeAllocator::seal`]), which writes the descriptor.
//!
//! The code, by concern: this file holds the allocator's per-group state and its
//! lookups; `ialloc/searchmap.rs` the bitmaps in memory, `ialloc/orlov.rs` the group
//! choice, `ialloc/claim.rs` claiming a bit, `ialloc/free.rs` freeing one and releasing
//! committed frees, `ialloc/seal.rs` the bitmap blocks and descriptor fields written
//! before each commit.

use crate::buf::{Buf, BufCache};
use crate::disk::geometry::Geometry;
use crate::disk::group::{GroupDesc, BG_INODE_UNINIT};
use crate::disk::{bitmap_word, test_bit};
use crate::error::{Error, Result};
use crate::sync::{my_lane, Mutex, Padded, IGROUP, LANES};
use crate::types::IallocPolicy;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

#[path = "ialloc/claim.rs"]
mod claim;
#[path = "ialloc/free.rs"]
mod free;
#[path = "ialloc/orlov.rs"]
mod orlov;
#[path = "ialloc/seal.rs"]
mod seal;
#[path = "ialloc/searchmap.rs"]
mod searchmap;
use searchmap::{BitLine, SearchMap};

/// "No group recorded" in a directory's last-allocation hint (ext4's `~0`).
pub const NO_GROUP: u32 = u32::MAX;

/// Where inode `ino` lives: its table block and byte offset inside it.
pub struct InodeLoc {
    /// Block of the inode table.
    pub blk: u64,
    /// Byte offset in that block.
    pub off: usize,
}

/// Starts the next field on a cache-line pair of its own (a field of size 0).
#[repr(align(128))]
struct LineBreak;

/// One group's inode allocation state: what searches read (the locations, the search
/// bitmap, the bitmap buffer) on the first lines, what every claim writes (the counters,
/// the lock and what it guards for a claim) on one line of its own, a free's list of
/// uncommitted frees on the next, and no line shared with another group, so threads
/// creating in one group do not bounce the lines the others only read, and pass one
/// line between them per claim.
#[repr(C, align(128))]
struct IGroup {
    bitmap: u64,
    table: u64,
    /// The search and live bitmaps, built on first use.
    maps: OnceLock<Maps>,
    /// The inode bitmap block, held once loaded (written only by [`InodeAllocator::seal`]
    /// once the group has claimed or freed an inode).
    ibuf: OnceLock<Arc<Buf>>,
    /// The group has a free inode: `free > 0`, written only when that changes, so the
    /// group choice of every create reads it from its own cache (`free` itself shares
    /// the lock's line, which each claim writes).
    has_free: AtomicBool,
    _hot: LineBreak,
    /// Free inodes: changed only under the group's inode lock, read without it by group
    /// choice.
    free: AtomicU32,
    /// Directories: changed only under the lock, as `free`.
    dirs: AtomicU32,
    /// Counters or bitmap changed since the last seal.
    pending: AtomicBool,
    /// Some frees wait for their transaction to commit.
    has_busy: AtomicBool,
    /// The rest of the group's state, under its inode lock.
    st: Mutex<IState>,
}

/// A group's two atomic bitmaps, one bit per inode, bits past the group's last inode set.
struct Maps {
    /// The bitmap plus inodes freed by uncommitted transactions: what searches read,
    /// without a lock, and claims test-and-set.
    used: SearchMap,
    /// The bitmap as the running transaction leaves it (changed under the group's lock):
    /// what the seal writes to the block, and what a free checks.
    live: SearchMap,
}

/// Each thread lane's chunk in 32 groups under `Optimistic`: the bit after the lane's last
/// inode there (0: none yet; see [`chunk_start`]). A lane's cursors are on lines no other
/// lane writes.
type CursorLine = Padded<[AtomicU32; CURSORS_PER_LINE]>;

const CURSORS_PER_LINE: usize = 32;

/// Under the group's inode lock: what a claim reads and writes first (on the line of the
/// counters and the lock), a free's list after.
#[repr(C)]
struct IState {
    itable_unused: u32,
    /// The bitmap is uninitialized on disk (INODE_UNINIT): all free.
    uninit: bool,
    /// Inode bits allocated by transaction `.0`: freed by that same transaction before it
    /// commits, they are reusable at once (nothing on disk ever saw them in use). A line
    /// per chunk, as the search bitmap's.
    fresh: Option<(u64, Box<[BitLine]>)>,
    /// Free bits of the live bitmap less `free` when the maps were built: 0 on a
    /// consistent image, and unchanged by claims and frees (checked at each seal).
    skew: i64,
    /// Inode bits freed by transactions not yet committed: (bit, transaction). Still set
    /// in `used`, clear in `live` (and in the bitmap block from the next seal).
    busy: Vec<(u32, u64)>,
}

/// Inode allocation over all groups.
pub struct InodeAllocator {
    geo: Geometry,
    policy: IallocPolicy,
    bufs: Arc<BufCache>,
    groups: Vec<IGroup>,
    /// The lanes' chunk cursors, a row of lines per lane.
    cursors: Box<[CursorLine]>,
    /// The directory hash seed: Orlov spreads top-level directories by a name hash.
    hash_seed: [u32; 4],
    /// Lost test-and-set races (for tests and reports).
    lost_races: AtomicU64,
}

impl InodeAllocator {
    /// Build from the descriptors read at mount.
    pub fn new(
        geo: Geometry,
        descs: &[GroupDesc],
        bufs: Arc<BufCache>,
        policy: IallocPolicy,
        hash_seed: [u32; 4],
    ) -> InodeAllocator {
        let groups = descs
            .iter()
            .map(|d| IGroup {
                st: Mutex::new(
                    &IGROUP,
                    IState {
                        itable_unused: d.itable_unused(),
                        uninit: d.flags() & BG_INODE_UNINIT != 0,
                        skew: 0,
                        busy: Vec::new(),
                        fresh: None,
                    },
                ),
                free: AtomicU32::new(d.free_inodes()),
                has_free: AtomicBool::new(d.free_inodes() > 0),
                dirs: AtomicU32::new(d.used_dirs()),
                maps: OnceLock::new(),
                ibuf: OnceLock::new(),
                pending: AtomicBool::new(false),
                has_busy: AtomicBool::new(false),
                _hot: LineBreak,
                bitmap: d.inode_bitmap(),
                table: d.inode_table(),
            })
            .collect::<Vec<_>>();
        let lines = LANES * groups.len().div_ceil(CURSORS_PER_LINE);
        let cursors = (0..lines)
            .map(|_| Padded(std::array::from_fn(|_| AtomicU32::new(0))))
            .collect();
        InodeAllocator {
            geo,
            policy,
            bufs,
            groups,
            cursors,
            hash_seed,
            lost_races: AtomicU64::new(0),
        }
    }

    /// This thread lane's chunk cursor in group `g`.
    fn cursor(&self, g: u32) -> &AtomicU32 {
        let per_lane = self.groups.len().div_ceil(CURSORS_PER_LINE);
        let g = g as usize;
        &self.cursors[my_lane() * per_lane + g / CURSORS_PER_LINE][g % CURSORS_PER_LINE]
    }

    /// The geometry.
    pub fn geo(&self) -> &Geometry {
        &self.geo
    }

    /// The policy in force.
    pub fn policy(&self) -> IallocPolicy {
        self.policy
    }

    /// Test-and-set races lost since mount.
    pub fn lost_races(&self) -> u64 {
        self.lost_races.load(Ordering::Relaxed)
    }

    /// Total free inodes (sum of the per-group counters).
    pub fn free_inodes(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| u64::from(g.free.load(Ordering::Relaxed)))
            .sum()
    }

    /// Total directories.
    pub fn used_dirs(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| u64::from(g.dirs.load(Ordering::Relaxed)))
            .sum()
    }

    /// Where inode `ino` lives in its group's inode table.
    pub fn inode_loc(&self, ino: u64) -> Result<InodeLoc> {
        if ino == 0 || ino > self.geo.inodes() {
            return Err(Error::Invalid(format!("inode number {ino} out of range")));
        }
        let g = &self.groups[self.geo.group_of_inode(ino) as usize];
        let byte = (ino - 1) % u64::from(self.geo.ipg) * u64::from(self.geo.inode_size);
        let off = (byte % u64::from(self.geo.bs)) as usize;
        debug_assert!(
            off + self.geo.inode_size as usize <= self.geo.bs as usize,
            "inode {ino} straddles a table block"
        );
        Ok(InodeLoc {
            blk: g.table + byte / u64::from(self.geo.bs),
            off,
        })
    }

    fn ibuf(&self, g: u32) -> Result<&Arc<Buf>> {
        let grp = &self.groups[g as usize];
        if let Some(b) = grp.ibuf.get() {
            return Ok(b);
        }
        let b = self.bufs.get(grp.bitmap)?;
        Ok(grp.ibuf.get_or_init(|| b))
    }

    /// Group `g`'s bitmaps, built from its bitmap block on first use.
    fn maps(&self, g: u32) -> Result<&Maps> {
        let grp = &self.groups[g as usize];
        if let Some(m) = grp.maps.get() {
            return Ok(m);
        }
        let ib = self.ibuf(g)?;
        let ipg = self.geo.ipg as usize;
        // Built once, under the lock (a thread that lost the race finds them here), while
        // nothing changes the block (only a seal writes it, and it takes the lock).
        let mut st = grp.st.lock();
        if let Some(m) = grp.maps.get() {
            return Ok(m);
        }
        let map = ib.read();
        let word = |w: usize| {
            // Past the group's last inode the bits read as used.
            let past = match ipg.saturating_sub(w * 64) {
                0 => u64::MAX,
                n if n >= 64 => 0,
                n => !0 << n,
            };
            let disk = if st.uninit { 0 } else { bitmap_word(&map, w) };
            disk | past
        };
        let built = Maps {
            used: SearchMap::new(ipg, word),
            live: SearchMap::new(ipg, word),
        };
        drop(map);
        st.skew = built.live.zeros(ipg) as i64 - i64::from(grp.free.load(Ordering::Relaxed));
        Ok(grp.maps.get_or_init(|| built))
    }

    /// Whether inode `ino` is in use (for validating directory entries): in the group's
    /// live bitmap once built, else in its bitmap block.
    pub fn inode_in_use(&self, ino: u64) -> Result<bool> {
        let g = self.geo.group_of_inode(ino);
        let bit = ((ino - 1) % u64::from(self.geo.ipg)) as usize;
        let grp = &self.groups[g as usize];
        if let Some(m) = grp.maps.get() {
            return Ok(m.live.test(bit));
        }
        if grp.st.lock().uninit {
            return Ok(false);
        }
        let map = self.ibuf(g)?.read();
        Ok(test_bit(&map, bit))
    }
}

/// What a new inode is for: its directory and name, and whether it is a directory.
#[derive(Clone, Copy)]
pub struct Want<'a> {
    /// The parent directory's inode number.
    pub parent_ino: u64,
    /// The parent directory's group.
    pub parent_group: u32,
    /// The parent's hint of where its last child went (`NO_GROUP`: none), updated.
    pub last: &'a AtomicU32,
    /// The new inode is a directory.
    pub is_dir: bool,
    /// A directory directly below the root: spread it (Orlov's top-level rule).
    pub top: bool,
    /// The new name (hashed to spread top-level directories).
    pub name: &'a [u8],
}

#[cfg(test)]
#[path = "ialloc/tests.rs"]
mod tests;
