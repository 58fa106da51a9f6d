//! The three tables' primitive operations (find, insert or replace, remove, visit), each
//! as its kind does it: the `bucket` table's chains ([`Bucket`]) with a lock per bucket,
//! the `global` table's one lock, the `papaya` map without a lock.

use super::bucket::{link_of, Bucket};
use super::{ICache, Slot};
use crate::numhash::{fib_bits, NumHash};
use crate::sync::{Mutex, ICACHE_GLOBAL};
use crate::types::IcachePolicy;
use std::collections::HashMap;

/// The table of one kind ([`IcachePolicy`]).
pub(super) enum Table {
    Bucket(Box<[Bucket]>),
    Global(Mutex<HashMap<u64, Slot, NumHash>>),
    Papaya(papaya::HashMap<u64, Slot, NumHash>),
}

/// Bytes of limit per bucket when sizing the bucket array: about 0.4 inodes per bucket at
/// the 648 bytes an empty file's inode is charged (`docs/bench.md`, `fsmark`), so a lookup that
/// misses (an evicted inode coming back) mostly finds an empty chain instead of walking
/// cold entries. 1,024 (1.6 per bucket) cost a remove in a 2,000,000-file directory 0.6
/// us of chain walking; the array is 24 bytes a bucket, about a tenth of the limit.
const SIZING_BYTES: u64 = 256;
/// Consecutive inode numbers go to adjacent buckets in runs of `1 << RUN_BITS` (16: the
/// inodes of one 4 KiB table block of 256-byte inodes, 384 bytes of buckets). Creates
/// take numbers in order and a directory's files are often removed in the order they
/// were made, so the next operation's bucket head is mostly on a line the last one
/// loaded; with every number hashed alone, each lookup's bucket head was a miss into an
/// array of 4 MiB at the default limit.
const RUN_BITS: u32 = 4;

impl Table {
    /// An empty table of kind `policy`; a `bucket` table gets a power of two of buckets
    /// sized from the cache's `limit` (`SIZING_BYTES` of limit each).
    pub(super) fn new(policy: IcachePolicy, limit: u64) -> Table {
        match policy {
            IcachePolicy::Bucket => {
                let n = (limit / SIZING_BYTES)
                    .next_power_of_two()
                    .clamp(1024, 1 << 22);
                // What `ICache::bucket` needs: a power of two, more than a run of buckets.
                debug_assert!(n.is_power_of_two() && n.trailing_zeros() > RUN_BITS);
                Table::Bucket((0..n).map(|_| Bucket::new()).collect())
            }
            IcachePolicy::Global => {
                Table::Global(Mutex::new(&ICACHE_GLOBAL, HashMap::with_hasher(NumHash)))
            }
            IcachePolicy::Papaya => Table::Papaya(papaya::HashMap::with_hasher(NumHash)),
        }
    }
}

impl ICache {
    /// The bucket of `buckets` (a power of two of them) that holds `ino`.
    pub(super) fn bucket(buckets: &[Bucket], ino: u64) -> &Bucket {
        // A run of `1 << RUN_BITS` consecutive numbers sits in as many adjacent buckets,
        // and runs spread by Fibonacci hashing, which takes the product's top bits: its
        // middle bits repeat for runs of consecutive numbers (bits 32.. filled a seventh
        // of 65,536 buckets with 250,000 consecutive inodes, 27 to a chain).
        debug_assert!(buckets.len().is_power_of_two());
        let bits = buckets.len().trailing_zeros();
        debug_assert!(bits > RUN_BITS);
        let run = fib_bits(ino >> RUN_BITS, bits - RUN_BITS);
        &buckets[(run << RUN_BITS) | (ino as usize & ((1 << RUN_BITS) - 1))]
    }

    /// Which bucket of the `bucket` table holds `ino` (None for the other tables): for
    /// tests that race inodes on one bucket.
    pub fn bucket_index(&self, ino: u64) -> Option<usize> {
        match &self.table {
            Table::Bucket(b) => {
                let at = Self::bucket(b, ino) as *const Bucket as usize;
                Some((at - b.as_ptr() as usize) / std::mem::size_of::<Bucket>())
            }
            Table::Global(_) | Table::Papaya(_) => None,
        }
    }

    /// The entry for `ino`, read without a lock (bucket, papaya) or under the one lock.
    pub(super) fn find(&self, ino: u64) -> Option<Slot> {
        match &self.table {
            Table::Bucket(b) => Self::bucket(b, ino).find(ino),
            Table::Global(m) => m.lock().get(&ino).cloned(),
            Table::Papaya(m) => m.pin().get(&ino).cloned(),
        }
    }

    /// Insert `slot` for `ino` if there is no entry, or if `replace` accepts the one
    /// there (returned); otherwise hand back the entry found.
    pub(super) fn put(
        &self,
        ino: u64,
        slot: Slot,
        replace: impl Fn(&Slot) -> bool,
    ) -> Result<Option<Slot>, Slot> {
        match &self.table {
            Table::Bucket(b) => {
                let bk = Self::bucket(b, ino);
                let _g = bk.lock.lock();
                match bk.find_locked(ino) {
                    None => {
                        bk.push_locked(slot);
                        Ok(None)
                    }
                    Some((pred, v)) => {
                        let cur = bk.slot_locked(v);
                        if !replace(&cur) {
                            return Err(cur);
                        }
                        bk.replace_locked(pred, v, slot);
                        Ok(Some(cur))
                    }
                }
            }
            Table::Global(m) => {
                let mut m = m.lock();
                match m.get_mut(&ino) {
                    Some(s) if !replace(s) => Err(s.clone()),
                    Some(s) => Ok(Some(std::mem::replace(s, slot))),
                    None => {
                        m.insert(ino, slot);
                        Ok(None)
                    }
                }
            }
            Table::Papaya(m) => {
                let m = m.pin();
                loop {
                    match m.try_insert(ino, slot.clone()) {
                        Ok(_) => return Ok(None),
                        Err(e) if !replace(e.current) => return Err(e.current.clone()),
                        Err(e) => {
                            let cur = e.current.clone();
                            let swapped = m.compute(ino, |entry| match entry {
                                Some((_, s)) if s.same(&cur) => {
                                    papaya::Operation::Insert(slot.clone())
                                }
                                _ => papaya::Operation::Abort(()),
                            });
                            if matches!(swapped, papaya::Compute::Updated { .. }) {
                                return Ok(Some(cur));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Remove `ino`'s entry if it is `which`; returns whether it was.
    pub(super) fn take(&self, ino: u64, which: &Slot) -> bool {
        match &self.table {
            Table::Bucket(b) => {
                let bk = Self::bucket(b, ino);
                let _g = bk.lock.lock();
                match bk.find_locked(ino) {
                    Some((pred, v)) if v == link_of(which) => {
                        bk.unlink_locked(pred, v);
                        true
                    }
                    _ => false,
                }
            }
            Table::Global(m) => {
                let mut m = m.lock();
                if m.get(&ino).is_some_and(|s| s.same(which)) {
                    m.remove(&ino);
                    true
                } else {
                    false
                }
            }
            Table::Papaya(m) => {
                matches!(m.pin().remove_if(&ino, |_, s| s.same(which)), Ok(Some(_)))
            }
        }
    }

    /// Call `f` on every entry of the table (under the one lock of `global`, bucket by
    /// bucket or pinned otherwise).
    pub(super) fn for_each_slot(&self, mut f: impl FnMut(&Slot)) {
        match &self.table {
            Table::Bucket(b) => {
                for bk in b.iter() {
                    bk.for_each(&mut f);
                }
            }
            Table::Global(m) => m.lock().values().for_each(f),
            Table::Papaya(m) => m.pin().values().for_each(f),
        }
    }
}
