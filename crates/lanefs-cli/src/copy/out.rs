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
pub fn copy_out(srcs: &[ImageArg], dst: &Path, recursive: bool) -> CmdResult<i32> {
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
        let found = image_sources(fs, srcs, recursive)?;
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
            links: RefCell::new(HashMap::new()),
            dirs: RefCell::new(HashSet::new()),
            buf: RefCell::new(vec![0u8; CHUNK]),
        };
        for (src, f) in srcs.iter().zip(&found) {
            let name = match (&new_name, &f.entry) {
                (Some(n), _) => Some(n.clone()),
                (None, Some((_, n))) => Some(OsStr::from_bytes(n).to_os_string()),
                // The root (or a path ending in `.`/`..`) into a directory: its contents
                // go into that directory itself.
                (None, None) => None,
            };
            copier.top(&f.attr, &src.display(), name.as_deref())?;
        }
        Ok(0)
    });
    progress.finish();
    result
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
    /// Image inodes with more than one name, and where (relative to `base`) their first
    /// name was copied: later names become hard links to it, as `cp -a` does.
    links: RefCell<HashMap<Ino, PathBuf>>,
    /// Image directories copied so far: one met again is a hard link to a directory or a
    /// cycle, which the copy refuses.
    dirs: RefCell<HashSet<Ino>>,
}

/// A directory being copied: the host directory it fills and what is left to copy.
struct Frame {
    attr: Attr,
    shown: String,
    /// The host directory, and its path relative to `base`.
    dir: HostDir,
    rel: PathBuf,
    entries: std::vec::IntoIter<DirEntry>,
}

impl Copier<'_> {
    /// Host path of `rel` for messages.
    fn host(&self, rel: &Path) -> String {
        self.base_path.join(rel).display().to_string()
    }

    /// Copy source `attr` (shown as `shown`) to `name` in `base`, or into `base` itself.
    fn top(&self, attr: &Attr, shown: &str, name: Option<&OsStr>) -> CmdResult<()> {
        let Some(name) = name else {
            let dir = self.base.try_clone().ctx(self.host(Path::new("")))?;
            return self.tree(attr, shown, dir, PathBuf::new());
        };
        if let Err(why) = check_name(name.as_bytes()) {
            return Err(Failure::new(
                shown,
                Error::msg(format!("cannot copy {why}")),
            ));
        }
        if attr.kind == FileType::Directory {
            let dir = self.enter(&self.base, Path::new(""), name, attr, shown)?;
            return self.tree(attr, shown, dir, PathBuf::from(name));
        }
        self.leaf(&self.base, Path::new(""), name, attr, shown)
    }

    /// Copy directory `attr` into host directory `dir` (at `rel`), its whole tree, each
    /// directory's attributes after its last entry.
    fn tree(&self, attr: &Attr, shown: &str, dir: HostDir, rel: PathBuf) -> CmdResult<()> {
        let mut stack = vec![self.frame(attr, shown, dir, rel)?];
        while let Some(top) = stack.last_mut() {
            let Some(e) = top.entries.next() else {
                let done = stack.pop().expect("a frame");
                self.finish_fd(&done.attr, &done.dir, &self.host(&done.rel))?;
                continue;
            };
            let shown = join_display(&top.shown, &e.name);
            let child = self.fs.getattr(e.ino).ctx(&shown)?;
            let name = OsStr::from_bytes(&e.name);
            if child.kind == FileType::Directory {
                let dir = self.enter(&top.dir, &top.rel, name, &child, &shown)?;
                let rel = top.rel.join(name);
                let frame = self.frame(&child, &shown, dir, rel)?;
                stack.push(frame);
            } else {
                self.leaf(&top.dir, &top.rel, name, &child, &shown)?;
            }
        }
        Ok(())
    }

    /// A frame for image directory `attr` copied into `dir`.
    fn frame(&self, attr: &Attr, shown: &str, dir: HostDir, rel: PathBuf) -> CmdResult<Frame> {
        if !self.dirs.borrow_mut().insert(attr.ino) {
            let msg = "a directory met twice (a hard link to a directory, or a cycle in the image)";
            return Err(Failure::new(shown, Error::msg(msg)));
        }
        let entries = image_entries(self.fs, attr.ino, shown)?.into_iter();
        Ok(Frame {
            attr: attr.clone(),
            shown: shown.to_string(),
            dir,
            rel,
            entries,
        })
    }

    /// Make (or open, when one is already there) host directory `name` in `parent`.
    fn enter(
        &self,
        parent: &HostDir,
        rel: &Path,
        name: &OsStr,
        attr: &Attr,
        shown: &str,
    ) -> CmdResult<HostDir> {
        if self.dirs.borrow().contains(&attr.ino) {
            let msg = "a directory met twice (a hard link to a directory, or a cycle in the image)";
            return Err(Failure::new(shown, Error::msg(msg)));
        }
        let host = self.host(&rel.join(name));
        match parent.make_dir(name).ctx(&host)? {
            Some(d) => Ok(d),
            None => Err(Failure::new(
                host,
                Error::msg("cannot overwrite a non-directory with a directory"),
            )),
        }
    }

    /// Copy non-directory `attr` (shown as `shown`) to `name` in `dir` (at `rel`): what
    /// was there is replaced, never followed.
    fn leaf(
        &self,
        dir: &HostDir,
        rel: &Path,
        name: &OsStr,
        attr: &Attr,
        shown: &str,
    ) -> CmdResult<()> {
        let at = rel.join(name);
        let host = self.host(&at);
        if let Some(old) = dir.lstat(name).ctx(&host)? {
            if HostType::from_raw_mode(old.st_mode) == HostType::Directory {
                let msg = "cannot overwrite a directory with a non-directory";
                return Err(Failure::new(host, Error::msg(msg)));
            }
            dir.remove(name).ctx(&host)?;
        }
        if attr.nlink > 1 {
            if let Some(first) = self.links.borrow().get(&attr.ino) {
                let from = first.parent().unwrap_or(Path::new(""));
                let from_name = first.file_name().unwrap_or_default();
                let from_dir = self.base.open_beneath(from).ctx(self.host(from))?;
                return dir.link_from(name, &from_dir, from_name).ctx(&host);
            }
        }
        match attr.kind {
            FileType::Regular => {
                let file = dir.create_file(name).ctx(&host)?;
                self.data(attr, shown, &file, &host)?;
                self.finish_fd(attr, &file, &host)?;
            }
            FileType::Symlink => {
                let target = self.fs.readlink(attr.ino).ctx(shown)?;
                dir.symlink(name, &target).ctx(&host)?;
                self.finish_at(attr, dir, name, &host)?;
            }
            _ => {
                if !self.node(attr, dir, name, &host)? {
                    return Ok(());
                }
                self.finish_at(attr, dir, name, &host)?;
            }
        }
        if attr.nlink > 1 {
            self.links.borrow_mut().insert(attr.ino, at);
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

    /// Create a device node, FIFO or socket; false when skipped (devices need root).
    fn node(&self, attr: &Attr, dir: &HostDir, name: &OsStr, host: &str) -> CmdResult<bool> {
        let is_device = matches!(attr.kind, FileType::CharDevice | FileType::BlockDevice);
        if is_device && !self.root {
            let line =
                format!("lanefs: cp: warning: {host}: device node skipped (not running as root)");
            self.progress.warn(&line);
            return Ok(false);
        }
        dir.mknod(name, attr.mode(), rdev_from_ext4(attr.rdev))
            .ctx(host)?;
        Ok(true)
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

    /// The same for symlink or node `name` in `dir`, never following a symlink.
    fn finish_at(&self, attr: &Attr, dir: &HostDir, name: &OsStr, host: &str) -> CmdResult<()> {
        if self.root {
            permitted(dir.chown_at(name, attr.uid, attr.gid)).ctx(host)?;
        }
        self.xattrs(attr, host, |k, v| dir.set_xattr_at(name, k, v))?;
        if attr.kind != FileType::Symlink {
            dir.chmod_at(name, u32::from(attr.perm)).ctx(host)?;
        }
        dir.set_times_at(name, &timestamps(attr.atime, attr.mtime))
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
