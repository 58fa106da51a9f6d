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

mod common;

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

// ---------------------------------------------------------------------------------------
// Test 1: private and shared directories.

/// What all workers share.
struct Arena {
    fs: Arc<Fs>,
    shared: Ino,
    /// Per thread: victims published ("v{t}-{k}" for k below the count).
    victims: Vec<AtomicUsize>,
    /// Per thread: rename-race sources published ("w{t}-{k}").
    racers: Vec<AtomicUsize>,
    barrier: Barrier,
    deadline: Instant,
    /// A small tree of directories that all threads keep moving into one another.
    tree: Ino,
    nodes: Vec<Ino>,
}

/// What one worker owns and saw.
#[derive(Default)]
struct Outcome {
    t: usize,
    /// Files in its private directory (sub 0) and the subdirectories x (1) and y (2).
    private: BTreeMap<(usize, String), Vec<u8>>,
    /// Empty directories "d{n}" in its private directory.
    subdirs: BTreeSet<String>,
    /// Its files "s{t}-{n}" and empty directories "d{t}-{n}" in the shared directory.
    own: BTreeMap<String, Vec<u8>>,
    own_dirs: BTreeSet<String>,
    /// Victims whose unlink this worker won.
    victim_wins: Vec<String>,
    /// Rename-race sources this worker moved (the new name).
    race_wins: Vec<String>,
    /// (target number, tag) of every file renamed over "target{j}".
    targets: Vec<(usize, u64)>,
    ops: usize,
}

struct Worker {
    a: Arc<Arena>,
    rng: StdRng,
    dirs: [Ino; 3],
    out: Outcome,
    /// Next victim / racer of the partner to attack.
    next_victim: usize,
    next_racer: usize,
    made_victims: usize,
    made_racers: usize,
    made_targets: usize,
}

impl Worker {
    fn fs(&self) -> &Fs {
        &self.a.fs
    }
    fn t(&self) -> usize {
        self.out.t
    }
    fn partner(&self) -> usize {
        self.t() ^ 1
    }

    fn check<T: std::fmt::Debug>(&self, what: &str, got: &Result<T, Error>, want: Option<Error>) {
        let ok = match &want {
            None => got.is_ok(),
            Some(w) => same_err(got, w),
        };
        assert!(
            ok,
            "thread {}: {what}: got {got:?}, expected {want:?}",
            self.t()
        );
    }

    fn private_op(&mut self) {
        let s = self.rng.gen_range(0..3usize);
        let name = format!("f{}", self.rng.gen_range(0..12));
        let key = (s, name.clone());
        let exists = self.out.private.contains_key(&key);
        let dir = self.dirs[s];
        match self.rng.gen_range(0..10) {
            0 | 1 => {
                let got = self.fs().create(dir, name.as_bytes(), 0o644, OWNER);
                self.check("create", &got, exists.then_some(Error::Exists));
                if let Ok(a) = got {
                    let data = tagged(self.rng.gen(), self.rng.gen_range(8..20_000));
                    assert_eq!(self.fs().write(a.ino, 0, &data).expect("write"), data.len());
                    self.fs().release(a.ino).expect("release");
                    self.out.private.insert(key, data);
                }
            }
            2 | 3 if exists => {
                let ino = lookup(self.fs(), dir, &name);
                let off = self.rng.gen_range(0..40_000usize);
                let data = tagged(self.rng.gen(), self.rng.gen_range(8..8000));
                assert_eq!(
                    self.fs().write(ino, off as u64, &data).expect("write"),
                    data.len()
                );
                let f = self.out.private.get_mut(&key).expect("model");
                if f.len() < off + data.len() {
                    f.resize(off + data.len(), 0);
                }
                f[off..off + data.len()].copy_from_slice(&data);
            }
            4 if exists => {
                let ino = lookup(self.fs(), dir, &name);
                let size = self.rng.gen_range(0..50_000usize);
                let set = SetAttr {
                    size: Some(size as u64),
                    ..SetAttr::default()
                };
                self.fs().setattr(ino, &set).expect("truncate");
                self.out
                    .private
                    .get_mut(&key)
                    .expect("model")
                    .resize(size, 0);
            }
            5 if exists => {
                let ino = lookup(self.fs(), dir, &name);
                let (off, len) = (
                    self.rng.gen_range(0..40_000usize),
                    self.rng.gen_range(1..20_000usize),
                );
                let mode = FallocMode {
                    keep_size: true,
                    punch_hole: true,
                    zero_range: false,
                };
                self.fs()
                    .fallocate(ino, mode, off as u64, len as u64)
                    .expect("punch");
                let f = self.out.private.get_mut(&key).expect("model");
                let end = (off + len).min(f.len());
                if off < end {
                    f[off..end].fill(0);
                }
            }
            6 => {
                let (s2, name2) = (
                    self.rng.gen_range(0..3usize),
                    format!("f{}", self.rng.gen_range(0..12)),
                );
                let got = self
                    .fs()
                    .rename(dir, name.as_bytes(), self.dirs[s2], name2.as_bytes());
                self.check("rename", &got, (!exists).then_some(Error::NotFound));
                if let Some(data) = self.out.private.remove(&key) {
                    self.out.private.insert((s2, name2), data);
                }
            }
            7 => {
                let got = self.fs().unlink(dir, name.as_bytes());
                self.check("unlink", &got, (!exists).then_some(Error::NotFound));
                self.out.private.remove(&key);
            }
            8 if exists => {
                let ino = lookup(self.fs(), dir, &name);
                let data = read_all(self.fs(), ino);
                assert!(
                    data == self.out.private[&key],
                    "thread {}: contents of {key:?}",
                    self.t()
                );
            }
            _ => self.check_private_dir(s),
        }
    }

    fn check_private_dir(&self, s: usize) {
        let got: BTreeSet<String> = list(self.fs(), self.dirs[s]).into_keys().collect();
        let mut want: BTreeSet<String> = self
            .out
            .private
            .keys()
            .filter(|k| k.0 == s)
            .map(|k| k.1.clone())
            .collect();
        if s == 0 {
            want.extend(["x".to_string(), "y".to_string()]);
            want.extend(self.out.subdirs.iter().cloned());
        }
        assert_eq!(
            got,
            want,
            "thread {}: listing of private directory {s}",
            self.t()
        );
    }

    /// Operations on this worker's own names in the shared directory, and moves of files
    /// and directories between it and the private directory (cross-directory renames).
    fn own_op(&mut self) {
        let (t, sh) = (self.t(), self.a.shared);
        let n = self.rng.gen_range(0..10);
        let name = format!("s{t}-{n}");
        let exists = self.out.own.contains_key(&name);
        let dname = format!("d{t}-{n}");
        let dexists = self.out.own_dirs.contains(&dname);
        let pname = format!("d{n}");
        let pexists = self.out.subdirs.contains(&pname);
        match self.rng.gen_range(0..9) {
            0 | 1 => {
                let got = self.fs().create(sh, name.as_bytes(), 0o600, OWNER);
                self.check("shared create", &got, exists.then_some(Error::Exists));
                if let Ok(a) = got {
                    let data = tagged(self.rng.gen(), self.rng.gen_range(8..12_000));
                    self.fs().write(a.ino, 0, &data).expect("write");
                    self.fs().release(a.ino).expect("release");
                    self.out.own.insert(name, data);
                }
            }
            2 => {
                let got = self.fs().unlink(sh, name.as_bytes());
                self.check("shared unlink", &got, (!exists).then_some(Error::NotFound));
                self.out.own.remove(&name);
            }
            3 => {
                let to = format!("s{t}-{}", self.rng.gen_range(0..10));
                let got = self.fs().rename(sh, name.as_bytes(), sh, to.as_bytes());
                self.check("shared rename", &got, (!exists).then_some(Error::NotFound));
                if let Some(d) = self.out.own.remove(&name) {
                    self.out.own.insert(to, d);
                }
            }
            4 => {
                // Out to the private directory and back under another name.
                let tmp = format!("f{}", self.rng.gen_range(0..12));
                let got = self
                    .fs()
                    .rename(sh, name.as_bytes(), self.dirs[1], tmp.as_bytes());
                self.check("move out", &got, (!exists).then_some(Error::NotFound));
                if let Some(d) = self.out.own.remove(&name) {
                    self.out.private.insert((1, tmp), d);
                }
            }
            5 => {
                let from = format!("f{}", self.rng.gen_range(0..12));
                let exists_p = self.out.private.contains_key(&(2, from.clone()));
                let got = self
                    .fs()
                    .rename(self.dirs[2], from.as_bytes(), sh, name.as_bytes());
                self.check("move in", &got, (!exists_p).then_some(Error::NotFound));
                if let Some(d) = self.out.private.remove(&(2, from)) {
                    self.out.own.insert(name, d);
                }
            }
            6 => {
                let got = self.fs().mkdir(sh, dname.as_bytes(), 0o755, OWNER);
                self.check("shared mkdir", &got, dexists.then_some(Error::Exists));
                self.out.own_dirs.insert(dname);
            }
            7 => {
                let got = self.fs().rmdir(sh, dname.as_bytes());
                self.check("shared rmdir", &got, (!dexists).then_some(Error::NotFound));
                self.out.own_dirs.remove(&dname);
            }
            _ => {
                // A directory moves between the shared and the private directory, replacing
                // an empty one of the same name if there is one.
                if self.rng.gen() {
                    let got =
                        self.fs()
                            .rename(sh, dname.as_bytes(), self.dirs[0], pname.as_bytes());
                    self.check("dir move out", &got, (!dexists).then_some(Error::NotFound));
                    if self.out.own_dirs.remove(&dname) {
                        self.out.subdirs.insert(pname);
                    }
                } else {
                    let got =
                        self.fs()
                            .rename(self.dirs[0], pname.as_bytes(), sh, dname.as_bytes());
                    self.check("dir move in", &got, (!pexists).then_some(Error::NotFound));
                    if self.out.subdirs.remove(&pname) {
                        self.out.own_dirs.insert(dname);
                    }
                }
            }
        }
    }

    /// Make a victim and race the partner to unlink it.
    fn make_victim(&mut self) {
        let (t, k) = (self.t(), self.made_victims);
        let name = format!("v{t}-{k}");
        let a = self
            .fs()
            .create(self.a.shared, name.as_bytes(), 0o644, OWNER);
        let a = a.unwrap_or_else(|e| panic!("create victim {name}: {e:?}"));
        self.fs().release(a.ino).expect("release");
        self.made_victims += 1;
        self.a.victims[t].store(self.made_victims, Ordering::Release);
        self.try_unlink_victim(name);
    }

    fn try_unlink_victim(&mut self, name: String) {
        let got = self.fs().unlink(self.a.shared, name.as_bytes());
        match got {
            Ok(()) => self.out.victim_wins.push(name),
            Err(Error::NotFound) => {}
            Err(e) => panic!("thread {}: unlink victim {name}: {e:?}", self.t()),
        }
    }

    /// Make a file and race the partner to rename it (to ".a"; the partner to ".b").
    fn make_racer(&mut self) {
        let (t, k) = (self.t(), self.made_racers);
        let name = format!("w{t}-{k}");
        let a = self
            .fs()
            .create(self.a.shared, name.as_bytes(), 0o644, OWNER);
        let a = a.unwrap_or_else(|e| panic!("create racer {name}: {e:?}"));
        let data = tagged(((t as u64) << 32) | k as u64, 100);
        self.fs().write(a.ino, 0, &data).expect("write racer");
        self.fs().release(a.ino).expect("release");
        self.made_racers += 1;
        self.a.racers[t].store(self.made_racers, Ordering::Release);
        self.try_rename_racer(name, "a");
    }

    fn try_rename_racer(&mut self, name: String, suffix: &str) {
        let to = format!("{name}.{suffix}");
        let got = self
            .fs()
            .rename(self.a.shared, name.as_bytes(), self.a.shared, to.as_bytes());
        match got {
            Ok(()) => self.out.race_wins.push(to),
            Err(Error::NotFound) => {}
            Err(e) => panic!("thread {}: rename racer {name}: {e:?}", self.t()),
        }
    }

    /// Rename a fresh file over one of four shared target names.
    fn over_target(&mut self) {
        let (t, k) = (self.t(), self.made_targets);
        self.made_targets += 1;
        let name = format!("r{t}-{k}");
        let tag = (1 << 63) | ((t as u64) << 32) | k as u64;
        let a = self
            .fs()
            .create(self.a.shared, name.as_bytes(), 0o644, OWNER)
            .expect("create r");
        self.fs()
            .write(a.ino, 0, &tagged(tag, 64 + k % 5000))
            .expect("write r");
        self.fs().release(a.ino).expect("release");
        let j = self.rng.gen_range(0..4usize);
        let to = format!("target{j}");
        let got = self
            .fs()
            .rename(self.a.shared, name.as_bytes(), self.a.shared, to.as_bytes());
        got.unwrap_or_else(|e| panic!("thread {t}: rename {name} over {to}: {e:?}"));
        self.out.targets.push((j, tag));
    }

    /// Move one directory of the shared tree under another (or to the tree's top): the
    /// source may have moved meanwhile (NotFound) or the move would make a loop (Invalid).
    fn shape_op(&mut self) {
        let a = self.rng.gen_range(0..self.a.nodes.len());
        let name = format!("n{a}");
        let dest = match self.rng.gen_range(0..=self.a.nodes.len()) {
            b if b == self.a.nodes.len() => self.a.tree,
            b => self.a.nodes[b],
        };
        let Ok(parent) = self.fs().lookup(self.a.nodes[a], b"..") else {
            panic!("thread {}: .. of {name}", self.t())
        };
        let got = self
            .fs()
            .rename(parent.ino, name.as_bytes(), dest, name.as_bytes());
        match got {
            Ok(()) | Err(Error::NotFound) | Err(Error::Invalid(_)) => {}
            Err(e) => panic!("thread {}: move {name} under {dest}: {e:?}", self.t()),
        }
    }

    /// Read the shared directory through its cursor while the others change it: no name
    /// twice, and every name this thread owns (which it is not changing) exactly once.
    fn scan_shared(&mut self) {
        let chunk = self.rng.gen_range(64..1024);
        let mut seen = HashSet::new();
        let mut pos = 0;
        loop {
            let got = self
                .fs()
                .readdir(self.a.shared, pos, chunk)
                .expect("readdir shared");
            let Some(last) = got.last() else { break };
            assert!(last.next > pos, "readdir cursor went back");
            pos = last.next;
            for e in got {
                assert!(
                    seen.insert(e.name.clone()),
                    "{:?} listed twice",
                    String::from_utf8_lossy(&e.name)
                );
            }
        }
        for n in self.out.own.keys().chain(self.out.own_dirs.iter()) {
            assert!(
                seen.contains(n.as_bytes()),
                "thread {}: {n} missing from a scan",
                self.t()
            );
        }
    }

    /// Attack what the partner has published so far.
    fn attack(&mut self) {
        let p = self.partner();
        while self.next_victim < self.a.victims[p].load(Ordering::Acquire) {
            self.try_unlink_victim(format!("v{p}-{}", self.next_victim));
            self.next_victim += 1;
        }
        while self.next_racer < self.a.racers[p].load(Ordering::Acquire) {
            self.try_rename_racer(format!("w{p}-{}", self.next_racer), "b");
            self.next_racer += 1;
        }
    }

    fn run(mut self, ops: usize) -> Outcome {
        for i in 0..ops {
            if Instant::now() > self.a.deadline {
                break;
            }
            self.out.ops += 1;
            match i % 10 {
                0 => self.make_victim(),
                5 => self.make_racer(),
                7 => self.over_target(),
                3 => self.shape_op(),
                9 if i % 400 == 9 => self.scan_shared(),
                2 | 4 | 8 => self.own_op(),
                _ => self.private_op(),
            }
            self.attack();
        }
        // Everything is published once all have stopped: finish the races.
        self.a.barrier.wait();
        self.attack();
        self.out
    }
}

/// The moving directories still form a tree: each found once, ".." and link counts right.
fn verify_shape(fs: &Fs, tree: Ino, nodes: &[Ino]) {
    let mut seen = HashSet::new();
    let mut todo = vec![(tree, ROOT_INO)];
    while let Some((d, parent)) = todo.pop() {
        let entries = list(fs, d);
        assert_eq!(
            fs.lookup(d, b"..").expect("lookup ..").ino,
            parent,
            "'..' of {d}"
        );
        assert_eq!(
            fs.getattr(d).expect("getattr").nlink as usize,
            2 + entries.len(),
            "links of {d}"
        );
        for (name, (ino, kind)) in entries {
            assert_eq!(kind, FileType::Directory, "{name}");
            assert!(seen.insert(ino), "directory {name} reached twice");
            todo.push((ino, d));
        }
    }
    assert_eq!(
        seen,
        nodes.iter().copied().collect::<HashSet<_>>(),
        "directories of the tree"
    );
}

/// Check the whole tree against what the workers report.
fn verify_arena(fs: &Fs, shared: Ino, outs: &[Outcome], made: &[(usize, usize)]) {
    let root = list(fs, ROOT_INO);
    for o in outs {
        let t = o.t;
        let p = root[&format!("p{t}")].0;
        let x = lookup(fs, p, "x");
        let y = lookup(fs, p, "y");
        for (s, dir) in [p, x, y].into_iter().enumerate() {
            let got = list(fs, dir);
            let mut want: BTreeSet<String> = o
                .private
                .keys()
                .filter(|k| k.0 == s)
                .map(|k| k.1.clone())
                .collect();
            if s == 0 {
                want.extend(["x".to_string(), "y".to_string()]);
                want.extend(o.subdirs.iter().cloned());
            }
            assert_eq!(
                got.keys().cloned().collect::<BTreeSet<_>>(),
                want,
                "thread {t}: private directory {s}"
            );
            for ((_, name), data) in o.private.iter().filter(|k| k.0 .0 == s) {
                let ino = got[name].0;
                assert!(
                    read_all(fs, ino) == *data,
                    "thread {t}: contents of private {s}/{name}"
                );
            }
        }
    }
    let entries = list(fs, shared);
    let mut want_targets: HashMap<usize, HashSet<u64>> = HashMap::new();
    for o in outs {
        for &(j, tag) in &o.targets {
            want_targets.entry(j).or_default().insert(tag);
        }
    }
    let victim_wins: Vec<&String> = outs.iter().flat_map(|o| &o.victim_wins).collect();
    let race_wins: HashSet<&String> = outs.iter().flat_map(|o| &o.race_wins).collect();
    for (t, &(victims, racers)) in made.iter().enumerate() {
        for k in 0..victims {
            let name = format!("v{t}-{k}");
            let wins = victim_wins.iter().filter(|&&n| *n == name).count();
            assert_eq!(wins, 1, "victim {name} was unlinked {wins} times");
        }
        for k in 0..racers {
            let (a, b) = (format!("w{t}-{k}.a"), format!("w{t}-{k}.b"));
            let (ra, rb) = (race_wins.contains(&a), race_wins.contains(&b));
            assert!(ra != rb, "racer w{t}-{k}: renames won: .a {ra}, .b {rb}");
            let won = if ra { &a } else { &b };
            let ino = entries
                .get(won)
                .unwrap_or_else(|| panic!("{won} missing"))
                .0;
            assert_eq!(
                tag_of(&read_all(fs, ino)),
                Some(((t as u64) << 32) | k as u64),
                "{won}"
            );
        }
    }
    let mut checked = 0;
    for (name, &(ino, kind)) in &entries {
        // Every entry: the listing agrees with lookup and getattr.
        let a = fs
            .lookup(shared, name.as_bytes())
            .unwrap_or_else(|e| panic!("lookup {name}: {e:?}"));
        assert_eq!(
            (a.ino, a.kind),
            (ino, kind),
            "{name}: readdir and lookup disagree"
        );
        assert_eq!(fs.getattr(ino).expect("getattr").kind, kind);
        if let Some(j) = name.strip_prefix("target") {
            let tag = tag_of(&read_all(fs, ino)).unwrap_or_else(|| panic!("{name}: torn contents"));
            let j: usize = j.parse().expect("target number");
            assert!(
                want_targets.get(&j).is_some_and(|s| s.contains(&tag)),
                "{name}: tag {tag:x} never renamed there"
            );
            checked += 1;
        } else if name.starts_with('w') {
            assert!(
                race_wins.contains(name),
                "{name}: left behind by the rename race"
            );
        } else if let Some(rest) = name.strip_prefix('s').or_else(|| name.strip_prefix('d')) {
            let t: usize = rest
                .split('-')
                .next()
                .and_then(|x| x.parse().ok())
                .expect("owner");
            let o = &outs[t];
            if name.starts_with('s') {
                assert!(read_all(fs, ino) == o.own[name], "{name}: contents");
            } else {
                assert!(o.own_dirs.contains(name), "{name}: unexpected directory");
            }
            checked += 1;
        } else {
            panic!("unexpected entry {name} in the shared directory");
        }
    }
    for o in outs {
        for n in o.own.keys().chain(o.own_dirs.iter()) {
            assert!(
                entries.contains_key(n),
                "{n} missing from the shared directory"
            );
        }
    }
    for j in want_targets.keys() {
        assert!(
            entries.contains_key(&format!("target{j}")),
            "target{j} missing"
        );
    }
    assert!(checked > 0);
}

#[test]
fn threads_in_private_and_shared_directories() {
    let test = "threads_in_private_and_shared_directories";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let _w = common::watchdog(test, 120);
    let seed = seed();
    println!("{test}: LANEFS_SEED={seed}");
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "conc.img", IMG_SIZE);
    let fs = mount(&img);
    let st0 = fs.statfs().expect("statfs");
    let (inodes0, blocks0) = usage(&fs);
    let shared = fs
        .mkdir(ROOT_INO, b"shared", 0o777, OWNER)
        .expect("mkdir shared")
        .ino;
    let mut dirs = Vec::new();
    for t in 0..THREADS {
        let p = fs
            .mkdir(ROOT_INO, format!("p{t}").as_bytes(), 0o755, OWNER)
            .expect("mkdir p")
            .ino;
        let x = fs.mkdir(p, b"x", 0o755, OWNER).expect("mkdir x").ino;
        let y = fs.mkdir(p, b"y", 0o755, OWNER).expect("mkdir y").ino;
        dirs.push([p, x, y]);
    }
    let tree = fs
        .mkdir(ROOT_INO, b"tree", 0o755, OWNER)
        .expect("mkdir tree")
        .ino;
    let nodes: Vec<Ino> = (0..6)
        .map(|k| {
            fs.mkdir(tree, format!("n{k}").as_bytes(), 0o755, OWNER)
                .expect("mkdir n")
                .ino
        })
        .collect();
    let arena = Arc::new(Arena {
        fs: fs.clone(),
        shared,
        victims: (0..THREADS).map(|_| AtomicUsize::new(0)).collect(),
        racers: (0..THREADS).map(|_| AtomicUsize::new(0)).collect(),
        barrier: Barrier::new(THREADS),
        deadline: Instant::now() + Duration::from_secs(8),
        tree,
        nodes: nodes.clone(),
    });
    let start = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let w = Worker {
                a: arena.clone(),
                rng: StdRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9E37_79B9)),
                dirs: dirs[t],
                out: Outcome {
                    t,
                    ..Outcome::default()
                },
                next_victim: 0,
                next_racer: 0,
                made_victims: 0,
                made_racers: 0,
                made_targets: 0,
            };
            std::thread::spawn(move || w.run(8000))
        })
        .collect();
    let mut outs = Vec::new();
    for h in handles {
        outs.push(h.join().expect("worker panicked"));
    }
    let js = arena.fs.journal_stats();
    println!("{test}: {js:?}");
    assert!(
        js.commits > 10,
        "the 2 ms commit timer must have committed while the workers ran: {js:?}"
    );
    let made: Vec<(usize, usize)> = (0..THREADS)
        .map(|t| {
            (
                arena.victims[t].load(Ordering::Acquire),
                arena.racers[t].load(Ordering::Acquire),
            )
        })
        .collect();
    let ops: usize = outs.iter().map(|o| o.ops).sum();
    println!(
        "{test}: {ops} operations by {THREADS} threads in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    drop(arena);
    verify_arena(&fs, shared, &outs, &made);
    verify_shape(&fs, tree, &nodes);
    // No inode or block is lost: what statfs counts as used is what the tree holds.
    let check_counts = |fs: &Fs| {
        let st = fs.statfs().expect("statfs");
        let (inodes, blocks) = usage(fs);
        assert_eq!(
            st0.free_inodes - st.free_inodes,
            inodes - inodes0,
            "inodes in use vs reachable"
        );
        assert_eq!(
            st0.free_blocks - st.free_blocks,
            blocks - blocks0,
            "blocks in use vs reachable"
        );
    };
    check_counts(&fs);
    let fs = cycle(fs, &img);
    verify_arena(&fs, shared, &outs, &made);
    verify_shape(&fs, tree, &nodes);
    check_counts(&fs);
    fs.unmount().expect("unmount");
}

// ---------------------------------------------------------------------------------------
// Test 2: one file, disjoint writers, concurrent readers.

const STRIPE: usize = 3000;
const STRIPES: usize = 256;
const WRITERS: usize = 4;

/// Stripe contents: version, writer and stripe number, then a pattern of them.
fn stripe(version: u32, stripe: usize) -> Vec<u8> {
    tagged((u64::from(version) << 32) | stripe as u64, STRIPE)
}

/// Check one stripe as read: never written (zeros, or absent past EOF) or one whole
/// version; returns the version (0 for never written).
fn stripe_version(data: &[u8], s: usize) -> u32 {
    if data.iter().all(|&b| b == 0) {
        return 0;
    }
    let tag = tag_of(data).unwrap_or_else(|| panic!("stripe {s}: torn or corrupt contents"));
    assert_eq!(
        tag & 0xFFFF_FFFF,
        s as u64,
        "stripe {s} holds another stripe's data"
    );
    (tag >> 32) as u32
}

#[test]
fn one_file_disjoint_writers_and_readers() {
    let test = "one_file_disjoint_writers_and_readers";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let _w = common::watchdog(test, 120);
    let seed = seed();
    println!("{test}: LANEFS_SEED={seed}");
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "hot.img", IMG_SIZE);
    let fs = mount(&img);
    let ino = fs
        .create(ROOT_INO, b"hot", 0o644, OWNER)
        .expect("create")
        .ino;
    let deadline = Instant::now() + Duration::from_secs(6);
    let start = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            let mut rng = StdRng::seed_from_u64(seed ^ t as u64);
            std::thread::spawn(move || {
                // Writers own the stripes s with s % WRITERS == t; the rest read.
                let mut versions = vec![0u32; STRIPES];
                let mut ops = 0;
                for i in 0..25_000 {
                    if Instant::now() > deadline {
                        break;
                    }
                    ops += 1;
                    if t < WRITERS {
                        let s = rng.gen_range(0..STRIPES / WRITERS) * WRITERS + t;
                        versions[s] += 1;
                        let n = fs
                            .write(ino, (s * STRIPE) as u64, &stripe(versions[s], s))
                            .expect("write");
                        assert_eq!(n, STRIPE);
                        if i % 500 == 499 {
                            fs.fsync(ino, false).expect("fsync");
                        }
                    } else {
                        // Reads of whole stripes: each is some whole version, never older
                        // than one this reader saw before.
                        let (a, n) = (rng.gen_range(0..STRIPES), rng.gen_range(1..9usize));
                        let n = n.min(STRIPES - a);
                        let mut buf = vec![0u8; n * STRIPE];
                        let got = fs.read(ino, (a * STRIPE) as u64, &mut buf).expect("read");
                        buf[got..].fill(0);
                        for k in 0..n {
                            let s = a + k;
                            let v = stripe_version(&buf[k * STRIPE..(k + 1) * STRIPE], s);
                            assert!(
                                v >= versions[s],
                                "stripe {s} went back from {} to {v}",
                                versions[s]
                            );
                            versions[s] = v;
                        }
                    }
                }
                (versions, ops)
            })
        })
        .collect();
    let mut latest = vec![0u32; STRIPES];
    let mut ops = 0;
    for (t, h) in handles.into_iter().enumerate() {
        let (v, n) = h.join().expect("thread panicked");
        ops += n;
        if t < WRITERS {
            for s in (t..STRIPES).step_by(WRITERS) {
                latest[s] = v[s];
            }
        }
    }
    println!(
        "{test}: {ops} operations in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let check = |fs: &Fs| {
        let data = read_all(fs, ino);
        for (s, &v) in latest.iter().enumerate() {
            let got = data.get(s * STRIPE..(s + 1) * STRIPE);
            let got = got.map_or(0, |d| stripe_version(d, s));
            assert_eq!(got, v, "stripe {s}: final version");
        }
    };
    check(&fs);
    fs.release(ino).expect("release");
    let fs = cycle(fs, &img);
    check(&fs);
    fs.unmount().expect("unmount");
}

// ---------------------------------------------------------------------------------------
// Test 3: fallocate and truncate loops (the fallocate2 workload) return every block.

#[test]
fn fallocate_truncate_loops_return_every_block() {
    let test = "fallocate_truncate_loops_return_every_block";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let _w = common::watchdog(test, 120);
    let seed = seed();
    println!("{test}: LANEFS_SEED={seed}");
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "falloc.img", IMG_SIZE);
    let fs = mount(&img);
    let st0 = fs.statfs().expect("statfs");
    let deadline = Instant::now() + Duration::from_secs(6);
    let start = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            let mut rng = StdRng::seed_from_u64(seed ^ t as u64);
            std::thread::spawn(move || {
                let dname = format!("f{t}");
                let d = fs
                    .mkdir(ROOT_INO, dname.as_bytes(), 0o755, OWNER)
                    .expect("mkdir")
                    .ino;
                let f = fs.create(d, b"file", 0o644, OWNER).expect("create").ino;
                let mut size = 0u64;
                let mut ops = 0;
                for i in 0..40_000u64 {
                    if Instant::now() > deadline {
                        break;
                    }
                    ops += 1;
                    // The next 8 KiB; at 1 MiB back to 0 (fallocate2).
                    if size >= 1 << 20 {
                        let set = SetAttr {
                            size: Some(0),
                            ..SetAttr::default()
                        };
                        assert_eq!(
                            fs.setattr(f, &set).expect("truncate").blocks,
                            0,
                            "blocks after truncate to 0"
                        );
                        size = 0;
                    }
                    let keep = i % 7 == 3;
                    let mode = FallocMode {
                        keep_size: keep,
                        punch_hole: false,
                        zero_range: false,
                    };
                    fs.fallocate(f, mode, size, 8192).expect("fallocate");
                    if !keep {
                        size += 8192;
                    }
                    if i % 11 == 5 && size > 0 {
                        let off = rng.gen_range(0..size);
                        let punch = FallocMode {
                            keep_size: true,
                            punch_hole: true,
                            zero_range: false,
                        };
                        fs.fallocate(f, punch, off, rng.gen_range(1..40_000))
                            .expect("punch");
                    }
                    if i % 13 == 7 && size > 0 {
                        fs.write(f, rng.gen_range(0..size), &[7u8; 300])
                            .expect("write");
                        size = fs.getattr(f).expect("getattr").size;
                    }
                    assert_eq!(
                        fs.getattr(f).expect("getattr").size,
                        size,
                        "thread {t}: size"
                    );
                }
                fs.release(f).expect("release");
                fs.unlink(d, b"file").expect("unlink");
                fs.rmdir(ROOT_INO, dname.as_bytes()).expect("rmdir");
                ops
            })
        })
        .collect();
    let ops: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("thread panicked"))
        .sum();
    println!(
        "{test}: {ops} loop iterations in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let counts = |fs: &Fs| {
        let st = fs.statfs().expect("statfs");
        (st.free_blocks, st.free_inodes)
    };
    assert_eq!(
        counts(&fs),
        (st0.free_blocks, st0.free_inodes),
        "free blocks and inodes after deleting everything"
    );
    let fs = cycle(fs, &img);
    assert_eq!(
        counts(&fs),
        (st0.free_blocks, st0.free_inodes),
        "free counts after remount"
    );
    fs.unmount().expect("unmount");
}

/// Goal: a remove and a change of the same file never deadlock with a commit. The journal's
/// lock order is inode locks first, then the handle: a setattr holds the file's lock and
/// waits in `Journal::start` while a commit closes the running transaction, and that
/// commit waits for every open handle. A remove that started its handle before locking
/// the file (as a remove did for a while, to claim cold inodes) waited for the setattr's
/// lock while holding a handle the commit waited for. Method: commits every millisecond;
/// one thread unlinks 300 cached files of a directory while another chmods the file being
/// unlinked again and again, 40 rounds, under a watchdog; every file is gone after, and
/// the image is clean.
#[test]
fn removes_and_setattrs_of_one_file_race_commits() {
    let _w = common::watchdog("removes_and_setattrs_of_one_file_race_commits", 120);
    let td = tempfile::tempdir().unwrap();
    let img = common::mkfs_image(td.path(), "rs.img", 64 << 20);
    let o = MountOptions {
        commit_interval: Duration::from_millis(1),
        ..MountOptions::default()
    };
    let fs = Fs::mount_path(&img, o).unwrap();
    let own = Owner::default();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, own).unwrap().ino;
    for round in 0..40 {
        let inos: Vec<Ino> = (0..300)
            .map(|i| {
                let a = fs
                    .create(d, format!("f{i}").as_bytes(), 0o644, own)
                    .unwrap();
                fs.release(a.ino).unwrap();
                a.ino
            })
            .collect();
        let at = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..300 {
                    at.store(i, Ordering::Release);
                    fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
                }
                at.store(300, Ordering::Release);
            });
            // The file being unlinked, again and again.
            s.spawn(|| {
                let set = SetAttr {
                    perm: Some(0o600),
                    ..SetAttr::default()
                };
                loop {
                    let i = at.load(Ordering::Acquire);
                    let Some(&ino) = inos.get(i) else { break };
                    match fs.setattr(ino, &set) {
                        Ok(_) | Err(Error::NotFound) => {}
                        Err(e) => panic!("round {round}: setattr {ino}: {e}"),
                    }
                }
            });
        });
        assert!(list(&fs, d).is_empty(), "round {round}");
    }
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);
}
