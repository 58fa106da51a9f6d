//! Random sequences of collapse and insert range, writes, truncates and remounts on 1 and
//! 4 KiB blocks, against a model of the bytes.

use super::*;

/// What the model says a shift gives: the new bytes, or `None` for EINVAL.
pub(super) fn model_collapse(m: &[u8], bs: u64, off: u64, len: u64) -> Option<Vec<u8>> {
    let ok = len > 0 && (off | len).is_multiple_of(bs) && off + len < m.len() as u64;
    ok.then(|| {
        let (off, end) = (off as usize, (off + len) as usize);
        [&m[..off], &m[end..]].concat()
    })
}

pub(super) fn model_insert(m: &[u8], bs: u64, off: u64, len: u64) -> Option<Vec<u8>> {
    let ok = len > 0 && (off | len).is_multiple_of(bs) && off < m.len() as u64;
    ok.then(|| {
        let off = off as usize;
        [&m[..off], &vec![0u8; len as usize][..], &m[off..]].concat()
    })
}

#[derive(Debug, Clone)]
pub(super) enum Op {
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

pub(super) fn op_strategy() -> impl Strategy<Value = Op> {
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
pub(super) fn run_sequence(bs: u32, ops: &[Op]) -> Result<(), TestCaseError> {
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

pub(super) fn check_shift(
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

pub(super) fn sequences(bs: u32) {
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
