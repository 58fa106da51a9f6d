//! A trivial in-memory file system behind the same FUSE session and transports as
//! lanefs (`lanefs memfs MOUNTPOINT`): the ceiling `lanefs bench --compare` measures the
//! mount against, what FUSE itself allows with next to nothing behind it (as libfuse's
//! memfs_ll example is for libfuse).
//!
//! Inodes live in 64 shards of hash maps, each under its own mutex (a directory's names
//! in its inode); no call holds two shards but a rename, which takes them in index order.
//! It keeps what the benchmarks need and little else: regular files, directories,
//! symlinks, FIFOs; no xattrs, no persistence, no space limit; an inode goes when its
//! last name and its last open handle do. It asks the kernel for what lanefs's frontend
//! asks at FUSE_INIT, so that both pay the same protocol.

use crate::options::MountConfig;
use crate::uring::{negotiate, UringCapable, UringOffer};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// Inode shards.
const SHARDS: usize = 64;
/// FUSE's root node id.
const ROOT: u64 = 1;

/// What an inode holds.
enum Data {
    Dir(BTreeMap<Vec<u8>, u64>),
    File(Vec<u8>),
    Link(Vec<u8>),
    Fifo,
}

/// One inode.
struct Node {
    data: Data,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    /// Open handles: an inode without names lives until its last is released.
    opens: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
}

/// The in-memory file system.
pub struct MemFs {
    shards: Box<[Mutex<HashMap<u64, Node>>]>,
    next: AtomicU64,
    attr_ttl: Duration,
    entry_ttl: Duration,
    negative_ttl: Duration,
    /// What lanefs's frontend would ask at FUSE_INIT on this mount.
    init: InitFlags,
    uring: Option<UringOffer>,
}

impl MemFs {
    /// An empty file system (a root directory owned by the caller) with the mount's
    /// cache timeouts.
    pub fn new(cfg: &MountConfig) -> MemFs {
        let shards: Box<[_]> = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        let fs = MemFs {
            shards,
            next: AtomicU64::new(ROOT + 1),
            attr_ttl: cfg.attr_timeout,
            entry_ttl: cfg.entry_timeout,
            negative_ttl: cfg.negative_timeout,
            // Not readdirplus, which this file system does not serve (no benchmark lists).
            init: crate::frontend::init_flags(cfg.writeback_cache, cfg.kernel_checks_permissions())
                - (InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO),
            uring: None,
        };
        // SAFETY: getuid and getgid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        fs.shard(ROOT)
            .insert(ROOT, node(Data::Dir(BTreeMap::new()), 0o755, uid, gid));
        fs
    }

    fn shard(&self, ino: u64) -> MutexGuard<'_, HashMap<u64, Node>> {
        self.shards[ino as usize % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The attributes of `ino`.
    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        self.shard(ino)
            .get(&ino)
            .map(|n| file_attr(ino, n))
            .ok_or(Errno::ENOENT)
    }

    /// Make `name` in `parent` a new inode holding `data` (`opened`: with one open
    /// handle, for create); its attributes.
    fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        data: Data,
        mode: u32,
        opened: bool,
    ) -> Result<FileAttr, Errno> {
        let ino = self.next.fetch_add(1, Ordering::Relaxed);
        let is_dir = matches!(data, Data::Dir(_));
        let mut n = node(data, (mode & 0o7777) as u16, req.uid(), req.gid());
        n.opens = u32::from(opened);
        let attr = file_attr(ino, &n);
        // The inode first: a lookup finding the name finds the inode.
        self.shard(ino).insert(ino, n);
        let added = {
            let mut s = self.shard(parent);
            match s.get_mut(&parent).map(|p| &mut p.data) {
                Some(Data::Dir(names)) if names.contains_key(name.as_bytes()) => Err(Errno::EEXIST),
                Some(Data::Dir(names)) => {
                    names.insert(name.as_bytes().to_vec(), ino);
                    if let Some(p) = s.get_mut(&parent) {
                        p.mtime = SystemTime::now();
                        p.ctime = p.mtime;
                        p.nlink += u32::from(is_dir);
                    }
                    Ok(())
                }
                Some(_) => Err(Errno::ENOTDIR),
                None => Err(Errno::ENOENT),
            }
        };
        match added {
            Ok(()) => Ok(attr),
            Err(e) => {
                self.shard(ino).remove(&ino);
                Err(e)
            }
        }
    }

    /// Take `name` out of `parent` (a directory only if `dir`, and only when empty).
    fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = {
            let s = self.shard(parent);
            match s.get(&parent).map(|p| &p.data) {
                Some(Data::Dir(names)) => *names.get(name.as_bytes()).ok_or(Errno::ENOENT)?,
                _ => return Err(Errno::ENOTDIR),
            }
        };
        {
            let s = self.shard(ino);
            match s.get(&ino).map(|n| &n.data) {
                Some(Data::Dir(_)) if !dir => return Err(Errno::EISDIR),
                Some(Data::Dir(names)) if !names.is_empty() => return Err(Errno::ENOTEMPTY),
                Some(Data::Dir(_)) => {}
                Some(_) if dir => return Err(Errno::ENOTDIR),
                _ => {}
            }
        }
        {
            let mut s = self.shard(parent);
            if let Some(p) = s.get_mut(&parent) {
                if let Data::Dir(names) = &mut p.data {
                    names.remove(name.as_bytes());
                }
                p.mtime = SystemTime::now();
                p.ctime = p.mtime;
                p.nlink = p.nlink.saturating_sub(u32::from(dir));
            }
        }
        let mut s = self.shard(ino);
        let gone = s.get_mut(&ino).is_some_and(|n| {
            n.nlink = n.nlink.saturating_sub(if dir { 2 } else { 1 });
            n.ctime = SystemTime::now();
            n.nlink == 0 && n.opens == 0
        });
        if gone {
            s.remove(&ino);
        }
        Ok(())
    }
}

/// A fresh inode.
fn node(data: Data, perm: u16, uid: u32, gid: u32) -> Node {
    let now = SystemTime::now();
    let nlink = if matches!(data, Data::Dir(_)) { 2 } else { 1 };
    Node {
        data,
        perm,
        uid,
        gid,
        nlink,
        opens: 0,
        atime: now,
        mtime: now,
        ctime: now,
    }
}

fn file_attr(ino: u64, n: &Node) -> FileAttr {
    let (kind, size) = match &n.data {
        Data::Dir(_) => (FileType::Directory, 4096),
        Data::File(d) => (FileType::RegularFile, d.len() as u64),
        Data::Link(t) => (FileType::Symlink, t.len() as u64),
        Data::Fifo => (FileType::NamedPipe, 0),
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: n.atime,
        mtime: n.mtime,
        ctime: n.ctime,
        crtime: n.ctime,
        kind,
        perm: n.perm,
        nlink: n.nlink,
        uid: n.uid,
        gid: n.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl UringCapable for MemFs {
    fn offer_uring(&mut self, offer: UringOffer) {
        self.uring = Some(offer);
    }
}

impl Filesystem for MemFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // What lanefs's frontend asks for, so that both pay the same protocol.
        let have = config.capabilities();
        let _ = config.add_capabilities(self.init & have);
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        if let Some(offer) = &self.uring {
            negotiate(offer, config)?;
        }
        Ok(())
    }

    /// Only the daemon's request counts ([`crate::stats`]), as lanefs's mount answers them.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        if cmd == crate::stats::IOC_REQUEST_COUNTS {
            reply.ioctl(0, &crate::stats::counts_reply())
        } else {
            reply.error(Errno::from_i32(libc::ENOTTY))
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let child = {
            let s = self.shard(parent.0);
            match s.get(&parent.0).map(|p| &p.data) {
                Some(Data::Dir(names)) => names.get(name.as_bytes()).copied(),
                _ => return reply.error(Errno::ENOTDIR),
            }
        };
        match child.map(|c| self.attr(c)) {
            Some(Ok(a)) => reply.entry(&self.entry_ttl, &a, Generation(0)),
            Some(Err(e)) => reply.error(e),
            None => crate::frontend::not_found(reply, &self.negative_ttl),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Ok(a) => reply.attr(&self.attr_ttl, &a),
            Err(e) => reply.error(e),
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
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = self.shard(ino.0);
        let Some(n) = s.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(size) = size {
            match &mut n.data {
                Data::File(d) => d.resize(size as usize, 0),
                Data::Dir(_) => return reply.error(Errno::EISDIR),
                _ => return reply.error(Errno::EINVAL),
            }
            n.mtime = SystemTime::now();
        }
        if let Some(m) = mode {
            n.perm = (m & 0o7777) as u16;
        }
        n.uid = uid.unwrap_or(n.uid);
        n.gid = gid.unwrap_or(n.gid);
        n.atime = atime.map_or(n.atime, time);
        n.mtime = mtime.map_or(n.mtime, time);
        n.ctime = SystemTime::now();
        reply.attr(&self.attr_ttl, &file_attr(ino.0, n));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.shard(ino.0).get(&ino.0).map(|n| &n.data) {
            Some(Data::Link(t)) => reply.data(t),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let data = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Data::File(Vec::new()),
            libc::S_IFIFO => Data::Fifo,
            _ => return reply.error(Errno::EPERM),
        };
        match self.make(req, parent.0, name, data, mode, false) {
            Ok(a) => reply.entry(&self.entry_ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        match self.make(req, parent.0, name, Data::Dir(BTreeMap::new()), mode, false) {
            Ok(a) => reply.entry(&self.entry_ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let data = Data::Link(target.as_os_str().as_bytes().to_vec());
        match self.make(req, parent.0, name, data, 0o777, false) {
            Ok(a) => reply.entry(&self.entry_ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        // Both directories' shards, in index order; the names move under them.
        let (a, b) = (parent.0 as usize % SHARDS, newparent.0 as usize % SHARDS);
        let lock = |i: usize| self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
        let (mut first, mut second) = (lock(a.min(b)), (a != b).then(|| lock(a.max(b))));
        let (from_s, to_s) = match (&mut second, a <= b) {
            (None, _) => (None, None),
            (Some(s), true) => (None, Some(s)),
            (Some(s), false) => (Some(s), None),
        };
        let take = |m: &mut HashMap<u64, Node>| match m.get_mut(&parent.0).map(|p| &mut p.data) {
            Some(Data::Dir(names)) => names.remove(name.as_bytes()).ok_or(Errno::ENOENT),
            _ => Err(Errno::ENOTDIR),
        };
        let moved = match from_s {
            Some(s) => take(s),
            None => take(&mut first),
        };
        let Ok(ino) = moved else {
            return reply.error(moved.unwrap_err());
        };
        let put = |m: &mut HashMap<u64, Node>| match m.get_mut(&newparent.0).map(|p| &mut p.data) {
            Some(Data::Dir(names)) => Ok(names.insert(newname.as_bytes().to_vec(), ino)),
            _ => Err(Errno::ENOTDIR),
        };
        let r = match to_s {
            Some(s) => put(s),
            None => put(&mut first),
        };
        drop(second);
        drop(first);
        match r {
            // A file the new name replaced loses that name.
            Ok(Some(old)) if old != ino => {
                let mut s = self.shard(old);
                if s.get_mut(&old).is_some_and(|n| {
                    n.nlink = n.nlink.saturating_sub(1);
                    n.nlink == 0 && n.opens == 0
                }) {
                    s.remove(&old);
                }
                reply.ok()
            }
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// As lanefs's frontend: directories are read without OPENDIR (ENOSYS makes the kernel
    /// stop asking, FUSE_NO_OPENDIR_SUPPORT), so both pay the same requests.
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS)
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.shard(ino.0).get_mut(&ino.0) {
            Some(n) => {
                n.opens += 1;
                reply.opened(FileHandle(0), FopenFlags::FOPEN_NOFLUSH)
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = self.shard(ino.0);
        match s.get(&ino.0).map(|n| &n.data) {
            Some(Data::File(d)) => {
                let start = (offset as usize).min(d.len());
                let end = start.saturating_add(size as usize).min(d.len());
                reply.data(&d[start..end])
            }
            Some(_) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
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
        let mut s = self.shard(ino.0);
        match s.get_mut(&ino.0) {
            Some(Node {
                data: Data::File(d),
                mtime,
                ..
            }) => {
                let end = offset as usize + data.len();
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[offset as usize..end].copy_from_slice(data);
                *mtime = SystemTime::now();
                reply.written(data.len() as u32)
            }
            Some(_) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
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
        let mut s = self.shard(ino.0);
        if s.get_mut(&ino.0).is_some_and(|n| {
            n.opens = n.opens.saturating_sub(1);
            n.nlink == 0 && n.opens == 0
        }) {
            s.remove(&ino.0);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let names: Vec<(Vec<u8>, u64)> = {
            let s = self.shard(ino.0);
            match s.get(&ino.0).map(|n| &n.data) {
                Some(Data::Dir(names)) => names.iter().map(|(n, i)| (n.clone(), *i)).collect(),
                _ => return reply.error(Errno::ENOTDIR),
            }
        };
        let dots = [(b".".to_vec(), ino.0), (b"..".to_vec(), ino.0)];
        for (i, (name, child)) in dots
            .into_iter()
            .chain(names)
            .enumerate()
            .skip(offset as usize)
        {
            let kind = if i < 2 {
                FileType::Directory
            } else {
                self.attr(child).map_or(FileType::RegularFile, |a| a.kind)
            };
            if reply.add(
                INodeNo(child),
                (i + 1) as u64,
                kind,
                OsStr::from_bytes(&name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // No xattrs (the kernel asks for ACLs under default_permissions, as of lanefs).
        reply.error(Errno::ENODATA);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 30, 1 << 30, 1 << 30, 1 << 24, 1 << 24, 4096, 255, 4096);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.make(req, parent.0, name, Data::File(Vec::new()), mode, true) {
            Ok(a) => reply.created(
                &self.entry_ttl,
                &a,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_NOFLUSH,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut s = self.shard(ino.0);
        match s.get_mut(&ino.0).map(|n| &mut n.data) {
            Some(Data::File(d)) if mode == 0 => {
                let end = (offset + length) as usize;
                if d.len() < end {
                    d.resize(end, 0);
                }
                reply.ok()
            }
            Some(Data::File(_)) => reply.error(Errno::from_i32(libc::EOPNOTSUPP)),
            Some(_) => reply.error(Errno::ENODEV),
            None => reply.error(Errno::ENOENT),
        }
    }
}
