//! `programs`: what users run, timed as whole commands on each mount of a compare run.
//!
//! One process per program, not pinned to a CPU (`--pin` pins it to the first CPU the
//! bench may use, as the mount workloads' threads are with `--pin`), in a fresh directory
//! of the mount: `tar x` of an archive then `sync -f` and an fsync of the directory (what
//! makes a FUSE daemon write it home), `find -ls` and `tar c` with the
//! page, dentry and inode caches dropped first (every mount alike), `cp -a` of the
//! extracted tree within the mount, `rm -rf` of both trees. The archive is `--tarball` or
//! one this module builds: a tree shaped like a system's documentation and headers
//! (mostly small files, a few large ones, a tenth as many directories, some symlinks),
//! the same bytes on every run. On lanefs's and the ceiling's mounts the daemon's request
//! counts ([`lanefs_fuse::stats`]) are read before and after each program: the requests
//! each one cost, by opcode.

use super::mounts::{settle, Mounted};
use crate::report::Record;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The workload's name on the command line.
pub const NAME: &str = crate::config::PROGRAMS;

/// The programs in the order they run: phase name and the shell command, where `$A` is
/// the archive and `$D` the run's directory on the mount.
pub const PROGRAMS: &[(&str, &str)] = &[
    // `sync -f` (syncfs) reaches no FUSE daemon (Linux sends FUSE_SYNCFS to virtiofs
    // only), so the fsync of the directory after it (`sync DIR`) is what makes a FUSE
    // file system write the tree home and commit, as syncfs makes the kernel's ext4.
    (
        "tar-x",
        "mkdir \"$D/src\" && tar xf \"$A\" -C \"$D/src\" && sync -f \"$D\" && sync \"$D\"",
    ),
    ("find-ls", "find \"$D/src\" -ls > /dev/null"),
    ("tar-c", "tar cf - -C \"$D/src\" . | wc -c > /dev/null"),
    ("cp-a", "cp -a \"$D/src\" \"$D/copy\""),
    ("rm-rf", "rm -rf \"$D/src\" \"$D/copy\""),
];

/// Programs that start with the caches dropped (they read what an earlier one wrote).
const COLD: &[&str] = &["find-ls", "tar-c"];

/// The archive every mount gets.
pub struct Source {
    pub archive: PathBuf,
    /// Files, directories and symlinks in it (the denominator of requests per entry).
    pub entries: u64,
}

/// The archive `given`, or one built in `work` (entries counted by `tar t`).
pub fn source(given: Option<&Path>, work: &Path) -> Result<Source, String> {
    let archive = match given {
        Some(a) => a.to_path_buf(),
        None => {
            let tree = work.join("programs-tree");
            build_tree(&tree)?;
            let archive = work.join("programs.tar");
            let out = Command::new("tar")
                .arg("cf")
                .arg(&archive)
                .arg("-C")
                .arg(&tree)
                .arg(".")
                .output()
                .map_err(|e| format!("tar: {e}"))?;
            if !out.status.success() {
                return Err(format!("tar cf: {}", String::from_utf8_lossy(&out.stderr)));
            }
            std::fs::remove_dir_all(&tree).map_err(|e| format!("{}: {e}", tree.display()))?;
            archive
        }
    };
    let out = Command::new("tar")
        .arg("tf")
        .arg(&archive)
        .output()
        .map_err(|e| format!("tar tf {}: {e}", archive.display()))?;
    if !out.status.success() {
        return Err(format!(
            "tar tf {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let entries = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && *l != b"./")
        .count();
    Ok(Source {
        archive,
        entries: entries as u64,
    })
}

/// Files in the built tree; a tenth as many directories, one symlink per 80 files.
const TREE_FILES: usize = 8000;

/// Build the default tree at `root`: `TREE_FILES` files whose sizes are spread from 64
/// bytes to 256 KiB evenly on a log scale (median 4 KiB, about 140 MB in all, as a
/// system's /usr/share/doc and /usr/include are), in directories 3 levels deep, and
/// symlinks; contents and names from a fixed seed.
fn build_tree(root: &Path) -> Result<(), String> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let dirs: Vec<PathBuf> = (0..TREE_FILES / 10)
        .map(|i| root.join(format!("d{}/s{}/p{i}", i % 8, i % 40)))
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let line: Vec<u8> =
        b"lanefs programs tree: the quick brown fox jumps over the lazy dog 0123456789\n"
            .repeat(4096);
    for i in 0..TREE_FILES {
        let size = {
            // 2^6 .. 2^18 bytes, log-uniform.
            let exp = 6 + next() % 12;
            ((1u64 << exp) + next() % (1u64 << exp)) as usize
        };
        let d = &dirs[(next() as usize) % dirs.len()];
        let f = d.join(format!("f{i}.txt"));
        let start = (next() as usize) % 64;
        let mut data = line[start..]
            .iter()
            .copied()
            .cycle()
            .take(size)
            .collect::<Vec<u8>>();
        data[..8.min(size)].copy_from_slice(&(i as u64).to_le_bytes()[..8.min(size)]);
        std::fs::write(&f, &data).map_err(|e| format!("{}: {e}", f.display()))?;
        if i % 80 == 0 {
            let l = d.join(format!("l{i}"));
            std::os::unix::fs::symlink(format!("f{i}.txt"), &l)
                .map_err(|e| format!("{}: {e}", l.display()))?;
        }
    }
    Ok(())
}

/// Drop the kernel's clean caches (pages, dentries, inodes) after writing everything
/// back: the same cold start for every mount.
fn drop_caches() -> Result<(), String> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("/proc/sys/vm/drop_caches: {e}"))
}

/// Whether `m` is served by one of this binary's daemons (lanefs or the ceiling), which
/// answer the request-count ioctl.
fn counts_requests(m: &Mounted) -> bool {
    [
        super::LANEFS,
        super::LANEFS_DEV,
        super::MEMFS,
        super::MEMFS_DEV,
    ]
    .contains(&m.name)
}

/// Run every program on `m` once (repetition `rep`) and return a record per program.
pub(super) fn run(src: &Source, m: &Mounted, rep: usize, pin: bool) -> Result<Vec<Record>, String> {
    let dir = m.dir.join(format!("programs-{rep}"));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut records = Vec::new();
    for &(phase, script) in PROGRAMS {
        if COLD.contains(&phase) {
            drop_caches()?;
        }
        let counts = |when| {
            counts_requests(m)
                .then(|| lanefs_fuse::stats::read(&m.dir))
                .transpose()
                .map_err(|e| format!("request counts of {} {when} {phase}: {e}", m.name))
        };
        let before = counts("before")?;
        let cpu0 = m.pid().and_then(crate::target::process_cpu);
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .env("A", &src.archive)
            .env("D", &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if pin {
            pin_first_cpu(&mut cmd);
        }
        let start = Instant::now();
        let out = cmd.output().map_err(|e| format!("sh: {e}"))?;
        let seconds = start.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(format!(
                "{phase} on {} failed ({}): {}",
                m.name,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let cpu1 = m.pid().and_then(crate::target::process_cpu);
        let after = counts("after")?;
        let requests = before.zip(after).map(|(b, a)| {
            let mut by_op: Vec<(String, u64)> = (0..b.len())
                .filter(|&i| a[i] > b[i])
                .map(|i| (lanefs_fuse::stats::opcode_name(i), a[i] - b[i]))
                .collect();
            by_op.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
            by_op
        });
        let daemon_cpu = cpu0
            .zip(cpu1)
            .map(|(a, b)| b.saturating_sub(a).as_secs_f64());
        records.push(Record {
            workload: NAME.to_string(),
            phase: phase.to_string(),
            target: m.name.to_string(),
            variant: crate::PATH_VARIANT.to_string(),
            threads: 1,
            rep,
            ops: src.entries,
            seconds,
            ops_per_sec: src.entries as f64 / seconds.max(1e-9),
            per_thread_ops_per_sec: vec![src.entries as f64 / seconds.max(1e-9)],
            daemon_cpu_seconds: daemon_cpu,
            daemon_cpu_us_per_op: daemon_cpu.map(|c| c * 1e6 / src.entries.max(1) as f64),
            fuse_requests: requests,
            ..Record::default()
        });
    }
    std::fs::remove_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    settle(&m.dir)?;
    Ok(records)
}

/// Run the child on the first CPU this process may use (`--pin`).
fn pin_first_cpu(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let Some(cpu) = crate::timing::allowed_cpus().first().copied() else {
        return;
    };
    // SAFETY: the closure runs in the child between fork and exec; `pin_to` only fills
    // a cpu_set_t on its own stack and calls sched_setaffinity (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            crate::timing::pin_to(cpu);
            Ok(())
        });
    }
}
