//! Goal: what `lanefs::mkfs::format` writes is a clean ext4 file system to e2fsprogs and
//! to the kernel, with exactly Debian 12's default features minus resize_inode.
//! Method: format sparse images of several sizes, run `e2fsck -fn` and `dumpe2fs -h`;
//! loop-mount one image, use it, unmount and check it again.

mod common;

use lanefs::disk::superblock::Superblock;
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{BlockDevice, Error, FileDevice, MemDevice};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const FEATURES: &str = "has_journal ext_attr dir_index filetype extent 64bit flex_bg \
                        sparse_super large_file huge_file dir_nlink extra_isize metadata_csum";

/// Whether a test that needs tools or privileges must fail instead of skipping.
fn required() -> bool {
    std::env::var("LANEFS_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1")
}

/// Print a SKIP line (or fail under LANEFS_REQUIRE_PRIVILEGED=1).
fn skip(test: &str, why: &str) {
    assert!(!required(), "{test}: {why} (LANEFS_REQUIRE_PRIVILEGED=1)");
    println!("SKIP {test}: {why}");
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("-V").output().is_ok()
}

/// Format a sparse image of `size` bytes in `dir`; returns its path and the mkfs time.
fn make_image(dir: &Path, size: u64, opts: &MkfsOptions) -> (PathBuf, f64) {
    let path = dir.join("fs.img");
    let dev = FileDevice::create(&path, size).expect("create image");
    let t = Instant::now();
    format(&dev, opts).expect("format");
    (path, t.elapsed().as_secs_f64())
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

/// Format, fsck, and check the header: the shared body of the size tests.
fn format_and_check(test: &str, size: u64, opts: &MkfsOptions) -> Option<String> {
    if !have("e2fsck") {
        skip(test, "e2fsck not found");
        return None;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let (path, secs) = make_image(td.path(), size, opts);
    println!("{test}: mkfs of {} MiB took {:.3} s", size >> 20, secs);
    common::assert_fsck_clean(&path);
    let dump = dumpe2fs(&path);
    assert_eq!(field(&dump, "Filesystem features"), FEATURES);
    assert_eq!(field(&dump, "Filesystem flags"), "signed_directory_hash");
    assert_eq!(field(&dump, "Default mount options"), "user_xattr acl");
    assert_eq!(field(&dump, "Filesystem state"), "clean");
    assert_eq!(field(&dump, "Block size"), "4096");
    assert_eq!(field(&dump, "Inode size"), "256");
    assert_eq!(field(&dump, "Flex block group size"), "16");
    assert_eq!(field(&dump, "Journal inode"), "8");
    assert_eq!(field(&dump, "Default directory hash"), "half_md4");
    assert_eq!(field(&dump, "Checksum type"), "crc32c");
    Some(dump)
}

#[test]
fn fsck_clean_32m() {
    let Some(dump) = format_and_check("fsck_clean_32m", 32 << 20, &MkfsOptions::default()) else {
        return;
    };
    assert_eq!(field(&dump, "Block count"), "8192");
    assert_eq!(field(&dump, "Total journal blocks"), "1024");
}

#[test]
fn fsck_clean_300m() {
    let Some(dump) = format_and_check("fsck_clean_300m", 300 << 20, &MkfsOptions::default()) else {
        return;
    };
    assert_eq!(field(&dump, "Inode count"), "19200");
    assert_eq!(field(&dump, "Total journal blocks"), "4096");
}

#[test]
fn fsck_clean_4g() {
    let Some(dump) = format_and_check("fsck_clean_4g", 4 << 30, &MkfsOptions::default()) else {
        return;
    };
    assert_eq!(field(&dump, "Block count"), "1048576");
    assert_eq!(field(&dump, "Inode count"), "262144");
    assert_eq!(field(&dump, "Reserved block count"), "52428");
    assert_eq!(field(&dump, "Total journal blocks"), "16384");
}

#[test]
fn fsck_clean_20g() {
    let Some(dump) = format_and_check("fsck_clean_20g", 20 << 30, &MkfsOptions::default()) else {
        return;
    };
    assert_eq!(field(&dump, "Block count"), "5242880");
    assert_eq!(field(&dump, "Total journal blocks"), "32768");
}

/// A journal of more than four extents needs a depth-1 extent tree; a label, a smaller
/// inode ratio and another reserve exercise the options.
#[test]
fn fsck_clean_options_and_big_journal() {
    let opts = MkfsOptions {
        label: "lanefs-test".into(),
        inode_ratio: 4096,
        journal_blocks: Some(140_000),
        reserved_percent: 1,
    };
    let test = "fsck_clean_options_and_big_journal";
    let Some(dump) = format_and_check(test, 2 << 30, &opts) else {
        return;
    };
    assert_eq!(field(&dump, "Filesystem volume name"), "lanefs-test");
    assert_eq!(field(&dump, "Total journal blocks"), "140000");
    assert_eq!(field(&dump, "Inode count"), "524288");
    assert_eq!(field(&dump, "Reserved block count"), "5242");
}

/// An odd size: a short last group, and one so short that it is dropped.
#[test]
fn fsck_clean_odd_sizes() {
    for (i, size) in [(1 << 30) + (5 << 20) + 12345, (1 << 30) + (100 << 10)]
        .iter()
        .enumerate()
    {
        let test = format!("fsck_clean_odd_sizes[{i}]");
        let Some(dump) = format_and_check(&test, *size, &MkfsOptions::default()) else {
            return;
        };
        println!("{test}: {} blocks", field(&dump, "Block count"));
    }
}

#[test]
fn too_small_or_too_big_is_invalid() {
    for size in [0u64, 4096, 1 << 20, (8 << 20) - 4096] {
        let dev = MemDevice::new(size);
        let r = format(&dev, &MkfsOptions::default());
        assert!(matches!(r, Err(Error::Invalid(_))), "{size} bytes: {r:?}");
    }
    struct Huge;
    impl BlockDevice for Huge {
        fn read_at(&self, _: u64, _: &mut [u8]) -> lanefs::Result<()> {
            Err(Error::Io("huge device has no data".into()))
        }
        fn write_at(&self, _: u64, _: &[u8]) -> lanefs::Result<()> {
            Err(Error::Io("huge device has no data".into()))
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
    let dev = MemDevice::new(64 << 20);
    let bad = [
        MkfsOptions {
            label: "x".repeat(17),
            ..MkfsOptions::default()
        },
        MkfsOptions {
            inode_ratio: 512,
            ..MkfsOptions::default()
        },
        MkfsOptions {
            reserved_percent: 51,
            ..MkfsOptions::default()
        },
        MkfsOptions {
            journal_blocks: Some(100),
            ..MkfsOptions::default()
        },
        MkfsOptions {
            journal_blocks: Some(16384),
            ..MkfsOptions::default()
        },
    ];
    for opts in bad {
        let r = format(&dev, &opts);
        assert!(matches!(r, Err(Error::Invalid(_))), "{opts:?}: {r:?}");
    }
}

/// Without external tools: the smallest device formats and its superblock decodes.
#[test]
fn smallest_device_formats_in_memory() {
    let dev = MemDevice::new(8 << 20);
    format(&dev, &MkfsOptions::default()).expect("format 8 MiB");
    let img = dev.snapshot();
    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).expect("superblock");
    assert_eq!(sb.blocks_count(), 2048);
    assert_eq!(sb.free_inodes_count(), sb.inodes_count() - 11);
    assert!(sb.free_blocks_count() > 0 && sb.free_blocks_count() < 2048 - 1024);
}

/// Unmounts (lazily if busy) when dropped, so a failing test leaves no mount behind.
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[test]
fn kernel_mounts_300m() {
    let test = "kernel_mounts_300m";
    if !have("e2fsck") {
        return skip(test, "e2fsck not found");
    }
    if !is_root() {
        return skip(test, "not root");
    }
    let td = tempfile::tempdir().expect("tempdir");
    let (img, _) = make_image(td.path(), 300 << 20, &MkfsOptions::default());
    let mnt = td.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let out = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&mnt)
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return skip(
                test,
                &format!("mount failed: {}", String::from_utf8_lossy(&o.stderr)),
            )
        }
        Err(e) => return skip(test, &format!("mount unavailable: {e}")),
    }
    {
        let _guard = MountGuard(mnt.clone());
        assert!(mnt.join("lost+found").is_dir(), "lost+found missing");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(mnt.join("hello.bin"), &data).expect("write file");
        std::fs::create_dir(mnt.join("sub")).expect("mkdir in fs");
        assert_eq!(
            std::fs::read(mnt.join("hello.bin")).expect("read back"),
            data
        );
    }
    common::assert_fsck_clean(&img);
}
