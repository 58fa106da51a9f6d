//! Cache of metadata blocks: bitmaps, inode tables, descriptors, directory and extent
//! blocks. Sharded by block number (lock class `buf_shard`, a leaf lock); each block's
//! bytes have their own lock (class `buffer`).
//!
//! A buffer is dirty (pinned) from the moment a handle changes it until the journal has
//! written its committed contents to the home location (checkpoint): its newest bytes
//! are then only in memory and in the log, so it must not be evicted and re-read. Clean,
//! unreferenced blocks are evicted once a shard passes its bound. Buffers are never written
//! from here: the journal writes snapshots taken at commit.

use crate::dev::BlockDevice;
use crate::dirty::{DirtyCount, DirtyFlag};
use crate::disk::seal::Seal;
use crate::error::Result;
use crate::numhash::{fib_bits, NumHash};
use crate::sync::{
    Mutex, Padded, RwLock, RwLockReadGuard, RwLockWriteGuard, BUFFER, BUF_FROZEN, BUF_SHARD,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

const SHARDS: usize = 64;
/// Fewest blocks a shard keeps before evicting, whatever the limit.
const MIN_SHARD_BLOCKS: usize = 16;
/// The cache's default memory limit (`bufcache_limit=`) where the machine's memory is
/// unknown.
pub const DEFAULT_BUFCACHE_LIMIT: u64 = 256 << 20;

/// The default limit on a machine with `ram` bytes of memory: a sixteenth of it, at least
/// 64 MiB and at most 1 GiB (the kernel's buffer cache may use all free memory; an
/// in-process engine takes a modest share). Metadata of a few million files in one
/// directory fits in 1 GiB; under the limit its blocks are written twice (log and home)
/// more often, and each commit logs more of them.
pub fn bufcache_limit_for(ram: u64) -> u64 {
    (ram / 16).clamp(64 << 20, 1 << 30) >> 20 << 20
}

/// The default limit for this machine (`MemTotal` of `/proc/meminfo`), or
/// [`DEFAULT_BUFCACHE_LIMIT`] where that cannot be read.
pub fn default_bufcache_limit() -> u64 {
    machine_memory().map_or(DEFAULT_BUFCACHE_LIMIT, bufcache_limit_for)
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), where it can be read;
/// the caches' default limits are shares of it.
pub fn machine_memory() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// One cached metadata block.
pub struct Buf {
    /// Block number.
    pub blk: u64,
    data: RwLock<Box<[u8]>>,
    dirty: DirtyFlag,
    /// The transaction this buffer was last added to (0: none).
    pub(crate) jtid: AtomicU64,
    /// Freed as metadata: a commit must not log or write it.
    pub(crate) forgotten: AtomicBool,
    /// How a commit checksums the block ([`Seal::to_word`]; 0: it does not).
    seal: AtomicU64,
    /// The bytes were checked (checksum, structure) when read, or written here since:
    /// not checked again while cached.
    verified: AtomicBool,
    /// Which of the block's first 64 records (an inode table block's inodes) were
    /// checked since the block was read, or written here whole with their checksum:
    /// bit `i` for record `i` ([`Buf::record_checked`]).
    checked: AtomicU64,
    /// The block is in its shard's map (changed only under the shard's lock): a holder of a
    /// `Weak` to it may take it back ([`BufCache::get_hinted`]) while this holds.
    cached: AtomicBool,
    /// How many times the bytes were opened for writing ([`Buf::write`]): a structure
    /// derived from the bytes (a directory leaf's digest) is current while this has not
    /// moved since it was derived.
    wgen: AtomicU64,
    /// A committing transaction logs the bytes as they were at its pause and has not
    /// copied them yet ([`Buf::freeze`]): the first writer keeps them in `frozen` first.
    freeze: AtomicBool,
    /// The bytes at the pause, copied by the first writer after it (jbd2's `b_frozen_data`);
    /// the commit takes them ([`Buf::frozen_copy`]).
    frozen: Mutex<Option<Box<[u8]>>>,
}

impl Buf {
    /// Read access to the bytes.
    pub fn read(&self) -> RwLockReadGuard<'_, Box<[u8]>> {
        self.data.read()
    }
    /// Write access to the bytes; the caller marks the buffer dirty through its handle.
    /// Moves the write generation, and drops the records' check marks
    /// ([`Buf::record_checked`]): a block written as something else (a cross-linked
    /// block on a corrupt image) is checked again as an inode table.
    /// If a commit has yet to copy the bytes it logs, they are copied aside first.
    pub fn write(&self) -> RwLockWriteGuard<'_, Box<[u8]>> {
        let g = self.write_records();
        if self.checked.load(Ordering::Relaxed) != 0 {
            self.checked.store(0, Ordering::Release);
        }
        g
    }
    /// [`Buf::write`] for a change of whole records, each written with its checksum
    /// and marked ([`Buf::set_record_checked`]) under the guard: the other records' marks
    /// stay.
    pub fn write_records(&self) -> RwLockWriteGuard<'_, Box<[u8]>> {
        let g = self.data.write();
        // The flag is set while no handle runs and cleared under this lock (here or, with
        // the shared lock, by the commit): one of the two copies the bytes, once.
        if self.freeze.load(Ordering::Acquire) {
            self.freeze.store(false, Ordering::Release);
            let mut f = self.frozen.lock();
            debug_assert!(f.is_none(), "block {} frozen twice", self.blk);
            *f = Some(g.clone());
        }
        // Only a holder of the write guard changes the generation: a load and a store
        // under it cannot lose an increment.
        let n = self.wgen.load(Ordering::Relaxed) + 1;
        self.wgen.store(n, Ordering::Relaxed);
        g
    }
    /// The write generation: how many times [`Buf::write`] was called. Two equal readings
    /// taken while the caller's own lock keeps other writers of the block out (a
    /// directory's lock for its leaves) mean the bytes did not change in between.
    pub fn write_gen(&self) -> u64 {
        self.wgen.load(Ordering::Relaxed)
    }
    /// Whether the block differs from its home location.
    pub fn is_dirty(&self) -> bool {
        self.dirty.is_set()
    }
    /// Have each commit that logs the block stamp its checksum ([`Seal`]); set while
    /// holding the write guard of the change. The block counts as verified from now on:
    /// its checksum in memory is stale until the next commit seals a copy.
    pub fn set_seal(&self, s: Seal) {
        self.seal.store(s.to_word(), Ordering::Release);
        self.verified.store(true, Ordering::Release);
    }
    /// A block about to be overwritten whole as a new structure: no seal of its old use
    /// stays, and what is written here needs no check.
    fn renew(&self) {
        self.seal.store(0, Ordering::Release);
        self.verified.store(true, Ordering::Release);
        self.checked.store(0, Ordering::Release);
    }
    /// Whether record `i` of the block was checked since the block was read, or written
    /// here ([`Buf::set_record_checked`]); records past the 64th never are. Read and set
    /// it under a guard of the record's bytes: a write that drops the marks takes the
    /// write guard.
    pub fn record_checked(&self, i: usize) -> bool {
        i < 64 && self.checked.load(Ordering::Acquire) & (1 << i) != 0
    }
    /// Record `i` was checked, or written whole with its checksum (a write only when it
    /// was not marked already, so a block many threads read stays shared in caches).
    pub fn set_record_checked(&self, i: usize) {
        if i < 64 && !self.record_checked(i) {
            self.checked.fetch_or(1 << i, Ordering::AcqRel);
        }
    }
    /// Whether the buffer is its block's cached one (false once evicted or forgotten).
    /// A holder of the buffer keeps it from eviction ([`BufCache`] evicts only blocks
    /// nobody holds), so only a forget (the block freed) turns this false under it.
    pub fn is_cached(&self) -> bool {
        self.cached.load(Ordering::Relaxed)
    }
    /// Whether the block was verified since it was read (or was written here).
    pub fn is_verified(&self) -> bool {
        self.verified.load(Ordering::Acquire)
    }
    /// Record that the block's bytes were verified.
    pub fn set_verified(&self) {
        self.verified.store(true, Ordering::Release);
    }
    /// Mark the bytes as a committing transaction's, to be copied by
    /// [`Buf::frozen_copy`] (or first by a writer). Only while no handle runs (the
    /// commit's pause), so no writer holds or is waiting for the bytes.
    pub(crate) fn freeze(&self) {
        debug_assert!(
            !self.freeze.load(Ordering::Relaxed) && self.frozen.lock().is_none(),
            "block {} frozen by two commits",
            self.blk
        );
        self.freeze.store(true, Ordering::Release);
    }

    /// The bytes as they were at [`Buf::freeze`]: copied now (into `reuse` when it is
    /// given and block-sized) if no writer came first, else the copy that writer kept
    /// (and `reuse` is handed back).
    pub(crate) fn frozen_copy(&self, reuse: Option<Box<[u8]>>) -> (Box<[u8]>, Option<Box<[u8]>>) {
        let d = self.read();
        if self.freeze.swap(false, Ordering::AcqRel) {
            // No writer came since the pause: none kept a copy either.
            debug_assert!(
                self.frozen.lock().is_none(),
                "block {} has a kept copy while still frozen",
                self.blk
            );
            let copy = match reuse {
                Some(mut c) if c.len() == d.len() => {
                    c.copy_from_slice(&d);
                    c
                }
                _ => d.clone(),
            };
            return (copy, None);
        }
        let kept = self.frozen.lock().take();
        match kept {
            Some(f) => (f, reuse),
            None => unreachable!("block {} thawed without a frozen copy", self.blk),
        }
    }

    /// The seal a commit stamps on the block's copy.
    pub(crate) fn seal(&self) -> Seal {
        Seal::from_word(self.seal.load(Ordering::Acquire))
    }
}

/// One shard of the cache: its blocks, and the memory of blocks it evicted, kept for the
/// next misses (as the kernel reuses pages) so that a cache at its bound stops calling the
/// allocator and its memory does not fragment.
struct Shard {
    map: HashMap<u64, Arc<Buf>, NumHash>,
    spare: Vec<Box<[u8]>>,
}

/// A shard's lock alone on its cache lines: two threads taking neighbouring shards do not
/// bounce one line between them.
type ShardLine = Padded<Mutex<Shard>>;

/// The metadata block cache.
pub struct BufCache {
    dev: Arc<dyn BlockDevice>,
    bs: usize,
    shards: Vec<ShardLine>,
    dirty_count: DirtyCount,
    /// Blocks the limit holds.
    limit_blocks: usize,
    /// The limit in bytes the shards' bound comes from.
    limit: u64,
    /// Blocks cached (all shards).
    cached: std::sync::atomic::AtomicUsize,
    /// Committed copies the journal holds until checkpoint: they count against the limit.
    copies: std::sync::atomic::AtomicUsize,
    /// Spare block memory the shards keep (counts against the limit too).
    spares: std::sync::atomic::AtomicUsize,
    /// Blocks evicted since the cache was made.
    evicted: AtomicU64,
}

impl BufCache {
    /// A cache over `dev` with `bs`-byte blocks that evicts clean blocks past `limit`
    /// bytes, counting the journal's committed copies (dirty blocks stay until checkpoint;
    /// the journal checkpoints when they and the copies pass half of it, and keeps a
    /// transaction under an eighth).
    pub fn new(dev: Arc<dyn BlockDevice>, bs: usize, limit: u64) -> BufCache {
        debug_assert!(bs.is_power_of_two() && bs >= 1024, "block size {bs}");
        let shards = (0..SHARDS)
            .map(|_| {
                Padded(Mutex::new(
                    &BUF_SHARD,
                    Shard {
                        map: HashMap::with_hasher(NumHash),
                        spare: Vec::new(),
                    },
                ))
            })
            .collect();
        BufCache {
            dev,
            bs,
            shards,
            dirty_count: DirtyCount::new(),
            limit_blocks: (limit / bs as u64) as usize,
            limit,
            cached: std::sync::atomic::AtomicUsize::new(0),
            copies: std::sync::atomic::AtomicUsize::new(0),
            spares: std::sync::atomic::AtomicUsize::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// Bytes of blocks cached (with the journal's committed copies), of dirty (pinned)
    /// ones among them, and the limit.
    pub fn stats(&self) -> crate::types::BufCacheStats {
        let bs = self.bs as u64;
        crate::types::BufCacheStats {
            bytes: (self.cached.load(Ordering::Relaxed)
                + self.spares.load(Ordering::Relaxed)
                + self.copies.load(Ordering::Relaxed)) as u64
                * bs,
            dirty_bytes: self.dirty_count() as u64 * bs,
            limit: self.limit,
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }

    /// The journal holds `n` committed block copies until checkpoint.
    pub fn set_copies(&self, n: usize) {
        self.copies.store(n, Ordering::Relaxed);
    }

    /// Whether dirty blocks and the journal's copies of them hold more than half the
    /// limit: time to checkpoint.
    pub fn pinned_over_half(&self) -> bool {
        let pinned = self.dirty_count() + self.copies.load(Ordering::Relaxed);
        pinned > self.limit_blocks / 2
    }

    /// Blocks the limit holds: the journal keeps a transaction well under it.
    pub fn limit_blocks(&self) -> usize {
        self.limit_blocks
    }

    /// Blocks a shard keeps before evicting clean ones: its share of the limit less the
    /// journal's copies.
    fn shard_bound(&self) -> usize {
        let copies = self.copies.load(Ordering::Relaxed);
        (self.limit_blocks.saturating_sub(copies) / SHARDS).max(MIN_SHARD_BLOCKS)
    }

    fn shard(&self, blk: u64) -> &Mutex<Shard> {
        &self.shards[fib_bits(blk, SHARDS.trailing_zeros())]
    }

    /// The cached block, reading it from the device on a miss (IO outside any lock).
    pub fn get(&self, blk: u64) -> Result<Arc<Buf>> {
        let mut data = {
            let mut sh = self.shard(blk).lock();
            if let Some(b) = sh.map.get(&blk) {
                return Ok(b.clone());
            }
            self.take_spare(&mut sh)
        };
        if let Err(e) = self.dev.read_at(blk * self.bs as u64, &mut data) {
            self.put_spare(&mut self.shard(blk).lock(), data);
            return Err(e);
        }
        Ok(self.insert(blk, Some(data)))
    }

    /// The buffer `hint` refers to (a buffer of block `blk` the caller got before: a
    /// directory leaf's digest keeps one) while it is still the cached one, found without
    /// looking the block up in the shard's map (whose control bytes and slot are two cache
    /// misses in a large cache) and without the shard's lock (whose line two threads
    /// working in different directories passed back and forth). An eviction and the
    /// upgrade race on the buffer's one strong count, as the kernel's reclaim
    /// (`folio_ref_freeze`) and lockless page-cache lookup (`folio_try_get`) do on a
    /// folio's: the eviction takes it from 1 (the map's) to 0 in one compare-exchange
    /// (`Arc::try_unwrap`), the upgrade increments it only from non-zero, so exactly one of
    /// them wins; an eviction that lost puts the buffer back before it lets go of the shard
    /// lock (`evict`), so a buffer a hint gave back stays its block's cached one. The
    /// flag is checked too: a forget (the block freed) takes a buffer out while held, but
    /// never one a hint can still name (a directory's leaves are freed with the directory,
    /// under its lock, and its digests with them). `None`: look it up, as for a hint of
    /// another block than `blk`.
    pub fn get_hinted(&self, blk: u64, hint: &Weak<Buf>) -> Option<Arc<Buf>> {
        hint.upgrade()
            .filter(|b| b.blk == blk && b.cached.load(Ordering::Relaxed))
    }

    /// A block that is about to be overwritten whole: no read, contents zeroed.
    pub fn get_new(&self, blk: u64) -> Arc<Buf> {
        let b = self.insert(blk, None);
        let mut d = b.write();
        d.fill(0);
        b.renew();
        drop(d);
        b
    }

    /// The cached block if present, else a zeroed one without reading (for blocks the
    /// caller will compare against and overwrite whole).
    pub fn get_new_keep(&self, blk: u64) -> Arc<Buf> {
        let b = self.insert(blk, None);
        b.renew();
        b
    }

    /// Block-sized memory for a new block of shard `sh`: a spare one (stale bytes the
    /// caller overwrites) or a fresh zeroed one.
    fn take_spare(&self, sh: &mut Shard) -> Box<[u8]> {
        match sh.spare.pop() {
            Some(d) => {
                let before = self.spares.fetch_sub(1, Ordering::Relaxed);
                debug_assert!(before > 0, "a spare taken but none counted");
                debug_assert_eq!(d.len(), self.bs, "spare memory is not a block");
                d
            }
            None => vec![0u8; self.bs].into_boxed_slice(),
        }
    }

    /// Keep block memory no block uses now as a spare of `sh`, up to a quarter of the
    /// shard's bound.
    fn put_spare(&self, sh: &mut Shard, d: Box<[u8]>) {
        debug_assert_eq!(d.len(), self.bs, "spare memory is not a block");
        if sh.spare.len() < self.shard_bound() / 4 {
            sh.spare.push(d);
            self.spares.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The cached block, or `data` (None: zeroes) put in the cache as block `blk`.
    fn insert(&self, blk: u64, data: Option<Box<[u8]>>) -> Arc<Buf> {
        let mut sh = self.shard(blk).lock();
        if let Some(b) = sh.map.get(&blk) {
            let b = b.clone();
            if let Some(d) = data {
                self.put_spare(&mut sh, d);
            }
            return b;
        }
        let data = data.unwrap_or_else(|| {
            let mut d = self.take_spare(&mut sh);
            d.fill(0);
            d
        });
        self.shrink_locked(&mut sh, self.shard_bound());
        let b = Arc::new(Buf {
            blk,
            data: RwLock::new(&BUFFER, data),
            dirty: DirtyFlag::new(),
            jtid: AtomicU64::new(0),
            forgotten: AtomicBool::new(false),
            seal: AtomicU64::new(0),
            verified: AtomicBool::new(false),
            checked: AtomicU64::new(0),
            wgen: AtomicU64::new(0),
            cached: AtomicBool::new(true),
            freeze: AtomicBool::new(false),
            frozen: Mutex::new(&BUF_FROZEN, None),
        });
        sh.map.insert(blk, b.clone());
        self.cached.fetch_add(1, Ordering::Relaxed);
        b
    }

    /// A shard at its bound (blocks and spares) evicts clean blocks, leaving room for one
    /// more.
    fn shrink_locked(&self, sh: &mut Shard, bound: usize) {
        if sh.map.len() + sh.spare.len() < bound {
            return;
        }
        let trimmed = sh.spare.len().saturating_sub(bound / 4);
        let keep = sh.spare.len() - trimmed;
        sh.spare.truncate(keep);
        let (gone, kept) = evict(sh, bound);
        let before = self.cached.fetch_sub(gone + kept, Ordering::Relaxed);
        debug_assert!(
            before >= gone + kept,
            "{} evicted of {before} cached",
            gone + kept
        );
        self.evicted
            .fetch_add((gone + kept) as u64, Ordering::Relaxed);
        self.spares.fetch_add(kept, Ordering::Relaxed);
        self.spares.fetch_sub(trimmed, Ordering::Relaxed);
    }

    /// The journal is about to hold `n` committed copies: count them now and evict clean
    /// blocks down to what the limit leaves, so that the cache and the copies stay within
    /// the limit while a commit takes them (not only at each shard's next miss).
    pub fn reserve_copies(&self, n: usize) {
        self.set_copies(n);
        let held = self.cached.load(Ordering::Relaxed) + self.spares.load(Ordering::Relaxed);
        if held + n <= self.limit_blocks {
            return;
        }
        let bound = self.shard_bound();
        for sh in &self.shards {
            self.shrink_locked(&mut sh.lock(), bound);
        }
    }

    /// Mark `b` dirty (pinned until checkpoint; called by handles and commit).
    pub fn dirty(&self, b: &Buf) {
        // A freed metadata block is out of the cache and never logged: a change made to
        // it after the free would be lost.
        debug_assert!(
            !b.forgotten.load(Ordering::Acquire),
            "block {} changed after it was freed",
            b.blk
        );
        b.dirty.mark(&self.dirty_count);
    }

    /// Unpin `b` after its committed contents reached home, unless a transaction newer
    /// than `upto` has changed it since.
    pub fn clean_if_checkpointed(&self, b: &Buf, upto: u64) {
        // Checkpoints run under the commit lock, after the commit took its copies.
        debug_assert!(
            !b.freeze.load(Ordering::Acquire),
            "block {} checkpointed while frozen",
            b.blk
        );
        if b.jtid.load(Ordering::Acquire) <= upto {
            b.dirty.clear(&self.dirty_count);
        }
    }

    /// Put replayed contents in the cache, pinned (a read-only mount's replay overlay).
    pub fn insert_pinned(&self, blk: u64, data: &[u8]) {
        let b = self.insert(blk, None);
        {
            let mut w = b.write();
            w.copy_from_slice(data);
            // Replayed bytes: checked again when read.
            b.verified.store(false, Ordering::Release);
        }
        self.dirty(&b);
    }

    /// Blocks pinned in memory (changed, not yet checkpointed).
    pub fn dirty_count(&self) -> usize {
        self.dirty_count.get()
    }

    /// Drop a freed metadata block from the cache: a stale copy must never be logged or
    /// written over the block's next use.
    pub fn forget(&self, blk: u64) {
        let removed = {
            let mut sh = self.shard(blk).lock();
            let b = sh.map.remove(&blk);
            if let Some(b) = &b {
                b.cached.store(false, Ordering::Relaxed);
            }
            b
        };
        if let Some(b) = removed {
            let before = self.cached.fetch_sub(1, Ordering::Relaxed);
            debug_assert!(before > 0, "block {blk} forgotten but none counted");
            b.forgotten.store(true, Ordering::Release);
            b.dirty.clear(&self.dirty_count);
        }
    }

    /// Read bytes straight from the device (data blocks; never cached here).
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }
}

/// Drop clean blocks nobody holds until the shard holds three quarters of its bound
/// `limit` in blocks, keeping the memory of up to a quarter as spares; returns how many
/// blocks left the map without and with their memory kept.
fn evict(sh: &mut Shard, limit: usize) -> (usize, usize) {
    // Room for the block being inserted.
    let target = (limit - limit / 4).saturating_sub(1);
    let victims: Vec<u64> = sh
        .map
        .iter()
        .filter(|(_, b)| !b.is_dirty() && Arc::strong_count(b) == 1)
        .map(|(k, _)| *k)
        .take(sh.map.len().saturating_sub(target))
        .collect();
    take_out(sh, &victims, limit)
}

/// Take the picked blocks `victims` out of the map, keeping the memory of up to a quarter
/// of `limit` as spares; a block someone took since it was picked stays.
fn take_out(sh: &mut Shard, victims: &[u64], limit: usize) -> (usize, usize) {
    let (mut gone, mut kept) = (0, 0);
    for &k in victims {
        let Some(b) = sh.map.remove(&k) else {
            continue;
        };
        // From 1 to 0 or not at all: a hint's upgrade (no shard lock) may have counted
        // itself in since the buffer was picked ([`BufCache::get_hinted`]); the buffer then
        // goes back, still the cached one.
        match Arc::try_unwrap(b) {
            Ok(b) => {
                // Dirty blocks are pinned until checkpoint: their newest bytes are only
                // here (and in the log).
                debug_assert!(!b.is_dirty(), "dirty block {k} evicted");
                if sh.spare.len() < limit / 4 {
                    sh.spare.push(b.data.into_inner());
                    kept += 1;
                } else {
                    gone += 1;
                }
            }
            Err(b) => {
                sh.map.insert(k, b);
            }
        }
    }
    (gone, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default limit is a sixteenth of memory within [64 MiB, 1 GiB].
    #[test]
    fn default_limit_follows_memory() {
        assert_eq!(bufcache_limit_for(512 << 20), 64 << 20);
        assert_eq!(bufcache_limit_for(4 << 30), 256 << 20);
        assert_eq!(bufcache_limit_for(24 << 30), 1 << 30);
        assert_eq!(bufcache_limit_for((8 << 30) + 12345), 512 << 20);
        let here = default_bufcache_limit();
        assert!((64 << 20..=1 << 30).contains(&here), "{here}");
    }

    /// Past its bound a shard evicts clean blocks and reuses their memory for the next
    /// misses; what it keeps, blocks and spares, stays within the limit, and a reused
    /// block reads back the device's bytes, not the stale ones of its last use.
    /// A commit's copies are made room for before they are taken: with the cache at
    /// its limit, reserving a transaction's worth of copies evicts clean blocks at once,
    /// so blocks, spares and copies together stay within the limit.
    #[test]
    fn reserved_copies_evict_before_they_are_taken() {
        let bs = 1024;
        let blocks = 8192u64;
        let dev = Arc::new(crate::dev::MemDevice::new(blocks * bs as u64));
        let limit = (SHARDS * MIN_SHARD_BLOCKS * 4 * bs) as u64;
        let c = BufCache::new(dev, bs, limit);
        for b in 0..blocks {
            c.get(b).unwrap();
        }
        let full = c.stats().bytes;
        assert!(
            full + (limit / 4) > limit,
            "the cache is near its limit: {full}"
        );
        let copies = c.limit_blocks() / 4;
        c.reserve_copies(copies);
        let st = c.stats();
        assert!(
            st.bytes <= limit,
            "{} bytes with {copies} copies reserved, past the limit {limit}",
            st.bytes
        );
        // Nothing to make room for: no eviction.
        let before = c.stats().bytes;
        c.reserve_copies(copies);
        assert_eq!(c.stats().bytes, before);
    }

    #[test]
    fn eviction_reuses_memory_within_the_limit() {
        let bs = 1024;
        let blocks = 8192u64;
        let dev = Arc::new(crate::dev::MemDevice::new(blocks * bs as u64));
        for b in 0..blocks {
            dev.write_at(b * bs as u64, &vec![(b % 251) as u8; bs])
                .unwrap();
        }
        let limit = (SHARDS * MIN_SHARD_BLOCKS * 4 * bs) as u64;
        let c = BufCache::new(dev, bs, limit);
        for round in 0..2 {
            for b in 0..blocks {
                let buf = c.get(b).unwrap();
                assert!(
                    buf.read().iter().all(|&x| x == (b % 251) as u8),
                    "block {b}"
                );
                if round == 1 && b % 7 == 0 {
                    // A block rewritten whole starts zeroed, spare memory or not.
                    assert!(c.get_new(blocks + b).read().iter().all(|&x| x == 0));
                }
            }
        }
        let st = c.stats();
        assert!(
            st.bytes <= limit,
            "{} bytes cached past the limit {limit}",
            st.bytes
        );
        assert!(
            c.spares.load(Ordering::Relaxed) > 0,
            "evicted memory was kept"
        );
    }

    /// A hint gives back the cached buffer while it is cached, and never one that left
    /// the map (evicted or forgotten): the block is then looked up (read again).
    #[test]
    fn a_hint_is_taken_only_while_cached() {
        let c = cache_1k((SHARDS * MIN_SHARD_BLOCKS * 1024) as u64);
        let b = c.get(5).unwrap();
        let hint = Arc::downgrade(&b);
        assert!(Arc::ptr_eq(&c.get_hinted(5, &hint).unwrap(), &b));
        // The hint of another block is not taken for this one.
        assert!(c.get_hinted(6, &hint).is_none());
        // Forgotten while held: the map's buffer is a new one, and the hint is refused.
        c.forget(5);
        assert!(c.get_hinted(5, &hint).is_none());
        let again = c.get(5).unwrap();
        assert!(!Arc::ptr_eq(&again, &b));
        drop(b);
        assert!(c.get_hinted(5, &hint).is_none());
        // Evicted: fill the cache well past its limit while nothing holds block 5.
        let hint = Arc::downgrade(&again);
        drop(again);
        for blk in 100..(100 + 4 * (SHARDS * MIN_SHARD_BLOCKS) as u64) {
            c.get(blk).unwrap();
        }
        match hint.upgrade() {
            // Still cached (its shard kept it): the hint is the cached buffer.
            Some(h) => assert!(Arc::ptr_eq(&c.get_hinted(5, &hint).unwrap(), &h)),
            None => assert!(c.get_hinted(5, &hint).is_none()),
        }
    }

    /// A cache of 1 KiB blocks over 8 MiB of memory, bounded by `limit` bytes.
    fn cache_1k(limit: u64) -> BufCache {
        BufCache::new(Arc::new(crate::dev::MemDevice::new(8 << 20)), 1024, limit)
    }

    /// A record's check mark holds while the block stays cached, and goes with the bytes
    /// it was made for: a block taken for reuse, a re-read after eviction, a replayed copy.
    #[test]
    fn record_marks_go_with_the_bytes_they_were_made_for() {
        let c = cache_1k(1 << 20);
        let b = c.get(5).unwrap();
        assert!(
            !b.record_checked(3),
            "read from the device: nothing checked"
        );
        b.set_record_checked(3);
        b.set_record_checked(70);
        assert!(b.record_checked(3) && !b.record_checked(4));
        assert!(!b.record_checked(70), "past the 64th record: never marked");
        assert!(
            c.get(5).unwrap().record_checked(3),
            "the cached buffer keeps its marks"
        );
        drop(b.write_records());
        assert!(
            b.record_checked(3),
            "a write of whole records keeps the others' marks"
        );
        drop(b.write());
        assert!(!b.record_checked(3), "a write of anything else");
        b.set_record_checked(3);
        assert!(
            !c.get_new_keep(5).record_checked(3),
            "a block taken for reuse"
        );
        b.set_record_checked(3);
        c.insert_pinned(5, &[0u8; 1024]);
        assert!(!b.record_checked(3), "a replayed copy");
        drop(b);
        c.forget(5);
        assert!(!c.get(5).unwrap().record_checked(3), "read again");
    }

    /// A block a hint took back between an eviction's pick and its compare-exchange (the
    /// window `get_hinted` leaves, having no shard lock) stays in the map, the same buffer,
    /// and the eviction counts nothing; one nobody took leaves the map.
    #[test]
    fn an_eviction_puts_back_a_block_taken_since_its_pick() {
        let c = cache_1k(1 << 20);
        let held = c.get(7).unwrap();
        let hint = Arc::downgrade(&held);
        drop(held);
        // Picked with a count of 1 (the map's); then the hint counts itself in.
        let taken = c.get_hinted(7, &hint).expect("cached");
        let mut sh = c.shard(7).lock();
        assert_eq!(take_out(&mut sh, &[7], 64), (0, 0));
        assert!(Arc::ptr_eq(sh.map.get(&7).expect("put back"), &taken));
        drop(taken);
        assert_eq!(take_out(&mut sh, &[7], 64), (0, 1));
        assert!(!sh.map.contains_key(&7));
        drop(sh);
        assert!(
            c.get_hinted(7, &hint).is_none(),
            "an evicted block's hint is dead"
        );
    }

    /// A frozen block yields its bytes as they were when frozen: copied by the commit
    /// when no writer came first, else the copy the first writer kept (later writes do
    /// not reach it); once taken, writes go straight to the block again.
    #[test]
    fn a_frozen_block_logs_its_bytes_of_the_pause() {
        let bs = 1024;
        let c = cache_1k(1 << 20);
        let b = c.get(3).unwrap();
        b.write().fill(1);
        b.set_seal(Seal::DirLeaf(7));
        // No writer before the commit's copy: the commit copies, into the memory given.
        b.freeze();
        assert_eq!(b.seal(), Seal::DirLeaf(7));
        let (copy, unused) = b.frozen_copy(Some(vec![9u8; bs].into_boxed_slice()));
        assert!(copy.iter().all(|&x| x == 1) && unused.is_none());
        // Two writers before the copy: the first keeps the bytes of the pause, and the
        // memory offered to the commit comes back unused.
        b.freeze();
        b.write().fill(2);
        b.write().fill(3);
        let (copy, unused) = b.frozen_copy(Some(vec![9u8; bs].into_boxed_slice()));
        assert!(copy.iter().all(|&x| x == 1));
        assert_eq!(unused.map(|u| u.len()), Some(bs));
        assert!(b.read().iter().all(|&x| x == 3));
        // Thawed: the next commit freezes the newest bytes.
        b.write().fill(4);
        b.freeze();
        let (copy, _) = b.frozen_copy(None);
        assert!(copy.iter().all(|&x| x == 4));
        assert!(b.frozen.lock().is_none());
    }
}
