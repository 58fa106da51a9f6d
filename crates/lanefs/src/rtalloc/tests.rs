//! The allocator against a model: both policies decide alike on random states and
//! requests, the summary always equals a rebuild from the bitmap, no extent is handed out
//! twice, and the lean policy reads fewer blocks.

use std::sync::Arc;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::buf::BufCache;
use crate::dev::{BlockDevice, MemDevice};
use crate::disk::rtdev::{build_files, geometry_for, RtGeometry};
use crate::journal::Journal;

/// A device of `geo` whose free space is `free`, under `policy`, with a journal without a
/// log (commits write home).
fn setup(geo: RtGeometry, free: &[(u64, u64)], policy: RtAllocPolicy) -> (RtAlloc, Journal) {
    let (bm, sm) = build_files(&geo, free);
    let bs = geo.block_size as usize;
    let nb = bm.len() + sm.len();
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new((nb * bs) as u64));
    for (i, b) in bm.iter().chain(sm.iter()).enumerate() {
        dev.write_at((i * bs) as u64, b).unwrap();
    }
    let bufs = Arc::new(BufCache::new(dev.clone(), bs, 64 << 20));
    let j = Journal::new(dev, bufs.clone(), None, 1, bs);
    let bitmap: Vec<u64> = (0..bm.len() as u64).collect();
    let summary: Vec<u64> = (bm.len() as u64..nb as u64).collect();
    (RtAlloc::new(geo, bufs, bitmap, summary, policy).unwrap(), j)
}

/// Random maximal free runs over `n` extents (extent 0 allocated).
fn random_free(rng: &mut StdRng, n: u64, density: f64, maxrun: u64) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    let mut x = 1 + rng.gen_range(0..4);
    while x < n {
        if rng.gen_bool(density) {
            let len = rng.gen_range(1..=maxrun).min(n - x);
            runs.push((x, len));
            x += len + 1 + rng.gen_range(0..3);
        } else {
            x += rng.gen_range(1..=maxrun);
        }
    }
    runs
}

fn request(rng: &mut StdRng, n: u64) -> RtRequest {
    let prod = [1, 1, 2, 4, 8][rng.gen_range(0..5)];
    let minlen = prod * rng.gen_range(1..=4);
    let maxlen = minlen + prod * rng.gen_range(0..=24);
    let goal = rng.gen_bool(0.8).then(|| rng.gen_range(0..n));
    RtRequest {
        goal,
        minlen,
        maxlen,
        prod,
    }
}

/// Run `ops` random allocations and frees on both policies from the same state; every
/// outcome equal, every state checked against the model.
fn run_both(seed: u64, geo: RtGeometry, ops: usize) -> (RtStats, RtStats) {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = geo.rextents;
    let free = random_free(&mut rng, n, 0.5, 40);
    let (plain, jp) = setup(geo, &free, RtAllocPolicy::Plain);
    let (lean, jl) = setup(geo, &free, RtAllocPolicy::Lean);
    let mut model = vec![false; n as usize];
    for &(s, l) in &free {
        for x in s..s + l {
            model[x as usize] = true;
        }
    }
    let mut held: Vec<(u64, u64)> = Vec::new();
    for op in 0..ops {
        if !held.is_empty() && rng.gen_bool(0.3) {
            let (s, l) = held.swap_remove(rng.gen_range(0..held.len()));
            // Free all or a piece.
            let (fs, fl) = if l > 1 && rng.gen_bool(0.5) {
                let a = rng.gen_range(0..l);
                let b = rng.gen_range(a + 1..=l);
                if a > 0 {
                    held.push((s, a));
                }
                if b < l {
                    held.push((s + b, l - b));
                }
                (s + a, b - a)
            } else {
                (s, l)
            };
            for (a, j) in [(&plain, &jp), (&lean, &jl)] {
                let h = j.start();
                a.free(&h, fs, fl).unwrap();
            }
            for x in fs..fs + fl {
                assert!(!model[x as usize]);
                model[x as usize] = true;
            }
        } else {
            let req = request(&mut rng, n);
            let hp = jp.start();
            let op_p = plain.allocate(&hp, &req).unwrap();
            let hl = jl.start();
            let op_l = lean.allocate(&hl, &req).unwrap();
            assert_eq!(op_p, op_l, "seed {seed} op {op}: {req:?}");
            if let RtOutcome::Got { start, len } = op_l {
                assert!(len >= req.minlen && len <= req.maxlen, "{req:?} got {len}");
                if len < req.maxlen && req.prod > 1 {
                    assert_eq!(len % req.prod, 0);
                }
                let gext = geo.group_extents();
                assert_eq!(start / gext, (start + len - 1) / gext, "crosses a group");
                for x in start..start + len {
                    assert!(
                        model[x as usize],
                        "seed {seed} op {op}: extent {x} handed out twice"
                    );
                    model[x as usize] = false;
                }
                held.push((start, len));
            }
        }
        // Commit so nothing stays busy.
        jp.commit_running().unwrap();
        jl.commit_running().unwrap();
        plain.committed(u64::MAX);
        lean.committed(u64::MAX);
        if op % 16 == 0 {
            plain.check().unwrap();
            lean.check().unwrap();
        }
    }
    plain.check().unwrap();
    lean.check().unwrap();
    let free_now = model.iter().filter(|&&f| f).count() as u64;
    assert_eq!(lean.stats().free_extents, free_now);
    (plain.stats(), lean.stats())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn both_policies_decide_alike(seed in any::<u64>(), bs in prop::sample::select(vec![1024u32, 4096]),
                                  blocks in 1u64..6, groups in 0u32..3) {
        // Small blocks make many bitmap blocks; groups of 1 or 2 bitmap blocks, or one.
        let bits = u64::from(bs) * 8;
        let n = bits * blocks - (seed % 97);
        let geo = geometry_for(bs, n * u64::from(bs), 1, groups).unwrap();
        let (p, l) = run_both(seed, geo, 300);
        prop_assert_eq!(p.decisions, l.decisions);
        prop_assert_eq!(p.allocations, l.allocations);
    }
}

#[test]
fn lean_reads_less_on_a_fragmented_device() {
    // 64 bitmap blocks of 1 KiB, one group, free space in runs of 1..8 only: hinted
    // requests of 16 search far.
    let geo = geometry_for(1024, 64 * 8192 * 1024, 1, 0).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let free = random_free(&mut rng, geo.rextents, 0.7, 8);
    let (plain, jp) = setup(geo, &free, RtAllocPolicy::Plain);
    let (lean, jl) = setup(geo, &free, RtAllocPolicy::Lean);
    for i in 0..200u64 {
        let req = RtRequest {
            goal: Some((i * 7919 * 31) % geo.rextents),
            minlen: 4,
            maxlen: 8,
            prod: 4,
        };
        let a = plain.allocate(&jp.start(), &req).unwrap();
        let b = lean.allocate(&jl.start(), &req).unwrap();
        assert_eq!(a, b);
    }
    let (p, l) = (plain.stats(), lean.stats());
    assert_eq!(p.decisions, l.decisions);
    let pr = p.bitmap_reads + p.summary_reads;
    let lr = l.bitmap_reads + l.summary_reads;
    assert!(lr * 2 < pr, "lean read {lr} blocks, plain {pr}");
    plain.check().unwrap();
    lean.check().unwrap();
}

#[test]
fn busy_extents_wait_for_their_commit() {
    let geo = geometry_for(1024, 8192 * 1024, 1, 0).unwrap();
    let (a, j) = setup(geo, &[(1, 100)], RtAllocPolicy::Lean);
    let h = j.start();
    let got = a
        .allocate(
            &h,
            &RtRequest {
                goal: Some(1),
                minlen: 100,
                maxlen: 100,
                prod: 1,
            },
        )
        .unwrap();
    assert_eq!(got, RtOutcome::Got { start: 1, len: 100 });
    drop(h);
    j.commit_running().unwrap();
    let h = j.start();
    a.free(&h, 1, 100).unwrap();
    // Not even the freeing transaction may reuse them: they hold committed data until it
    // commits.
    let req = RtRequest {
        goal: Some(1),
        minlen: 10,
        maxlen: 10,
        prod: 1,
    };
    assert_eq!(a.allocate(&h, &req).unwrap(), RtOutcome::Busy);
    let tid = h.tid();
    drop(h);
    j.commit_running().unwrap();
    // The next transaction may not, until the commit hook releases them.
    let h = j.start();
    assert_eq!(a.allocate(&h, &req).unwrap(), RtOutcome::Busy);
    a.committed(tid);
    assert_eq!(
        a.allocate(&h, &req).unwrap(),
        RtOutcome::Got { start: 1, len: 10 }
    );
    drop(h);
    a.check().unwrap();
    // Freeing a free extent is refused by name.
    let h = j.start();
    assert!(a.free(&h, 50, 5).is_err());
}

/// Reads per allocation of both policies on a large fragmented group (a measurement, not
/// a check: `cargo test --release -p lanefs --lib rtalloc::tests::fragmented_reads -- --ignored --nocapture`).
#[test]
#[ignore]
fn fragmented_reads() {
    // 1 GiB of 4 KiB extents... as 2^18 extents, 8 bitmap blocks of 4 KiB; groups of 2.
    for (blocks, groups) in [(64u64, 0u32), (512, 0), (512, 64)] {
        let geo = geometry_for(4096, blocks * 32768 * 4096, 1, groups).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let free = random_free(&mut rng, geo.rextents, 0.5, 12);
        let (plain, jp) = setup(geo, &free, RtAllocPolicy::Plain);
        let (lean, jl) = setup(geo, &free, RtAllocPolicy::Lean);
        let mut rng = StdRng::seed_from_u64(9);
        for _ in 0..300 {
            let hint = [1u64, 4, 16][rng.gen_range(0..3)];
            let req = RtRequest {
                goal: Some(rng.gen_range(1..geo.rextents)),
                minlen: hint,
                maxlen: hint * 4,
                prod: hint,
            };
            let t = std::time::Instant::now();
            let a = plain.allocate(&jp.start(), &req).unwrap();
            let tp = t.elapsed();
            let t = std::time::Instant::now();
            let b = lean.allocate(&jl.start(), &req).unwrap();
            let tl = t.elapsed();
            let _ = (tp, tl);
            assert_eq!(a, b);
        }
        let (p, l) = (plain.stats(), lean.stats());
        assert_eq!(p.decisions, l.decisions);
        eprintln!(
            "{blocks} bitmap blocks, groups {groups}: plain {} bitmap + {} summary reads, lean {} + {} ({:.3}x)",
            p.bitmap_reads,
            p.summary_reads,
            l.bitmap_reads,
            l.summary_reads,
            (l.bitmap_reads + l.summary_reads) as f64 / (p.bitmap_reads + p.summary_reads) as f64
        );
    }
}
