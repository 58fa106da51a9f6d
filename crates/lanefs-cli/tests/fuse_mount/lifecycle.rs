//! The daemon's life: signals and fusermount, mount(8)'s helper and fstab, read-only
//! mounts, a mount waiting for a closing daemon, mounting again after the kernel's umount.

use super::*;

#[test]
fn signals_and_fusermount_unmount_cleanly() {
    if !fuse_ready("signals_and_fusermount_unmount_cleanly") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let dir = t.path().join("mnt");
    for (i, how) in ["TERM", "INT", "fusermount3"].iter().enumerate() {
        let m = Mount::new(&img, &dir, "");
        fs::write(m.path(&format!("file{i}")), vec![i as u8; 100_000]).unwrap();
        if *how == "fusermount3" {
            let out = run(Command::new("fusermount3").arg("-u").arg(&dir));
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            let pid = daemon_pid(&dir.canonicalize().unwrap()).expect("daemon running");
            let out = run(Command::new("kill")
                .arg(format!("-{how}"))
                .arg(pid.to_string()));
            assert!(out.status.success());
        }
        assert!(
            wait_released(&img, Duration::from_secs(60)),
            "{how}: daemon did not exit"
        );
        assert!(!is_mounted(&dir), "{how}: still mounted");
        m.forget();
        e2fsck_clean(&img);
    }
    let out = run(Command::new(LANEFS)
        .arg("cat")
        .arg(format!("{}:/file2", img.display())));
    assert_eq!(out.stdout, vec![2u8; 100_000]);
}

#[test]
fn mount_helper_for_mount_8_and_fstab() {
    if !fuse_ready("mount_helper_for_mount_8_and_fstab") {
        return;
    }
    let helper = Path::new("/sbin/mount.fuse.lanefs");
    let ours = fs::read_link(helper).is_ok_and(|p| p == Path::new(LANEFS));
    if !ours {
        if helper.exists() {
            skip(
                "mount_helper_for_mount_8_and_fstab",
                "another /sbin/mount.fuse.lanefs is installed",
            );
            return;
        }
        std::os::unix::fs::symlink(LANEFS, helper).unwrap();
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let dir = t.path().join("mnt");
    fs::create_dir(&dir).unwrap();
    let out = run(Command::new("mount")
        .args([
            "-t",
            "fuse.lanefs",
            "-o",
            "allow_other,nosuid,fsname=myimage",
        ])
        .arg(&img)
        .arg(&dir));
    assert!(
        out.status.success(),
        "mount -t fuse.lanefs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = fs::read_to_string("/proc/self/mounts").unwrap();
    let line = info
        .lines()
        .find(|l| l.contains(dir.to_str().unwrap()))
        .unwrap()
        .to_string();
    assert!(
        line.starts_with("myimage ") && line.contains("fuse.lanefs") && line.contains("nosuid"),
        "{line}"
    );
    fs::write(dir.join("hello"), b"from mount(8)").unwrap();
    // remount,ro and back, as ext4: writes refused with EROFS while read-only (what was
    // written before is in the image), reads still served; rw again writes.
    let remount = |how: &str| {
        let out = run(Command::new("mount").args(["-o", how]).arg(&dir));
        assert!(
            out.status.success(),
            "mount -o {how}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    remount("remount,ro");
    let opts = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        opts.lines()
            .any(|l| l.contains(dir.to_str().unwrap()) && l.contains(" ro,")),
        "{opts}"
    );
    let refused = fs::write(dir.join("not"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS));
    assert_eq!(fs::read(dir.join("hello")).unwrap(), b"from mount(8)");
    let out = run(Command::new(LANEFS)
        .arg("mount")
        .arg(&img)
        .arg(t.path())
        .args(["-o", "remount,ro"]));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a lanefs mount"),
        "{out:?}"
    );
    remount("remount,rw");
    fs::write(dir.join("again"), b"rw").unwrap();
    let out = run(Command::new("umount").arg(&dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(wait_released(&img, Duration::from_secs(60)));
    e2fsck_clean(&img);
    let out = run(Command::new(LANEFS)
        .arg("cat")
        .arg(format!("{}:/hello", img.display())));
    assert_eq!(out.stdout, b"from mount(8)");
    if !ours {
        let _ = fs::remove_file(helper);
    }
}

#[test]
fn read_only_mount_writes_nothing() {
    if !fuse_ready("read_only_mount_writes_nothing") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let out = run(Command::new(LANEFS)
        .arg("mkdir")
        .arg(format!("{}:/d", img.display())));
    assert!(out.status.success());
    let sum = image_bytes(&img);
    let m = Mount::new(&img, &t.path().join("mnt"), "ro");
    assert!(m.path("d").is_dir());
    let e = fs::write(m.path("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    m.umount();
    assert_eq!(
        sum,
        image_bytes(&img),
        "a read-only mount changed the image"
    );
}

/// `lanefs mount` waits for a holder of the image that is a lanefs mount daemon (its mount
/// gone, still writing back), and only for that: here a stand-in named as mount(8)'s
/// helper holds the image's lock for two seconds. `lanefs cp` meanwhile fails "in use" at
/// once, as it does for any holder; the mount succeeds when the stand-in lets go.
#[test]
fn a_mount_waits_for_a_closing_daemon_and_nothing_else() {
    if !fuse_ready("a_mount_waits_for_a_closing_daemon_and_nothing_else") {
        return;
    }
    if tool("flock").is_none() {
        skip(
            "a_mount_waits_for_a_closing_daemon_and_nothing_else",
            "flock not installed (util-linux)",
        );
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("w.img");
    mkfs(&img, "64M", &[]);
    let mut holder = Command::new("bash")
        .arg("-c")
        .arg("exec -a mount.fuse.lanefs flock \"$1\" sleep 2")
        .arg("bash")
        .arg(&img)
        .spawn()
        .unwrap();
    // Until the stand-in holds the lock.
    let start = std::time::Instant::now();
    loop {
        let probe = run(Command::new("flock").arg("-n").arg(&img).arg("true"));
        if !probe.status.success() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the stand-in never locked"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let src = t.path().join("src");
    fs::write(&src, b"x").unwrap();
    let cp = run(Command::new(LANEFS)
        .arg("cp")
        .arg(&src)
        .arg(format!("{}:/x", img.display())));
    assert!(
        String::from_utf8_lossy(&cp.stderr).contains("in use by another lanefs"),
        "cp while a daemon closes: {cp:?}"
    );
    let dir = t.path().join("mnt");
    let m = Mount::new(&img, &dir, "");
    assert!(
        holder.try_wait().unwrap().is_some(),
        "the mount returned while the closing daemon still held the image"
    );
    m.umount();
    let _ = holder.wait();
    e2fsck_clean(&img);
}

/// After the kernel's `umount` (as fstests and scripts use) the image mounts again at
/// once and holds what each round wrote: the new mount waits while the old daemon writes
/// back. A second mount while the first serves is a bind mount of it (one daemon, as the
/// kernel shares one superblock between a device's mounts), which outlives the first.
#[test]
fn mounts_again_after_kernel_umount() {
    if !fuse_ready("mounts_again_after_kernel_umount") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("w.img");
    mkfs(&img, "1G", &[]);
    let dir = t.path().join("mnt");
    let other = t.path().join("other");
    fs::create_dir_all(&other).unwrap();
    for round in 0..3 {
        let m = Mount::new(&img, &dir, "commit=600");
        // Dirty data the daemon writes back only at its unmount.
        let data = vec![round as u8 + 1; 1 << 20];
        let name = format!("f{round}");
        let mut f = fs::File::create(m.path(&name)).unwrap();
        for _ in 0..300 {
            f.write_all(&data).unwrap();
        }
        drop(f);
        let second = run(Command::new(LANEFS).arg("mount").arg(&img).arg(&other));
        assert!(second.status.success(), "a second mount: {second:?}");
        assert_eq!(fs::metadata(other.join(&name)).unwrap().len(), 300 << 20);
        fs::write(other.join("via-other"), b"second").unwrap();
        // The first mount goes; the daemon serves on through the second.
        let out = run(Command::new("umount").arg(&dir));
        assert!(out.status.success(), "umount: {out:?}");
        m.forget();
        assert_eq!(fs::read(other.join("via-other")).unwrap(), b"second");
        let out = run(Command::new("umount").arg(&other));
        assert!(out.status.success(), "umount of the second: {out:?}");
    }
    let m = Mount::new(&img, &dir, "");
    for round in 0..3u8 {
        let got = fs::read(m.path(&format!("f{round}"))).unwrap();
        assert_eq!(got.len(), 300 << 20);
        assert!(got.iter().all(|&b| b == round + 1), "f{round}");
    }
    m.umount();
    e2fsck_clean(&img);
}

/// The daemon takes no transparent huge pages (PR_SET_THP_DISABLE; see mount.rs
/// `no_huge_pages`): its /proc status says so.
#[test]
fn the_daemon_takes_no_huge_pages() {
    if !fuse_ready("the_daemon_takes_no_huge_pages") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    let pid = daemon_pid(&m.dir).expect("the daemon's pid");
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    m.umount();
    let line = status.lines().find(|l| l.starts_with("THP_enabled:"));
    assert_eq!(
        line.map(|l| l.split_whitespace().nth(1)),
        Some(Some("0")),
        "{status}"
    );
}

/// The daemon keeps no descriptor it inherited: a shell that has a file on one mount
/// open (a redirection, without close-on-exec) and mounts another image leaves the
/// first mount free to unmount while the second serves.
#[test]
fn the_daemon_keeps_no_inherited_descriptor() {
    if !fuse_ready("the_daemon_keeps_no_inherited_descriptor") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a.img"), t.path().join("b.img"));
    mkfs(&a, "64M", &[]);
    mkfs(&b, "64M", &[]);
    let ma = Mount::new(&a, &t.path().join("ma"), "");
    let mb_dir = t.path().join("mb");
    fs::create_dir_all(&mb_dir).unwrap();
    let out = run(Command::new("bash")
        .arg("-c")
        .arg("exec 3>\"$1/log\" && \"$2\" mount \"$3\" \"$4\"")
        .arg("bash")
        .arg(&ma.dir)
        .arg(LANEFS)
        .arg(&b)
        .arg(&mb_dir));
    assert!(
        out.status.success(),
        "mount with a descriptor open: {out:?}"
    );
    let mb = Mount::adopt(&b, &mb_dir);
    ma.umount();
    mb.umount();
    e2fsck_clean(&a);
    e2fsck_clean(&b);
}

/// An image lanefs only reads (quota) mounts read-only, and `lanefs mount` says so in one
/// note rather than nothing.
#[test]
fn a_read_only_feature_is_told_at_mount() {
    if !fuse_ready("a_read_only_feature_is_told_at_mount") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("q.img");
    let made = run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "quota"])
        .arg(&img)
        .arg("64M"));
    assert!(made.status.success(), "mkfs.ext4: {made:?}");
    let dir = t.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    let out = run(Command::new(LANEFS).arg("mount").arg(&img).arg(&dir));
    assert!(out.status.success(), "{out:?}");
    let m = Mount::adopt(&img, &dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("note:") && err.contains("quota") && err.contains("read-only"),
        "{err}"
    );
    let e = fs::write(m.path("x"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    m.umount();
}

/// A second mount of a mounted image binds the first at once whatever fsname either
/// shows (mount(8) and fstab mounts all have one), instead of waiting for a daemon that
/// is not closing.
#[test]
fn a_second_mount_with_an_fsname_binds_the_first() {
    if !fuse_ready("a_second_mount_with_an_fsname_binds_the_first") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("f.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(&img, &t.path().join("m1"), "fsname=first");
    let other = t.path().join("m2");
    fs::create_dir_all(&other).unwrap();
    let start = std::time::Instant::now();
    let out = run(Command::new("timeout")
        .arg("20")
        .arg(LANEFS)
        .arg("mount")
        .arg(&img)
        .arg(&other)
        .args(["-o", "fsname=second"]));
    assert!(out.status.success(), "{out:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    fs::write(other.join("via-second"), b"2").unwrap();
    assert_eq!(fs::read(m.path("via-second")).unwrap(), b"2");
    let out = run(Command::new("umount").arg(&other));
    assert!(out.status.success(), "{out:?}");
    // `lanefs umount` waits for the write-back here too: it finds the daemon by the
    // mount point it holds, though the fsname names no image.
    m.umount();
    e2fsck_clean(&img);
}

/// A connection aborted through the FUSE control file system ends the daemon (status 0)
/// and leaves a dead mount, which the supervisor unmounts (it knows its mount by the
/// mount's unique ID, Linux 6.8+: without one it leaves a dead mount alone rather than
/// walk into the mount point to see); the image mounts again with what was fsynced.
#[test]
fn an_aborted_connection_is_unmounted() {
    if !fuse_ready("an_aborted_connection_is_unmounted") {
        return;
    }
    // SAFETY: a zeroed statx is valid storage for the call to fill.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and writable storage, both live for the call.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c"/".as_ptr(),
            0,
            libc::STATX_MNT_ID_UNIQUE,
            &mut stx,
        )
    };
    if r != 0 || stx.stx_mask & libc::STATX_MNT_ID_UNIQUE == 0 {
        eprintln!("SKIP an_aborted_connection_is_unmounted: this kernel has no unique mount IDs (Linux 6.8+)");
        return;
    }
    let conns = Path::new("/sys/fs/fuse/connections");
    assert!(
        conns.is_dir(),
        "no {} (the fuse module is loaded)",
        conns.display()
    );
    if !is_mounted(conns) {
        let out = run(Command::new("mount")
            .args(["-t", "fusectl", "none"])
            .arg(conns));
        assert!(out.status.success(), "mount fusectl: {out:?}");
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let dir = t.path().join("mnt");
    let m = Mount::new(&img, &dir, "");
    fs::write(m.path("kept"), b"k").unwrap();
    let f = fs::File::open(m.path("kept")).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let dev = fs::metadata(&dir).unwrap().dev();
    let minor = libc::minor(dev);
    fs::write(conns.join(minor.to_string()).join("abort"), b"1").unwrap();
    let start = std::time::Instant::now();
    while is_mounted(&dir) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!is_mounted(&dir), "the dead mount is still there");
    m.forget();
    assert!(wait_released(&img, Duration::from_secs(30)));
    let m = Mount::new(&img, &dir, "");
    assert_eq!(fs::read(m.path("kept")).unwrap(), b"k");
    m.umount();
    e2fsck_clean(&img);
}
