//! Writing an archive's members into the image, in archive order on one thread: every
//! block and inode is allocated in that order, so a reproducible build gives the same
//! bytes run to run. Directories get their xattrs and attributes after the last member
//! (a default ACL set earlier would be inherited by what the archive puts below it, and
//! every name added would stamp the directory's times); the device table's entries the
//! archive lacks are made just before.

use super::super::{nonzero_pieces, Copier, Meta, CHUNK};
use super::members::{Kind, Member, Members, Problem};
use super::pax::Record;
use crate::devtable::Node;
use crate::error::{CmdResult, Context, Error, Failure};
use crate::hostdir::HostType;
use crate::session::join_display;
use lanefs::{FileType, Ino, SetAttr, XattrFlags, ROOT_INO};
use std::collections::{HashMap, HashSet};
use std::io::Read;

/// A directory whose xattrs and attributes are set at the end.
struct Later {
    ino: Ino,
    path: Vec<u8>,
    meta: Meta,
    xattrs: Vec<Record>,
    /// Removed since (replaced by a non-directory).
    gone: bool,
}

/// One build from one archive.
pub(super) struct Build<'c, 'a, R> {
    copier: &'c Copier<'a>,
    members: Members<R>,
    /// The archive as messages name it.
    archive: String,
    /// The image's root as messages name it (`IMAGE:/`).
    image: String,
    /// The image's directories by path from the root (the root is "").
    dirs: HashMap<Vec<u8>, Ino>,
    later: Vec<Later>,
    later_at: HashMap<Ino, usize>,
    /// Paths whose device-table node was applied as the archive made them.
    seen: HashSet<Vec<u8>>,
    root_seen: bool,
    buf: Vec<u8>,
    /// Archive bytes counted on the progress bar.
    counted: u64,
}

/// The last name of `path` and the path of its directory.
fn split_last(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What the archive says of `m`, as the copy of a host entry describes one.
fn meta_of(m: &Member) -> Meta {
    let (kind, rdev) = match m.kind {
        Kind::Regular | Kind::HardLink(_) => (HostType::RegularFile, 0),
        Kind::Directory => (HostType::Directory, 0),
        Kind::Symlink(_) => (HostType::Symlink, 0),
        Kind::CharDevice(ma, mi) => (HostType::CharacterDevice, libc::makedev(ma, mi)),
        Kind::BlockDevice(ma, mi) => (HostType::BlockDevice, libc::makedev(ma, mi)),
        Kind::Fifo => (HostType::Fifo, 0),
    };
    Meta {
        kind,
        mode: kind.as_raw_mode() | u32::from(m.perm),
        uid: m.uid,
        gid: m.gid,
        nlink: 1,
        dev: 0,
        ino: 0,
        rdev,
        size: m.size,
        blocks: 0,
        // Without an access time in the archive, the modification time.
        atime: m.atime.unwrap_or(m.mtime),
        mtime: m.mtime,
    }
}

impl<'c, 'a, R: Read> Build<'c, 'a, R> {
    pub(super) fn new(
        copier: &'c Copier<'a>,
        members: Members<R>,
        archive: String,
        image: String,
    ) -> Self {
        Build {
            copier,
            members,
            archive,
            image,
            dirs: HashMap::from([(Vec::new(), ROOT_INO)]),
            later: Vec::new(),
            later_at: HashMap::new(),
            seen: HashSet::new(),
            root_seen: false,
            buf: vec![0u8; CHUNK],
            counted: 0,
        }
    }

    /// A failure about member `name`.
    fn fail(&self, name: &[u8], why: impl std::fmt::Display) -> Failure {
        let text = format!("member {:?}: {why}", lossy(name));
        Failure::new(&self.archive, Error::Msg(text))
    }

    fn problem(&self, p: Problem) -> Failure {
        Failure::new(&self.archive, Error::Msg(p.to_string()))
    }

    fn shown(&self, path: &[u8]) -> String {
        join_display(&self.image, path)
    }

    /// Build the image from every member, then the table's own entries, then the
    /// directories' attributes.
    pub(super) fn run(mut self) -> CmdResult<()> {
        loop {
            let next = self.members.next().map_err(|p| self.problem(p))?;
            let Some(m) = next else { break };
            self.member(m)?;
            let now = self.members.offset();
            self.copier.ctx.progress.add(now - self.counted);
            self.counted = now;
        }
        self.table_rest()?;
        self.finish_dirs()
    }

    /// The table's node at `path`, if there is a table and it lists the path.
    fn node(&self, path: &[u8]) -> Option<&'a Node> {
        let mut node = &self.copier.ctx.over.table.as_ref()?.root;
        for part in path.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
            node = node.children.get(part)?;
        }
        Some(node)
    }

    /// What `meta` becomes at `path` with `--all-root` and the table.
    fn shape(&mut self, meta: Meta, path: &[u8], shown: &str) -> CmdResult<Meta> {
        let node = self.node(path);
        if node.is_some() {
            self.seen.insert(path.to_vec());
        }
        self.copier.ctx.shaped(meta, node, shown)
    }

    /// The image directory at `path`, made (0755, owned by 0:0, as the table and
    /// `--all-root` say) where missing when `make`; `None` if missing otherwise. An
    /// error naming `member` when the path goes through a symlink or a non-directory.
    fn dir(&mut self, path: &[u8], member: &[u8], make: bool) -> CmdResult<Option<Ino>> {
        if let Some(&ino) = self.dirs.get(path) {
            return Ok(Some(ino));
        }
        let fs = self.copier.ctx.fs;
        let mut cur = ROOT_INO;
        let mut start = 0;
        while start < path.len() {
            let end = path[start..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(path.len(), |i| start + i);
            let (prefix, name) = (&path[..end], &path[start..end]);
            start = end + 1;
            if let Some(&ino) = self.dirs.get(prefix) {
                cur = ino;
                continue;
            }
            let shown = self.shown(prefix);
            cur = match fs.lookup(cur, name) {
                Ok(a) if a.kind == FileType::Directory => a.ino,
                Ok(a) if a.kind == FileType::Symlink => {
                    let why = format!(
                        "its path goes through the symlink {:?} (not followed)",
                        lossy(prefix)
                    );
                    return Err(self.fail(member, why));
                }
                Ok(_) => {
                    let why = format!("{:?} is not a directory", lossy(prefix));
                    return Err(self.fail(member, why));
                }
                Err(lanefs::Error::NotFound) if make => {
                    let meta = Meta {
                        kind: HostType::Directory,
                        mode: HostType::Directory.as_raw_mode() | 0o755,
                        uid: 0,
                        gid: 0,
                        nlink: 1,
                        dev: 0,
                        ino: 0,
                        rdev: 0,
                        size: 0,
                        blocks: 0,
                        atime: lanefs::Timespec::default(),
                        mtime: lanefs::Timespec::default(),
                    };
                    let meta = self.shape(meta, prefix, &shown)?;
                    let a = fs.mkdir(cur, name, meta.perm(), meta.owner()).ctx(&shown)?;
                    self.owned_as(&a, &meta, &shown)?;
                    a.ino
                }
                Err(lanefs::Error::NotFound) => return Ok(None),
                Err(e) => return Err(self.fail(member, e)),
            };
            self.dirs.insert(prefix.to_vec(), cur);
        }
        Ok(Some(cur))
    }

    /// Give `a` the mode and owner of `meta` where a set-group-ID directory gave it others.
    fn owned_as(&self, a: &lanefs::Attr, meta: &Meta, shown: &str) -> CmdResult<()> {
        if (a.perm, a.uid, a.gid) == (meta.perm(), meta.uid, meta.gid) {
            return Ok(());
        }
        let set = SetAttr {
            perm: Some(meta.perm()),
            uid: Some(meta.uid),
            gid: Some(meta.gid),
            ..SetAttr::default()
        };
        self.copier.ctx.fs.setattr(a.ino, &set).ctx(shown)?;
        Ok(())
    }

    /// Make member `m`.
    fn member(&mut self, m: Member) -> CmdResult<()> {
        if m.path.is_empty() {
            let meta = self.copier.ctx.shaped_root(meta_of(&m));
            self.root_seen = true;
            self.later_dir(ROOT_INO, Vec::new(), meta, m.xattrs);
            return Ok(());
        }
        let (parent, name) = split_last(&m.path);
        let dir = self.dir(parent, &m.name, true)?.expect("made");
        let shown = self.shown(&m.path);
        if let Kind::HardLink(target) = &m.kind {
            return self.hard_link(&m, target, dir, name, &shown);
        }
        let meta = self.shape(meta_of(&m), &m.path, &shown)?;
        let fs = self.copier.ctx.fs;
        let existing = match fs.lookup(dir, name) {
            Ok(a) => Some(a),
            Err(lanefs::Error::NotFound) => None,
            Err(e) => return Err(self.fail(&m.name, e)),
        };
        if m.kind == Kind::Directory {
            match existing {
                // As `tar x`: an existing directory only takes the member's attributes.
                Some(a) if a.kind == FileType::Directory => {
                    self.dirs.insert(m.path.clone(), a.ino);
                    self.later_dir(a.ino, m.path, meta, m.xattrs);
                    return Ok(());
                }
                Some(a) => self.remove(dir, name, &a, &m)?,
                None => {}
            }
            let a = fs
                .mkdir(dir, name, meta.perm(), meta.owner())
                .map_err(|e| self.fail(&m.name, e))?;
            self.dirs.insert(m.path.clone(), a.ino);
            self.later_dir(a.ino, m.path, meta, m.xattrs);
            return Ok(());
        }
        if let Some(a) = existing {
            self.remove(dir, name, &a, &m)?;
        }
        let made = match &m.kind {
            Kind::Regular => self.file(&m, &meta, dir, name, &shown),
            Kind::Symlink(target) => fs
                .symlink(dir, name, target, meta.owner())
                .map(|a| a.ino)
                .map_err(|e| self.fail(&m.name, e)),
            _ => {
                let rdev = crate::hostsys::rdev_to_ext4(meta.rdev);
                fs.mknod(dir, name, meta.mode, rdev, meta.owner())
                    .map(|a| a.ino)
                    .map_err(|e| self.fail(&m.name, e))
            }
        };
        let ino = made?;
        self.attributes(ino, &meta, &m.xattrs, &shown)
    }

    /// Give `ino` the owner, mode and times of `meta`, then the xattrs `xattrs`, as `tar
    /// x` does: an access ACL then decides the group bits (libarchive writes the owning
    /// group's there, GNU tar the mask's), and no time moves (an xattr stamps the change
    /// time only).
    fn attributes(&self, ino: Ino, meta: &Meta, xattrs: &[Record], shown: &str) -> CmdResult<()> {
        let path = std::path::Path::new(&self.archive);
        self.copier.ctx.finish(None, path, ino, meta, shown)?;
        self.xattrs(ino, xattrs, shown)
    }

    /// Remove what `dir/name` holds (`a`) for member `m`, as `tar x` does: a directory
    /// only when empty.
    fn remove(&mut self, dir: Ino, name: &[u8], a: &lanefs::Attr, m: &Member) -> CmdResult<()> {
        let fs = self.copier.ctx.fs;
        if a.kind != FileType::Directory {
            return fs.unlink(dir, name).map_err(|e| self.fail(&m.name, e));
        }
        match fs.rmdir(dir, name) {
            Ok(()) => {}
            Err(lanefs::Error::NotEmpty) => {
                let why = "replaces a directory that is not empty";
                return Err(self.fail(&m.name, why));
            }
            Err(e) => return Err(self.fail(&m.name, e)),
        }
        self.dirs.remove(&m.path);
        if let Some(&i) = self.later_at.get(&a.ino) {
            self.later[i].gone = true;
        }
        self.later_at.remove(&a.ino);
        Ok(())
    }

    /// Note directory `ino` (at `path`) for its attributes at the end; a later member for
    /// it replaces what an earlier one said.
    fn later_dir(&mut self, ino: Ino, path: Vec<u8>, meta: Meta, xattrs: Vec<Record>) {
        let entry = Later {
            ino,
            path,
            meta,
            xattrs,
            gone: false,
        };
        match self.later_at.get(&ino) {
            Some(&i) => self.later[i] = entry,
            None => {
                self.later_at.insert(ino, self.later.len());
                self.later.push(entry);
            }
        }
    }

    /// Member `m`, a hard link at `dir/name` to the earlier member at `target`.
    fn hard_link(
        &mut self,
        m: &Member,
        target: &[u8],
        dir: Ino,
        name: &[u8],
        shown: &str,
    ) -> CmdResult<()> {
        let fs = self.copier.ctx.fs;
        let why = format!(
            "a hard link to {:?}, which the archive has not made before it",
            lossy(target)
        );
        let unknown = |b: &Self| b.fail(&m.name, &why);
        let (tparent, tname) = split_last(target);
        let Some(tdir) = self.dir(tparent, &m.name, false)? else {
            return Err(unknown(self));
        };
        let to = match fs.lookup(tdir, tname) {
            Ok(a) if a.kind == FileType::Directory => {
                return Err(self.fail(&m.name, "a hard link to a directory"));
            }
            Ok(a) => a,
            Err(lanefs::Error::NotFound) => return Err(unknown(self)),
            Err(e) => return Err(self.fail(&m.name, e)),
        };
        let node = self.node(&m.path);
        if node.is_some() {
            self.seen.insert(m.path.clone());
        }
        let mut first = meta_of(m);
        first.mode = (first.mode & !0o7777) | u32::from(to.perm);
        (first.uid, first.gid) = (to.uid, to.gid);
        self.copier.link_fits(&first, node, shown)?;
        match fs.lookup(dir, name) {
            Ok(a) if a.ino == to.ino => return Ok(()),
            Ok(a) => self.remove(dir, name, &a, m)?,
            Err(lanefs::Error::NotFound) => {}
            Err(e) => return Err(self.fail(&m.name, e)),
        }
        fs.link(to.ino, dir, name)
            .map_err(|e| self.fail(&m.name, e))?;
        Ok(())
    }

    /// Make regular file `dir/name` of member `m` and write its data (its holes left).
    fn file(
        &mut self,
        m: &Member,
        meta: &Meta,
        dir: Ino,
        name: &[u8],
        shown: &str,
    ) -> CmdResult<Ino> {
        let fs = self.copier.ctx.fs;
        let ino = fs
            .create(dir, name, meta.perm(), meta.owner())
            .map_err(|e| self.fail(&m.name, e))?
            .ino;
        let written = self
            .data(ino, m)
            .and_then(|()| fs.write_back(ino).map_err(|e| self.fail(&m.name, e)));
        let released = fs.release(ino).ctx(shown);
        written?;
        released?;
        Ok(ino)
    }

    /// Write the data of member `m` into open file `ino`.
    fn data(&mut self, ino: Ino, m: &Member) -> CmdResult<()> {
        let fs = self.copier.ctx.fs;
        for &(off, len) in &m.segments {
            let mut done = 0u64;
            while done < len {
                let want = (len - done).min(self.buf.len() as u64) as usize;
                let mut got = 0;
                while got < want {
                    let n = self
                        .members
                        .read(&mut self.buf[got..want])
                        .map_err(|p| self.problem(p))?;
                    if n == 0 {
                        return Err(self.fail(&m.name, "less data than its sparse map says"));
                    }
                    got += n;
                }
                for (at, piece) in nonzero_pieces(&self.buf[..want]) {
                    let mut pos = off + done + at as u64;
                    let mut piece = piece;
                    while !piece.is_empty() {
                        let n = fs
                            .write_direct(ino, pos, piece)
                            .map_err(|e| self.fail(&m.name, e))?;
                        if n == 0 {
                            return Err(self.fail(&m.name, "a write made no progress"));
                        }
                        piece = &piece[n.min(piece.len())..];
                        pos += n as u64;
                    }
                }
                done += want as u64;
            }
        }
        let set = SetAttr {
            size: Some(m.size),
            ..SetAttr::default()
        };
        fs.setattr(ino, &set).map_err(|e| self.fail(&m.name, e))?;
        Ok(())
    }

    /// Give `ino` the xattrs `xattrs`, as the copy of a host file does: one the image
    /// cannot take is a warning, not a failure.
    fn xattrs(&self, ino: Ino, xattrs: &[Record], shown: &str) -> CmdResult<()> {
        for (key, value) in xattrs {
            match self
                .copier
                .ctx
                .fs
                .setxattr(ino, key, value, XattrFlags::Any)
            {
                Ok(()) | Err(lanefs::Error::NotSupported(_)) => {}
                Err(
                    e @ (lanefs::Error::Corrupt { .. }
                    | lanefs::Error::Io { .. }
                    | lanefs::Error::ReadOnly),
                ) => return Err(Failure::new(shown, e)),
                Err(e) => {
                    let line = format!(
                        "lanefs: mkfs: warning: {shown}: setting {}: {e}",
                        lossy(key)
                    );
                    self.copier.ctx.progress.warn(&line);
                }
            }
        }
        Ok(())
    }

    /// Make what the device table lists and the archive did not (in the table's order).
    fn table_rest(&mut self) -> CmdResult<()> {
        let Some(table) = self.copier.ctx.over.table.as_ref() else {
            return Ok(());
        };
        let fs = self.copier.ctx.fs;
        let mut stack = vec![(ROOT_INO, Vec::new(), &table.root)];
        while let Some((ino, path, node)) = stack.pop() {
            for (name, child) in &node.children {
                let mut cpath = path.clone();
                if !cpath.is_empty() {
                    cpath.push(b'/');
                }
                cpath.extend_from_slice(name);
                let shown = self.shown(&cpath);
                if !self.seen.contains(&cpath) {
                    self.copier.make_listed(ino, name, child, &shown)?;
                    continue;
                }
                if child.children.is_empty() {
                    continue;
                }
                let a = fs.lookup(ino, name).ctx(&shown)?;
                if a.kind == FileType::Directory {
                    stack.push((a.ino, cpath, child));
                }
            }
        }
        Ok(())
    }

    /// Give every directory its xattrs and attributes (the root those `-E root_owner`
    /// and the table give it when the archive has no `.` member).
    fn finish_dirs(&mut self) -> CmdResult<()> {
        let ctx = self.copier.ctx;
        for later in self.later.iter().filter(|l| !l.gone) {
            let shown = self.shown(&later.path);
            self.attributes(later.ino, &later.meta, &later.xattrs, &shown)?;
        }
        if self.root_seen {
            return Ok(());
        }
        let a = ctx.fs.getattr(ROOT_INO).ctx(&self.image)?;
        let meta = Meta {
            kind: HostType::Directory,
            mode: HostType::Directory.as_raw_mode() | u32::from(a.perm),
            uid: a.uid,
            gid: a.gid,
            nlink: 1,
            dev: 0,
            ino: 0,
            rdev: 0,
            size: 0,
            blocks: 0,
            atime: a.atime,
            mtime: a.mtime,
        };
        let meta = ctx.shaped_root(meta);
        self.owned_as(&a, &meta, &self.image)
    }
}
