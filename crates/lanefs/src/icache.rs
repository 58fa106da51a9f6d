//! The inode cache (seed 004): in-memory inodes by inode number.
//!
//! Three tables under one set of rules ([`IcachePolicy`]):
//! - `bucket`: a fixed array of buckets sized from the memory limit. Each
//!   bucket's chain is an immutable vector behind an atomic pointer: lookups pin the
//!   epoch (crossbeam-epoch, the RCU of this design), load it and search it with no lock;
//!   inserts and removals copy the short chain under the bucket's own lock (class
//!   `icache_bucket`), publish the copy and retire the old one, freed once no pinned
//!   reader can hold it.
//! - `global` (default, by measurement): one `HashMap` behind one lock (class
//!   `icache_global`) for every lookup, insert and removal, as the VFS's
//!   `inode_hash_lock` before Linux 6.11.
//! - `papaya`: the `papaya` crate's lock-free map.
//!
//! The rules (KERNEL-NOTES 4.4):
//! - One in-memory inode per number. An inode being read from disk or created sits in the
//!   table as a [`Slot::New`] placeholder: a lookup that meets it waits for that inode
//!   alone, then looks again; a failed set-up removes the placeholder.
//! - A reader takes a use (`Inode::cache.gate`, the kernel's `i_count`) and then checks the
//!   inode is not being evicted (`dead`, its `I_FREEING`); eviction sets `dead` and then
//!   checks for uses, both sequentially consistent, so one of the two always sees the
//!   other: an evicted inode is never handed out, and an inode in use is never evicted.
//! - Bounded: past `icache_limit` bytes, clean inodes nobody uses or holds open (no
//!   dirty pages, no unwritten extent-map change) are evicted by a CLOCK sweep, one
//!   sweeper at a time; a lookup marks its inode referenced, which buys it one pass.

use crate::inode::Inode;
use crate::sync::{Mutex, ICACHE_BUCKET, ICACHE_GLOBAL};
use crate::types::{IcachePolicy, IcacheStats};
use crossbeam_epoch::{self as epoch, Atomic, Owned, Shared};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
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
#[cfg(shuttle)]
use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(shuttle)]
use shuttle::sync::{Condvar, Mutex as StdMutex};
#[cfg(shuttle)]
use shuttle::thread::yield_now;
#[cfg(not(shuttle))]
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(shuttle))]
use std::sync::{Condvar, Mutex as StdMutex};
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

/// Take a use of `i` unless it is being evicted.
fn try_use(i: &Arc<Inode>) -> Option<IRef> {
    gate_switch();
    if !i.cache.gate.try_use() {
        return None;
    }
    if !i.cache.referenced.load(Ordering::Relaxed) {
        i.cache.referenced.store(true, Ordering::Relaxed);
    }
    Some(IRef(i.clone()))
}

/// An inode being set up (read from disk or created): lookups wait on it.
pub struct Setup {
    done: StdMutex<bool>,
    cv: Condvar,
}

impl Setup {
    fn new() -> Arc<Setup> {
        Arc::new(Setup {
            done: StdMutex::new(false),
            cv: Condvar::new(),
        })
    }
    fn wait(&self) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*d {
            d = self.cv.wait(d).unwrap_or_else(|e| e.into_inner());
        }
    }
    fn finish(&self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }
}

/// A table entry.
#[derive(Clone)]
pub enum Slot {
    /// A set-up inode.
    Ready(Arc<Inode>),
    /// A placeholder while the inode is read or created.
    New(Arc<Setup>),
}

impl Slot {
    fn same(&self, other: &Slot) -> bool {
        match (self, other) {
            (Slot::Ready(a), Slot::Ready(b)) => Arc::ptr_eq(a, b),
            (Slot::New(a), Slot::New(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Inode numbers hash by a multiply-shift (every table uses the same one).
#[derive(Default, Clone, Copy)]
pub struct InoHash;

/// The hasher of [`InoHash`].
#[derive(Default)]
pub struct InoHasher(u64);

impl Hasher for InoHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl BuildHasher for InoHash {
    type Hasher = InoHasher;
    fn build_hasher(&self) -> InoHasher {
        InoHasher(0)
    }
}

type Chain = Vec<(u64, Slot)>;

/// One bucket of the `bucket` table: writers hold `lock`; readers only pin the epoch.
struct Bucket {
    lock: Mutex<()>,
    /// Null when empty. Every chain stored here is never changed again: a writer
    /// publishes a new one and retires the old through the epoch.
    chain: Atomic<Chain>,
}

// The one place in the engine with `unsafe`: epoch-protected loads and retirement of a
// bucket's chain, each block stating why it is sound.
#[allow(unsafe_code)]
impl Bucket {
    fn new() -> Bucket {
        Bucket {
            lock: Mutex::new(&ICACHE_BUCKET, ()),
            chain: Atomic::null(),
        }
    }

    /// Run `f` on the current chain (empty when there is none), without a lock.
    fn read<R>(&self, f: impl FnOnce(&[(u64, Slot)]) -> R) -> R {
        let g = epoch::pin();
        let p = self.chain.load(Ordering::Acquire, &g);
        // SAFETY: `p` is null or a chain published by `publish`, never mutated after, and
        // retired only through `defer_destroy`, which frees it after every thread pinned
        // now (`g`) has unpinned: it outlives this borrow.
        let chain = unsafe { p.as_ref() };
        f(chain.map_or(&[][..], |c| &c[..]))
    }

    /// A copy of the chain (the caller holds `lock`).
    fn copy(&self) -> Chain {
        self.read(|c| c.to_vec())
    }

    /// Replace the chain by `new` (the caller holds `lock`); the old one is freed once no
    /// reader can see it.
    fn publish(&self, new: Chain) {
        let g = epoch::pin();
        let new = if new.is_empty() {
            Shared::null()
        } else {
            Owned::new(new).into_shared(&g)
        };
        let old = self.chain.swap(new, Ordering::AcqRel, &g);
        if !old.is_null() {
            // SAFETY: `old` was just unlinked (writers are serialized by `lock`), so no new
            // reader can load it; readers that already did are pinned, and the epoch
            // frees it only after they unpin.
            unsafe { g.defer_destroy(old) };
        }
    }
}

#[allow(unsafe_code)]
impl Drop for Bucket {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer can reach this bucket any more, so the
        // chain can be taken without protection.
        unsafe {
            let p = self.chain.load(Ordering::Relaxed, epoch::unprotected());
            if !p.is_null() {
                drop(p.into_owned());
            }
        }
    }
}

enum Table {
    Bucket(Box<[Bucket]>),
    Global(Mutex<HashMap<u64, Slot, InoHash>>),
    Papaya(papaya::HashMap<u64, Slot, InoHash>),
}

/// Bytes the limit assumes per inode when sizing the bucket array (two per bucket).
const SIZING_BYTES: u64 = 1024;
/// The sweep stops once the cache is below this share of its limit (in 1/8ths).
const SWEEP_TARGET_EIGHTHS: u64 = 7;

/// The inode cache.
pub struct ICache {
    table: Table,
    limit: u64,
    bytes: AtomicU64,
    count: AtomicU64,
    evictions: AtomicU64,
    sweeping: AtomicBool,
    hand: AtomicUsize,
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
                Table::Global(Mutex::new(&ICACHE_GLOBAL, HashMap::with_hasher(InoHash)))
            }
            IcachePolicy::Papaya => Table::Papaya(papaya::HashMap::with_hasher(InoHash)),
        };
        ICache {
            table,
            limit,
            bytes: AtomicU64::new(0),
            count: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            sweeping: AtomicBool::new(false),
            hand: AtomicUsize::new(0),
        }
    }

    fn bucket(buckets: &[Bucket], ino: u64) -> &Bucket {
        let i = (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (buckets.len() - 1);
        &buckets[i]
    }

    /// The entry for `ino`, read without a lock (bucket, papaya) or under the one lock.
    fn find(&self, ino: u64) -> Option<Slot> {
        match &self.table {
            Table::Bucket(b) => Self::bucket(b, ino)
                .read(|c| c.iter().find(|(k, _)| *k == ino).map(|(_, s)| s.clone())),
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
                let mut chain = bk.copy();
                let old = match chain.iter_mut().find(|(k, _)| *k == ino) {
                    Some((_, s)) if !replace(s) => return Err(s.clone()),
                    Some((_, s)) => Some(std::mem::replace(s, slot)),
                    None => {
                        chain.push((ino, slot));
                        None
                    }
                };
                bk.publish(chain);
                Ok(old)
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
                Self::take_locked(bk, ino, which)
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

    fn take_locked(bk: &Bucket, ino: u64, which: &Slot) -> bool {
        let chain = bk.copy();
        if !chain.iter().any(|(k, s)| *k == ino && s.same(which)) {
            return false;
        }
        bk.publish(chain.into_iter().filter(|(k, _)| *k != ino).collect());
        true
    }

    /// The cached inode `ino`, or the one `load` reads, inserted. Concurrent callers for
    /// one number wait for a single load.
    pub fn get<E>(
        &self,
        ino: u64,
        load: impl FnOnce() -> std::result::Result<Inode, E>,
    ) -> std::result::Result<IRef, E> {
        let (setup, slot) = loop {
            if let Some(r) = self.peek(ino) {
                return Ok(r);
            }
            let setup = Setup::new();
            let slot = Slot::New(setup.clone());
            // Another lookup or a create may have claimed the number meanwhile.
            if self.put(ino, slot.clone(), |_| false).is_ok() {
                break (setup, slot);
            }
        };
        let r = match load() {
            Ok(inode) => Ok(self.publish(ino, &slot, inode)),
            Err(e) => {
                self.take(ino, &slot);
                Err(e)
            }
        };
        setup.finish();
        if r.is_ok() {
            self.maybe_sweep();
        }
        r
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
        self.bytes.fetch_add(charge, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        IRef(a)
    }

    /// The cached inode `ino` if it is in the table (waiting for one being set up, and
    /// for one being evicted to leave).
    pub fn peek(&self, ino: u64) -> Option<IRef> {
        loop {
            match self.find(ino)? {
                Slot::Ready(i) => match try_use(&i) {
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
            let setup = Setup::new();
            let slot = Slot::New(setup.clone());
            let dead_copy = |s: &Slot| matches!(s, Slot::Ready(i) if i.is_freed());
            match self.put(ino, slot.clone(), dead_copy) {
                Ok(old) => {
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

    /// Stop counting `i` (once, whoever removes it: removal, eviction or replacement).
    fn uncharge(&self, i: &Inode) {
        let c = i.cache.charge.swap(0, Ordering::Relaxed);
        if c > 0 {
            self.bytes.fetch_sub(c, Ordering::Relaxed);
            self.count.fetch_sub(1, Ordering::Relaxed);
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
                    bk.read(|c| c.iter().for_each(|(_, s)| f(s)));
                }
            }
            Table::Global(m) => m.lock().values().for_each(f),
            Table::Papaya(m) => m.pin().values().for_each(f),
        }
    }

    /// How many inodes the cache holds, the bytes charged for them, the limit and the
    /// evictions so far.
    pub fn stats(&self) -> IcacheStats {
        IcacheStats {
            inodes: self.count.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            limit: self.limit,
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    /// Sweep if the cache is over its limit and nobody else is sweeping.
    fn maybe_sweep(&self) {
        if self.bytes.load(Ordering::Relaxed) <= self.limit
            || self.sweeping.swap(true, Ordering::Acquire)
        {
            return;
        }
        self.sweep();
        self.sweeping.store(false, Ordering::Release);
    }

    /// CLOCK: from the hand, give referenced inodes a second chance and evict the
    /// others that can go, until below 7/8 of the limit or two full turns.
    fn sweep(&self) {
        let target = self.limit / 8 * SWEEP_TARGET_EIGHTHS;
        let below = || self.bytes.load(Ordering::Relaxed) <= target;
        match &self.table {
            Table::Bucket(b) => {
                let n = b.len();
                for _ in 0..2 * n {
                    if below() {
                        break;
                    }
                    let i = self.hand.fetch_add(1, Ordering::Relaxed) % n;
                    let bk = &b[i];
                    if bk.read(|c| c.is_empty()) {
                        continue;
                    }
                    let _g = bk.lock.lock();
                    let chain = bk.copy();
                    let n = chain.len();
                    let keep: Chain = chain.into_iter().filter(|(_, s)| !self.evict(s)).collect();
                    if keep.len() != n {
                        bk.publish(keep);
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
    }

    /// Decide on one entry during a sweep: whether it is evicted (it is then marked
    /// dead and its charge dropped; the caller removes it from the table).
    fn evict(&self, s: &Slot) -> bool {
        let Slot::Ready(i) = s else { return false };
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
            self.cache.take(self.ino, &self.slot);
            self.setup.finish();
        }
    }
}
