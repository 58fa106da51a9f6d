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

// ---------------------------------------------------------------------------------------
// Configuration and the base image.

/// An image shape the workloads run on.
struct Shape {
    /// Index into the per-shape caches.
    idx: usize,
    /// Prefix of test names and saved images ("" for the default shape).
    name: &'static str,
    bs: u64,
    /// New files get extents (else block maps, and fallocate may be refused).
    extents: bool,
    /// `mke2fs` arguments; empty: `mkfs.ext4 -b 4096 -J size=4` as always.
    mkfs: &'static [&'static str],
    /// The mount's `bufcache_limit` (0: the default).
    bufcache_limit: u64,
    /// The mount's `folio_max_order` and `pagecache_limit` (`None`: the defaults).
    pages: Option<(u8, u64)>,
}

/// mkfs.ext4's defaults with 4 KiB blocks (metadata_csum, 64-bit journal tags, csum v3).
const EXT4_4K: Shape = Shape {
    idx: 0,
    name: "",
    bs: 4096,
    extents: true,
    mkfs: &[],
    bufcache_limit: 0,
    pages: None,
};

/// ext4 with 1 KiB blocks: the superblock in block 1, 1 KiB journal blocks.
const EXT4_1K: Shape = Shape {
    idx: 1,
    name: "1k_",
    bs: 1024,
    extents: true,
    mkfs: &["-t", "ext4", "-b", "1024", "-J", "size=4"],
    bufcache_limit: 0,
    pages: None,
};

/// ext3: block-mapped files, a journal with 32-bit block tags and no checksums.
const EXT3: Shape = Shape {
    idx: 2,
    name: "ext3_",
    bs: 4096,
    extents: false,
    mkfs: &["-t", "ext3", "-b", "4096", "-J", "size=4"],
    bufcache_limit: 0,
    pages: None,
};

/// mkfs.ext4's defaults with 4 KiB blocks, mounted with a 256 KiB buffer cache: a
/// transaction closes past 8 blocks and the journal checkpoints once 32 blocks are pinned,
/// so nearly every commit checkpoints and evictions run all the time.
const SMALL_CACHE: Shape = Shape {
    idx: 0,
    name: "smallcache_",
    bs: 4096,
    extents: true,
    mkfs: &[],
    bufcache_limit: 256 << 10,
    pages: None,
};

/// mkfs.ext4's defaults with 4 KiB blocks, mounted with folios up to order 6 (256 KiB) in
/// a 1 MiB page cache: writes make dirty folios of every order, punches and truncations
/// split them, the dirty limit (a quarter of the cache) throttles writers into writing back
/// their own files, and clean folios are evicted all the time.
const FOLIOS: Shape = Shape {
    idx: 0,
    name: "folios_",
    bs: 4096,
    extents: true,
    mkfs: &[],
    bufcache_limit: 0,
    pages: Some((6, 1 << 20)),
};

/// What a test thread's shape sets: (block size, extents, bufcache_limit, pages).
type ShapeCell = std::cell::Cell<(u64, bool, u64, Option<(u8, u64)>)>;

thread_local! {
    /// The shape this test thread runs on.
    static SHAPE: ShapeCell = const { std::cell::Cell::new((4096, true, 0, None)) };
}

fn set_shape(s: &Shape) {
    SHAPE.with(|c| c.set((s.bs, s.extents, s.bufcache_limit, s.pages)));
}

/// The block size of this thread's image.
fn bs() -> u64 {
    SHAPE.with(|c| c.get().0)
}

/// Whether this thread's image gives new files extents.
fn extents() -> bool {
    SHAPE.with(|c| c.get().1)
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v}: not a number")))
}

/// Total states for the workload tests together.
fn total_states() -> u64 {
    env_u64("LANEFS_CRASH_STATES")
        .unwrap_or(3000)
        .max(WORKLOADS)
}

/// The base seed: `LANEFS_CRASH_SEED`, or a fresh one printed once.
fn base_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = env_u64("LANEFS_CRASH_SEED").unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)) & 0xFFFF_FFFF
        });
        println!("crash: LANEFS_CRASH_SEED={seed:#x}");
        seed
    })
}

fn e2fsck_every() -> u64 {
    env_u64("LANEFS_CRASH_E2FSCK_EVERY")
        .unwrap_or_else(|| match total_states() {
            t if t <= 600 => 1,
            t => t / 300,
        })
        .max(1)
}

/// Bytes a torn write is cut at: `LANEFS_CRASH_TEAR` (default the block size, at most
/// 4096: a device that writes a file-system block atomically; 512 tears inside blocks).
fn tear_unit() -> usize {
    let t = env_u64("LANEFS_CRASH_TEAR").unwrap_or(bs().min(4096)) as usize;
    assert!(
        t >= 512 && t.is_multiple_of(512),
        "LANEFS_CRASH_TEAR={t}: a multiple of 512"
    );
    t
}

fn max_failures() -> usize {
    env_u64("LANEFS_CRASH_MAX_FAILURES").unwrap_or(5).max(1) as usize
}

/// splitmix64: independent seeds from one.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The freshly made image every run on `shape` starts from, or None (after a SKIP)
/// without mkfs.ext4.
fn base_image(test: &str, shape: &Shape) -> Option<&'static [u8]> {
    static BASE: [OnceLock<Option<Vec<u8>>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let base = BASE[shape.idx].get_or_init(|| {
        if !common::have_tool("mkfs.ext4") || !common::have_tool("e2fsck") {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = if shape.mkfs.is_empty() {
            common::mkfs_image_args(dir.path(), "base.img", IMG_SIZE, &["-J", "size=4"])
        } else {
            common::mke2fs_image(dir.path(), "base.img", IMG_SIZE, shape.mkfs)
                .unwrap_or_else(|e| panic!("{test}: {e}"))
        };
        Some(std::fs::read(&path).expect("read base image"))
    });
    if base.is_none() {
        common::require_tools(test, &["mkfs.ext4", "e2fsck"]);
    }
    base.as_deref()
}

fn opts() -> MountOptions {
    let mut o = MountOptions {
        read_only: false,
        commit_interval: Duration::ZERO,
        ..MountOptions::default()
    };
    let (_, _, limit, pages) = SHAPE.with(|c| c.get());
    if limit > 0 {
        o.bufcache_limit = limit;
    }
    if let Some((order, limit)) = pages {
        o.folio_max_order = order;
        o.pagecache_limit = limit;
    }
    o
}

thread_local! {
    /// Image-sized buffers to reuse: a fresh 64 MiB allocation is mapped anew and costs
    /// far more in page faults than the copy into it.
    static POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn take_buf() -> Vec<u8> {
    POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

fn give_buf(b: Vec<u8>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < 4 {
            p.push(b);
        }
    });
}

/// A device's latest bytes, without a copy when nothing else holds it; then give its
/// buffer back with [`give_buf`].
fn device_bytes(dev: Arc<CrashDevice>) -> Vec<u8> {
    match Arc::try_unwrap(dev) {
        Ok(d) => d.into_vec(),
        Err(d) => {
            let mut b = take_buf();
            d.snapshot_into(&mut b);
            b
        }
    }
}

/// File contents: a function of a seed and the offset, never zero, so stale data, lost
/// writes and zeros are all told apart.
fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = mix(seed, (off + i) / 8);
            (x >> (((off + i) % 8) * 8)) as u8 | 1
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The model: every state an entry or a file went through since it was last acknowledged.

type NodeId = usize;
const ROOT: NodeId = 0;

struct Node {
    /// None for a file whose create failed at the power cut (number unknown).
    ino: Option<Ino>,
    kind: FileType,
    /// Contents after each change (directories: one empty version).
    versions: Vec<Vec<u8>>,
    /// `versions[floor..]` are the states a crash may show.
    floor: usize,
    label: String,
}

/// One name in one directory: what it pointed to after each change (None: absent).
struct Slot {
    versions: Vec<Option<NodeId>>,
    floor: usize,
}

impl Slot {
    fn allowed(&self) -> &[Option<NodeId>] {
        &self.versions[self.floor..]
    }
    fn current(&self) -> Option<NodeId> {
        *self.versions.last().expect("slot without versions")
    }
}

struct Model {
    nodes: Vec<Node>,
    slots: BTreeMap<(NodeId, Vec<u8>), Slot>,
}

impl Model {
    /// The image as mkfs.ext4 made it: the root and an empty lost+found.
    fn new(lost_found: Ino) -> Model {
        let mut m = Model {
            nodes: Vec::new(),
            slots: BTreeMap::new(),
        };
        m.add_node(Some(ROOT_INO), FileType::Directory, "/".into());
        let lf = m.add_node(Some(lost_found), FileType::Directory, "/lost+found".into());
        m.set_name(ROOT, b"lost+found", Some(lf));
        m.ack_all();
        m
    }

    fn add_node(&mut self, ino: Option<Ino>, kind: FileType, label: String) -> NodeId {
        self.nodes.push(Node {
            ino,
            kind,
            versions: vec![Vec::new()],
            floor: 0,
            label,
        });
        self.nodes.len() - 1
    }

    fn set_name(&mut self, dir: NodeId, name: &[u8], to: Option<NodeId>) {
        let slot = self
            .slots
            .entry((dir, name.to_vec()))
            .or_insert_with(|| Slot {
                versions: vec![None],
                floor: 0,
            });
        slot.versions.push(to);
    }

    fn lookup(&self, dir: NodeId, name: &[u8]) -> Option<NodeId> {
        self.slots
            .get(&(dir, name.to_vec()))
            .and_then(Slot::current)
    }

    /// Live names in `dir` now.
    fn children(&self, dir: NodeId) -> Vec<(Vec<u8>, NodeId)> {
        self.slots
            .range((dir, Vec::new())..(dir + 1, Vec::new()))
            .filter_map(|((_, n), s)| s.current().map(|id| (n.clone(), id)))
            .collect()
    }

    fn content(&self, n: NodeId) -> &Vec<u8> {
        self.nodes[n]
            .versions
            .last()
            .expect("node without versions")
    }

    fn push_content(&mut self, n: NodeId, c: Vec<u8>) {
        self.nodes[n].versions.push(c);
    }

    fn ack_node(&mut self, n: NodeId) {
        let node = &mut self.nodes[n];
        node.floor = node.versions.len() - 1;
    }

    fn ack_dir(&mut self, dir: NodeId) {
        for (_, s) in self
            .slots
            .range_mut((dir, Vec::new())..(dir + 1, Vec::new()))
        {
            s.floor = s.versions.len() - 1;
        }
    }

    fn ack_all(&mut self) {
        for n in 0..self.nodes.len() {
            self.ack_node(n);
        }
        for s in self.slots.values_mut() {
            s.floor = s.versions.len() - 1;
        }
    }

    fn describe(&self, to: Option<NodeId>) -> String {
        match to {
            None => "absent".into(),
            Some(n) => {
                let node = &self.nodes[n];
                let ino = node.ino.map_or("?".into(), |i| i.to_string());
                format!("{} (ino {ino}, {:?})", node.label, node.kind)
            }
        }
    }
}

/// Whether `got` could be the file after a crash, given the versions since its last
/// acknowledgement: each byte must be what one of them had at that offset.
fn content_allowed(versions: &[Vec<u8>], got: &[u8]) -> Result<(), String> {
    if versions.iter().any(|v| v.as_slice() == got) {
        return Ok(());
    }
    let sizes: BTreeSet<usize> = versions.iter().map(Vec::len).collect();
    if !sizes.contains(&got.len()) {
        return Err(format!(
            "size {} is not one of the sizes since the last fsync/sync: {sizes:?}",
            got.len()
        ));
    }
    for (i, &b) in got.iter().enumerate() {
        if !versions.iter().any(|v| v.get(i) == Some(&b)) {
            let had: BTreeSet<u8> = versions.iter().filter_map(|v| v.get(i).copied()).collect();
            let acked =
                versions[0].len() > i && versions.iter().all(|v| v.get(i) == versions[0].get(i));
            let why = if acked {
                "an fsync-acknowledged byte was lost"
            } else if b == 0 {
                "the size covers data that never reached the device (data=ordered: data \
                 must be written before the metadata that exposes it)"
            } else {
                "stale or foreign data"
            };
            return Err(format!(
                "byte {i} (block {}) is {b:#04x}, which no version since the last fsync/sync \
                 had there ({had:02x?}; size {}, sizes since then {sizes:?}): {why}",
                i as u64 / bs(),
                got.len()
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The driver: every operation on the engine and on the model.

/// The workload must stop: the device lost power.
#[derive(Debug)]
struct Stop;

type R<T> = Result<T, Stop>;

struct Driver<'a> {
    fs: &'a Fs,
    dev: &'a CrashDevice,
    m: Model,
    /// `dev.flushes()` after each successful `sync()`.
    sync_flushes: Vec<u64>,
    /// The last operations, for messages.
    trace: VecDeque<String>,
    ops: u64,
    ctx: String,
}

impl Driver<'_> {
    fn note(&mut self, what: String) {
        self.ops += 1;
        if self.trace.len() == 12 {
            self.trace.pop_front();
        }
        self.trace.push_back(what);
    }

    /// An operation failed: fine once the power is cut (the workload stops), a bug before.
    fn failed(&self, what: &str, e: Error) -> Stop {
        assert!(
            self.dev.is_cut(),
            "{}: {what} failed with the power on: {e:?}\nlast operations: {:?}",
            self.ctx,
            self.trace
        );
        Stop
    }

    fn ino(&self, n: NodeId) -> Ino {
        self.m.nodes[n]
            .ino
            .expect("operation on a node of unknown number")
    }

    fn path(&self, dir: NodeId, name: &[u8]) -> String {
        let d = &self.m.nodes[dir].label;
        let sep = if d.ends_with('/') { "" } else { "/" };
        format!("{d}{sep}{}", String::from_utf8_lossy(name))
    }

    fn create(&mut self, dir: NodeId, name: &[u8]) -> R<NodeId> {
        self.make(dir, name, FileType::Regular)
    }

    fn mkdir(&mut self, dir: NodeId, name: &[u8]) -> R<NodeId> {
        self.make(dir, name, FileType::Directory)
    }

    fn make(&mut self, dir: NodeId, name: &[u8], kind: FileType) -> R<NodeId> {
        let path = self.path(dir, name);
        self.note(format!("{kind:?} {path}"));
        let dino = self.ino(dir);
        let r = if kind == FileType::Directory {
            self.fs.mkdir(dino, name, 0o755, OWNER)
        } else {
            self.fs
                .create(dino, name, 0o644, OWNER)
                .and_then(|a| self.fs.release(a.ino).map(|()| a))
        };
        let ino = r.as_ref().ok().map(|a| a.ino);
        let id = self.m.add_node(ino, kind, path.clone());
        self.m.set_name(dir, name, Some(id));
        match r {
            Ok(_) => Ok(id),
            Err(e) => Err(self.failed(&format!("create {path}"), e)),
        }
    }

    fn write(&mut self, f: NodeId, off: u64, data: &[u8]) -> R<()> {
        self.note(format!(
            "write {} [{off}, {})",
            self.m.nodes[f].label,
            off + data.len() as u64
        ));
        let mut c = self.m.content(f).clone();
        let end = off as usize + data.len();
        if c.len() < end {
            c.resize(end, 0);
        }
        c[off as usize..end].copy_from_slice(data);
        self.m.push_content(f, c);
        match self.fs.write(self.ino(f), off, data) {
            Ok(n) => {
                assert_eq!(n, data.len(), "{}: short write", self.ctx);
                Ok(())
            }
            Err(e) => Err(self.failed("write", e)),
        }
    }

    fn truncate(&mut self, f: NodeId, size: u64) -> R<()> {
        self.note(format!("truncate {} to {size}", self.m.nodes[f].label));
        let mut c = self.m.content(f).clone();
        let (new, tail) = (size as usize, (size.div_ceil(bs()) * bs()) as usize);
        if new < c.len() && new < tail {
            // Truncating zeroes the rest of the new last block, a data write that (as in
            // ext4's ordered mode) may reach the device before the new size does.
            let end = tail.min(c.len());
            c[new..end].fill(0);
            self.m.push_content(f, c.clone());
        }
        c.resize(new, 0);
        self.m.push_content(f, c);
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        match self.fs.setattr(self.ino(f), &set) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failed("truncate", e)),
        }
    }

    fn fallocate(&mut self, f: NodeId, mode: FallocMode, off: u64, len: u64) -> R<()> {
        self.note(format!(
            "fallocate {} {mode:?} [{off}, {})",
            self.m.nodes[f].label,
            off + len
        ));
        let mut c = self.m.content(f).clone();
        let end = (off + len) as usize;
        if mode.punch_hole {
            let stop = end.min(c.len());
            if (off as usize) < stop {
                c[off as usize..stop].fill(0);
            }
        } else if !mode.keep_size && c.len() < end {
            c.resize(end, 0);
        }
        if !extents() {
            // Linux refuses fallocate on block-mapped files (EOPNOTSUPP); lanefs may too,
            // and then nothing changed.
            let r = self.fs.fallocate(self.ino(f), mode, off, len);
            if matches!(r, Err(Error::NotSupported(_))) && !self.dev.is_cut() {
                return Ok(());
            }
            self.m.push_content(f, c);
            return r.map_err(|e| self.failed("fallocate", e));
        }
        self.m.push_content(f, c);
        match self.fs.fallocate(self.ino(f), mode, off, len) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.failed("fallocate", e)),
        }
    }

    fn unlink(&mut self, dir: NodeId, name: &[u8]) -> R<()> {
        let path = self.path(dir, name);
        self.note(format!("unlink {path}"));
        let kind = self.m.lookup(dir, name).map(|n| self.m.nodes[n].kind);
        self.m.set_name(dir, name, None);
        let r = if kind == Some(FileType::Directory) {
            self.fs.rmdir(self.ino(dir), name)
        } else {
            self.fs.unlink(self.ino(dir), name)
        };
        r.map_err(|e| self.failed(&format!("unlink {path}"), e))
    }

    fn rename(&mut self, dir: NodeId, name: &[u8], to: NodeId, newname: &[u8]) -> R<()> {
        let (a, b) = (self.path(dir, name), self.path(to, newname));
        self.note(format!("rename {a} -> {b}"));
        let n = self.m.lookup(dir, name);
        assert!(n.is_some(), "{}: rename of a missing name {a}", self.ctx);
        self.m.set_name(dir, name, None);
        self.m.set_name(to, newname, n);
        self.fs
            .rename(self.ino(dir), name, self.ino(to), newname)
            .map_err(|e| self.failed(&format!("rename {a} -> {b}"), e))
    }

    fn fsync(&mut self, n: NodeId, datasync: bool) -> R<()> {
        self.note(format!(
            "fsync {} datasync={datasync}",
            self.m.nodes[n].label
        ));
        match self.fs.fsync(self.ino(n), datasync) {
            Ok(()) => {
                if self.m.nodes[n].kind == FileType::Directory {
                    self.m.ack_dir(n);
                }
                self.m.ack_node(n);
                Ok(())
            }
            Err(e) => Err(self.failed("fsync", e)),
        }
    }

    fn sync(&mut self) -> R<()> {
        self.note("sync".into());
        match self.fs.sync() {
            Ok(()) => {
                self.m.ack_all();
                self.sync_flushes.push(self.dev.flushes());
                Ok(())
            }
            Err(e) => Err(self.failed("sync", e)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Workloads.

#[derive(Clone, Copy)]
struct Workload {
    name: &'static str,
    run: fn(&mut Driver, &mut StdRng) -> R<()>,
}

const ALL: [Workload; WORKLOADS as usize] = [
    Workload {
        name: "fallocate2",
        run: wl_fallocate2,
    },
    Workload {
        name: "create_remove",
        run: wl_create_remove,
    },
    Workload {
        name: "rename_over",
        run: wl_rename_over,
    },
    Workload {
        name: "append_fsync",
        run: wl_append_fsync,
    },
    Workload {
        name: "truncate",
        run: wl_truncate,
    },
    Workload {
        name: "htree",
        run: wl_htree,
    },
    Workload {
        name: "mix",
        run: wl_mix,
    },
];

/// Large folios with dirty blocks of every order (run on [`FOLIOS`]): two files get writes
/// of 1 to 64 blocks, most at offsets aligned to their size (whole large folios), some
/// anywhere (partial edge blocks), overwrites inside cached folios, holes punched and
/// truncations that end inside large folios (splitting dirty ones), fsyncs and two syncs.
fn wl_folios(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let files = [d.create(ROOT, b"fa")?, d.create(ROOT, b"fb")?];
    d.fsync(ROOT, false)?;
    let bs = bs();
    for i in 0..48u64 {
        let f = files[rng.gen_range(0..2)];
        let size = d.m.content(f).len() as u64;
        match rng.gen_range(0..20) {
            0..=10 => {
                let blocks = 1u64 << rng.gen_range(0..=6);
                let (off, n) = if rng.gen_bool(0.7) {
                    (rng.gen_range(0..6) * blocks * bs, (blocks * bs) as usize)
                } else {
                    let off = rng.gen_range(0..=size + bs);
                    (off, (blocks * bs - rng.gen_range(1..bs)) as usize)
                };
                d.write(f, off, &pattern(mix(i, 11), off, n))?;
            }
            11..=12 if size > 0 => {
                let mode = FallocMode {
                    keep_size: true,
                    punch_hole: true,
                    zero_range: false,
                };
                let off = rng.gen_range(0..size);
                d.fallocate(f, mode, off, rng.gen_range(1..20 * bs))?;
            }
            13 => d.truncate(f, rng.gen_range(0..=size))?,
            14..=17 => d.fsync(f, rng.gen_bool(0.5))?,
            18 if i % 3 == 0 => d.sync()?,
            _ => {}
        }
        if i == 24 {
            d.sync()?;
        }
    }
    Ok(())
}

/// The workload of [`FOLIOS`]'s own tests.
const FOLIOS_WL: Workload = Workload {
    name: "folios",
    run: wl_folios,
};

/// As the fallocate2 benchmark: create a file, fallocate a few blocks, unlink older files;
/// some data, many fsyncs of files and of the directory, one early sync. The fsyncs log
/// more than the 4 MiB journal holds before the final unmount, so the log wraps.
fn wl_fallocate2(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let dir = d.mkdir(ROOT, b"fa")?;
    d.fsync(ROOT, false)?;
    let mut live: Vec<(Vec<u8>, NodeId)> = Vec::new();
    for i in 0..240u64 {
        let name = format!("f{i}").into_bytes();
        let f = d.create(dir, &name)?;
        let len = bs() * rng.gen_range(1..=4);
        d.fallocate(f, FallocMode::default(), 0, len)?;
        if rng.gen_bool(0.5) {
            let off = rng.gen_range(0..len);
            let n = rng.gen_range(1..=2 * bs() as usize);
            d.write(f, off, &pattern(mix(i, 1), off, n))?;
        }
        if rng.gen_bool(0.2) {
            let mode = FallocMode {
                keep_size: true,
                punch_hole: false,
                zero_range: false,
            };
            d.fallocate(f, mode, len, bs() * rng.gen_range(1..=3))?;
        }
        if rng.gen_bool(0.6) {
            d.fsync(f, rng.gen_bool(0.3))?;
        }
        live.push((name, f));
        while live.len() > 8 || (live.len() > 1 && rng.gen_bool(0.3)) {
            let k = rng.gen_range(0..live.len() - 1);
            let (name, _) = live.remove(k);
            d.unlink(dir, &name)?;
        }
        if rng.gen_bool(0.2) {
            d.fsync(dir, false)?;
        }
        if i == 20 {
            d.sync()?;
        }
    }
    Ok(())
}

/// mdtest-like: rounds of creating small files in one directory, then removing half.
fn wl_create_remove(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let dir = d.mkdir(ROOT, b"md")?;
    d.sync()?;
    let mut live: Vec<Vec<u8>> = Vec::new();
    for round in 0..3u64 {
        for i in 0..70u64 {
            let name = format!("r{round}-file-{i:03}").into_bytes();
            let f = d.create(dir, &name)?;
            if rng.gen_bool(0.4) {
                let n = rng.gen_range(1..3000);
                d.write(f, 0, &pattern(mix(round * 1000 + i, 2), 0, n))?;
            }
            if rng.gen_bool(0.05) {
                d.fsync(f, false)?;
            }
            live.push(name);
            if i % 20 == 19 {
                d.fsync(dir, false)?;
            }
        }
        live.shuffle(rng);
        for _ in 0..live.len() / 2 {
            let name = live.pop().expect("live");
            d.unlink(dir, &name)?;
            if rng.gen_bool(0.05) {
                d.fsync(dir, false)?;
            }
        }
        if round == 1 {
            d.sync()?;
        } else {
            d.fsync(dir, false)?;
        }
    }
    Ok(())
}

/// Atomic replace: write a temporary file, fsync it, rename it over the target. The target
/// must always hold one whole version.
fn wl_rename_over(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let target = d.create(ROOT, b"config")?;
    let n = rng.gen_range(1..20_000);
    d.write(target, 0, &pattern(mix(0, 3), 0, n))?;
    d.fsync(target, false)?;
    d.fsync(ROOT, false)?;
    let other = d.create(ROOT, b"other")?;
    for i in 1..=25u64 {
        let tmp = d.create(ROOT, b"config.tmp")?;
        let n = rng.gen_range(1..20_000);
        d.write(tmp, 0, &pattern(mix(i, 3), 0, n))?;
        d.fsync(tmp, rng.gen_bool(0.3))?;
        d.rename(ROOT, b"config.tmp", ROOT, b"config")?;
        if rng.gen_bool(0.5) {
            d.fsync(ROOT, false)?;
        }
        if rng.gen_bool(0.3) {
            // Unrelated changes in the same transactions.
            let len = d.m.content(other).len() as u64;
            d.write(other, len, &pattern(mix(i, 4), len, 700))?;
        }
        if i % 10 == 9 {
            d.sync()?;
        }
    }
    Ok(())
}

/// Two logs appended to in turn; every fsync-acknowledged prefix must survive.
fn wl_append_fsync(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let logs = [d.create(ROOT, b"log")?, d.create(ROOT, b"log2")?];
    d.fsync(ROOT, false)?;
    for i in 0..160u64 {
        let f = logs[rng.gen_range(0..2)];
        let off = d.m.content(f).len() as u64;
        let n = rng.gen_range(1..3000);
        d.write(f, off, &pattern(mix(f as u64, 5), off, n))?;
        if rng.gen_bool(0.5) {
            d.fsync(f, rng.gen_bool(0.5))?;
        }
        if i == 30 {
            d.sync()?;
        }
    }
    Ok(())
}

/// Truncating down and up, writes and holes punched in three files.
fn wl_truncate(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let mut files = Vec::new();
    for (k, name) in [b"ta", b"tb", b"tc"].iter().enumerate() {
        let f = d.create(ROOT, *name)?;
        let n = rng.gen_range(1..40_000);
        d.write(f, 0, &pattern(mix(k as u64, 6), 0, n))?;
        files.push(f);
    }
    d.sync()?;
    for i in 0..45u64 {
        let f = files[rng.gen_range(0..files.len())];
        let size = d.m.content(f).len() as u64;
        match rng.gen_range(0..4) {
            0 => d.truncate(f, rng.gen_range(0..=size))?,
            1 => d.truncate(f, size + rng.gen_range(1..20_000))?,
            2 => {
                let off = rng.gen_range(0..=size + 4096);
                let n = rng.gen_range(1..10_000);
                d.write(f, off, &pattern(mix(i, 7), off, n))?;
            }
            _ => {
                let mode = FallocMode {
                    keep_size: true,
                    punch_hole: true,
                    zero_range: false,
                };
                let off = rng.gen_range(0..=size);
                d.fallocate(f, mode, off, rng.gen_range(1..20_000))?;
            }
        }
        if rng.gen_bool(0.4) {
            d.fsync(f, rng.gen_bool(0.3))?;
        }
        if i % 15 == 14 {
            d.sync()?;
        }
    }
    Ok(())
}

/// One directory grown into an htree (thousands of entries), with removals and renames.
fn wl_htree(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let dir = d.mkdir(ROOT, b"big")?;
    d.fsync(ROOT, false)?;
    let mut live: Vec<Vec<u8>> = Vec::new();
    for i in 0..2400u64 {
        let name = format!("entry-{i:05}-{:08x}", rng.gen::<u32>()).into_bytes();
        let f = d.create(dir, &name)?;
        if i % 97 == 0 {
            d.write(f, 0, &pattern(mix(i, 8), 0, 100))?;
        }
        live.push(name);
        if i % 250 == 249 {
            d.fsync(dir, false)?;
        }
        if i % 400 == 399 {
            for _ in 0..20 {
                let k = rng.gen_range(0..live.len());
                let name = live.swap_remove(k);
                d.unlink(dir, &name)?;
            }
            for j in 0..5 {
                let k = rng.gen_range(0..live.len());
                let new = format!("renamed-{i}-{j}").into_bytes();
                d.rename(dir, &live[k], dir, &new)?;
                live[k] = new;
            }
        }
        if i % 1000 == 999 {
            d.sync()?;
        }
    }
    Ok(())
}

/// Random operations over a few directories and files, with one sync half-way.
fn wl_mix(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let mut dirs = vec![ROOT];
    for i in 0..160u64 {
        let dir = dirs[rng.gen_range(0..dirs.len())];
        let kids = d.m.children(dir);
        let files: Vec<&(Vec<u8>, NodeId)> = kids
            .iter()
            .filter(|(_, n)| d.m.nodes[*n].kind == FileType::Regular)
            .collect();
        let name = format!("n{}", rng.gen_range(0..6)).into_bytes();
        let free = d.m.lookup(dir, &name).is_none();
        match rng.gen_range(0..100) {
            0..=14 if free => {
                d.create(dir, &name)?;
            }
            15..=18 if free && dir == ROOT && dirs.len() < 4 => {
                let sub = d.mkdir(dir, &name)?;
                dirs.push(sub);
            }
            19..=40 if !files.is_empty() => {
                let f = files[rng.gen_range(0..files.len())].1;
                let size = d.m.content(f).len() as u64;
                let off = rng.gen_range(0..=size + 2 * bs());
                let n = rng.gen_range(1..12_000);
                d.write(f, off, &pattern(mix(i, 9), off, n))?;
            }
            41..=47 if !files.is_empty() => {
                let f = files[rng.gen_range(0..files.len())].1;
                let size = d.m.content(f).len() as u64;
                d.truncate(f, rng.gen_range(0..=size + bs()))?;
            }
            48..=52 if !files.is_empty() => {
                let f = files[rng.gen_range(0..files.len())].1;
                let size = d.m.content(f).len() as u64;
                let mode = FallocMode {
                    keep_size: rng.gen_bool(0.5),
                    punch_hole: rng.gen_bool(0.3),
                    zero_range: false,
                };
                let off = rng.gen_range(0..=size + bs());
                d.fallocate(f, mode, off, rng.gen_range(1..4 * bs()))?;
            }
            53..=60 if !files.is_empty() => {
                let (n, _) = files[rng.gen_range(0..files.len())];
                d.unlink(dir, n)?;
            }
            61..=63 if dir != ROOT && kids.is_empty() => {
                // rmdir this (empty) directory.
                let (pname, _) =
                    d.m.children(ROOT)
                        .into_iter()
                        .find(|(_, n)| *n == dir)
                        .expect("directory in the root");
                d.unlink(ROOT, &pname)?;
                dirs.retain(|&x| x != dir);
            }
            64..=71 if !kids.is_empty() => {
                // Rename within or across directories, over a file or to a free name.
                let (n, node) = &kids[rng.gen_range(0..kids.len())];
                let is_dir = d.m.nodes[*node].kind == FileType::Directory;
                let to = if is_dir {
                    ROOT
                } else {
                    dirs[rng.gen_range(0..dirs.len())]
                };
                let target = d.m.lookup(to, &name);
                let ok = match target {
                    None => true,
                    Some(t) => !is_dir && d.m.nodes[t].kind == FileType::Regular && t != *node,
                };
                if ok && !(to == dir && *n == name) {
                    d.rename(dir, n, to, &name)?;
                }
            }
            72..=83 if !kids.is_empty() => {
                let (_, node) = kids[rng.gen_range(0..kids.len())];
                d.fsync(node, rng.gen_bool(0.3))?;
            }
            84..=93 => d.fsync(dir, false)?,
            94..=96 => d.sync()?,
            _ => {}
        }
        // One sync at least, whatever the seed (about 1 seed in 130 drew none, and the
        // sync-point tests need one).
        if i == 80 {
            d.sync()?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Running a workload with a crash, building states, checking them.

#[derive(Debug, Clone, Copy)]
enum Cut {
    /// No crash: run to the end and unmount.
    None,
    /// The power goes at write K (K writes in all succeed).
    Write(u64),
    /// The power goes right after flush N.
    AfterFlush(u64),
    /// The power goes instead of flush N.
    AtFlush(u64),
}

impl Cut {
    /// The `LANEFS_CRASH_CUT` spelling: `write:K`, `after_flush:N`, `at_flush:N`.
    fn env(self) -> String {
        match self {
            Cut::None => "none".into(),
            Cut::Write(k) => format!("write:{k}"),
            Cut::AfterFlush(n) => format!("after_flush:{n}"),
            Cut::AtFlush(n) => format!("at_flush:{n}"),
        }
    }

    fn parse(v: &str) -> Cut {
        fn bad(v: &str) -> ! {
            panic!("LANEFS_CRASH_CUT={v}: write:K, after_flush:N or at_flush:N")
        }
        let Some((kind, n)) = v.split_once(':') else {
            bad(v)
        };
        let Ok(n) = n.parse::<u64>() else { bad(v) };
        match kind {
            "write" => Cut::Write(n),
            "after_flush" => Cut::AfterFlush(n),
            "at_flush" => Cut::AtFlush(n),
            _ => bad(v),
        }
    }
}

struct Run {
    dev: Arc<CrashDevice>,
    model: Model,
    sync_flushes: Vec<u64>,
    ops: u64,
    trace: Vec<String>,
    /// The journal's counters at the end of a run without a crash.
    journal: String,
}

fn lost_found_ino(base: &[u8]) -> Ino {
    let fs = Fs::mount(Arc::new(CrashDevice::from_vec(base.to_vec())), opts()).expect("mount base");
    let ino = fs.lookup(ROOT_INO, b"lost+found").expect("lost+found").ino;
    drop(fs);
    ino
}

fn run_workload(w: &Workload, base: &[u8], wseed: u64, cut: Cut, ctx: &str) -> Run {
    static LF: std::sync::Mutex<Vec<(usize, Ino)>> = std::sync::Mutex::new(Vec::new());
    let key = base.as_ptr() as usize;
    let known = LF
        .lock()
        .expect("lf")
        .iter()
        .find(|k| k.0 == key)
        .map(|k| k.1);
    let lf = known.unwrap_or_else(|| {
        let lf = lost_found_ino(base);
        LF.lock().expect("lf").push((key, lf));
        lf
    });
    let mut buf = take_buf();
    buf.clear();
    buf.extend_from_slice(base);
    let dev = Arc::new(CrashDevice::from_vec(buf));
    match cut {
        Cut::None => {}
        Cut::Write(k) => dev.cut_after_writes(k),
        Cut::AfterFlush(n) => dev.cut_after_flushes(n),
        Cut::AtFlush(n) => dev.cut_at_flush(n),
    }
    let mut model = Model::new(lf);
    let fs = match Fs::mount(dev.clone(), opts()) {
        Ok(fs) => fs,
        Err(e) => {
            assert!(dev.is_cut(), "{ctx}: mount failed with the power on: {e}");
            return Run {
                dev,
                model,
                sync_flushes: Vec::new(),
                ops: 0,
                trace: vec![format!("mount failed: {e}")],
                journal: String::new(),
            };
        }
    };
    let mut d = Driver {
        fs: &fs,
        dev: &dev,
        m: model,
        sync_flushes: Vec::new(),
        trace: VecDeque::new(),
        ops: 0,
        ctx: ctx.to_string(),
    };
    let mut rng = StdRng::seed_from_u64(wseed);
    let done = (w.run)(&mut d, &mut rng).is_ok();
    let Driver {
        m,
        sync_flushes,
        ops,
        trace,
        ..
    } = d;
    model = m;
    let mut journal = String::new();
    if let Cut::None = cut {
        assert!(done, "{ctx}: the workload stopped without a crash");
        journal = format!("{:?}", fs.journal_stats());
        fs.unmount()
            .unwrap_or_else(|e| panic!("{ctx}: unmount: {e}"));
        model.ack_all();
    } else {
        dev.power_cut();
        drop(fs);
    }
    Run {
        dev,
        model,
        sync_flushes,
        ops,
        trace: trace.into(),
        journal,
    }
}

/// Which pending writes a crash state keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Keep {
    /// These, in this order.
    Writes(Vec<usize>),
    /// These, in this order, the last one torn after this many sectors.
    Torn(Vec<usize>, usize),
}

/// Build a crash state into a reused buffer.
fn build_state(dev: &CrashDevice, keep: &Keep) -> Vec<u8> {
    let mut b = take_buf();
    match keep {
        Keep::Writes(w) => dev.with_writes_into(w, &mut b),
        Keep::Torn(w, sectors) => dev.torn_into(w, *sectors, &mut b),
    }
    b
}

/// Crash states from the writes since the last flush: (description, what to keep).
fn crash_states(dev: &CrashDevice, rng: &mut StdRng) -> Vec<(String, Keep)> {
    let pending = dev.pending();
    let n = pending.len();
    if n == 0 {
        return vec![("nothing pending".into(), Keep::Writes(Vec::new()))];
    }
    fn list(v: &[usize]) -> String {
        if v.len() <= 12 {
            format!("{v:?}")
        } else {
            format!("{:?}.. ({} writes)", &v[..12], v.len())
        }
    }
    let all: Vec<usize> = (0..n).collect();
    let mut out = vec![
        (
            format!("all {n} pending writes lost"),
            Keep::Writes(Vec::new()),
        ),
        (
            format!("all {n} pending writes kept"),
            Keep::Writes(all.clone()),
        ),
    ];
    if n >= 2 {
        let j = rng.gen_range(1..n);
        out.push((
            format!("first {j} of {n} pending writes kept"),
            Keep::Writes(all[..j].to_vec()),
        ));
    }
    let subset: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
    out.push((
        format!("pending writes {} of {n} kept", list(&subset)),
        Keep::Writes(subset),
    ));
    let mut shuffled: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.6)).collect();
    if shuffled.len() >= 2 {
        shuffled.shuffle(rng);
        out.push((
            format!(
                "pending writes {} of {n} kept, in that order",
                list(&shuffled)
            ),
            Keep::Writes(shuffled),
        ));
    }
    let mut torn: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
    if torn.is_empty() {
        torn.push(rng.gen_range(0..n));
    }
    let last = pending[*torn.last().expect("torn")];
    let unit = tear_unit();
    let units = last.len.div_ceil(unit);
    if units >= 2 {
        let keep = rng.gen_range(1..units) * (unit / 512);
        out.push((
            format!(
                "pending writes {} of {n} kept, the last ({} bytes at {}) torn after {keep} sectors",
                list(&torn),
                last.len,
                last.off
            ),
            Keep::Torn(torn, keep),
        ));
    }
    // The same writes chosen twice make the same image: check it once.
    let mut seen = Vec::new();
    out.retain(|(_, k)| {
        let new = !seen.contains(k);
        seen.push(k.clone());
        new
    });
    out
}

/// Every entry of a directory through the cursor, without "." and "..".
fn readdir_all(fs: &Fs, ino: Ino) -> Result<Vec<lanefs::DirEntry>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    for _ in 0..100_000 {
        let got = fs
            .readdir(ino, pos, 512)
            .map_err(|e| format!("readdir of inode {ino}: {e}"))?;
        let Some(last) = got.last() else {
            return Ok(out);
        };
        if last.next <= pos {
            return Err(format!(
                "readdir of inode {ino}: the cursor did not advance"
            ));
        }
        pos = last.next;
        out.extend(
            got.into_iter()
                .filter(|e| e.name != b"." && e.name != b".."),
        );
    }
    Err(format!("readdir of inode {ino} never ended"))
}

fn read_all(fs: &Fs, ino: Ino, size: u64) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; size as usize];
    let mut done = 0;
    while done < out.len() {
        let n = fs
            .read(ino, done as u64, &mut out[done..])
            .map_err(|e| format!("read of inode {ino} at {done}: {e}"))?;
        if n == 0 {
            return Err(format!("inode {ino}: read ended at {done}, size is {size}"));
        }
        done += n;
    }
    Ok(out)
}

/// Of the model's directories `cands` that inode `ino` may be, the first whose names
/// the image's directory matches (each name known to it, each name it must have there);
/// the first of them when none does (the walk then reports what differs).
fn pick_dir(fs: &Fs, m: &Model, cands: &[NodeId], ino: Ino) -> Result<NodeId, String> {
    if cands.len() < 2 {
        return Ok(cands[0]);
    }
    let names: BTreeSet<Vec<u8>> = readdir_all(fs, ino)?.into_iter().map(|e| e.name).collect();
    let matches = |c: NodeId| {
        names.iter().all(|n| m.slots.contains_key(&(c, n.clone())))
            && m.slots
                .range((c, Vec::new())..(c + 1, Vec::new()))
                .all(|((_, n), slot)| {
                    names.contains(n) || !slot.allowed().iter().all(Option::is_some)
                })
    };
    Ok(cands
        .iter()
        .copied()
        .find(|&c| matches(c))
        .unwrap_or(cands[0]))
}

/// Walk the mounted crash state and compare it with the model: every entry one of the
/// states its name went through since the last acknowledgement, every file one of its
/// contents since the last fsync.
fn check_tree(fs: &Fs, m: &Model) -> Result<u64, String> {
    let mut stack: Vec<(NodeId, Ino, String)> = vec![(ROOT, ROOT_INO, "/".into())];
    let mut entries = 0u64;
    while let Some((dn, dino, path)) = stack.pop() {
        let mut seen = BTreeSet::new();
        for e in readdir_all(fs, dino)? {
            entries += 1;
            let p = format!("{path}{}", String::from_utf8_lossy(&e.name));
            if !seen.insert(e.name.clone()) {
                return Err(format!("{p}: listed twice"));
            }
            let Some(slot) = m.slots.get(&(dn, e.name.clone())) else {
                return Err(format!(
                    "{p}: unexpected entry (inode {}, {:?}): the workload never made it",
                    e.ino, e.kind
                ));
            };
            let fits = |n: &NodeId| {
                let node = &m.nodes[*n];
                node.kind == e.kind && node.ino.is_none_or(|i| i == e.ino)
            };
            let mut cands: Vec<NodeId> = slot
                .allowed()
                .iter()
                .flatten()
                .copied()
                .filter(fits)
                .collect();
            cands.sort_by_key(|n| (m.nodes[*n].ino.is_none(), *n));
            cands.dedup();
            if cands.is_empty() {
                let allowed: Vec<String> = slot.allowed().iter().map(|&t| m.describe(t)).collect();
                return Err(format!(
                    "{p}: points to inode {} ({:?}); since the last ack it could only be: {}",
                    e.ino,
                    e.kind,
                    allowed.join(", ")
                ));
            }
            let a = fs
                .getattr(e.ino)
                .map_err(|err| format!("{p}: getattr of inode {}: {err}", e.ino))?;
            if a.kind != e.kind {
                return Err(format!(
                    "{p}: entry says {:?}, inode {} is {:?}",
                    e.kind, e.ino, a.kind
                ));
            }
            match e.kind {
                FileType::Directory => {
                    // Several directories may fit (a name removed and made again whose
                    // inode number came back): walk the one whose names the image shows.
                    let c = pick_dir(fs, m, &cands, e.ino)?;
                    stack.push((c, e.ino, format!("{p}/")));
                }
                FileType::Regular => {
                    if a.nlink != 1 {
                        return Err(format!("{p}: inode {} has {} links, not 1", e.ino, a.nlink));
                    }
                    let got = read_all(fs, e.ino, a.size)?;
                    let mut why = Vec::new();
                    let ok = cands.iter().any(|&c| {
                        let node = &m.nodes[c];
                        match content_allowed(&node.versions[node.floor..], &got) {
                            Ok(()) => true,
                            Err(w) => {
                                why.push(format!("as {}: {w}", node.label));
                                false
                            }
                        }
                    });
                    if !ok {
                        return Err(format!("{p} (inode {}): {}", e.ino, why.join("; ")));
                    }
                }
                k => return Err(format!("{p}: unexpected type {k:?}")),
            }
        }
        for ((_, name), slot) in m.slots.range((dn, Vec::new())..(dn + 1, Vec::new())) {
            if !seen.contains(name) && slot.allowed().iter().all(Option::is_some) {
                let allowed: Vec<String> = slot.allowed().iter().map(|&t| m.describe(t)).collect();
                return Err(format!(
                    "{path}{}: missing; acknowledged as {}",
                    String::from_utf8_lossy(name),
                    allowed.join(" or ")
                ));
            }
        }
    }
    Ok(entries)
}

/// Write an image sparsely (only non-zero 64 KiB chunks).
fn write_image(path: &Path, img: &[u8]) {
    let f = std::fs::File::create(path).expect("create image file");
    f.set_len(img.len() as u64).expect("size image file");
    const CHUNK: usize = 64 << 10;
    static ZERO: [u8; CHUNK] = [0; CHUNK];
    for (i, c) in img.chunks(CHUNK).enumerate() {
        // A slice comparison is a memcmp: fast even in the test profile.
        if c != &ZERO[..c.len()] {
            f.write_all_at(c, (i * CHUNK) as u64).expect("write image");
        }
    }
}

fn e2fsck_image(img: &[u8]) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.img");
    write_image(&path, img);
    let (code, text) = common::e2fsck(&path);
    if code == 0 {
        Ok(())
    } else {
        let text: String = text.lines().take(40).collect::<Vec<_>>().join("\n");
        Err(format!("e2fsck -fn exited {code}:\n{text}"))
    }
}

/// e2fsck runs so far, across the workload tests (to sample every Nth state).
static STATES_SEEN: AtomicU64 = AtomicU64::new(0);

/// Check one crash state: mount (replay), compare with the model, unmount, lanefs fsck,
/// and e2fsck when asked (or when something else failed, for the message). All problems
/// found, or Ok. The image's buffer goes back to the pool.
fn check_state(img: Vec<u8>, m: &Model, e2fsck: bool) -> Result<(), String> {
    let dev = Arc::new(CrashDevice::from_vec(img));
    let mut errs = Vec::new();
    match Fs::mount(dev.clone(), opts()) {
        Ok(fs) => {
            if let Err(e) = check_tree(&fs, m) {
                errs.push(format!("model: {e}"));
            }
            if let Err(e) = fs.unmount() {
                errs.push(format!("unmount: {e}"));
            }
            match fsck::check(&*dev, &FsckOptions::default()) {
                Ok(r) if r.is_clean() => {}
                Ok(r) => {
                    let mut s = format!("lanefs fsck: {}", r.summary());
                    for p in r.problems.iter().take(12) {
                        let _ = write!(s, "\n  {p}");
                    }
                    errs.push(s);
                }
                Err(e) => errs.push(format!("lanefs fsck: {e}")),
            }
        }
        Err(e) => errs.push(format!("mount (replay) failed: {e}")),
    }
    let img = device_bytes(dev);
    if e2fsck || !errs.is_empty() {
        if let Err(e) = e2fsck_image(&img) {
            errs.push(e);
        }
    }
    give_buf(img);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("\n"))
    }
}

struct Report {
    states: u64,
    runs: u64,
    e2fsck: u64,
    failures: Vec<String>,
    failed_states: u64,
    saved: Option<PathBuf>,
}

impl Report {
    fn new() -> Report {
        Report {
            states: 0,
            runs: 0,
            e2fsck: 0,
            failures: Vec::new(),
            failed_states: 0,
            saved: None,
        }
    }
}

/// Check every state of one crash run; false once enough failures are collected.
fn check_run(
    label: &str,
    run: &Run,
    states: Vec<(String, Keep)>,
    head: &str,
    rep: &mut Report,
) -> bool {
    let every = e2fsck_every();
    for (what, keep) in states {
        let k = STATES_SEEN.fetch_add(1, Ordering::Relaxed);
        let e2 = k.is_multiple_of(every);
        rep.e2fsck += u64::from(e2);
        rep.states += 1;
        if let Err(e) = check_state(build_state(&run.dev, &keep), &run.model, e2) {
            rep.failed_states += 1;
            if rep.saved.is_none() {
                let dir = std::env::temp_dir().join("lanefs-crash");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{label}-{:x}.img", base_seed()));
                let img = build_state(&run.dev, &keep);
                write_image(&path, &img);
                give_buf(img);
                rep.saved = Some(path);
            }
            let pending: Vec<String> = run
                .dev
                .pending()
                .iter()
                .take(16)
                .map(|p| format!("{}@{}", p.len, p.off))
                .collect();
            rep.failures.push(format!(
                "{head}; state: {what}\n  pending writes (bytes@offset): {}\n  {} ops done, \
                 last: {:?}\n{e}",
                pending.join(" "),
                run.ops,
                run.trace.iter().rev().take(4).rev().collect::<Vec<_>>()
            ));
            if rep.failures.len() >= max_failures() {
                return false;
            }
        }
    }
    true
}

fn finish(test: &str, rep: &Report, start: Instant) {
    println!(
        "crash: {} states checked ({} runs, {} with e2fsck) for {test} in {:.1} s, {} failed",
        rep.states,
        rep.runs,
        rep.e2fsck,
        start.elapsed().as_secs_f64(),
        rep.failed_states
    );
    if !rep.failures.is_empty() {
        let saved = rep.saved.as_ref().map_or(String::new(), |p| {
            format!("\nfirst failing image saved at {}", p.display())
        });
        panic!(
            "{test}: {} of {} crash states failed (LANEFS_CRASH_SEED={:#x}){saved}\n\n{}",
            rep.failed_states,
            rep.states,
            base_seed(),
            rep.failures.join("\n\n")
        );
    }
}

/// The dry run: the workload without a crash must give a clean image equal to the model.
/// Returns it, with the counts of writes and flushes.
fn dry_run(label: &str, w: &Workload, base: &[u8], wseed: u64) -> (Run, u64, u64) {
    let ctx = format!("{label} (LANEFS_CRASH_SEED={:#x}) dry run", base_seed());
    let run = run_workload(w, base, wseed, Cut::None, &ctx);
    let (writes, flushes) = (run.dev.writes(), run.dev.flushes());
    println!(
        "crash: {label} dry run: {} ops, {writes} writes, {flushes} flushes, {}",
        run.ops, run.journal
    );
    let mut img = take_buf();
    run.dev.snapshot_into(&mut img);
    if let Err(e) = check_state(img, &run.model, true) {
        panic!("{ctx}: the image after unmount without a crash is wrong:\n{e}");
    }
    (run, writes, flushes)
}

/// Crash runs of one workload on one shape, with `1/share` of a workload's state budget.
fn crash_workload(w: &Workload, shape: &Shape, share: u64) {
    let test = format!("crash_{}{}", shape.name, w.name);
    set_shape(shape);
    let Some(base) = base_image(&test, shape) else {
        return;
    };
    // About 0.1 s a state here; a hang must still fail the run.
    let _dog = common::watchdog(&test, 900 + total_states() / WORKLOADS);
    let start = Instant::now();
    let wseed = mix(base_seed(), name_seed(w.name));
    let (dry, writes, flushes) = dry_run(&test, w, base, wseed);
    give_buf(device_bytes(dry.dev));
    let budget = (total_states() / WORKLOADS / share).max(1);
    let only = env_u64("LANEFS_CRASH_RUN");
    let forced = std::env::var("LANEFS_CRASH_CUT")
        .ok()
        .map(|v| Cut::parse(&v));
    // Every crash point once, in a seeded order, then again with other states.
    let mut points: Vec<Cut> = (0..=writes)
        .map(Cut::Write)
        .chain((1..=flushes).flat_map(|n| [Cut::AfterFlush(n), Cut::AtFlush(n)]))
        .collect();
    points.shuffle(&mut StdRng::seed_from_u64(wseed));
    let mut rep = Report::new();
    rep.states += 1;
    for i in 0.. {
        if rep.states >= budget && only.is_none() {
            break;
        }
        if only.is_some_and(|r| r != i) {
            if only.is_some_and(|r| r < i) {
                break;
            }
            continue;
        }
        let mut rng = StdRng::seed_from_u64(mix(wseed, i + 1));
        let cut = forced.unwrap_or(points[i as usize % points.len()]);
        let head = format!(
            "{} crash {cut:?} (of {writes} writes, {flushes} flushes); reproduce: \
             LANEFS_CRASH_SEED={:#x} LANEFS_CRASH_RUN={i} LANEFS_CRASH_CUT={} \
             cargo test -p lanefs --test crash -- {test} --exact",
            w.name,
            base_seed(),
            cut.env()
        );
        let run = run_workload(w, base, wseed, cut, &head);
        rep.runs += 1;
        let states = crash_states(&run.dev, &mut rng);
        let go_on = check_run(&test, &run, states, &head, &mut rep);
        give_buf(device_bytes(run.dev));
        if !go_on {
            break;
        }
    }
    finish(&test, &rep, start);
}

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
