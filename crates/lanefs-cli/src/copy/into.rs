//! Copying host files and trees into an image.

use super::{nonzero_pieces, read_full, show, timespec, CHUNK};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::hostsys::{get_xattr, list_xattrs, rdev_to_ext4, seek_data_hole};
use crate::imgpath::{resolve_dest, Dest, ImageArg};
use crate::progress::Progress;
use crate::session::{join_display, with_fs};
use lanefs::{Attr, FileType, Fs, Ino, Owner, SetAttr, XattrFlags};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Mutex;

/// Copy `srcs` from the host to `dst` inside an image.
pub fn copy_in(srcs: &[PathBuf], dst: &ImageArg, recursive: bool) -> CmdResult<i32> {
    let metas = host_sources(srcs, recursive)?;
    let progress = if Progress::wanted() {
        Progress::new(srcs.iter().map(|s| host_total(s)).sum())
    } else {
        Progress::hidden()
    };
    let result = with_fs(&dst.image, false, |fs| {
        let dest = resolve_dest(fs, &dst.path).ctx(dst.display())?;
        let is_dir = matches!(&dest, Dest::Exists(f) if f.attr.kind == FileType::Directory);
        if srcs.len() > 1 && !is_dir {
            return Err(Failure::new(dst.display(), lanefs::Error::NotDir));
        }
        let ctx = Ctx {
            fs,
            progress: &progress,
        };
        let failed: Mutex<Option<Failure>> = Mutex::new(None);
        // File data is written by workers while this thread walks the tree and makes the
        // names (a directory's own attributes are set after its last name).
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(256);
        let rx = Mutex::new(rx);
        let walked = std::thread::scope(|scope| {
            for _ in 0..workers() {
                scope.spawn(|| work(ctx, &rx, &failed));
            }
            let copier = Copier {
                ctx,
                links: RefCell::new(HashMap::new()),
                jobs: tx,
                failed: &failed,
            };
            for (src, meta) in srcs.iter().zip(&metas) {
                let (dir, name, shown) = place(&dest, src, dst)?;
                copier.entry(src, meta, dir, &name, &shown)?;
            }
            Ok(())
        });
        let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
        walked?;
        failed.map_or(Ok(0), Err)
    });
    progress.finish();
    result
}

/// The metadata of each source, refusing directories without `-r`.
fn host_sources(srcs: &[PathBuf], recursive: bool) -> CmdResult<Vec<Metadata>> {
    let mut metas = Vec::with_capacity(srcs.len());
    for src in srcs {
        let meta = std::fs::symlink_metadata(src).ctx(src.display())?;
        if meta.is_dir() && !recursive {
            return Err(Failure::new(
                src.display(),
                Error::msg("is a directory (use -r)"),
            ));
        }
        metas.push(meta);
    }
    Ok(metas)
}

/// Bytes of regular files under `path` (symlinks not followed).
fn host_total(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return if meta.is_file() { meta.len() } else { 0 };
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries.flatten().map(|e| host_total(&e.path())).sum()
}

/// The last component of host path `src`.
fn basename(src: &Path) -> CmdResult<Vec<u8>> {
    if let Some(name) = src.file_name() {
        return Ok(name.as_bytes().to_vec());
    }
    let real = std::fs::canonicalize(src).ctx(src.display())?;
    match real.file_name() {
        Some(name) => Ok(name.as_bytes().to_vec()),
        None => Err(Failure::new(
            src.display(),
            Error::msg("cannot copy the root directory"),
        )),
    }
}

/// Directory, name and display of where `src` goes for destination `dest`.
fn place(dest: &Dest, src: &Path, dst: &ImageArg) -> CmdResult<(Ino, Vec<u8>, String)> {
    match dest {
        Dest::Exists(found) if found.attr.kind == FileType::Directory => {
            let name = basename(src)?;
            Ok((
                found.attr.ino,
                name.clone(),
                join_display(&dst.display(), &name),
            ))
        }
        Dest::Exists(found) => match &found.entry {
            Some((dir, name)) => Ok((*dir, name.clone(), dst.display())),
            None => Err(Failure::new(dst.display(), lanefs::Error::IsDir)),
        },
        Dest::New { dir, name } => Ok((*dir, name.clone(), dst.display())),
    }
}

/// The owner a host file has.
fn owner_of(meta: &Metadata) -> Owner {
    Owner {
        uid: meta.uid(),
        gid: meta.gid(),
        umask: 0,
    }
}

/// Permission bits of a host file.
fn perm_of(meta: &Metadata) -> u16 {
    (meta.mode() & 0o7777) as u16
}

/// Threads writing file data: one per CPU, at most 8.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// What every thread of a copy shares.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    fs: &'a Fs,
    progress: &'a Progress,
}

/// One regular file whose name exists (open, as create leaves it): its data, xattrs and
/// attributes are still to be written.
struct Job {
    src: PathBuf,
    meta: Metadata,
    ino: Ino,
    truncate: bool,
    shown: String,
}

/// A worker: run jobs until the walk ends; after a failure only release what is left.
fn work(ctx: Ctx<'_>, rx: &Mutex<Receiver<Job>>, failed: &Mutex<Option<Failure>>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let stop = failed.lock().map_or(true, |f| f.is_some());
        let r = if stop {
            ctx.fs.release(job.ino).ctx(&job.shown)
        } else {
            ctx.run(&mut buf, &job)
        };
        if let Err(e) = r {
            if let Ok(mut f) = failed.lock() {
                f.get_or_insert(e);
            }
        }
    }
}

/// The walk of one copy into one mounted image.
struct Copier<'a> {
    ctx: Ctx<'a>,
    /// Host files with more than one name, by (device, inode), and the image inode their
    /// first name was copied to: later names become hard links to it, as `cp -a` does.
    links: RefCell<HashMap<(u64, u64), Ino>>,
    jobs: SyncSender<Job>,
    failed: &'a Mutex<Option<Failure>>,
}

impl Copier<'_> {
    /// What `dir` already holds under `name`, if anything.
    fn existing(&self, dir: Ino, name: &[u8], shown: &str) -> CmdResult<Option<Attr>> {
        match self.ctx.fs.lookup(dir, name) {
            Ok(attr) => Ok(Some(attr)),
            Err(lanefs::Error::NotFound) => Ok(None),
            Err(e) => Err(Failure::new(shown, e)),
        }
    }

    /// Copy host `src` (not followed if a symlink) to `dir/name`, shown as `shown`.
    fn entry(
        &self,
        src: &Path,
        meta: &Metadata,
        dir: Ino,
        name: &[u8],
        shown: &str,
    ) -> CmdResult<()> {
        let existing = self.existing(dir, name, shown)?;
        if meta.is_dir() {
            return self.directory(src, meta, dir, name, existing, shown);
        }
        let linked = (meta.nlink() > 1)
            .then(|| self.links.borrow().get(&(meta.dev(), meta.ino())).copied())
            .flatten();
        if let Some(target) = linked {
            return self.link(target, dir, name, existing, shown);
        }
        let mut reuse = None;
        if let Some(old) = existing {
            if old.kind == FileType::Directory {
                return Err(Failure::new(
                    shown,
                    Error::msg("cannot overwrite a directory with a non-directory"),
                ));
            }
            if meta.is_file() && old.kind == FileType::Regular {
                reuse = Some(old.ino);
            } else {
                self.ctx.fs.unlink(dir, name).ctx(shown)?;
            }
        }
        let ft = meta.file_type();
        let ino = if ft.is_file() {
            self.file(src, meta, dir, name, reuse, shown)?
        } else if ft.is_symlink() {
            let target = std::fs::read_link(src).ctx(src.display())?;
            let target = target.as_os_str().as_bytes();
            self.ctx
                .fs
                .symlink(dir, name, target, owner_of(meta))
                .ctx(shown)?
                .ino
        } else {
            let rdev = rdev_to_ext4(meta.rdev());
            self.ctx
                .fs
                .mknod(dir, name, meta.mode(), rdev, owner_of(meta))
                .ctx(shown)?
                .ino
        };
        if meta.nlink() > 1 {
            self.links
                .borrow_mut()
                .insert((meta.dev(), meta.ino()), ino);
        }
        if ft.is_file() {
            // Its worker sets its attributes once the data is in.
            return Ok(());
        }
        self.ctx.finish(src, ino, meta, shown)
    }

    /// Make `dir/name` another name of image inode `target` (replacing what was there).
    fn link(
        &self,
        target: Ino,
        dir: Ino,
        name: &[u8],
        existing: Option<Attr>,
        shown: &str,
    ) -> CmdResult<()> {
        match existing {
            Some(old) if old.ino == target => return Ok(()),
            Some(old) if old.kind == FileType::Directory => {
                return Err(Failure::new(
                    shown,
                    Error::msg("cannot overwrite a directory with a non-directory"),
                ))
            }
            Some(_) => self.ctx.fs.unlink(dir, name).ctx(shown)?,
            None => {}
        }
        self.ctx.fs.link(target, dir, name).ctx(shown)?;
        Ok(())
    }

    /// Copy host directory `src` and everything in it, then its attributes.
    fn directory(
        &self,
        src: &Path,
        meta: &Metadata,
        dir: Ino,
        name: &[u8],
        existing: Option<Attr>,
        shown: &str,
    ) -> CmdResult<()> {
        let ino = match existing {
            Some(old) if old.kind == FileType::Directory => old.ino,
            Some(_) => {
                return Err(Failure::new(
                    shown,
                    Error::msg("cannot overwrite a non-directory with a directory"),
                ))
            }
            None => {
                self.ctx
                    .fs
                    .mkdir(dir, name, perm_of(meta), owner_of(meta))
                    .ctx(shown)?
                    .ino
            }
        };
        let mut children: Vec<_> = std::fs::read_dir(src)
            .and_then(|it| it.collect::<std::io::Result<Vec<_>>>())
            .ctx(src.display())?;
        children.sort_by_key(|e| e.file_name());
        for child in children {
            let path = child.path();
            let child_meta = std::fs::symlink_metadata(&path).ctx(path.display())?;
            let child_name = child.file_name();
            let child_shown = join_display(shown, child_name.as_bytes());
            self.entry(&path, &child_meta, ino, child_name.as_bytes(), &child_shown)?;
        }
        self.ctx.finish(src, ino, meta, shown)
    }

    /// Make regular file `dir/name` (or reuse `reuse`) and hand its data to a worker.
    fn file(
        &self,
        src: &Path,
        meta: &Metadata,
        dir: Ino,
        name: &[u8],
        reuse: Option<Ino>,
        shown: &str,
    ) -> CmdResult<Ino> {
        if let Some(e) = self.failed.lock().ok().and_then(|mut f| f.take()) {
            return Err(e);
        }
        let ino = match reuse {
            Some(ino) => {
                self.ctx.fs.open(ino).ctx(shown)?;
                ino
            }
            None => {
                self.ctx
                    .fs
                    .create(dir, name, perm_of(meta), owner_of(meta))
                    .ctx(shown)?
                    .ino
            }
        };
        let job = Job {
            src: src.to_path_buf(),
            meta: meta.clone(),
            ino,
            truncate: reuse.is_some(),
            shown: shown.to_string(),
        };
        if self.jobs.send(job).is_err() {
            return Err(Failure::new(shown, Error::msg("the copy's workers ended")));
        }
        Ok(ino)
    }
}

impl Ctx<'_> {
    /// Write one file's data, release it, then give it its xattrs and attributes.
    fn run(&self, buf: &mut [u8], job: &Job) -> CmdResult<()> {
        let written = self.fill(buf, &job.src, job.ino, job.truncate, &job.shown);
        let released = self.fs.release(job.ino).ctx(&job.shown);
        written?;
        released?;
        self.finish(&job.src, job.ino, &job.meta, &job.shown)
    }

    /// Write the data of `src` into open file `ino` (emptied first if `truncate`).
    fn fill(
        &self,
        buf: &mut [u8],
        src: &Path,
        ino: Ino,
        truncate: bool,
        shown: &str,
    ) -> CmdResult<()> {
        if truncate {
            self.fs
                .setattr(
                    ino,
                    &SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    },
                )
                .ctx(shown)?;
        }
        let file = std::fs::File::open(src).ctx(src.display())?;
        let len = file.metadata().ctx(src.display())?.len();
        // Only the host file's data segments are read; its holes stay holes here.
        let (mut pos, mut copied) = (0u64, 0u64);
        while let Some(start) = seek_data_hole(&file, pos, false).ctx(src.display())? {
            let end = seek_data_hole(&file, start, true)
                .ctx(src.display())?
                .unwrap_or(len)
                .max(start);
            let mut off = start;
            loop {
                let want = if end > off {
                    (end - off).min(CHUNK as u64) as usize
                } else {
                    // A file growing under us: read on to its end.
                    CHUNK
                };
                let n = read_full(&mut buf[..want], |filled, b| {
                    Ok(file.read_at(b, off + filled as u64)?)
                })
                .ctx(src.display())?;
                if n == 0 {
                    break;
                }
                for (at, piece) in nonzero_pieces(&buf[..n]) {
                    self.write_all(ino, off + at as u64, piece).ctx(shown)?;
                }
                off += n as u64;
                copied += n as u64;
                self.progress.add(n as u64);
                if off >= end && end > start {
                    break;
                }
            }
            if off <= pos {
                break;
            }
            pos = off;
        }
        self.progress.add(len.saturating_sub(copied));
        let off = len.max(pos);
        self.fs
            .setattr(
                ino,
                &SetAttr {
                    size: Some(off),
                    ..SetAttr::default()
                },
            )
            .ctx(shown)?;
        Ok(())
    }

    /// Write all of `data` at `off`.
    fn write_all(&self, ino: Ino, mut off: u64, mut data: &[u8]) -> Result<(), Error> {
        while !data.is_empty() {
            let n = self.fs.write(ino, off, data)?;
            if n == 0 {
                return Err(Error::msg("write made no progress"));
            }
            data = &data[n.min(data.len())..];
            off += n as u64;
        }
        Ok(())
    }

    /// Copy the extended attributes and ACLs of host `src` to `ino`, as `cp -a` does: one
    /// the image cannot take is a warning (none for "not supported"), not a failure.
    fn xattrs(&self, src: &Path, ino: Ino, shown: &str) -> CmdResult<()> {
        let names = match list_xattrs(src) {
            Ok(n) => n,
            Err(e) => {
                self.warn(src.display(), &e.to_string());
                return Ok(());
            }
        };
        for name in names {
            let value = match get_xattr(src, &name) {
                Ok(v) => v,
                Err(e) => {
                    self.warn(src.display(), &format!("reading {}: {e}", show(&name)));
                    continue;
                }
            };
            match self.fs.setxattr(ino, &name, &value, XattrFlags::Any) {
                Ok(()) | Err(lanefs::Error::NotSupported(_)) => {}
                Err(
                    e @ (lanefs::Error::Corrupt { .. }
                    | lanefs::Error::Io(_)
                    | lanefs::Error::ReadOnly),
                ) => return Err(Failure::new(shown, e)),
                Err(e) => self.warn(shown, &format!("setting {}: {e}", show(&name))),
            }
        }
        Ok(())
    }

    /// A one-line warning that does not stop the copy.
    fn warn(&self, what: impl std::fmt::Display, why: &str) {
        let line = format!("lanefs: cp: warning: {what}: {why}");
        self.progress.warn(&line);
    }

    /// Give `ino` the owner, permissions and times of host `meta`.
    fn finish(&self, src: &Path, ino: Ino, meta: &Metadata, shown: &str) -> CmdResult<()> {
        self.xattrs(src, ino, shown)?;
        let set = SetAttr {
            perm: (!meta.file_type().is_symlink()).then(|| perm_of(meta)),
            uid: Some(meta.uid()),
            gid: Some(meta.gid()),
            atime: Some(timespec(meta.atime(), meta.atime_nsec())),
            mtime: Some(timespec(meta.mtime(), meta.mtime_nsec())),
            ..SetAttr::default()
        };
        self.fs.setattr(ino, &set).ctx(shown)?;
        Ok(())
    }
}
