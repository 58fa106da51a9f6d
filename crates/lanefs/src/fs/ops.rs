//! Namespace operations: lookup, create, link, unlink, rename, readdir, attributes.

use super::{Cold, Fs, Held, LINK_MAX};
use crate::bmap;
use crate::dir::Probe;
use crate::disk::extent::{self, Node};
use crate::disk::inode::{
    self as iflags, DiskInode, FL_APPEND, FL_EXTENTS, FL_IMMUTABLE, FL_NOATIME,
};
use crate::disk::superblock::ro_compat;
use crate::error::{Error, Result};
use crate::icache::{IRef, NewInode};
use crate::inode::{self, Inode, InodeState};
use crate::journal::Handle;
use crate::types::*;
use std::sync::atomic::Ordering;

/// Validate a name for a new entry.
fn check_name(name: &[u8]) -> Result<()> {
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

fn kind_of(st: &InodeState) -> FileType {
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

fn inc_dir_links(d: &mut DiskInode) {
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

fn dec_dir_links(d: &mut DiskInode) {
    let l = d.links();
    if l > 2 {
        d.set_links(l - 1);
    }
}

/// Linux's PATH_MAX: the longest path (and symlink target) with its NUL.
const PATH_MAX: usize = 4096;

impl Fs {
    pub(super) fn dir_guard_pub(&self, st: &InodeState) -> Result<()> {
        self.dir_guard(st)
    }

    /// Whether directory `st` can take no more subdirectories (EMLINK): Linux's
    /// EXT4_DIR_LINK_MAX, at LINK_MAX links unless dir_nlink lets an indexed directory
    /// go on with count 1.
    pub(super) fn dir_links_full(&self, st: &InodeState) -> bool {
        st.d.links() >= LINK_MAX
            && !(self.sb.lock().has_ro_compat(ro_compat::DIR_NLINK) && self.ctx().is_htree(st))
    }

    pub(super) fn drop_link_pub(&self, h: &Handle, c: &Inode, st: &mut InodeState) -> Result<bool> {
        self.drop_link(h, c, st)
    }

    fn dir_guard(&self, st: &InodeState) -> Result<()> {
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

    /// Create a regular file `name` in `dir` with permission bits `perm` (less
    /// `owner.umask`, or as the directory's default ACL says), owned by `owner`. The file
    /// counts as opened: call [`Fs::release`] when done with it. [`Error::Exists`] if
    /// the name is taken.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let me = Owner { uid: 1000, gid: 1000, umask: 0o022 };
    /// let f = fs.create(ROOT_INO, b"new.txt", 0o666, me)?;
    /// assert_eq!((f.perm, f.uid, f.size), (0o644, 1000, 0));
    /// fs.release(f.ino)?;
    /// assert_eq!(fs.create(ROOT_INO, b"new.txt", 0o644, me), Err(lanefs::Error::Exists));
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn create(&self, dir: Ino, name: &[u8], perm: u16, owner: Owner) -> Result<Attr> {
        // A new regular file starts open (`make_once`): the caller's reference.
        let (a, _) = self.make(
            dir,
            name,
            FileType::Regular.mode_bits() | (perm & 0o7777),
            0,
            owner,
            None,
        )?;
        Ok(a)
    }

    /// Create a directory `name` in `dir` (permissions and owner as [`Fs::create`]).
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let o = Owner::default();
    /// let a = fs.mkdir(ROOT_INO, b"a", 0o755, o)?;
    /// let b = fs.mkdir(a.ino, b"b", 0o755, o)?;
    /// assert_eq!(fs.lookup(b.ino, b"..")?.ino, a.ino);
    /// assert_eq!(fs.getattr(a.ino)?.nlink, 3); // "a", "a/." and "a/b/.."
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn mkdir(&self, dir: Ino, name: &[u8], perm: u16, owner: Owner) -> Result<Attr> {
        let a = self
            .make(
                dir,
                name,
                FileType::Directory.mode_bits() | (perm & 0o7777),
                0,
                owner,
                None,
            )?
            .0;
        Ok(a)
    }

    /// Create a device node, FIFO or socket (or regular file) with full `mode`.
    pub fn mknod(&self, dir: Ino, name: &[u8], mode: u32, rdev: u32, owner: Owner) -> Result<Attr> {
        let mode = mode as u16;
        match FileType::from_mode(mode) {
            None => Err(Error::Invalid(format!("mode {mode:o} has no file type"))),
            Some(FileType::Directory) => {
                Err(Error::Invalid("mknod of a directory (use mkdir)".into()))
            }
            Some(FileType::Symlink) => {
                Err(Error::Invalid("mknod of a symlink (use symlink)".into()))
            }
            Some(kind) => {
                let (a, i) = self.make(dir, name, mode, rdev, owner, None)?;
                if kind == FileType::Regular {
                    // Made open, as by create: nobody holds it open here.
                    drop(i);
                    self.release(a.ino)?;
                }
                Ok(a)
            }
        }
    }

    /// Create a symbolic link `name` in `dir` pointing to `target` (any bytes; short
    /// targets are kept in the inode, as ext4 does).
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let l = fs.symlink(ROOT_INO, b"link", b"some/where", Owner::default())?;
    /// assert_eq!(fs.readlink(l.ino)?, b"some/where");
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn symlink(&self, dir: Ino, name: &[u8], target: &[u8], owner: Owner) -> Result<Attr> {
        // The VFS refuses a target of PATH_MAX (4096, with its NUL) or more; ext4 one that
        // does not fit a block.
        if target.is_empty() || target.len() >= (self.bs as usize).min(PATH_MAX) {
            return Err(Error::NameTooLong);
        }
        Ok(self
            .make(
                dir,
                name,
                FileType::Symlink.mode_bits() | 0o777,
                0,
                owner,
                Some(target),
            )?
            .0)
    }

    /// Common path of every create: lock the directory, allocate and link a new inode.
    fn make(
        &self,
        dir: Ino,
        name: &[u8],
        mode: u16,
        rdev: u32,
        owner: Owner,
        target: Option<&[u8]>,
    ) -> Result<(Attr, IRef)> {
        self.retry_nospace(|| self.make_once(dir, name, mode, rdev, owner, target))
    }

    fn make_once(
        &self,
        dir: Ino,
        name: &[u8],
        mode: u16,
        rdev: u32,
        owner: Owner,
        target: Option<&[u8]>,
    ) -> Result<(Attr, IRef)> {
        self.check_rw()?;
        check_name(name)?;
        let d = self.iget(dir)?;
        let mut dst = d.state.write();
        self.load(&d, &mut dst)?;
        self.dir_guard(&dst)?;
        let ctx = self.ctx();
        let Probe::Vacant(vacancy) = ctx.probe_name(dir, &mut dst, name)? else {
            return Err(Error::Exists);
        };
        if flags::immutable(&dst) {
            return Err(Error::NotPermitted);
        }
        let kind = FileType::from_mode(mode).ok_or_else(|| Error::Invalid("mode".into()))?;
        if kind == FileType::Directory && self.dir_links_full(&dst) {
            return Err(Error::TooManyLinks);
        }
        let h = self.journal.start();
        // One clock read for the new inode's times and the directory's mtime and ctime
        // (the kernel's coarse clock gives them one value too).
        let t = self.now();
        let (ino, mut cst, claim) =
            self.new_inode(&h, &d, &dst, name, mode, rdev, owner, target, t)?;
        let ft = kind.dirent_code();
        if let Err(e) = ctx.add_vacant(&h, dir, &mut dst, name, ino, ft, vacancy) {
            self.undo_new(&h, ino, &mut cst, kind);
            // The directory may have grown (a leaf split) before the failure: persist it.
            self.store(&h, &d, &mut dst)?;
            return Err(e);
        }
        if kind == FileType::Directory {
            inc_dir_links(&mut dst.d);
        }
        dst.d.set_mtime(t);
        dst.d.set_ctime(t);
        self.store(&h, &d, &mut dst)?;
        self.store_new(&h, ino, &mut cst)?;
        let attr = self.attr(ino, &cst.d);
        let new = inode::inode_from_state(ino, cst);
        self.bind_device(&new);
        if kind == FileType::Regular {
            // Open before the directory lock goes: once the name is visible, an unlink
            // must find the file open (else it frees the inode under its creator).
            new.open.store(1, Ordering::Release);
        }
        Ok((attr, claim.finish(new)))
    }

    /// A new inode for `name` in directory `d` (locked as `dst`), allocated and initialised
    /// in `h` but linked nowhere: mode and owner as inode_init_owner and the directory's
    /// default ACL make them, a directory's first block or a symlink's target written. On
    /// error nothing stays allocated.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_inode<'c>(
        &'c self,
        h: &Handle,
        d: &Inode,
        dst: &InodeState,
        name: &[u8],
        mode: u16,
        rdev: u32,
        owner: Owner,
        target: Option<&[u8]>,
        t: Timespec,
    ) -> Result<(Ino, InodeState, NewInode<'c>)> {
        let dir = d.ino;
        let kind = FileType::from_mode(mode).ok_or_else(|| Error::Invalid("mode".into()))?;
        // As inode_init_owner: in a set-group-ID directory the new inode takes the
        // directory's group, and a new directory keeps the bit.
        let (mut mode, mut owner) = (mode, owner);
        if dst.d.mode() & S_ISGID != 0 {
            owner.gid = dst.d.gid();
            if kind == FileType::Directory {
                mode |= S_ISGID;
            }
        }
        // A symlink's mode is fixed; other inodes take the directory's default ACL or
        // the caller's umask.
        let acls = if kind == FileType::Symlink {
            Default::default()
        } else {
            self.acls_for_new(dir, dst, &mut mode, owner.umask)?
        };
        let want = crate::ialloc::Want {
            parent_ino: dir,
            parent_group: self.al.geo.group_of_inode(dir),
            last: &d.last_group,
            is_dir: kind == FileType::Directory,
            top: dir == ROOT_INO,
            name,
        };
        let ino = self.ial.alloc(h, &self.al, want)?;
        let claim = match self.icache.begin_new(ino) {
            Ok(c) => c,
            Err(e) => {
                let _ = self.ial.free(h, &self.al, ino, kind == FileType::Directory);
                return Err(e);
            }
        };
        let mut cst = self.init_inode(
            ino,
            mode,
            owner,
            rdev,
            kind,
            target.is_some_and(|t| t.len() >= 60),
            t,
        );
        self.inherit_rt(dst, kind, &mut cst);
        let res = self
            .fill_new(h, ino, &mut cst, dir, kind, target)
            .and_then(|_| self.store_new_acls(h, ino, &mut cst, acls));
        if let Err(e) = res {
            self.undo_new(h, ino, &mut cst, kind);
            return Err(e);
        }
        Ok((ino, cst, claim))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn init_inode(
        &self,
        ino: Ino,
        mode: u16,
        owner: Owner,
        rdev: u32,
        kind: FileType,
        slow_link: bool,
        t: Timespec,
    ) -> InodeState {
        let mut d = DiskInode::new(self.al.geo.inode_size as usize);
        d.set_mode(mode);
        d.set_uid(owner.uid);
        d.set_gid(owner.gid);
        d.set_atime(t);
        d.set_mtime(t);
        d.set_ctime(t);
        d.set_crtime(t);
        d.set_links(if kind == FileType::Directory { 2 } else { 1 });
        d.set_generation(generation(ino, self.clamp_time));
        let mapped = matches!(kind, FileType::Regular | FileType::Directory) || slow_link;
        // Without the extent feature, block maps (an all-zero i_block), as ext2/ext3.
        if mapped && self.extents {
            d.set_flags(FL_EXTENTS);
            extent::encode_node(d.iblock_mut(), &Node::Leaf(Vec::new()));
        }
        if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
            d.set_rdev(rdev);
        }
        InodeState {
            ext: mapped.then(Default::default),
            ..InodeState::from_disk(d)
        }
    }

    /// Directory block or symlink target of a new inode.
    fn fill_new(
        &self,
        h: &Handle,
        ino: Ino,
        st: &mut InodeState,
        parent: Ino,
        kind: FileType,
        target: Option<&[u8]>,
    ) -> Result<()> {
        match (kind, target) {
            (FileType::Directory, _) => self.ctx().init_dir(h, ino, st, parent),
            (FileType::Symlink, Some(t)) if t.len() < 60 => {
                st.d.iblock_mut()[..t.len()].copy_from_slice(t);
                st.d.set_size(t.len() as u64);
                Ok(())
            }
            (FileType::Symlink, Some(t)) => {
                let p = bmap::map_one_block(&self.al, h, ino, st, 0)?;
                let b = self.bufs.get_new(p);
                b.write()[..t.len()].copy_from_slice(t);
                h.dirty(&b);
                st.d.set_size(t.len() as u64);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Release what a failed create allocated.
    pub(super) fn undo_new(&self, h: &Handle, ino: Ino, st: &mut InodeState, kind: FileType) {
        let _ = self.release_xattr_block(h, st);
        let _ = self.free_blocks_of(h, ino, st, kind);
        let _ = self.ial.free(h, &self.al, ino, kind == FileType::Directory);
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
        if super::is_fast_symlink(&st.d, self.bs, self.ea_inode) {
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
        if size >= self.bs as usize {
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
        ctx.add(
            &h,
            newdir,
            &mut dst,
            newname,
            ino,
            kind_of(&cst).dirent_code(),
        )?;
        let l = cst.d.links() + 1;
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
            && !self.ea_inode
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
    fn drop_link(&self, h: &Handle, c: &Inode, st: &mut InodeState) -> Result<bool> {
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
        // Its dirty pages point at blocks freed here, which may be reused at once: they
        // must never be written (a commit's ordered list may still hold this inode).
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
    fn free_blocks_of(
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
            bmap::unmap_blocks(&self.al, h, st, 0, 1 << 32, meta)?;
            st.ext_dirty = true;
            inode::store_tree(&self.al, &self.bufs, h, 0, st)?;
        }
        self.release_ea_refs(h, ino, st)?;
        self.release_xattr_block(h, st)?;
        st.d.set_blocks_512(0, self.bs);
        Ok(())
    }

    /// Number of extents mapping `ino`'s data (what `filefrag` counts).
    pub fn extent_count(&self, ino: Ino) -> Result<usize> {
        let i = self.iget(ino)?;
        let st = self.read_loaded(&i)?;
        Ok(st.ext.as_ref().map_or(0, |e| e.len()))
    }

    /// Free space and its fragmentation, from the block bitmaps.
    pub fn free_space(&self) -> Result<crate::alloc::FreeSpace> {
        self.al.free_space()
    }

    /// Check the allocator's in-memory state against the bitmaps (see
    /// [`crate::alloc::Allocator::check`]); safe to call while other threads work.
    pub fn check_allocator(&self) -> Result<()> {
        self.al.check()
    }

    /// Mark `ino` open: its data survives unlink until the matching [`Fs::release`].
    /// Opens are counted; a file system frontend calls this on open(2).
    pub fn open(&self, ino: Ino) -> Result<()> {
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
    pub fn get_flags(&self, ino: Ino) -> Result<u32> {
        let i = self.iget(ino)?;
        let st = i.state.read();
        if st.freed {
            return Err(Error::NotFound);
        }
        Ok(st.d.flags() & iflags::FL_USER_VISIBLE)
    }

    /// Set the inode's flags as `chattr` does (FS_IOC_SETFLAGS, ext4_ioctl_setflags): flags
    /// outside the modifiable set keep their value, flags the file type cannot carry and
    /// changes lanefs has no mechanism for (data journalling, extent conversion, casefold,
    /// DAX) are refused (EOPNOTSUPP), and ctime is set. The caller has checked ownership
    /// and the right to change `i` and `a` (the VFS does, before FUSE sees the ioctl).
    pub fn set_flags(&self, ino: Ino, flags: u32) -> Result<Attr> {
        use iflags::*;
        self.check_rw()?;
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        self.load(&i, &mut st)?;
        if st.freed {
            return Err(Error::NotFound);
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
        if self.read_only || self.atime == AtimePolicy::Never {
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
        if d.flags() & FL_NOATIME != 0 || (self.nodiratime && is_dir) || d.links() == 0 {
            return false;
        }
        let at = d.atime();
        if at == now {
            return false;
        }
        self.atime == AtimePolicy::Strict
            || d.mtime() >= at
            || d.ctime() >= at
            || now.sec - at.sec >= 24 * 60 * 60
    }

    /// The inode cache's size, memory and limit.
    pub fn icache_stats(&self) -> IcacheStats {
        self.icache.stats()
    }

    /// The metadata buffer cache's size and limit.
    pub fn bufcache_stats(&self) -> BufCacheStats {
        self.bufs.stats()
    }

    /// What the page cache of file data holds, its limit and its device reads.
    pub fn pagecache_stats(&self) -> crate::page::PageCacheStats {
        self.pages.stats()
    }

    /// Drop the clean cached data of `ino` (as `POSIX_FADV_DONTNEED`): the next reads go to
    /// the device. Dirty data stays.
    pub fn drop_cache(&self, ino: Ino) -> Result<()> {
        if let Some(i) = self.icache.peek(ino) {
            i.mapping.drop_clean();
            self.pages.prune();
        }
        Ok(())
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
            block_size: self.bs,
            blocks: sb.blocks_count(),
            free_blocks: free,
            avail_blocks: free.saturating_sub(sb.r_blocks_count()),
            inodes: u64::from(sb.inodes_count()),
            free_inodes: self.ial.free_inodes(),
            name_max: 255,
        })
    }
}

/// The set-group-ID mode bit.
const S_ISGID: u16 = 0o2000;

/// A generation number for a new inode: varies per inode and per moment, or per inode
/// and clamp under `clamp_time` (a reproducible build).
fn generation(ino: Ino, clamp: Option<i64>) -> u32 {
    let salt = match clamp {
        Some(c) => c as u64,
        None => u64::from(Timespec::now().nsec),
    };
    let x = ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x >> 32) as u32
}
