//! Conversions between FUSE's and the engine's terms: node ids and inode numbers, times,
//! file types, names, the caller as an owner; and the replies that are plain functions
//! (a missing name, an xattr's size or value, the INIT flags).

use super::*;

/// FUSE node id of ext4 inode `ino`.
pub(super) fn to_node(ino: Ino) -> u64 {
    if ino == ROOT_INO {
        1
    } else {
        ino
    }
}

/// ext4 inode of FUSE node id `n`.
pub(super) fn to_ino(n: INodeNo) -> Ino {
    if n.0 == 1 {
        ROOT_INO
    } else {
        n.0
    }
}

pub(super) fn to_system(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec.into())
    }
}

pub(super) fn from_system(t: SystemTime) -> Timespec {
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

pub(super) fn time_or_now(t: TimeOrNow) -> Timespec {
    match t {
        TimeOrNow::SpecificTime(t) => from_system(t),
        TimeOrNow::Now => Timespec::now(),
    }
}

pub(super) fn kind(k: FileType) -> fuser::FileType {
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
pub(super) fn name(n: &OsStr) -> Result<&[u8], Errno> {
    let b = n.as_bytes();
    if b.len() > NAME_MAX {
        return Err(Errno::from_i32(libc::ENAMETOOLONG));
    }
    Ok(b)
}

/// FUSE_INVALID_UIDGID: the uid and gid of a request whose caller the kernel does not
/// name. Under FUSE_ALLOW_IDMAP it names the caller (mapped through the mount's
/// idmapping) only in the requests that create an inode, and sends this in the rest.
pub(super) const UNNAMED: u32 = u32::MAX;

/// Whether the caller of `req` is in group `gid`: its group or one of its supplementary
/// groups (from /proc, or through the supervisor when confined; a caller gone meanwhile
/// counts as not in it).
pub(super) fn in_group(req: &Request, gid: u32) -> bool {
    if req.gid() == gid && gid != UNNAMED {
        return true;
    }
    from_proc(
        || crate::flagproxy::in_group(req.pid(), gid),
        || crate::flagproxy::ask_in_group(req.pid(), gid),
    )
    .unwrap_or(false)
}

/// The fsuid of the caller of `req`: the request's, or where the kernel did not name it
/// ([`UNNAMED`]) the one /proc shows for the calling thread (the caller's own, not mapped
/// through an idmapped mount); `UNNAMED` again, which is nobody, for a caller gone or
/// unseen. Only root's decisions need it (uid 0 stands for the capabilities the daemon
/// cannot see), so a handler asks for it after its cheaper checks.
pub(super) fn caller_uid(req: &Request) -> u32 {
    if req.uid() != UNNAMED {
        return req.uid();
    }
    from_proc(
        || crate::flagproxy::fsuid(req.pid()),
        || crate::flagproxy::ask_fsuid(req.pid()),
    )
    .unwrap_or(UNNAMED)
}

/// What `read` finds in /proc, or, for a confined daemon (which may not read it), what
/// its supervisor answers through `ask`.
fn from_proc<T>(
    read: impl FnOnce() -> std::io::Result<T>,
    ask: impl FnOnce() -> std::io::Result<T>,
) -> std::io::Result<T> {
    match read() {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => ask(),
        r => r,
    }
}

/// The caller as the engine's owner of what it creates, with its umask (which the
/// kernel leaves to the daemon under FUSE_DONT_MASK; symlinks take none). The kernel
/// names the caller in every request that creates an inode, idmapped or not.
pub(super) fn owner(req: &Request, umask: u32) -> Owner {
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
/// asynchronous direct IO, cached symlinks, export support, the clearing of set-user-ID
/// and set-group-ID left to the daemon; the kernel caching writes under
/// `writeback_cache`; POSIX ACLs where the kernel checks permissions.
pub fn init_flags(writeback_cache: bool, posix_acl: bool) -> InitFlags {
    // FUSE_HANDLE_KILLPRIV_V2: the daemon clears set-user-ID and set-group-ID on write,
    // truncate and chown (`LaneFuse::kill_privs`, `chown_kills`). The kernel then marks
    // the super block SB_NOSEC, so it asks for `security.capability` (a GETXATTR) once
    // per inode until its attributes are next refreshed, instead of before every write;
    // and a chown no longer costs a GETATTR to compute the mode it would send.
    let mut want = InitFlags::FUSE_PARALLEL_DIROPS
        | InitFlags::FUSE_DO_READDIRPLUS
        | InitFlags::FUSE_READDIRPLUS_AUTO
        | InitFlags::FUSE_ASYNC_DIO
        | InitFlags::FUSE_CACHE_SYMLINKS
        | InitFlags::FUSE_EXPORT_SUPPORT
        | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
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

/// getxattr/listxattr's answer: the size when asked with 0, ERANGE when too small.
pub(super) fn xattr_reply(reply: ReplyXattr, v: &[u8], size: u32) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if v.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE))
    } else {
        reply.data(v)
    }
}
