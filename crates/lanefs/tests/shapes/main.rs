//! Goal: lanefs reads and writes every image shape `mke2fs` makes, as the kernel and
//! e2fsprogs do: block sizes 1, 2, 4 and 64 KiB; ext2, ext3 and ext4; and ext4 with the
//! optional features users meet (inline_data, uninit_bg without metadata_csum, meta_bg,
//! no filetype, no dir_index, no flex_bg, no sparse_super, no large_file, 128-byte inodes,
//! mmp, ea_inode, quota, project, bigalloc), plus an ext3 image converted with
//! `tune2fs -O extent` (old files keep block maps, new files use extents).
//!
//! Method, per shape (one `#[test]` each, every failing phase of a shape reported at once):
//! (c) `lanefs fsck` must call the untouched `mke2fs` image clean;
//! (a) the kernel writes a tree through a loop mount (for 64 KiB blocks, and where the kernel
//!     refuses the image, the same tree is put in with `mke2fs -d`): small files (inline on
//!     inline_data), a file mapped through double-indirect blocks on ext2/ext3 (and a sparse
//!     file reaching triple-indirect blocks where the block size allows), a directory of 300
//!     entries (an htree where dir_index), fast and slow symlinks, hard links, odd modes and
//!     owners, xattrs (one over a block on ea_inode); lanefs reads it back identical
//!     (names, kinds, modes, owners, sizes, contents, link targets, link groups, xattrs);
//! (b) lanefs writes: new files and directories, appends growing a file across the
//!     direct -> indirect -> double-indirect boundaries, truncates back across them, unlinks,
//!     renames (over a file, of a directory across directories), mkdir/rmdir, small files
//!     and a directory outgrowing inline storage, 150 more entries in the big directory;
//!     then `e2fsck -fn` and lanefs fsck must be clean, and the kernel (loop mount, ro; or
//!     debugfs where the kernel cannot mount) must read exactly the expected tree. On
//!     ext2/ext3 grown files must keep their block maps; new files on extent images must
//!     use extents (judged by debugfs).
//!
//! Shapes with quota, project or bigalloc may mount read-only, but then the reason must
//! name the feature and a write must fail; every other shape must mount read-write.
//! `pristine_images_fsck_clean` runs (c) alone over a wider table (tiny images, default
//! mke2fs sizes), no root needed.
//!
//! Needs root, loop devices and e2fsprogs; otherwise each test prints `SKIP` (or fails when
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

#[path = "../common/mod.rs"]
mod common;

mod driver;
mod model;
mod run;
mod shape;
mod target;
mod views;

use driver::*;
use model::*;
use run::*;
use shape::*;
use target::*;
use views::*;

use common::{debugfs, debugfs_bytes, lanefs_fsck, mke2fs_image, run, KernelMount};
use lanefs::{Error, FileType, Fs, Ino, MountOptions, Owner, SetAttr, XattrFlags, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The model's page size (independent of the file system's block size).
const PAGE: u64 = 4096;
/// Files up to this size are compared whole; bigger (sparse) ones around their data.
const WHOLE: u64 = 8 << 20;
/// Direct block pointers in an inode.
const NDIR: u64 = 12;
/// Entries of the big directory.
const MANY: usize = 300;

macro_rules! shape_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_shape(stringify!($name));
            }
        )*
        /// Every shape of the table has its test.
        #[test]
        fn every_shape_has_a_test() {
            let tests: &[&str] = &[$(stringify!($name)),*];
            for s in SHAPES {
                assert!(tests.contains(&s.name), "shape {} has no test", s.name);
            }
        }
    };
}

shape_tests!(
    ext2_1k,
    ext2_2k,
    ext2_4k,
    ext2_64k,
    ext3_1k,
    ext3_2k,
    ext3_4k,
    ext3_64k,
    ext4_1k,
    ext4_2k,
    ext4_4k,
    ext4_64k,
    ext4_inline_data,
    ext4_1k_inline_data,
    ext4_uninit_bg,
    ext4_1k_meta_bg,
    ext4_no_filetype,
    ext4_no_dir_index,
    ext4_no_flex_bg,
    ext4_no_sparse_super,
    ext2_1k_no_large_file,
    ext4_128_inodes,
    ext3_1k_128_inodes,
    ext4_mmp,
    ext4_ea_inode,
    ext4_quota,
    ext4_project,
    ext4_bigalloc,
    ext3_4k_then_extent,
    ext2_4k_oldest,
);

// ---------------------------------------------------------------------------------------
// (c) alone, over a wider table: no root needed.

/// lanefs fsck must call every untouched mke2fs image clean, including tiny ones (one
/// group, a resize inode reserving more than the group has) and mke2fs's default sizes.
#[test]
fn pristine_images_fsck_clean() {
    let test = "shapes::pristine_images_fsck_clean";
    if !common::require_tools(test, &["mke2fs"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let mut table: Vec<(String, u64, Vec<&str>)> = SHAPES
        .iter()
        .map(|s| (s.name.to_string(), s.size, s.mkfs.to_vec()))
        .collect();
    let extra: &[(&str, u64, &[&str])] = &[
        ("ext4_4k_512_blocks", 2 * M, &["-t", "ext4", "-b", "4096"]),
        ("ext4_1k_2m", 2 * M, &["-t", "ext4", "-b", "1024"]),
        ("ext2_1k_1m", M, &["-t", "ext2", "-b", "1024"]),
        ("ext3_1k_8m", 8 * M, &["-t", "ext3", "-b", "1024"]),
        ("ext4_default_16m", 16 * M, &["-t", "ext4"]),
        ("ext4_default_600m", 600 * M, &["-t", "ext4"]),
        ("ext3_default_600m", 600 * M, &["-t", "ext3"]),
        ("ext2_default_600m", 600 * M, &["-t", "ext2"]),
        (
            "ext4_2k_many_groups",
            64 * M,
            &["-t", "ext4", "-b", "2048", "-g", "2048"],
        ),
        ("ext4_64k_1g", 1024 * M, &["-t", "ext4", "-b", "65536"]),
        ("ext2_64k_small", 16 * M, &["-t", "ext2", "-b", "65536"]),
        (
            "ext4_1k_no_journal",
            32 * M,
            &["-t", "ext4", "-b", "1024", "-O", "^has_journal"],
        ),
        ("ext4_no_64bit", 64 * M, &["-t", "ext4", "-O", "^64bit"]),
        (
            "ext4_sparse_super2",
            256 * M,
            &["-t", "ext4", "-O", "sparse_super2"],
        ),
    ];
    for (n, size, args) in extra {
        table.push((n.to_string(), *size, args.to_vec()));
    }
    let mut fails = Vec::new();
    for (i, (name, size, args)) in table.iter().enumerate() {
        let img = match mke2fs_image(td.path(), &format!("p{i}.img"), *size, args) {
            Ok(p) => p,
            Err(e) => {
                fails.push(format!("{name}: {e}"));
                continue;
            }
        };
        if let Err(e) = pristine_fsck(name, &img) {
            fails.push(format!("{name} ({args:?}, {} MiB): {e}", size / M));
        }
        let _ = std::fs::remove_file(&img);
    }
    assert!(
        fails.is_empty(),
        "{test}: {} of {} untouched images not clean:\n{}",
        fails.len(),
        table.len(),
        fails.join("\n")
    );
}

/// lanefs fsck on an untouched image: clean, except that bigalloc images are not checked
/// and must be refused naming the feature.
fn pristine_fsck(name: &str, img: &std::path::Path) -> Result<(), String> {
    match lanefs_fsck(img) {
        Err(e) if name.contains("bigalloc") => {
            if e.contains("bigalloc") && e.contains("not checked") {
                Ok(())
            } else {
                Err(format!("bigalloc must be refused by name: {e}"))
            }
        }
        Ok(_) if name.contains("bigalloc") => {
            Err("bigalloc checked, but fsck is meant to refuse it by name".into())
        }
        r => r.map(|_| ()),
    }
}

/// The harness itself: a model differing from the tree in one byte, one mode, one link
/// target or one name is caught, on a lanefs image (so passing shapes mean something).
#[test]
fn compare_catches_differences() {
    let test = "shapes::compare_catches_differences";
    if !common::require_tools(test, &["mkfs.ext4"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "c.img", 32 * M);
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
    let mut m = Model::new();
    let mut t = LanefsTarget { fs: fs.clone() };
    let mut d = Driver {
        m: &mut m,
        t: &mut t,
    };
    d.mkdir("d", 0o755).unwrap();
    d.file("d/f", 0o644, &pattern(1, 0, 10_000)).unwrap();
    d.file("sparse", 0o644, b"").unwrap();
    d.write("sparse", 20 << 20, b"tail").unwrap();
    d.symlink("l", b"d/f").unwrap();
    d.link("d/f", "g").unwrap();
    assert_eq!(
        compare(&m, &mut LanefsView { fs: &fs }),
        Vec::<String>::new()
    );
    let caught = |m: &Model, what: &str| {
        let e = compare(m, &mut LanefsView { fs: &fs });
        assert!(!e.is_empty(), "{what} not caught");
        e.join("\n")
    };
    let mut m1 = m.clone();
    m1.content("d/f").write(4000, b"X");
    assert!(caught(&m1, "a byte").contains("differs at byte 4000"));
    let mut m2 = m.clone();
    m2.content("sparse").write(10 << 20, b"Y");
    assert!(caught(&m2, "data in a hole").contains("/sparse differs"));
    let mut m3 = m.clone();
    m3.obj("d").perm = 0o700;
    assert!(caught(&m3, "a mode").contains("mode"));
    let mut m4 = m.clone();
    m4.obj("l").body = Body::Link(b"d/g".to_vec());
    assert!(caught(&m4, "a target").contains("/l ->"));
    let mut m5 = m.clone();
    m5.paths.remove("g");
    let e = caught(&m5, "a name");
    assert!(e.contains("/g unexpected") && e.contains("links"), "{e}");
    fs.unmount().expect("unmount");
}

/// Goal: a file past 2 GiB on an image without large_file turns the feature on, as ext4
/// does, so e2fsck accepts the size. Method: an ext2 image with large_file cleared by
/// debugfs; lanefs writes one byte at 3 GiB into a block-mapped file and unmounts;
/// dumpe2fs shows large_file, e2fsck -fn is clean, debugfs maps the byte where it is.
#[test]
fn large_file_turns_on_past_2_gib() {
    let test = "shapes::large_file_turns_on_past_2_gib";
    if !common::require_tools(test, &["mke2fs", "debugfs", "dumpe2fs", "e2fsck"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let img = mke2fs_image(td.path(), "lf.img", 64 * M, &["-t", "ext2", "-b", "4096"])
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    debugfs_w(&img, "feature -large_file");
    let features = |img: &Path| {
        run(Command::new("dumpe2fs").arg("-h").arg(img))
            .expect("dumpe2fs")
            .lines()
            .find(|l| l.starts_with("Filesystem features:"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(!features(&img).contains("large_file"), "{}", features(&img));
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
    let f = fs
        .create(ROOT_INO, b"big", 0o644, Owner::default())
        .expect("create")
        .ino;
    fs.write(f, 3 << 30, b"x").expect("write at 3 GiB");
    fs.release(f).expect("release");
    fs.unmount().expect("unmount");
    assert!(features(&img).contains("large_file"), "{}", features(&img));
    common::assert_fsck_clean(&img);
    // debugfs finds the byte's block where lanefs put it (no 3 GiB read).
    let blk = debugfs(&img, &format!("bmap /big {}", (3u64 << 30) / 4096)).expect("bmap");
    let blk: u64 = blk
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("bmap said {blk:?}"));
    let mut b = [0u8; 1];
    std::fs::File::open(&img)
        .and_then(|f| f.read_exact_at(&mut b, blk * 4096))
        .expect("read the block");
    assert_eq!(&b, b"x");
    let stat = debugfs(&img, "stat /big").expect("stat");
    assert!(
        stat.contains(&format!("Size: {}", (3u64 << 30) + 1)),
        "{stat}"
    );
}

/// `debugfs -w -R CMD IMAGE`, panicking on failure.
fn debugfs_w(img: &Path, cmd: &str) {
    run(Command::new("debugfs")
        .arg("-w")
        .arg("-R")
        .arg(cmd)
        .arg(img))
    .unwrap_or_else(|e| panic!("debugfs -w {cmd}: {e}"));
}
