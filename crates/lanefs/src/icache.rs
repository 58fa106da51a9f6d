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

use crate::hint::prefetch;
use crate::inode::Inode;
use crate::numhash::{fib_bits, NumHash};
use crate::sync::{my_lane, Mutex, ICACHE_BUCKET, ICACHE_GLOBAL, LANES};
use crate::types::{IcachePolicy, IcacheStats};
pub use crate::usegate::Link;
use crossbeam_epoch as epoch;
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

// Under `cfg(shuttle)` (the model in `tests/shuttle_icache.rs`, run with
// `RUSTFLAGS="--cfg shuttle"`) the blocking primitives and atomics here are shuttle's, so its
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
#[cfg(not(shuttle))]
use parking_lot::{Condvar, Mutex as SetupMutex};
#[cfg(shuttle)]
use shuttle::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(shuttle)]
use shuttle::sync::{Condvar, Mutex as SetupMutex};
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

/// An inode being set up (read from disk or created): lookups wait on it. Finishing
/// wakes nobody (no system call) unless someone waits: `parking_lot`'s condition
/// variable knows (std's always calls futex wake).
pub struct Setup {
    done: SetupMutex<bool>,
    cv: Condvar,
    /// Its link in a `bucket` chain (with the number it holds).
    next: Link,
}

impl Setup {
    fn new(ino: u64) -> Arc<Setup> {
        Arc::new(Setup {
            done: SetupMutex::new(false),
            cv: Condvar::new(),
            next: Link::new(ino),
        })
    }
    #[cfg(not(shuttle))]
    fn wait(&self) {
        let mut d = self.done.lock();
        while !*d {
            self.cv.wait(&mut d);
        }
    }
    #[cfg(not(shuttle))]
    fn finish(&self) {
        let mut d = self.done.lock();
        debug_assert!(!*d, "inode {} set up twice", self.next.key());
        *d = true;
        drop(d);
        self.cv.notify_all();
    }
    #[cfg(shuttle)]
    fn wait(&self) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*d {
            d = self.cv.wait(d).unwrap_or_else(|e| e.into_inner());
        }
    }
    #[cfg(shuttle)]
    fn finish(&self) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        debug_assert!(!*d, "inode {} set up twice", self.next.key());
        *d = true;
        drop(d);
        self.cv.notify_all();
    }
}

#[path = "icache/bucket.rs"]
mod bucket;
pub use bucket::Slot;
use bucket::{link_of, Bucket};

enum Table {
    Bucket(Box<[Bucket]>),
    Global(Mutex<HashMap<u64, Slot, NumHash>>),
    Papaya(papaya::HashMap<u64, Slot, NumHash>),
}

/// Bytes of limit per bucket when sizing the bucket array: about 0.4 inodes per bucket at
/// the 648 bytes an empty file's inode is charged (`docs/bench.md`, `fsmark`), so a lookup that
/// misses (an evicted inode coming back) mostly finds an empty chain instead of walking
/// cold entries. 1,024 (1.6 per bucket) cost a remove in a 2,000,000-file directory 0.6
/// us of chain walking; the array is 24 bytes a bucket, about a tenth of the limit.
const SIZING_BYTES: u64 = 256;
/// Consecutive inode numbers go to adjacent buckets in runs of `1 << RUN_BITS` (16: the
/// inodes of one 4 KiB table block of 256-byte inodes, 384 bytes of buckets). Creates
/// take numbers in order and a directory's files are often removed in the order they
/// were made, so the next operation's bucket head is mostly on a line the last one
/// loaded; with every number hashed alone, each lookup's bucket head was a miss into an
/// array of 4 MiB at the default limit.
const RUN_BITS: u32 = 4;
/// Smallest change of an inode's size that [`ICache::recharge`] charges.
const RECHARGE_MIN: u64 = 4096;
/// The sweep stops once the cache is below this share of its limit (in 1/8ths).
const SWEEP_TARGET_EIGHTHS: u64 = 7;

/// How many buckets ahead of the hand a sweep asks for the first inode's lines.
const SWEEP_AHEAD: usize = 8;
/// How many victims ahead of the one it drops a sweep's deferred drop asks for lines.
const RELEASE_AHEAD: usize = 4;
/// Victims a sweep hands to one deferred drop ([`Bucket::retire_all`]), at least: a small
/// vector (one of a whole sweep's victims, tens of thousands, took fresh pages as it grew:
/// 1.4 % of a 2,000,000-file create in page faults), and a bounded drop for whichever
/// thread's pin runs it (an epoch collect runs up to 8 bags of 64 deferred drops).
const RELEASE_BATCH: usize = 64;

/// Entries a sweep unlinked and has not handed to the epoch yet; dropping it hands them
/// over too (a panic in the middle of a sweep does not leak them).
struct Victims(Vec<usize>);

impl Victims {
    /// Hand the entries so far to one deferred drop.
    fn retire(&mut self) {
        Bucket::retire_all(std::mem::replace(
            &mut self.0,
            Vec::with_capacity(RELEASE_BATCH),
        ));
    }
}

impl Drop for Victims {
    fn drop(&mut self) {
        Bucket::retire_all(std::mem::take(&mut self.0));
    }
}

/// Bytes and inodes charged to the cache, counted in per-thread lanes and folded into the
/// shared totals a batch at a time (the kernel's `percpu_counter`, as its `nr_inodes`): a
/// create or a removal writes its own lane's cache line, not one that every thread
/// writes. The folded totals are off by less than `LANES` batches; a batch is 1/256 of the
/// limit (at most 256 KiB), so a limit check is off by at most 1/16 of the limit, and a
/// tiny limit counts exactly.
struct Charged {
    total: ChargeLane,
    lanes: Box<[ChargeLane]>,
    batch: i64,
    /// The highest folded byte total since mount (checked at each fold, so it is the
    /// peak the limit checks saw).
    peak: AtomicU64,
}

/// One lane's (or the folded) bytes and inodes, alone on its cache lines. Signed: a lane
/// may give back more than it took (an inode charged on one thread, evicted on another).
#[repr(align(128))]
struct ChargeLane {
    bytes: AtomicI64,
    count: AtomicI64,
}

impl ChargeLane {
    fn new() -> ChargeLane {
        ChargeLane {
            bytes: AtomicI64::new(0),
            count: AtomicI64::new(0),
        }
    }
}

impl Charged {
    fn new(limit: u64) -> Charged {
        Charged {
            total: ChargeLane::new(),
            lanes: (0..LANES).map(|_| ChargeLane::new()).collect(),
            batch: (limit / 256).clamp(1, 256 << 10) as i64,
            peak: AtomicU64::new(0),
        }
    }

    /// Charge (or with negative numbers uncharge) `bytes` for `count` inodes.
    fn add(&self, bytes: i64, count: i64) {
        let l = &self.lanes[my_lane()];
        let b = l.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        l.count.fetch_add(count, Ordering::Relaxed);
        if b.abs() >= self.batch {
            let b = l.bytes.swap(0, Ordering::Relaxed);
            let c = l.count.swap(0, Ordering::Relaxed);
            let folded = self.total.bytes.fetch_add(b, Ordering::Relaxed) + b;
            self.total.count.fetch_add(c, Ordering::Relaxed);
            if b > 0 {
                self.peak.fetch_max(folded.max(0) as u64, Ordering::Relaxed);
            }
        }
    }

    /// The folded bytes: what limit checks read (one load of a line rarely written).
    fn approx_bytes(&self) -> u64 {
        self.total.bytes.load(Ordering::Relaxed).max(0) as u64
    }

    /// Bytes and inodes, lanes included: exact when no charge is in flight.
    fn exact(&self) -> (u64, u64) {
        let (mut b, mut c) = (
            self.total.bytes.load(Ordering::Relaxed),
            self.total.count.load(Ordering::Relaxed),
        );
        for l in self.lanes.iter() {
            b += l.bytes.load(Ordering::Relaxed);
            c += l.count.load(Ordering::Relaxed);
        }
        (b.max(0) as u64, c.max(0) as u64)
    }
}

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
        let table = match policy {
            IcachePolicy::Bucket => {
                let n = (limit / SIZING_BYTES)
                    .next_power_of_two()
                    .clamp(1024, 1 << 22);
                Table::Bucket((0..n).map(|_| Bucket::new()).collect())
            }
            IcachePolicy::Global => {
                Table::Global(Mutex::new(&ICACHE_GLOBAL, HashMap::with_hasher(NumHash)))
            }
            IcachePolicy::Papaya => Table::Papaya(papaya::HashMap::with_hasher(NumHash)),
        };
        ICache {
            table,
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

    fn bucket(buckets: &[Bucket], ino: u64) -> &Bucket {
        // A run of `1 << RUN_BITS` consecutive numbers sits in as many adjacent buckets,
        // and runs spread by Fibonacci hashing, which takes the product's top bits: its
        // middle bits repeat for runs of consecutive numbers (bits 32.. filled a seventh
        // of 65,536 buckets with 250,000 consecutive inodes, 27 to a chain).
        debug_assert!(buckets.len().is_power_of_two());
        let bits = buckets.len().trailing_zeros();
        debug_assert!(bits > RUN_BITS);
        let run = fib_bits(ino >> RUN_BITS, bits - RUN_BITS);
        &buckets[(run << RUN_BITS) | (ino as usize & ((1 << RUN_BITS) - 1))]
    }

    /// Which bucket of the `bucket` table holds `ino` (None for the other tables): for
    /// tests that race inodes on one bucket.
    pub fn bucket_index(&self, ino: u64) -> Option<usize> {
        match &self.table {
            Table::Bucket(b) => {
                let at = Self::bucket(b, ino) as *const Bucket as usize;
                Some((at - b.as_ptr() as usize) / std::mem::size_of::<Bucket>())
            }
            Table::Global(_) | Table::Papaya(_) => None,
        }
    }

    /// The entry for `ino`, read without a lock (bucket, papaya) or under the one lock.
    fn find(&self, ino: u64) -> Option<Slot> {
        match &self.table {
            Table::Bucket(b) => Self::bucket(b, ino).find(ino),
            Table::Global(m) => m.lock().get(&ino).cloned(),
            Table::Papaya(m) => m.pin().get(&ino).cloned(),
        }
    }

    /// Insert `slot` for `ino` if there is no entry, or if `replace` accepts the one
    /// there (returned); otherwise hand back the entry found.
    fn put(
        &self,
        ino: u64,
        slot: Slot,
        replace: impl Fn(&Slot) -> bool,
    ) -> Result<Option<Slot>, Slot> {
        match &self.table {
            Table::Bucket(b) => {
                let bk = Self::bucket(b, ino);
                let _g = bk.lock.lock();
                match bk.find_locked(ino) {
                    None => {
                        bk.push_locked(slot);
                        Ok(None)
                    }
                    Some((pred, v)) => {
                        let cur = bk.slot_locked(v);
                        if !replace(&cur) {
                            return Err(cur);
                        }
                        bk.replace_locked(pred, v, slot);
                        Ok(Some(cur))
                    }
                }
            }
            Table::Global(m) => {
                let mut m = m.lock();
                match m.get_mut(&ino) {
                    Some(s) if !replace(s) => Err(s.clone()),
                    Some(s) => Ok(Some(std::mem::replace(s, slot))),
                    None => {
                        m.insert(ino, slot);
                        Ok(None)
                    }
                }
            }
            Table::Papaya(m) => {
                let m = m.pin();
                loop {
                    match m.try_insert(ino, slot.clone()) {
                        Ok(_) => return Ok(None),
                        Err(e) if !replace(e.current) => return Err(e.current.clone()),
                        Err(e) => {
                            let cur = e.current.clone();
                            let swapped = m.compute(ino, |entry| match entry {
                                Some((_, s)) if s.same(&cur) => {
                                    papaya::Operation::Insert(slot.clone())
                                }
                                _ => papaya::Operation::Abort(()),
                            });
                            if matches!(swapped, papaya::Compute::Updated { .. }) {
                                return Ok(Some(cur));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Remove `ino`'s entry if it is `which`; returns whether it was.
    fn take(&self, ino: u64, which: &Slot) -> bool {
        match &self.table {
            Table::Bucket(b) => {
                let bk = Self::bucket(b, ino);
                let _g = bk.lock.lock();
                match bk.find_locked(ino) {
                    Some((pred, v)) if v == link_of(which) => {
                        bk.unlink_locked(pred, v);
                        true
                    }
                    _ => false,
                }
            }
            Table::Global(m) => {
                let mut m = m.lock();
                if m.get(&ino).is_some_and(|s| s.same(which)) {
                    m.remove(&ino);
                    true
                } else {
                    false
                }
            }
            Table::Papaya(m) => {
                matches!(m.pin().remove_if(&ino, |_, s| s.same(which)), Ok(Some(_)))
            }
        }
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

    /// The cached inode `ino` (a lookup: marked referenced), or, when it is not cached,
    /// a claim on its number: a placeholder that lookups of the number wait on until the
    /// claim is finished with the inode or dropped. A caller may also work on the inode's
    /// disk bytes under the claim and drop it without ever caching the inode (an unlink of
    /// a cold inode, `Fs::remove`).
    pub fn get_or_claim(&self, ino: u64) -> Got<'_> {
        loop {
            if let Some(r) = self.find_use(ino, true) {
                return Got::Cached(r);
            }
            let setup = Setup::new(ino);
            let slot = Slot::New(setup.clone());
            // Another lookup or a create may have claimed the number meanwhile.
            if let Ok(old) = self.put(ino, slot.clone(), |_| false) {
                debug_assert!(old.is_none(), "inode {ino}: an entry replaced by a lookup");
                return Got::Claimed(NewInode {
                    cache: self,
                    ino,
                    slot,
                    setup,
                    done: false,
                });
            }
        }
    }

    /// Replace placeholder `slot` by the set-up `inode`; returns a use of it.
    fn publish(&self, ino: u64, slot: &Slot, inode: Inode) -> IRef {
        let a = Arc::new(inode);
        gate_switch();
        let first = a.cache.gate.try_use();
        debug_assert!(first, "a new inode is not dead");
        let charge = a.mem_bytes() as u64;
        a.cache.charge.store(charge, Ordering::Relaxed);
        let put = self.put(ino, Slot::Ready(a.clone()), |s| s.same(slot));
        debug_assert!(
            matches!(put, Ok(Some(Slot::New(_)))),
            "inode {ino}: placeholder lost"
        );
        self.charged.add(charge as i64, 1);
        IRef(a)
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

    /// Claim `ino` for a new inode that its creator sets up (insert_inode_locked): a
    /// cached copy of a freed inode of that number is replaced; one being read waits.
    /// A live cached inode with the number means the bitmap was wrong: an error.
    pub fn begin_new(&self, ino: u64) -> crate::error::Result<NewInode<'_>> {
        loop {
            let setup = Setup::new(ino);
            let slot = Slot::New(setup.clone());
            let dead_copy = |s: &Slot| matches!(s, Slot::Ready(i) if i.is_freed());
            match self.put(ino, slot.clone(), dead_copy) {
                Ok(old) => {
                    debug_assert!(
                        old.as_ref().is_none_or(dead_copy),
                        "inode {ino}: a live entry replaced by a new inode"
                    );
                    if let Some(Slot::Ready(i)) = old {
                        self.uncharge(&i);
                    }
                    return Ok(NewInode {
                        cache: self,
                        ino,
                        slot,
                        setup,
                        done: false,
                    });
                }
                Err(Slot::New(s)) => s.wait(),
                Err(Slot::Ready(_)) => {
                    return Err(crate::error::Error::corrupt(
                        "inode bitmap",
                        ino,
                        "a free inode number is in use in memory",
                    ))
                }
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

    /// Charge `i` its size now, `bytes` (its state's lock held by the caller), when it
    /// moved by more than an eighth (at least a page) since it was charged: a directory's
    /// index and digests and a file's extent map grow after the inode entered the cache.
    /// Then sweep if that took the cache over its limit.
    pub fn recharge(&self, i: &Inode, bytes: usize) {
        let new = bytes as u64;
        let old = i.cache.charge.load(Ordering::Relaxed);
        if old == 0 || new.abs_diff(old) < (old / 8).max(RECHARGE_MIN) {
            return;
        }
        // An inode uncharged meanwhile (removed, evicted) stays uncharged.
        if i.cache
            .charge
            .compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.charged.add(new as i64 - old as i64, 0);
            if new > old {
                self.maybe_sweep();
            }
        }
    }

    /// Stop counting `i` (once, whoever removes it: removal, eviction or replacement).
    fn uncharge(&self, i: &Inode) {
        let c = i.cache.charge.swap(0, Ordering::Relaxed);
        if c > 0 {
            self.charged.add(-(c as i64), -1);
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

    fn for_each_slot(&self, mut f: impl FnMut(&Slot)) {
        match &self.table {
            Table::Bucket(b) => {
                for bk in b.iter() {
                    bk.for_each(&mut f);
                }
            }
            Table::Global(m) => m.lock().values().for_each(f),
            Table::Papaya(m) => m.pin().values().for_each(f),
        }
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

    /// Sweep if the cache is over its limit (and its floor) and nobody else is sweeping.
    fn maybe_sweep(&self) {
        let over = self.limit.max(self.floor.load(Ordering::Relaxed));
        let bytes = self.charged.approx_bytes();
        if bytes <= over {
            return;
        }
        if self.sweeping.swap(true, Ordering::Acquire) {
            // Someone else is sweeping. Past a sixteenth over, help (the kernel's direct
            // reclaim): a slow or descheduled sweeper must not let the other threads'
            // inserts run the cache past its limit without end.
            if bytes > over + over / 16 {
                self.sweep();
            }
            return;
        }
        let reached = self.sweep();
        // The sweep could not get below its target: what is left is in use. Sweep again
        // only once another 1/16 of the limit has been charged, not at every insert. (A
        // sweep that got there but was outrun by other threads' inserts sets no floor.)
        let after = self.charged.approx_bytes();
        let floor = if !reached && after > self.limit {
            after + self.limit / 16
        } else {
            0
        };
        self.floor.store(floor, Ordering::Relaxed);
        self.sweeping.store(false, Ordering::Release);
        if floor != 0 {
            // Some of what is left waits for a commit (staged or dirty inodes).
            self.pinned.store(true, Ordering::Release);
            if let Some(w) = self.waker.get() {
                w();
            }
        }
    }

    /// CLOCK: from the hand, give referenced inodes a second chance and evict the
    /// others that can go, until below 7/8 of the limit or two full turns. Returns
    /// whether it got below.
    fn sweep(&self) -> bool {
        let target = self.limit / 8 * SWEEP_TARGET_EIGHTHS;
        let reached = std::cell::Cell::new(false);
        let below = || {
            let b = self.charged.approx_bytes() <= target;
            reached.set(reached.get() | b);
            b
        };
        match &self.table {
            Table::Bucket(b) => {
                let n = b.len();
                let mut victims = Victims(Vec::with_capacity(RELEASE_BATCH));
                for _ in 0..2 * n {
                    if below() {
                        break;
                    }
                    let i = self.hand.fetch_add(1, Ordering::Relaxed) % n;
                    b[(i + SWEEP_AHEAD) % n].prefetch_head();
                    let bk = &b[i];
                    if bk.head.get() == 0 {
                        continue;
                    }
                    {
                        let _g = bk.lock.lock();
                        let mut pred = &bk.head;
                        loop {
                            let v = pred.get();
                            if v == 0 {
                                break;
                            }
                            if self.evict(&bk.slot_locked(v)) {
                                victims.0.push(bk.unlink_keep_locked(pred, v));
                            } else {
                                pred = bk.next_locked(v);
                            }
                        }
                    }
                    // Outside the bucket's lock: the flush may run other drops.
                    if victims.0.len() >= RELEASE_BATCH {
                        victims.retire();
                    }
                }
            }
            Table::Global(m) => {
                for _ in 0..2 {
                    if below() {
                        break;
                    }
                    m.lock().retain(|_, s| !self.evict(s));
                }
            }
            Table::Papaya(m) => {
                let m = m.pin();
                for _ in 0..2 {
                    if below() {
                        break;
                    }
                    let mut victims = Vec::new();
                    for (k, s) in m.iter() {
                        if below() {
                            break;
                        }
                        if self.evict(s) {
                            victims.push((*k, s.clone()));
                        }
                    }
                    for (k, s) in victims {
                        // Marked dead: no lookup takes it; a create may have replaced it
                        // meanwhile (a freed inode's number reused), then it is gone.
                        let _ = m.remove_if(&k, |_, cur| cur.same(&s));
                    }
                }
            }
        }
        below() || reached.get()
    }

    /// Decide on one entry during a sweep: whether it is evicted (it is then marked
    /// dead and its charge dropped; the caller removes it from the table).
    fn evict(&self, s: &Slot) -> bool {
        let Slot::Ready(i) = s else { return false };
        self.inspections.fetch_add(1, Ordering::Relaxed);
        let c = &i.cache;
        if c.referenced.swap(false, Ordering::Relaxed) {
            return false;
        }
        gate_switch();
        if !c.gate.try_kill(|| i.evictable()) {
            return false;
        }
        self.uncharge(i);
        self.evictions.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// Rounds of pin-and-flush that [`ICache`]'s drop gives crossbeam-epoch: each moves this
/// thread's deferred drops to the global queue, advances the epoch when no other thread is
/// pinned, and runs up to 8 expired batches of 64.
const DROP_FLUSH_ROUNDS: usize = 256;

impl Drop for ICache {
    /// The kernel's `rcu_barrier` at unmount: an inode a bucket table removed or evicted is
    /// dropped through the epoch, after the readers that might stand on it. Its mapping
    /// holds a realtime file's data device, whose exclusive claim (`flock`) must not
    /// outlive the unmount (a remount found the device "in use by another lanefs"), so
    /// the drops that can run now run before the file system is gone.
    fn drop(&mut self) {
        if matches!(self.table, Table::Bucket(_)) {
            for _ in 0..DROP_FLUSH_ROUNDS {
                epoch::pin().flush();
            }
        }
    }
}

/// What [`ICache::get_or_claim`] found.
pub enum Got<'a> {
    /// The inode was cached: a use of it.
    Cached(IRef),
    /// It was not: the caller holds its number.
    Claimed(NewInode<'a>),
}

/// A new inode's claim on its number: [`NewInode::finish`] publishes the inode;
/// dropping the claim unfinished removes it and wakes waiters (a failed create).
pub struct NewInode<'a> {
    cache: &'a ICache,
    ino: u64,
    slot: Slot,
    setup: Arc<Setup>,
    done: bool,
}

impl NewInode<'_> {
    /// The number claimed.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Publish the set-up inode; returns a use of it.
    pub fn finish(mut self, inode: Inode) -> IRef {
        debug_assert_eq!(inode.ino, self.ino);
        let r = self.cache.publish(self.ino, &self.slot, inode);
        self.done = true;
        self.setup.finish();
        self.cache.maybe_sweep();
        r
    }
}

impl Drop for NewInode<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Only `finish` (this claim's) replaces a placeholder: it is still there.
            let took = self.cache.take(self.ino, &self.slot);
            debug_assert!(
                took || std::thread::panicking(),
                "inode {}: placeholder lost",
                self.ino
            );
            self.setup.finish();
        }
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
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
