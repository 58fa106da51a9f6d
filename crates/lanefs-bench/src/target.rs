//! Targets: the same few file operations on a directory of a mounted file system (real
//! syscalls) or on the engine in-process. Workloads see only [`Backend`].

use crate::engine;
use lanefs::{BlockDevice, FallocMode, FileDevice, Fs, Ino, MountOptions, Owner, SetAttr};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
    /// Label for records: "lanefs" or "path:<dir>".
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
    /// Allocate `[off, off+len)` with mode 0 (the size grows).
    fn fallocate(&self, h: &Handle, off: u64, len: u64) -> Result<(), String>;
    /// Set the file size to `size` (truncate).
    fn truncate(&self, h: &Handle, size: u64) -> Result<(), String>;
    /// Write all of `data` at `off`.
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> Result<(), String>;
    /// Make the file durable: fsync, or fdatasync when `datasync`.
    fn fsync(&self, h: &Handle, datasync: bool) -> Result<(), String>;
    /// The journal's counters since mount, where the target exposes them (the engine).
    fn journal(&self) -> Option<JournalCounters> {
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
}

/// Real syscalls under one directory.
#[derive(Debug)]
pub struct PathBackend {
    label: String,
    base: Dir,
}

impl PathBackend {
    /// A backend working in `dir`, labelled "path:<label_dir>".
    pub fn new(dir: &Path, label_dir: &Path) -> Result<PathBackend, String> {
        let file = File::open(dir).map_err(|e| format!("open directory {}: {e}", dir.display()))?;
        Ok(PathBackend {
            label: format!("path:{}", label_dir.display()),
            base: Dir::Path {
                file,
                path: dir.to_path_buf(),
            },
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
    fn journal(&self) -> Option<JournalCounters> {
        let s = self.fs.journal_stats();
        Some(JournalCounters {
            commits: s.commits,
            log_bytes: s.log_blocks.saturating_mul(self.block_size),
        })
    }
}

/// One run's target: a directory, or the engine with one variant's mount options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Real syscalls under this directory (a fresh subdirectory per run).
    Path(PathBuf),
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
    /// "lanefs" or "path:<dir>".
    pub fn label(&self) -> String {
        match self {
            Target::Path(dir) => format!("path:{}", dir.display()),
            Target::Lanefs { .. } => "lanefs".to_string(),
        }
    }

    /// Variant name for records.
    pub fn variant(&self) -> &str {
        match self {
            Target::Path(_) => PATH_VARIANT,
            Target::Lanefs { variant, .. } => variant,
        }
    }

    /// Make a fresh place to run in: a new subdirectory, or a new formatted and mounted image.
    pub fn prepare(&self) -> Result<Instance, String> {
        let seq = RUN_SEQ.fetch_add(1, Ordering::Relaxed);
        match self {
            Target::Path(dir) => {
                let sub = dir.join(format!("lanefs-bench.{}.{seq}", std::process::id()));
                std::fs::create_dir(&sub).map_err(|e| format!("mkdir {}: {e}", sub.display()))?;
                match PathBackend::new(&sub, dir) {
                    Ok(backend) => Ok(Instance::Path { backend, dir: sub }),
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&sub);
                        Err(e)
                    }
                }
            }
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
                match mount_fresh(&image, *size, *block_size, opts) {
                    Ok((fs, block_size)) => {
                        let backend = LanefsBackend {
                            fs,
                            image,
                            base: Dir::Ino(lanefs::ROOT_INO),
                            block_size,
                        };
                        Ok(Instance::Lanefs { backend, _tmp: tmp })
                    }
                    Err(e) => {
                        let _ = std::fs::remove_file(&image);
                        Err(e)
                    }
                }
            }
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
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| format!("removing {}: {e}", dir.display()))
            }
            Instance::Lanefs { backend, _tmp } => {
                let LanefsBackend { fs, image, .. } = backend;
                let unmounted = fs
                    .unmount()
                    .map_err(|e| format!("unmounting {}: {e}", image.display()));
                let removed = std::fs::remove_file(&image)
                    .map_err(|e| format!("removing image {}: {e}", image.display()));
                drop(_tmp);
                unmounted.and(removed)
            }
        }
    }
}
