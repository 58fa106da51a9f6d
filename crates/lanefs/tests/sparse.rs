//! Goal: holes cost per extent, not per byte. `Fs::seek_data` / `Fs::seek_hole` answer as
//! lseek(2) does on the kernel's ext4 for the same file, and reading or walking a file
//! whose size dwarfs its extents (a legal 15 TiB sparse file, or a corrupt size) is
//! bounded work.
//! Method: a file with data, holes and unwritten extents, built by the kernel and by
//! lanefs, compared offset by offset against the kernel's lseek; a 15 TiB sparse file
//! walked extent by extent under a watchdog.

mod common;

use common::{kernel_ready, mkfs_image, watchdog, KernelMount};
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{FallocMode, FileDevice, Fs, MountOptions, Owner, SetAttr, ROOT_INO};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::Command;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The data segments of `ino` as `[start, end)` pairs, found with seek_data/seek_hole.
fn segments(fs: &Fs, ino: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(d) = fs.seek_data(ino, pos).unwrap() {
        let h = fs.seek_hole(ino, d).unwrap().expect("a hole after data");
        assert!(h > d, "seek_hole({d}) = {h}");
        out.push((d, h));
        pos = h;
    }
    out
}

/// An image file of `size` bytes in `dir`, formatted by lanefs with `opts`.
fn lanefs_image(dir: &Path, name: &str, size: u64, opts: &MkfsOptions) -> std::path::PathBuf {
    let img = dir.join(name);
    let dev = FileDevice::create(&img, size).unwrap();
    format(&dev, opts).unwrap();
    img
}

/// lseek(fd, off, whence) as Some(offset), None for ENXIO.
fn host_seek(f: &std::fs::File, off: u64, whence: i32) -> Option<u64> {
    // SAFETY: lseek only reads the descriptor's state; `f` keeps the descriptor open.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off as libc::off_t, whence) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::ENXIO), "lseek({off}): {e}");
        None
    } else {
        Some(r as u64)
    }
}

/// The offsets worth asking about: every 2 KiB up to `end` plus each block edge +-1.
fn probes(end: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..end).step_by(2048).collect();
    for b in (0..=end).step_by(4096) {
        v.extend([b.saturating_sub(1), b, b + 1]);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Lay out: data at 0..4K, a hole, data at 1M..1M+12K, an unwritten extent at 2M..2M+64K
/// with 4K written inside it, a hole to the 5 MiB size. Through the kernel (`host`) or
/// lanefs (`fs`).
fn layout_lanefs(fs: &Fs, ino: u64) {
    fs.write(ino, 0, &[1u8; 4096]).unwrap();
    fs.write(ino, MIB, &[2u8; 12288]).unwrap();
    let keep = FallocMode {
        keep_size: false,
        punch_hole: false,
        zero_range: false,
    };
    fs.fallocate(ino, keep, 2 * MIB, 64 * KIB).unwrap();
    fs.write(ino, 2 * MIB + 16 * KIB, &[3u8; 4096]).unwrap();
    let set = SetAttr {
        size: Some(5 * MIB),
        ..SetAttr::default()
    };
    fs.setattr(ino, &set).unwrap();
}

fn layout_host(p: &Path) {
    let script = format!(
        "xfs_io -f -c 'pwrite -S 1 0 4k' -c 'pwrite -S 2 1m 12k' -c 'falloc 2m 64k' \
         -c 'pwrite -S 3 {} 4k' -c 'truncate 5m' -c fsync {}",
        2 * MIB + 16 * KIB,
        p.display()
    );
    common::run(Command::new("sh").arg("-c").arg(script)).unwrap();
}

/// Compare lanefs's answers for `ino` with the kernel's lseek on `host`, at every probe.
fn compare(fs: &Fs, ino: u64, host: &std::fs::File, what: &str) {
    let size = host.metadata().unwrap().len();
    for off in probes(size + 8192) {
        let kd = host_seek(host, off, libc::SEEK_DATA);
        let kh = host_seek(host, off, libc::SEEK_HOLE);
        assert_eq!(
            fs.seek_data(ino, off).unwrap(),
            kd,
            "{what}: SEEK_DATA {off}"
        );
        assert_eq!(
            fs.seek_hole(ino, off).unwrap(),
            kh,
            "{what}: SEEK_HOLE {off}"
        );
    }
}

#[test]
fn seek_data_and_hole_match_the_kernel() {
    let td = tempfile::tempdir().unwrap();
    if !kernel_ready(
        "seek_data_and_hole_match_the_kernel",
        td.path(),
        &["xfs_io"],
    ) {
        return;
    }
    let img = mkfs_image(td.path(), "k.img", 64 * MIB);
    let mnt = td.path().join("mnt");
    // The kernel builds one file, lanefs the other.
    let m = KernelMount::mount(&img, &mnt, "").unwrap();
    layout_host(&mnt.join("kfile"));
    m.unmount().unwrap();
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let me = Owner::default();
    let l = fs.create(ROOT_INO, b"lfile", 0o644, me).unwrap();
    layout_lanefs(&fs, l.ino);
    fs.release(l.ino).unwrap();
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);

    let m = KernelMount::mount(&img, &mnt, "ro").unwrap();
    let kfile = std::fs::File::open(mnt.join("kfile")).unwrap();
    let lfile = std::fs::File::open(mnt.join("lfile")).unwrap();
    let fs = Fs::mount_path(
        &img,
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    )
    .unwrap();
    let k = fs.lookup(ROOT_INO, b"kfile").unwrap();
    let l = fs.lookup(ROOT_INO, b"lfile").unwrap();
    compare(&fs, k.ino, &kfile, "kernel-built file");
    compare(&fs, l.ino, &lfile, "lanefs-built file");
    let want = vec![
        (0, 4096),
        (MIB, MIB + 12288),
        (2 * MIB + 16 * KIB, 2 * MIB + 20 * KIB),
    ];
    assert_eq!(segments(&fs, k.ino), want);
    assert_eq!(segments(&fs, l.ino), want);
    drop((kfile, lfile));
    drop(fs);
    m.unmount().unwrap();
}

/// A 15 TiB file with three small extents: walking its data costs three steps, and a
/// read of a 1 MiB window in the middle of the hole costs no more than one of data.
#[test]
fn huge_sparse_file_is_walked_per_extent() {
    let _wd = watchdog("huge_sparse_file_is_walked_per_extent", 60);
    let td = tempfile::tempdir().unwrap();
    let img = lanefs_image(td.path(), "s.img", 64 << 20, &MkfsOptions::default());
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let f = fs
        .create(ROOT_INO, b"big", 0o644, Owner::default())
        .unwrap();
    let tib = 1u64 << 40;
    for (off, byte) in [(0, 1u8), (7 * tib, 2), (15 * tib - 4096, 3)] {
        fs.write(f.ino, off, &[byte; 4096]).unwrap();
    }
    assert_eq!(fs.getattr(f.ino).unwrap().size, 15 * tib);
    assert_eq!(
        segments(&fs, f.ino),
        vec![
            (0, 4096),
            (7 * tib, 7 * tib + 4096),
            (15 * tib - 4096, 15 * tib)
        ]
    );
    let mut buf = vec![9u8; MIB as usize];
    for _ in 0..64 {
        assert_eq!(fs.read(f.ino, 3 * tib, &mut buf).unwrap(), buf.len());
    }
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(fs.seek_data(f.ino, 15 * tib).unwrap(), None);
    assert_eq!(fs.seek_hole(f.ino, 15 * tib + 1).unwrap(), None);
    fs.release(f.ino).unwrap();
    fs.unmount().unwrap();
}

/// Goal: an extent tree of many leaves stays exact when it changes anywhere. A store
/// rewrites only the leaves from the first changed extent on (`inode::store_tree`); a
/// leaf it keeps must still hold what the map has. Method: on 1 KiB blocks (84 extents a
/// leaf) a file of 600 one-block extents takes seeded writes and punches at its start,
/// middle and end, every one checked against a model of its data blocks through
/// seek_data/seek_hole and, every 25 edits and at the end, after a remount (the tree
/// read back from disk) and `e2fsck -fn`; a sync every 5 edits writes the sealed tree
/// blocks home between changes. (A leaf rewritten in place after the buffer cache dropped
/// it is `fs::tests::leaf_rewritten_after_a_reread_is_sealed`.)
#[test]
fn many_leaf_tree_edits_anywhere_read_back_exact() {
    let _wd = watchdog("many_leaf_tree_edits_anywhere_read_back_exact", 300);
    let td = tempfile::tempdir().unwrap();
    let opts = MkfsOptions {
        block_size: Some(1024),
        ..MkfsOptions::default()
    };
    let img = lanefs_image(td.path(), "leaves.img", 32 << 20, &opts);
    const BS: u64 = 1024;
    let mount = || Fs::mount_path(&img, MountOptions::default()).unwrap();
    let mut fs = mount();
    let ino = fs
        .create(ROOT_INO, b"f", 0o644, Owner::default())
        .unwrap()
        .ino;
    fs.release(ino).unwrap();
    // The model: which blocks hold data, and the byte each holds.
    let mut model = std::collections::BTreeMap::new();
    for b in (0..1200u64).step_by(2) {
        fs.write(ino, b * BS, &[(b % 251) as u8 + 1; BS as usize])
            .unwrap();
        model.insert(b, (b % 251) as u8 + 1);
    }
    let runs = |m: &std::collections::BTreeMap<u64, u8>| {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &b in m.keys() {
            match out.last_mut() {
                Some(r) if r.1 == b * BS => r.1 += BS,
                _ => out.push((b * BS, (b + 1) * BS)),
            }
        }
        out
    };
    let check = |fs: &Fs, m: &std::collections::BTreeMap<u64, u8>, what: &str| {
        assert_eq!(segments(fs, ino), runs(m), "{what}");
        let mut buf = vec![0u8; BS as usize];
        for (&b, &v) in m {
            fs.read(ino, b * BS, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x == v), "{what}: block {b}");
        }
    };
    check(&fs, &model, "after the fill");
    let mut rng = common::Rng(0x5eed_1eaf);
    for step in 0..200 {
        let end = model.keys().next_back().map_or(0, |&b| b + 1);
        // A third at the start, a third in the middle, a third at or past the end.
        let at = match rng.below(3) {
            0 => rng.below(100),
            1 => end / 2 + rng.below(100),
            _ => end.saturating_sub(20) + rng.below(40),
        };
        let len = 1 + rng.below(3);
        if rng.below(2) == 0 {
            let v = (step % 250) as u8 + 1;
            fs.write(ino, at * BS, &vec![v; (len * BS) as usize])
                .unwrap();
            for b in at..at + len {
                model.insert(b, v);
            }
        } else {
            let punch = FallocMode {
                punch_hole: true,
                keep_size: true,
                ..FallocMode::default()
            };
            fs.fallocate(ino, punch, at * BS, len * BS).unwrap();
            for b in at..at + len {
                model.remove(&b);
            }
        }
        check(&fs, &model, &format!("step {step}"));
        if step % 5 == 4 {
            fs.sync().unwrap();
        }
        if step % 25 == 24 {
            fs.unmount().unwrap();
            common::assert_fsck_clean(&img);
            fs = mount();
            check(&fs, &model, &format!("step {step}, remounted"));
        }
    }
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);
}
