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

use crate::alloc::{Allocator, InodeFields};
use crate::buf::{Buf, BufCache};
use crate::disk::geometry::Geometry;
use crate::disk::group::{bitmap_csum, GroupDesc, BG_INODE_UNINIT};
use crate::disk::hash;
use crate::disk::{bitmap_word, put_bitmap_word, test_bit};
use crate::error::{Error, Result};
use crate::journal::Handle;
use crate::sync::{my_lane, Mutex, Padded, IGROUP, LANES};
use crate::types::IallocPolicy;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

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

/// One chunk's words of a plain bitmap, alone on a cache line.
#[repr(align(64))]
#[derive(Clone, Copy, Default)]
struct BitLine([u64; CHUNK_WORDS]);

impl BitLine {
    /// Bit `i` of a map of lines, its word and mask.
    fn locate(map: &mut [BitLine], i: usize) -> (&mut u64, u64) {
        (&mut map[i / CHUNK].0[i % CHUNK / 64], 1 << (i % 64))
    }
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

/// Inodes in a chunk: one cache line (eight words) of the search bitmap.
const CHUNK: usize = 512;

/// Search-bitmap words in a chunk.
const CHUNK_WORDS: usize = CHUNK / 64;

/// A group's search bitmap: a bit per inode, set when in use, laid out in cache lines of
/// one chunk each, so lanes filling different chunks never write the same line.
struct SearchMap(Box<[SearchLine]>);

/// One chunk's words, alone on a cache line.
#[repr(align(64))]
struct SearchLine([AtomicU64; CHUNK_WORDS]);

impl SearchMap {
    /// A map of `bits` bits whose word `w` starts as `init(w)`; the words of the last
    /// line past the last bit's word read as all used.
    fn new(bits: usize, init: impl Fn(usize) -> u64) -> SearchMap {
        let words = bits.div_ceil(64);
        SearchMap(
            (0..words.div_ceil(CHUNK_WORDS))
                .map(|l| {
                    SearchLine(std::array::from_fn(|i| {
                        let w = l * CHUNK_WORDS + i;
                        AtomicU64::new(if w < words { init(w) } else { u64::MAX })
                    }))
                })
                .collect(),
        )
    }

    /// Word `w`.
    fn word(&self, w: usize) -> &AtomicU64 {
        &self.0[w / CHUNK_WORDS].0[w % CHUNK_WORDS]
    }

    /// Word `w`, or all set past the map's end.
    fn word_or_full(&self, w: usize) -> u64 {
        self.0
            .get(w / CHUNK_WORDS)
            .map_or(u64::MAX, |l| l.0[w % CHUNK_WORDS].load(Ordering::Relaxed))
    }

    /// Clear bits among the first `bits`.
    fn zeros(&self, bits: usize) -> usize {
        (0..bits.div_ceil(64))
            .map(|w| {
                let n = (bits - w * 64).min(64);
                let mask = if n == 64 { !0 } else { (1u64 << n) - 1 };
                (!self.word(w).load(Ordering::Relaxed) & mask).count_ones() as usize
            })
            .sum()
    }

    /// Whether bit `i` is set.
    fn test(&self, i: usize) -> bool {
        self.word(i / 64).load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    /// Clear bit `i`.
    fn clear(&self, i: usize) {
        let was = self
            .word(i / 64)
            .fetch_and(!(1 << (i % 64)), Ordering::Release);
        // Callers clear a bit they know set, under the group's lock (the only place
        // bits are cleared).
        debug_assert!(was & (1 << (i % 64)) != 0, "inode bit {i} cleared twice");
    }

    /// Whether chunk `c` is entirely free from bit `first` on (the bits before it are
    /// group 0's reserved inodes).
    fn chunk_free(&self, c: usize, first: usize) -> bool {
        self.0[c].0.iter().enumerate().all(|(i, w)| {
            let base = (c * CHUNK_WORDS + i) * 64;
            let below = first.saturating_sub(base).min(64);
            let skip = if below == 64 { !0 } else { (1u64 << below) - 1 };
            w.load(Ordering::Relaxed) & !skip == 0
        })
    }
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

    /// Allocate an inode for `want` (its directory's last-allocation hint is updated).
    pub fn alloc(&self, h: &Handle, al: &Allocator, want: Want<'_>) -> Result<u64> {
        let g0 = if want.is_dir {
            self.find_group_orlov(&want, al)
        } else {
            self.find_group_other(&want, al)
        };
        let Some(g0) = g0 else {
            return Err(Error::NoInodes);
        };
        let n = self.geo.groups;
        debug_assert!(g0 < n, "group choice {g0} of {n}");
        want.last.store(g0, Ordering::Relaxed);
        for i in 0..n {
            let g = (g0 + i) % n;
            if !self.groups[g as usize].has_free.load(Ordering::Relaxed) {
                continue;
            }
            if let Some(bit) = self.claim_in(h, al, g, want.is_dir)? {
                return Ok(u64::from(g) * u64::from(self.geo.ipg) + u64::from(bit) + 1);
            }
        }
        Err(Error::NoInodes)
    }

    /// Claim a free bit of group `g` (see the module comment for the two policies).
    fn claim_in(&self, h: &Handle, al: &Allocator, g: u32, is_dir: bool) -> Result<Option<u32>> {
        let grp = &self.groups[g as usize];
        let maps = self.maps(g)?;
        let used = &maps.used;
        let ib = self.ibuf(g)?;
        let ipg = self.geo.ipg as usize;
        let first = if g == 0 {
            self.geo.first_ino as usize - 1
        } else {
            0
        };
        let mut from = match self.policy {
            IallocPolicy::Optimistic => {
                let cursor = self.cursor(g).load(Ordering::Relaxed) as usize;
                chunk_start(cursor, used, first, ipg)
            }
            IallocPolicy::Locked => first,
        };
        // (`first` itself may lie past the group on a corrupt superblock: the group then
        // reads as full.)
        debug_assert!(
            from == first || (first..ipg).contains(&from),
            "group {g}: search start {from} outside {first}..{ipg}"
        );
        loop {
            let Some(bit) = find_zero_atomic(used, from, ipg) else {
                if from > first && self.policy == IallocPolicy::Optimistic {
                    // The chunk's bits went to other threads: the whole group, once.
                    from = first;
                    continue;
                }
                return Ok(None);
            };
            // What ext4 does here, between the search and the lock: journal write
            // access to the bitmap and descriptor blocks (both written at the seal).
            h.dirty(ib);
            al.dirty_desc(h, g);
            let mut st = grp.st.lock();
            if grp.free.load(Ordering::Relaxed) == 0 {
                return Ok(None);
            }
            let got = if !test_and_set(used, bit) {
                Some(bit)
            } else {
                self.lost_races.fetch_add(1, Ordering::Relaxed);
                match self.policy {
                    // Search again with the lock held: the bit found cannot be stolen.
                    IallocPolicy::Optimistic => {
                        let again = find_zero_atomic(used, first, ipg);
                        if let Some(b) = again {
                            let was = test_and_set(used, b);
                            debug_assert!(!was, "group {g}: bit {b} taken under the lock");
                        }
                        again
                    }
                    IallocPolicy::Locked => None,
                }
            };
            if let Some(b) = got {
                // A reserved inode (group 0, below the first) or a bit past the group
                // handed out would overwrite an inode in use or another group's table.
                assert!(
                    (first..ipg).contains(&b),
                    "group {g}: claimed inode bit {b} outside {first}..{ipg}"
                );
            }
            let Some(bit) = got else {
                drop(st);
                match self.policy {
                    IallocPolicy::Optimistic => return Ok(None),
                    IallocPolicy::Locked => {
                        from = bit + 1;
                        continue;
                    }
                }
            };
            let fresh = if self.policy == IallocPolicy::Locked {
                // Before 2017 the bit was set in one locked section and the counters
                // updated in a second one.
                set_live(maps, &mut st, g, bit);
                drop(st);
                st = grp.st.lock();
                self.account_alloc(h, grp, &mut st, bit, is_dir)
            } else {
                set_live(maps, &mut st, g, bit);
                let fresh = self.account_alloc(h, grp, &mut st, bit, is_dir);
                self.cursor(g).store(bit as u32 + 1, Ordering::Relaxed);
                fresh
            };
            drop(st);
            if let Some(blk) = fresh {
                // Outside the group's lock: a neighbour claimed meanwhile finds the
                // block cached (or caches it first, and then it is kept).
                h.dirty(&self.bufs.get_new_keep(blk));
            }
            return Ok(Some(bit as u32));
        }
    }

    /// The counters after `bit` was claimed (under the group's inode lock).
    /// Returns the inode table block to take without reading ([`Self::fresh_block`]).
    fn account_alloc(
        &self,
        h: &Handle,
        grp: &IGroup,
        st: &mut IState,
        bit: usize,
        is_dir: bool,
    ) -> Option<u64> {
        // The counters change only under the lock: a load and a store, no atomic update.
        // A count below the bitmap's free bits (a corrupt descriptor, `skew` > 0) can
        // reach 0 with bits still free; it stays 0.
        let free = grp.free.load(Ordering::Relaxed);
        debug_assert!(free > 0 || st.skew > 0, "free inode count underflow");
        grp.free.store(free.saturating_sub(1), Ordering::Relaxed);
        if free == 1 {
            grp.has_free.store(false, Ordering::Relaxed);
        }
        if is_dir {
            let dirs = grp.dirs.load(Ordering::Relaxed);
            grp.dirs.store(dirs + 1, Ordering::Relaxed);
        }
        // itable_unused counts the never-used inodes at the table's end (ext4_claim_inode).
        let used_upto = self.geo.ipg - st.itable_unused.min(self.geo.ipg);
        if bit as u32 >= used_upto {
            st.itable_unused = self.geo.ipg - bit as u32 - 1;
        }
        // A used inode is never counted in the unused tail (mke2fs's lazy table init
        // would skip zeroing it).
        debug_assert!(
            (bit as u32) < self.geo.ipg - st.itable_unused,
            "inode bit {bit} in the unused tail of {}",
            st.itable_unused
        );
        let tid = h.tid();
        let lines = (self.geo.ipg as usize).div_ceil(CHUNK);
        if !matches!(&st.fresh, Some((t, _)) if *t == tid) {
            st.fresh = Some((tid, vec![BitLine::default(); lines].into_boxed_slice()));
        }
        if let Some((_, map)) = st.fresh.as_mut() {
            let (w, m) = BitLine::locate(map, bit);
            *w |= m;
        }
        grp.pending.store(true, Ordering::Release);
        self.fresh_block(grp, bit)
    }

    /// When every other inode of `bit`'s table block is free, the block's old bytes do
    /// not matter: the caller takes it without reading (ext4's `__ext4_get_inode_loc`
    /// does the same, checking the bitmap). Most creates land in such blocks, which on a
    /// fresh image the device has never written. Decided under the group's lock; the
    /// block is taken after it (kept if a neighbour claimed since has cached it) and
    /// pinned in the transaction, so it is not evicted before the new inode is stored.
    fn fresh_block(&self, grp: &IGroup, bit: usize) -> Option<u64> {
        let maps = grp.maps.get()?;
        let used = &maps.used;
        let ipb = (self.geo.bs / self.geo.inode_size) as usize;
        let first = bit / ipb * ipb;
        let end = (first + ipb).min(self.geo.ipg as usize);
        let busy = (first..end).any(|i| i != bit && used.test(i));
        if busy {
            return None;
        }
        // An inode in use now is in `used` too (which adds the frees not yet committed).
        debug_assert!(
            (first..end).all(|i| i == bit || !maps.live.test(i)),
            "inode table block of bit {bit}: a neighbour is live"
        );
        Some(grp.table + (first / ipb) as u64)
    }

    /// Release inode `ino` (its bit becomes reusable once `h`'s transaction commits,
    /// or at once if the same transaction allocated it).
    pub fn free(&self, h: &Handle, al: &Allocator, ino: u64, is_dir: bool) -> Result<()> {
        debug_assert!(
            ino >= 1 && ino <= self.geo.inodes(),
            "free of inode {ino} out of range"
        );
        let g = self.geo.group_of_inode(ino);
        let grp = &self.groups[g as usize];
        let maps = self.maps(g)?;
        let used = &maps.used;
        let ib = self.ibuf(g)?;
        h.dirty(ib);
        al.dirty_desc(h, g);
        let bit = ((ino - 1) % u64::from(self.geo.ipg)) as usize;
        let mut st = grp.st.lock();
        if st.uninit || !maps.live.test(bit) {
            return Err(Error::corrupt(
                "inode bitmap",
                grp.bitmap,
                format!("inode {ino} already free"),
            ));
        }
        let free = grp.free.load(Ordering::Relaxed);
        if free >= self.geo.ipg {
            // A descriptor counting every inode free while the bitmap has this one in use.
            return Err(Error::corrupt(
                "group descriptor",
                u64::from(g),
                format!("free inode count {free} with inode {ino} in use"),
            ));
        }
        maps.live.clear(bit);
        debug_assert!(
            used.test(bit),
            "inode {ino}: in use on disk but free in the search bitmap"
        );
        grp.free.store(free + 1, Ordering::Relaxed);
        if free == 0 {
            grp.has_free.store(true, Ordering::Relaxed);
        }
        if is_dir {
            let dirs = grp.dirs.load(Ordering::Relaxed);
            grp.dirs.store(dirs.saturating_sub(1), Ordering::Relaxed);
        }
        let tid = h.tid();
        let same_tx = match &mut st.fresh {
            Some((t, map)) if *t == tid => {
                let (w, m) = BitLine::locate(map, bit);
                let was = *w & m != 0;
                *w &= !m;
                was
            }
            _ => false,
        };
        if same_tx {
            used.clear(bit);
        } else {
            st.busy.push((bit as u32, tid));
            grp.has_busy.store(true, Ordering::Release);
        }
        grp.pending.store(true, Ordering::Release);
        Ok(())
    }

    /// Transaction `tid` committed: the inodes it freed are free for everyone.
    pub fn release_committed(&self, tid: u64) {
        for grp in &self.groups {
            if !grp.has_busy.load(Ordering::Acquire) {
                continue;
            }
            let mut st = grp.st.lock();
            if let Some(m) = grp.maps.get() {
                for &(bit, _) in st.busy.iter().filter(|b| b.1 <= tid) {
                    let bit = bit as usize;
                    debug_assert!(!m.live.test(bit), "inode bit {bit} busy and live");
                    m.used.clear(bit);
                }
            }
            st.busy.retain(|b| b.1 > tid);
            if st.busy.is_empty() {
                grp.has_busy.store(false, Ordering::Release);
            }
            // A big transaction of removes leaves a big list: give its memory back.
            if st.busy.capacity() > 4096 && st.busy.len() < st.busy.capacity() / 4 {
                let keep = st.busy.len() * 2;
                st.busy.shrink_to(keep);
            }
        }
    }

    /// Before a commit snapshots its buffers (no handle runs): write each changed group's
    /// bitmap block from its live bitmap, and hand its inode fields (and the bitmap's
    /// checksum) to the block allocator's descriptor copy.
    pub fn seal(&self, al: &Allocator) {
        for (g, grp) in self.groups.iter().enumerate() {
            if !grp.pending.swap(false, Ordering::AcqRel) {
                continue;
            }
            let st = grp.st.lock();
            // A pending group has its maps (a claim or free built them) unless uninit.
            let bitmap_csum = match (st.uninit, grp.maps.get(), grp.ibuf.get()) {
                (false, Some(m), Some(ib)) => {
                    debug_assert_eq!(
                        m.live.zeros(self.geo.ipg as usize) as i64
                            - i64::from(grp.free.load(Ordering::Relaxed)),
                        st.skew,
                        "group {g}: a claim or free moved the free count and the live bitmap apart"
                    );
                    let mut map = ib.write();
                    // Whole words from the map (whose bits past the group's last inode are
                    // set), then the block's padding: all set, as mke2fs leaves it.
                    for w in 0..map.len() / 8 {
                        put_bitmap_word(&mut map, w, m.live.word_or_full(w));
                    }
                    self.geo
                        .csum
                        .then(|| bitmap_csum(self.geo.seed, &map, self.geo.ipg as usize / 8, true))
                }
                _ => None,
            };
            al.set_inode_fields(
                g as u32,
                InodeFields {
                    free: grp.free.load(Ordering::Relaxed),
                    dirs: grp.dirs.load(Ordering::Relaxed),
                    itable_unused: st.itable_unused,
                    uninit: st.uninit,
                    bitmap_csum,
                },
            );
        }
    }

    /// Free inodes, free blocks and directories of flex group `f` (ext4's orlov_stats).
    fn flex_stats(&self, f: u32, al: &Allocator) -> (u64, u64, u64) {
        let size = 1u32 << self.geo.flex_log;
        let (mut fi, mut fb, mut dirs) = (0, 0, 0);
        for g in f * size..((f + 1) * size).min(self.geo.groups) {
            let grp = &self.groups[g as usize];
            fi += u64::from(grp.free.load(Ordering::Relaxed));
            dirs += u64::from(grp.dirs.load(Ordering::Relaxed));
            fb += u64::from(al.groups()[g as usize].free_blocks.load(Ordering::Relaxed));
        }
        (fi, fb, dirs)
    }

    /// The first group of flex group `f` with a free inode.
    fn first_free_in_flex(&self, f: u32) -> Option<u32> {
        let size = 1u32 << self.geo.flex_log;
        (f * size..((f + 1) * size).min(self.geo.groups))
            .find(|&g| self.groups[g as usize].has_free.load(Ordering::Relaxed))
    }

    /// A group for a new directory: ext4's `find_group_orlov`.
    fn find_group_orlov(&self, want: &Want<'_>, al: &Allocator) -> Option<u32> {
        let flex = self.geo.flex_log;
        let real = self.geo.groups;
        let nflex = real.div_ceil(1 << flex);
        let freei = self.free_inodes();
        let freeb = al.free_blocks();
        let avefreei = freei / u64::from(nflex);
        let avefreeb = freeb / u64::from(nflex);
        if want.top {
            // Spread top-level directories: from a hash of the name, the flex group with
            // the fewest directories among those with at least average free space.
            let start = hash::dirhash(want.name, hash::HALF_MD4, &self.hash_seed).0 % nflex;
            let mut best: Option<(u32, u64)> = None;
            for i in 0..nflex {
                let f = (start + i) % nflex;
                let (fi, fb, dirs) = self.flex_stats(f, al);
                if fi == 0 || fi < avefreei || fb < avefreeb {
                    continue;
                }
                if best.is_none_or(|(_, d)| dirs < d) {
                    best = Some((f, dirs));
                }
            }
            if let Some(g) = best.and_then(|(f, _)| self.first_free_in_flex(f)) {
                return Some(g);
            }
        } else {
            let ipf = u64::from(self.geo.ipg) << flex;
            let bpf = u64::from(self.geo.bpg) << flex;
            let max_dirs = self.used_dirs() / u64::from(nflex) + u64::from(self.geo.ipg) / 16;
            let min_inodes = avefreei.saturating_sub(ipf / 4).max(1);
            let min_blocks = avefreeb.saturating_sub(bpf / 4);
            let hint = want.last.load(Ordering::Relaxed);
            let start = if hint != NO_GROUP && hint < real {
                hint
            } else {
                want.parent_group
            } >> flex;
            for i in 0..nflex {
                let f = (start + i) % nflex;
                let (fi, fb, dirs) = self.flex_stats(f, al);
                if dirs >= max_dirs || fi < min_inodes || fb < min_blocks {
                    continue;
                }
                if let Some(g) = self.first_free_in_flex(f) {
                    return Some(g);
                }
            }
        }
        // Fallback: the first group with at least the average free inodes, then any.
        let avg = freei / u64::from(real);
        for floor in [avg, 0] {
            for i in 0..real {
                let g = (want.parent_group + i) % real;
                let fi = u64::from(self.groups[g as usize].free.load(Ordering::Relaxed));
                if fi > 0 && fi >= floor {
                    return Some(g);
                }
            }
        }
        None
    }

    /// A group for a new non-directory: ext4's `find_group_other`.
    fn find_group_other(&self, want: &Want<'_>, al: &Allocator) -> Option<u32> {
        let n = self.geo.groups;
        let free_i = |g: u32| self.groups[g as usize].has_free.load(Ordering::Relaxed);
        let free_b = |g: u32| al.groups()[g as usize].free_blocks.load(Ordering::Relaxed) > 0;
        if self.geo.flex_log > 0 {
            if let Some(g) = self.first_free_in_flex(want.parent_group >> self.geo.flex_log) {
                return Some(g);
            }
            let hint = want.last.load(Ordering::Relaxed);
            if hint != NO_GROUP && hint < n {
                if let Some(g) = self.first_free_in_flex(hint >> self.geo.flex_log) {
                    return Some(g);
                }
            }
            // Orlov's search for another flex group, from the next one, as for a
            // directory below the root.
            let next = ((want.parent_group >> self.geo.flex_log) + 1) << self.geo.flex_log;
            let other = Want {
                parent_group: if next >= n { 0 } else { next },
                top: false,
                ..*want
            };
            return self.find_group_orlov(&other, al);
        }
        let pg = want.parent_group % n;
        if free_i(pg) && free_b(pg) {
            return Some(pg);
        }
        // Files of one directory land together, other directories' elsewhere: start the
        // quadratic probe at the parent group plus the directory's inode number.
        let mut g = ((u64::from(pg) + want.parent_ino) % u64::from(n)) as u32;
        let mut step = 1u32;
        while step < n {
            g = ((u64::from(g) + u64::from(step)) % u64::from(n)) as u32;
            if free_i(g) && free_b(g) {
                return Some(g);
            }
            step <<= 1;
        }
        (1..=n).map(|i| (pg + i) % n).find(|&g| free_i(g))
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

/// Set `bit` in the live bitmap (under the group's lock): the group's bitmap is
/// initialized from then on (the seal writes all of it).
fn set_live(maps: &Maps, st: &mut IState, g: u32, bit: usize) {
    st.uninit = false;
    let was = test_and_set(&maps.live, bit);
    debug_assert!(!was, "group {g}: inode bit {bit} already live");
}

/// Atomically set bit `i`; whether it was already set.
fn test_and_set(words: &SearchMap, i: usize) -> bool {
    let m = 1u64 << (i % 64);
    words.word(i / 64).fetch_or(m, Ordering::AcqRel) & m != 0
}

/// Where a thread lane starts searching a group whose bit after its last inode there
/// is `cursor` (0: none yet). The lane's first inode in the group goes where ext4's
/// would, the first free one from `first`, so a mount that makes a few files fills the
/// table from its start. After that: the lane's chunk (the [`CHUNK`] inodes of one line
/// of the search bitmap: 32 4 KiB table blocks of 256-byte inodes) while it has a free
/// bit at or after the cursor; otherwise the first entirely free chunk (group 0's first
/// counted from `first`), else `first` (ext4's search). Two lanes that start together
/// share a chunk until it fills, then part. Each lane keeps a chunk per group, so a thread moving between groups fills
/// each chunk densely. Threads creating in one group so fill different inode table
/// blocks and write different lines of the search bitmap instead of interleaving in the
/// same ones (XFS allocates inodes in chunks of 64 for the same reason; a chunk of a
/// whole line also keeps the lanes' test-and-sets off each other's line, which with
/// chunks of one word cost two threads creating in one directory's group a quarter of
/// their rate). A hint only: the bit is still claimed by test-and-set.
fn chunk_start(cursor: usize, used: &SearchMap, first: usize, ipg: usize) -> usize {
    if cursor == 0 {
        return first;
    }
    let chunk_end = (cursor / CHUNK + 1) * CHUNK;
    if cursor > first
        && !cursor.is_multiple_of(CHUNK)
        && find_zero_atomic(used, cursor, chunk_end.min(ipg)).is_some()
    {
        return cursor;
    }
    (first / CHUNK..ipg / CHUNK)
        .find(|&c| used.chunk_free(c, first))
        .map_or(first, |c| (c * CHUNK).max(first))
}

/// The first zero bit of `words` in `[from, end)`, read without a lock.
fn find_zero_atomic(words: &SearchMap, from: usize, end: usize) -> Option<usize> {
    let mut i = from;
    while i < end {
        let w = words.word(i / 64).load(Ordering::Acquire) | ((1u64 << (i % 64)) - 1);
        if w != u64::MAX {
            let bit = (i / 64) * 64 + (!w).trailing_zeros() as usize;
            return (bit < end).then_some(bit);
        }
        i = (i / 64 + 1) * 64;
    }
    None
}

#[cfg(test)]
#[path = "ialloc/tests.rs"]
mod tests;
