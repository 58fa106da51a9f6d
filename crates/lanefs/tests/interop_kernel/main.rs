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

#[path = "../common/mod.rs"]
mod common;

mod host;
mod side;

use host::*;
use side::*;

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
