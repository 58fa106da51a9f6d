//! EXT4_IOC_SHUTDOWN (XFS_IOC_GOINGDOWN: fstests' `godown`, `xfs_io -c shutdown`) on any
//! file or directory of the mount: [`lanefs::Fs::shutdown`] in the mode the caller's flags
//! say, as ext4_ioctl_shutdown.
//!
//! The command is encoded `_IOR('X', 125, __u32)`, so the kernel's FUSE client passes no
//! input bytes for it (fuse_do_ioctl copies in only for `_IOC_WRITE`); the request
//! carries the caller's pointer and pid, and the flags are read from the caller's memory
//! with `process_vm_readv`. The kernel refuses that read when the daemon has fewer
//! capabilities than the caller or belongs to another user (a confined daemon has none):
//! then the shutdown is DEFAULT, which flushes and commits first and so loses nothing
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

use super::LaneFuse;
use crate::log;
use fuser::{Errno, Request};
use lanefs::{Ino, ShutdownMode};

/// `_IOR('X', 125, __u32)`: EXT4_IOC_SHUTDOWN, the number of XFS_IOC_GOINGDOWN.
pub(super) const EXT4_IOC_SHUTDOWN: u32 = 0x8004_587d;

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
        if req.uid() != 0 {
            return Err(Errno::EPERM);
        }
        let flags = match caller_u32(req.pid(), arg) {
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
        let mode = ShutdownMode::from_flags(flags).map_err(|_| Errno::EINVAL)?;
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

/// The `u32` at `addr` in the memory of process `pid`.
fn caller_u32(pid: u32, addr: u64) -> std::io::Result<u32> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        // No pid: the caller is in a pid namespace the daemon cannot see.
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    let mut b = [0u8; 4];
    let local = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: b.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: b.len(),
    };
    // SAFETY: `local` describes `b`, 4 bytes this function owns and may write, alive for
    // the whole call; `remote` is an address in the other process, which the kernel checks
    // (EFAULT) and which this process never dereferences. Both arrays hold one iovec.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    match n {
        4 => Ok(u32::from_ne_bytes(b)),
        n if n < 0 => Err(std::io::Error::last_os_error()),
        // Part of the word past a mapping's end.
        _ => Err(std::io::Error::from_raw_os_error(libc::EFAULT)),
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

    /// A word of this process reads back; a bad address is EFAULT; no pid is ESRCH.
    #[test]
    fn shutdown_flags_from_caller_memory() {
        let word: u32 = 0x0102_0304;
        let me = std::process::id();
        assert_eq!(caller_u32(me, &word as *const u32 as u64).unwrap(), word);
        let bad = caller_u32(me, 8).unwrap_err();
        assert_eq!(bad.raw_os_error(), Some(libc::EFAULT));
        let none = caller_u32(0, &word as *const u32 as u64).unwrap_err();
        assert_eq!(none.raw_os_error(), Some(libc::ESRCH));
    }
}
