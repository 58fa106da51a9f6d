//! Whether a buffer is still its block's cached one, for holders of a `Weak` to it that
//! take it back without the shard's lock ([`crate::buf::BufCache::get_hinted`]: a
//! directory leaf's digest keeps one).
//!
//! The race: a hinted reader upgrades its `Weak` (the buffer's strong count goes up), then
//! reads the flag; an eviction, under the shard's lock, takes out only a buffer nobody holds
//! (a strong count of 1, the map's). With no lock between them, the reader could upgrade
//! just after the eviction counted the holders and read the flag just before the eviction
//! cleared it, and go on with a buffer that has left the map: the next lookup of the block
//! reads a second buffer, and a change made to either is lost. Dekker's handshake closes
//! it: the eviction clears the flag, then counts the holders; the reader counts itself in
//! (the upgrade), then reads the flag; a `SeqCst` fence between the two steps of each. One
//! of the two fences comes first in their single total order, so either the eviction sees
//! the reader's count (it puts the flag back and evicts nothing) or the reader sees the
//! flag cleared (it drops the buffer and looks the block up under the lock, where the
//! eviction has finished). Checked by a loom model (`tests/loom_resident.rs`, run with
//! `RUSTFLAGS="--cfg loom"`).
//!
//! The kernel keeps no such hint: a directory leaf is found through the page cache's
//! lockless lookup (`filemap_get_entry` under RCU, then `folio_try_get` and a re-check that
//! the folio is still at its index), the same handshake with the folio's refcount.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, Ordering};

/// A buffer's "in its shard's map" flag.
#[derive(Debug)]
pub struct Resident(AtomicBool);

impl Resident {
    /// A flag, set or not.
    pub fn new(cached: bool) -> Resident {
        Resident(AtomicBool::new(cached))
    }

    /// Whether the buffer is in its shard's map. A plain read: for a holder, whose count
    /// keeps the buffer from eviction, only a forget (the block freed) turns it false.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Clear it as the buffer leaves the map with no eviction's check (a forget: the
    /// block was freed, and no hinted reader can want it). Shard lock held.
    pub fn clear(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    /// The reader's half, called after taking its count (a `Weak` upgraded): whether the
    /// buffer is still the cached one. `false`: drop it and look the block up.
    pub fn confirm(&self) -> bool {
        fence(Ordering::SeqCst);
        self.0.load(Ordering::Relaxed)
    }

    /// The eviction's half (shard lock held): clear the flag unless a holder besides the
    /// map counted itself in meanwhile (`holders()`, the strong count read after the
    /// fence), in which case the flag is put back. `true`: the buffer may leave the map.
    pub fn try_clear(&self, holders: impl FnOnce() -> usize) -> bool {
        self.0.store(false, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if holders() == 1 {
            return true;
        }
        self.0.store(true, Ordering::Relaxed);
        false
    }
}
