//! FS_IOC_SHUTDOWN (XFS_IOC_GOINGDOWN) through the mount, one test per flag value: the
//! ioctl on a directory of the mount returns 0 and writes nothing back into the caller's
//! buffer; afterwards what ext4 refuses fails with EIO (open, read, write, create, mkdir,
//! fsync) and what ext4 still answers answers (stat, readdir, statfs); a second shutdown
//! is a no-op; `umount` returns at once and the daemon exits 0, saying it wrote nothing;
//! the kernel's ext4 replays a copy of the image and lanefs the image itself, and both
//! hold what the mode made durable (the fsync'd file always; the file written after the
//! last commit and an overwrite in place as the mode says); `e2fsck -fn` is clean after
//! each. A caller other than root gets EPERM; when the daemon cannot read the caller's
//! flags (a daemon run by a user, a caller with more capabilities), the shutdown is the
//! default one.
//!
//! The mounts use `commit=600`, so no timer commit comes between the workload and the
//! shutdown.

use super::*;

/// `_IOR('X', 125, __u32)`: EXT4_IOC_SHUTDOWN, XFS_IOC_GOINGDOWN.
const SHUTDOWN: libc::c_ulong = 0x8004_587d;

/// ioctl(SHUTDOWN, &flags) on `path`: Ok with the flags word as it is after the call, or
/// the errno.
fn shutdown_ioctl(path: &Path, flags: u32) -> Result<u32, i32> {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(path).unwrap();
    let mut word = flags;
    // SAFETY: `f` is an open descriptor; the command reads (and, encoded _IOR, may write)
    // the 4-byte `word`, which lives across the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), SHUTDOWN as _, &mut word as *mut u32) };
    if r == 0 {
        Ok(word)
    } else {
        Err(errno())
    }
}

/// The workload before every shutdown: `kept` written and fsync'd, then overwritten in
/// place without fsync; `fresh` created and written after the last commit; `held` open
/// for writing across the shutdown (returned).
fn workload(dir: &Path) -> fs::File {
    let mut f = fs::File::create(dir.join("kept")).unwrap();
    f.write_all(&[1u8; 10_000]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("kept"))
        .unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[2u8; 10_000], 0).unwrap();
    drop(f);
    fs::write(dir.join("fresh"), b"never fsync'd").unwrap();
    fs::create_dir(dir.join("d")).unwrap();
    fs::File::create(dir.join("held")).unwrap()
}

/// What the mount answers after the shutdown, as ext4 does after one.
fn after_shutdown(dir: &Path, mut held: fs::File) {
    let eio = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}");
    };
    eio(fs::read(dir.join("kept")).map(|_| ()), "read (open)");
    eio(fs::write(dir.join("new"), b"x"), "create");
    eio(fs::create_dir(dir.join("newdir")), "mkdir");
    eio(held.write_all(b"late"), "write on a file opened before");
    eio(held.sync_all(), "fsync");
    eio(
        fs::OpenOptions::new()
            .write(true)
            .open(dir.join("kept"))
            .map(|_| ()),
        "open for writing",
    );
    // ext4_getattr, ext4_readdir and ext4_statfs check no shutdown: they answer.
    assert_eq!(fs::metadata(dir.join("kept")).unwrap().len(), 10_000);
    let names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(names.iter().any(|n| n == "kept"), "{names:?}");
    // SAFETY: statvfs is plain data, for which all zeros is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let path = cstr(dir);
    // SAFETY: statvfs writes into `st`, a struct of the right type; `path` is a
    // NUL-terminated string that outlives the call.
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0);
    assert!(st.f_blocks > 0);
    // Again, on a directory: a no-op.
    assert_eq!(shutdown_ioctl(&dir.join("d"), 2), Ok(2));
    drop(held);
}

/// `content` of `kept` and whether `fresh` exists, as each mode leaves them.
fn expect(mode: u32) -> (u8, bool) {
    match mode {
        0 => (2, true),  // DEFAULT: everything written back
        1 => (1, true),  // LOGFLUSH: the commit, not the overwrite in place
        _ => (1, false), // NOLOGFLUSH: only what was committed
    }
}

fn check_tree(root: &Path, mode: u32, who: &str) {
    let (byte, fresh) = expect(mode);
    assert_eq!(
        fs::read(root.join("kept")).unwrap(),
        vec![byte; 10_000],
        "{who}, mode {mode}: kept"
    );
    assert_eq!(
        root.join("fresh").exists(),
        fresh,
        "{who}, mode {mode}: fresh"
    );
    if fresh {
        assert_eq!(fs::read(root.join("fresh")).unwrap(), b"never fsync'd");
    }
}

/// The whole round for flag value `mode` on a mount with `-o opts`, the shutdown sent by
/// `shut` (given the mount's directory `d`, after the workload). A confined daemon (the
/// default) gets a root caller's flags from its supervisor; an `unconfined` one reads
/// them itself.
fn round(test: &str, mode: u32, opts: &str, shut: impl FnOnce(&Path)) {
    if !fuse_ready(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let dir = t.path().join("mnt");
    fs::create_dir(&dir).unwrap();
    let mut child = mount_foreground(&img, &dir, opts);
    let guard = Mount::adopt(&img, &dir);
    let held = workload(&dir);
    shut(&dir.join("d"));
    after_shutdown(&dir, held);

    let start = std::time::Instant::now();
    let out = run(Command::new("umount").arg(&dir));
    assert!(
        out.status.success(),
        "umount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "umount took {:?}",
        start.elapsed()
    );
    guard.forget();
    assert!(
        wait_released(&img, Duration::from_secs(30)),
        "the daemon did not exit"
    );
    let (status, log) = wait_log(&mut child);
    assert!(status.success(), "daemon: {status}: {log}");
    assert!(
        log.contains(&format!("shut down requested ({mode}"))
            && log.contains("was shut down: nothing written at unmount")
            && !log.contains("could not read the flags"),
        "{log}"
    );
    if opts.contains("no_io_uring") {
        assert!(log.contains("serving through /dev/fuse"), "{log}");
    }

    // The kernel's ext4 replays a copy.
    let kcopy = t.path().join("kernel.img");
    fs::copy(&img, &kcopy).unwrap();
    kernel_mount_with(&kcopy, &t.path().join("k"), "loop", |k| {
        check_tree(k, mode, "kernel")
    });
    e2fsck_clean(&kcopy);
    // lanefs replays the image itself.
    let m = Mount::new(&img, &dir, "");
    check_tree(&dir, mode, "lanefs");
    m.umount();
    e2fsck_clean(&img);
    with_kernel_mount(&img, &t.path().join("k"), |k| {
        check_tree(k, mode, "kernel after lanefs")
    });
}

#[test]
fn shutdown_default_over_the_mount() {
    round("shutdown_default_over_the_mount", 0, "commit=600", |d| {
        // The flags word is read from this process and left as it was.
        assert_eq!(shutdown_ioctl(d, 0), Ok(0));
    });
}

#[test]
fn shutdown_logflush_over_the_mount_with_xfs_io() {
    let test = "shutdown_logflush_over_the_mount_with_xfs_io";
    if !Command::new("sh")
        .args(["-c", "command -v xfs_io"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip(test, "xfs_io not installed (package xfsprogs)");
        return;
    }
    // Over /dev/fuse, the others over FUSE-over-io_uring where the kernel offers it.
    round(test, 1, "commit=600,no_io_uring,unconfined", |d| {
        // `shutdown -f`: XFS_IOC_GOINGDOWN with LOGFLUSH, as fstests' `godown -f`.
        let out = run(Command::new("xfs_io")
            .args(["-x", "-c", "shutdown -f"])
            .arg(d));
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "xfs_io shutdown -f: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

#[test]
fn shutdown_nologflush_over_the_mount() {
    round("shutdown_nologflush_over_the_mount", 2, "commit=600", |d| {
        // On a regular file this time (any file of the mount will do).
        let kept = d.parent().unwrap().join("kept");
        assert_eq!(shutdown_ioctl(&kept, 2), Ok(2));
    });
}

/// Another user gets EPERM and the mount goes on; a bad flag value is EINVAL and
/// changes nothing.
#[test]
fn shutdown_needs_root() {
    let test = "shutdown_needs_root";
    if !fuse_ready(test) {
        return;
    }
    let Some(u) = Users::get(test) else {
        return;
    };
    let t = u.a_dir("lanefs-shutdown-");
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(
        &img,
        &t.path().join("mnt"),
        "allow_other,commit=600,unconfined",
    );
    fs::create_dir(m.path("d")).unwrap();
    fs::set_permissions(m.path("d"), fs::Permissions::from_mode(0o777)).unwrap();
    // xfs_io's `shutdown` (expert mode) as lanefs-a: XFS_IOC_GOINGDOWN refused.
    let out = run(u
        .as_a()
        .args(["xfs_io", "-x", "-c", "shutdown"])
        .arg(m.path("d")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Operation not permitted"), "{err}");
    assert_eq!(shutdown_ioctl(&m.path("d"), 3), Err(libc::EINVAL));
    fs::write(m.path("d/after"), b"still served").unwrap();
    assert_eq!(fs::read(m.path("d/after")).unwrap(), b"still served");
    m.umount();
    e2fsck_clean(&img);
}

/// A daemon run by `lanefs-a` cannot read the memory of a root caller: the shutdown
/// asked for as NOLOGFLUSH is the default one (everything written back).
#[test]
fn shutdown_flags_unreadable_mean_default() {
    let test = "shutdown_flags_unreadable_mean_default";
    if !fuse_ready(test) {
        return;
    }
    let Some(u) = Users::get(test) else {
        return;
    };
    let _conf = UserAllowOther::new();
    let t = u.a_dir("lanefs-shutdown-");
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let dir = t.path().join("mnt");
    let m = u.mount_as_a(&img, &dir, "allow_other,commit=600");
    let held = workload(&dir);
    assert_eq!(shutdown_ioctl(&dir.join("d"), 2), Ok(2));
    after_shutdown(&dir, held);
    let out = run(Command::new("umount").arg(&dir));
    assert!(
        out.status.success(),
        "umount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    m.forget();
    assert!(
        wait_released(&img, Duration::from_secs(30)),
        "the daemon did not exit"
    );
    let m = Mount::new(&img, &dir, "");
    check_tree(&dir, 0, "lanefs");
    m.umount();
    e2fsck_clean(&img);
}
