//! File data lent, not copied, while `mkfs --sparse-output -d DIR` builds its raw image
//! reproducibly: the build's device records which source file's bytes a data write would
//! have put where, and the encoder reads them from that file when it writes the sparse
//! image. Whole blocks of the files the copy's workers write are then copied twice (source
//! to a window, window to the sparse file's buffer) rather than three times (source to the
//! build's buffer, buffer to the raw image, raw image to the sparse file's buffer), and
//! the raw image holds the metadata and the rest of the data (small files, files the walk
//! writes itself, each file's partial last block).
//!
//! How the device knows: a worker about to hand a source file's data to the engine maps
//! the file and lends the mapping for the length of the call ([`LentFile::lend`]); a write
//! the engine makes on that thread of bytes lying inside the lent mapping, whole blocks of
//! the sparse image, is recorded as a [`Placed`] range (device offset, source, offset in
//! it) instead of being written. Every other write is written, and first drops any placed
//! range it covers; a read of a placed range reads the source. So the device behaves as a
//! device that took every write, as long as the sources do not change: each keeps its
//! descriptor open, and the encoder checks it is still the file it was (size, times)
//! before and after reading it, failing with its name otherwise.

use super::used::Mapping;
use lanefs::{BlockDevice, Error, FileDevice, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

type PlacedMap = BTreeMap<u64, Placed>;

/// A source file whose bytes are lent: its path (to name it), a descriptor of it, and
/// what it was when lent.
#[derive(Debug)]
pub struct Source {
    path: PathBuf,
    file: File,
    /// Size, and modification and change times (seconds, nanoseconds).
    id: (u64, [i64; 4]),
}

/// Descriptors the sources hold.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Most descriptors the sources may hold: a quarter of what this process may open (the
/// walk keeps directories and queued files open too).
fn most_held() -> usize {
    static MOST: OnceLock<usize> = OnceLock::new();
    *MOST.get_or_init(|| {
        crate::hostsys::fd_limit().map_or(0, |n| usize::try_from(n / 4).unwrap_or(usize::MAX))
    })
}

impl Source {
    /// `file`, open at `path`, as it is now, holding a descriptor of its own; `None` when
    /// the sources hold as many descriptors as they may.
    pub fn of(file: &File, path: &Path) -> io::Result<Option<Source>> {
        if HELD.fetch_add(1, Ordering::Relaxed) >= most_held() {
            HELD.fetch_sub(1, Ordering::Relaxed);
            return Ok(None);
        }
        let file = file.try_clone().inspect_err(|_| {
            HELD.fetch_sub(1, Ordering::Relaxed);
        })?;
        // Uncounted when dropped, as on a failure below.
        let mut src = Source {
            path: path.to_path_buf(),
            file,
            id: (0, [0; 4]),
        };
        src.id = identity(&src.file)?;
        Ok(Some(src))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size when lent.
    pub fn len(&self) -> u64 {
        self.id.0
    }

    /// Its descriptor, failing (naming it) unless it still has its size and times.
    pub fn file(&self) -> io::Result<&File> {
        if identity(&self.file)? != self.id {
            return Err(io::Error::other(format!(
                "{}: changed while the image was built (its size or times); its data is read \
                 as the sparse file is written",
                self.path.display()
            )));
        }
        Ok(&self.file)
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

fn identity(file: &File) -> io::Result<(u64, [i64; 4])> {
    let st = rustix::fs::fstat(file.as_fd())?;
    Ok((
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
        let src = Source::of(file, path).ok()??;
        if src.len() != len || len == 0 {
            return None;
        }
        // SAFETY: `Mapping::new` asks that nothing change the file while it is mapped,
        // which a source another process may write cannot promise: in form, the slice
        // `bytes` gives may change under it. What holds instead is that nothing in this
        // process reads it. The copy lends only whole blocks at block boundaries (a file's
        // partial last block is read with pread); for those the engine's direct write
        // (`write_once`, inline data being smaller than a block) passes the slice to the
        // device's `write_at` untouched, and the device compares its address and records
        // it, never reading it; a lent slice the device does write (not on sparse blocks)
        // goes to pwrite, where the kernel reads it and a page past a truncation is
        // EFAULT, not a signal. The encoder reads the file itself, with pread.
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
    placed: Mutex<PlacedMap>,
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

    fn map(&self) -> MutexGuard<'_, PlacedMap> {
        self.placed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The placed ranges, by device offset.
    pub fn placed(&self) -> Vec<(u64, Placed)> {
        self.map().iter().map(|(&k, p)| (k, p.clone())).collect()
    }

    /// Drop what is placed in `off..off + len` (about to be written over). Placed ranges
    /// stay whole sparse blocks: the placed rest of a block the write covers in part is
    /// written from its source first, under the lock, so that no other write or record
    /// of that block comes between.
    fn unplace(&self, off: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = off + len;
        let (from, to) = (
            off / self.align * self.align,
            end.next_multiple_of(self.align),
        );
        let mut m = self.map();
        for (a, e) in [(from, off), (end, to)] {
            if a < e && overlaps(&m, a, e) {
                // Rare (a write not on sparse blocks over lent bytes).
                let mut b = vec![0u8; (e - a) as usize];
                self.inner.read_at(a, &mut b)?;
                read_placed(&m, a, &mut b)?;
                unplace(&mut m, a, e);
                self.inner.write_at(a, &b)?;
            }
        }
        unplace(&mut m, off, end);
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
}

/// Read the placed parts of `buf` (the device's bytes from `off`) from their sources.
fn read_placed(m: &PlacedMap, off: u64, buf: &mut [u8]) -> Result<()> {
    let end = off + buf.len() as u64;
    let first = m.range(..=off).next_back().map_or(off, |(&k, _)| k);
    for (&k, p) in m.range(first..end).filter(|(&k, p)| k + p.len > off) {
        let (from, to) = (k.max(off), (k + p.len).min(end));
        let dst = &mut buf[(from - off) as usize..(to - off) as usize];
        let what = "reading lent file data";
        let file = p.src.file().map_err(|e| Error::io(what, e))?;
        file.read_exact_at(dst, p.src_off + (from - k))
            .map_err(|e| Error::io(what, e))?;
    }
    Ok(())
}

/// Whether any placed range overlaps `from..to`.
fn overlaps(m: &PlacedMap, from: u64, to: u64) -> bool {
    let first = m.range(..from).next_back().map_or(from, |(&k, _)| k);
    m.range(first..to).any(|(&k, p)| k + p.len > from)
}

/// Drop the parts of placed ranges in `from..to`, keeping what lies outside it.
fn unplace(m: &mut PlacedMap, from: u64, to: u64) {
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
        read_placed(&self.map(), off, buf)
    }

    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        let len = buf.len() as u64;
        let aligned = off.is_multiple_of(self.align) && len.is_multiple_of(self.align);
        if aligned && len > 0 && off.saturating_add(len) <= self.inner.size() {
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
        let (m, mut at) = (self.map(), off);
        for b in bufs.iter_mut() {
            read_placed(&m, at, b)?;
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
