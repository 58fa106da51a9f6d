//! Goal: `Fs` agrees with a plain in-memory model on every result and every error of random
//! operation sequences, keeps what it agreed to across unmount and remount, and leaves images
//! that `e2fsck -fn` calls clean.
//!
//! Method: proptest generates operations whose operands are indexes into the model's current
//! state (so shrinking keeps them meaningful). Each operation runs on the engine and on the
//! model; results are compared field by field and errors by variant. The model follows Linux
//! semantics (error precedence of `do_renameat2`, `vfs_link`, ...; sizes capped at ext4's
//! s_maxbytes). After every remount and at the end the whole tree is compared, together with
//! two exact counters: free inodes plus live inodes, and free blocks plus the blocks every
//! inode reports, must not change. A second property forces big htree directories (leaf and
//! index splits, a two-level index) and files with thousands of extents.
//!
//! Block sizes: the random sequences run on `mkfs.ext4 -b` 1, 2, 4 and 64 KiB images (one
//! test each), the big property on 1, 2 and 4 KiB (64 KiB blocks cannot force a two-level
//! index); the model's pages, block counts, symlink limit and largest size follow the
//! block size.
//!
//! Cases: `PROPTEST_CASES` (default 64) for the random sequences, split evenly over the
//! four block sizes; `LANEFS_BIG_CASES` (default 3) for the big-directory and many-extent
//! property, split over its three.

#[path = "../common/mod.rs"]
mod common;

mod apply;
mod big;
mod data;
mod model;
mod ops;
mod runner;
mod tree;

use big::*;
use model::*;
use ops::*;
use runner::*;

use lanefs::{
    Attr, DirEntry, Error, FallocMode, FileType, Fs, Ino, MountOptions, Owner, SetAttr, Timespec,
    ROOT_INO,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::mem::discriminant;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

thread_local! {
    /// The block size of the image this test thread runs on (each test sets it first).
    static BLOCK_SIZE: std::cell::Cell<u64> = const { std::cell::Cell::new(4096) };
}

/// The block size of this thread's test.
fn bs() -> u64 {
    BLOCK_SIZE.with(|b| b.get())
}

/// 512-byte sectors per block (the unit of `Attr::blocks`).
fn sectors() -> u64 {
    bs() / 512
}

/// ext4's largest file size: 2^32 - 1 blocks (the last logical block number stays unused
/// so that an extent's end fits in 32 bits).
fn max_size() -> u64 {
    ((1 << 32) - 1) * bs()
}

/// The image: 64 MiB, except 256 MiB for 64 KiB blocks (room for mke2fs's journal of
/// 1024 blocks).
fn img_size() -> u64 {
    if bs() > 4096 {
        256 << 20
    } else {
        64 << 20
    }
}

/// Data blocks the model lets files hold at once (24 MiB): keeps the image far from full,
/// so no operation can meet ENOSPC (which the model does not predict).
fn budget_blocks() -> u64 {
    (24 << 20) / bs()
}

/// The longest symlink target ext4 stores: a block less its NUL.
fn symlink_max() -> usize {
    bs() as usize - 1
}

/// Extent entries per tree block beyond which a file needs another tree block, with slack
/// (300 for 4 KiB blocks, as before).
fn per_tree_block() -> u64 {
    (bs() - 12) / 12 - 40
}

const OWNER: Owner = Owner {
    uid: 1000,
    gid: 100,
    umask: 0,
};
/// Files up to this size are compared whole; bigger (sparse) ones around their data.
const WHOLE_COMPARE: u64 = 16 << 20;

/// Names: a small alphabet so that creates collide, the longest legal name, one too long,
/// and (for lookup only) "." and "..".
fn name_of(n: u8) -> Vec<u8> {
    match n {
        0..=5 => vec![b'a' + n],
        6 => vec![b'm'; 255],
        7 => vec![b'z'; 256],
        8 => b".".to_vec(),
        _ => b"..".to_vec(),
    }
}

/// File contents: a function of a seed and the byte's offset, never zero (so stale zeros
/// and stale data are both caught).
fn pattern(seed: u8, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (off + i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((x >> 56) as u8 ^ seed) | 1
        })
        .collect()
}

fn config(cases_var: &str, default_cases: u32) -> Config {
    let cases = std::env::var(cases_var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 512,
        max_shrink_time: 300_000,
        ..Config::default()
    }
}

/// Cases of one block size: `PROPTEST_CASES` (default 64) split over the four sizes.
fn random_cases() -> u32 {
    let total = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64u32);
    total.div_ceil(4).max(1)
}

fn random_operations(test: &str, block_size: u64) {
    if !common::require_tools(test, &["mkfs.ext4", "mke2fs", "e2fsck"]) {
        return;
    }
    BLOCK_SIZE.with(|b| b.set(block_size));
    let t = std::time::Instant::now();
    let mut cfg = config("PROPTEST_CASES", 64);
    cfg.cases = random_cases();
    let mut runner = TestRunner::new(cfg);
    let strategy = prop::collection::vec(op_s(), 1..200);
    let result = runner.run(&strategy, |ops| {
        let _w = common::watchdog(test, 180);
        let mut r = Runner::new();
        for op in &ops {
            r.apply(op);
        }
        let nodes = r.m.nodes.len();
        r.finish();
        println!("case: {} operations, {nodes} inodes at the end", ops.len());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{test} ({block_size}-byte blocks): {e}");
    }
    print_stats(test);
    println!("{test}: {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn random_operations_match_the_model() {
    random_operations("random_operations_match_the_model", 4096);
}

#[test]
fn random_operations_match_the_model_1k() {
    random_operations("random_operations_match_the_model_1k", 1024);
}

#[test]
fn random_operations_match_the_model_2k() {
    random_operations("random_operations_match_the_model_2k", 2048);
}

#[test]
fn random_operations_match_the_model_64k() {
    random_operations("random_operations_match_the_model_64k", 65536);
}

// ---------------------------------------------------------------------------------------
// Big directories and many extents.

/// Cases of one block size: `LANEFS_BIG_CASES` (default 3) split over 1, 2 and 4 KiB
/// (64 KiB blocks cannot force a two-level index with names this long in this many entries).
fn big_cases() -> u32 {
    let total = std::env::var("LANEFS_BIG_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3u32);
    total.div_ceil(3).max(1)
}

fn big_directories(test: &str, block_size: u64) {
    if !common::require_tools(test, &["mkfs.ext4", "mke2fs", "e2fsck", "debugfs"]) {
        return;
    }
    BLOCK_SIZE.with(|b| b.set(block_size));
    let t = std::time::Instant::now();
    let mut cfg = config("LANEFS_BIG_CASES", 3);
    cfg.cases = big_cases();
    let mut runner = TestRunner::new(cfg);
    let strategy = (any::<u64>(), 6500usize..7500, 248usize..=255, 1500u64..2500).prop_map(
        |(seed, entries, name_len, frags)| Big {
            seed,
            entries,
            name_len,
            frags,
        },
    );
    let result = runner.run(&strategy, |p| {
        let _w = common::watchdog(test, 300);
        run_big(&p);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{test} ({block_size}-byte blocks): {e}");
    }
    print_stats(test);
    println!("{test}: {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn big_directories_and_many_extents_match_the_model() {
    big_directories("big_directories_and_many_extents_match_the_model", 4096);
}

#[test]
fn big_directories_and_many_extents_match_the_model_1k() {
    big_directories("big_directories_and_many_extents_match_the_model_1k", 1024);
}

#[test]
fn big_directories_and_many_extents_match_the_model_2k() {
    big_directories("big_directories_and_many_extents_match_the_model_2k", 2048);
}

/// The symlink length rule the model uses, checked directly on every block size (the
/// random sequences meet its edges only now and then): a target must fit a block with its
/// NUL, and Linux refuses PATH_MAX (4096) bytes or more whatever the block size.
#[test]
fn symlink_target_limits_follow_linux() {
    let test = "symlink_target_limits_follow_linux";
    if !common::require_tools(test, &["mke2fs"]) {
        return;
    }
    let mut wrong = Vec::new();
    for block in [1024u64, 2048, 4096, 65536] {
        BLOCK_SIZE.with(|b| b.set(block));
        let dir = tempfile::tempdir().expect("tempdir");
        let b = block.to_string();
        let img = common::mke2fs_image(dir.path(), "s.img", img_size(), &["-t", "ext4", "-b", &b])
            .expect("mke2fs");
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
        let longest = symlink_max().min(4095);
        let lens: BTreeSet<usize> = [59usize, 60, longest, longest + 1, 4096].into();
        for len in lens {
            let want_ok = len <= longest;
            let name = format!("l{len}");
            let got = fs.symlink(ROOT_INO, name.as_bytes(), &vec![b'x'; len], OWNER);
            match (&got, want_ok) {
                (Ok(_), true) | (Err(Error::NameTooLong), false) => {}
                _ => wrong.push(format!(
                    "{block}-byte blocks: a {len}-byte target gave {:?}, want {}",
                    got.map(|a| a.ino),
                    if want_ok { "Ok" } else { "NameTooLong" }
                )),
            }
        }
        fs.unmount().expect("unmount");
        common::assert_fsck_clean(&img);
    }
    assert!(wrong.is_empty(), "{test}:\n{}", wrong.join("\n"));
}
