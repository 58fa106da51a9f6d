//! Goal: lanefs's jbd2 log and the kernel's are interchangeable. A log the kernel left
//! behind is replayed by lanefs exactly as e2fsck replays it; a log lanefs left behind is
//! replayed by e2fsck, by the kernel and by lanefs to the same tree, with every
//! fsync-acknowledged change present, the orphan list processed, and e2fsck clean.
//!
//! Method: (1) the kernel writes a tree, `sync`s, makes more changes that it commits with
//! fsync only (committed in the log, not yet written home), and is shut down with
//! `xfs_io -x -c shutdown` (with and without `-f`, the log flush). The image file is copied
//! while the dead file system is still mounted (unmounting would write the committed
//! buffers home through the block device): the copy is what a power cut leaves. e2fsck
//! replays one copy, lanefs another (and the kernel a third, for reference); all must give
//! the tree the kernel showed after its last fsync. (2) lanefs writes and fsyncs a tree on a `mkfs.ext4` image; the image file
//! is copied while lanefs is mounted (every device write held off during the copy, so the
//! copy is one instant); e2fsck, the kernel and lanefs each replay a copy. (3) a 4 MiB
//! log wrapped several times by fsync-ed metadata changes, copied mid-run and replayed by
//! the same three.
//!
//! Trees are compared by walking them (names, types, permissions, link counts, sizes and
//! a content hash) through a read-only `noload` kernel mount, which never replays on its
//! own; every difference is listed by path. Failures are collected and reported together
//! at the end of each test.
//!
//! Needs root, loop devices, e2fsprogs and `xfs_io` (xfsprogs); otherwise each test prints
//! `SKIP` (or fails when `LANEFS_REQUIRE_PRIVILEGED=1`).

#[path = "../common/mod.rs"]
mod common;

use common::{kernel_ready, run, KernelMount};
use lanefs::{BlockDevice, FileDevice, FileType, Fs, Ino, MountOptions, Owner, SetAttr, ROOT_INO};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

mod inspect;
mod kernel_log;
mod lanefs_log;
mod replay;
mod snap;
mod trees;

use inspect::*;
use kernel_log::*;
use lanefs_log::*;
use replay::*;
use snap::*;
use trees::*;

const BS: u64 = 4096;
/// Entries of the kernel's and lanefs's htree directories.
const HTREE: usize = 4000;

// ---------------------------------------------------------------------------------------
// Environment: skip rule, tools, kernel mounts.

/// A sparse image of `size` bytes formatted by mkfs.ext4 with 4 KiB blocks.
fn mkfs(path: &Path, size: u64, extra: &[&str]) {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(size))
        .expect("create image");
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .args(extra)
        .arg(path))
    .expect("mkfs.ext4");
}

/// Copy an image file, keeping it sparse.
fn copy_image(src: &Path, dst: &Path) {
    run(Command::new("cp").arg("--sparse=always").arg(src).arg(dst))
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", src.display(), dst.display()));
}

fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// Deterministic content of `len` bytes.
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// A name in the htree directories; varying lengths spread records over blocks.
fn hname(i: usize) -> String {
    format!("entry_{i:05}_{}", "n".repeat(i % 29))
}

// ---------------------------------------------------------------------------------------
// Failures, collected so that one run reports everything that differs.

struct Failures {
    test: &'static str,
    list: Vec<String>,
}

impl Failures {
    fn new(test: &'static str) -> Failures {
        Failures {
            test,
            list: Vec::new(),
        }
    }

    fn add(&mut self, msg: String) {
        println!("{}: FAIL {msg}", self.test);
        self.list.push(msg);
    }

    fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.add(msg());
        }
    }

    /// Record a list of tree differences under one heading.
    fn diffs(&mut self, what: &str, diffs: Vec<String>) {
        if diffs.is_empty() {
            return;
        }
        const MAX: usize = 25;
        let mut s = format!("{what}: {} difference(s):", diffs.len());
        for d in diffs.iter().take(MAX) {
            s.push_str("\n      ");
            s.push_str(d);
        }
        if diffs.len() > MAX {
            s.push_str(&format!("\n      ... and {} more", diffs.len() - MAX));
        }
        self.add(s);
    }

    fn finish(self) {
        if self.list.is_empty() {
            return;
        }
        let mut s = format!("{}: {} failure(s):", self.test, self.list.len());
        for (i, m) in self.list.iter().enumerate() {
            s.push_str(&format!("\n  {}. {m}", i + 1));
        }
        panic!("{s}");
    }
}

#[test]
fn kernel_log_replayed_by_lanefs_like_e2fsck() {
    let test = "kernel_log_replayed_by_lanefs_like_e2fsck";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io"]) {
        return;
    }
    let _wd = common::watchdog(test, 900);
    let t0 = Instant::now();
    let mut f = Failures::new(test);
    kernel_case(test, td.path(), false, &mut f);
    kernel_case(test, td.path(), true, &mut f);
    println!("{test}: total {}", secs(t0));
    f.finish();
}

#[test]
fn lanefs_log_replayed_by_kernel_and_e2fsck() {
    let test = "lanefs_log_replayed_by_kernel_and_e2fsck";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let _wd = common::watchdog(test, 900);
    let t0 = Instant::now();
    let td = td.path();
    let img = td.join("lanefs.img");
    mkfs(&img, 256 << 20, &[]);
    let dev = SnapDevice::open(&img);
    let fs = mount_snap(&dev);
    let victim = lanefs_phase1(&fs);
    let s1 = take_snap(test, td, &dev, &fs, "snap1_tree", &[]);
    let orphans = lanefs_phase2(&fs, victim);
    let s2 = take_snap(test, td, &dev, &fs, "snap2_orphans", &orphans);
    for o in orphans {
        fs.release(o).expect("release orphan");
    }
    fs.unmount().expect("lanefs unmount");
    println!("{test}: lanefs wrote both phases in {}", secs(t0));

    let mut f = Failures::new(test);
    verify_snap(test, td, &s1, &mut f);
    verify_snap(test, td, &s2, &mut f);
    println!("{test}: total {}", secs(t0));
    f.finish();
}

// ---------------------------------------------------------------------------------------
// (3) A small log wrapped several times.

/// Wraps of the 1024-block log at which a copy is taken (mid-wrap).
const WRAP_POINTS: [f64; 3] = [1.5, 2.5, 3.5];
/// Stop once the log has wrapped this often (and every copy is taken).
const WRAPS: f64 = 4.0;
/// Give up after this many iterations.
const MAX_ITERS: usize = 1500;
/// If no log block was written after this many iterations, lanefs writes no log.
const NO_LOG_ITERS: usize = 300;

#[test]
fn lanefs_log_wraps() {
    let test = "lanefs_log_wraps";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let _wd = common::watchdog(test, 900);
    let t0 = Instant::now();
    let td = td.path();
    let img = td.join("wrap.img");
    mkfs(&img, 128 << 20, &["-J", "size=4"]);
    let dev = SnapDevice::open(&img);
    let jlen = dev.log_len();
    println!("{test}: journal log area {jlen} blocks");
    let mut f = Failures::new(test);
    let fs = mount_snap(&dev);

    let dirs: Vec<Ino> = (0..4)
        .map(|k| lmkdir(&fs, ROOT_INO, &format!("w{k}")))
        .collect();
    lmkdir(&fs, ROOT_INO, "u");
    fs.fsync(ROOT_INO, false).expect("fsync root");
    // Live files: name -> directory index.
    let mut live: BTreeMap<String, usize> = BTreeMap::new();
    let mut subdirs: Vec<(usize, String)> = Vec::new();
    let mut snaps = Vec::new();
    let mut fsyncs = 0u64;
    let mut iters = 0;
    for i in 0..MAX_ITERS {
        iters = i + 1;
        let d = i % dirs.len();
        let name = format!("f{i:05}");
        lput(
            &fs,
            dirs[d],
            &name,
            &content(i as u64, 50 + (i * 37) % 6000),
            0o644,
            true,
        );
        fsyncs += 1;
        live.insert(name, d);
        if i % 3 == 0 && i >= 10 {
            let old = format!("f{:05}", i - 10);
            if let Some(od) = live.remove(&old) {
                fs.unlink(dirs[od], old.as_bytes()).expect("unlink");
                fs.fsync(dirs[od], false).expect("fsync dir");
                fsyncs += 1;
            }
        }
        if i % 7 == 0 && i >= 5 {
            let old = format!("f{:05}", i - 5);
            if let Some(od) = live.remove(&old) {
                let nd = (od + 1) % dirs.len();
                let new = format!("r{i:05}");
                fs.rename(dirs[od], old.as_bytes(), dirs[nd], new.as_bytes())
                    .expect("rename");
                fs.fsync(dirs[nd], false).expect("fsync dir");
                fsyncs += 1;
                live.insert(new, nd);
            }
        }
        if i % 11 == 0 {
            let s = format!("s{i:05}");
            lmkdir(&fs, dirs[d], &s);
            fs.fsync(dirs[d], false).expect("fsync dir");
            fsyncs += 1;
            subdirs.push((d, s));
        }
        if i % 13 == 0 && subdirs.len() > 2 {
            let (sd, s) = subdirs.remove(0);
            fs.rmdir(dirs[sd], s.as_bytes()).expect("rmdir");
            fs.fsync(dirs[sd], false).expect("fsync dir");
            fsyncs += 1;
        }
        let wraps = dev.log_blocks() as f64 / jlen as f64;
        if snaps.len() < WRAP_POINTS.len() && wraps >= WRAP_POINTS[snaps.len()] {
            // A change no fsync covers, then the copy.
            lput(
                &fs,
                llook(&fs, "/u"),
                &format!("x{i}"),
                b"unsynced",
                0o644,
                false,
            );
            let label = format!("wrap{:.1}", wraps);
            snaps.push(take_snap(test, td, &dev, &fs, &label, &[]));
        }
        if snaps.len() == WRAP_POINTS.len() && wraps >= WRAPS {
            break;
        }
        if i + 1 == NO_LOG_ITERS && dev.log_blocks() == 0 {
            f.add(format!(
                "lanefs wrote no block into the journal's log area after {iters} iterations ({fsyncs} fsyncs)"
            ));
            break;
        }
    }
    let wraps = dev.log_blocks() as f64 / jlen as f64;
    println!(
        "{test}: {iters} iterations, {fsyncs} fsyncs, {} log blocks = {wraps:.2} wraps of {jlen}, journal_stats {:?}, in {}",
        dev.log_blocks(),
        fs.diagnostics().journal_stats(),
        secs(t0)
    );
    f.check(wraps >= WRAPS, || {
        format!(
            "the log wrapped only {wraps:.2} times ({} log blocks into a {jlen}-block log over {fsyncs} fsyncs; {WRAPS} wanted)",
            dev.log_blocks()
        )
    });
    if snaps.is_empty() {
        // Still check what a crash at the end leaves.
        snaps.push(take_snap(test, td, &dev, &fs, "end", &[]));
    }
    fs.unmount().expect("lanefs unmount");
    for s in &snaps {
        verify_snap(test, td, s, &mut f);
    }
    println!("{test}: total {}", secs(t0));
    f.finish();
}
