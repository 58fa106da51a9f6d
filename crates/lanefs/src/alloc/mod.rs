//! Block and inode allocation, per group.
//!
//! Each group has its own lock (class `group`) over its descriptor and bitmap updates,
//! and atomic free counters readable without it. Nothing here takes a lock shared by the
//! whole file system: a search walks groups one at a time, skipping empty ones by their
//! atomic counters. Bitmap blocks are loaded before the group lock is taken, so no IO
//! happens under it. The seed-000 allocator (try-lock, order lists, stream goals) and
//! the seed-001 inode bitmap search replace `find_blocks_in_group` / `take_inode_bit`
//! behind this same interface.

pub mod blocks;
pub mod buddy;
mod check;
mod free;
pub mod lists;
pub mod reserve;

use buddy::Buddy;
use lists::ScanLists;

use crate::buf::{Buf, BufCache};
use crate::disk::group::{bitmap_csum, GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use crate::disk::{find_one, find_zero, set_bit};
use crate::error::Result;
use crate::journal::Handle;
use crate::sync::{Mutex, GROUP, STREAM_GOAL};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The block bitmap changed: its checksum is due at commit.
const PENDING_BLOCK: u8 = 1;
/// The inode allocator handed new inode fields (`set_inode_fields`).
const PENDING_DESC: u8 = 2;

/// The descriptor fields inode allocation owns, handed over once per commit.
#[derive(Debug, Clone, Copy)]
pub struct InodeFields {
    /// Free inodes.
    pub free: u32,
    /// Directories.
    pub dirs: u32,
    /// Never-used inodes at the end of the table.
    pub itable_unused: u32,
    /// The inode bitmap is still uninitialized (INODE_UNINIT).
    pub uninit: bool,
    /// The inode bitmap's checksum (metadata_csum).
    pub bitmap_csum: Option<u32>,
}

pub use crate::disk::geometry::Geometry;

/// A group's descriptor, free-space index and pending frees, under the group lock.
struct GroupState {
    d: GroupDesc,
    /// The buddy: built from the bitmap on first use. Its "used" is the bitmap's, plus
    /// `busy_blocks`, plus the unused part of every preallocation in `pas`.
    buddy: Option<Buddy>,
    /// Blocks freed by transactions not yet committed: (offset, length, transaction).
    /// Their bitmap bits are already clear (in the freeing transaction) but they stay
    /// used in the buddy until that transaction commits.
    busy_blocks: Vec<(u32, u32, u64)>,
    /// Blocks allocated by transaction `.0` (a bitmap): if that transaction frees them
    /// before it commits, they are reusable at once.
    fresh: Option<(u64, Box<[u8]>)>,
    /// Inode preallocations carved from this group.
    pas: Vec<Prealloc>,
    /// The (largest free order, average fragment order) lists the group is in.
    listed: (Option<u8>, Option<u8>),
}

/// Blocks reserved for a file's next logical blocks (ext4's inode preallocation):
/// `left` blocks from group offset `off` serve logical blocks from `lnext` on.
#[derive(Clone, Copy, Debug)]
struct Prealloc {
    id: u64,
    lnext: u32,
    off: u32,
    left: u32,
}

/// A file's handle on its preallocation (kept in the inode; checked under the group
/// lock, so a preallocation discarded meanwhile is simply not found).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaRef {
    /// Group holding it.
    pub group: u32,
    /// Its identity.
    pub id: u64,
}

/// One allocation group.
pub struct Group {
    /// Group number.
    pub no: u32,
    desc: Mutex<GroupState>,
    /// Whether `busy_blocks` may be non-empty (read without the lock).
    has_busy: std::sync::atomic::AtomicBool,
    /// Allocatable blocks (the buddy's; before it is built, the descriptor's free count).
    /// Read without the lock by the pass predicates; rechecked under it.
    avail: AtomicU32,
    /// Free runs in the buddy (1 before it is built).
    frags: AtomicU32,
    /// Largest free order (-1: none; before the buddy is built, the top order).
    largest: AtomicI32,
    /// What changed since the last commit sealed the descriptor (`PENDING_*`).
    pending: AtomicU8,
    /// The block bitmap's buffer, held once loaded (so it is never evicted and
    /// allocation skips the cache lookup).
    bbuf: OnceLock<Arc<Buf>>,
    /// Free blocks (mirror of the descriptor, readable without the lock).
    pub free_blocks: AtomicU32,
    block_bitmap: u64,
    inode_bitmap: u64,
    inode_table: u64,
}

/// Free space and how fragmented it is (what `e2freefrag` summarizes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FreeSpace {
    /// Free blocks.
    pub free_blocks: u64,
    /// Maximal runs of free blocks inside a group.
    pub free_extents: u64,
    /// Blocks in the longest run.
    pub largest_extent: u64,
}

impl FreeSpace {
    /// Average free extent in blocks (0 when nothing is free).
    pub fn avg_extent_blocks(&self) -> f64 {
        if self.free_extents == 0 {
            0.0
        } else {
            self.free_blocks as f64 / self.free_extents as f64
        }
    }
}

/// Where a file's data goes when its own extents give no goal (seed 000's stream goals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamGoal {
    /// One goal for the whole file system behind one lock (`stream_goal` class), which the
    /// free path also takes: ext4 before the seed (`mb_stream_goal=global`).
    Global,
    /// Each inode continues where its own last allocation ended (the seed).
    #[default]
    Inode,
    /// A small array of goals indexed by inode number, read and written without a lock
    /// (what upstream merged in Linux 6.17).
    Slots,
}

/// Allocator policies (mount options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocOptions {
    /// Try a group's lock instead of waiting for it in every pass but the last
    /// (`mb_trylock`).
    pub trylock: bool,
    /// The stream goal's form (`mb_stream_goal`).
    pub stream: StreamGoal,
    /// Pick groups from the order lists instead of linearly (`mb_optimize_scan`).
    pub optimize_scan: bool,
}

impl Default for AllocOptions {
    fn default() -> Self {
        AllocOptions {
            trylock: true,
            stream: StreamGoal::Inode,
            optimize_scan: true,
        }
    }
}

/// One stream-goal slot (`StreamGoal::Slots`): a group number, alone on its cache line.
#[repr(align(64))]
struct GoalSlot(AtomicU32);

/// The allocator over all groups.
pub struct Allocator {
    /// Policies.
    pub opts: AllocOptions,
    global_goal: Mutex<u64>,
    /// Linux 6.17's `s_mb_last_groups`: min(CPUs, groups / 4) groups, read and written
    /// without a lock, indexed by inode number.
    goal_slots: Box<[GoalSlot]>,
    /// Geometry.
    pub geo: Geometry,
    groups: Vec<Group>,
    gdt: Vec<Arc<Buf>>,
    bufs: Arc<BufCache>,
    /// Buddy orders (block size bits + 2).
    orders: usize,
    /// Groups by largest free order and average fragment order.
    lists: ScanLists,
    /// Live preallocations, all groups.
    pa_count: AtomicUsize,
    /// Next preallocation identity.
    next_pa: AtomicU64,
    /// Blocks file data may not take (ext4's reserved clusters).
    reserve: reserve::Reserve,
}

impl Allocator {
    /// Build the allocator from the decoded descriptors and the pinned GDT blocks.
    pub fn new(
        geo: Geometry,
        descs: Vec<GroupDesc>,
        gdt: Vec<Arc<Buf>>,
        bufs: Arc<BufCache>,
    ) -> Self {
        let orders = buddy::orders_for(geo.bs);
        let lists = ScanLists::new(geo.groups, orders);
        let groups = descs
            .into_iter()
            .enumerate()
            .map(|(i, d)| Group {
                no: i as u32,
                free_blocks: AtomicU32::new(d.free_blocks()),
                block_bitmap: d.block_bitmap(),
                inode_bitmap: d.inode_bitmap(),
                inode_table: d.inode_table(),
                avail: AtomicU32::new(d.free_blocks()),
                frags: AtomicU32::new(1),
                largest: AtomicI32::new(orders as i32 - 1),
                pending: AtomicU8::new(0),
                bbuf: OnceLock::new(),
                desc: Mutex::new(
                    &GROUP,
                    GroupState {
                        d,
                        buddy: None,
                        busy_blocks: Vec::new(),
                        fresh: None,
                        pas: Vec::new(),
                        listed: (None, None),
                    },
                ),
                has_busy: std::sync::atomic::AtomicBool::new(false),
            })
            .collect();
        Allocator {
            opts: AllocOptions::default(),
            global_goal: Mutex::new(&STREAM_GOAL, 0),
            goal_slots: {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                let n = cpus.min(geo.groups.div_ceil(4) as usize).max(1);
                (0..n).map(|_| GoalSlot(AtomicU32::new(0))).collect()
            },
            geo,
            groups,
            gdt,
            bufs,
            orders,
            lists,
            pa_count: AtomicUsize::new(0),
            next_pa: AtomicU64::new(1),
            reserve: reserve::Reserve::default(),
        }
    }

    /// The same allocator with policies `opts`.
    pub fn with_options(mut self, opts: AllocOptions) -> Self {
        self.opts = opts;
        self
    }

    /// The stream goal for a file with no extent to continue from (0: none yet).
    /// `own` is the inode's own last allocation end (`StreamGoal::Inode`).
    pub fn stream_goal(&self, ino: u64, own: u64) -> u64 {
        match self.opts.stream {
            StreamGoal::Global => *self.global_goal.lock(),
            StreamGoal::Inode => own,
            // Only the group, searched from its start (upstream dropped the start
            // block: it was stale as soon as another file used the group).
            StreamGoal::Slots => {
                let slot = &self.goal_slots[ino as usize % self.goal_slots.len()];
                self.geo
                    .group_first(slot.0.load(Ordering::Relaxed) % self.geo.groups)
            }
        }
    }

    /// Record that a file's allocation ended at `end` (the next goal). The inode form is
    /// kept by the caller.
    pub fn set_stream_goal(&self, ino: u64, end: u64) {
        match self.opts.stream {
            StreamGoal::Global => *self.global_goal.lock() = end,
            StreamGoal::Inode => {}
            StreamGoal::Slots => {
                let slot = &self.goal_slots[ino as usize % self.goal_slots.len()].0;
                let g = self.geo.group_of_block(end.min(self.geo.blocks - 1));
                // Written only when it changes: the line stays shared while it holds.
                if slot.load(Ordering::Relaxed) != g {
                    slot.store(g, Ordering::Relaxed);
                }
            }
        }
    }

    /// The groups.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// A copy of group `g`'s descriptor (its checksums are brought up to date at commit).
    pub fn desc(&self, g: u32) -> GroupDesc {
        self.groups[g as usize].desc.lock().d.clone()
    }

    /// Whether some frees wait for their transaction to commit (an ENOSPC may then go
    /// away after a commit).
    pub fn has_pending_frees(&self) -> bool {
        self.groups
            .iter()
            .any(|g| g.has_busy.load(Ordering::Acquire))
    }

    /// Total free blocks (sum of the per-group counters).
    pub fn free_blocks(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| u64::from(g.free_blocks.load(Ordering::Relaxed)))
            .sum()
    }

    /// Free space as the block bitmaps hold it: free blocks, free extents (maximal runs
    /// of free blocks inside a group; allocations never cross groups) and the largest.
    /// Blocks freed by uncommitted transactions count as free, as on disk.
    pub fn free_space(&self) -> Result<FreeSpace> {
        let mut fs = FreeSpace::default();
        let mut scratch = vec![0u8; self.geo.bs as usize];
        for grp in &self.groups {
            let bm = self.block_buf(grp.no)?;
            let st = grp.desc.lock();
            let len = self.geo.group_len(grp.no) as usize;
            let map = bm.read();
            let map: &[u8] = if st.d.flags() & BG_BLOCK_UNINIT != 0 {
                self.init_block_bitmap(grp.no, &mut scratch);
                &scratch
            } else {
                &map
            };
            let mut i = 0;
            while let Some(s) = find_zero(map, i, len) {
                let e = find_one(map, s, len).unwrap_or(len);
                let n = (e - s) as u64;
                fs.free_blocks += n;
                fs.free_extents += 1;
                fs.largest_extent = fs.largest_extent.max(n);
                i = e;
            }
        }
        Ok(fs)
    }

    /// Group `g`'s block bitmap buffer.
    fn block_buf(&self, g: u32) -> Result<&Arc<Buf>> {
        let grp = &self.groups[g as usize];
        if let Some(b) = grp.bbuf.get() {
            return Ok(b);
        }
        let b = self.bufs.get(grp.block_bitmap)?;
        Ok(grp.bbuf.get_or_init(|| b))
    }

    /// Group `g`'s descriptor (or a bitmap, `what`) changed in `h`'s transaction (caller
    /// holds the group lock). The bitmap checksums and the descriptor's bytes in its GDT
    /// block are brought up to date once per commit, by [`Allocator::seal`], not at
    /// every change: a 4 KiB checksum and a write to the GDT block every group shares
    /// stay off the allocation path.
    fn touch(&self, h: &Handle, g: u32, what: u8) {
        debug_assert!(
            what != 0 && what & !(PENDING_BLOCK | PENDING_DESC) == 0,
            "pending bits {what:#x}"
        );
        let per = (self.geo.bs / self.geo.desc_size) as usize;
        h.dirty(&self.gdt[g as usize / per]);
        let p = &self.groups[g as usize].pending;
        if p.load(Ordering::Relaxed) & what != what {
            p.fetch_or(what, Ordering::Relaxed);
        }
    }

    /// Before a commit snapshots its buffers (every handle of the transaction has
    /// ended): write each changed group's bitmap checksums and descriptor into its GDT
    /// block, which its handles already added to the transaction.
    pub fn seal(&self) {
        let per = (self.geo.bs / self.geo.desc_size) as usize;
        for grp in &self.groups {
            if grp.pending.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut st = grp.desc.lock();
            let what = grp.pending.swap(0, Ordering::Relaxed);
            let d = &mut st.d;
            if self.geo.csum {
                if let (true, Some(b)) = (what & PENDING_BLOCK != 0, grp.bbuf.get()) {
                    let bytes = self.geo.bpg as usize / 8;
                    d.set_block_bitmap_csum(bitmap_csum(self.geo.seed, &b.read(), bytes, true));
                }
            }
            d.seal(self.geo.desc_csum, grp.no);
            let buf = &self.gdt[grp.no as usize / per];
            let off = (grp.no as usize % per) * self.geo.desc_size as usize;
            buf.write()[off..off + d.raw.len()].copy_from_slice(&d.raw);
        }
    }

    /// Mark blocks of `g` that hold metadata (superblock/GDT copies, bitmaps and tables
    /// of any group placed there): what an uninitialized block bitmap means.
    fn init_block_bitmap(&self, g: u32, map: &mut [u8]) {
        // The padding past the group's last block is set to the block's end.
        debug_assert_eq!(map.len(), self.geo.bs as usize, "group {g}: bitmap size");
        map.fill(0);
        let first = self.geo.group_first(g);
        let len = u64::from(self.geo.group_len(g));
        let (_, n) = self.geo.base_meta(g);
        for i in 0..n.min(len) {
            set_bit(map, i as usize);
        }
        let itb = (u64::from(self.geo.ipg) * u64::from(self.geo.inode_size))
            .div_ceil(u64::from(self.geo.bs));
        for o in &self.groups {
            let runs = [
                (o.block_bitmap, 1),
                (o.inode_bitmap, 1),
                (o.inode_table, itb),
            ];
            for (start, n) in runs {
                for b in start..start + n {
                    if b >= first && b < first + len {
                        set_bit(map, (b - first) as usize);
                    }
                }
            }
        }
        for i in len..u64::from(self.geo.bs) * 8 {
            set_bit(map, i as usize);
        }
    }

    /// Add group `g`'s descriptor block to `h`'s transaction: its inode fields change
    /// (written at the next seal).
    pub fn dirty_desc(&self, h: &Handle, g: u32) {
        let per = (self.geo.bs / self.geo.desc_size) as usize;
        h.dirty(&self.gdt[g as usize / per]);
    }

    /// The inode allocator's fields of group `g`'s descriptor, written at this seal.
    pub fn set_inode_fields(&self, g: u32, f: InodeFields) {
        let grp = &self.groups[g as usize];
        let mut st = grp.desc.lock();
        let d = &mut st.d;
        d.set_free_inodes(f.free);
        d.set_used_dirs(f.dirs);
        d.set_itable_unused(f.itable_unused);
        if f.uninit {
            d.set_flags(d.flags() | BG_INODE_UNINIT);
        } else {
            d.set_flags(d.flags() & !BG_INODE_UNINIT);
        }
        if let Some(c) = f.bitmap_csum {
            d.set_inode_bitmap_csum(c);
        }
        grp.pending.fetch_or(PENDING_DESC, Ordering::Relaxed);
    }
}
