//! The handshake between a lookup that takes a use of a cached inode and the inode
//! cache's sweep that evicts it (the kernel's `i_count` against `I_FREEING`), lock-free on both sides.
//!
//! One atomic word holds the use count and a `DEAD` bit. A lookup adds a use by
//! compare-and-swap only while `DEAD` is clear; the sweep sets `DEAD` by compare-and-swap
//! only from "no use, not dead". One location, one modification order: never both
//! succeed. Checked by a loom model (`tests/loom_icache.rs`, run with
//! `RUSTFLAGS="--cfg loom"`).

#[cfg(loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// The eviction bit of the gate's word.
const DEAD: usize = 1 << (usize::BITS - 1);

/// Uses of one cached inode and whether it is being evicted.
#[derive(Debug, Default)]
pub struct UseGate(AtomicUsize);

impl UseGate {
    /// A gate with no use, not dead.
    pub fn new() -> UseGate {
        UseGate::default()
    }

    /// Take a use unless the inode is being evicted.
    pub fn try_use(&self) -> bool {
        let mut s = self.0.load(Ordering::Acquire);
        loop {
            if s & DEAD != 0 {
                return false;
            }
            match self
                .0
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Take one more use (the caller holds one already).
    pub fn add_use(&self) {
        let before = self.0.fetch_add(1, Ordering::AcqRel);
        debug_assert!(before & !DEAD > 0, "a use added without one held");
    }

    /// Drop a use.
    pub fn unuse(&self) {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before & !DEAD > 0, "use count underflow");
    }

    /// Mark dead for eviction if no use is held and `also` agrees (asked once no new use
    /// can start). On `false` the gate is as before.
    pub fn try_kill(&self, also: impl FnOnce() -> bool) -> bool {
        if self
            .0
            .compare_exchange(0, DEAD, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if !also() {
            self.0.store(0, Ordering::Release);
            return false;
        }
        true
    }

    /// Whether the inode was marked dead.
    pub fn is_dead(&self) -> bool {
        self.0.load(Ordering::Acquire) & DEAD != 0
    }
}
