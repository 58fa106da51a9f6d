//! Inode flags through ioctls: `lsattr`/`chattr` (FS_IOC_GETFLAGS/SETFLAGS) and
//! `xfs_io -c chattr` (FS_IOC_FSGETXATTR/FSSETXATTR, with the realtime flag and extent
//! size hint as XFS names them), and ext4's checks on who may change which.

use super::{caller_uid, LaneFuse, UNNAMED};
use fuser::{Errno, Request};
use lanefs::{Error, FileType, Ino, InodeFlags};

/// `_IOR('f', 1, long)`: read the inode flags (`lsattr`).
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
/// `_IOW('f', 2, long)`: set the inode flags (`chattr`).
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// The same two with an `int` argument, as 32-bit callers send them.
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;

/// `_IOR('X', 31, struct fsxattr)`: read the extended flags (`xfs_io -c lsattr`; the
/// kernel also asks it before a set).
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
/// `_IOW('X', 32, struct fsxattr)`: set them.
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
/// `struct fsxattr`: xflags, extsize, nextents, projid, cowextsize, 8 bytes of padding.
const FSXATTR_SIZE: usize = 28;
/// ext4 inode flags and the FS_XFLAG_* bits that say the same (fileattr_fill_flags):
/// sync, immutable, append, nodump, noatime, DAX, project inheritance.
const XFLAG_MAP: [(u32, u32); 7] = [
    (InodeFlags::SYNC.bits(), 0x20),
    (InodeFlags::IMMUTABLE.bits(), 0x8),
    (InodeFlags::APPEND.bits(), 0x10),
    (InodeFlags::NODUMP.bits(), 0x80),
    (InodeFlags::NOATIME.bits(), 0x40),
    (InodeFlags::DAX.bits(), 0x8000),
    (InodeFlags::PROJINHERIT.bits(), 0x200),
];

/// FS_XFLAG_REALTIME: a file's data is on the realtime device (XFS's flag).
const XFLAG_REALTIME: u32 = 0x1;
/// FS_XFLAG_RTINHERIT: a directory's new children are realtime.
const XFLAG_RTINHERIT: u32 = 0x100;
/// FS_XFLAG_EXTSIZE and EXTSZINHERIT: the extent size hint of a file, of a directory.
const XFLAG_EXTSIZE: u32 = 0x800;
const XFLAG_EXTSZINHERIT: u32 = 0x1000;
/// The realtime xflags, which map to lanefs's realtime flag and hint, not ext4 flags.
const XFLAG_RT_ALL: u32 = XFLAG_REALTIME | XFLAG_RTINHERIT | XFLAG_EXTSIZE | XFLAG_EXTSZINHERIT;

/// ext4's data-journalling flag (`chattr +j`), which only CAP_SYS_RESOURCE may change.
const FL_JOURNAL_DATA: u32 = 0x4000;
/// The flags ext4 lets only a capable caller change: immutable and append-only
/// (CAP_LINUX_IMMUTABLE), data journalling (CAP_SYS_RESOURCE).
const FL_CAPABLE_ONLY: u32 =
    InodeFlags::IMMUTABLE.bits() | InodeFlags::APPEND.bits() | FL_JOURNAL_DATA;

/// The FS_XFLAG_* bits of ext4 inode flags `f`.
fn xflags_of(f: u32) -> u32 {
    XFLAG_MAP
        .iter()
        .filter(|m| f & m.0 != 0)
        .fold(0, |a, m| a | m.1)
}

/// The ext4 inode flags of FS_XFLAG_* bits `x`.
fn flags_of(x: u32) -> u32 {
    XFLAG_MAP
        .iter()
        .filter(|m| x & m.1 != 0)
        .fold(0, |a, m| a | m.0)
}

impl LaneFuse {
    /// Answer ioctl `cmd` on `i` (its output, at most `out_size` bytes; `arg` is the
    /// caller's pointer): the flag commands above and the shutdown; any other is ENOTTY.
    pub(super) fn ioctl_cmd(
        &self,
        req: &Request,
        i: Ino,
        cmd: u32,
        arg: u64,
        in_data: &[u8],
        out_size: u32,
    ) -> Result<Vec<u8>, Errno> {
        match cmd {
            crate::stats::IOC_REQUEST_COUNTS => Ok(crate::stats::counts_reply()),
            // Debug builds' test hook: root makes the daemon try to open a host path.
            #[cfg(debug_assertions)]
            crate::confine::IOC_PROBE_OPEN if caller_uid(req) == 0 => {
                crate::confine::probe_open(in_data).map_err(Errno::from_i32)?;
                Ok(Vec::new())
            }
            #[cfg(debug_assertions)]
            crate::confine::IOC_PROBE_FORBIDDEN if caller_uid(req) == 0 => {
                crate::confine::probe_forbidden();
                Ok(Vec::new())
            }
            super::shutdown::EXT4_IOC_SHUTDOWN => self.shutdown_ioctl(req, i, arg),
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => match self.fs.get_flags(i) {
                Ok(f) => {
                    // The raw word on the wire, unknown bits included.
                    let b = f.bits().to_ne_bytes();
                    Ok(b[..b.len().min(out_size as usize)].to_vec())
                }
                Err(e) => Err(self.errno("getflags", i, e)),
            },
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
                let Some(b) = in_data.get(..4) else {
                    return Err(Errno::EINVAL);
                };
                let f = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                match self
                    .may_set_flags(req, i, f)
                    .and_then(|()| self.fs.set_flags(i, InodeFlags::from_bits_retain(f)))
                {
                    Ok(_) => {
                        self.attributes_changed(i);
                        Ok(Vec::new())
                    }
                    Err(e) => Err(self.errno("setflags", i, e)),
                }
            }
            // The kernel reads these first even for FS_IOC_SETFLAGS (vfs_fileattr_set).
            FS_IOC_FSGETXATTR => match self.fsx_get(i) {
                Ok(b) => Ok(b[..b.len().min(out_size as usize)].to_vec()),
                Err(e) => Err(self.errno("fsgetxattr", i, e)),
            },
            FS_IOC_FSSETXATTR => {
                let Some(b) = in_data.get(..FSXATTR_SIZE) else {
                    return Err(Errno::EINVAL);
                };
                let word = |k: usize| u32::from_ne_bytes([b[k], b[k + 1], b[k + 2], b[k + 3]]);
                let new = |old: u32| (old & !flags_of(u32::MAX)) | flags_of(word(0));
                // The owner (or root) first, as vfs_fileattr_set.
                if let Err(e) = self.may_change_flags(req, i) {
                    return Err(self.errno("fssetxattr", i, e));
                }
                // Project ids and xflags without an ext4 or realtime meaning: not here.
                let known = xflags_of(u32::MAX) | XFLAG_RT_ALL;
                if word(12) != 0 || word(0) & !known != 0 {
                    return Err(Errno::from_i32(libc::EOPNOTSUPP));
                }
                let r = self
                    .fs
                    .get_flags(i)
                    .and_then(|old| self.may_set_flags(req, i, new(old.bits())))
                    .and_then(|()| self.fsx_set_rt(i, word(0), word(4)))
                    .and_then(|()| self.fs.get_flags(i))
                    .and_then(|old| {
                        let f = InodeFlags::from_bits_retain(new(old.bits()));
                        self.fs.set_flags(i, f)
                    });
                match r {
                    Ok(_) => {
                        self.attributes_changed(i);
                        Ok(Vec::new())
                    }
                    Err(e) => Err(self.errno("fssetxattr", i, e)),
                }
            }
            _ => Err(Errno::from_i32(libc::ENOTTY)),
        }
    }

    /// Whether the caller of `req` may change `ino`'s inode flags at all: its owner or
    /// root (vfs_fileattr_set's inode_owner_or_capable; uid 0 stands for CAP_FOWNER,
    /// which the daemon cannot see). A caller the kernel does not name (on a mount that
    /// allows idmapped mounts) was found the owner by the kernel, through the mount's
    /// idmapping, which the daemon does not know: that check stands.
    fn may_change_flags(&self, req: &Request, ino: Ino) -> lanefs::Result<()> {
        let uid = req.uid();
        if uid != 0 && uid != UNNAMED && self.fs.getattr(ino)?.uid != uid {
            return Err(Error::NotPermitted);
        }
        Ok(())
    }

    /// ext4's checks on a change of `ino`'s inode flags to `new` by the caller of `req`
    /// (vfs_fileattr_set, ext4_fileattr_set): only the file's owner or root may change
    /// flags, only root the immutable, append-only (CAP_LINUX_IMMUTABLE) and
    /// data-journalling (CAP_SYS_RESOURCE) ones; and a file that stays immutable keeps
    /// its other flags, whoever asks (ext4_ioctl_check_immutable). The VFS makes the
    /// first two checks itself, with the caller's real capabilities, before the daemon
    /// sees the request; the daemon makes them again so that nothing but root ever sets
    /// or clears immutable or append-only through it, whatever the mount's options.
    fn may_set_flags(&self, req: &Request, ino: Ino, new: u32) -> lanefs::Result<()> {
        self.may_change_flags(req, ino)?;
        let old = self.fs.get_flags(ino)?.bits();
        if (old ^ new) & FL_CAPABLE_ONLY != 0 && caller_uid(req) != 0 {
            return Err(Error::NotPermitted);
        }
        // As ext4, against the masked request and the whole of the old flags.
        let new = new & InodeFlags::USER_MODIFIABLE.bits();
        let immutable = InodeFlags::IMMUTABLE.bits();
        if old & new & immutable != 0 && (old ^ new) & !immutable != 0 {
            return Err(Error::NotPermitted);
        }
        Ok(())
    }

    /// `struct fsxattr` of `i`: the ext4 flags as xflags, and the realtime flag and extent
    /// size hint as XFS names them (REALTIME on a file, RTINHERIT on a directory; the hint
    /// in bytes).
    fn fsx_get(&self, i: Ino) -> lanefs::Result<[u8; FSXATTR_SIZE]> {
        let f = self.fs.get_flags(i)?.bits();
        let mut x = xflags_of(f);
        let mut extsize = 0u32;
        if self.fs.rt_geometry().is_some() {
            let (rt, hint) = self.fs.realtime(i)?;
            let dir = self.fs.getattr(i)?.kind == FileType::Directory;
            if rt {
                x |= if dir { XFLAG_RTINHERIT } else { XFLAG_REALTIME };
            }
            if hint > 0 {
                x |= if dir {
                    XFLAG_EXTSZINHERIT
                } else {
                    XFLAG_EXTSIZE
                };
                extsize = hint.saturating_mul(self.fs.block_size());
            }
        }
        let mut b = [0u8; FSXATTR_SIZE];
        b[..4].copy_from_slice(&x.to_ne_bytes());
        b[4..8].copy_from_slice(&extsize.to_ne_bytes());
        Ok(b)
    }

    /// Apply the realtime part of an FS_IOC_FSSETXATTR: the flag and the hint (bytes),
    /// each only when it changes (the kernel sends back what FSGETXATTR gave).
    fn fsx_set_rt(&self, i: Ino, x: u32, extsize: u32) -> lanefs::Result<()> {
        let want_rt = x & (XFLAG_REALTIME | XFLAG_RTINHERIT) != 0;
        let hint_flag = x & (XFLAG_EXTSIZE | XFLAG_EXTSZINHERIT) != 0;
        if self.fs.rt_geometry().is_none() {
            if want_rt || hint_flag || extsize != 0 {
                return Err(lanefs::Error::NotSupported(
                    "the image has no realtime device".into(),
                ));
            }
            return Ok(());
        }
        let bs = self.fs.block_size();
        if !extsize.is_multiple_of(bs) {
            return Err(lanefs::Error::Invalid(format!(
                "extent size hint {extsize} bytes is not a multiple of the block size"
            )));
        }
        let (rt, hint) = self.fs.realtime(i)?;
        let new_hint = if hint_flag || extsize != 0 {
            extsize / bs
        } else {
            0
        };
        if want_rt != rt {
            self.fs.set_realtime(i, want_rt)?;
        }
        if new_hint != hint {
            self.fs.set_extsize(i, new_hint)?;
        }
        Ok(())
    }
}
