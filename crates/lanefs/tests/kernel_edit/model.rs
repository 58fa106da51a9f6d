//! The model of the differential run: what each path must be (`Node`; a regular file's
//! data, mode and link count in a `FileObj` its hard links share), the operations either side
//! does (`Op`, printed with long paths shortened), the path helpers, and `Model::apply`,
//! which does an operation in the model.

use super::*;

// ---------------------------------------------------------------------------------------
// (2) The class: every structure either side builds, edited by the other.
//
// Paths are absolute ("/h/name"); the root itself is not in the model, and "lost+found"
// is left out of both views.

pub(super) const BS: u64 = 4096;
/// Largest size a random write, truncate or fallocate gives a file.
pub(super) const MAX_SIZE: u64 = 24 << 20;
/// The most long names in /big and /big2 (a stop for the loops growing their index).
pub(super) const BIG_LIMIT: usize = 20_000;

/// What the model expects at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Node {
    Dir {
        perm: u16,
    },
    /// A regular file: its inode in `Model::files` (shared by hard links).
    File {
        fid: u64,
    },
    Symlink {
        target: Vec<u8>,
    },
    /// A FIFO (`rdev` 0) or a character or block device.
    Special {
        kind: FileType,
        rdev: u64,
        perm: u16,
    },
}

#[derive(Clone, Debug)]
pub(super) struct FileObj {
    pub(super) perm: u16,
    pub(super) data: Vec<u8>,
    pub(super) links: u32,
}

#[derive(Default)]
pub(super) struct Model {
    pub(super) tree: BTreeMap<String, Node>,
    pub(super) files: BTreeMap<u64, FileObj>,
    next_fid: u64,
}

/// One operation, done by either side.
#[derive(Clone)]
pub(super) enum Op {
    Create {
        path: String,
        perm: u16,
        data: Vec<u8>,
    },
    Mkdir {
        path: String,
        perm: u16,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
    },
    Mknod {
        path: String,
        kind: FileType,
        rdev: u64,
        perm: u16,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink {
        path: String,
    },
    Rmdir {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
    Write {
        path: String,
        off: u64,
        data: Vec<u8>,
    },
    Truncate {
        path: String,
        size: u64,
    },
    /// fallocate: allocate (unwritten), with or without keeping the size, or punch.
    Falloc {
        path: String,
        off: u64,
        len: u64,
        keep_size: bool,
        punch: bool,
    },
    Chmod {
        path: String,
        perm: u16,
    },
    /// fsync of a file, or (no path) a whole-file-system sync; nothing the model sees.
    Sync {
        path: Option<String>,
    },
}

pub(super) fn short(p: &str) -> String {
    let n = p.chars().count();
    if n > 40 {
        let head: String = p.chars().take(28).collect();
        let tail: String = p.chars().skip(n - 6).collect();
        format!("{head}..{tail}({}B)", p.len())
    } else {
        p.to_string()
    }
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Create { path, perm, data } => {
                write!(f, "create {} {perm:o} {} B", short(path), data.len())
            }
            Op::Mkdir { path, perm } => write!(f, "mkdir {} {perm:o}", short(path)),
            Op::Symlink { path, target } => {
                write!(f, "symlink {} -> {} B", short(path), target.len())
            }
            Op::Mknod {
                path, kind, rdev, ..
            } => write!(f, "mknod {} {kind:?} {rdev:#x}", short(path)),
            Op::Link { from, to } => write!(f, "link {} {}", short(from), short(to)),
            Op::Unlink { path } => write!(f, "unlink {}", short(path)),
            Op::Rmdir { path } => write!(f, "rmdir {}", short(path)),
            Op::Rename { from, to } => write!(f, "rename {} {}", short(from), short(to)),
            Op::Write { path, off, data } => {
                write!(f, "write {} @{off} {} B", short(path), data.len())
            }
            Op::Truncate { path, size } => write!(f, "truncate {} {size}", short(path)),
            Op::Falloc {
                path,
                off,
                len,
                keep_size,
                punch,
            } => write!(
                f,
                "fallocate{}{} {} @{off} +{len}",
                if *punch { " punch" } else { "" },
                if *keep_size { " keep" } else { "" },
                short(path)
            ),
            Op::Chmod { path, perm } => write!(f, "chmod {} {perm:o}", short(path)),
            Op::Sync { path: Some(p) } => write!(f, "fsync {}", short(p)),
            Op::Sync { path: None } => write!(f, "sync"),
        }
    }
}

pub(super) fn parent_of(path: &str) -> &str {
    &path[..path.rfind('/').expect("absolute path")]
}

pub(super) fn name_of(path: &str) -> &str {
    &path[path.rfind('/').expect("absolute path") + 1..]
}

/// Whether `path` is `dir` or below it.
pub(super) fn within(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

impl Model {
    pub(super) fn get(&self, path: &str) -> Option<&Node> {
        self.tree.get(path)
    }
    pub(super) fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || matches!(self.tree.get(path), Some(Node::Dir { .. }))
    }
    fn file(&self, path: &str) -> &FileObj {
        match self.tree.get(path) {
            Some(Node::File { fid }) => &self.files[fid],
            other => panic!("model: {path} is not a file ({other:?})"),
        }
    }
    fn file_mut(&mut self, path: &str) -> &mut FileObj {
        match self.tree.get(path) {
            Some(Node::File { fid }) => self.files.get_mut(fid).expect("file object"),
            other => panic!("model: {path} is not a file ({other:?})"),
        }
    }
    pub(super) fn size(&self, path: &str) -> u64 {
        self.file(path).data.len() as u64
    }
    /// Paths strictly below `dir` ("" for the root).
    pub(super) fn below<'a>(
        &'a self,
        dir: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        let prefix = format!("{dir}/");
        self.tree
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
    }
    /// Names directly in `dir`.
    pub(super) fn children<'a>(
        &'a self,
        dir: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        let depth = dir.len() + 1;
        self.below(dir)
            .filter(move |(k, _)| !k[depth..].contains('/'))
    }
    pub(super) fn is_empty_dir(&self, dir: &str) -> bool {
        self.below(dir).next().is_none()
    }
    fn drop_ref(&mut self, node: Node) {
        if let Node::File { fid } = node {
            let f = self.files.get_mut(&fid).expect("file object");
            f.links -= 1;
            if f.links == 0 {
                self.files.remove(&fid);
            }
        }
    }

    pub(super) fn apply(&mut self, op: &Op) {
        match op {
            Op::Create { path, perm, data } => {
                self.next_fid += 1;
                let fid = self.next_fid;
                self.files.insert(
                    fid,
                    FileObj {
                        perm: *perm,
                        data: data.clone(),
                        links: 1,
                    },
                );
                self.tree.insert(path.clone(), Node::File { fid });
            }
            Op::Mkdir { path, perm } => {
                self.tree.insert(path.clone(), Node::Dir { perm: *perm });
            }
            Op::Symlink { path, target } => {
                self.tree.insert(
                    path.clone(),
                    Node::Symlink {
                        target: target.clone(),
                    },
                );
            }
            Op::Mknod {
                path,
                kind,
                rdev,
                perm,
            } => {
                let n = Node::Special {
                    kind: *kind,
                    rdev: *rdev,
                    perm: *perm,
                };
                self.tree.insert(path.clone(), n);
            }
            Op::Link { from, to } => {
                let n = self.tree[from].clone();
                if let Node::File { fid } = n {
                    self.files.get_mut(&fid).expect("file object").links += 1;
                }
                self.tree.insert(to.clone(), n);
            }
            Op::Unlink { path } | Op::Rmdir { path } => {
                let n = self.tree.remove(path).expect("model: path exists");
                self.drop_ref(n);
            }
            Op::Rename { from, to } => {
                let src = self.tree[from].clone();
                if let (Node::File { fid: a }, Some(Node::File { fid: b })) = (&src, self.get(to)) {
                    if a == b {
                        return; // two names of one inode: rename does nothing
                    }
                }
                if let Some(old) = self.tree.remove(to) {
                    self.drop_ref(old);
                }
                let moved: Vec<String> = self.below(from).map(|(k, _)| k.clone()).collect();
                self.tree.remove(from);
                self.tree.insert(to.clone(), src);
                for k in moved {
                    let n = self.tree.remove(&k).expect("moved path");
                    self.tree.insert(format!("{to}{}", &k[from.len()..]), n);
                }
            }
            Op::Write { path, off, data } => {
                let f = self.file_mut(path);
                let end = *off as usize + data.len();
                if f.data.len() < end {
                    f.data.resize(end, 0);
                }
                f.data[*off as usize..end].copy_from_slice(data);
            }
            Op::Truncate { path, size } => self.file_mut(path).data.resize(*size as usize, 0),
            Op::Falloc {
                path,
                off,
                len,
                keep_size,
                punch,
            } => {
                let f = self.file_mut(path);
                let size = f.data.len() as u64;
                if *punch {
                    let end = (off + len).min(size);
                    if *off < end {
                        f.data[*off as usize..end as usize].fill(0);
                    }
                } else if !keep_size && off + len > size {
                    f.data.resize((off + len) as usize, 0);
                }
            }
            Op::Chmod { path, perm } => match self.tree.get_mut(path) {
                Some(Node::Dir { perm: p }) | Some(Node::Special { perm: p, .. }) => *p = *perm,
                Some(Node::File { fid }) => {
                    let fid = *fid;
                    self.files.get_mut(&fid).expect("file object").perm = *perm;
                }
                other => panic!("model: chmod of {other:?}"),
            },
            Op::Sync { .. } => {}
        }
    }
}
