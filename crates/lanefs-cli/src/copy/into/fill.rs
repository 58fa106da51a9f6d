//! The workers of a copy in: each takes a file whose name the walk made, writes its data
//! (densely into extents the walk preallocated, for a reproducible build), releases it,
//! then gives it its xattrs and attributes.

use super::*;
use crate::sparse::lend::LentFile;

/// A worker: run jobs until the walk ends. A job that fails, or that comes after an
/// error stopped the copy (then only released), leaves its file unfinished.
pub(super) fn work(ctx: Ctx<'_>, rx: &Mutex<Receiver<Job>>, failed: &Mutex<Outcome>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        if Outcome::stopped(failed) {
            let released = ctx.fs.release(job.ino).ctx(&job.shown);
            // A new file is an empty stand-in: unfinished. A file being overwritten was
            // not emptied yet (that comes first in `fill`): it keeps its old data.
            match job.truncate {
                false => Outcome::fail(failed, &job, released.err()),
                true => Outcome::error(failed, released.err()),
            }
            continue;
        }
        if let Err(e) = ctx.run(&mut buf, &job) {
            Outcome::fail(failed, &job, Some(e));
        }
    }
}

/// The error for a host entry that changed kind while the copy ran.
pub(super) fn changed(path: &Path) -> Failure {
    Failure::new(
        path.display(),
        Error::msg("changed while being copied (now a symlink or another kind); not followed"),
    )
}

impl Ctx<'_> {
    /// Write one file's data, release it, then give it its xattrs and attributes.
    pub(super) fn run(&self, buf: &mut [u8], job: &Job) -> CmdResult<()> {
        // Written back here, on this worker, rather than all at the unmount's sync.
        let written = self
            .fill(buf, job)
            .and_then(|()| self.fs.write_back(job.ino).ctx(&job.shown));
        let released = self.fs.release(job.ino).ctx(&job.shown);
        written?;
        released?;
        let fd = std::os::fd::AsFd::as_fd(&job.file);
        let src = (!job.xattrs_done).then_some(XattrSource::Fd(fd));
        self.finish(src, &job.path, job.ino, &job.meta, &job.shown)
    }

    /// Write the data of the job's host file into its open image file (emptied first if
    /// it existed).
    fn fill(&self, buf: &mut [u8], job: &Job) -> CmdResult<()> {
        let (file, src, ino, shown) = (&job.file, job.path.display(), job.ino, &job.shown);
        if job.truncate {
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
        let len = job.meta.size;
        // A sparse build's dense file: its whole blocks are lent to the device, not read.
        let lent = (self.lend && job.dense)
            .then(|| LentFile::map(file, &job.path, len))
            .flatten();
        let bs = u64::from(self.fs.block_size());
        // Only the host file's data segments are read; its holes stay holes here.
        let (mut pos, mut copied) = (0u64, 0u64);
        while let Some(start) = seek_data_hole(file, pos, false).ctx(&src)? {
            let end = seek_data_hole(file, start, true)
                .ctx(&src)?
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
                // Of a lent file, the whole blocks (from a block boundary, within its
                // length): lent; the rest is read.
                let lend = match &lent {
                    Some(_) if off.is_multiple_of(bs) => {
                        (want as u64).min(len.saturating_sub(off)) / bs * bs
                    }
                    _ => 0,
                } as usize;
                let n = lend
                    + read_full(&mut buf[..want - lend], |filled, b| {
                        Ok(file.read_at(b, off + (lend + filled) as u64)?)
                    })
                    .ctx(&src)?;
                if n == 0 {
                    break;
                }
                // Charged before it is written: a tree that grew fails here, naming it,
                // before the image runs out of space.
                if let Some(b) = self.budget {
                    b.bytes(n as u64, &src)?;
                }
                if let Some(l) = lent.as_ref().filter(|_| lend > 0) {
                    let whole = &l.bytes()[off as usize..off as usize + lend];
                    l.lend(|| self.write_all(ino, off, whole)).ctx(shown)?;
                    let rest = &buf[..n - lend];
                    self.write_all(ino, off + lend as u64, rest).ctx(shown)?;
                } else if job.dense {
                    self.write_all(ino, off, &buf[..n]).ctx(shown)?;
                } else {
                    for (at, piece) in nonzero_pieces(&buf[..n]) {
                        self.write_all(ino, off + at as u64, piece).ctx(shown)?;
                    }
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

    /// Write all of `data` at `off`, straight to the device where it can go so (block-
    /// aligned; the engine sends the rest through its page cache): a copy's data is
    /// written once and not read back, so caching it would only cost a copy and memory.
    fn write_all(&self, ino: Ino, mut off: u64, mut data: &[u8]) -> Result<(), Error> {
        while !data.is_empty() {
            let n = self.fs.write_direct(ino, off, data)?;
            if n == 0 {
                return Err(Error::msg("write made no progress"));
            }
            data = &data[n.min(data.len())..];
            off += n as u64;
        }
        Ok(())
    }

    /// Copy the extended attributes and ACLs of `src` (host path `path`) to `ino`, as
    /// `cp -a` does: one the image cannot take is a warning (none for "not supported"),
    /// not a failure.
    pub(super) fn xattrs(
        &self,
        src: &XattrSource<'_>,
        path: &Path,
        ino: Ino,
        shown: &str,
    ) -> CmdResult<()> {
        let names = match src {
            XattrSource::Fd(fd) => hostdir::xattr_names_fd(fd),
            XattrSource::At(dir, name) => dir.xattr_names_at(name),
        };
        let names = match names {
            Ok(n) => n,
            Err(e) => {
                self.warn(path.display(), &e.to_string());
                return Ok(());
            }
        };
        for key in names {
            let value = match src {
                XattrSource::Fd(fd) => hostdir::xattr_fd(fd, &key),
                XattrSource::At(dir, name) => dir.xattr_at(name, &key),
            };
            let value = match value {
                Ok(v) => v,
                Err(e) => {
                    self.warn(path.display(), &format!("reading {}: {e}", show(&key)));
                    continue;
                }
            };
            match self.fs.setxattr(ino, &key, &value, XattrFlags::Any) {
                Ok(()) | Err(lanefs::Error::NotSupported(_)) => {}
                Err(
                    e @ (lanefs::Error::Corrupt { .. }
                    | lanefs::Error::Io { .. }
                    | lanefs::Error::ReadOnly),
                ) => return Err(Failure::new(shown, e)),
                Err(e) => self.warn(shown, &format!("setting {}: {e}", show(&key))),
            }
        }
        Ok(())
    }

    /// A one-line warning that does not stop the copy.
    fn warn(&self, what: impl std::fmt::Display, why: &str) {
        let line = format!("lanefs: cp: warning: {what}: {why}");
        self.progress.warn(&line);
    }

    /// Give `ino` the xattrs, owner, permissions and times of host `meta`.
    pub(super) fn finish(
        &self,
        src: Option<XattrSource<'_>>,
        path: &Path,
        ino: Ino,
        meta: &Meta,
        shown: &str,
    ) -> CmdResult<()> {
        if let Some(src) = src {
            self.xattrs(&src, path, ino, shown)?;
        }
        // A reproducible build clamps times to SOURCE_DATE_EPOCH, as
        // reproducible-builds.org specifies.
        let clamp = |t: lanefs::Timespec| match self.clamp {
            Some(c) if t.sec >= c => lanefs::Timespec { sec: c, nsec: 0 },
            _ => t,
        };
        let set = SetAttr {
            perm: (meta.kind != HostType::Symlink).then(|| meta.perm()),
            uid: Some(meta.uid),
            gid: Some(meta.gid),
            atime: Some(clamp(meta.atime)),
            mtime: Some(clamp(meta.mtime)),
            ..SetAttr::default()
        };
        self.fs.setattr(ino, &set).ctx(shown)?;
        Ok(())
    }
}
