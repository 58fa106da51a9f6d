//! How handles join a transaction and how commit shuts it: a Dekker pair of atomics.
//!
//! A handle start increments `updates`, then reads `locked`; commit sets `locked`, then
//! reads `updates`. A SeqCst fence sits between the write and the read on both sides, so
//! at least one side sees the other: either the starter sees the lock and backs out, or
//! commit sees the handle and waits for it. No lock is held by a joined handle. Checked
//! by a loom model (`tests/loom_gate.rs`, run with `RUSTFLAGS="--cfg loom"`); loom found
//! that SeqCst accesses alone, without the fences, are not enough in its model (it treats
//! them as acquire/release), so the fences make the argument independent of that.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering::SeqCst};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering::SeqCst};

/// What a join attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// Joined: the caller must `leave` once.
    Joined,
    /// The transaction is locked for commit; `wake` asks the caller to wake the committer
    /// (the back-out may have been the last thing it waited for).
    Refused {
        /// Whether the committer may be waiting for this back-out.
        wake: bool,
    },
}

/// The join state of one transaction.
#[derive(Debug, Default)]
pub struct TxGate {
    updates: AtomicUsize,
    locked: AtomicBool,
}

impl TxGate {
    /// An open transaction with no handles.
    pub fn new() -> TxGate {
        TxGate {
            updates: AtomicUsize::new(0),
            locked: AtomicBool::new(false),
        }
    }
    /// Try to join.
    pub fn join(&self) -> Join {
        self.updates.fetch_add(1, SeqCst);
        fence(SeqCst);
        if !self.locked.load(SeqCst) {
            return Join::Joined;
        }
        Join::Refused { wake: self.leave() }
    }
    /// Leave; true if this was the last handle of a locked transaction (wake the
    /// committer).
    pub fn leave(&self) -> bool {
        let last = self.updates.fetch_sub(1, SeqCst) == 1;
        fence(SeqCst);
        last && self.locked.load(SeqCst)
    }
    /// Lock for commit: no handle joins after this returns.
    pub fn lock(&self) {
        self.locked.store(true, SeqCst);
        fence(SeqCst);
    }
    /// Whether no handle is joined (after `lock`: stays true).
    pub fn drained(&self) -> bool {
        self.updates.load(SeqCst) == 0
    }
}
