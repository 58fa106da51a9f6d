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
//!
//! The code, by concern: this file holds the journal's state and its accessors;
//! `handle.rs` the handles (start, what they record, stop), `gate.rs` the lock-free gate
//! they join through, `commit.rs` the commit's steps, `write.rs` the log blocks a commit
//! writes, `checkpoint.rs` the checkpoint (and `sync`, and a clean unmount's empty log),
//! `log.rs` the log area on the device and `recovery.rs` the replay at mount.

mod checkpoint;
mod commit;
pub mod gate;
mod handle;
mod log;
mod recovery;
mod write;

pub use log::LogArea;
pub use recovery::{recover, Replay};

use crate::buf::{Buf, BufCache};
use crate::dev::BlockDevice;
use crate::disk::jbd2;
use crate::error::{Error, Result};
use crate::sync::{Condvar, Mutex, Padded, JOURNAL_COMMIT, JOURNAL_GATE, TX_LIST};
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

    /// Whether the file system has a log (has_journal).
    pub fn has_log(&self) -> bool {
        self.has_log
    }

    fn slot(&self, tid: u64) -> &Transaction {
        &self.slots[(tid % 2) as usize]
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
}
