//! What the inode cache keeps in each inode besides counters: the use gate and the
//! `bucket` chain's [`Link`].
//!
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
        // Killed only with no use held: a holder's inode is never dead.
        debug_assert_eq!(before & DEAD, 0, "a use added to a dead inode");
    }

    /// Drop a use.
    pub fn unuse(&self) {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before & !DEAD > 0, "use count underflow");
        debug_assert_eq!(before & DEAD, 0, "a use dropped on a dead inode");
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
            // Nothing changes a dead gate: no use can be taken or held meanwhile.
            debug_assert_eq!(self.0.load(Ordering::Relaxed), DEAD, "a dead gate moved");
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

#[cfg(shuttle)]
use shuttle::sync::atomic::AtomicUsize as LinkAtomic;
#[cfg(not(shuttle))]
use std::sync::atomic::AtomicUsize as LinkAtomic;

/// A link of a `bucket` chain (the kernel's `hlist_bl_node` pointer): 0 at the end, else
/// a pointer from `Arc::into_raw` of the next entry, an `Inode` (low bit clear) or a
/// placeholder's `Setup` (low bit set; both are at least 8-aligned). The chain owns one
/// strong count of every entry it links. Under `cfg(shuttle)` shuttle's atomic, so its
/// scheduler can switch inside a walk.
pub struct Link {
    /// The inode number of the entry this link is in, beside the link so that a walk
    /// reads one cache line per entry.
    key: u64,
    next: LinkAtomic,
}

impl Link {
    /// The end of a chain, in the entry for inode `key`.
    pub fn new(key: u64) -> Link {
        Link {
            key,
            next: LinkAtomic::new(0),
        }
    }
    /// The inode number of the entry this link is in.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }
    pub(crate) fn get(&self) -> usize {
        self.next.load(std::sync::atomic::Ordering::Acquire)
    }
    pub(crate) fn set(&self, v: usize) {
        // A pointer to an 8-aligned entry, its low bit the placeholder tag: bits 1 and 2
        // are free.
        debug_assert_eq!(v & 0b110, 0, "link {v:#x} is no entry");
        self.next.store(v, std::sync::atomic::Ordering::Release);
    }
}
