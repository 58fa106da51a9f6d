//! How handles join a transaction and how commit shuts it: a Dekker pair of atomics,
//! with the join counter split per thread so handle starts on different cores write
//! different cache lines.
//!
//! A handle start increments its thread's counter, then reads `locked`; commit sets
//! `locked`, then reads every counter. A SeqCst fence sits between the write and the read
//! on both sides, so at least one side sees the other: either the starter sees the lock
//! and backs out, or commit sees the handle and waits for it. No lock is held by a joined
//! handle, and `locked` is written once per commit, so starters only read it. Checked by
//! a loom model (`tests/loom_gate.rs`, run with `RUSTFLAGS="--cfg loom"`); loom found
//! that SeqCst accesses alone, without the fences, are not enough in its model (it treats
//! them as acquire/release), so the fences make the argument independent of that.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};

/// Join counters per transaction: threads are spread over them round-robin.
pub use crate::sync::{my_lane, LANES};

/// What a join attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// Joined: the caller must `leave` once, with the same lane.
    Joined,
    /// The transaction is locked for commit; `wake` asks the caller to wake the committer
    /// (the back-out may have been the last thing it waited for).
    Refused {
        /// Whether the committer may be waiting for this back-out.
        wake: bool,
    },
}

/// One thread lane: its own cache line (two, against adjacent-line prefetch).
#[repr(align(128))]
#[derive(Debug, Default)]
struct Lane {
    joined: AtomicUsize,
    started: AtomicU64,
}

/// The join state of one transaction.
#[derive(Debug)]
pub struct TxGate {
    lanes: Vec<Lane>,
    locked: AtomicBool,
}

impl Default for TxGate {
    fn default() -> Self {
        TxGate::new()
    }
}

impl TxGate {
    /// An open transaction with no handles.
    pub fn new() -> TxGate {
        TxGate {
            lanes: (0..LANES).map(|_| Lane::default()).collect(),
            locked: AtomicBool::new(false),
        }
    }
    /// Try to join through `lane` (`< LANES`).
    pub fn join(&self, lane: usize) -> Join {
        let l = &self.lanes[lane];
        l.joined.fetch_add(1, SeqCst);
        fence(SeqCst);
        if !self.locked.load(SeqCst) {
            l.started.fetch_add(1, SeqCst);
            return Join::Joined;
        }
        Join::Refused {
            wake: self.leave(lane),
        }
    }
    /// Leave through the lane used to join; true if the transaction is locked and this
    /// lane is now empty (wake the committer, which checks every lane).
    pub fn leave(&self, lane: usize) -> bool {
        let before = self.lanes[lane].joined.fetch_sub(1, SeqCst);
        debug_assert!(before > 0, "lane {lane} left without a join");
        let last = before == 1;
        fence(SeqCst);
        last && self.locked.load(SeqCst)
    }
    /// Lock for commit: no handle joins after this returns.
    pub fn lock(&self) {
        // One commit locks a transaction once (the slot's previous one was unlocked when
        // the slot was reused).
        debug_assert!(!self.locked.load(SeqCst), "a transaction locked twice");
        self.locked.store(true, SeqCst);
        fence(SeqCst);
    }
    /// Open again for a new transaction (only when drained).
    pub fn unlock(&self) {
        debug_assert!(self.locked.load(SeqCst), "an open transaction unlocked");
        self.locked.store(false, SeqCst);
    }
    /// Whether no handle is joined (after `lock`: stays true).
    pub fn drained(&self) -> bool {
        self.lanes.iter().all(|l| l.joined.load(SeqCst) == 0)
    }
    /// Zero the started counters (when the slot is reused for a new transaction).
    pub fn reset_started(&self) {
        for l in &self.lanes {
            l.started.store(0, SeqCst);
        }
    }
    /// Handles that joined through this gate since the last reset.
    pub fn started(&self) -> u64 {
        self.lanes.iter().map(|l| l.started.load(SeqCst)).sum()
    }
}
