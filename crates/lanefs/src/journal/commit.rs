//! The commit (steps 1 to 4 of the module documentation): transaction T closed and
//! its buffers frozen, T+1 opened, T's blocks copied, sealed and logged (or written home
//! without a log), and T's copies made the newest committed ones.

use super::{CommitState, Journal, OrderedData, Transaction};
use crate::buf::Buf;
use crate::disk::seal::Seal;
use crate::error::Result;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One block's copy as a commit logs it, and its buffer.
pub(super) type Snapshot = (Box<[u8]>, Arc<Buf>);

/// What the pause takes from a closed transaction: its buffers, each marked frozen, with
/// the seal to stamp on its copy; the blocks it revoked; the objects whose data it
/// ordered.
struct Closed {
    frozen: Vec<(Arc<Buf>, Seal)>,
    revoked: Vec<u64>,
    ordered: Vec<Arc<dyn OrderedData>>,
}

impl Journal {
    /// Make transaction `tid` (and everything before it) durable. Concurrent callers
    /// share one commit (group commit): whoever gets the commit lock first commits the
    /// running transaction, the others find it done. Returns whether this call committed
    /// (so every write the caller made before calling is behind its flushes).
    pub fn commit_upto(&self, tid: u64) -> Result<bool> {
        if self.committed_tid() >= tid {
            self.check_aborted()?;
            return Ok(false);
        }
        let mut cs = self.commit.lock();
        self.check_aborted()?;
        if self.committed_tid() >= tid {
            return Ok(false);
        }
        let r = self.commit_locked(&mut cs);
        if let Err(e) = &r {
            self.abort(e);
        }
        r.map(|()| true)
    }

    /// Commit the running transaction.
    pub fn commit_running(&self) -> Result<()> {
        self.commit_upto(self.running_tid()).map(|_| ())
    }

    /// Commit the running transaction T, the commit lock held (`cs`), in the four steps
    /// of the module documentation. An error leaves the caller to abort the journal.
    fn commit_locked(&self, cs: &mut CommitState) -> Result<()> {
        let tid = self.running_tid();
        // Transactions commit one at a time, in order: the one before the running one is
        // the last committed (the commit lock is held).
        debug_assert_eq!(cs.last_committed + 1, tid, "commit of {tid} out of order");
        debug_assert_eq!(self.committed_tid(), cs.last_committed);
        let t = self.slot(tid);
        debug_assert_eq!(t.tid.load(Ordering::Acquire), tid, "slot holds another tid");
        // 1. Lock T and wait for its handles.
        self.close_handles(t, tid);
        // 2. Mark T's blocks frozen, then open T+1 in the other slot; copy the blocks.
        let Closed {
            frozen,
            mut revoked,
            ordered,
        } = self.freeze(cs, t);
        self.open_next(tid);
        let (mut snaps, seals) = self.copy_frozen(cs, frozen, tid);
        // 3. Checksums sealed once per commit (on the copies, after the pause), ordered
        // data, then the log. A seal's crc of all but a leaf's tail gives the log's
        // checksum of the block without a second pass (`jbd2::block_csum_after`).
        let mut known = vec![None; snaps.len()];
        for (i, seal) in seals {
            known[i] = seal.apply(&mut snaps[i].0);
        }
        for i in &ordered {
            i.write_ordered(&*self.dev, self.bs)?;
        }
        revoked.sort_unstable();
        revoked.dedup();
        // Replay drops every copy of a block logged in a transaction that revokes it: a
        // block both logged and revoked here would lose this transaction's copy in a
        // crash. A freed metadata block is forgotten (not logged) and stays busy, never
        // reused as metadata, until this commit.
        debug_assert!(
            snaps
                .iter()
                .all(|(_, b)| revoked.binary_search(&b.blk).is_err()),
            "transaction {tid} logs a block it revokes"
        );
        if cs.log.is_some() {
            if !snaps.is_empty() || !revoked.is_empty() {
                self.write_log(cs, tid, &snaps, &known, &revoked)?;
            } else {
                // Nothing to log, but a caller (fsync) counts on a flush after its writes.
                self.flush()?;
            }
        }
        // 4. Committed.
        self.mark_committed(cs, tid, snaps, &revoked)
    }

    /// Step 1: lock T's gate (handle starts now wait at it) and wait for T's open
    /// handles to stop, then format T's log items (staged inodes copied into their table
    /// blocks) and run the hook before commit (the allocators' seals). No handle of T is
    /// open from here on, and none joins it.
    fn close_handles(&self, t: &Transaction, tid: u64) {
        t.gate.lock();
        {
            let mut g = self.gate.lock();
            while !t.gate.drained() {
                self.gate_cv
                    .wait_for(&mut g, std::time::Duration::from_millis(10));
            }
        }
        for l in &t.items {
            let items = std::mem::take(&mut *l.lock());
            for i in items {
                i.format(tid);
            }
        }
        if let Some(f) = self.before_commit.get() {
            f();
        }
        // Formatting and the hook change buffers, never through a handle of T.
        debug_assert!(
            t.gate.drained(),
            "a handle joined transaction {tid} while it closed"
        );
    }

    /// Step 2, the pause: mark T's buffers frozen (each with the seal to stamp on its
    /// copy; a forgotten buffer is not logged) and take its revoke and ordered-data
    /// lists, leaving T's lists empty for the transaction that reuses the slot. A block's
    /// bytes at this pause are what T logs: the copy is taken after T+1 opened, by the
    /// commit or by the block's first writer in T+1, whichever comes first (jbd2's
    /// frozen data), so handles wait only for the marks. The copies count against the
    /// buffer cache's limit from before they are taken; the pool's memory is reused
    /// first.
    fn freeze(&self, cs: &CommitState, t: &Transaction) -> Closed {
        let n = t.nbufs.load(Ordering::Relaxed);
        self.bufs.reserve_copies(cs.cp.len() + cs.pool.len().max(n));
        let mut frozen: Vec<(Arc<Buf>, Seal)> = Vec::with_capacity(n);
        for l in &t.lists {
            let list = std::mem::take(&mut *l.lock());
            for b in list {
                if !b.forgotten.load(Ordering::Acquire) {
                    b.freeze();
                    let seal = b.seal();
                    frozen.push((b, seal));
                }
            }
        }
        t.nbufs.store(0, Ordering::Relaxed);
        // Every buffer T listed was counted once: no more are frozen than were listed.
        debug_assert!(frozen.len() <= n, "{} frozen of {n} listed", frozen.len());
        let revoked = std::mem::take(&mut *t.revoked.lock());
        let ordered = std::mem::take(&mut *t.ordered.lock());
        self.counters
            .handles
            .fetch_add(t.gate.started(), Ordering::Relaxed);
        Closed {
            frozen,
            revoked,
            ordered,
        }
    }

    /// The end of the pause: open T+1 in the other slot (free: T-1 committed before T)
    /// and let the handles waiting at the gate in. Only a commit moves the running
    /// transaction, under the commit lock its caller holds.
    fn open_next(&self, tid: u64) {
        let next = self.slot(tid + 1);
        // The other slot holds T-1, committed before T: it is free for T+1, empty.
        debug_assert_eq!(
            next.tid.load(Ordering::Acquire),
            tid - 1,
            "slot of {tid}'s successor"
        );
        debug_assert_eq!(
            next.nbufs.load(Ordering::Relaxed),
            0,
            "transaction {} left buffers listed",
            tid - 1
        );
        next.tid.store(tid + 1, Ordering::Release);
        // Its count so far belongs to T-1, already added.
        next.gate.reset_started();
        next.gate.unlock();
        debug_assert_eq!(self.running.load(Ordering::Acquire), tid);
        self.running.store(tid + 1, Ordering::Release);
        self.wake();
    }

    /// Copy every frozen block, in block order (the log's), before anything that can
    /// fail; copies reuse the pool's memory. Returns the copies with their buffers, and
    /// for each sealed copy its index and seal.
    fn copy_frozen(
        &self,
        cs: &mut CommitState,
        mut frozen: Vec<(Arc<Buf>, Seal)>,
        tid: u64,
    ) -> (Vec<Snapshot>, Vec<(usize, Seal)>) {
        frozen.sort_unstable_by_key(|f| f.0.blk);
        debug_assert!(
            frozen.windows(2).all(|w| w[0].0.blk != w[1].0.blk),
            "a block listed twice in transaction {tid}"
        );
        // A block listed twice (a bug the assertion names) is still copied once.
        frozen.dedup_by_key(|f| f.0.blk);
        let mut snaps: Vec<Snapshot> = Vec::with_capacity(frozen.len());
        // Sized up front: grown by doubling, these vectors of a large transaction took
        // fresh pages at every step (a tenth of the commit thread's samples).
        let mut seals = Vec::with_capacity(frozen.len());
        for (b, seal) in frozen {
            let (copy, unused) = b.frozen_copy(cs.pool.pop());
            if let Some(u) = unused {
                cs.pool.push(u);
            }
            if seal != Seal::None {
                seals.push((snaps.len(), seal));
            }
            snaps.push((copy, b));
        }
        // The copies being committed count against the buffer cache's limit too.
        self.bufs
            .set_copies(cs.cp.len() + cs.pool.len() + snaps.len());
        (snaps, seals)
    }

    /// Step 4: T is committed. Its copies join the checkpoint set (replacing older
    /// copies of their blocks, recycled), blocks it revoked leave it, the set is
    /// checkpointed when due, and the frees T made become allocatable (`on_commit`).
    fn mark_committed(
        &self,
        cs: &mut CommitState,
        tid: u64,
        snaps: Vec<Snapshot>,
        revoked: &[u64],
    ) -> Result<()> {
        for r in revoked {
            cs.cp.remove(r);
        }
        for (data, b) in snaps {
            if let Some((old, _)) = cs.cp.insert(b.blk, (data, b)) {
                self.recycle(cs, old);
            }
        }
        // T logged none of the blocks it revoked: none is in the set to go home.
        debug_assert!(
            revoked.iter().all(|r| !cs.cp.contains_key(r)),
            "transaction {tid}: a revoked block is in the checkpoint set"
        );
        cs.last_committed = tid;
        // Without a log, home at once; with one, when the blocks pinned until checkpoint
        // (and their committed copies) pass half the buffer cache's limit.
        self.bufs.set_copies(cs.cp.len() + cs.pool.len());
        if cs.log.is_none() || self.bufs.pinned_over_half() {
            self.checkpoint_locked(cs)?;
        }
        self.committed.store(tid, Ordering::Release);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = self.on_commit.get() {
            f(tid);
        }
        Ok(())
    }
}
