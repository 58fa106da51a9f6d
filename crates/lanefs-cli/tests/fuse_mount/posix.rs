//! The file system served: fresh attributes and names with caching on, names of 256
//! bytes, POSIX extras as ext4 has them (renameat2 flags, fallocate modes, SEEK_DATA and
//! SEEK_HOLE, copy_file_range, special files, set-group-ID directories), open with O_TRUNC.

use super::*;

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
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
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

/// A directory removed while a process still has it open keeps its inode, as on ext4:
/// reading it through the open descriptor gives no entries, and the directories and
/// files made after it never get its inode number (directories are read without OPENDIR,
/// so only the frontend's count of the kernel's lookups keeps it). The same for a file
/// unlinked while open, which still reads back. Then e2fsck finds the image clean.
#[test]
fn removed_while_open_keeps_its_inode() {
    if !fuse_ready("removed_while_open_keeps_its_inode") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "allow_other");
    fs::create_dir(m.path("gone")).unwrap();
    let dir = fs::File::open(m.path("gone")).unwrap();
    let dir_ino = dir.metadata().unwrap().ino();
    fs::write(m.path("f"), b"still here").unwrap();
    let mut file = fs::File::open(m.path("f")).unwrap();
    let file_ino = file.metadata().unwrap().ino();
    fs::remove_dir(m.path("gone")).unwrap();
    fs::remove_file(m.path("f")).unwrap();
    for i in 0..64 {
        let d = m.path(&format!("new{i}"));
        fs::create_dir(&d).unwrap();
        fs::write(d.join("x"), b"x").unwrap();
        for p in [d.clone(), d.join("x")] {
            let ino = fs::metadata(&p).unwrap().ino();
            assert!(
                ino != dir_ino && ino != file_ino,
                "{} reused inode {ino}",
                p.display()
            );
        }
    }
    let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir));
    let left: Vec<_> = fs::read_dir(&fd_path).unwrap().collect();
    assert!(left.is_empty(), "a removed directory lists {left:?}");
    assert_eq!(dir.metadata().unwrap().nlink(), 0);
    let mut text = String::new();
    file.read_to_string(&mut text).unwrap();
    assert_eq!(text, "still here");
    drop((dir, file));
    m.umount();
    e2fsck_clean(&img);
}
