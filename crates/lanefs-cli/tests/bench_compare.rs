//! Goal: `lanefs bench --compare` mounts alike images with lanefs, fuse2fs and the kernel's
//! ext4, runs the programs (tar x, find -ls, tar c, cp -a, rm -rf of an archive) and
//! fallocate2, mdtest and bufio64k at 1 and 2 threads on each, prints one row per program
//! and target (seconds, and requests per entry from lanefs's and the ceiling's daemons)
//! and per workload phase, target and thread count with nonzero ops/s (and the FUSE
//! daemons' CPU time per operation), takes every mount down and finds every image clean;
//! without what it needs it fails with one line naming what is missing.
//! Method: a 60-entry archive, 0.2 s runs, one repetition, 200 files per thread for mdtest.

mod fuse_common;

use fuse_common::{run, skip, LANEFS};
use std::path::Path;
use std::process::Command;

/// Root, /dev/fuse, e2fsck (fuse_ready), and fuse2fs, mkfs.ext4 and loop devices.
fn compare_ready(test: &str) -> bool {
    if !fuse_common::fuse_ready(test) {
        return false;
    }
    for tool in ["fuse2fs", "mkfs.ext4"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return skip(test, &format!("{tool} not installed"));
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        return skip(test, "no loop devices (/dev/loop-control)");
    }
    true
}

/// The cells of a table row, when `line` is one.
fn cells(line: &str) -> Vec<&str> {
    line.split(['│', '┆'])
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// ops/s as the table prints it ("12,345").
fn rate(cell: &str) -> f64 {
    cell.replace(',', "")
        .parse()
        .unwrap_or_else(|e| panic!("ops/s {cell:?}: {e}"))
}

#[test]
fn compare_runs_every_workload_on_every_mount() {
    if !compare_ready("compare_runs_every_workload_on_every_mount") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("compare.json");
    // The programs' archive: 4 directories of 14 files and a symlink.
    let tree = dir.path().join("tree");
    for d in 0..4 {
        let sub = tree.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).expect("mkdir");
        for f in 0..14 {
            std::fs::write(sub.join(format!("f{f}")), vec![b'x'; 100 + 997 * f]).expect("write");
        }
        std::os::unix::fs::symlink("f0", sub.join("l")).expect("symlink");
    }
    let archive = dir.path().join("tree.tar");
    let tar = run(Command::new("tar")
        .arg("cf")
        .arg(&archive)
        .arg("-C")
        .arg(&tree)
        .arg("."));
    assert!(tar.status.success(), "{tar:?}");
    let out = run(Command::new(LANEFS)
        .args(["bench", "--compare", "--seconds", "0.2", "--warmup", "0.05"])
        .arg("--tarball")
        .arg(&archive)
        .args(["--reps", "1", "--files", "200", "--verbose", "--json"])
        .arg(&json));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "lanefs bench --compare failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let phases = [
        ("fallocate2", "fallocate"),
        ("mdtest", "create"),
        ("mdtest", "remove"),
        ("bufio64k", "write"),
        ("bufio64k", "synced"),
        ("bufio64k", "read"),
    ];
    // With FUSE-over-io_uring offered, lanefs and the ceiling also run over /dev/fuse.
    let uring = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| matches!(v.trim(), "Y" | "1"));
    let mut targets = vec!["lanefs-fuse", "memfs", "fuse2fs", "kernel-ext4"];
    if uring {
        targets.extend(["lanefs-devfuse", "memfs-devfuse"]);
    }
    for &target in &targets {
        for (workload, phase) in phases {
            for threads in ["1", "2"] {
                let row = text
                    .lines()
                    .map(cells)
                    .find(|c| c.len() == 11 && c[..4] == [workload, phase, target, threads])
                    .unwrap_or_else(|| {
                        panic!("no row {workload} {phase} {target} {threads} in\n{text}")
                    });
                assert!(rate(row[4]) > 0.0, "{row:?}");
                // The FUSE daemons' CPU per operation is measured; the kernel has none.
                let cpu = row[10];
                if target == "kernel-ext4" {
                    assert_eq!(cpu, "-", "{row:?}");
                } else {
                    assert!(cpu.ends_with(" us"), "{row:?}");
                }
            }
        }
    }
    // The programs: a row per program and target, requests per entry where counted.
    for &target in &targets {
        for program in ["tar-x", "find-ls", "tar-c", "cp-a", "rm-rf"] {
            let row = text
                .lines()
                .map(cells)
                .find(|c| c.len() == 10 && c[..2] == [program, target])
                .unwrap_or_else(|| panic!("no row {program} {target} in\n{text}"));
            assert!(row[2].parse::<f64>().is_ok_and(|s| s >= 0.0), "{row:?}");
            let counted = ["lanefs-fuse", "memfs", "lanefs-devfuse", "memfs-devfuse"];
            let per_entry = row[8].parse::<f64>();
            if counted.contains(&target) {
                assert!(per_entry.is_ok_and(|r| r > 0.0), "{row:?}");
            } else {
                assert_eq!(row[8], "-", "{row:?}");
            }
        }
    }
    assert!(text.contains("issue 56's goals for the programs"), "{text}");
    assert!(
        text.contains("e2fsck -fn: every image clean after the run"),
        "{text}"
    );
    assert!(text.contains("issue 11's goals at 2 threads"), "{text}");
    // lanefs against the ceiling and the kernel, a row per transport and phase.
    assert!(text.contains("issue 43's goals at 2 threads"), "{text}");
    for phase in ["create", "remove", "write", "synced", "read", "fallocate"] {
        let rows = text
            .lines()
            .map(cells)
            .filter(|c| c.len() == 9 && c[1] == phase)
            .count();
        assert_eq!(rows, if uring { 2 } else { 1 }, "{phase} in\n{text}");
    }
    let records = std::fs::read_to_string(&json).expect("json written");
    for &target in &targets {
        assert!(
            records.contains(&format!("\"target\": \"{target}\"")),
            "{target} missing in the JSON"
        );
    }
    assert!(records.contains("\"daemon_cpu_us_per_op\""), "{records}");
    // Nothing left mounted.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains("lanefs-compare."),
        "left mounted:\n{mounts}"
    );
}

/// Without the tools (an empty PATH) the run fails at once with one line naming each.
#[test]
fn compare_names_what_is_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(Command::new(LANEFS)
        .args(["bench", "--compare", "--reps", "1"])
        .env("PATH", dir.path()));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("lanefs: bench: --compare cannot run here: missing "),
        "{err}"
    );
    for name in ["fuse2fs (apt-get install fuse2fs)", "mkfs.ext4", "e2fsck"] {
        assert!(err.contains(name), "{name} not named: {err}");
    }
}
