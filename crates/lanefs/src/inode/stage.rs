//! Staged inode bytes: a store in a transaction changes only the inode's stage, and the
//! commit copies each staged inode into its table block with its checksum, once per
//! transaction (a `journal::LogItem`).

use super::Inode;
use crate::buf::{Buf, BufCache};
use crate::disk::inode::DiskInode;
use crate::error::Result;
use crate::ialloc::InodeAllocator;
use crate::journal::Handle;
use crate::sync::{Mutex, INODE_STAGE};
use std::sync::Arc;

use super::table::store_inode;

/// An inode's on-disk bytes as its last store in the running transaction left them,
/// copied into its table block once, when the transaction commits (`LogItem::format`).
/// Stores change only this copy, so operations on inodes sharing a table block do not
/// rewrite (or checksum) that block each time; the commit copies each staged inode and
/// stamps its checksum, once per transaction.
pub struct InodeStage {
    ino: u64,
    /// The checksum seed (`None`: no metadata_csum).
    seed: Option<u32>,
    data: Mutex<Staged>,
}

struct Staged {
    /// The transaction whose commit formats this stage (0: nothing staged).
    tid: u64,
    d: DiskInode,
    /// The inode's table block (dirtied in `tid`) and its offset there.
    buf: Option<Arc<Buf>>,
    off: usize,
    /// Keep the `dtime` on disk (an orphan's list link, written in place).
    keep_dtime: bool,
}

impl InodeStage {
    fn new(ino: u64, seed: Option<u32>) -> InodeStage {
        InodeStage {
            ino,
            seed,
            data: Mutex::new(
                &INODE_STAGE,
                Staged {
                    tid: 0,
                    d: DiskInode { raw: Vec::new() },
                    buf: None,
                    off: 0,
                    keep_dtime: false,
                },
            ),
        }
    }

    /// Nothing staged (checked without waiting: a stage being changed is not idle).
    pub fn idle(&self) -> bool {
        self.data.try_lock().is_some_and(|s| s.tid == 0)
    }

    /// Drop what is staged: the caller wrote the inode through to its block.
    fn cancel(&self) {
        let mut s = self.data.lock();
        s.tid = 0;
        s.buf = None;
    }

    pub(super) fn bytes(&self) -> usize {
        self.data.try_lock().map_or(0, |s| s.d.raw.capacity())
    }
}

impl crate::journal::LogItem for InodeStage {
    fn format(&self, tid: u64) {
        let mut s = self.data.lock();
        if s.tid == 0 {
            return;
        }
        debug_assert_eq!(
            s.tid, tid,
            "inode {} staged in another transaction",
            self.ino
        );
        s.tid = 0;
        let (Some(b), off) = (s.buf.take(), s.off) else {
            return;
        };
        let len = s.d.raw.len();
        let mut w = b.write_records();
        debug_assert!(
            off.is_multiple_of(len) && off + len <= w.len(),
            "inode {} staged at {off} of {len} bytes",
            self.ino
        );
        if s.keep_dtime {
            let dtime = crate::disk::le32(&w, off + crate::disk::inode::I_DTIME);
            s.d.set_dtime(dtime);
        }
        if let Some(seed) = self.seed {
            s.d.update_checksum(seed, self.ino as u32);
        }
        w[off..off + len].copy_from_slice(&s.d.raw);
        b.set_record_checked(off / len);
    }
}

/// Store inode `i` (bytes `d`) in handle `h`'s transaction: the bytes go to its stage,
/// and its table block joins the transaction at the first store of the transaction; the
/// commit copies them in with their checksum. With `keep_dtime`, the `dtime` on disk is
/// kept (an orphan's list link). A released inode is written through instead (its number
/// may be reused, by a new inode, in the same transaction).
pub fn stage_inode(
    ial: &InodeAllocator,
    bufs: &BufCache,
    h: &Handle,
    i: &Inode,
    d: &mut DiskInode,
    keep_dtime: bool,
    freed: bool,
) -> Result<()> {
    if freed {
        if let Some(stage) = i.stage.get() {
            stage.cancel();
        }
        return store_inode(ial, bufs, h, i.ino, d, keep_dtime);
    }
    let geo = ial.geo();
    let stage = i
        .stage
        .get_or_init(|| Arc::new(InodeStage::new(i.ino, geo.csum.then_some(geo.seed))));
    // Only a store changes the stage, under the inode's write lock (the caller's `d`);
    // the commit formats it while no handle is open. So what is read here holds until
    // the store below, and the table block is read without the stage's lock held.
    let tid = h.tid();
    let first = stage.data.lock().tid != tid;
    let fresh = if first {
        let loc = ial.inode_loc(i.ino)?;
        let b = bufs.get(loc.blk)?;
        h.dirty(&b);
        Some((b, loc.off))
    } else {
        None
    };
    let mut s = stage.data.lock();
    if let Some((b, off)) = fresh {
        // A stage of an older transaction is left only by a commit that failed (the
        // journal is aborted and nothing more commits): it is replaced.
        s.buf = Some(b);
        s.off = off;
        s.tid = tid;
        h.log_item(stage);
    }
    if s.d.raw.len() == d.raw.len() {
        s.d.raw.copy_from_slice(&d.raw);
    } else {
        s.d.raw.clone_from(&d.raw);
    }
    s.keep_dtime = keep_dtime;
    Ok(())
}
