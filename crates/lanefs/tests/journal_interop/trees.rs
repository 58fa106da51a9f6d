//! Trees: what a walk sees, keyed by absolute path. A kernel mount (read-only, `noload`, so
//! the kernel never replays on its own) and a mounted lanefs are walked into `Node`s (kind,
//! permissions, link count, size, a hash of the content); two trees are compared path by
//! path, and `durable` keeps the part an fsync covered (all but `/u`).

use super::*;

// ---------------------------------------------------------------------------------------
// Trees: what a walk sees, keyed by absolute path ("/" is the root).

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Node {
    kind: String,
    perm: u32,
    nlink: u64,
    size: u64,
    /// Hash of a file's bytes or a symlink's target; 0 otherwise.
    digest: u64,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:04o} nlink {} size {}",
            self.kind, self.perm, self.nlink, self.size
        )?;
        if self.digest != 0 {
            write!(f, " hash {:016x}", self.digest)?;
        }
        Ok(())
    }
}

pub(super) type Tree = BTreeMap<String, Node>;

fn child(key: &str, name: &str) -> String {
    if key == "/" {
        format!("/{name}")
    } else {
        format!("{key}/{name}")
    }
}

fn error_node(what: String) -> Node {
    Node {
        kind: what,
        perm: 0,
        nlink: 0,
        size: 0,
        digest: 0,
    }
}

/// Walk a directory through the host (a kernel mount). Errors become nodes.
pub(super) fn walk_host(root: &Path) -> Tree {
    let mut t = Tree::new();
    walk_host_at(root, "/", &mut t);
    t
}

fn walk_host_at(p: &Path, key: &str, t: &mut Tree) {
    let md = match std::fs::symlink_metadata(p) {
        Ok(md) => md,
        Err(e) => {
            t.insert(key.into(), error_node(format!("(stat error: {e})")));
            return;
        }
    };
    let ft = md.file_type();
    let (kind, digest) = if ft.is_dir() {
        ("dir".to_string(), 0)
    } else if ft.is_symlink() {
        match std::fs::read_link(p) {
            Ok(l) => ("symlink".into(), hash_bytes(l.as_os_str().as_bytes())),
            Err(e) => (format!("symlink (readlink error: {e})"), 0),
        }
    } else if ft.is_file() {
        match std::fs::read(p) {
            Ok(b) => ("file".into(), hash_bytes(&b)),
            Err(e) => (format!("file (read error: {e})"), 0),
        }
    } else {
        ("other".into(), 0)
    };
    t.insert(
        key.into(),
        Node {
            kind,
            perm: md.mode() & 0o7777,
            nlink: md.nlink(),
            size: md.len(),
            digest,
        },
    );
    if ft.is_dir() {
        let entries = match std::fs::read_dir(p) {
            Ok(r) => r,
            Err(e) => {
                t.insert(
                    child(key, "(readdir)"),
                    error_node(format!("(readdir error: {e})")),
                );
                return;
            }
        };
        let mut names: Vec<_> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for n in names {
            walk_host_at(&p.join(&n), &child(key, &n.to_string_lossy()), t);
        }
    }
}

/// Mount `img` read-only without loading the journal (the kernel must not replay on its
/// own), walk it, unmount.
pub(super) fn kernel_walk(img: &Path, mnt: &Path) -> Result<Tree, String> {
    let km = KernelMount::mount(img, mnt, "ro,noload")?;
    let t = walk_host(mnt);
    km.unmount()?;
    Ok(t)
}

fn kind_name(k: FileType) -> &'static str {
    match k {
        FileType::Regular => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    }
}

fn lanefs_read_all(fs: &Fs, ino: Ino, size: u64) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; size as usize];
    let mut off = 0usize;
    while off < out.len() {
        let end = (off + (1 << 20)).min(out.len());
        let n = fs
            .read(ino, off as u64, &mut out[off..end])
            .map_err(|e| format!("read at {off}: {e}"))?;
        if n == 0 {
            return Err(format!("short read at {off} of {size}"));
        }
        off += n;
    }
    Ok(out)
}

/// Walk a mounted lanefs. Errors become nodes.
pub(super) fn walk_lanefs(fs: &Fs) -> Tree {
    let mut t = Tree::new();
    match fs.getattr(ROOT_INO) {
        Ok(a) => {
            t.insert(
                "/".into(),
                Node {
                    kind: "dir".into(),
                    perm: u32::from(a.perm),
                    nlink: u64::from(a.nlink),
                    size: a.size,
                    digest: 0,
                },
            );
            walk_lanefs_dir(fs, ROOT_INO, "/", &mut t);
        }
        Err(e) => {
            t.insert("/".into(), error_node(format!("(getattr error: {e})")));
        }
    }
    t
}

fn walk_lanefs_dir(fs: &Fs, dir: Ino, key: &str, t: &mut Tree) {
    let mut pos = 0;
    let mut entries = Vec::new();
    loop {
        match fs.readdir(dir, pos, 512) {
            Ok(v) if v.is_empty() => break,
            Ok(v) => {
                for e in v {
                    pos = e.next;
                    if e.name != b"." && e.name != b".." {
                        entries.push(e);
                    }
                }
            }
            Err(e) => {
                t.insert(
                    child(key, "(readdir)"),
                    error_node(format!("(readdir error: {e})")),
                );
                break;
            }
        }
    }
    for e in entries {
        let k = child(key, &String::from_utf8_lossy(&e.name));
        let a = match fs.lookup(dir, &e.name) {
            Ok(a) => a,
            Err(err) => {
                t.insert(k, error_node(format!("(lookup error: {err})")));
                continue;
            }
        };
        let (kind, digest) = match a.kind {
            FileType::Regular => match lanefs_read_all(fs, a.ino, a.size) {
                Ok(b) => ("file".to_string(), hash_bytes(&b)),
                Err(err) => (format!("file ({err})"), 0),
            },
            FileType::Symlink => match fs.readlink(a.ino) {
                Ok(l) => ("symlink".into(), hash_bytes(&l)),
                Err(err) => (format!("symlink (readlink error: {err})"), 0),
            },
            k => (kind_name(k).to_string(), 0),
        };
        t.insert(
            k.clone(),
            Node {
                kind,
                perm: u32::from(a.perm),
                nlink: u64::from(a.nlink),
                size: a.size,
                digest,
            },
        );
        if a.kind == FileType::Directory {
            walk_lanefs_dir(fs, a.ino, &k, t);
        }
    }
}

/// Every path that differs between two trees, one line each.
pub(super) fn diff_trees(an: &str, a: &Tree, bn: &str, b: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (p, x) in a {
        match b.get(p) {
            None => out.push(format!("{p}: {an} has {x}, {bn} has nothing")),
            Some(y) if x != y => out.push(format!("{p}: {an} has {x}, {bn} has {y}")),
            _ => {}
        }
    }
    for (p, y) in b {
        if !a.contains_key(p) {
            out.push(format!("{p}: {an} has nothing, {bn} has {y}"));
        }
    }
    out
}

/// Differences between the tree at the last fsync and what `who` shows, outside `/u`.
pub(super) fn diff_durable(model: &Tree, who: &str, t: &Tree) -> Vec<String> {
    diff_trees("the model", &durable(model), who, &durable(t))
}

/// The part of a tree that fsync made durable: `/u` holds the changes made after the last
/// fsync, which a crash may or may not keep (so its entries and size are not compared).
fn durable(t: &Tree) -> Tree {
    t.iter()
        .filter(|(p, _)| !p.starts_with("/u/"))
        .map(|(p, n)| {
            let mut n = n.clone();
            if p == "/u" {
                n.size = 0;
            }
            (p.clone(), n)
        })
        .collect()
}

static MNT_SEQ: AtomicUsize = AtomicUsize::new(0);

pub(super) fn fresh_mnt(td: &Path) -> PathBuf {
    td.join(format!("mnt{}", MNT_SEQ.fetch_add(1, Ordering::Relaxed)))
}
