//! Lock-free dirty accounting of the buffer cache: one flag per buffer, one counter of
//! dirty buffers per cache. Marking and clearing race freely, so the counter may dip
//! below zero for a moment (a clear that runs between another thread's flag swap and its
//! increment); it is signed and read as `max(0)`, and exact whenever nobody is marking
//! or clearing. Checked by a loom model (`tests/loom_dirty.rs`, run with
//! `RUSTFLAGS="--cfg loom"`).

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// A buffer's dirty flag.
#[derive(Debug, Default)]
pub struct DirtyFlag(AtomicBool);

/// Number of dirty buffers.
#[derive(Debug, Default)]
pub struct DirtyCount(AtomicIsize);

impl DirtyFlag {
    /// A clean flag.
    pub fn new() -> DirtyFlag {
        DirtyFlag(AtomicBool::new(false))
    }
    /// Whether the buffer is dirty.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
    /// Mark dirty; counts the buffer once however many threads mark it.
    pub fn mark(&self, count: &DirtyCount) {
        // Already dirty: a read, so a block many threads change stays shared in caches.
        if self.0.load(Ordering::Acquire) {
            return;
        }
        if !self.0.swap(true, Ordering::AcqRel) {
            count.0.fetch_add(1, Ordering::AcqRel);
        }
    }
    /// Clear; returns whether this call took the buffer from dirty to clean (and so owes
    /// its write-back).
    pub fn clear(&self, count: &DirtyCount) -> bool {
        let was = self.0.swap(false, Ordering::AcqRel);
        if was {
            count.0.fetch_sub(1, Ordering::AcqRel);
        }
        was
    }
}

impl DirtyCount {
    /// Zero.
    pub fn new() -> DirtyCount {
        DirtyCount(AtomicIsize::new(0))
    }
    /// Dirty buffers (never negative; exact when no mark or clear is in flight).
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire).max(0) as usize
    }
    /// The raw value, for checking the invariant in models.
    pub fn raw(&self) -> isize {
        self.0.load(Ordering::Acquire)
    }
}
