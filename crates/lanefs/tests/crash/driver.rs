//! The driver: every operation a workload makes, applied to the engine and recorded in the
//! model, acknowledgements included; an operation that fails once the power is cut stops
//! the workload (before the cut, a failure is a bug).

use super::*;

// ---------------------------------------------------------------------------------------
// The driver: every operation on the engine and on the model.

/// The workload must stop: the device lost power.
#[derive(Debug)]
pub(super) struct Stop;

pub(super) type R<T> = Result<T, Stop>;

pub(super) struct Driver<'a> {
    pub(super) fs: &'a Fs,
    pub(super) dev: &'a CrashDevice,
    pub(super) m: Model,
    /// `dev.flushes()` after each successful `sync()`.
    pub(super) sync_flushes: Vec<u64>,
    /// The last operations, for messages.
    pub(super) trace: VecDeque<String>,
    pub(super) ops: u64,
    pub(super) ctx: String,
}

impl Driver<'_> {
    fn note(&mut self, what: String) {
        self.ops += 1;
        if self.trace.len() == 12 {
            self.trace.pop_front();
        }
        self.trace.push_back(what);
    }

    /// An operation failed: fine once the power is cut (the workload stops), a bug before.
    fn failed(&self, what: &str, e: Error) -> Stop {
        assert!(
            self.dev.is_cut(),
            "{}: {what} failed with the power on: {e:?}\nlast operations: {:?}",
            self.ctx,
            self.trace
        );
        Stop
    }

    fn ino(&self, n: NodeId) -> Ino {
        self.m.nodes[n]
            .ino
            .expect("operation on a node of unknown number")
    }

    fn path(&self, dir: NodeId, name: &[u8]) -> String {
        let d = &self.m.nodes[dir].label;
        let sep = if d.ends_with('/') { "" } else { "/" };
        format!("{d}{sep}{}", String::from_utf8_lossy(name))
    }

    pub(super) fn create(&mut self, dir: NodeId, name: &[u8]) -> R<NodeId> {
        self.make(dir, name, FileType::Regular)
    }

    pub(super) fn mkdir(&mut self, dir: NodeId, name: &[u8]) -> R<NodeId> {
        self.make(dir, name, FileType::Directory)
    }

    fn make(&mut self, dir: NodeId, name: &[u8], kind: FileType) -> R<NodeId> {
        let path = self.path(dir, name);
        self.note(format!("{kind:?} {path}"));
        let dino = self.ino(dir);
        let r = if kind == FileType::Directory {
            self.fs.mkdir(dino, name, 0o755, OWNER)
        } else {
            self.fs
                .create(dino, name, 0o644, OWNER)
                .and_then(|a| self.fs.release(a.ino).map(|()| a))
        };
        let ino = r.as_ref().ok().map(|a| a.ino);
        let id = self.m.add_node(ino, kind, path.clone());
        self.m.set_name(dir, name, Some(id));
        match r {
            Ok(_) => Ok(id),
            Err(e) => Err(self.failed(&format!("create {path}"), e)),
        }
    }

    pub(super) fn write(&mut self, f: NodeId, off: u64, data: &[u8]) -> R<()> {
        self.note(format!(
            "write {} [{off}, {})",
            self.m.nodes[f].label,
            off + data.len() as u64
        ));
        let mut c = self.m.content(f).clone();
        let end = off as usize + data.len();
        if c.len() < end {
            c.resize(end, 0);
        }
        c[off as usize..end].copy_from_slice(data);
        self.m.push_content(f, c);
        match self.fs.write(self.ino(f), off, data) {
            Ok(n) => {
                assert_eq!(n, data.len(), "{}: short write", self.ctx);
                Ok(())
            }
            Err(e) => Err(self.failed("write", e)),
        }
    }

    pub(super) fn truncate(&mut self, f: NodeId, size: u64) -> R<()> {
        self.note(format!("truncate {} to {size}", self.m.nodes[f].label));
        let mut c = self.m.content(f).clone();
        let (new, tail) = (size as usize, (size.div_ceil(bs()) * bs()) as usize);
        if new < c.len() && new < tail {
            // Truncating zeroes the rest of the new last block, a data write that (as in
            // ext4's ordered mode) may reach the device before the new size does.
            let end = tail.min(c.len());
            c[new..end].fill(0);
            self.m.push_content(f, c.clone());
        }
        c.resize(new, 0);
        self.m.push_content(f, c);
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        match self.fs.setattr(self.ino(f), &set) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failed("truncate", e)),
        }
    }

    pub(super) fn fallocate(&mut self, f: NodeId, mode: FallocMode, off: u64, len: u64) -> R<()> {
        self.note(format!(
            "fallocate {} {mode:?} [{off}, {})",
            self.m.nodes[f].label,
            off + len
        ));
        let mut c = self.m.content(f).clone();
        let end = (off + len) as usize;
        if mode.punch_hole {
            let stop = end.min(c.len());
            if (off as usize) < stop {
                c[off as usize..stop].fill(0);
            }
        } else if !mode.keep_size && c.len() < end {
            c.resize(end, 0);
        }
        if !extents() {
            // Linux refuses fallocate on block-mapped files (EOPNOTSUPP); lanefs may too,
            // and then nothing changed.
            let r = self.fs.fallocate(self.ino(f), mode, off, len);
            if matches!(r, Err(Error::NotSupported(_))) && !self.dev.is_cut() {
                return Ok(());
            }
            self.m.push_content(f, c);
            return r.map_err(|e| self.failed("fallocate", e));
        }
        self.m.push_content(f, c);
        match self.fs.fallocate(self.ino(f), mode, off, len) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.failed("fallocate", e)),
        }
    }

    pub(super) fn unlink(&mut self, dir: NodeId, name: &[u8]) -> R<()> {
        let path = self.path(dir, name);
        self.note(format!("unlink {path}"));
        let kind = self.m.lookup(dir, name).map(|n| self.m.nodes[n].kind);
        self.m.set_name(dir, name, None);
        let r = if kind == Some(FileType::Directory) {
            self.fs.rmdir(self.ino(dir), name)
        } else {
            self.fs.unlink(self.ino(dir), name)
        };
        r.map_err(|e| self.failed(&format!("unlink {path}"), e))
    }

    pub(super) fn rename(&mut self, dir: NodeId, name: &[u8], to: NodeId, newname: &[u8]) -> R<()> {
        let (a, b) = (self.path(dir, name), self.path(to, newname));
        self.note(format!("rename {a} -> {b}"));
        let n = self.m.lookup(dir, name);
        assert!(n.is_some(), "{}: rename of a missing name {a}", self.ctx);
        self.m.set_name(dir, name, None);
        self.m.set_name(to, newname, n);
        self.fs
            .rename(self.ino(dir), name, self.ino(to), newname)
            .map_err(|e| self.failed(&format!("rename {a} -> {b}"), e))
    }

    pub(super) fn fsync(&mut self, n: NodeId, datasync: bool) -> R<()> {
        self.note(format!(
            "fsync {} datasync={datasync}",
            self.m.nodes[n].label
        ));
        match self.fs.fsync(self.ino(n), datasync) {
            Ok(()) => {
                if self.m.nodes[n].kind == FileType::Directory {
                    self.m.ack_dir(n);
                }
                self.m.ack_node(n);
                Ok(())
            }
            Err(e) => Err(self.failed("fsync", e)),
        }
    }

    pub(super) fn sync(&mut self) -> R<()> {
        self.note("sync".into());
        match self.fs.sync() {
            Ok(()) => {
                self.m.ack_all();
                self.sync_flushes.push(self.dev.flushes());
                Ok(())
            }
            Err(e) => Err(self.failed("sync", e)),
        }
    }
}
