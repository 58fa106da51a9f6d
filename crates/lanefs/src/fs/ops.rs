//! Namespace operations: lookup, attributes, links, readlink, open and release, readdir,
//! inode flags, access times, caches and statfs (creating: `create.rs`; removing:
//! `remove.rs`; renaming: `rename.rs`).

use super::{Fs, LINK_MAX};
use crate::disk::inode::{self as iflags, DiskInode, FL_APPEND, FL_IMMUTABLE, FL_NOATIME};
use crate::disk::superblock::ro_compat;
use crate::error::{Error, Result};
use crate::inode::InodeState;
use crate::types::*;
use crate::volume::Features;
use std::sync::atomic::Ordering;

/// Validate a name for a new entry.
pub(super) fn check_name(name: &[u8]) -> Result<()> {
    let r = check_name_rules(name);
    // What passes is an entry ext4 can hold.
    debug_assert!(r.is_err() || (1..=255).contains(&name.len()));
    r
}

/// The rules of [`check_name`].
fn check_name_rules(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!(
            "bad file name {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    if name == b"." || name == b".." {
        return Err(Error::Exists);
    }
    if name.len() > 255 {
        return Err(Error::NameTooLong);
    }
    Ok(())
}

pub(super) fn kind_of(st: &InodeState) -> FileType {
    FileType::from_mode(st.d.mode()).unwrap_or(FileType::Regular)
}

/// The inode flags `chattr` sets, as the VFS enforces them for ext4 (EPERM, even for root):
/// an immutable inode (`+i`) keeps its names, links and attributes, and an immutable
/// directory its entries; an append-only inode (`+a`) keeps its names, links and
/// attributes too, and an append-only directory gains entries but loses none.
pub(super) mod flags {
    use super::{InodeState, FL_APPEND, FL_IMMUTABLE};

    /// `chattr +i`.
    pub fn immutable(st: &InodeState) -> bool {
        st.d.flags() & FL_IMMUTABLE != 0
    }
    /// `chattr +i` or `+a`: the inode itself cannot be unlinked, renamed, linked or
    /// changed by setattr (Linux's `may_delete`, `vfs_link`, `notify_change`).
    pub fn pinned(st: &InodeState) -> bool {
        st.d.flags() & (FL_IMMUTABLE | FL_APPEND) != 0
    }
}

/// Directory link count helpers shared with rename.
pub(super) mod links {
    use crate::disk::inode::DiskInode;

    /// One more subdirectory.
    pub fn inc(d: &mut DiskInode) {
        super::inc_dir_links(d)
    }
    /// One subdirectory fewer.
    pub fn dec(d: &mut DiskInode) {
        super::dec_dir_links(d)
    }
}

pub(super) fn inc_dir_links(d: &mut DiskInode) {
    let l = d.links();
    if l != 1 {
        // As Linux's ext4_inc_count: exact up to LINK_MAX itself, 1 ("many") past it.
        // Saturating: a corrupt count near u16::MAX must not overflow.
        d.set_links(if l.saturating_add(1) > LINK_MAX {
            1
        } else {
            l + 1
        });
    }
}

pub(super) fn dec_dir_links(d: &mut DiskInode) {
    let l = d.links();
    if l > 2 {
        d.set_links(l - 1);
    }
}

// The public flags are the on-disk ones.
const _: () = assert!(InodeFlags::USER_VISIBLE.bits() == iflags::FL_USER_VISIBLE);
const _: () = assert!(InodeFlags::USER_MODIFIABLE.bits() == iflags::FL_USER_MODIFIABLE);
const _: () = assert!(InodeFlags::IMMUTABLE.bits() == FL_IMMUTABLE);
const _: () = assert!(InodeFlags::APPEND.bits() == FL_APPEND);

/// Linux's PATH_MAX: the longest path (and symlink target) with its NUL.
pub(super) const PATH_MAX: usize = 4096;

impl Fs {
    /// Whether directory `st` can take no more subdirectories (EMLINK): Linux's
    /// EXT4_DIR_LINK_MAX, at LINK_MAX links unless dir_nlink lets an indexed directory
    /// go on with count 1.
    pub(super) fn dir_links_full(&self, st: &InodeState) -> bool {
        st.d.links() >= LINK_MAX
            && !(self.sb.lock().has_ro_compat(ro_compat::DIR_NLINK) && self.ctx().is_htree(st))
    }

    /// Fail unless `st` is a live directory: NotFound when it was removed, NotDir when
    /// it is not a directory.
    pub(super) fn dir_guard(&self, st: &InodeState) -> Result<()> {
        if st.freed || st.d.links() == 0 {
            return Err(Error::NotFound);
        }
        if kind_of(st) != FileType::Directory {
            return Err(Error::NotDir);
        }
        Ok(())
    }

    /// Look `name` up in directory `dir` (`.` and `..` included): the attributes of the
    /// inode it names. [`Error::NotFound`] when there is no such entry, [`Error::NotDir`]
    /// when `dir` is not a directory.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let f = fs.create(ROOT_INO, b"a.txt", 0o644, Owner::default())?;
    /// fs.release(f.ino)?;
    /// assert_eq!(fs.lookup(ROOT_INO, b"a.txt")?.ino, f.ino);
    /// assert_eq!(fs.lookup(ROOT_INO, b"..")?.ino, ROOT_INO);
    /// assert_eq!(fs.lookup(ROOT_INO, b"b.txt"), Err(lanefs::Error::NotFound));
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Attr> {
        if name.len() > 255 {
            return Err(Error::NameTooLong);
        }
        let d = self.iget(dir)?;
        let child = {
            let st = self.read_loaded(&d)?;
            self.dir_guard(&st)?;
            match name {
                b"." => dir,
                b".." => self.ctx().dotdot(dir, &st)?,
                _ => self.ctx().lookup(dir, &st, name)?.ok_or(Error::NotFound)?.0,
            }
        };
        self.getattr(child)
    }

    /// Attributes of the live inode `ino` reached by its number rather than by a name, as
    /// a file handle (`open_by_handle_at`, NFS export) reaches it; ext4's
    /// `ext4_nfs_get_inode`. [`Error::NotFound`] for a number out of range, a reserved
    /// inode other than the root (the journal, the resize inode, ...), or an inode no
    /// longer in use; the caller compares the generation the handle carries.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let f = fs.create(ROOT_INO, b"a", 0o644, Owner::default())?;
    /// fs.release(f.ino)?;
    /// assert_eq!(fs.inode_by_number(f.ino)?.generation, f.generation);
    /// assert_eq!(fs.inode_by_number(8), Err(lanefs::Error::NotFound)); // the journal
    /// fs.unlink(ROOT_INO, b"a")?;
    /// assert_eq!(fs.inode_by_number(f.ino), Err(lanefs::Error::NotFound));
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn inode_by_number(&self, ino: Ino) -> Result<Attr> {
        if ino != crate::ROOT_INO && ino < u64::from(self.al.geo.first_ino) {
            return Err(Error::NotFound);
        }
        self.getattr(ino)
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        let i = self.iget(ino)?;
        let st = i.state.read();
        if st.freed {
            return Err(Error::NotFound);
        }
        Ok(self.attr(ino, &st.d))
    }

    /// Change attributes (and size) of `ino`, as chmod, chown, truncate and utimes do:
    /// the fields of `set` that are `Some`. The change time becomes now unless `set`
    /// gives one. Returns the new attributes.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// use lanefs::{SetAttr, Timespec};
    /// let f = fs.create(ROOT_INO, b"log", 0o644, Owner::default())?;
    /// fs.write(f.ino, 0, &[b'x'; 10_000])?;
    /// let a = fs.setattr(f.ino, &SetAttr {
    ///     size: Some(100),                            // truncate
    ///     perm: Some(0o600),                          // chmod
    ///     mtime: Some(Timespec { sec: 0, nsec: 0 }), // utimes
    ///     ..SetAttr::default()
    /// })?;
    /// assert_eq!((a.size, a.perm, a.mtime.sec), (100, 0o600, 0));
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        self.setattr_as(ino, set, false)
    }

    /// Set the access and modification times named to now, as `utime(path, NULL)` and
    /// `utimensat` with `UTIME_NOW` do: unlike explicit times, allowed on an append-only
    /// inode (Linux's `notify_change` refuses only ATTR_TIMES_SET there); refused on an
    /// immutable one. The caller has checked ownership or write access.
    pub fn set_times_now(&self, ino: Ino, atime: bool, mtime: bool) -> Result<Attr> {
        let t = self.now();
        let set = SetAttr {
            atime: atime.then_some(t),
            mtime: mtime.then_some(t),
            ctime: Some(t),
            ..SetAttr::default()
        };
        self.setattr_as(ino, &set, true)
    }

    fn setattr_as(&self, ino: Ino, set: &SetAttr, times_now: bool) -> Result<Attr> {
        self.check_rw()?;
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        self.load(&i, &mut st)?;
        if let Some(size) = set.size {
            match kind_of(&st) {
                FileType::Directory => return Err(Error::IsDir),
                FileType::Regular => {}
                _ => return Err(Error::Invalid("size of a special file".into())),
            }
            if size > self.max_bytes(&st.d) {
                return Err(Error::FileTooBig);
            }
        }
        let changes = set.perm.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.size.is_some()
            || set.atime.is_some()
            || set.mtime.is_some()
            || set.ctime.is_some();
        let refused = if times_now {
            flags::immutable(&st)
        } else {
            flags::pinned(&st)
        };
        if changes && refused {
            return Err(Error::NotPermitted);
        }
        let h = self.journal.start();
        let ctime = set.ctime.unwrap_or_else(|| self.now());
        let mut mtime = set.mtime;
        if let Some(size) = set.size {
            // As ext4_setattr: a size that changes sets mtime too.
            if size != st.d.size() && mtime.is_none() {
                mtime = Some(ctime);
            }
            self.truncate(&h, &i, &mut st, size)?;
        }
        if let Some(p) = set.perm {
            let m = (st.d.mode() & 0o170000) | (p & 0o7777);
            st.d.set_mode(m);
            self.acl_chmod(&h, ino, &mut st)?;
        }
        let d = &mut st.d;
        if let Some(u) = set.uid {
            d.set_uid(u);
        }
        if let Some(g) = set.gid {
            d.set_gid(g);
        }
        if let Some(t) = set.atime {
            d.set_atime(t);
        }
        if let Some(t) = mtime {
            d.set_mtime(t);
        }
        d.set_ctime(ctime);
        self.store(&h, &i, &mut st)?;
        Ok(self.attr(ino, &st.d))
    }

    /// The target of a symbolic link.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let i = self.iget(ino)?;
        let st = self.read_loaded(&i)?;
        if kind_of(&st) != FileType::Symlink {
            return Err(Error::Invalid("not a symbolic link".into()));
        }
        let size = st.d.size() as usize;
        if crate::disk::inline::is_inline(&st.d) {
            // An inline-data symlink: `i_block`, then `system.data` (ext4's inline read).
            return crate::disk::inline::file_data(&st.d, ino);
        }
        if super::is_fast_symlink(&st.d, self.vol.bs(), self.vol.has(Features::EA_INODE)) {
            if size > 60 {
                return Err(Error::corrupt(
                    "inode",
                    ino,
                    "fast symlink longer than 60 bytes",
                ));
            }
            return Ok(st.d.iblock()[..size].to_vec());
        }
        let ext = st
            .ext
            .as_ref()
            .and_then(|e| e.find(0))
            .ok_or_else(|| Error::corrupt("symlink", ino, "no data block"))?;
        if size >= self.vol.bs() as usize {
            return Err(Error::corrupt("symlink", ino, "target longer than a block"));
        }
        let b = self.bufs.get(ext.pblk)?;
        let data = b.read();
        Ok(data[..size].to_vec())
    }

    /// Add a hard link `newdir/newname` to `ino`.
    pub fn link(&self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        self.retry_nospace(|| self.link_once(ino, newdir, newname))
    }

    fn link_once(&self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        self.check_rw()?;
        check_name(newname)?;
        debug_assert!(!newname.is_empty() && newname.len() <= 255);
        let d = self.iget(newdir)?;
        let c = self.iget(ino)?;
        let mut dst = d.state.write();
        self.load(&d, &mut dst)?;
        self.dir_guard(&dst)?;
        // As Linux: an existing name wins over what is wrong with the source.
        let ctx = self.ctx();
        if ctx.lookup(newdir, &dst, newname)?.is_some() {
            return Err(Error::Exists);
        }
        if ino == newdir || flags::immutable(&dst) {
            return Err(Error::NotPermitted);
        }
        let mut cst = c.state.write();
        // An inode with no name left is gone for linking (ENOENT, as the VFS says), but
        // for a linkable O_TMPFILE inode, which this gives its first name.
        let first = cst.d.links() == 0;
        if cst.freed || (first && !cst.linkable) {
            return Err(Error::NotFound);
        }
        if flags::pinned(&cst) {
            return Err(Error::NotPermitted);
        }
        if kind_of(&cst) == FileType::Directory {
            return Err(Error::NotPermitted);
        }
        if cst.d.links() >= LINK_MAX {
            return Err(Error::TooManyLinks);
        }
        let h = self.journal.start();
        // What the checks above leave: a named, non-directory, unpinned inode below the
        // link limit, linked into another inode that is a directory.
        debug_assert!(ino != newdir && kind_of(&cst) != FileType::Directory);
        debug_assert!(cst.d.links() < LINK_MAX && !cst.freed);
        ctx.add(
            &h,
            newdir,
            &mut dst,
            newname,
            ino,
            kind_of(&cst).dirent_code(),
        )?;
        let l = cst.d.links() + 1;
        debug_assert!(l <= LINK_MAX, "inode {ino}: {l} links");
        debug_assert_eq!(l == 1, first, "inode {ino}: its first name iff it had none");
        cst.d.set_links(l);
        if first {
            self.orphan_del(&h, ino)?;
            cst.linkable = false;
        }
        let t = self.now();
        cst.d.set_ctime(t);
        dst.d.set_mtime(t);
        dst.d.set_ctime(t);
        self.store(&h, &d, &mut dst)?;
        self.store(&h, &c, &mut cst)?;
        Ok(self.attr(ino, &cst.d))
    }

    /// Mark `ino` open: its data survives unlink until the matching [`Fs::release`].
    /// Opens are counted; a file system frontend calls this on open(2).
    pub fn open(&self, ino: Ino) -> Result<()> {
        // After a shutdown, as ext4_file_open: EIO.
        self.check_live()?;
        let i = self.iget(ino)?;
        if i.state.read().freed {
            return Err(Error::NotFound);
        }
        i.open.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Drop one open reference taken by [`Fs::open`] or [`Fs::create`]; the last one of
    /// an unlinked inode frees it.
    pub fn release(&self, ino: Ino) -> Result<()> {
        let i = self
            .icache
            .peek(ino)
            .ok_or(Error::Invalid(format!("inode {ino} is not open")))?;
        let prev = i
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if prev != Ok(1) {
            return prev
                .map(|_| ())
                .map_err(|_| Error::Invalid(format!("inode {ino} is not open")));
        }
        let mut st = i.state.write();
        if !i.is_open() {
            // Last close: unused preallocated blocks go back (ext4_release_file).
            self.al.discard_pa(&mut st.pa);
        }
        if st.freed || st.d.links() > 0 || i.is_open() || self.is_read_only() {
            return Ok(());
        }
        self.load(&i, &mut st)?;
        let h = self.journal.start();
        self.free_inode(&h, &i, &mut st)?;
        drop(h);
        drop(st);
        self.icache.remove(ino, &i);
        Ok(())
    }

    /// Entries of `dir` after cursor `pos` (0 = start), at most `max` (more only when
    /// entries share a cursor, which are never split between calls). Entries come in
    /// hash order, `.` and `..` first; pass the last entry's [`next`](DirEntry::next) to
    /// continue. Cursors stay valid while the directory changes, as ext4's do: a listing
    /// resumed after other entries were added or removed loses and repeats none of those
    /// that stayed. An empty result is the end.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let o = Owner::default();
    /// for name in [&b"x"[..], b"y", b"z"] {
    ///     fs.mkdir(ROOT_INO, name, 0o755, o)?;
    /// }
    /// let mut names = Vec::new();
    /// let mut pos = 0;
    /// loop {
    ///     let batch = fs.readdir(ROOT_INO, pos, 2)?;
    ///     let Some(last) = batch.last() else { break };
    ///     pos = last.next;
    ///     names.extend(batch.into_iter().map(|e| e.name));
    /// }
    /// names.sort();
    /// let expect: Vec<&[u8]> = vec![b".", b"..", b"lost+found", b"x", b"y", b"z"];
    /// assert_eq!(names, expect);
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn readdir(&self, dir: Ino, pos: u64, max: usize) -> Result<Vec<DirEntry>> {
        let d = self.iget(dir)?;
        let st = self.read_loaded(&d)?;
        self.dir_guard(&st)?;
        self.ctx().readdir(dir, &st, pos, max.max(1))
    }

    /// The inode's flags as `lsattr` shows them (FS_IOC_GETFLAGS).
    pub fn get_flags(&self, ino: Ino) -> Result<InodeFlags> {
        let i = self.iget(ino)?;
        let st = i.state.read();
        if st.freed {
            return Err(Error::NotFound);
        }
        Ok(InodeFlags::from_bits_retain(st.d.flags()) & InodeFlags::USER_VISIBLE)
    }

    /// Whether `ino` may be opened as `mode` says, under its `chattr` flags (the VFS's
    /// may_open, which a FUSE kernel cannot apply: its inodes carry no S_IMMUTABLE or
    /// S_APPEND): an immutable file opens for reading only, an append-only one for
    /// writing only with O_APPEND, and neither with O_TRUNC ([`Error::NotPermitted`]).
    /// [`Fs::write`], [`Fs::setattr`] and [`Fs::fallocate`] apply the same rules to each
    /// change, so a file opened before the flag was set is held to them too.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// use lanefs::{Error, InodeFlags, OpenMode};
    /// let f = fs.create(ROOT_INO, b"log", 0o644, Owner::default())?;
    /// fs.set_flags(f.ino, fs.get_flags(f.ino)? | InodeFlags::APPEND)?; // chattr +a
    /// let append = OpenMode { write: true, append: true, truncate: false };
    /// fs.may_open(f.ino, append)?;
    /// let rewrite = OpenMode { append: false, ..append };
    /// assert_eq!(fs.may_open(f.ino, rewrite), Err(Error::NotPermitted));
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn may_open(&self, ino: Ino, mode: OpenMode) -> Result<()> {
        if !mode.write && !mode.truncate {
            return Ok(());
        }
        let f = self.get_flags(ino)?;
        let immutable = f.contains(InodeFlags::IMMUTABLE);
        let append_only = f.contains(InodeFlags::APPEND);
        if immutable || (append_only && (!mode.append || mode.truncate)) {
            return Err(Error::NotPermitted);
        }
        Ok(())
    }

    /// Set the inode's flags as `chattr` does (FS_IOC_SETFLAGS, ext4_ioctl_setflags): flags
    /// outside the modifiable set keep their value, flags the file type cannot carry and
    /// changes lanefs has no mechanism for (data journalling, extent conversion, casefold,
    /// DAX) are refused (EOPNOTSUPP), and ctime is set. A file that stays immutable keeps
    /// its other flags ([`Error::NotPermitted`], ext4_ioctl_check_immutable). The caller
    /// has checked ownership and the right to change `i` and `a` (the VFS does, before
    /// FUSE sees the ioctl).
    pub fn set_flags(&self, ino: Ino, flags: InodeFlags) -> Result<Attr> {
        use iflags::*;
        let flags = flags.bits();
        self.check_rw()?;
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        self.load(&i, &mut st)?;
        if st.freed {
            return Err(Error::NotFound);
        }
        // As ext4, against the masked request and the whole of the old flags.
        let (old, masked) = (st.d.flags() & FL_USER_VISIBLE, flags & FL_USER_MODIFIABLE);
        if old & masked & FL_IMMUTABLE != 0 && (old ^ masked) & !FL_IMMUTABLE != 0 {
            return Err(Error::NotPermitted);
        }
        let allowed = match kind_of(&st) {
            FileType::Directory => u32::MAX,
            FileType::Regular => FL_REG_MASK,
            _ => FL_OTHER_MASK,
        };
        if flags & !(allowed & FL_USER_VISIBLE) != 0 {
            return Err(Error::NotSupported(format!(
                "inode flags {:#x} on this file type",
                flags & !allowed
            )));
        }
        let old = st.d.flags();
        let new = (flags & FL_USER_MODIFIABLE) | (old & !FL_USER_MODIFIABLE);
        let unsupported = (new ^ old) & !FL_RECORDED;
        if unsupported != 0 {
            return Err(Error::NotSupported(format!(
                "changing inode flags {unsupported:#x}"
            )));
        }
        let h = self.journal.start();
        st.d.set_flags(new);
        st.d.set_ctime(self.now());
        self.store(&h, &i, &mut st)?;
        Ok(self.attr(ino, &st.d))
    }

    /// Note a read of `ino`'s data, entries or target (the VFS's touch_atime, which its
    /// callers call after a read succeeds; `read`, `readdir` and `readlink` themselves
    /// change nothing). Under the mount's policy: `relatime` updates the access time only
    /// when it is not after the modification or change time or is a day old,
    /// `strictatime` always, `noatime` never; nor on a read-only mount, an inode flagged
    /// `chattr +A`, or a directory under `nodiratime`.
    pub fn touch_atime(&self, ino: Ino) -> Result<()> {
        self.check_live()?;
        if self.vol.read_only || self.vol.atime == AtimePolicy::Never {
            return Ok(());
        }
        let i = self.iget(ino)?;
        let t = self.now();
        if !self.atime_due(&i.state.read().d, t) {
            return Ok(());
        }
        // The inode's lock before the handle (the journal's lock order).
        let mut st = i.state.write();
        if st.freed || !self.atime_due(&st.d, t) {
            return Ok(());
        }
        let h = self.journal.start();
        st.d.set_atime(t);
        self.store(&h, &i, &mut st)
    }

    /// Whether a read at `now` updates `d`'s access time (atime_needs_update).
    fn atime_due(&self, d: &DiskInode, now: Timespec) -> bool {
        let is_dir = FileType::from_mode(d.mode()) == Some(FileType::Directory);
        if d.flags() & FL_NOATIME != 0 || (self.vol.nodiratime && is_dir) || d.links() == 0 {
            return false;
        }
        let at = d.atime();
        if at == now {
            return false;
        }
        self.vol.atime == AtimePolicy::Strict
            || d.mtime() >= at
            || d.ctime() >= at
            || now.sec - at.sec >= 24 * 60 * 60
    }

    /// File-system counters, as statfs(2) reports them.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let before = fs.statfs()?;
    /// let f = fs.create(ROOT_INO, b"f", 0o644, Owner::default())?;
    /// fs.write(f.ino, 0, &[1u8; 1 << 20])?;
    /// fs.release(f.ino)?;
    /// let after = fs.statfs()?;
    /// assert_eq!(after.block_size, 4096);
    /// assert_eq!(before.free_inodes - after.free_inodes, 1);
    /// assert!(before.free_blocks - after.free_blocks >= 256);
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn statfs(&self) -> Result<StatFs> {
        let sb = self.sb.lock();
        let free = self.al.free_blocks();
        Ok(StatFs {
            block_size: self.vol.bs(),
            blocks: sb.blocks_count(),
            free_blocks: free,
            // As ext4's: neither root's blocks nor the reserve kept for metadata.
            avail_blocks: free.saturating_sub(sb.r_blocks_count() + self.al.reserved_blocks()),
            inodes: u64::from(sb.inodes_count()),
            free_inodes: self.ial.free_inodes(),
            name_max: 255,
        })
    }
}
