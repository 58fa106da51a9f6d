//! Targets: the same few file operations on a directory of a mounted file system (real
//! syscalls) or on the engine in-process. Workloads see only [`Backend`].

use crate::engine;
use lanefs::RtStats;
use lanefs::{
    BlockDevice, BufCacheStats, FallocMode, FileDevice, Fs, IcacheStats, Ino, MountOptions, Owner,
    SetAttr,
};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Variant name used for every record of a path target, where mount options do not apply
/// (defined here, below the config that names it, so the modules import in one direction).
pub const PATH_VARIANT: &str = "-";

/// Permission bits of files the workloads create.
const FILE_PERM: u16 = 0o644;
/// Permission bits of directories the workloads create.
const DIR_PERM: u16 = 0o755;

/// A file name, built before the timed part so the hot loop allocates nothing.
#[derive(Debug, Clone)]
pub struct Name(CString);

impl Name {
    /// A name from `s`, which must not contain a NUL or a slash.
    pub fn new(s: &str) -> Result<Name, String> {
        if s.is_empty() || s.contains('/') {
            return Err(format!("bad file name {s:?}"));
        }
        CString::new(s)
            .map(Name)
            .map_err(|_| format!("file name {s:?} contains a NUL byte"))
    }
    /// The name's bytes, without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
    fn display(&self) -> std::borrow::Cow<'_, str> {
        self.0.to_string_lossy()
    }
}

/// A directory of a target.
#[derive(Debug)]
pub enum Dir {
    /// An open directory (its fd is used with `openat`/`unlinkat`) and its path.
    Path {
        /// The directory, opened read-only.
        file: File,
        /// Its path, for error messages.
        path: PathBuf,
    },
    /// A directory inode of the engine.
    Ino(Ino),
}

/// An open regular file of a target.
#[derive(Debug)]
pub enum Handle {
    /// An open file descriptor.
    File(File),
    /// An engine inode holding one open reference (taken by `create`).
    Ino(Ino),
}

/// Journal counters of a target, read by the timer at the edges of a measured phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalCounters {
    /// Transactions committed.
    pub commits: u64,
    /// Bytes written to the log (log blocks x block size).
    pub log_bytes: u64,
}

impl JournalCounters {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: JournalCounters) -> JournalCounters {
        JournalCounters {
            commits: self.commits.saturating_sub(earlier.commits),
            log_bytes: self.log_bytes.saturating_sub(earlier.log_bytes),
        }
    }
}

/// Device reads a target made to fill its cache of file data, read by the timer at the
/// edges of a measured phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceReads {
    /// Read calls (each one contiguous run, or one scatter read of it).
    pub reads: u64,
    /// Bytes they read.
    pub bytes: u64,
}

impl DeviceReads {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: DeviceReads) -> DeviceReads {
        DeviceReads {
            reads: self.reads.saturating_sub(earlier.reads),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// A target's free space and how fragmented it is (what `e2freefrag` summarizes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FreeSpace {
    /// Maximal runs of free blocks.
    pub extents: u64,
    /// Average run of free blocks, in KiB (0 when nothing is free).
    pub avg_extent_kib: f64,
}

/// The operations the workloads need, with errors as strings that say what failed.
pub trait Backend: Send + Sync {
    /// Label for records: "lanefs" or "path:DIR".
    fn label(&self) -> String;
    /// Where this run works, for error messages (the run's directory or image file).
    fn location(&self) -> String;
    /// The run's own (fresh, empty) directory.
    fn base(&self) -> &Dir;
    /// Make directory `name` in `parent`.
    fn mkdir(&self, parent: &Dir, name: &Name) -> Result<Dir, String>;
    /// Create regular file `name` in `dir` and keep it open.
    fn create(&self, dir: &Dir, name: &Name) -> Result<Handle, String>;
    /// Close a handle from `create`.
    fn close(&self, h: Handle) -> Result<(), String>;
    /// Remove `name` from `dir`.
    fn unlink(&self, dir: &Dir, name: &Name) -> Result<(), String>;
    /// Look `name` up in `dir` and read its attributes: `fstatat` on a path, `Fs::lookup`
    /// then `Fs::getattr` on the engine (a FUSE LOOKUP, then GETATTR).
    fn stat(&self, dir: &Dir, name: &Name) -> Result<(), String>;
    /// Allocate `[off, off+len)` with mode 0 (the size grows).
    fn fallocate(&self, h: &Handle, off: u64, len: u64) -> Result<(), String>;
    /// Set the file size to `size` (truncate).
    fn truncate(&self, h: &Handle, size: u64) -> Result<(), String>;
    /// Write all of `data` at `off`.
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> Result<(), String>;
    /// Read into `buf` at `off`; returns the bytes read, fewer than `buf.len()` only at the
    /// end of the file.
    fn read(&self, h: &Handle, off: u64, buf: &mut [u8]) -> Result<usize, String>;
    /// Drop the file's clean cached pages (`POSIX_FADV_DONTNEED` on a directory target;
    /// the engine's own page cache in-process), so the next reads go to the device.
    fn drop_cache(&self, h: &Handle) -> Result<(), String>;
    /// Make the file durable: fsync, or fdatasync when `datasync`.
    fn fsync(&self, h: &Handle, datasync: bool) -> Result<(), String>;
    /// The journal's counters since mount, where the target exposes them (the engine).
    fn journal(&self) -> Option<JournalCounters> {
        None
    }
    /// The device reads made for file data since mount, where the target counts them (the
    /// engine's page cache).
    fn device_reads(&self) -> Option<DeviceReads> {
        None
    }
    /// The limit of the target's cache of file data in bytes, where it has its own (the
    /// engine's `pagecache_limit`).
    fn cache_limit(&self) -> Option<u64> {
        None
    }
    /// How many extents map the file, where the target can tell (the engine).
    fn extents(&self, _h: &Handle) -> Result<Option<u64>, String> {
        Ok(None)
    }
    /// The free space and its fragmentation, where the target can tell (the engine).
    fn free_space(&self) -> Result<Option<FreeSpace>, String> {
        Ok(None)
    }
    /// Inodes free for new files, where the target has a fixed number of them (`statvfs`'s
    /// `f_favail`; the engine's statfs).
    fn free_inodes(&self) -> Result<Option<u64>, String> {
        Ok(None)
    }
    /// The inode cache's figures, where the bench can read them (the engine).
    fn icache(&self) -> Option<IcacheStats> {
        None
    }
    /// The metadata buffer cache's figures, where the bench can read them (the engine).
    fn bufcache(&self) -> Option<BufCacheStats> {
        None
    }
    /// CPU time (user + system) the process serving this target has used so far, where
    /// the target is served by a daemon whose pid is known (a FUSE mount).
    fn daemon_cpu(&self) -> Option<Duration> {
        None
    }
    /// Make directory `d` realtime (files and directories made in it keep their data on
    /// the realtime device) with an extent size hint of `hint` blocks (0: none), where the
    /// target has a realtime device (the engine on an image made with one).
    fn set_realtime(&self, _d: &Dir, _hint: u32) -> Result<(), String> {
        Err(format!("{} has no realtime device", self.location()))
    }
    /// Free `[off, off+len)` of the file and keep its size (`FALLOC_FL_PUNCH_HOLE`), where
    /// the workloads need it (the engine).
    fn punch(&self, _h: &Handle, off: u64, len: u64) -> Result<(), String> {
        Err(format!(
            "punching {len} bytes at {off}: not done on {}",
            self.location()
        ))
    }
    /// Make everything durable, so nothing waits for a commit any more (the engine's
    /// `Fs::sync`), where the workloads need it.
    fn sync(&self) -> Result<(), String> {
        Err(format!("sync: not done on {}", self.location()))
    }
    /// The realtime allocator's counters since mount, where the target has one.
    fn rt_stats(&self) -> Option<RtStats> {
        None
    }
    /// The file system's block size in bytes, where the bench can read it (the engine).
    fn block_size(&self) -> Option<u64> {
        None
    }
    /// Check the realtime allocator's bitmap, summary and free counts against each other
    /// (nothing to check without one).
    fn rt_check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// CPU time (user + system, all threads, living and exited) process `pid` has used: its
/// process CPU clock (`clock_getcpuclockid`, nanoseconds), or where that cannot be read,
/// utime + stime from `/proc/<pid>/stat` (clock ticks). `None` when the process is gone.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let id = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid place for the one clockid the call writes.
    if unsafe { libc::clock_getcpuclockid(id, &mut clock) } == 0 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid place for the one timespec the call writes.
        if unsafe { libc::clock_gettime(clock, &mut ts) } == 0 {
            let secs = u64::try_from(ts.tv_sec).ok()?;
            let nanos = u32::try_from(ts.tv_nsec).ok()?;
            return Some(Duration::new(secs, nanos));
        }
    }
    stat_cpu(pid)
}

/// CPU time (user + system, all threads) this process has used: its process CPU clock
/// (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn own_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid place for the one timespec the call writes.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

/// utime + stime of process `pid` from `/proc/<pid>/stat`.
fn stat_cpu(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or parentheses:
    // fields are counted after the last ')'. There, index 0 is field 3 (state), so utime
    // (field 14) and stime (field 15) are indexes 11 and 12.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
    let ticks = utime.saturating_add(stime);
    Some(Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz))
}

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

/// The engine in-process.
pub struct LanefsBackend {
    fs: Arc<Fs>,
    image: PathBuf,
    /// The realtime data device, when the run's image has one (a [`Template`]'s copy).
    rtdev: Option<PathBuf>,
    base: Dir,
    /// File-system block size, which is also the journal's.
    block_size: u64,
}

impl LanefsBackend {
    fn ino(&self, d: &Dir) -> Result<Ino, String> {
        match d {
            Dir::Ino(ino) => Ok(*ino),
            Dir::Path { path, .. } => Err(format!(
                "path {} given to the lanefs target",
                path.display()
            )),
        }
    }
    fn file_ino(&self, h: &Handle) -> Result<Ino, String> {
        match h {
            Handle::Ino(ino) => Ok(*ino),
            Handle::File(_) => Err("file descriptor given to the lanefs target".to_string()),
        }
    }
}

impl Backend for LanefsBackend {
    fn label(&self) -> String {
        "lanefs".to_string()
    }
    fn location(&self) -> String {
        format!("lanefs image {}", self.image.display())
    }
    fn base(&self) -> &Dir {
        &self.base
    }
    fn mkdir(&self, parent: &Dir, name: &Name) -> Result<Dir, String> {
        let dir = self.ino(parent)?;
        let attr = self
            .fs
            .mkdir(dir, name.as_bytes(), DIR_PERM, Owner::default())
            .map_err(|e| format!("mkdir {} in inode {dir}: {e}", name.display()))?;
        Ok(Dir::Ino(attr.ino))
    }
    fn create(&self, dir: &Dir, name: &Name) -> Result<Handle, String> {
        let dir = self.ino(dir)?;
        // `create` takes one open reference, dropped by `release` in `close`.
        let attr = self
            .fs
            .create(dir, name.as_bytes(), FILE_PERM, Owner::default())
            .map_err(|e| format!("create {} in inode {dir}: {e}", name.display()))?;
        Ok(Handle::Ino(attr.ino))
    }
    fn close(&self, h: Handle) -> Result<(), String> {
        let ino = self.file_ino(&h)?;
        self.fs
            .release(ino)
            .map_err(|e| format!("release inode {ino}: {e}"))
    }
    fn unlink(&self, dir: &Dir, name: &Name) -> Result<(), String> {
        let dir = self.ino(dir)?;
        self.fs
            .unlink(dir, name.as_bytes())
            .map_err(|e| format!("unlink {} in inode {dir}: {e}", name.display()))
    }
    fn stat(&self, dir: &Dir, name: &Name) -> Result<(), String> {
        let dir = self.ino(dir)?;
        let found = self
            .fs
            .lookup(dir, name.as_bytes())
            .map_err(|e| format!("lookup {} in inode {dir}: {e}", name.display()))?;
        self.fs
            .getattr(found.ino)
            .map(|_| ())
            .map_err(|e| format!("getattr inode {}: {e}", found.ino))
    }
    fn free_inodes(&self) -> Result<Option<u64>, String> {
        self.fs
            .statfs()
            .map(|st| Some(st.free_inodes))
            .map_err(|e| format!("statfs of {}: {e}", self.image.display()))
    }
    fn icache(&self) -> Option<IcacheStats> {
        Some(self.fs.icache_stats())
    }
    fn bufcache(&self) -> Option<BufCacheStats> {
        Some(self.fs.bufcache_stats())
    }
    fn fallocate(&self, h: &Handle, off: u64, len: u64) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        self.fs
            .fallocate(ino, FallocMode::default(), off, len)
            .map_err(|e| format!("fallocate {len} bytes at {off} of inode {ino}: {e}"))
    }
    fn truncate(&self, h: &Handle, size: u64) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        let set = SetAttr {
            size: Some(size),
            ..Default::default()
        };
        self.fs
            .setattr(ino, &set)
            .map(|_| ())
            .map_err(|e| format!("truncate inode {ino} to {size}: {e}"))
    }
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        let n = self
            .fs
            .write(ino, off, data)
            .map_err(|e| format!("write {} bytes at {off} of inode {ino}: {e}", data.len()))?;
        if n != data.len() {
            return Err(format!(
                "short write of inode {ino} at {off}: {n} of {} bytes",
                data.len()
            ));
        }
        Ok(())
    }
    fn read(&self, h: &Handle, off: u64, buf: &mut [u8]) -> Result<usize, String> {
        let ino = self.file_ino(h)?;
        self.fs
            .read(ino, off, buf)
            .map_err(|e| format!("read {} bytes at {off} of inode {ino}: {e}", buf.len()))
    }
    fn fsync(&self, h: &Handle, datasync: bool) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        self.fs
            .fsync(ino, datasync)
            .map_err(|e| format!("fsync inode {ino}: {e}"))
    }
    fn extents(&self, h: &Handle) -> Result<Option<u64>, String> {
        let ino = self.file_ino(h)?;
        self.fs
            .extent_count(ino)
            .map(|n| Some(n as u64))
            .map_err(|e| format!("extents of inode {ino}: {e}"))
    }
    fn free_space(&self) -> Result<Option<FreeSpace>, String> {
        let f = self
            .fs
            .free_space()
            .map_err(|e| format!("free space of {}: {e}", self.image.display()))?;
        Ok(Some(FreeSpace {
            extents: f.free_extents,
            avg_extent_kib: f.avg_extent_blocks() * self.block_size as f64 / 1024.0,
        }))
    }
    fn drop_cache(&self, h: &Handle) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        self.fs
            .drop_cache(ino)
            .map_err(|e| format!("drop the cached data of inode {ino}: {e}"))
    }
    fn device_reads(&self) -> Option<DeviceReads> {
        let s = self.fs.pagecache_stats();
        Some(DeviceReads {
            reads: s.device_reads,
            bytes: s.device_read_bytes,
        })
    }
    fn cache_limit(&self) -> Option<u64> {
        Some(self.fs.pagecache_stats().limit)
    }
    fn journal(&self) -> Option<JournalCounters> {
        let s = self.fs.journal_stats();
        Some(JournalCounters {
            commits: s.commits,
            log_bytes: s.log_blocks.saturating_mul(self.block_size),
        })
    }
    fn set_realtime(&self, d: &Dir, hint: u32) -> Result<(), String> {
        let ino = self.ino(d)?;
        self.fs
            .set_realtime(ino, true)
            .map_err(|e| format!("make inode {ino} realtime: {e}"))?;
        if hint > 0 {
            self.fs
                .set_extsize(ino, hint)
                .map_err(|e| format!("extent size hint {hint} on inode {ino}: {e}"))?;
        }
        Ok(())
    }
    fn punch(&self, h: &Handle, off: u64, len: u64) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        let mode = FallocMode {
            punch_hole: true,
            keep_size: true,
            ..FallocMode::default()
        };
        self.fs
            .fallocate(ino, mode, off, len)
            .map_err(|e| format!("punch {len} bytes at {off} of inode {ino}: {e}"))
    }
    fn sync(&self) -> Result<(), String> {
        self.fs
            .sync()
            .map_err(|e| format!("sync {}: {e}", self.image.display()))
    }
    fn rt_stats(&self) -> Option<RtStats> {
        self.fs.rt_stats()
    }
    fn block_size(&self) -> Option<u64> {
        Some(self.block_size)
    }
    fn rt_check(&self) -> Result<(), String> {
        self.fs
            .rt_check()
            .map_err(|e| format!("realtime allocator of {}: {e}", self.image.display()))
    }
}

/// One run's target: a directory, or the engine with one variant's mount options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Real syscalls under this directory (a fresh subdirectory per run).
    Path(PathBuf),
    /// Real syscalls under a mount point `--compare` made (a fresh subdirectory per run),
    /// named `label` in records, its daemon's CPU time read at each measured phase's edges.
    Mount {
        /// The mount point.
        dir: PathBuf,
        /// Name in records and tables ("lanefs-fuse", "fuse2fs", "kernel-ext4").
        label: String,
        /// Pid of the FUSE daemon serving it (`None` for the kernel's ext4).
        daemon: Option<u32>,
    },
    /// The engine on an image file (a temporary one when `image` is `None`).
    Lanefs {
        /// Image file, created (or truncated) for the run and deleted after it.
        image: Option<PathBuf>,
        /// Image size in bytes (a sparse file).
        size: u64,
        /// Block size the image is formatted with.
        block_size: u32,
        /// Variant name, for reports.
        variant: String,
        /// Mount options of the variant.
        opts: MountOptions,
    },
}

/// Numbers each prepared run of this process, so fresh subdirectories never collide.
static RUN_SEQ: AtomicUsize = AtomicUsize::new(0);

impl Target {
    /// "lanefs" or "path:DIR".
    pub fn label(&self) -> String {
        match self {
            Target::Path(dir) => format!("path:{}", dir.display()),
            Target::Mount { label, .. } => label.clone(),
            Target::Lanefs { .. } => "lanefs".to_string(),
        }
    }

    /// Variant name for records.
    pub fn variant(&self) -> &str {
        match self {
            Target::Path(_) | Target::Mount { .. } => PATH_VARIANT,
            Target::Lanefs { variant, .. } => variant,
        }
    }

    /// Make a fresh place to run in: a new subdirectory, or a new formatted and mounted image.
    pub fn prepare(&self) -> Result<Instance, String> {
        self.prepare_from(None)
    }

    /// [`Target::prepare`], with the engine's image a copy of `template` (and its
    /// realtime device) instead of a fresh mkfs, when one is given. The image size and
    /// block size are then the template's; path targets ignore it.
    pub fn prepare_from(&self, template: Option<&Template>) -> Result<Instance, String> {
        let seq = RUN_SEQ.fetch_add(1, Ordering::Relaxed);
        match self {
            Target::Path(dir) => fresh_subdir(dir, seq, self.label(), None),
            Target::Mount { dir, label, daemon } => fresh_subdir(dir, seq, label.clone(), *daemon),
            Target::Lanefs {
                image,
                size,
                block_size,
                opts,
                ..
            } => {
                let (image, tmp) = match image {
                    Some(p) => (p.clone(), None),
                    None => {
                        let tmp = tempfile::Builder::new()
                            .prefix("lanefs-bench.")
                            .tempdir()
                            .map_err(|e| format!("creating a temporary directory: {e}"))?;
                        (tmp.path().join(format!("run-{seq}.img")), Some(tmp))
                    }
                };
                let rtdev = template.map(|_| rtdev_path(&image));
                let mounted = match (template, &rtdev) {
                    (Some(t), Some(rt)) => t.mount_copy(&image, rt, opts),
                    _ => mount_fresh(&image, *size, *block_size, opts),
                };
                match mounted {
                    Ok((fs, block_size)) => {
                        let backend = LanefsBackend {
                            fs,
                            image,
                            rtdev,
                            base: Dir::Ino(lanefs::ROOT_INO),
                            block_size,
                        };
                        Ok(Instance::Lanefs { backend, _tmp: tmp })
                    }
                    Err(e) => {
                        let _ = std::fs::remove_file(&image);
                        if let Some(rt) = &rtdev {
                            let _ = std::fs::remove_file(rt);
                        }
                        Err(e)
                    }
                }
            }
        }
    }
}

/// A fresh subdirectory of `dir` (numbered `seq`) and a backend working in it.
fn fresh_subdir(
    dir: &Path,
    seq: usize,
    label: String,
    daemon: Option<u32>,
) -> Result<Instance, String> {
    let sub = dir.join(format!("lanefs-bench.{}.{seq}", std::process::id()));
    std::fs::create_dir(&sub).map_err(|e| format!("mkdir {}: {e}", sub.display()))?;
    match PathBackend::labelled(&sub, label, daemon) {
        Ok(backend) => Ok(Instance::Path { backend, dir: sub }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&sub);
            Err(e)
        }
    }
}

/// Create a sparse image, format it (default mkfs: with a journal) and mount it; returns the
/// mount and its block size.
fn mount_fresh(
    image: &Path,
    size: u64,
    block_size: u32,
    opts: &MountOptions,
) -> Result<(Arc<Fs>, u64), String> {
    let dev = FileDevice::create(image, size)
        .map_err(|e| format!("creating image {}: {e}", image.display()))?;
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    engine::format_image(&*dev, block_size)
        .map_err(|e| format!("mkfs on {}: {e}", image.display()))?;
    let fs =
        Fs::mount(dev, opts.clone()).map_err(|e| format!("mounting {}: {e}", image.display()))?;
    let block_size = match fs.statfs() {
        Ok(st) => u64::from(st.block_size),
        Err(e) => {
            let _ = fs.unmount();
            return Err(format!("statfs of {}: {e}", image.display()));
        }
    };
    Ok((fs, block_size))
}

/// Where a run's copy of a [`Template`] keeps its realtime device: beside its image.
fn rtdev_path(image: &Path) -> PathBuf {
    let mut p = image.as_os_str().to_owned();
    p.push(".rtdev");
    PathBuf::from(p)
}

/// An engine image every run of a workload starts from instead of a fresh mkfs: an image
/// with a realtime data device, prepared once per bench run (untimed; seed 003's
/// fragmented device, see `workloads::rtfrag`). Each run gets a copy of the image (only
/// its nonzero parts are written, so the copy stays sparse) and a fresh sparse data
/// device holding a copy of the template device's header. Nothing a run does writes file
/// data to the device outside that header's place, so the copy is the whole device.
pub struct Template {
    /// Holds the template's files; removed when the template drops.
    _dir: tempfile::TempDir,
    image: PathBuf,
    /// The data device's first bytes (its header), as the template's device holds them.
    rt_header: Vec<u8>,
    /// Size of the (sparse) data device.
    rt_bytes: u64,
    /// What the template holds, for the run's header line.
    pub about: String,
}

/// Bytes of the data device copied from the template (its header and more).
const RT_HEADER_COPY: u64 = 1 << 20;

/// Bytes per read of the sparse copy.
const COPY_CHUNK: usize = 1 << 20;

impl Template {
    /// A template of the unmounted `image` and its data device `rtdev`, both in `dir`.
    pub fn new(
        dir: tempfile::TempDir,
        image: PathBuf,
        rtdev: &Path,
        about: String,
    ) -> Result<Template, String> {
        let f = File::open(rtdev).map_err(|e| format!("open {}: {e}", rtdev.display()))?;
        let rt_bytes = f
            .metadata()
            .map_err(|e| format!("stat {}: {e}", rtdev.display()))?
            .len();
        let mut rt_header = vec![0u8; rt_bytes.min(RT_HEADER_COPY) as usize];
        f.read_exact_at(&mut rt_header, 0)
            .map_err(|e| format!("read the header of {}: {e}", rtdev.display()))?;
        Ok(Template {
            _dir: dir,
            image,
            rt_header,
            rt_bytes,
            about,
        })
    }

    /// Copy the template to `image` and `rtdev` (both created or truncated).
    pub fn copy_to(&self, image: &Path, rtdev: &Path) -> Result<(), String> {
        copy_sparse(&self.image, image)?;
        drop(
            FileDevice::create(rtdev, self.rt_bytes)
                .map_err(|e| format!("creating realtime device {}: {e}", rtdev.display()))?,
        );
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(rtdev)
            .map_err(|e| format!("open {}: {e}", rtdev.display()))?;
        f.write_all_at(&self.rt_header, 0)
            .map_err(|e| format!("write the header of {}: {e}", rtdev.display()))
    }

    /// Copy the template to `image` and `rtdev` and mount them with `opts` (and
    /// `rtdev=`); returns the mount and its block size.
    fn mount_copy(
        &self,
        image: &Path,
        rtdev: &Path,
        opts: &MountOptions,
    ) -> Result<(Arc<Fs>, u64), String> {
        self.copy_to(image, rtdev)?;
        mount_rt(image, rtdev, opts)
    }
}

/// Mount `image` with its realtime device `rtdev` and `opts`; returns the mount and its
/// block size.
fn mount_rt(image: &Path, rtdev: &Path, opts: &MountOptions) -> Result<(Arc<Fs>, u64), String> {
    let opts = MountOptions {
        rtdev: Some(rtdev.to_path_buf()),
        ..opts.clone()
    };
    let fs = Fs::mount_path(image, opts).map_err(|e| {
        format!(
            "mounting {} with realtime device {}: {e}",
            image.display(),
            rtdev.display()
        )
    })?;
    match fs.statfs() {
        Ok(st) => Ok((fs, u64::from(st.block_size))),
        Err(e) => {
            let _ = fs.unmount();
            Err(format!("statfs of {}: {e}", image.display()))
        }
    }
}

/// Copy file `src` to a new file `dst` of the same size, writing only its nonzero
/// chunks: the copy of a sparse image stays sparse.
pub fn copy_sparse(src: &Path, dst: &Path) -> Result<(), String> {
    let from = File::open(src).map_err(|e| format!("open {}: {e}", src.display()))?;
    let len = from
        .metadata()
        .map_err(|e| format!("stat {}: {e}", src.display()))?
        .len();
    let to = File::create(dst).map_err(|e| format!("create {}: {e}", dst.display()))?;
    to.set_len(len)
        .map_err(|e| format!("size {} to {len}: {e}", dst.display()))?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(COPY_CHUNK as u64) as usize;
        from.read_exact_at(&mut buf[..n], off)
            .map_err(|e| format!("read {} at {off}: {e}", src.display()))?;
        if buf[..n].iter().any(|&b| b != 0) {
            to.write_all_at(&buf[..n], off)
                .map_err(|e| format!("write {} at {off}: {e}", dst.display()))?;
        }
        off += n as u64;
    }
    Ok(())
}

/// A prepared run: the backend plus what `finish` must clean up.
pub enum Instance {
    /// A fresh subdirectory, removed by `finish`.
    Path {
        /// Backend working in `dir`.
        backend: PathBackend,
        /// The run's subdirectory.
        dir: PathBuf,
    },
    /// A mounted engine; `finish` unmounts it and deletes the image.
    Lanefs {
        /// Backend on the mounted engine.
        backend: LanefsBackend,
        /// Temporary directory holding a default image; removed when dropped.
        _tmp: Option<tempfile::TempDir>,
    },
}

impl Instance {
    /// The engine on the existing `image` and its realtime device `rtdev` (a copy of a
    /// [`Template`], see [`Template::copy_to`]), mounted with `opts`; `finish` unmounts it
    /// and deletes both files.
    pub fn lanefs_rt(
        image: PathBuf,
        rtdev: PathBuf,
        opts: &MountOptions,
    ) -> Result<Instance, String> {
        let (fs, block_size) = mount_rt(&image, &rtdev, opts)?;
        Ok(Instance::Lanefs {
            backend: LanefsBackend {
                fs,
                image,
                rtdev: Some(rtdev),
                base: Dir::Ino(lanefs::ROOT_INO),
                block_size,
            },
            _tmp: None,
        })
    }

    /// The operations of this run.
    pub fn backend(&self) -> &dyn Backend {
        match self {
            Instance::Path { backend, .. } => backend,
            Instance::Lanefs { backend, .. } => backend,
        }
    }

    /// Unmount the engine (or close the directory) and delete what the run left.
    pub fn finish(self) -> Result<(), String> {
        match self {
            Instance::Path { backend, dir } => {
                drop(backend);
                // A FUSE file system on libfuse's high-level API (fuse2fs) renames a file
                // unlinked while libfuse still counts it open to `.fuse_hidden*`, and a
                // close's RELEASE reaches the daemon after close() returns: the directory
                // can be briefly not empty. The hidden file goes at that RELEASE.
                let mut tries = 0;
                loop {
                    match std::fs::remove_dir_all(&dir) {
                        Err(e)
                            if e.kind() == std::io::ErrorKind::DirectoryNotEmpty && tries < 50 =>
                        {
                            tries += 1;
                            std::thread::sleep(std::time::Duration::from_millis(100));
                        }
                        r => return r.map_err(|e| format!("removing {}: {e}", dir.display())),
                    }
                }
            }
            Instance::Lanefs { backend, _tmp } => {
                let LanefsBackend {
                    fs, image, rtdev, ..
                } = backend;
                let unmounted = fs
                    .unmount()
                    .map_err(|e| format!("unmounting {}: {e}", image.display()));
                let removed = std::fs::remove_file(&image)
                    .map_err(|e| format!("removing image {}: {e}", image.display()));
                let removed_rt = rtdev.map_or(Ok(()), |rt| {
                    std::fs::remove_file(&rt)
                        .map_err(|e| format!("removing realtime device {}: {e}", rt.display()))
                });
                drop(_tmp);
                unmounted.and(removed).and(removed_rt)
            }
        }
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    /// A busy child's CPU time is read, rises as it spins, and agrees with /proc's ticks.
    #[test]
    fn process_cpu_reads_another_process() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spawn sh");
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(300));
        let a = process_cpu(pid);
        std::thread::sleep(Duration::from_millis(300));
        let (b, ticks) = (process_cpu(pid), stat_cpu(pid));
        let _ = child.kill();
        let _ = child.wait();
        let (a, b, ticks) = (a.expect("cpu a"), b.expect("cpu b"), ticks.expect("ticks"));
        assert!(b > a, "{a:?} then {b:?}");
        assert!(b > Duration::from_millis(100), "{b:?}");
        let diff = b.as_secs_f64() - ticks.as_secs_f64();
        assert!(diff.abs() < 0.1, "clock {b:?} vs /proc ticks {ticks:?}");
        assert_eq!(process_cpu(u32::MAX), None);
    }
}
