//! `lanefs mount` / `lanefs umount` end to end: the command's behaviour (daemon, options,
//! errors before mounting, signals, mount(8)'s helper), and the file system it serves
//! (fresh attributes, long names, open with O_TRUNC, renameat2 flags, fallocate modes,
//! SEEK_DATA/SEEK_HOLE, copy_file_range, special files, set-group-ID directories,
//! read-only mounts, a corrupt area met while mounted, FS_IOC_SHUTDOWN). Every test ends with `e2fsck -fn`
//! clean, and where a tree was built, the kernel's ext4 reads the same tree.

#[path = "../fuse_common/mod.rs"]
mod fuse_common;

mod confine;
mod errors;
mod handles;
mod lifecycle;
mod posix;
mod shutdown;

use fuse_common::*;
use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Wait for a foreground daemon `child` (stderr piped) to exit: its status and its log.
fn wait_log(child: &mut std::process::Child) -> (std::process::ExitStatus, String) {
    let status = child.wait().unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    (status, log)
}

fn image_bytes(p: &Path) -> u64 {
    fnv(&fs::read(p).unwrap())
}

#[test]
fn mount_work_umount_kernel_agrees() {
    if !fuse_ready("mount_work_umount_kernel_agrees") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "256M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    // The mount shows as fuse.lanefs with the image as its source.
    let info = fs::read_to_string("/proc/self/mounts").unwrap();
    let line = info
        .lines()
        .find(|l| l.contains(m.dir.to_str().unwrap()))
        .expect("mounted");
    assert!(line.starts_with(img.to_str().unwrap()), "{line}");
    assert!(line.contains(" fuse.lanefs "), "{line}");

    fs::create_dir_all(m.path("a/b/c")).unwrap();
    for i in 0..300 {
        fs::write(m.path(&format!("a/f{i}")), vec![i as u8; i * 37]).unwrap();
    }
    fs::write(m.path("a/b/big"), vec![7u8; 5 << 20]).unwrap();
    std::os::unix::fs::symlink("b/big", m.path("a/link")).unwrap();
    std::os::unix::fs::symlink("x".repeat(300), m.path("a/longlink")).unwrap();
    fs::hard_link(m.path("a/f1"), m.path("a/b/c/f1-again")).unwrap();
    fs::set_permissions(m.path("a/f2"), fs::Permissions::from_mode(0o4755)).unwrap();
    let before = listing(&m.dir);
    m.umount();
    e2fsck_clean(&img);
    let after = with_kernel_mount(&img, &t.path().join("k"), listing);
    assert_eq!(before, after);
}

/// An image whose directory `/bad` (200 entries) has its first block overwritten with
/// garbage, and a file `/good` beside it; the mount point to use.
fn image_with_corrupt_dir(t: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let img = t.join("a.img");
    mkfs(&img, "64M", &[]);
    let dir = t.join("mnt");
    let m = Mount::new(&img, &dir, "");
    fs::create_dir(m.path("bad")).unwrap();
    for i in 0..200 {
        fs::write(m.path(&format!("bad/{i:0>40}")), b"x").unwrap();
    }
    fs::write(m.path("good"), b"still here").unwrap();
    m.umount();
    // Overwrite the directory's first block with garbage.
    let out = run(Command::new("debugfs")
        .args(["-R", "blocks /bad"])
        .arg(&img));
    let blk: u64 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("blocks")
        .parse()
        .unwrap();
    let mut f = fs::OpenOptions::new().write(true).open(&img).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&vec![0x5A; 4096], blk * 4096).unwrap();
    f.flush().unwrap();
    drop(f);
    (img, dir)
}

/// `lanefs mount -f IMAGE DIR -o OPTS` as a child whose stderr is the log; returns once
/// mounted.
fn mount_foreground(img: &Path, dir: &Path, opts: &str) -> std::process::Child {
    let mut cmd = Command::new(LANEFS);
    cmd.arg("mount").arg(img).arg(dir).arg("-f");
    if !opts.is_empty() {
        cmd.args(["-o", opts]);
    }
    let child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let start = std::time::Instant::now();
    while !is_mounted(dir) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "mount -f did not mount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}
