//! What the cache charges for its inodes: bytes and inodes counted in per-thread lanes
//! and folded into shared totals a batch at a time, an inode charged when it is published
//! and recharged as it grows, and uncharged once whoever removes it.

use super::{AtomicI64, AtomicU64, ICache, Ordering};
use crate::inode::Inode;
use crate::sync::{my_lane, LANES};

/// Smallest change of an inode's size that [`ICache::recharge`] charges.
const RECHARGE_MIN: u64 = 4096;

/// Bytes and inodes charged to the cache, counted in per-thread lanes and folded into the
/// shared totals a batch at a time (the kernel's `percpu_counter`, as its `nr_inodes`): a
/// create or a removal writes its own lane's cache line, not one that every thread
/// writes. The folded totals are off by less than `LANES` batches; a batch is 1/256 of the
/// limit (at most 256 KiB), so a limit check is off by at most 1/16 of the limit, and a
/// tiny limit counts exactly.
pub(super) struct Charged {
    total: ChargeLane,
    lanes: Box<[ChargeLane]>,
    batch: i64,
    /// The highest folded byte total since mount (checked at each fold, so it is the
    /// peak the limit checks saw).
    pub(super) peak: AtomicU64,
}

/// One lane's (or the folded) bytes and inodes, alone on its cache lines. Signed: a lane
/// may give back more than it took (an inode charged on one thread, evicted on another).
#[repr(align(128))]
struct ChargeLane {
    bytes: AtomicI64,
    count: AtomicI64,
}

impl ChargeLane {
    fn new() -> ChargeLane {
        ChargeLane {
            bytes: AtomicI64::new(0),
            count: AtomicI64::new(0),
        }
    }
}

impl Charged {
    pub(super) fn new(limit: u64) -> Charged {
        Charged {
            total: ChargeLane::new(),
            lanes: (0..LANES).map(|_| ChargeLane::new()).collect(),
            batch: (limit / 256).clamp(1, 256 << 10) as i64,
            peak: AtomicU64::new(0),
        }
    }

    /// Charge (or with negative numbers uncharge) `bytes` for `count` inodes.
    pub(super) fn add(&self, bytes: i64, count: i64) {
        let l = &self.lanes[my_lane()];
        let b = l.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        l.count.fetch_add(count, Ordering::Relaxed);
        if b.abs() >= self.batch {
            let b = l.bytes.swap(0, Ordering::Relaxed);
            let c = l.count.swap(0, Ordering::Relaxed);
            let folded = self.total.bytes.fetch_add(b, Ordering::Relaxed) + b;
            self.total.count.fetch_add(c, Ordering::Relaxed);
            if b > 0 {
                self.peak.fetch_max(folded.max(0) as u64, Ordering::Relaxed);
            }
        }
    }

    /// The folded bytes: what limit checks read (one load of a line rarely written).
    pub(super) fn approx_bytes(&self) -> u64 {
        self.total.bytes.load(Ordering::Relaxed).max(0) as u64
    }

    /// Bytes and inodes, lanes included: exact when no charge is in flight.
    pub(super) fn exact(&self) -> (u64, u64) {
        let (mut b, mut c) = (
            self.total.bytes.load(Ordering::Relaxed),
            self.total.count.load(Ordering::Relaxed),
        );
        for l in self.lanes.iter() {
            b += l.bytes.load(Ordering::Relaxed);
            c += l.count.load(Ordering::Relaxed);
        }
        (b.max(0) as u64, c.max(0) as u64)
    }
}

impl ICache {
    /// Charge `i` its size now, `bytes` (its state's lock held by the caller), when it
    /// moved by more than an eighth (at least a page) since it was charged: a directory's
    /// index and digests and a file's extent map grow after the inode entered the cache.
    /// Then sweep if that took the cache over its limit.
    pub fn recharge(&self, i: &Inode, bytes: usize) {
        let new = bytes as u64;
        let old = i.cache.charge.load(Ordering::Relaxed);
        if old == 0 || new.abs_diff(old) < (old / 8).max(RECHARGE_MIN) {
            return;
        }
        // An inode uncharged meanwhile (removed, evicted) stays uncharged.
        if i.cache
            .charge
            .compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.charged.add(new as i64 - old as i64, 0);
            if new > old {
                self.maybe_sweep();
            }
        }
    }

    /// Stop counting `i` (once, whoever removes it: removal, eviction or replacement).
    pub(super) fn uncharge(&self, i: &Inode) {
        let c = i.cache.charge.swap(0, Ordering::Relaxed);
        if c > 0 {
            self.charged.add(-(c as i64), -1);
        }
    }
}
