//! Owners and modes `mkfs` gives what it copies (`--all-root`, `-E root_owner`,
//! `--device-table`), applied as the walk makes each name: an entry is created with its
//! final owner and mode and the worker's attributes are those too, so nothing is
//! changed by a second pass. The table's entries the source tree lacks (directories,
//! devices, fifos, sockets) are made in the walk's sorted order, among the tree's names.

use super::*;
use crate::devtable::{Line, Node, Table};
use lanefs::FileType;

/// What `mkfs` changes of the tree it copies. Applied in this order: the tree's own
/// owners, `all_root`, `root_owner` (the root directory only), the table.
#[derive(Default)]
pub struct Overrides {
    /// Every entry owned by user and group 0 (`--all-root`).
    pub all_root: bool,
    /// The root directory's owner and group (`-E root_owner`).
    pub root_owner: Option<(u32, u32)>,
    /// A device table (`--device-table`).
    pub table: Option<Table>,
}

impl Overrides {
    /// The table's node of the image's root, if there is a table.
    pub(super) fn root_node(&self) -> Option<&Node> {
        self.table.as_ref().map(|t| &t.root)
    }
}

/// A name of a directory being copied, in sorted order: one the host listing has (with
/// the table's node for it, if any), or one only the table has.
pub(super) enum Item<'t> {
    Host(Listed, Option<&'t Node>),
    Table(Vec<u8>, &'t Node),
}

/// A host directory's sorted listing merged with the names its table node lists.
pub(super) fn merged(names: Vec<Listed>, node: Option<&Node>) -> Vec<Item<'_>> {
    let Some(node) = node.filter(|n| !n.children.is_empty()) else {
        return names.into_iter().map(|l| Item::Host(l, None)).collect();
    };
    let mut table = node.children.iter().peekable();
    let mut out = Vec::with_capacity(names.len() + node.children.len());
    for listed in names {
        while let Some((name, child)) = table.next_if(|(n, _)| n.as_slice() < &listed.name[..]) {
            out.push(Item::Table(name.clone(), child));
        }
        let child = table
            .next_if(|(n, _)| n.as_slice() == &listed.name[..])
            .map(|(_, c)| c);
        out.push(Item::Host(listed, child));
    }
    out.extend(table.map(|(n, c)| Item::Table(n.clone(), c)));
    out
}

/// The type `mode` (a host `st_mode`) gives.
fn kind_of(mode: u32) -> Option<FileType> {
    FileType::from_mode((mode & 0o170000) as u16)
}

impl Ctx<'_> {
    /// What host entry `meta`, at the table's `node` (if listed there) and shown as
    /// `shown`, becomes in the image: owned by root with `--all-root`, with the table
    /// line's owner, mode and device number where it has one. An error when the table
    /// says the entry is of another type.
    pub(super) fn shaped(
        &self,
        mut meta: Meta,
        node: Option<&Node>,
        shown: &str,
    ) -> CmdResult<Meta> {
        if self.over.all_root {
            meta.uid = 0;
            meta.gid = 0;
        }
        let (Some(table), Some(node)) = (&self.over.table, node) else {
            return Ok(meta);
        };
        table.judge(node, shown, kind_of(meta.mode))?;
        if let Some(l) = &node.line {
            given(&mut meta, l);
        }
        Ok(meta)
    }

    /// What the source directory's `meta` becomes for the image's root.
    pub(super) fn shaped_root(&self, mut meta: Meta) -> Meta {
        let perm;
        (perm, meta.uid, meta.gid) = self.over.root_ids(meta.perm(), meta.uid, meta.gid);
        meta.mode = (meta.mode & !0o7777) | u32::from(perm);
        meta
    }
}

impl Overrides {
    /// The permission bits and owner the image's root gets for `perm`, `uid` and `gid`
    /// (the source directory's, or those mkfs gave it): `--all-root`, then `-E
    /// root_owner`, then the table's `/` line.
    fn root_ids(&self, mut perm: u16, mut uid: u32, mut gid: u32) -> (u16, u32, u32) {
        if self.all_root {
            (uid, gid) = (0, 0);
        }
        if let Some(owner) = self.root_owner {
            (uid, gid) = owner;
        }
        if let Some(l) = self.root_node().and_then(|n| n.line.as_ref()) {
            (perm, uid, gid) = (l.perm, l.uid, l.gid);
        }
        (perm, uid, gid)
    }
}

/// Give `meta` the owner, permission bits and device number of table line `l`.
fn given(meta: &mut Meta, l: &Line) {
    meta.mode = (meta.mode & !0o7777) | u32::from(l.perm);
    meta.uid = l.uid;
    meta.gid = l.gid;
    if matches!(l.kind, FileType::CharDevice | FileType::BlockDevice) {
        meta.rdev = crate::hostsys::rdev_from_ext4(l.rdev());
    }
}

impl Copier<'_> {
    /// The image's root when there is no source tree (`mkfs` without `-d`): its owner
    /// and mode as `-E root_owner` and the table's `/` line say, and every entry of the
    /// table made.
    pub(super) fn no_tree(&self, shown: &str) -> CmdResult<()> {
        let fs = self.ctx.fs;
        if let Some(root) = self.ctx.over.root_node() {
            for (name, node) in &root.children {
                let child = join_display(shown, name);
                self.make_listed(lanefs::ROOT_INO, name, node, &child)?;
            }
        }
        let attr = fs.getattr(lanefs::ROOT_INO).ctx(shown)?;
        let had = (attr.perm, attr.uid, attr.gid);
        let (perm, uid, gid) = self.ctx.over.root_ids(had.0, had.1, had.2);
        if (perm, uid, gid) != had {
            let set = SetAttr {
                perm: Some(perm),
                uid: Some(uid),
                gid: Some(gid),
                ..SetAttr::default()
            };
            fs.setattr(lanefs::ROOT_INO, &set).ctx(shown)?;
        }
        Ok(())
    }

    /// Make `dir/name` (shown as `shown`), which only the table lists, and everything the
    /// table lists below it, in sorted order.
    pub(super) fn make_listed(
        &self,
        dir: Ino,
        name: &[u8],
        node: &Node,
        shown: &str,
    ) -> CmdResult<()> {
        let mut stack = Vec::new();
        if let Some(ino) = self.table_entry(dir, name, node, shown)? {
            stack.push((ino, node.children.iter(), shown.to_string()));
        }
        while let Some((dir, names, dir_shown)) = stack.last_mut() {
            let Some((name, child)) = names.next() else {
                stack.pop();
                continue;
            };
            let (dir, shown) = (*dir, join_display(dir_shown, name));
            if let Some(ino) = self.table_entry(dir, name, child, &shown)? {
                stack.push((ino, child.children.iter(), shown));
            }
        }
        Ok(())
    }

    /// Make one entry only the table lists (or give its line to what the image has there
    /// already, of the line's type: lost+found); the directory's inode when it is one.
    fn table_entry(
        &self,
        dir: Ino,
        name: &[u8],
        node: &Node,
        shown: &str,
    ) -> CmdResult<Option<Ino>> {
        let (fs, table) = (self.ctx.fs, self.table());
        let existing = self.existing(dir, name, shown)?;
        table.judge(node, shown, existing.as_ref().map(|a| a.kind))?;
        let Some(line) = &node.line else {
            // A directory the image has, below which the table lists more.
            return Ok(existing.map(|a| a.ino));
        };
        let owner = lanefs::Owner {
            uid: line.uid,
            gid: line.gid,
            umask: 0,
        };
        let attr = match existing {
            Some(a) => a,
            None if line.kind == FileType::Directory => {
                let a = fs.mkdir(dir, name, line.perm, owner).ctx(shown)?;
                self.made.borrow_mut().insert(a.ino);
                a
            }
            None => {
                let mode = u32::from(line.kind.mode_bits() | line.perm);
                fs.mknod(dir, name, mode, line.rdev(), owner).ctx(shown)?
            }
        };
        // A set-group-ID directory or a default ACL may have given it another group or
        // mode than the line's.
        if (attr.perm, attr.uid, attr.gid) != (line.perm, line.uid, line.gid) {
            let set = SetAttr {
                perm: Some(line.perm),
                uid: Some(line.uid),
                gid: Some(line.gid),
                ..SetAttr::default()
            };
            fs.setattr(attr.ino, &set).ctx(shown)?;
        }
        Ok((line.kind == FileType::Directory).then_some(attr.ino))
    }

    /// The device table (only asked for where it has a node).
    fn table(&self) -> &Table {
        self.ctx.over.table.as_ref().expect("a device table")
    }

    /// Whether a second name of a host file copied already (as `first`) may be linked at
    /// the table's `node`: a line there must give what the file has.
    pub(super) fn link_fits(
        &self,
        first: &Meta,
        node: Option<&Node>,
        shown: &str,
    ) -> CmdResult<()> {
        let Some(line) = node.and_then(|n| n.line.as_ref()) else {
            return Ok(());
        };
        if (first.perm(), first.uid, first.gid) == (line.perm, line.uid, line.gid) {
            return Ok(());
        }
        let why = format!(
            "{shown}: a hard link of a file copied already with another owner or mode \
             ({}:{} {:o}): list its names alike",
            first.uid,
            first.gid,
            first.perm()
        );
        Err(Failure::new(self.table().at(line.no), Error::msg(why)))
    }
}

/// Check the table against the source tree `src` (none: an image without `-d`) before
/// anything is formatted, so that a file it lists that the tree lacks, or a type the tree
/// contradicts, fails in one line and leaves what was there. The walk checks again.
pub fn precheck(src: Option<&Path>, table: &Table) -> CmdResult<()> {
    let top = match src {
        Some(p) => Some(HostDir::open_path(p).ctx(p.display())?),
        None => None,
    };
    let mut stack = vec![(top, &table.root, String::new())];
    while let Some((host, node, path)) = stack.pop() {
        for (name, child) in &node.children {
            let shown = format!("{path}/{}", String::from_utf8_lossy(name));
            let st = match &host {
                Some(h) => h.lstat(OsStr::from_bytes(name)).ctx(&shown)?,
                None => None,
            };
            let kind = st.and_then(|s| kind_of(s.st_mode));
            table.judge(child, &shown, kind)?;
            if child.children.is_empty() {
                continue;
            }
            let below = match (&host, kind) {
                (Some(h), Some(FileType::Directory)) => {
                    let at = src.map(|s| s.join(&shown[1..])).unwrap_or_default();
                    Some(h.open_dir(OsStr::from_bytes(name)).ctx(at.display())?)
                }
                _ => None,
            };
            stack.push((below, child, shown));
        }
    }
    Ok(())
}
