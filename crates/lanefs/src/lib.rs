//! lanefs: an ext4 engine in user space, where concurrent operations meet on no global
//! lock.
//!
//! lanefs mounts an ext4 image or block device inside your process and serves file
//! operations from any number of threads. It reads and writes ext4's real on-disk format
//! (ext2, ext3 and ext4 in the shapes `mke2fs` makes; every metadata checksum verified on
//! read and written on write) and journals every change in jbd2's format with ext4's
//! `data=ordered` semantics, so `e2fsck` and the kernel's ext4 read and replay what lanefs
//! writes, and lanefs reads and replays what they write.
//!
//! There is no lock shared by the whole file system on the paths of create, lookup, write,
//! fallocate and unlink: a journal handle joins the running transaction without a lock,
//! and each part that ext4 serializes somewhere has its own mechanism, taken from five
//! kernel scalability patch series (the "seeds"), each beside the design it replaced.
//!
//! | seed | part | mechanism (default) | baseline |
//! |---|---|---|---|
//! | 000 | block allocator | a lock per group with busy groups skipped ([`MountOptions::mb_trylock`]), each file's stream goal in its inode ([`StreamGoal::Inode`]), groups picked from scan lists ([`MountOptions::mb_optimize_scan`]) | waiting on group locks, one global stream goal ([`StreamGoal::Global`]), a linear walk |
//! | 001 | inode allocation | a lock-free search of the inode bitmap, the bit claimed by test-and-set under the group's lock ([`IallocPolicy::Optimistic`]) | search again after every lost race ([`IallocPolicy::Locked`]) |
//! | 002 | page cache | large folios ([`MountOptions::folio_max_order`] 4) read without a lock, checked by a seqcount | single-block pages (`folio_max_order` 0) |
//! | 003 | realtime device | XFS's realtime extent allocator made cheap on fragmented devices ([`RtAllocPolicy::Lean`]) | Linux 6.4's algorithm ([`RtAllocPolicy::Plain`]) |
//! | 004 | inode cache | buckets with their own locks and lock-free lookups ([`IcachePolicy::Bucket`]); also the `papaya` map ([`IcachePolicy::Papaya`]) | one table lock ([`IcachePolicy::Global`]) |
//!
//! # Example
//!
//! Make an image, mount it, create a directory and a file, write, read back, fsync,
//! unmount, and check the result:
//!
//! ```
//! use lanefs::{fsck, mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
//! use std::sync::Arc;
//!
//! // A 32 MiB device in memory, formatted as ext4 (4 KiB blocks, with a journal).
//! let dev = Arc::new(MemDevice::new(32 << 20));
//! mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
//!
//! // Mount it: replay the journal if it holds anything, start the commit timer.
//! let fs = Fs::mount(dev.clone(), MountOptions::default())?;
//!
//! // Operations take inode numbers and names as bytes, and return attributes.
//! let me = Owner { uid: 1000, gid: 1000, umask: 0o022 };
//! let dir = fs.mkdir(ROOT_INO, b"docs", 0o755, me)?;
//! let file = fs.create(dir.ino, b"hello.txt", 0o644, me)?; // created open
//! fs.write(file.ino, 0, b"hello, ext4\n")?;
//!
//! let mut buf = [0u8; 64];
//! let n = fs.read(file.ino, 0, &mut buf)?;
//! assert_eq!(&buf[..n], b"hello, ext4\n");
//! assert_eq!(fs.lookup(dir.ino, b"hello.txt")?.size, 12);
//!
//! // Once fsync returns, the data, the inode and its name survive a crash.
//! fs.fsync(file.ino, false)?;
//! fs.release(file.ino)?; // the open reference `create` took
//! fs.unmount()?; // writes everything back and empties the journal
//!
//! // What is left is a clean ext4 file system (`e2fsck -fn` agrees; the tests check).
//! let report = fsck::check(&*dev, &fsck::FsckOptions::default())?;
//! assert!(report.is_clean(), "{}", report.summary());
//! # Ok::<(), lanefs::Error>(())
//! ```
//!
//! On an image file, [`FileDevice::create`] makes a sparse file of the size asked and
//! [`Fs::mount_path`] opens and mounts one, taking the image for itself (one writer at a
//! time, never while the kernel has it mounted):
//!
//! ```
//! use lanefs::{mkfs, FileDevice, Fs, MountOptions, Owner, ROOT_INO};
//!
//! let tmp = tempfile::tempdir().unwrap();
//! let img = tmp.path().join("disk.img");
//! mkfs::format(&FileDevice::create(&img, 32 << 20)?, &mkfs::MkfsOptions::default())?;
//!
//! let fs = Fs::mount_path(&img, MountOptions::default())?;
//! let f = fs.create(ROOT_INO, b"notes", 0o644, Owner::default())?;
//! fs.write(f.ino, 0, b"kept")?;
//! fs.release(f.ino)?;
//! fs.unmount()?;
//!
//! let fs = Fs::mount_path(&img, MountOptions { read_only: true, ..Default::default() })?;
//! assert_eq!(fs.lookup(ROOT_INO, b"notes")?.size, 4);
//! fs.unmount()?;
//! # Ok::<(), lanefs::Error>(())
//! ```
//!
//! # Using it
//!
//! - [`Fs`] is the mounted file system: `Send + Sync`, shared as `Arc<Fs>` by any number
//!   of threads. Its operations are the VFS's, one call each (`lookup`, `create`,
//!   `write`, `rename`, `fsync`, `setxattr`, ...), on inode numbers ([`Ino`];
//!   the root is [`ROOT_INO`]). [`Fs::create`] and [`Fs::open`] take an open reference
//!   that [`Fs::release`] drops: an unlinked file lives until its last release.
//! - Every error is an [`Error`] naming what failed and where, and maps to one errno
//!   ([`Error::errno`]).
//! - Durability is ext4's: [`Fs::fsync`] makes one file durable, [`Fs::sync`] everything,
//!   a commit also runs every [`MountOptions::commit_interval`], and [`Fs::unmount`] leaves
//!   the image clean. A crash loses at most what was not synced, and never shows a
//!   rename, create or truncate half done (the README's "Durability contract";
//!   `docs/journal.md` for how, `docs/design.md` for what it assumes of the device).
//! - The devices are a [`BlockDevice`]: an image file or block device ([`FileDevice`]),
//!   memory ([`MemDevice`]), or a memory device that builds the images a power cut
//!   could leave ([`CrashDevice`], for crash tests). Implement the trait for anything
//!   else that stores bytes.
//!
//! # Choosing mount options
//!
//! [`MountOptions::default()`] is what a user wants: every seed's mechanism of the table
//! above on (the inode cache's default is [`IcachePolicy::Bucket`]), directory leaf
//! digests on, commits every 5 s, `relatime`, caches sized from the machine's memory.
//! What one changes:
//!
//! - [`read_only`](MountOptions::read_only): change nothing, replay the journal in memory
//!   only. Images with features lanefs reads but does not write (`quota`, `project`,
//!   `bigalloc`) mount read-only whatever is asked; [`Fs::read_only_reason`] says why.
//! - [`commit_interval`](MountOptions::commit_interval), [`atime`](MountOptions::atime)
//!   ([`AtimePolicy`]) and [`nodiratime`](MountOptions::nodiratime), as ext4's `commit=`,
//!   `relatime`/`strictatime`/`noatime` and `nodiratime`.
//! - The memory limits: [`bufcache_limit`](MountOptions::bufcache_limit) (metadata),
//!   [`pagecache_limit`](MountOptions::pagecache_limit) (file data) and
//!   [`icache_limit`](MountOptions::icache_limit) (inodes).
//! - [`rtdev`](MountOptions::rtdev): the realtime data device of an image made with one.
//! - The policies of the table above, to measure a mechanism against its baseline.
//!
//! [`MountOptions::apply`] sets any of them by the names `mount -o` uses
//! (`mb_stream_goal=slots`, `icache_limit=8M`, ...; [`MountOptions::NAMES`]).
//!
//! # Tools and the command line
//!
//! [`mkfs`] formats a device as `mke2fs` does ([`mkfs::format`]), [`fsck`] checks one
//! without changing it ([`fsck::check`]), and [`info`] describes one as `dumpe2fs -h`
//! does ([`info::report`]). The `lanefs` command (crate `lanefs-cli`: `cargo run
//! --release --bin lanefs -- help`) wraps them and adds `ls`, `stat`, `cat`, `mkdir`,
//! `rm` and `cp` into and out of an image without mounting it, `lanefs mount` (a
//! multi-threaded FUSE mount, crate `lanefs-fuse`) and `lanefs bench` (crate
//! `lanefs-bench`). The README describes all of it.
//!
//! # Design
//!
//! The repository's `docs/` holds the design: `docs/design.md` (the layers and the order
//! they import each other in, the lock order, what the on-disk format assumes about the
//! storage media) and one page per mechanism, each with how it works, its invariants, the
//! baseline it is measured against and the command that measures it:
//! `docs/block-allocation.md` (seed 000), `docs/inode-allocation-and-cache.md` (001 and
//! 004), `docs/directories.md`, `docs/page-cache.md` (002), `docs/journal.md`,
//! `docs/realtime.md` (003) and `docs/fuse-frontend.md`.
//!
//! [`internals`] holds the engine's layers (on-disk structures, journal, allocators,
//! caches) for the command, the benchmarks and the tests, without a stability promise.
#![deny(unsafe_code)]
#![warn(missing_docs)]

// The public face: the file system, its devices, errors and plain types (re-exported
// below), and the offline tools.
mod crashdev;
mod dev;
mod error;
mod fs;
pub mod fsck;
pub mod info;
pub mod mkfs;
mod types;

// The engine's layers, public only as `lanefs::internals::*` and named `crate::alloc`
// etc. inside the crate.
pub mod internals;
pub(crate) use internals::{
    alloc, buf, dirty, disk, extmap, hint, ialloc, icache, inode, journal, leafdigest, numhash,
    page, rtalloc, sync, usegate,
};

// Layers nothing outside the crate uses.
mod bmap;
mod dir;
mod exclusive;
mod mmp;
mod volume;

pub use crashdev::{CrashDevice, PendingWrite};
pub use dev::{BlockDevice, FileDevice, MemDevice};
pub use error::{Error, OptionError, OptionProblem, Result};
pub use exclusive::sharing_note;
pub use fs::{
    format_rt, Diagnostics, Fs, MountOptions, ShutdownMode, DEFAULT_ICACHE_LIMIT, MAX_EXTSIZE,
};
#[doc(inline)] // Timespec is defined with the inode format
pub use types::{
    parse_size, AtimePolicy, Attr, BufCacheStats, DirEntry, FallocMode, FileExtent, FileType,
    IallocPolicy, IcachePolicy, IcacheStats, Ino, InodeFlags, OpenMode, Owner, RenameMode, SetAttr,
    StatFs, Timespec, XattrFlags, ROOT_INO,
};

// Types of the mount options and of `Fs`'s reports that live with their mechanism
// (inlined, so they are documented here and not only under `internals`).
#[doc(inline)]
pub use alloc::{FreeSpace, StreamGoal};
#[doc(inline)]
pub use disk::rtdev::RtGeometry;
#[doc(inline)]
pub use journal::JournalStats;
#[doc(inline)]
pub use page::PageCacheStats;
#[doc(inline)]
pub use rtalloc::{RtAllocPolicy, RtStats};
