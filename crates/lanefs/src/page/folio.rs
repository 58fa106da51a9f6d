//! A folio: a naturally aligned run of 2^order file blocks cached as one unit (the
//! kernel's `struct folio`), with one lock over its bytes and a dirty bit per block
//! (iomap's per-block state: a partial write of a large folio writes back only its dirty
//! blocks).
//!
//! A folio is uptodate from the moment it is in its file's index: read folios are filled
//! from the device before they are inserted, and a write creates folios only inside the
//! blocks it covers (reading first the edge blocks it covers in part, when they hold
//! data). So no folio is ever half-read, and there is no per-block uptodate state.

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, FOLIO};
use std::sync::{Arc, Weak};

/// Largest folio order: 64 blocks, so a folio's dirty blocks fit one 64-bit word.
pub const MAX_ORDER: u8 = 6;

/// A folio's bytes and, per block, the physical block it is written to (0: not known,
/// set by the write that dirties the block).
pub struct FolioData {
    /// The blocks' bytes, back to back.
    pub bytes: Box<[u8]>,
    /// Physical block of each block.
    pub pblk: Box<[u64]>,
}

/// What a folio's memory and dirty blocks are counted in: the page cache's totals.
pub(crate) trait Charge: Send + Sync {
    /// `bytes` left the cache.
    fn uncharge(&self, bytes: u64);
    /// `blocks` became dirty (positive) or clean (negative).
    fn dirtied(&self, blocks: i64);
}

/// One cached run of file blocks.
pub struct Folio {
    /// First block (a multiple of 2^order).
    pub index: u64,
    /// log2 of the blocks it holds.
    pub order: u8,
    data: RwLock<FolioData>,
    /// One bit per block changed since it was last written back. Set under the write lock;
    /// cleared by write-back under the read lock (which excludes writers).
    dirty: AtomicU64,
    /// Read since the CLOCK hand last passed.
    referenced: AtomicBool,
    /// Out of its file's index (evicted, truncated or split): no write may go to it.
    /// Set under the write lock.
    removed: AtomicBool,
    /// The file's mapping, for the eviction sweep.
    pub(crate) owner: Weak<super::mapping::Mapping>,
    charge: Arc<dyn Charge>,
    /// Bytes still charged: all of it while cached, the struct alone once its data went.
    bytes_charged: AtomicU64,
}

impl Folio {
    /// A folio over blocks `index..index + 2^order` holding `data`, charged to `charge`
    /// (the caller has charged `bytes_charged`).
    pub(crate) fn new(
        index: u64,
        order: u8,
        data: FolioData,
        owner: Weak<super::mapping::Mapping>,
        charge: Arc<dyn Charge>,
        bytes_charged: u64,
    ) -> Folio {
        debug_assert!(order <= MAX_ORDER);
        debug_assert!(
            index.is_multiple_of(1 << order),
            "folio {index} not aligned to its order {order}"
        );
        debug_assert_eq!(data.pblk.len(), 1 << order);
        Folio {
            index,
            order,
            data: RwLock::new(&FOLIO, data),
            dirty: AtomicU64::new(0),
            referenced: AtomicBool::new(true),
            removed: AtomicBool::new(false),
            owner,
            charge,
            bytes_charged: AtomicU64::new(bytes_charged),
        }
    }

    /// Blocks it holds.
    pub fn blocks(&self) -> u64 {
        1 << self.order
    }

    /// Shared access to the bytes (readers, write-back).
    pub fn read(&self) -> RwLockReadGuard<'_, FolioData> {
        self.data.read()
    }

    /// Exclusive access (writers, truncation, eviction).
    pub fn write(&self) -> RwLockWriteGuard<'_, FolioData> {
        self.data.write()
    }

    /// Exclusive access if nobody holds the folio (the eviction sweep).
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, FolioData>> {
        self.data.try_write()
    }

    /// The dirty blocks, a bit each (bit 0: block `index`).
    pub fn dirty_mask(&self) -> u64 {
        self.dirty.load(Ordering::Acquire)
    }

    /// Mark the blocks of `mask` dirty (write lock held); returns the bits newly set.
    pub fn mark_dirty(&self, _held: &RwLockWriteGuard<'_, FolioData>, mask: u64) -> u64 {
        // A removed folio's bytes are gone: a block dirtied there would never be written.
        debug_assert!(
            !self.is_removed(),
            "folio {} dirtied after removal",
            self.index
        );
        debug_assert!(
            mask != 0 && (self.order == MAX_ORDER || mask >> self.blocks() == 0),
            "dirty mask {mask:#x} outside folio {} of {} blocks",
            self.index,
            self.blocks()
        );
        let old = self.dirty.fetch_or(mask, Ordering::AcqRel);
        let new = mask & !old;
        if new != 0 {
            self.charge.dirtied(i64::from(new.count_ones()));
        }
        new
    }

    /// Clear the dirty bits of `mask` (read lock held by write-back, or the write lock);
    /// returns the bits that were set.
    pub fn clear_dirty(&self, mask: u64) -> u64 {
        let was = self.dirty.fetch_and(!mask, Ordering::AcqRel) & mask;
        if was != 0 {
            self.charge.dirtied(-i64::from(was.count_ones()));
        }
        was
    }

    /// Record a read hit (CLOCK's reference bit; no store when already set).
    pub fn touch(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// Clear the reference bit; whether it was set (the sweep's second chance).
    pub fn take_referenced(&self) -> bool {
        self.referenced.swap(false, Ordering::Relaxed)
    }

    /// Whether the folio left its file's index.
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Take the folio out of use (write lock held, after it left its index): later readers
    /// and writers look it up again, and its data's memory goes back now, not when the last
    /// pinned reader lets go of the folio.
    pub fn set_removed(&self, held: &mut RwLockWriteGuard<'_, FolioData>) {
        debug_assert!(!self.is_removed(), "folio {} removed twice", self.index);
        // Its bytes go now: a dirty block would be lost.
        debug_assert_eq!(self.dirty_mask(), 0, "dirty folio {} removed", self.index);
        self.removed.store(true, Ordering::Release);
        let data = std::mem::take(&mut held.bytes);
        let pblk = std::mem::take(&mut held.pblk);
        let bytes = data.len() as u64 + pblk.len() as u64 * 8;
        self.bytes_charged.fetch_sub(bytes, Ordering::Relaxed);
        self.charge.uncharge(bytes);
    }
}

impl Drop for Folio {
    fn drop(&mut self) {
        let dirty = *self.dirty.get_mut();
        if dirty != 0 {
            self.charge.dirtied(-i64::from(dirty.count_ones()));
        }
        self.charge.uncharge(*self.bytes_charged.get_mut());
    }
}

/// A mask of `n` dirty bits from bit `from` (`n` up to 64).
pub fn mask(from: u64, n: u64) -> u64 {
    debug_assert!(from + n <= 64);
    if n == 64 {
        u64::MAX
    } else {
        ((1u64 << n) - 1) << from
    }
}

#[cfg(test)]
mod tests {
    use super::mask;

    #[test]
    fn masks() {
        assert_eq!(mask(0, 1), 1);
        assert_eq!(mask(3, 2), 0b11000);
        assert_eq!(mask(0, 64), u64::MAX);
        assert_eq!(mask(63, 1), 1 << 63);
    }
}
