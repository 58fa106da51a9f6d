//! Errors: before mounting (one line naming what is wrong), a corrupt area met while
//! mounted (EIO and a log line), and errors=panic stopping the daemon.

use super::*;

#[test]
fn errors_before_mounting_are_one_line() {
    if !fuse_ready("errors_before_mounting_are_one_line") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let zeros = t.path().join("zeros.img");
    fs::write(&zeros, vec![0u8; 4 << 20]).unwrap();
    let mnt = t.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let file_mp = t.path().join("plainfile");
    fs::write(&file_mp, b"x").unwrap();
    let sum = image_bytes(&img);
    let mount = |args: &[&std::ffi::OsStr]| {
        let out = run(Command::new(LANEFS).arg("mount").args(args));
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("lanefs: mount: "), "{err}");
        assert!(!is_mounted(&mnt), "{args:?} left a mount");
        err
    };
    let os = |p: &Path| p.as_os_str().to_owned();
    let e = mount(&[os(&t.path().join("nope.img")).as_os_str(), mnt.as_os_str()]);
    assert!(e.contains("nope.img") && e.contains("no such file"), "{e}");
    let e = mount(&[zeros.as_os_str(), mnt.as_os_str()]);
    assert!(e.contains("zeros.img"), "{e}");
    let e = mount(&[img.as_os_str(), t.path().join("nodir").as_os_str()]);
    assert!(e.contains("nodir"), "{e}");
    let e = mount(&[img.as_os_str(), file_mp.as_os_str()]);
    assert!(e.contains("not a directory"), "{e}");
    for (opt, want) in [
        ("bogus", "\"bogus\""),
        ("threads=0", "threads=0"),
        ("mb_stream_goal=fast", "mb_stream_goal=fast"),
        ("errors=continue", "errors=continue"),
        ("commit=soon", "commit=soon"),
        ("ro=1", "takes no value"),
    ] {
        let e = mount(&[
            img.as_os_str(),
            mnt.as_os_str(),
            "-o".as_ref(),
            opt.as_ref(),
        ]);
        assert!(e.contains(want), "{opt}: {e}");
    }
    assert_eq!(sum, image_bytes(&img), "a refused mount changed the image");
    // A busy mount point: something is mounted there already.
    let m = Mount::new(&img, &mnt, "");
    let img2 = t.path().join("b.img");
    mkfs(&img2, "64M", &[]);
    let out = run(Command::new(LANEFS).arg("mount").arg(&img2).arg(&mnt));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("busy"), "{err}");
    // A second mount of the image is a bind of the first (`mounts_again_after_kernel_umount`);
    // read-write over a read-only first mount it is refused, naming where it is mounted.
    m.umount();
    let m = Mount::new(&img, &mnt, "ro");
    let mnt2 = t.path().join("mnt2");
    fs::create_dir(&mnt2).unwrap();
    let out = run(Command::new(LANEFS).arg("mount").arg(&img).arg(&mnt2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.lines().count() == 1, "{err}");
    assert!(
        err.contains("already mounted at") && err.contains("read-only"),
        "{err}"
    );
    assert!(!is_mounted(&mnt2));
    m.umount();
    e2fsck_clean(&img);
    // umount of something that is not mounted.
    let out = run(Command::new(LANEFS).arg("umount").arg(&mnt));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not mounted"));
}

#[test]
fn corrupt_area_fails_with_eio_and_a_log_line() {
    if !fuse_ready("corrupt_area_fails_with_eio_and_a_log_line") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, dir) = image_with_corrupt_dir(t.path());
    // Foreground, to read the log.
    let mut child = mount_foreground(&img, &dir, "");
    let guard = Mount::adopt(&img, &dir);
    let e = fs::read_dir(dir.join("bad"))
        .and_then(|r| r.collect::<std::io::Result<Vec<_>>>())
        .and_then(|_| fs::metadata(dir.join("bad").join(format!("{:0>40}", 7))))
        .expect_err("a corrupt directory read cleanly");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // The rest of the mount still works.
    assert_eq!(fs::read(dir.join("good")).unwrap(), b"still here");
    let out = run(Command::new(LANEFS).arg("umount").arg(&dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    guard.forget();
    let (status, log) = wait_log(&mut child);
    assert!(status.success(), "daemon: {status}: {log}");
    assert!(
        log.lines()
            .any(|l| l.starts_with("lanefs: ") && l.contains("corrupt")),
        "log: {log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

/// `errors=panic`: the first corrupt structure met stops the daemon with a log line (its
/// supervisor then unmounts the dead mount, which would answer ENOTCONN), and the image
/// is left for the journal to replay: e2fsck finds only the corruption that was planted.
#[test]
fn errors_panic_stops_the_daemon() {
    if !fuse_ready("errors_panic_stops_the_daemon") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, dir) = image_with_corrupt_dir(t.path());
    let mut child = mount_foreground(&img, &dir, "errors=panic");
    let guard = Mount::adopt(&img, &dir);
    // Only what was committed survives the stop: fsync it.
    let mut f = fs::File::create(dir.join("new")).unwrap();
    f.write_all(b"written before the fault").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let e = fs::read_dir(dir.join("bad"))
        .and_then(|r| r.collect::<std::io::Result<Vec<_>>>())
        .and_then(|_| fs::metadata(dir.join("bad").join(format!("{:0>40}", 7))))
        .expect_err("a corrupt directory read cleanly");
    // The request in flight when the daemon stops is aborted (ECONNABORTED).
    assert!(
        matches!(
            e.raw_os_error(),
            Some(libc::EIO | libc::ENOTCONN | libc::ECONNABORTED)
        ),
        "{e}"
    );
    let (status, log) = wait_log(&mut child);
    assert_eq!(status.code(), Some(1), "daemon: {log}");
    assert!(log.contains("errors=panic"), "log: {log}");
    assert!(!log.contains("panicked"), "{log}");
    assert!(!is_mounted(&dir), "the dead mount stayed: {log}");
    guard.forget();
    // The next mount replays the journal and serves what was there.
    let m = Mount::new(&img, &dir, "");
    assert_eq!(fs::read(m.path("good")).unwrap(), b"still here");
    assert_eq!(
        fs::read(m.path("new")).unwrap(),
        b"written before the fault"
    );
    m.umount();
}
