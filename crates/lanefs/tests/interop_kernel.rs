//! Goal: lanefs and the Linux kernel read each other's ext4 images byte for byte.
//! Method: (a) lanefs copies a generated host tree (nested directories, files of random
//! sizes and content, empty and sparse files, short and long symlinks, a FIFO and a device
//! node, odd modes, owners and nanosecond mtimes), a directory of 100,000 entries and a file
//! of thousands of extents into a `mkfs.ext4` image; `e2fsck -fn` must pass and a read-only
//! kernel loop mount must show exactly the host tree. (b) the kernel writes the same kinds of
//! things (its 100,000-entry directory is an htree, its fragmented file has a deep extent
//! tree made by punching holes); lanefs reads everything back, modifies the tree, and
//! e2fsck and the kernel check the result.
//!
//! Needs root, loop devices and e2fsprogs; otherwise each test prints `SKIP` (or fails when
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

mod common;

use common::{kernel_ready, run, KernelMount};
use lanefs::{Attr, FileType, Fs, Ino, MountOptions, Owner, SetAttr, Timespec, ROOT_INO};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsStr};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

const BS: u64 = 4096;
/// Entries of the big directory.
const MANY: usize = 100_000;
/// Data blocks (and so extents) of the fragmented file.
const FRAG: u64 = 3500;
/// Inodes to format with: the default ratio gives a 1 GiB image only 65,536.
const INODES: &str = "250000";

// ---------------------------------------------------------------------------------------
// Environment: skip rule, tools, kernel mounts.

/// A sparse image of `size` bytes formatted by mkfs.ext4 with 4 KiB blocks.
fn mkfs(path: &Path, size: u64) {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(size))
        .expect("create image");
    let mut cmd = Command::new("mkfs.ext4");
    cmd.args(["-q", "-F", "-b", "4096"]);
    if size >= 1 << 30 {
        cmd.args(["-N", INODES]);
    }
    run(cmd.arg(path)).expect("mkfs.ext4");
}

/// `e2fsck -fn` must exit 0.
fn fsck_clean(img: &Path, when: &str) {
    let (code, text) = common::e2fsck(img);
    assert_eq!(
        code, 0,
        "e2fsck -fn {when} is not clean (exit {code}):\n{text}"
    );
}

// ---------------------------------------------------------------------------------------
// Host helpers.

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

/// Set atime and mtime of `p` (not following symlinks).
fn set_times(p: &Path, sec: i64, nsec: u32) {
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

fn mknod(p: &Path, mode: u32, rdev: u64) {
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

fn lchown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("lchown {}: {e}", p.display()));
}

fn chmod(p: &Path, perm: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(perm))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

fn rand_time(rng: &mut StdRng) -> (i64, u32) {
    let sec = match rng.gen_range(0..10) {
        0 => -rng.gen_range(1..1_500_000_000i64), // before 1970
        1 => rng.gen_range(2_200_000_000..4_000_000_000i64), // after 2038: epoch bits
        _ => rng.gen_range(1..2_000_000_000i64),
    };
    (sec, rng.gen_range(0..1_000_000_000))
}

fn rand_size(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..10) {
        0 => 0,
        1..=3 => rng.gen_range(1..8192),
        4..=6 => rng.gen_range(8192..262_144),
        _ => rng.gen_range(262_144..=3 << 20),
    }
}

/// Owner, permissions and times of one generated entry, applied after its content.
fn finish(rng: &mut StdRng, p: &Path, perm: Option<u32>) {
    let owners = [(0, 0), (1000, 1000), (65534, 65534), (1234, 4321)];
    let (uid, gid) = owners[rng.gen_range(0..owners.len())];
    lchown(p, uid, gid);
    if let Some(perm) = perm {
        chmod(p, perm);
    }
    let (sec, nsec) = rand_time(rng);
    set_times(p, sec, nsec);
}

fn write_random(rng: &mut StdRng, p: &Path, size: usize) {
    let mut data = vec![0u8; size];
    rng.fill_bytes(&mut data);
    std::fs::write(p, data).expect("write source file");
}

/// Generate the source tree under `root` (which must exist).
fn gen_tree(root: &Path, seed: u64) {
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
fn host_names(dir: &Path) -> BTreeSet<Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").file_name().as_bytes().to_vec())
        .collect()
}

fn kind_of(ft: std::fs::FileType) -> FileType {
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

fn mtime_of(md: &std::fs::Metadata) -> (i64, i64) {
    (md.mtime(), md.mtime_nsec())
}

/// Compare the tree at `dst` (as the kernel shows it) with the source at `src`.
fn compare_host(src: &Path, dst: &Path, top: bool, checked: &mut usize) {
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
fn copy_host(src: &Path, dst: &Path) {
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

// ---------------------------------------------------------------------------------------
// lanefs helpers.

fn ts(md: &std::fs::Metadata) -> Timespec {
    Timespec {
        sec: md.mtime(),
        nsec: md.mtime_nsec() as u32,
    }
}

/// Copy the host tree `src` into lanefs directory `dir`. Zero blocks become holes.
fn copy_into_lanefs(fs: &Fs, src: &Path, dir: Ino) {
    for name in host_names(src) {
        let s = src.join(OsStr::from_bytes(&name));
        let ms = std::fs::symlink_metadata(&s).expect("meta");
        let owner = Owner {
            uid: ms.uid(),
            gid: ms.gid(),
            umask: 0,
        };
        let perm = (ms.mode() & 0o7777) as u16;
        let kind = kind_of(ms.file_type());
        let a = match kind {
            FileType::Directory => {
                let a = fs.mkdir(dir, &name, perm, owner).expect("lanefs mkdir");
                copy_into_lanefs(fs, &s, a.ino);
                a
            }
            FileType::Regular => {
                let a = fs.create(dir, &name, perm, owner).expect("lanefs create");
                let mut f = std::fs::File::open(&s).expect("open src");
                let mut buf = vec![0u8; 1 << 20];
                let mut off = 0u64;
                loop {
                    let n = f.read(&mut buf).expect("read src");
                    if n == 0 {
                        break;
                    }
                    for (i, chunk) in buf[..n].chunks(BS as usize).enumerate() {
                        if chunk.iter().any(|&b| b != 0) {
                            let at = off + i as u64 * BS;
                            assert_eq!(
                                fs.write(a.ino, at, chunk).expect("lanefs write"),
                                chunk.len()
                            );
                        }
                    }
                    off += n as u64;
                }
                if fs.getattr(a.ino).expect("getattr").size != off {
                    fs.setattr(
                        a.ino,
                        &SetAttr {
                            size: Some(off),
                            ..Default::default()
                        },
                    )
                    .expect("extend");
                }
                fs.release(a.ino).expect("release");
                a
            }
            FileType::Symlink => {
                let t = std::fs::read_link(&s).expect("readlink");
                fs.symlink(dir, &name, t.as_os_str().as_bytes(), owner)
                    .expect("lanefs symlink")
            }
            _ => fs
                .mknod(dir, &name, ms.mode(), ms.rdev() as u32, owner)
                .expect("lanefs mknod"),
        };
        let set = SetAttr {
            perm: (kind != FileType::Symlink).then_some(perm),
            uid: Some(owner.uid),
            gid: Some(owner.gid),
            mtime: Some(ts(&ms)),
            atime: Some(ts(&ms)),
            ..Default::default()
        };
        let back = fs.setattr(a.ino, &set).expect("lanefs setattr");
        assert_eq!(back.mtime, ts(&ms), "setattr mtime round trip");
    }
}

/// Every entry of a lanefs directory, read with the resumable cursor in batches.
fn lanefs_list(fs: &Fs, dir: Ino, batch: usize) -> Vec<lanefs::DirEntry> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut pos = 0;
    loop {
        let v = fs.readdir(dir, pos, batch).expect("readdir");
        if v.is_empty() {
            break;
        }
        for e in v {
            assert!(
                seen.insert(e.name.clone()),
                "readdir returned {:?} twice",
                String::from_utf8_lossy(&e.name)
            );
            assert!(e.next > pos, "readdir cursor went backwards");
            pos = e.next;
            out.push(e);
        }
    }
    out
}

fn lanefs_read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size;
    let mut out = vec![0u8; size as usize];
    let mut off = 0usize;
    while off < out.len() {
        let n = fs
            .read(
                ino,
                off as u64,
                &mut out[off..(off + (1 << 20)).min(size as usize)],
            )
            .expect("lanefs read");
        assert!(n > 0, "short read at {off} of {size}");
        off += n;
    }
    let mut extra = [0u8; 16];
    assert_eq!(fs.read(ino, size, &mut extra).expect("read at eof"), 0);
    out
}

fn check_attr(a: &Attr, ms: &std::fs::Metadata, what: &str) {
    let kind = kind_of(ms.file_type());
    assert_eq!(a.kind, kind, "type of {what}");
    assert_eq!((a.uid, a.gid), (ms.uid(), ms.gid()), "owner of {what}");
    assert_eq!(a.mtime, ts(ms), "mtime of {what}");
    if kind != FileType::Symlink {
        assert_eq!(
            u32::from(a.perm),
            ms.mode() & 0o7777,
            "permissions of {what}"
        );
    }
    if matches!(kind, FileType::Regular | FileType::Symlink) {
        assert_eq!(a.size, ms.len(), "size of {what}");
    }
    if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
        assert_eq!(u64::from(a.rdev), ms.rdev(), "rdev of {what}");
    }
}

/// Compare a lanefs directory with the host source tree.
fn compare_lanefs(fs: &Fs, src: &Path, dir: Ino, top: bool, checked: &mut usize) {
    let list = lanefs_list(fs, dir, 3);
    let mut got: BTreeMap<Vec<u8>, (Ino, FileType)> = list
        .into_iter()
        .map(|e| (e.name, (e.ino, e.kind)))
        .collect();
    assert_eq!(got.remove(&b"."[..]).map(|x| x.0), Some(dir), ". entry");
    assert!(got.remove(&b".."[..]).is_some(), ".. entry");
    if top {
        got.remove(&b"lost+found"[..]);
    }
    let want = host_names(src);
    assert_eq!(
        got.keys()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect::<Vec<_>>(),
        want.iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect::<Vec<_>>(),
        "names differ in {}",
        src.display()
    );
    for (name, (ino, kind)) in got {
        let s = src.join(OsStr::from_bytes(&name));
        let what = s.display().to_string();
        let ms = std::fs::symlink_metadata(&s).expect("meta");
        let a = fs.lookup(dir, &name).expect("lanefs lookup");
        assert_eq!(a.ino, ino, "lookup and readdir disagree on {what}");
        assert_eq!(a.kind, kind, "dirent type of {what}");
        check_attr(&a, &ms, &what);
        match a.kind {
            FileType::Regular => {
                assert!(
                    lanefs_read_all(fs, ino) == std::fs::read(&s).expect("read src"),
                    "bytes of {what} differ"
                );
            }
            FileType::Symlink => {
                let t = std::fs::read_link(&s).expect("readlink");
                assert_eq!(
                    fs.readlink(ino).expect("lanefs readlink"),
                    t.as_os_str().as_bytes(),
                    "target of {what}"
                );
            }
            FileType::Directory => compare_lanefs(fs, &s, ino, false, checked),
            _ => {}
        }
        *checked += 1;
    }
}

fn many_name(i: usize) -> String {
    // Varying lengths exercise record packing and leaf splits.
    format!("f{i:06}{}", "x".repeat(i % 23))
}

fn many_content(i: usize) -> Option<Vec<u8>> {
    i.is_multiple_of(10)
        .then(|| format!("tiny {i}\n").into_bytes())
}

/// The 4 KiB block `k` of the fragmented files.
fn block_pattern(k: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(0xF7A6 ^ k);
    let mut b = vec![0u8; BS as usize];
    rng.fill_bytes(&mut b);
    b
}

/// Leaf extents and depth of a file's extent tree, from `debugfs -R "ex PATH"`.
fn debugfs_extents(img: &Path, path: &str) -> (usize, u32) {
    let out = run(Command::new("debugfs")
        .arg("-R")
        .arg(format!("ex {path}"))
        .arg(img))
    .expect("debugfs ex");
    let mut leaves = 0;
    let mut depth = 0;
    for line in out.lines().skip(1) {
        // " 1/ 2   1/  5     0 -   679  33849   680": level/depth first.
        let Some((lvl, rest)) = line.trim().split_once('/') else {
            continue;
        };
        let Some(d) = rest.split_whitespace().next() else {
            continue;
        };
        let (Ok(l), Ok(d)) = (lvl.trim().parse::<u32>(), d.parse::<u32>()) else {
            continue;
        };
        depth = d;
        if l == d {
            leaves += 1;
        }
    }
    (leaves, depth)
}

fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------
// (a) lanefs writes, the kernel reads.

#[test]
fn lanefs_writes_kernel_reads() {
    let test = "lanefs_writes_kernel_reads";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let t0 = Instant::now();
    let src = td.path().join("src");
    std::fs::create_dir(&src).expect("mkdir src");
    gen_tree(&src, 0xA11CE);
    let img = td.path().join("a.img");
    mkfs(&img, 1 << 30);

    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let o = Owner::default();
    let tree = fs.mkdir(ROOT_INO, b"tree", 0o755, o).expect("mkdir tree");
    copy_into_lanefs(&fs, &src, tree.ino);
    println!("{test}: tree copied in {}", secs(t0));

    let t = Instant::now();
    let many = fs.mkdir(ROOT_INO, b"many", 0o755, o).expect("mkdir many");
    for i in 0..MANY {
        let a = fs
            .create(many.ino, many_name(i).as_bytes(), 0o644, o)
            .expect("create in many");
        if let Some(c) = many_content(i) {
            fs.write(a.ino, 0, &c).expect("write tiny");
        }
        fs.release(a.ino).expect("release");
    }
    println!("{test}: {MANY} files created in {}", secs(t));

    // Every other block: each written block is its own extent.
    let t = Instant::now();
    let frag = fs.create(ROOT_INO, b"frag", 0o600, o).expect("create frag");
    for k in 0..FRAG {
        fs.write(frag.ino, 2 * k * BS, &block_pattern(k))
            .expect("write frag block");
    }
    fs.release(frag.ino).expect("release frag");
    // Two files growing in turns, block by block.
    const ILV: u64 = 1500;
    let ia = fs
        .create(ROOT_INO, b"ilv_a", 0o644, o)
        .expect("create ilv_a");
    let ib = fs
        .create(ROOT_INO, b"ilv_b", 0o644, o)
        .expect("create ilv_b");
    for k in 0..ILV {
        fs.write(ia.ino, k * BS, &block_pattern(k))
            .expect("append a");
        fs.write(ib.ino, k * BS, &block_pattern(k + ILV))
            .expect("append b");
    }
    fs.release(ia.ino).expect("release");
    fs.release(ib.ino).expect("release");
    println!("{test}: fragmented files written in {}", secs(t));
    fs.unmount().expect("lanefs unmount");

    let t = Instant::now();
    fsck_clean(&img, "after lanefs wrote the image");
    let (leaves, depth) = debugfs_extents(&img, "/frag");
    assert!(
        leaves >= FRAG as usize && depth >= 1,
        "frag: {leaves} extents, depth {depth}"
    );
    let (la, _) = debugfs_extents(&img, "/ilv_a");
    let (lb, _) = debugfs_extents(&img, "/ilv_b");
    println!("{test}: e2fsck clean; frag {leaves} extents depth {depth}; ilv_a {la}, ilv_b {lb} extents ({})", secs(t));

    let t = Instant::now();
    let mnt = td.path().join("mnt");
    let km = KernelMount::mount(&img, &mnt, "ro")
        .unwrap_or_else(|e| panic!("kernel refuses the lanefs image: {e}"));
    let mut checked = 0;
    compare_host(&src, &mnt.join("tree"), false, &mut checked);
    let want: BTreeSet<String> = (0..MANY).map(many_name).collect();
    let got: BTreeSet<String> = std::fs::read_dir(mnt.join("many"))
        .expect("read many")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    assert_eq!(got.len(), MANY, "entries the kernel lists in many");
    assert!(got == want, "kernel listing of many differs");
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..2000 {
        let i = rng.gen_range(0..MANY);
        let data = std::fs::read(mnt.join("many").join(many_name(i))).expect("read tiny");
        assert_eq!(
            data,
            many_content(i).unwrap_or_default(),
            "content of {}",
            many_name(i)
        );
    }
    let data = std::fs::read(mnt.join("frag")).expect("read frag");
    assert_eq!(data.len() as u64, (2 * FRAG - 1) * BS, "frag size");
    for (b, chunk) in data.chunks(BS as usize).enumerate() {
        let b = b as u64;
        if b.is_multiple_of(2) {
            assert!(chunk == block_pattern(b / 2), "frag block {b}");
        } else {
            assert!(chunk.iter().all(|&x| x == 0), "frag hole {b}");
        }
    }
    for (name, base) in [("ilv_a", 0), ("ilv_b", ILV)] {
        let data = std::fs::read(mnt.join(name)).expect("read ilv");
        assert_eq!(data.len() as u64, ILV * BS);
        for (k, chunk) in data.chunks(BS as usize).enumerate() {
            assert!(chunk == block_pattern(base + k as u64), "{name} block {k}");
        }
    }
    km.unmount().expect("kernel unmount");
    println!("{test}: kernel sees {checked} tree entries, {MANY} names, fragmented files ok ({}); total {}", secs(t), secs(t0));
}

// ---------------------------------------------------------------------------------------
// (b) the kernel writes, lanefs reads and modifies, the kernel checks.

fn punch(f: &std::fs::File, off: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: valid open descriptor.
    let r = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off as libc::off_t,
            len as libc::off_t,
        )
    };
    assert_eq!(r, 0, "punch hole: {}", std::io::Error::last_os_error());
}

#[test]
fn kernel_writes_lanefs_reads() {
    let test = "kernel_writes_lanefs_reads";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let t0 = Instant::now();
    let src = td.path().join("src");
    std::fs::create_dir(&src).expect("mkdir src");
    gen_tree(&src, 0xB0B);
    let img = td.path().join("b.img");
    mkfs(&img, 1 << 30);
    let mnt = td.path().join("mnt");

    // The kernel writes.
    {
        let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount rw");
        std::fs::create_dir(mnt.join("tree")).expect("mkdir tree");
        copy_host(&src, &mnt.join("tree"));
        std::fs::create_dir(mnt.join("many")).expect("mkdir many");
        for i in 0..MANY {
            let mut f = std::fs::File::create(mnt.join("many").join(many_name(i))).expect("create");
            if let Some(c) = many_content(i) {
                f.write_all(&c).expect("write tiny");
            }
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(mnt.join("frag"))
            .expect("frag");
        for k in 0..2 * FRAG {
            std::os::unix::fs::FileExt::write_all_at(&f, &block_pattern(k), k * BS)
                .expect("write frag");
        }
        f.sync_all().expect("fsync frag");
        for k in (1..2 * FRAG).step_by(2) {
            punch(&f, k * BS, BS);
        }
        f.sync_all().expect("fsync frag");
        drop(f);
        run(&mut Command::new("sync")).expect("sync");
        km.unmount().expect("kernel unmount");
    }
    println!("{test}: kernel wrote the tree in {}", secs(t0));
    let (leaves, depth) = debugfs_extents(&img, "/frag");
    assert!(
        leaves >= FRAG as usize && depth >= 1,
        "kernel frag: {leaves} extents, depth {depth}"
    );
    let htree = run(Command::new("debugfs")
        .arg("-R")
        .arg("htree_dump /many")
        .arg(&img))
    .expect("debugfs htree_dump");
    assert!(
        htree.contains("Indirect levels"),
        "kernel did not index /many:\n{}",
        &htree[..htree.len().min(2000)]
    );
    fsck_clean(&img, "after the kernel wrote the image");

    // lanefs reads everything back.
    let t = Instant::now();
    let fs =
        Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount of the kernel image");
    let tree = fs.lookup(ROOT_INO, b"tree").expect("lookup tree");
    let mut checked = 0;
    compare_lanefs(&fs, &src, tree.ino, false, &mut checked);
    println!("{test}: lanefs read {checked} tree entries in {}", secs(t));

    let t = Instant::now();
    let many = fs.lookup(ROOT_INO, b"many").expect("lookup many");
    let list = lanefs_list(&fs, many.ino, 1000);
    let mut want: BTreeSet<String> = (0..MANY).map(many_name).collect();
    let got: BTreeSet<String> = list
        .iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| String::from_utf8(e.name.clone()).expect("utf8 name"))
        .collect();
    assert_eq!(
        list.len(),
        MANY + 2,
        "readdir entries in the kernel's htree"
    );
    assert!(got == want, "lanefs listing of many differs");
    for e in &list {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let a = fs.lookup(many.ino, &e.name).expect("lookup in htree");
        assert_eq!(
            a.ino,
            e.ino,
            "lookup vs readdir inode of {:?}",
            String::from_utf8_lossy(&e.name)
        );
        assert_eq!(a.kind, FileType::Regular);
        let i: usize = std::str::from_utf8(&e.name[1..7])
            .expect("name")
            .parse()
            .expect("index");
        let c = many_content(i).unwrap_or_default();
        assert_eq!(a.size, c.len() as u64, "size of {}", many_name(i));
        if !c.is_empty() && i.is_multiple_of(100) {
            assert_eq!(lanefs_read_all(&fs, a.ino), c);
        }
    }
    println!(
        "{test}: lanefs listed and looked up {MANY} htree names in {}",
        secs(t)
    );

    let frag = fs.lookup(ROOT_INO, b"frag").expect("lookup frag");
    let data = lanefs_read_all(&fs, frag.ino);
    let mut want_frag = Vec::with_capacity(data.len());
    for k in 0..2 * FRAG {
        if k % 2 == 0 {
            want_frag.extend(block_pattern(k));
        } else {
            want_frag.extend(vec![0u8; BS as usize]);
        }
    }
    assert!(
        data == want_frag,
        "lanefs reads the kernel's fragmented file wrong"
    );

    // lanefs modifies the kernel-made tree.
    let t = Instant::now();
    let o = Owner {
        uid: 1000,
        gid: 100,
        umask: 0,
    };
    for i in 0..1000 {
        let name = format!("new{i:04}");
        let a = fs
            .create(many.ino, name.as_bytes(), 0o640, o)
            .expect("create in kernel htree");
        fs.write(a.ino, 0, name.as_bytes()).expect("write new");
        fs.release(a.ino).expect("release");
        want.insert(name);
    }
    for i in (1..MANY).step_by(MANY / 1000) {
        fs.unlink(many.ino, many_name(i).as_bytes())
            .expect("unlink in kernel htree");
        want.remove(&many_name(i));
    }
    let moved = fs.mkdir(ROOT_INO, b"moved", 0o755, o).expect("mkdir moved");
    let mut renamed = Vec::new();
    for i in (2..MANY).step_by(MANY / 200) {
        let old = many_name(i);
        let (dir, new) = if renamed.len() % 2 == 0 {
            (many.ino, format!("ren{i:06}"))
        } else {
            (moved.ino, format!("mv{i:06}"))
        };
        fs.rename(many.ino, old.as_bytes(), dir, new.as_bytes())
            .expect("rename");
        want.remove(&old);
        if dir == many.ino {
            want.insert(new.clone());
        }
        renamed.push((i, dir == many.ino, new));
    }
    let extra: Vec<u8> = (0..300_000u32).map(|x| (x % 251) as u8).collect();
    let size = fs.getattr(frag.ino).expect("getattr").size;
    fs.write(frag.ino, size, &extra).expect("append to frag");
    want_frag.extend(&extra);
    assert!(
        lanefs_read_all(&fs, frag.ino) == want_frag,
        "frag after append"
    );
    fs.unmount().expect("lanefs unmount");
    println!("{test}: lanefs modified the kernel tree in {}", secs(t));
    fsck_clean(&img, "after lanefs modified the kernel's image");

    // The kernel checks the result.
    let km = KernelMount::mount(&img, &mnt, "ro")
        .unwrap_or_else(|e| panic!("kernel refuses the modified image: {e}"));
    let got: BTreeSet<String> = std::fs::read_dir(mnt.join("many"))
        .expect("read many")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    assert_eq!(got.len(), want.len(), "kernel entry count of many");
    assert!(got == want, "kernel listing of many after lanefs changes");
    for i in 0..1000 {
        let p = mnt.join("many").join(format!("new{i:04}"));
        assert_eq!(
            std::fs::read(&p).expect("read new"),
            format!("new{i:04}").into_bytes()
        );
        let md = std::fs::metadata(&p).expect("meta");
        assert_eq!((md.uid(), md.gid(), md.mode() & 0o7777), (1000, 100, 0o640));
    }
    for (i, same_dir, new) in &renamed {
        let p = if *same_dir {
            mnt.join("many").join(new)
        } else {
            mnt.join("moved").join(new)
        };
        assert_eq!(
            std::fs::read(&p).expect("read renamed"),
            many_content(*i).unwrap_or_default(),
            "{}",
            p.display()
        );
    }
    let moved_names = host_names(&mnt.join("moved"));
    assert_eq!(moved_names.len(), renamed.iter().filter(|r| !r.1).count());
    assert!(
        std::fs::read(mnt.join("frag")).expect("read frag") == want_frag,
        "kernel reads frag after lanefs append"
    );
    let mut checked2 = 0;
    compare_host(&src, &mnt.join("tree"), false, &mut checked2);
    assert_eq!(checked, checked2);
    km.unmount().expect("kernel unmount");
    println!("{test}: kernel sees lanefs's changes; total {}", secs(t0));
}
