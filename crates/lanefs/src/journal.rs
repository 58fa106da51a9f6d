//! Transactions and handles, in the jbd2 model.
//!
//! Every metadata change happens inside a `Handle`. A handle joins the running transaction
//! (a shared counter, touched once at start and once at stop); commit waits until no
//! handle is open, then writes the transaction's buffers. In this version commit writes
//! the buffers in place (write-back on sync/unmount); the jbd2 log will slot in here
//! without changing callers.

use crate::buf::{Buf, BufCache};
use crate::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, JOURNAL_STATE};
use std::sync::Arc;

/// The journal: today a barrier between handles and commit.
pub struct Journal {
    barrier: RwLock<()>,
    bufs: Arc<BufCache>,
}

/// An open handle: metadata changes made through it belong to the running transaction.
pub struct Handle<'a> {
    _tx: RwLockReadGuard<'a, ()>,
    bufs: &'a BufCache,
}

/// Exclusive access for commit: no handle is open while this lives.
pub struct CommitGuard<'a> {
    _g: RwLockWriteGuard<'a, ()>,
}

impl Journal {
    /// A journal writing through `bufs`.
    pub fn new(bufs: Arc<BufCache>) -> Journal {
        Journal {
            barrier: RwLock::new(&JOURNAL_STATE, ()),
            bufs,
        }
    }
    /// Start a handle (lock order: after inode locks, before group and buffer locks).
    pub fn start(&self) -> Handle<'_> {
        Handle {
            _tx: self.barrier.read(),
            bufs: &self.bufs,
        }
    }
    /// Wait for open handles to stop and hold new ones off.
    pub fn lock_commit(&self) -> CommitGuard<'_> {
        CommitGuard {
            _g: self.barrier.write(),
        }
    }
}

impl Handle<'_> {
    /// Record that `b` was modified in this transaction.
    pub fn dirty(&self, b: &Buf) {
        self.bufs.dirty(b);
    }
}

/// Journal counters since mount, for benchmarks (`Fs::journal_stats`).
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
