//! Copying files and trees out of an image onto the host.

use super::{nonzero_pieces, read_full, show, CHUNK};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::hostsys::{euid, mknod, rdev_from_ext4, set_times, set_xattr};
use crate::imgpath::{resolve, ImageArg, Located};
use crate::progress::Progress;
use crate::session::{join_display, read_dir_all, with_fs};
use lanefs::{Attr, FileType, Fs};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Permissions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

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
    let result = with_fs(&first.image, true, |fs| {
        let found = image_sources(fs, srcs, recursive)?;
        if Progress::wanted() {
            progress = Progress::new(found.iter().map(|f| image_total(fs, &f.attr)).sum());
        }
        let into_dir = dst.is_dir();
        if srcs.len() > 1 && !into_dir {
            return Err(Failure::new(dst.display(), lanefs::Error::NotDir));
        }
        let copier = Copier {
            fs,
            progress: &progress,
            root: euid() == 0,
            links: RefCell::new(HashMap::new()),
            buf: RefCell::new(vec![0u8; CHUNK]),
        };
        for (src, f) in srcs.iter().zip(&found) {
            let host = target_path(dst, into_dir, f);
            copier.entry(&f.attr, &src.display(), &host)?;
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

/// Bytes of regular files under `attr` (symlinks not followed; unreadable parts count 0).
fn image_total(fs: &Fs, attr: &Attr) -> u64 {
    match attr.kind {
        FileType::Regular => attr.size,
        FileType::Directory => read_dir_all(fs, attr.ino)
            .unwrap_or_default()
            .iter()
            .filter_map(|e| fs.getattr(e.ino).ok())
            .map(|a| image_total(fs, &a))
            .sum(),
        _ => 0,
    }
}

/// Host path a source goes to: into `dst` under its own name when `dst` is a directory.
fn target_path(dst: &Path, into_dir: bool, found: &Located) -> PathBuf {
    match (&found.entry, into_dir) {
        (Some((_, name)), true) => dst.join(OsStr::from_bytes(name)),
        _ => dst.to_path_buf(),
    }
}

/// One copy out of one mounted image.
struct Copier<'a> {
    fs: &'a Fs,
    progress: &'a Progress,
    root: bool,
    /// The copy buffer, allocated once (a fresh 1 MiB per file cost more than the copy
    /// of a small file).
    buf: RefCell<Vec<u8>>,
    /// Image inodes with more than one name, and the host path their first name was
    /// copied to: later names become hard links to it, as `cp -a` does.
    links: RefCell<HashMap<lanefs::Ino, PathBuf>>,
}

impl Copier<'_> {
    /// Copy the inode `attr` (shown as `shown`) to host path `host`.
    fn entry(&self, attr: &Attr, shown: &str, host: &Path) -> CmdResult<()> {
        if attr.kind == FileType::Directory {
            return self.directory(attr, shown, host);
        }
        if let Ok(old) = std::fs::symlink_metadata(host) {
            if old.is_dir() {
                let msg = "cannot overwrite a directory with a non-directory";
                return Err(Failure::new(host.display(), Error::msg(msg)));
            }
            std::fs::remove_file(host).ctx(host.display())?;
        }
        if attr.nlink > 1 {
            if let Some(first) = self.links.borrow().get(&attr.ino) {
                return std::fs::hard_link(first, host).ctx(host.display());
            }
        }
        match attr.kind {
            FileType::Regular => self.file(attr, shown, host)?,
            FileType::Symlink => {
                let target = self.fs.readlink(attr.ino).ctx(shown)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), host).ctx(host.display())?;
            }
            _ => {
                if !self.node(attr, host)? {
                    return Ok(());
                }
            }
        }
        if attr.nlink > 1 {
            self.links.borrow_mut().insert(attr.ino, host.to_path_buf());
        }
        self.finish(attr, host)
    }

    /// Copy directory `attr` and everything in it, then set its attributes.
    fn directory(&self, attr: &Attr, shown: &str, host: &Path) -> CmdResult<()> {
        match std::fs::symlink_metadata(host) {
            Ok(_) if host.is_dir() => {}
            Ok(_) => {
                let msg = "cannot overwrite a non-directory with a directory";
                return Err(Failure::new(host.display(), Error::msg(msg)));
            }
            Err(_) => std::fs::create_dir(host).ctx(host.display())?,
        }
        for entry in read_dir_all(self.fs, attr.ino).ctx(shown)? {
            let child_shown = join_display(shown, &entry.name);
            let child = self.fs.getattr(entry.ino).ctx(&child_shown)?;
            self.entry(
                &child,
                &child_shown,
                &host.join(OsStr::from_bytes(&entry.name)),
            )?;
        }
        self.finish(attr, host)
    }

    /// Copy the data of regular file `attr` to a new host file: only the image file's
    /// data segments are read and written (found with seek_data/seek_hole, a cost per
    /// extent), holes stay holes, and the size is set at the end.
    fn file(&self, attr: &Attr, shown: &str, host: &Path) -> CmdResult<()> {
        let file = File::create(host).ctx(host.display())?;
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
                    file.write_all_at(piece, off + at as u64)
                        .ctx(host.display())?;
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
        file.set_len(attr.size).ctx(host.display())
    }

    /// Create a device node, FIFO or socket; false when skipped (devices need root).
    fn node(&self, attr: &Attr, host: &Path) -> CmdResult<bool> {
        let is_device = matches!(attr.kind, FileType::CharDevice | FileType::BlockDevice);
        if is_device && !self.root {
            let line = format!(
                "lanefs: cp: warning: {}: device node skipped (not running as root)",
                host.display()
            );
            self.progress.warn(&line);
            return Ok(false);
        }
        mknod(host, attr.mode(), rdev_from_ext4(attr.rdev)).ctx(host.display())?;
        Ok(true)
    }

    /// Copy the extended attributes and ACLs of `attr` to `host`, as `cp -a` does: one the
    /// host refuses is a warning (none for "not supported"), not a failure.
    fn xattrs(&self, attr: &Attr, host: &Path) -> CmdResult<()> {
        let names = self.fs.listxattr(attr.ino).ctx(host.display())?;
        for name in names {
            let value = self.fs.getxattr(attr.ino, &name).ctx(host.display())?;
            match set_xattr(host, &name, &value) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
                Err(e) => {
                    let line = format!(
                        "lanefs: cp: warning: {}: setting {}: {e}",
                        host.display(),
                        show(&name)
                    );
                    self.progress.warn(&line);
                }
            }
        }
        Ok(())
    }

    /// Give host path `host` the owner (as root), permissions and times of `attr`.
    /// Owner first, then xattrs (a chown drops security.capability), then the mode.
    fn finish(&self, attr: &Attr, host: &Path) -> CmdResult<()> {
        if self.root {
            match std::os::unix::fs::lchown(host, Some(attr.uid), Some(attr.gid)) {
                Err(e) if e.kind() != std::io::ErrorKind::PermissionDenied => {
                    return Err(Failure::new(host.display(), e))
                }
                _ => {}
            }
        }
        self.xattrs(attr, host)?;
        if attr.kind != FileType::Symlink {
            let perm = Permissions::from_mode(u32::from(attr.perm));
            std::fs::set_permissions(host, perm).ctx(host.display())?;
        }
        set_times(host, attr.atime, attr.mtime, false).ctx(host.display())
    }
}
