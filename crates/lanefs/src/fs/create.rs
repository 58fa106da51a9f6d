//! Making inodes: create, mkdir, mknod, symlink, and the new inode's setup (number,
//! owner, times, generation) shared with the O_TMPFILE open and undone on failure.

use super::ops::{check_name, flags, inc_dir_links, PATH_MAX};
use super::Fs;
use crate::bmap;
use crate::dir::Probe;
use crate::disk::extent::{self, Node};
use crate::disk::inode::{DiskInode, FL_EXTENTS};
use crate::error::{Error, Result};
use crate::icache::{IRef, NewInode};
use crate::inode::{self, Inode, InodeState};
use crate::journal::Handle;
use crate::types::*;
use crate::volume::Features;
use std::sync::atomic::Ordering;

impl Fs {
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
        if target.is_empty() || target.len() >= (self.vol.bs() as usize).min(PATH_MAX) {
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
        let slow_link = target.is_some_and(|t| t.len() >= 60);
        let (ino, mut cst, claim) = self.birth(h, want, mode, owner, rdev, kind, slow_link, t)?;
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

    /// The birth of every inode (create, mkdir, mknod, symlink, O_TMPFILE, and the
    /// xattr code's EA inodes): a number from the inode allocator as `want` asks, the
    /// inode cache's claim on it (the number is given back if the claim fails), and its
    /// first state ([`Fs::init_inode`]). Linked nowhere and written nowhere yet.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn birth<'c>(
        &'c self,
        h: &Handle,
        want: crate::ialloc::Want<'_>,
        mode: u16,
        owner: Owner,
        rdev: u32,
        kind: FileType,
        slow_link: bool,
        t: Timespec,
    ) -> Result<(Ino, InodeState, NewInode<'c>)> {
        let ino = self.ial.alloc(h, &self.al, want)?;
        let claim = match self.icache.begin_new(ino) {
            Ok(c) => c,
            Err(e) => {
                let _ = self.ial.free(h, &self.al, ino, kind == FileType::Directory);
                return Err(e);
            }
        };
        let st = self.init_inode(ino, mode, owner, rdev, kind, slow_link, t);
        debug_assert_eq!(
            st.d.links(),
            if kind == FileType::Directory { 2 } else { 1 }
        );
        Ok((ino, st, claim))
    }

    /// A new inode's first state: mode, owner, the four times `t`, one link (two for a
    /// directory), a generation, and an empty extent tree if its data is mapped and the
    /// file system has extents.
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
        d.set_generation(generation(ino, self.vol.clamp_time));
        let mapped = matches!(kind, FileType::Regular | FileType::Directory) || slow_link;
        // Without the extent feature, block maps (an all-zero i_block), as ext2/ext3.
        if mapped && self.vol.has(Features::EXTENTS) {
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
