//! Goal: `Fs::collapse_range` and `Fs::insert_range` (FALLOC_FL_COLLAPSE_RANGE and
//! FALLOC_FL_INSERT_RANGE) do what ext4 does to a file's bytes and size, refuse what ext4
//! refuses with its errno and change nothing then, leave images `lanefs fsck` and
//! `e2fsck -fn` call clean (block counts, extent depths that grow and shrink, free counts),
//! and are atomic across a crash: the replayed file is the old one or the new one.
//!
//! Method: proptest sequences of writes, punches, preallocations, truncations, collapses,
//! inserts (some unaligned or past the end), fsyncs and remounts on one file, on 1 KiB and
//! 4 KiB block images, each step compared with a `Vec<u8>` model (size and every byte);
//! a seeded run over a file of 1,200 extents (a depth-2 tree at 1 KiB blocks) collapsed
//! down to a few extents and grown back; every error case against an untouched file; a
//! full disk (the cut an insert needs is refused whole); realtime files in whole rt
//! extents; and a `CrashDevice` that cuts the power at every write of a shift and its
//! fsync, each crash state (unflushed writes lost, kept, a subset, the last torn) mounted
//! and compared with the old and new files, then checked by lanefs fsck (e2fsck on a
//! sample).
//!
//! Environment: `PROPTEST_CASES` (default 32 per block size).

#[path = "../common/mod.rs"]
mod common;

mod crash;
mod deep;
mod errors;
mod model;

use errors::*;
use model::*;

use lanefs::fsck::{check, FsckOptions};
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{
    BlockDevice, CrashDevice, Error, FallocMode, FileDevice, Fs, Ino, MemDevice, MountOptions,
    Owner, ROOT_INO,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

/// `FS_IMMUTABLE_FL` and `FS_APPEND_FL` (chattr +i, +a).
const FL_IMMUTABLE: u32 = 0x10;
const FL_APPEND: u32 = 0x20;

fn opts() -> MountOptions {
    MountOptions {
        commit_interval: Duration::ZERO,
        ..MountOptions::default()
    }
}

fn mkfs_opts(bs: u32, features: &str) -> MkfsOptions {
    MkfsOptions {
        block_size: Some(bs),
        features: features.into(),
        ..MkfsOptions::default()
    }
}

/// A formatted device in memory.
fn mem_fs(bytes: u64, bs: u32, features: &str) -> (Arc<MemDevice>, Arc<Fs>) {
    let dev = Arc::new(MemDevice::new(bytes));
    format(&*dev, &mkfs_opts(bs, features)).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    (dev, fs)
}

/// The whole file.
fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut b = vec![0u8; size];
    let mut n = 0;
    while n < size {
        let k = fs.read(ino, n as u64, &mut b[n..]).unwrap();
        assert!(k > 0, "short read at {n} of {size}");
        n += k;
    }
    b
}

/// Panic naming the first byte where `got` and `want` differ (not both vectors whole).
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if let Some(k) = (0..got.len().min(want.len())).find(|&k| got[k] != want[k]) {
        panic!(
            "{what}: byte {k} (4 KiB block {}, 1 KiB block {}) is {}, not {}",
            k / 4096,
            k / 1024,
            got[k],
            want[k]
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: sizes");
}

/// The depth of `name`'s extent tree as `debugfs -R "ex"` reads it from the image (`None`
/// without debugfs; 0 for a file whose extents all fit in its inode).
fn tree_depth(dev: &dyn BlockDevice, name: &str) -> Option<u32> {
    if !common::have_tool("debugfs") {
        return None;
    }
    let td = tempfile::tempdir().unwrap();
    let img = td.path().join("img");
    let mut bytes = vec![0u8; dev.size() as usize];
    dev.read_at(0, &mut bytes).unwrap();
    std::fs::write(&img, &bytes).unwrap();
    let out = common::debugfs(&img, &format!("ex /{name}")).unwrap();
    // Rows begin "level/ depth".
    let depth = out.lines().skip(1).find_map(|l| {
        let (_, d) = l.split_once('/')?;
        d.split_whitespace().next()?.parse().ok()
    });
    Some(depth.unwrap_or(0))
}

/// Bytes of a pattern no two places share.
fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|k| {
            let x = (seed ^ (off + k).wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(31);
            (x >> 29) as u8 | 1
        })
        .collect()
}

/// `lanefs fsck` must call the device clean; `e2fsck -fn` too where it is installed.
fn assert_clean(dev: &dyn BlockDevice, what: &str) {
    let r = check(dev, &FsckOptions::default()).unwrap();
    assert!(r.is_clean(), "{what}: lanefs fsck: {}", r.summary());
    if common::have_tool("e2fsck") {
        let td = tempfile::tempdir().unwrap();
        let img = td.path().join("img");
        let mut bytes = vec![0u8; dev.size() as usize];
        dev.read_at(0, &mut bytes).unwrap();
        std::fs::write(&img, &bytes).unwrap();
        let (code, text) = common::e2fsck(&img);
        assert_eq!(code, 0, "{what}: e2fsck -fn:\n{text}");
    }
}
