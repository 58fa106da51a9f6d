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

mod common;

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

// ---------------------------------------------------------------------------------------
// The model.

/// What the model says a shift gives: the new bytes, or `None` for EINVAL.
fn model_collapse(m: &[u8], bs: u64, off: u64, len: u64) -> Option<Vec<u8>> {
    let ok = len > 0 && (off | len).is_multiple_of(bs) && off + len < m.len() as u64;
    ok.then(|| {
        let (off, end) = (off as usize, (off + len) as usize);
        [&m[..off], &m[end..]].concat()
    })
}

fn model_insert(m: &[u8], bs: u64, off: u64, len: u64) -> Option<Vec<u8>> {
    let ok = len > 0 && (off | len).is_multiple_of(bs) && off < m.len() as u64;
    ok.then(|| {
        let off = off as usize;
        [&m[..off], &vec![0u8; len as usize][..], &m[off..]].concat()
    })
}

#[derive(Debug, Clone)]
enum Op {
    /// `len` bytes at block `blk` plus `skew` bytes.
    Write {
        blk: u64,
        skew: u64,
        len: u64,
    },
    /// One block at each of `blk`, `blk + 2`, ...: one extent each.
    Comb {
        blk: u64,
        count: u64,
    },
    Punch {
        blk: u64,
        skew: u64,
        len: u64,
    },
    /// fallocate of whole blocks, with KEEP_SIZE or not (blocks past the end get shifted too).
    Prealloc {
        blk: u64,
        n: u64,
        keep: bool,
    },
    Truncate {
        blocks: u64,
        skew: u64,
    },
    Collapse {
        blk: u64,
        n: u64,
        skew: u64,
    },
    Insert {
        blk: u64,
        n: u64,
        skew: u64,
    },
    Fsync,
    Remount,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let skew = prop_oneof![9 => Just(0u64), 1 => 1..700u64];
    prop_oneof![
        4 => (0..40u64, 0..3000u64, 1..9000u64).prop_map(|(blk, skew, len)| Op::Write { blk, skew, len }),
        2 => (0..40u64, 1..12u64).prop_map(|(blk, count)| Op::Comb { blk, count }),
        2 => (0..40u64, 0..3000u64, 1..9000u64).prop_map(|(blk, skew, len)| Op::Punch { blk, skew, len }),
        1 => (0..60u64, 1..8u64, any::<bool>()).prop_map(|(blk, n, keep)| Op::Prealloc { blk, n, keep }),
        1 => (0..50u64, 0..3000u64).prop_map(|(blocks, skew)| Op::Truncate { blocks, skew }),
        4 => (0..40u64, 1..10u64, skew.clone()).prop_map(|(blk, n, skew)| Op::Collapse { blk, n, skew }),
        4 => (0..40u64, 1..10u64, skew).prop_map(|(blk, n, skew)| Op::Insert { blk, n, skew }),
        1 => Just(Op::Fsync),
        1 => Just(Op::Remount),
    ]
}

/// Run `ops` on one file of a fresh `bs`-block image and on the model, comparing after
/// every step; the image must be clean at the end.
fn run_sequence(bs: u32, ops: &[Op]) -> Result<(), TestCaseError> {
    let (dev, mut fs) = mem_fs(32 << 20, bs, "");
    let ino = new_file(&fs, "f");
    let bs = u64::from(bs);
    let mut m: Vec<u8> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let what = format!("step {step} {op:?}");
        match *op {
            Op::Write { blk, skew, len } => {
                let off = blk * bs + skew;
                let data = pattern(step as u64, off, len as usize);
                fs.write(ino, off, &data).unwrap();
                let end = (off + len) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
            }
            Op::Comb { blk, count } => {
                for k in 0..count {
                    let off = (blk + 2 * k) * bs;
                    let data = pattern(step as u64 + k, off, bs as usize);
                    fs.write(ino, off, &data).unwrap();
                    let end = (off + bs) as usize;
                    if m.len() < end {
                        m.resize(end, 0);
                    }
                    m[off as usize..end].copy_from_slice(&data);
                }
            }
            Op::Punch { blk, skew, len } => {
                let off = blk * bs + skew;
                let mode = FallocMode {
                    punch_hole: true,
                    keep_size: true,
                    ..FallocMode::default()
                };
                fs.fallocate(ino, mode, off, len).unwrap();
                let end = ((off + len) as usize).min(m.len());
                if (off as usize) < end {
                    m[off as usize..end].fill(0);
                }
            }
            Op::Prealloc { blk, n, keep } => {
                let mode = FallocMode {
                    keep_size: keep,
                    ..FallocMode::default()
                };
                fs.fallocate(ino, mode, blk * bs, n * bs).unwrap();
                let end = ((blk + n) * bs) as usize;
                if !keep && m.len() < end {
                    m.resize(end, 0);
                }
            }
            Op::Truncate { blocks, skew } => {
                let size = blocks * bs + skew;
                let set = lanefs::SetAttr {
                    size: Some(size),
                    ..lanefs::SetAttr::default()
                };
                fs.setattr(ino, &set).unwrap();
                m.resize(size as usize, 0);
            }
            Op::Collapse { blk, n, skew } => {
                let (off, len) = (blk * bs + skew, n * bs);
                let want = model_collapse(&m, bs, off, len);
                let got = fs.collapse_range(ino, off, len);
                check_shift(&what, got, want, &mut m)?;
            }
            Op::Insert { blk, n, skew } => {
                let (off, len) = (blk * bs + skew, n * bs);
                let want = model_insert(&m, bs, off, len);
                let got = fs.insert_range(ino, off, len);
                check_shift(&what, got, want, &mut m)?;
            }
            Op::Fsync => fs.fsync(ino, false).unwrap(),
            Op::Remount => {
                fs.unmount().unwrap();
                fs = Fs::mount(dev.clone(), opts()).unwrap();
            }
        }
        prop_assert_eq!(fs.getattr(ino).unwrap().size, m.len() as u64, "{}", what);
        let got = read_all(&fs, ino);
        if let Some(k) = (0..m.len()).find(|&k| got[k] != m[k]) {
            return Err(TestCaseError::fail(format!(
                "{what}: byte {k} (block {}) is {} where the model has {}",
                k as u64 / bs,
                got[k],
                m[k]
            )));
        }
    }
    fs.unmount().unwrap();
    assert_clean(&*dev, "after the sequence");
    Ok(())
}

fn check_shift(
    what: &str,
    got: lanefs::Result<()>,
    want: Option<Vec<u8>>,
    m: &mut Vec<u8>,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(()), Some(new)) => *m = new,
        (Err(Error::Invalid(_)), None) => {}
        (got, want) => {
            return Err(TestCaseError::fail(format!(
                "{what}: got {got:?}, the model says {}",
                if want.is_some() { "success" } else { "EINVAL" }
            )))
        }
    }
    Ok(())
}

fn sequences(bs: u32) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(op_strategy(), 1..40), |ops| {
            run_sequence(bs, &ops)
        })
        .unwrap();
}

#[test]
fn sequences_follow_the_model_1k() {
    sequences(1024);
}

#[test]
fn sequences_follow_the_model_4k() {
    sequences(4096);
}

// ---------------------------------------------------------------------------------------
// Deep trees.

/// A file of 1,200 one-block extents on 1 KiB blocks (84 extents a leaf: a depth-2
/// tree), collapsed and grown by seeded shifts with remounts, compared with the model at
/// every step; collapses then take it down to a handful of extents (depth 0) and inserts
/// and writes grow it again.
#[test]
fn deep_trees_shift_and_change_depth() {
    let (dev, mut fs) = mem_fs(64 << 20, 1024, "");
    let bs = 1024u64;
    let ino = new_file(&fs, "deep");
    let mut m = vec![0u8; 2400 * bs as usize];
    for k in 0..1200u64 {
        let off = 2 * k * bs;
        let data = pattern(k, off, bs as usize);
        fs.write(ino, off, &data).unwrap();
        m[off as usize..(off + bs) as usize].copy_from_slice(&data);
    }
    // The last block written is 2398.
    m.truncate(2399 * bs as usize);
    fs.sync().unwrap();
    assert!(
        tree_depth(&*dev, "deep").is_none_or(|d| d == 2),
        "not a depth-2 tree"
    );
    let mut rng = StdRng::seed_from_u64(44);
    for step in 0..120 {
        let blocks = m.len() as u64 / bs;
        let (blk, n) = (rng.gen_range(0..blocks), rng.gen_range(1..40));
        let (off, len) = (blk * bs, n * bs);
        if step % 3 == 2 {
            let want = model_insert(&m, bs, off, len);
            check_shift(
                &format!("step {step}"),
                fs.insert_range(ino, off, len),
                want,
                &mut m,
            )
            .unwrap();
        } else {
            let want = model_collapse(&m, bs, off, len);
            check_shift(
                &format!("step {step}"),
                fs.collapse_range(ino, off, len),
                want,
                &mut m,
            )
            .unwrap();
        }
        if step % 40 == 39 {
            fs.unmount().unwrap();
            fs = Fs::mount(dev.clone(), opts()).unwrap();
        }
        same(&read_all(&fs, ino), &m, &format!("step {step}"));
    }
    // Down to the first three blocks and the last: at most four extents, all in the
    // inode (depth 0), the tree blocks freed.
    while m.len() as u64 > 4 * bs {
        let len = ((m.len() as u64 / bs - 4) * bs).min(300 * bs);
        let want = model_collapse(&m, bs, 3 * bs, len);
        check_shift("shrink", fs.collapse_range(ino, 3 * bs, len), want, &mut m).unwrap();
    }
    same(&read_all(&fs, ino), &m, "deep");
    fs.sync().unwrap();
    assert_eq!(
        tree_depth(&*dev, "deep").unwrap_or(0),
        0,
        "not back to depth 0"
    );
    // And up again: 400 times two blocks inserted at 0 and the first written (one more
    // extent each, past 4 x 84: depth 2).
    for k in 0..400u64 {
        let want = model_insert(&m, bs, 0, 2 * bs);
        check_shift("grow", fs.insert_range(ino, 0, 2 * bs), want, &mut m).unwrap();
        let data = pattern(9000 + k, 0, bs as usize);
        fs.write(ino, 0, &data).unwrap();
        m[..bs as usize].copy_from_slice(&data);
    }
    same(&read_all(&fs, ino), &m, "grown");
    fs.unmount().unwrap();
    assert!(
        tree_depth(&*dev, "deep").is_none_or(|d| d == 2),
        "not depth 2 again"
    );
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    same(&read_all(&fs, ino), &m, "deep");
    fs.unmount().unwrap();
    assert_clean(&*dev, "deep tree");
}

/// Readers racing shifts: one thread inserts a hole of four blocks at block 8 and
/// collapses it again, over and over, while another reads 6 blocks at block 6 (through
/// the lock-free cached path when it can): every read sees the file before an insert or
/// after it, whole, never a mix or a stale folio.
#[test]
fn reads_racing_shifts_see_one_version() {
    let (dev, fs) = mem_fs(32 << 20, 4096, "");
    let bs = 4096usize;
    let ino = new_file(&fs, "f");
    let base = pattern(8, 0, 32 * bs);
    fs.write(ino, 0, &base).unwrap();
    let inserted = model_insert(&base, bs as u64, 8 * bs as u64, 4 * bs as u64).unwrap();
    let (a, b) = (6 * bs, 12 * bs);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            // Stops the reader however this thread ends (a failed check panics).
            struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Release);
                }
            }
            let _stop = Stop(&stop);
            let mut mine = vec![0u8; b - a];
            for k in 0..300 {
                fs.insert_range(ino, 8 * bs as u64, 4 * bs as u64).unwrap();
                fs.read(ino, a as u64, &mut mine).unwrap();
                assert!(mine == inserted[a..b], "round {k}: the insert is not seen");
                fs.collapse_range(ino, 8 * bs as u64, 4 * bs as u64)
                    .unwrap();
            }
        });
        let mut reads = 0;
        let mut buf = vec![0u8; b - a];
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            assert_eq!(fs.read(ino, a as u64, &mut buf).unwrap(), b - a);
            assert!(
                buf == base[a..b] || buf == inserted[a..b],
                "read {reads} is neither version"
            );
            reads += 1;
        }
    });
    same(&read_all(&fs, ino), &base, "after the race");
    fs.unmount().unwrap();
    assert_clean(&*dev, "race");
}

// ---------------------------------------------------------------------------------------
// Errors.

/// The errno of a result (0 for success).
fn errno(r: lanefs::Result<()>) -> i32 {
    r.map_or_else(|e| e.errno(), |()| 0)
}

/// A new file `name` in the root directory.
fn new_file(fs: &Fs, name: &str) -> Ino {
    let owner = Owner::default();
    fs.create(ROOT_INO, name.as_bytes(), 0o644, owner)
        .unwrap()
        .ino
}

/// Every refusal ext4 makes, each with its errno, and the file untouched after it
/// (bytes, size, times); then a success changes mtime and ctime.
#[test]
fn errors_are_ext4s_and_change_nothing() {
    use libc::{EFBIG, EINVAL, EISDIR, ENOENT, EPERM, EROFS};
    let (dev, fs) = mem_fs(32 << 20, 4096, "");
    let bs = 4096u64;
    let f = new_file(&fs, "f");
    let data = pattern(1, 0, 16 * bs as usize);
    fs.write(f, 0, &data).unwrap();
    let before = fs.getattr(f).unwrap();
    let max = ((1u64 << 32) - 1) * bs;
    // (what, collapse (else insert), offset, length, errno)
    let cases = [
        ("collapse len 0", true, 0, 0, EINVAL),
        ("collapse unaligned off", true, 100, bs, EINVAL),
        ("collapse unaligned len", true, 0, 100, EINVAL),
        ("collapse to the end", true, 8 * bs, 8 * bs, EINVAL),
        ("collapse past the end", true, 8 * bs, 9 * bs, EINVAL),
        ("collapse whole file", true, 0, 16 * bs, EINVAL),
        ("collapse past s_maxbytes", true, 0, max + bs, EFBIG),
        ("collapse wrapping", true, u64::MAX - bs + 1, bs, EFBIG),
        ("insert len 0", false, 0, 0, EINVAL),
        ("insert unaligned", false, bs, 100, EINVAL),
        ("insert at the end", false, 16 * bs, bs, EINVAL),
        ("insert past the end", false, 20 * bs, bs, EINVAL),
        (
            "insert past the largest file",
            false,
            0,
            max - 8 * bs,
            EFBIG,
        ),
        ("insert past s_maxbytes", false, bs, max, EFBIG),
        // ext4 checks alignment before the size: EINVAL, not EFBIG.
        (
            "insert unaligned, too big",
            false,
            100,
            max - 8 * bs,
            EINVAL,
        ),
    ];
    for (what, collapse, off, len, want) in cases {
        let r = if collapse {
            fs.collapse_range(f, off, len)
        } else {
            fs.insert_range(f, off, len)
        };
        assert_eq!(errno(r), want, "{what}");
    }
    assert_eq!(fs.getattr(f).unwrap(), before, "a refused shift changed it");
    same(&read_all(&fs, f), &data, "errors");

    // Flags, then kinds of file.
    let plain = fs.get_flags(f).unwrap();
    for flag in [FL_IMMUTABLE, FL_APPEND] {
        fs.set_flags(f, plain | flag).unwrap();
        let a = fs.getattr(f).unwrap();
        assert_eq!(errno(fs.collapse_range(f, 0, bs)), EPERM, "flag {flag:#x}");
        assert_eq!(errno(fs.insert_range(f, 0, bs)), EPERM, "flag {flag:#x}");
        assert_eq!(fs.getattr(f).unwrap(), a);
        fs.set_flags(f, plain).unwrap();
    }
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, Owner::default()).unwrap();
    assert_eq!(errno(fs.collapse_range(d.ino, 0, bs)), EISDIR);
    assert_eq!(errno(fs.insert_range(d.ino, 0, bs)), EISDIR);
    let l = fs.symlink(ROOT_INO, b"l", b"f", Owner::default()).unwrap();
    assert_eq!(errno(fs.insert_range(l.ino, 0, bs)), EINVAL);
    assert_eq!(errno(fs.collapse_range(999_999, 0, bs)), ENOENT);

    // Blocks mapped past the end must still fit below the last logical block.
    let keep = FallocMode {
        keep_size: true,
        ..FallocMode::default()
    };
    fs.fallocate(f, keep, max - 2 * bs, bs).unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!(errno(fs.insert_range(f, 0, 2 * bs)), EINVAL);
    assert_eq!(fs.getattr(f).unwrap(), a);
    std::thread::sleep(Duration::from_millis(5));
    fs.insert_range(f, 0, bs).unwrap();
    let b = fs.getattr(f).unwrap();
    assert_eq!(b.size, 17 * bs);
    assert!(b.mtime > a.mtime && b.ctime > a.ctime, "{a:?} -> {b:?}");
    assert_eq!(b.blocks, a.blocks, "an insert allocated or freed data");
    std::thread::sleep(Duration::from_millis(5));
    fs.collapse_range(f, 0, bs).unwrap();
    let c = fs.getattr(f).unwrap();
    assert!(c.mtime > b.mtime && c.ctime > b.ctime);
    assert_eq!(
        (c.size, c.blocks),
        (16 * bs, a.blocks),
        "a hole's collapse freed data"
    );
    same(&read_all(&fs, f), &data, "errors");
    fs.unmount().unwrap();
    assert_clean(&*dev, "errors");

    // A read-only mount changes nothing.
    let ro = MountOptions {
        read_only: true,
        ..opts()
    };
    let fs = Fs::mount(dev.clone(), ro).unwrap();
    assert_eq!(errno(fs.collapse_range(f, 0, bs)), EROFS);
    assert_eq!(errno(fs.insert_range(f, 0, bs)), EROFS);
}

/// Block-mapped files (an ext3 image): EOPNOTSUPP before any other check of ext4's own,
/// as ext4 answers (xfstests takes a collapse of (0, 1) failing so to mean "no support").
#[test]
fn block_mapped_files_are_not_supported() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    let mk = MkfsOptions {
        fs_type: Some("ext3".into()),
        ..mkfs_opts(4096, "")
    };
    format(&*dev, &mk).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let f = new_file(&fs, "f");
    fs.write(f, 0, &pattern(3, 0, 40000)).unwrap();
    for r in [
        fs.collapse_range(f, 0, 1),
        fs.collapse_range(f, 0, 4096),
        fs.insert_range(f, 0, 1),
        fs.insert_range(f, 4096, 4096),
    ] {
        assert!(matches!(r, Err(Error::NotSupported(_))), "{r:?}");
    }
    assert_eq!(read_all(&fs, f), pattern(3, 0, 40000));
    fs.unmount().unwrap();
    assert_clean(&*dev, "ext3");
}

/// An inline file moves to a block first, as ext4_fallocate converts it before the
/// mode's checks: an insert at 0 works on it, a refused collapse leaves it converted.
#[test]
fn inline_files_move_to_a_block_first() {
    let (dev, fs) = mem_fs(32 << 20, 4096, "inline_data");
    let f = new_file(&fs, "small");
    fs.write(f, 0, b"tiny file").unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().blocks,
        0,
        "not inline: the test shows nothing"
    );
    fs.insert_range(f, 0, 4096).unwrap();
    let mut want = vec![0u8; 4096];
    want.extend_from_slice(b"tiny file");
    same(&read_all(&fs, f), &want, "full disk");
    let g = new_file(&fs, "other");
    fs.write(g, 0, b"inline too").unwrap();
    assert!(matches!(
        fs.collapse_range(g, 0, 4096),
        Err(Error::Invalid(_))
    ));
    assert_eq!(
        fs.getattr(g).unwrap().blocks,
        8,
        "ext4 converts before refusing"
    );
    assert_eq!(read_all(&fs, g), b"inline too");
    fs.unmount().unwrap();
    assert_clean(&*dev, "inline");
}

/// On a full disk, an insert that cuts an extent of a file whose four extents fill its
/// inode needs a leaf block: ENOSPC, and the file and the free counts are as before.
/// Once space is back it works.
#[test]
fn full_disk_refuses_the_cut_whole() {
    let (dev, fs) = mem_fs(16 << 20, 4096, "");
    let bs = 4096u64;
    let f = new_file(&fs, "four");
    for k in 0..4u64 {
        fs.write(f, 8 * k * bs, &pattern(k, 0, 4 * bs as usize))
            .unwrap();
    }
    let want = read_all(&fs, f);
    let fill = new_file(&fs, "fill");
    let chunk = vec![7u8; 256 << 10];
    let mut off = 0u64;
    loop {
        match fs.write(fill, off, &chunk) {
            Ok(_) => off += chunk.len() as u64,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("fill: {e}"),
        }
    }
    // Single blocks until none is left.
    while fs.write(fill, off, &chunk[..bs as usize]).is_ok() {
        off += bs;
    }
    fs.sync().unwrap();
    let free = fs.statfs().unwrap().free_blocks;
    let a = fs.getattr(f).unwrap();
    assert!(matches!(
        fs.insert_range(f, 2 * bs, bs),
        Err(Error::NoSpace)
    ));
    assert!(matches!(fs.collapse_range(f, bs, bs), Err(Error::NoSpace)));
    assert_eq!(fs.getattr(f).unwrap(), a);
    same(&read_all(&fs, f), &want, "full disk");
    fs.sync().unwrap();
    assert_eq!(
        fs.statfs().unwrap().free_blocks,
        free,
        "a refused shift kept blocks"
    );
    fs.unmount().unwrap();
    assert_clean(&*dev, "full disk");

    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    fs.unlink(ROOT_INO, b"fill").unwrap();
    fs.insert_range(f, 2 * bs, bs).unwrap();
    let mut m = want;
    m.splice(2 * bs as usize..2 * bs as usize, vec![0u8; bs as usize]);
    same(&read_all(&fs, f), &m, "rt");
    fs.unmount().unwrap();
    assert_clean(&*dev, "full disk, then room");
}

// ---------------------------------------------------------------------------------------
// Realtime files.

/// On the realtime device: shifts in whole rt extents (4 blocks) follow the model and
/// keep the rt bitmap exact; a shift of whole blocks that cuts an rt extent is EINVAL.
#[test]
fn realtime_files_shift_in_whole_rt_extents() {
    let td = tempfile::tempdir().unwrap();
    let (img, rt) = (td.path().join("img"), td.path().join("rt"));
    format(
        &FileDevice::create(&img, 32 << 20).unwrap(),
        &mkfs_opts(4096, ""),
    )
    .unwrap();
    drop(FileDevice::create(&rt, 16 << 20).unwrap());
    Fs::format_rt(&img, &rt, 4, 1).unwrap();
    let o = MountOptions {
        rtdev: Some(rt.clone()),
        ..opts()
    };
    let fs = Fs::mount_path(&img, o.clone()).unwrap();
    let f = new_file(&fs, "rt");
    fs.set_realtime(f, true).unwrap();
    let bs = 4096u64;
    let mut m = pattern(5, 0, 64 * bs as usize);
    fs.write(f, 0, &m).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    for step in 0..40 {
        let blocks = m.len() as u64 / bs;
        let (blk, n) = (rng.gen_range(0..blocks / 4) * 4, rng.gen_range(1..4) * 4);
        let (off, len) = (blk * bs, n * bs);
        let what = format!("step {step}");
        if step % 2 == 0 {
            let want = model_collapse(&m, bs, off, len);
            check_shift(&what, fs.collapse_range(f, off, len), want, &mut m).unwrap();
        } else {
            let want = model_insert(&m, bs, off, len);
            check_shift(&what, fs.insert_range(f, off, len), want, &mut m).unwrap();
            let data = pattern(step, off, bs as usize);
            fs.write(f, off + bs, &data).unwrap();
            m[(off + bs) as usize..(off + 2 * bs) as usize].copy_from_slice(&data);
        }
        same(&read_all(&fs, f), &m, &what);
        fs.rt_check().unwrap();
    }
    assert!(matches!(
        fs.collapse_range(f, bs, 4 * bs),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.insert_range(f, 0, 2 * bs),
        Err(Error::Invalid(_))
    ));
    same(&read_all(&fs, f), &m, "rt");
    fs.unmount().unwrap();
    let fs = Fs::mount_path(&img, o).unwrap();
    same(&read_all(&fs, f), &m, "rt");
    fs.rt_check().unwrap();
    fs.unmount().unwrap();
    let r = check(
        &FileDevice::open(&img, true).unwrap(),
        &FsckOptions::default(),
    )
    .unwrap();
    assert!(r.is_clean(), "{}", r.summary());
}

// ---------------------------------------------------------------------------------------
// Crashes.

/// One crash scenario: a file on the base image, then an unsynced overwrite of one block
/// (if any), a shift, an fsync and a sync.
struct Scenario {
    name: &'static str,
    /// The file: this many one-block extents with holes between and three blocks after
    /// them (0: one extent of 32 blocks).
    comb: u64,
    collapse: bool,
    /// The shift's offset and length in blocks.
    at: u64,
    len: u64,
    /// A block overwritten (not synced) before the shift: either version may be on disk.
    overwrite: Option<u64>,
}

const BS: u64 = 4096;

#[rustfmt::skip]
const SCENARIOS: [Scenario; 5] = [
    Scenario { name: "collapse inside one extent (the cut stored first)",
        comb: 0, collapse: true, at: 8, len: 4, overwrite: None },
    Scenario { name: "collapse freeing most extents (depth 1 to 0)",
        comb: 60, collapse: true, at: 2, len: 110, overwrite: None },
    Scenario { name: "insert cutting the fourth extent (depth 0 to 1)",
        comb: 3, collapse: false, at: 7, len: 2, overwrite: None },
    Scenario { name: "insert into a hole of a depth-1 tree",
        comb: 30, collapse: false, at: 11, len: 5, overwrite: None },
    Scenario { name: "unsynced overwrite, then collapse (written back first)",
        comb: 10, collapse: true, at: 4, len: 6, overwrite: Some(20) },
];

/// The overwrite's bytes.
fn overwrite_data() -> Vec<u8> {
    pattern(77, 0, BS as usize)
}

/// The scenario's change on `fs`; the new file it should give from `old`.
fn change(s: &Scenario, fs: &Fs, f: Ino, old: &[u8]) -> lanefs::Result<Vec<u8>> {
    let mut mid = old.to_vec();
    if let Some(b) = s.overwrite {
        fs.write(f, b * BS, &overwrite_data())?;
        mid[(b * BS) as usize..((b + 1) * BS) as usize].copy_from_slice(&overwrite_data());
    }
    let (off, len) = (s.at * BS, s.len * BS);
    if s.collapse {
        fs.collapse_range(f, off, len)?;
        Ok(model_collapse(&mid, BS, off, len).unwrap())
    } else {
        fs.insert_range(f, off, len)?;
        Ok(model_insert(&mid, BS, off, len).unwrap())
    }
}

/// The base image with the scenario's file, and the file's bytes.
fn crash_base(s: &Scenario) -> (Vec<u8>, Ino, Vec<u8>) {
    let dev = Arc::new(CrashDevice::new(32 << 20));
    format(&*dev, &mkfs_opts(4096, "")).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let f = new_file(&fs, "f");
    if s.comb == 0 {
        fs.write(f, 0, &pattern(1, 0, 32 * BS as usize)).unwrap();
    }
    for k in 0..s.comb {
        fs.write(f, 2 * k * BS, &pattern(k, 2 * k * BS, BS as usize))
            .unwrap();
    }
    if s.comb > 0 {
        // Blocks after the last hole, so a collapse has room before the end.
        fs.write(f, 2 * s.comb * BS, &pattern(99, 0, 3 * BS as usize))
            .unwrap();
    }
    fs.release(f).unwrap();
    let old = read_all(&fs, f);
    fs.unmount().unwrap();
    (dev.snapshot(), f, old)
}

/// Whether `got` is the new file, or the old one with the overwritten block old or new.
fn old_or_new(got: &[u8], old: &[u8], new: &[u8], overwrite: Option<u64>) -> bool {
    if got == new {
        return true;
    }
    got.len() == old.len()
        && got.chunks(BS as usize).enumerate().all(|(k, b)| {
            let r = k * BS as usize..(k * BS as usize + b.len());
            b == &old[r] || (overwrite == Some(k as u64) && b == overwrite_data())
        })
}

/// Cut the power at every write of each scenario's shift, its fsync (the commit) and a
/// sync (the checkpoint that writes the tree home); every state the
/// unflushed writes can leave (all lost, all kept, a random subset, a subset with its
/// last write torn inside a block) replays to the old file or the new one and is clean.
#[test]
fn crash_during_shift_replays_old_or_new() {
    let mut rng = StdRng::seed_from_u64(0x5417);
    let mut states = 0;
    for s in &SCENARIOS {
        let (base, f, old) = crash_base(s);
        let dry = Arc::new(CrashDevice::from_vec(base.clone()));
        let fs = Fs::mount(dry.clone(), opts()).unwrap();
        let w0 = dry.writes();
        let new = change(s, &fs, f, &old).unwrap();
        fs.fsync(f, false).unwrap();
        fs.sync().unwrap();
        let total = dry.writes() - w0;
        same(&read_all(&fs, f), &new, s.name);
        drop(fs);
        for k in 0..=total {
            let dev = Arc::new(CrashDevice::from_vec(base.clone()));
            let fs = Fs::mount(dev.clone(), opts()).unwrap();
            dev.cut_after_writes(dev.writes() + k);
            // Errors from the cut are expected; what reached the device is judged below.
            if change(s, &fs, f, &old).is_ok() && fs.fsync(f, false).is_ok() {
                let _ = fs.sync();
            }
            dev.power_cut();
            drop(fs);
            let n = dev.pending_len();
            let all: Vec<usize> = (0..n).collect();
            let subset: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
            let mut images = vec![
                ("all lost", dev.durable()),
                ("all kept", dev.with_writes(&all)),
                ("a subset", dev.with_writes(&subset)),
            ];
            if n > 0 {
                let keep: Vec<usize> = (0..rng.gen_range(1..=n)).collect();
                let blocks = dev.pending()[keep.len() - 1].len / 4096;
                let sectors = rng.gen_range(0..blocks.max(1)) * 8;
                images.push(("the last kept write torn", dev.torn(&keep, sectors)));
            }
            for (what, img) in images {
                let ctx = format!("{}: cut after write {k} of {total}, {what}", s.name);
                let dev = Arc::new(CrashDevice::from_vec(img));
                let fs = Fs::mount(dev.clone(), opts()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let got = read_all(&fs, f);
                assert!(
                    old_or_new(&got, &old, &new, s.overwrite),
                    "{ctx}: the file is neither old ({} bytes) nor new ({} bytes): {} bytes",
                    old.len(),
                    new.len(),
                    got.len()
                );
                fs.unmount().unwrap();
                let r = check(&*dev, &FsckOptions::default()).unwrap();
                assert!(r.is_clean(), "{ctx}: lanefs fsck: {}", r.summary());
                if states % 16 == 0 {
                    assert_clean(&*dev, &ctx);
                }
                states += 1;
            }
        }
    }
    println!("{states} crash states checked");
}
