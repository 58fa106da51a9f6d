//! `Fs`: the mounted file system and its operations.
//!
//! Lock order (see `sync`): rename (cross-directory only) -> directory inode(s), ancestor
//! first -> child inode(s) by number -> journal handle -> group -> page -> buffer. Every
//! operation starts one handle after taking its inode locks; nothing on the path of
//! create, write, fallocate or unlink takes a lock shared by the whole file system
//! besides the journal's short handle start.

pub use crate::alloc::StreamGoal;
use crate::alloc::{Allocator, Geometry};
use crate::buf::{Buf, BufCache};
use crate::dev::{BlockDevice, ErrorLatch};
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
use crate::sync::{Mutex, RwLockReadGuard};
use crate::types::*;
use crate::volume::Features;

mod create;
mod diagnostics;
pub use diagnostics::Diagnostics;
mod data;
mod durable;
mod inline;
mod lifecycle;
mod open;
pub(crate) use open::access_summary;
mod ops;
mod options;
pub use options::{MountOptions, DEFAULT_ICACHE_LIMIT};
mod orphan;
mod remove;
mod rename;
mod rt;
pub use rt::{format_rt, MAX_EXTSIZE};
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
    /// The orphan list: unlinked inodes still open.
    orphans: orphan::Orphans,
    /// Background threads, shutdown state, the MMP claim.
    life: lifecycle::Life,
    /// The large_file feature is on (set by the first file past 2 GiB if it was not).
    large_file: std::sync::atomic::AtomicBool,
    /// The realtime data device and its allocator (an image made with `--rtdev`).
    rt: Option<rt::Rt>,
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
            inode::load_extents(&self.al, self.rt(), &self.bufs, i.ino, st)?;
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
        let mut order = self.orphans.list.lock();
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
