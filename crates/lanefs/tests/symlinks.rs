//! Goal: every symlink shape that ext4 and e2fsprogs make reads as the kernel reads it.
//! Method: images from mke2fs with symlinks made by debugfs: on `inline_data`, targets of
//! 1 to 59 bytes (fast: in `i_block`), 60 to the inline room (inline data: `i_block` then
//! `system.data`) and longer (a block); on `ea_inode`, a fast symlink whose block count
//! also counts an attribute's inode (e2fsprogs' f_ea_inode_fast_symlink). `Fs::readlink`
//! must give each target; the kernel reads the same through a loop mount; lanefs then
//! removes them and `e2fsck -fn` finds the image clean.

mod common;

use lanefs::{Fs, MountOptions, ROOT_INO};
use std::path::Path;

/// A target of `n` bytes that names its own length.
fn target(n: usize) -> Vec<u8> {
    let mut t = format!("/t{n}-").into_bytes();
    t.resize(n, b'x');
    t
}

/// Make symlink `/NAME` to `t` with debugfs -w.
fn debugfs_symlink(img: &Path, name: &str, t: &[u8]) {
    let cmd = format!("symlink /{name} {}", String::from_utf8_lossy(t));
    let out = std::process::Command::new("debugfs")
        .args(["-w", "-R", &cmd])
        .arg(img)
        .output()
        .expect("debugfs");
    assert!(out.status.success(), "debugfs {cmd}: {out:?}");
}

/// Every `(name, target)`: lanefs reads the target, the kernel (when it can mount here)
/// reads the same, then lanefs removes them all and the image stays clean.
fn check(img: &Path, links: &[(String, Vec<u8>)], td: &Path) {
    let fs = Fs::mount_path(img, MountOptions::default()).expect("mount");
    for (name, t) in links {
        let a = fs.lookup(ROOT_INO, name.as_bytes()).expect("lookup");
        assert_eq!(&fs.readlink(a.ino).expect("readlink"), t, "{name}");
        assert_eq!(a.size, t.len() as u64, "{name}");
    }
    fs.unmount().expect("unmount");
    if common::is_root() {
        let km = common::KernelMount::mount(img, &td.join("k"), "ro").expect("kernel mount");
        for (name, t) in links {
            let got = std::fs::read_link(km.dir.join(name)).expect("kernel readlink");
            assert_eq!(got.as_os_str().as_encoded_bytes(), &t[..], "kernel: {name}");
        }
        km.unmount().expect("umount");
    }
    let fs = Fs::mount_path(img, MountOptions::default()).expect("mount");
    for (name, _) in links {
        fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink");
    }
    fs.unmount().expect("unmount");
    common::assert_fsck_clean(img);
}

#[test]
fn inline_data_symlinks_read_as_the_kernel_reads_them() {
    let test = "inline_data_symlinks_read_as_the_kernel_reads_them";
    if !common::require_tools(test, &["mke2fs", "debugfs", "e2fsck"]) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let img = common::mke2fs_image(
        td.path(),
        "il.img",
        16 << 20,
        &["-t", "ext4", "-O", "inline_data"],
    )
    .expect("mke2fs");
    let mut links = Vec::new();
    for n in [1, 59, 60, 61, 80, 120, 200, 900] {
        let t = target(n);
        debugfs_symlink(&img, &format!("l{n}"), &t);
        links.push((format!("l{n}"), t));
    }
    // debugfs keeps 60 to 80-odd bytes inline (the i_block and the room left in the
    // inode), longer ones in a block: both shapes are here.
    let stat = common::debugfs(&img, "stat /l80").expect("debugfs stat");
    assert!(stat.contains("Flags: 0x10000000"), "/l80 is inline: {stat}");
    check(&img, &links, td.path());
}

#[test]
fn ea_inode_fast_symlinks_are_fast_whatever_their_block_count() {
    let test = "ea_inode_fast_symlinks_are_fast_whatever_their_block_count";
    if !common::require_tools(test, &["mke2fs", "debugfs", "e2fsck"]) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let img = common::mke2fs_image(
        td.path(),
        "ea.img",
        16 << 20,
        &["-t", "ext4", "-O", "ea_inode"],
    )
    .expect("mke2fs");
    let t = target(3);
    debugfs_symlink(&img, "s", &t);
    let long = target(300);
    debugfs_symlink(&img, "slow", &long);
    // As e2fsprogs' f_ea_inode_fast_symlink: the 3-byte symlink's i_blocks counts an EA
    // inode's blocks. The kernel still reads its target from i_block (the ea_inode rule:
    // a size under 60 bytes is fast).
    let out = std::process::Command::new("debugfs")
        .args(["-w", "-R", "sif /s blocks 8"])
        .arg(&img)
        .output()
        .expect("debugfs");
    assert!(out.status.success(), "{out:?}");
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
    let s = fs.lookup(ROOT_INO, b"s").expect("lookup");
    assert_eq!(fs.readlink(s.ino).expect("readlink"), t);
    let l = fs.lookup(ROOT_INO, b"slow").expect("lookup");
    assert_eq!(fs.readlink(l.ino).expect("readlink"), long);
    fs.unmount().expect("unmount");
    if common::is_root() {
        let km = common::KernelMount::mount(&img, &td.path().join("k"), "ro").expect("mount");
        let got = std::fs::read_link(km.dir.join("s")).expect("kernel readlink");
        assert_eq!(got.as_os_str().as_encoded_bytes(), &t[..]);
        km.unmount().expect("umount");
    }
}
