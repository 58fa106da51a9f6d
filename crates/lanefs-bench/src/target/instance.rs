//! One run's target (a directory, a mount `--compare` made, or the engine with one
//! variant's options), the realtime template every variant of a run copies, and the
//! instance a run works on and tears down.

use super::*;

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
