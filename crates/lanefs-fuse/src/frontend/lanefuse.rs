//! `LaneFuse`'s own methods: construction from the mount's options, the errno an engine
//! error becomes (and its log line), the replies every handler shares, and the checks
//! the handlers make before they call the engine.

use super::*;

impl LaneFuse {
    /// Serve `fs` with the frontend options of `cfg`; `kernel_checks` when the kernel
    /// checks permissions (`default_permissions`, always so when users other than the
    /// mounter can reach the mount), which then covers POSIX ACLs too.
    pub fn new(fs: Arc<Fs>, cfg: &MountConfig, kernel_checks: bool) -> LaneFuse {
        if let Some(chan) = cfg.flag_channel {
            crate::flagproxy::set_daemon_channel(chan);
        }
        LaneFuse {
            fs,
            attr_ttl: cfg.attr_timeout,
            entry_ttl: cfg.entry_timeout,
            negative_ttl: cfg.negative_timeout,
            writeback_cache: cfg.writeback_cache,
            max_write: cfg.max_write,
            errors: cfg.errors,
            posix_acl: kernel_checks,
            idmap: kernel_checks && cfg.allow_other,
            uring: None,
            notifier: Arc::new(OnceLock::new()),
            mountpoint: None,
            kernel_ro: Default::default(),
            born: std::time::Instant::now(),
            known: Known::default(),
        }
    }

    /// The mount point the kernel will have this mount at.
    pub fn with_mountpoint(mut self, mp: &std::path::Path) -> LaneFuse {
        self.mountpoint = Some(mp.to_path_buf());
        self
    }

    /// Whether the kernel has the mount read-only now (`mount -o remount,ro`, which the
    /// daemon is not told of): looked up in /proc/self/mountinfo at most once a second.
    pub(super) fn kernel_read_only(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(mp) = &self.mountpoint else {
            return false;
        };
        let now = self.born.elapsed().as_millis() as u64 + 1000;
        let (ro, at) = &self.kernel_ro;
        if now.saturating_sub(at.load(Relaxed)) >= 1000 {
            ro.store(crate::mountinfo::read_only(mp), Relaxed);
            at.store(now, Relaxed);
        }
        ro.load(Relaxed)
    }

    /// The slot the session's notifier goes in (set once the session exists).
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// Drop the kernel's cached attributes of `i` (only attributes: offset -1 keeps
    /// its pages), after a change that did not come through setattr: an inode-flag
    /// ioctl changes the change time. The notification only drops a cache, so it may
    /// be sent from inside a request; if it fails, the cache expires with `attr_timeout`.
    pub(super) fn attributes_changed(&self, i: Ino) {
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(INodeNo(to_node(i)), -1, 0);
        }
    }

    /// How an open file is kept: without a FLUSH request at every close
    /// (FOPEN_NOFLUSH), which this daemon would only answer; the kernel ignores the flag
    /// under `writeback_cache`, where a close writes the cached pages back. (A close then
    /// also leaves pages dirtied through a shared mapping to write-back or fsync, as
    /// ext4's close does.)
    pub(super) fn open_flags(&self) -> FopenFlags {
        FopenFlags::FOPEN_NOFLUSH
    }

    /// The errno `e` of `op` on `ino` is answered with: the one place the frontend turns
    /// an engine error into an errno. [`Error::errno`], but corruption and device errors
    /// are logged (one line: the operation, the inode and the error, which for a device
    /// error names the host's own error and errno), reported as EIO, and end the daemon
    /// under `errors=panic` (not once the file system is shut down: it writes nothing
    /// more, and its operations fail with EIO, unlogged).
    pub(super) fn errno(&self, op: &str, ino: Ino, e: Error) -> Errno {
        match e {
            Error::Corrupt { .. } | Error::NotExt4(_) | Error::Io { .. } => {
                log::line(&format!("{op} on inode {ino}: {e}"));
                if self.errors == ErrorPolicy::Panic && !self.fs.is_shut_down() {
                    log::line(
                        "errors=panic: stopping the daemon; the journal replays at the next mount",
                    );
                    std::process::exit(1);
                }
                Errno::EIO
            }
            e => Errno::from_i32(e.errno()),
        }
    }

    pub(super) fn file_attr(&self, a: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(to_node(a.ino)),
            size: a.size,
            blocks: a.blocks,
            atime: to_system(a.atime),
            mtime: to_system(a.mtime),
            ctime: to_system(a.ctime),
            crtime: to_system(a.crtime),
            kind: kind(a.kind),
            perm: a.perm,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: self.fs.block_size(),
            flags: 0,
        }
    }

    /// Answer a create or tmpfile: the new file's entry, opened.
    pub(super) fn created(
        &self,
        reply: ReplyCreate,
        what: &str,
        dir: Ino,
        r: lanefs::Result<Attr>,
    ) {
        match r {
            Ok(a) => {
                self.looked_up(a.ino);
                reply.created(
                    &self.entry_ttl,
                    &self.file_attr(&a),
                    Generation(a.generation.into()),
                    FileHandle(0),
                    self.open_flags(),
                )
            }
            Err(e) => reply.error(self.errno(what, dir, e)),
        }
    }

    pub(super) fn entry(&self, reply: ReplyEntry, op: &str, ino: Ino, r: lanefs::Result<Attr>) {
        match r {
            Ok(a) => {
                self.looked_up(a.ino);
                reply.entry(
                    &self.entry_ttl,
                    &self.file_attr(&a),
                    Generation(a.generation.into()),
                )
            }
            Err(Error::NotFound) if op == "lookup" => not_found(reply, &self.negative_ttl),
            Err(e) => reply.error(self.errno(op, ino, e)),
        }
    }

    /// Hand `dir`'s entries after cursor `offset` to `add`, read `batch` at a time, until
    /// `add` says the reply is full (the kernel resumes from the last entry added).
    pub(super) fn each_entry(
        &self,
        op: &str,
        dir: Ino,
        offset: u64,
        batch: usize,
        mut add: impl FnMut(&lanefs::DirEntry) -> Result<bool, Errno>,
    ) -> Result<(), Errno> {
        let mut pos = offset;
        loop {
            let entries = self
                .fs
                .readdir(dir, pos, batch)
                .map_err(|e| self.errno(op, dir, e))?;
            if entries.is_empty() {
                self.accessed(dir);
                return Ok(());
            }
            for e in &entries {
                if add(e)? {
                    self.accessed(dir);
                    return Ok(());
                }
                pos = e.next;
            }
        }
    }

    /// Before a removal of `name` in `dir`: if it names a directory, or a file with one
    /// link, take an open reference on it (so that once removed the engine keeps it as an
    /// orphan) and return it.
    pub(super) fn hold_removed(&self, dir: Ino, name: &[u8]) -> Option<Ino> {
        let a = self.fs.lookup(dir, name).ok()?;
        if a.kind != FileType::Directory && a.nlink > 1 {
            return None;
        }
        self.fs.open(a.ino).ok()?;
        Some(a.ino)
    }

    /// The kernel took an entry for `ino` (its lookup count goes up by one).
    pub(super) fn looked_up(&self, ino: Ino) {
        self.known.shard(ino).entry(ino).or_default().lookups += 1;
    }

    /// After the removal `hold_removed` prepared: kept while the kernel still knows the
    /// inode when it was removed, let go at once when not.
    pub(super) fn removed(&self, held: Option<Ino>, done: bool) {
        let Some(ino) = held else { return };
        let kept = done && {
            let mut known = self.known.shard(ino);
            match known.get_mut(&ino) {
                Some(c) if c.lookups > 0 => {
                    c.holds += 1;
                    true
                }
                _ => false,
            }
        };
        if !kept {
            self.release(ino, 1);
        }
    }

    /// The kernel forgot `n` lookups of `ino`: at zero, a removed inode it held can go.
    pub(super) fn forgotten(&self, ino: Ino, n: u64) {
        let holds = {
            let mut known = self.known.shard(ino);
            let Some(c) = known.get_mut(&ino) else { return };
            c.lookups = c.lookups.saturating_sub(n);
            if c.lookups > 0 {
                return;
            }
            let holds = c.holds;
            known.remove(&ino);
            holds
        };
        self.release(ino, holds);
    }

    /// Let go of every removed inode still held (the session is ending: the kernel sends
    /// no FORGET for what it knew when the connection closed).
    pub(super) fn release_removed(&self) {
        for shard in &self.known.0 {
            let all: Vec<(Ino, u32)> = {
                let mut m = shard.lock().unwrap_or_else(|e| e.into_inner());
                m.drain().map(|(ino, c)| (ino, c.holds)).collect()
            };
            for (ino, holds) in all {
                self.release(ino, holds);
            }
        }
    }

    /// Drop `n` open references of `ino` taken by `hold_removed`.
    fn release(&self, ino: Ino, n: u32) {
        for _ in 0..n {
            if let Err(e) = self.fs.release(ino) {
                let _ = self.errno("release", ino, e);
            }
        }
    }

    /// A read of `ino` succeeded: its access time as the mount's atime policy says (the
    /// kernel leaves atime to FUSE daemons). A failure to note it fails nothing.
    pub(super) fn accessed(&self, ino: Ino) {
        // A mount the kernel remounted read-only writes nothing, access times included.
        if self.kernel_read_only() {
            return;
        }
        if let Err(e) = self.fs.touch_atime(ino) {
            let _ = self.errno("atime update", ino, e);
        }
    }

    pub(super) fn empty(&self, reply: ReplyEmpty, op: &str, ino: Ino, r: lanefs::Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.errno(op, ino, e)),
        }
    }
}

/// The kernel's lookup count and the removal holds of each inode it knows, in shards by
/// inode number (an entry reply, an unlink and a FORGET take one shard's lock, briefly).
pub(super) struct Known([std::sync::Mutex<std::collections::HashMap<Ino, Counts>>; 64]);

impl Default for Known {
    fn default() -> Known {
        Known(std::array::from_fn(|_| Default::default()))
    }
}

/// One inode's counts in [`Known`].
#[derive(Default)]
pub(super) struct Counts {
    /// Lookups the kernel has not forgotten.
    lookups: u64,
    /// Open references taken when it was removed.
    holds: u32,
}

impl Known {
    fn shard(&self, ino: Ino) -> std::sync::MutexGuard<'_, std::collections::HashMap<Ino, Counts>> {
        self.0[(ino % 64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}
