//! ext4's reserved clusters (`s_resv_clusters`): blocks that file data may not take, kept
//! for the metadata a full file system still needs. Writing into preallocated
//! (unwritten) space splits extents, and a split may need a new extent-tree block: with
//! every block given to data, a write into space `fallocate` already reserved would
//! fail with ENOSPC. So data allocations (writes, fallocate) stop `blocks` short of
//! full, and metadata allocations (extent-tree, xattr and other single blocks) may use
//! the rest. ext4 reserves 2% of the blocks or 4096, whichever is fewer, on an image with
//! extents; so does lanefs. `statfs` leaves them out of the available count, as ext4's.
//!
//! The check sums the groups' counters only when this thread has allocated, from this
//! allocator, its share of a sixteenth of the room the last sum left above the reserve
//! (the share: that sixteenth divided among the threads that have allocated here). So
//! however many threads write, together they take at most about a sixteenth of the
//! room between sums, and far from full a sum is rare; once the room is under sixteen
//! blocks per thread every data allocation sums, as ext4's percpu counter is summed
//! near its limit. Between sums an allocation reads the room and the thread count
//! (written only at a sum and at a thread's first allocation) and its own thread's
//! count: no counter every allocation writes is shared.

use super::Allocator;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The reserve of an allocator, and the room above it at the last sum.
#[derive(Debug, Default)]
pub struct Reserve {
    /// Blocks data may not take.
    pub blocks: u64,
    /// This reserve's identity among the allocators of the process (the key of the
    /// threads' counts).
    id: u64,
    /// Free blocks above `blocks` at the last sum.
    room: AtomicU64,
    /// Threads that have allocated data here.
    threads: AtomicU32,
}

/// The next reserve's identity.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The allocators a thread keeps counts for at most (the oldest is forgotten: its next
/// allocation there sums).
const KEPT: usize = 8;

thread_local! {
    /// Per reserve this thread allocated from: (its id, data blocks allocated since this
    /// thread last summed the groups' counters for it).
    static SPENT: RefCell<Vec<(u64, u64)>> = const { RefCell::new(Vec::new()) };
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
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            // The first check sums.
            room: AtomicU64::new(0),
            threads: AtomicU32::new(0),
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

    /// How many of `n` more data blocks leave the reserve free (0: none; a request is
    /// cut to what fits, as ext4 shrinks one that does not).
    pub(super) fn data_allowance(&self, n: u64) -> u64 {
        let r = &self.reserve;
        if r.blocks == 0 {
            return n;
        }
        SPENT.with(|s| {
            let mut s = s.borrow_mut();
            let i = match s.iter().position(|&(id, _)| id == r.id) {
                Some(i) => i,
                None => {
                    if s.len() == KEPT {
                        s.remove(0);
                    }
                    r.threads.fetch_add(1, Ordering::Relaxed);
                    s.push((r.id, u64::MAX));
                    s.len() - 1
                }
            };
            let threads = u64::from(r.threads.load(Ordering::Relaxed).max(1));
            let share = r.room.load(Ordering::Relaxed) / 16 / threads;
            let spent = s[i].1.saturating_add(n);
            if spent < share {
                s[i].1 = spent;
                return n;
            }
            let room = self.free_blocks().saturating_sub(r.blocks);
            r.room.store(room, Ordering::Relaxed);
            let n = n.min(room);
            s[i].1 = n;
            n
        })
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
