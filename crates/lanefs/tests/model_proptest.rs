//! Goal: `Fs` agrees with a plain in-memory model on every result and every error of random
//! operation sequences, keeps what it agreed to across unmount and remount, and leaves images
//! that `e2fsck -fn` calls clean.
//!
//! Method: proptest generates operations whose operands are indexes into the model's current
//! state (so shrinking keeps them meaningful). Each operation runs on the engine and on the
//! model; results are compared field by field and errors by variant. The model follows Linux
//! semantics (error precedence of `do_renameat2`, `vfs_link`, ...; sizes capped at ext4's
//! s_maxbytes). After every remount and at the end the whole tree is compared, together with
//! two exact counters: free inodes plus live inodes, and free blocks plus the blocks every
//! inode reports, must not change. A second property forces big htree directories (leaf and
//! index splits, a two-level index) and files with thousands of extents.
//!
//! Block sizes: the random sequences run on `mkfs.ext4 -b` 1, 2, 4 and 64 KiB images (one
//! test each), the big property on 1, 2 and 4 KiB (64 KiB blocks cannot force a two-level
//! index); the model's pages, block counts, symlink limit and largest size follow the
//! block size.
//!
//! Cases: `PROPTEST_CASES` (default 64) for the random sequences, split evenly over the
//! four block sizes; `LANEFS_BIG_CASES` (default 3) for the big-directory and many-extent
//! property, split over its three.

mod common;

use lanefs::{
    Attr, DirEntry, Error, FallocMode, FileType, Fs, Ino, MountOptions, Owner, SetAttr, Timespec,
    ROOT_INO,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::mem::discriminant;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

thread_local! {
    /// The block size of the image this test thread runs on (each test sets it first).
    static BLOCK_SIZE: std::cell::Cell<u64> = const { std::cell::Cell::new(4096) };
}

/// The block size of this thread's test.
fn bs() -> u64 {
    BLOCK_SIZE.with(|b| b.get())
}

/// 512-byte sectors per block (the unit of `Attr::blocks`).
fn sectors() -> u64 {
    bs() / 512
}

/// ext4's largest file size: 2^32 - 1 blocks (the last logical block number stays unused
/// so that an extent's end fits in 32 bits).
fn max_size() -> u64 {
    ((1 << 32) - 1) * bs()
}

/// The image: 64 MiB, except 256 MiB for 64 KiB blocks (room for mke2fs's journal of
/// 1024 blocks).
fn img_size() -> u64 {
    if bs() > 4096 {
        256 << 20
    } else {
        64 << 20
    }
}

/// Data blocks the model lets files hold at once (24 MiB): keeps the image far from full,
/// so no operation can meet ENOSPC (which the model does not predict).
fn budget_blocks() -> u64 {
    (24 << 20) / bs()
}

/// The longest symlink target ext4 stores: a block less its NUL.
fn symlink_max() -> usize {
    bs() as usize - 1
}

/// Extent entries per tree block beyond which a file needs another tree block, with slack
/// (300 for 4 KiB blocks, as before).
fn per_tree_block() -> u64 {
    (bs() - 12) / 12 - 40
}

const OWNER: Owner = Owner {
    uid: 1000,
    gid: 100,
    umask: 0,
};
/// Files up to this size are compared whole; bigger (sparse) ones around their data.
const WHOLE_COMPARE: u64 = 16 << 20;

/// Names: a small alphabet so that creates collide, the longest legal name, one too long,
/// and (for lookup only) "." and "..".
fn name_of(n: u8) -> Vec<u8> {
    match n {
        0..=5 => vec![b'a' + n],
        6 => vec![b'm'; 255],
        7 => vec![b'z'; 256],
        8 => b".".to_vec(),
        _ => b"..".to_vec(),
    }
}

/// File contents: a function of a seed and the byte's offset, never zero (so stale zeros
/// and stale data are both caught).
fn pattern(seed: u8, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (off + i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((x >> 56) as u8 ^ seed) | 1
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The model.

type Id = usize;
const ROOT: Id = 0;

/// A regular file: size, contents by block (absent blocks read as zeros) and the logical
/// blocks the engine must have allocated (written or unwritten).
#[derive(Debug, Default, Clone)]
struct FileData {
    size: u64,
    pages: BTreeMap<u64, Vec<u8>>,
    alloc: BTreeSet<u64>,
}

impl FileData {
    fn read(&self, off: u64, len: usize) -> Vec<u8> {
        if off >= self.size || len == 0 {
            return Vec::new();
        }
        let n = (self.size - off).min(len as u64);
        let mut out = vec![0u8; n as usize];
        for (&b, p) in self.pages.range(off / bs()..=(off + n - 1) / bs()) {
            let s = (b * bs()).max(off);
            let e = (b * bs() + bs()).min(off + n);
            out[(s - off) as usize..(e - off) as usize]
                .copy_from_slice(&p[(s - b * bs()) as usize..(e - b * bs()) as usize]);
        }
        out
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        for b in off / bs()..=(end - 1) / bs() {
            let p = self
                .pages
                .entry(b)
                .or_insert_with(|| vec![0; bs() as usize]);
            let s = (b * bs()).max(off);
            let e = (b * bs() + bs()).min(end);
            p[(s - b * bs()) as usize..(e - b * bs()) as usize]
                .copy_from_slice(&data[(s - off) as usize..(e - off) as usize]);
            self.alloc.insert(b);
        }
        self.size = self.size.max(end);
    }

    /// Zero the bytes `[from, to)`.
    fn zero(&mut self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        for (&b, p) in self.pages.range_mut(from / bs()..=(to - 1) / bs()) {
            let s = (b * bs()).max(from);
            let e = (b * bs() + bs()).min(to);
            p[(s - b * bs()) as usize..(e - b * bs()) as usize].fill(0);
        }
    }

    fn truncate(&mut self, size: u64) {
        if size < self.size {
            let keep = size.div_ceil(bs());
            self.pages.split_off(&keep);
            self.alloc.split_off(&keep);
            self.zero(size, keep * bs());
        }
        self.size = size;
    }

    /// New blocks an allocation of logical blocks `[a, b)` would add.
    fn new_blocks(&self, a: u64, b: u64) -> u64 {
        (b - a) - self.alloc.range(a..b).count() as u64
    }

    /// Linux ext4 punch: nothing at or past EOF, the range clipped to the end of the last
    /// block, partial blocks zeroed, whole blocks deallocated.
    fn punch(&mut self, off: u64, end: u64) {
        if off >= self.size {
            return;
        }
        let end = end.min(self.size.div_ceil(bs()) * bs());
        self.zero(off, end);
        let (a, b) = (off.div_ceil(bs()), end / bs());
        if a < b {
            let gone: Vec<u64> = self.alloc.range(a..b).copied().collect();
            for k in gone {
                self.alloc.remove(&k);
                self.pages.remove(&k);
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Body {
    File(FileData),
    Dir {
        entries: BTreeMap<Vec<u8>, Id>,
        parent: Id,
    },
    Symlink(Vec<u8>),
    Special {
        kind: FileType,
        rdev: u32,
    },
}

#[derive(Debug, Clone)]
struct Node {
    ino: Ino,
    perm: u16,
    nlink: u32,
    /// Open references held by the test (create with keep_open, open).
    open: u32,
    /// atime and mtime last set explicitly, while nothing has changed them since.
    times: Option<(Timespec, Timespec)>,
    /// Group: the creator's, or a set-group-ID parent directory's (inode_init_owner).
    gid: u32,
    body: Body,
}

impl Node {
    fn kind(&self) -> FileType {
        match &self.body {
            Body::File(_) => FileType::Regular,
            Body::Dir { .. } => FileType::Directory,
            Body::Symlink(_) => FileType::Symlink,
            Body::Special { kind, .. } => *kind,
        }
    }
    fn is_dir(&self) -> bool {
        matches!(self.body, Body::Dir { .. })
    }
}

#[derive(Default)]
struct Model {
    nodes: BTreeMap<Id, Node>,
    inos: HashMap<Ino, Id>,
    next: Id,
    /// lost+found: part of the tree, never picked as an operand.
    lost_found: Id,
    /// Open references, one element per reference.
    handles: Vec<Id>,
}

impl Model {
    fn node(&self, id: Id) -> &Node {
        &self.nodes[&id]
    }
    fn node_mut(&mut self, id: Id) -> &mut Node {
        self.nodes.get_mut(&id).expect("model node")
    }
    fn ino(&self, id: Id) -> Ino {
        self.node(id).ino
    }
    fn is_dir(&self, id: Id) -> bool {
        self.node(id).is_dir()
    }
    fn entries(&self, d: Id) -> &BTreeMap<Vec<u8>, Id> {
        match &self.node(d).body {
            Body::Dir { entries, .. } => entries,
            _ => panic!("model node {d} is not a directory"),
        }
    }
    fn entries_mut(&mut self, d: Id) -> &mut BTreeMap<Vec<u8>, Id> {
        match &mut self.node_mut(d).body {
            Body::Dir { entries, .. } => entries,
            _ => panic!("model node {d} is not a directory"),
        }
    }
    fn parent(&self, d: Id) -> Id {
        match &self.node(d).body {
            Body::Dir { parent, .. } => *parent,
            _ => panic!("model node {d} is not a directory"),
        }
    }
    fn file(&self, id: Id) -> &FileData {
        match &self.node(id).body {
            Body::File(f) => f,
            _ => panic!("model node {id} is not a file"),
        }
    }
    fn file_mut(&mut self, id: Id) -> &mut FileData {
        match &mut self.node_mut(id).body {
            Body::File(f) => f,
            _ => panic!("model node {id} is not a file"),
        }
    }
    fn lookup(&self, d: Id, name: &[u8]) -> Option<Id> {
        self.entries(d).get(name).copied()
    }
    fn touch(&mut self, id: Id) {
        self.node_mut(id).times = None;
    }
    /// Whether `a` is `d` or one of its ancestors.
    fn is_ancestor_or_self(&self, a: Id, mut d: Id) -> bool {
        for _ in 0..10_000 {
            if d == a {
                return true;
            }
            if d == ROOT {
                return false;
            }
            d = self.parent(d);
        }
        panic!("model directory loop");
    }
    fn add(&mut self, ino: Ino, perm: u16, nlink: u32, body: Body) -> Id {
        assert!(
            !self.inos.contains_key(&ino),
            "engine gave inode {ino} to a new file while it is still in use"
        );
        let id = self.next;
        self.next += 1;
        self.nodes.insert(
            id,
            Node {
                ino,
                perm,
                nlink,
                open: 0,
                times: None,
                gid: OWNER.gid,
                body,
            },
        );
        self.inos.insert(ino, id);
        id
    }
    /// Free `id` if nothing references it any more.
    fn maybe_free(&mut self, id: Id) {
        let n = self.node(id);
        if n.nlink == 0 && n.open == 0 {
            let ino = n.ino;
            self.nodes.remove(&id);
            self.inos.remove(&ino);
        }
    }
    fn data_blocks(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| match &n.body {
                Body::File(f) => f.alloc.len() as u64,
                _ => 0,
            })
            .sum()
    }
    fn ids(&self, keep: impl Fn(&Node) -> bool) -> Vec<Id> {
        self.nodes
            .iter()
            .filter(|(&id, n)| id != self.lost_found && keep(n))
            .map(|(&id, _)| id)
            .collect()
    }
    /// Every entry (directory, name, child) except lost+found.
    fn all_entries(&self) -> Vec<(Id, Vec<u8>, Id)> {
        let mut out = Vec::new();
        for (&d, n) in &self.nodes {
            if let Body::Dir { entries, .. } = &n.body {
                for (name, &c) in entries {
                    if c != self.lost_found {
                        out.push((d, name.clone(), c));
                    }
                }
            }
        }
        out
    }
    /// Errors of any create-like operation, in Linux order.
    fn can_add(&self, dir: Id, name: &[u8]) -> Result<(), Error> {
        if !self.is_dir(dir) {
            return Err(Error::NotDir);
        }
        if name.len() > 255 {
            return Err(Error::NameTooLong);
        }
        if name == b"." || name == b".." || self.lookup(dir, name).is_some() {
            return Err(Error::Exists);
        }
        Ok(())
    }
}

fn pick(v: &[Id], s: u16) -> Option<Id> {
    (!v.is_empty()).then(|| v[s as usize % v.len()])
}

// ---------------------------------------------------------------------------------------
// Operations.

#[derive(Debug, Clone)]
enum Op {
    Create {
        dir: u16,
        name: u8,
        perm: u16,
        keep_open: bool,
    },
    Mkdir {
        dir: u16,
        name: u8,
        perm: u16,
    },
    Mknod {
        dir: u16,
        name: u8,
        which: u8,
        perm: u16,
    },
    Symlink {
        dir: u16,
        name: u8,
        len: u16,
        seed: u8,
    },
    Link {
        src: u16,
        dir: u16,
        name: u8,
    },
    Unlink {
        dir: u16,
        name: u8,
    },
    Rmdir {
        dir: u16,
        name: u8,
    },
    RmdirEmpty {
        dir: u16,
    },
    RemoveEntry {
        entry: u16,
        as_dir: bool,
    },
    Rename {
        dir: u16,
        name: u8,
        newdir: u16,
        newname: u8,
    },
    RenameEntry {
        entry: u16,
        newdir: u16,
        newname: u8,
    },
    /// `direct`: `Fs::write_direct` at the offset rounded down to a block.
    Write {
        file: u16,
        any: bool,
        off: u64,
        len: u32,
        seed: u8,
        direct: bool,
    },
    Read {
        file: u16,
        any: bool,
        off: u64,
        len: u32,
    },
    Truncate {
        file: u16,
        any: bool,
        size: u64,
    },
    Fallocate {
        file: u16,
        any: bool,
        off: u64,
        len: u64,
        mode: u8,
    },
    SetPerm {
        node: u16,
        perm: u16,
    },
    SetTimes {
        node: u16,
        atime: Timespec,
        mtime: Timespec,
    },
    Readdir {
        dir: u16,
        chunk: u8,
    },
    /// Read a first chunk, change the directory (adds and one removal), read on.
    ReaddirChanging {
        dir: u16,
        chunk: u8,
        adds: u8,
        victim: u16,
    },
    /// Many creates in one directory (long names optional): htree conversion and splits.
    Bulk {
        dir: u16,
        count: u16,
        long: bool,
    },
    Lookup {
        dir: u16,
        name: u8,
    },
    Getattr {
        node: u16,
    },
    Readlink {
        node: u16,
    },
    Open {
        file: u16,
    },
    Release {
        handle: u16,
    },
    Fsync {
        file: u16,
    },
    Remount,
}

fn name_s() -> impl Strategy<Value = u8> {
    prop_oneof![12 => 0u8..6, 1 => Just(6u8), 1 => Just(7u8)]
}

/// Offsets and sizes: small, medium, far and sparse, just below and at/past the limit.
fn off_s() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..65536,
        4 => 0u64..(4 << 20),
        1 => (0u64..(1 << 32) - 1, 0u64..bs()).prop_map(|(b, o)| b * bs() + o),
        1 => (0u64..3 * bs()).prop_map(|d| max_size() - d - 1),
        1 => (0u64..3 * bs()).prop_map(|d| max_size() + d),
    ]
}

fn len_s() -> impl Strategy<Value = u32> {
    prop_oneof![6 => 1u32..5000, 3 => 1u32..40_000, 1 => 1u32..300_000]
}

/// Symlink targets: fast (in the inode), slow (a block), and one byte too long.
fn target_len_s() -> impl Strategy<Value = u16> {
    prop_oneof![4 => 1u16..60, 3 => 60u16..300, 2 => 300u16..4096, 1 => Just(4096u16)]
}

/// fallocate lengths: rarely 0 (Invalid), small, up to about 150 blocks.
fn falloc_len_s() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 10 => 1u64..20_000, 10 => 1u64..600_000]
}

fn time_s() -> impl Strategy<Value = Timespec> {
    (-(1i64 << 31)..(3i64 << 32), 0u32..1_000_000_000)
        .prop_map(|(sec, nsec)| Timespec { sec, nsec })
}

fn op_s() -> impl Strategy<Value = Op> {
    let s = any::<u16>;
    let rare = || prop::bool::weighted(0.1);
    prop_oneof![
        8 => (s(), name_s(), 0u16..0o10000, any::<bool>())
            .prop_map(|(dir, name, perm, keep_open)| Op::Create { dir, name, perm, keep_open }),
        4 => (s(), name_s(), 0u16..0o10000)
            .prop_map(|(dir, name, perm)| Op::Mkdir { dir, name, perm }),
        1 => (s(), name_s(), 0u8..4, 0u16..0o10000)
            .prop_map(|(dir, name, which, perm)| Op::Mknod { dir, name, which, perm }),
        2 => (s(), name_s(), target_len_s(), any::<u8>())
            .prop_map(|(dir, name, len, seed)| Op::Symlink { dir, name, len, seed }),
        2 => (s(), s(), name_s()).prop_map(|(src, dir, name)| Op::Link { src, dir, name }),
        2 => (s(), name_s()).prop_map(|(dir, name)| Op::Unlink { dir, name }),
        1 => (s(), name_s()).prop_map(|(dir, name)| Op::Rmdir { dir, name }),
        1 => s().prop_map(|dir| Op::RmdirEmpty { dir }),
        3 => (s(), any::<bool>()).prop_map(|(entry, as_dir)| Op::RemoveEntry { entry, as_dir }),
        2 => (s(), name_s(), s(), name_s())
            .prop_map(|(dir, name, newdir, newname)| Op::Rename { dir, name, newdir, newname }),
        5 => (s(), s(), name_s())
            .prop_map(|(entry, newdir, newname)| Op::RenameEntry { entry, newdir, newname }),
        10 => (s(), rare(), off_s(), len_s(), any::<u8>(), any::<bool>()).prop_map(
            |(file, any, off, len, seed, direct)| Op::Write { file, any, off, len, seed, direct }
        ),
        6 => (s(), rare(), off_s(), len_s())
            .prop_map(|(file, any, off, len)| Op::Read { file, any, off, len }),
        3 => (s(), rare(), off_s()).prop_map(|(file, any, size)| Op::Truncate { file, any, size }),
        4 => (s(), rare(), off_s(), falloc_len_s(), 0u8..3)
            .prop_map(|(file, any, off, len, mode)| Op::Fallocate { file, any, off, len, mode }),
        1 => (s(), 0u16..0o10000).prop_map(|(node, perm)| Op::SetPerm { node, perm }),
        1 => (s(), time_s(), time_s())
            .prop_map(|(node, atime, mtime)| Op::SetTimes { node, atime, mtime }),
        2 => (s(), 1u8..8).prop_map(|(dir, chunk)| Op::Readdir { dir, chunk }),
        1 => (s(), 1u8..8, 0u8..40, s())
            .prop_map(|(dir, chunk, adds, victim)| {
                Op::ReaddirChanging { dir, chunk, adds, victim }
            }),
        1 => (s(), 20u16..400, any::<bool>())
            .prop_map(|(dir, count, long)| Op::Bulk { dir, count, long }),
        3 => (s(), 0u8..10).prop_map(|(dir, name)| Op::Lookup { dir, name }),
        2 => s().prop_map(|node| Op::Getattr { node }),
        1 => s().prop_map(|node| Op::Readlink { node }),
        2 => s().prop_map(|file| Op::Open { file }),
        2 => s().prop_map(|handle| Op::Release { handle }),
        1 => s().prop_map(|file| Op::Fsync { file }),
        1 => Just(Op::Remount),
    ]
}

// ---------------------------------------------------------------------------------------
// The runner: one image, the engine mounted on it, the model beside it.

thread_local! {
    /// Compared results per operation in this test's thread: [succeeded, failed alike].
    static STATS: std::cell::RefCell<BTreeMap<String, [u64; 2]>> =
        const { std::cell::RefCell::new(BTreeMap::new()) };
}

fn print_stats(test: &str) {
    let stats = STATS.with_borrow(|s| s.clone());
    let line: Vec<String> = stats
        .iter()
        .map(|(k, [ok, err])| format!("{k} {ok}/{err}"))
        .collect();
    println!("{test}: compared results (ok/error): {}", line.join(", "));
}

struct Runner {
    dir: tempfile::TempDir,
    img: PathBuf,
    fs: Option<Arc<Fs>>,
    m: Model,
    /// Free inodes plus live model inodes: constant.
    inodes_k: u64,
    /// Free blocks plus the blocks every model inode reports: constant.
    blocks_k: u64,
    step: usize,
    what: String,
}

impl Runner {
    fn new() -> Runner {
        let dir = tempfile::tempdir().expect("tempdir");
        let img = if bs() == 4096 {
            common::mkfs_image(dir.path(), "model.img", img_size())
        } else {
            let b = bs().to_string();
            common::mke2fs_image(
                dir.path(),
                "model.img",
                img_size(),
                &["-t", "ext4", "-b", &b],
            )
            .expect("mke2fs")
        };
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount a fresh image");
        let root = fs.getattr(ROOT_INO).expect("getattr /");
        let lf = fs
            .lookup(ROOT_INO, b"lost+found")
            .expect("lookup /lost+found");
        let mut m = Model::default();
        let body = Body::Dir {
            entries: BTreeMap::new(),
            parent: ROOT,
        };
        let root_id = m.add(root.ino, root.perm, root.nlink, body.clone());
        assert_eq!(root_id, ROOT);
        m.node_mut(ROOT).gid = root.gid;
        m.lost_found = m.add(lf.ino, lf.perm, lf.nlink, body);
        let lf_id = m.lost_found;
        m.node_mut(lf_id).gid = lf.gid;
        m.entries_mut(ROOT).insert(b"lost+found".to_vec(), lf_id);
        let st = fs.statfs().expect("statfs");
        let mut r = Runner {
            dir,
            img,
            fs: Some(fs),
            m,
            inodes_k: 0,
            blocks_k: 0,
            step: 0,
            what: "mount".into(),
        };
        r.inodes_k = st.free_inodes + 2;
        r.blocks_k = st.free_blocks + (root.blocks + lf.blocks) / sectors();
        r.verify_all();
        r
    }

    fn fs(&self) -> Arc<Fs> {
        self.fs.clone().expect("mounted")
    }

    fn ctx(&self) -> String {
        format!("step {}: {}", self.step, self.what)
    }

    /// Compare an engine result with the model's: both Ok, or errors of one variant.
    fn agree<T: std::fmt::Debug, U: std::fmt::Debug>(
        &self,
        got: &Result<T, Error>,
        want: &Result<U, Error>,
    ) -> bool {
        let op = self.what.split([' ', ':']).next().unwrap_or("").to_string();
        STATS.with_borrow_mut(|s| s.entry(op).or_default()[usize::from(got.is_err())] += 1);
        match (got, want) {
            (Ok(_), Ok(_)) => true,
            (Err(g), Err(w)) if discriminant(g) == discriminant(w) => false,
            (Ok(_), Err(w)) => panic!("{}: engine succeeded, model expects {w:?}", self.ctx()),
            (Err(g), Ok(w)) => panic!(
                "{}: engine failed with {g:?}, model expects Ok({w:?})",
                self.ctx()
            ),
            (Err(g), Err(w)) => panic!(
                "{}: engine failed with {g:?}, model expects {w:?}",
                self.ctx()
            ),
        }
    }

    fn check_attr(&self, id: Id, a: &Attr) {
        let n = self.m.node(id);
        let c = || {
            format!(
                "{}: attributes of model node {id} (inode {})",
                self.ctx(),
                n.ino
            )
        };
        assert_eq!(a.ino, n.ino, "{}", c());
        assert_eq!(a.kind, n.kind(), "{}", c());
        assert_eq!(a.perm, n.perm, "{}", c());
        assert_eq!(a.nlink, n.nlink, "{}", c());
        match &n.body {
            Body::File(f) => {
                assert_eq!(a.size, f.size, "{}: size", c());
                let data = f.alloc.len() as u64;
                let tree = a.blocks / sectors() - data.min(a.blocks / sectors());
                assert!(
                    a.blocks.is_multiple_of(sectors())
                        && a.blocks / sectors() >= data
                        && tree <= data / per_tree_block() + 2,
                    "{}: {} sectors for {data} data blocks",
                    c(),
                    a.blocks
                );
            }
            Body::Dir { .. } => {
                assert!(
                    a.size >= bs() && a.size.is_multiple_of(bs()),
                    "{}: directory size {}",
                    c(),
                    a.size
                );
                // Every block of a directory is allocated, plus extent tree blocks.
                let (blocks, data) = (a.blocks / sectors(), a.size / bs());
                assert!(
                    blocks >= data && blocks - data <= data / per_tree_block() + 2,
                    "{}: {blocks} blocks for a directory of {data}",
                    c()
                );
            }
            Body::Symlink(t) => {
                assert_eq!(a.size, t.len() as u64, "{}", c());
                assert_eq!(
                    a.blocks,
                    if t.len() < 60 { 0 } else { sectors() },
                    "{}",
                    c()
                );
            }
            Body::Special { kind, rdev } => {
                assert_eq!(a.size, 0, "{}", c());
                if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
                    assert_eq!(a.rdev, *rdev, "{}: rdev", c());
                }
            }
        }
        if let Some((at, mt)) = n.times {
            assert_eq!((a.atime, a.mtime), (at, mt), "{}: times", c());
        }
        if id != ROOT && id != self.m.lost_found {
            assert_eq!((a.uid, a.gid), (OWNER.uid, n.gid), "{}: owner", c());
        }
    }

    // --- namespace ---

    fn add_entry(&mut self, dir: Id, name: &[u8], a: &Attr, body: Body) -> Id {
        let is_dir = matches!(body, Body::Dir { .. });
        // A set-group-ID directory gives new inodes its group, and new directories the bit.
        let parent = self.m.node(dir);
        let sgid = parent.perm & 0o2000 != 0;
        let gid = if sgid { parent.gid } else { OWNER.gid };
        if is_dir && sgid {
            assert!(
                a.perm & 0o2000 != 0,
                "a new directory in a set-group-ID one keeps the bit"
            );
        }
        let id = self.m.add(a.ino, a.perm, if is_dir { 2 } else { 1 }, body);
        self.m.node_mut(id).gid = gid;
        self.m.entries_mut(dir).insert(name.to_vec(), id);
        self.m.touch(dir);
        if is_dir {
            self.m.node_mut(dir).nlink += 1;
        }
        id
    }

    fn create(&mut self, dir: Id, name: &[u8], perm: u16, keep_open: bool) -> Option<Id> {
        let want = self.m.can_add(dir, name);
        let got = self.fs().create(self.m.ino(dir), name, perm, OWNER);
        if !self.agree(&got, &want) {
            return None;
        }
        let a = got.expect("agreed");
        assert_eq!(a.perm, perm & 0o7777, "{}", self.ctx());
        let id = self.add_entry(dir, name, &a, Body::File(FileData::default()));
        self.check_attr(id, &a);
        if keep_open {
            self.m.node_mut(id).open += 1;
            self.m.handles.push(id);
        } else {
            self.fs().release(a.ino).expect("release after create");
        }
        Some(id)
    }

    fn mkdir(&mut self, dir: Id, name: &[u8], perm: u16) -> Option<Id> {
        let want = self.m.can_add(dir, name);
        let got = self.fs().mkdir(self.m.ino(dir), name, perm, OWNER);
        if !self.agree(&got, &want) {
            return None;
        }
        let a = got.expect("agreed");
        // A set-group-ID parent passes the bit on (inode_init_owner).
        let inherited = self.m.node(dir).perm & 0o2000;
        assert_eq!(a.perm, (perm & 0o7777) | inherited, "{}", self.ctx());
        let id = self.add_entry(
            dir,
            name,
            &a,
            Body::Dir {
                entries: BTreeMap::new(),
                parent: dir,
            },
        );
        self.check_attr(id, &a);
        Some(id)
    }

    fn mknod(&mut self, dir: Id, name: &[u8], which: u8, perm: u16) {
        let (kind, rdev) = match which {
            0 => (FileType::Fifo, 0),
            1 => (FileType::CharDevice, 0x0103),
            2 => (FileType::BlockDevice, 0x0010_082C),
            _ => (FileType::Socket, 0),
        };
        let mode = u32::from(kind.mode_bits() | (perm & 0o7777));
        let want = self.m.can_add(dir, name);
        let got = self.fs().mknod(self.m.ino(dir), name, mode, rdev, OWNER);
        if !self.agree(&got, &want) {
            return;
        }
        let a = got.expect("agreed");
        let id = self.add_entry(dir, name, &a, Body::Special { kind, rdev });
        self.check_attr(id, &a);
    }

    fn symlink(&mut self, dir: Id, name: &[u8], target: &[u8]) -> Option<Id> {
        // Linux: a target of PATH_MAX (4096) bytes or more fails in getname, before the
        // name is looked at; one that does not fit a block fails in ext4_symlink, after.
        let want = if target.len() >= 4096 {
            Err(Error::NameTooLong)
        } else if target.len() > symlink_max() {
            self.m.can_add(dir, name).and(Err(Error::NameTooLong))
        } else {
            self.m.can_add(dir, name)
        };
        let got = self.fs().symlink(self.m.ino(dir), name, target, OWNER);
        if !self.agree(&got, &want) {
            return None;
        }
        let a = got.expect("agreed");
        let id = self.add_entry(dir, name, &a, Body::Symlink(target.to_vec()));
        self.check_attr(id, &a);
        Some(id)
    }

    fn link(&mut self, src: Id, dir: Id, name: &[u8]) {
        let want = self.m.can_add(dir, name).and_then(|_| {
            if self.m.is_dir(src) {
                Err(Error::NotPermitted)
            } else if self.m.node(src).nlink == 0 {
                Err(Error::NotFound)
            } else {
                Ok(())
            }
        });
        let got = self.fs().link(self.m.ino(src), self.m.ino(dir), name);
        if !self.agree(&got, &want) {
            return;
        }
        self.m.entries_mut(dir).insert(name.to_vec(), src);
        self.m.node_mut(src).nlink += 1;
        self.m.touch(dir);
        self.check_attr(src, &got.expect("agreed"));
    }

    /// unlink (`as_dir` false) or rmdir.
    fn remove(&mut self, dir: Id, name: &[u8], as_dir: bool) {
        let want = if !self.m.is_dir(dir) {
            Err(Error::NotDir)
        } else if name.len() > 255 {
            Err(Error::NameTooLong)
        } else {
            match self.m.lookup(dir, name) {
                None => Err(Error::NotFound),
                Some(c) if as_dir && !self.m.is_dir(c) => Err(Error::NotDir),
                Some(c) if !as_dir && self.m.is_dir(c) => Err(Error::IsDir),
                Some(c) if as_dir && !self.m.entries(c).is_empty() => Err(Error::NotEmpty),
                Some(c) => Ok(c),
            }
        };
        let ino = self.m.ino(dir);
        let got = if as_dir {
            self.fs().rmdir(ino, name)
        } else {
            self.fs().unlink(ino, name)
        };
        // Linux refuses an over-long name before looking; lanefs finds nothing. Both fail.
        if name.len() > 255 && matches!(got, Err(Error::NotFound)) && self.m.is_dir(dir) {
            return;
        }
        if !self.agree(&got, &want) {
            return;
        }
        let c = want.expect("agreed");
        self.m.entries_mut(dir).remove(name);
        self.m.touch(dir);
        if as_dir {
            self.m.node_mut(dir).nlink -= 1;
            self.m.node_mut(c).nlink = 0;
        } else {
            self.m.node_mut(c).nlink -= 1;
        }
        self.m.maybe_free(c);
    }

    /// rename, with Linux's error precedence.
    fn rename_want(
        &self,
        d: Id,
        name: &[u8],
        nd: Id,
        newname: &[u8],
    ) -> Result<(Id, Option<Id>), Error> {
        if name.len() > 255 || newname.len() > 255 {
            return Err(Error::NameTooLong);
        }
        if !self.m.is_dir(d) || !self.m.is_dir(nd) {
            return Err(Error::NotDir);
        }
        let src = self.m.lookup(d, name).ok_or(Error::NotFound)?;
        let tgt = self.m.lookup(nd, newname);
        if d != nd {
            // The source must not be an ancestor of the new parent ...
            if self.m.is_dir(src) && self.m.is_ancestor_or_self(src, nd) {
                return Err(Error::Invalid("into itself".into()));
            }
            // ... and the target must not be an ancestor of the old one.
            if tgt.is_some_and(|t| self.m.is_dir(t) && self.m.is_ancestor_or_self(t, d)) {
                return Err(Error::NotEmpty);
            }
        }
        if tgt == Some(src) {
            return Ok((src, tgt));
        }
        if let Some(t) = tgt {
            match (self.m.is_dir(src), self.m.is_dir(t)) {
                (true, false) => return Err(Error::NotDir),
                (false, true) => return Err(Error::IsDir),
                (true, true) if !self.m.entries(t).is_empty() => return Err(Error::NotEmpty),
                _ => {}
            }
        }
        Ok((src, tgt))
    }

    fn rename(&mut self, d: Id, name: &[u8], nd: Id, newname: &[u8]) {
        let want = self.rename_want(d, name, nd, newname);
        let got = self
            .fs()
            .rename(self.m.ino(d), name, self.m.ino(nd), newname);
        if !self.agree(&got, &want) {
            return;
        }
        let (src, tgt) = want.expect("agreed");
        if tgt == Some(src) {
            return;
        }
        self.m.entries_mut(d).remove(name);
        if let Some(t) = tgt {
            if self.m.is_dir(t) {
                self.m.node_mut(nd).nlink -= 1;
                self.m.node_mut(t).nlink = 0;
            } else {
                self.m.node_mut(t).nlink -= 1;
            }
            self.m.maybe_free(t);
        }
        self.m.entries_mut(nd).insert(newname.to_vec(), src);
        if let Body::Dir { parent, .. } = &mut self.m.node_mut(src).body {
            *parent = nd;
            self.m.node_mut(d).nlink -= 1;
            self.m.node_mut(nd).nlink += 1;
        }
        self.m.touch(d);
        self.m.touch(nd);
    }

    // --- data ---

    /// The error a data operation on a non-file gets.
    fn not_file(&self, id: Id) -> Option<Error> {
        match self.m.node(id).body {
            Body::File(_) => None,
            Body::Dir { .. } => Some(Error::IsDir),
            _ => Some(Error::Invalid("not a regular file".into())),
        }
    }

    fn write(&mut self, id: Id, off: u64, data: &[u8], direct: bool) {
        let end = off + data.len() as u64;
        let want = match self.not_file(id) {
            Some(e) => Err(e),
            None if end > max_size() => Err(Error::FileTooBig),
            None => {
                let new = self.m.file(id).new_blocks(off / bs(), end.div_ceil(bs()));
                if self.m.data_blocks() + new > budget_blocks() {
                    return;
                }
                Ok(data.len())
            }
        };
        let got = if direct {
            self.fs().write_direct(self.m.ino(id), off, data)
        } else {
            self.fs().write(self.m.ino(id), off, data)
        };
        if !self.agree(&got, &want) {
            return;
        }
        assert_eq!(got.ok(), want.ok(), "{}: bytes written", self.ctx());
        self.m.file_mut(id).write(off, data);
        self.m.touch(id);
    }

    fn read(&mut self, id: Id, off: u64, len: usize) {
        let want = match self.not_file(id) {
            Some(e) => Err(e),
            None => Ok(self.m.file(id).read(off, len)),
        };
        let mut buf = vec![0xEEu8; len];
        let got = self.fs().read(self.m.ino(id), off, &mut buf);
        if !self.agree(&got, &want) {
            return;
        }
        let want = want.expect("agreed");
        let n = got.expect("agreed");
        self.same_bytes(&buf[..n], &want, off);
        self.m.touch(id);
    }

    fn same_bytes(&self, got: &[u8], want: &[u8], off: u64) {
        assert_eq!(got.len(), want.len(), "{}: bytes read at {off}", self.ctx());
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            let e = (i + 16).min(got.len());
            panic!(
                "{}: data differs at offset {} (block {}): engine {:?}, model {:?}",
                self.ctx(),
                off + i as u64,
                (off + i as u64) / bs(),
                &got[i..e],
                &want[i..e]
            );
        }
    }

    fn truncate(&mut self, id: Id, size: u64) {
        let want = match self.not_file(id) {
            Some(e) => Err(e),
            None if size > max_size() => Err(Error::FileTooBig),
            None => Ok(()),
        };
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        let got = self.fs().setattr(self.m.ino(id), &set);
        if !self.agree(&got, &want) {
            return;
        }
        self.m.file_mut(id).truncate(size);
        self.m.touch(id);
        self.check_attr(id, &got.expect("agreed"));
    }

    fn fallocate(&mut self, id: Id, off: u64, len: u64, mode: u8) {
        let end = off + len;
        let mode = FallocMode {
            keep_size: mode > 0,
            punch_hole: mode == 2,
            zero_range: false,
        };
        let want = match self.not_file(id) {
            _ if len == 0 => Err(Error::Invalid("length 0".into())),
            Some(e) => Err(e),
            None if end > max_size() => Err(Error::FileTooBig),
            None if mode.punch_hole => Ok(()),
            None => {
                let new = self.m.file(id).new_blocks(off / bs(), end.div_ceil(bs()));
                if self.m.data_blocks() + new > budget_blocks() {
                    return;
                }
                Ok(())
            }
        };
        let got = self.fs().fallocate(self.m.ino(id), mode, off, len);
        if !self.agree(&got, &want) {
            return;
        }
        let f = self.m.file_mut(id);
        if mode.punch_hole {
            f.punch(off, end);
        } else {
            f.alloc.extend(off / bs()..end.div_ceil(bs()));
            if !mode.keep_size && end > f.size {
                f.size = end;
            }
        }
        self.m.touch(id);
    }

    // --- attributes and listing ---

    fn set(&mut self, id: Id, set: &SetAttr) {
        let got = self.fs().setattr(self.m.ino(id), set);
        let a = got.unwrap_or_else(|e| panic!("{}: setattr failed: {e:?}", self.ctx()));
        let n = self.m.node_mut(id);
        if let Some(p) = set.perm {
            n.perm = p & 0o7777;
        }
        if let (Some(at), Some(mt)) = (set.atime, set.mtime) {
            n.times = Some((at, mt));
        }
        self.check_attr(id, &a);
    }

    /// The entries `readdir` must return, with "." and "..".
    fn want_entries(&self, d: Id) -> BTreeMap<Vec<u8>, (Ino, FileType)> {
        let mut want: BTreeMap<Vec<u8>, (Ino, FileType)> = self
            .m
            .entries(d)
            .iter()
            .map(|(name, &c)| (name.clone(), (self.m.ino(c), self.m.node(c).kind())))
            .collect();
        want.insert(b".".to_vec(), (self.m.ino(d), FileType::Directory));
        want.insert(
            b"..".to_vec(),
            (self.m.ino(self.m.parent(d)), FileType::Directory),
        );
        want
    }

    /// Read a directory through the cursor, `chunk` entries per call for the first 64
    /// calls and at least 256 after that (each call costs a pass over the directory).
    fn readdir_chunked(&self, ino: Ino, chunk: usize) -> Result<Vec<DirEntry>, Error> {
        let fs = self.fs();
        let mut out = Vec::new();
        let mut pos = 0;
        for call in 0..1_000_000 {
            let max = if call < 64 { chunk } else { chunk.max(256) };
            let got = fs.readdir(ino, pos, max)?;
            let Some(last) = got.last() else {
                return Ok(out);
            };
            assert!(
                last.next > pos,
                "{}: readdir cursor did not advance",
                self.ctx()
            );
            pos = last.next;
            out.extend(got);
        }
        panic!("{}: readdir never ended", self.ctx());
    }

    fn readdir(&mut self, d: Id, chunk: usize) {
        let want = if self.m.is_dir(d) {
            Ok(self.want_entries(d))
        } else {
            Err(Error::NotDir)
        };
        let got = self.readdir_chunked(self.m.ino(d), chunk);
        if !self.agree(&got, &want) {
            return;
        }
        self.same_listing(&got.expect("agreed"), &want.expect("agreed"), chunk);
    }

    fn same_listing(
        &self,
        got: &[DirEntry],
        want: &BTreeMap<Vec<u8>, (Ino, FileType)>,
        chunk: usize,
    ) {
        let mut seen = BTreeMap::new();
        for e in got {
            let prev = seen.insert(e.name.clone(), (e.ino, e.kind));
            assert!(
                prev.is_none(),
                "{}: readdir (chunks of {chunk}) returned {:?} twice",
                self.ctx(),
                String::from_utf8_lossy(&e.name)
            );
        }
        if &seen != want {
            let extra: Vec<_> = seen.keys().filter(|k| !want.contains_key(*k)).collect();
            let missing: Vec<_> = want.keys().filter(|k| !seen.contains_key(*k)).collect();
            let wrong: Vec<_> = want
                .iter()
                .filter(|(k, v)| seen.get(*k).is_some_and(|s| s != *v))
                .collect();
            panic!(
                "{}: readdir (chunks of {chunk}) differs: extra {extra:?}, missing {missing:?}, \
                 wrong {wrong:?}",
                self.ctx()
            );
        }
    }

    /// POSIX readdir across changes: no name twice, every name returned existed before or
    /// after, and every entry present throughout is returned.
    fn readdir_changing(&mut self, d: Id, chunk: usize, adds: usize, victim: u16) {
        let ino = self.m.ino(d);
        let before = self.want_entries(d);
        let mut got = self
            .fs()
            .readdir(ino, 0, chunk)
            .unwrap_or_else(|e| panic!("{}: readdir: {e:?}", self.ctx()));
        let Some(mut pos) = got.last().map(|e| e.next) else {
            return;
        };
        for k in 0..adds {
            self.create(d, format!("c{}-{k}", self.step).as_bytes(), 0o644, false);
        }
        let files: Vec<Vec<u8>> = self
            .m
            .entries(d)
            .iter()
            .filter(|(_, &c)| !self.m.is_dir(c))
            .map(|(n, _)| n.clone())
            .collect();
        if let Some(name) = files.get(victim as usize % files.len().max(1)) {
            self.remove(d, &name.clone(), false);
        }
        let after = self.want_entries(d);
        for _ in 0..100_000 {
            let more = self
                .fs()
                .readdir(ino, pos, chunk)
                .unwrap_or_else(|e| panic!("{}: readdir: {e:?}", self.ctx()));
            let Some(last) = more.last() else { break };
            assert!(
                last.next > pos,
                "{}: readdir cursor did not advance",
                self.ctx()
            );
            pos = last.next;
            got.extend(more);
        }
        let mut seen = BTreeSet::new();
        for e in &got {
            let name = String::from_utf8_lossy(&e.name);
            assert!(
                seen.insert(e.name.clone()),
                "{}: {name:?} returned twice",
                self.ctx()
            );
            let v = Some(&(e.ino, e.kind));
            assert!(
                before.get(&e.name) == v || after.get(&e.name) == v,
                "{}: {name:?} never existed so",
                self.ctx()
            );
        }
        for (name, v) in &before {
            if after.get(name) == Some(v) {
                assert!(
                    seen.contains(name),
                    "{}: {:?} skipped",
                    self.ctx(),
                    String::from_utf8_lossy(name)
                );
            }
        }
    }

    fn lookup(&mut self, d: Id, name: &[u8]) {
        let want = if !self.m.is_dir(d) {
            Err(Error::NotDir)
        } else if name.len() > 255 {
            Err(Error::NameTooLong)
        } else if name == b"." {
            Ok(d)
        } else if name == b".." {
            Ok(self.m.parent(d))
        } else {
            self.m.lookup(d, name).ok_or(Error::NotFound)
        };
        let got = self.fs().lookup(self.m.ino(d), name);
        if self.agree(&got, &want) {
            self.check_attr(want.expect("agreed"), &got.expect("agreed"));
        }
    }

    fn getattr(&self, id: Id) {
        let a = self.fs().getattr(self.m.ino(id));
        let a = a.unwrap_or_else(|e| panic!("{}: getattr of node {id} failed: {e:?}", self.ctx()));
        self.check_attr(id, &a);
    }

    fn readlink(&self, id: Id) {
        let want = match &self.m.node(id).body {
            Body::Symlink(t) => Ok(t.clone()),
            _ => Err(Error::Invalid("not a symlink".into())),
        };
        let got = self.fs().readlink(self.m.ino(id));
        if self.agree(&got, &want) {
            assert_eq!(got.ok(), want.ok(), "{}: symlink target", self.ctx());
        }
    }

    fn open(&mut self, id: Id) {
        let got = self.fs().open(self.m.ino(id));
        got.unwrap_or_else(|e| panic!("{}: open failed: {e:?}", self.ctx()));
        self.m.node_mut(id).open += 1;
        self.m.handles.push(id);
    }

    fn release(&mut self, h: usize) {
        let id = self.m.handles.swap_remove(h);
        let got = self.fs().release(self.m.ino(id));
        got.unwrap_or_else(|e| panic!("{}: release failed: {e:?}", self.ctx()));
        self.m.node_mut(id).open -= 1;
        self.m.maybe_free(id);
    }

    /// Unmount (which releases every open file: orphans go), mount again, compare all.
    fn remount(&mut self) {
        let fs = self.fs.take().expect("mounted");
        fs.unmount()
            .unwrap_or_else(|e| panic!("{}: unmount failed: {e:?}", self.ctx()));
        for id in std::mem::take(&mut self.m.handles) {
            if let Some(n) = self.m.nodes.get_mut(&id) {
                n.open = 0;
                self.m.maybe_free(id);
            }
        }
        let fs = Fs::mount_path(&self.img, MountOptions::default());
        self.fs = Some(fs.unwrap_or_else(|e| panic!("{}: remount failed: {e:?}", self.ctx())));
        self.verify_all();
    }

    // --- whole-tree comparison ---

    fn verify_file(&self, id: Id) {
        let f = self.m.file(id);
        let ino = self.m.ino(id);
        let fs = self.fs();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        if f.size <= WHOLE_COMPARE {
            ranges.push((0, f.size));
        } else {
            // Sparse and huge: each data block with its neighbours, and the tail.
            for &b in f.pages.keys() {
                ranges.push((b.saturating_sub(1) * bs(), (b + 2) * bs()));
            }
            ranges.push((f.size.saturating_sub(3 * bs() + 17), f.size + 100));
        }
        for (a, b) in ranges {
            let mut buf = vec![0xEEu8; (b - a) as usize];
            let n = fs.read(ino, a, &mut buf);
            let n = n.unwrap_or_else(|e| panic!("{}: read of node {id} failed: {e:?}", self.ctx()));
            self.same_bytes(&buf[..n], &f.read(a, (b - a) as usize), a);
        }
    }

    fn verify_all(&self) {
        let fs = self.fs();
        let mut blocks = 0;
        for (&id, n) in &self.m.nodes {
            let a = fs.getattr(n.ino);
            let a =
                a.unwrap_or_else(|e| panic!("{}: getattr of node {id} failed: {e:?}", self.ctx()));
            self.check_attr(id, &a);
            blocks += a.blocks / sectors();
            match &n.body {
                Body::File(_) => self.verify_file(id),
                Body::Dir { entries, .. } => {
                    let subdirs = entries.values().filter(|&&c| self.m.is_dir(c)).count();
                    assert_eq!(n.nlink as usize, 2 + subdirs, "model nlink of node {id}");
                    let got = fs.readdir(n.ino, 0, usize::MAX);
                    let got = got.unwrap_or_else(|e| {
                        panic!("{}: readdir of {id} failed: {e:?}", self.ctx())
                    });
                    self.same_listing(&got, &self.want_entries(id), usize::MAX);
                }
                Body::Symlink(_) => self.readlink(id),
                Body::Special { .. } => {}
            }
        }
        let st = fs.statfs().expect("statfs");
        assert_eq!(
            st.free_inodes + self.m.nodes.len() as u64,
            self.inodes_k,
            "{}: free inodes {} with {} live inodes",
            self.ctx(),
            st.free_inodes,
            self.m.nodes.len()
        );
        assert_eq!(
            st.free_blocks + blocks,
            self.blocks_k,
            "{}: free blocks {} with {blocks} blocks in inodes (leak or double count)",
            self.ctx(),
            st.free_blocks
        );
    }

    /// Compare everything, unmount, and require a clean `e2fsck -fn`. Returns the image
    /// and the directory that holds it (the image goes when that is dropped).
    fn finish(mut self) -> (PathBuf, tempfile::TempDir) {
        self.what = "finish".into();
        self.verify_all();
        let fs = self.fs.take().expect("mounted");
        fs.unmount()
            .unwrap_or_else(|e| panic!("final unmount failed: {e:?}"));
        common::assert_fsck_clean(&self.img);
        (self.img, self.dir)
    }

    // --- operand resolution ---

    /// A directory, or (1 time in 16) a linked non-directory to provoke NotDir.
    fn pick_dir(&self, s: u16) -> Id {
        let other = self.m.ids(|n| !n.is_dir() && n.nlink > 0);
        if s % 16 == 15 && !other.is_empty() {
            return other[(s / 16) as usize % other.len()];
        }
        pick(&self.m.ids(Node::is_dir), s).expect("root is a directory")
    }

    /// A name for `dir`; never one too long where the directory is not one (the order of
    /// those two errors differs between Linux and lanefs and is not a property).
    fn pick_name(&self, dir: Id, n: u8) -> Vec<u8> {
        if n == 7 && !self.m.is_dir(dir) {
            name_of(0)
        } else {
            name_of(n)
        }
    }

    /// A file, or (if `any`) any node; for non-files the offset stays small so that
    /// FileTooBig and IsDir never compete.
    fn pick_data(&self, s: u16, any: bool, off: u64) -> Option<(Id, u64)> {
        let id = if any {
            pick(&self.m.ids(|_| true), s)?
        } else {
            pick(&self.m.ids(|n| matches!(n.body, Body::File(_))), s)?
        };
        let off = if self.not_file(id).is_some() {
            off % 65536
        } else {
            off
        };
        Some((id, off))
    }

    fn apply(&mut self, op: &Op) {
        self.step += 1;
        self.what = format!("{op:?}");
        match *op {
            Op::Create {
                dir,
                name,
                perm,
                keep_open,
            } => {
                let d = self.pick_dir(dir);
                self.create(d, &self.pick_name(d, name), perm, keep_open);
            }
            Op::Mkdir { dir, name, perm } => {
                let d = self.pick_dir(dir);
                self.mkdir(d, &self.pick_name(d, name), perm);
            }
            Op::Mknod {
                dir,
                name,
                which,
                perm,
            } => {
                let d = self.pick_dir(dir);
                self.mknod(d, &self.pick_name(d, name), which, perm);
            }
            Op::Symlink {
                dir,
                name,
                len,
                seed,
            } => {
                let d = self.pick_dir(dir);
                let name = self.pick_name(d, name);
                let mut len = usize::from(len);
                // Which of two errors comes first is not a property (lanefs checks the
                // target before the name): a refused name gets a target that fits.
                if self.m.can_add(d, &name).is_err() {
                    len = len.min(symlink_max()).min(4095);
                }
                let target: Vec<u8> = (0..len)
                    .map(|i| b"abcdefghij/"[(i + usize::from(seed)) % 11])
                    .collect();
                self.symlink(d, &name, &target);
            }
            Op::Link { src, dir, name } => {
                let Some(s) = pick(&self.m.ids(|n| n.ino != ROOT_INO), src) else {
                    return;
                };
                let d = self.pick_dir(dir);
                self.link(s, d, &self.pick_name(d, name));
            }
            Op::Unlink { dir, name } => {
                let d = self.pick_dir(dir);
                self.remove(d, &self.pick_name(d, name), false);
            }
            Op::Rmdir { dir, name } => {
                let d = self.pick_dir(dir);
                self.remove(d, &self.pick_name(d, name), true);
            }
            Op::RmdirEmpty { dir } => {
                let empty = self.m.ids(|n| {
                    n.ino != ROOT_INO
                        && matches!(&n.body, Body::Dir { entries, .. } if entries.is_empty())
                });
                let Some(d) = pick(&empty, dir) else { return };
                let parent = self.m.parent(d);
                let entries = self.m.entries(parent);
                let name = entries.iter().find(|e| *e.1 == d).map(|e| e.0.clone());
                self.remove(parent, &name.expect("entry of a directory"), true);
            }
            Op::RemoveEntry { entry, as_dir } => {
                let all = self.m.all_entries();
                if all.is_empty() {
                    return;
                }
                let (d, name, _) = all[entry as usize % all.len()].clone();
                self.remove(d, &name, as_dir);
            }
            Op::Rename {
                dir,
                name,
                newdir,
                newname,
            } => {
                let (d, nd) = (self.pick_dir(dir), self.pick_dir(newdir));
                let (a, b) = (self.pick_name(d, name), self.pick_name(nd, newname));
                self.rename(d, &a, nd, &b);
            }
            Op::RenameEntry {
                entry,
                newdir,
                newname,
            } => {
                let all = self.m.all_entries();
                if all.is_empty() {
                    return;
                }
                let (d, name, _) = all[entry as usize % all.len()].clone();
                let nd = self.pick_dir(newdir);
                self.rename(d, &name, nd, &self.pick_name(nd, newname));
            }
            Op::Write {
                file,
                any,
                off,
                len,
                seed,
                direct,
            } => {
                let Some((id, off)) = self.pick_data(file, any, off) else {
                    return;
                };
                let off = if direct { off / bs() * bs() } else { off };
                // Never straddle the size limit: Linux writes short there.
                let len = if off < max_size() {
                    u64::from(len).min(max_size() - off)
                } else {
                    u64::from(len)
                };
                self.write(id, off, &pattern(seed, off, len as usize), direct);
            }
            Op::Read {
                file,
                any,
                off,
                len,
            } => {
                let Some((id, off)) = self.pick_data(file, any, off) else {
                    return;
                };
                self.read(id, off, len as usize);
            }
            Op::Truncate { file, any, size } => {
                let Some((id, size)) = self.pick_data(file, any, size) else {
                    return;
                };
                self.truncate(id, size);
            }
            Op::Fallocate {
                file,
                any,
                off,
                len,
                mode,
            } => {
                let Some((id, off)) = self.pick_data(file, any, off) else {
                    return;
                };
                self.fallocate(id, off, len, mode);
            }
            Op::SetPerm { node, perm } => {
                let Some(id) = pick(&self.m.ids(|_| true), node) else {
                    return;
                };
                self.set(
                    id,
                    &SetAttr {
                        perm: Some(perm),
                        ..SetAttr::default()
                    },
                );
            }
            Op::SetTimes { node, atime, mtime } => {
                let Some(id) = pick(&self.m.ids(|_| true), node) else {
                    return;
                };
                self.set(
                    id,
                    &SetAttr {
                        atime: Some(atime),
                        mtime: Some(mtime),
                        ..SetAttr::default()
                    },
                );
            }
            Op::Readdir { dir, chunk } => {
                let d = self.pick_dir(dir);
                self.readdir(d, usize::from(chunk));
            }
            Op::ReaddirChanging {
                dir,
                chunk,
                adds,
                victim,
            } => {
                let d = self.pick_dir(dir);
                if self.m.is_dir(d) {
                    self.readdir_changing(d, usize::from(chunk), usize::from(adds), victim);
                }
            }
            Op::Bulk { dir, count, long } => {
                let d = self.pick_dir(dir);
                // Stay far from the image's 16384 inodes.
                if !self.m.is_dir(d) || self.m.nodes.len() + usize::from(count) > 12_000 {
                    return;
                }
                let pad = if long { 150 + self.step % 100 } else { 0 };
                for i in 0..count {
                    let mut name = format!("b{}-{i}-", self.step).into_bytes();
                    name.resize(name.len() + pad, b'q');
                    let keep_open = i % 97 == 3;
                    self.create(d, &name, 0o640, keep_open);
                }
            }
            Op::Lookup { dir, name } => {
                let d = self.pick_dir(dir);
                self.lookup(d, &self.pick_name(d, name));
            }
            Op::Getattr { node } => {
                let Some(id) = pick(&self.m.ids(|_| true), node) else {
                    return;
                };
                self.getattr(id);
            }
            Op::Readlink { node } => {
                // Mostly symlinks; 1 time in 4 anything (Invalid for the rest).
                let links = self.m.ids(|n| matches!(n.body, Body::Symlink(_)));
                let from = if node % 4 == 0 || links.is_empty() {
                    self.m.ids(|_| true)
                } else {
                    links
                };
                let Some(id) = pick(&from, node / 4) else {
                    return;
                };
                self.readlink(id);
            }
            Op::Open { file } => {
                let Some(id) = pick(&self.m.ids(|n| matches!(n.body, Body::File(_))), file) else {
                    return;
                };
                self.open(id);
            }
            Op::Release { handle } => {
                if !self.m.handles.is_empty() {
                    self.release(handle as usize % self.m.handles.len());
                }
            }
            Op::Fsync { file } => {
                let Some(id) = pick(&self.m.ids(|n| matches!(n.body, Body::File(_))), file) else {
                    return;
                };
                let got = self.fs().fsync(self.m.ino(id), false);
                got.unwrap_or_else(|e| panic!("{}: fsync failed: {e:?}", self.ctx()));
            }
            Op::Remount => self.remount(),
        }
    }
}

fn config(cases_var: &str, default_cases: u32) -> Config {
    let cases = std::env::var(cases_var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 512,
        max_shrink_time: 300_000,
        ..Config::default()
    }
}

/// Cases of one block size: `PROPTEST_CASES` (default 64) split over the four sizes.
fn random_cases() -> u32 {
    let total = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64u32);
    total.div_ceil(4).max(1)
}

fn random_operations(test: &str, block_size: u64) {
    if !common::require_tools(test, &["mkfs.ext4", "mke2fs", "e2fsck"]) {
        return;
    }
    BLOCK_SIZE.with(|b| b.set(block_size));
    let t = std::time::Instant::now();
    let mut cfg = config("PROPTEST_CASES", 64);
    cfg.cases = random_cases();
    let mut runner = TestRunner::new(cfg);
    let strategy = prop::collection::vec(op_s(), 1..200);
    let result = runner.run(&strategy, |ops| {
        let _w = common::watchdog(test, 180);
        let mut r = Runner::new();
        for op in &ops {
            r.apply(op);
        }
        let nodes = r.m.nodes.len();
        r.finish();
        println!("case: {} operations, {nodes} inodes at the end", ops.len());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{test} ({block_size}-byte blocks): {e}");
    }
    print_stats(test);
    println!("{test}: {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn random_operations_match_the_model() {
    random_operations("random_operations_match_the_model", 4096);
}

#[test]
fn random_operations_match_the_model_1k() {
    random_operations("random_operations_match_the_model_1k", 1024);
}

#[test]
fn random_operations_match_the_model_2k() {
    random_operations("random_operations_match_the_model_2k", 2048);
}

#[test]
fn random_operations_match_the_model_64k() {
    random_operations("random_operations_match_the_model_64k", 65536);
}

// ---------------------------------------------------------------------------------------
// Big directories and many extents.

/// Run `debugfs -R cmd` on an image and return its output.
fn debugfs(img: &Path, cmd: &str) -> String {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(cmd)
        .arg(img)
        .output()
        .expect("run debugfs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Parameters of one big case.
#[derive(Debug, Clone)]
struct Big {
    seed: u64,
    entries: usize,
    name_len: usize,
    frags: u64,
}

fn big_name(rng: &mut impl Rng, i: usize, len: usize) -> Vec<u8> {
    let mut n = format!("{i:06}-").into_bytes();
    while n.len() < len {
        n.push(b'a' + rng.gen_range(0..26u8));
    }
    n
}

fn run_big(p: &Big) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(p.seed);
    let mut r = Runner::new();
    r.what = "big: mkdir".into();
    let big = r.mkdir(ROOT, b"big", 0o755).expect("mkdir big");
    // Fill the directory: mostly files, some subdirectories, symlinks and hard links.
    let mut names: Vec<Vec<u8>> = Vec::new();
    for i in 0..p.entries {
        r.step += 1;
        let name = big_name(&mut rng, i, p.name_len);
        r.what = format!("big: create entry {i}");
        let ok = match i % 50 {
            7 => r.mkdir(big, &name, 0o700).is_some(),
            13 => r.symlink(big, &name, &name[..100]).is_some(),
            21 if !names.is_empty() => {
                let src =
                    r.m.lookup(big, &names[rng.gen_range(0..names.len())])
                        .expect("entry");
                if r.m.is_dir(src) {
                    false
                } else {
                    r.link(src, big, &name);
                    true
                }
            }
            _ => r.create(big, &name, 0o644, false).is_some(),
        };
        if ok {
            names.push(name);
        }
        if i % 500 == 0 {
            r.what = format!("big: lookups after {i} entries");
            for _ in 0..20 {
                let n = names[rng.gen_range(0..names.len())].clone();
                r.lookup(big, &n);
                r.lookup(big, &big_name(&mut rng, i + 1_000_000, p.name_len));
            }
        }
    }
    r.what = "big: listing after creates".into();
    for chunk in [1usize, 7, 64] {
        r.readdir(big, chunk);
    }
    // Remove a third, rename some (within, over existing names, out and back), re-create.
    for k in 0..names.len() / 3 {
        r.step += 1;
        let i = rng.gen_range(0..names.len());
        let name = names.swap_remove(i);
        r.what = format!("big: remove {k}");
        let as_dir = r.m.lookup(big, &name).is_some_and(|c| r.m.is_dir(c));
        r.remove(big, &name, as_dir);
    }
    for k in 0..names.len() / 10 {
        r.step += 1;
        r.what = format!("big: rename {k}");
        let i = rng.gen_range(0..names.len());
        let j = rng.gen_range(0..names.len());
        let (a, b) = (names[i].clone(), names[j].clone());
        match k % 3 {
            0 => {
                r.rename(big, &a, big, &b);
                if r.m.lookup(big, &a).is_none() {
                    names.swap_remove(i);
                }
            }
            1 => {
                let fresh = big_name(&mut rng, 2_000_000 + k, p.name_len);
                r.rename(big, &a, big, &fresh);
                names[i] = fresh;
            }
            _ => {
                r.rename(big, &a, ROOT, b"visitor");
                r.rename(ROOT, b"visitor", big, &a);
            }
        }
    }
    for i in 0..p.entries / 4 {
        r.step += 1;
        r.what = format!("big: re-create {i}");
        let name = big_name(&mut rng, 3_000_000 + i, p.name_len);
        if r.create(big, &name, 0o600, false).is_some() {
            names.push(name);
        }
    }
    r.what = "big: listing after churn".into();
    for chunk in [2usize, 5, 100] {
        r.readdir(big, chunk);
    }
    r.remount();
    r.what = "big: listing after remount".into();
    r.readdir(big, 4);

    // Fragmented files: fragA written every other block (preallocation keeps files
    // written in turn contiguous, so holes are what splits it into >= 1000 extents),
    // fragB block by block in turn with it, fragC with holes inside blocks.
    r.what = "frag: create".into();
    let fa = r.create(ROOT, b"fragA", 0o644, false).expect("fragA");
    let fb = r.create(ROOT, b"fragB", 0o644, false).expect("fragB");
    let fc = r.create(ROOT, b"fragC", 0o644, false).expect("fragC");
    for k in 0..p.frags {
        r.step += 1;
        r.what = format!("frag: interleaved block {k}");
        r.write(
            fa,
            2 * k * bs(),
            &pattern(1, 2 * k * bs(), bs() as usize),
            false,
        );
        // Every other block of fragB straight to the device.
        r.write(
            fb,
            k * bs(),
            &pattern(2, k * bs(), bs() as usize),
            k % 2 == 1,
        );
        if k % 4 == 0 {
            r.write(
                fc,
                2 * k * bs() + 100,
                &pattern(3, 2 * k * bs() + 100, 300),
                false,
            );
        }
    }
    for k in 0..40u64 {
        r.step += 1;
        r.what = format!("frag: churn {k}");
        let off = rng.gen_range(0..p.frags * bs());
        let len = rng.gen_range(1..10 * bs());
        match k % 5 {
            0 => r.fallocate(fa, off, len, 2),
            1 => r.fallocate(fc, off, len, 2),
            2 => r.fallocate(fa, off, len, 1),
            3 => r.write(fa, off, &pattern(k as u8, off, len as usize), k % 10 == 3),
            _ => r.read(fa, off, len as usize),
        }
    }
    r.what = "frag: truncate".into();
    r.truncate(fb, p.frags * bs() / 2 + 1234);
    r.read(fb, 0, (p.frags * bs()) as usize);
    r.remount();
    let (img, _dir) = r.finish();
    // The case must have forced what it is for: a two-level index and a deep extent tree.
    let htree = debugfs(&img, "htree_dump /big");
    let levels = htree
        .lines()
        .find_map(|l| l.trim().strip_prefix("Indirect levels: "));
    let extents = debugfs(&img, "ex /fragA");
    // Lines look like " 1/ 2   3/  7 ..." (level/depth); leaves are at level == depth.
    let rows: Vec<(u32, u32)> = extents
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once('/')?;
            Some((
                a.trim().parse().ok()?,
                b.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect();
    let depth = rows.iter().map(|r| r.1).max().unwrap_or(0);
    let leaves = rows.iter().filter(|r| r.0 == r.1).count();
    println!(
        "big case {p:?}: htree indirect levels {levels:?}, fragA: {leaves} extents, depth {depth}"
    );
    assert_eq!(
        levels,
        Some("1"),
        "/big should have a two-level index:\n{htree}"
    );
    assert!(
        depth >= 2 && leaves >= 1000,
        "fragA should have a deep extent tree:\n{extents}"
    );
}

/// Cases of one block size: `LANEFS_BIG_CASES` (default 3) split over 1, 2 and 4 KiB
/// (64 KiB blocks cannot force a two-level index with names this long in this many entries).
fn big_cases() -> u32 {
    let total = std::env::var("LANEFS_BIG_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3u32);
    total.div_ceil(3).max(1)
}

fn big_directories(test: &str, block_size: u64) {
    if !common::require_tools(test, &["mkfs.ext4", "mke2fs", "e2fsck", "debugfs"]) {
        return;
    }
    BLOCK_SIZE.with(|b| b.set(block_size));
    let t = std::time::Instant::now();
    let mut cfg = config("LANEFS_BIG_CASES", 3);
    cfg.cases = big_cases();
    let mut runner = TestRunner::new(cfg);
    let strategy = (any::<u64>(), 6500usize..7500, 248usize..=255, 1500u64..2500).prop_map(
        |(seed, entries, name_len, frags)| Big {
            seed,
            entries,
            name_len,
            frags,
        },
    );
    let result = runner.run(&strategy, |p| {
        let _w = common::watchdog(test, 300);
        run_big(&p);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{test} ({block_size}-byte blocks): {e}");
    }
    print_stats(test);
    println!("{test}: {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn big_directories_and_many_extents_match_the_model() {
    big_directories("big_directories_and_many_extents_match_the_model", 4096);
}

#[test]
fn big_directories_and_many_extents_match_the_model_1k() {
    big_directories("big_directories_and_many_extents_match_the_model_1k", 1024);
}

#[test]
fn big_directories_and_many_extents_match_the_model_2k() {
    big_directories("big_directories_and_many_extents_match_the_model_2k", 2048);
}

/// The symlink length rule the model uses, checked directly on every block size (the
/// random sequences meet its edges only now and then): a target must fit a block with its
/// NUL, and Linux refuses PATH_MAX (4096) bytes or more whatever the block size.
#[test]
fn symlink_target_limits_follow_linux() {
    let test = "symlink_target_limits_follow_linux";
    if !common::require_tools(test, &["mke2fs"]) {
        return;
    }
    let mut wrong = Vec::new();
    for block in [1024u64, 2048, 4096, 65536] {
        BLOCK_SIZE.with(|b| b.set(block));
        let dir = tempfile::tempdir().expect("tempdir");
        let b = block.to_string();
        let img = common::mke2fs_image(dir.path(), "s.img", img_size(), &["-t", "ext4", "-b", &b])
            .expect("mke2fs");
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
        let longest = symlink_max().min(4095);
        let lens: BTreeSet<usize> = [59usize, 60, longest, longest + 1, 4096].into();
        for len in lens {
            let want_ok = len <= longest;
            let name = format!("l{len}");
            let got = fs.symlink(ROOT_INO, name.as_bytes(), &vec![b'x'; len], OWNER);
            match (&got, want_ok) {
                (Ok(_), true) | (Err(Error::NameTooLong), false) => {}
                _ => wrong.push(format!(
                    "{block}-byte blocks: a {len}-byte target gave {:?}, want {}",
                    got.map(|a| a.ino),
                    if want_ok { "Ok" } else { "NameTooLong" }
                )),
            }
        }
        fs.unmount().expect("unmount");
        common::assert_fsck_clean(&img);
    }
    assert!(wrong.is_empty(), "{test}:\n{}", wrong.join("\n"));
}
