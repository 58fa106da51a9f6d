//! Durability: write-back of dirty data, fsync, sync, and unmount (and its best-effort
//! twin, `Drop`).

use super::Fs;
use crate::disk::superblock as sbm;
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
        if let Some(rt) = &self.rtdev {
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

    fn check_io(&self) -> Result<()> {
        self.check_live()?;
        if self.latch.failed() || self.journal.is_aborted() {
            return Err(Error::Io(
                "an earlier device error aborted the journal and made the mount read-only".into(),
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
            let mut o = self.orphans.lock();
            let (fb, fi) = (self.al.free_blocks(), self.ial.free_inodes() as u32);
            self.update_sb(&h, &mut o, |sb| {
                sb.set_free_blocks_count(fb);
                sb.set_free_inodes_count(fi);
                sb.set_wtime(self.now().sec as u32);
            })?;
        }
        self.journal.sync()
    }

    /// Journal counters since mount.
    pub fn journal_stats(&self) -> crate::journal::JournalStats {
        self.journal.stats()
    }

    /// Write everything and release the device: inodes still open are released first,
    /// then everything is synced, the journal marked empty and the superblock marked
    /// clean, so `e2fsck -fn` and the kernel find a clean file system. Dropping the last
    /// `Arc<Fs>` without unmounting does the same, but has no way to report an error.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev.clone(), MountOptions::default())?;
    /// use lanefs::fsck;
    /// let f = fs.create(ROOT_INO, b"open", 0o644, Owner::default())?; // left open
    /// fs.write(f.ino, 0, b"data")?;
    /// fs.unmount()?;
    /// let report = fsck::check(&*dev, &fsck::FsckOptions::default())?;
    /// assert!(report.is_clean(), "{}", report.summary());
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn unmount(self: std::sync::Arc<Self>) -> Result<()> {
        if self.is_shut_down() {
            // Nothing more is written (the device refuses it anyway): the image keeps what
            // was committed, and the next mount replays the journal.
            self.stop_timer();
            return Ok(());
        }
        if self.vol.read_only {
            return Ok(());
        }
        self.check_io()?;
        self.stop_timer();
        for i in self.icache.all() {
            if i.is_open() {
                i.open.store(1, std::sync::atomic::Ordering::Release);
                self.release(i.ino)?;
            }
        }
        self.sync()?;
        self.journal.mark_empty(self.vol.clamp_time.is_some())?;
        self.dev.flush()?;
        self.write_super_clean()?;
        self.release_mmp()
    }

    /// Give up the multi-mount protection claim (the MMP block goes CLEAN).
    fn release_mmp(&self) -> Result<()> {
        let g = self.mmp.lock().unwrap_or_else(|e| e.into_inner()).take();
        match g {
            Some(mut g) => g.release(),
            None => Ok(()),
        }
    }

    /// The clean-unmount superblock, written in place: log empty, no recovery needed.
    fn write_super_clean(&self) -> Result<()> {
        let mut sbg = self.sb.lock();
        let sb = &mut *sbg;
        sb.set_free_blocks_count(self.al.free_blocks());
        sb.set_free_inodes_count(self.ial.free_inodes() as u32);
        sb.set_wtime(self.now().sec as u32);
        // Lifetime writes, as the kernel keeps them: what the mount found plus what this
        // mount wrote (this superblock write included). Not under a time clamp (a
        // reproducible build): how much the journal writes depends on when it commits.
        if self.vol.clamp_time.is_none() {
            let written = self.latch.bytes_written() + sbm::SB_SIZE as u64;
            sb.set_kbytes_written(self.vol.kbytes_at_mount + written / 1024);
        }
        sb.set_state(sb.state() | 1);
        sb.set_feature_incompat(
            sb.feature_incompat() & !crate::disk::superblock::incompat::RECOVER,
        );
        sb.update_checksum();
        let raw = sb.raw.clone();
        drop(sbg);
        self.dev.write_at(sbm::SB_OFFSET, &raw[..])?;
        self.dev.flush()
    }

    /// Stop the commit timer and the flusher and wait for their threads to end (unless
    /// called on one of them), so they hold no reference to the mount afterwards.
    fn stop_timer(&self) {
        self.timer_stop
            .store(true, std::sync::atomic::Ordering::Release);
        self.journal.stop_kick();
        let threads = std::mem::take(&mut *self.timer.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            t.thread().unpark();
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        self.stop_timer();
        // Best effort for callers that never unmounted: release what is still open (an
        // unlinked file's blocks) and unmount cleanly, as unmount does.
        if self.is_read_only() || self.journal.is_aborted() {
            return;
        }
        for i in self.icache.all() {
            if i.is_open() {
                i.open.store(1, std::sync::atomic::Ordering::Release);
                let _ = self.release(i.ino);
            }
        }
        if self.sync().is_ok()
            && self
                .journal
                .mark_empty(self.vol.clamp_time.is_some())
                .is_ok()
            && self.dev.flush().is_ok()
        {
            let _ = self.write_super_clean();
        }
        let _ = self.release_mmp();
    }
}
