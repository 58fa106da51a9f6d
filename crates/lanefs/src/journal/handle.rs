//! Handles: how one joins the running transaction (or waits for it to close, or asks
//! the commit thread to commit it), what it records (dirtied buffers, revoked blocks,
//! ordered data, log items), and how it leaves.

use super::{gate, Handle, Journal, LogItem, OrderedData, LISTS};
use crate::buf::Buf;
use crate::sync::{may_block_on, JOURNAL_COMMIT};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Journal {
    /// Ask the commit thread to commit transaction `tid` (the running one), once per
    /// transaction: the handles that go on in it while the thread gets to it must not ask
    /// again, or the thread, having taken the ask, would find it again after that commit
    /// and commit the next transaction long before it is due (2,000,000 creates committed
    /// 23 times instead of 15). False if there is no commit thread.
    fn ask_commit(&self, tid: u64) -> bool {
        let Some(kick) = self.live_kick() else {
            return false;
        };
        if self.asked.fetch_max(tid, Ordering::AcqRel) < tid {
            self.kicked.store(true, Ordering::Release);
            kick();
        }
        true
    }

    /// Wait for the commit thread to close transaction `tid`. False if it did not within
    /// a while (no thread, or it is stuck behind IO): the caller commits itself.
    fn wait_closed(&self, tid: u64) -> bool {
        let Some(kick) = self.live_kick() else {
            return false;
        };
        self.kicked.store(true, Ordering::Release);
        kick();
        let mut g = self.gate.lock();
        for _ in 0..100 {
            if self.running.load(Ordering::Acquire) != tid || self.is_aborted() {
                return true;
            }
            self.gate_cv
                .wait_for(&mut g, std::time::Duration::from_millis(10));
        }
        false
    }

    /// Start a handle (lock order: after inode locks, before group and buffer locks).
    ///
    /// A running transaction past `max_tx` buffers (a third of the log) is due: the start
    /// asks the commit thread for it and goes on in it while the thread finishes the
    /// commit before, up to `hard_tx` (half the log); past that, or with no commit
    /// thread, it waits for the transaction to close or commits it. jbd2 waits at its one
    /// limit. Measured 2026-11-28 (2,000,000 removes in one directory, one thread,
    /// transactions of a third of a 256 MiB log): handles waited at that one limit 98
    /// times, 0.69 s of a 6.2 s phase, while the commit thread wrote the transaction
    /// before; with the second limit, 56 times and 0.04 s.
    pub fn start(&self) -> Handle<'_> {
        // A start may wait for the running transaction to close or commit it itself; a
        // lock held above the commit's (a group's, a buffer's) that a handle of that
        // transaction waits for would deadlock. Checked on every start, not only on the
        // rare one that waits.
        debug_assert!(
            may_block_on(&JOURNAL_COMMIT),
            "a handle started while holding a lock ranked after `journal_commit`"
        );
        let lane = gate::my_lane();
        loop {
            let tid = self.running.load(Ordering::Acquire);
            let t = self.slot(tid);
            let n = t.nbufs.load(Ordering::Relaxed);
            if n > self.max_tx && !self.is_aborted() && (n > self.hard_tx || !self.ask_commit(tid))
            {
                // Best effort: a failed commit aborts the journal, which the operation
                // notices at its next check.
                if !self.wait_closed(tid) {
                    let _ = self.commit_upto(tid);
                }
                continue;
            }
            match t.gate.join(lane) {
                // An open gate is the running transaction's, whatever `tid` was read.
                gate::Join::Joined => {
                    let tid = t.tid.load(Ordering::Acquire);
                    // Joined through an open gate: its transaction cannot commit before
                    // this handle stops.
                    debug_assert!(
                        self.committed_tid() < tid,
                        "a handle joined transaction {tid}, already committed"
                    );
                    return Handle {
                        j: self,
                        t,
                        tid,
                        lane,
                    };
                }
                gate::Join::Refused { wake } => {
                    if wake {
                        self.wake();
                    }
                }
            }
            let mut g = self.gate.lock();
            while self.running.load(Ordering::Acquire) == tid {
                self.gate_cv
                    .wait_for(&mut g, std::time::Duration::from_millis(10));
            }
        }
    }

    /// Wake whoever waits at the gate: handle starts waiting for the next transaction,
    /// and the commit waiting for the last handle of the one it closes.
    pub(super) fn wake(&self) {
        let _g = self.gate.lock();
        self.gate_cv.notify_all();
    }
}

impl Handle<'_> {
    /// Record that `b` was modified in this transaction (logged once however often).
    pub fn dirty(&self, b: &Arc<Buf>) {
        self.j.bufs.dirty(b);
        let tid = self.tid;
        // Read first: a block every operation touches (a descriptor block) is then only
        // read, not written, by all but the first handle of the transaction.
        if b.jtid.load(Ordering::Acquire) != tid {
            let prev = b.jtid.swap(tid, Ordering::AcqRel);
            if prev != tid {
                // No handle of a later transaction runs while this one's is open.
                debug_assert!(prev < tid, "block {} listed by {prev} before {tid}", b.blk);
                let k = (b.blk as usize) % LISTS;
                self.t.lists[k].lock().push(b.clone());
                self.t.nbufs.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Record that metadata block `blk` was freed: older logged copies must never be
    /// replayed over its next use.
    pub fn revoke(&self, blk: u64) {
        debug_assert!(
            blk < self.j.dev.size() / self.j.bs as u64,
            "revoke of block {blk} past the device"
        );
        self.t.revoked.lock().push(blk);
    }

    /// Data blocks of `i` were mapped in this transaction: write its pages before the
    /// commit block (data=ordered).
    pub fn add_ordered<T: OrderedData + 'static>(&self, i: &Arc<T>) {
        let tid = self.tid;
        let slot = i.ordered_tid();
        if slot.load(Ordering::Acquire) != tid {
            let prev = slot.swap(tid, Ordering::AcqRel);
            if prev != tid {
                debug_assert!(prev < tid, "ordered data listed by {prev} before {tid}");
                self.t.ordered.lock().push(i.clone());
            }
        }
    }

    /// List `item` for formatting when this transaction commits. The caller lists an item
    /// once per transaction (it knows, under its own lock, whether it already has).
    pub fn log_item<T: LogItem + 'static>(&self, item: &Arc<T>) {
        self.t.items[self.lane % LISTS].lock().push(item.clone());
    }

    /// This handle's transaction.
    pub fn tid(&self) -> u64 {
        self.tid
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        if self.t.gate.leave(self.lane) {
            self.j.wake();
        }
    }
}
