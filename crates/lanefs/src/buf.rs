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
use crate::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, BUFFER, BUF_SHARD};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const SHARDS: usize = 64;
/// Fewest blocks a shard keeps before evicting, whatever the limit.
const MIN_SHARD_BLOCKS: usize = 16;
/// The cache's default memory limit (`bufcache_limit=`).
pub const DEFAULT_BUFCACHE_LIMIT: u64 = 256 << 20;

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
}

impl Buf {
    /// Read access to the bytes.
    pub fn read(&self) -> RwLockReadGuard<'_, Box<[u8]>> {
        self.data.read()
    }
    /// Write access to the bytes; the caller marks the buffer dirty through its handle.
    pub fn write(&self) -> RwLockWriteGuard<'_, Box<[u8]>> {
        self.data.write()
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
    }
    /// Whether the block was verified since it was read (or was written here).
    pub fn is_verified(&self) -> bool {
        self.verified.load(Ordering::Acquire)
    }
    /// Record that the block's bytes were verified.
    pub fn set_verified(&self) {
        self.verified.store(true, Ordering::Release);
    }
    /// A copy of the bytes for a commit (into `reuse` when it is given and block-sized),
    /// with the seal to stamp on it.
    pub(crate) fn snapshot(&self, reuse: Option<Box<[u8]>>) -> (Box<[u8]>, Seal) {
        let d = self.read();
        let copy = match reuse {
            Some(mut c) if c.len() == d.len() => {
                c.copy_from_slice(&d);
                c
            }
            _ => d.clone(),
        };
        (copy, Seal::from_word(self.seal.load(Ordering::Acquire)))
    }
}

/// The metadata block cache.
pub struct BufCache {
    dev: Arc<dyn BlockDevice>,
    bs: usize,
    shards: Vec<Mutex<HashMap<u64, Arc<Buf>>>>,
    dirty_count: DirtyCount,
    /// Blocks the limit holds.
    limit_blocks: usize,
    /// The limit in bytes the shards' bound comes from.
    limit: u64,
    /// Blocks cached (all shards).
    cached: std::sync::atomic::AtomicUsize,
    /// Committed copies the journal holds until checkpoint: they count against the limit.
    copies: std::sync::atomic::AtomicUsize,
}

impl BufCache {
    /// A cache over `dev` with `bs`-byte blocks that evicts clean blocks past `limit`
    /// bytes, counting the journal's committed copies (dirty blocks stay until checkpoint;
    /// the journal checkpoints when they and the copies pass half of it, and keeps a
    /// transaction under an eighth).
    pub fn new(dev: Arc<dyn BlockDevice>, bs: usize, limit: u64) -> BufCache {
        let shards = (0..SHARDS)
            .map(|_| Mutex::new(&BUF_SHARD, HashMap::new()))
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
        }
    }

    /// Bytes of blocks cached (with the journal's committed copies), of dirty (pinned)
    /// ones among them, and the limit.
    pub fn stats(&self) -> crate::types::BufCacheStats {
        let bs = self.bs as u64;
        crate::types::BufCacheStats {
            bytes: (self.cached.load(Ordering::Relaxed) + self.copies.load(Ordering::Relaxed))
                as u64
                * bs,
            dirty_bytes: self.dirty_count() as u64 * bs,
            limit: self.limit,
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

    fn shard(&self, blk: u64) -> &Mutex<HashMap<u64, Arc<Buf>>> {
        let h = blk.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
    }

    /// The cached block, reading it from the device on a miss (IO outside any lock).
    pub fn get(&self, blk: u64) -> Result<Arc<Buf>> {
        if let Some(b) = self.shard(blk).lock().get(&blk) {
            return Ok(b.clone());
        }
        let mut data = vec![0u8; self.bs].into_boxed_slice();
        self.dev.read_at(blk * self.bs as u64, &mut data)?;
        Ok(self.insert(blk, data))
    }

    /// A block that is about to be overwritten whole: no read, contents zeroed.
    pub fn get_new(&self, blk: u64) -> Arc<Buf> {
        let b = self.insert(blk, vec![0u8; self.bs].into_boxed_slice());
        let mut d = b.write();
        d.fill(0);
        b.renew();
        drop(d);
        b
    }

    /// The cached block if present, else a zeroed one without reading (for blocks the
    /// caller will compare against and overwrite whole).
    pub fn get_new_keep(&self, blk: u64) -> Arc<Buf> {
        let b = self.insert(blk, vec![0u8; self.bs].into_boxed_slice());
        b.renew();
        b
    }

    fn insert(&self, blk: u64, data: Box<[u8]>) -> Arc<Buf> {
        let mut m = self.shard(blk).lock();
        if let Some(b) = m.get(&blk) {
            return b.clone();
        }
        let bound = self.shard_bound();
        if m.len() >= bound {
            let gone = evict(&mut m, bound);
            self.cached.fetch_sub(gone, Ordering::Relaxed);
        }
        let b = Arc::new(Buf {
            blk,
            data: RwLock::new(&BUFFER, data),
            dirty: DirtyFlag::new(),
            jtid: AtomicU64::new(0),
            forgotten: AtomicBool::new(false),
            seal: AtomicU64::new(0),
            verified: AtomicBool::new(false),
        });
        m.insert(blk, b.clone());
        self.cached.fetch_add(1, Ordering::Relaxed);
        b
    }

    /// Mark `b` dirty (pinned until checkpoint; called by handles and commit).
    pub fn dirty(&self, b: &Buf) {
        b.dirty.mark(&self.dirty_count);
    }

    /// Unpin `b` after its committed contents reached home, unless a transaction newer
    /// than `upto` has changed it since.
    pub fn clean_if_checkpointed(&self, b: &Buf, upto: u64) {
        if b.jtid.load(Ordering::Acquire) <= upto {
            b.dirty.clear(&self.dirty_count);
        }
    }

    /// Put replayed contents in the cache, pinned (a read-only mount's replay overlay).
    pub fn insert_pinned(&self, blk: u64, data: &[u8]) {
        let b = self.insert(blk, vec![0u8; self.bs].into_boxed_slice());
        b.write().copy_from_slice(data);
        self.dirty(&b);
    }

    /// Blocks pinned in memory (changed, not yet checkpointed).
    pub fn dirty_count(&self) -> usize {
        self.dirty_count.get()
    }

    /// Drop a freed metadata block from the cache: a stale copy must never be logged or
    /// written over the block's next use.
    pub fn forget(&self, blk: u64) {
        let removed = self.shard(blk).lock().remove(&blk);
        if let Some(b) = removed {
            self.cached.fetch_sub(1, Ordering::Relaxed);
            b.forgotten.store(true, Ordering::Release);
            b.dirty.clear(&self.dirty_count);
        }
    }

    /// Read bytes straight from the device (data blocks; never cached here).
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }
}

/// Drop clean blocks nobody holds until the shard is at three quarters of its bound
/// `limit`; returns how many went.
fn evict(m: &mut HashMap<u64, Arc<Buf>>, limit: usize) -> usize {
    let target = limit * 3 / 4;
    let victims: Vec<u64> = m
        .iter()
        .filter(|(_, b)| !b.is_dirty() && Arc::strong_count(b) == 1)
        .map(|(k, _)| *k)
        .take(m.len().saturating_sub(target))
        .collect();
    let n = victims.len();
    for k in victims {
        m.remove(&k);
    }
    n
}
