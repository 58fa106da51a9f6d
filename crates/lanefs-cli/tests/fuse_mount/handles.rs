//! Access times under each atime option, and file handles that reopen after the caches
//! drop.

use super::*;

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

/// A file handle (`name_to_handle_at`) of `p`, as its bytes: `struct file_handle` with
/// room for 128 bytes of handle.
pub(super) fn handle_of(p: &Path) -> Vec<u64> {
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
pub(super) fn open_handle(
    root: &Path,
    handle: &mut [u64],
    flags: i32,
) -> Result<std::fs::File, i32> {
    use std::os::fd::FromRawFd;
    let dir = fs::File::open(root).unwrap();
    // SAFETY: `handle` is a file_handle filled by name_to_handle_at, 8-aligned.
    let fd = unsafe {
        libc::open_by_handle_at(
            std::os::fd::AsRawFd::as_raw_fd(&dir),
            handle.as_mut_ptr().cast(),
            // Close-on-exec, as every descriptor std opens: a program another test starts
            // meanwhile must not inherit it (and keep this mount busy).
            flags | libc::O_CLOEXEC,
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
    m.umount();
    e2fsck_clean(&img);
}
