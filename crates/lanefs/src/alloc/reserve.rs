//! ext4's reserved clusters (`s_resv_clusters`): blocks that file data may not take, kept
//! for the metadata a full file system still needs. Writing into preallocated
//! (unwritten) space splits extents, and a split may need a new extent-tree block: with
//! every block given to data, a write into space `fallocate` already reserved would
//! fail with ENOSPC. So data allocations (writes, fallocate) stop `blocks` short of
//! full, and metadata allocations (extent-tree, xattr and other single blocks) may use
//! the rest. ext4 reserves 2% of the blocks or 4096, whichever is fewer, on an image with
//! extents; so does lanefs. `statfs` leaves them out of the available count, as ext4's.
//!
//! The check reads no shared counter on the common path: the free count is the sum of
//! the groups' counters, taken again only once this thread has allocated a sixteenth of
//! the room the last sum left above the reserve (so far from full a sum is rare, and
//! near full every data allocation sums, as ext4's percpu counter does near its limit).
//! Several threads may each spend their sixteenth before one sums again: the reserve is
//! approximate by that much, as ext4's is by its counter's batch.

use super::Allocator;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The reserve of an allocator, and the room above it at the last sum.
#[derive(Debug, Default)]
pub struct Reserve {
    /// Blocks data may not take.
    pub blocks: u64,
    /// Free blocks above `blocks` at the last sum.
    room: AtomicU64,
}

thread_local! {
    /// Data blocks this thread allocated since it last summed the groups' counters.
    static SPENT: Cell<u64> = const { Cell::new(0) };
}

/// ext4's default reserve for an image of `blocks` blocks: 2% of them or 4096, whichever
/// is fewer (ext4_calculate_resv_clusters); none without extents.
pub fn default_reserve(blocks: u64, extents: bool) -> u64 {
    if extents {
        (blocks / 50).min(4096)
    } else {
        0
    }
}

impl Reserve {
    /// A reserve of `blocks` blocks.
    pub fn new(blocks: u64) -> Reserve {
        Reserve {
            blocks,
            // The first check sums.
            room: AtomicU64::new(0),
        }
    }
}

impl Allocator {
    /// The same allocator keeping `blocks` blocks from file data.
    pub fn with_reserve(mut self, blocks: u64) -> Self {
        self.reserve = Reserve::new(blocks);
        self
    }

    /// The blocks kept from file data.
    pub fn reserved_blocks(&self) -> u64 {
        self.reserve.blocks
    }

    /// Whether `n` more data blocks leave the reserve free.
    pub(super) fn data_may_take(&self, n: u64) -> bool {
        let r = &self.reserve;
        if r.blocks == 0 {
            return true;
        }
        let spent = SPENT.with(|s| s.get()) + n;
        if spent < r.room.load(Ordering::Relaxed) / 16 {
            SPENT.with(|s| s.set(spent));
            return true;
        }
        let room = self.free_blocks().saturating_sub(r.blocks);
        r.room.store(room, Ordering::Relaxed);
        SPENT.with(|s| s.set(0));
        n <= room
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_two_percent_at_most_4096() {
        assert_eq!(default_reserve(1 << 20, true), 4096);
        assert_eq!(default_reserve(100_000, true), 2000);
        assert_eq!(default_reserve(1 << 20, false), 0);
    }
}
