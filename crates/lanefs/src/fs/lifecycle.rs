//! The mount's life: mount (read the superblock, replay the journal, build the layers and
//! the `Volume`, claim the image under MMP), mark it mounted, the commit timer and the
//! page cache's flusher, and unmount (and its best-effort twin, `Drop`) with the clean
//! superblock. The superblock is written in place (outside the journal) only here, by
//! `Fs::write_super_in_place`: at mount and at the clean unmount.

use super::open::*;
use super::{rt, Fs, MountOptions};
use crate::alloc::reserve::default_reserve;
use crate::alloc::{AllocOptions, Allocator, Geometry};
use crate::buf::BufCache;
use crate::dev::{BlockDevice, ErrorLatch, FileDevice};
use crate::disk::superblock::{self as sbm, incompat, ro_compat, Superblock};
use crate::error::{Error, Result};
use crate::ialloc::InodeAllocator;
use crate::icache::ICache;
use crate::journal::{Journal, LogArea};
use crate::sync::{Mutex, RENAME, SUPER};
use crate::types::*;
use crate::volume::{DirHash, Features, Volume};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What the mount's life keeps: its background threads, the shutdown state and the MMP
/// claim.
pub(super) struct Life {
    /// The background threads (the commit timer, the page cache's flusher); `unmount`
    /// joins them, so the device is closed (and its claim released) once the caller's
    /// last `Arc` goes.
    threads: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The background threads are to end.
    stop: AtomicBool,
    /// Shut down (`Fs::shutdown`): no operation starts, nothing more is written.
    pub(super) shut: AtomicBool,
    /// Held by the one shutdown under way.
    pub(super) shutdown_lock: std::sync::Mutex<()>,
    /// The multi-mount protection claim of a read-write mount of an mmp image.
    pub(super) mmp: std::sync::Mutex<Option<crate::mmp::MmpGuard>>,
}

impl Life {
    fn new(mmp: Option<crate::mmp::MmpGuard>) -> Life {
        Life {
            threads: std::sync::Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            shut: AtomicBool::new(false),
            shutdown_lock: std::sync::Mutex::new(()),
            mmp: std::sync::Mutex::new(mmp),
        }
    }

    /// Whether the background threads are to end.
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Keep background thread `t`, for the unmount to join.
    fn adopt(&self, t: std::thread::JoinHandle<()>) {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t);
    }
}

impl Fs {
    /// Open the image or device at `path` and mount it, as [`Fs::mount`] does. The image
    /// is claimed for as long as the mount lives ([`FileDevice::open`]): a second
    /// read-write mount of it, from this process or another, fails with [`Error::Busy`].
    ///
    /// ```
    /// use lanefs::{mkfs, Error, FileDevice, Fs, MountOptions};
    ///
    /// let tmp = tempfile::tempdir().unwrap();
    /// let img = tmp.path().join("disk.img");
    /// mkfs::format(&FileDevice::create(&img, 32 << 20)?, &mkfs::MkfsOptions::default())?;
    ///
    /// let fs = Fs::mount_path(&img, MountOptions::default())?;
    /// let again = Fs::mount_path(&img, MountOptions::default());
    /// assert!(matches!(again, Err(Error::Busy(_))));
    /// fs.unmount()?;
    /// drop(Fs::mount_path(&img, MountOptions::default())?); // free again
    /// # Ok::<(), Error>(())
    /// ```
    pub fn mount_path(path: &Path, mut opts: MountOptions) -> Result<Arc<Fs>> {
        let dev = if opts.snapshot {
            opts.read_only = true;
            FileDevice::open_snapshot(path)?
        } else {
            FileDevice::open(path, opts.read_only)?
        };
        let rtdev = rt::open_rtdev(&opts)?;
        Fs::mount_named(Arc::new(dev), rtdev, opts, &path.display().to_string())
    }

    /// Mount the file system on `dev`: replay the journal if it holds committed
    /// transactions (in memory only on a read-only mount), then release the inodes left
    /// on the orphan list. The realtime device, if the image has one, is `opts.rtdev`.
    ///
    /// Fails with [`Error::Unsupported`] for images lanefs cannot read (naming the
    /// features), [`Error::Corrupt`] for a damaged superblock, descriptor, journal or root,
    /// and mounts read-only, saying why in [`Fs::read_only_reason`], images it reads but
    /// does not write.
    ///
    /// ```
    /// use lanefs::{mkfs, CrashDevice, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// use std::sync::Arc;
    ///
    /// let dev = Arc::new(CrashDevice::new(32 << 20));
    /// mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// let fs = Fs::mount(dev.clone(), MountOptions::default())?;
    /// let f = fs.create(ROOT_INO, b"a", 0o644, Owner::default())?;
    /// fs.write(f.ino, 0, b"abc")?;
    /// fs.fsync(f.ino, false)?;
    /// dev.power_cut(); // every later write fails: the machine is gone
    /// drop(fs);
    ///
    /// // What the device had made durable: the file is in the journal, not yet home.
    /// let after = Arc::new(MemDevice::from_vec(dev.durable()));
    /// let fs = Fs::mount(after, MountOptions::default())?; // replays it
    /// assert_eq!(fs.lookup(ROOT_INO, b"a")?.size, 3);
    /// assert_eq!(fs.read_only_reason(), None);
    /// fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn mount(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<Arc<Fs>> {
        let rtdev = rt::open_rtdev(&opts)?;
        Fs::mount_named(dev, rtdev, opts, "the device")
    }

    /// [`Fs::mount`] of an image whose realtime data device is `rtdev` (any device, as
    /// tests use memory ones).
    pub fn mount_rt(
        dev: Arc<dyn BlockDevice>,
        rtdev: Arc<dyn BlockDevice>,
        opts: MountOptions,
    ) -> Result<Arc<Fs>> {
        Fs::mount_named(dev, Some(rtdev), opts, "the device")
    }

    /// [`Fs::mount`], naming the device `dev_name` in errors and in the MMP block.
    fn mount_named(
        dev: Arc<dyn BlockDevice>,
        rtdev: Option<Arc<dyn BlockDevice>>,
        opts: MountOptions,
        dev_name: &str,
    ) -> Result<Arc<Fs>> {
        let latch = Arc::new(ErrorLatch::new(dev));
        let dev: Arc<dyn BlockDevice> = latch.clone();
        // A shutdown stops the realtime device's writes with the image's.
        let rtdev = rtdev
            .map(|d| -> Arc<dyn BlockDevice> { Arc::new(ErrorLatch::sharing_shutdown(d, &latch)) });
        let sb = read_super(&*dev)?;
        let ro_reason = check_features(&sb)?;
        let rt_geo = rt::check_rtdev(&sb, rtdev.as_deref())?;
        let read_only = ro_reason.is_some() || opts.read_only;
        let bs = sb.block_size();
        // Before anything is written (replay included), as ext4_fill_super does.
        let mmp = if !read_only && sb.has_incompat(incompat::MMP) {
            Some(crate::mmp::protect(&dev, &sb, dev_name, &latch)?)
        } else {
            None
        };
        let Recovered {
            sb,
            bufs,
            log,
            next_tid,
        } = recover_journal(sb, &dev, &opts, read_only)?;
        let geo = Geometry::from_superblock(&sb);
        let (ial, al) = allocators(&geo, &sb, &bufs, &opts)?;
        // The realtime allocator, from the bitmap and summary inodes.
        let rt = match (rt_geo, rtdev) {
            (Some(geo), Some(dev)) => {
                let ea_inode = sb.has_incompat(incompat::EA_INODE);
                let alloc = rt::open_rt(geo, &al, &ial, &bufs, opts.rt_alloc, ea_inode)?;
                Some(rt::Rt { dev, alloc })
            }
            _ => None,
        };
        let layers = Layers {
            dev: &dev,
            bufs: &bufs,
            al: &al,
            ial: &ial,
            rt: rt.as_ref(),
        };
        let journal = start_journal(&layers, &sb, log, next_tid, read_only, bs as usize)?;
        let vol = mount_volume(geo, &sb, &opts, read_only, ro_reason);
        let fs = Fs {
            vol,
            journal,
            large_file: std::sync::atomic::AtomicBool::new(sb.has_ro_compat(ro_compat::LARGE_FILE)),
            rt,
            sb: Mutex::new(&SUPER, sb),
            rename_lock: Mutex::new(&RENAME, ()),
            orphans: super::orphan::Orphans::new(),
            icache: ICache::new(opts.icache, opts.icache_limit),
            pages: crate::page::PageCache::new(
                dev.clone(),
                bs as usize,
                opts.folio_max_order,
                opts.pagecache_limit,
            ),
            ial,
            dev,
            bufs,
            al,
            life: Life::new(mmp),
            latch,
        };
        fs.check_root()?;
        if !read_only {
            fs.mark_mounted(opts.count_mount)?;
            fs.process_orphans()?;
        }
        let fs = Arc::new(fs);
        if !read_only && !opts.commit_interval.is_zero() {
            fs.start_timer(opts.commit_interval);
        }
        if !read_only {
            fs.start_flusher();
        }
        Ok(fs)
    }

    /// The root inode is in use and a directory: an image without one does not mount.
    fn check_root(&self) -> Result<()> {
        let root = self.iget(ROOT_INO).map_err(|e| match e {
            Error::NotFound => {
                Error::corrupt("inode", ROOT_INO, "root directory inode is not in use")
            }
            e => e,
        })?;
        if FileType::from_mode(root.state.read().d.mode()) != Some(FileType::Directory) {
            return Err(Error::corrupt("inode", ROOT_INO, "root is not a directory"));
        }
        Ok(())
    }

    /// Mark the file system mounted (not clean; needing recovery if it has a journal),
    /// counting the mount if asked.
    fn mark_mounted(&self, count: bool) -> Result<()> {
        let t = self.now().sec as u32;
        let journaled = self.journal.has_log();
        self.write_super_in_place(|sb| {
            sb.set_state(sb.state() & !1);
            if count {
                sb.set_mnt_count(sb.mnt_count().wrapping_add(1));
                sb.set_mtime(t);
            }
            if journaled {
                // Until a clean unmount, the log may hold committed transactions.
                sb.set_feature_incompat(sb.feature_incompat() | incompat::RECOVER);
            }
        })?;
        // The cached superblock block (read later, for journaled superblock updates) sees
        // this.
        self.bufs.forget(sbm::location(self.vol.bs()).0);
        Ok(())
    }

    /// Change the superblock with `f` and write it in place, outside the journal, then
    /// flush the device: the mount's and the clean unmount's superblock (every other
    /// change goes through the journal, `Fs::update_sb`).
    fn write_super_in_place(&self, f: impl FnOnce(&mut Superblock)) -> Result<()> {
        let raw = {
            let mut sb = self.sb.lock();
            f(&mut sb);
            sb.update_checksum();
            sb.raw.clone()
        };
        self.dev.write_at(sbm::SB_OFFSET, &raw[..])?;
        self.dev.flush()
    }

    /// Commit on a timer (ext4's `commit=`), writing dirty data pages first; and commit
    /// when a handle finds its transaction full (jbd2's kjournald2).
    fn start_timer(self: &Arc<Self>, every: std::time::Duration) {
        let weak = Arc::downgrade(self);
        let t = std::thread::Builder::new()
            .name("lanefs-commit".into())
            .spawn(move || {
                let mut last = std::time::Instant::now();
                loop {
                    std::thread::park_timeout(every.saturating_sub(last.elapsed()));
                    let Some(fs) = weak.upgrade() else { return };
                    if fs.life.stopping() {
                        return;
                    }
                    if fs.is_read_only() {
                        continue;
                    }
                    // A handle found its transaction full: commit now, nothing else
                    // (that handle's thread may hold inode locks; a commit takes none).
                    // Or the inode cache is held over its limit by inodes that only a
                    // commit makes evictable.
                    if fs.journal.take_kick() | fs.icache.take_pinned() {
                        let _ = fs.journal.commit_running();
                    }
                    if last.elapsed() >= every {
                        last = std::time::Instant::now();
                        // Data dirty for a commit interval goes out, then the commit.
                        let _ = fs
                            .pages
                            .write_back_files(|| false)
                            .and_then(|()| fs.journal.commit_running());
                    }
                    // A commit's ordered-data writes held folios the sweeps had to skip
                    // (one load when the cache is within its limit).
                    fs.pages.balance();
                }
            });
        if let Ok(t) = t {
            let th = t.thread().clone();
            let th2 = th.clone();
            self.journal.set_kick(Box::new(move || th.unpark()));
            self.icache.set_waker(Box::new(move || th2.unpark()));
            self.life.adopt(t);
        }
    }

    /// The page cache's background flusher (the kernel's per-device write-back worker):
    /// woken by a writer when dirty data passes the background threshold, it writes dirty
    /// files back, oldest first, until dirty data is under half of it. It takes no inode
    /// lock, so a writer it races with only waits on a folio it is writing.
    fn start_flusher(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let t = std::thread::Builder::new()
            .name("lanefs-flush".into())
            .spawn(move || loop {
                std::thread::park();
                let Some(fs) = weak.upgrade() else { return };
                if fs.life.stopping() {
                    return;
                }
                if fs.is_read_only() || !fs.pages.over_background() {
                    continue;
                }
                // An error leaves the data dirty: fsync and the commit timer retry it and
                // report it.
                let _ = fs
                    .pages
                    .write_back_files(|| fs.pages.under_background_goal());
            });
        if let Ok(t) = t {
            let th = t.thread().clone();
            self.pages.set_flusher(Box::new(move || th.unpark()));
            self.life.adopt(t);
        }
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
        let g = self
            .life
            .mmp
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match g {
            Some(mut g) => g.release(),
            None => Ok(()),
        }
    }

    /// The clean-unmount superblock, written in place: log empty, no recovery needed.
    fn write_super_clean(&self) -> Result<()> {
        let free_blocks = self.al.free_blocks();
        let free_inodes = self.ial.free_inodes() as u32;
        let t = self.now().sec as u32;
        // Lifetime writes, as the kernel keeps them: what the mount found plus what this
        // mount wrote (this superblock write included). Not under a time clamp (a
        // reproducible build): how much the journal writes depends on when it commits.
        let kbytes = self.vol.clamp_time.is_none().then(|| {
            let written = self.latch.bytes_written() + sbm::SB_SIZE as u64;
            self.vol.kbytes_at_mount + written / 1024
        });
        self.write_super_in_place(|sb| {
            sb.set_free_blocks_count(free_blocks);
            sb.set_free_inodes_count(free_inodes);
            sb.set_wtime(t);
            if let Some(k) = kbytes {
                sb.set_kbytes_written(k);
            }
            sb.set_state(sb.state() | 1);
            sb.set_feature_incompat(sb.feature_incompat() & !incompat::RECOVER);
        })
    }

    /// Stop the commit timer and the flusher and wait for their threads to end (unless
    /// called on one of them), so they hold no reference to the mount afterwards.
    fn stop_timer(&self) {
        self.life.stop.store(true, Ordering::Release);
        self.journal.stop_kick();
        let threads =
            std::mem::take(&mut *self.life.threads.lock().unwrap_or_else(|e| e.into_inner()));
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

/// What a mount reads before its layers: the superblock (read again after a replay
/// that rewrote it), the buffer cache, the log area (none without a journal) and the
/// next transaction's id.
struct Recovered {
    sb: Superblock,
    bufs: Arc<BufCache>,
    log: Option<LogArea>,
    next_tid: u64,
}

/// Find the journal of the image `sb` describes and replay what it holds: written home
/// and flushed on a read-write mount, kept in the buffer cache (pinned) on a read-only
/// one; the superblock is read again from either, and checked again. The buffer cache is
/// a fresh one after a replay (the replay rewrote blocks the journal lookup cached).
fn recover_journal(
    sb: Superblock,
    dev: &Arc<dyn BlockDevice>,
    opts: &MountOptions,
    read_only: bool,
) -> Result<Recovered> {
    let bs = sb.block_size();
    let bufs = Arc::new(BufCache::new(dev.clone(), bs as usize, opts.bufcache_limit));
    let (log, replay) = open_journal(&sb, dev, &bufs)?;
    let mut next_tid = log
        .as_ref()
        .map_or(1, |l| u64::from(l.js.sequence()).max(1));
    // Replay rewrites blocks the journal lookup cached: start over with a fresh cache.
    let bufs = if replay.is_some() {
        Arc::new(BufCache::new(dev.clone(), bs as usize, opts.bufcache_limit))
    } else {
        bufs
    };
    let mut sb = sb;
    if let Some(r) = &replay {
        next_tid = u64::from(r.end_tid.wrapping_add(1)).max(1);
        if read_only {
            for (blk, data) in &r.blocks {
                bufs.insert_pinned(*blk, data);
            }
            let (blk, off) = sbm::location(bs);
            let b = bufs.get(blk)?;
            sb = Superblock::decode(&b.read()[off..off + sbm::SB_SIZE], dev.size())?;
        } else {
            for (blk, data) in &r.blocks {
                dev.write_at(blk * u64::from(bs), data)?;
            }
            dev.flush()?;
            sb = read_super(&**dev)?;
        }
        check_features(&sb)?;
    }
    Ok(Recovered {
        sb,
        bufs,
        log,
        next_tid,
    })
}

/// The inode and block allocators of the image `sb` describes (geometry `geo`), built
/// from its group descriptors with the mount's policies and reserve.
fn allocators(
    geo: &Geometry,
    sb: &Superblock,
    bufs: &Arc<BufCache>,
    opts: &MountOptions,
) -> Result<(Arc<InodeAllocator>, Arc<Allocator>)> {
    let (descs, gdt) = read_gdt(geo, bufs)?;
    // One descriptor per group: each allocator keeps a group's state by its number.
    debug_assert_eq!(descs.len(), geo.groups as usize, "group descriptors read");
    let ial = Arc::new(InodeAllocator::new(
        geo.clone(),
        &descs,
        bufs.clone(),
        opts.ialloc,
        sb.hash_seed(),
    ));
    let al = Arc::new(
        Allocator::new(geo.clone(), descs, gdt, bufs.clone())
            .with_options(AllocOptions {
                trylock: opts.mb_trylock,
                stream: opts.mb_stream_goal,
                optimize_scan: opts.mb_optimize_scan,
            })
            .with_reserve(opts.reserved_blocks.unwrap_or_else(|| {
                default_reserve(sb.blocks_count(), sb.has_incompat(incompat::EXTENTS))
            })),
    );
    Ok((ial, al))
}

/// The layers a mount's journal is hooked to: the image, its buffer cache, the
/// allocators and the realtime device, if any.
struct Layers<'a> {
    dev: &'a Arc<dyn BlockDevice>,
    bufs: &'a Arc<BufCache>,
    al: &'a Arc<Allocator>,
    ial: &'a Arc<InodeAllocator>,
    rt: Option<&'a rt::Rt>,
}

/// The mount's journal over `log` (blocks of `bs` bytes), its next transaction
/// `next_tid`. On a read-write mount the log is first written empty, starting at its
/// first block, in the format lanefs writes. Hooks: at each commit the allocators release
/// the frees it made, before each commit they seal their bitmaps and descriptors, and the
/// realtime device is flushed with the log.
fn start_journal(
    l: &Layers<'_>,
    sb: &Superblock,
    mut log: Option<LogArea>,
    next_tid: u64,
    read_only: bool,
    bs: usize,
) -> Result<Journal> {
    if let (Some(lg), false) = (log.as_mut(), read_only) {
        // An empty log starting at its first block, in the format lanefs writes.
        lg.js
            .set_write_features(sb.has_incompat(incompat::BIT64), sb.metadata_csum());
        lg.js.set_start(lg.first(), next_tid as u32);
        lg.write_super(&**l.dev)?;
        l.dev.flush()?;
    }
    let journal = Journal::new(l.dev.clone(), l.bufs.clone(), log, next_tid, bs);
    let (alc, ialc) = (l.al.clone(), l.ial.clone());
    let rtc = l.rt.map(|r| r.alloc.clone());
    journal.set_on_commit(Box::new(move |tid| {
        alc.release_committed(tid);
        if let Some(rt) = &rtc {
            rt.committed(tid);
        }
        ialc.release_committed(tid);
    }));
    if let Some(r) = l.rt {
        // The journal flushes the data device with the log.
        journal.set_data_dev(r.dev.clone());
    }
    let (alc, ialc) = (l.al.clone(), l.ial.clone());
    journal.set_before_commit(Box::new(move || {
        ialc.seal(&alc);
        alc.seal();
    }));
    Ok(journal)
}

/// Every fact the mount fixes, for the layers to borrow.
fn mount_volume(
    geo: Geometry,
    sb: &Superblock,
    opts: &MountOptions,
    read_only: bool,
    ro_reason: Option<String>,
) -> Volume {
    Volume {
        geo,
        features: Features::of(sb),
        hash: DirHash::of(sb),
        digest_budget: if opts.dir_digest {
            (opts.icache_limit / 4) as usize
        } else {
            0
        },
        read_only,
        ro_reason,
        clamp_time: opts.clamp_time,
        atime: opts.atime,
        nodiratime: opts.nodiratime,
        kbytes_at_mount: sb.kbytes_written(),
    }
}
