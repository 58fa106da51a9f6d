//! `mkfs -d DIR --size min`: what the tree needs of the file system, from a walk of the
//! host tree before anything is formatted (`lanefs::mkfs::TreeNeeds`), and the budget
//! that holds the copy to it: a tree that grows while the image is built fails with an
//! error naming what grew, never a half-filled image.

use super::*;
use crate::devtable::Node;
use lanefs::mkfs::TreeNeeds;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the tree at `src` (and the device table's additions) needs, counted as the copy
/// would make it: one inode per host inode, each name in its directory, each file's
/// data runs (a file with fewer blocks than its size is mapped with SEEK_DATA), each
/// symlink's target, each entry's xattrs.
pub fn measure(src: Option<&Path>, over: &Overrides) -> CmdResult<TreeNeeds> {
    let mut needs = TreeNeeds::new();
    let table = over.root_node();
    let Some(src) = src else {
        for (name, child) in table.iter().flat_map(|root| &root.children) {
            needs.entry(0, name.len());
            table_only(child, &mut needs);
        }
        return Ok(needs);
    };
    let root = HostDir::open_path_readable(src).ctx(src.display())?;
    let root_xattrs = xattr_sizes(
        || hostdir::xattr_names_fd(&root),
        |k| hostdir::xattr_fd(&root, k),
    );
    needs.xattrs(root_xattrs.ctx(src.display())?);
    let mut links = HashSet::new();
    let mut stack = vec![(root, src.to_path_buf(), 0usize, table, None::<Rc<Chain>>)];
    while let Some((dir, path, index, node, up)) = stack.pop() {
        let st = dir.stat().ctx(path.display())?;
        let here = (st.st_dev, st.st_ino);
        if Chain::holds(&up, here) {
            // A directory inside itself (a bind mount of an ancestor): the copy refuses
            // it with its own error. The same directory twice elsewhere is copied, and
            // counted, twice.
            continue;
        }
        let chain = Some(Rc::new(Chain { id: here, up }));
        let listing = dir.listing().ctx(path.display())?;
        for item in merged(listing, node) {
            let (listed, child_node) = match item {
                Item::Host(listed, node) => (listed, node),
                Item::Table(name, node) => {
                    needs.entry(index, name.len());
                    table_only(node, &mut needs);
                    continue;
                }
            };
            let name = OsStr::from_bytes(&listed.name);
            let child = path.join(name);
            let Some(meta) = dir.lstat(name).ctx(child.display())?.map(Meta::from) else {
                continue; // removed since it was listed: the copy skips it too
            };
            needs.entry(index, listed.name.len());
            if meta.kind != HostType::Directory
                && meta.nlink > 1
                && !links.insert((meta.dev, meta.ino))
            {
                continue; // a hard link to an inode counted already
            }
            needs.inode();
            let sizes = xattr_sizes(|| dir.xattr_names_at(name), |k| dir.xattr_at(name, k));
            needs.xattrs(sizes.ctx(child.display())?);
            match meta.kind {
                HostType::Directory => {
                    let sub = dir.open_dir(name).ctx(child.display())?;
                    let sub_index = needs.dir();
                    stack.push((sub, child, sub_index, child_node, chain.clone()));
                }
                HostType::RegularFile => needs.file(runs(&dir, name, &meta).ctx(child.display())?),
                // Some file systems (procfs, some FUSE ones) give a symlink size 0.
                HostType::Symlink if meta.size == 0 => {
                    let target = dir.read_link(name).ctx(child.display())?;
                    needs.symlink(target.len());
                }
                HostType::Symlink => needs.symlink(meta.size as usize),
                _ => {}
            }
        }
    }
    Ok(needs)
}

/// The directories from the root down to one being walked (device and inode numbers).
struct Chain {
    id: (u64, u64),
    up: Option<Rc<Chain>>,
}

impl Chain {
    /// Whether `id` is one of the directories of `chain`.
    fn holds(chain: &Option<Rc<Chain>>, id: (u64, u64)) -> bool {
        let mut at = chain.as_deref();
        while let Some(c) = at {
            if c.id == id {
                return true;
            }
            at = c.up.as_deref();
        }
        false
    }
}

/// Count a table node the tree lacks and what it lists below it (its own name is
/// counted by the caller).
fn table_only(node: &Node, needs: &mut TreeNeeds) {
    needs.inode();
    let is_dir = node
        .line
        .as_ref()
        .is_none_or(|l| l.kind == FileType::Directory);
    if !is_dir {
        return;
    }
    let index = needs.dir();
    for (name, child) in &node.children {
        needs.entry(index, name.len());
        table_only(child, needs);
    }
}

/// The data runs of regular file `name`: all of it when its blocks cover its size,
/// else what SEEK_DATA finds.
fn runs(dir: &HostDir, name: &OsStr, meta: &Meta) -> std::io::Result<Vec<(u64, u64)>> {
    let st_blocks_cover = meta.blocks * 512 >= meta.size;
    if st_blocks_cover || meta.size == 0 {
        return Ok(vec![(0, meta.size)]);
    }
    let file = dir.open_read(name)?;
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(start) = seek_data_hole(&file, pos, false)? {
        let end = seek_data_hole(&file, start, true)?
            .unwrap_or(meta.size)
            .max(start);
        if end <= start {
            break;
        }
        out.push((start, end - start));
        pos = end;
    }
    Ok(out)
}

/// Each xattr's name length and value length.
fn xattr_sizes(
    names: impl FnOnce() -> std::io::Result<Vec<Vec<u8>>>,
    value: impl Fn(&[u8]) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<Vec<(usize, usize)>> {
    let names = match names() {
        Ok(n) => n,
        // A file system without xattrs has none to copy.
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    names
        .into_iter()
        .map(|n| Ok((n.len(), value(&n)?.len())))
        .collect()
}

/// What the copy may still write when the image was sized for the tree: the data
/// bytes and inodes the walk counted. Spending past them means the tree grew.
pub struct Budget {
    bytes: AtomicU64,
    inodes: AtomicU64,
}

impl Budget {
    /// The budget of `needs`.
    pub fn of(needs: &TreeNeeds) -> Budget {
        Budget {
            bytes: AtomicU64::new(needs.data_bytes()),
            inodes: AtomicU64::new(needs.inodes()),
        }
    }

    /// Spend `n` bytes of data for `what`.
    pub(super) fn bytes(&self, n: u64, what: &dyn std::fmt::Display) -> CmdResult<()> {
        Self::spend(&self.bytes, n, what, "data")
    }

    /// Spend one inode for `what`.
    pub(super) fn inode(&self, what: &dyn std::fmt::Display) -> CmdResult<()> {
        Self::spend(&self.inodes, 1, what, "files")
    }

    fn spend(left: &AtomicU64, n: u64, what: &dyn std::fmt::Display, kind: &str) -> CmdResult<()> {
        let taken = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(n));
        taken.map(|_| ()).map_err(|_| {
            let msg = format!(
                "the tree grew while the image was built (more {kind} than when it was \
                 sized); build again, or give --size"
            );
            Failure::new(what, Error::msg(msg))
        })
    }
}
