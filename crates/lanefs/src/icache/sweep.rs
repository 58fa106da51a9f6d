//! Eviction: the CLOCK sweep that keeps the cache under its limit (one sweeper at a time,
//! helped past a sixteenth over), deciding on each entry through its use gate, and the
//! deferred drops of what a `bucket` table unlinked, flushed when the cache goes.

use super::bucket::Bucket;
use super::table::Table;
use super::{epoch, gate_switch, ICache, Ordering, Slot};

/// The sweep stops once the cache is below this share of its limit (in 1/8ths).
const SWEEP_TARGET_EIGHTHS: u64 = 7;

/// How many buckets ahead of the hand a sweep asks for the first inode's lines.
const SWEEP_AHEAD: usize = 8;
/// Victims a sweep hands to one deferred drop ([`Bucket::retire_all`]), at least: a small
/// vector (one of a whole sweep's victims, tens of thousands, took fresh pages as it grew:
/// 1.4 % of a 2,000,000-file create in page faults), and a bounded drop for whichever
/// thread's pin runs it (an epoch collect runs up to 8 bags of 64 deferred drops).
const RELEASE_BATCH: usize = 64;

/// Entries a sweep unlinked and has not handed to the epoch yet; dropping it hands them
/// over too (a panic in the middle of a sweep does not leak them).
struct Victims(Vec<usize>);

impl Victims {
    /// Hand the entries so far to one deferred drop.
    fn retire(&mut self) {
        Bucket::retire_all(std::mem::replace(
            &mut self.0,
            Vec::with_capacity(RELEASE_BATCH),
        ));
    }
}

impl Drop for Victims {
    fn drop(&mut self) {
        Bucket::retire_all(std::mem::take(&mut self.0));
    }
}

impl ICache {
    /// Sweep if the cache is over its limit (and its floor) and nobody else is sweeping.
    pub(super) fn maybe_sweep(&self) {
        let over = self.limit.max(self.floor.load(Ordering::Relaxed));
        let bytes = self.charged.approx_bytes();
        if bytes <= over {
            return;
        }
        if self.sweeping.swap(true, Ordering::Acquire) {
            // Someone else is sweeping. Past a sixteenth over, help (the kernel's direct
            // reclaim): a slow or descheduled sweeper must not let the other threads'
            // inserts run the cache past its limit without end.
            if bytes > over + over / 16 {
                self.sweep();
            }
            return;
        }
        let reached = self.sweep();
        // The sweep could not get below its target: what is left is in use. Sweep again
        // only once another 1/16 of the limit has been charged, not at every insert. (A
        // sweep that got there but was outrun by other threads' inserts sets no floor.)
        let after = self.charged.approx_bytes();
        let floor = if !reached && after > self.limit {
            after + self.limit / 16
        } else {
            0
        };
        self.floor.store(floor, Ordering::Relaxed);
        self.sweeping.store(false, Ordering::Release);
        if floor != 0 {
            // Some of what is left waits for a commit (staged or dirty inodes).
            self.pinned.store(true, Ordering::Release);
            if let Some(w) = self.waker.get() {
                w();
            }
        }
    }

    /// CLOCK: from the hand, give referenced inodes a second chance and evict the
    /// others that can go, until below 7/8 of the limit or two full turns. Returns
    /// whether it got below.
    fn sweep(&self) -> bool {
        let target = self.limit / 8 * SWEEP_TARGET_EIGHTHS;
        let reached = std::cell::Cell::new(false);
        let below = || {
            let b = self.charged.approx_bytes() <= target;
            reached.set(reached.get() | b);
            b
        };
        match &self.table {
            Table::Bucket(b) => {
                let n = b.len();
                let mut victims = Victims(Vec::with_capacity(RELEASE_BATCH));
                for _ in 0..2 * n {
                    if below() {
                        break;
                    }
                    let i = self.hand.fetch_add(1, Ordering::Relaxed) % n;
                    b[(i + SWEEP_AHEAD) % n].prefetch_head();
                    let bk = &b[i];
                    if bk.head.get() == 0 {
                        continue;
                    }
                    {
                        let _g = bk.lock.lock();
                        let mut pred = &bk.head;
                        loop {
                            let v = pred.get();
                            if v == 0 {
                                break;
                            }
                            if self.evict(&bk.slot_locked(v)) {
                                victims.0.push(bk.unlink_keep_locked(pred, v));
                            } else {
                                pred = bk.next_locked(v);
                            }
                        }
                    }
                    // Outside the bucket's lock: the flush may run other drops.
                    if victims.0.len() >= RELEASE_BATCH {
                        victims.retire();
                    }
                }
            }
            Table::Global(m) => {
                for _ in 0..2 {
                    if below() {
                        break;
                    }
                    m.lock().retain(|_, s| !self.evict(s));
                }
            }
            Table::Papaya(m) => {
                let m = m.pin();
                for _ in 0..2 {
                    if below() {
                        break;
                    }
                    let mut victims = Vec::new();
                    for (k, s) in m.iter() {
                        if below() {
                            break;
                        }
                        if self.evict(s) {
                            victims.push((*k, s.clone()));
                        }
                    }
                    for (k, s) in victims {
                        // Marked dead: no lookup takes it; a create may have replaced it
                        // meanwhile (a freed inode's number reused), then it is gone.
                        let _ = m.remove_if(&k, |_, cur| cur.same(&s));
                    }
                }
            }
        }
        below() || reached.get()
    }

    /// Decide on one entry during a sweep: whether it is evicted (it is then marked
    /// dead and its charge dropped; the caller removes it from the table).
    fn evict(&self, s: &Slot) -> bool {
        let Slot::Ready(i) = s else { return false };
        self.inspections.fetch_add(1, Ordering::Relaxed);
        let c = &i.cache;
        if c.referenced.swap(false, Ordering::Relaxed) {
            return false;
        }
        gate_switch();
        if !c.gate.try_kill(|| i.evictable()) {
            return false;
        }
        self.uncharge(i);
        self.evictions.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// Rounds of pin-and-flush that [`ICache`]'s drop gives crossbeam-epoch: each moves this
/// thread's deferred drops to the global queue, advances the epoch when no other thread is
/// pinned, and runs up to 8 expired batches of 64.
const DROP_FLUSH_ROUNDS: usize = 256;

impl Drop for ICache {
    /// The kernel's `rcu_barrier` at unmount: an inode a bucket table removed or evicted is
    /// dropped through the epoch, after the readers that might stand on it. Its mapping
    /// holds a realtime file's data device, whose exclusive claim (`flock`) must not
    /// outlive the unmount (a remount found the device "in use by another lanefs"), so
    /// the drops that can run now run before the file system is gone.
    fn drop(&mut self) {
        if matches!(self.table, Table::Bucket(_)) {
            for _ in 0..DROP_FLUSH_ROUNDS {
                epoch::pin().flush();
            }
        }
    }
}
