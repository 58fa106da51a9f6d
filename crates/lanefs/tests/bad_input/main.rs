//! Goal: nothing read from a device can panic lanefs or make it hang. A corrupt image gives a
//! typed error naming the damaged structure (or mounts and reports errors on the damaged
//! parts), `lanefs::fsck::check` reports instead of panicking, unknown features are refused
//! or mounted read-only as the kernel does, and a failing device gives `Error::Io` while
//! data committed before the failure stays readable.
//! Method: lanefs populates a 64 MiB `mkfs.ext4` image (two groups; files, symlinks, a
//! FIFO, nested directories, a 2000-entry htree directory, a file of 1500 extents with a
//! depth-2 tree), e2fsck checks it. Each case damages a copy in memory (truncation, field
//! values in the superblock, group descriptors, bitmaps, inodes, extent blocks, directory
//! and htree blocks, each with and without a recomputed checksum), then mounts it, walks
//! and modifies the whole tree, and runs fsck, in a thread with a 20 s limit.
//! `damage_on_1k_blocks` and `damage_on_ext3` build the same tree on a 1 KiB-block ext4
//! image and on an ext3 image (block maps, no checksums) and run a sample of the same
//! kinds of damage (all the indirect-block cases on ext3).

#[path = "../common/mod.rs"]
mod common;

use lanefs::internals::disk::dir::{self as dd, DX_ROOT_COUNT_OFF};
use lanefs::internals::disk::extent::{self, Node};
use lanefs::internals::disk::group::{bitmap_csum, GroupDesc};
use lanefs::internals::disk::inode::DiskInode;
use lanefs::internals::disk::superblock::Superblock;
use lanefs::internals::disk::{le16, le32, put16, put32};
use lanefs::{
    BlockDevice, Error, FileType, Fs, Ino, MemDevice, MountOptions, Owner, SetAttr, ROOT_INO,
};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

thread_local! {
    /// The block size of the image this thread damages (the default base: 4096). Set by
    /// each shape's test and by the workers that run its cases.
    static BLOCK_SIZE: std::cell::Cell<usize> = const { std::cell::Cell::new(4096) };
}

fn set_bs(bs: usize) {
    BLOCK_SIZE.with(|b| b.set(bs));
}

fn bs() -> usize {
    BLOCK_SIZE.with(|b| b.get())
}
const HTREE_ENTRIES: usize = 2000;
const FRAG_EXTENTS: u64 = 1500;
/// A case that runs longer than this is a hang.
const LIMIT: Duration = Duration::from_secs(20);
/// Never read more of one file than this (a corrupt size can claim petabytes of holes).
const READ_CAP: u64 = 64 << 20;

/// Words a mount error may use to name what is wrong.
const SB: &[&str] = &["superblock"];
const GD: &[&str] = &["group descriptor"];
const INODE: &[&str] = &["inode"];
const ANY: &[&str] = &[
    "superblock",
    "group descriptor",
    "inode",
    "extent",
    "directory",
    "bitmap",
    "journal",
    "feature",
    "block size",
    "symlink",
    "root",
    "block map",
    "indirect",
];

mod cases;
mod devices;
mod images;
mod walk;

use cases::*;
use devices::*;
use images::*;
use walk::*;

#[test]
fn clean_base_walks_without_errors() {
    let Some(b) = base("clean_base_walks_without_errors") else {
        return;
    };
    let fs = Fs::mount(
        Arc::new(MemDevice::from_vec(b.img.clone())),
        MountOptions::default(),
    )
    .expect("mount base");
    let mut w = Walk::default();
    walk_dir(&fs, ROOT_INO, 0, &mut w);
    assert!(
        w.errors.is_empty() && w.bugs.is_empty(),
        "clean image: {:?} {:?}",
        w.errors,
        w.bugs
    );
    assert!(
        w.entries > HTREE_ENTRIES,
        "walked only {} entries",
        w.entries
    );
    let frag = fs.lookup(ROOT_INO, b"frag").expect("frag");
    let mut blk = vec![0u8; bs()];
    for k in [0u64, 1, 700, FRAG_EXTENTS - 1] {
        fs.read(frag.ino, 2 * k * bs() as u64, &mut blk)
            .expect("read frag");
        assert!(blk == block_pattern(k), "frag block {k}");
    }
    fs.unmount().expect("unmount");
    let r = lanefs::fsck::check(&MemDevice::from_vec(b.img.clone()), &Default::default())
        .expect("fsck base");
    assert!(
        r.is_clean(),
        "lanefs fsck on the clean base: {:?}",
        r.problems
    );
}

#[test]
fn superblock_and_truncation_damage() {
    let Some(b) = base("superblock_and_truncation_damage") else {
        return;
    };
    let mut cases = Vec::new();
    truncation_cases(&mut cases, b.img.len());
    superblock_cases(&mut cases);
    run_cases("superblock_and_truncation_damage", cases, b);
}

#[test]
fn group_and_bitmap_damage() {
    let Some(b) = base("group_and_bitmap_damage") else {
        return;
    };
    let mut cases = Vec::new();
    group_cases(&mut cases);
    bitmap_cases(&mut cases);
    run_cases("group_and_bitmap_damage", cases, b);
}

/// Two groups whose descriptors (checksums intact) name one inode table, inode bitmap or
/// block bitmap: the mount names the overlap. An inode's checksum, seeded with its number,
/// is checked once per cached table block, so one record read as two inodes would not be
/// caught later.
#[test]
fn groups_sharing_a_table_or_bitmap_are_refused() {
    let Some(b) = base("groups_sharing_a_table_or_bitmap_are_refused") else {
        return;
    };
    let picks: [(&str, usize, &[u64]); 3] = [
        ("inode table", 8, &b.tables),
        ("inode bitmap", 4, &b.inode_bitmaps),
        ("block bitmap", 0, &b.block_bitmaps),
    ];
    for (what, off, blocks) in picks {
        let mut img = b.img.clone();
        set(&mut img, b.gd_off(1) + off, 4, blocks[0]);
        fix_gd(b, &mut img, 1);
        let dev = Arc::new(MemDevice::from_vec(img));
        match Fs::mount(dev, MountOptions::default()) {
            Ok(_) => panic!("group 1's {what} on group 0's: mounted"),
            Err(e) => assert!(
                e.to_string().contains("overlaps group 0"),
                "group 1's {what} on group 0's: {e}"
            ),
        }
    }
}

/// A descriptor (checksum intact) counting every inode of its group free while files
/// live there: unlinking one is refused as a corrupt descriptor, not a counter past the
/// group's size (nor, in a debug build, a panic).
#[test]
fn a_free_count_of_the_whole_group_refuses_an_unlink() {
    let Some(b) = base("a_free_count_of_the_whole_group_refuses_an_unlink") else {
        return;
    };
    let mut img = b.img.clone();
    set(&mut img, b.gd_off(0) + 0xE, 2, b.ipg);
    fix_gd(b, &mut img, 0);
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default())
        .expect("the count is within the group: mounted");
    match fs.unlink(ROOT_INO, b"small") {
        Ok(()) => panic!("unlinked with every inode of the group counted free"),
        Err(e) => assert!(e.to_string().contains("group descriptor"), "unlink: {e}"),
    }
}

#[test]
fn inode_damage() {
    let Some(b) = base("inode_damage") else {
        return;
    };
    let mut cases = Vec::new();
    inode_cases(&mut cases);
    run_cases("inode_damage", cases, b);
}

#[test]
fn extent_and_directory_damage() {
    let Some(b) = base("extent_and_directory_damage") else {
        return;
    };
    let mut cases = Vec::new();
    extent_block_cases(&mut cases);
    dir_cases(&mut cases);
    run_cases("extent_and_directory_damage", cases, b);
}

/// Every kind of damage on another shape, thinned to about `keep` cases (every Nth, so
/// each kind is still represented).
fn shape_damage(test: &str, shape: &Shape, keep: usize) {
    let Some(b) = base_of(test, shape) else {
        return;
    };
    let mut all = Vec::new();
    let csum = Superblock::decode(&b.img[1024..2048], b.img.len() as u64)
        .expect("base superblock")
        .metadata_csum();
    // Without checksums nothing names the damaged structure first: it surfaces wherever
    // it is met, and any structure's name will do.
    let run_cases = |test: &str, mut cases: Vec<Case>, b: &'static Base| {
        if !csum {
            for c in &mut cases {
                c.words = ANY;
            }
        }
        run_cases(test, cases, b)
    };
    truncation_cases(&mut all, b.img.len());
    superblock_cases(&mut all);
    group_cases(&mut all);
    bitmap_cases(&mut all);
    inode_cases(&mut all);
    if b.extents {
        extent_block_cases(&mut all);
    } else {
        let mut ind = Vec::new();
        indirect_block_cases(&mut ind);
        // Block-map damage is what this shape adds: every case of it, then the sample.
        let step = (all.len() / keep.saturating_sub(ind.len()).max(1)).max(1);
        let sampled: Vec<Case> = all.into_iter().step_by(step).collect();
        let mut cases = ind;
        cases.extend(sampled);
        let mut dirs = Vec::new();
        dir_cases(&mut dirs);
        cases.extend(dirs.into_iter().step_by(step));
        return run_cases(test, cases, b);
    }
    dir_cases(&mut all);
    let step = (all.len() / keep).max(1);
    run_cases(test, all.into_iter().step_by(step).collect(), b);
}

/// The clean 1 KiB and ext3 bases walk without errors and are clean for lanefs fsck.
#[test]
fn clean_shape_bases_walk_without_errors() {
    for (test, shape) in [
        ("clean_shape_bases_walk_without_errors (1k)", &EXT4_1K),
        ("clean_shape_bases_walk_without_errors (ext3)", &EXT3),
    ] {
        let Some(b) = base_of(test, shape) else {
            return;
        };
        let fs = Fs::mount(
            Arc::new(MemDevice::from_vec(b.img.clone())),
            MountOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{test}: mount base: {e}"));
        let mut w = Walk::default();
        walk_dir(&fs, ROOT_INO, 0, &mut w);
        assert!(
            w.errors.is_empty() && w.bugs.is_empty(),
            "{test}: {:?} {:?}",
            w.errors,
            w.bugs
        );
        fs.unmount().expect("unmount");
        let r = lanefs::fsck::check(&MemDevice::from_vec(b.img.clone()), &Default::default())
            .expect("fsck base");
        assert!(r.is_clean(), "{test}: lanefs fsck: {:?}", r.problems);
    }
}

/// About 100 corruptions of a 1 KiB-block ext4 image (superblock in block 1, descriptors
/// in block 2, 1 KiB extent, directory and htree blocks).
#[test]
fn damage_on_1k_blocks() {
    shape_damage("damage_on_1k_blocks", &EXT4_1K, 100);
}

/// About 100 corruptions of an ext3 image, with every indirect-block case (pointers out
/// of range, into metadata, shared, cyclic; garbage blocks; the inode's IND, DIND and TIND
/// slots).
#[test]
fn damage_on_ext3() {
    shape_damage("damage_on_ext3", &EXT3, 100);
}

// ---------------------------------------------------------------------------------------
// Feature bits.

fn with_features(b: &Base, incompat_or: u32, ro_or: u32) -> Vec<u8> {
    let mut img = b.img.clone();
    let i = le32(&img, 1024 + 0x60) | incompat_or;
    let r = le32(&img, 1024 + 0x64) | ro_or;
    put32(&mut img, 1024 + 0x60, i);
    put32(&mut img, 1024 + 0x64, r);
    fix_sb(&mut img);
    img
}

#[test]
fn unknown_and_recovery_features() {
    let Some(b) = base("unknown_and_recovery_features") else {
        return;
    };
    // Unknown INCOMPAT: refused, naming the bit.
    let img = with_features(b, 0x8000_0000, 0);
    let e = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default())
        .err()
        .expect("unknown INCOMPAT must be refused");
    let msg = e.to_string();
    assert!(
        msg.contains("INCOMPAT") && msg.contains("0x80000000"),
        "message: {msg}"
    );
    // A known but unsupported INCOMPAT feature (encrypt) is refused by name too.
    let img = with_features(b, 0x10000, 0);
    let e = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default())
        .err()
        .expect("encrypt must be refused");
    assert!(e.to_string().contains("encrypt"), "message: {e}");
    // needs_recovery with an empty log: nothing to replay; it mounts, and a clean unmount
    // clears the flag (as the kernel does).
    let img = with_features(b, 0x4, 0);
    let dev = Arc::new(MemDevice::from_vec(img));
    let fs = Fs::mount(dev.clone(), MountOptions::default())
        .expect("needs_recovery with an empty log mounts");
    fs.unmount().expect("unmount");
    assert_eq!(
        le32(&dev.snapshot(), 1024 + 0x60) & 0x4,
        0,
        "needs_recovery still set after a clean unmount"
    );
    // needs_recovery without a journal: refused by name.
    let mut img = with_features(b, 0x4, 0);
    let c = le32(&img, 1024 + 0x5C) & !0x4;
    put32(&mut img, 1024 + 0x5C, c);
    fix_sb(&mut img);
    let e = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default())
        .err()
        .expect("needs_recovery without a journal must be refused");
    let msg = e.to_string().to_lowercase();
    assert!(
        msg.contains("journal") && msg.contains("recovery"),
        "message: {msg}"
    );
    // Unknown RO_COMPAT: mounts read-only; reads work, every change is ReadOnly, no byte moves.
    let img = with_features(b, 0, 0x8000_0000);
    let dev = Arc::new(MemDevice::from_vec(img.clone()));
    let fs = Fs::mount(dev.clone(), MountOptions::default())
        .expect("unknown RO_COMPAT mounts read-only");
    let o = Owner::default();
    let big = fs.lookup(ROOT_INO, b"big").expect("lookup big");
    let mut buf = vec![0u8; 1000];
    assert_eq!(fs.read(big.ino, 0, &mut buf).expect("read"), 1000);
    assert_eq!(
        fs.create(ROOT_INO, b"x", 0o644, o).err(),
        Some(Error::ReadOnly)
    );
    assert_eq!(
        fs.mkdir(ROOT_INO, b"x", 0o755, o).err(),
        Some(Error::ReadOnly)
    );
    assert_eq!(fs.write(big.ino, 0, b"zz").err(), Some(Error::ReadOnly));
    assert_eq!(fs.unlink(ROOT_INO, b"big").err(), Some(Error::ReadOnly));
    assert_eq!(
        fs.rename(ROOT_INO, b"big", ROOT_INO, b"big2").err(),
        Some(Error::ReadOnly)
    );
    assert_eq!(
        fs.setattr(
            big.ino,
            &SetAttr {
                perm: Some(0o600),
                ..Default::default()
            }
        )
        .err(),
        Some(Error::ReadOnly)
    );
    assert_eq!(
        fs.symlink(ROOT_INO, b"l", b"t", o).err(),
        Some(Error::ReadOnly)
    );
    fs.unmount().expect("unmount read-only");
    assert!(dev.snapshot() == img, "a read-only mount changed the image");
    // Unknown COMPAT: harmless, mounts read-write.
    let img = with_features(b, 0, 0);
    let mut img2 = img.clone();
    let c = le32(&img2, 1024 + 0x5C) | 0x8000_0000;
    put32(&mut img2, 1024 + 0x5C, c);
    fix_sb(&mut img2);
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img2)), MountOptions::default())
        .expect("unknown COMPAT mounts");
    let a = fs
        .create(ROOT_INO, b"fine", 0o644, o)
        .expect("create with unknown COMPAT");
    fs.release(a.ino).expect("release");
    fs.unmount().expect("unmount");
}

#[test]
fn failing_writes_give_io_errors_and_keep_committed_data() {
    let Some(b) = base("failing_writes_give_io_errors_and_keep_committed_data") else {
        return;
    };
    let committed: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    for budget in [0u64, 1, 2, 3, 5, 10, 30, 100, 300] {
        let dev = FailDev::new(b.img.clone());
        let r = catch_unwind(AssertUnwindSafe(|| {
            let fs = Fs::mount(dev.clone(), MountOptions::default()).expect("mount");
            let o = Owner::default();
            let a = fs
                .create(ROOT_INO, b"committed", 0o644, o)
                .expect("create committed");
            fs.write(a.ino, 0, &committed).expect("write committed");
            fs.release(a.ino).expect("release");
            fs.sync().expect("sync committed");
            dev.fail_writes_after(budget);
            let mut io = 0;
            let mut ok_after_io = 0;
            let mut other = Vec::new();
            let mut note = |r: lanefs::Result<()>| match r {
                Ok(()) => ok_after_io += usize::from(io > 0),
                Err(e) if is_io_or_ro(&e) => io += 1,
                Err(e) => other.push(e),
            };
            for i in 0..50 {
                note(
                    fs.create(ROOT_INO, format!("late{i}").as_bytes(), 0o644, o)
                        .and_then(|a| {
                            fs.write(a.ino, 0, &vec![i as u8; 70_000])?;
                            fs.release(a.ino)
                        }),
                );
                if i % 10 == 9 {
                    note(fs.sync());
                }
            }
            note(fs.mkdir(ROOT_INO, b"late_dir", 0o755, o).map(|_| ()));
            note(fs.unlink(ROOT_INO, b"medium"));
            note(fs.sync());
            note(fs.unmount());
            assert!(other.is_empty(), "budget {budget}: non-IO errors {other:?}");
            let refused = dev.refused.load(Ordering::SeqCst);
            assert!(
                refused == 0 || io > 0,
                "budget {budget}: {refused} writes refused, no operation reported it"
            );
            // A device error turns the mount read-only: nothing may succeed afterwards.
            assert_eq!(
                ok_after_io, 0,
                "budget {budget}: changes accepted after a device error"
            );
            println!(
                "budget {budget}: {refused} writes refused, {io} operations failed with Io/ReadOnly, {ok_after_io} succeeded after the first failure"
            );
        }));
        assert!(r.is_ok(), "budget {budget}: panic on a failing device");
        // What was committed before the failure is still there.
        let fs = Fs::mount(
            Arc::new(MemDevice::from_vec(dev.inner.snapshot())),
            MountOptions {
                read_only: true,
                ..MountOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("budget {budget}: remount after failure: {e}"));
        let a = fs
            .lookup(ROOT_INO, b"committed")
            .expect("committed file after failure");
        let mut back = vec![0u8; committed.len() + 10];
        let mut off = 0;
        while off < back.len() {
            let n = fs
                .read(a.ino, off as u64, &mut back[off..])
                .expect("read committed");
            if n == 0 {
                break;
            }
            off += n;
        }
        assert_eq!(off, committed.len(), "budget {budget}: committed size");
        assert!(
            back[..off] == committed[..],
            "budget {budget}: committed bytes"
        );
        let big = fs.lookup(ROOT_INO, b"big").expect("big after failure");
        let mut buf = vec![0u8; 1 << 20];
        assert_eq!(fs.read(big.ino, 0, &mut buf).expect("read big"), 1 << 20);
    }
    // Failing the very first write: the read-write mount itself reports Io.
    let dev = FailDev::new(b.img.clone());
    dev.fail_writes_after(0);
    match Fs::mount(dev, MountOptions::default()) {
        Err(Error::Io { op, .. }) => assert!(!op.is_empty()),
        Err(e) => panic!("mount on a device failing writes: unexpected {e:?}"),
        Ok(fs) => {
            let r = fs
                .create(ROOT_INO, b"x", 0o644, Owner::default())
                .and_then(|a| fs.release(a.ino))
                .and_then(|_| fs.sync());
            assert!(
                matches!(r, Err(Error::Io { .. })),
                "writes on a failing device: {r:?}"
            );
        }
    }
}

#[test]
fn failing_reads_give_io_errors() {
    let Some(b) = base("failing_reads_give_io_errors") else {
        return;
    };
    let io = |r: lanefs::Result<()>, what: &str| match r {
        Err(Error::Io { op, .. }) => assert!(!op.is_empty(), "{what}: no operation named"),
        other => panic!("{what}: expected Error::Io, got {other:?}"),
    };
    let mount = |blk: u64| {
        let dev = FailDev::new(b.img.clone());
        dev.fail_reads_of(blk);
        Fs::mount(dev, MountOptions::default())
    };
    // Metadata the mount needs.
    io(mount(1).map(|_| ()), "GDT block unreadable");
    io(
        mount(b.inode_off(2) as u64 / bs() as u64).map(|_| ()),
        "root inode block unreadable",
    );
    // The frag file's extent leaf: that file fails, others read.
    let fs = mount(b.frag_leaf).expect("mount with a bad extent block");
    let frag = fs.lookup(ROOT_INO, b"frag").expect("lookup frag");
    let mut buf = vec![0u8; bs()];
    io(
        fs.read(frag.ino, 0, &mut buf).map(|_| ()),
        "read through a bad extent block",
    );
    let small = fs.lookup(ROOT_INO, b"small").expect("lookup small");
    assert!(fs.read(small.ino, 0, &mut buf).expect("read small") > 0);
    fs.unmount().expect("unmount");
    // A data block of big.
    let fs = mount(b.big_data).expect("mount with a bad data block");
    let big = fs.lookup(ROOT_INO, b"big").expect("lookup big");
    io(
        fs.read(big.ino, 0, &mut buf).map(|_| ()),
        "read of a bad data block",
    );
    assert!(
        fs.read(big.ino, 1 << 19, &mut buf).is_ok(),
        "other blocks of big still read"
    );
    fs.unmount().expect("unmount");
    // A directory block.
    let fs = mount(b.dir1_block).expect("mount with a bad directory block");
    let dir1 = fs.lookup(ROOT_INO, b"dir1").expect("lookup dir1");
    io(
        fs.readdir(dir1.ino, 0, 100).map(|_| ()),
        "readdir of a bad directory block",
    );
    io(
        fs.lookup(dir1.ino, b"a1").map(|_| ()),
        "lookup in a bad directory block",
    );
    io(
        fs.create(dir1.ino, b"new", 0o644, Owner::default())
            .map(|_| ()),
        "create in a bad directory block",
    );
    fs.unmount().expect("unmount");
    // The htree root.
    let fs = mount(b.htree_root).expect("mount with a bad htree root");
    let h = fs.lookup(ROOT_INO, b"htree").expect("lookup htree");
    io(
        fs.lookup(h.ino, b"entry_00001").map(|_| ()),
        "lookup through a bad htree root",
    );
    fs.unmount().expect("unmount");
}
