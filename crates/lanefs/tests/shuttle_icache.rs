//! Goal: the inode cache's tables keep one in-memory inode per number, never hand out an
//! inode that is half set up, evicted or removed, never keep the placeholder of a failed
//! set-up, and never deadlock, whatever the schedule of lookups, creates, failed set-ups,
//! removals and evictions racing on the same and on neighbouring inode numbers.
//!
//! Method: shuttle (a randomized scheduler) runs the model below many times, switching
//! tasks at every lock, condition variable, atomic and yield of the cache and reporting any
//! task that blocks forever (under `cfg(shuttle)`, `icache.rs` and `sync/` swap those for
//! shuttle's, and `icache.rs` adds a switch before each use-gate operation, whose atomics
//! stay std's). Tasks use the public `ICache` API as the engine does: `get` (with a load
//! that can fail), `begin_new` + `NewInode::finish` or a dropped `NewInode` (a failed
//! create), `peek`, and `remove` after the inode is freed; the cache's limit is below two
//! inodes, so set-ups sweep and evict. Inode numbers A and B share one bucket of the
//! `bucket` table; C has another. The same model runs on the `global` table.
//!
//! Half set up: a creator yields between its claim and `finish`, and a loader checks the
//! model inside its load; a lookup that did not wait for them would set up or hand out a
//! second copy (two live copies), and an inode published before its creator's use was
//! taken can be evicted and handed out dead (both caught: a lookup replacing another's
//! placeholder, and `publish` inserting before taking its first use, fail here within a
//! few hundred schedules; a failed create leaving its placeholder fails as a livelock).
//!
//! Out of scope: shuttle runs atomics as sequentially consistent (it warns so once); the
//! use gate's orderings are checked by loom in `loom_icache.rs`. The `papaya` table's
//! internals are not shuttle's, so it is not modelled.
//!
//! Schedules are drawn afresh each run; a failure prints the schedule to pass to
//! `shuttle::replay`. Run with
//! `RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target/shuttle cargo test -p lanefs --release --test shuttle_icache`
//! (`.ci/run` does); without `--cfg shuttle` this file is empty.
#![cfg(shuttle)]

use lanefs::internals::disk::inode::DiskInode;
use lanefs::internals::icache::{ICache, IRef};
use lanefs::internals::inode::{new_inode, Inode};
use lanefs::IcachePolicy;
use shuttle::sync::Mutex;
use shuttle::thread::{self, yield_now};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

/// Looked up (and loaded) by two tasks, one of whose loads fails. Bucket 0 of the table's
/// 1,024 buckets (the fewest it has), which the sweep's hand visits first (`icache.rs`
/// puts runs of 16 consecutive numbers in adjacent buckets and spreads the runs by
/// Fibonacci hashing; `Model::new` asserts the buckets named here).
const A: u64 = 544;
/// Created, freed and removed by one task; a failed create and peeks by another. Also
/// bucket 0: its inserts and removals copy the chain that holds A.
const B: u64 = 1424;
/// Created by one task while another's lookup of it fails to load. Bucket 1.
const C: u64 = 545;

/// Inode size on disk (what `DiskInode::new` is given).
const INODE_SIZE: usize = 256;

/// Random schedules per table (the stronger search here: it caught each planted bug within
/// 300 schedules).
const RANDOM_ITERATIONS: usize = 20_000;
/// PCT schedules per table, and the bug depth PCT aims at: PCT's few priority changes are
/// spread over a run's steps, thousands with the bucket table's sweeps, so a shallow depth
/// (3) missed planted bugs there.
const PCT_ITERATIONS: usize = 3_000;
const PCT_DEPTH: usize = 10;

/// What the model has seen, for the checks; behind a shuttle lock (a switch point more).
#[derive(Default)]
struct Track {
    /// Logical time: one tick per event the checks order.
    clock: u64,
    /// Every inode object handed out by the cache, once each.
    seen: Vec<Arc<Inode>>,
    /// Inodes `remove` was called for, with the time it returned.
    removed: Vec<(Arc<Inode>, u64)>,
}

struct Model {
    cache: ICache,
    track: Mutex<Track>,
    /// B's bit in the inode bitmap: a create claims the number only while it holds it, as
    /// `ialloc` hands a free number to one creator at a time.
    b_in_use: Mutex<bool>,
}

impl Model {
    fn new(policy: IcachePolicy) -> Model {
        // Between one and two inodes: a second resident inode starts a sweep, which goes on
        // until one is left (7/8 of the limit), or gives up after two turns if all are in use.
        let one = new_inode(A, DiskInode::new(INODE_SIZE)).mem_bytes() as u64;
        let cache = ICache::new(policy, one * 3 / 2);
        if policy == IcachePolicy::Bucket {
            // A and B share the bucket the sweep visits first; C is its neighbour.
            assert_eq!(
                [A, B, C].map(|i| cache.bucket_index(i)),
                [Some(0), Some(0), Some(1)]
            );
        }
        Model {
            cache,
            track: Mutex::new(Track::default()),
            b_in_use: Mutex::new(false),
        }
    }

    fn track(&self) -> shuttle::sync::MutexGuard<'_, Track> {
        // A failed check poisons the lock; the tasks torn down after it need no second panic.
        self.track.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A tick of logical time, taken before an operation whose result the checks date.
    fn now(&self) -> u64 {
        let mut t = self.track();
        t.clock += 1;
        t.clock
    }

    /// A set-up of `ino` starts (a load or a claimed create): every copy handed out before
    /// must be gone from the table, evicted (dead) or freed.
    fn no_live_copy(&self, ino: u64, what: &str) {
        let t = self.track();
        for o in t.seen.iter().filter(|o| o.ino == ino) {
            assert!(
                o.is_freed() || o.cache.gate.is_dead(),
                "{what} of inode {ino} while another copy of it is live in the cache"
            );
        }
    }

    /// Checks on a use of `ino` that a lookup or create started at `t0` got.
    fn got(&self, ino: u64, r: &IRef, t0: u64) {
        assert_eq!(r.ino, ino, "asked for inode {ino}, got inode {}", r.ino);
        // A use is held: the sweep cannot kill it from now on (and a failed kill that set
        // the mark transiently needs no use held), so it must not be dead now.
        assert!(
            !r.cache.gate.is_dead(),
            "inode {ino} handed out while (or after) being evicted"
        );
        let mut t = self.track();
        if let Some((_, at)) = t.removed.iter().find(|(o, _)| Arc::ptr_eq(o, r.arc())) {
            assert!(
                *at > t0,
                "inode {ino} handed out by a lookup that started after its removal"
            );
        }
        for o in t
            .seen
            .iter()
            .filter(|o| o.ino == ino && !Arc::ptr_eq(o, r.arc()))
        {
            assert!(
                o.is_freed() || o.cache.gate.is_dead(),
                "two copies of inode {ino} live at once"
            );
        }
        if !t.seen.iter().any(|o| Arc::ptr_eq(o, r.arc())) {
            t.seen.push(r.arc().clone());
        }
    }

    /// Keep a use across a switch: an inode in use is never evicted.
    fn hold(&self, r: &IRef) {
        yield_now();
        assert!(!r.cache.gate.is_dead(), "inode {} evicted in use", r.ino);
    }

    /// `get` whose load succeeds (or a cached copy).
    fn lookup(&self, ino: u64) {
        let t0 = self.now();
        let r = self
            .cache
            .get(ino, || {
                self.no_live_copy(ino, "load");
                Ok::<_, ()>(new_inode(ino, DiskInode::new(INODE_SIZE)))
            })
            .expect("the load succeeds");
        self.got(ino, &r, t0);
        self.hold(&r);
    }

    /// `get` whose load fails (a bad inode on disk, or a number not in use): the
    /// placeholder goes, and lookups waiting on it look again.
    fn failed_lookup(&self, ino: u64) {
        let t0 = self.now();
        let got = self.cache.get(ino, || {
            self.no_live_copy(ino, "load");
            Err::<Inode, _>("bad inode")
        });
        if let Ok(r) = got {
            // A cached copy: no load ran.
            self.got(ino, &r, t0);
        }
    }

    /// `peek`: the cached copy, if any (waits for one being set up).
    fn peek(&self, ino: u64) {
        let t0 = self.now();
        if let Some(r) = self.cache.peek(ino) {
            self.got(ino, &r, t0);
        }
    }

    /// Claim B's bitmap bit if it is free.
    fn alloc_b(&self) -> bool {
        let mut b = self.b_in_use.lock().unwrap_or_else(PoisonError::into_inner);
        !std::mem::replace(&mut *b, true)
    }

    fn free_b(&self) {
        *self.b_in_use.lock().unwrap_or_else(PoisonError::into_inner) = false;
    }

    /// A create of `ino` (which the model allocated): a cached copy is freed, so the
    /// claim succeeds; set up, publish, hold.
    fn create(&self, ino: u64) -> IRef {
        let claim = self
            .cache
            .begin_new(ino)
            .expect("a free number's cached copy, if any, is freed");
        self.no_live_copy(ino, "create");
        let t0 = self.now();
        yield_now(); // the set-up: lookups of `ino` meanwhile must wait for it
        let r = claim.finish(new_inode(ino, DiskInode::new(INODE_SIZE)));
        self.got(ino, &r, t0);
        self.hold(&r);
        r
    }

    /// Create B, then free it as unlink does: mark it gone, give the number back to the
    /// bitmap (a new create may claim it at once, replacing the freed copy), then remove
    /// it from the cache.
    fn create_and_free_b(&self) {
        while !self.alloc_b() {
            yield_now();
        }
        let r = self.create(B);
        r.gone.store(true, Ordering::Release);
        self.free_b();
        self.cache.remove(B, &r);
        let at = self.now();
        self.track().removed.push((r.arc().clone(), at));
        self.hold(&r); // a freed inode stays usable by whoever holds it
    }

    /// A create of B that fails after claiming the number (if the bitmap hands it out).
    fn failed_create_b(&self) {
        if !self.alloc_b() {
            return;
        }
        let claim = self
            .cache
            .begin_new(B)
            .expect("a free number's cached copy, if any, is freed");
        yield_now();
        drop(claim);
        self.free_b();
    }

    /// Once every task is done: the table and its accounting agree, B is gone, and no
    /// placeholder is left (these lookups would wait, or spin, on a leftover one forever:
    /// shuttle fails a deadlock, and a spin at its step bound).
    fn quiescent(&self) {
        let all = self.cache.all();
        for ino in [A, B, C] {
            assert!(
                all.iter().filter(|i| i.ino == ino).count() <= 1,
                "inode {ino} twice in the table"
            );
        }
        assert!(
            all.iter().all(|i| !i.cache.gate.is_dead()),
            "an evicted inode left in the table"
        );
        let stats = self.cache.stats();
        assert_eq!(stats.inodes, all.len() as u64, "inode count");
        let charged: u64 = all
            .iter()
            .map(|i| i.cache.charge.load(Ordering::Relaxed))
            .sum();
        assert_eq!(stats.bytes, charged, "bytes charged");
        assert!(self.cache.peek(B).is_none(), "freed B still cached");
        self.lookup(A);
        self.lookup(C);
    }
}

/// The model: five tasks and the main one, racing on A, B and C.
fn model(policy: IcachePolicy) {
    let m = Arc::new(Model::new(policy));
    let spawn = |f: fn(&Model)| {
        let m = m.clone();
        thread::spawn(move || f(&m))
    };
    let tasks = [
        // Two lookups of A, each held across a switch.
        spawn(|m| {
            m.lookup(A);
            m.lookup(A);
        }),
        // A lookup of A whose load fails, then one that succeeds.
        spawn(|m| {
            m.failed_lookup(A);
            m.lookup(A);
        }),
        // B created, freed and removed.
        spawn(Model::create_and_free_b),
        // A failed create of B, then peeks at B and A.
        spawn(|m| {
            m.failed_create_b();
            m.peek(B);
            m.peek(A);
        }),
        // C created and held, then a peek at A.
        spawn(|m| {
            drop(m.create(C));
            m.peek(A);
        }),
    ];
    // A lookup of C (being created) whose load fails: the create waits for it, or it
    // finds the created inode.
    m.failed_lookup(C);
    for t in tasks {
        t.join().unwrap();
    }
    m.quiescent();
}

#[test]
fn bucket_table_random() {
    shuttle::check_random(|| model(IcachePolicy::Bucket), RANDOM_ITERATIONS);
}

#[test]
fn bucket_table_pct() {
    shuttle::check_pct(|| model(IcachePolicy::Bucket), PCT_ITERATIONS, PCT_DEPTH);
}

#[test]
fn global_table_random() {
    shuttle::check_random(|| model(IcachePolicy::Global), RANDOM_ITERATIONS);
}

#[test]
fn global_table_pct() {
    shuttle::check_pct(|| model(IcachePolicy::Global), PCT_ITERATIONS, PCT_DEPTH);
}
