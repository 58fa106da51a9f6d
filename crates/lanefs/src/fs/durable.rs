//! Durability: write-back of dirty data, fsync and sync (unmount, which ends with a
//! sync, is in `lifecycle.rs`).

use super::Fs;
use crate::error::{Error, Result};
use crate::types::*;

impl Fs {
    /// Write every cached inode's dirty data to the device (no flush).
    pub(super) fn flush_pages(&self) -> Result<()> {
        for i in self.icache.all() {
            if i.mapping.has_dirty() {
                self.pages.write_back(&i.mapping)?;
            }
        }
        Ok(())
    }

    /// Make the data and metadata of `ino` durable: write its pages, then commit the
    /// newest transaction that changed it (or only flush, if that one is committed).
    /// Concurrent fsyncs share commits. After it returns, the file's data and attributes
    /// survive a crash, and so does its name if it was created in that transaction or an
    /// earlier one. `datasync` (fdatasync) is accepted and does the same.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let f = fs.create(ROOT_INO, b"journal.log", 0o644, Owner::default())?;
    /// fs.write(f.ino, 0, b"entry 1\n")?;
    /// fs.fsync(f.ino, false)?; // durable from here
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn fsync(&self, ino: Ino, datasync: bool) -> Result<()> {
        let _ = datasync;
        self.check_live()?;
        if self.vol.read_only {
            return Ok(());
        }
        self.check_io()?;
        let tid = match self.icache.peek(ino) {
            Some(i) => {
                let tid = i.state.read().tid;
                self.pages.write_back(&i.mapping)?;
                tid
            }
            // Not cached: nothing dirty in memory, but its last change may be uncommitted.
            None => self.journal.running_tid(),
        };
        // Our own commit flushes after our page writes; a commit made by another thread
        // covers them only if one of its flushes began after they were done.
        let mark = self.journal.flush_mark();
        if tid > self.journal.committed_tid() && self.journal.commit_upto(tid)? {
            return Ok(());
        }
        if self.journal.flushed_since(mark) {
            return Ok(());
        }
        // The file's data may be on the realtime device: flush it too.
        if let Some(rt) = self.rtdev() {
            rt.flush()?;
        }
        self.dev.flush()
    }

    /// Write the file's dirty data to the device now, with no commit and no device flush
    /// (`sync_file_range` with WRITE and WAIT_AFTER over the whole file): a bulk writer
    /// (`lanefs cp`, `mkfs -d`) spreads the write-back over its threads instead of leaving
    /// it all to the next sync. Durable only after [`Fs::fsync`] or [`Fs::sync`].
    pub fn write_back(&self, ino: Ino) -> Result<()> {
        self.check_live()?;
        if self.vol.read_only {
            return Ok(());
        }
        self.check_io()?;
        match self.icache.peek(ino) {
            Some(i) => self.pages.write_back(&i.mapping),
            None => Ok(()),
        }
    }

    pub(super) fn check_io(&self) -> Result<()> {
        self.check_live()?;
        if self.latch.failed() || self.journal.is_aborted() {
            return Err(Error::io_other(
                "writing to the device",
                "an earlier device error aborted the journal and made the mount read-only",
            ));
        }
        Ok(())
    }

    /// Make everything durable: write dirty pages, commit, and checkpoint (so the home
    /// locations are current and the log is empty).
    pub fn sync(&self) -> Result<()> {
        self.check_live()?;
        if self.vol.read_only {
            return Ok(());
        }
        self.check_io()?;
        self.sync_all()
    }

    /// What [`Fs::sync`] does, without its checks (a shutdown's last flush).
    pub(super) fn sync_all(&self) -> Result<()> {
        self.flush_pages()?;
        {
            let h = self.journal.start();
            let mut o = self.orphans.list.lock();
            let (fb, fi) = (self.al.free_blocks(), self.ial.free_inodes() as u32);
            self.update_sb(&h, &mut o, |sb| {
                sb.set_free_blocks_count(fb);
                sb.set_free_inodes_count(fi);
                sb.set_wtime(self.now().sec as u32);
            })?;
        }
        self.journal.sync()
    }
}
