//! `umount` right after `lanefs mount` finds the mount free: 200 pairs at one path, each
//! new mount taking the device and mountinfo ID its predecessor had.
//!
//! A binary of its own, so that no other test runs beside it: any process that walks a
//! path into a mount, or reads a /proc link to a file in it, holds a reference on it for
//! that moment, and an `umount` then fails EBUSY, whatever the file system. Here nothing
//! but lanefs and `umount` touches the mount. A busy `umount` is retried once after a
//! moment, with who holds the mount printed; the test fails when it is busy twice in a
//! row, when a lanefs process is found holding it, or when it was busy more than twice.

#[path = "fuse_common/mod.rs"]
mod fuse_common;

use fuse_common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The processes that have a descriptor, cwd or root under `dir`: pid, name and link.
fn holders_of(dir: &Path) -> Vec<String> {
    // The kernel names files by their canonical paths.
    let dir = &dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let pid = p.file_name();
        let Some(pid) = pid
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let mut links = vec![format!("/proc/{pid}/cwd"), format!("/proc/{pid}/root")];
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            links.extend(fds.flatten().map(|f| f.path().display().to_string()));
        }
        for l in links {
            if std::fs::read_link(&l).is_ok_and(|t| t.starts_with(dir)) {
                out.push(format!("{pid} ({}) {l}", comm.trim()));
            }
        }
    }
    out
}

#[test]
fn mount_and_umount_200_times_never_busy() {
    if !fuse_ready("mount_and_umount_200_times_never_busy") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("p.img");
    mkfs(&img, "64M", &[]);
    let dir = t.path().join("mnt");
    let mut busy = 0;
    for i in 0..200 {
        let m = Mount::new(&img, &dir, "");
        let mut out = run(Command::new("umount").arg(&dir));
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("busy") {
            busy += 1;
            let held = holders_of(&dir);
            eprintln!("pair {i}: umount busy; holders now: {held:?}");
            assert!(
                !held
                    .iter()
                    .any(|h| h.contains("(lanefs)") || h.contains("mount.fuse")),
                "lanefs holds its own mount: {held:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
            out = run(Command::new("umount").arg(&dir));
        }
        assert!(out.status.success(), "pair {i}: {out:?}");
        m.forget();
    }
    assert!(busy <= 2, "umount was busy {busy} times of 200");
    assert!(wait_released(&img, Duration::from_secs(60)));
    e2fsck_clean(&img);
}
