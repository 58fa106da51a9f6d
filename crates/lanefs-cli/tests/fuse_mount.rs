//! `lanefs mount` / `lanefs umount` end to end: the command's behaviour (daemon, options,
//! errors before mounting, signals, mount(8)'s helper), and the file system it serves
//! (fresh attributes, long names, open with O_TRUNC, renameat2 flags, fallocate modes,
//! SEEK_DATA/SEEK_HOLE, copy_file_range, special files, set-group-ID directories,
//! read-only mounts, a corrupt area met while mounted). Every test ends with `e2fsck -fn`
//! clean, and where a tree was built, the kernel's ext4 reads the same tree.

mod fuse_common;

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
fn attributes_and_names_are_fresh_with_caching_on() {
    if !fuse_ready("attributes_and_names_are_fresh_with_caching_on") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(
        &img,
        &t.path().join("mnt"),
        "attr_timeout=60,entry_timeout=60,negative_timeout=60",
    );
    let a = m.path("a");
    fs::write(&a, b"hello").unwrap();
    let st = |p: &Path| fs::symlink_metadata(p).unwrap();
    let nap = || std::thread::sleep(Duration::from_millis(20));
    let c0 = st(&a).ctime_nsec() as i128 + st(&a).ctime() as i128 * 1_000_000_000;
    let ct = |p: &Path| st(p).ctime() as i128 * 1_000_000_000 + st(p).ctime_nsec() as i128;
    let mt = |p: &Path| st(p).mtime() as i128 * 1_000_000_000 + st(p).mtime_nsec() as i128;
    nap();
    fs::hard_link(&a, m.path("b")).unwrap();
    assert_eq!(st(&a).nlink(), 2);
    assert_eq!(st(&m.path("b")).nlink(), 2);
    assert!(ct(&a) > c0, "link must change ctime");
    let c1 = ct(&a);
    nap();
    fs::remove_file(m.path("b")).unwrap();
    assert_eq!(st(&a).nlink(), 1);
    assert!(
        ct(&a) > c1,
        "unlink must change the ctime of the other name"
    );
    let c2 = ct(&a);
    nap();
    fs::rename(&a, m.path("c")).unwrap();
    assert!(ct(&m.path("c")) > c2, "rename changes ctime (as ext4)");
    let c = m.path("c");
    let c3 = ct(&c);
    nap();
    fs::set_permissions(&c, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(st(&c).mode() & 0o7777, 0o600);
    assert!(ct(&c) > c3);
    let m0 = mt(&c);
    nap();
    fs::OpenOptions::new()
        .write(true)
        .open(&c)
        .unwrap()
        .set_len(3)
        .unwrap();
    assert_eq!(st(&c).len(), 3);
    assert!(mt(&c) > m0, "truncate changes mtime");
    let m1 = mt(&c);
    nap();
    let mut f = fs::OpenOptions::new().append(true).open(&c).unwrap();
    f.write_all(b"12345").unwrap();
    assert_eq!(st(&c).len(), 8);
    assert!(mt(&c) > m1, "write changes mtime");
    drop(f);
    assert_eq!(fs::read(&c).unwrap(), b"hel12345");
    // A directory's link count follows its subdirectories.
    fs::create_dir_all(m.path("d/e")).unwrap();
    assert_eq!(st(&m.path("d")).nlink(), 3);
    fs::remove_dir(m.path("d/e")).unwrap();
    assert_eq!(st(&m.path("d")).nlink(), 2);
    // Names the kernel has cached as missing appear once made, whichever way.
    let names = ["n-file", "n-dir", "n-link", "n-hard", "n-renamed", "n-fifo"];
    for n in names {
        assert!(fs::symlink_metadata(m.path(n)).is_err(), "{n}");
    }
    fs::write(m.path("n-file"), b"x").unwrap();
    fs::create_dir(m.path("n-dir")).unwrap();
    std::os::unix::fs::symlink("n-file", m.path("n-link")).unwrap();
    fs::hard_link(m.path("n-file"), m.path("n-hard")).unwrap();
    fs::write(m.path("n-src"), b"y").unwrap();
    fs::rename(m.path("n-src"), m.path("n-renamed")).unwrap();
    let fifo = cstr(&m.path("n-fifo"));
    // SAFETY: `fifo` is a valid NUL-terminated path that outlives the call.
    let made = unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) };
    assert_eq!(made, 0, "{}", errno());
    for n in names {
        assert!(fs::symlink_metadata(m.path(n)).is_ok(), "{n}");
    }
    assert!(fs::symlink_metadata(m.path("n-src")).is_err());
    m.umount();
    e2fsck_clean(&img);
}

#[test]
fn names_of_256_bytes_are_refused() {
    if !fuse_ready("names_of_256_bytes_are_refused") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    let long = "n".repeat(256);
    let ok = "o".repeat(255);
    fs::write(m.path("f"), b"x").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    let too_long = |r: std::io::Result<()>| {
        let e = r.expect_err("256-byte name accepted");
        assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG), "{e}");
    };
    too_long(fs::write(m.path(&long), b"x"));
    too_long(fs::create_dir(m.path(&long)));
    too_long(std::os::unix::fs::symlink("f", m.path(&long)));
    too_long(fs::hard_link(m.path("f"), m.path(&long)));
    too_long(fs::rename(m.path("f"), m.path(&long)));
    too_long(
        fs::rename(m.path("d"), m.path(&format!("d/{long}")))
            .or(Err(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG))),
    );
    fs::write(m.path(&ok), b"fits").unwrap();
    fs::create_dir(m.path(&format!("d/{ok}"))).unwrap();
    assert_eq!(fs::read(m.path(&ok)).unwrap(), b"fits");
    let names: Vec<_> = fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    m.umount();
    e2fsck_clean(&img);
}

#[test]
fn posix_extras_behave_as_ext4() {
    if !fuse_ready("posix_extras_behave_as_ext4") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "128M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    // renameat2: NOREPLACE refuses an existing target, EXCHANGE swaps (across
    // directories, a file with a directory).
    fs::write(m.path("x"), b"X").unwrap();
    fs::write(m.path("y"), b"Y").unwrap();
    fs::create_dir_all(m.path("p/q")).unwrap();
    fs::write(m.path("p/q/inner"), b"I").unwrap();
    let ren = |a: &str, b: &str, flags: u32| {
        let (a, b) = (cstr(&m.path(a)), cstr(&m.path(b)));
        // SAFETY: both paths are NUL-terminated strings living for the call.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                flags,
            )
        };
        if r == 0 {
            0
        } else {
            errno()
        }
    };
    assert_eq!(ren("x", "y", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(ren("x", "z", libc::RENAME_NOREPLACE), 0);
    assert_eq!(ren("z", "nothere", libc::RENAME_EXCHANGE), libc::ENOENT);
    assert_eq!(ren("z", "y", libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(m.path("z")).unwrap(), b"Y");
    assert_eq!(fs::read(m.path("y")).unwrap(), b"X");
    assert_eq!(ren("y", "p/q", libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(m.path("p/q")).unwrap(), b"X");
    assert_eq!(fs::read(m.path("y/inner")).unwrap(), b"I");
    assert_eq!(fs::metadata(m.path("p")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(&m.dir).unwrap().nlink(),
        5,
        "root: ., .., lost+found, p, y"
    );
    assert_eq!(ren("y", "y/inner", libc::RENAME_EXCHANGE), libc::EINVAL);

    // fallocate: allocate, keep size, punch, zero range; SEEK_DATA / SEEK_HOLE.
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("sparse"))
        .unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    let falloc = |mode: i32, off: i64, len: i64| {
        // SAFETY: fd is open for writing for the whole call.
        if unsafe { libc::fallocate(fd, mode, off, len) } == 0 {
            0
        } else {
            errno()
        }
    };
    assert_eq!(falloc(0, 0, 1 << 20), 0);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    assert_eq!(falloc(libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20), 0);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    use std::os::unix::fs::FileExt;
    f.write_all_at(&vec![0xAB; 3 << 20], 0).unwrap();
    assert_eq!(
        falloc(
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            1 << 20,
            1 << 20
        ),
        0
    );
    assert_eq!(falloc(libc::FALLOC_FL_ZERO_RANGE, 100, 5000), 0);
    assert_eq!(
        falloc(libc::FALLOC_FL_ZERO_RANGE, (3 << 20) - 10, 1 << 20),
        0
    );
    assert_eq!(f.metadata().unwrap().len(), (4 << 20) - 10);
    let mut all = Vec::new();
    (&f).read_to_end(&mut all).unwrap();
    for (i, &b) in all.iter().enumerate() {
        let zero =
            (100..5100).contains(&i) || ((1 << 20)..(2 << 20)).contains(&i) || i >= (3 << 20) - 10;
        assert_eq!(b, if zero { 0 } else { 0xAB }, "byte {i}");
    }
    let seek = |off: i64, whence: i32| {
        // SAFETY: fd is open for the whole call.
        let r = unsafe { libc::lseek(fd, off, whence) };
        if r < 0 {
            -(errno() as i64)
        } else {
            r
        }
    };
    assert_eq!(seek(0, libc::SEEK_HOLE), 1 << 20);
    assert_eq!(seek(1 << 20, libc::SEEK_DATA), 2 << 20);
    assert_eq!(seek(1 << 30, libc::SEEK_DATA), -(libc::ENXIO as i64));
    // copy_file_range within the mount.
    let g = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("copy"))
        .unwrap();
    let mut off_in: i64 = 0;
    let mut off_out: i64 = 0;
    let mut left = all.len();
    while left > 0 {
        // SAFETY: both descriptors are open and the offsets point at live i64s.
        let n = unsafe {
            libc::copy_file_range(
                fd,
                &mut off_in,
                std::os::fd::AsRawFd::as_raw_fd(&g),
                &mut off_out,
                left,
                0,
            )
        };
        assert!(
            n > 0,
            "copy_file_range: {}",
            std::io::Error::last_os_error()
        );
        left -= n as usize;
    }
    drop(g);
    assert_eq!(fs::read(m.path("copy")).unwrap(), all);
    drop(f);

    // Special files.
    let mk = |name: &str, mode: u32, dev: u64| {
        let p = cstr(&m.path(name));
        // SAFETY: `p` is a NUL-terminated path living for the call.
        let r = unsafe { libc::mknod(p.as_ptr(), mode, dev) };
        assert_eq!(r, 0, "{name}: {}", std::io::Error::last_os_error());
    };
    mk("fifo", libc::S_IFIFO | 0o644, 0);
    mk("sock", libc::S_IFSOCK | 0o644, 0);
    mk("chr", libc::S_IFCHR | 0o600, libc::makedev(1, 3));
    mk("blk", libc::S_IFBLK | 0o600, libc::makedev(7, 0));
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(m.path("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(fs::symlink_metadata(m.path("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    assert_eq!(
        fs::symlink_metadata(m.path("chr")).unwrap().rdev(),
        libc::makedev(1, 3)
    );
    // /dev/null through the mount's device node.
    fs::write(m.path("chr"), b"into the void").unwrap();

    // A set-group-ID directory: new files take its group, new directories the bit too.
    fs::create_dir(m.path("sg")).unwrap();
    let sg = cstr(&m.path("sg"));
    // SAFETY: NUL-terminated path living for the call.
    assert_eq!(unsafe { libc::chown(sg.as_ptr(), 0, 4242) }, 0);
    fs::set_permissions(m.path("sg"), fs::Permissions::from_mode(0o2775)).unwrap();
    fs::write(m.path("sg/file"), b"").unwrap();
    fs::create_dir(m.path("sg/sub")).unwrap();
    assert_eq!(fs::metadata(m.path("sg/file")).unwrap().gid(), 4242);
    let sub = fs::metadata(m.path("sg/sub")).unwrap();
    assert_eq!(sub.gid(), 4242);
    assert_eq!(sub.mode() & 0o2000, 0o2000);

    // O_EXCL on an existing name; xattrs.
    let e = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.path("z"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    let out = run(Command::new("setfattr")
        .args(["-n", "user.colour", "-v", "blue"])
        .arg(m.path("z")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(Command::new("getfattr")
        .args(["--only-values", "-n", "user.colour"])
        .arg(m.path("z")));
    assert_eq!(out.stdout, b"blue");
    let before = listing(&m.dir);
    m.umount();
    e2fsck_clean(&img);
    let after = with_kernel_mount(&img, &t.path().join("k"), |d| {
        let out = run(Command::new("getfattr")
            .args(["--only-values", "-n", "user.colour"])
            .arg(d.join("z")));
        assert_eq!(out.stdout, b"blue");
        listing(d)
    });
    assert_eq!(before, after);
}

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

/// open(2) with O_TRUNC: the VFS checks that the file may be written before anything is
/// cut. O_RDONLY|O_TRUNC truncates (as on ext4) and the size survives a remount; on a
/// running program it fails with ETXTBSY and the program keeps its text (under
/// FUSE_ATOMIC_O_TRUNC the kernel set i_size to 0 before that check, and the daemon left
/// the file whole: a running `sleep` died of SIGSEGV about once in fifty).
#[test]
fn open_truncate_checks_before_it_cuts() {
    if !fuse_ready("open_truncate_checks_before_it_cuts") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let mnt = t.path().join("mnt");
    let m = Mount::new(&img, &mnt, "");
    let open = |p: &Path, flags: i32| {
        let c = cstr(p);
        // SAFETY: `c` is a NUL-terminated path living for the call.
        let fd = unsafe { libc::open(c.as_ptr(), flags) };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: `fd` was just opened here and is closed once.
        unsafe { libc::close(fd) };
        Ok(())
    };
    fs::write(m.path("f"), b"hello").unwrap();
    let before = fs::metadata(m.path("f")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(open(&m.path("f"), libc::O_RDONLY | libc::O_TRUNC), Ok(()));
    let after = fs::metadata(m.path("f")).unwrap();
    assert_eq!(after.len(), 0);
    assert!(after.modified().unwrap() > before.modified().unwrap());

    let sleep = fs::read("/bin/sleep").unwrap();
    let exe = m.path("sleep");
    fs::write(&exe, &sleep).unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    for round in 0..20 {
        let mut child = Command::new(&exe).arg("10").spawn().unwrap();
        for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
            assert_eq!(
                open(&exe, flags),
                Err(libc::ETXTBSY),
                "round {round}, flags {flags:o}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            child.try_wait().unwrap(),
            None,
            "round {round}: the running program died"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(fs::metadata(&exe).unwrap().len(), sleep.len() as u64);
    }
    m.umount();
    e2fsck_clean(&img);
    let m = Mount::new(&img, &mnt, "");
    assert_eq!(fs::metadata(m.path("f")).unwrap().len(), 0);
    assert_eq!(fs::read(&exe).unwrap(), sleep);
    m.umount();
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
    let status = child.wait().unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "daemon: {status}: {log}");
    assert!(
        log.lines()
            .any(|l| l.starts_with("lanefs: ") && l.contains("corrupt")),
        "log: {log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

/// Access times as Linux's ext4 keeps them (the kernel leaves them to FUSE daemons):
/// `relatime` by default (a read updates atime only when it is not after mtime or ctime,
/// or is a day old), `strictatime` on every read that reaches the daemon, `noatime` never;
/// O_NOATIME reads leave it too.
#[test]
fn access_times_follow_the_atime_options() {
    if !fuse_ready("access_times_follow_the_atime_options") {
        return;
    }
    use std::os::unix::fs::OpenOptionsExt;
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let atime = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.atime(), m.atime_nsec())
    };
    let nap = || std::thread::sleep(Duration::from_millis(20));

    let m = Mount::new(&img, &t.path().join("mnt"), "");
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/f"), b"hello").unwrap();
    let made = atime(&m.path("d/f"));
    nap();
    fs::read(m.path("d/f")).unwrap();
    let first = atime(&m.path("d/f"));
    assert!(first > made, "a read after a write updates atime");
    nap();
    fs::read(m.path("d/f")).unwrap();
    assert_eq!(atime(&m.path("d/f")), first, "relatime: not again");
    nap();
    fs::write(m.path("d/f"), b"changed").unwrap();
    nap();
    fs::read(m.path("d/f")).unwrap();
    let after_write = atime(&m.path("d/f"));
    assert!(after_write > first, "a read after a change updates atime");
    // A directory: listing it is reading it.
    let dir_made = atime(&m.path("d"));
    nap();
    fs::read_dir(m.path("d")).unwrap().for_each(drop);
    let listed = atime(&m.path("d"));
    assert!(listed > dir_made, "readdir after a create updates atime");
    m.umount();
    e2fsck_clean(&img);

    // strictatime: every read reaching the daemon updates; O_NOATIME leaves it.
    let m = Mount::new(&img, &t.path().join("mnt"), "strictatime");
    let a0 = atime(&m.path("d/f"));
    nap();
    fs::read(m.path("d/f")).unwrap();
    let a1 = atime(&m.path("d/f"));
    assert!(a1 > a0);
    nap();
    fs::read(m.path("d/f")).unwrap();
    let a2 = atime(&m.path("d/f"));
    assert!(a2 > a1, "strictatime updates on every read");
    nap();
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(m.path("d/f"))
        .unwrap();
    f.read_to_end(&mut Vec::new()).unwrap();
    drop(f);
    assert_eq!(atime(&m.path("d/f")), a2, "O_NOATIME");
    m.umount();

    // noatime: never.
    let m = Mount::new(&img, &t.path().join("mnt"), "noatime");
    fs::write(m.path("d/f"), b"again").unwrap();
    let b0 = atime(&m.path("d/f"));
    nap();
    fs::read(m.path("d/f")).unwrap();
    fs::read_dir(m.path("d")).unwrap().for_each(drop);
    assert_eq!(atime(&m.path("d/f")), b0);
    let info = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(info
        .lines()
        .any(|l| l.contains(m.dir.to_str().unwrap()) && l.contains("noatime")));
    m.umount();
    e2fsck_clean(&img);
}

/// `errors=panic`: the first corrupt structure met stops the daemon with a log line (the
/// mount then answers ENOTCONN until unmounted), and the image is left for the journal to
/// replay: e2fsck finds only the corruption that was planted.
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
    let status = child.wait().unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert_eq!(status.code(), Some(1), "daemon: {log}");
    assert!(log.contains("errors=panic"), "log: {log}");
    assert!(!log.contains("panicked"), "{log}");
    let e = fs::metadata(dir.join("good")).expect_err("the mount still answers");
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{e}");
    let _ = run(Command::new("umount").arg("-l").arg(&dir));
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

/// A file handle (`name_to_handle_at`) of `p`, as its bytes: `struct file_handle` with
/// room for 128 bytes of handle.
fn handle_of(p: &Path) -> Vec<u64> {
    let mut buf = vec![0u64; 1 + 128 / 8];
    let fh = buf.as_mut_ptr().cast::<libc::file_handle>();
    let mut mount_id = 0;
    let c = cstr(p);
    // SAFETY: `buf` is 8-aligned and holds the header (two u32s) and 128 bytes, which
    // handle_bytes says; `c` is NUL-terminated; `mount_id` is a valid out pointer.
    let r = unsafe {
        (*fh).handle_bytes = 128;
        libc::name_to_handle_at(libc::AT_FDCWD, c.as_ptr(), fh, &mut mount_id, 0)
    };
    assert_eq!(r, 0, "name_to_handle_at {}: errno {}", p.display(), errno());
    buf
}

/// Open `handle` on the mount whose root is `root`: the descriptor or the errno.
fn open_handle(root: &Path, handle: &mut [u64], flags: i32) -> Result<std::fs::File, i32> {
    use std::os::fd::FromRawFd;
    let dir = fs::File::open(root).unwrap();
    // SAFETY: `handle` is a file_handle filled by name_to_handle_at, 8-aligned.
    let fd = unsafe {
        libc::open_by_handle_at(
            std::os::fd::AsRawFd::as_raw_fd(&dir),
            handle.as_mut_ptr().cast(),
            flags,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: `fd` is a new descriptor owned by nobody else.
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// ext4 reopens any live inode from its file handle, also after the kernel's caches
/// forgot it; so does the mount (the kernel then looks up "." in the node, whatever
/// its type). A handle of a removed file is stale.
#[test]
fn file_handles_reopen_after_the_caches_drop() {
    if !fuse_ready("file_handles_reopen_after_the_caches_drop") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("h.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "allow_other");
    fs::create_dir_all(m.path("d/e")).unwrap();
    fs::write(m.path("d/e/f"), b"by handle").unwrap();
    fs::write(m.path("gone"), b"x").unwrap();
    let mut hf = handle_of(&m.path("d/e/f"));
    let mut hd = handle_of(&m.path("d/e"));
    let mut hg = handle_of(&m.path("gone"));
    fs::remove_file(m.path("gone")).unwrap();
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    let mut f = open_handle(&m.dir, &mut hf, libc::O_RDONLY).expect("file by handle");
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "by handle");
    let d = open_handle(&m.dir, &mut hd, libc::O_RDONLY | libc::O_DIRECTORY).expect("dir");
    assert!(d.metadata().unwrap().is_dir());
    assert_eq!(
        open_handle(&m.dir, &mut hg, libc::O_RDONLY).err(),
        Some(libc::ESTALE)
    );
    drop((f, d));
    // Files opened by handle let go of the mount a moment after their close (the
    // kernel's deferred release); until then umount says EBUSY.
    let mut tries = 0;
    loop {
        let out = run(Command::new(LANEFS).arg("umount").arg(&m.dir));
        if out.status.success() {
            break;
        }
        tries += 1;
        assert!(tries < 50, "lanefs umount: {out:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    m.forget();
    e2fsck_clean(&img);
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
