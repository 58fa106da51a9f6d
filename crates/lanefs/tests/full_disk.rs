//! Goal: a full disk gives ENOSPC, never corruption or leaked space; and space already
//! preallocated stays writable on a full disk.
//! Method: fill a small image with writes, then fallocates, then creates until each
//! fails with NoSpace; committed data reads back, e2fsck accepts the image, and deleting
//! everything returns the free counts exactly to where they started. Most tests mount
//! with no reserved blocks, to reach the very last block with data; the last keeps
//! ext4's reserve and writes into preallocated space on a disk data has filled.

mod common;

use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{Error, FallocMode, FileDevice, Fs, MountOptions, Owner, RenameMode, ROOT_INO};
use std::sync::Arc;

/// Mount `img` with no blocks reserved for metadata: data may take every block.
fn mount(img: &std::path::Path) -> Arc<Fs> {
    let opts = MountOptions {
        reserved_blocks: Some(0),
        ..MountOptions::default()
    };
    Fs::mount_path(img, opts).expect("mount")
}

/// Write file `name` one block at a time until the disk is full; its inode and size.
fn fill(fs: &Fs, name: &[u8]) -> (u64, u64) {
    let g = fs
        .create(ROOT_INO, name, 0o644, Owner::default())
        .unwrap()
        .ino;
    let mut size = 0u64;
    loop {
        match fs.write(g, size, &[9u8; 4096]) {
            Ok(_) => size += 4096,
            Err(Error::NoSpace) => return (g, size),
            Err(e) => panic!("filling: {e}"),
        }
    }
}

/// One-block files until at most `left` blocks are free (committed counts).
fn pad_to(fs: &Fs, left: u64) {
    fs.sync().unwrap();
    let mut pad = 0;
    while fs.statfs().unwrap().free_blocks > left {
        let name = format!("pad{pad}");
        let p = fs
            .create(ROOT_INO, name.as_bytes(), 0o644, Owner::default())
            .unwrap()
            .ino;
        let _ = fs.write(p, 0, &[5u8; 4096]);
        fs.release(p).unwrap();
        fs.sync().unwrap();
        pad += 1;
    }
}

/// A freshly formatted 16 MiB image `name` in `td`, mounted.
fn fresh(td: &tempfile::TempDir, name: &str) -> (std::path::PathBuf, Arc<Fs>) {
    let img = td.path().join(name);
    let dev = FileDevice::create(&img, 16 << 20).unwrap();
    format(&dev, &MkfsOptions::default()).unwrap();
    drop(dev);
    let fs = mount(&img);
    (img, fs)
}

#[test]
fn filling_the_disk_is_clean_and_reversible() {
    let td = tempfile::tempdir().unwrap();
    let (img, fs) = fresh(&td, "full.img");
    let start = fs.statfs().unwrap();
    let o = Owner::default();

    // 1. Writes until the data blocks run out.
    let big = fs.create(ROOT_INO, b"big", 0o644, o).unwrap();
    let chunk: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect();
    let mut written = 0u64;
    let err = loop {
        match fs.write(big.ino, written, &chunk) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
    };
    assert_eq!(err, Error::NoSpace);
    assert!(written > 0);
    assert_eq!(
        fs.getattr(big.ino).unwrap().size,
        written,
        "a failed write changes nothing"
    );
    let mut back = vec![0u8; chunk.len()];
    fs.read(big.ino, written - chunk.len() as u64, &mut back)
        .unwrap();
    assert_eq!(back, chunk);
    fs.release(big.ino).unwrap();

    // 2. Free some space, then fallocate until it runs out again.
    fs.unlink(ROOT_INO, b"big").unwrap();
    let f = fs.create(ROOT_INO, b"falloc", 0o644, o).unwrap();
    let mut off = 0u64;
    let err = loop {
        match fs.fallocate(f.ino, FallocMode::default(), off, 1 << 20) {
            Ok(()) => off += 1 << 20,
            Err(e) => break e,
        }
    };
    assert_eq!(err, Error::NoSpace);
    assert_eq!(fs.getattr(f.ino).unwrap().size, off);
    // Give the space back so the next step runs out of inodes instead.
    let zero = lanefs::SetAttr {
        size: Some(0),
        ..Default::default()
    };
    fs.setattr(f.ino, &zero).unwrap();
    fs.release(f.ino).unwrap();

    // 3. Creates until inodes or directory blocks run out.
    let d = fs.mkdir(ROOT_INO, b"many", 0o755, o).unwrap();
    let mut n = 0;
    let err = loop {
        match fs.create(d.ino, format!("f{n:06}").as_bytes(), 0o644, o) {
            Ok(a) => {
                fs.release(a.ino).unwrap();
                n += 1;
            }
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, Error::NoSpace | Error::NoInodes),
        "after {n} files: {err}"
    );
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);

    // 4. Delete everything: every block and inode comes back.
    let fs = mount(&img);
    fs.unlink(ROOT_INO, b"falloc").unwrap();
    for k in 0..n {
        fs.unlink(d.ino, format!("f{k:06}").as_bytes()).unwrap();
    }
    fs.rmdir(ROOT_INO, b"many").unwrap();
    let end = fs.statfs().unwrap();
    assert_eq!(
        (end.free_blocks, end.free_inodes),
        (start.free_blocks, start.free_inodes)
    );
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);
}

/// The last free block goes to a write whose file then needs an extent-tree block too
/// (its inode already holds 4 extents): the write fails whole with ENOSPC, the block is
/// free again, the file is unchanged, and e2fsck finds nothing. Before this was handled,
/// the data block stayed marked in use with nothing pointing at it.
#[test]
fn a_write_that_needs_a_tree_block_on_a_full_disk_fails_whole() {
    let td = tempfile::tempdir().unwrap();
    let (img, fs) = fresh(&td, "tree.img");
    let o = Owner::default();
    // F: four one-block extents, logically apart, so the inode's four slots are full.
    let f = fs.create(ROOT_INO, b"f", 0o644, o).unwrap().ino;
    for k in 0..4u64 {
        fs.write(f, 2 * k * 4096, &[k as u8 + 1; 4096]).unwrap();
    }
    assert_eq!(fs.diagnostics().extent_count(f).unwrap(), 4);
    // G: the rest of the disk, one block at a time.
    let (g, size) = fill(&fs, b"g");
    // Exactly one free block: G's last block, punched (its extent only shrinks).
    let punch = FallocMode {
        keep_size: true,
        punch_hole: true,
        zero_range: false,
    };
    fs.fallocate(g, punch, size - 4096, 4096).unwrap();
    // (The punch may also free G's leaf block; small files take what is over one.)
    pad_to(&fs, 1);
    let left = fs.statfs().unwrap().free_blocks;
    assert_eq!(left, 1, "could not leave exactly one block free");
    // A fifth extent for F needs the free block for data and another for a leaf.
    assert!(matches!(
        fs.write(f, 100 * 4096, &[7u8; 4096]),
        Err(Error::NoSpace)
    ));
    fs.sync().unwrap();
    assert_eq!(
        fs.statfs().unwrap().free_blocks,
        1,
        "the failed write kept a block"
    );
    assert_eq!(fs.diagnostics().extent_count(f).unwrap(), 4);
    assert_eq!(fs.getattr(f).unwrap().size, 7 * 4096);
    fs.diagnostics().check_allocator().unwrap();
    fs.release(f).unwrap();
    fs.release(g).unwrap();
    fs.unmount().unwrap();
    if common::require_tools(
        "a_write_that_needs_a_tree_block_on_a_full_disk_fails_whole",
        &["e2fsck"],
    ) {
        common::assert_fsck_clean(&img);
    }
}

/// A punch that splits an extent on a full disk needs an extent-tree block: the blocks
/// it frees come back at the next commit, so the punch succeeds after its ENOSPC retry,
/// and the image stays consistent.
#[test]
fn a_punch_that_splits_an_extent_on_a_full_disk_succeeds() {
    let td = tempfile::tempdir().unwrap();
    let (img, fs) = fresh(&td, "punch.img");
    let o = Owner::default();
    // F: four extents of 8 blocks, logically apart; the inode's four slots are full.
    let f = fs.create(ROOT_INO, b"f", 0o644, o).unwrap().ino;
    for k in 0..4u64 {
        fs.write(f, 16 * k * 4096, &[k as u8 + 1; 8 * 4096])
            .unwrap();
    }
    assert_eq!(fs.diagnostics().extent_count(f).unwrap(), 4);
    let (g, _) = fill(&fs, b"g");
    pad_to(&fs, 0);
    assert_eq!(fs.statfs().unwrap().free_blocks, 0);
    // Punch blocks 2..4 of F's first extent: five extents, a leaf block needed.
    let punch = FallocMode {
        keep_size: true,
        punch_hole: true,
        zero_range: false,
    };
    fs.fallocate(f, punch, 2 * 4096, 2 * 4096).unwrap();
    assert_eq!(fs.diagnostics().extent_count(f).unwrap(), 5);
    let mut back = vec![0u8; 8 * 4096];
    fs.read(f, 0, &mut back).unwrap();
    assert!(back[..2 * 4096].iter().all(|&b| b == 1));
    assert!(back[2 * 4096..4 * 4096].iter().all(|&b| b == 0));
    assert!(back[4 * 4096..].iter().all(|&b| b == 1));
    fs.diagnostics().check_allocator().unwrap();
    fs.release(f).unwrap();
    fs.release(g).unwrap();
    fs.unmount().unwrap();
    if common::require_tools(
        "a_punch_that_splits_an_extent_on_a_full_disk_succeeds",
        &["e2fsck"],
    ) {
        common::assert_fsck_clean(&img);
    }
}

/// Inodes run out, one is freed: once its unlink commits, a create in the same mount
/// takes it (the group's "has a free inode" state comes back with the first free).
#[test]
fn an_inode_freed_after_they_ran_out_is_reused_without_a_remount() {
    let td = tempfile::tempdir().unwrap();
    let (img, fs) = fresh(&td, "inodes.img");
    let o = Owner::default();
    let mut n = 0;
    let err = loop {
        match fs.create(ROOT_INO, format!("f{n:05}").as_bytes(), 0o644, o) {
            Ok(a) => {
                fs.release(a.ino).unwrap();
                n += 1;
            }
            Err(e) => break e,
        }
    };
    assert_eq!(err, Error::NoInodes, "after {n} files");
    assert_eq!(err.errno(), libc::ENOSPC);
    assert_eq!(
        fs.statfs().unwrap().free_inodes,
        0,
        "creates stopped for inodes"
    );
    fs.unlink(ROOT_INO, b"f00007").unwrap();
    fs.sync().unwrap();
    let a = fs
        .create(ROOT_INO, b"again", 0o644, o)
        .expect("a create after an inode was freed");
    fs.release(a.ino).unwrap();
    assert_eq!(
        fs.create(ROOT_INO, b"more", 0o644, o).unwrap_err(),
        Error::NoInodes
    );
    // A rename that leaves a whiteout needs an inode too: it fails whole.
    let whiteout = RenameMode::Whiteout {
        noreplace: false,
        owner: o,
    };
    assert_eq!(
        fs.rename_with(ROOT_INO, b"again", ROOT_INO, b"moved", whiteout),
        Err(Error::NoInodes)
    );
    assert_eq!(fs.lookup(ROOT_INO, b"again").unwrap().ino, a.ino);
    assert_eq!(fs.lookup(ROOT_INO, b"moved"), Err(Error::NotFound));
    fs.unlink(ROOT_INO, b"f00008").unwrap();
    fs.sync().unwrap();
    fs.rename_with(ROOT_INO, b"again", ROOT_INO, b"moved", whiteout)
        .unwrap();
    let w = fs.lookup(ROOT_INO, b"again").unwrap();
    assert_eq!(
        (w.kind, w.perm, w.rdev),
        (lanefs::FileType::CharDevice, 0, 0)
    );
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);
}

/// fstests' generic/274 in small: a file with 64 KiB written and 8 MiB preallocated past
/// it (unwritten, size kept), the rest of the disk filled with data until ENOSPC; then
/// every other 64 KiB of the preallocated space written (each write splits an unwritten
/// extent, soon needing extent-tree blocks), then the holes between. Every write
/// succeeds: data stopped short of the reserve, which the extent tree then takes.
#[test]
fn writes_into_preallocated_space_succeed_on_a_full_disk() {
    let td = tempfile::tempdir().unwrap();
    let img = td.path().join("prealloc.img");
    let dev = FileDevice::create(&img, 64 << 20).unwrap();
    format(&dev, &MkfsOptions::default()).unwrap();
    drop(dev);
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
    let o = Owner::default();
    let f = fs.create(ROOT_INO, b"test", 0o644, o).unwrap().ino;
    fs.write(f, 0, &[1u8; 64 << 10]).unwrap();
    let keep = FallocMode {
        keep_size: true,
        punch_hole: false,
        zero_range: false,
    };
    fs.fallocate(f, keep, 64 << 10, 8 << 20).unwrap();
    let (g, _) = fill(&fs, b"fill");
    fs.sync().unwrap();
    let st = fs.statfs().unwrap();
    assert_eq!(
        st.avail_blocks, 0,
        "data stopped short of the reserve: {st:?}"
    );
    assert!(st.free_blocks > 0, "the reserve is free: {st:?}");
    let chunk = [7u8; 64 << 10];
    for i in (1..128u64).step_by(2).chain((2..128u64).step_by(2)) {
        fs.write(f, i * (64 << 10), &chunk)
            .unwrap_or_else(|e| panic!("write at chunk {i}: {e}"));
    }
    assert!(fs.diagnostics().extent_count(f).unwrap() >= 1);
    let mut back = vec![0u8; 64 << 10];
    for i in 1..128u64 {
        fs.read(f, i * (64 << 10), &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 7), "chunk {i} reads back");
    }
    fs.diagnostics().check_allocator().unwrap();
    fs.release(f).unwrap();
    fs.release(g).unwrap();
    fs.unmount().unwrap();
    if common::require_tools(
        "writes_into_preallocated_space_succeed_on_a_full_disk",
        &["e2fsck"],
    ) {
        common::assert_fsck_clean(&img);
    }
}

/// Eight threads fill the disk with data at once: together they stop short of the
/// reserve (2% of the blocks), give or take a block each, however their allocations
/// interleave between the allocator's sums of the free count.
#[test]
fn threads_filling_at_once_leave_the_reserve() {
    let td = tempfile::tempdir().unwrap();
    let img = td.path().join("threads.img");
    let dev = FileDevice::create(&img, 64 << 20).unwrap();
    format(&dev, &MkfsOptions::default()).unwrap();
    drop(dev);
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
    let blocks = fs.statfs().unwrap().blocks;
    let reserve = (blocks / 50).min(4096);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let name = format!("fill{t}");
                let (g, _) = fill(&fs, name.as_bytes());
                fs.release(g).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    fs.sync().unwrap();
    let st = fs.statfs().unwrap();
    // Data stops at the reserve; metadata may take from it: each of the 8 threads at most
    // the two blocks one extent split can need once data is refused (a new leaf, and an
    // index block when the tree grows a level).
    assert!(
        st.free_blocks + 16 >= reserve && st.free_blocks <= reserve + 64,
        "{} blocks free after the fill, reserve {reserve}",
        st.free_blocks
    );
    assert_eq!(st.avail_blocks, 0);
    fs.diagnostics().check_allocator().unwrap();
    fs.unmount().unwrap();
    if common::require_tools("threads_filling_at_once_leave_the_reserve", &["e2fsck"]) {
        common::assert_fsck_clean(&img);
    }
}
