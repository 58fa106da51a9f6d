//! Copying files and trees out of an image onto the host.
//!
//! An image may be hostile: two entries of one name in a directory (a symlink to a host
//! directory, then a directory of files that would be written through it), names holding
//! `/` or being `..`, directories linked twice or into a cycle. The copy therefore never
//! resolves a host path it makes: every name is created in the descriptor of the
//! directory the copy itself made or opened ([`HostDir`]), with `O_EXCL`/`O_NOFOLLOW`,
//! and an image directory is refused when it holds a name twice or a name that is not one
//! plain component, or when it is met a second time. The walk keeps its own stack, so an
//! image's depth costs heap, not the thread's stack.

use super::{nonzero_pieces, read_full, show, CHUNK};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::hostdir::{self, check_name, timestamps, HostDir, HostType};
use crate::hostsys::{euid, rdev_from_ext4};
use crate::imgpath::{resolve, ImageArg, Located};
use crate::progress::Progress;
use crate::session::{join_display, read_dir_all};
use lanefs::{Attr, DirEntry, FileType, Fs, Ino};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Entries `readdir` returns per call.
const READDIR_BATCH: usize = 256;

/// Copy `srcs`, all inside one image, to host path `dst`.
pub fn copy_out(srcs: &[ImageArg], dst: &Path, flags: super::Flags) -> CmdResult<i32> {
    let Some(first) = srcs.first() else {
        return Ok(0);
    };
    if let Some(other) = srcs.iter().find(|s| s.image != first.image) {
        let msg = format!(
            "all sources must be in one image ({})",
            first.image.display()
        );
        return Err(Failure::new(other.display(), Error::msg(msg)));
    }
    srcs.iter().try_for_each(crate::imgpath::check_absolute)?;
    let mut progress = Progress::hidden();
    let result = crate::session::with_fs(&first.image, true, |fs| {
        let found = image_sources(fs, srcs, flags.recursive)?;
        if Progress::wanted() {
            progress = Progress::new(found.iter().map(|f| image_total(fs, &f.attr)).sum());
        }
        // The destination is the one host path followed as given: the directory the
        // copies go into, or the directory holding the one name `dst` names.
        let into_dir = dst.is_dir();
        if srcs.len() > 1 && !into_dir {
            return Err(Failure::new(dst.display(), lanefs::Error::NotDir));
        }
        let (base_path, new_name) = if into_dir {
            (dst.to_path_buf(), None)
        } else {
            let name = dst
                .file_name()
                .ok_or_else(|| Failure::new(dst.display(), Error::msg("not a name to copy to")))?;
            let parent = match dst.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            (parent, Some(name.to_os_string()))
        };
        let base = HostDir::open_path(&base_path).ctx(base_path.display())?;
        let copier = Copier {
            fs,
            progress: &progress,
            root: euid() == 0,
            base,
            base_path,
            nodes: RefCell::new(Vec::new()),
            links: RefCell::new(HashMap::new()),
            dirs: RefCell::new(HashSet::new()),
            buf: RefCell::new(vec![0u8; CHUNK]),
            flags,
        };
        let mut made = HashSet::new();
        for (src, f) in srcs.iter().zip(&found) {
            let name = match (&new_name, &f.entry) {
                (Some(n), _) => Some(n.clone()),
                (None, Some((_, n))) => Some(OsStr::from_bytes(n).to_os_string()),
                // The root (or a path ending in `.`/`..`) into a directory: its contents
                // go into that directory itself.
                (None, None) => None,
            };
            if !made.insert(name.clone()) {
                let host = base_path_of(dst, into_dir, name.as_deref());
                let msg = format!("will not overwrite just-created {host} with it");
                return Err(Failure::new(src.display(), Error::msg(msg)));
            }
            copier.top(&f.attr, &src.display(), name.as_deref(), new_name.is_some())?;
        }
        Ok(0)
    });
    progress.finish();
    result
}

/// The host path a source goes to, for messages.
fn base_path_of(dst: &Path, into_dir: bool, name: Option<&OsStr>) -> String {
    match (into_dir, name) {
        (true, Some(n)) => dst.join(n).display().to_string(),
        _ => dst.display().to_string(),
    }
}

/// Resolve every source (a final symlink is not followed), refusing directories without `-r`.
fn image_sources(fs: &Fs, srcs: &[ImageArg], recursive: bool) -> CmdResult<Vec<Located>> {
    let mut found = Vec::with_capacity(srcs.len());
    for src in srcs {
        let f = resolve(fs, &src.path, false).ctx(src.display())?;
        if f.attr.kind == FileType::Directory && !recursive {
            return Err(Failure::new(
                src.display(),
                Error::msg("is a directory (use -r)"),
            ));
        }
        found.push(f);
    }
    Ok(found)
}

/// Bytes of regular files under `attr` (symlinks not followed; unreadable parts and
/// directories met twice count 0).
fn image_total(fs: &Fs, attr: &Attr) -> u64 {
    let (mut total, mut seen, mut stack) = (0, HashSet::new(), vec![attr.clone()]);
    while let Some(a) = stack.pop() {
        match a.kind {
            FileType::Regular => total += a.size,
            FileType::Directory if seen.insert(a.ino) => stack.extend(
                read_dir_all(fs, a.ino)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|e| fs.getattr(e.ino).ok()),
            ),
            _ => {}
        }
    }
    total
}

/// The entries of image directory `dir` but `.` and `..`: an error naming the path when
/// it holds a name twice or a name that is not one plain component.
fn image_entries(fs: &Fs, dir: Ino, shown: &str) -> CmdResult<Vec<DirEntry>> {
    let mut all: Vec<DirEntry> = Vec::new();
    let mut names = HashSet::new();
    let mut pos = 0;
    loop {
        let batch = fs.readdir(dir, pos, READDIR_BATCH).ctx(shown)?;
        let Some(last) = batch.last() else { break };
        if last.next == pos {
            break;
        }
        pos = last.next;
        for e in batch {
            if !names.insert(e.name.clone()) {
                let what = join_display(shown, &e.name);
                let msg = "the image holds this name twice in one directory";
                return Err(Failure::new(what, Error::msg(msg)));
            }
            if e.name != b"." && e.name != b".." {
                all.push(e);
            }
        }
    }
    for e in &all {
        if let Err(why) = check_name(&e.name) {
            let what = join_display(shown, &e.name);
            return Err(Failure::new(
                what,
                Error::msg(format!("the image holds {why}")),
            ));
        }
    }
    Ok(all)
}

/// One copy out of one mounted image.
struct Copier<'a> {
    fs: &'a Fs,
    progress: &'a Progress,
    root: bool,
    /// The host directory every copy goes into (or the directory holding the new name).
    base: HostDir,
    /// `base` as given, for messages.
    base_path: PathBuf,
    /// The copy buffer, allocated once (a fresh 1 MiB per file cost more than the copy
    /// of a small file).
    buf: RefCell<Vec<u8>>,
    /// Every directory copied, as its parent's index here and its name: a path is
    /// rebuilt from these when a message or a hard link needs it, so memory grows with
    /// the number of directories, not with depth times depth.
    nodes: RefCell<Vec<Node>>,
    /// Image inodes with more than one name, and where their first name was copied (its
    /// directory's node and its name): later names become hard links to it, as `cp -a`
    /// does.
    links: RefCell<HashMap<Ino, (usize, Vec<u8>)>>,
    /// Image directories of the source being copied: one met again is a hard link to a
    /// directory or a cycle, which the copy refuses.
    dirs: RefCell<HashSet<Ino>>,
    /// `cp -n` and `-v`.
    flags: super::Flags,
}

/// A copied directory: its parent's node (`None` for a source's top) and its name, the
/// same in the image and on the host (empty for the destination itself); a top also
/// keeps how the source was written, for messages.
struct Node {
    parent: Option<usize>,
    name: Vec<u8>,
    shown: Option<String>,
}

/// A directory being copied: the host directory it fills and what is left to copy.
struct Frame {
    attr: Attr,
    node: usize,
    dir: HostDir,
    entries: std::vec::IntoIter<DirEntry>,
}

impl Copier<'_> {
    /// The host names from `base` down to `node`, top first.
    fn names(&self, node: usize) -> Vec<Vec<u8>> {
        let nodes = self.nodes.borrow();
        let mut names = Vec::new();
        let mut at = Some(node);
        while let Some(i) = at {
            if !nodes[i].name.is_empty() {
                names.push(nodes[i].name.clone());
            }
            at = nodes[i].parent;
        }
        names.reverse();
        names
    }

    /// Host path of `name` in directory `node` (or of `node` itself), for messages.
    fn host(&self, node: usize, name: Option<&[u8]>) -> String {
        let mut p = self.base_path.clone();
        for n in self.names(node).iter().map(Vec::as_slice).chain(name) {
            p.push(OsStr::from_bytes(n));
        }
        p.display().to_string()
    }

    /// How `name` in directory `node` (or `node` itself) is written in the image, for
    /// messages.
    fn shown(&self, node: usize, name: Option<&[u8]>) -> String {
        let nodes = self.nodes.borrow();
        let mut below = Vec::new();
        let mut at = node;
        let top = loop {
            match (&nodes[at].shown, nodes[at].parent) {
                (Some(s), _) => break s.clone(),
                (None, Some(p)) => {
                    below.push(nodes[at].name.as_slice());
                    at = p;
                }
                (None, None) => break String::new(),
            }
        };
        below.reverse();
        below
            .into_iter()
            .chain(name)
            .fold(top, |s, n| join_display(&s, n))
    }

    /// A new node.
    fn node(&self, parent: Option<usize>, name: &[u8], shown: Option<String>) -> usize {
        let mut nodes = self.nodes.borrow_mut();
        nodes.push(Node {
            parent,
            name: name.to_vec(),
            shown,
        });
        nodes.len() - 1
    }

    /// Copy source `attr` (shown as `shown`) to `name` in `base`, or into `base` itself;
    /// `typed`: `name` is the last part of the destination the user gave (not a source's
    /// name put into a destination directory).
    fn top(&self, attr: &Attr, shown: &str, name: Option<&OsStr>, typed: bool) -> CmdResult<()> {
        self.dirs.borrow_mut().clear();
        let Some(name) = name else {
            self.dirs.borrow_mut().insert(attr.ino);
            let node = self.node(None, b"", Some(shown.to_string()));
            let dir = HostDir::open_path_readable(&self.base_path).ctx(self.host(node, None))?;
            return self.tree(attr, node, dir);
        };
        if let Err(why) = check_name(name.as_bytes()) {
            return Err(Failure::new(
                shown,
                Error::msg(format!("cannot copy {why}")),
            ));
        }
        let base = self.node(None, b"", Some(String::new()));
        if attr.kind == FileType::Directory {
            let node = self.node(Some(base), name.as_bytes(), Some(shown.to_string()));
            let dir = self.enter(&self.base, node, attr)?;
            return self.tree(attr, node, dir);
        }
        if self.flags.no_clobber
            && self
                .base
                .lstat(name)
                .ctx(self.host(base, Some(name.as_bytes())))?
                .is_some()
        {
            return Ok(());
        }
        if typed && attr.kind == FileType::Regular && self.write_through(base, name, attr, shown)? {
            return Ok(());
        }
        self.leaf(&self.base, base, name, attr, shown)
    }

    /// A regular file copied to a destination the user named that exists and is not a
    /// directory: written into what is there, following a symlink, as `cp` does. A name
    /// the copy takes from the image (a source's name put into a destination directory,
    /// every name inside a copied tree) is never followed: what is there is replaced
    /// (`leaf`), so a symlink planted in a shared directory cannot redirect the copy.
    /// A regular file there is emptied and gets the copy's owner, mode, xattrs and times;
    /// anything else (`/dev/stdout`, a FIFO, a device) gets the bytes and keeps its own
    /// attributes. False when nothing is there (the copy makes the file).
    fn write_through(
        &self,
        base: usize,
        name: &OsStr,
        attr: &Attr,
        shown: &str,
    ) -> CmdResult<bool> {
        let host = self.host(base, Some(name.as_bytes()));
        let Some(old) = self.base.lstat(name).ctx(&host)? else {
            return Ok(false);
        };
        let kind = HostType::from_raw_mode(old.st_mode);
        if kind == HostType::Directory {
            return Ok(false);
        }
        let file = match self.base.open_existing_for_write(name) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && kind == HostType::Symlink => {
                let msg = "not writing through a dangling symlink";
                return Err(Failure::new(host, Error::msg(msg)));
            }
            Err(e) => return Err(Failure::new(host, e)),
        };
        let meta = file.metadata().ctx(&host)?;
        if meta.is_dir() {
            return Ok(false);
        }
        if meta.is_file() {
            self.data(attr, shown, &file, &host)?;
            self.finish_fd(attr, &file, &host)?;
        } else {
            self.stream(attr, shown, &file, &host)?;
        }
        Ok(true)
    }

    /// Write the bytes of regular file `attr` in order into `file`, which cannot seek (a
    /// pipe, a terminal, a device): holes as zeros.
    fn stream(&self, attr: &Attr, shown: &str, mut file: &File, host: &str) -> CmdResult<()> {
        use std::io::Write;
        let mut buf = self.buf.borrow_mut();
        let mut off = 0u64;
        while off < attr.size {
            let want = (attr.size - off).min(buf.len() as u64) as usize;
            let n = read_full(&mut buf[..want], |filled, b| {
                Ok(self.fs.read(attr.ino, off + filled as u64, b)?)
            })
            .ctx(shown)?;
            if n == 0 {
                break;
            }
            file.write_all(&buf[..n]).ctx(host)?;
            off += n as u64;
            self.progress.add(n as u64);
        }
        Ok(())
    }

    /// Copy directory `attr` into host directory `dir` (at `node`), its whole tree, each
    /// directory's attributes after its last entry.
    fn tree(&self, attr: &Attr, node: usize, dir: HostDir) -> CmdResult<()> {
        let mut stack = vec![self.frame(attr, node, dir)?];
        while let Some(top) = stack.last_mut() {
            let Some(e) = top.entries.next() else {
                let done = stack.pop().expect("a frame");
                self.finish_fd(&done.attr, &done.dir, &self.host(done.node, None))?;
                continue;
            };
            let shown = self.shown(top.node, Some(&e.name));
            let child = self.fs.getattr(e.ino).ctx(&shown)?;
            let name = OsStr::from_bytes(&e.name);
            if child.kind == FileType::Directory {
                let node = self.node(Some(top.node), &e.name, None);
                let dir = self.enter(&top.dir, node, &child)?;
                let frame = self.frame(&child, node, dir)?;
                stack.push(frame);
            } else {
                self.leaf(&top.dir, top.node, name, &child, &shown)?;
            }
        }
        Ok(())
    }

    /// A frame for image directory `attr` copied into `dir` (at `node`).
    fn frame(&self, attr: &Attr, node: usize, dir: HostDir) -> CmdResult<Frame> {
        let entries = image_entries(self.fs, attr.ino, &self.shown(node, None))?.into_iter();
        Ok(Frame {
            attr: attr.clone(),
            node,
            dir,
            entries,
        })
    }

    /// Make (or open, when one is already there) host directory `node` in `parent`.
    fn enter(&self, parent: &HostDir, node: usize, attr: &Attr) -> CmdResult<HostDir> {
        if !self.dirs.borrow_mut().insert(attr.ino) {
            let msg = "a directory met twice (a hard link to a directory, or a cycle in the image)";
            return Err(Failure::new(self.shown(node, None), Error::msg(msg)));
        }
        let name = self.nodes.borrow()[node].name.clone();
        let host = self.host(node, None);
        self.flags.said(&self.shown(node, None), &host);
        match parent.make_dir(OsStr::from_bytes(&name)).ctx(&host)? {
            Some(d) => Ok(d),
            None => Err(Failure::new(
                host,
                Error::msg("cannot overwrite a non-directory with a directory"),
            )),
        }
    }

    /// Copy non-directory `attr` (shown as `shown`) to `name` in `dir` (at `node`):
    /// what was there is replaced, never followed.
    fn leaf(
        &self,
        dir: &HostDir,
        node: usize,
        name: &OsStr,
        attr: &Attr,
        shown: &str,
    ) -> CmdResult<()> {
        let host = self.host(node, Some(name.as_bytes()));
        let old = dir.lstat(name).ctx(&host)?;
        if old.is_some() && self.flags.no_clobber {
            return Ok(());
        }
        self.flags.said(shown, &host);
        if let Some(old) = old {
            if HostType::from_raw_mode(old.st_mode) == HostType::Directory {
                let msg = "cannot overwrite a directory with a non-directory";
                return Err(Failure::new(host, Error::msg(msg)));
            }
            dir.remove(name).ctx(&host)?;
        }
        if attr.nlink > 1 {
            if let Some((first_dir, first)) = self.links.borrow().get(&attr.ino) {
                let names = self.names(*first_dir);
                let from_dir = self
                    .base
                    .open_beneath(names.iter().map(|n| OsStr::from_bytes(n)))
                    .ctx(self.host(*first_dir, None))?;
                return dir
                    .link_from(name, &from_dir, OsStr::from_bytes(first))
                    .ctx(&host);
            }
        }
        match attr.kind {
            FileType::Regular => {
                let file = dir.create_file(name).ctx(&host)?;
                self.data(attr, shown, &file, &host)?;
                self.finish_fd(attr, &file, &host)?;
            }
            _ => {
                if !self.special(attr, dir, name, shown, &host)? {
                    return Ok(());
                }
            }
        }
        if attr.nlink > 1 {
            let first = (node, name.as_bytes().to_vec());
            self.links.borrow_mut().insert(attr.ino, first);
        }
        Ok(())
    }

    /// Copy the data of regular file `attr` into new host file `file`: only the image
    /// file's data segments are read and written (found with seek_data/seek_hole, a cost
    /// per extent), holes stay holes, and the size is set at the end.
    fn data(&self, attr: &Attr, shown: &str, file: &File, host: &str) -> CmdResult<()> {
        let mut buf = self.buf.borrow_mut();
        let (mut pos, mut copied) = (0u64, 0u64);
        while let Some(start) = self.fs.seek_data(attr.ino, pos).ctx(shown)? {
            let end = self
                .fs
                .seek_hole(attr.ino, start)
                .ctx(shown)?
                .unwrap_or(attr.size);
            let mut off = start;
            while off < end {
                let want = (end - off).min(CHUNK as u64) as usize;
                let n = read_full(&mut buf[..want], |filled, b| {
                    Ok(self.fs.read(attr.ino, off + filled as u64, b)?)
                })
                .ctx(shown)?;
                if n == 0 {
                    break;
                }
                for (at, piece) in nonzero_pieces(&buf[..n]) {
                    file.write_all_at(piece, off + at as u64).ctx(host)?;
                }
                off += n as u64;
                copied += n as u64;
                self.progress.add(n as u64);
            }
            if end <= pos {
                break;
            }
            pos = end;
        }
        // Holes count as copied.
        self.progress.add(attr.size.saturating_sub(copied));
        file.set_len(attr.size).ctx(host)
    }

    /// Make symlink, device node, FIFO or socket `name` in `dir`, finished (owner, xattrs,
    /// mode, times) in a private directory beside it and only then renamed to its name,
    /// so nothing else can be under the name while its owner and mode are set. False when
    /// skipped (devices need root).
    fn special(
        &self,
        attr: &Attr,
        dir: &HostDir,
        name: &OsStr,
        shown: &str,
        host: &str,
    ) -> CmdResult<bool> {
        let is_device = matches!(attr.kind, FileType::CharDevice | FileType::BlockDevice);
        if is_device && !self.root {
            let line =
                format!("lanefs: cp: warning: {host}: device node skipped (not running as root)");
            self.progress.warn(&line);
            return Ok(false);
        }
        let target = match attr.kind {
            FileType::Symlink => Some(self.fs.readlink(attr.ino).ctx(shown)?),
            _ => None,
        };
        let (stage, stage_name) = dir.stage().ctx(host)?;
        let made = match &target {
            Some(t) => stage.symlink(name, t),
            None => stage.mknod(name, attr.mode(), rdev_from_ext4(attr.rdev)),
        }
        .ctx(host)
        .and_then(|()| self.finish_staged(attr, &stage, name, host))
        .and_then(|()| stage.rename_to(name, dir, name).ctx(host));
        if made.is_err() {
            let _ = stage.remove(name);
        }
        let removed = dir.remove_dir(&stage_name).ctx(host);
        made.and(removed).map(|()| true)
    }

    /// Copy the extended attributes and ACLs of `attr` with `set`, as `cp -a` does: one
    /// the host refuses is a warning (none for "not supported"), not a failure.
    fn xattrs(
        &self,
        attr: &Attr,
        host: &str,
        set: impl Fn(&[u8], &[u8]) -> std::io::Result<()>,
    ) -> CmdResult<()> {
        for key in self.fs.listxattr(attr.ino).ctx(host)? {
            let value = self.fs.getxattr(attr.ino, &key).ctx(host)?;
            match set(&key, &value) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
                Err(e) => {
                    let line = format!("lanefs: cp: warning: {host}: setting {}: {e}", show(&key));
                    self.progress.warn(&line);
                }
            }
        }
        Ok(())
    }

    /// Give the file or directory open as `fd` the owner (as root), xattrs, permissions
    /// and times of `attr`. Owner first, then xattrs (a chown drops
    /// security.capability), then the mode.
    fn finish_fd(&self, attr: &Attr, fd: &impl AsFd, host: &str) -> CmdResult<()> {
        if self.root {
            permitted(hostdir::chown_fd(fd, attr.uid, attr.gid)).ctx(host)?;
        }
        self.xattrs(attr, host, |k, v| hostdir::set_xattr_fd(fd, k, v))?;
        hostdir::chmod_fd(fd, u32::from(attr.perm)).ctx(host)?;
        hostdir::set_times_fd(fd, &timestamps(attr.atime, attr.mtime)).ctx(host)
    }

    /// The same for symlink or node `name` in private directory `stage`.
    fn finish_staged(
        &self,
        attr: &Attr,
        stage: &HostDir,
        name: &OsStr,
        host: &str,
    ) -> CmdResult<()> {
        if self.root {
            permitted(stage.chown_at(name, attr.uid, attr.gid)).ctx(host)?;
        }
        self.xattrs(attr, host, |k, v| stage.set_xattr_at(name, k, v))?;
        if attr.kind != FileType::Symlink {
            stage.chmod_staged(name, u32::from(attr.perm)).ctx(host)?;
        }
        stage
            .set_times_at(name, &timestamps(attr.atime, attr.mtime))
            .ctx(host)
    }
}

/// A chown refused for lack of permission is no failure (as `cp -a` run by a user).
fn permitted(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(()),
        r => r,
    }
}
