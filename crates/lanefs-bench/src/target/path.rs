//! The path target: real syscalls under one directory (a kernel mount or a FUSE mount).

use super::*;

/// Real syscalls under one directory.
#[derive(Debug)]
pub struct PathBackend {
    label: String,
    base: Dir,
    /// Pid of the process serving the file system (a FUSE daemon), for [`Backend::daemon_cpu`].
    daemon: Option<u32>,
}

impl PathBackend {
    /// A backend working in `dir`, labelled "path:<label_dir>".
    pub fn new(dir: &Path, label_dir: &Path) -> Result<PathBackend, String> {
        Self::labelled(dir, format!("path:{}", label_dir.display()), None)
    }

    /// A backend working in `dir` under `label`, whose file system is served by process
    /// `daemon` (when known).
    pub fn labelled(dir: &Path, label: String, daemon: Option<u32>) -> Result<PathBackend, String> {
        let file = File::open(dir).map_err(|e| format!("open directory {}: {e}", dir.display()))?;
        Ok(PathBackend {
            label,
            base: Dir::Path {
                file,
                path: dir.to_path_buf(),
            },
            daemon,
        })
    }

    fn dir<'a>(&self, d: &'a Dir) -> Result<(&'a File, &'a Path), String> {
        match d {
            Dir::Path { file, path } => Ok((file, path)),
            Dir::Ino(ino) => Err(format!(
                "engine directory inode {ino} given to a path target"
            )),
        }
    }

    fn fd<'a>(&self, h: &'a Handle) -> Result<&'a File, String> {
        match h {
            Handle::File(f) => Ok(f),
            Handle::Ino(ino) => Err(format!("engine inode {ino} given to a path target")),
        }
    }
}

fn off_t(v: u64, what: &str) -> Result<libc::off_t, String> {
    libc::off_t::try_from(v).map_err(|_| format!("{what} {v} does not fit in off_t"))
}

impl Backend for PathBackend {
    fn label(&self) -> String {
        self.label.clone()
    }
    fn location(&self) -> String {
        match &self.base {
            Dir::Path { path, .. } => path.display().to_string(),
            Dir::Ino(_) => self.label.clone(),
        }
    }
    fn base(&self) -> &Dir {
        &self.base
    }
    fn mkdir(&self, parent: &Dir, name: &Name) -> Result<Dir, String> {
        let (_, p) = self.dir(parent)?;
        let path = p.join(&*name.display());
        std::fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        let file = File::open(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
        Ok(Dir::Path { file, path })
    }
    fn create(&self, dir: &Dir, name: &Name) -> Result<Handle, String> {
        let (d, p) = self.dir(dir)?;
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC;
        // SAFETY: the directory fd is open for the life of `d`, and the name is NUL-terminated.
        let fd = unsafe {
            libc::openat(
                d.as_raw_fd(),
                name.0.as_ptr(),
                flags,
                libc::c_uint::from(FILE_PERM),
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("create {}/{}: {e}", p.display(), name.display()));
        }
        // SAFETY: `fd` was just returned by openat and nothing else owns it.
        Ok(Handle::File(unsafe { File::from_raw_fd(fd) }))
    }
    fn close(&self, h: Handle) -> Result<(), String> {
        // Dropping the File closes it; close(2) errors are not reported by std, as in mdtest.
        match h {
            Handle::File(f) => {
                drop(f);
                Ok(())
            }
            Handle::Ino(ino) => Err(format!("engine inode {ino} given to a path target")),
        }
    }
    fn unlink(&self, dir: &Dir, name: &Name) -> Result<(), String> {
        let (d, p) = self.dir(dir)?;
        // SAFETY: the directory fd is open for the life of `d`, and the name is NUL-terminated.
        let r = unsafe { libc::unlinkat(d.as_raw_fd(), name.0.as_ptr(), 0) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("unlink {}/{}: {e}", p.display(), name.display()));
        }
        Ok(())
    }
    fn stat(&self, dir: &Dir, name: &Name) -> Result<(), String> {
        let (d, p) = self.dir(dir)?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: the directory fd is open for the life of `d`, the name is NUL-terminated,
        // and `st` is a valid place for the one stat the call writes.
        let r = unsafe { libc::fstatat(d.as_raw_fd(), name.0.as_ptr(), st.as_mut_ptr(), 0) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("stat {}/{}: {e}", p.display(), name.display()));
        }
        Ok(())
    }
    fn free_inodes(&self) -> Result<Option<u64>, String> {
        let (d, p) = self.dir(&self.base)?;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: the directory fd is open for the life of `d`, and `st` is a valid place
        // for the one statvfs the call writes.
        if unsafe { libc::fstatvfs(d.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("statvfs {}: {e}", p.display()));
        }
        // SAFETY: fstatvfs returned 0, so it filled `st`.
        let st = unsafe { st.assume_init() };
        // A file system without a fixed inode count (btrfs, some FUSE ones) reports none.
        let avail: u64 = st.f_favail;
        Ok((st.f_files > 0).then_some(avail))
    }
    fn fallocate(&self, h: &Handle, off: u64, len: u64) -> Result<(), String> {
        let f = self.fd(h)?;
        let (o, l) = (off_t(off, "offset")?, off_t(len, "length")?);
        // SAFETY: plain syscall on an fd owned by `f`.
        let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, o, l) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("fallocate {len} bytes at {off}: {e}"));
        }
        Ok(())
    }
    fn truncate(&self, h: &Handle, size: u64) -> Result<(), String> {
        self.fd(h)?
            .set_len(size)
            .map_err(|e| format!("ftruncate to {size}: {e}"))
    }
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> Result<(), String> {
        self.fd(h)?
            .write_all_at(data, off)
            .map_err(|e| format!("write {} bytes at {off}: {e}", data.len()))
    }
    fn read(&self, h: &Handle, off: u64, buf: &mut [u8]) -> Result<usize, String> {
        let f = self.fd(h)?;
        let mut done = 0;
        while done < buf.len() {
            let pos = off + done as u64;
            match f.read_at(&mut buf[done..], pos) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read {} bytes at {pos}: {e}", buf.len() - done)),
            }
        }
        Ok(done)
    }
    fn drop_cache(&self, h: &Handle) -> Result<(), String> {
        let f = self.fd(h)?;
        // SAFETY: plain syscall on an fd owned by `f`.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            let e = std::io::Error::from_raw_os_error(r);
            return Err(format!("posix_fadvise(DONTNEED): {e}"));
        }
        Ok(())
    }
    fn daemon_cpu(&self) -> Option<Duration> {
        self.daemon.and_then(process_cpu)
    }
    fn fsync(&self, h: &Handle, datasync: bool) -> Result<(), String> {
        let f = self.fd(h)?;
        if datasync {
            f.sync_data().map_err(|e| format!("fdatasync: {e}"))
        } else {
            f.sync_all().map_err(|e| format!("fsync: {e}"))
        }
    }
}
