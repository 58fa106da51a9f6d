//! The few host system calls std does not offer, each wrapped once.

use lanefs::Timespec;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Effective group id of this process.
pub fn egid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// Let a write to a closed pipe end the process quietly, like other Unix tools.
pub fn default_sigpipe() {
    // SAFETY: restoring the default disposition of SIGPIPE is always allowed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// `path` as a C string.
fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// A libc timespec for `t`.
fn c_time(t: Timespec) -> libc::timespec {
    libc::timespec {
        tv_sec: t.sec as libc::time_t,
        tv_nsec: t.nsec as libc::c_long,
    }
}

/// Set access and modification time of `path` with nanoseconds; with `follow == false`
/// a symbolic link itself is changed.
pub fn set_times(path: &Path, atime: Timespec, mtime: Timespec, follow: bool) -> io::Result<()> {
    let p = c_path(path)?;
    let times = [c_time(atime), c_time(mtime)];
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    // SAFETY: `p` is a valid NUL-terminated string and `times` holds two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Create a device node, FIFO or socket at `path` with full `mode` and host `dev`.
pub fn mknod(path: &Path, mode: u32, dev: u64) -> io::Result<()> {
    let p = c_path(path)?;
    // SAFETY: `p` is a valid NUL-terminated string.
    let rc = unsafe { libc::mknod(p.as_ptr(), mode as libc::mode_t, dev as libc::dev_t) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The ext4 (Linux `new_encode_dev`) device number for a host `st_rdev`.
pub fn rdev_to_ext4(dev: u64) -> u32 {
    let major = libc::major(dev as libc::dev_t);
    let minor = libc::minor(dev as libc::dev_t);
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// The host `dev_t` for an ext4 device number.
pub fn rdev_from_ext4(rdev: u32) -> u64 {
    let (major, minor) = split_rdev(rdev);
    libc::makedev(major, minor) as u64
}

/// Major and minor of an ext4 device number.
pub fn split_rdev(rdev: u32) -> (u32, u32) {
    (
        (rdev & 0xfff00) >> 8,
        (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
    )
}

/// lseek(2) with `SEEK_DATA` or `SEEK_HOLE` on `file`: `Ok(None)` for ENXIO (no data, or
/// `off` at or past the end). File systems without hole reporting answer as if the whole
/// file were data, which lseek does by itself.
pub fn seek_data_hole(file: &std::fs::File, off: u64, hole: bool) -> io::Result<Option<u64>> {
    use std::os::unix::io::AsRawFd;
    let whence = if hole {
        libc::SEEK_HOLE
    } else {
        libc::SEEK_DATA
    };
    let off = libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: lseek only reads and moves the offset of a descriptor `file` keeps open for
    // the duration of the call; it touches no memory of ours.
    let r = unsafe { libc::lseek(file.as_raw_fd(), off, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// The xattr names of `path` (not following a final symlink).
pub fn list_xattrs(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let p = c_path(path)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `p` is NUL terminated and `buf` is writable for the length passed.
        let n = unsafe { libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(buf
                .split(|&b| b == 0)
                .filter(|n| !n.is_empty())
                .map(<[u8]>::to_vec)
                .collect());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    }
}

/// The value of xattr `name` of `path` (not following a final symlink).
pub fn get_xattr(path: &Path, name: &[u8]) -> io::Result<Vec<u8>> {
    let (p, n) = (c_path(path)?, c_name(name)?);
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `p` and `n` are NUL terminated; `buf` is writable for the length passed.
        let r =
            unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if r >= 0 {
            buf.truncate(r as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            _ => return Err(e),
        }
    }
}

/// Set xattr `name` of `path` to `value` (not following a final symlink).
pub fn set_xattr(path: &Path, name: &[u8], value: &[u8]) -> io::Result<()> {
    let (p, n) = (c_path(path)?, c_name(name)?);
    // SAFETY: `p` and `n` are NUL terminated; `value` is readable for its length.
    let r = unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An xattr name as a C string.
fn c_name(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdev_round_trips() {
        for (ma, mi) in [(1, 3), (8, 0), (259, 65536), (4095, 1 << 19)] {
            let host = libc::makedev(ma, mi) as u64;
            let e = rdev_to_ext4(host);
            assert_eq!(split_rdev(e), (ma, mi));
            assert_eq!(rdev_from_ext4(e), host);
        }
    }
}
