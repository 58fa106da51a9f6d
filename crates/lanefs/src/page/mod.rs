//! The page cache of file data (seed 002): each file's blocks cached in folios, naturally
//! aligned runs of 2^order blocks managed as one unit (order 0 up to `folio_max_order`;
//! `folio_max_order=0` is the baseline of single-block pages).
//!
//! - `folio`: one folio, its lock and its dirty bits;
//! - `index`: a file's folio index, a radix tree walked without a lock under an epoch pin;
//! - `mapping`: a file's cache: read hits, read misses with read-ahead, writes, write-back,
//!   truncation with folio splits;
//! - here: the cache as a whole, its memory limit, dirty limit and the eviction sweep.
//!
//! Eviction is CLOCK over sharded lists: a hit sets the folio's reference bit (a load, and
//! a store only when it was clear), never a list lock; a new folio joins its thread's
//! shard; when the cache passes its limit, the thread that charged it sweeps shards in
//! turn, giving referenced folios a second chance and evicting clean ones nobody holds,
//! until it is back under seven eighths of the limit.
//!
//! Write-back (the kernel's per-device flusher and `balance_dirty_pages`): a file joins the
//! cache's list of dirty files when it first gets dirty. Past the background threshold (an
//! eighth of the limit) a writer wakes the mount's flusher thread, which writes listed
//! files back, one writer per file, until dirty data is under half that threshold; the
//! commit timer writes every listed file back each commit interval, so no data stays dirty
//! much longer than that. Dirty data is bounded at a quarter of the limit: a writer past it
//! writes its own file back before going on (throttled, never failed).
//!
//! The page cache owns file-data IO: `fs` reads and writes file data only through it, and
//! the journal writes a file's data before a commit through the `OrderedData` hook the
//! inode implements with [`Mapping::write_back`].

pub mod folio;
pub mod index;
pub mod mapping;

pub use folio::{Folio, MAX_ORDER};
pub use mapping::{Mapping, Run};

use crate::dev::BlockDevice;
use crate::error::Result;
use crate::sync::{Mutex, Padded, CLOCK, DIRTY_FILES};
use folio::{Charge, FolioData};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// Shards of the CLOCK list.
const SHARDS: usize = 16;
/// Largest read-ahead window in bytes.
pub const MAX_READAHEAD: u64 = 2 << 20;
/// The default largest folio order.
pub const DEFAULT_MAX_ORDER: u8 = 4;

/// The default memory limit (`pagecache_limit=`) on a machine with `ram` bytes: an
/// eighth, at least 64 MiB and at most 2 GiB.
pub fn pagecache_limit_for(ram: u64) -> u64 {
    (ram / 8).clamp(64 << 20, 2 << 30) >> 20 << 20
}

/// The default limit for this machine (`MemTotal` of `/proc/meminfo`; 256 MiB where it
/// cannot be read).
pub fn default_pagecache_limit() -> u64 {
    crate::buf::machine_memory().map_or(256 << 20, pagecache_limit_for)
}

/// The cache's totals, shared with every folio (which gives back its memory on drop).
#[derive(Default)]
struct Totals {
    bytes: AtomicU64,
    dirty_blocks: AtomicI64,
    read_bytes: AtomicU64,
    reads: AtomicU64,
}

impl Charge for Totals {
    fn uncharge(&self, bytes: u64) {
        let before = self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        debug_assert!(
            before >= bytes,
            "page cache uncharged {bytes} of {before} bytes"
        );
    }
    fn dirtied(&self, blocks: i64) {
        // A block is cleaned (under its folio's lock) only after it was dirtied.
        let before = self.dirty_blocks.fetch_add(blocks, Ordering::Relaxed);
        debug_assert!(
            before + blocks >= 0,
            "dirty blocks {before} moved by {blocks}"
        );
    }
}

/// One shard of the CLOCK list.
#[derive(Default)]
struct ClockShard {
    folios: Vec<Arc<Folio>>,
    hand: usize,
}

/// What the page cache holds (`Diagnostics::pagecache_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    /// Bytes of folios and index nodes.
    pub bytes: u64,
    /// Bytes of dirty blocks.
    pub dirty_bytes: u64,
    /// The limit clean folios are evicted under (`pagecache_limit=`).
    pub limit: u64,
    /// Largest folio order (`folio_max_order=`).
    pub max_order: u8,
    /// Device reads made to fill the cache, and their bytes (the read-ahead's IO size).
    pub device_reads: u64,
    /// Bytes read from the device into the cache.
    pub device_read_bytes: u64,
}

/// The page cache of a mount.
pub struct PageCache {
    dev: Arc<dyn BlockDevice>,
    bs: usize,
    max_order: u8,
    limit: u64,
    totals: Arc<Totals>,
    /// Eviction lists, a shard per lane, each on lines of its own.
    clock: Vec<Padded<Mutex<ClockShard>>>,
    next_shard: AtomicUsize,
    /// Files with dirty data, in the order they got dirty (each once: `Mapping::listed`).
    dirty_files: Mutex<Vec<Weak<Mapping>>>,
    /// Wakes the mount's flusher thread (none: no background write-back, as in tests).
    flusher: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl PageCache {
    /// A cache over `dev` with `bs`-byte blocks, folios up to `max_order` (clamped to
    /// [`MAX_ORDER`]) and `limit` bytes.
    pub fn new(dev: Arc<dyn BlockDevice>, bs: usize, max_order: u8, limit: u64) -> PageCache {
        debug_assert!(bs.is_power_of_two(), "block size {bs}");
        PageCache {
            dev,
            bs,
            max_order: max_order.min(MAX_ORDER),
            limit,
            totals: Arc::new(Totals::default()),
            clock: (0..SHARDS)
                .map(|_| Padded(Mutex::new(&CLOCK, ClockShard::default())))
                .collect(),
            next_shard: AtomicUsize::new(0),
            dirty_files: Mutex::new(&DIRTY_FILES, Vec::new()),
            flusher: OnceLock::new(),
        }
    }

    /// Set what wakes the background flusher (once; later calls are ignored).
    pub fn set_flusher(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.flusher.set(wake);
    }

    /// Put `m` on the list of dirty files unless it is on it.
    fn note_dirty(&self, m: &Arc<Mapping>) {
        // A load first: a file already listed (the common case for a writer) costs no
        // read-modify-write.
        use crate::sync::atomic::Ordering as O;
        if !m.listed.load(O::Acquire) && !m.listed.swap(true, O::AcqRel) {
            self.dirty_files.lock().push(m.weak());
        }
    }

    /// Files on the dirty list (some may have been cleaned since by fsync or a commit).
    pub fn dirty_files(&self) -> usize {
        self.dirty_files.lock().len()
    }

    /// Write `m`'s dirty data back, then sweep: the write-back held its folios, so sweeps
    /// that ran meanwhile skipped them.
    pub fn write_back(&self, m: &Mapping) -> Result<()> {
        let r = m.write_back(&*self.dev, self.bs);
        self.balance();
        r
    }

    /// Write back the listed dirty files in the order they got dirty, until `enough()`
    /// says so after a file or the list is done; files not reached stay listed, and a
    /// file dirtied again meanwhile is listed again. The first error stops it (that file
    /// stays listed and dirty).
    pub fn write_back_files(&self, enough: impl Fn() -> bool) -> Result<()> {
        let files = std::mem::take(&mut *self.dirty_files.lock());
        let mut rest = files.into_iter();
        let mut out = Ok(());
        for w in rest.by_ref() {
            let Some(m) = w.upgrade() else {
                continue;
            };
            m.listed
                .store(false, crate::sync::atomic::Ordering::Release);
            let r = self.write_back(&m);
            if r.is_err() || m.has_dirty() {
                self.note_dirty(&m);
            }
            if let Err(e) = r {
                out = Err(e);
                break;
            }
            if enough() {
                break;
            }
        }
        let left: Vec<Weak<Mapping>> = rest.collect();
        if !left.is_empty() {
            let mut l = self.dirty_files.lock();
            let newer = std::mem::replace(&mut *l, left);
            l.extend(newer);
        }
        out
    }

    /// Dirty bytes now.
    fn dirty_bytes(&self) -> u64 {
        self.totals.dirty_blocks.load(Ordering::Relaxed).max(0) as u64 * self.bs as u64
    }

    /// Whether dirty data passes the background threshold (an eighth of the limit): the
    /// flusher should run.
    pub fn over_background(&self) -> bool {
        self.dirty_bytes() > self.limit / 8
    }

    /// Whether the flusher has done enough: dirty data under half the background
    /// threshold.
    pub fn under_background_goal(&self) -> bool {
        self.dirty_bytes() <= self.limit / 16
    }

    /// Wake the flusher, if there is one.
    fn wake_flusher(&self) {
        if let Some(w) = self.flusher.get() {
            w();
        }
    }

    /// The cache's totals now.
    pub fn stats(&self) -> PageCacheStats {
        let t = &self.totals;
        PageCacheStats {
            bytes: t.bytes.load(Ordering::Relaxed),
            dirty_bytes: self.dirty_bytes(),
            limit: self.limit,
            max_order: self.max_order,
            device_reads: t.reads.load(Ordering::Relaxed),
            device_read_bytes: t.read_bytes.load(Ordering::Relaxed),
        }
    }

    /// Read-ahead's largest window in blocks: [`MAX_READAHEAD`], or an eighth of the
    /// limit where that is less (a window must not evict itself before it is read).
    fn max_ra_blocks(&self) -> u64 {
        (MAX_READAHEAD.min(self.limit / 8) / self.bs as u64).max(1)
    }

    fn count_read(&self, bytes: u64) {
        self.totals.reads.fetch_add(1, Ordering::Relaxed);
        self.totals.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn charge(&self, bytes: u64) {
        if bytes > 0 {
            self.totals.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// A folio of `m` over `index..index + 2^order` holding `data`, charged.
    fn new_folio(&self, m: &Arc<Mapping>, index: u64, order: u8, data: FolioData) -> Arc<Folio> {
        debug_assert!(
            order <= self.max_order,
            "folio of order {order} over the cache's"
        );
        debug_assert_eq!(data.bytes.len(), self.bs << order, "folio {index}: bytes");
        let bytes = data.bytes.len() as u64
            + data.pblk.len() as u64 * 8
            + std::mem::size_of::<Folio>() as u64;
        self.charge(bytes);
        let charge: Arc<dyn Charge> = self.totals.clone();
        Arc::new(Folio::new(index, order, data, m.weak(), charge, bytes))
    }

    /// Put a new folio on this thread's CLOCK shard.
    fn track(&self, f: Arc<Folio>) {
        self.clock[crate::sync::my_lane() % SHARDS]
            .lock()
            .folios
            .push(f);
    }

    /// Whether dirty blocks pass a quarter of the limit (writers write back first).
    fn dirty_over_limit(&self) -> bool {
        self.dirty_bytes() > self.limit / 4
    }

    /// When the cache is over its limit, evict clean folios until it is back under seven
    /// eighths of it (or every shard was swept twice). A folio another thread holds (a
    /// reader copying out of it, a write-back writing it, which holds up to 48 at once) is
    /// skipped, so every operation that can leave the cache over its limit calls this as
    /// it ends: reads and writes that charged folios, truncates and punches, write-backs
    /// ([`PageCache::write_back`]: fsync, sync, the flusher) and the commit thread after
    /// each commit (the journal writes ordered data through the inode, not through here).
    /// Once the file system is idle the cache is within its limit.
    pub fn balance(&self) {
        let bytes = self.totals.bytes.load(Ordering::Relaxed);
        if bytes <= self.limit {
            return;
        }
        let target = self.limit - self.limit / 8;
        let over = || self.totals.bytes.load(Ordering::Relaxed) > target;
        for _ in 0..2 * SHARDS {
            if !over() {
                break;
            }
            let s = self.next_shard.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let Some(mut sh) = self.clock[s].try_lock() else {
                continue;
            };
            let mut visits = sh.folios.len();
            while visits > 0 && !sh.folios.is_empty() && over() {
                visits -= 1;
                if sh.hand >= sh.folios.len() {
                    sh.hand = 0;
                }
                let f = &sh.folios[sh.hand];
                let gone = if f.is_removed() {
                    true
                } else if f.take_referenced() || f.dirty_mask() != 0 {
                    false
                } else {
                    match f.owner.upgrade() {
                        None => true,
                        Some(m) => m.evict(f),
                    }
                };
                if gone {
                    let h = sh.hand;
                    sh.folios.swap_remove(h);
                } else {
                    sh.hand += 1;
                }
            }
        }
        reclaim();
    }

    /// Drop every clean folio of every shard's list that left its index (after
    /// `Mapping::drop_clean`): their memory goes back at once.
    pub fn prune(&self) {
        for s in &self.clock {
            s.lock()
                .folios
                .retain(|f| !f.is_removed() && f.owner.strong_count() > 0);
        }
        reclaim();
    }
}

/// Let the epoch run the deferred drops of folios that left their indexes: each flush
/// moves this thread's deferred drops to the global queue and runs those two epochs old,
/// advancing the epoch when no thread is pinned behind it.
fn reclaim() {
    for _ in 0..3 {
        crossbeam_epoch::pin().flush();
    }
}
