//! Host helpers: a random tree made on a host directory (times, modes, owners, device
//! nodes, sparse and big files), compared and copied host to host.

use super::*;

// ---------------------------------------------------------------------------------------
// Host helpers.

pub(super) fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

/// Set atime and mtime of `p` (not following symlinks).
pub(super) fn set_times(p: &Path, sec: i64, nsec: u32) {
    let ts = libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as _,
    };
    let c = cpath(p);
    // SAFETY: valid NUL-terminated path and a two-element timespec array.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [ts, ts].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(
        r,
        0,
        "utimensat {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

pub(super) fn mknod(p: &Path, mode: u32, rdev: u64) {
    let c = cpath(p);
    // SAFETY: valid NUL-terminated path.
    let r = unsafe { libc::mknod(c.as_ptr(), mode as libc::mode_t, rdev as libc::dev_t) };
    assert_eq!(
        r,
        0,
        "mknod {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

pub(super) fn lchown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("lchown {}: {e}", p.display()));
}

pub(super) fn chmod(p: &Path, perm: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(perm))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

pub(super) fn rand_time(rng: &mut StdRng) -> (i64, u32) {
    let sec = match rng.gen_range(0..10) {
        0 => -rng.gen_range(1..1_500_000_000i64), // before 1970
        1 => rng.gen_range(2_200_000_000..4_000_000_000i64), // after 2038: epoch bits
        _ => rng.gen_range(1..2_000_000_000i64),
    };
    (sec, rng.gen_range(0..1_000_000_000))
}

pub(super) fn rand_size(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..10) {
        0 => 0,
        1..=3 => rng.gen_range(1..8192),
        4..=6 => rng.gen_range(8192..262_144),
        _ => rng.gen_range(262_144..=3 << 20),
    }
}

/// Owner, permissions and times of one generated entry, applied after its content.
pub(super) fn finish(rng: &mut StdRng, p: &Path, perm: Option<u32>) {
    let owners = [(0, 0), (1000, 1000), (65534, 65534), (1234, 4321)];
    let (uid, gid) = owners[rng.gen_range(0..owners.len())];
    lchown(p, uid, gid);
    if let Some(perm) = perm {
        chmod(p, perm);
    }
    let (sec, nsec) = rand_time(rng);
    set_times(p, sec, nsec);
}

pub(super) fn write_random(rng: &mut StdRng, p: &Path, size: usize) {
    let mut data = vec![0u8; size];
    rng.fill_bytes(&mut data);
    std::fs::write(p, data).expect("write source file");
}

/// Generate the source tree under `root` (which must exist).
pub(super) fn gen_tree(root: &Path, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let file_perms = [
        0o644, 0o600, 0o755, 0o700, 0o444, 0o4755, 0o2750, 0o640, 0o000, 0o7777,
    ];
    let dir_perms = [0o755, 0o700, 0o1777, 0o2775, 0o750];
    let dirs = [
        "a",
        "a/b",
        "a/b/c",
        "a/b/c/d",
        "e",
        "e/f",
        "empty_dir",
        "with space é",
    ];
    for d in dirs {
        std::fs::create_dir(root.join(d)).expect("mkdir source");
    }
    let mut k = 0;
    for d in [
        "",
        "a",
        "a/b",
        "a/b/c",
        "a/b/c/d",
        "e",
        "e/f",
        "with space é",
    ] {
        for _ in 0..rng.gen_range(2..6) {
            k += 1;
            let p = root
                .join(d)
                .join(format!("file{k}_{}", rng.gen_range(0..1000)));
            let size = rand_size(&mut rng);
            write_random(&mut rng, &p, size);
            let perm = file_perms[rng.gen_range(0..file_perms.len())];
            finish(&mut rng, &p, Some(perm));
        }
    }
    // Edge sizes, a sparse file and a 255-byte name.
    for (name, size) in [
        ("empty", 0usize),
        ("one", 1),
        ("b4095", 4095),
        ("b4096", 4096),
        ("b4097", 4097),
        ("max3m", 3 << 20),
    ] {
        let p = root.join(name);
        write_random(&mut rng, &p, size);
        finish(&mut rng, &p, Some(0o644));
    }
    {
        let p = root.join("e/sparse");
        let f = std::fs::File::create(&p).expect("sparse");
        let mut tail = vec![0u8; 5000];
        rng.fill_bytes(&mut tail);
        std::os::unix::fs::FileExt::write_all_at(&f, &tail, (1 << 20) + 123).expect("sparse write");
        std::os::unix::fs::FileExt::write_all_at(&f, b"head", 0).expect("sparse write");
        f.set_len(3 << 20).expect("sparse extend");
        drop(f);
        finish(&mut rng, &p, Some(0o640));
    }
    {
        let p = root.join("a").join("n".repeat(255));
        write_random(&mut rng, &p, 77);
        finish(&mut rng, &p, Some(0o600));
    }
    // Symlinks: fast (< 60 bytes), the boundary, slow ones, a dangling one.
    let targets: Vec<(String, String)> = vec![
        ("ln_short".into(), "a/b/c".into()),
        ("ln_59".into(), "x".repeat(59)),
        ("ln_60".into(), "y".repeat(60)),
        ("ln_61".into(), "z".repeat(61)),
        ("ln_long".into(), format!("{}/target", "../deep".repeat(40))),
        ("e/ln_4000".into(), "q/".repeat(2000)),
        ("a/b/ln_up".into(), "../../max3m".into()),
    ];
    for (name, target) in &targets {
        let p = root.join(name);
        std::os::unix::fs::symlink(target, &p).expect("symlink");
        finish(&mut rng, &p, None);
    }
    // Special files.
    let fifo = root.join("fifo");
    mknod(&fifo, libc::S_IFIFO | 0o640, 0);
    finish(&mut rng, &fifo, Some(0o620));
    let chr = root.join("e/null_dev");
    mknod(&chr, libc::S_IFCHR | 0o600, libc::makedev(1, 3));
    finish(&mut rng, &chr, Some(0o666));
    let blk = root.join("e/big_dev");
    mknod(&blk, libc::S_IFBLK | 0o600, libc::makedev(259, 70000));
    finish(&mut rng, &blk, Some(0o660));
    // Directories last, deepest first, so their mtimes stay as set.
    for d in dirs.iter().rev() {
        let perm = dir_perms[rng.gen_range(0..dir_perms.len())];
        finish(&mut rng, &root.join(d), Some(perm));
    }
}

/// Sorted names of a host directory.
pub(super) fn host_names(dir: &Path) -> BTreeSet<Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").file_name().as_bytes().to_vec())
        .collect()
}

pub(super) fn kind_of(ft: std::fs::FileType) -> FileType {
    if ft.is_dir() {
        FileType::Directory
    } else if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_fifo() {
        FileType::Fifo
    } else if ft.is_char_device() {
        FileType::CharDevice
    } else if ft.is_block_device() {
        FileType::BlockDevice
    } else if ft.is_socket() {
        FileType::Socket
    } else {
        FileType::Regular
    }
}

pub(super) fn mtime_of(md: &std::fs::Metadata) -> (i64, i64) {
    (md.mtime(), md.mtime_nsec())
}

/// Compare the tree at `dst` (as the kernel shows it) with the source at `src`.
pub(super) fn compare_host(src: &Path, dst: &Path, top: bool, checked: &mut usize) {
    let mut want = host_names(src);
    let mut got = host_names(dst);
    if top {
        want.remove(&b"lost+found"[..]);
        got.remove(&b"lost+found"[..]);
    }
    assert_eq!(
        got.iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect::<Vec<_>>(),
        want.iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect::<Vec<_>>(),
        "names differ in {}",
        dst.display()
    );
    for name in &want {
        let (s, d) = (
            src.join(OsStr::from_bytes(name)),
            dst.join(OsStr::from_bytes(name)),
        );
        let (ms, md) = (
            std::fs::symlink_metadata(&s).expect("src meta"),
            std::fs::symlink_metadata(&d).expect("dst meta"),
        );
        let kind = kind_of(ms.file_type());
        let what = d.display();
        assert_eq!(kind_of(md.file_type()), kind, "type of {what}");
        assert_eq!(
            (md.uid(), md.gid()),
            (ms.uid(), ms.gid()),
            "owner of {what}"
        );
        assert_eq!(mtime_of(&md), mtime_of(&ms), "mtime of {what}");
        if kind != FileType::Symlink {
            assert_eq!(
                md.mode() & 0o7777,
                ms.mode() & 0o7777,
                "permissions of {what}"
            );
        }
        match kind {
            FileType::Regular => {
                assert_eq!(md.len(), ms.len(), "size of {what}");
                let (a, b) = (
                    std::fs::read(&s).expect("read src"),
                    std::fs::read(&d).expect("read dst"),
                );
                assert!(a == b, "bytes of {what} differ");
            }
            FileType::Symlink => {
                assert_eq!(
                    std::fs::read_link(&d).expect("readlink"),
                    std::fs::read_link(&s).expect("readlink"),
                    "target of {what}"
                );
                assert_eq!(md.len(), ms.len(), "size of {what}");
            }
            FileType::CharDevice | FileType::BlockDevice => {
                assert_eq!(md.rdev(), ms.rdev(), "rdev of {what}")
            }
            FileType::Directory => compare_host(&s, &d, false, checked),
            _ => {}
        }
        *checked += 1;
    }
}

/// Copy the host tree `src` into the kernel mount at `dst`, keeping everything compared.
pub(super) fn copy_host(src: &Path, dst: &Path) {
    for name in host_names(src) {
        let (s, d) = (
            src.join(OsStr::from_bytes(&name)),
            dst.join(OsStr::from_bytes(&name)),
        );
        let ms = std::fs::symlink_metadata(&s).expect("meta");
        match kind_of(ms.file_type()) {
            FileType::Directory => {
                std::fs::create_dir(&d).expect("mkdir");
                copy_host(&s, &d);
            }
            FileType::Regular => {
                std::fs::copy(&s, &d).expect("copy");
            }
            FileType::Symlink => {
                std::os::unix::fs::symlink(std::fs::read_link(&s).expect("readlink"), &d)
                    .expect("symlink")
            }
            _ => mknod(&d, ms.mode(), ms.rdev()),
        }
        lchown(&d, ms.uid(), ms.gid());
        if !ms.file_type().is_symlink() {
            chmod(&d, ms.mode() & 0o7777);
        }
        set_times(&d, ms.mtime(), ms.mtime_nsec() as u32);
    }
}
