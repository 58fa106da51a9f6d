//! Host directories reached by descriptor, never by path: what `cp` uses on the host side
//! so that no name it makes or reads is resolved through a symlink or `..`.
//!
//! The one path a copy follows is the one the user typed (the destination directory or a
//! source). Below it, every name is a single component, checked by [`check_name`], opened
//! relative to the descriptor of its directory with `O_NOFOLLOW`; a directory is opened
//! with `O_DIRECTORY | O_NOFOLLOW`, so a symlink put in a directory's place, before or
//! during the copy, is an error and never followed. New files are created with `O_EXCL`
//! and finished through their descriptor. A symlink or node, which has no descriptor to
//! finish it through, is made and finished in a private directory of the copy's own
//! ([`HostDir::stage`]) and only then renamed to its name, so nobody can swap something
//! else under the name between its creation and its chown or chmod. The calls with no
//! descriptor form for a symlink or a node (`lsetxattr`, `llistxattr`, `lgetxattr`) go
//! through `/proc/self/fd/DIR/NAME`: the directory is the descriptor itself (a magic
//! link), and `NAME`, the last component, is not followed by the `l` calls.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, Stat, Timestamps};

pub use rustix::fs::FileType as HostType;

/// A directory opened for a copy.
pub struct HostDir {
    fd: OwnedFd,
}

/// Why a single name cannot be used on the host: empty, `.`, `..`, or holding `/` or NUL.
pub fn check_name(name: &[u8]) -> Result<(), &'static str> {
    match name {
        b"" => Err("empty name"),
        b"." | b".." => Err("a name that is . or .."),
        _ if name.contains(&b'/') => Err("a name holding '/'"),
        _ if name.contains(&0) => Err("a name holding a NUL byte"),
        _ => Ok(()),
    }
}

/// `io::Error` of a rustix errno.
fn os(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl HostDir {
    /// Open the directory at `path` as the user gave it (symlinks in it followed: the
    /// user's own path), to reach names in it: `O_PATH`, so search permission is enough;
    /// it cannot be listed or have its own attributes set.
    pub fn open_path(path: &Path) -> io::Result<HostDir> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(os)?;
        Ok(HostDir { fd })
    }

    /// The same, opened for reading: it can be listed and have its attributes set.
    pub fn open_path_readable(path: &Path) -> io::Result<HostDir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(os)?;
        Ok(HostDir { fd })
    }

    /// Open `names`, a chain of single names this copy made, beneath `self`, one
    /// component at a time with `O_NOFOLLOW`: no symlink, no `..`.
    pub fn open_beneath<'a>(
        &self,
        names: impl IntoIterator<Item = &'a OsStr>,
    ) -> io::Result<HostDir> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = self.try_clone()?;
        for name in names {
            if check_name(name.as_bytes()).is_err() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let fd = rustix::fs::openat(&dir.fd, name, flags, Mode::empty()).map_err(os)?;
            dir = HostDir { fd };
        }
        Ok(dir)
    }

    /// Another descriptor of the same directory.
    pub fn try_clone(&self) -> io::Result<HostDir> {
        Ok(HostDir {
            fd: self.fd.try_clone()?,
        })
    }

    /// The directory's own status.
    pub fn stat(&self) -> io::Result<Stat> {
        rustix::fs::fstat(&self.fd).map_err(os)
    }

    /// What `name` is, not following a symlink; `None` when there is nothing.
    pub fn lstat(&self, name: &OsStr) -> io::Result<Option<Stat>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(os(e)),
        }
    }

    /// Open subdirectory `name`; a symlink or anything else there is ENOTDIR or ELOOP.
    pub fn open_dir(&self, name: &OsStr) -> io::Result<HostDir> {
        let fd = rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()).map_err(os)?;
        Ok(HostDir { fd })
    }

    /// Make subdirectory `name` (mode 700 until its own mode is set), or open the
    /// directory already there. `Ok(None)` when something else is there.
    pub fn make_dir(&self, name: &OsStr) -> io::Result<Option<HostDir>> {
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(os(e)),
        }
        match self.open_dir(name) {
            Ok(d) => Ok(Some(d)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Create regular file `name` for writing (mode 600 until its own mode is set); it
    /// must not exist.
    pub fn create_file(&self, name: &OsStr) -> io::Result<File> {
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        let fd =
            rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600)).map_err(os)?;
        Ok(File::from(fd))
    }

    /// Open what `name` names for writing, following a symlink, emptied when it is a
    /// regular file (O_TRUNC), as `cp` opens a destination that exists: never becoming a
    /// controlling terminal.
    pub fn open_existing_for_write(&self, name: &OsStr) -> io::Result<File> {
        let flags = OFlags::WRONLY | OFlags::TRUNC | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(os)?;
        Ok(File::from(fd))
    }

    /// Open `name` for reading: not through a symlink, never blocking on a FIFO or
    /// becoming a controlling terminal (the caller checks with `fstat` what it got).
    pub fn open_read(&self, name: &OsStr) -> io::Result<File> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(os)?;
        Ok(File::from(fd))
    }

    /// Remove non-directory `name`.
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(os)
    }

    /// Make symlink `name` pointing at `target`.
    pub fn symlink(&self, name: &OsStr, target: &[u8]) -> io::Result<()> {
        rustix::fs::symlinkat(target, &self.fd, name).map_err(os)
    }

    /// The target of symlink `name`.
    pub fn read_link(&self, name: &OsStr) -> io::Result<Vec<u8>> {
        let t = rustix::fs::readlinkat(&self.fd, name, Vec::new()).map_err(os)?;
        Ok(t.into_bytes())
    }

    /// Make device node, FIFO or socket `name` of full `mode` (type and permissions) and
    /// host device number `dev`.
    pub fn mknod(&self, name: &OsStr, mode: u32, dev: u64) -> io::Result<()> {
        let kind = HostType::from_raw_mode(mode);
        let perm = Mode::from_raw_mode(mode & 0o7777);
        rustix::fs::mknodat(&self.fd, name, kind, perm, dev).map_err(os)
    }

    /// Make `name` another name of `from_dir/from_name` (never following a symlink there).
    pub fn link_from(&self, name: &OsStr, from_dir: &HostDir, from_name: &OsStr) -> io::Result<()> {
        rustix::fs::linkat(&from_dir.fd, from_name, &self.fd, name, AtFlags::empty()).map_err(os)
    }

    /// The names in this directory but `.` and `..`, sorted.
    pub fn names(&self) -> io::Result<Vec<Vec<u8>>> {
        Ok(self.listing()?.into_iter().map(|l| l.name).collect())
    }

    /// The names in this directory but `.` and `..`, sorted, each with whether the
    /// listing calls it a regular file (`d_type`; a file system that does not say gives
    /// false, and the caller looks).
    pub fn listing(&self) -> io::Result<Vec<Listed>> {
        let mut dir = rustix::fs::Dir::read_from(&self.fd).map_err(os)?;
        let mut names = Vec::new();
        while let Some(e) = dir.read() {
            let e = e.map_err(os)?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(Listed {
                    name: n.to_vec(),
                    regular: e.file_type() == rustix::fs::FileType::RegularFile,
                });
            }
        }
        names.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(names)
    }

    /// `/proc/self/fd/DIR/NAME`: `name` in this directory for the calls that have no
    /// descriptor form and do not follow a last symlink.
    fn proc_path(&self, name: &OsStr) -> PathBuf {
        let mut p = PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        p.push(name);
        p
    }

    /// Give symlink, node or FIFO `name` its owner, not following a symlink.
    pub fn chown_at(&self, name: &OsStr, uid: u32, gid: u32) -> io::Result<()> {
        let (u, g) = ids(uid, gid);
        rustix::fs::chownat(&self.fd, name, u, g, AtFlags::SYMLINK_NOFOLLOW).map_err(os)
    }

    /// Set the permissions of node or FIFO `name`. fchmodat follows a last symlink, so
    /// this is for a private directory ([`HostDir::stage`]) holding a node the copy made.
    pub fn chmod_staged(&self, name: &OsStr, perm: u32) -> io::Result<()> {
        let mode = Mode::from_raw_mode(perm & 0o7777);
        rustix::fs::chmodat(&self.fd, name, mode, AtFlags::empty()).map_err(os)
    }

    /// A private directory in this one, for making a symlink or node with all its
    /// attributes before it is renamed to its name: made with mode 700 under a fresh name,
    /// opened without following, and checked to be this process's own (so nobody but this
    /// process, or root, can change what is in it). Returns it and its name here.
    pub fn stage(&self) -> io::Result<(HostDir, std::ffi::OsString)> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        loop {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = std::ffi::OsString::from(format!(".lanefs-cp.{}.{n}", std::process::id()));
            match rustix::fs::mkdirat(&self.fd, &name, Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(os(e)),
            }
            let dir = self.open_dir(&name)?;
            let st = dir.stat()?;
            if st.st_uid != crate::hostsys::euid() || st.st_mode & 0o7777 != 0o700 {
                return Err(io::Error::other(
                    "a private directory of the copy was replaced",
                ));
            }
            return Ok((dir, name));
        }
    }

    /// Move `name` of this directory to `to_name` in `to` (replacing a non-directory).
    pub fn rename_to(&self, name: &OsStr, to: &HostDir, to_name: &OsStr) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, name, &to.fd, to_name).map_err(os)
    }

    /// Remove empty subdirectory `name`.
    pub fn remove_dir(&self, name: &OsStr) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR).map_err(os)
    }

    /// Set the times of `name`, not following a symlink.
    pub fn set_times_at(&self, name: &OsStr, t: &Timestamps) -> io::Result<()> {
        rustix::fs::utimensat(&self.fd, name, t, AtFlags::SYMLINK_NOFOLLOW).map_err(os)
    }

    /// Set xattr `key` of `name`, not following a symlink.
    pub fn set_xattr_at(&self, name: &OsStr, key: &[u8], value: &[u8]) -> io::Result<()> {
        let p = self.proc_path(name);
        rustix::fs::lsetxattr(&p, key, value, rustix::fs::XattrFlags::empty()).map_err(os)
    }

    /// The xattr names of `name`, not following a symlink.
    pub fn xattr_names_at(&self, name: &OsStr) -> io::Result<Vec<Vec<u8>>> {
        let p = self.proc_path(name);
        grow(|buf| rustix::fs::llistxattr(&p, buf)).map(split_names)
    }

    /// The value of xattr `key` of `name`, not following a symlink.
    pub fn xattr_at(&self, name: &OsStr, key: &[u8]) -> io::Result<Vec<u8>> {
        let p = self.proc_path(name);
        grow(|buf| rustix::fs::lgetxattr(&p, key, buf))
    }
}

impl AsFd for HostDir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Owner ids for chown: -1 (which chown reads as "leave it") is left alone.
fn ids(uid: u32, gid: u32) -> (Option<rustix::fs::Uid>, Option<rustix::fs::Gid>) {
    (
        (uid != u32::MAX).then(|| rustix::fs::Uid::from_raw(uid)),
        (gid != u32::MAX).then(|| rustix::fs::Gid::from_raw(gid)),
    )
}

/// Host times for `fs` times.
pub fn timestamps(atime: lanefs::Timespec, mtime: lanefs::Timespec) -> Timestamps {
    let t = |t: lanefs::Timespec| rustix::fs::Timespec {
        tv_sec: t.sec,
        tv_nsec: i64::from(t.nsec),
    };
    Timestamps {
        last_access: t(atime),
        last_modification: t(mtime),
    }
}

/// Give the file or directory open as `fd` its owner, permissions and times.
pub fn chown_fd(fd: impl AsFd, uid: u32, gid: u32) -> io::Result<()> {
    let (u, g) = ids(uid, gid);
    rustix::fs::fchown(fd, u, g).map_err(os)
}

/// Set the permissions of the file or directory open as `fd`.
pub fn chmod_fd(fd: impl AsFd, perm: u32) -> io::Result<()> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(perm & 0o7777)).map_err(os)
}

/// Set the times of the file or directory open as `fd`.
pub fn set_times_fd(fd: impl AsFd, t: &Timestamps) -> io::Result<()> {
    rustix::fs::futimens(fd, t).map_err(os)
}

/// Set xattr `key` of the file or directory open as `fd`.
pub fn set_xattr_fd(fd: impl AsFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    rustix::fs::fsetxattr(fd, key, value, rustix::fs::XattrFlags::empty()).map_err(os)
}

/// A name in a directory listing ([`HostDir::listing`]).
pub struct Listed {
    pub name: Vec<u8>,
    /// The listing says it is a regular file (it may have changed since).
    pub regular: bool,
}

/// The xattr names of the file or directory open as `fd`.
pub fn xattr_names_fd(fd: impl AsFd) -> io::Result<Vec<Vec<u8>>> {
    let fd = fd.as_fd();
    grow(|buf| rustix::fs::flistxattr(fd, buf)).map(split_names)
}

/// The value of xattr `key` of the file or directory open as `fd`.
pub fn xattr_fd(fd: impl AsFd, key: &[u8]) -> io::Result<Vec<u8>> {
    let fd = fd.as_fd();
    grow(|buf| rustix::fs::fgetxattr(fd, key, buf))
}

/// Call `f` with a buffer that grows (up to 1 MiB, past any xattr Linux allows) while
/// it answers ERANGE; a file system without xattrs lists none.
fn grow(mut f: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    loop {
        match f(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(rustix::io::Errno::RANGE) if buf.len() < 1 << 20 => {
                let len = buf.len() * 4;
                buf.resize(len, 0);
            }
            Err(rustix::io::Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(os(e)),
        }
    }
}

/// A NUL-separated xattr name list as names.
fn split_names(list: Vec<u8>) -> Vec<Vec<u8>> {
    list.split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_one_component_are_refused() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in [&b"a"[..], b"...", b".a", b"a b", b"\xff"] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn nothing_is_followed_below_the_opened_directory() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), root.join("flink")).unwrap();
        let d = HostDir::open_path_readable(&root).unwrap();
        let n = OsStr::new;
        // A symlink where a directory is wanted: not a directory, not followed.
        assert!(d.open_dir(n("link")).is_err());
        assert!(d.make_dir(n("link")).unwrap().is_none());
        assert!(d.open_beneath([n("link")]).is_err());
        assert!(d.open_beneath([n(".."), n("outside")]).is_err());
        // Creating over a symlink (dangling or not) fails instead of writing through it.
        assert!(d.create_file(n("flink")).is_err());
        assert!(d.open_read(n("flink")).is_err());
        d.set_times_at(
            n("flink"),
            &timestamps(lanefs::Timespec::default(), lanefs::Timespec::default()),
        )
        .unwrap();
        assert!(!outside.join("f").exists());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        let sub = d.make_dir(n("sub")).unwrap().unwrap();
        sub.create_file(n("f")).unwrap();
        assert!(d
            .open_beneath([n("sub")])
            .unwrap()
            .lstat(n("f"))
            .unwrap()
            .is_some());
        let (stage, name) = d.stage().unwrap();
        stage.mknod(n("fifo"), libc::S_IFIFO | 0o600, 0).unwrap();
        stage.chmod_staged(n("fifo"), 0o4644).unwrap();
        stage.rename_to(n("fifo"), &d, n("fifo")).unwrap();
        d.remove_dir(&name).unwrap();
        let m = std::fs::symlink_metadata(root.join("fifo")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&m.permissions()),
            0o01_4644
        );
        assert_eq!(
            d.names().unwrap(),
            vec![
                b"fifo".to_vec(),
                b"flink".to_vec(),
                b"link".to_vec(),
                b"sub".to_vec()
            ]
        );
    }
}
