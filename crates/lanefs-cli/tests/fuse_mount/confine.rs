//! The daemon's confinement once its mount is up (lanefs_fuse::confine) and its
//! supervisor: every thread without capabilities, with no_new_privs and the seccomp
//! filter; a host path the daemon tries to open is refused; a forbidden system call kills
//! it and the supervisor unmounts what it left; `-o unconfined` turns it all off.

use super::*;

/// `_IOW('L', 0x7e, [u8; 256])`: debug builds' daemons try to open the path given.
const IOC_PROBE_OPEN: libc::c_ulong =
    (1 << 30) | (256 << 16) | ((b'L' as libc::c_ulong) << 8) | 0x7e;
/// `_IO('L', 0x7d)`: debug builds' daemons make a system call outside the filter.
const IOC_PROBE_FORBIDDEN: libc::c_ulong = ((b'L' as libc::c_ulong) << 8) | 0x7d;

/// Ask the daemon serving `dir` to open `path`: Ok, or the errno it met.
fn probe_open(dir: &Path, path: &Path) -> Result<(), i32> {
    let d = fs::File::open(dir).unwrap();
    let mut buf = [0u8; 256];
    let p = path.as_os_str().as_bytes();
    buf[..p.len()].copy_from_slice(p);
    // SAFETY: the command's size is the 256-byte buffer passed, which lives for the call.
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&d),
            IOC_PROBE_OPEN as _,
            buf.as_ptr(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// The `Name:` line's value of every thread of `pid`, with the thread's name.
fn thread_status(pid: i32, name: &str) -> Vec<(String, String)> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| {
            let t = t.ok()?.path();
            let comm = fs::read_to_string(t.join("comm")).ok()?;
            let status = fs::read_to_string(t.join("status")).ok()?;
            let v = status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))?
                .trim()
                .to_string();
            Some((comm.trim().to_string(), v))
        })
        .collect()
}

#[test]
fn the_daemon_is_confined_once_mounted() {
    if !fuse_ready("the_daemon_is_confined_once_mounted") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    fs::write(m.path("before"), b"written before the look").unwrap();
    let pid = daemon_pid(&m.dir).expect("the daemon's pid");
    let sup = supervisor_pid(&m.dir).expect("the supervisor's pid");
    for (field, want) in [
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
        ("CapEff", "0000000000000000"),
        ("CapPrm", "0000000000000000"),
        ("CapInh", "0000000000000000"),
        ("CapBnd", "0000000000000000"),
        ("CapAmb", "0000000000000000"),
    ] {
        let threads = thread_status(pid, field);
        assert!(threads.len() >= 3, "{threads:?}");
        for (comm, v) in threads {
            assert_eq!(v, want, "{field} of thread {comm} of the daemon {pid}");
        }
    }
    // The supervisor holds nothing of the image.
    for fd in fs::read_dir(format!("/proc/{sup}/fd")).unwrap().flatten() {
        let target = fs::read_link(fd.path()).unwrap_or_default();
        assert_ne!(target, img, "the supervisor holds the image");
    }
    // No path opens, not even the image's own or one under the mount point's parent.
    for p in [Path::new("/etc/hostname"), &img, t.path()] {
        assert_eq!(probe_open(&m.dir, p), Err(libc::EACCES), "{}", p.display());
    }
    // It serves as before.
    fs::write(m.path("after"), vec![3u8; 1 << 20]).unwrap();
    assert_eq!(fs::read(m.path("after")).unwrap(), vec![3u8; 1 << 20]);
    m.umount();
    e2fsck_clean(&img);
}

#[test]
fn unconfined_serves_without_the_confinement() {
    if !fuse_ready("unconfined_serves_without_the_confinement") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "unconfined");
    let pid = daemon_pid(&m.dir).expect("the daemon's pid");
    for (_, v) in thread_status(pid, "Seccomp") {
        assert_eq!(v, "0");
    }
    assert_eq!(probe_open(&m.dir, Path::new("/etc/hostname")), Ok(()));
    m.umount();
    e2fsck_clean(&img);
}

/// A daemon killed with its mount up (by SIGKILL, or by its filter for a forbidden system
/// call) leaves no dead mount: its supervisor says why and unmounts it; what was
/// committed comes back at the next mount.
#[test]
fn a_killed_daemon_leaves_no_dead_mount() {
    if !fuse_ready("a_killed_daemon_leaves_no_dead_mount") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let dir = t.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    for how in ["SIGKILL", "forbidden call"] {
        // In the foreground, so that the supervisor's log line reaches this test.
        let child = Command::new(LANEFS)
            .arg("mount")
            .arg("-f")
            .arg(&img)
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while daemon_pid(&dir).is_none() || !is_mounted(&dir) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{how}: not mounted"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let kept = dir.join(format!("kept-{}", how.len()));
        {
            let mut f = fs::File::create(&kept).unwrap();
            f.write_all(b"fsync'd before the daemon died").unwrap();
            f.sync_all().unwrap();
        }
        let pid = daemon_pid(&dir).unwrap();
        if how == "SIGKILL" {
            // SAFETY: kill sends a signal to the daemon found above.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        } else {
            let d = fs::File::open(&dir).unwrap();
            // SAFETY: the command takes no argument.
            let r = unsafe {
                libc::ioctl(
                    std::os::fd::AsRawFd::as_raw_fd(&d),
                    IOC_PROBE_FORBIDDEN as _,
                    0,
                )
            };
            assert_eq!(r, -1, "{how}: the daemon answered");
        }
        let out = child.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{how}: {log}");
        let sig = if how == "SIGKILL" {
            format!("signal {}", libc::SIGKILL)
        } else {
            format!(
                "signal {}: a system call outside its seccomp filter",
                libc::SIGSYS
            )
        };
        assert!(
            log.contains(&format!("was killed by {sig}")),
            "{how}: {log}"
        );
        assert!(!is_mounted(&dir), "{how}: the dead mount stayed: {log}");
        assert!(wait_released(&img, Duration::from_secs(30)), "{how}");
        // The next mount replays the journal: the fsync'd file is there.
        let m = Mount::new(&img, &dir, "");
        assert_eq!(
            fs::read(&kept).unwrap(),
            b"fsync'd before the daemon died",
            "{how}"
        );
        m.umount();
        e2fsck_clean(&img);
    }
}

/// A supervisor knows its mount by the mount's device, not by path and source: a daemon
/// whose mount is gone here (another mount namespace still holds it) and that is then
/// killed leaves alone the later mount at the same path with the same `fsname`, of
/// another image.
#[test]
fn a_killed_daemon_leaves_a_later_mount_at_its_path_alone() {
    let test = "a_killed_daemon_leaves_a_later_mount_at_its_path_alone";
    if !fuse_ready(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a.img"), t.path().join("b.img"));
    mkfs(&a, "64M", &[]);
    mkfs(&b, "64M", &[]);
    let dir = t.path().join("mnt");
    let first = Mount::new(&a, &dir, "fsname=same");
    let dir = first.dir.canonicalize().unwrap();
    let old = daemon_pid(&dir).expect("the first daemon");
    // A process in a mount namespace of its own keeps the first mount alive.
    let mut holder = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sleep", "60"])
        .spawn()
        .unwrap();
    let ours = fs::read_link("/proc/self/ns/mnt").unwrap();
    let start = std::time::Instant::now();
    while fs::read_link(format!("/proc/{}/ns/mnt", holder.id()))
        .ok()
        .as_ref()
        == Some(&ours)
    {
        assert!(start.elapsed() < Duration::from_secs(10), "no namespace");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = run(Command::new("umount").arg(&dir));
    assert!(out.status.success(), "{out:?}");
    first.forget();
    let second = Mount::new(&b, &dir, "fsname=same");
    fs::write(second.path("on-b"), b"b").unwrap();
    // SAFETY: kill sends a signal to the first mount's daemon, found above.
    assert_eq!(unsafe { libc::kill(old, libc::SIGKILL) }, 0);
    let start = std::time::Instant::now();
    while Path::new(&format!("/proc/{old}")).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the daemon lives"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its supervisor has had time to act on its end.
    std::thread::sleep(Duration::from_millis(500));
    assert!(is_mounted(&dir), "the later mount was unmounted");
    assert_eq!(fs::read(second.path("on-b")).unwrap(), b"b");
    let _ = holder.kill();
    let _ = holder.wait();
    second.umount();
    e2fsck_clean(&b);
}

/// A second mount of an image whose daemon still serves a mount that only another mount
/// namespace has: nothing here to bind, and nothing that ends by waiting: it fails at
/// once (about a second), naming the daemon.
#[test]
fn a_second_mount_of_an_image_served_out_of_sight_fails_at_once() {
    let test = "a_second_mount_of_an_image_served_out_of_sight_fails_at_once";
    if !fuse_ready(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let first = Mount::new(&img, &t.path().join("m1"), "");
    let old = daemon_pid(&first.dir.canonicalize().unwrap()).expect("the daemon");
    let mut holder = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sleep", "60"])
        .spawn()
        .unwrap();
    let ours = fs::read_link("/proc/self/ns/mnt").unwrap();
    let start = std::time::Instant::now();
    while fs::read_link(format!("/proc/{}/ns/mnt", holder.id()))
        .ok()
        .as_ref()
        == Some(&ours)
    {
        assert!(start.elapsed() < Duration::from_secs(10), "no namespace");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = run(Command::new("umount").arg(&first.dir));
    assert!(out.status.success(), "{out:?}");
    first.forget();
    let second = t.path().join("m2");
    fs::create_dir_all(&second).unwrap();
    let start = std::time::Instant::now();
    let out = run(Command::new("timeout")
        .arg("20")
        .arg(LANEFS)
        .arg("mount")
        .arg(&img)
        .arg(&second));
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted: {out:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {err}");
    assert!(
        err.contains(&format!("lanefs daemon (pid {old})")) && err.lines().count() == 1,
        "{err}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(wait_released(&img, Duration::from_secs(30)));
    e2fsck_clean(&img);
}
