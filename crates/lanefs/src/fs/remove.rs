//! Removing names and freeing inodes: unlink and rmdir, dropping a link, and freeing an
//! inode's blocks and number (also at the last release of an unlinked file, and for a
//! cold unlink whose inode is not cached).

use super::ops::{dec_dir_links, flags, kind_of};
use super::{Cold, Fs, Held};
use crate::bmap;
use crate::dir::Probe;
use crate::disk::inode::{DiskInode, FL_APPEND, FL_IMMUTABLE};
use crate::error::{Error, Result};
use crate::icache::NewInode;
use crate::inode::{self, Inode, InodeState};
use crate::journal::Handle;
use crate::types::*;
use crate::volume::Features;
use std::sync::atomic::Ordering;

impl Fs {
    /// Remove the entry `name` of `dir`, which is not a directory ([`Error::IsDir`]).
    /// The inode goes with its last link, or, if it is open, at its last
    /// [`Fs::release`] (it waits on ext4's orphan list, so a crash meanwhile frees it at
    /// the next mount).
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let f = fs.create(ROOT_INO, b"tmp", 0o644, Owner::default())?; // open
    /// fs.write(f.ino, 0, b"scratch")?;
    /// fs.unlink(ROOT_INO, b"tmp")?;
    /// assert_eq!(fs.lookup(ROOT_INO, b"tmp"), Err(lanefs::Error::NotFound));
    /// let mut buf = [0u8; 7];
    /// assert_eq!(fs.read(f.ino, 0, &mut buf)?, 7); // still readable while open
    /// fs.release(f.ino)?; // now it is freed
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn unlink(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.remove(dir, name, false)
    }

    /// Remove the empty directory `name` of `dir` ([`Error::NotEmpty`] otherwise).
    pub fn rmdir(&self, dir: Ino, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(Error::Invalid("rmdir of .".into()));
        }
        if name == b".." {
            return Err(Error::NotEmpty);
        }
        self.remove(dir, name, true)
    }

    fn remove(&self, dir: Ino, name: &[u8], want_dir: bool) -> Result<()> {
        self.check_rw()?;
        let d = self.iget(dir)?;
        let mut dst = d.state.write();
        self.load(&d, &mut dst)?;
        self.dir_guard(&dst)?;
        let ctx = self.ctx();
        let Probe::Found(found) = ctx.probe_name(dir, &mut dst, name)? else {
            return Err(Error::NotFound);
        };
        let cino = found.ino;
        let c = {
            // A cold free's handle starts before the child is claimed: a claim's holder
            // must not wait for the journal (`Fs::iget_or_read`). Any other remove drops
            // it and starts its own after locking the child (the journal's lock order:
            // inode locks first; a thread holding the child's lock may be waiting in
            // `Journal::start` for the commit this handle would hold up).
            let h = self.journal.start();
            match self.iget_or_read(cino)? {
                Held::Cached(c) => c,
                Held::Read(claim, cd) => {
                    if !want_dir && !flags::pinned(&dst) && self.frees_cold(&cd.d) {
                        let t = self.now();
                        ctx.remove_found(&h, dir, &mut dst, name, found)?;
                        dst.d.set_mtime(t);
                        dst.d.set_ctime(t);
                        self.store(&h, &d, &mut dst)?;
                        return self.free_cold(&h, claim, cd, t);
                    }
                    self.publish_read(claim, cd)
                }
            }
        };
        let mut cst = c.state.write();
        self.load(&c, &mut cst)?;
        // As Linux's may_delete: before the type checks.
        if flags::pinned(&dst) || flags::pinned(&cst) {
            return Err(Error::NotPermitted);
        }
        let is_dir = kind_of(&cst) == FileType::Directory;
        if want_dir && !is_dir {
            return Err(Error::NotDir);
        }
        if !want_dir && is_dir {
            return Err(Error::IsDir);
        }
        if is_dir && !ctx.is_empty(cino, &cst)? {
            return Err(Error::NotEmpty);
        }
        let h = self.journal.start();
        ctx.remove_found(&h, dir, &mut dst, name, found)?;
        let t = self.now();
        if is_dir {
            dec_dir_links(&mut dst.d);
            cst.d.set_links(0);
        } else {
            let l = cst.d.links().saturating_sub(1);
            cst.d.set_links(l);
        }
        cst.d.set_ctime(t);
        dst.d.set_mtime(t);
        dst.d.set_ctime(t);
        self.store(&h, &d, &mut dst)?;
        let gone = self.drop_link(&h, &c, &mut cst)?;
        drop(h);
        if gone {
            self.icache.remove(cino, &c);
        }
        Ok(())
    }

    /// Whether unlinking the inode whose bytes `d` were read from disk (so it is not
    /// cached, hence not open) frees it and nothing else: a non-directory of one link,
    /// not immutable or append-only, that owns no block, and no attribute can name an
    /// EA inode. Such an unlink ([`Fs::free_cold`]) never caches the inode: most removes
    /// of a directory too large for the inode cache are of this kind (mdtest, `rm -r` of
    /// empty files), and caching a doomed inode, then evicting it, was a fifth of each.
    fn frees_cold(&self, d: &DiskInode) -> bool {
        let kind = FileType::from_mode(d.mode());
        d.links() == 1
            && kind.is_some_and(|k| k != FileType::Directory)
            && d.flags() & (FL_IMMUTABLE | FL_APPEND) == 0
            && d.owns_no_block()
            && !self.vol.has(Features::EA_INODE)
    }

    /// Free the inode [`Fs::frees_cold`] chose (its last name is gone in `h`) as
    /// [`Fs::free_inode`] would, its bytes written straight to its table block. The claim
    /// on its number goes once it is freed: a lookup by number meanwhile waits, then
    /// reads it freed (not found).
    fn free_cold(&self, h: &Handle, claim: NewInode<'_>, c: Cold, t: Timespec) -> Result<()> {
        let ino = claim.ino();
        let Cold { mut d, b, off } = c;
        debug_assert!(d.links() == 1 && d.owns_no_block());
        d.set_links(0);
        d.set_ctime(t);
        d.set_size(0);
        d.set_dtime(t.sec as u32);
        inode::store_inode_at(&self.ial, h, &b, off, ino, &mut d, false);
        self.ial.free(h, &self.al, ino, false)?;
        drop(claim);
        Ok(())
    }

    /// After a link count change: free the inode if unreferenced, else store it.
    /// Returns whether it was freed (the caller evicts it after the handle ends).
    pub(super) fn drop_link(&self, h: &Handle, c: &Inode, st: &mut InodeState) -> Result<bool> {
        if st.d.links() > 0 || c.is_open() {
            if st.d.links() == 0 {
                // Last name gone, still open: survive a crash on the orphan list.
                self.orphan_add(h, c.ino)?;
            }
            self.store(h, c, st)?;
            return Ok(false);
        }
        self.free_inode(h, c, st)?;
        Ok(true)
    }

    /// Release an unreferenced inode: its blocks, xattr block and bitmap bit.
    pub(super) fn free_inode(&self, h: &Handle, i: &Inode, st: &mut InodeState) -> Result<()> {
        let ino = i.ino;
        // Its dirty pages point at blocks freed here, reused once this transaction
        // commits: dropped, never written later (a commit's ordered list may still hold
        // this inode), but first written if a committing transaction mapped them.
        self.settle_ordered(h, i)?;
        i.mapping.drop_range(&self.pages, 0, u64::MAX);
        i.mapping.set_size(0);
        let kind = kind_of(st);
        self.al.discard_pa(&mut st.pa);
        self.orphan_del(h, ino)?;
        self.free_blocks_of(h, ino, st, kind)?;
        st.d.set_size(0);
        st.d.set_links(0);
        st.d.set_dtime(self.now().sec as u32);
        st.freed = true;
        // A freed directory's digests and held index blocks (forgotten buffers) go now,
        // not when the last opener lets the inode go.
        st.digests = None;
        i.gone.store(true, Ordering::Release);
        self.store(h, i, st)?;
        self.ial.free(h, &self.al, ino, kind == FileType::Directory)
    }

    /// Free every data, tree and xattr block of an inode.
    pub(super) fn free_blocks_of(
        &self,
        h: &Handle,
        ino: Ino,
        st: &mut InodeState,
        kind: FileType,
    ) -> Result<()> {
        let meta = kind != FileType::Regular;
        // A file that maps nothing, with no tree or indirect block and its empty map
        // already stored (most removed files of a create-and-remove workload), has no
        // block to free and an empty root on disk: nothing to unmap or rewrite.
        let mapped = st.ext.as_ref().is_some_and(|m| {
            !m.is_empty() || st.ext_dirty || !st.tree_blocks.is_empty() || !st.ind.is_empty()
        });
        if mapped {
            bmap::unmap_blocks(&self.al, self.rt(), h, st, 0, 1 << 32, meta)?;
            st.ext_dirty = true;
            inode::store_tree(&self.al, &self.bufs, h, 0, st)?;
        }
        self.release_ea_refs(h, ino, st)?;
        self.release_xattr_block(h, st)?;
        st.d.set_blocks_512(0, self.vol.bs());
        Ok(())
    }
}
