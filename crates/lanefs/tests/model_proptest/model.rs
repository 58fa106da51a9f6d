//! The model: a tree of nodes (files with their bytes by block, directories, symlinks,
//! special files) with Linux's rules for what may be added where, and the counts the
//! whole-tree comparison checks.

use super::*;

pub(super) type Id = usize;
pub(super) const ROOT: Id = 0;

/// A regular file: size, contents by block (absent blocks read as zeros) and the logical
/// blocks the engine must have allocated (written or unwritten).
#[derive(Debug, Default, Clone)]
pub(super) struct FileData {
    pub(super) size: u64,
    pub(super) pages: BTreeMap<u64, Vec<u8>>,
    pub(super) alloc: BTreeSet<u64>,
}

impl FileData {
    pub(super) fn read(&self, off: u64, len: usize) -> Vec<u8> {
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

    pub(super) fn write(&mut self, off: u64, data: &[u8]) {
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
    pub(super) fn zero(&mut self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        for (&b, p) in self.pages.range_mut(from / bs()..=(to - 1) / bs()) {
            let s = (b * bs()).max(from);
            let e = (b * bs() + bs()).min(to);
            p[(s - b * bs()) as usize..(e - b * bs()) as usize].fill(0);
        }
    }

    pub(super) fn truncate(&mut self, size: u64) {
        if size < self.size {
            let keep = size.div_ceil(bs());
            self.pages.split_off(&keep);
            self.alloc.split_off(&keep);
            self.zero(size, keep * bs());
        }
        self.size = size;
    }

    /// New blocks an allocation of logical blocks `[a, b)` would add.
    pub(super) fn new_blocks(&self, a: u64, b: u64) -> u64 {
        (b - a) - self.alloc.range(a..b).count() as u64
    }

    /// Linux ext4 punch: nothing at or past EOF, the range clipped to the end of the last
    /// block, partial blocks zeroed, whole blocks deallocated.
    pub(super) fn punch(&mut self, off: u64, end: u64) {
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
pub(super) enum Body {
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
pub(super) struct Node {
    pub(super) ino: Ino,
    pub(super) perm: u16,
    pub(super) nlink: u32,
    /// Open references held by the test (create with keep_open, open).
    pub(super) open: u32,
    /// atime and mtime last set explicitly, while nothing has changed them since.
    pub(super) times: Option<(Timespec, Timespec)>,
    /// Group: the creator's, or a set-group-ID parent directory's (inode_init_owner).
    pub(super) gid: u32,
    pub(super) body: Body,
}

impl Node {
    pub(super) fn kind(&self) -> FileType {
        match &self.body {
            Body::File(_) => FileType::Regular,
            Body::Dir { .. } => FileType::Directory,
            Body::Symlink(_) => FileType::Symlink,
            Body::Special { kind, .. } => *kind,
        }
    }
    pub(super) fn is_dir(&self) -> bool {
        matches!(self.body, Body::Dir { .. })
    }
}

#[derive(Default)]
pub(super) struct Model {
    pub(super) nodes: BTreeMap<Id, Node>,
    pub(super) inos: HashMap<Ino, Id>,
    pub(super) next: Id,
    /// lost+found: part of the tree, never picked as an operand.
    pub(super) lost_found: Id,
    /// Open references, one element per reference.
    pub(super) handles: Vec<Id>,
}

impl Model {
    pub(super) fn node(&self, id: Id) -> &Node {
        &self.nodes[&id]
    }
    pub(super) fn node_mut(&mut self, id: Id) -> &mut Node {
        self.nodes.get_mut(&id).expect("model node")
    }
    pub(super) fn ino(&self, id: Id) -> Ino {
        self.node(id).ino
    }
    pub(super) fn is_dir(&self, id: Id) -> bool {
        self.node(id).is_dir()
    }
    pub(super) fn entries(&self, d: Id) -> &BTreeMap<Vec<u8>, Id> {
        match &self.node(d).body {
            Body::Dir { entries, .. } => entries,
            _ => panic!("model node {d} is not a directory"),
        }
    }
    pub(super) fn entries_mut(&mut self, d: Id) -> &mut BTreeMap<Vec<u8>, Id> {
        match &mut self.node_mut(d).body {
            Body::Dir { entries, .. } => entries,
            _ => panic!("model node {d} is not a directory"),
        }
    }
    pub(super) fn parent(&self, d: Id) -> Id {
        match &self.node(d).body {
            Body::Dir { parent, .. } => *parent,
            _ => panic!("model node {d} is not a directory"),
        }
    }
    pub(super) fn file(&self, id: Id) -> &FileData {
        match &self.node(id).body {
            Body::File(f) => f,
            _ => panic!("model node {id} is not a file"),
        }
    }
    pub(super) fn file_mut(&mut self, id: Id) -> &mut FileData {
        match &mut self.node_mut(id).body {
            Body::File(f) => f,
            _ => panic!("model node {id} is not a file"),
        }
    }
    pub(super) fn lookup(&self, d: Id, name: &[u8]) -> Option<Id> {
        self.entries(d).get(name).copied()
    }
    pub(super) fn touch(&mut self, id: Id) {
        self.node_mut(id).times = None;
    }
    /// Whether `a` is `d` or one of its ancestors.
    pub(super) fn is_ancestor_or_self(&self, a: Id, mut d: Id) -> bool {
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
    pub(super) fn add(&mut self, ino: Ino, perm: u16, nlink: u32, body: Body) -> Id {
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
    pub(super) fn maybe_free(&mut self, id: Id) {
        let n = self.node(id);
        if n.nlink == 0 && n.open == 0 {
            let ino = n.ino;
            self.nodes.remove(&id);
            self.inos.remove(&ino);
        }
    }
    pub(super) fn data_blocks(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| match &n.body {
                Body::File(f) => f.alloc.len() as u64,
                _ => 0,
            })
            .sum()
    }
    pub(super) fn ids(&self, keep: impl Fn(&Node) -> bool) -> Vec<Id> {
        self.nodes
            .iter()
            .filter(|(&id, n)| id != self.lost_found && keep(n))
            .map(|(&id, _)| id)
            .collect()
    }
    /// Every entry (directory, name, child) except lost+found.
    pub(super) fn all_entries(&self) -> Vec<(Id, Vec<u8>, Id)> {
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
    pub(super) fn can_add(&self, dir: Id, name: &[u8]) -> Result<(), Error> {
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

pub(super) fn pick(v: &[Id], s: u16) -> Option<Id> {
    (!v.is_empty()).then(|| v[s as usize % v.len()])
}
