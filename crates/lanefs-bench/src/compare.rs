//! `lanefs bench --compare`: the same workloads through real syscalls, in one run, on
//! mounts of images `mkfs.ext4` made alike: lanefs's FUSE mount (`lanefs mount -f`), the
//! FUSE ceiling (`lanefs memfs -f`: an in-memory file system behind the same frontend and
//! transport, no image), each of the two again over /dev/fuse (`-o no_io_uring`) when
//! FUSE-over-io_uring is the default, fuse2fs (`fuse2fs -f`) and the kernel's ext4 on a
//! loop device (`mount -o loop`).
//!
//! Every repetition, at every thread count, runs the control loop and then each workload
//! on each mount in turn (target by target, as variants interleave in the engine's runs),
//! each run in a fresh directory of the mount. After each run the mount is settled, untimed
//! (fsync of its root directory, then syncfs), so no target's write-back runs during
//! another's measurement. The FUSE daemons are children of this process, so their pids are
//! known: the timer reads their CPU time (utime + stime in `/proc/PID/stat`) at the edges
//! of every measured phase. At the end every mount is taken down (also on an error, by a
//! guard), each image must pass `e2fsck -fn`, one table compares the three, and what the
//! daemons logged is shown beside it.

use crate::config::{BenchConfig, COMPARE_THREADS};
use crate::report::{fmt_rate, push_unique, summary, Record};
use crate::target::Target;
use crate::workloads::{self, control, Workload};
use crate::{record, run_one, Origin};
use comfy_table::{presets, CellAlignment, Table};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Workloads a compare run does when none is named.
pub const WORKLOADS: &[&str] = &["fallocate2", "mdtest", workloads::bufio64k::NAME];
/// Size of each image when none is given: room for every workload at a few threads.
pub const IMAGE_SIZE: u64 = 1 << 30;

pub use crate::report::{CONTROL_TARGET, FUSE2FS, KERNEL, LANEFS, LANEFS_DEV, MEMFS, MEMFS_DEV};

/// Bytes per inode the images are made with (`mkfs.ext4 -i`).
const BYTES_PER_INODE: u64 = 16384;
/// How long a daemon may take to mount.
const MOUNT_WAIT: Duration = Duration::from_secs(30);
/// How long a daemon may take to write back and exit after its unmount.
const EXIT_WAIT: Duration = Duration::from_secs(300);

/// The goals of issue 43 at 2 threads: workload, phase, lanefs / the in-memory ceiling at
/// the same transport, lanefs / the kernel's ext4 (0: none).
const CEILING_GOALS: &[(&str, &str, f64, f64)] = &[
    ("fallocate2", "fallocate", 0.0, 0.5),
    ("mdtest", "create", 0.9, 0.33),
    ("mdtest", "remove", 0.9, 0.5),
    ("bufio64k", "write", 0.7, 0.0),
    ("bufio64k", "synced", 0.7, 0.6),
    ("bufio64k", "read", 0.9, 0.0),
];

/// Where the images live: `/dev/shm` (memory, as the kernel's loop device and every
/// daemon see alike) when it has `need` bytes free, so that an fsync measures the file
/// systems rather than the host's disk; else the temporary directory.
fn image_home(need: u64) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    let c = std::ffi::CString::new("/dev/shm").expect("no NUL");
    // SAFETY: `c` is a NUL-terminated path and `st` has room for one statvfs, which the
    // call fills when it returns 0 (only then is it read).
    let free = (unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } == 0).then(|| {
        // SAFETY: statvfs returned 0, so it initialised `st`.
        let st = unsafe { st.assume_init() };
        st.f_bavail.saturating_mul(st.f_frsize)
    });
    if shm.is_dir() && free.is_some_and(|f| f >= need) {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Whether new FUSE mounts get FUSE-over-io_uring (the fuse module's `enable_uring`):
/// then the run also mounts lanefs and the ceiling over /dev/fuse.
fn uring_offered() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| matches!(v.trim(), "Y" | "1"))
}

/// The goals of issue 11 at 2 threads against fuse2fs: workload, phase, lanefs / fuse2fs.
const GOALS: &[(&str, &str, f64)] = &[
    ("fallocate2", "fallocate", 3.0),
    ("mdtest", "create", 4.0),
    ("bufio64k", "write", 2.0),
    ("bufio64k", "read", 2.0),
];

/// Refuse an image too small for `threads` threads of the workloads (`files` mdtest files
/// each, 8 MiB for bufio64k, 1 MiB for fallocate2, beside the journal).
pub fn check_size(size: u64, threads: usize, files: usize) -> Result<(), String> {
    let threads = threads as u64;
    let need_inodes = threads.saturating_mul(files as u64).saturating_add(1024);
    let inodes = size / BYTES_PER_INODE;
    let need_bytes = (128u64 << 20).saturating_add(threads.saturating_mul(16 << 20));
    if size < need_bytes || inodes < need_inodes {
        return Err(format!(
            "image size {size} is too small for {threads} threads x {files} files \
             (needs at least {} bytes and {need_inodes} inodes, one per {BYTES_PER_INODE} bytes)",
            need_bytes.max(need_inodes.saturating_mul(BYTES_PER_INODE))
        ));
    }
    Ok(())
}

fn say(out: &mut dyn Write, text: &str) -> Result<(), String> {
    writeln!(out, "{text}").map_err(|e| format!("writing output: {e}"))
}

/// Whether `tool` is an executable file in a directory of PATH.
fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|d| {
        std::fs::metadata(d.join(tool))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// What this machine lacks for a compare run, each named with how to get it.
pub fn missing() -> Vec<String> {
    let mut gaps = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        gaps.push("root (mount, loop devices, allow_other)".to_string());
    }
    if !Path::new("/dev/fuse").exists() {
        gaps.push("/dev/fuse (modprobe fuse)".to_string());
    }
    if !Path::new("/dev/loop-control").exists() && !Path::new("/dev/loop0").exists() {
        gaps.push("loop devices (modprobe loop)".to_string());
    }
    for (tool, package) in [
        ("fuse2fs", "fuse2fs"),
        ("mkfs.ext4", "e2fsprogs"),
        ("e2fsck", "e2fsprogs"),
        ("mount", "mount"),
        ("umount", "mount"),
    ] {
        if !on_path(tool) {
            gaps.push(format!("{tool} (apt-get install {package})"));
        }
    }
    gaps
}

/// The last non-empty line of a daemon's log, for an error message.
fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .ok()
        .and_then(|t| {
            t.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "(nothing logged)".to_string())
}

/// Run `cmd`; an error names it and carries the first line it printed.
fn run_cmd(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let text = if text.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout)
    } else {
        text
    };
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    Err(format!("{shown} failed ({}): {first}", out.status))
}

/// Undo the escapes of a mountinfo field (`\040` for a space, and so on).
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Whether something is mounted on `dir` (an absolute, canonical path).
fn is_mounted(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = dir.as_os_str().as_bytes();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| unescape(mp) == want)
}

/// Wait up to `limit` for `child` to exit.
fn wait_exit(child: &mut Child, limit: Duration) -> Result<Option<ExitStatus>, String> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Ok(Some(st)),
            Ok(None) if start.elapsed() >= limit => return Ok(None),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for pid {}: {e}", child.id())),
        }
    }
}

/// How a mount is taken down.
enum Kind {
    /// `lanefs umount DIR` (returns once the daemon let go of the image), then the
    /// daemon's exit.
    Lanefs(PathBuf),
    /// `umount DIR`, then the daemon's exit.
    Fuse2fs,
    /// `umount DIR` (the loop device goes with it).
    Kernel,
}

/// One mounted image.
struct Mounted {
    name: &'static str,
    kind: Kind,
    image: PathBuf,
    dir: PathBuf,
    /// The FUSE daemon (`-f`, so the child is the daemon itself) and its log (its output).
    daemon: Option<(Child, PathBuf)>,
    up: bool,
}

impl Mounted {
    fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(|(c, _)| c.id())
    }

    fn target(&self) -> Target {
        Target::Mount {
            dir: self.dir.clone(),
            label: self.name.to_string(),
            daemon: self.pid(),
        }
    }

    /// Unmount and wait for the daemon to exit cleanly.
    fn unmount(&mut self) -> Result<(), String> {
        if !self.up {
            return Ok(());
        }
        let what = format!("unmounting {} from {}", self.name, self.dir.display());
        match &self.kind {
            Kind::Lanefs(exe) => run_cmd(Command::new(exe).arg("umount").arg(&self.dir)),
            Kind::Fuse2fs | Kind::Kernel => run_cmd(Command::new("umount").arg(&self.dir)),
        }
        .map_err(|e| format!("{what}: {e}"))?;
        self.up = false;
        let Some((child, log)) = &mut self.daemon else {
            return Ok(());
        };
        match wait_exit(child, EXIT_WAIT).map_err(|e| format!("{what}: {e}"))? {
            Some(st) if st.success() => Ok(()),
            Some(st) => Err(format!(
                "{what}: the daemon exited with {st}: {}",
                last_line(log)
            )),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "{what}: the daemon did not exit within {} s; killed",
                    EXIT_WAIT.as_secs()
                ))
            }
        }
    }

    /// Best effort, for the error path: unmount (lazily if need be) and reap the daemon.
    fn teardown(&mut self) {
        if self.up {
            let plain = Command::new("umount")
                .arg(&self.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !plain.is_ok_and(|s| s.success()) {
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            self.up = false;
        }
        if let Some((child, _)) = &mut self.daemon {
            if !matches!(wait_exit(child, Duration::from_secs(60)), Ok(Some(_))) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Every mount of the run; whatever is still mounted when it drops is taken down.
#[derive(Default)]
struct Mounts(Vec<Mounted>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for m in self.0.iter_mut().rev() {
            m.teardown();
        }
    }
}

/// Make a sparse file of `size` bytes at `image` and format it as every image of the run is.
fn make_image(image: &Path, size: u64) -> Result<(), String> {
    let f = File::create(image).map_err(|e| format!("creating {}: {e}", image.display()))?;
    f.set_len(size)
        .map_err(|e| format!("sizing {}: {e}", image.display()))?;
    drop(f);
    run_cmd(Command::new("mkfs.ext4").args(MKFS_ARGS).arg(image))
}

/// How the images are made (besides the size): Debian 12's ext4 defaults at 4 KiB blocks,
/// inode tables and journal written out at once (the kernel then starts no lazy-init thread
/// that would run during the measurements).
const MKFS_ARGS: &[&str] = &[
    "-F",
    "-q",
    "-b",
    "4096",
    "-i",
    "16384",
    "-E",
    "lazy_itable_init=0,lazy_journal_init=0",
];

/// Start a FUSE daemon in the foreground with its output to `log`, and wait until its
/// mount shows in /proc/self/mountinfo.
fn spawn_daemon(name: &str, cmd: &mut Command, dir: &Path, log: &Path) -> Result<Child, String> {
    let shown = format!("{cmd:?}").replace('"', "");
    let err = File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    // Both streams to the log: fuse2fs says some things on stdout.
    let said = err
        .try_clone()
        .map_err(|e| format!("duplicating {}: {e}", log.display()))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(said)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    let start = Instant::now();
    loop {
        if is_mounted(dir) {
            return Ok(child);
        }
        match child.try_wait() {
            Ok(Some(st)) => {
                return Err(format!(
                    "mounting {name}: {shown} exited ({st}): {}",
                    last_line(log)
                ))
            }
            Ok(None) => {}
            Err(e) => return Err(format!("mounting {name}: waiting for {shown}: {e}")),
        }
        if start.elapsed() > MOUNT_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "mounting {name}: {shown} did not mount within {} s",
                MOUNT_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Make `name`'s image and mount point under `work` and mount it; the mount joins `mounts`
/// as soon as it is up.
fn mount_one(
    mounts: &mut Mounts,
    name: &'static str,
    work: &Path,
    size: u64,
    lanefs_exe: &Path,
) -> Result<(), String> {
    let image = work.join(format!("{name}.img"));
    let dir = work.join(format!("mnt-{name}"));
    std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    // The in-memory ceiling has no image.
    let image = if name == MEMFS || name == MEMFS_DEV {
        PathBuf::new()
    } else {
        make_image(&image, size)?;
        image
    };
    let log = work.join(format!("{name}.log"));
    let (kind, daemon) = match name {
        LANEFS | LANEFS_DEV | MEMFS | MEMFS_DEV => {
            let mut cmd = Command::new(lanefs_exe);
            if name == LANEFS || name == LANEFS_DEV {
                cmd.arg("mount").arg(&image).arg(&dir);
            } else {
                cmd.arg("memfs").arg(&dir);
            }
            let dev = name == LANEFS_DEV || name == MEMFS_DEV;
            cmd.args([
                "-o",
                if dev {
                    "allow_other,no_io_uring"
                } else {
                    "allow_other"
                },
                "-f",
            ]);
            let child = spawn_daemon(name, &mut cmd, &dir, &log)?;
            (Kind::Lanefs(lanefs_exe.to_path_buf()), Some((child, log)))
        }
        FUSE2FS => {
            let mut cmd = Command::new("fuse2fs");
            cmd.arg(&image).arg(&dir).args(["-o", "allow_other", "-f"]);
            let child = spawn_daemon(name, &mut cmd, &dir, &log)?;
            (Kind::Fuse2fs, Some((child, log)))
        }
        _ => {
            run_cmd(
                Command::new("mount")
                    .args(["-o", "loop"])
                    .arg(&image)
                    .arg(&dir),
            )
            .map_err(|e| format!("mounting {name}: {e}"))?;
            (Kind::Kernel, None)
        }
    };
    mounts.0.push(Mounted {
        name,
        kind,
        image,
        dir,
        daemon,
        up: true,
    });
    Ok(())
}

/// After a run, untimed: make the mount write back what the run left (fsync of its root,
/// which commits lanefs's journal, then syncfs), so it does not run during the next
/// target's measurement.
fn settle(dir: &Path) -> Result<(), String> {
    let d = File::open(dir).map_err(|e| format!("open {}: {e}", dir.display()))?;
    if let Err(e) = d.sync_all() {
        // A FUSE server may not implement fsyncdir; that is no failure of the run.
        if !matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) {
            return Err(format!("fsync {}: {e}", dir.display()));
        }
    }
    // SAFETY: plain syscall on an fd owned by `d`.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("syncfs {}: {e}", dir.display()));
    }
    Ok(())
}

/// `e2fsck -fn IMAGE`: the first line of what it found when the image is not clean.
fn fsck_clean(name: &str, image: &Path) -> Result<(), String> {
    run_cmd(Command::new("e2fsck").arg("-fn").arg(image))
        .map_err(|e| format!("{name}'s image is not clean after the run: {e}"))
}

fn progress(cfg: &BenchConfig, out: &mut dyn Write, r: &Record) -> Result<(), String> {
    if !cfg.run_lines {
        return Ok(());
    }
    let reps = cfg.reps;
    let cpu = r
        .daemon_cpu_us_per_op
        .map(|us| format!("; daemon {us:.1} us/op"))
        .unwrap_or_default();
    say(
        out,
        &format!(
            "rep {}/{reps} threads {}: {} {} on {}: {} ops/s ({} ops in {:.2} s{cpu})",
            r.rep,
            r.threads,
            r.workload,
            r.phase,
            r.target,
            fmt_rate(r.ops_per_sec),
            r.ops,
            r.seconds
        ),
    )
}

/// Run a compare run (`cfg.target` is [`crate::TargetSpec::Compare`]): make and mount the
/// images, run every workload at every thread count on each, interleaved, take every
/// mount down, check the images with `e2fsck -fn` and print the table; `obs` hears of
/// every timed run.
pub fn run(
    cfg: &BenchConfig,
    size: u64,
    out: &mut dyn Write,
    obs: &mut dyn crate::Observer,
) -> Result<Vec<Record>, String> {
    let gaps = missing();
    if !gaps.is_empty() {
        return Err(format!(
            "--compare cannot run here: missing {}",
            gaps.join(", ")
        ));
    }
    let exe = cfg
        .lanefs_exe
        .as_deref()
        .ok_or("no lanefs executable given for --compare")?;
    let (warmup, duration) = (cfg.warmup_duration()?, cfg.duration()?);
    let threads = cfg
        .threads
        .clone()
        .unwrap_or_else(|| COMPARE_THREADS.to_vec());
    check_size(size, threads.iter().copied().max().unwrap_or(1), cfg.files)?;
    let chosen: Vec<&dyn Workload> = cfg
        .workloads
        .iter()
        .filter_map(|n| workloads::find(n))
        .collect();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let home = image_home(size.saturating_mul(6));
    let work = tempfile::Builder::new()
        .prefix("lanefs-compare.")
        .tempdir_in(&home)
        .map_err(|e| format!("creating a temporary directory in {}: {e}", home.display()))?;
    let work_dir = work
        .path()
        .canonicalize()
        .map_err(|e| format!("{}: {e}", work.path().display()))?;
    // Declared after `work`, so it drops (unmounting) before the directory is removed.
    let mut mounts = Mounts::default();
    let mut names = vec![LANEFS, MEMFS];
    if uring_offered() {
        // The default transport is io_uring: /dev/fuse beside it, both for lanefs and
        // for the ceiling.
        names.extend([LANEFS_DEV, MEMFS_DEV]);
    }
    names.extend([FUSE2FS, KERNEL]);
    for name in names {
        mount_one(&mut mounts, name, &work_dir, size, exe)?;
    }
    let pids: Vec<String> = mounts
        .0
        .iter()
        .map(|m| match m.pid() {
            Some(pid) => format!("{} (pid {pid})", m.name),
            None => format!("{} (loop device)", m.name),
        })
        .collect();
    say(
        out,
        &format!(
            "lanefs bench --compare on {}: images of {size} bytes in {} by mkfs.ext4 {}; {} x threads \
             {threads:?} x {} reps, {} s per timed run ({} s warm-up), {} files per thread, \
             {cpus} CPUs",
            pids.join(", "),
            home.display(),
            MKFS_ARGS.join(" "),
            cfg.workloads.join("+"),
            cfg.reps,
            cfg.seconds,
            cfg.warmup,
            cfg.files,
        ),
    )?;
    let targets: Vec<Target> = mounts.0.iter().map(Mounted::target).collect();
    obs.plan(cfg.reps * threads.len() * (1 + chosen.len() * targets.len()));
    let mut records = Vec::new();
    for rep in 1..=cfg.reps {
        for &n in &threads {
            let oversubscribed = n > cpus;
            obs.start(&crate::Step {
                workload: control::NAME,
                variant: CONTROL_TARGET,
                threads: n,
                rep,
                reps: cfg.reps,
            });
            let ctl = control::run(n, warmup, duration)
                .map_err(|e| format!("control loop at {n} threads: {e}"))?;
            obs.finish();
            let o = Origin {
                workload: control::NAME,
                target: CONTROL_TARGET,
                variant: crate::PATH_VARIANT,
                threads: n,
                rep,
                oversubscribed,
            };
            let r = record(&o, ctl);
            progress(cfg, out, &r)?;
            records.push(r);
            for &w in &chosen {
                for (target, m) in targets.iter().zip(&mounts.0) {
                    let o = Origin {
                        workload: w.name(),
                        target: m.name,
                        ..o
                    };
                    obs.start(&crate::Step {
                        workload: w.name(),
                        variant: m.name,
                        threads: n,
                        rep,
                        reps: cfg.reps,
                    });
                    let (recs, _) = run_one(cfg, w, target, None, n, &o, false)?;
                    settle(&m.dir)?;
                    obs.finish();
                    for r in recs {
                        progress(cfg, out, &r)?;
                        records.push(r);
                    }
                }
            }
        }
    }
    for m in &mut mounts.0 {
        m.unmount()?;
    }
    let unclean: Vec<String> = mounts
        .0
        .iter()
        .filter(|m| !m.image.as_os_str().is_empty())
        .filter_map(|m| fsck_clean(m.name, &m.image).err())
        .collect();
    if cfg.verbose {
        say(out, &format!("\n{}", render(&records)))?;
    }
    for said in daemon_logs(&mounts) {
        say(out, &said)?;
    }
    if let Some(e) = unclean.first() {
        return Err(e.clone());
    }
    say(out, "e2fsck -fn: every image clean after the run")?;
    Ok(records)
}

/// What each FUSE daemon logged from mount to exit (fuse2fs 1.47 says at unmount that it
/// does not write the journal), one line per daemon that said anything.
fn daemon_logs(mounts: &Mounts) -> Vec<String> {
    mounts
        .0
        .iter()
        .filter_map(|m| {
            let (_, log) = m.daemon.as_ref()?;
            let text = std::fs::read_to_string(log).ok()?;
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            (!lines.is_empty()).then(|| format!("{} logged: {}", m.name, lines.join(" / ")))
        })
        .collect()
}

/// Records of one workload phase on one target at one thread count.
fn cell<'a>(records: &'a [Record], w: &str, p: &str, t: &str, n: usize) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| r.workload == w && r.phase == p && r.target == t && r.threads == n)
        .collect()
}

/// Median ops/s of a cell; `None` when it is empty.
fn median(records: &[Record], w: &str, p: &str, t: &str, n: usize) -> Option<f64> {
    let c = cell(records, w, p, t, n);
    (!c.is_empty()).then(|| summary(c.iter().map(|r| r.ops_per_sec).collect()).0)
}

/// A table of the compare output with `header`.
fn table_with(header: Vec<&str>) -> Table {
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL_CONDENSED)
        .set_header(header);
    table
}

/// Right-align the number columns `cols` of `table`.
fn align_right(table: &mut Table, cols: std::ops::Range<usize>) {
    for i in cols {
        if let Some(col) = table.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// A goal's cell: `goal` and whether `v` meets it ("-" without a goal, "Nx: -" without
/// a value).
fn verdict(goal: Option<f64>, v: Option<f64>) -> String {
    match (goal, v) {
        (Some(g), Some(v)) => format!("{g}x: {}", if v >= g { "met" } else { "missed" }),
        (Some(g), None) => format!("{g}x: -"),
        (None, _) => "-".to_string(),
    }
}

fn fmt_x(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}x"))
}

/// `a / b` when both are there and `b` is positive.
fn div(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).filter(|&(_, b)| b > 0.0).map(|(a, b)| a / b)
}

/// The compare table of `records`: one row per workload phase, target and thread count,
/// with the median ops/s (min, max), the ratio against fuse2fs at the same thread count,
/// the scaling against the fewest threads, and the daemon's CPU time per operation; then
/// the legend, the control loop's scaling, and the issue's goals at 2 threads.
pub fn render(records: &[Record]) -> String {
    let mut series: Vec<(&str, &str)> = Vec::new();
    let mut targets: Vec<&str> = Vec::new();
    let mut threads: Vec<usize> = Vec::new();
    for r in records.iter().filter(|r| r.workload != control::NAME) {
        push_unique(&mut series, (r.workload.as_str(), r.phase.as_str()));
        push_unique(&mut targets, r.target.as_str());
        push_unique(&mut threads, r.threads);
    }
    threads.sort_unstable();
    let fewest = threads.first().copied().unwrap_or(1);
    let mut table = table_with(vec![
        "workload",
        "phase",
        "target",
        "threads",
        "ops/s median",
        "min",
        "max",
        "reps",
        "vs fuse2fs",
        format!("scaling vs {fewest}").as_str(),
        "daemon CPU/op",
    ]);
    for &(w, p) in &series {
        for &t in &targets {
            for &n in &threads {
                let c = cell(records, w, p, t, n);
                if c.is_empty() {
                    continue;
                }
                let (med, min, max) = summary(c.iter().map(|r| r.ops_per_sec).collect());
                let cpu: Vec<f64> = c.iter().filter_map(|r| r.daemon_cpu_us_per_op).collect();
                let cpu = if cpu.is_empty() {
                    "-".to_string()
                } else {
                    format!("{:.1} us", summary(cpu).0)
                };
                let scaling = if n == fewest {
                    "-".to_string()
                } else {
                    fmt_x(div(Some(med), median(records, w, p, t, fewest)))
                };
                let over = if c.iter().any(|r| r.oversubscribed) {
                    "*"
                } else {
                    ""
                };
                table.add_row(vec![
                    w.to_string(),
                    p.to_string(),
                    t.to_string(),
                    format!("{n}{over}"),
                    fmt_rate(med),
                    fmt_rate(min),
                    fmt_rate(max),
                    c.len().to_string(),
                    fmt_x(div(Some(med), median(records, w, p, FUSE2FS, n))),
                    scaling,
                    cpu,
                ]);
            }
        }
    }
    align_right(&mut table, 3..11);
    let mut out = table.to_string();
    out.push('\n');
    out.push_str(&format!(
        "{LANEFS} = lanefs mount -f -o allow_other (FUSE-over-io_uring where the kernel \
         offers it); {LANEFS_DEV} = the same with -o no_io_uring (/dev/fuse); {MEMFS}, \
         {MEMFS_DEV} = lanefs memfs, an in-memory file system behind the same frontend and \
         transport: the FUSE ceiling; {FUSE2FS} = fuse2fs -f -o allow_other; {KERNEL} = \
         mount -o loop; threads marked * are more than the CPUs\n\
         ops/s = total over threads, median of the reps; vs fuse2fs = median / fuse2fs's at \
         the same threads; scaling vs {fewest} = total ops/s / the total at {fewest} thread(s) \
         (above 1: the total rises)\n\
         daemon CPU/op = user + system CPU time of the FUSE daemon (all its threads: its \
         process CPU clock, utime + stime) in the measured time / ops; - for the kernel, \
         whose work is not one process\n\
         bufio64k: one op = one 64 KiB call (MiB/s = ops/s / 16); synced = write with an \
         fsync after each 8 MiB pass; each read pass drops the file's page cache first \
         (POSIX_FADV_DONTNEED)\n"
    ));
    let ctl = |n| median(records, control::NAME, control::PHASE, CONTROL_TARGET, n);
    for &n in threads.iter().filter(|&&n| n != fewest) {
        out.push_str(&format!(
            "control loop (shares no memory) scaling at {n} vs {fewest}: {}, the ceiling of \
             this machine in this run\n",
            fmt_x(div(ctl(n), ctl(fewest)))
        ));
    }
    if threads.contains(&1) && threads.contains(&2) {
        out.push_str(&render_goals(records, &series));
        out.push_str(&render_ceiling(records, &series));
    }
    out
}

/// Issue 43's goals at 2 threads: lanefs against the in-memory ceiling over the same
/// transport, and against the kernel's ext4, for each transport the run had.
fn render_ceiling(records: &[Record], series: &[(&str, &str)]) -> String {
    let mut table = table_with(vec![
        "workload",
        "phase",
        "transport",
        "lanefs @1",
        "lanefs @2",
        "x ceiling @2",
        "goal",
        "x kernel @2",
        "goal",
    ]);
    // Without /dev/fuse rows the default transport was /dev/fuse itself.
    let both = records.iter().any(|r| r.target == LANEFS_DEV);
    let default = if both { "io_uring" } else { "/dev/fuse" };
    let mut rows = 0;
    for &(w, p) in series {
        let (cg, kg) = CEILING_GOALS
            .iter()
            .find(|g| g.0 == w && g.1 == p)
            .map_or((0.0, 0.0), |g| (g.2, g.3));
        for (lanefs, ceiling, transport) in [
            (LANEFS, MEMFS, default),
            (LANEFS_DEV, MEMFS_DEV, "/dev/fuse"),
        ] {
            let two = median(records, w, p, lanefs, 2);
            if two.is_none() {
                continue;
            }
            let x_ceiling = div(two, median(records, w, p, ceiling, 2));
            let x_kernel = div(two, median(records, w, p, KERNEL, 2));
            table.add_row(vec![
                w.to_string(),
                p.to_string(),
                transport.to_string(),
                median(records, w, p, lanefs, 1).map_or("-".into(), fmt_rate),
                fmt_rate(two.unwrap_or(0.0)),
                fmt_x(x_ceiling),
                verdict((cg > 0.0).then_some(cg), x_ceiling),
                fmt_x(x_kernel),
                verdict((kg > 0.0).then_some(kg), x_kernel),
            ]);
            rows += 1;
        }
    }
    if rows == 0 {
        return String::new();
    }
    align_right(&mut table, 3..9);
    format!(
        "issue 43's goals at 2 threads: lanefs against the FUSE ceiling ({MEMFS} over the \
         same transport) and against the kernel's ext4 in this run:\n{table}\n"
    )
}

/// The goals table of [`render`] alone (the compact output's), when `records` have 1 and 2
/// threads; empty otherwise.
pub fn goals(records: &[Record]) -> String {
    let mut series: Vec<(&str, &str)> = Vec::new();
    let mut threads: Vec<usize> = Vec::new();
    for r in records.iter().filter(|r| r.workload != control::NAME) {
        push_unique(&mut series, (r.workload.as_str(), r.phase.as_str()));
        push_unique(&mut threads, r.threads);
    }
    if threads.contains(&1) && threads.contains(&2) {
        render_goals(records, &series) + &render_ceiling(records, &series)
    } else {
        String::new()
    }
}

/// The issue's goals at 2 threads: lanefs against fuse2fs, and whether lanefs's total
/// rises from 1 to 2 threads (beside fuse2fs's).
fn render_goals(records: &[Record], series: &[(&str, &str)]) -> String {
    let mut table = table_with(vec![
        "workload",
        "phase",
        "lanefs/fuse2fs @2",
        "goal",
        "lanefs 2/1",
        "fuse2fs 2/1",
        "rises",
    ]);
    for &(w, p) in series {
        let vs = div(
            median(records, w, p, LANEFS, 2),
            median(records, w, p, FUSE2FS, 2),
        );
        let goal = GOALS.iter().find(|g| g.0 == w && g.1 == p).map(|g| g.2);
        let goal_text = verdict(goal, vs);
        let scale = |t| div(median(records, w, p, t, 2), median(records, w, p, t, 1));
        let lanefs = scale(LANEFS);
        let rises = match lanefs {
            Some(s) if s > 1.0 => "yes",
            Some(_) => "no",
            None => "-",
        };
        table.add_row(vec![
            w.to_string(),
            p.to_string(),
            fmt_x(vs),
            goal_text,
            fmt_x(lanefs),
            fmt_x(scale(FUSE2FS)),
            rises.to_string(),
        ]);
    }
    align_right(&mut table, 2..7);
    format!("issue 11's goals at 2 threads against fuse2fs in this run:\n{table}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(w: &str, p: &str, target: &str, threads: usize, ops_per_sec: f64) -> Record {
        Record {
            workload: w.to_string(),
            phase: p.to_string(),
            target: target.to_string(),
            variant: "-".to_string(),
            threads,
            rep: 1,
            ops: ops_per_sec as u64,
            seconds: 1.0,
            ops_per_sec,
            per_thread_ops_per_sec: vec![ops_per_sec / threads as f64; threads],
            oversubscribed: false,
            journal_commits: None,
            journal_log_bytes: None,
            commits_per_s: None,
            journal_bytes_per_op: None,
            extents_per_file: None,
            free_extents: None,
            avg_free_extent_kib: None,
            daemon_cpu_seconds: (target != KERNEL).then_some(ops_per_sec * 20e-6),
            daemon_cpu_us_per_op: (target != KERNEL).then_some(20.0),
            ..Record::default()
        }
    }

    /// Ratios are against fuse2fs at the same thread count, scaling against one thread,
    /// the kernel has no daemon CPU, and the goals table says met or missed.
    #[test]
    fn table_compares_with_fuse2fs() {
        let records = vec![
            rec(control::NAME, control::PHASE, CONTROL_TARGET, 1, 100.0),
            rec(control::NAME, control::PHASE, CONTROL_TARGET, 2, 190.0),
            rec("fallocate2", "fallocate", LANEFS, 1, 3000.0),
            rec("fallocate2", "fallocate", FUSE2FS, 1, 1000.0),
            rec("fallocate2", "fallocate", KERNEL, 1, 50000.0),
            rec("fallocate2", "fallocate", LANEFS, 2, 5000.0),
            rec("fallocate2", "fallocate", FUSE2FS, 2, 800.0),
            rec("fallocate2", "fallocate", KERNEL, 2, 90000.0),
            rec("mdtest", "create", LANEFS, 1, 3000.0),
            rec("mdtest", "create", FUSE2FS, 1, 1000.0),
            rec("mdtest", "create", LANEFS, 2, 3000.0),
            rec("mdtest", "create", FUSE2FS, 2, 1000.0),
        ];
        let text = render(&records);
        let row = |w: &str, t: &str, n: &str| -> Vec<String> {
            text.lines()
                .map(|l| {
                    l.split(['│', '┆'])
                        .map(|c| c.trim().to_string())
                        .filter(|c| !c.is_empty())
                        .collect::<Vec<_>>()
                })
                .find(|c| c.len() == 11 && c[0] == w && c[2] == t && c[3] == n)
                .unwrap_or_else(|| panic!("no row {w} {t} {n} in\n{text}"))
        };
        let r = row("fallocate2", LANEFS, "2");
        assert_eq!(r[4], "5,000");
        assert_eq!(r[8], "6.25x");
        assert_eq!(r[9], "1.67x");
        assert_eq!(r[10], "20.0 us");
        let r = row("fallocate2", KERNEL, "1");
        assert_eq!(
            (r[8].as_str(), r[9].as_str(), r[10].as_str()),
            ("50.00x", "-", "-")
        );
        assert_eq!(row("fallocate2", FUSE2FS, "2")[9], "0.80x");
        assert!(text.contains("scaling at 2 vs 1: 1.90x"), "{text}");
        // Issue 11's table, then issue 43's (no ceiling in these records: "-").
        let (eleven, forty_three) = text.split_once("issue 43's goals").expect("both tables");
        let create = forty_three
            .lines()
            .find(|l| l.contains("create"))
            .unwrap_or_default();
        assert!(
            create.contains("0.9x: -") && create.contains("/dev/fuse"),
            "{create}"
        );
        let goal = |w: &str| -> String {
            eleven
                .lines()
                .rev()
                .find(|l| l.contains(w))
                .unwrap_or_default()
                .to_string()
        };
        assert!(goal("fallocate2").contains("3x: met"), "{text}");
        assert!(goal("mdtest").contains("4x: missed"), "{text}");
        assert!(goal("mdtest").contains("no"), "{text}");
    }

    /// The image must hold every thread's files and data.
    #[test]
    fn image_size_is_checked() {
        assert!(check_size(IMAGE_SIZE, 2, 2000).is_ok());
        assert!(check_size(IMAGE_SIZE, 8, 2000).is_ok());
        let e = check_size(IMAGE_SIZE, 4, 20000).expect_err("too few inodes");
        assert!(e.contains("too small for 4 threads x 20000 files"), "{e}");
        assert!(check_size(64 << 20, 1, 10).is_err());
    }

    /// Mount points come out of mountinfo's escapes.
    #[test]
    fn mountinfo_fields_unescape() {
        assert_eq!(unescape(r"/tmp/a\040b"), b"/tmp/a b");
        assert_eq!(unescape(r"/x\134y\011"), b"/x\\y\t");
        assert_eq!(unescape(r"/plain\0"), b"/plain\\0");
    }
}
