//! Checkpoint: the committed copies written home and the log emptied (its tail moved to
//! its head); `sync`, which commits and checkpoints; and the empty log of a clean
//! unmount.

use super::{CommitState, Journal};
use crate::error::Result;
use std::sync::atomic::Ordering;

impl Journal {
    /// Write every committed copy home, flush, and empty the log (tail = head).
    pub(super) fn checkpoint_locked(&self, cs: &mut CommitState) -> Result<()> {
        let bs = self.bs as u64;
        let mut run: Vec<&[u8]> = Vec::new();
        let mut run_start = 0u64;
        for (&blk, (data, _)) in &cs.cp {
            if !run.is_empty() && run_start + run.len() as u64 != blk {
                self.dev.write_gather_at(run_start * bs, &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = blk;
            }
            run.push(data);
        }
        self.dev.write_gather_at(run_start * bs, &run)?;
        self.flush()?;
        let upto = cs.last_committed;
        let (head, seq) = (cs.head, cs.seq);
        if let Some(log) = cs.log.as_mut() {
            log.js.set_start(head, seq);
            log.write_super(&*self.dev)?;
            self.flush()?;
            self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        }
        cs.tail = head;
        for (_, (data, b)) in std::mem::take(&mut cs.cp) {
            self.bufs.clean_if_checkpointed(&b, upto);
            self.recycle(cs, data);
        }
        self.bufs.set_copies(cs.pool.len());
        Ok(())
    }

    /// Keep a copy no longer needed for the next snapshots, up to two transactions' worth.
    /// (With one, every other commit of full transactions allocated a transaction's copies
    /// afresh, page faults and all, and every checkpoint freed as many: a tenth of the
    /// commit thread's time in a two-thread mdtest of 400,000 files.)
    pub(super) fn recycle(&self, cs: &mut CommitState, copy: Box<[u8]>) {
        debug_assert_eq!(copy.len(), self.bs, "a recycled copy is not a block");
        if cs.pool.len() < 2 * self.max_tx {
            cs.pool.push(copy);
        }
    }

    /// Commit the running transaction and checkpoint everything (sync).
    pub fn sync(&self) -> Result<()> {
        self.commit_running()?;
        let mut cs = self.commit.lock();
        self.check_aborted()?;
        let r = self.checkpoint_locked(&mut cs);
        if let Err(e) = &r {
            self.abort(e);
        }
        r
    }

    /// After a final `sync`: mark the log empty (s_start = 0) for a clean unmount. With
    /// `wipe`, the log's blocks are zeroed and the sequence starts again at 1, as mkfs
    /// leaves a journal: nothing of how the mount's transactions were batched remains
    /// (a reproducible build's unmount).
    pub fn mark_empty(&self, wipe: bool) -> Result<()> {
        let mut cs = self.commit.lock();
        self.check_aborted()?;
        let mut next = cs.seq;
        if let Some(log) = cs.log.as_mut() {
            if wipe {
                log.wipe(&*self.dev)?;
                next = 1;
            }
            log.js.set_start(0, next);
            log.write_super(&*self.dev)?;
        }
        cs.seq = next;
        Ok(())
    }
}
