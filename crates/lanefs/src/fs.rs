//! `Fs`: the mounted file system and its operations.
//!
//! Lock order (see `sync`): rename (cross-directory only) -> directory inode(s), ancestor
//! first -> child inode(s) by number -> journal handle -> group -> page -> buffer. Every
//! operation starts one handle after taking its inode locks; nothing on the path of
//! create, write, fallocate or unlink takes a lock shared by the whole file system
//! besides the journal's short handle start.

use crate::alloc::reserve::default_reserve;
pub use crate::alloc::StreamGoal;
use crate::alloc::{AllocOptions, Allocator, Geometry};
use crate::buf::{Buf, BufCache};
use crate::dev::{BlockDevice, ErrorLatch, FileDevice};
use crate::dir::DirCtx;
use crate::disk::group::GroupDesc;
use crate::disk::inode::{DiskInode, FL_EXTENTS, FL_INLINE_DATA};
use crate::disk::superblock::{self as sbm, compat, incompat, ro_compat, Superblock};
use crate::error::{Error, Result};
use crate::ialloc::InodeAllocator;
use crate::icache::{Got, ICache, IRef, NewInode};
use crate::inode::{self, Inode, InodeState};
use crate::journal::{self, Handle, Journal, LogArea, Replay};
pub use crate::rtalloc::RtAllocPolicy;
use crate::sync::{Mutex, RwLockReadGuard, ORPHAN, RENAME, SUPER};
use crate::types::*;
use crate::volume::{DirHash, Features, Volume};
use std::path::Path;

mod create;
mod data;
mod durable;
mod inline;
mod open;
pub(crate) use open::access_summary;
use open::*;
mod ops;
mod options;
pub use options::{MountOptions, DEFAULT_ICACHE_LIMIT};
mod orphan;
mod remove;
mod rename;
mod rt;
pub use rt::MAX_EXTSIZE;
mod shift;
mod shutdown;
pub use shutdown::ShutdownMode;
mod xattr;
use std::sync::Arc;

/// A mounted ext4 file system, shared by any number of threads (`Arc<Fs>`).
///
/// Operations are the VFS's, one call each, on inode numbers: [`lookup`](Fs::lookup)
/// turns a name in a directory into an [`Attr`] whose `ino` the other calls take. Each
/// changes the file system in one journal transaction, so a crash shows it whole or not
/// at all; [`fsync`](Fs::fsync), [`sync`](Fs::sync) and [`unmount`](Fs::unmount) make
/// changes durable. No lock is shared by the whole file system on the data path:
/// operations on different inodes meet only on the lock of one allocation group, cache
/// bucket or block, and those on one inode take its lock (shared for reads that miss the
/// page cache; cached reads take none).
///
/// ```
/// use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
/// use std::sync::Arc;
///
/// let dev = Arc::new(MemDevice::new(32 << 20));
/// mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
/// let fs: Arc<Fs> = Fs::mount(dev, MountOptions::default())?;
///
/// // Four threads, each filling its own directory.
/// let workers: Vec<_> = (0..4)
///     .map(|t| {
///         let fs = fs.clone();
///         std::thread::spawn(move || -> lanefs::Result<()> {
///             let o = Owner::default();
///             let dir = fs.mkdir(ROOT_INO, format!("t{t}").as_bytes(), 0o755, o)?;
///             for i in 0..50 {
///                 let f = fs.create(dir.ino, format!("f{i}").as_bytes(), 0o644, o)?;
///                 fs.write(f.ino, 0, &[t as u8; 1000])?;
///                 fs.release(f.ino)?;
///             }
///             Ok(())
///         })
///     })
///     .collect();
/// for w in workers {
///     w.join().unwrap()?;
/// }
/// let t2 = fs.lookup(ROOT_INO, b"t2")?;
/// assert_eq!(fs.readdir(t2.ino, 0, 100)?.len(), 52); // with "." and ".."
/// fs.unmount()?;
/// # Ok::<(), lanefs::Error>(())
/// ```
pub struct Fs {
    /// What the mount fixed: geometry, features, directory hash, policies.
    vol: crate::volume::Volume,
    dev: Arc<dyn BlockDevice>,
    latch: Arc<ErrorLatch>,
    bufs: Arc<BufCache>,
    journal: Journal,
    al: Arc<Allocator>,
    ial: Arc<InodeAllocator>,
    icache: ICache,
    /// The page cache of file data.
    pages: crate::page::PageCache,
    sb: Mutex<Superblock>,
    rename_lock: Mutex<()>,
    /// The orphan list in chain order (head first): unlinked inodes still open.
    orphans: Mutex<std::collections::VecDeque<Ino>>,
    /// `orphans.len()`, stored under its lock: a release of an inode that was never an
    /// orphan (the common case) skips the lock while the list is empty.
    orphan_count: std::sync::atomic::AtomicUsize,
    /// The background threads (the commit timer, the page cache's flusher); `unmount`
    /// joins them, so the device is closed (and its claim released) once the caller's last
    /// `Arc` goes.
    timer: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
    timer_stop: std::sync::atomic::AtomicBool,
    /// Shut down (`Fs::shutdown`): no operation starts, nothing more is written.
    shut: std::sync::atomic::AtomicBool,
    /// Held by the one shutdown under way.
    shutdown_lock: std::sync::Mutex<()>,
    /// The multi-mount protection claim of a read-write mount of an mmp image.
    mmp: std::sync::Mutex<Option<crate::mmp::MmpGuard>>,
    /// The large_file feature is on (set by the first file past 2 GiB if it was not).
    large_file: std::sync::atomic::AtomicBool,
    /// The realtime data device (an image made with `--rtdev`): realtime files' data.
    rtdev: Option<Arc<dyn BlockDevice>>,
}

/// Largest file size: 2^32 - 1 blocks, ext4's s_maxbytes (the last logical block stays
/// unused so that an extent's end fits in 32 bits).
const MAX_FILE_BLOCKS: u64 = (1 << 32) - 1;
/// Largest file size without the large_file feature (2 GiB - 1).
const LARGE_FILE_SIZE: u64 = 0x7FFF_FFFF;
/// Link count past which directories switch to "many" (dir_nlink).
const LINK_MAX: u16 = 65000;

impl Fs {
    /// The time to stamp: now, or the clamp if it is earlier (`MountOptions::clamp_time`).
    fn now(&self) -> Timespec {
        self.vol.now()
    }

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
        let bufs = Arc::new(BufCache::new(dev.clone(), bs as usize, opts.bufcache_limit));
        let (log, replay) = open_journal(&sb, &dev, &bufs)?;
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
                sb = read_super(&*dev)?;
            }
            check_features(&sb)?;
        }
        let geo = Geometry::from_superblock(&sb);
        let (descs, gdt) = read_gdt(&geo, &bufs)?;
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
        let mut log = log;
        if let (Some(l), false) = (log.as_mut(), read_only) {
            // An empty log starting at its first block, in the format lanefs writes.
            l.js.set_write_features(sb.has_incompat(incompat::BIT64), sb.metadata_csum());
            l.js.set_start(l.first(), next_tid as u32);
            l.write_super(&*dev)?;
            dev.flush()?;
        }
        let journal = Journal::new(dev.clone(), bufs.clone(), log, next_tid, bs as usize);
        let (alc, ialc) = (al.clone(), ial.clone());
        journal.set_on_commit(Box::new(move |tid| {
            alc.release_committed(tid);
            ialc.release_committed(tid);
        }));
        let (alc, ialc) = (al.clone(), ial.clone());
        journal.set_before_commit(Box::new(move || {
            ialc.seal(&alc);
            alc.seal();
        }));
        let vol = Volume {
            geo,
            features: Features::of(&sb),
            hash: DirHash::of(&sb),
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
        };
        let fs = Fs {
            vol,
            journal,
            large_file: std::sync::atomic::AtomicBool::new(sb.has_ro_compat(ro_compat::LARGE_FILE)),
            rtdev: rtdev.clone(),
            sb: Mutex::new(&SUPER, sb),
            rename_lock: Mutex::new(&RENAME, ()),
            orphans: Mutex::new(&ORPHAN, std::collections::VecDeque::new()),
            orphan_count: std::sync::atomic::AtomicUsize::new(0),
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
            mmp: std::sync::Mutex::new(mmp),
            latch,
            timer: std::sync::Mutex::new(Vec::new()),
            timer_stop: std::sync::atomic::AtomicBool::new(false),
            shut: std::sync::atomic::AtomicBool::new(false),
            shutdown_lock: std::sync::Mutex::new(()),
        };
        let root = fs.iget(ROOT_INO).map_err(|e| match e {
            Error::NotFound => {
                Error::corrupt("inode", ROOT_INO, "root directory inode is not in use")
            }
            e => e,
        })?;
        if FileType::from_mode(root.state.read().d.mode()) != Some(FileType::Directory) {
            return Err(Error::corrupt("inode", ROOT_INO, "root is not a directory"));
        }
        if let (Some(geo), Some(rd)) = (rt_geo, rtdev) {
            fs.open_rt(geo, rd, opts.rt_alloc)?;
        }
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

    fn mark_mounted(&self, count: bool) -> Result<()> {
        let mut sbg = self.sb.lock();
        let sb = &mut *sbg;
        sb.set_state(sb.state() & !1);
        if count {
            sb.set_mnt_count(sb.mnt_count().wrapping_add(1));
            sb.set_mtime(self.now().sec as u32);
        }
        if self.journal.has_log() {
            // Until a clean unmount, the log may hold committed transactions.
            sb.set_feature_incompat(sb.feature_incompat() | incompat::RECOVER);
        }
        sb.update_checksum();
        let raw = sb.raw.clone();
        drop(sbg);
        self.dev.write_at(sbm::SB_OFFSET, &raw[..])?;
        self.dev.flush()?;
        // The cached superblock block (read later, for journaled superblock updates) sees
        // this.
        self.bufs.forget(sbm::location(self.vol.bs()).0);
        Ok(())
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
                    if fs.timer_stop.load(std::sync::atomic::Ordering::Acquire) {
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
            self.timer.lock().unwrap_or_else(|e| e.into_inner()).push(t);
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
                if fs.timer_stop.load(std::sync::atomic::Ordering::Acquire) {
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
            self.timer.lock().unwrap_or_else(|e| e.into_inner()).push(t);
        }
    }

    fn ctx(&self) -> DirCtx<'_> {
        DirCtx {
            al: &self.al,
            ial: &self.ial,
            bufs: &self.bufs,
            vol: &self.vol,
        }
    }

    /// Refuse changes on a read-only mount, or after a device error turned it read-only,
    /// or after a shutdown ([`Error::ShutDown`]).
    fn check_rw(&self) -> Result<()> {
        self.check_live()?;
        if self.vol.read_only || self.latch.failed() {
            Err(Error::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Why changes are refused, when they are: features lanefs cannot write, an earlier
    /// device error, or a read-only mount.
    pub fn read_only_reason(&self) -> Option<String> {
        if self.is_shut_down() {
            return Some("shut down (FS_IOC_SHUTDOWN): nothing more is written".into());
        }
        if let Some(r) = self.latch.reason() {
            return Some(r);
        }
        if self.latch.failed() || self.journal.is_aborted() {
            return Some("an earlier device error aborted the journal: mounted read-only".into());
        }
        if let Some(r) = &self.vol.ro_reason {
            return Some(r.clone());
        }
        self.vol.read_only.then(|| "mounted read-only".into())
    }

    /// The file system's block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.vol.bs()
    }

    /// Whether changes are refused (read-only mount, an earlier device error or a
    /// shutdown).
    pub fn is_read_only(&self) -> bool {
        self.vol.read_only || self.latch.failed() || self.is_shut_down()
    }

    /// The cached inode `ino`, loading it from disk on a miss.
    fn iget(&self, ino: Ino) -> Result<IRef> {
        match self.iget_or_read(ino)? {
            Held::Cached(i) => Ok(i),
            Held::Read(claim, d) => Ok(self.publish_read(claim, d)),
        }
    }

    /// The cached inode `ino`, or, on a miss, its bytes read from disk under a claim on
    /// its number ([`ICache::get_or_claim`]): the caller caches it
    /// ([`Fs::publish_read`]) or works on the bytes and drops the claim. A claim holder
    /// must not wait for the journal (a handle's owner may be waiting on the claim).
    fn iget_or_read(&self, ino: Ino) -> Result<Held<'_>> {
        if ino < 1 || ino > self.al.geo.inodes() {
            return Err(Error::NotFound);
        }
        match self.icache.get_or_claim(ino) {
            Got::Cached(i) => Ok(Held::Cached(i)),
            // A failed read drops the claim, which removes the placeholder and wakes the
            // lookups waiting on it.
            Got::Claimed(claim) => {
                let (d, b, off) = inode::read_disk_inode_in(&self.ial, &self.bufs, ino)?;
                if d.links() == 0 || FileType::from_mode(d.mode()).is_none() {
                    return Err(Error::NotFound);
                }
                Ok(Held::Read(claim, Cold { d, b, off }))
            }
        }
    }

    /// Cache an inode read under `claim`; returns a use of it.
    fn publish_read(&self, claim: NewInode<'_>, c: Cold) -> IRef {
        let ino = claim.ino();
        let i = inode::new_inode(ino, c.d);
        self.bind_device(&i);
        // Its last change may be in any uncommitted transaction: fsync commits them.
        i.state.write().tid = self.journal.running_tid();
        claim.finish(i)
    }

    /// Read-lock an inode's state with its extent map loaded.
    fn read_loaded<'a>(&self, i: &'a Inode) -> Result<RwLockReadGuard<'a, InodeState>> {
        {
            let st = i.state.read();
            if st.freed {
                return Err(Error::NotFound);
            }
            if st.ext.is_some()
                || !needs_extents(&st.d, self.vol.bs(), self.vol.has(Features::EA_INODE))
            {
                return Ok(st);
            }
        }
        {
            let mut st = i.state.write();
            self.load(i, &mut st)?;
        }
        self.read_loaded(i)
    }

    /// Load the extent map under a held write lock, and charge it to the inode cache (a
    /// file read and never changed is charged here, not at a store).
    fn load(&self, i: &Inode, st: &mut InodeState) -> Result<()> {
        if st.freed {
            return Err(Error::NotFound);
        }
        if st.ext.is_none() && needs_extents(&st.d, self.vol.bs(), self.vol.has(Features::EA_INODE))
        {
            inode::load_extents(&self.al, &self.bufs, i.ino, st)?;
            self.icache.recharge(i, i.mem_bytes_with(st.heap_bytes()));
        }
        Ok(())
    }

    /// Persist a cached inode: its extent tree if changed, then its bytes, which reach its
    /// table block with their checksum when the transaction commits (`inode::InodeStage`).
    /// An inode on the orphan list keeps the list link that `fs/orphan.rs` wrote into its
    /// on-disk `dtime`.
    fn store(&self, h: &Handle, i: &Inode, st: &mut InodeState) -> Result<()> {
        self.store_prep(h, i.ino, st)?;
        let keep_dtime = st.d.links() == 0 && !st.freed;
        inode::stage_inode(&self.ial, &self.bufs, h, i, &mut st.d, keep_dtime, st.freed)?;
        // What the change grew (a directory's digests, a file's extent map) is charged.
        self.icache.recharge(i, i.mem_bytes_with(st.heap_bytes()));
        Ok(())
    }

    /// Persist a new inode not in the cache yet: written through to its table block (its
    /// later stores go through its stage).
    fn store_new(&self, h: &Handle, ino: Ino, st: &mut InodeState) -> Result<()> {
        self.store_prep(h, ino, st)?;
        inode::store_inode(&self.ial, &self.bufs, h, ino, &mut st.d, false)
    }

    /// What every store does before the inode's bytes: its extent tree, its transaction,
    /// the large_file feature.
    fn store_prep(&self, h: &Handle, ino: Ino, st: &mut InodeState) -> Result<()> {
        if st.ext_dirty {
            inode::store_tree(&self.al, &self.bufs, h, ino, st)?;
        }
        st.tid = h.tid();
        if st.d.size() > LARGE_FILE_SIZE {
            self.note_large_file(h)?;
        }
        Ok(())
    }

    /// A file past 2 GiB on an image without large_file turns the feature on in the
    /// superblock (and a revision-0 superblock into revision 1), as ext4_do_update_inode
    /// and ext4_update_dynamic_rev do.
    fn note_large_file(&self, h: &Handle) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.large_file.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut order = self.orphans.lock();
        if self.large_file.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.update_sb(h, &mut order, |sb| {
            if sb.rev_level() == 0 {
                sb.set_rev_level(1);
                sb.set_first_ino(crate::disk::inode::reserved::GOOD_OLD_FIRST);
                sb.set_inode_size(128);
            }
            sb.set_feature_ro_compat(sb.feature_ro_compat() | ro_compat::LARGE_FILE);
        })
    }

    /// The largest size inode `d` may have (ext4's s_maxbytes, or the bitmap limit for
    /// a block-mapped file).
    fn max_bytes(&self, d: &DiskInode) -> u64 {
        let bs = self.vol.bs() as usize;
        if d.flags() & FL_EXTENTS != 0 {
            crate::disk::extent::max_file_bytes(bs, self.vol.has(Features::HUGE_FILE))
        } else {
            crate::disk::blockmap::max_file_bytes(bs, self.vol.has(Features::HUGE_FILE))
        }
    }

    fn attr(&self, ino: Ino, d: &DiskInode) -> Attr {
        Attr {
            ino,
            kind: FileType::from_mode(d.mode()).unwrap_or(FileType::Regular),
            perm: d.mode() & 0o7777,
            nlink: u32::from(d.links()),
            uid: d.uid(),
            gid: d.gid(),
            size: d.size(),
            blocks: d.blocks_512(self.vol.bs()),
            atime: d.atime(),
            mtime: d.mtime(),
            ctime: d.ctime(),
            crtime: d.crtime(),
            rdev: if is_dev(d) { d.rdev() } else { 0 },
            generation: d.generation(),
        }
    }
}

fn needs_extents(d: &DiskInode, bs: u32, ea_inode: bool) -> bool {
    if d.flags() & FL_INLINE_DATA != 0 {
        return false;
    }
    match FileType::from_mode(d.mode()) {
        Some(FileType::Regular) | Some(FileType::Directory) => true,
        Some(FileType::Symlink) => !is_fast_symlink(d, bs, ea_inode),
        _ => false,
    }
}

/// What [`Fs::iget_or_read`] found.
enum Held<'a> {
    /// The inode was cached.
    Cached(IRef),
    /// It was not: the claim on its number, and the inode as read.
    Read(NewInode<'a>, Cold),
}

/// An inode read from disk and not cached: its bytes, and its table block's buffer with
/// its offset there.
struct Cold {
    d: DiskInode,
    b: Arc<Buf>,
    off: usize,
}

/// Whether a symlink keeps its target in `i_block`, as ext4_inode_is_fast_symlink decides:
/// on an `ea_inode` file system, when its target is 1 to 59 bytes (its block count may
/// count an attribute's inode); otherwise when it is not an inline-data symlink (whose
/// target continues in `system.data`) and owns no block but its xattr block.
pub(crate) fn is_fast_symlink(d: &DiskInode, bs: u32, ea_inode: bool) -> bool {
    if ea_inode {
        return d.size() > 0 && d.size() < crate::disk::inode::IBLOCK_SIZE as u64;
    }
    if d.flags() & FL_INLINE_DATA != 0 {
        return false;
    }
    let xattr_sectors = if d.file_acl() != 0 {
        u64::from(bs / 512)
    } else {
        0
    };
    d.blocks_512(bs) == xattr_sectors
}

fn is_dev(d: &DiskInode) -> bool {
    matches!(
        FileType::from_mode(d.mode()),
        Some(FileType::CharDevice) | Some(FileType::BlockDevice)
    )
}

#[cfg(test)]
mod tests;
