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
//! acquisitions and the total and maximum time spent waiting, like `perf lock contention`.
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

use std::fmt::{self, Write as _};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Global switch for lock statistics, read with one relaxed load per acquisition.
static LOCKSTAT: AtomicBool = AtomicBool::new(false);

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
            contended: c.contended.load(Relaxed),
            wait_total_ns: c.wait_total_ns.load(Relaxed),
            wait_max_ns: c.wait_max_ns.load(Relaxed),
        }
    }

    fn reset(&self) {
        let c = &self.counters;
        for l in &c.acquisitions {
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
    &ALL_CLASSES
}

/// Turn lock statistics on or off for every class.
pub fn set_lockstat(on: bool) {
    LOCKSTAT.store(on, Relaxed);
}

/// Whether lock statistics are on.
pub fn lockstat_enabled() -> bool {
    LOCKSTAT.load(Relaxed)
}

/// Zero the counters of every class in [`all_classes`].
pub fn lockstat_reset() {
    for class in all_classes() {
        class.reset();
    }
}

/// The statistics of one lock class at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStat {
    /// Class name.
    pub name: &'static str,
    /// Successful acquisitions, contended or not (failed try-locks are not counted).
    pub acquisitions: u64,
    /// Acquisitions that found the lock held and had to wait.
    pub contended: u64,
    /// Total time spent waiting, in nanoseconds.
    pub wait_total_ns: u64,
    /// Longest single wait, in nanoseconds.
    pub wait_max_ns: u64,
}

/// The statistics of every class in [`all_classes`], in the same order.
#[must_use]
pub fn lockstat_snapshot() -> Vec<LockStat> {
    all_classes().iter().map(|class| class.stat()).collect()
}

/// A plain-text table of `stats` with aligned columns, most total wait first.
///
/// ```
/// use lanefs::internals::sync::{lockstat_snapshot, lockstat_table};
///
/// let table = lockstat_table(&lockstat_snapshot());
/// assert!(table.starts_with("class"));
/// assert!(table.contains("journal_commit"));
/// ```
pub fn lockstat_table(stats: &[LockStat]) -> String {
    let mut sorted: Vec<&LockStat> = stats.iter().collect();
    sorted.sort_by(|a, b| {
        (b.wait_total_ns, b.contended, b.acquisitions)
            .cmp(&(a.wait_total_ns, a.contended, a.acquisitions))
            .then(a.name.cmp(b.name))
    });
    let header = [
        "class",
        "acquired",
        "contended",
        "total wait",
        "max wait",
        "avg wait",
    ];
    let mut rows = vec![header.map(String::from)];
    rows.extend(sorted.into_iter().map(table_row));
    let mut widths = [0usize; 6];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    rows.iter().map(|row| table_line(row, &widths)).collect()
}

fn table_row(s: &LockStat) -> [String; 6] {
    let avg = match s.wait_total_ns.checked_div(s.contended) {
        Some(avg) => format_ns(avg),
        None => "-".to_string(),
    };
    [
        s.name.to_string(),
        s.acquisitions.to_string(),
        s.contended.to_string(),
        format_ns(s.wait_total_ns),
        format_ns(s.wait_max_ns),
        avg,
    ]
}

/// One table line: the name column left-aligned, the numbers right-aligned.
fn table_line(row: &[String; 6], widths: &[usize; 6]) -> String {
    let mut line = format!("{:<w$}", row[0], w = widths[0]);
    for (cell, width) in row.iter().zip(widths).skip(1) {
        // Writing to a String cannot fail.
        let _ = write!(line, "  {cell:>width$}");
    }
    line.push('\n');
    line
}

/// A duration in nanoseconds with a unit a reader takes in at a glance.
pub fn format_ns(ns: u64) -> String {
    // Precision loss above 2^53 ns (104 days) does not matter for display.
    let f = ns as f64;
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.2} us", f / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} ms", f / 1e6),
        _ => format!("{:.2} s", f / 1e9),
    }
}

/// Take a lock through `lock`, first trying `try_lock` when statistics are on so a contended
/// acquisition and its wait can be counted.
#[inline]
fn acquire<G>(
    class: &LockClass,
    try_lock: impl FnOnce() -> Option<G>,
    lock: impl FnOnce() -> G,
) -> G {
    if !lockstat_enabled() {
        return lock();
    }
    if let Some(guard) = try_lock() {
        class.count_acquired();
        return guard;
    }
    // Counted before blocking, so a test can see a waiter is (about to be) parked.
    class.count_contended();
    let start = Instant::now();
    let guard = lock();
    class.count_wait(start.elapsed());
    class.count_acquired();
    guard
}

/// Count a successful try-lock when statistics are on.
#[inline]
fn count_try(class: &LockClass) {
    if lockstat_enabled() {
        class.count_acquired();
    }
}

/// The debug-build lock-order checker: a per-thread list of the locks held.
#[cfg(debug_assertions)]
mod order {
    use super::LockClass;
    use std::cell::{Cell, RefCell};
    use std::panic::Location;

    /// Most locks one thread may hold at once; reaching it means guards are being leaked.
    const MAX_HELD: usize = 64;

    /// One lock held by this thread.
    struct Held {
        class: &'static LockClass,
        id: u64,
        at: &'static Location<'static>,
    }

    // Under `cfg(shuttle)` every shuttle task runs on the one test thread: the held list
    // must be the task's (shuttle's thread-locals are per task), not the OS thread's.
    #[cfg(shuttle)]
    use shuttle::thread_local;

    thread_local! {
        static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
        static NEXT_ID: Cell<u64> = const { Cell::new(0) };
    }

    /// Panic if blocking on a lock of `class` now breaks the lock order.
    #[track_caller]
    pub(super) fn check(class: &'static LockClass) {
        let message = HELD.with(|held| violation(&held.borrow(), class));
        if let Some(message) = message {
            panic!("{message}");
        }
    }

    /// Why taking `class` while holding `held` breaks the order, if it does.
    fn violation(held: &[Held], class: &LockClass) -> Option<String> {
        let top = held.iter().max_by_key(|h| h.class.rank())?;
        let (top_rank, rank) = (top.class.rank(), class.rank());
        if top_rank < rank || (top_rank == rank && class.nestable()) {
            return None;
        }
        let why = if top_rank == rank {
            ", and the class is not nestable"
        } else {
            ""
        };
        Some(format!(
            "lock order violation: taking `{}` (rank {}) while holding `{}` (rank {}, taken at \
             {}){}",
            class.name(),
            rank,
            top.class.name(),
            top_rank,
            top.at,
            why
        ))
    }

    /// Panic if this thread holds a lock ranked above `class`, which a condition-variable wait
    /// would hold while re-taking the lock of `class`.
    pub(super) fn check_wait(hold: &Hold) {
        let message = HELD.with(|held| {
            let list = held.borrow();
            let above = list.iter().find(|h| h.class.rank() > hold.class.rank())?;
            Some(format!(
                "lock order violation: condvar wait on `{}` (rank {}) while holding `{}` \
                 (rank {}, taken at {})",
                hold.class.name(),
                hold.class.rank(),
                above.class.name(),
                above.class.rank(),
                above.at
            ))
        });
        if let Some(message) = message {
            panic!("{message}");
        }
    }

    /// The record that this thread holds one lock; removed from the list on drop, in any
    /// order.
    pub(super) struct Hold {
        class: &'static LockClass,
        id: u64,
    }

    impl Hold {
        /// Record that this thread now holds a lock of `class`, taken at the caller.
        #[track_caller]
        pub(super) fn push(class: &'static LockClass) -> Hold {
            let at = Location::caller();
            let id = NEXT_ID.with(|next| {
                let id = next.get();
                next.set(id.wrapping_add(1));
                id
            });
            HELD.with(|held| {
                let mut held = held.borrow_mut();
                assert!(
                    held.len() < MAX_HELD,
                    "a thread holds {MAX_HELD} locks: leaked guards?"
                );
                held.push(Held { class, id, at });
            });
            Hold { class, id }
        }
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            // At thread exit the list may already be gone; then there is nothing to remove.
            let _ = HELD.try_with(|held| {
                let mut held = held.borrow_mut();
                let pos = held.iter().rposition(|h| h.id == self.id);
                debug_assert!(
                    pos.is_some() || std::thread::panicking(),
                    "hold not recorded"
                );
                if let Some(pos) = pos {
                    held.remove(pos);
                }
            });
        }
    }

    /// The ranks this thread holds, oldest first.
    #[cfg(test)]
    pub(super) fn held_ranks() -> Vec<u8> {
        HELD.with(|held| held.borrow().iter().map(|h| h.class.rank()).collect())
    }
}

/// Release builds: the checker compiles to nothing.
#[cfg(not(debug_assertions))]
mod order {
    use super::LockClass;

    #[inline]
    pub(super) fn check(_class: &'static LockClass) {}

    #[inline]
    pub(super) fn check_wait(_hold: &Hold) {}

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

/// Under `cfg(shuttle)` (the shuttle models of the inode cache and the page cache,
/// `tests/shuttle_icache.rs` and `tests/shuttle_pagecache.rs`, run with
/// `RUSTFLAGS="--cfg shuttle"`), shuttle's mutex, reader-writer lock and condition variable
/// behind `parking_lot`'s interface, so that shuttle's scheduler sees every acquisition,
/// release and wait as a switch point and reports a deadlock. Locks of such a build work
/// only inside a shuttle test.
#[cfg(shuttle)]
mod raw {
    use std::fmt;
    use std::ops::{Deref, DerefMut};
    use std::sync::{PoisonError, TryLockError};
    use std::time::Duration;

    /// shuttle's mutex; poisoning is ignored, as `parking_lot` has none.
    pub(super) struct Mutex<T>(shuttle::sync::Mutex<T>);

    /// shuttle's guard, in an `Option` so that a condition-variable wait, which takes the
    /// guard by value, can take it out and put it back behind a `&mut`.
    pub(super) struct MutexGuard<'a, T>(Option<shuttle::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(super) const fn new(v: T) -> Mutex<T> {
            Mutex(shuttle::sync::Mutex::new(v))
        }

        pub(super) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)))
        }

        pub(super) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            match self.0.try_lock() {
                Ok(g) => Some(MutexGuard(Some(g))),
                Err(TryLockError::Poisoned(e)) => Some(MutexGuard(Some(e.into_inner()))),
                Err(TryLockError::WouldBlock) => None,
            }
        }

        /// shuttle's mutex cannot say; a try-lock (a switch point itself) answers.
        pub(super) fn is_locked(&self) -> bool {
            self.try_lock().is_none()
        }

        pub(super) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
        }

        pub(super) fn into_inner(self) -> T {
            self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl<T: fmt::Debug> fmt::Debug for Mutex<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            fmt::Debug::fmt(&self.0, f)
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_deref().expect("guard taken by a condvar wait")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0
                .as_deref_mut()
                .expect("guard taken by a condvar wait")
        }
    }

    /// shuttle's reader-writer lock; poisoning is ignored, as `parking_lot` has none.
    pub(super) struct RwLock<T>(shuttle::sync::RwLock<T>);
    pub(super) type RwLockReadGuard<'a, T> = shuttle::sync::RwLockReadGuard<'a, T>;
    pub(super) type RwLockWriteGuard<'a, T> = shuttle::sync::RwLockWriteGuard<'a, T>;

    impl<T> RwLock<T> {
        pub(super) const fn new(v: T) -> RwLock<T> {
            RwLock(shuttle::sync::RwLock::new(v))
        }

        pub(super) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }

        pub(super) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }

        pub(super) fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
            match self.0.try_read() {
                Ok(g) => Some(g),
                Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            }
        }

        pub(super) fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
            match self.0.try_write() {
                Ok(g) => Some(g),
                Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            }
        }

        pub(super) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
        }

        pub(super) fn into_inner(self) -> T {
            self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl<T: fmt::Debug> fmt::Debug for RwLock<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            fmt::Debug::fmt(&self.0, f)
        }
    }

    /// shuttle's condition variable. Its timed wait never times out, and it does not say
    /// how many waiters a notification woke: `notify_one` answers false, `notify_all` 0.
    #[derive(Debug, Default)]
    pub(super) struct Condvar(shuttle::sync::Condvar);

    impl Condvar {
        pub(super) const fn new() -> Condvar {
            Condvar(shuttle::sync::Condvar::new())
        }

        pub(super) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let g = guard.0.take().expect("guard taken by a condvar wait");
            guard.0 = Some(self.0.wait(g).unwrap_or_else(PoisonError::into_inner));
        }

        pub(super) fn wait_for<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            timeout: Duration,
        ) -> shuttle::sync::WaitTimeoutResult {
            let g = guard.0.take().expect("guard taken by a condvar wait");
            let (g, timed_out) = self
                .0
                .wait_timeout(g, timeout)
                .unwrap_or_else(PoisonError::into_inner);
            guard.0 = Some(g);
            timed_out
        }

        pub(super) fn notify_one(&self) -> bool {
            self.0.notify_one();
            false
        }

        pub(super) fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }
    }
}

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
        let inner = acquire(self.class, || self.inner.try_lock(), || self.inner.lock());
        MutexGuard {
            inner,
            hold: order::Hold::push(self.class),
        }
    }

    /// Take the lock if it is free, without blocking (and without an order check).
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let inner = self.inner.try_lock()?;
        count_try(self.class);
        Some(MutexGuard {
            inner,
            hold: order::Hold::push(self.class),
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
        let inner = acquire(self.class, || self.inner.try_read(), || self.inner.read());
        RwLockReadGuard {
            inner,
            _hold: order::Hold::push(self.class),
        }
    }

    /// Block until exclusive access is ours. Debug builds panic on a lock-order violation.
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        order::check(self.class);
        let inner = acquire(self.class, || self.inner.try_write(), || self.inner.write());
        RwLockWriteGuard {
            inner,
            _hold: order::Hold::push(self.class),
        }
    }

    /// Take exclusive access if it is free, without blocking (and without an order check).
    #[cfg_attr(debug_assertions, track_caller)]
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        let inner = self.inner.try_write()?;
        count_try(self.class);
        Some(RwLockWriteGuard {
            inner,
            _hold: order::Hold::push(self.class),
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
        self.inner.wait(&mut guard.inner);
    }

    /// As [`Condvar::wait`], but give up after `timeout`; true if it timed out.
    pub fn wait_for<T>(&self, guard: &mut MutexGuard<'_, T>, timeout: Duration) -> bool {
        order::check_wait(&guard.hold);
        self.inner.wait_for(&mut guard.inner, timeout).timed_out()
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
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    // Tests use classes of their own, so counters never mix between tests running in
    // parallel; the global on/off flag is shared, so tests that depend on it take FLAG first.
    static FLAG: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn lockstat(on: bool) -> std::sync::MutexGuard<'static, ()> {
        let guard = FLAG
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set_lockstat(on);
        guard
    }

    /// Wait (bounded) until a thread has counted itself contended on `class`.
    fn wait_contended(class: &LockClass) {
        for _ in 0..10_000 {
            if class.stat().contended > 0 {
                return;
            }
            thread::sleep(Duration::from_millis(1));
        }
        panic!("no waiter showed up on `{}`", class.name());
    }

    #[test]
    fn classes_are_in_lock_order() {
        // Goal: the declared order is the lock order, and names are unique.
        let classes = all_classes();
        assert_eq!(classes.len(), 23);
        for pair in classes.windows(2) {
            assert!(
                pair[0].rank() < pair[1].rank(),
                "{} before {}",
                pair[0].name(),
                pair[1].name()
            );
        }
        let snapshot = lockstat_snapshot();
        let names: Vec<_> = snapshot.iter().map(|s| s.name).collect();
        let expected = [
            "rename",
            "inode",
            "journal_commit",
            "journal_gate",
            "icache_global",
            "icache_bucket",
            "stream_goal",
            "orphan",
            "igroup",
            "group",
        ];
        assert_eq!(&names[..10], &expected);
        assert_eq!(
            &names[10..],
            &[
                "rtgroup",
                "writeback",
                "page",
                "dirty_files",
                "folio",
                "inode_stage",
                "buffer",
                "buf_frozen",
                "clock",
                "tx_list",
                "buf_shard",
                "super",
                "mem_device"
            ]
        );
        assert!(INODE.nestable() && !GROUP.nestable());
    }

    #[test]
    fn counters_count_acquisitions() {
        // Goal: every successful acquisition, of any kind, counts once; none is contended.
        static T: LockClass = LockClass::new("t_count", 10, false);
        let _flag = lockstat(true);
        let m = Mutex::new(&T, 0u32);
        for _ in 0..3 {
            *m.lock() += 1;
        }
        assert!(m.try_lock().is_some());
        let rw = RwLock::new(&T, 0u32);
        *rw.write() += 1;
        assert_eq!(*rw.read(), 1);
        assert!(rw.try_read().is_some() && rw.try_write().is_some());
        let s = T.stat();
        assert_eq!(
            (s.acquisitions, s.contended, s.wait_total_ns, s.wait_max_ns),
            (8, 0, 0, 0)
        );
    }

    #[test]
    fn failed_try_lock_is_not_counted() {
        static T: LockClass = LockClass::new("t_try_fail", 10, false);
        let _flag = lockstat(true);
        let m = Mutex::new(&T, ());
        let held = m.lock();
        assert!(m.is_locked());
        thread::scope(|s| s.spawn(|| assert!(m.try_lock().is_none())).join().unwrap());
        drop(held);
        assert_eq!((T.stat().acquisitions, T.stat().contended), (1, 0));
    }

    #[test]
    fn contended_mutex_counts_wait() {
        // Goal: a real wait between two threads is one contended acquisition with a wait.
        // Method: hold the lock until the other thread has counted itself contended.
        static T: LockClass = LockClass::new("t_contended", 10, false);
        let _flag = lockstat(true);
        let m = Arc::new(Mutex::new(&T, 0u32));
        let guard = m.lock();
        let m2 = Arc::clone(&m);
        let waiter = thread::spawn(move || *m2.lock() += 1);
        wait_contended(&T);
        thread::sleep(Duration::from_millis(5));
        drop(guard);
        waiter.join().unwrap();
        let s = T.stat();
        assert_eq!((s.acquisitions, s.contended), (2, 1));
        assert!(s.wait_total_ns > 0);
        assert_eq!(s.wait_max_ns, s.wait_total_ns);
        assert_eq!(*m.lock(), 1);
    }

    #[test]
    fn contended_rwlock_read_counts_wait() {
        static T: LockClass = LockClass::new("t_rw_contended", 10, false);
        let _flag = lockstat(true);
        let rw = RwLock::new(&T, 7u32);
        let writer = rw.write();
        thread::scope(|s| {
            let reader = s.spawn(|| *rw.read());
            wait_contended(&T);
            drop(writer);
            assert_eq!(reader.join().unwrap(), 7);
        });
        let s = T.stat();
        assert_eq!((s.acquisitions, s.contended), (2, 1));
        assert!(s.wait_max_ns > 0);
    }

    #[test]
    fn lockstat_off_leaves_counters_untouched() {
        static T: LockClass = LockClass::new("t_off", 10, false);
        let _flag = lockstat(false);
        let m = Mutex::new(&T, ());
        drop(m.lock());
        drop(m.try_lock());
        let rw = RwLock::new(&T, ());
        drop(rw.read());
        drop(rw.write());
        let zero = LockStat {
            name: "t_off",
            acquisitions: 0,
            contended: 0,
            wait_total_ns: 0,
            wait_max_ns: 0,
        };
        assert_eq!(T.stat(), zero);
    }

    #[test]
    fn reset_zeroes_engine_classes() {
        let _flag = lockstat(true);
        let m = Mutex::new(&SUPER, ());
        drop(m.lock());
        assert!(SUPER.stat().acquisitions >= 1);
        lockstat_reset();
        set_lockstat(false);
        assert_eq!(SUPER.stat().acquisitions, 0);
    }

    #[test]
    fn table_names_classes_sorted_by_total_wait() {
        let stat = |name, contended, wait_total_ns| LockStat {
            name,
            acquisitions: 100,
            contended,
            wait_total_ns,
            wait_max_ns: wait_total_ns / 2,
        };
        let table = lockstat_table(&[stat("buffer", 0, 0), stat("group", 4, 3_000_000)]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("class"));
        assert!(lines[1].starts_with("group") && lines[1].contains("3.00 ms"));
        assert!(lines[1].contains("750.00 us"), "average wait: {table}");
        assert!(lines[2].starts_with("buffer") && lines[2].ends_with('-'));
        assert!(
            lines.iter().all(|l| l.len() == lines[0].len()),
            "aligned:\n{table}"
        );
        let all = lockstat_table(&lockstat_snapshot());
        assert!(all_classes().iter().all(|c| all.contains(c.name())));
    }

    #[test]
    fn format_ns_units() {
        assert_eq!(format_ns(999), "999 ns");
        assert_eq!(format_ns(1_500), "1.50 us");
        assert_eq!(format_ns(2_000_000_000), "2.00 s");
    }

    #[test]
    fn locks_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Mutex<Vec<u8>>>();
        send_sync::<RwLock<Vec<u8>>>();
        send_sync::<Condvar>();
        send_sync::<LockClass>();
    }

    #[test]
    fn condvar_wakes_waiter() {
        static T: LockClass = LockClass::new("t_condvar", 10, false);
        let pair = (Mutex::new(&T, false), Condvar::new());
        thread::scope(|s| {
            s.spawn(|| {
                *pair.0.lock() = true;
                pair.1.notify_all();
            });
            let mut ready = pair.0.lock();
            for _ in 0..1_000 {
                if *ready {
                    break;
                }
                pair.1.wait_for(&mut ready, Duration::from_millis(10));
            }
            assert!(*ready);
        });
    }

    #[test]
    fn in_order_and_get_mut() {
        static LOW: LockClass = LockClass::new("t_in_low", 10, false);
        static HIGH: LockClass = LockClass::new("t_in_high", 20, false);
        let mut low = Mutex::new(&LOW, 1);
        let high = RwLock::new(&HIGH, 2);
        {
            let a = low.lock();
            let b = high.read();
            assert_eq!(*a + *b, 3);
        }
        *low.get_mut() += 1;
        assert_eq!(low.into_inner() + high.into_inner(), 4);
    }

    #[cfg(debug_assertions)]
    mod order_checker {
        use super::*;

        static LOW: LockClass = LockClass::new("t_low", 10, false);
        static MID: LockClass = LockClass::new("t_mid", 20, false);
        static HIGH: LockClass = LockClass::new("t_high", 30, false);
        static NEST: LockClass = LockClass::new("t_nest", 15, true);

        #[test]
        #[should_panic(expected = "lock order violation: taking `t_low` (rank 10) while \
                                   holding `t_high` (rank 30")]
        fn taking_lower_rank_panics() {
            let low = Mutex::new(&LOW, ());
            let high = Mutex::new(&HIGH, ());
            let _h = high.lock();
            let _l = low.lock();
        }

        #[test]
        #[should_panic(expected = "taking `t_mid` (rank 20) while holding `t_mid` (rank 20")]
        fn same_rank_not_nestable_panics() {
            let a = RwLock::new(&MID, ());
            let b = RwLock::new(&MID, ());
            let _a = a.read();
            let _b = b.write();
        }

        #[test]
        fn nestable_same_rank_allowed() {
            let parent = Mutex::new(&NEST, ());
            let child = RwLock::new(&NEST, ());
            let _p = parent.lock();
            let _c = child.write();
            assert_eq!(order::held_ranks(), vec![15, 15]);
        }

        #[test]
        fn out_of_order_drop_removes_the_right_hold() {
            let (low, mid, high) = (
                Mutex::new(&LOW, ()),
                Mutex::new(&MID, ()),
                Mutex::new(&HIGH, ()),
            );
            let l = low.lock();
            let m = mid.lock();
            drop(l);
            assert_eq!(order::held_ranks(), vec![20]);
            let h = high.lock();
            drop(m);
            assert_eq!(order::held_ranks(), vec![30]);
            drop(h);
            assert!(order::held_ranks().is_empty());
            let _l = low.lock();
        }

        #[test]
        fn try_lock_skips_check_but_records_hold() {
            let (low, mid, high) = (
                Mutex::new(&LOW, ()),
                RwLock::new(&MID, ()),
                Mutex::new(&HIGH, ()),
            );
            let h = high.lock();
            let l = low.try_lock().expect("free");
            let m = mid.try_write().expect("free");
            assert_eq!(order::held_ranks(), vec![30, 10, 20]);
            drop((h, l, m));
            assert!(order::held_ranks().is_empty());
        }

        #[test]
        #[should_panic(expected = "taking `t_mid` (rank 20) while holding `t_high` (rank 30")]
        fn try_lock_hold_is_checked_later() {
            let (mid, high) = (Mutex::new(&MID, ()), Mutex::new(&HIGH, ()));
            let _h = high.try_lock().expect("free");
            let _m = mid.lock();
        }

        #[test]
        #[should_panic(expected = "condvar wait on `t_low` (rank 10) while holding `t_mid`")]
        fn condvar_wait_under_higher_lock_panics() {
            let (low, mid) = (Mutex::new(&LOW, ()), Mutex::new(&MID, ()));
            let cv = Condvar::new();
            let mut l = low.lock();
            let _m = mid.lock();
            cv.wait_for(&mut l, Duration::from_millis(1));
        }

        #[test]
        fn holds_are_per_thread() {
            let high = Mutex::new(&HIGH, ());
            let _h = high.lock();
            thread::scope(|s| {
                s.spawn(|| drop(Mutex::new(&LOW, ()).lock()))
                    .join()
                    .unwrap()
            });
        }
    }
}
