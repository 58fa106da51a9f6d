//! Named lock classes, lock statistics and the lock-order checker.
//!
//! Every lock in lanefs belongs to a [`LockClass`]: a name, a rank and a set of counters.
//! Ranks give the lock order: a thread may block on a lock only if its rank is higher than
//! every rank the thread already holds (or equal, for a nestable class). Debug builds check this
//! on every blocking acquisition and panic naming both classes; release builds compile the
//! checker out. A try-lock cannot deadlock, so it is never checked, but what it takes is
//! recorded like any other hold.
//!
//! When statistics are on ([`set_lockstat`]) each class counts acquisitions, contended
//! acquisitions and the total and maximum time spent waiting, like `perf lock contention`,
//! and the time its locks were held exclusively (from which `lanefs bench --lockstat`
//! estimates the thread count where a lock would saturate).
//! Off, an acquisition costs one relaxed atomic load more than the bare `parking_lot` lock.
//!
//! Lock order, outermost first:
//!
//! | rank | class | protects |
//! |---:|---|---|
//! | 5 | [`RENAME`] | cross-directory renames (serialized, as in Linux) |
//! | 10 | [`INODE`] | per-inode state; nestable: ancestor directory before descendant, directory before child |
//! | 20 | [`JOURNAL_COMMIT`] | one commit or checkpoint at a time (held across its IO) |
//! | 25 | [`JOURNAL_GATE`] | waits for a locked transaction to drain or the next to open |
//! | 31 | [`ICACHE_GLOBAL`] | the whole inode cache (`icache=global`, the VFS's `inode_hash_lock`) |
//! | 32 | [`ICACHE_BUCKET`] | one inode-cache bucket (brief, never across IO) |
//! | 35 | [`STREAM_GOAL`] | the global stream goal (baseline allocator only) |
//! | 38 | [`ORPHAN`] | the orphan list and journaled superblock updates |
//! | 39 | [`IGROUP`] | one group's inode bitmap and inode counters (brief, never across IO) |
//! | 40 | [`GROUP`] | one allocation group's bitmaps and counters (one at a time) |
//! | 41 | [`RTGROUP`] | one realtime group's bitmap, summary and counters (one at a time) |
//! | 44 | [`WRITEBACK`] | one inode's write-back (one writer per file; held across its IO) |
//! | 45 | [`PAGE`] | one inode's page cache: its folio index (inserts, removals) and dirty set |
//! | 46 | [`DIRTY_FILES`] | the page cache's list of files with dirty data |
//! | 47 | [`FOLIO`] | one folio's bytes; nestable: write-back holds a run's folios in file order |
//! | 48 | [`INODE_STAGE`] | one inode's staged table bytes, sealed into its table block at commit |
//! | 50 | [`BUFFER`] | one cached metadata block's bytes |
//! | 51 | [`BUF_FROZEN`] | a block's bytes as a committing transaction left them (jbd2's frozen data) |
//! | 52 | [`CLOCK`] | one shard of the page cache's eviction list (leaf but for try-locks) |
//! | 55 | [`TX_LIST`] | a running transaction's buffer, revoke and ordered-inode lists |
//! | 60 | [`BUF_SHARD`] | one shard of the metadata buffer cache map (leaf) |
//! | 70 | [`SUPER`] | the in-memory superblock copy (leaf, rare) |
//! | 80 | [`MEM_DEVICE`] | a memory device's bytes (tests, benchmarks; leaf) |
//!
//! Guards are `!Send` (as `parking_lot`'s are without its `send_guard` feature), which the
//! checker relies on: a hold is recorded in the thread that took it. A guard passed to
//! `mem::forget` stays recorded as held.
//!
//! # Example
//!
//! ```
//! use lanefs::internals::sync::{lockstat_snapshot, set_lockstat, Mutex, BUFFER, GROUP};
//!
//! let group = Mutex::new(&GROUP, 0u32);
//! let block = Mutex::new(&BUFFER, [0u8; 16]);
//! set_lockstat(true);
//! let mut free = group.lock(); // rank 40 ...
//! let mut bytes = block.lock(); // ... then rank 50: in order
//! *free += 1;
//! bytes[0] = 1;
//! drop(bytes);
//! drop(free);
//! let stats = lockstat_snapshot();
//! assert!(stats.iter().any(|s| s.name == "group" && s.acquisitions >= 1));
//! ```

mod stat;
pub use stat::{
    format_ns, lockstat_enabled, lockstat_reset, lockstat_snapshot, lockstat_table, set_lockstat,
    LockStat,
};

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// One lane's acquisition count, alone on its cache lines (and the adjacent line x86
/// prefetches in pairs), so counting uncontended acquisitions from many threads does not
/// bounce one line between CPUs (a shared counter cost 30 % of the throughput of an
/// uncontended lookup at 2 threads).
type LaneCount = Padded<AtomicU64>;

/// The statistics counters of one class, all updated with relaxed atomics: acquisitions per
/// lane ([`my_lane`]), the rest (touched only on contention) shared.
#[derive(Debug)]
struct Counters {
    acquisitions: [LaneCount; LANES],
    /// Nanoseconds held exclusively, per lane like the acquisitions (every hold adds).
    held_ns: [LaneCount; LANES],
    contended: AtomicU64,
    wait_total_ns: AtomicU64,
    wait_max_ns: AtomicU64,
}

/// A lock class: a name, a rank for lock ordering, and statistics counters.
///
/// Classes are `static`s; every lock names its class when it is built. The alignment keeps the
/// counters of two classes off the same cache line and off the adjacent line that x86
/// prefetches in pairs.
#[repr(align(128))]
#[derive(Debug)]
pub struct LockClass {
    name: &'static str,
    rank: u8,
    nestable: bool,
    counters: Counters,
}

impl LockClass {
    /// A class named `name` at `rank` (outermost = lowest); `nestable` allows holding several
    /// locks of the class at once.
    ///
    /// # Panics
    ///
    /// If `name` is empty (at compile time, for a `static`).
    #[must_use]
    pub const fn new(name: &'static str, rank: u8, nestable: bool) -> LockClass {
        assert!(!name.is_empty(), "a lock class needs a name");
        LockClass {
            name,
            rank,
            nestable,
            counters: Counters {
                acquisitions: [const { Padded(AtomicU64::new(0)) }; LANES],
                held_ns: [const { Padded(AtomicU64::new(0)) }; LANES],
                contended: AtomicU64::new(0),
                wait_total_ns: AtomicU64::new(0),
                wait_max_ns: AtomicU64::new(0),
            },
        }
    }

    /// The class name, as printed in statistics and order violations.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The rank: a thread may block on this class only while holding lower ranks.
    pub fn rank(&self) -> u8 {
        self.rank
    }

    /// Whether a thread may hold several locks of this class at once.
    pub fn nestable(&self) -> bool {
        self.nestable
    }

    /// The current counters of this class. Fields are read one by one, so a snapshot taken
    /// while other threads lock may be off by the acquisitions in flight.
    pub fn stat(&self) -> LockStat {
        let c = &self.counters;
        LockStat {
            name: self.name,
            acquisitions: c.acquisitions.iter().map(|l| l.0.load(Relaxed)).sum(),
            held_ns: c.held_ns.iter().map(|l| l.0.load(Relaxed)).sum(),
            contended: c.contended.load(Relaxed),
            wait_total_ns: c.wait_total_ns.load(Relaxed),
            wait_max_ns: c.wait_max_ns.load(Relaxed),
        }
    }

    fn reset(&self) {
        let c = &self.counters;
        for l in c.acquisitions.iter().chain(&c.held_ns) {
            l.0.store(0, Relaxed);
        }
        c.contended.store(0, Relaxed);
        c.wait_total_ns.store(0, Relaxed);
        c.wait_max_ns.store(0, Relaxed);
    }

    fn count_acquired(&self) {
        self.counters.acquisitions[my_lane()]
            .0
            .fetch_add(1, Relaxed);
    }

    fn count_contended(&self) {
        self.counters.contended.fetch_add(1, Relaxed);
    }

    fn count_wait(&self, wait: Duration) {
        // A contended acquisition did wait: record at least 1 ns so that `contended > 0`
        // always comes with `wait_total_ns > 0`, whatever the clock's resolution.
        let ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.counters.wait_total_ns.fetch_add(ns, Relaxed);
        self.counters.wait_max_ns.fetch_max(ns, Relaxed);
    }

    /// Add the hold that began at `since` (out of line: only with statistics on).
    #[inline(never)]
    fn count_held(&self, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counters.held_ns[my_lane()].0.fetch_add(ns, Relaxed);
    }
}

/// Times one exclusive hold when statistics were on at its acquisition: adds the time to
/// the class when dropped (after the guard's lock is released, as it is the guard's last
/// field). A condition-variable wait pauses it, as the lock is not held while waiting.
///
/// One byte in the guard: 0 when not timed, else 1 + the hold's slot in this thread's
/// `TIMED` list (guards are `!Send`, so the drop runs on the thread that took the lock).
/// A wider guard (class and start time inside, 32 bytes instead of 8) cost fallocate2
/// 8 % at 1 thread with statistics off; this one costs a byte test on drop.
struct HoldTimer(u8);

thread_local! {
    /// This thread's timed holds, by slot: the class and when the hold began.
    static TIMED: std::cell::RefCell<Vec<Option<(&'static LockClass, Instant)>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl HoldTimer {
    /// A timer for a hold of `class` just taken; running only if `on`.
    #[inline]
    fn new(class: &'static LockClass, on: bool) -> HoldTimer {
        HoldTimer(if on { start_timed(class) } else { 0 })
    }

    /// The lock is released (for a wait, or for good): count the hold so far. Returns the
    /// class when the hold was timed.
    #[inline]
    fn pause(&mut self) -> Option<&'static LockClass> {
        let slot = std::mem::take(&mut self.0);
        if slot == 0 {
            None
        } else {
            stop_timed(slot)
        }
    }

    /// The lock of `class` (from [`HoldTimer::pause`]) is held again after a wait.
    fn resume(&mut self, class: Option<&'static LockClass>) {
        debug_assert_eq!(self.0, 0, "a hold timer resumed while running");
        if let Some(class) = class.filter(|_| lockstat_enabled()) {
            self.0 = start_timed(class);
        }
    }
}

impl Drop for HoldTimer {
    #[inline]
    fn drop(&mut self) {
        self.pause();
    }
}

/// Start timing a hold of `class` on this thread: its slot + 1, or 0 (not timed) when
/// the thread already times 255 holds or is exiting.
#[inline(never)]
fn start_timed(class: &'static LockClass) -> u8 {
    TIMED
        .try_with(|t| {
            let mut t = t.borrow_mut();
            let i = t.iter().position(Option::is_none).unwrap_or(t.len());
            let Ok(slot) = u8::try_from(i + 1) else {
                return 0;
            };
            if i == t.len() {
                t.push(None);
            }
            t[i] = Some((class, Instant::now()));
            slot
        })
        .unwrap_or(0)
}

/// Stop timing the hold in `slot` (1-based): add its time to its class, which it returns.
#[inline(never)]
fn stop_timed(slot: u8) -> Option<&'static LockClass> {
    TIMED
        .try_with(|t| {
            let mut t = t.borrow_mut();
            debug_assert!(
                t.get(usize::from(slot) - 1).is_some_and(Option::is_some),
                "timed hold slot {slot} is empty"
            );
            let (class, since) = t.get_mut(usize::from(slot) - 1)?.take()?;
            while t.last().is_some_and(Option::is_none) {
                t.pop();
            }
            drop(t);
            class.count_held(since);
            Some(class)
        })
        .ok()
        .flatten()
}

/// A value alone on its cache lines (and the adjacent line x86 prefetches in pairs): for
/// state that threads write often, such as per-lane lists and shared counters, so that
/// writing it does not invalidate a neighbour that other threads use.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Lanes of per-thread state (the journal's join counters, the inode cache's counters),
/// the user-space stand-in for per-CPU data.
pub const LANES: usize = 16;

/// This thread's lane (`< LANES`): threads are numbered round-robin on first use.
pub fn my_lane() -> usize {
    #[cfg(not(loom))]
    {
        use std::sync::atomic::{AtomicUsize as StdAtomic, Ordering::Relaxed};
        static NEXT: StdAtomic = StdAtomic::new(0);
        thread_local! {
            static LANE: usize = NEXT.fetch_add(1, Relaxed) % LANES;
        }
        LANE.with(|l| *l)
    }
    #[cfg(loom)]
    {
        0
    }
}

/// Cross-directory rename: serializes renames that move entries between directories, so
/// the ancestor-first order of their directory locks cannot deadlock (Linux's
/// `s_vfs_rename_mutex`). Same-directory renames and every other operation skip it.
pub static RENAME: LockClass = LockClass::new("rename", 5, false);
/// Per-inode state. Nestable: a parent directory before its child, or two directories (rename)
/// in increasing inode number.
pub static INODE: LockClass = LockClass::new("inode", 10, true);
/// Commit: one commit (or checkpoint) at a time; held across its IO. Taken by fsync, sync,
/// the commit timer and a handle start that finds the journal full.
pub static JOURNAL_COMMIT: LockClass = LockClass::new("journal_commit", 20, false);
/// The gate where handle starts wait while a transaction is locked for commit, and where
/// commit waits for the last handle of its transaction to stop. Held only around a wait.
pub static JOURNAL_GATE: LockClass = LockClass::new("journal_gate", 25, false);
/// One inode-cache hash bucket. Held briefly, never while doing IO. Ranked after the
/// journal because a new inode is inserted inside the handle that allocated it.
pub static ICACHE_BUCKET: LockClass = LockClass::new("icache_bucket", 32, false);
/// The one global stream goal of the baseline allocator (`mb_stream_goal=global`).
pub static STREAM_GOAL: LockClass = LockClass::new("stream_goal", 35, false);
/// The orphan list (unlinked-but-open inodes) and journaled superblock updates.
pub static ORPHAN: LockClass = LockClass::new("orphan", 38, false);
/// One group's inode bitmap and inode counters (inode allocation, seed 001). Held
/// briefly, never across IO; ranked before `group` because a commit's seal hands the
/// inode counters to the group's descriptor under both.
pub static IGROUP: LockClass = LockClass::new("igroup", 39, false);
/// The whole inode cache's one lock (`icache=global`, the VFS's `inode_hash_lock`).
pub static ICACHE_GLOBAL: LockClass = LockClass::new("icache_global", 31, false);
/// One allocation group's bitmaps and counters. At most one group lock held at a time, never
/// across IO.
pub static GROUP: LockClass = LockClass::new("group", 40, false);
/// One realtime group's bitmap, summary and counters (one at a time; seed 003).
pub static RTGROUP: LockClass = LockClass::new("rtgroup", 41, false);
/// One inode's write-back: one writer of a file's dirty folios at a time, held across its
/// IO (the kernel's `I_SYNC`).
pub static WRITEBACK: LockClass = LockClass::new("writeback", 44, false);
/// One inode's page cache: inserts into and removals from its folio index, and its set of
/// dirty folios (the kernel's `xa_lock` of the mapping). Lookups take no lock.
pub static PAGE: LockClass = LockClass::new("page", 45, false);
/// The page cache's list of files with dirty data (the kernel's `b_dirty`): a file joins
/// it when it first gets dirty, and the background flusher and the commit timer take it.
pub static DIRTY_FILES: LockClass = LockClass::new("dirty_files", 46, false);
/// One folio's bytes (the kernel's folio lock). Nestable: write-back holds the folios of
/// one device write at once, taken in file order.
pub static FOLIO: LockClass = LockClass::new("folio", 47, true);
/// One shard of the page cache's CLOCK list: inserts, and the sweep that evicts (it only
/// try-locks the folios and mappings it visits).
pub static CLOCK: LockClass = LockClass::new("clock", 52, false);
/// One inode's staged on-disk bytes (`inode::InodeStage`): a store copies the inode in,
/// the commit copies it into the inode's table block. Taken under the inode's lock by a
/// store and without it by the commit; never held across IO.
pub static INODE_STAGE: LockClass = LockClass::new("inode_stage", 48, false);
/// The bytes of one cached metadata block.
pub static BUFFER: LockClass = LockClass::new("buffer", 50, false);
/// The copy of a block's bytes that its first writer after a commit's pause keeps for the
/// commit (`Buf::write`). Taken under the block's [`BUFFER`] lock. Leaf lock.
pub static BUF_FROZEN: LockClass = LockClass::new("buf_frozen", 51, false);
/// A running transaction's lists (buffers, revokes, ordered inodes), sharded. Leaf-like.
pub static TX_LIST: LockClass = LockClass::new("tx_list", 55, false);
/// One shard of the metadata buffer cache's map. Leaf lock.
pub static BUF_SHARD: LockClass = LockClass::new("buf_shard", 60, false);
/// The in-memory copy of the superblock. Leaf lock, taken rarely.
pub static SUPER: LockClass = LockClass::new("super", 70, false);
/// The bytes of a memory device (tests and benchmarks). Leaf lock.
pub static MEM_DEVICE: LockClass = LockClass::new("mem_device", 80, false);

static ALL_CLASSES: [&LockClass; 23] = [
    &RENAME,
    &INODE,
    &JOURNAL_COMMIT,
    &JOURNAL_GATE,
    &ICACHE_GLOBAL,
    &ICACHE_BUCKET,
    &STREAM_GOAL,
    &ORPHAN,
    &IGROUP,
    &GROUP,
    &RTGROUP,
    &WRITEBACK,
    &PAGE,
    &DIRTY_FILES,
    &FOLIO,
    &INODE_STAGE,
    &BUFFER,
    &BUF_FROZEN,
    &CLOCK,
    &TX_LIST,
    &BUF_SHARD,
    &SUPER,
    &MEM_DEVICE,
];

/// Every class of the engine, in lock order (increasing rank).
#[must_use]
pub fn all_classes() -> &'static [&'static LockClass] {
    // The ranks are the order: distinct, and the list sorted by them.
    debug_assert!(
        ALL_CLASSES.windows(2).all(|w| w[0].rank < w[1].rank),
        "lock classes out of rank order"
    );
    &ALL_CLASSES
}

/// Whether this thread may block on a lock of `class` now: it holds no lock ranked above
/// it (nor one of its rank, unless the class is nestable). Debug builds ask the lock-order
/// checker; release builds, which have none, always answer true. For assertions where a
/// function blocks on `class` only on some paths (a handle start that commits), so that
/// an order violation shows on every call, not only on the rare path.
#[must_use]
pub fn may_block_on(class: &'static LockClass) -> bool {
    order::may_block(class)
}

/// Take a lock through `lock`, first trying `try_lock` when statistics are on so a contended
/// acquisition and its wait can be counted. Returns whether statistics were on, for the
/// hold's timer.
#[inline]
fn acquire<G>(
    class: &LockClass,
    try_lock: impl FnOnce() -> Option<G>,
    lock: impl FnOnce() -> G,
) -> (G, bool) {
    if !lockstat_enabled() {
        return (lock(), false);
    }
    if let Some(guard) = try_lock() {
        class.count_acquired();
        return (guard, true);
    }
    // Counted before blocking, so a test can see a waiter is (about to be) parked.
    class.count_contended();
    let start = Instant::now();
    let guard = lock();
    class.count_wait(start.elapsed());
    class.count_acquired();
    (guard, true)
}

/// Count a successful try-lock when statistics are on; returns whether they are.
#[inline]
fn count_try(class: &LockClass) -> bool {
    let on = lockstat_enabled();
    if on {
        class.count_acquired();
    }
    on
}

/// The debug-build lock-order checker: a per-thread list of the locks held.
#[cfg(debug_assertions)]
mod order;

/// Release builds: the checker compiles to nothing.
#[cfg(not(debug_assertions))]
mod order {
    use super::LockClass;

    #[inline]
    pub(super) fn check(_class: &'static LockClass) {}

    #[inline]
    pub(super) fn check_wait(_hold: &Hold) {}

    #[inline]
    pub(super) fn may_block(_class: &'static LockClass) -> bool {
        true
    }

    pub(super) struct Hold;

    impl Hold {
        #[inline]
        pub(super) fn push(_class: &'static LockClass) -> Hold {
            Hold
        }
    }
}

/// The locks and condition variable under [`Mutex`], [`RwLock`] and [`Condvar`]:
/// `parking_lot`'s.
#[cfg(not(shuttle))]
mod raw {
    pub(super) use parking_lot::{
        Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    };
}

/// The atomics of the structures the shuttle models check (the page cache's folio index,
/// folio state and seqcount): std's, or under `cfg(shuttle)` shuttle's, so that its
/// scheduler switches tasks at every access.
pub mod atomic {
    #[cfg(shuttle)]
    pub use shuttle::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
    #[cfg(not(shuttle))]
    pub use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
}

#[cfg(shuttle)]
#[path = "raw_shuttle.rs"]
mod raw;

/// A mutual-exclusion lock of a named class (a `parking_lot::Mutex` underneath; shuttle's
/// under `cfg(shuttle)`).
pub struct Mutex<T> {
    class: &'static LockClass,
    inner: raw::Mutex<T>,
}

/// Exclusive access to a [`Mutex`]'s value; unlocks on drop.
pub struct MutexGuard<'a, T> {
    inner: raw::MutexGuard<'a, T>,
    hold: order::Hold,
    timer: HoldTimer,
}

impl<T> Mutex<T> {
    /// A new unlocked mutex of `class` holding `v`.
    pub const fn new(class: &'static LockClass, v: T) -> Mutex<T> {
        Mutex {
            class,
            inner: raw::Mutex::new(v),
        }
    }

    /// Block until the lock is ours. Debug builds panic on a lock-order violation.
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        order::check(self.class);
        let (inner, on) = acquire(self.class, || self.inner.try_lock(), || self.inner.lock());
        MutexGuard {
            inner,
            hold: order::Hold::push(self.class),
            timer: HoldTimer::new(self.class, on),
        }
    }

    /// Take the lock if it is free, without blocking (and without an order check).
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let inner = self.inner.try_lock()?;
        let on = count_try(self.class);
        Some(MutexGuard {
            inner,
            hold: order::Hold::push(self.class),
            timer: HoldTimer::new(self.class, on),
        })
    }

    /// Whether some thread holds the lock now (a hint: it may change at once).
    pub fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    /// The value, through exclusive access to the mutex itself: no locking.
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// The value, consuming the mutex.
    pub fn into_inner(self) -> T {
        self.inner.into_inner()
    }

    /// The class of this lock.
    pub fn class(&self) -> &'static LockClass {
        self.class
    }
}

impl<T: fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("class", &self.class.name)
            .field("inner", &self.inner)
            .finish()
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A reader-writer lock of a named class (a `parking_lot::RwLock` underneath; shuttle's
/// under `cfg(shuttle)`).
pub struct RwLock<T> {
    class: &'static LockClass,
    inner: raw::RwLock<T>,
}

/// Shared access to an [`RwLock`]'s value; releases on drop.
pub struct RwLockReadGuard<'a, T> {
    inner: raw::RwLockReadGuard<'a, T>,
    _hold: order::Hold,
}

/// Exclusive access to an [`RwLock`]'s value; releases on drop.
pub struct RwLockWriteGuard<'a, T> {
    inner: raw::RwLockWriteGuard<'a, T>,
    _hold: order::Hold,
    _timer: HoldTimer,
}

impl<T> RwLock<T> {
    /// A new unlocked reader-writer lock of `class` holding `v`.
    pub const fn new(class: &'static LockClass, v: T) -> RwLock<T> {
        RwLock {
            class,
            inner: raw::RwLock::new(v),
        }
    }

    /// Block until shared access is ours. Debug builds panic on a lock-order violation,
    /// including a second read of a non-nestable class (it can deadlock behind a writer).
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        order::check(self.class);
        // Shared holds are not timed: readers do not exclude each other.
        let (inner, _) = acquire(self.class, || self.inner.try_read(), || self.inner.read());
        RwLockReadGuard {
            inner,
            _hold: order::Hold::push(self.class),
        }
    }

    /// Block until exclusive access is ours. Debug builds panic on a lock-order violation.
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        order::check(self.class);
        let (inner, on) = acquire(self.class, || self.inner.try_write(), || self.inner.write());
        RwLockWriteGuard {
            inner,
            _hold: order::Hold::push(self.class),
            _timer: HoldTimer::new(self.class, on),
        }
    }

    /// Take exclusive access if it is free, without blocking (and without an order check).
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        let inner = self.inner.try_write()?;
        let on = count_try(self.class);
        Some(RwLockWriteGuard {
            inner,
            _hold: order::Hold::push(self.class),
            _timer: HoldTimer::new(self.class, on),
        })
    }

    /// Take shared access if no writer holds or waits, without blocking (and without an
    /// order check).
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        let inner = self.inner.try_read()?;
        count_try(self.class);
        Some(RwLockReadGuard {
            inner,
            _hold: order::Hold::push(self.class),
        })
    }

    /// The value, through exclusive access to the lock itself: no locking.
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// The value, consuming the lock.
    pub fn into_inner(self) -> T {
        self.inner.into_inner()
    }

    /// The class of this lock.
    pub fn class(&self) -> &'static LockClass {
        self.class
    }
}

impl<T: fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("class", &self.class.name)
            .field("inner", &self.inner)
            .finish()
    }
}

impl<T> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: fmt::Debug> fmt::Debug for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Debug> fmt::Debug for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A condition variable for a [`Mutex`] (a `parking_lot::Condvar` underneath; shuttle's
/// under `cfg(shuttle)`).
///
/// The re-acquisition after a wait is not counted in the statistics. Debug builds panic if the
/// waiting thread holds a lock ranked above the mutex, which it would keep while re-taking it.
#[derive(Debug, Default)]
pub struct Condvar {
    inner: raw::Condvar,
}

impl Condvar {
    /// A new condition variable.
    #[must_use]
    pub const fn new() -> Condvar {
        Condvar {
            inner: raw::Condvar::new(),
        }
    }

    /// Release the mutex, sleep until notified (or spuriously), and take the mutex again.
    pub fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        order::check_wait(&guard.hold);
        let timed = guard.timer.pause();
        self.inner.wait(&mut guard.inner);
        guard.timer.resume(timed);
    }

    /// As [`Condvar::wait`], but give up after `timeout`; true if it timed out.
    pub fn wait_for<T>(&self, guard: &mut MutexGuard<'_, T>, timeout: Duration) -> bool {
        order::check_wait(&guard.hold);
        let timed = guard.timer.pause();
        let timed_out = self.inner.wait_for(&mut guard.inner, timeout).timed_out();
        guard.timer.resume(timed);
        timed_out
    }

    /// Wake one waiter; true if there was one.
    pub fn notify_one(&self) -> bool {
        self.inner.notify_one()
    }

    /// Wake every waiter; returns how many there were.
    pub fn notify_all(&self) -> usize {
        self.inner.notify_all()
    }
}

#[cfg(test)]
mod tests;
