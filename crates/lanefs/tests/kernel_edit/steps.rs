//! The building blocks of the scripted steps: the extent tree shape `debugfs` reports, files
//! and directories made and removed in bulk, an htree's shape and its growth (the root index
//! filled, a second index level added, an index node split, a linear directory indexed),
//! fragmented files and their edits (appends, overwrites, punches, writes into holes and into
//! unwritten extents), and fallocate calls through one `xfs_io` run on the kernel's mount.

use super::*;

/// Leaf extents and depth of a file's extent tree, from `debugfs -R "ex PATH"`.
fn extent_shape(img: &Path, path: &str) -> (usize, u32) {
    let Ok(out) = run(Command::new("debugfs")
        .arg("-R")
        .arg(format!("ex {path}"))
        .arg(img))
    else {
        return (0, 0);
    };
    let (mut leaves, mut depth) = (0, 0);
    for line in out.lines().skip(1) {
        // " 1/ 2   1/  5     0 -   679  33849   680": level/depth first.
        let Some((lvl, rest)) = line.trim().split_once('/') else {
            continue;
        };
        let Some(d) = rest.split_whitespace().next() else {
            continue;
        };
        let (Ok(l), Ok(d)) = (lvl.trim().parse::<u32>(), d.parse::<u32>()) else {
            continue;
        };
        depth = d;
        if l == d {
            leaves += 1;
        }
    }
    (leaves, depth)
}

/// htree root limit with 4 KiB blocks and metadata_csum.
const ROOT_LIMIT: usize = 507;

impl World {
    /// Unmount, run `f` on the image, mount the same side again (no checks).
    fn inspect<T>(&mut self, f: impl FnOnce(&Path) -> T) -> T {
        let was = self.side_name();
        if let Err(e) = self.unmount() {
            self.fail(e);
        }
        let out = f(&self.img);
        match was {
            "kernel" => self.mount_kernel(),
            "lanefs" => self.mount_lanefs(),
            _ => {}
        }
        out
    }

    pub(super) fn create(&mut self, path: String, len: usize) {
        let data = self.rand_data(len);
        self.op(Op::Create {
            path,
            perm: 0o644,
            data,
        });
    }

    pub(super) fn mkdir(&mut self, path: &str) {
        self.op(Op::Mkdir {
            path: path.into(),
            perm: 0o755,
        });
    }

    /// A new name of 200 to 255 bytes in `dir`.
    fn long_name(&mut self, dir: &str) -> String {
        loop {
            let len = self.rng.gen_range(200..=255);
            let p = format!("{dir}/{}", rand_chars(&mut self.rng, len));
            if self.model.get(&p).is_none() {
                return p;
            }
        }
    }

    pub(super) fn long_creates(&mut self, dir: &str, n: usize) {
        for _ in 0..n {
            let p = self.long_name(dir);
            let len = if self.rng.gen_bool(0.1) { 5 } else { 0 };
            self.create(p, len);
        }
    }

    pub(super) fn names_in(&self, dir: &str) -> Vec<String> {
        self.model.children(dir).map(|(k, _)| k.clone()).collect()
    }

    /// Unlink `n` random non-directories of `dir`.
    pub(super) fn unlink_some(&mut self, dir: &str, n: usize) {
        let mut v: Vec<String> = self
            .model
            .children(dir)
            .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        v.shuffle(&mut self.rng);
        for path in v.into_iter().take(n) {
            self.op(Op::Unlink { path });
        }
    }

    pub(super) fn htree(&mut self, label: &str, dir: &str) -> (u32, usize) {
        let d = dir.to_string();
        self.check_with(label, |img| htree_info(img, &d))
            .unwrap_or((0, 1))
    }

    pub(super) fn shape(&mut self, label: &str, path: &str) -> (usize, u32) {
        let p = path.to_string();
        let s = self.check_with(label, |img| extent_shape(img, &p));
        self.note(&format!(
            "{label}: {path} has {} leaf extents, depth {}",
            s.0, s.1
        ));
        s
    }

    /// The htree shape of `dir`: after a full check on lanefs, a plain unmount on the
    /// kernel (its own growth needs no check at every step).
    /// (levels, root count) of `dir`'s index; with `full`, behind a full check.
    fn dx_info(&mut self, label: &str, dir: &str, full: bool) -> Option<(u32, usize)> {
        let d = dir.to_string();
        let f = move |img: &Path| htree_info(img, &d);
        if full {
            self.check_with(label, f)
        } else {
            self.inspect(f)
        }
    }

    /// As `dx_info`; a full check whenever lanefs is the side that edits.
    fn dx_shape(&mut self, label: &str, dir: &str) -> (u32, usize) {
        let full = matches!(self.side, Side::Lanefs(_));
        self.dx_info(label, dir, full).unwrap_or((0, 1))
    }

    /// Long names into `dir` until its root index has at most `room` free slots (and
    /// still one level): a leaf split adds at most one root entry per insert, so each
    /// batch is sized to stay below the limit.
    pub(super) fn fill_root(&mut self, dir: &str, room: usize) {
        let mut n = 0;
        loop {
            // Growing its own index is every side's everyday path: no check at each step.
            let (levels, count) = self.dx_info("", dir, false).unwrap_or((0, 1));
            assert_eq!(
                levels, 0,
                "{dir} got a second index level while filling its root"
            );
            let free = ROOT_LIMIT - count;
            if free <= room {
                self.check(&format!("{} filled {dir}'s root index", self.side_name()));
                self.note(&format!(
                    "{} filled {dir}'s root index to {count}/{ROOT_LIMIT} ({n} names)",
                    self.side_name()
                ));
                return;
            }
            let batch = if free > 100 {
                free * 3
            } else {
                free - room / 2
            };
            self.long_creates(dir, batch);
            n += batch;
            if n > BIG_LIMIT {
                self.fail(format!("{dir}'s root index stays at {count} entries"));
            }
        }
    }

    /// Long names into `dir` (root nearly full) in small batches until it has a second
    /// index level: the root's entries move to a new index node.
    pub(super) fn add_level(&mut self, dir: &str) {
        let mut n = 0;
        loop {
            let label = format!("{} grows {dir} to two levels", self.side_name());
            let (levels, count) = self.dx_shape(&label, dir);
            if levels > 0 {
                self.note(&format!(
                    "{} added {dir}'s second index level ({n} names)",
                    self.side_name()
                ));
                return;
            }
            let batch = ((ROOT_LIMIT - count) * 4).clamp(4, 100);
            self.long_creates(dir, batch);
            n += batch;
            if n > BIG_LIMIT {
                self.fail(format!("{dir} never gets a second index level"));
            }
        }
    }

    /// Long names into two-level `dir` until its (first) index node splits in two.
    pub(super) fn split_node(&mut self, dir: &str) {
        let mut n = 0;
        loop {
            let label = format!("{} splits {dir}'s index node", self.side_name());
            let (levels, count) = self.dx_shape(&label, dir);
            assert_eq!(levels, 1, "{dir} is not a two-level htree");
            if count >= 2 {
                self.note(&format!(
                    "{} split {dir}'s index node ({n} names)",
                    self.side_name()
                ));
                return;
            }
            self.long_creates(dir, 10);
            n += 10;
            if n > BIG_LIMIT {
                self.fail(format!("{dir}'s index node never splits"));
            }
        }
    }

    /// Names into linear `dir` until it becomes an htree.
    pub(super) fn make_indexed(&mut self, dir: &str) {
        let mut n = 0;
        loop {
            for _ in 0..5 {
                let p = format!("{dir}/{}", self.rand_name(dir));
                self.create(p, 3);
            }
            n += 5;
            let label = format!("{} fills {dir}", self.side_name());
            let full = matches!(self.side, Side::Lanefs(_));
            if self.dx_info(&label, dir, full).is_some() {
                self.note(&format!("{} indexed {dir} ({n} names)", self.side_name()));
                return;
            }
        }
    }

    /// Size in blocks of a model file.
    pub(super) fn blocks(&self, path: &str) -> u64 {
        self.model.size(path).div_ceil(BS)
    }

    /// Write every other block from block `from` for `n` blocks: `n` extents.
    pub(super) fn alternate_blocks(&mut self, path: &str, from: u64, n: u64) {
        for k in 0..n {
            let data = self.rand_data(BS as usize);
            self.op(Op::Write {
                path: path.into(),
                off: (from + 2 * k) * BS,
                data,
            });
        }
    }

    /// Appends, overwrites, punches and writes into holes of a fragmented file.
    pub(super) fn edit_frag(&mut self, path: &str, n: usize) {
        for i in 0..n {
            let blocks = self.blocks(path).max(1);
            let op = match i % 5 {
                0 => {
                    // Append whole blocks (contiguous with the last extent, or not).
                    let gap = self.rng.gen_range(0..2);
                    let k = self.rng.gen_range(1..=8);
                    let data = self.rand_data((k * BS) as usize);
                    Op::Write {
                        path: path.into(),
                        off: (blocks + gap) * BS,
                        data,
                    }
                }
                1 => {
                    let off = self.rng.gen_range(0..blocks * BS);
                    let len = self.rng.gen_range(1..=3 * BS as usize);
                    let data = self.rand_data(len);
                    Op::Write {
                        path: path.into(),
                        off,
                        data,
                    }
                }
                2 => {
                    // Punch: part of a block, whole blocks, or a run of many extents.
                    let (off, len) = match self.rng.gen_range(0..3) {
                        0 => (
                            self.rng.gen_range(0..blocks * BS),
                            self.rng.gen_range(1..BS),
                        ),
                        1 => (
                            self.rng.gen_range(0..blocks) * BS,
                            self.rng.gen_range(1..=4) * BS,
                        ),
                        _ => (
                            self.rng.gen_range(0..blocks) * BS + self.rng.gen_range(0..BS),
                            self.rng.gen_range(1..=blocks / 10 + 1) * BS,
                        ),
                    };
                    Op::Falloc {
                        path: path.into(),
                        off,
                        len,
                        keep_size: true,
                        punch: true,
                    }
                }
                3 => {
                    // Into a hole (odd blocks), whole or in part.
                    let b = (self.rng.gen_range(0..blocks) | 1).min(blocks);
                    let inb = if self.rng.gen_bool(0.5) {
                        0
                    } else {
                        self.rng.gen_range(0..BS)
                    };
                    let len = self.rng.gen_range(1..=(BS - inb) as usize);
                    let data = self.rand_data(len);
                    Op::Write {
                        path: path.into(),
                        off: b * BS + inb,
                        data,
                    }
                }
                _ => {
                    let off = self.rng.gen_range(0..blocks) * BS;
                    let len = self.rng.gen_range(1..=16) * BS;
                    Op::Falloc {
                        path: path.into(),
                        off,
                        len,
                        keep_size: self.rng.gen_bool(0.5),
                        punch: false,
                    }
                }
            };
            self.op(op);
        }
    }

    /// Writes of a few bytes into the unwritten extents of /ext/unw (3 unwritten blocks
    /// then one hole, repeated): each splits its extent in two or three.
    pub(super) fn write_unwritten(&mut self, path: &str, groups: u64, n: usize) {
        for i in 0..n {
            let g = self.rng.gen_range(0..groups);
            let (off, len) = if i % 7 == 6 {
                // Across several extents and the holes between them.
                (
                    g * 4 * BS + self.rng.gen_range(0..4 * BS),
                    self.rng.gen_range(BS as usize..12 * BS as usize),
                )
            } else {
                let inb = self.rng.gen_range(0..BS);
                (
                    (g * 4 + self.rng.gen_range(0..3)) * BS + inb,
                    self.rng.gen_range(1..=(BS - inb) as usize),
                )
            };
            let data = self.rand_data(len);
            self.op(Op::Write {
                path: path.into(),
                off,
                data,
            });
        }
    }

    /// fallocate through one `xfs_io` run on the kernel mount, mirrored in the model.
    pub(super) fn kernel_xfs_io(&mut self, path: &str, ops: Vec<Op>) {
        let Side::Kernel(km) = &self.side else {
            panic!("kernel_xfs_io without the kernel")
        };
        let file = km.dir.join(path.trim_start_matches('/'));
        let cmds: Vec<String> = ops
            .iter()
            .map(|op| match op {
                Op::Falloc {
                    off,
                    len,
                    punch: true,
                    ..
                } => format!("fpunch {off} {len}"),
                Op::Falloc {
                    off,
                    len,
                    keep_size,
                    ..
                } => format!("falloc{} {off} {len}", if *keep_size { " -k" } else { "" }),
                _ => panic!("not an fallocate: {op:?}"),
            })
            .collect();
        self.log.push(format!(
            "kernel xfs_io {path}: {} fallocate calls",
            cmds.len()
        ));
        if let Err(e) = xfs_io(&file, &cmds) {
            self.fail(e);
        }
        self.kernel_ops += ops.len();
        for op in &ops {
            self.model.apply(op);
        }
    }
}
