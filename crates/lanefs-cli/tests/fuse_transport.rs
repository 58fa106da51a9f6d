//! Which transport a mount uses: FUSE-over-io_uring where the kernel offers it (the
//! `enable_uring` parameter of the fuse module on), /dev/fuse otherwise or with
//! `-o no_io_uring`; `-o io_uring` refuses to mount without it, in one line naming why;
//! `-f` logs one line naming the transport. The whole FUSE suite runs over both
//! transports in CI (`.ci/run` runs the FUSE tests again with the parameter off).
//!
//! Needs root, /dev/fuse and a kernel with FUSE-over-io_uring (6.14+,
//! /sys/module/fuse/parameters/enable_uring); prints SKIP without them (a failure under
//! `LANEFS_REQUIRE_PRIVILEGED=1`). The parameter is global: the test restores it.

mod fuse_common;

use fuse_common::*;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Sets the module parameter, restoring what it was when dropped.
struct Param(String);

impl Param {
    fn save() -> Param {
        Param(std::fs::read_to_string(PARAM).unwrap().trim().to_string())
    }

    fn set(on: bool) {
        std::fs::write(PARAM, if on { "1" } else { "0" }).unwrap();
    }
}

impl Drop for Param {
    fn drop(&mut self) {
        let on = self.0 == "Y" || self.0 == "1";
        let _ = std::fs::write(PARAM, if on { "1" } else { "0" });
    }
}

/// The names of the threads of the daemon serving `dir` that serve io_uring queues.
fn uring_threads(dir: &Path) -> usize {
    let dir = dir.canonicalize().unwrap();
    let pid = daemon_pid(&dir).expect("the daemon's pid");
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|c| c.starts_with("lanefs-uring"))
        .count()
}

/// Some work through the mount, checked.
fn work(dir: &Path) {
    let d = dir.join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..100 {
        std::fs::write(d.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.join("big"), &big).unwrap();
    assert_eq!(std::fs::read(dir.join("big")).unwrap(), big);
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 100);
    for i in 0..50 {
        std::fs::remove_file(d.join(format!("f{i}"))).unwrap();
    }
    assert_eq!(std::fs::read(d.join("f77")).unwrap(), b"file 77");
}

#[test]
fn io_uring_where_offered_dev_fuse_otherwise() {
    let test = "io_uring_where_offered_dev_fuse_otherwise";
    if !fuse_ready(test) {
        return;
    }
    if !Path::new(PARAM).exists() {
        skip(
            test,
            "this kernel has no FUSE-over-io_uring (6.14+, CONFIG_FUSE_IO_URING)",
        );
        return;
    }
    let _restore = Param::save();
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "256M", &[]);
    let queues = lanefs_fuse::uring::possible_cpus().unwrap();

    // Offered: one pinned thread per possible CPU serves a queue.
    Param::set(true);
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    assert_eq!(
        uring_threads(&m.dir),
        queues,
        "one queue thread per possible CPU"
    );
    work(&m.dir);
    m.umount();
    e2fsck_clean(&img);
    // A max_write that is not a whole number of pages still serves through the queues
    // (their entries are rounded up to whole pages).
    let m = Mount::new(&img, &t.path().join("mnt"), "max_write=100000");
    assert_eq!(uring_threads(&m.dir), queues);
    std::fs::remove_dir_all(m.path("d")).unwrap();
    work(&m.dir);
    m.umount();
    e2fsck_clean(&img);
    // Turned off by the mount option.
    let m = Mount::new(&img, &t.path().join("mnt"), "no_io_uring");
    assert_eq!(uring_threads(&m.dir), 0);
    std::fs::remove_dir_all(m.path("d")).unwrap();
    m.umount();

    // Foreground: one line names the transport.
    let mnt = t.path().join("mnt");
    let mut child = Command::new(LANEFS)
        .arg("mount")
        .arg(&img)
        .arg(&mnt)
        .arg("-f")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let m = Mount::adopt(&img, &mnt);
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("serving through FUSE-over-io_uring")
            && line.contains(&format!("{queues} queues")),
        "{line}"
    );
    m.umount();
    assert!(child.wait().unwrap().success());

    // Not offered: /dev/fuse, and `-o io_uring` refuses in one line naming why.
    Param::set(false);
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    assert_eq!(uring_threads(&m.dir), 0);
    work(&m.dir);
    m.umount();
    let out = run(Command::new(LANEFS)
        .arg("mount")
        .arg(&img)
        .arg(t.path().join("mnt"))
        .args(["-o", "io_uring"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted without io_uring");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("io_uring") && err.contains("enable_uring"),
        "{err}"
    );
    assert!(!is_mounted(&t.path().join("mnt")));
    assert!(wait_released(&img, std::time::Duration::from_secs(10)));
    e2fsck_clean(&img);
}

/// `lanefs memfs`, the bench's FUSE ceiling, serves the same work through the same
/// frontend session and transport, daemonized, and unmounts cleanly.
#[test]
fn memfs_serves_and_unmounts() {
    let test = "memfs_serves_and_unmounts";
    if !fuse_ready(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let out = run(Command::new(LANEFS).arg("memfs").arg(&mnt));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _adopted = Mount::adopt(Path::new("memfs"), &mnt);
    work(&mnt);
    // An unlinked open file lives until its last close.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(mnt.join("open"))
        .unwrap();
    std::fs::remove_file(mnt.join("open")).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"still here", 0).unwrap();
    let mut back = [0u8; 10];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(&back, b"still here");
    drop(f);
    let out = run(Command::new(LANEFS).arg("umount").arg(&mnt));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mnt));
    _adopted.forget();
}
