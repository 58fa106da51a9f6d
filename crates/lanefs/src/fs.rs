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
use crate::disk::inode::{DiskInode, FL_EXTENTS};
use crate::disk::superblock::{self as sbm, compat, incompat, ro_compat, Superblock};
use crate::error::{Error, Result};
use crate::ialloc::InodeAllocator;
use crate::icache::ICache;
use crate::inode::{self, InodeState};
use crate::journal::{self, Journal, LogArea, Replay};
pub use crate::rtalloc::RtAllocPolicy;
use crate::sync::Mutex;
use crate::types::*;
use crate::volume::Features;

mod create;
mod diagnostics;
pub use diagnostics::Diagnostics;
mod data;
mod durable;
mod inline;
mod inodes;
pub(crate) use inodes::is_fast_symlink;
use inodes::{Cold, Held};
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

fn is_dev(d: &DiskInode) -> bool {
    matches!(
        FileType::from_mode(d.mode()),
        Some(FileType::CharDevice) | Some(FileType::BlockDevice)
    )
}

#[cfg(test)]
mod tests;
