//! Transactions, handles, commit and checkpoint, in jbd2's model and on-disk format.
//!
//! Every metadata change happens inside a [`Handle`], which joins the running
//! transaction: it reads the running transaction's id (an atomic), increments its
//! thread's join counter in that transaction's slot (one of 16 padded lanes, so threads
//! write different cache lines), and reads the slot's `locked` flag; stopping decrements
//! the counter. No lock is taken or held, so handles of different threads never wait for
//! each other. Two slots alternate: the running transaction and the one committing.
//!
//! Commit (at most one at a time, `journal_commit`):
//! 1. lock the running transaction T: handle starts now wait at the gate, and commit waits
//!    for T's open handles to stop (`gate.rs`: a fenced Dekker pair, loom-checked); then
//!    format T's log items ([`LogItem`]: staged inodes are copied into their table
//!    blocks, with their checksums);
//! 2. mark T's buffers frozen (a flag each), take its revoke and ordered-inode lists,
//!    open T+1 in the other slot and let waiting handles in: the pause lasts only the
//!    marks. Then copy each buffer's bytes: the bytes of the pause, copied by the commit,
//!    or by the first writer of T+1 that reaches the buffer before it and keeps them
//!    aside (`Buf::write`; jbd2's frozen data, `b_frozen_data`);
//! 3. stamp the checksums of sealed blocks on their copies (`disk::seal`: directory
//!    blocks are checksummed once per commit, not per change), write the dirty pages of
//!    T's ordered inodes (data blocks T mapped: ext4's
//!    `data=ordered`), then the log: revoke blocks, descriptor blocks each followed by the
//!    copies they tag (64-bit tags, checksum v3, escaped when a copy starts with the
//!    magic), flush, then the commit block, flush;
//! 4. T is committed: its snapshots join the checkpoint set, blocks it revoked leave it,
//!    and the frees T made become allocatable (the `on_commit` hook).
//!
//! Checkpoint writes the checkpoint set (the newest committed copy of every logged block)
//! home, flushes, and moves the log tail to the head in the journal superblock. It runs
//! when a commit would not fit in the free log space, when the blocks pinned until
//! checkpoint pass half the buffer cache's limit (memory stays bounded whatever the log's
//! size), on `sync` and at unmount. A block
//! changed many times is one buffer in one transaction and logged once per commit.
//!
//! Without a journal (`has_journal` off) commit writes the snapshots home directly.
//! A failed write or flush aborts the journal: every later commit fails, the mount is
//! read-only (through the device's error latch), and what was committed stays. A write
//! refused by a shutdown (`Fs::shutdown`) aborts it the same way, and later commits
//! fail with `Error::ShutDown`.

pub mod gate;
mod log;
mod recovery;

pub use log::LogArea;
pub use recovery::{recover, Replay};

use crate::buf::{Buf, BufCache};
use crate::dev::BlockDevice;
use crate::disk::jbd2;
use crate::disk::seal::{Prefix, Seal};
use crate::error::{Error, Result};
use crate::sync::{may_block_on, Condvar, Mutex, Padded, JOURNAL_COMMIT, JOURNAL_GATE, TX_LIST};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

const LISTS: usize = 16;

/// An object whose data must reach the device before the commit block of a transaction
/// that mapped it (ext4's `data=ordered`; jbd2's inode list). The journal knows blocks
/// and handles, not inodes: a cached inode implements this.
pub trait OrderedData: Send + Sync {
    /// Where the journal records the newest transaction that lists this object, so it is
    /// listed once per transaction.
    fn ordered_tid(&self) -> &AtomicU64;
    /// Write the object's dirty data to `dev` (block size `bs`).
    fn write_ordered(&self, dev: &dyn BlockDevice, bs: usize) -> Result<()>;
}

/// An object whose changes are kept out of its buffers while its transaction runs and
/// copied in once at commit (XFS's inode log item, whose `iop_format` copies the
/// in-memory inode into the log at commit rather than at every change). An inode's stage
/// (`inode::InodeStage`) implements this: an operation changes the inode; its bytes and
/// checksum reach the inode-table block when the transaction closes.
pub trait LogItem: Send + Sync {
    /// Copy the item's staged changes made in transaction `tid` into its buffers (which
    /// a handle of `tid` dirtied). Called by the commit once `tid`'s handles have all
    /// stopped and before its buffers are copied: no handle is open meanwhile.
    fn format(&self, tid: u64);
}

/// A list handles push to, on cache lines of its own (side by side, two lanes' lists
/// shared a line that each push wrote).
type LaneList<T> = Padded<Mutex<Vec<T>>>;

/// One transaction slot. Two slots alternate: the running transaction and the one being
/// committed; a slot is reused for transaction T+2 once T has committed.
pub struct Transaction {
    tid: AtomicU64,
    gate: gate::TxGate,
    lists: Vec<LaneList<Arc<Buf>>>,
    /// Buffers listed: written when one joins, read by every handle start.
    nbufs: Padded<AtomicUsize>,
    revoked: Padded<Mutex<Vec<u64>>>,
    ordered: Padded<Mutex<Vec<Arc<dyn OrderedData>>>>,
    /// Items to format at commit, by the lane of the handle that listed them.
    items: Vec<LaneList<Arc<dyn LogItem>>>,
}

impl Transaction {
    fn new(tid: u64) -> Transaction {
        Transaction {
            tid: AtomicU64::new(tid),
            gate: gate::TxGate::new(),
            lists: (0..LISTS)
                .map(|_| Padded(Mutex::new(&TX_LIST, Vec::new())))
                .collect(),
            nbufs: Padded(AtomicUsize::new(0)),
            revoked: Padded(Mutex::new(&TX_LIST, Vec::new())),
            ordered: Padded(Mutex::new(&TX_LIST, Vec::new())),
            items: (0..LISTS)
                .map(|_| Padded(Mutex::new(&TX_LIST, Vec::new())))
                .collect(),
        }
    }
}

/// Commit-side state: the log position and the checkpoint set.
struct CommitState {
    log: Option<LogArea>,
    /// Log position where the next transaction starts.
    head: u32,
    /// Log position of the oldest transaction not yet checkpointed.
    tail: u32,
    /// Newest committed copy of every block in the log: (contents, buffer).
    cp: BTreeMap<u64, (Box<[u8]>, Arc<Buf>)>,
    /// Block-sized copies freed by checkpoints, reused for the next snapshots (at most two
    /// transactions' worth: a checkpoint frees the two a full log holds, and the two
    /// commits before the next one take them): a commit then neither allocates nor faults
    /// in fresh pages.
    pool: Vec<Box<[u8]>>,
    /// Highest transaction whose snapshots are in `cp` or home.
    last_committed: u64,
    /// Sequence number of the next transaction written to the log. Empty transactions
    /// write nothing and take no number, so the log's sequence has no gaps (replay stops
    /// at the first missing number).
    seq: u32,
    /// The shift that turns a leaf seal's crc into the log's checksum of the block
    /// (`jbd2::block_csum_after`), made at the first commit that needs it.
    shift: Option<jbd2::ZeroShift>,
}

/// Journal counters since mount, for benchmarks (`Diagnostics::journal_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Transactions committed.
    pub commits: u64,
    /// Blocks written to the log: descriptors, metadata copies, revoke and commit blocks.
    pub log_blocks: u64,
    /// Checkpoints: committed metadata written to its home location and log space freed.
    pub checkpoints: u64,
    /// Handles started.
    pub handles: u64,
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    log_blocks: AtomicU64,
    checkpoints: AtomicU64,
    /// Handles started in transactions already committed.
    handles: AtomicU64,
}

/// The journal of one mount.
pub struct Journal {
    dev: Arc<dyn BlockDevice>,
    bufs: Arc<BufCache>,
    /// The running transaction's id; it lives in `slots[tid % 2]`.
    running: AtomicU64,
    slots: [Transaction; 2],
    gate: Mutex<()>,
    gate_cv: Condvar,
    commit: Mutex<CommitState>,
    committed: AtomicU64,
    aborted: AtomicBool,
    /// The write that aborted it was refused by a shutdown (`Error::ShutDown`), not failed.
    shut_down: AtomicBool,
    /// A running transaction past this many buffers is due: the next handle start asks
    /// the commit thread for it (or commits it, without one).
    max_tx: usize,
    /// Past this many, a handle start waits for the due transaction to close.
    hard_tx: usize,
    on_commit: std::sync::OnceLock<Box<dyn Fn(u64) + Send + Sync>>,
    /// A second device holding ordered data (the realtime data device): flushed with the
    /// log device, so data written before a commit is durable before its commit block
    /// (jbd2 flushes `j_fs_dev` before the commit block of an external log).
    data_dev: std::sync::OnceLock<Arc<dyn BlockDevice>>,
    /// Called once a transaction's handles have all ended, before its buffers are
    /// copied: the allocator brings checksums and descriptors up to date then.
    before_commit: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Wakes the commit thread (jbd2's kjournald2), if the mount runs one.
    kick: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// A handle asked the commit thread for a commit since it last looked.
    kicked: AtomicBool,
    /// The newest transaction a handle asked the commit thread for (`ask_commit`).
    asked: AtomicU64,
    /// The commit thread runs (set by `set_kick`, cleared by `stop_kick`).
    kick_live: AtomicBool,
    counters: Counters,
    has_log: bool,
    bs: usize,
    /// Journal flushes begun and finished (serialized by the commit lock, so they finish
    /// in the order they begin): lets fsync tell whether someone else's flush covers the
    /// data it wrote.
    flushes_begun: AtomicU64,
    flushes_done: AtomicU64,
}

/// An open handle: metadata changes made through it belong to its transaction.
pub struct Handle<'a> {
    j: &'a Journal,
    t: &'a Transaction,
    tid: u64,
    lane: usize,
}

impl Journal {
    /// A journal over `log` (None: no journal, commits write home), whose next
    /// transaction is `next_tid`. The caller has already written the journal superblock
    /// describing an empty log starting at its first block.
    pub fn new(
        dev: Arc<dyn BlockDevice>,
        bufs: Arc<BufCache>,
        log: Option<LogArea>,
        next_tid: u64,
        bs: usize,
    ) -> Journal {
        // A transaction stays under a third of the log (jbd2's
        // `jbd2_journal_get_max_txn_bufs` since Linux 6.11; a quarter before) and an
        // eighth of the buffer cache (its copies are made at commit).
        let cap = (bufs.limit_blocks() / 8).max(8);
        let (head, max_tx) = match &log {
            Some(l) => (l.first(), (l.len() as usize / 3).clamp(8, cap)),
            None => (0, cap),
        };
        // A due transaction grows on while the commit before finishes, up to half the log
        // (the other half is slack for an operation that starts under the limit and
        // overshoots it: a transaction longer than the log cannot commit).
        let hard_tx = match &log {
            Some(l) => (2 * max_tx).min(l.len() as usize / 2).max(max_tx),
            None => 2 * max_tx,
        };
        Journal {
            has_log: log.is_some(),
            flushes_begun: AtomicU64::new(0),
            flushes_done: AtomicU64::new(0),
            dev,
            bufs,
            running: AtomicU64::new(next_tid),
            slots: {
                // The running transaction sits in slot `tid % 2`; the other slot starts
                // as the committed, locked transaction before it.
                let run = Transaction::new(next_tid);
                let prev = Transaction::new(next_tid - 1);
                prev.gate.lock();
                if next_tid.is_multiple_of(2) {
                    [run, prev]
                } else {
                    [prev, run]
                }
            },
            gate: Mutex::new(&JOURNAL_GATE, ()),
            gate_cv: Condvar::new(),
            commit: Mutex::new(
                &JOURNAL_COMMIT,
                CommitState {
                    log,
                    head,
                    tail: head,
                    cp: BTreeMap::new(),
                    pool: Vec::new(),
                    last_committed: next_tid - 1,
                    seq: next_tid as u32,
                    shift: None,
                },
            ),
            committed: AtomicU64::new(next_tid - 1),
            aborted: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
            max_tx,
            hard_tx,
            on_commit: std::sync::OnceLock::new(),
            data_dev: std::sync::OnceLock::new(),
            before_commit: std::sync::OnceLock::new(),
            kick: std::sync::OnceLock::new(),
            kicked: AtomicBool::new(false),
            asked: AtomicU64::new(0),
            kick_live: AtomicBool::new(false),
            counters: Counters::default(),
            bs,
        }
    }

    /// Call `f(tid)` after each commit (releases the frees the transaction made).
    pub fn set_on_commit(&self, f: Box<dyn Fn(u64) + Send + Sync>) {
        let _ = self.on_commit.set(f);
    }

    /// Flush `dev` too wherever the journal flushes (set once, at mount): ordered data on
    /// a second device is then durable before the commit that maps it.
    pub fn set_data_dev(&self, dev: Arc<dyn BlockDevice>) {
        let _ = self.data_dev.set(dev);
    }

    /// Install the hook run before each commit copies its buffers (set once, at mount).
    pub fn set_before_commit(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.before_commit.set(f);
    }

    /// Install the way to wake the mount's commit thread (set once, at mount): a full
    /// transaction is then committed there while handles go on in the next one, as jbd2
    /// has kjournald2 do, instead of by the handle that found it full.
    pub fn set_kick(&self, f: Box<dyn Fn() + Send + Sync>) {
        if self.kick.set(f).is_ok() {
            self.kick_live.store(true, Ordering::Release);
        }
    }

    /// The commit thread is stopping: handles commit full transactions themselves.
    pub fn stop_kick(&self) {
        self.kick_live.store(false, Ordering::Release);
    }

    /// Whether a handle asked for a commit since the last call (for the commit thread).
    pub fn take_kick(&self) -> bool {
        self.kicked.swap(false, Ordering::AcqRel)
    }

    /// The way to wake the commit thread, while it runs.
    fn live_kick(&self) -> Option<&(dyn Fn() + Send + Sync)> {
        let kick = self.kick.get()?;
        self.kick_live
            .load(Ordering::Acquire)
            .then_some(kick.as_ref())
    }

    /// Ask the commit thread to commit transaction `tid` (the running one), once per
    /// transaction: the handles that go on in it while the thread gets to it must not ask
    /// again, or the thread, having taken the ask, would find it again after that commit
    /// and commit the next transaction long before it is due (2,000,000 creates committed
    /// 23 times instead of 15). False if there is no commit thread.
    fn ask_commit(&self, tid: u64) -> bool {
        let Some(kick) = self.live_kick() else {
            return false;
        };
        if self.asked.fetch_max(tid, Ordering::AcqRel) < tid {
            self.kicked.store(true, Ordering::Release);
            kick();
        }
        true
    }

    /// Wait for the commit thread to close transaction `tid`. False if it did not within
    /// a while (no thread, or it is stuck behind IO): the caller commits itself.
    fn wait_closed(&self, tid: u64) -> bool {
        let Some(kick) = self.live_kick() else {
            return false;
        };
        self.kicked.store(true, Ordering::Release);
        kick();
        let mut g = self.gate.lock();
        for _ in 0..100 {
            if self.running.load(Ordering::Acquire) != tid || self.is_aborted() {
                return true;
            }
            self.gate_cv
                .wait_for(&mut g, std::time::Duration::from_millis(10));
        }
        false
    }

    /// Whether the file system has a log (has_journal).
    pub fn has_log(&self) -> bool {
        self.has_log
    }

    fn slot(&self, tid: u64) -> &Transaction {
        &self.slots[(tid % 2) as usize]
    }

    /// Start a handle (lock order: after inode locks, before group and buffer locks).
    ///
    /// A running transaction past `max_tx` buffers (a third of the log) is due: the start
    /// asks the commit thread for it and goes on in it while the thread finishes the
    /// commit before, up to `hard_tx` (half the log); past that, or with no commit
    /// thread, it waits for the transaction to close or commits it. jbd2 waits at its one
    /// limit. Measured 2026-11-28 (2,000,000 removes in one directory, one thread,
    /// transactions of a third of a 256 MiB log): handles waited at that one limit 98
    /// times, 0.69 s of a 6.2 s phase, while the commit thread wrote the transaction
    /// before; with the second limit, 56 times and 0.04 s.
    pub fn start(&self) -> Handle<'_> {
        // A start may wait for the running transaction to close or commit it itself; a
        // lock held above the commit's (a group's, a buffer's) that a handle of that
        // transaction waits for would deadlock. Checked on every start, not only on the
        // rare one that waits.
        debug_assert!(
            may_block_on(&JOURNAL_COMMIT),
            "a handle started while holding a lock ranked after `journal_commit`"
        );
        let lane = gate::my_lane();
        loop {
            let tid = self.running.load(Ordering::Acquire);
            let t = self.slot(tid);
            let n = t.nbufs.load(Ordering::Relaxed);
            if n > self.max_tx && !self.is_aborted() && (n > self.hard_tx || !self.ask_commit(tid))
            {
                // Best effort: a failed commit aborts the journal, which the operation
                // notices at its next check.
                if !self.wait_closed(tid) {
                    let _ = self.commit_upto(tid);
                }
                continue;
            }
            match t.gate.join(lane) {
                // An open gate is the running transaction's, whatever `tid` was read.
                gate::Join::Joined => {
                    let tid = t.tid.load(Ordering::Acquire);
                    // Joined through an open gate: its transaction cannot commit before
                    // this handle stops.
                    debug_assert!(
                        self.committed_tid() < tid,
                        "a handle joined transaction {tid}, already committed"
                    );
                    return Handle {
                        j: self,
                        t,
                        tid,
                        lane,
                    };
                }
                gate::Join::Refused { wake } => {
                    if wake {
                        self.wake();
                    }
                }
            }
            let mut g = self.gate.lock();
            while self.running.load(Ordering::Acquire) == tid {
                self.gate_cv
                    .wait_for(&mut g, std::time::Duration::from_millis(10));
            }
        }
    }

    fn wake(&self) {
        let _g = self.gate.lock();
        self.gate_cv.notify_all();
    }

    /// The running transaction's id.
    pub fn running_tid(&self) -> u64 {
        self.running.load(Ordering::Acquire)
    }

    /// The newest committed transaction.
    pub fn committed_tid(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Whether a failed write aborted the journal.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// Counters since mount.
    pub fn stats(&self) -> JournalStats {
        let c = &self.counters;
        JournalStats {
            commits: c.commits.load(Ordering::Relaxed),
            log_blocks: c.log_blocks.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            handles: c.handles.load(Ordering::Relaxed)
                + self.slot(self.running_tid()).gate.started(),
        }
    }

    /// Make transaction `tid` (and everything before it) durable. Concurrent callers
    /// share one commit (group commit): whoever gets the commit lock first commits the
    /// running transaction, the others find it done. Returns whether this call committed
    /// (so every write the caller made before calling is behind its flushes).
    pub fn commit_upto(&self, tid: u64) -> Result<bool> {
        if self.committed_tid() >= tid {
            self.check_aborted()?;
            return Ok(false);
        }
        let mut cs = self.commit.lock();
        self.check_aborted()?;
        if self.committed_tid() >= tid {
            return Ok(false);
        }
        let r = self.commit_locked(&mut cs);
        if let Err(e) = &r {
            self.abort(e);
        }
        r.map(|()| true)
    }

    /// A mark for `flushed_since`, taken after the caller's writes.
    pub fn flush_mark(&self) -> u64 {
        self.flushes_begun.load(Ordering::SeqCst)
    }

    /// Whether a journal flush that began after `mark` has finished.
    pub fn flushed_since(&self, mark: u64) -> bool {
        self.flushes_done.load(Ordering::SeqCst) > mark
    }

    fn flush(&self) -> Result<()> {
        let n = self.flushes_begun.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(d) = self.data_dev.get() {
            d.flush()?;
        }
        self.dev.flush()?;
        self.flushes_done.fetch_max(n, Ordering::SeqCst);
        Ok(())
    }

    /// Commit the running transaction.
    pub fn commit_running(&self) -> Result<()> {
        self.commit_upto(self.running_tid()).map(|_| ())
    }

    /// Abort after `e` failed a commit or checkpoint.
    fn abort(&self, e: &Error) {
        if *e == Error::ShutDown {
            self.shut_down.store(true, Ordering::Release);
        }
        self.aborted.store(true, Ordering::Release);
    }

    fn check_aborted(&self) -> Result<()> {
        if self.shut_down.load(Ordering::Acquire) {
            Err(Error::ShutDown)
        } else if self.is_aborted() {
            Err(Error::io_other(
                "writing the journal",
                "the journal was aborted by an earlier write error; the mount is read-only",
            ))
        } else {
            Ok(())
        }
    }

    fn commit_locked(&self, cs: &mut CommitState) -> Result<()> {
        let tid = self.running_tid();
        // Transactions commit one at a time, in order: the one before the running one is
        // the last committed (the commit lock is held).
        debug_assert_eq!(cs.last_committed + 1, tid, "commit of {tid} out of order");
        debug_assert_eq!(self.committed_tid(), cs.last_committed);
        let t = self.slot(tid);
        debug_assert_eq!(t.tid.load(Ordering::Acquire), tid, "slot holds another tid");
        // 1. Lock T and wait for its handles.
        t.gate.lock();
        {
            let mut g = self.gate.lock();
            while !t.gate.drained() {
                self.gate_cv
                    .wait_for(&mut g, std::time::Duration::from_millis(10));
            }
        }
        for l in &t.items {
            let items = std::mem::take(&mut *l.lock());
            for i in items {
                i.format(tid);
            }
        }
        if let Some(f) = self.before_commit.get() {
            f();
        }
        // 2. Mark T's blocks frozen, then open T+1 in the other slot (free: T-1 committed
        // before us). A block's bytes at this pause are what T logs: the copy is taken
        // below, after T+1 opened, by the commit or by the block's first writer in T+1,
        // whichever comes first (jbd2's frozen data), so handles wait only for the marks.
        // The copies count against the buffer cache's limit from before they are taken;
        // the pool's memory is reused first.
        let n = t.nbufs.load(Ordering::Relaxed);
        self.bufs.reserve_copies(cs.cp.len() + cs.pool.len().max(n));
        let mut frozen: Vec<(Arc<Buf>, Seal)> = Vec::with_capacity(n);
        for l in &t.lists {
            let list = std::mem::take(&mut *l.lock());
            for b in list {
                if !b.forgotten.load(Ordering::Acquire) {
                    b.freeze();
                    let seal = b.seal();
                    frozen.push((b, seal));
                }
            }
        }
        t.nbufs.store(0, Ordering::Relaxed);
        let mut revoked = std::mem::take(&mut *t.revoked.lock());
        let ordered = std::mem::take(&mut *t.ordered.lock());
        self.counters
            .handles
            .fetch_add(t.gate.started(), Ordering::Relaxed);
        let next = self.slot(tid + 1);
        // The other slot holds T-1, committed before T: it is free for T+1, empty.
        debug_assert_eq!(
            next.tid.load(Ordering::Acquire),
            tid - 1,
            "slot of {tid}'s successor"
        );
        debug_assert_eq!(
            next.nbufs.load(Ordering::Relaxed),
            0,
            "transaction {} left buffers listed",
            tid - 1
        );
        next.tid.store(tid + 1, Ordering::Release);
        // Its count so far belongs to T-1, already added.
        next.gate.reset_started();
        next.gate.unlock();
        // Only a commit moves the running transaction, under the commit lock held here.
        debug_assert_eq!(self.running.load(Ordering::Acquire), tid);
        self.running.store(tid + 1, Ordering::Release);
        self.wake();
        // Every frozen block is copied here, in block order (the log's), before anything
        // that can fail.
        frozen.sort_unstable_by_key(|f| f.0.blk);
        debug_assert!(
            frozen.windows(2).all(|w| w[0].0.blk != w[1].0.blk),
            "a block listed twice in transaction {tid}"
        );
        // A block listed twice (a bug the assertion names) is still copied once.
        frozen.dedup_by_key(|f| f.0.blk);
        let mut snaps: Vec<(Box<[u8]>, Arc<Buf>)> = Vec::with_capacity(frozen.len());
        // Sized up front: grown by doubling, these vectors of a large transaction took
        // fresh pages at every step (a tenth of the commit thread's samples).
        let mut seals = Vec::with_capacity(frozen.len());
        for (b, seal) in frozen {
            let (copy, unused) = b.frozen_copy(cs.pool.pop());
            if let Some(u) = unused {
                cs.pool.push(u);
            }
            if seal != Seal::None {
                seals.push((snaps.len(), seal));
            }
            snaps.push((copy, b));
        }
        // The copies being committed count against the buffer cache's limit too.
        self.bufs
            .set_copies(cs.cp.len() + cs.pool.len() + snaps.len());
        // 3. Checksums sealed once per commit (on the copies, after the pause), ordered
        // data, then the log. A seal's crc of all but a leaf's tail gives the log's
        // checksum of the block without a second pass (`jbd2::block_csum_after`).
        let mut known = vec![None; snaps.len()];
        for (i, seal) in seals {
            known[i] = seal.apply(&mut snaps[i].0);
        }
        for i in &ordered {
            i.write_ordered(&*self.dev, self.bs)?;
        }
        revoked.sort_unstable();
        revoked.dedup();
        // Replay drops every copy of a block logged in a transaction that revokes it: a
        // block both logged and revoked here would lose this transaction's copy in a
        // crash. A freed metadata block is forgotten (not logged) and stays busy, never
        // reused as metadata, until this commit.
        debug_assert!(
            snaps
                .iter()
                .all(|(_, b)| revoked.binary_search(&b.blk).is_err()),
            "transaction {tid} logs a block it revokes"
        );
        if cs.log.is_some() {
            if !snaps.is_empty() || !revoked.is_empty() {
                self.write_log(cs, tid, &snaps, &known, &revoked)?;
            } else {
                // Nothing to log, but a caller (fsync) counts on a flush after its writes.
                self.flush()?;
            }
        }
        // 4. Committed.
        for r in &revoked {
            cs.cp.remove(r);
        }
        for (data, b) in snaps {
            if let Some((old, _)) = cs.cp.insert(b.blk, (data, b)) {
                self.recycle(cs, old);
            }
        }
        cs.last_committed = tid;
        // Without a log, home at once; with one, when the blocks pinned until checkpoint
        // (and their committed copies) pass half the buffer cache's limit.
        self.bufs.set_copies(cs.cp.len() + cs.pool.len());
        if cs.log.is_none() || self.bufs.pinned_over_half() {
            self.checkpoint_locked(cs)?;
        }
        self.committed.store(tid, Ordering::Release);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = self.on_commit.get() {
            f(tid);
        }
        Ok(())
    }

    /// Write transaction `tid` to the log: revokes, descriptors with their copies, flush,
    /// commit block, flush. Checkpoints first when it would not fit. `known[i]` is the
    /// crc its seal computed of most of copy `i`, if any.
    fn write_log(
        &self,
        cs: &mut CommitState,
        tid: u64,
        snaps: &[(Box<[u8]>, Arc<Buf>)],
        known: &[Option<Prefix>],
        revoked: &[u64],
    ) -> Result<()> {
        // The shift that turns a leaf seal's crc into the log's (32 crcs of zeros: made
        // once, kept for later commits).
        let csum_log = cs.log.as_ref().is_some_and(|l| l.js.csum());
        if let Some(p) = known.iter().flatten().next().filter(|_| csum_log) {
            if cs.shift.as_ref().map(jbd2::ZeroShift::len) != Some(p.len) {
                cs.shift = Some(jbd2::ZeroShift::new(p.len));
            }
        }
        let shift = cs.shift.as_ref();
        let log = cs
            .log
            .as_ref()
            .ok_or_else(|| Error::io_other("committing", "no log"))?;
        let js = &log.js;
        let seq = cs.seq;
        let seed = js.csum_seed();
        let bs = self.bs;
        // Snapshots go to the log as they are; only one starting with the magic is copied.
        let mut blocks: Vec<Cow<'_, [u8]>> =
            Vec::with_capacity(snaps.len() + snaps.len() / 16 + revoked.len() / 16 + 4);
        debug_assert!(
            (log.first()..log.end()).contains(&cs.head)
                && (log.first()..log.end()).contains(&cs.tail),
            "log head {} or tail {} outside the log {}..{}",
            cs.head,
            cs.tail,
            log.first(),
            log.end()
        );
        let mut rest = revoked;
        while !rest.is_empty() {
            let mut b = vec![0u8; bs];
            let n = jbd2::put_revoke(js, &mut b, seq, rest);
            debug_assert!(n > 0, "a revoke block holds no record");
            rest = &rest[n..];
            blocks.push(Cow::Owned(b));
        }
        let tb = js.tag_bytes();
        let room = bs - jbd2::HEADER - if js.csum() { jbd2::TAIL } else { 0 };
        let per_desc = (room - 16) / tb;
        debug_assert!(per_desc > 0, "a descriptor block holds no tag");
        for (chunk, known) in snaps.chunks(per_desc).zip(known.chunks(per_desc)) {
            let mut d = vec![0u8; bs];
            jbd2::put_header(&mut d, jbd2::DESCRIPTOR, seq);
            let mut off = jbd2::HEADER;
            let mut copies = Vec::with_capacity(chunk.len());
            for (k, ((data, b), known)) in chunk.iter().zip(known).enumerate() {
                // A copy of another size would shift every log block after it.
                assert_eq!(data.len(), bs, "copy of block {} is not a block", b.blk);
                let mut copy = Cow::Borrowed(&data[..]);
                let mut flags = 0;
                if jbd2::needs_escape(&copy) {
                    copy.to_mut()[..4].fill(0);
                    flags |= jbd2::FLAG_ESCAPE;
                }
                // As jbd2: no checksum in the tags of a log without them; the copy's
                // checksum covers it as logged (escaped).
                let csum = match (known, shift) {
                    _ if !js.csum() => 0,
                    (Some(p), Some(z)) if flags & jbd2::FLAG_ESCAPE == 0 && p.len == z.len() => {
                        let c = jbd2::block_csum_after(seed, seq, &copy, z, p.seed, p.crc);
                        debug_assert_eq!(c, jbd2::block_csum(seed, seq, &copy), "block {}", b.blk);
                        c
                    }
                    _ => jbd2::block_csum(seed, seq, &copy),
                };
                if k > 0 {
                    flags |= jbd2::FLAG_SAME_UUID;
                }
                if k + 1 == chunk.len() {
                    flags |= jbd2::FLAG_LAST_TAG;
                }
                let tag = jbd2::Tag {
                    blocknr: b.blk,
                    flags,
                    csum,
                };
                jbd2::put_tag(js, &mut d, off, &tag);
                off += tb;
                if k == 0 {
                    d[off..off + 16].copy_from_slice(&js.uuid());
                    off += 16;
                }
                copies.push(copy);
            }
            debug_assert!(
                off <= bs - if js.csum() { jbd2::TAIL } else { 0 },
                "descriptor tags overrun the block"
            );
            if js.csum() {
                jbd2::set_tail_csum(seed, &mut d);
            }
            blocks.push(Cow::Owned(d));
            blocks.extend(copies);
        }
        let need = blocks.len() as u32 + 1;
        if need + 1 > log.len() {
            return Err(Error::io_other(
                format!("committing transaction {tid}"),
                format!(
                    "needs {need} log blocks but the journal holds {}",
                    log.len()
                ),
            ));
        }
        let used = log.distance(cs.tail, cs.head);
        if used + need + 1 > log.len() {
            self.checkpoint_locked(cs)?;
        }
        let log = cs
            .log
            .as_ref()
            .ok_or_else(|| Error::io_other("committing", "no log"))?;
        // Writing past the tail would overwrite transactions not yet checkpointed.
        assert!(
            log.distance(cs.tail, cs.head) + need < log.len(),
            "transaction {tid} of {need} blocks overruns the log tail"
        );
        let pos = log.write_run(&*self.dev, cs.head, &blocks)?;
        self.flush()?;
        let mut c = vec![0u8; bs];
        let now = crate::types::Timespec::now();
        jbd2::put_commit(&log.js, &mut c, seq, now.sec as u64, now.nsec);
        let end = log.write_run(&*self.dev, pos, &[c])?;
        debug_assert_eq!(
            log.distance(cs.head, end),
            need,
            "transaction {tid}'s log blocks"
        );
        self.flush()?;
        cs.head = end;
        cs.seq = seq.wrapping_add(1);
        self.counters
            .log_blocks
            .fetch_add(u64::from(need), Ordering::Relaxed);
        Ok(())
    }

    /// Write every committed copy home, flush, and empty the log (tail = head).
    fn checkpoint_locked(&self, cs: &mut CommitState) -> Result<()> {
        let bs = self.bs as u64;
        let mut run: Vec<&[u8]> = Vec::new();
        let mut run_start = 0u64;
        for (&blk, (data, _)) in &cs.cp {
            if !run.is_empty() && run_start + run.len() as u64 != blk {
                self.dev.write_gather_at(run_start * bs, &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = blk;
            }
            run.push(data);
        }
        self.dev.write_gather_at(run_start * bs, &run)?;
        self.flush()?;
        let upto = cs.last_committed;
        let (head, seq) = (cs.head, cs.seq);
        if let Some(log) = cs.log.as_mut() {
            log.js.set_start(head, seq);
            log.write_super(&*self.dev)?;
            self.flush()?;
            self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        }
        cs.tail = head;
        for (_, (data, b)) in std::mem::take(&mut cs.cp) {
            self.bufs.clean_if_checkpointed(&b, upto);
            self.recycle(cs, data);
        }
        self.bufs.set_copies(cs.pool.len());
        Ok(())
    }

    /// Keep a copy no longer needed for the next snapshots, up to two transactions' worth.
    /// (With one, every other commit of full transactions allocated a transaction's copies
    /// afresh, page faults and all, and every checkpoint freed as many: a tenth of the
    /// commit thread's time in a two-thread mdtest of 400,000 files.)
    fn recycle(&self, cs: &mut CommitState, copy: Box<[u8]>) {
        debug_assert_eq!(copy.len(), self.bs, "a recycled copy is not a block");
        if cs.pool.len() < 2 * self.max_tx {
            cs.pool.push(copy);
        }
    }

    /// Commit the running transaction and checkpoint everything (sync).
    pub fn sync(&self) -> Result<()> {
        self.commit_running()?;
        let mut cs = self.commit.lock();
        self.check_aborted()?;
        let r = self.checkpoint_locked(&mut cs);
        if let Err(e) = &r {
            self.abort(e);
        }
        r
    }

    /// After a final `sync`: mark the log empty (s_start = 0) for a clean unmount. With
    /// `wipe`, the log's blocks are zeroed and the sequence starts again at 1, as mkfs
    /// leaves a journal: nothing of how the mount's transactions were batched remains
    /// (a reproducible build's unmount).
    pub fn mark_empty(&self, wipe: bool) -> Result<()> {
        let mut cs = self.commit.lock();
        self.check_aborted()?;
        let mut next = cs.seq;
        if let Some(log) = cs.log.as_mut() {
            if wipe {
                log.wipe(&*self.dev)?;
                next = 1;
            }
            log.js.set_start(0, next);
            log.write_super(&*self.dev)?;
        }
        cs.seq = next;
        Ok(())
    }
}

impl Handle<'_> {
    /// Record that `b` was modified in this transaction (logged once however often).
    pub fn dirty(&self, b: &Arc<Buf>) {
        self.j.bufs.dirty(b);
        let tid = self.tid;
        // Read first: a block every operation touches (a descriptor block) is then only
        // read, not written, by all but the first handle of the transaction.
        if b.jtid.load(Ordering::Acquire) != tid {
            let prev = b.jtid.swap(tid, Ordering::AcqRel);
            if prev != tid {
                // No handle of a later transaction runs while this one's is open.
                debug_assert!(prev < tid, "block {} listed by {prev} before {tid}", b.blk);
                let k = (b.blk as usize) % LISTS;
                self.t.lists[k].lock().push(b.clone());
                self.t.nbufs.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Record that metadata block `blk` was freed: older logged copies must never be
    /// replayed over its next use.
    pub fn revoke(&self, blk: u64) {
        debug_assert!(
            blk < self.j.dev.size() / self.j.bs as u64,
            "revoke of block {blk} past the device"
        );
        self.t.revoked.lock().push(blk);
    }

    /// Data blocks of `i` were mapped in this transaction: write its pages before the
    /// commit block (data=ordered).
    pub fn add_ordered<T: OrderedData + 'static>(&self, i: &Arc<T>) {
        let tid = self.tid;
        let slot = i.ordered_tid();
        if slot.load(Ordering::Acquire) != tid {
            let prev = slot.swap(tid, Ordering::AcqRel);
            if prev != tid {
                debug_assert!(prev < tid, "ordered data listed by {prev} before {tid}");
                self.t.ordered.lock().push(i.clone());
            }
        }
    }

    /// List `item` for formatting when this transaction commits. The caller lists an item
    /// once per transaction (it knows, under its own lock, whether it already has).
    pub fn log_item<T: LogItem + 'static>(&self, item: &Arc<T>) {
        self.t.items[self.lane % LISTS].lock().push(item.clone());
    }

    /// This handle's transaction.
    pub fn tid(&self) -> u64 {
        self.tid
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        if self.t.gate.leave(self.lane) {
            self.j.wake();
        }
    }
}
