//! The first test's workers: the arena they share, the outcomes each records, and a
//! worker's loop of operations on its private directory, its names in the shared directory
//! and the moving directory tree, each checked against what the worker owns.

use super::*;

// ---------------------------------------------------------------------------------------
// Test 1: private and shared directories.

/// What all workers share.
pub(super) struct Arena {
    pub(super) fs: Arc<Fs>,
    pub(super) shared: Ino,
    /// Per thread: victims published ("v{t}-{k}" for k below the count).
    pub(super) victims: Vec<AtomicUsize>,
    /// Per thread: rename-race sources published ("w{t}-{k}").
    pub(super) racers: Vec<AtomicUsize>,
    pub(super) barrier: Barrier,
    pub(super) deadline: Instant,
    /// A small tree of directories that all threads keep moving into one another.
    pub(super) tree: Ino,
    pub(super) nodes: Vec<Ino>,
}

/// What one worker owns and saw.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) t: usize,
    /// Files in its private directory (sub 0) and the subdirectories x (1) and y (2).
    pub(super) private: BTreeMap<(usize, String), Vec<u8>>,
    /// Empty directories "d{n}" in its private directory.
    pub(super) subdirs: BTreeSet<String>,
    /// Its files "s{t}-{n}" and empty directories "d{t}-{n}" in the shared directory.
    pub(super) own: BTreeMap<String, Vec<u8>>,
    pub(super) own_dirs: BTreeSet<String>,
    /// Victims whose unlink this worker won.
    pub(super) victim_wins: Vec<String>,
    /// Rename-race sources this worker moved (the new name).
    pub(super) race_wins: Vec<String>,
    /// (target number, tag) of every file renamed over "target{j}".
    pub(super) targets: Vec<(usize, u64)>,
    pub(super) ops: usize,
}

pub(super) struct Worker {
    pub(super) a: Arc<Arena>,
    pub(super) rng: StdRng,
    pub(super) dirs: [Ino; 3],
    pub(super) out: Outcome,
    /// Next victim / racer of the partner to attack.
    pub(super) next_victim: usize,
    pub(super) next_racer: usize,
    pub(super) made_victims: usize,
    pub(super) made_racers: usize,
    pub(super) made_targets: usize,
}

impl Worker {
    pub(super) fn fs(&self) -> &Fs {
        &self.a.fs
    }
    pub(super) fn t(&self) -> usize {
        self.out.t
    }
    pub(super) fn partner(&self) -> usize {
        self.t() ^ 1
    }

    pub(super) fn check<T: std::fmt::Debug>(
        &self,
        what: &str,
        got: &Result<T, Error>,
        want: Option<Error>,
    ) {
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

    pub(super) fn private_op(&mut self) {
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

    pub(super) fn check_private_dir(&self, s: usize) {
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
    pub(super) fn own_op(&mut self) {
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
    pub(super) fn make_victim(&mut self) {
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

    pub(super) fn try_unlink_victim(&mut self, name: String) {
        let got = self.fs().unlink(self.a.shared, name.as_bytes());
        match got {
            Ok(()) => self.out.victim_wins.push(name),
            Err(Error::NotFound) => {}
            Err(e) => panic!("thread {}: unlink victim {name}: {e:?}", self.t()),
        }
    }

    /// Make a file and race the partner to rename it (to ".a"; the partner to ".b").
    pub(super) fn make_racer(&mut self) {
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

    pub(super) fn try_rename_racer(&mut self, name: String, suffix: &str) {
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
    pub(super) fn over_target(&mut self) {
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
    pub(super) fn shape_op(&mut self) {
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
    pub(super) fn scan_shared(&mut self) {
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
    pub(super) fn attack(&mut self) {
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

    pub(super) fn run(mut self, ops: usize) -> Outcome {
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
