//! Goal: many threads at once leave every thread's own state exact, resolve contended
//! operations as POSIX says (of two racing unlinks or renames of one name exactly one
//! succeeds; renames over one target leave one of the renamed files there), land every
//! write to disjoint ranges of one file, and leak no inode or block: `e2fsck -fn` is clean
//! and statfs counts return exactly to where they started.
//!
//! Method: 8 real threads (on 2 cores, so they interleave at every lock), bounded in
//! operation count and time. Each thread keeps a model of what it owns (its private
//! directory, its names in the shared directory) and checks every result against it;
//! contended outcomes are recorded and reconciled after the threads join. Everything is
//! checked again after unmount, `e2fsck -fn` and a fresh mount. The debug build's
//! lock-order checker turns any ordering mistake into a panic. `LANEFS_SEED` fixes the
//! random choices (the interleaving stays free).

#[path = "../common/mod.rs"]
mod common;

mod one_file;
mod shared_dirs;
mod worker;

use worker::*;

use lanefs::{Error, FallocMode, FileType, Fs, Ino, MountOptions, Owner, SetAttr, ROOT_INO};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::mem::discriminant;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const THREADS: usize = 8;
const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};
const IMG_SIZE: u64 = 128 << 20;

fn seed() -> u64 {
    let s = std::env::var("LANEFS_SEED")
        .ok()
        .and_then(|v| v.parse().ok());
    s.unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        t.map_or(1, |d| d.as_nanos() as u64)
    })
}

/// File contents that name themselves: the tag, then a pattern derived from it.
fn tagged(tag: u64, len: usize) -> Vec<u8> {
    assert!(len >= 8);
    let mut v = tag.to_le_bytes().to_vec();
    v.extend((8..len as u64).map(|i| {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ tag.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        (x >> 56) as u8 | 1
    }));
    v
}

/// The tag of contents made by `tagged`, if they are intact.
fn tag_of(data: &[u8]) -> Option<u64> {
    let tag = u64::from_le_bytes(data.get(..8)?.try_into().ok()?);
    (tagged(tag, data.len()) == data).then_some(tag)
}

fn same_err<T: std::fmt::Debug>(got: &Result<T, Error>, want: &Error) -> bool {
    matches!(got, Err(e) if discriminant(e) == discriminant(want))
}

fn lookup(fs: &Fs, dir: Ino, name: &str) -> Ino {
    let a = fs.lookup(dir, name.as_bytes());
    a.unwrap_or_else(|e| panic!("lookup {name:?} in {dir}: {e:?}"))
        .ino
}

/// The whole contents of a file, checking that read returns exactly its size.
fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size;
    let mut buf = vec![0u8; size as usize];
    let n = fs.read(ino, 0, &mut buf).expect("read");
    assert_eq!(n as u64, size, "short read of inode {ino}");
    buf
}

/// Names in a directory (without "." and ".."), with inode and type.
fn list(fs: &Fs, dir: Ino) -> BTreeMap<String, (Ino, FileType)> {
    let mut out = BTreeMap::new();
    for e in fs.readdir(dir, 0, usize::MAX).expect("readdir") {
        if e.name != b"." && e.name != b".." {
            let name = String::from_utf8(e.name).expect("utf-8 name");
            assert!(
                out.insert(name.clone(), (e.ino, e.kind)).is_none(),
                "{name} listed twice"
            );
        }
    }
    out
}

/// Inodes reachable from the root and the blocks they hold (each inode counted once).
fn usage(fs: &Fs) -> (u64, u64) {
    let mut seen = HashSet::new();
    let mut todo = vec![ROOT_INO];
    let mut blocks = 0;
    seen.insert(ROOT_INO);
    while let Some(d) = todo.pop() {
        blocks += fs.getattr(d).expect("getattr dir").blocks / 8;
        for (_, (ino, kind)) in list(fs, d) {
            if !seen.insert(ino) {
                continue;
            }
            if kind == FileType::Directory {
                todo.push(ino);
            } else {
                blocks += fs.getattr(ino).expect("getattr").blocks / 8;
            }
        }
    }
    (seen.len() as u64, blocks)
}

/// Mount with a 2 ms commit timer, so commits (handle drain, snapshot, next transaction)
/// race the workers' handles all the time.
fn mount(img: &Path) -> Arc<Fs> {
    let opts = MountOptions {
        commit_interval: Duration::from_millis(2),
        ..MountOptions::default()
    };
    Fs::mount_path(img, opts).expect("mount")
}

/// Unmount, require a clean `e2fsck -fn`, mount again.
fn cycle(fs: Arc<Fs>, img: &Path) -> Arc<Fs> {
    fs.unmount().expect("unmount");
    common::assert_fsck_clean(img);
    mount(img)
}
