//! File data lent, not copied, while `mkfs --sparse-output -d DIR` builds its raw image:
//! the build's device records which source file's bytes a data write would have put
//! where, and the encoder reads them from that file when it writes the sparse image. The
//! file data then crosses memory once (source to sparse file) rather than three times
//! (source to build, build to raw image, raw image to sparse file), and the raw image holds
//! only metadata.
//!
//! How the device knows: a worker about to hand a source file's data to the engine maps
//! the file and lends the mapping for the length of the call ([`lending`]); a write the
//! engine makes on that thread of bytes lying inside the lent mapping, whole blocks of the
//! sparse image, is recorded as a [`Placed`] range (device offset, source, offset in it)
//! instead of being written. Every other write is written, and first drops any placed
//! range it covers; a read of a placed range reads the source. So the device behaves as a
//! device that took every write, as long as the sources do not change; the encoder checks
//! each source is still the file it was (device, inode, size, times) and fails naming it
//! otherwise.

use super::used::Mapping;
use lanefs::{BlockDevice, Error, FileDevice, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A source file whose bytes are lent: its path and what it was when lent.
#[derive(Debug)]
pub struct Source {
    path: PathBuf,
    /// Device, inode, size, and modification and change times (seconds, nanoseconds).
    id: (u64, u64, u64, [i64; 4]),
}

impl Source {
    /// `file`, open at `path`, as it is now.
    pub fn of(file: &File, path: &Path) -> io::Result<Source> {
        Ok(Source {
            path: path.to_path_buf(),
            id: identity(file)?,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size when lent.
    pub fn len(&self) -> u64 {
        self.id.2
    }

    /// Open it again for reading, failing (naming it) unless it is still the same file
    /// with the same size and times.
    pub fn reopen(&self) -> io::Result<File> {
        let changed = || {
            io::Error::other(format!(
                "{}: changed while the image was built (its data is read after the copy)",
                self.path.display()
            ))
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))?;
        if identity(&file)? != self.id {
            return Err(changed());
        }
        Ok(file)
    }
}

fn identity(file: &File) -> io::Result<(u64, u64, u64, [i64; 4])> {
    let st = rustix::fs::fstat(file.as_fd())?;
    Ok((
        st.st_dev,
        st.st_ino,
        st.st_size.max(0) as u64,
        [
            st.st_mtime,
            st.st_mtime_nsec as i64,
            st.st_ctime,
            st.st_ctime_nsec as i64,
        ],
    ))
}

/// A source file mapped to be lent: its bytes as the engine is handed them.
pub struct LentFile {
    map: Mapping,
    src: Arc<Source>,
}

impl LentFile {
    /// `file` (open at `path`, `len` bytes long as the copy saw it), mapped read-only;
    /// `None` where it is another length now or cannot be mapped (it is then read).
    pub fn map(file: &File, path: &Path, len: u64) -> Option<LentFile> {
        let src = Source::of(file, path).ok()?;
        if src.len() != len || len == 0 {
            return None;
        }
        // SAFETY: `Mapping::new` asks that nothing change the file while it is mapped,
        // which a source another process may write cannot promise. What holds instead:
        // nothing in this process reads the mapping. The copy lends only whole blocks at
        // block boundaries (a file's partial last block is read with pread), the engine's
        // direct write passes such a slice to the device's `write_at` untouched, and the
        // device records where it lies rather than reading it; a lent slice the device
        // does write (not on sparse blocks) goes to pwrite, where the kernel reads it and
        // a page past a truncation is EFAULT, not a signal. The encoder reads the file
        // itself, with pread, once it has checked the file is unchanged.
        let map = unsafe { Mapping::new(file, len) }.ok()?;
        Some(LentFile {
            map,
            src: Arc::new(src),
        })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }

    /// Run `f` with this file's bytes lent (see [`lending`]).
    pub fn lend<T>(&self, f: impl FnOnce() -> T) -> T {
        lending(self.map.bytes(), &self.src, f)
    }
}

/// Bytes of the device that are a source's: `len` bytes of `src` from `src_off`.
#[derive(Clone, Debug)]
pub struct Placed {
    pub len: u64,
    pub src: Arc<Source>,
    pub src_off: u64,
}

/// What a thread lends: the mapping's address range and its source.
struct Lent {
    base: usize,
    len: usize,
    src: Arc<Source>,
}

thread_local! {
    static LENT: RefCell<Option<Lent>> = const { RefCell::new(None) };
}

/// Run `f` with `map` (the bytes of `src`, mapped whole) lent to the [`LendingDevice`]:
/// the engine's writes of its bytes on this thread in `f` are recorded, not copied.
fn lending<T>(map: &[u8], src: &Arc<Source>, f: impl FnOnce() -> T) -> T {
    struct Unlend;
    impl Drop for Unlend {
        fn drop(&mut self) {
            LENT.with(|l| *l.borrow_mut() = None);
        }
    }
    LENT.with(|l| {
        *l.borrow_mut() = Some(Lent {
            base: map.as_ptr() as usize,
            len: map.len(),
            src: src.clone(),
        })
    });
    let _unlend = Unlend;
    f()
}

/// Where `buf` lies in the mapping this thread lends, if it lies wholly inside it.
fn lent_at(buf: &[u8]) -> Option<(Arc<Source>, u64)> {
    LENT.with(|l| {
        let l = l.borrow();
        let l = l.as_ref()?;
        let p = buf.as_ptr() as usize;
        (p >= l.base && p + buf.len() <= l.base + l.len)
            .then(|| (l.src.clone(), (p - l.base) as u64))
    })
}

/// A build that lends file data: the sparse image's block size, which lent writes must
/// keep to, and, once the build is done, the ranges it placed.
pub struct Lending {
    pub align: u32,
    pub placed: Mutex<Vec<(u64, Placed)>>,
}

impl Lending {
    pub fn new(align: u32) -> Lending {
        Lending {
            align,
            placed: Mutex::new(Vec::new()),
        }
    }

    /// Mount `image` (the raw image, just formatted) on a [`LendingDevice`], run `work`,
    /// unmount, and keep what was placed.
    pub fn build<T>(
        &self,
        image: &Path,
        opts: lanefs::MountOptions,
        work: impl FnOnce(&lanefs::Fs) -> crate::error::CmdResult<T>,
    ) -> crate::error::CmdResult<T> {
        use crate::error::Context;
        let what = image.display().to_string();
        let file = FileDevice::open(image, false).ctx(&what)?;
        let dev = Arc::new(LendingDevice::new(file, self.align));
        let result = crate::session::with_fs_on(dev.clone(), &what, opts, work);
        *self.placed.lock().unwrap_or_else(|e| e.into_inner()) = dev.placed();
        result
    }

    /// What the build placed.
    pub fn take(&self) -> Vec<(u64, Placed)> {
        std::mem::take(&mut *self.placed.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A device (the raw image) that records lent writes instead of making them.
pub struct LendingDevice {
    inner: FileDevice,
    /// Lent writes are recorded only when they start and end on multiples of this (the
    /// sparse image's block size: the encoder takes a block from one place).
    align: u64,
    /// Placed ranges by device offset, none overlapping another.
    placed: Mutex<BTreeMap<u64, Placed>>,
}

impl LendingDevice {
    pub fn new(inner: FileDevice, align: u32) -> LendingDevice {
        assert!(align.is_power_of_two(), "the sparse block size {align}");
        LendingDevice {
            inner,
            align: u64::from(align),
            placed: Mutex::new(BTreeMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Placed>> {
        self.placed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The placed ranges, by device offset.
    pub fn placed(&self) -> Vec<(u64, Placed)> {
        self.map().iter().map(|(&k, p)| (k, p.clone())).collect()
    }

    /// Drop what is placed in `off..off + len` (about to be written over). Placed ranges
    /// stay whole sparse blocks: the placed rest of a block the write covers in part is
    /// written from its source first.
    fn unplace(&self, off: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = off + len;
        let (from, to) = (
            off / self.align * self.align,
            end.next_multiple_of(self.align),
        );
        let mut edges = Vec::new();
        {
            let mut m = self.map();
            for (a, e) in [(from, off), (end, to)] {
                if a < e && overlaps(&m, a, e) {
                    edges.push((a, (e - a) as usize));
                }
            }
            if edges.is_empty() {
                unplace(&mut m, off, end);
                return Ok(());
            }
        }
        // Rare (a write not on sparse blocks over lent bytes): the blocks' bytes as they
        // read now, written back whole once nothing is placed there.
        let mut whole = Vec::new();
        for (a, n) in edges {
            let mut b = vec![0u8; n];
            self.read_at(a, &mut b)?;
            whole.push((a, b));
        }
        unplace(&mut self.map(), from, to);
        for (a, b) in whole {
            self.inner.write_at(a, &b)?;
        }
        Ok(())
    }

    /// Record `len` bytes at `off` as `src`'s from `src_off`, joined to the range before
    /// when they continue it.
    fn place(&self, off: u64, len: u64, src: Arc<Source>, src_off: u64) {
        let mut m = self.map();
        unplace(&mut m, off, off + len);
        if let Some((&k, prev)) = m.range_mut(..off).next_back() {
            if k + prev.len == off
                && Arc::ptr_eq(&prev.src, &src)
                && prev.src_off + prev.len == src_off
            {
                prev.len += len;
                return;
            }
        }
        m.insert(off, Placed { len, src, src_off });
    }

    /// Read the placed parts of `buf` (the device's bytes from `off`) from their sources.
    fn read_placed(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let end = off + buf.len() as u64;
        let parts: Vec<(u64, Placed)> = {
            let m = self.map();
            let first = m.range(..=off).next_back().map_or(off, |(&k, _)| k);
            m.range(first..end)
                .filter(|(&k, p)| k + p.len > off)
                .map(|(&k, p)| (k, p.clone()))
                .collect()
        };
        for (k, p) in parts {
            let (from, to) = (k.max(off), (k + p.len).min(end));
            let dst = &mut buf[(from - off) as usize..(to - off) as usize];
            let what = || format!("reading {}", p.src.path().display());
            let file = p.src.reopen().map_err(|e| Error::io(what(), e))?;
            file.read_exact_at(dst, p.src_off + (from - k))
                .map_err(|e| Error::io(what(), e))?;
        }
        Ok(())
    }
}

/// Whether any placed range overlaps `from..to`.
fn overlaps(m: &BTreeMap<u64, Placed>, from: u64, to: u64) -> bool {
    let first = m.range(..from).next_back().map_or(from, |(&k, _)| k);
    m.range(first..to).any(|(&k, p)| k + p.len > from)
}

/// Drop the parts of placed ranges in `from..to`, keeping what lies outside it.
fn unplace(m: &mut BTreeMap<u64, Placed>, from: u64, to: u64) {
    let first = m.range(..from).next_back().map_or(from, |(&k, _)| k);
    let hit: Vec<u64> = m
        .range(first..to)
        .filter(|(&k, p)| k + p.len > from)
        .map(|(&k, _)| k)
        .collect();
    for k in hit {
        let p = m.remove(&k).expect("a key just found");
        if k < from {
            let left = Placed {
                len: from - k,
                ..p.clone()
            };
            m.insert(k, left);
        }
        if k + p.len > to {
            let cut = to - k;
            let right = Placed {
                len: p.len - cut,
                src_off: p.src_off + cut,
                src: p.src,
            };
            m.insert(to, right);
        }
    }
}

impl BlockDevice for LendingDevice {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(off, buf)?;
        self.read_placed(off, buf)
    }

    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        let len = buf.len() as u64;
        if off.is_multiple_of(self.align) && len.is_multiple_of(self.align) && len > 0 {
            if let Some((src, src_off)) = lent_at(buf) {
                self.place(off, len, src, src_off);
                return Ok(());
            }
        }
        self.unplace(off, len)?;
        self.inner.write_at(off, buf)
    }

    fn write_gather_at(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        self.unplace(off, bufs.iter().map(|b| b.len() as u64).sum())?;
        self.inner.write_gather_at(off, bufs)
    }

    fn write_log_at(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        self.unplace(off, bufs.iter().map(|b| b.len() as u64).sum())?;
        self.inner.write_log_at(off, bufs)
    }

    fn read_scatter_at(&self, off: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        self.inner.read_scatter_at(off, bufs)?;
        let mut at = off;
        for b in bufs.iter_mut() {
            self.read_placed(at, b)?;
            at += b.len() as u64;
        }
        Ok(())
    }

    fn punch_zeros(&self, off: u64, len: u64) -> Result<bool> {
        let done = self.inner.punch_zeros(off, len)?;
        if done {
            self.unplace(off, len)?;
        }
        Ok(done)
    }

    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }
}
