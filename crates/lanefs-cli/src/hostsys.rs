//! The few host system calls std does not offer, each wrapped once.

use std::io;

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

/// Raise the soft limit on open descriptors to the hard one: a copy holds one open per
/// directory level it is in (a tree deeper than the usual 1024 would fail with EMFILE).
pub fn raise_fd_limit() {
    if let Some(mut r) = nofile().filter(|r| r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        // SAFETY: setrlimit reads one rlimit from `r`, which outlives the call; failing
        // leaves the limit as it was.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    }
}

/// The descriptors this process may open now (the soft limit).
pub fn fd_limit() -> Option<u64> {
    nofile().map(|r| r.rlim_cur)
}

/// The limits on open descriptors.
fn nofile() -> Option<libc::rlimit> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `r`, which outlives the call.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r)
}

/// Let a write to a closed pipe end the process quietly, like other Unix tools.
pub fn default_sigpipe() {
    // SAFETY: restoring the default disposition of SIGPIPE is always allowed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The ext4 (Linux `new_encode_dev`) device number for a host `st_rdev`.
pub fn rdev_to_ext4(dev: u64) -> u32 {
    ext4_rdev(
        libc::major(dev as libc::dev_t),
        libc::minor(dev as libc::dev_t),
    )
}

/// The ext4 device number (the new encoding, as the kernel's `new_encode_dev`) of
/// `major`:`minor`.
pub fn ext4_rdev(major: u32, minor: u32) -> u32 {
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
