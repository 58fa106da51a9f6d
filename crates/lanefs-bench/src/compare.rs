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

mod mounts;
pub mod programs;
mod render;

use mounts::*;
pub use render::{goals, render};

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
pub const WORKLOADS: &[&str] = &[
    programs::NAME,
    "fallocate2",
    "mdtest",
    workloads::bufio64k::NAME,
];
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
    // Pinned workers only when asked: users' programs are not pinned.
    crate::timing::set_pinning(cfg.pin);
    let with_programs = cfg.workloads.iter().any(|w| w == programs::NAME);
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
    // The timed workloads' shape (the programs have none: each is one command).
    let shape = if chosen.is_empty() {
        String::new()
    } else {
        format!(
            " x threads {threads:?}, {} s per timed run ({} s warm-up), {} files per thread, \
             threads {}",
            cfg.seconds,
            cfg.warmup,
            cfg.files,
            if cfg.pin { "pinned" } else { "not pinned" },
        )
    };
    say(
        out,
        &format!(
            "lanefs bench --compare on {}: images of {size} bytes in {} by mkfs.ext4 {}; {} x {} \
             reps{shape}; {cpus} CPUs",
            pids.join(", "),
            home.display(),
            MKFS_ARGS.join(" "),
            cfg.workloads.join("+"),
            cfg.reps,
        ),
    )?;
    let targets: Vec<Target> = mounts.0.iter().map(Mounted::target).collect();
    let source = if with_programs {
        let s = programs::source(cfg.tarball.as_deref(), &work_dir)?;
        say(
            out,
            &format!(
                "programs: {} ({} entries), one process each, {}",
                s.archive.display(),
                s.entries,
                if cfg.pin {
                    "pinned to one CPU (--pin)"
                } else {
                    "not pinned"
                }
            ),
        )?;
        Some(s)
    } else {
        None
    };
    let program_runs = if with_programs { targets.len() } else { 0 };
    obs.plan(cfg.reps * (threads.len() * (1 + chosen.len() * targets.len()) + program_runs));
    let mut records = Vec::new();
    for rep in 1..=cfg.reps {
        // The programs first, target by target: whole commands, one process each.
        for m in mounts.0.iter().filter(|_| with_programs) {
            let Some(src) = &source else { break };
            obs.start(&crate::Step {
                workload: programs::NAME,
                variant: m.name,
                threads: 1,
                rep,
                reps: cfg.reps,
            });
            let recs = programs::run(src, m, rep, cfg.pin)?;
            obs.finish();
            for r in recs {
                progress(cfg, out, &r)?;
                records.push(r);
            }
        }
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
