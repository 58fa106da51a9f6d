//! The FUSE request handlers: each one calls `Fs` and converts the answer.
//!
//! The frontend holds no lock and no per-request state of its own: every request thread
//! (one per cloned /dev/fuse fd) calls straight into the engine, whose locks are per
//! inode, per group and per journal transaction. FUSE node ids are ext4 inode numbers,
//! except that the root (ext4 inode 2) is FUSE's node 1 (ext4 inode 1, the bad-blocks
//! inode, is never reachable by name). Open files keep their inode alive through
//! `Fs::open`/`Fs::release`, so an unlinked file lives until its last close, as on ext4.

mod attrs;
mod convert;
mod flags;
mod lanefuse;
mod shutdown;
mod space;

use convert::*;
pub use convert::{init_flags, not_found};
use lanefuse::Known;

use crate::log;
use crate::options::{ErrorPolicy, MountConfig};
use crate::uring::UringOffer;
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, Notifier, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};
use lanefs::{
    Attr, Error, FallocMode, FileType, Fs, Ino, Owner, RenameMode, SetAttr, Timespec, XattrFlags,
    ROOT_INO,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest name ext4 stores; FUSE lets up to 1024 bytes through to the daemon.
const NAME_MAX: usize = 255;

/// The file system FUSE serves.
pub struct LaneFuse {
    fs: Arc<Fs>,
    attr_ttl: Duration,
    entry_ttl: Duration,
    negative_ttl: Duration,
    writeback_cache: bool,
    max_write: Option<u32>,
    errors: ErrorPolicy,
    /// The kernel checks permissions (`default_permissions`: with `allow_other` or
    /// `allow_root`, or when asked for), POSIX ACLs included (FUSE_POSIX_ACL).
    posix_acl: bool,
    /// Idmapped mounts of this mount are allowed (FUSE_ALLOW_IDMAP): with `allow_other`,
    /// as the kernel then checks permissions and every user reaches the mount. The
    /// kernel then names the caller only in requests that create an inode (`caller_uid`).
    idmap: bool,
    /// FUSE-over-io_uring, when queues are ready for it: asked for at FUSE_INIT if the
    /// kernel offers it; what was decided is left here for `serve`.
    uring: Option<UringOffer>,
    /// Where the session leaves its notifier once it exists: for changes the kernel
    /// cannot see (an ioctl that changes the change time).
    notifier: Arc<OnceLock<Notifier>>,
    /// Where the kernel has the mount, to see a `remount,ro` (none: never read-only).
    mountpoint: Option<std::path::PathBuf>,
    /// Whether the kernel had the mount read-only when last looked at, and when that was
    /// (milliseconds since `born`).
    kernel_ro: (std::sync::atomic::AtomicBool, std::sync::atomic::AtomicU64),
    born: std::time::Instant,
    /// The kernel's lookup count of every inode it knows (each entry this daemon answers
    /// counts one, each FORGET takes its count off), and the open references taken for an
    /// inode removed (its last name unlinked, a directory removed, or either replaced by a
    /// rename) while the kernel still knows it, let go when the count reaches zero: ext4
    /// keeps such an inode until its last reference goes. So a removed directory that a
    /// process has as its working directory (directories are never opened: OPENDIR is
    /// answered ENOSYS) cannot have its number reused under it, and the attribute update
    /// the kernel sends for a file it just unlinked (under `writeback_cache`) finds the
    /// file. Counting, rather than letting go at the first FORGET, keeps a late FORGET of
    /// an earlier lookup (they come on the /dev/fuse thread, the lookups on the queues)
    /// from letting go of a hold the kernel still needs. Sharded by inode number.
    known: Known,
}

impl crate::uring::UringCapable for LaneFuse {
    fn offer_uring(&mut self, offer: UringOffer) {
        self.uring = Some(offer);
    }
}

impl Filesystem for LaneFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut want = init_flags(self.writeback_cache, self.posix_acl);
        if self.idmap {
            want |= InitFlags::FUSE_ALLOW_IDMAP;
        }
        // Whatever this kernel lacks is simply not asked for.
        let have = config.capabilities();
        let _ = config.add_capabilities(want & have);
        if let Some(w) = self.max_write {
            let _ = config.set_max_write(w);
        }
        if let Some(offer) = &self.uring {
            crate::uring::negotiate(offer, config)?;
        }
        // Timestamps carry nanoseconds.
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        Ok(())
    }

    fn destroy(&mut self) {
        // The caller unmounts the engine once every request thread has stopped; the
        // kernel sends no FORGET for what it still held when the connection ended.
        self.release_removed();
    }

    /// (BATCH_FORGET comes here too, a node at a time: fuser's default.)
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forgotten(to_ino(ino), nlookup);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let dir = to_ino(parent);
        match name(n) {
            // The kernel reopens a file handle's node (FUSE_EXPORT_SUPPORT, after its
            // cache forgot the node) by looking up "." in it, whatever its type; a
            // removed inode's handle is stale, as ext4's (EXT4_IGET_HANDLE).
            Ok(b".") => match self.fs.inode_by_number(dir) {
                Ok(a) if a.nlink == 0 => reply.error(Errno::ESTALE),
                r => self.entry(reply, "reopen", dir, r),
            },
            Ok(n) => self.entry(reply, "lookup", dir, self.fs.lookup(dir, n)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let i = to_ino(ino);
        match self.fs.getattr(i) {
            Ok(a) => reply.attr(&self.attr_ttl, &self.file_attr(&a)),
            Err(e) => reply.error(self.errno("getattr", i, e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let i = to_ino(ino);
        // After a shutdown, as ext4_setattr: EIO, also for a change of nothing.
        if self.fs.is_shut_down() {
            return reply.error(Errno::EIO);
        }
        let set = SetAttr {
            perm: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            ctime: ctime.map(from_system),
        };
        let now = |t: &Option<TimeOrNow>| matches!(t, Some(TimeOrNow::Now));
        match self.set_attributes(req, i, set, (now(&atime), now(&mtime))) {
            Ok(a) => reply.attr(&self.attr_ttl, &self.file_attr(&a)),
            Err(e) => reply.error(self.errno("setattr", i, e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let i = to_ino(ino);
        match self.fs.readlink(i) {
            Ok(t) => {
                self.accessed(i);
                reply.data(&t)
            }
            Err(e) => reply.error(self.errno("readlink", i, e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let dir = to_ino(parent);
        let n = match name(n) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let r = if mode & libc::S_IFMT == libc::S_IFREG || mode & libc::S_IFMT == 0 {
            // A regular file made by mknod is not open.
            self.fs
                .create(dir, n, (mode & 0o7777) as u16, owner(req, umask))
                .and_then(|a| self.fs.release(a.ino).map(|()| a))
        } else {
            self.fs.mknod(dir, n, mode, rdev, owner(req, umask))
        };
        self.entry(reply, "mknod", dir, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let dir = to_ino(parent);
        match name(n) {
            Ok(n) => {
                let r = self
                    .fs
                    .mkdir(dir, n, (mode & 0o7777) as u16, owner(req, umask));
                self.entry(reply, "mkdir", dir, r)
            }
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let dir = to_ino(parent);
        match name(n) {
            Ok(n) => {
                let held = self.hold_removed(dir, n);
                let r = self.fs.unlink(dir, n);
                self.removed(held, r.is_ok());
                self.empty(reply, "unlink", dir, r)
            }
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let dir = to_ino(parent);
        match name(n) {
            Ok(n) => {
                let held = self.hold_removed(dir, n);
                let r = self.fs.rmdir(dir, n);
                self.removed(held, r.is_ok());
                self.empty(reply, "rmdir", dir, r)
            }
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let dir = to_ino(parent);
        match name(link_name) {
            Ok(n) => {
                let r = self
                    .fs
                    .symlink(dir, n, target.as_os_str().as_bytes(), owner(req, 0));
                self.entry(reply, "symlink", dir, r)
            }
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (dir, newdir) = (to_ino(parent), to_ino(newparent));
        let (n, newname) = match (name(n), name(newname)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        // The VFS has checked the combinations (EXCHANGE alone) and CAP_MKNOD for a
        // whiteout; anything else is a flag lanefs does not know.
        let whiteout = RenameFlags::RENAME_WHITEOUT;
        let noreplace = RenameFlags::RENAME_NOREPLACE;
        let mode = if flags.is_empty() {
            RenameMode::Replace
        } else if flags == noreplace {
            RenameMode::NoReplace
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            RenameMode::Exchange
        } else if flags == whiteout || flags == whiteout | noreplace {
            RenameMode::Whiteout {
                noreplace: flags.contains(noreplace),
                owner: owner(req, 0),
            }
        } else {
            return reply.error(Errno::EINVAL);
        };
        // A directory the rename replaces is removed as by rmdir.
        let held = match mode {
            RenameMode::Exchange => None,
            _ => self.hold_removed(newdir, newname),
        };
        let r = self.fs.rename_with(dir, n, newdir, newname, mode);
        self.removed(held, r.is_ok());
        self.empty(reply, "rename", dir, r);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (i, dir) = (to_ino(ino), to_ino(newparent));
        match name(newname) {
            Ok(n) => self.entry(reply, "link", i, self.fs.link(i, dir, n)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let i = to_ino(ino);
        // The engine's rule for `chattr` flags (FUSE inodes carry no S_IMMUTABLE or
        // S_APPEND, so the kernel cannot apply it).
        let mode = lanefs::OpenMode::from_open_flags(flags.0);
        if let Err(e) = self.fs.may_open(i, mode).and_then(|()| self.fs.open(i)) {
            return reply.error(self.errno("open", i, e));
        }
        reply.opened(FileHandle(0), self.open_flags());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let i = to_ino(ino);
        let mut buf = vec![0u8; size as usize];
        match self.fs.read(i, offset, &mut buf) {
            Ok(n) => {
                if flags.0 & libc::O_NOATIME == 0 {
                    self.accessed(i);
                }
                reply.data(&buf[..n])
            }
            Err(e) => reply.error(self.errno("read", i, e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let i = to_ino(ino);
        // FUSE_HANDLE_KILLPRIV_V2: the kernel flags each write by a caller without
        // CAP_FSETID and leaves the clearing to the daemon (file_remove_privs).
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            if let Err(e) = self.kill_privs(req, i, true) {
                return reply.error(self.errno("write", i, e));
            }
        }
        match self.fs.write(i, offset, data) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(self.errno("write", i, e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let i = to_ino(ino);
        self.empty(reply, "release", i, self.fs.release(i));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let i = to_ino(ino);
        self.empty(reply, "fsync", i, self.fs.fsync(i, datasync));
    }

    /// FUSE_NO_OPENDIR_SUPPORT: the first OPENDIR is answered ENOSYS, and the kernel then
    /// opens directories without asking (and never sends RELEASEDIR): two requests less
    /// per directory read, and the kernel keeps what it read of a directory in its
    /// cache (FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR, its default without OPENDIR) until the
    /// directory changes, so a second reading costs none. A directory removed while the
    /// kernel holds it is kept by `removed` instead of an open reference.
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dir = to_ino(ino);
        let r = self.each_entry("readdir", dir, offset, 128, |e| {
            Ok(reply.add(
                INodeNo(to_node(e.ino)),
                e.next,
                kind(e.kind),
                OsStr::from_bytes(&e.name),
            ))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let dir = to_ino(ino);
        let r = self.each_entry("readdirplus", dir, offset, 64, |e| {
            let attr = match self.fs.getattr(e.ino) {
                Ok(a) => a,
                // Removed since the block was read: leave it out.
                Err(Error::NotFound) => return Ok(false),
                Err(err) => return Err(self.errno("readdirplus", e.ino, err)),
            };
            // Every entry the kernel takes but "." and ".." counts as a lookup; the
            // count goes up before the reply can reach the kernel.
            let dots = e.name == b"." || e.name == b"..";
            if !dots {
                self.looked_up(e.ino);
            }
            let full = reply.add(
                INodeNo(to_node(e.ino)),
                e.next,
                OsStr::from_bytes(&e.name),
                &self.entry_ttl,
                &self.file_attr(&attr),
                Generation(attr.generation.into()),
            );
            if full && !dots {
                // Not in this reply after all.
                self.forgotten(e.ino, 1);
            }
            Ok(full)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        // No OPENDIR was answered, so there is nothing to release.
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let i = to_ino(ino);
        self.empty(reply, "fsyncdir", i, self.fs.fsync(i, datasync));
    }

    /// `lsattr`/`chattr`: FS_IOC_GETFLAGS and FS_IOC_SETFLAGS (the kernel's fileattr code
    /// sends them with a 4-byte int whatever the command's encoded size, after checking
    /// ownership and CAP_LINUX_IMMUTABLE itself), FS_IOC_FSGETXATTR and FSSETXATTR; and
    /// EXT4_IOC_SHUTDOWN, whose flags are read at `arg` in the caller's memory
    /// (`shutdown.rs`); any other command is ENOTTY. A set by a caller neither the file's
    /// owner nor root, or a change of immutable, append-only or data journalling by one
    /// other than root, is EPERM here too (`may_set_flags`).
    fn ioctl_arg(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        arg: u64,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        match self.ioctl_cmd(req, to_ino(ino), cmd, arg, in_data, out_size) {
            Ok(out) => reply.ioctl(0, &out),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        // Asked of a file: a realtime one (or directory) reports the rt device.
        match self.fs.statfs_at(to_ino(ino)) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.free_blocks,
                s.avail_blocks,
                s.inodes,
                s.free_inodes,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(self.errno("statfs", to_ino(ino), e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let i = to_ino(ino);
        let f = match flags {
            0 => XattrFlags::Any,
            libc::XATTR_CREATE => XattrFlags::Create,
            libc::XATTR_REPLACE => XattrFlags::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        let r = self.fs.setxattr(i, n.as_bytes(), value, f);
        let r = r.and_then(|()| {
            if n.as_bytes() == b"system.posix_acl_access" {
                if self.posix_acl {
                    self.acl_kill_sgid(req, i)?;
                }
                // The engine set the mode from the ACL (posix_acl_update_mode); without
                // FUSE_POSIX_ACL the kernel would keep its cached mode for a day.
                self.attributes_changed(i);
            }
            Ok(())
        });
        self.empty(reply, "setxattr", i, r);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        let i = to_ino(ino);
        match self.fs.getxattr(i, n.as_bytes()) {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(e) => reply.error(self.errno("getxattr", i, e)),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let i = to_ino(ino);
        match self.fs.listxattr(i) {
            Ok(names) => {
                let mut buf = Vec::new();
                // As ext4_xattr_trusted_list: trusted.* names only for root (CAP_SYS_ADMIN;
                // the VFS refuses anyone else their values, and FUSE passes the list as is).
                // The caller's uid only when it matters (under FUSE_ALLOW_IDMAP it costs a
                // read of /proc, or a question to the supervisor).
                let any_trusted = names.iter().any(|n| n.starts_with(b"trusted."));
                let trusted = any_trusted && caller_uid(req) == 0;
                for n in names {
                    if !trusted && n.starts_with(b"trusted.") {
                        continue;
                    }
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                xattr_reply(reply, &buf, size)
            }
            Err(e) => reply.error(self.errno("listxattr", i, e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let i = to_ino(ino);
        self.empty(
            reply,
            "removexattr",
            i,
            self.fs.removexattr(i, n.as_bytes()),
        );
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Called only without default_permissions (a mount only its non-root mounter
        // reaches, unless asked for): the daemon answers from the mode bits.
        let i = to_ino(ino);
        let a = match self.fs.getattr(i) {
            Ok(a) => a,
            Err(e) => return reply.error(self.errno("access", i, e)),
        };
        let want = mask.bits() & 7;
        if want == 0 {
            return reply.ok();
        }
        let ok = if req.uid() == 0 {
            // Root may do anything, but execute needs some execute bit (or a directory).
            want & 1 == 0 || a.perm & 0o111 != 0 || a.kind == FileType::Directory
        } else {
            let bits = if req.uid() == a.uid {
                (a.perm >> 6) & 7
            } else if req.gid() == a.gid {
                (a.perm >> 3) & 7
            } else {
                a.perm & 7
            };
            (bits as i32) & want == want
        };
        if ok {
            reply.ok()
        } else {
            reply.error(Errno::EACCES)
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let dir = to_ino(parent);
        let n = match name(n) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let r = match self
            .fs
            .create(dir, n, (mode & 0o7777) as u16, owner(req, umask))
        {
            // Without O_EXCL, a name that appeared since the kernel's lookup is opened.
            Err(Error::Exists) if flags & libc::O_EXCL == 0 => {
                self.fs.lookup(dir, n).and_then(|a| {
                    if a.kind == FileType::Directory {
                        return Err(Error::IsDir);
                    }
                    self.fs
                        .may_open(a.ino, lanefs::OpenMode::from_open_flags(flags))?;
                    self.fs.open(a.ino)?;
                    if flags & libc::O_TRUNC != 0 && a.kind == FileType::Regular {
                        let set = SetAttr {
                            size: Some(0),
                            perm: self.privs_cleared(req, &a, a.perm, false),
                            ..SetAttr::default()
                        };
                        if let Err(e) = self.fs.setattr(a.ino, &set) {
                            let _ = self.fs.release(a.ino);
                            return Err(e);
                        }
                    }
                    self.fs.getattr(a.ino)
                })
            }
            r => r,
        };
        self.created(reply, "create", dir, r);
    }

    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let dir = to_ino(parent);
        let perm = (mode & 0o7777) as u16;
        // O_EXCL: never to be linked (the VFS refuses linkat too; the engine agrees).
        let linkable = flags & libc::O_EXCL == 0;
        let r = self.fs.tmpfile(dir, perm, owner(req, umask), linkable);
        self.created(reply, "tmpfile", dir, r);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let i = to_ino(ino);
        let r = self.allocate_space(req, i, offset, length, mode);
        self.empty(reply, "fallocate", i, r);
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let i = to_ino(ino);
        if offset < 0 {
            return reply.error(Errno::ENXIO);
        }
        let r = match whence {
            libc::SEEK_DATA => self.fs.seek_data(i, offset as u64),
            libc::SEEK_HOLE => self.fs.seek_hole(i, offset as u64),
            // The kernel answers SEEK_SET, SEEK_CUR and SEEK_END itself.
            _ => return reply.error(Errno::EINVAL),
        };
        match r {
            Ok(Some(o)) => reply.offset(o as i64),
            Ok(None) => reply.error(Errno::ENXIO),
            Err(e) => reply.error(self.errno("lseek", i, e)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let (src, dst) = (to_ino(ino_in), to_ino(ino_out));
        // One reply carries at most u32::MAX bytes; the caller loops for the rest.
        let len = len.min(1 << 30);
        let mut buf = vec![0u8; len.min(1 << 20) as usize];
        let mut done = 0u64;
        while done < len {
            let want = ((len - done) as usize).min(buf.len());
            let n = match self.fs.read(src, offset_in + done, &mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return reply.error(self.errno("copy_file_range", src, e)),
            };
            if let Err(e) = self.fs.write(dst, offset_out + done, &buf[..n]) {
                // What was copied is answered; the error is still the frontend's to log.
                let errno = self.errno("copy_file_range", dst, e);
                if done == 0 {
                    return reply.error(errno);
                }
                break;
            }
            done += n as u64;
        }
        reply.written(done as u32);
    }
}
