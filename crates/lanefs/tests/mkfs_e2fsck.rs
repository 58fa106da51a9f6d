//! Goal: every shape `lanefs::mkfs::format` makes is a clean file system to e2fsprogs and
//! to the kernel, with the features asked for, and the same shape mke2fs makes from the
//! same options.
//! Method: a matrix of shapes (block sizes x ext2/ext3/ext4, notable `-O` sets, `-N`,
//! `-I`, `-i`, `-T`), each formatted into a sparse image and checked by `e2fsck -fn` and
//! `dumpe2fs -h`; where the kernel can mount the block size (up to 4096 here) and we are
//! root, a loop mount writes and reads a file and `e2fsck -fn` checks again. A sample of
//! shapes is compared header line by header line with what `mke2fs` makes. Argument
//! errors are one-line `Error::Invalid`s. The fixed default shape (`MkfsOptions::default`)
//! keeps its old sizes.

mod common;

use common::{assert_fsck_clean, have_tool, is_root, skip, KernelMount};
use lanefs::internals::disk::superblock::Superblock;
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{BlockDevice, Error, FileDevice, MemDevice};
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// Options from mke2fs-style arguments ("-t ext3 -b 1024 -O ^has_journal -N 100"), on top
/// of `MkfsOptions::mke2fs()`; the same words run mke2fs in `same_header_as_mke2fs`.
fn opts(args: &str) -> MkfsOptions {
    let mut o = MkfsOptions::mke2fs();
    let words: Vec<&str> = args.split_whitespace().collect();
    for pair in words.chunks(2) {
        let (flag, v) = (pair[0], pair[1]);
        match flag {
            "-t" => o.fs_type = Some(v.into()),
            "-T" => o.usage_types = Some(v.into()),
            "-O" => {
                if !o.features.is_empty() {
                    o.features.push(',');
                }
                o.features.push_str(v);
            }
            "-b" => o.block_size = Some(v.parse().unwrap()),
            "-I" => o.inode_size = Some(v.parse().unwrap()),
            "-i" => o.inode_ratio = Some(v.parse().unwrap()),
            "-N" => o.inodes = Some(v.parse().unwrap()),
            "-J" => o.journal_blocks = Some(v.parse().unwrap()),
            "-L" => o.label = v.into(),
            other => panic!("unknown flag {other}"),
        }
    }
    o
}

/// Format a sparse image of `size` bytes at `dir/name`.
fn make_image(dir: &Path, name: &str, size: u64, o: &MkfsOptions) -> PathBuf {
    let path = dir.join(name);
    let dev = FileDevice::create(&path, size).expect("create image");
    if let Err(e) = format(&dev, o) {
        panic!("format {o:?}: {e}");
    }
    path
}

/// `dumpe2fs -h` output.
fn dumpe2fs(path: &Path) -> String {
    let out = Command::new("dumpe2fs")
        .arg("-h")
        .arg(path)
        .output()
        .expect("run dumpe2fs");
    assert!(
        out.status.success(),
        "dumpe2fs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of a `Name:   value` line of dumpe2fs.
fn field<'a>(dump: &'a str, name: &str) -> &'a str {
    dump.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {name:?} in dumpe2fs output:\n{dump}"))
}

/// Whether the kernel can be asked to mount images here; says why not once per test.
fn kernel_ok(test: &str) -> bool {
    if !is_root() {
        skip(test, "not root: no kernel loop mounts");
        return false;
    }
    if !have_tool("mount") {
        skip(test, "mount not found");
        return false;
    }
    true
}

/// Loop-mount `img`, write a file and a directory, read the file back, unmount.
fn kernel_round_trip(img: &Path, what: &str) {
    let mnt = img.with_extension("mnt");
    let m = KernelMount::mount(img, &mnt, "")
        .unwrap_or_else(|e| panic!("{what}: the kernel refused the image: {e}"));
    assert!(mnt.join("lost+found").is_dir(), "{what}: no lost+found");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(mnt.join("file.bin"), &data).expect("write in the kernel mount");
    std::fs::create_dir(mnt.join("dir")).expect("mkdir in the kernel mount");
    assert_eq!(std::fs::read(mnt.join("file.bin")).unwrap(), data, "{what}");
    m.unmount().unwrap_or_else(|e| panic!("{what}: {e}"));
    println!("kernel round trip: {what}");
}

/// One shape: format, `e2fsck -fn`, the features asked for (and not those turned off)
/// in `dumpe2fs -h`, the block size; then the kernel round trip when it can mount it.
fn check_shape(dir: &Path, size: u64, args: &str, kernel: bool) {
    let o = opts(args);
    let img = make_image(dir, "shape.img", size, &o);
    let what = format!("{} MiB, {args:?}", size >> 20);
    let (code, text) = common::e2fsck(&img);
    assert_eq!(code, 0, "{what}: e2fsck -fn exited {code}:\n{text}");
    let dump = dumpe2fs(&img);
    let features: Vec<&str> = field(&dump, "Filesystem features").split(' ').collect();
    for word in o.features.split(',').filter(|w| !w.is_empty()) {
        let (off, name) = match word.strip_prefix('^') {
            Some(n) => (true, n),
            None => (false, word),
        };
        let name = if name == "extents" { "extent" } else { name };
        assert_eq!(
            features.contains(&name),
            !off,
            "{what}: feature {name} in {features:?}"
        );
    }
    let has = |f: &str| features.contains(&f);
    match o.fs_type.as_deref() {
        Some("ext2") => assert!(!has("has_journal") && !has("metadata_csum"), "{what}"),
        Some("ext3") => assert!(has("has_journal") && !has("extent"), "{what}"),
        _ => {}
    }
    let bs: u64 = field(&dump, "Block size").parse().unwrap();
    if let Some(want) = o.block_size {
        assert_eq!(bs, u64::from(want), "{what}");
    }
    if kernel && bs <= 4096 {
        kernel_round_trip(&img, &what);
        let (code, text) = common::e2fsck(&img);
        assert_eq!(code, 0, "{what}: after the kernel wrote, e2fsck:\n{text}");
    }
    std::fs::remove_file(&img).expect("remove image");
}

/// Run `shapes` (size, args) under `test`, skipping without e2fsprogs.
fn matrix(test: &str, shapes: &[(u64, &str)]) {
    if !common::require_tools(test, &["e2fsck", "dumpe2fs"]) {
        return;
    }
    let kernel = kernel_ok(test);
    let td = tempfile::tempdir().expect("tempdir");
    for &(size, args) in shapes {
        println!("{test}: {} MiB {args}", size >> 20);
        check_shape(td.path(), size, args, kernel);
    }
}

#[test]
fn matrix_block_sizes_and_types() {
    let mut shapes = Vec::new();
    for bs in ["1024", "2048", "4096", "65536"] {
        for t in ["ext2", "ext3", "ext4"] {
            shapes.push(format!("-t {t} -b {bs}"));
        }
    }
    // The defaults by size: floppy, small (1 KiB blocks), default (4 KiB).
    let mut list: Vec<(u64, &str)> = shapes.iter().map(|s| (160 * MIB, s.as_str())).collect();
    list.extend([
        (1440 << 10, "-t ext4"),
        (2 * MIB, "-t ext2"),
        (600 * MIB, "-t ext3"),
        (600 * MIB, "-t ext4"),
    ]);
    matrix("matrix_block_sizes_and_types", &list);
}

#[test]
fn matrix_features() {
    let sets = [
        "-O ^resize_inode -O meta_bg",
        "-O ^resize_inode,meta_bg,^has_journal -b 1024",
        "-O mmp",
        "-O mmp -t ext3",
        "-O inline_data",
        "-O sparse_super2",
        "-O metadata_csum_seed",
        "-O ^metadata_csum,uninit_bg",
        "-O ^flex_bg",
        "-O ^extent,^64bit",
        "-O ^has_journal",
        "-O ^sparse_super,^resize_inode",
        "-O ^filetype,^dir_index",
        "-O ^huge_file,^dir_nlink,^extra_isize,^large_file",
        "-O ^ext_attr",
        "-t ext3 -O uninit_bg",
        "-t ext3 -O metadata_csum",
        "-t ext2 -O flex_bg,uninit_bg",
        "-t ext2 -O extent,dir_nlink",
        "-b 4096 -O ^resize_inode,meta_bg",
        "-b 4096 -t ext3 -O ^resize_inode,meta_bg",
    ];
    let list: Vec<(u64, &str)> = sets.iter().map(|s| (200 * MIB, *s)).collect();
    matrix("matrix_features", &list);
}

#[test]
fn matrix_inodes() {
    let list = [
        (200 * MIB, "-I 128"),
        (200 * MIB, "-I 512 -b 4096"),
        (200 * MIB, "-I 1024"),
        (200 * MIB, "-N 100"),
        (200 * MIB, "-N 200000 -b 4096"),
        (200 * MIB, "-N 40000 -t ext2"),
        (200 * MIB, "-i 4096 -t ext3"),
        (200 * MIB, "-T largefile"),
        (200 * MIB, "-T news -b 4096"),
        (200 * MIB, "-T hurd"),
        (2048 * MIB, "-T big"),
        (300 * MIB, "-J 4096 -t ext3 -b 1024"),
    ];
    matrix("matrix_inodes", &list);
}

/// The header `dumpe2fs -h` prints for lanefs's image and for mke2fs's, made with the
/// same options and size, agrees line by line but for what is random or timed (UUIDs,
/// seeds, times, checksums, the MMP device name) and the journal features (lanefs writes
/// the features its engine logs with; mke2fs leaves them for the first mount).
#[test]
fn same_header_as_mke2fs() {
    let test = "same_header_as_mke2fs";
    if !common::require_tools(test, &["e2fsck", "dumpe2fs", "mke2fs"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let random = [
        "UUID",
        "created",
        "time",
        "Last",
        "Hash Seed",
        "Checksum:",
        "Lifetime",
        "Journal features",
        "Checksum seed",
        "mmp_",
        "Journal checksum",
    ];
    let header = |p: &Path| -> Vec<String> {
        dumpe2fs(p)
            .lines()
            .filter(|l| !random.iter().any(|r| l.contains(r)))
            .map(str::to_string)
            .collect()
    };
    let shapes = [
        (64 * MIB, "-t ext4"),
        (150 << 10, "-t ext4"),
        (1440 << 10, "-t ext2"),
        (600 * MIB, "-t ext3"),
        (200 * MIB, "-t ext2 -b 2048"),
        (300 * MIB, "-t ext4 -b 65536"),
        (4096 * MIB, "-t ext4"),
        (200 * MIB, "-t ext4 -O ^resize_inode,meta_bg"),
        (200 * MIB, "-t ext4 -O ^flex_bg -I 128"),
        (200 * MIB, "-t ext4 -O mmp,sparse_super2"),
        (200 * MIB, "-t ext2 -O flex_bg,uninit_bg -N 3000"),
        (200 * MIB, "-t ext4 -T largefile -b 4096"),
    ];
    for (size, args) in shapes {
        let ours = make_image(td.path(), "lanefs.img", size, &opts(args));
        let theirs = td.path().join("mke2fs.img");
        let f = std::fs::File::create(&theirs).unwrap();
        f.set_len(size).unwrap();
        drop(f);
        let out = Command::new("mke2fs")
            .args(["-q", "-F"])
            .args(args.split_whitespace())
            .arg(&theirs)
            .output()
            .expect("run mke2fs");
        assert!(out.status.success(), "mke2fs {args}: {out:?}");
        assert_eq!(header(&ours), header(&theirs), "{} bytes, {args}", size);
        assert_fsck_clean(&ours);
    }
}

/// Refused options and combinations: one-line `Error::Invalid`s naming what is wrong,
/// before anything is written.
#[test]
fn argument_errors_are_one_line() {
    let dev = MemDevice::new(64 * MIB);
    let cases = [
        ("-O foo", "unknown feature 'foo'"),
        ("-O quota", "not supported"),
        ("-b 3000", "invalid block size 3000"),
        ("-b 512", "invalid block size 512"),
        ("-b 131072", "invalid block size"),
        ("-I 100", "invalid inode size 100"),
        ("-I 2048 -b 1024", "invalid inode size 2048"),
        ("-i 512", "invalid inode ratio"),
        ("-N 5000000000", "too many inodes"),
        ("-t ext5", "unknown file system type 'ext5'"),
        ("-T tiny", "unknown usage type 'tiny'"),
        ("-O meta_bg", "resize_inode and meta_bg"),
        ("-O ^extent", "64bit requires the extent feature"),
        ("-t ext2 -O 64bit", "64bit requires the extent feature"),
        ("-O ^sparse_super", "resize_inode requires sparse_super"),
        (
            "-O ^metadata_csum,metadata_csum_seed",
            "requires metadata_csum",
        ),
        (
            "-O inline_data -I 128",
            "inline_data requires inodes of at least 256",
        ),
        ("-O ^ext_attr,inline_data", "inline_data requires ext_attr"),
        ("-J 100", "journal of 100 blocks out of range"),
        ("-J 40000", "more than half"),
        ("-L 12345678901234567", "longer than 16 bytes"),
    ];
    for (args, want) in cases {
        let r = format(&dev, &opts(args));
        let Err(Error::Invalid(msg)) = &r else {
            panic!("{args}: {r:?}");
        };
        assert!(msg.contains(want), "{args}: {msg:?} lacks {want:?}");
        assert!(!msg.contains('\n'), "{args}: {msg:?} is not one line");
    }
    assert!(
        dev.snapshot().iter().all(|&b| b == 0),
        "a refused format wrote to the device"
    );
    let r = format(
        &dev,
        &MkfsOptions {
            reserved_percent: 51,
            ..MkfsOptions::default()
        },
    );
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
}

#[test]
fn too_small_or_too_big_is_invalid() {
    for size in [0u64, 4096, 60 << 10] {
        let dev = MemDevice::new(size);
        let r = format(&dev, &MkfsOptions::mke2fs());
        assert!(matches!(r, Err(Error::Invalid(_))), "{size} bytes: {r:?}");
    }
    struct Huge;
    impl BlockDevice for Huge {
        fn read_at(&self, _: u64, _: &mut [u8]) -> lanefs::Result<()> {
            Err(Error::io_other("reading", "huge device has no data"))
        }
        fn write_at(&self, _: u64, _: &[u8]) -> lanefs::Result<()> {
            Err(Error::io_other("reading", "huge device has no data"))
        }
        fn flush(&self) -> lanefs::Result<()> {
            Ok(())
        }
        fn size(&self) -> u64 {
            1 << 50
        }
    }
    let r = format(&Huge, &MkfsOptions::default());
    assert!(matches!(r, Err(Error::Invalid(_))), "1 PiB: {r:?}");
    let r = format(&Huge, &opts("-O ^64bit,^extent"));
    assert!(matches!(r, Err(Error::Invalid(_))), "1 PiB: {r:?}");
}

/// The fixed default shape keeps what the engine's tests rely on: 4 KiB blocks, one
/// inode per 16 KiB, no resize_inode, Debian's other ext4 features.
#[test]
fn default_shape_is_unchanged() {
    let dev = MemDevice::new(300 * MIB);
    format(&dev, &MkfsOptions::default()).expect("format");
    let img = dev.snapshot();
    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).expect("superblock");
    assert_eq!(sb.block_size(), 4096);
    assert_eq!(sb.inodes_count(), 19200);
    assert_eq!(sb.feature_compat(), 0x4 | 0x8 | 0x20); // has_journal ext_attr dir_index
    assert_eq!(sb.free_inodes_count(), sb.inodes_count() - 11);
    if !common::require_tools("default_shape_is_unchanged", &["e2fsck", "dumpe2fs"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let img = make_image(td.path(), "d.img", 300 * MIB, &MkfsOptions::default());
    assert_fsck_clean(&img);
    let dump = dumpe2fs(&img);
    assert_eq!(
        field(&dump, "Filesystem features"),
        "has_journal ext_attr dir_index filetype extent 64bit flex_bg sparse_super \
         large_file huge_file dir_nlink extra_isize metadata_csum"
    );
    assert_eq!(field(&dump, "Total journal blocks"), "4096");
}

/// A journal of more than four extents needs a depth-1 extent tree; a label and another
/// reserve exercise the remaining options.
#[test]
fn big_journal_label_and_reserve() {
    let test = "big_journal_label_and_reserve";
    if !common::require_tools(test, &["e2fsck", "dumpe2fs"]) {
        return;
    }
    let mut o = opts("-b 4096 -i 4096 -L lanefs-test -J 140000");
    o.reserved_percent = 1;
    let td = tempfile::tempdir().expect("tempdir");
    let img = make_image(td.path(), "j.img", 2048 * MIB, &o);
    assert_fsck_clean(&img);
    let dump = dumpe2fs(&img);
    assert_eq!(field(&dump, "Filesystem volume name"), "lanefs-test");
    assert_eq!(field(&dump, "Total journal blocks"), "140000");
    assert_eq!(field(&dump, "Inode count"), "524288");
    assert_eq!(field(&dump, "Reserved block count"), "5242");
}

/// Odd sizes: a short last group, and one so short that it is dropped.
#[test]
fn odd_sizes() {
    let test = "odd_sizes";
    if !common::require_tools(test, &["e2fsck"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    for size in [(1 << 30) + (5 << 20) + 12345, (1 << 30) + (100 << 10)] {
        for args in ["-t ext4", "-t ext3 -b 1024"] {
            let img = make_image(td.path(), "odd.img", size, &opts(args));
            assert_fsck_clean(&img);
            std::fs::remove_file(&img).unwrap();
        }
    }
}

/// The MMP block is where the superblock says, CLEAN, with this host's name, and its
/// checksum verifies under metadata_csum.
#[test]
fn mmp_block_is_clean() {
    let dev = MemDevice::new(64 * MIB);
    let mut o = opts("-O mmp");
    o.device_name = "/dev/test".into();
    format(&dev, &o).expect("format");
    let img = dev.snapshot();
    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).expect("superblock");
    assert_eq!(sb.mmp_update_interval(), 5);
    let at = (sb.mmp_block() * u64::from(sb.block_size())) as usize;
    let block = &img[at..at + sb.block_size() as usize];
    let m = lanefs::internals::disk::mmp::Mmp::decode(block).expect("MMP block");
    assert_eq!(m.seq, lanefs::internals::disk::mmp::SEQ_CLEAN);
    assert_eq!(m.bdevname_str(), "/dev/test");
    assert_eq!(m.check_interval, 5);
    assert!(lanefs::internals::disk::mmp::checksum_ok(
        sb.csum_seed(),
        block
    ));
}
