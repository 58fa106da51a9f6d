//! Goal: one file's page cache (the folio index walked without a lock, the folios' locks,
//! dirty bits and removed flag, the mapping's seqcount and size mirror) gives every read
//! the file's bytes as they were at one instant inside the read, whatever the schedule of
//! lock-free read hits, locked read misses with read-ahead, writes, hole punches that split
//! large folios, write-back, the eviction sweep and dropping the clean cache; write-back
//! puts every written block on the device; nothing deadlocks.
//!
//! Method: shuttle (a randomized scheduler) runs the model below many times, switching
//! tasks at every lock (the engine's `sync` locks are shuttle's under `cfg(shuttle)`) and
//! at every atomic of the index, the folios and the mapping (`sync::atomic`). The tasks
//! drive `Mapping` as `fs/data.rs` does: a read tries `read_fast` (no inode lock), then
//! `read` under the inode's state lock shared; a write, or a punch (`drop_range`, then the
//! blocks unmapped) runs under it exclusive. A 16-block file of 1 KiB blocks, folios up to
//! order 2 (and order 0, the baseline), a limit of a few folios so that every insertion
//! sweeps and evicts.
//!
//! The check is linearizability against a model of the file: the model's states are the
//! file after each write or punch (they are serialized by the inode lock); a read returns
//! one of the states from the last change that ended before it started to the last one
//! that started before it ended. Blocks hold a byte that names the block and the change
//! that wrote it, so a torn block or a block of another offset is caught too. At the end,
//! after a final write-back, every block on the device and in the cache equals the model,
//! and no block is dirty.
//!
//! Planted bugs fail it (each within the schedules below, in 2.4 s for all): `read_fast`
//! skipping its seqcount re-check (a torn read across folios, in the cached models), and
//! `read_hits` copying from a folio that left its index (in every large-folio model).
//!
//! Out of scope: shuttle runs atomics as sequentially consistent, and reclamation: under
//! `cfg(shuttle)` the index keeps removed folios until it is dropped instead of deferring
//! their drop to crossbeam-epoch (whose garbage would outlive the execution's shuttle
//! objects), so the grace period itself is crossbeam's and not modelled.
//!
//! Run with
//! `RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target/shuttle cargo test -p lanefs --release --test shuttle_pagecache`
//! (`.ci/run` does); without `--cfg shuttle` this file is empty.
#![cfg(shuttle)]

use lanefs::internals::page::{Mapping, PageCache, Run};
use lanefs::{BlockDevice, MemDevice};
use shuttle::sync::{Mutex, RwLock};
use shuttle::thread;
use std::sync::Arc;

/// Block size.
const BS: usize = 1024;
/// Blocks in the file.
const BLOCKS: u64 = 16;
/// The file's block k lives at physical block `PHYS + k` while mapped.
const PHYS: u64 = 8;
/// Random schedules per folio order.
const RANDOM_ITERATIONS: usize = 10_000;
/// PCT schedules per folio order, and the bug depth PCT aims at.
const PCT_ITERATIONS: usize = 3_000;
const PCT_DEPTH: usize = 4;

/// The byte a block holds after change `v` wrote it (0: a hole).
fn tag(block: u64, v: u8) -> u8 {
    v.wrapping_mul(17).wrapping_add(block as u8 + 1) | 1
}

/// The file's blocks: for each, the change that last wrote it (`None`: a hole).
type State = Vec<Option<u8>>;

fn expected(s: &State, block: u64) -> u8 {
    s[block as usize].map_or(0, |v| tag(block, v))
}

/// What the checks see, in order.
struct History {
    /// The file after change i (0: as laid out), pushed when the change begins.
    states: Vec<State>,
    /// Changes ended.
    ended: usize,
}

struct Model {
    pc: PageCache,
    dev: Arc<MemDevice>,
    m: Arc<Mapping>,
    /// The inode's state lock.
    inode: RwLock<()>,
    /// Which blocks are mapped (read and changed under `inode`).
    mapped: std::sync::Mutex<Vec<bool>>,
    history: Mutex<History>,
}

impl Model {
    fn new(order: u8, limit_blocks: u64) -> Model {
        let dev = Arc::new(MemDevice::new((PHYS + BLOCKS) * BS as u64));
        // Laid out by change 0.
        let first: State = vec![Some(0); BLOCKS as usize];
        for b in 0..BLOCKS {
            dev.write_at((PHYS + b) * BS as u64, &[tag(b, 0); BS])
                .unwrap();
        }
        let as_dyn: Arc<dyn BlockDevice> = dev.clone();
        let pc = PageCache::new(as_dyn, BS, order, limit_blocks * BS as u64);
        let m = Arc::new(Mapping::default());
        m.set_size(BLOCKS * BS as u64);
        Model {
            pc,
            dev,
            m,
            inode: RwLock::new(()),
            mapped: std::sync::Mutex::new(vec![true; BLOCKS as usize]),
            history: Mutex::new(History {
                states: vec![first],
                ended: 0,
            }),
        }
    }

    /// The block map's run at `l` (the inode lock held).
    fn run_at(&self, l: u64) -> Run {
        let mapped = self.mapped.lock().unwrap();
        let here = mapped[l as usize];
        let n = (l..BLOCKS)
            .take_while(|&k| mapped[k as usize] == here)
            .count() as u64;
        if here {
            Run::Data(PHYS + l, n)
        } else {
            Run::Zero(n)
        }
    }

    /// Read `n` blocks from block `a` as `fs::read` does, and check them.
    fn read(&self, a: u64, n: u64) {
        let lo = self.history.lock().unwrap().ended;
        let mut buf = vec![0u8; (n as usize) * BS];
        let off = a * BS as u64;
        if self.m.read_fast(BS, off, &mut buf).is_none() {
            let _g = self.inode.read().unwrap();
            self.m
                .read(&self.pc, off, &mut buf, BLOCKS * BS as u64, &|l| {
                    self.run_at(l)
                })
                .unwrap();
        }
        let h = self.history.lock().unwrap();
        let hi = h.states.len() - 1;
        let ok = (lo..=hi).any(|i| {
            (0..n).all(|k| {
                let want = expected(&h.states[i], a + k);
                buf[k as usize * BS..(k as usize + 1) * BS]
                    .iter()
                    .all(|&x| x == want)
            })
        });
        if !ok {
            let got: Vec<u8> = (0..n).map(|k| buf[k as usize * BS]).collect();
            let states: Vec<Vec<u8>> = h.states[lo..=hi]
                .iter()
                .map(|s| (a..a + n).map(|b| expected(s, b)).collect())
                .collect();
            panic!(
                "read of blocks {a}..{} got {got:?}, states {lo}..={hi} were {states:?}",
                a + n
            );
        }
    }

    /// Run change `op` of the file under the inode lock, recording first the state
    /// `effect` makes of the last one.
    fn change(&self, effect: impl FnOnce(&mut State), op: impl FnOnce()) {
        let _g = self.inode.write().unwrap();
        {
            let mut h = self.history.lock().unwrap();
            let mut next = h.states.last().unwrap().clone();
            effect(&mut next);
            h.states.push(next);
        }
        op();
        self.history.lock().unwrap().ended += 1;
    }

    /// Write blocks `a..a + n` as change number `v` (`fs::write`: the inode lock exclusive,
    /// unmapped blocks mapped first, fresh).
    fn write(&self, a: u64, n: u64, v: u8) {
        let effect = |s: &mut State| {
            for b in a..a + n {
                s[b as usize] = Some(v);
            }
        };
        self.change(effect, || {
            let mut fresh = vec![false; BLOCKS as usize];
            {
                let mut mapped = self.mapped.lock().unwrap();
                for b in a..a + n {
                    fresh[b as usize] = !mapped[b as usize];
                    mapped[b as usize] = true;
                }
            }
            let data: Vec<u8> = (a..a + n).flat_map(|b| [tag(b, v); BS]).collect();
            self.m
                .write(&self.pc, a * BS as u64, &data, &|b| {
                    (PHYS + b, fresh[b as usize])
                })
                .unwrap();
        });
    }

    /// Punch blocks `a..a + n` (`fs::punch`: drop the cache's blocks, then unmap them).
    fn punch(&self, a: u64, n: u64) {
        let effect = |s: &mut State| {
            for b in a..a + n {
                s[b as usize] = None;
            }
        };
        self.change(effect, || {
            self.m.drop_range(&self.pc, a, a + n);
            let mut mapped = self.mapped.lock().unwrap();
            for b in a..a + n {
                mapped[b as usize] = false;
            }
        });
    }

    fn write_back(&self) {
        self.m.write_back(&*self.dev, BS).unwrap();
    }

    /// After every task: write back, then the device's mapped blocks and every read equal
    /// the last state, and nothing is dirty.
    fn quiescent(&self) {
        self.write_back();
        let last = self.history.lock().unwrap().states.last().unwrap().clone();
        let mapped = self.mapped.lock().unwrap().clone();
        for b in 0..BLOCKS {
            if mapped[b as usize] {
                let mut blk = vec![0u8; BS];
                self.dev.read_at((PHYS + b) * BS as u64, &mut blk).unwrap();
                assert!(
                    blk.iter().all(|&x| x == expected(&last, b)),
                    "device block of file block {b}: {:#x}, want {:#x}",
                    blk[0],
                    expected(&last, b)
                );
            }
        }
        assert!(!self.m.has_dirty(), "dirty after the final write-back");
        assert_eq!(self.pc.stats().dirty_bytes, 0);
        self.read(0, BLOCKS);
    }
}

/// A limit that holds the whole file: reads hit, and race with changes lock-free.
const ROOMY: u64 = 64;
/// A limit of about three 4-block folios: most insertions sweep and evict.
const TIGHT: u64 = 14;

fn model(order: u8, limit_blocks: u64) {
    let md = Arc::new(Model::new(order, limit_blocks));
    // Cache the file in read-ahead's folios.
    md.read(0, 4);
    md.read(4, 12);
    let tasks: Vec<Box<dyn FnOnce(&Model) + Send>> = vec![
        // Reads across folio edges, hits and misses.
        Box::new(|m| {
            m.read(2, 8);
            m.read(0, 16);
        }),
        Box::new(|m| {
            m.read(6, 6);
            m.write_back();
        }),
        // Writes across folios, cached and not.
        Box::new(|m| {
            m.write(3, 6, 1);
            m.write(10, 3, 2);
        }),
        // A punch splitting the folios it ends inside, then write-back and the sweep.
        Box::new(|m| {
            m.punch(5, 2);
            m.write_back();
            m.m.drop_clean();
            m.pc.prune();
        }),
    ];
    let handles: Vec<_> = tasks
        .into_iter()
        .map(|t| {
            let md = md.clone();
            thread::spawn(move || t(&md))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    md.quiescent();
}

#[test]
fn large_folios_cached_random() {
    shuttle::check_random(|| model(2, ROOMY), RANDOM_ITERATIONS);
}

#[test]
fn large_folios_cached_pct() {
    shuttle::check_pct(|| model(2, ROOMY), PCT_ITERATIONS, PCT_DEPTH);
}

#[test]
fn large_folios_evicting_random() {
    shuttle::check_random(|| model(2, TIGHT), RANDOM_ITERATIONS);
}

#[test]
fn large_folios_evicting_pct() {
    shuttle::check_pct(|| model(2, TIGHT), PCT_ITERATIONS, PCT_DEPTH);
}

#[test]
fn single_block_pages_random() {
    shuttle::check_random(|| model(0, TIGHT), RANDOM_ITERATIONS);
}
