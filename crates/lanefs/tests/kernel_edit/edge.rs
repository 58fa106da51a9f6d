//! Shapes the main run does not reach: htrees hashed with TEA and with the legacy hash, the
//! longest extents, extent trees at their exact capacities, directories with an extent index,
//! the last logical blocks a file can have, and (ignored, a known limitation) files the
//! kernel maps with indirect blocks.

use super::*;

/// Shapes the main run does not reach: htrees hashed with TEA and with the legacy hash
/// (`tune2fs -E hash_alg=`), extents at their longest (32,768 written blocks, 32,767
/// unwritten), and directories whose own extent tree has an index level.
#[test]
fn kernel_edit_edge_shapes() {
    let test = "kernel_edit_edge_shapes";
    let _wd = watchdog(test, 900);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io", "tune2fs"]) {
        return;
    }
    let t0 = Instant::now();
    for alg in ["tea", "legacy"] {
        let img = mkfs_image(td.path(), &format!("{alg}.img"), 256 << 20);
        run(Command::new("tune2fs")
            .arg("-E")
            .arg(format!("hash_alg={alg}"))
            .arg(&img))
        .expect("tune2fs -E hash_alg");
        let mut w = World::new(td.path(), img, 11, 100);
        w.mount_kernel();
        w.mkdir("/k");
        for _ in 0..3000 {
            let p = format!("/k/{}", w.rand_name("/k"));
            w.create(p, 3);
        }
        let (_, count) = w.htree(&format!("{alg}: the kernel built /k"), "/k");
        assert!(count > 1, "{alg}: the kernel did not index /k");
        w.mount_lanefs();
        for k in 0..5 {
            for _ in 0..100 {
                let p = format!("/k/{}", w.rand_name("/k"));
                w.create(p, 3);
            }
            w.unlink_some("/k", 30);
            w.check(&format!("{alg}: lanefs edits the kernel's htree ({k})"));
        }
        w.mkdir("/l");
        for _ in 0..3000 {
            let p = format!("/l/{}", w.rand_name("/l"));
            w.create(p, 3);
        }
        w.mount_kernel();
        w.long_creates("/l", 500);
        w.unlink_some("/l", 500);
        w.check(&format!("{alg}: the kernel edits lanefs's htree"));
        w.mount_lanefs();
        w.remove_tree("/k");
        w.check(&format!("{alg}: lanefs removes the kernel's htree"));
        w.note(&format!("{test}: {alg} htrees both ways"));
    }

    // The longest extents: the kernel fallocates 140 MiB (unwritten extents of 32,767
    // blocks) and writes 130 MiB (written extents of 32,768); lanefs writes and punches at
    // and around their ends, then fallocates over the lot.
    let img = mkfs_image(td.path(), "long.img", 1 << 30);
    let mut w = World::new(td.path(), img, 12, 100);
    w.mount_kernel();
    w.create("/u".into(), 0);
    w.kernel_xfs_io(
        "/u",
        vec![Op::Falloc {
            path: "/u".into(),
            off: 0,
            len: 140 << 20,
            keep_size: false,
            punch: false,
        }],
    );
    w.create("/w".into(), 0);
    let data = w.rand_data(130 << 20);
    w.op(Op::Write {
        path: "/w".into(),
        off: 0,
        data,
    });
    w.shape("the kernel's longest extents", "/u");
    w.shape("the kernel's longest extents", "/w");
    w.mount_lanefs();
    for (off, len) in [
        (32767 * BS - 10, 100),
        (10, 10),
        (32767 * BS, 5),
        (100 << 20, 1 << 20),
        ((140 << 20) - 1, 1),
    ] {
        let data = w.rand_data(len);
        w.op(Op::Write {
            path: "/u".into(),
            off,
            data,
        });
        w.shape("lanefs writes into the longest unwritten extents", "/u");
    }
    for (off, len) in [(32768 * BS - 10, 100), (10, 10), (100 << 20, 1 << 20)] {
        let data = w.rand_data(len);
        w.op(Op::Write {
            path: "/w".into(),
            off,
            data,
        });
        for punch in [true, false] {
            w.op(Op::Falloc {
                path: "/w".into(),
                off: off + 3 * BS,
                len: 2 * BS,
                keep_size: true,
                punch,
            });
        }
        w.shape("lanefs edits the longest written extents", "/w");
    }
    for (off, len, punch) in [
        (0, 140 << 20, false),
        (5 * BS, 100 << 20, true),
        (0, 150 << 20, false),
    ] {
        w.op(Op::Falloc {
            path: "/u".into(),
            off,
            len,
            keep_size: false,
            punch,
        });
    }
    w.shape("lanefs fallocates over punched extents", "/u");
    w.mount_kernel();
    w.op(Op::Falloc {
        path: "/u".into(),
        off: 3 * BS,
        len: 40000 * BS,
        keep_size: true,
        punch: true,
    });
    w.op(Op::Truncate {
        path: "/w".into(),
        size: 33000 * BS + 7,
    });
    w.shape("the kernel punches and truncates after lanefs", "/u");
    w.note(&format!("{test}: longest extents"));

    // Extent trees at their exact capacities, a full root in the inode (4 extents) and a
    // full depth-1 tree (4 leaves of 340): one side builds, the other adds the extent
    // that needs a new level, then one in the middle of a full leaf.
    let img = mkfs_image(td.path(), "cap.img", 256 << 20);
    let mut w = World::new(td.path(), img, 14, 100);
    for (builder, n) in [
        ("kernel", 4u64),
        ("kernel", 1360),
        ("lanefs", 4),
        ("lanefs", 1360),
    ] {
        let path = format!("/{builder}_{n}");
        if builder == "kernel" {
            w.mount_kernel();
        } else {
            w.mount_lanefs();
        }
        w.create(path.clone(), 0);
        w.alternate_blocks(&path, 0, n);
        let (leaves, depth) = w.shape(&format!("{builder} fills a tree to capacity"), &path);
        assert_eq!((leaves, depth), (n as usize, u32::from(n > 4)), "{path}");
        if builder == "kernel" {
            w.mount_lanefs();
        } else {
            w.mount_kernel();
        }
        w.alternate_blocks(&path, 2 * n, 1);
        let (_, depth) = w.shape("the other side adds one extent", &path);
        assert_eq!(depth, if n > 4 { 2 } else { 1 }, "{path}");
        w.alternate_blocks(&path, 1, 1);
        w.shape("the other side inserts into a full leaf", &path);
    }
    w.note(&format!("{test}: trees at capacity"));

    // Directories with an extent index: lanefs interleaves directory growth with file
    // data, the kernel grows the directory further, lanefs removes it.
    let img = mkfs_image(td.path(), "dirs.img", 256 << 20);
    let mut w = World::new(td.path(), img, 13, 100);
    w.mount_lanefs();
    w.mkdir("/s");
    w.mkdir("/d");
    for i in 0..80 {
        w.long_creates("/d", 16);
        w.create(format!("/s/l{i}"), 8192);
    }
    let (leaves, depth) = w.shape("lanefs fragments a directory", "/d");
    assert!(depth >= 1, "/d has {leaves} extents at depth {depth}");
    w.mount_kernel();
    for i in 0..40 {
        w.long_creates("/d", 16);
        w.create(format!("/s/k{i}"), 8192);
        if i % 8 == 7 {
            w.check("the kernel grows lanefs's fragmented directory");
        }
    }
    w.mount_lanefs();
    w.unlink_some("/d", 1000);
    w.check("lanefs empties the fragmented directory");
    w.remove_tree("/d");
    w.check("lanefs removes the fragmented directory");
    w.note(&format!(
        "{test}: done ({:.1} s)",
        t0.elapsed().as_secs_f64()
    ));
}

/// The last logical blocks a file can have (`s_maxbytes` is (2^32 - 1) blocks): the kernel
/// writes the very last one, lanefs reads it, writes and punches beside it, truncates,
/// and the kernel reads every byte back. (The model cannot hold a 16 TiB file; the bytes
/// are checked at their offsets.)
#[test]
fn kernel_edit_last_logical_blocks() {
    use std::os::unix::fs::FileExt;
    let test = "kernel_edit_last_logical_blocks";
    let _wd = watchdog(test, 300);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let img = mkfs_image(td.path(), "max.img", 256 << 20);
    let mnt = td.path().join("mnt");
    let last = ((1u64 << 32) - 2) * BS; // offset of the last block
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let f = std::fs::File::create(mnt.join("f")).expect("create");
    f.write_all_at(b"kernel's last block", last + 100)
        .expect("kernel writes the last block");
    f.write_all_at(b"head", 0).expect("kernel writes block 0");
    drop(f);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel wrote the last block").unwrap_or_else(|e| panic!("{e}"));

    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let ino = fs.lookup(ROOT_INO, b"f").expect("lookup").ino;
    let size = last + 100 + 19;
    assert_eq!(fs.getattr(ino).expect("getattr").size, size);
    let mut buf = [0u8; 19];
    assert_eq!(fs.read(ino, last + 100, &mut buf).expect("read"), 19);
    assert_eq!(&buf, b"kernel's last block");
    fs.write(ino, last - 3 * BS, b"lanefs three before")
        .expect("lanefs writes near the end");
    fs.write(ino, last - BS + 4000, &[7u8; 200])
        .expect("lanefs writes across into the last block");
    let punch = FallocMode {
        keep_size: true,
        punch_hole: true,
        zero_range: false,
    };
    fs.fallocate(ino, punch, last - 3 * BS, BS)
        .expect("lanefs punches near the end");
    let alloc = FallocMode {
        keep_size: true,
        punch_hole: false,
        zero_range: false,
    };
    fs.fallocate(ino, alloc, last - 10 * BS, 5 * BS)
        .expect("lanefs fallocates near the end");
    fs.unmount().expect("lanefs unmount");
    fsck_clean(&img, "after lanefs edited the last blocks").unwrap_or_else(|e| panic!("{e}"));

    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let f = std::fs::File::open(mnt.join("f")).expect("open");
    assert_eq!(f.metadata().expect("stat").len(), size);
    let mut got = vec![0u8; (3 * BS + 119) as usize];
    f.read_exact_at(&mut got, last - 3 * BS)
        .expect("kernel reads");
    let mut want = vec![0u8; got.len()];
    want[(3 * BS + 100) as usize..(3 * BS + 119) as usize].copy_from_slice(b"kernel's last block");
    // lanefs's 200 bytes of 7 came after, over the first 4 bytes of the kernel's.
    want[(2 * BS + 4000) as usize..(3 * BS + 104) as usize].fill(7);
    assert!(
        got == want,
        "the kernel reads other bytes in the last blocks"
    );
    drop(f);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("f"))
        .expect("open");
    f.set_len(last - 5 * BS + 1).expect("kernel truncates");
    drop(f);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel truncated").unwrap_or_else(|e| panic!("{e}"));

    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let ino = fs.lookup(ROOT_INO, b"f").expect("lookup").ino;
    let mut head = [0u8; 4];
    fs.read(ino, 0, &mut head).expect("read");
    assert_eq!(&head, b"head");
    fs.setattr(
        ino,
        &SetAttr {
            size: Some(BS),
            ..Default::default()
        },
    )
    .expect("lanefs truncates");
    fs.unmount().expect("lanefs unmount");
    fsck_clean(&img, "after lanefs truncated").unwrap_or_else(|e| panic!("{e}"));
}

/// Known limitation, not fixed here: a file the kernel moved back to indirect block
/// maps (`chattr -e`, which Linux allows for a file of at most 12 blocks; it then grows
/// with indirect blocks) cannot be read, written, truncated or even unlinked by lanefs
/// ("uses indirect block maps"), so neither can its directory be removed. Nothing is
/// corrupted. A fix would load indirect maps into the extent map (`inode::load_extents`,
/// the indirect blocks as the old tree's blocks) and convert the file to extents on its
/// first change, as the kernel's own migration does.
#[test]
#[ignore = "lanefs refuses files with indirect block maps (inode::load_extents)"]
fn kernel_indirect_block_maps() {
    let test = "kernel_indirect_block_maps";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["chattr"]) {
        return;
    }
    let img = mkfs_image(td.path(), "ind.img", 256 << 20);
    let mut w = World::new(td.path(), img, 17, 100);
    w.mount_kernel();
    w.mkdir("/d");
    for f in ["/d/small", "/d/big"] {
        w.create(f.into(), 5 * BS as usize);
        w.op(Op::Sync {
            path: Some(f.into()),
        });
        w.kernel_cmd("chattr", &["-e"], f);
    }
    // Past 12 blocks: an indirect block, past 1,036 a double-indirect one.
    let data = w.rand_data(3000 * BS as usize);
    w.op(Op::Write {
        path: "/d/big".into(),
        off: 5 * BS,
        data,
    });
    w.check("the kernel wrote files with indirect block maps");
    w.mount_lanefs();
    w.op(Op::Write {
        path: "/d/small".into(),
        off: 100,
        data: b"lanefs".to_vec(),
    });
    w.op(Op::Truncate {
        path: "/d/big".into(),
        size: 2000 * BS + 1,
    });
    w.op(Op::Unlink {
        path: "/d/small".into(),
    });
    w.remove_tree("/d");
    w.check("lanefs edited and removed them");
}
