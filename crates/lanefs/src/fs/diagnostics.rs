//! What a mount can tell about itself, apart from its files: cache sizes, journal and
//! allocator counters, self-checks of the allocators' in-memory state, a file's extent
//! count, and dropping a file's clean cached data. Reached through
//! [`Fs::diagnostics`], so that `Fs`'s own methods are the file system's operations.

use super::Fs;
use crate::error::Result;
use crate::rtalloc::RtStats;
use crate::types::{BufCacheStats, IcacheStats, Ino};

/// A mount's diagnostics: counters, self-checks and cache control for tests, benchmarks
/// and tools ([`Fs::diagnostics`]).
///
/// ```
/// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
/// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
/// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
/// # let fs = Fs::mount(dev, MountOptions::default())?;
/// let f = fs.create(ROOT_INO, b"f", 0o644, Owner::default())?;
/// fs.write(f.ino, 0, &[7u8; 10_000])?;
/// let diag = fs.diagnostics();
/// diag.check_allocator()?;
/// assert_eq!(diag.extent_count(f.ino)?, 1);
/// assert!(diag.icache_stats().inodes >= 1);
/// fs.release(f.ino)?;
/// # fs.unmount()?;
/// # Ok::<(), lanefs::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Diagnostics<'a> {
    fs: &'a Fs,
}

impl Fs {
    /// This mount's diagnostics: cache and journal counters, allocator checks, extent
    /// counts, cache dropping.
    pub fn diagnostics(&self) -> Diagnostics<'_> {
        Diagnostics { fs: self }
    }
}

impl Diagnostics<'_> {
    /// Number of extents mapping `ino`'s data (what `filefrag` counts).
    pub fn extent_count(&self, ino: Ino) -> Result<usize> {
        let i = self.fs.iget(ino)?;
        let st = self.fs.read_loaded(&i)?;
        Ok(st.ext.as_ref().map_or(0, |e| e.len()))
    }

    /// Free space and its fragmentation, from the block bitmaps.
    pub fn free_space(&self) -> Result<crate::alloc::FreeSpace> {
        self.fs.al.free_space()
    }

    /// Check the allocator's in-memory state against the bitmaps (see
    /// `Allocator::check`); safe to call while other threads work.
    pub fn check_allocator(&self) -> Result<()> {
        self.fs.al.check()
    }

    /// The inode cache's size, memory and limit.
    pub fn icache_stats(&self) -> IcacheStats {
        self.fs.icache.stats()
    }

    /// The metadata buffer cache's size and limit.
    pub fn bufcache_stats(&self) -> BufCacheStats {
        self.fs.bufs.stats()
    }

    /// What the page cache of file data holds, its limit and its device reads.
    pub fn pagecache_stats(&self) -> crate::page::PageCacheStats {
        self.fs.pages.stats()
    }

    /// Drop the clean cached data of `ino` (as `POSIX_FADV_DONTNEED`): the next reads go to
    /// the device. Dirty data stays.
    pub fn drop_cache(&self, ino: Ino) -> Result<()> {
        if let Some(i) = self.fs.icache.peek(ino) {
            i.mapping.drop_clean();
            self.fs.pages.prune();
        }
        Ok(())
    }

    /// Journal counters since mount.
    pub fn journal_stats(&self) -> crate::journal::JournalStats {
        self.fs.journal.stats()
    }

    /// The realtime allocator's counters, when the image has an rt device.
    pub fn rt_stats(&self) -> Option<RtStats> {
        self.fs.rt().map(|r| r.stats())
    }

    /// Free runs of the rt device by log2 length (XFS's summary), when it has one.
    pub fn rt_histogram(&self) -> Result<Option<Vec<u64>>> {
        self.fs.rt().map(|r| r.histogram()).transpose()
    }

    /// Check the rt allocator: summary equal to a rebuild from the bitmap, free counts,
    /// cache bounds. Ok when the image has no rt device.
    pub fn rt_check(&self) -> Result<()> {
        match self.fs.rt() {
            Some(r) => r.check(),
            None => Ok(()),
        }
    }
}
