//! EXT4_IOC_SHUTDOWN (XFS_IOC_GOINGDOWN: fstests' `godown`, `xfs_io -c shutdown`) on any
//! file or directory of the mount: [`lanefs::Fs::shutdown`] in the mode the caller's flags
//! say, as ext4_ioctl_shutdown.
//!
//! The command is encoded `_IOR('X', 125, __u32)`, so the kernel's FUSE client passes no
//! input bytes for it (fuse_do_ioctl copies in only for `_IOC_WRITE`); the request
//! carries the caller's pointer and pid, and the flags are read from the caller's memory
//! with `process_vm_readv`. The kernel refuses that read when the daemon has fewer
//! capabilities than the caller or belongs to another user. A confined daemon (which has
//! none) then asks its supervisor, which may read it ([`crate::flagproxy`]). When neither
//! can, the shutdown is DEFAULT, which flushes and commits first and so loses nothing
//! acknowledged (fuse2fs ignores the flags and always flushes, for the same reason), and
//! one line in the log says so. The reply carries no output: the kernel copies back only
//! the bytes the daemon returns, so the caller's buffer is left alone.
//!
//! After a shutdown the engine answers what ext4 answers (lookup, getattr, readdir,
//! readlink, listxattr, statfs; ext4_getattr, ext4_lookup, ext4_readdir and ext4_statfs
//! check no shutdown) and fails everything else with EIO (ext4_file_open,
//! ext4_file_read_iter, ext4_xattr_get, ext4_sync_file and every journal start do).
//! Reads the kernel serves from its own page cache, and attributes it has cached, never
//! reach the daemon: they are not the daemon's to stop.

use super::{caller_uid, LaneFuse};
use crate::log;
use fuser::{Errno, Request};
use lanefs::{Ino, ShutdownMode};

pub(super) use crate::flagproxy::EXT4_IOC_SHUTDOWN;

impl LaneFuse {
    /// Shut the file system down for the caller of `req`, whose flags are the `u32` at
    /// `arg` in its memory. Only root may (ext4 wants CAP_SYS_ADMIN, which the daemon
    /// cannot see: uid 0 stands for it, as in `may_change_flags`); a second shutdown is
    /// a no-op, an unknown flag value EINVAL, as on ext4.
    pub(super) fn shutdown_ioctl(
        &self,
        req: &Request,
        ino: Ino,
        arg: u64,
    ) -> Result<Vec<u8>, Errno> {
        if caller_uid(req) != 0 {
            return Err(Errno::EPERM);
        }
        let read = crate::flagproxy::read_u32(req.pid(), arg);
        let read = match read {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                crate::flagproxy::ask_flags(req.pid())
            }
            r => r,
        };
        let flags = match read {
            Ok(f) => f,
            // A bad pointer: ext4's get_user fails the same way.
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => return Err(Errno::EFAULT),
            Err(e) => {
                log::line(&format!(
                    "shutdown: could not read the flags from process {} ({e}): using the \
                     default (write back and commit, then stop)",
                    req.pid()
                ));
                ShutdownMode::Default.flags()
            }
        };
        let mode = ShutdownMode::from_flags(flags).map_err(|e| self.errno("shutdown", ino, e))?;
        if !self.fs.is_shut_down() {
            // As ext4's "shut down requested (%d)".
            log::line(&format!(
                "shut down requested ({flags}, {mode:?}) by process {}",
                req.pid()
            ));
        }
        match self.fs.shutdown(mode) {
            Ok(()) => Ok(Vec::new()),
            Err(e) => Err(self.errno("shutdown", ino, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command is XFS_IOC_GOINGDOWN's number: `_IOR('X', 125, __u32)`.
    #[test]
    fn shutdown_command_number() {
        let ior = (2u32 << 30) | (4 << 16) | (u32::from(b'X') << 8) | 125;
        assert_eq!(EXT4_IOC_SHUTDOWN, ior);
    }
}
