//! The mount's cached inodes: getting one (from the inode cache, or read from its table
//! under a claim on its number), loading its block map, and storing it back inside a
//! handle (its extent tree, its bytes, and the large_file feature a big file turns on).

use super::{Fs, LARGE_FILE_SIZE};
use crate::buf::Buf;
use crate::disk::inode::{DiskInode, FL_INLINE_DATA};
use crate::disk::superblock::ro_compat;
use crate::error::{Error, Result};
use crate::icache::{Got, IRef, NewInode};
use crate::inode::{self, Inode, InodeState};
use crate::journal::Handle;
use crate::sync::RwLockReadGuard;
use crate::types::*;
use crate::volume::Features;
use std::sync::Arc;

impl Fs {
    /// The cached inode `ino`, loading it from disk on a miss.
    pub(super) fn iget(&self, ino: Ino) -> Result<IRef> {
        match self.iget_or_read(ino)? {
            Held::Cached(i) => Ok(i),
            Held::Read(claim, d) => Ok(self.publish_read(claim, d)),
        }
    }

    /// The cached inode `ino`, or, on a miss, its bytes read from disk under a claim on
    /// its number ([`ICache::get_or_claim`]): the caller caches it
    /// ([`Fs::publish_read`]) or works on the bytes and drops the claim. A claim holder
    /// must not wait for the journal (a handle's owner may be waiting on the claim).
    pub(super) fn iget_or_read(&self, ino: Ino) -> Result<Held<'_>> {
        if ino < 1 || ino > self.al.geo.inodes() {
            return Err(Error::NotFound);
        }
        match self.icache.get_or_claim(ino) {
            Got::Cached(i) => Ok(Held::Cached(i)),
            // A failed read drops the claim, which removes the placeholder and wakes the
            // lookups waiting on it.
            Got::Claimed(claim) => {
                let (d, b, off) = inode::read_disk_inode_in(&self.ial, &self.bufs, ino)?;
                if d.links() == 0 || FileType::from_mode(d.mode()).is_none() {
                    return Err(Error::NotFound);
                }
                Ok(Held::Read(claim, Cold { d, b, off }))
            }
        }
    }

    /// Cache an inode read under `claim`; returns a use of it.
    pub(super) fn publish_read(&self, claim: NewInode<'_>, c: Cold) -> IRef {
        let ino = claim.ino();
        let i = inode::new_inode(ino, c.d);
        self.bind_device(&i);
        // Its last change may be in any uncommitted transaction: fsync commits them.
        i.state.write().tid = self.journal.running_tid();
        claim.finish(i)
    }

    /// Read-lock an inode's state with its extent map loaded.
    pub(super) fn read_loaded<'a>(&self, i: &'a Inode) -> Result<RwLockReadGuard<'a, InodeState>> {
        {
            let st = i.state.read();
            if st.freed {
                return Err(Error::NotFound);
            }
            if st.ext.is_some()
                || !needs_extents(&st.d, self.vol.bs(), self.vol.has(Features::EA_INODE))
            {
                return Ok(st);
            }
        }
        {
            let mut st = i.state.write();
            self.load(i, &mut st)?;
        }
        self.read_loaded(i)
    }

    /// Load the extent map under a held write lock, and charge it to the inode cache (a
    /// file read and never changed is charged here, not at a store).
    pub(super) fn load(&self, i: &Inode, st: &mut InodeState) -> Result<()> {
        if st.freed {
            return Err(Error::NotFound);
        }
        if st.ext.is_none() && needs_extents(&st.d, self.vol.bs(), self.vol.has(Features::EA_INODE))
        {
            inode::load_extents(&self.al, self.rt(), &self.bufs, i.ino, st)?;
            debug_assert!(st.ext.is_some(), "inode {}: extents not loaded", i.ino);
            self.icache.recharge(i, i.mem_bytes_with(st.heap_bytes()));
        }
        Ok(())
    }

    /// Persist a cached inode: its extent tree if changed, then its bytes, which reach its
    /// table block with their checksum when the transaction commits (`inode::InodeStage`).
    /// An inode on the orphan list keeps the list link that `fs/orphan.rs` wrote into its
    /// on-disk `dtime`.
    pub(super) fn store(&self, h: &Handle, i: &Inode, st: &mut InodeState) -> Result<()> {
        // Its bytes are exactly one table slot: staged whole at commit.
        debug_assert_eq!(st.d.raw.len(), self.vol.geo.inode_size as usize);
        self.store_prep(h, i.ino, st)?;
        let keep_dtime = st.d.links() == 0 && !st.freed;
        inode::stage_inode(&self.ial, &self.bufs, h, i, &mut st.d, keep_dtime, st.freed)?;
        // What the change grew (a directory's digests, a file's extent map) is charged.
        self.icache.recharge(i, i.mem_bytes_with(st.heap_bytes()));
        Ok(())
    }

    /// Persist a new inode not in the cache yet: written through to its table block (its
    /// later stores go through its stage).
    pub(super) fn store_new(&self, h: &Handle, ino: Ino, st: &mut InodeState) -> Result<()> {
        debug_assert_eq!(st.d.raw.len(), self.vol.geo.inode_size as usize);
        self.store_prep(h, ino, st)?;
        inode::store_inode(&self.ial, &self.bufs, h, ino, &mut st.d, false)
    }

    /// What every store does before the inode's bytes: its extent tree, its transaction,
    /// the large_file feature.
    pub(super) fn store_prep(&self, h: &Handle, ino: Ino, st: &mut InodeState) -> Result<()> {
        if st.ext_dirty {
            inode::store_tree(&self.al, &self.bufs, h, ino, st)?;
        }
        st.tid = h.tid();
        if st.d.size() > LARGE_FILE_SIZE {
            self.note_large_file(h)?;
        }
        Ok(())
    }

    /// A file past 2 GiB on an image without large_file turns the feature on in the
    /// superblock (and a revision-0 superblock into revision 1), as ext4_do_update_inode
    /// and ext4_update_dynamic_rev do.
    pub(super) fn note_large_file(&self, h: &Handle) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.large_file.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut order = self.orphans.list.lock();
        if self.large_file.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.update_sb(h, &mut order, |sb| {
            if sb.rev_level() == 0 {
                sb.set_rev_level(1);
                sb.set_first_ino(crate::disk::inode::reserved::GOOD_OLD_FIRST);
                sb.set_inode_size(128);
            }
            sb.set_feature_ro_compat(sb.feature_ro_compat() | ro_compat::LARGE_FILE);
        })
    }
}

pub(super) fn needs_extents(d: &DiskInode, bs: u32, ea_inode: bool) -> bool {
    if d.flags() & FL_INLINE_DATA != 0 {
        return false;
    }
    match FileType::from_mode(d.mode()) {
        Some(FileType::Regular) | Some(FileType::Directory) => true,
        Some(FileType::Symlink) => !is_fast_symlink(d, bs, ea_inode),
        _ => false,
    }
}

/// What [`Fs::iget_or_read`] found.
pub(super) enum Held<'a> {
    /// The inode was cached.
    Cached(IRef),
    /// It was not: the claim on its number, and the inode as read.
    Read(NewInode<'a>, Cold),
}

/// An inode read from disk and not cached: its bytes, and its table block's buffer with
/// its offset there.
pub(super) struct Cold {
    pub(super) d: DiskInode,
    pub(super) b: Arc<Buf>,
    pub(super) off: usize,
}

/// Whether a symlink keeps its target in `i_block`, as ext4_inode_is_fast_symlink decides:
/// on an `ea_inode` file system, when its target is 1 to 59 bytes (its block count may
/// count an attribute's inode); otherwise when it is not an inline-data symlink (whose
/// target continues in `system.data`) and owns no block but its xattr block.
pub(crate) fn is_fast_symlink(d: &DiskInode, bs: u32, ea_inode: bool) -> bool {
    if ea_inode {
        return d.size() > 0 && d.size() < crate::disk::inode::IBLOCK_SIZE as u64;
    }
    if d.flags() & FL_INLINE_DATA != 0 {
        return false;
    }
    let xattr_sectors = if d.file_acl() != 0 {
        u64::from(bs / 512)
    } else {
        0
    };
    d.blocks_512(bs) == xattr_sectors
}
