//! The FUSE request handlers: each one calls `Fs` and converts the answer.
//!
//! The frontend holds no lock and no per-request state of its own: every request thread
//! (one per cloned /dev/fuse fd) calls straight into the engine, whose locks are per
//! inode, per group and per journal transaction. FUSE node ids are ext4 inode numbers,
//! except that the root (ext4 inode 2) is FUSE's node 1 (ext4 inode 1, the bad-blocks
//! inode, is never reachable by name). Open files keep their inode alive through
//! `Fs::open`/`Fs::release`, so an unlinked file lives until its last close, as on ext4.

mod flags;

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
use lanefs::internals::disk::inode as fl;
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
}

impl LaneFuse {
    /// Serve `fs` with the frontend options of `cfg`; `kernel_checks` when the kernel
    /// checks permissions (`default_permissions`, always so when users other than the
    /// mounter can reach the mount), which then covers POSIX ACLs too.
    pub fn new(fs: Arc<Fs>, cfg: &MountConfig, kernel_checks: bool) -> LaneFuse {
        LaneFuse {
            fs,
            attr_ttl: cfg.attr_timeout,
            entry_ttl: cfg.entry_timeout,
            negative_ttl: cfg.negative_timeout,
            writeback_cache: cfg.writeback_cache,
            max_write: cfg.max_write,
            errors: cfg.errors,
            posix_acl: kernel_checks,
            uring: None,
            notifier: Arc::new(OnceLock::new()),
            mountpoint: None,
            kernel_ro: Default::default(),
            born: std::time::Instant::now(),
        }
    }

    /// The mount point the kernel will have this mount at.
    pub fn with_mountpoint(mut self, mp: &std::path::Path) -> LaneFuse {
        self.mountpoint = Some(mp.to_path_buf());
        self
    }

    /// Whether the kernel has the mount read-only now (`mount -o remount,ro`, which the
    /// daemon is not told of): looked up in /proc/self/mountinfo at most once a second.
    fn kernel_read_only(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(mp) = &self.mountpoint else {
            return false;
        };
        let now = self.born.elapsed().as_millis() as u64 + 1000;
        let (ro, at) = &self.kernel_ro;
        if now.saturating_sub(at.load(Relaxed)) >= 1000 {
            ro.store(crate::mountinfo::read_only(mp), Relaxed);
            at.store(now, Relaxed);
        }
        ro.load(Relaxed)
    }

    /// The slot the session's notifier goes in (set once the session exists).
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// Drop the kernel's cached attributes of `i` (only attributes: offset -1 keeps
    /// its pages), after a change that did not come through setattr: an inode-flag
    /// ioctl changes the change time. The notification only drops a cache, so it may
    /// be sent from inside a request; if it fails, the cache expires with `attr_timeout`.
    pub(super) fn attributes_changed(&self, i: Ino) {
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(INodeNo(to_node(i)), -1, 0);
        }
    }

    /// How an open file is kept: without a FLUSH request at every close
    /// (FOPEN_NOFLUSH), which this daemon would only answer; the kernel ignores the flag
    /// under `writeback_cache`, where a close writes the cached pages back. (A close then
    /// also leaves pages dirtied through a shared mapping to write-back or fsync, as
    /// ext4's close does.)
    fn open_flags(&self) -> FopenFlags {
        FopenFlags::FOPEN_NOFLUSH
    }

    /// The engine's errno for `e`; corruption and device errors are logged, reported as
    /// EIO, and end the daemon under `errors=panic`.
    fn errno(&self, op: &str, ino: Ino, e: Error) -> Errno {
        match e {
            Error::Corrupt { .. } | Error::Io(_) => {
                log::line(&format!("{op} on inode {ino}: {e}"));
                if self.errors == ErrorPolicy::Panic {
                    log::line(
                        "errors=panic: stopping the daemon; the journal replays at the next mount",
                    );
                    std::process::exit(1);
                }
                Errno::EIO
            }
            e => Errno::from_i32(e.errno()),
        }
    }

    fn file_attr(&self, a: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(to_node(a.ino)),
            size: a.size,
            blocks: a.blocks,
            atime: to_system(a.atime),
            mtime: to_system(a.mtime),
            ctime: to_system(a.ctime),
            crtime: to_system(a.crtime),
            kind: kind(a.kind),
            perm: a.perm,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: self.fs.block_size(),
            flags: 0,
        }
    }

    /// Answer a create or tmpfile: the new file's entry, opened.
    fn created(&self, reply: ReplyCreate, what: &str, dir: Ino, r: lanefs::Result<Attr>) {
        match r {
            Ok(a) => reply.created(
                &self.entry_ttl,
                &self.file_attr(&a),
                Generation(a.generation.into()),
                FileHandle(0),
                self.open_flags(),
            ),
            Err(e) => reply.error(self.errno(what, dir, e)),
        }
    }

    fn entry(&self, reply: ReplyEntry, op: &str, ino: Ino, r: lanefs::Result<Attr>) {
        match r {
            Ok(a) => reply.entry(
                &self.entry_ttl,
                &self.file_attr(&a),
                Generation(a.generation.into()),
            ),
            Err(Error::NotFound) if op == "lookup" => not_found(reply, &self.negative_ttl),
            Err(e) => reply.error(self.errno(op, ino, e)),
        }
    }

    /// Hand `dir`'s entries after cursor `offset` to `add`, read `batch` at a time, until
    /// `add` says the reply is full (the kernel resumes from the last entry added).
    fn each_entry(
        &self,
        op: &str,
        dir: Ino,
        offset: u64,
        batch: usize,
        mut add: impl FnMut(&lanefs::DirEntry) -> Result<bool, Errno>,
    ) -> Result<(), Errno> {
        let mut pos = offset;
        loop {
            let entries = self
                .fs
                .readdir(dir, pos, batch)
                .map_err(|e| self.errno(op, dir, e))?;
            if entries.is_empty() {
                self.accessed(dir);
                return Ok(());
            }
            for e in &entries {
                if add(e)? {
                    self.accessed(dir);
                    return Ok(());
                }
                pos = e.next;
            }
        }
    }

    /// may_open's rule for `chattr` flags, which the kernel cannot apply itself (FUSE
    /// inodes carry no S_IMMUTABLE or S_APPEND): an immutable file opens for reading only,
    /// an append-only one for writing only with O_APPEND, and neither with O_TRUNC.
    fn may_open(&self, ino: Ino, flags: i32) -> lanefs::Result<()> {
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        if !writes {
            return Ok(());
        }
        let f = self.fs.get_flags(ino)?;
        let immutable = f & fl::FL_IMMUTABLE != 0;
        let append_only = f & fl::FL_APPEND != 0;
        if immutable || (append_only && (flags & libc::O_APPEND == 0 || flags & libc::O_TRUNC != 0))
        {
            return Err(Error::NotPermitted);
        }
        Ok(())
    }

    /// After an access ACL is set: clear the set-group-ID bit unless the caller is in
    /// the file's group or is root (posix_acl_update_mode). The kernel asks this of the
    /// daemon with FUSE_SETXATTR_ACL_KILL_SGID, which needs FUSE_SETXATTR_EXT, a flag
    /// fuser cannot negotiate; so the daemon decides from the caller's groups.
    fn acl_kill_sgid(&self, req: &Request, ino: Ino) -> lanefs::Result<()> {
        let a = self.fs.getattr(ino)?;
        if a.perm & 0o2000 == 0 || req.uid() == 0 || in_group(req, a.gid) {
            return Ok(());
        }
        let set = SetAttr {
            perm: Some(a.perm & !0o2000),
            ..SetAttr::default()
        };
        self.fs.setattr(ino, &set).map(|_| ())
    }

    /// After a change of `ino`'s data by a caller other than root (fallocate and its
    /// modes): clear set-user-ID, and set-group-ID where the file is group-executable or
    /// the caller is not in its group, as Linux's `file_remove_privs` does for ext4
    /// (`setattr_should_drop_suidgid`). The kernel's FUSE client, without
    /// FUSE_HANDLE_KILLPRIV_V2, keeps the older rule (set-group-ID only with group
    /// execute) and sends nothing at all for fallocate under V2; so the daemon applies
    /// the rule itself, from the caller's groups.
    fn kill_privs(&self, req: &Request, ino: Ino) -> lanefs::Result<()> {
        let a = self.fs.getattr(ino)?;
        if req.uid() == 0 || a.kind != FileType::Regular || a.perm & 0o6000 == 0 {
            return Ok(());
        }
        let mut perm = a.perm & !0o4000;
        if a.perm & 0o2010 == 0o2010 || (a.perm & 0o2000 != 0 && !in_group(req, a.gid)) {
            perm &= !0o2000;
        }
        if perm == a.perm {
            return Ok(());
        }
        let set = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        self.fs.setattr(ino, &set)?;
        // The kernel still holds the mode it had before the request.
        self.attributes_changed(ino);
        Ok(())
    }

    /// A read of `ino` succeeded: its access time as the mount's atime policy says (the
    /// kernel leaves atime to FUSE daemons). A failure to note it fails nothing.
    fn accessed(&self, ino: Ino) {
        // A mount the kernel remounted read-only writes nothing, access times included.
        if self.kernel_read_only() {
            return;
        }
        if let Err(e) = self.fs.touch_atime(ino) {
            let _ = self.errno("atime update", ino, e);
        }
    }

    fn empty(&self, reply: ReplyEmpty, op: &str, ino: Ino, r: lanefs::Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.errno(op, ino, e)),
        }
    }
}

/// FUSE node id of ext4 inode `ino`.
fn to_node(ino: Ino) -> u64 {
    if ino == ROOT_INO {
        1
    } else {
        ino
    }
}

/// ext4 inode of FUSE node id `n`.
fn to_ino(n: INodeNo) -> Ino {
    if n.0 == 1 {
        ROOT_INO
    } else {
        n.0
    }
}

fn to_system(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec.into())
    }
}

fn from_system(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timespec { sec, nsec }
        }
    }
}

fn time_or_now(t: TimeOrNow) -> Timespec {
    match t {
        TimeOrNow::SpecificTime(t) => from_system(t),
        TimeOrNow::Now => Timespec::now(),
    }
}

fn kind(k: FileType) -> fuser::FileType {
    match k {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::Symlink => fuser::FileType::Symlink,
    }
}

/// A name from the kernel, refused with ENAMETOOLONG past ext4's limit before anything
/// is looked at or written.
fn name(n: &OsStr) -> Result<&[u8], Errno> {
    let b = n.as_bytes();
    if b.len() > NAME_MAX {
        return Err(Errno::from_i32(libc::ENAMETOOLONG));
    }
    Ok(b)
}

/// Whether the caller of `req` is in group `gid`: its group or one of its supplementary
/// groups (from /proc; a caller gone meanwhile counts as not in it).
fn in_group(req: &Request, gid: u32) -> bool {
    if req.gid() == gid {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
}

/// The caller as the engine's owner of what it creates, with its umask (which the
/// kernel leaves to the daemon under FUSE_DONT_MASK; symlinks take none).
fn owner(req: &Request, umask: u32) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
        umask: (umask & 0o777) as u16,
    }
}

/// Answer a lookup of a name that does not exist: an entry with node id 0, which the
/// kernel keeps as a negative entry for `ttl` (so a second lookup of the name, a failed
/// `stat` or `open` of it, costs no request), or plain ENOENT when `ttl` is 0.
pub fn not_found(reply: ReplyEntry, ttl: &Duration) {
    if ttl.is_zero() {
        return reply.error(Errno::ENOENT);
    }
    let attr = FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    };
    reply.entry(ttl, &attr, Generation(0))
}

/// What the frontend asks the kernel for at FUSE_INIT (`lanefs memfs` asks the same, so
/// that the ceiling pays the same protocol): parallel directory operations, readdirplus,
/// asynchronous direct IO, cached symlinks, export support; the kernel caching writes
/// under `writeback_cache`; POSIX ACLs where the kernel checks permissions.
pub fn init_flags(writeback_cache: bool, posix_acl: bool) -> InitFlags {
    let mut want = InitFlags::FUSE_PARALLEL_DIROPS
        | InitFlags::FUSE_DO_READDIRPLUS
        | InitFlags::FUSE_READDIRPLUS_AUTO
        | InitFlags::FUSE_ASYNC_DIO
        | InitFlags::FUSE_CACHE_SYMLINKS
        | InitFlags::FUSE_EXPORT_SUPPORT;
    // Not FUSE_ATOMIC_O_TRUNC: with it the kernel sends O_TRUNC with OPEN and sets
    // its i_size to 0 when the daemon answers, before the VFS checks the file may be
    // written (handle_truncate: ETXTBSY for a running executable). An
    // open(O_RDONLY|O_TRUNC) of a running program then cut the program's view of its
    // own text while the call failed. Without it the VFS checks first and truncates
    // with SETATTR, as for any file system.
    if writeback_cache {
        want |= InitFlags::FUSE_WRITEBACK_CACHE;
    }
    if posix_acl {
        // The kernel enforces ACLs read through getxattr and leaves the umask to the
        // daemon (DONT_MASK), which applies it only where no default ACL is inherited.
        want |= InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
    }
    want
}

impl crate::uring::UringCapable for LaneFuse {
    fn offer_uring(&mut self, offer: UringOffer) {
        self.uring = Some(offer);
    }
}

impl Filesystem for LaneFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let want = init_flags(self.writeback_cache, self.posix_acl);
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
        // The caller unmounts the engine once every request thread has stopped.
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let dir = to_ino(parent);
        match name(n) {
            // The kernel reopens a file handle's node (FUSE_EXPORT_SUPPORT, after its
            // cache forgot the node) by looking up "." in it, whatever its type.
            Ok(b".") => self.entry(reply, "reopen", dir, self.fs.inode_by_number(dir)),
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
        _req: &Request,
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
        let now = |t: &Option<TimeOrNow>| matches!(t, Some(TimeOrNow::Now));
        let only_times = mode.is_none() && uid.is_none() && gid.is_none() && size.is_none();
        if only_times
            && (now(&atime) || now(&mtime))
            && (atime.is_none() || now(&atime))
            && (mtime.is_none() || now(&mtime))
        {
            // utime(NULL): times to now, which an append-only file allows.
            return match self.fs.set_times_now(i, atime.is_some(), mtime.is_some()) {
                Ok(a) => reply.attr(&self.attr_ttl, &self.file_attr(&a)),
                Err(e) => reply.error(self.errno("setattr", i, e)),
            };
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
        match self.fs.setattr(i, &set) {
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
            Ok(n) => self.empty(reply, "unlink", dir, self.fs.unlink(dir, n)),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let dir = to_ino(parent);
        match name(n) {
            Ok(n) => self.empty(reply, "rmdir", dir, self.fs.rmdir(dir, n)),
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
        let r = self.fs.rename_with(dir, n, newdir, newname, mode);
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
        if let Err(e) = self.may_open(i, flags.0).and_then(|()| self.fs.open(i)) {
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
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let i = to_ino(ino);
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

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let i = to_ino(ino);
        match self.fs.getattr(i) {
            Ok(a) if a.kind != FileType::Directory => reply.error(Errno::ENOTDIR),
            Ok(_) => match self.fs.open(i) {
                Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
                Err(e) => reply.error(self.errno("opendir", i, e)),
            },
            Err(e) => reply.error(self.errno("opendir", i, e)),
        }
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
            Ok(reply.add(
                INodeNo(to_node(e.ino)),
                e.next,
                OsStr::from_bytes(&e.name),
                &self.entry_ttl,
                &self.file_attr(&attr),
                Generation(attr.generation.into()),
            ))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let i = to_ino(ino);
        self.empty(reply, "releasedir", i, self.fs.release(i));
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
    /// ownership and CAP_LINUX_IMMUTABLE itself), FS_IOC_FSGETXATTR and FSSETXATTR; any
    /// other command is ENOTTY. A set by a caller neither the file's owner nor root, or
    /// a change of immutable, append-only or data journalling by one other than root, is
    /// EPERM here too (`may_set_flags`).
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        match self.ioctl_cmd(req, to_ino(ino), cmd, in_data, out_size) {
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
            if self.posix_acl && n.as_bytes() == b"system.posix_acl_access" {
                self.acl_kill_sgid(req, i)?;
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
                let trusted = req.uid() == 0;
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
                    self.may_open(a.ino, flags)?;
                    self.fs.open(a.ino)?;
                    if flags & libc::O_TRUNC != 0 && a.kind == FileType::Regular {
                        let set = SetAttr {
                            size: Some(0),
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
        // Collapse and insert range: modes of their own, with no other flag beside them
        // (vfs_fallocate: EOPNOTSUPP). Linux's fuse_file_fallocate (6.18 and before) refuses
        // both with EOPNOTSUPP without asking the daemon, so `xfs_io -c fcollapse` on a
        // mount fails in the kernel; a kernel or client that sends them gets ext4's
        // behaviour here. The data from `offset` on moved and the size changed: the
        // kernel's cached pages from there and its attributes are dropped (its dirty pages
        // must reach the daemon before the request, as fuse_file_fallocate writes a
        // punched range back first).
        let shift = libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;
        if mode & shift != 0 {
            let r = match mode {
                libc::FALLOC_FL_COLLAPSE_RANGE => self.fs.collapse_range(i, offset, length),
                libc::FALLOC_FL_INSERT_RANGE => self.fs.insert_range(i, offset, length),
                _ => return reply.error(Errno::from_i32(libc::EOPNOTSUPP)),
            };
            if r.is_ok() {
                if let Some(n) = self.notifier.get() {
                    // Below s_maxbytes, or the engine refused it.
                    let from = i64::try_from(offset).unwrap_or(0);
                    let _ = n.inval_inode(INodeNo(to_node(i)), from, 0);
                }
            }
            let r = r.and_then(|()| self.kill_privs(req, i));
            return self.empty(reply, "fallocate", i, r);
        }
        let known =
            libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let m = FallocMode {
            keep_size: mode & libc::FALLOC_FL_KEEP_SIZE != 0,
            punch_hole: mode & libc::FALLOC_FL_PUNCH_HOLE != 0,
            zero_range: mode & libc::FALLOC_FL_ZERO_RANGE != 0,
        };
        if m.punch_hole && !m.keep_size {
            // As fallocate(2): punching must keep the size.
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let r = self.fs.fallocate(i, m, offset, length);
        self.empty(
            reply,
            "fallocate",
            i,
            r.and_then(|()| self.kill_privs(req, i)),
        );
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
                if done == 0 {
                    return reply.error(self.errno("copy_file_range", dst, e));
                }
                break;
            }
            done += n as u64;
        }
        reply.written(done as u32);
    }
}

/// getxattr/listxattr's answer: the size when asked with 0, ERANGE when too small.
fn xattr_reply(reply: ReplyXattr, v: &[u8], size: u32) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if v.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE))
    } else {
        reply.data(v)
    }
}
