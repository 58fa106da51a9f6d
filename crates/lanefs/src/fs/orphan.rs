//! The orphan list: inodes whose last name is gone while they are still open live on
//! ext4's `s_last_orphan` chain (each inode's `dtime` names the next), so a crash before
//! their last close does not leak them: the next mount (or e2fsck, or the kernel) frees
//! them. Changes to the chain and to the superblock that heads it are journaled like any
//! metadata, under the `orphan` lock, which also orders the superblock's updates.

use super::{Fs, MAX_FILE_BLOCKS};
use crate::disk::inode::DiskInode;
use crate::disk::superblock::Superblock;
use crate::error::{Error, Result};
use crate::inode;
use crate::journal::Handle;
use crate::sync::MutexGuard;
use crate::types::{Attr, FileType, Ino, Owner};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The orphan list in chain order (head first), and its length.
pub(super) struct Orphans {
    /// Unlinked inodes still open, head first (the `orphan` lock).
    pub(super) list: crate::sync::Mutex<std::collections::VecDeque<Ino>>,
    /// `list.len()`, stored under its lock: a release of an inode that was never an
    /// orphan (the common case) skips the lock while the list is empty.
    pub(super) count: AtomicUsize,
}

impl Orphans {
    pub(super) fn new() -> Orphans {
        Orphans {
            list: crate::sync::Mutex::new(&crate::sync::ORPHAN, Default::default()),
            count: AtomicUsize::new(0),
        }
    }
}

impl Fs {
    /// An unnamed regular file in directory `dir`, as open(2) with O_TMPFILE makes one:
    /// permission bits `perm` and owner as [`Fs::create`] would give a file in `dir`, no
    /// link, and open (call [`Fs::release`]; its last release frees it). It is born on
    /// the orphan list, so a crash frees it too. [`Fs::link`] gives it a name, unless it
    /// was made with `linkable` false (O_EXCL). `dir` itself does not change.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let t = fs.tmpfile(ROOT_INO, 0o600, Owner::default(), true)?;
    /// assert_eq!(t.nlink, 0);
    /// fs.write(t.ino, 0, b"written before it had a name")?;
    /// fs.link(t.ino, ROOT_INO, b"published")?;
    /// fs.release(t.ino)?;
    /// assert_eq!(fs.lookup(ROOT_INO, b"published")?.size, 28);
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn tmpfile(&self, dir: Ino, perm: u16, owner: Owner, linkable: bool) -> Result<Attr> {
        self.retry_nospace(|| self.tmpfile_once(dir, perm, owner, linkable))
    }

    fn tmpfile_once(&self, dir: Ino, perm: u16, owner: Owner, linkable: bool) -> Result<Attr> {
        self.check_rw()?;
        let d = self.iget(dir)?;
        let mut dst = d.state.write();
        self.load(&d, &mut dst)?;
        self.dir_guard(&dst)?;
        let h = self.journal.start();
        let mode = FileType::Regular.mode_bits() | (perm & 0o7777);
        let (ino, mut st, claim) =
            self.new_inode(&h, &d, &dst, b"", mode, 0, owner, None, self.now())?;
        drop(dst);
        st.d.set_links(0);
        st.linkable = linkable;
        // Stored before its list link is written into it (a new inode's store does not
        // keep `dtime`).
        let res = self
            .store_new(&h, ino, &mut st)
            .and_then(|()| self.orphan_add(&h, ino));
        if let Err(e) = res {
            self.undo_new(&h, ino, &mut st, FileType::Regular);
            return Err(e);
        }
        let attr = self.attr(ino, &st.d);
        let new = inode::inode_from_state(ino, st);
        self.bind_device(&new);
        new.open.store(1, Ordering::Release);
        claim.finish(new);
        Ok(attr)
    }

    /// Change the superblock inside handle `h`: the in-memory copy and block 0's bytes.
    /// Holding the orphan lock orders concurrent updates.
    pub(super) fn update_sb(
        &self,
        h: &Handle,
        _order: &mut MutexGuard<'_, std::collections::VecDeque<Ino>>,
        f: impl FnOnce(&mut Superblock),
    ) -> Result<()> {
        let raw = {
            let mut sb = self.sb.lock();
            f(&mut sb);
            sb.update_checksum();
            sb.raw.clone()
        };
        let (blk, off) = crate::disk::superblock::location(self.vol.bs());
        let b = self.bufs.get(blk)?;
        b.write()[off..off + raw.len()].copy_from_slice(&raw[..]);
        h.dirty(&b);
        Ok(())
    }

    /// How many removed inodes are still open (on the orphan list).
    pub(super) fn orphans_open(&self) -> usize {
        self.orphans.count.load(Ordering::Acquire)
    }

    /// Put `ino` (no links left, still open) at the head of the orphan list.
    pub(super) fn orphan_add(&self, h: &Handle, ino: Ino) -> Result<()> {
        let mut o = self.orphans.list.lock();
        if o.contains(&ino) {
            return Ok(());
        }
        let head = o.front().copied().unwrap_or(0) as u32;
        self.set_link(h, ino, head)?;
        o.push_front(ino);
        self.orphans.count.store(o.len(), Ordering::Release);
        self.update_sb(h, &mut o, |sb| sb.set_last_orphan(ino as u32))
    }

    /// Take `ino` off the orphan list, relinking its predecessor (or the superblock).
    pub(super) fn orphan_del(&self, h: &Handle, ino: Ino) -> Result<()> {
        // An orphan's add happened before its del (both under its inode's lock): an
        // empty list here means `ino` is not on it.
        if self.orphans.count.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let mut o = self.orphans.list.lock();
        let Some(k) = o.iter().position(|&x| x == ino) else {
            return Ok(());
        };
        let next = o.get(k + 1).copied().unwrap_or(0) as u32;
        if k == 0 {
            self.update_sb(h, &mut o, |sb| sb.set_last_orphan(next))?;
        } else {
            self.set_link(h, o[k - 1], next)?;
        }
        o.remove(k);
        self.orphans.count.store(o.len(), Ordering::Release);
        Ok(())
    }

    /// Write an orphan's list link (its on-disk `dtime`) in place. Its own stores keep
    /// the on-disk value (its stage is copied in at commit with `keep_dtime`, under the
    /// table block's lock), so neither the owner's inode lock nor its in-memory copy is
    /// needed.
    fn set_link(&self, h: &Handle, ino: Ino, next: u32) -> Result<()> {
        let loc = self.ial.inode_loc(ino)?;
        let isz = self.al.geo.inode_size as usize;
        let b = self.bufs.get(loc.blk)?;
        {
            let mut w = b.write();
            let mut d = DiskInode::from_bytes(&w[loc.off..loc.off + isz]);
            d.set_dtime(next);
            if self.al.geo.csum {
                d.update_checksum(self.al.geo.seed, ino as u32);
            }
            w[loc.off..loc.off + isz].copy_from_slice(&d.raw);
        }
        h.dirty(&b);
        Ok(())
    }

    /// At mount: free the inodes left on the orphan list (no links: deleted while open)
    /// and finish truncates (links left: blocks past the size are freed), as the kernel
    /// and e2fsck do. A broken chain stops the walk at the bad link.
    pub(super) fn process_orphans(&self) -> Result<()> {
        let head = u64::from(self.sb.lock().last_orphan());
        if head == 0 {
            return Ok(());
        }
        let max = u64::from(self.al.geo.ipg) * u64::from(self.al.geo.groups);
        let mut chain: Vec<Ino> = Vec::new();
        // At most every inode once: a cycle ends the walk in one step (a set, not a scan
        // of the chain so far: 10^5 orphans would cost 10^10 comparisons).
        let mut on_chain = std::collections::HashSet::new();
        let mut ino = head;
        while ino != 0 {
            if ino > max || ino < u64::from(self.al.geo.first_ino) || !on_chain.insert(ino) {
                break;
            }
            let d = inode::read_disk_inode(&self.ial, &self.bufs, ino)?;
            if FileType::from_mode(d.mode()).is_none() || !self.ial.inode_in_use(ino)? {
                break;
            }
            chain.push(ino);
            ino = u64::from(d.dtime());
        }
        {
            let mut o = self.orphans.list.lock();
            *o = chain.iter().copied().collect();
            self.orphans.count.store(o.len(), Ordering::Release);
        }
        for ino in chain {
            let i = self.icache.get(ino, || {
                inode::read_disk_inode(&self.ial, &self.bufs, ino).map(|d| {
                    let i = inode::new_inode(ino, d);
                    self.bind_device(&i);
                    i
                })
            })?;
            let mut st = i.state.write();
            self.load(&i, &mut st)?;
            let h = self.journal.start();
            if st.d.links() == 0 {
                self.free_inode(&h, &i, &mut st)?;
                drop(h);
                drop(st);
                self.icache.remove(ino, &i);
            } else {
                let keep = st.d.size().div_ceil(u64::from(self.vol.bs()));
                self.unmap(&h, &i, &mut st, keep, MAX_FILE_BLOCKS)?;
                self.orphan_del(&h, ino)?;
                st.d.set_dtime(0);
                self.store(&h, &i, &mut st)?;
            }
        }
        {
            // Whatever the walk could not reach is dropped from the chain.
            let h = self.journal.start();
            let mut o = self.orphans.list.lock();
            if !o.is_empty() {
                let why = "orphan list not empty after cleanup";
                return Err(Error::io_other("cleaning up orphan inodes", why));
            }
            if self.sb.lock().last_orphan() != 0 {
                self.update_sb(&h, &mut o, |sb| sb.set_last_orphan(0))?;
            }
        }
        self.journal.commit_running()
    }
}
