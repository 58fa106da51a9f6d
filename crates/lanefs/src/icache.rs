//! The inode cache (seed 004): in-memory inodes by inode number.
//!
//! Three tables under one set of rules ([`IcachePolicy`]):
//! - `bucket` (default, by measurement): a fixed array of buckets sized from the memory
//!   limit, each an intrusive chain through links inside the entries themselves
//!   (`CacheLink::next`, the kernel's `i_hash`), so inserting and removing allocate nothing. Lookups pin the epoch
//!   (crossbeam-epoch, the RCU of this design) and walk the chain with no lock; inserts
//!   and removals change one link under the bucket's own lock (class `icache_bucket`),
//!   and an unlinked entry's memory is given back once no pinned reader can stand on it.
//! - `global` (the seed's baseline): one `HashMap` behind one lock (class
//!   `icache_global`) for every lookup, insert and removal, as the VFS's
//!   `inode_hash_lock` before Linux 6.11.
//! - `papaya`: the `papaya` crate's lock-free map.
//!
//! The rules (as the kernel's inode cache keeps them):
//! - One in-memory inode per number. An inode being read from disk or created sits in the
//!   table as a [`Slot::New`] placeholder: a lookup that meets it waits for that inode
//!   alone, then looks again; a failed set-up removes the placeholder.
//! - A reader takes a use (`Inode::cache.gate`, the kernel's `i_count`) and then checks the
//!   inode is not being evicted (`dead`, its `I_FREEING`); eviction sets `dead` and then
//!   checks for uses, both sequentially consistent, so one of the two always sees the
//!   other: an evicted inode is never handed out, and an inode in use is never evicted.
//! - Bounded: past `icache_limit` bytes, clean inodes nobody uses or holds open (no
//!   dirty pages, no unwritten extent-map change) are evicted by a CLOCK sweep, one
//!   sweeper at a time; a lookup marks its inode referenced, which buys it one pass. A
//!   new inode starts unreferenced, and a close or fsync ([`ICache::peek`]) does not
//!   mark it: a file created, closed and not looked up again goes at the first pass.
//!
//! The code, by concern: this file holds the cache, its uses ([`IRef`]) and lookups;
//! `icache/table.rs` the three tables' primitive operations, `icache/bucket.rs` the
//! `bucket` table's chains, `icache/setup.rs` the placeholders and claims of inodes being
//! set up, `icache/charge.rs` the byte and inode counts, `icache/sweep.rs` eviction.

use crate::hint::prefetch;
use crate::inode::Inode;
use crate::sync::{Mutex, ICACHE_BUCKET};
use crate::types::{IcachePolicy, IcacheStats};
pub use crate::usegate::Link;
use crossbeam_epoch as epoch;
use std::ops::Deref;
use std::sync::Arc;

// Under `cfg(shuttle)` (the model in `tests/shuttle_icache.rs`, run with
// `RUSTFLAGS="--cfg shuttle"`) the blocking primitives (`icache/setup.rs`) and the
// atomics below (which this module's children import from here) are shuttle's, so its
// scheduler switches tasks at each of them and reports a deadlock; the bucket and global
// locks are `crate::sync::Mutex`, shuttle's in that build too. `Arc` is std's in both
// (shuttle's is a re-export: reference counts are no switch point). crossbeam-epoch stays:
// shuttle runs every task on the one test thread, so all tasks share that thread's epoch
// participant, and a pin taken while another task's pin is live just nests in it (pins are
// counted, unpinned at zero in any order). The thread then stays pinned from the first of
// the overlapping pins to the last, at the epoch of the first, so the epoch cannot advance
// twice past any task's pin and nothing a pinned task loaded is freed under it: the same
// guarantee each task would have had with a thread of its own. (`Bucket::read` and
// `publish` make no shuttle call while pinned, so no switch happens inside a pin anyway.)
#[cfg(shuttle)]
use shuttle::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(shuttle)]
use shuttle::thread::yield_now;
#[cfg(not(shuttle))]
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(shuttle))]
use std::thread::yield_now;

/// Under `cfg(shuttle)`, a scheduling point before each operation on an inode's use gate:
/// the gate's atomics (`usegate.rs`, in `inode.rs`'s `CacheLink`) are std's in every build,
/// so without it shuttle would run a table access and the gate operation after it as one
/// step (a lookup's find and its use, say), and never schedule another task between them.
/// A load of a fresh shuttle atomic is such a point and nothing more. Empty otherwise.
#[inline(always)]
fn gate_switch() {
    #[cfg(shuttle)]
    AtomicBool::new(false).load(Ordering::SeqCst);
}

/// A cached inode in use: holds one use of it, so it is not evicted meanwhile.
pub struct IRef(Arc<Inode>);

impl IRef {
    /// The inode's shared pointer (for lists that outlive this use, such as the
    /// journal's ordered-data list).
    pub fn arc(&self) -> &Arc<Inode> {
        &self.0
    }
}

impl Deref for IRef {
    type Target = Inode;
    fn deref(&self) -> &Inode {
        &self.0
    }
}

impl Clone for IRef {
    fn clone(&self) -> IRef {
        gate_switch();
        self.0.cache.gate.add_use();
        IRef(self.0.clone())
    }
}

impl Drop for IRef {
    fn drop(&mut self) {
        gate_switch();
        self.0.cache.gate.unuse();
    }
}

/// Take a use of `i` unless it is being evicted; a lookup (`mark`) also marks it
/// referenced, which buys it one pass of the sweep.
fn try_use(i: &Arc<Inode>, mark: bool) -> Option<IRef> {
    gate_switch();
    if !i.cache.gate.try_use() {
        return None;
    }
    if mark && !i.cache.referenced.load(Ordering::Relaxed) {
        i.cache.referenced.store(true, Ordering::Relaxed);
    }
    Some(IRef(i.clone()))
}

#[path = "icache/bucket.rs"]
mod bucket;
#[path = "icache/charge.rs"]
mod charge;
#[path = "icache/setup.rs"]
mod setup;
#[path = "icache/sweep.rs"]
mod sweep;
#[path = "icache/table.rs"]
mod table;
pub use bucket::Slot;
use charge::Charged;
pub use setup::{Got, NewInode, Setup};
use table::Table;

/// The inode cache.
pub struct ICache {
    table: Table,
    limit: u64,
    charged: Charged,
    /// No sweep below these bytes: set past the limit when a sweep could not get below it
    /// (inodes in use or dirty), so inserts do not sweep the whole table every time.
    floor: AtomicU64,
    evictions: AtomicU64,
    /// Ready inodes the sweep visited (`IcacheStats::inspections`).
    inspections: AtomicU64,
    sweeping: AtomicBool,
    hand: AtomicUsize,
    /// A sweep could not get below the limit since [`ICache::take_pinned`] last looked.
    pinned: AtomicBool,
    /// Wakes whoever can make pinned inodes evictable (set once, at mount: the commit
    /// thread, whose commit turns the running transaction's staged inodes clean, as the
    /// kernel's reclaim writes dirty inodes back).
    waker: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl ICache {
    /// An empty cache of kind `policy` bounded to `limit` bytes of evictable inodes.
    pub fn new(policy: IcachePolicy, limit: u64) -> ICache {
        ICache {
            table: Table::new(policy, limit),
            limit,
            charged: Charged::new(limit),
            floor: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            inspections: AtomicU64::new(0),
            sweeping: AtomicBool::new(false),
            hand: AtomicUsize::new(0),
            pinned: AtomicBool::new(false),
            waker: std::sync::OnceLock::new(),
        }
    }

    /// Install the call that wakes the thread able to unpin inodes (set once).
    pub fn set_waker(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.waker.set(f);
    }

    /// Whether a sweep was left over the limit by inodes it could not evict since the
    /// last call (for the commit thread).
    pub fn take_pinned(&self) -> bool {
        self.pinned.swap(false, Ordering::AcqRel)
    }

    /// The cached inode `ino`, or the one `load` reads, inserted. Concurrent callers for
    /// one number wait for a single load.
    pub fn get<E>(
        &self,
        ino: u64,
        load: impl FnOnce() -> std::result::Result<Inode, E>,
    ) -> std::result::Result<IRef, E> {
        match self.get_or_claim(ino) {
            Got::Cached(r) => Ok(r),
            // A failed (or panicking) load drops the claim, which removes the placeholder
            // and wakes the lookups waiting on it.
            Got::Claimed(claim) => Ok(claim.finish(load()?)),
        }
    }

    /// The cached inode `ino` if it is in the table (waiting for one being set up, and
    /// for one being evicted to leave). Not a lookup: the inode is not marked referenced
    /// (a close or an fsync of an open file is no reason to keep it cached once it is
    /// closed, as the kernel's `iput` puts a new inode on its LRU unreferenced).
    pub fn peek(&self, ino: u64) -> Option<IRef> {
        self.find_use(ino, false)
    }

    /// [`ICache::peek`], marking the inode referenced when `mark` (a lookup).
    fn find_use(&self, ino: u64, mark: bool) -> Option<IRef> {
        loop {
            match self.find(ino)? {
                Slot::Ready(i) => match try_use(&i, mark) {
                    Some(r) => return Some(r),
                    // Being evicted: it leaves the table shortly.
                    None => yield_now(),
                },
                Slot::New(s) => s.wait(),
            }
        }
    }

    /// Drop `ino` from the cache if the cached copy is `which` (after it is freed).
    pub fn remove(&self, ino: u64, which: &Inode) {
        let Some(Slot::Ready(i)) = self.find(ino) else {
            return;
        };
        if !std::ptr::eq(Arc::as_ptr(&i), which) {
            return;
        }
        if self.take(ino, &Slot::Ready(i.clone())) {
            self.uncharge(&i);
        }
    }

    /// Every cached inode (for write-back).
    pub fn all(&self) -> Vec<Arc<Inode>> {
        let mut out = Vec::new();
        self.for_each_slot(|s| {
            if let Slot::Ready(i) = s {
                out.push(i.clone());
            }
        });
        out
    }

    /// How many inodes the cache holds, the bytes charged for them, the limit and the
    /// evictions so far.
    pub fn stats(&self) -> IcacheStats {
        let (bytes, inodes) = self.charged.exact();
        IcacheStats {
            inodes,
            bytes,
            limit: self.limit,
            peak_bytes: self.charged.peak.load(Ordering::Relaxed).max(bytes),
            evictions: self.evictions.load(Ordering::Relaxed),
            inspections: self.inspections.load(Ordering::Relaxed),
        }
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::bucket::Bucket;
    use super::*;

    /// Consecutive inode numbers (what a create storm allocates) spread over the whole
    /// bucket array, so chains stay short.
    #[test]
    fn consecutive_numbers_fill_every_bucket() {
        let buckets: Box<[Bucket]> = (0..1 << 16).map(|_| Bucket::new()).collect();
        let base = buckets.as_ptr() as usize;
        let mut per = vec![0u32; buckets.len()];
        for ino in 12..250_012u64 {
            let b = ICache::bucket(&buckets, ino) as *const Bucket as usize;
            per[(b - base) / std::mem::size_of::<Bucket>()] += 1;
        }
        let used = per.iter().filter(|&&n| n > 0).count();
        let longest = per.iter().copied().max().unwrap_or(0);
        assert!(used > buckets.len() * 9 / 10, "{used} buckets used");
        assert!(longest <= 8, "a chain of {longest}");
    }

    /// A load that panics leaves no placeholder behind: the next lookup of the number
    /// loads it again instead of waiting forever.
    #[test]
    fn panicking_load_leaves_no_placeholder() {
        for policy in [
            IcachePolicy::Bucket,
            IcachePolicy::Global,
            IcachePolicy::Papaya,
        ] {
            let c = Arc::new(ICache::new(policy, 1 << 20));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = c.get::<()>(12, || panic!("load failed"));
            }));
            assert!(r.is_err());
            // On its own thread, so a lookup stuck on a stale placeholder fails the test
            // instead of hanging it.
            let (tx, rx) = std::sync::mpsc::channel();
            let c2 = c.clone();
            std::thread::spawn(move || {
                let r = c2.get::<()>(12, || {
                    Ok(crate::inode::new_inode(
                        12,
                        crate::disk::inode::DiskInode::new(256),
                    ))
                });
                let _ = tx.send(r.map(|i| i.ino));
            });
            let loaded = rx.recv_timeout(std::time::Duration::from_secs(10));
            assert_eq!(
                loaded,
                Ok(Ok(12)),
                "{policy:?}: lookup after a panicking load"
            );
        }
    }
}
