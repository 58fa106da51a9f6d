//! Goal: whatever a power cut leaves on the device mounts (the mount replays the journal),
//! is clean for `lanefs fsck` and `e2fsck -fn`, and holds everything the engine
//! acknowledged: after `fsync(file)` its data and size, after `fsync(dir)` its entries,
//! after `sync()` everything; a rename is atomic (the target holds the old or the new file,
//! whole); no metadata operation is half-applied.
//!
//! Method: each workload (fallocate2-like, create/remove, rename-over, append+fsync,
//! truncate, an htree directory, a random mix) runs, driven by a seed, on a 64 MiB
//! `mkfs.ext4` image (4 MiB journal, so it wraps) held by a [`CrashDevice`]. A model records,
//! per directory entry and per file, every state since the last acknowledgement (fsync or
//! sync): after a crash each entry and each file must be in one of them (file bytes are
//! checked one by one, so a partly written unacknowledged write is fine, stale data is
//! not). A dry run counts the device's writes and flushes; each crash run then cuts the
//! power at a chosen write K, after flush N, or instead of flush N, and builds crash states
//! from the writes not yet flushed: all lost, all kept, a prefix, a random subset, a
//! reordered subset, and a subset whose last write is torn at a 4 KiB block boundary. Each state
//! is mounted, compared with the model, unmounted, and checked with `lanefs::fsck` and (on a
//! sample) `e2fsck -fn`.
//!
//! `crash_at_sync_points` crashes only right after the flush that ends a `sync()`.
//!
//! Other shapes: `crash_1k_*` run workloads on a 1 KiB-block ext4 image (`mke2fs -t ext4
//! -b 1024`: superblock in block 1, 1 KiB journal blocks, writes torn at 1 KiB),
//! `crash_ext3_*` on an ext3 image (`mke2fs -t ext3`: block-mapped files, a journal with
//! 32-bit block tags and no checksums; fallocate may be refused as Linux refuses it on
//! block-mapped files), `crash_smallcache_*` on the default image mounted with a 256 KiB
//! `bufcache_limit` (tiny transactions, a checkpoint at nearly every commit, constant
//! eviction), each with half a workload's share of the states;
//! `crash_at_sync_points_1k` and `_ext3` crash at the end of every sync of every workload
//! on them.
//!
//! Environment: `LANEFS_CRASH_STATES` (default 3000) is the number of states the seven
//! workload tests check together; `LANEFS_CRASH_SEED` reproduces a run (printed at start
//! and on failure); `LANEFS_CRASH_RUN=I` runs only crash run I of each workload, and
//! `LANEFS_CRASH_CUT=write:K|after_flush:N|at_flush:N` forces its crash point (the engine's
//! write count can vary slightly from run to run, so a failure prints both);
//! `LANEFS_CRASH_TEAR=B` tears writes at B bytes (default 4096: the device writes a
//! 4 KiB block atomically, which ext4 and jbd2 assume too, since each rewrites its
//! checksummed superblock in place; 512 also tears inside a block); `LANEFS_CRASH_E2FSCK_EVERY=N` runs e2fsck on every Nth state
//! (default: every state up to 600 states in all, about 300 runs above that; the dry runs,
//! the sync points and every failing state always get it); `LANEFS_CRASH_MAX_FAILURES`
//! (default 5) stops a workload after that many failing states. The first failing image of each workload is
//! saved under the temporary directory (`lanefs-crash/`) and its path printed.

#[path = "../common/mod.rs"]
mod common;

use lanefs::fsck::{self, FsckOptions};
use lanefs::CrashDevice;
use lanefs::{Error, FallocMode, FileType, Fs, Ino, MountOptions, Owner, SetAttr, ROOT_INO};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const IMG_SIZE: u64 = 64 << 20;
const OWNER: Owner = Owner {
    uid: 1000,
    gid: 100,
    umask: 0,
};
/// The number of workload tests that share `LANEFS_CRASH_STATES`.
const WORKLOADS: u64 = 7;

mod check;
mod config;
mod driver;
mod model;
mod runs;
mod states;
mod workloads;

use check::*;
use config::*;
use driver::*;
use model::*;
use runs::*;
use states::*;
use workloads::*;

#[test]
fn crash_fallocate2() {
    crash_workload(&ALL[0], &EXT4_4K, 1);
}

#[test]
fn crash_create_remove() {
    crash_workload(&ALL[1], &EXT4_4K, 1);
}

#[test]
fn crash_rename_over() {
    crash_workload(&ALL[2], &EXT4_4K, 1);
}

#[test]
fn crash_append_fsync() {
    crash_workload(&ALL[3], &EXT4_4K, 1);
}

#[test]
fn crash_truncate() {
    crash_workload(&ALL[4], &EXT4_4K, 1);
}

#[test]
fn crash_htree() {
    crash_workload(&ALL[5], &EXT4_4K, 1);
}

#[test]
fn crash_mix() {
    crash_workload(&ALL[6], &EXT4_4K, 1);
}

/// Crash right after the flush that ends each `sync()` of every workload: the durable
/// image must mount and hold everything, e2fsck checking every state.
#[test]
fn crash_at_sync_points() {
    sync_points("crash_at_sync_points", &EXT4_4K, &ALL);
}

fn sync_points(test: &str, shape: &Shape, workloads: &[Workload]) {
    set_shape(shape);
    let Some(base) = base_image(test, shape) else {
        return;
    };
    let _dog = common::watchdog(test, 900);
    let start = Instant::now();
    let mut rep = Report::new();
    for w in workloads {
        let wseed = mix(base_seed(), name_seed(w.name));
        let label = format!("{}{}", shape.name, w.name);
        let (dry, writes, flushes) = dry_run(&label, w, base, wseed);
        rep.states += 1;
        assert!(
            !dry.sync_flushes.is_empty(),
            "{}: the workload never synced",
            w.name
        );
        let sync_flushes = dry.sync_flushes.clone();
        give_buf(device_bytes(dry.dev));
        for n in sync_flushes {
            let cut = Cut::AfterFlush(n);
            let head = format!(
                "{label} (LANEFS_CRASH_SEED={:#x}): crash {cut:?} (end of a sync) of {writes} writes, {flushes} flushes",
                base_seed()
            );
            let run = run_workload(w, base, wseed, cut, &head);
            rep.runs += 1;
            assert_eq!(
                run.dev.pending_len(),
                0,
                "{head}: writes pending after a flush"
            );
            rep.states += 1;
            rep.e2fsck += 1;
            let img = build_state(&run.dev, &Keep::Writes(Vec::new()));
            if let Err(e) = check_state(img, &run.model, true) {
                rep.failed_states += 1;
                rep.failures.push(format!(
                    "{head}; state: durable at the end of the sync\n{e}"
                ));
            }
            give_buf(device_bytes(run.dev));
        }
    }
    finish(test, &rep, start);
}

// ---------------------------------------------------------------------------------------
// Other shapes: 1 KiB blocks, ext3 (block maps; a journal with 32-bit tags and no
// checksums), and a tiny buffer cache. Each workload test gets half a workload's state
// budget.

#[test]
fn crash_1k_mix() {
    crash_workload(&ALL[6], &EXT4_1K, 2);
}

#[test]
fn crash_1k_truncate() {
    crash_workload(&ALL[4], &EXT4_1K, 2);
}

#[test]
fn crash_smallcache_mix() {
    crash_workload(&ALL[6], &SMALL_CACHE, 2);
}

#[test]
fn crash_smallcache_htree() {
    crash_workload(&ALL[5], &SMALL_CACHE, 2);
}

#[test]
fn crash_ext3_mix() {
    crash_workload(&ALL[6], &EXT3, 2);
}

#[test]
fn crash_ext3_append_fsync() {
    crash_workload(&ALL[3], &EXT3, 2);
}

#[test]
fn crash_ext3_htree() {
    crash_workload(&ALL[5], &EXT3, 2);
}

/// Dirty folios of every order, split and evicted, with a crash at every point.
#[test]
fn crash_folios_folios() {
    crash_workload(&FOLIOS_WL, &FOLIOS, 1);
}

/// The random mix with large folios in a 1 MiB page cache.
#[test]
fn crash_folios_mix() {
    crash_workload(&ALL[6], &FOLIOS, 2);
}

/// The end of every sync of the folio workload and the mix, with large folios.
#[test]
fn crash_at_sync_points_folios() {
    sync_points("crash_at_sync_points_folios", &FOLIOS, &[FOLIOS_WL, ALL[6]]);
}

/// The end of every sync of every workload, on 1 KiB blocks.
#[test]
fn crash_at_sync_points_1k() {
    sync_points("crash_at_sync_points_1k", &EXT4_1K, &ALL);
}

/// The end of every sync of every workload, on ext3.
#[test]
fn crash_at_sync_points_ext3() {
    sync_points("crash_at_sync_points_ext3", &EXT3, &ALL);
}

/// The harness itself: a device cut at a write stops the workload, and the model refuses
/// a state that lost an acknowledged write (so a passing run means something).
#[test]
fn crash_model_catches_lost_data() {
    let test = "crash_model_catches_lost_data";
    let Some(base) = base_image(test, &EXT4_4K) else {
        return;
    };
    let dev = Arc::new(CrashDevice::from_vec(base.to_vec()));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount");
    let f = fs.create(ROOT_INO, b"f", 0o644, OWNER).expect("create");
    fs.release(f.ino).expect("release");
    fs.write(f.ino, 0, &pattern(1, 0, 5000)).expect("write");
    fs.sync().expect("sync");
    let mut m = Model::new(lost_found_ino(base));
    let id = m.add_node(Some(f.ino), FileType::Regular, "/f".into());
    m.set_name(ROOT, b"f", Some(id));
    m.push_content(id, pattern(1, 0, 5000));
    m.ack_all();
    let synced = dev.durable();
    check_state(synced.clone(), &m, true).expect("the synced state is clean");
    // An acknowledged byte changed: the model must say so.
    let mut wrong = pattern(1, 0, 5000);
    wrong[4000] ^= 0x80;
    m.push_content(id, wrong);
    m.ack_node(id);
    let err = check_state(synced.clone(), &m, false).expect_err("changed byte not caught");
    assert!(err.contains("byte 4000"), "{err}");
    // A name the model does not know.
    let mut m2 = Model::new(lost_found_ino(base));
    m2.ack_all();
    let err = check_state(synced.clone(), &m2, false).expect_err("unknown entry not caught");
    assert!(err.contains("unexpected entry"), "{err}");
    // An acknowledged name that is not there.
    let mut m3 = Model::new(lost_found_ino(base));
    let f3 = m3.add_node(Some(f.ino), FileType::Regular, "/f".into());
    m3.push_content(f3, pattern(1, 0, 5000));
    let g = m3.add_node(Some(99), FileType::Regular, "/g".into());
    m3.set_name(ROOT, b"f", Some(f3));
    m3.set_name(ROOT, b"g", Some(g));
    m3.ack_all();
    let err = check_state(synced.clone(), &m3, false).expect_err("missing entry not caught");
    assert!(err.contains("/g: missing"), "{err}");
    // A cut device fails every later write: the engine turns read-only and what the
    // device holds stays as synced.
    dev.power_cut();
    fs.write(f.ino, 0, b"x")
        .expect("a write only reaches the page cache");
    assert!(fs.sync().is_err());
    assert!(fs.is_read_only());
    drop(fs);
    assert_eq!(dev.pending_len(), 0);
    assert!(
        dev.durable() == synced,
        "the device changed after the power cut"
    );
}

/// The per-byte rule: any byte some version since the ack had, a size one of them had;
/// nothing else (zeros and foreign bytes are named).
#[test]
fn crash_model_content_rules() {
    let old = vec![1u8; 10];
    let new = vec![2u8; 6];
    let grown = [vec![2u8; 6], vec![3u8; 6]].concat();
    let vs = [old.clone(), new.clone(), grown.clone()];
    for ok in [&old, &new, &grown] {
        assert_eq!(content_allowed(&vs, ok), Ok(()));
    }
    // A mix of versions, byte by byte: an unacknowledged write partly on the device.
    let mixed = [vec![2u8; 3], vec![1u8; 7]].concat();
    assert_eq!(content_allowed(&vs, &mixed), Ok(()));
    let e = content_allowed(&vs, &[2u8; 7]).unwrap_err();
    assert!(e.contains("size 7 is not one of"), "{e}");
    // Zeros under a size that covers written data: ordered-mode violation.
    let e = content_allowed(&vs, &[[2u8; 6], [0u8; 6]].concat()).unwrap_err();
    assert!(e.contains("byte 6") && e.contains("data=ordered"), "{e}");
    // Only the acknowledged version: any change to it is a lost acknowledged byte.
    let e = content_allowed(
        std::slice::from_ref(&old),
        &[&[1u8; 9][..], &[7u8][..]].concat(),
    )
    .unwrap_err();
    assert!(
        e.contains("byte 9") && e.contains("acknowledged byte was lost"),
        "{e}"
    );
    let e = content_allowed(&[old, new], &[&[2u8; 6][..], &[9u8; 4][..]].concat()).unwrap_err();
    assert!(e.contains("stale or foreign"), "{e}");
}
