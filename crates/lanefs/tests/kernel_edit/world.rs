//! The run: `World` holds the image, the model, whichever side has it mounted, the operations
//! since the last clean check and the counters. It mounts either side, does an operation on
//! that side and in the model, checks (e2fsck, lanefs fsck, the kernel's and lanefs's views
//! against the model, errors the kernel recorded), stops keeping the image and printing the
//! seed, and makes the seeded random operations (with `rand_chars` for names and targets).

use super::*;

// ---------------------------------------------------------------------------------------
// The run: one image, the model, and whichever side has it mounted.

pub(super) enum Side {
    None,
    Kernel(KernelMount),
    Lanefs(Arc<Fs>),
}

pub(super) struct World {
    pub(super) img: PathBuf,
    /// Read-write kernel mount point (kernel phases).
    mnt: PathBuf,
    /// Read-only kernel mount point (checks).
    ro: PathBuf,
    seed: u64,
    pub(super) rng: StdRng,
    pub(super) model: Model,
    pub(super) side: Side,
    /// Operations since the last clean check (printed on failure).
    pub(super) log: Vec<String>,
    pub(super) checks: usize,
    pub(super) lanefs_ops: usize,
    pub(super) kernel_ops: usize,
    pub(super) random_ops: usize,
    since_check: usize,
    check_every: usize,
    /// Paths random operations neither move nor remove (nor their ancestors).
    pub(super) pinned: BTreeSet<String>,
    /// Subtrees random operations leave alone entirely (scripted steps own them).
    pub(super) frozen: BTreeSet<String>,
    /// Directories random operations favour.
    pub(super) hot: Vec<String>,
    t0: Instant,
}

impl World {
    pub(super) fn new(td: &Path, img: PathBuf, seed: u64, ops: usize) -> World {
        let pinned = [
            "/h",
            "/big",
            "/big2",
            "/big3",
            "/lin1",
            "/lin2",
            "/lin3",
            "/lin4",
            "/ext",
            "/sym",
            "/links",
            "/tiny",
            "/links/a",
            "/links/b",
            "/lin2/sub",
            "/lin3/empty",
            "/hx",
            "/hy",
        ];
        World {
            img,
            mnt: td.join("mnt"),
            ro: td.join("ro"),
            seed,
            rng: StdRng::seed_from_u64(seed),
            model: Model::default(),
            side: Side::None,
            log: Vec::new(),
            checks: 0,
            lanefs_ops: 0,
            kernel_ops: 0,
            random_ops: 0,
            since_check: 0,
            check_every: (ops / 50).max(10),
            pinned: pinned.iter().map(|s| s.to_string()).collect(),
            frozen: ["/ext", "/sym", "/links", "/tiny", "/hx", "/hy"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            hot: [
                "/h", "/big", "/big2", "/big3", "/lin1", "/lin2", "/lin3", "/lin4",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            t0: Instant::now(),
        }
    }

    pub(super) fn side_name(&self) -> &'static str {
        match self.side {
            Side::None => "none",
            Side::Kernel(_) => "kernel",
            Side::Lanefs(_) => "lanefs",
        }
    }

    /// Unmount whatever is mounted (no checks).
    pub(super) fn unmount(&mut self) -> Result<(), String> {
        match std::mem::replace(&mut self.side, Side::None) {
            Side::None => Ok(()),
            Side::Kernel(km) => km.unmount(),
            Side::Lanefs(fs) => fs.unmount().map_err(|e| format!("lanefs unmount: {e}")),
        }
    }

    /// Stop: keep the image for a look, and report the seed and the operations since the
    /// last clean check.
    pub(super) fn fail(&mut self, msg: String) -> ! {
        let _ = self.unmount();
        let keep = std::env::temp_dir().join(format!("lanefs-kernel-edit-{}.img", self.seed));
        let kept = run(Command::new("cp")
            .arg("--sparse=always")
            .arg(&self.img)
            .arg(&keep))
        .is_ok();
        let tail: Vec<&String> = self.log.iter().rev().take(60).collect();
        let mut ops = String::new();
        for l in tail.iter().rev() {
            ops.push_str("  ");
            ops.push_str(l);
            ops.push('\n');
        }
        panic!(
            "kernel_edit (LANEFS_KERNEL_EDIT_SEED={}) after {} checks: {msg}\nimage kept: {}\n\
             last {} of {} operations since the last clean check:\n{ops}",
            self.seed,
            self.checks,
            if kept {
                keep.display().to_string()
            } else {
                "no".into()
            },
            tail.len(),
            self.log.len(),
        );
    }

    pub(super) fn mount_kernel(&mut self) {
        if let Err(e) = self.unmount() {
            self.fail(e);
        }
        match KernelMount::mount(&self.img, &self.mnt, "") {
            Ok(km) => self.side = Side::Kernel(km),
            Err(e) => self.fail(format!("the kernel refuses to mount: {e}")),
        }
    }

    pub(super) fn mount_lanefs(&mut self) {
        if let Err(e) = self.unmount() {
            self.fail(e);
        }
        match Fs::mount_path(&self.img, MountOptions::default()) {
            Ok(fs) => self.side = Side::Lanefs(fs),
            Err(e) => self.fail(format!("lanefs refuses to mount: {e}")),
        }
    }

    /// Do `op` on the mounted side and in the model.
    pub(super) fn op(&mut self, op: Op) {
        let open_first = self.rng.gen_bool(0.5);
        let line = format!("{} {op:?}", self.side_name());
        self.log.push(line.clone());
        let r = match &self.side {
            Side::Kernel(km) => kernel_apply(&km.dir, &op),
            Side::Lanefs(fs) => {
                let fs = fs.clone();
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    lanefs_apply(&fs, &op, open_first)
                })) {
                    Ok(r) => r.map_err(|e| format!("lanefs: {e} (errno {})", e.errno())),
                    Err(_) => Err("lanefs panicked".to_string()),
                }
            }
            Side::None => Err("nothing mounted".into()),
        };
        if let Err(e) = r {
            self.fail(format!("{line}: {e}"));
        }
        match self.side {
            Side::Kernel(_) => self.kernel_ops += 1,
            _ => self.lanefs_ops += 1,
        }
        self.model.apply(&op);
    }

    /// Unmount, `e2fsck -fn`, compare the kernel's (read-only mount) and lanefs's views
    /// with the model, run `inspect` on the image, and mount the same side again.
    pub(super) fn check_with<T>(&mut self, label: &str, inspect: impl FnOnce(&Path) -> T) -> T {
        let was = self.side_name();
        if let Side::Lanefs(fs) = &self.side {
            let r = lanefs_view(fs).and_then(|v| compare(&self.model, &v, "lanefs"));
            if let Err(e) = r {
                self.fail(format!("{label}: {e}"));
            }
        }
        if let Err(e) = self.unmount() {
            self.fail(format!("{label}: {e}"));
        }
        if let Err(e) = fsck_clean(&self.img, label).and_then(|_| lanefs_fsck(&self.img, label)) {
            self.fail(e);
        }
        if was != "lanefs" {
            // lanefs reads what the kernel wrote.
            let ro = MountOptions {
                read_only: true,
                ..Default::default()
            };
            let r = Fs::mount_path(&self.img, ro)
                .map_err(|e| format!("lanefs read-only mount: {e}"))
                .and_then(|fs| {
                    let r = lanefs_view(&fs).and_then(|v| compare(&self.model, &v, "lanefs"));
                    let _ = fs.unmount();
                    r
                });
            if let Err(e) = r {
                self.fail(format!("{label}: {e}"));
            }
        }
        let r = KernelMount::mount(&self.img, &self.ro, "ro")
            .map_err(|e| format!("the kernel refuses to mount: {e}"))
            .and_then(|km| {
                let r = kernel_view(&km.dir).and_then(|v| compare(&self.model, &v, "kernel"));
                km.unmount().and(r)
            })
            .and_then(|_| recorded_errors(&self.img));
        if let Err(e) = r {
            self.fail(format!("{label}: {e}"));
        }
        let out = inspect(&self.img);
        match was {
            "kernel" => self.mount_kernel(),
            "lanefs" => self.mount_lanefs(),
            _ => {}
        }
        self.checks += 1;
        self.since_check = 0;
        self.log.clear();
        out
    }

    pub(super) fn check(&mut self, label: &str) {
        self.check_with(label, |_| ());
    }

    pub(super) fn note(&self, what: &str) {
        println!(
            "kernel_edit: [{:6.1} s] {what}",
            self.t0.elapsed().as_secs_f64()
        );
    }

    /// Bytes of file data the model holds (holes included).
    pub(super) fn data_bytes(&self) -> u64 {
        self.model.files.values().map(|f| f.data.len() as u64).sum()
    }

    // -----------------------------------------------------------------------------------
    // Random operations.

    pub(super) fn rand_name(&mut self, dir: &str) -> String {
        loop {
            let len = match self.rng.gen_range(0..10) {
                0..=2 => self.rng.gen_range(1..12),
                3..=6 => self.rng.gen_range(12..60),
                _ => self.rng.gen_range(150..=255),
            };
            let name = rand_chars(&mut self.rng, len);
            if name != "." && name != ".." && self.model.get(&format!("{dir}/{name}")).is_none() {
                return name;
            }
        }
    }

    pub(super) fn rand_data(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.rng.fill_bytes(&mut v);
        v
    }

    pub(super) fn is_frozen(&self, path: &str) -> bool {
        self.frozen.iter().any(|f| within(path, f))
    }

    /// Whether random operations may move or remove `path`.
    fn movable(&self, path: &str) -> bool {
        !self.is_frozen(path) && !self.pinned.iter().any(|p| within(p, path))
    }

    fn pick_dir(&mut self) -> String {
        if self.rng.gen_bool(0.4) {
            let hot: Vec<String> = self
                .hot
                .iter()
                .filter(|d| self.model.is_dir(d) && !self.is_frozen(d))
                .cloned()
                .collect();
            if let Some(d) = hot.choose(&mut self.rng) {
                return d.clone();
            }
        }
        let mut dirs: Vec<String> = self
            .model
            .tree
            .iter()
            .filter(|(k, n)| matches!(n, Node::Dir { .. }) && !self.is_frozen(k))
            .map(|(k, _)| k.clone())
            .collect();
        dirs.push(String::new());
        dirs.choose(&mut self.rng).cloned().expect("a directory")
    }

    fn pick(&mut self, f: impl Fn(&Model, &str, &Node) -> bool) -> Option<String> {
        let v: Vec<&String> = self
            .model
            .tree
            .iter()
            .filter(|(k, n)| !self.is_frozen(k) && f(&self.model, k, n))
            .map(|(k, _)| k)
            .collect();
        v.choose(&mut self.rng).map(|s| (*s).clone())
    }

    /// A file for a data operation: half the time one with data, else any.
    fn pick_file(&mut self) -> Option<String> {
        if self.rng.gen_bool(0.5) {
            let big = self.pick(|m, _, n| match n {
                Node::File { fid } => m.files[fid].data.len() > 8192,
                _ => false,
            });
            if big.is_some() {
                return big;
            }
        }
        self.pick(|_, _, n| matches!(n, Node::File { .. }))
    }

    pub(super) fn rand_write(&mut self, path: String) -> Op {
        let size = self.model.size(&path);
        let (off, len) = match self.rng.gen_range(0..10) {
            0..=3 => {
                let max = [100, 20_000, 200_000][self.rng.gen_range(0..3)];
                (self.rng.gen_range(0..=size), self.rng.gen_range(1..=max))
            }
            4 | 5 => (size, self.rng.gen_range(1..50_000)),
            6 | 7 => (
                size + self.rng.gen_range(1..300_000),
                self.rng.gen_range(1..30_000),
            ),
            _ => (
                self.rng.gen_range(0..=size / BS + 2) * BS,
                self.rng.gen_range(1..=16) * BS as usize,
            ),
        };
        let off = off.min(MAX_SIZE - 1);
        let len = len.min((MAX_SIZE - off) as usize);
        let data = self.rand_data(len);
        Op::Write { path, off, data }
    }

    pub(super) fn rand_falloc(&mut self, path: String) -> Op {
        let size = self.model.size(&path);
        let aligned = self.rng.gen_bool(0.5);
        let mut off = self.rng.gen_range(0..=size + 64 * 1024);
        let mut len = self.rng.gen_range(1..=(size / 2).max(8192) + 8192);
        if aligned {
            off -= off % BS;
            len = len.div_ceil(BS) * BS;
        }
        let off = off.min(MAX_SIZE - BS);
        let len = len.min(MAX_SIZE - off);
        let (punch, keep_size) = match self.rng.gen_range(0..4) {
            0 | 1 => (true, true),
            2 => (false, true),
            _ => (false, false),
        };
        Op::Falloc {
            path,
            off,
            len,
            keep_size,
            punch,
        }
    }

    fn rand_target(&mut self) -> Vec<u8> {
        let len = if self.rng.gen_bool(0.5) {
            self.rng.gen_range(1..60)
        } else {
            let max = if self.rng.gen_bool(0.8) { 300 } else { 4095 };
            self.rng.gen_range(60..=max)
        };
        rand_chars(&mut self.rng, len).into_bytes()
    }

    fn rand_rename(&mut self) -> Option<Op> {
        let from = self.pick(|_, k, _| !k.is_empty())?;
        if !self.movable(&from) {
            return None;
        }
        let src_dir = self.model.is_dir(&from);
        let dir = if self.rng.gen_bool(0.4) {
            parent_of(&from).to_string()
        } else {
            self.pick_dir()
        };
        if self.is_frozen(&dir) || (src_dir && within(&dir, &from)) {
            return None;
        }
        if self.rng.gen_bool(0.4) {
            // Over an existing, compatible entry.
            let m = &self.model;
            let targets: Vec<String> = m
                .children(&dir)
                .filter(|(k, n)| {
                    **k != from
                        && match n {
                            Node::Dir { .. } => src_dir && m.is_empty_dir(k),
                            _ => !src_dir,
                        }
                })
                .map(|(k, _)| k.clone())
                .filter(|k| self.movable(k))
                .collect();
            if let Some(to) = targets.choose(&mut self.rng) {
                return Some(Op::Rename {
                    from,
                    to: to.clone(),
                });
            }
        }
        let to = format!("{dir}/{}", self.rand_name(&dir));
        Some(Op::Rename { from, to })
    }

    /// A random operation the model says must succeed (None: no candidate this time).
    fn rand_op(&mut self) -> Option<Op> {
        if self.data_bytes() > 120 << 20 && self.rng.gen_bool(0.5) {
            // Long runs: keep the 256 MiB image from filling up (holes count here).
            let path = self.pick(|m, _, n| match n {
                Node::File { fid } => m.files[fid].data.len() > 1 << 20,
                _ => false,
            })?;
            let size = self.rng.gen_range(0..=self.model.size(&path) / 4);
            return Some(Op::Truncate { path, size });
        }
        let perms = [0o644u16, 0o600, 0o755, 0o000, 0o4755, 0o2750, 0o1777, 0o444];
        let perm = perms[self.rng.gen_range(0..perms.len())];
        Some(match self.rng.gen_range(0..100) {
            0..=21 => {
                let dir = self.pick_dir();
                let path = format!("{dir}/{}", self.rand_name(&dir));
                let len = match self.rng.gen_range(0..20) {
                    0..=9 => self.rng.gen_range(0..=60),
                    10..=16 => self.rng.gen_range(61..16_384),
                    _ => self.rng.gen_range(16_384..300_000),
                };
                let data = self.rand_data(len);
                Op::Create { path, perm, data }
            }
            22..=25 => {
                let dir = self.pick_dir();
                let path = format!("{dir}/{}", self.rand_name(&dir));
                Op::Mkdir {
                    path,
                    perm: perm | 0o700,
                }
            }
            26..=31 => {
                let dir = self.pick_dir();
                let path = format!("{dir}/{}", self.rand_name(&dir));
                let target = self.rand_target();
                Op::Symlink { path, target }
            }
            32..=35 => {
                let from = self.pick(|m, _, n| match n {
                    Node::File { fid } => m.files[fid].links < 8,
                    _ => false,
                })?;
                let dir = self.pick_dir();
                let to = format!("{dir}/{}", self.rand_name(&dir));
                Op::Link { from, to }
            }
            36..=49 => {
                let path = self.pick(|_, _, n| !matches!(n, Node::Dir { .. }))?;
                if !self.movable(&path) {
                    return None;
                }
                Op::Unlink { path }
            }
            50..=52 => {
                let path =
                    self.pick(|m, k, n| matches!(n, Node::Dir { .. }) && m.is_empty_dir(k))?;
                if !self.movable(&path) {
                    return None;
                }
                Op::Rmdir { path }
            }
            53..=66 => self.rand_rename()?,
            67..=80 => {
                let path = self.pick_file()?;
                self.rand_write(path)
            }
            81..=86 => {
                let path = self.pick_file()?;
                let size = self.model.size(&path);
                let size = match self.rng.gen_range(0..5) {
                    0 | 1 => self.rng.gen_range(0..=size),
                    2 => self.rng.gen_range(0..=size / BS) * BS,
                    _ => (size + self.rng.gen_range(1..600_000)).min(MAX_SIZE),
                };
                Op::Truncate { path, size }
            }
            87..=95 => {
                let path = self.pick_file()?;
                self.rand_falloc(path)
            }
            96 => {
                let path = self.pick_file();
                Op::Sync {
                    path: path.filter(|_| self.rng.gen_bool(0.8)),
                }
            }
            97 => {
                let dir = self.pick_dir();
                let path = format!("{dir}/{}", self.rand_name(&dir));
                let (kind, rdev) = match self.rng.gen_range(0..3) {
                    0 => (FileType::Fifo, 0),
                    1 => (FileType::CharDevice, self.rng.gen_range(1..0xffff)),
                    _ => (FileType::BlockDevice, self.rng.gen_range(1..0xffff)),
                };
                Op::Mknod {
                    path,
                    kind,
                    rdev,
                    perm,
                }
            }
            _ => {
                let path = self.pick(|_, _, n| !matches!(n, Node::Symlink { .. }))?;
                let perm = if self.model.is_dir(&path) {
                    perm | 0o700
                } else {
                    perm
                };
                Op::Chmod { path, perm }
            }
        })
    }

    /// `n` random operations on the mounted side, checking every `check_every` on lanefs
    /// (every 3 x that on the kernel).
    pub(super) fn random_ops(&mut self, n: usize, label: &str) {
        let lanefs = matches!(self.side, Side::Lanefs(_));
        let every = if lanefs {
            self.check_every
        } else {
            3 * self.check_every
        };
        let mut done = 0;
        while done < n {
            let Some(op) = self.rand_op() else {
                continue;
            };
            self.op(op);
            done += 1;
            if lanefs {
                self.random_ops += 1;
            }
            self.since_check += 1;
            if self.since_check >= every {
                self.check(&format!("{label}: after {done} random operations"));
            }
        }
        self.check(&format!("{label}: end of {n} random operations"));
    }
}

/// `len` bytes of name or target characters; some are UTF-8 sequences (bytes >= 0x80 hash
/// differently with signed and unsigned chars).
pub(super) fn rand_chars(rng: &mut StdRng, len: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_-.ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const WIDE: &[char] = &['é', 'ß', 'Ω', 'ж', '日', '本', '€', '\u{1F600}'];
    let mut s = String::with_capacity(len);
    while s.len() < len {
        let c = WIDE[rng.gen_range(0..WIDE.len())];
        if rng.gen_bool(0.1) && s.len() + c.len_utf8() <= len {
            s.push(c);
        } else {
            s.push(CHARS[rng.gen_range(0..CHARS.len())] as char);
        }
    }
    s
}
