//! Block devices: where bytes live. An image file, a raw block device, or memory.

use crate::error::{Error, Result};
use crate::exclusive::{self, Claim};
use crate::sync::{RwLock, MEM_DEVICE};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A byte-addressed device. Implementations must be usable from many threads.
///
/// lanefs reads and writes through it at byte offsets (whole blocks, except the
/// superblock) and calls [`flush`](BlockDevice::flush) where ext4 issues a cache flush:
/// before and after a journal commit block, and at sync. A write is assumed durable only
/// once a later flush has returned ([`CrashDevice`](crate::CrashDevice) models the rest).
///
/// [`FileDevice`] and [`MemDevice`] implement it; so can anything else that stores bytes:
///
/// ```
/// use lanefs::{BlockDevice, Error, MemDevice, Result};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// /// A device that counts the flushes it passes on.
/// struct Counting {
///     inner: MemDevice,
///     flushes: AtomicU64,
/// }
///
/// impl BlockDevice for Counting {
///     fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
///         self.inner.read_at(off, buf)
///     }
///     fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
///         self.inner.write_at(off, buf)
///     }
///     fn flush(&self) -> Result<()> {
///         self.flushes.fetch_add(1, Ordering::Relaxed);
///         self.inner.flush()
///     }
///     fn size(&self) -> u64 {
///         self.inner.size()
///     }
/// }
///
/// let dev = Counting { inner: MemDevice::new(1 << 20), flushes: AtomicU64::new(0) };
/// dev.write_at(4096, b"block")?;
/// dev.flush()?;
/// let mut back = [0u8; 5];
/// dev.read_at(4096, &mut back)?;
/// assert_eq!((&back, dev.flushes.load(Ordering::Relaxed)), (b"block", 1));
/// assert!(matches!(dev.read_at(1 << 20, &mut back), Err(Error::Io { .. })));
/// # Ok::<(), Error>(())
/// ```
pub trait BlockDevice: Send + Sync {
    /// Read exactly `buf.len()` bytes at `off`.
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()>;
    /// Write all of `buf` at `off`.
    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()>;
    /// Write `bufs` back to back from `off`, as one write of their concatenation (the
    /// journal's log runs and checkpoints; a file device gathers them with `pwritev`
    /// instead of copying them into one buffer first).
    fn write_gather_at(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        match bufs {
            [] => Ok(()),
            [one] => self.write_at(off, one),
            _ => self.write_at(off, &bufs.concat()),
        }
    }
    /// [`BlockDevice::write_gather_at`] for the journal's log: blocks written once, in
    /// order, and read back only by a recovery. A file device writes them past the page
    /// cache when it can (`O_DIRECT`: no copy into the kernel's cache, no write-back of it
    /// at the flush).
    fn write_log_at(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        self.write_gather_at(off, bufs)
    }
    /// Read back to back from `off` into `bufs`, as one read of their total length (the
    /// page cache's read-ahead into several folios; a file device scatters with `preadv`).
    fn read_scatter_at(&self, mut off: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        for b in bufs.iter_mut() {
            self.read_at(off, b)?;
            off += b.len() as u64;
        }
        Ok(())
    }
    /// Make `len` bytes from `off` read as zeros without writing them, where the device
    /// can (a hole punched in an image file): true when done, false when this device
    /// cannot and nothing was changed (the caller writes zeros instead). Durable with the
    /// next [`BlockDevice::flush`], as a write is.
    fn punch_zeros(&self, off: u64, len: u64) -> Result<bool> {
        let _ = (off, len);
        Ok(false)
    }
    /// Make every completed write durable.
    fn flush(&self) -> Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
}

/// An image file or a block device opened by path, claimed for as long as it is open:
/// one writer at a time (an `flock` on an image file, `O_EXCL` on a block device or on
/// the loop device the kernel has attached to the image), any number of readers while
/// no one writes, and no writer while the kernel has the image mounted. A claim that
/// conflicts fails at once with [`Error::Busy`] naming who holds the image.
///
/// ```
/// use lanefs::{Error, FileDevice};
///
/// let tmp = tempfile::tempdir().unwrap();
/// let img = tmp.path().join("disk.img");
/// let dev = FileDevice::create(&img, 16 << 20)?; // a sparse 16 MiB file, claimed
/// assert!(matches!(FileDevice::open(&img, false), Err(Error::Busy(_))));
/// drop(dev);
/// let again = FileDevice::open(&img, true)?; // read-only: shared with other readers
/// # drop(again);
/// # Ok::<(), Error>(())
/// ```
pub struct FileDevice {
    file: File,
    size: u64,
    _claim: Claim,
    /// A second descriptor opened with `O_DIRECT`, for the log's writes (none when the
    /// device is read-only or its file system refuses the flag).
    direct: Option<File>,
    /// Direct writes still work here (cleared by the first `EINVAL` or `EOPNOTSUPP`: buffered
    /// from then on).
    direct_on: AtomicBool,
    /// Log runs written past the page cache.
    direct_writes: AtomicU64,
}

/// What `O_DIRECT` asks to be aligned to: memory, offset and length (4 KiB covers every
/// device's logical block and the page size here).
const DIRECT_ALIGN: usize = 4096;

/// Open `path` again for writes past the page cache, if its file system allows it.
fn open_direct(path: &Path) -> Option<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

/// Whether a gathered write at `off` meets `O_DIRECT`'s alignment.
fn direct_aligned(off: u64, bufs: &[&[u8]]) -> bool {
    off.is_multiple_of(DIRECT_ALIGN as u64)
        && bufs.iter().all(|b| {
            (b.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
                && b.len().is_multiple_of(DIRECT_ALIGN)
        })
}

impl FileDevice {
    /// Open an existing image or device, read-write unless `read_only`, and claim it
    /// (exclusive to write, shared to read; [`Error::Busy`] when another holds it).
    pub fn open(path: &Path, read_only: bool) -> Result<FileDevice> {
        let file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .custom_flags(exclusive::open_flags(path, read_only))
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EBUSY) => exclusive::busy_device(path),
                _ => Error::io(format!("opening {}", path.display()), e),
            })?;
        let claim = exclusive::claim(&file, path, read_only)?;
        let size = device_size(&file, path)?;
        let direct = if read_only { None } else { open_direct(path) };
        Ok(FileDevice::with(file, size, claim, direct))
    }

    /// Open an existing image or device read-only for a one-shot read, also while
    /// another lanefs writes it (what it has made durable so far;
    /// [`crate::sharing_note`] names the writer).
    pub fn open_snapshot(path: &Path) -> Result<FileDevice> {
        let file = OpenOptions::new()
            .read(true)
            .open(path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let claim = exclusive::claim_snapshot(&file);
        let size = device_size(&file, path)?;
        Ok(FileDevice::with(file, size, claim, None))
    }

    fn with(file: File, size: u64, claim: Claim, direct: Option<File>) -> FileDevice {
        FileDevice {
            file,
            size,
            _claim: claim,
            direct,
            direct_on: AtomicBool::new(true),
            direct_writes: AtomicU64::new(0),
        }
    }

    /// How many log runs went past the page cache (`O_DIRECT`).
    pub fn direct_writes(&self) -> u64 {
        self.direct_writes.load(Ordering::Relaxed)
    }

    /// Refuse a transfer of `len` bytes at `off` (a write when `write`) that would pass
    /// the device's end.
    fn check_range(&self, write: bool, off: u64, len: u64) -> Result<()> {
        if off.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(past_end(write, off, len, self.size));
        }
        Ok(())
    }

    /// Create (or truncate) an image file of `size` bytes. An existing file is claimed
    /// before it is truncated, so one in use is refused unharmed.
    pub fn create(path: &Path, size: u64) -> Result<FileDevice> {
        #[allow(clippy::suspicious_open_options)] // truncated below, once claimed
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let claim = exclusive::claim(&file, path, false)?;
        let sizing = |e| Error::io(format!("sizing {} to {size} bytes", path.display()), e);
        file.set_len(0).map_err(sizing)?;
        file.set_len(size).map_err(sizing)?;
        Ok(FileDevice::with(file, size, claim, open_direct(path)))
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        self.check_range(false, off, len)?;
        self.file
            .read_exact_at(buf, off)
            .map_err(|e| Error::io(transfer(false, off, len), e))
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        let len = buf.len() as u64;
        self.check_range(true, off, len)?;
        self.file
            .write_all_at(buf, off)
            .map_err(|e| Error::io(transfer(true, off, len), e))
    }
    fn write_gather_at(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.check_range(true, off, len)?;
        pwritev_all(&self.file, off, bufs).map_err(|e| Error::io(transfer(true, off, len), e))
    }
    fn write_log_at(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.check_range(true, off, len)?;
        if let Some(d) = &self.direct {
            if self.direct_on.load(Ordering::Relaxed) && direct_aligned(off, bufs) {
                debug_assert!(
                    len.is_multiple_of(DIRECT_ALIGN as u64),
                    "O_DIRECT write of {len}"
                );
                // The kernel writes back and drops any cached page of the range first and
                // drops them again after, so buffered reads and writes stay coherent; the
                // flush (`fdatasync` of the file) still flushes the device's cache.
                match pwritev_all(d, off, bufs) {
                    Ok(()) => {
                        self.direct_writes.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    // Not on this file system after all (the run is written again below,
                    // whole).
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                        self.direct_on.store(false, Ordering::Relaxed);
                    }
                    Err(e) => return Err(Error::io(transfer(true, off, len), e)),
                }
            }
        }
        pwritev_all(&self.file, off, bufs).map_err(|e| Error::io(transfer(true, off, len), e))
    }
    fn read_scatter_at(&self, off: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.check_range(false, off, len)?;
        preadv_all(&self.file, off, bufs).map_err(|e| Error::io(transfer(false, off, len), e))
    }
    fn punch_zeros(&self, off: u64, len: u64) -> Result<bool> {
        self.check_range(true, off, len)?;
        // A block device keeps its blocks (and BLKZEROOUT may write the zeros itself):
        // only an image file has holes to make.
        let is_file = self.file.metadata().is_ok_and(|m| m.file_type().is_file());
        if !is_file || len == 0 {
            return Ok(is_file);
        }
        use rustix::fs::{fallocate, FallocateFlags};
        match fallocate(
            &self.file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            off,
            len,
        ) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => Ok(false),
            Err(e) => Err(Error::io(
                format!("punching {len} bytes at byte {off}"),
                std::io::Error::from(e),
            )),
        }
    }
    fn flush(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("flushing the device", e))
    }
    fn size(&self) -> u64 {
        self.size
    }
}

/// The size of the image or device `file` (opened from `path`): seeking to the end gives
/// the size of both regular files and block devices.
fn device_size(file: &File, path: &Path) -> Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::End(0))
        .map_err(|e| Error::io(format!("finding the size of {}", path.display()), e))
}

/// The operation a device error names: a read (or a write, when `write`) of `len` bytes
/// at byte `off`.
pub(crate) fn transfer(write: bool, off: u64, len: u64) -> String {
    let verb = if write { "writing" } else { "reading" };
    format!("{verb} {len} bytes at byte {off}")
}

/// The error of a transfer (see [`transfer`]) that would pass the end of a device of
/// `size` bytes: a read meets the end of the data, a write has nowhere to go. No host
/// error, so no errno.
pub(crate) fn past_end(write: bool, off: u64, len: u64, size: u64) -> Error {
    let kind = if write {
        std::io::ErrorKind::Other
    } else {
        std::io::ErrorKind::UnexpectedEof
    };
    let why = format!("past the device's end ({size} bytes)");
    Error::io(transfer(write, off, len), std::io::Error::new(kind, why))
}

/// Most buffers one `pwritev` takes (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;

/// Write `bufs` back to back from `off` with `pwritev`, going on after short writes.
fn pwritev_all(file: &File, mut off: u64, bufs: &[&[u8]]) -> std::io::Result<()> {
    use std::io::IoSlice;
    // The first buffer not yet wholly written, and how much of it was.
    let (mut i, mut done) = (0, 0);
    while i < bufs.len() {
        let iov: Vec<IoSlice<'_>> = bufs[i..bufs.len().min(i + IOV_MAX)]
            .iter()
            .enumerate()
            .map(|(k, b)| IoSlice::new(if k == 0 { &b[done..] } else { b }))
            .collect();
        let n = match rustix::io::pwritev(file, &iov, off) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        debug_assert!(
            n <= iov.iter().map(|v| v.len()).sum::<usize>(),
            "pwritev wrote {n} bytes, more than it was given"
        );
        off += n as u64;
        (i, done) = step(bufs.len(), |k| bufs[k].len(), i, done, n);
    }
    Ok(())
}

/// Where a vectored transfer stands after `n` more bytes moved: the first of `count`
/// buffers (lengths `len(k)`) not yet done, and how much of it is (empty buffers are
/// stepped past).
fn step(
    count: usize,
    len: impl Fn(usize) -> usize,
    mut i: usize,
    done: usize,
    mut n: usize,
) -> (usize, usize) {
    debug_assert!(
        i >= count || done <= len(i),
        "{done} bytes done of buffer {i}"
    );
    let mut done = done;
    while i < count && n >= len(i) - done {
        n -= len(i) - done;
        i += 1;
        done = 0;
    }
    // What the kernel moved lies inside the buffers: none left past the last one.
    debug_assert!(i < count || n == 0, "{n} bytes past the last buffer");
    (i, done + n)
}

/// Read into `bufs` back to back from `off` with `preadv`, going on after short reads; the
/// end of the file before the buffers are full is an error.
fn preadv_all(file: &File, mut off: u64, bufs: &mut [&mut [u8]]) -> std::io::Result<()> {
    use std::io::IoSliceMut;
    let (mut i, mut done) = (0, 0);
    while i < bufs.len() {
        let end = bufs.len().min(i + IOV_MAX);
        let mut iov: Vec<IoSliceMut<'_>> = bufs[i..end]
            .iter_mut()
            .enumerate()
            .map(|(k, b)| IoSliceMut::new(if k == 0 { &mut b[done..] } else { b }))
            .collect();
        let n = match rustix::io::preadv(file, &mut iov, off) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        debug_assert!(
            n <= iov.iter().map(|v| v.len()).sum::<usize>(),
            "preadv read {n} bytes, more than it was given"
        );
        off += n as u64;
        (i, done) = step(bufs.len(), |k| bufs[k].len(), i, done, n);
    }
    Ok(())
}

/// A device in memory, for tests, benchmarks and examples. Flushing does nothing; a
/// read or write past its end fails with [`Error::Io`].
///
/// ```
/// use lanefs::{mkfs, Fs, MemDevice, MountOptions};
/// use std::sync::Arc;
///
/// let dev = Arc::new(MemDevice::new(32 << 20));
/// mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
/// let fs = Fs::mount(dev.clone(), MountOptions::default())?;
/// fs.unmount()?;
/// let image: Vec<u8> = dev.snapshot(); // the bytes an image file would hold
/// assert_eq!(image[1080..1082], [0x53, 0xEF]); // the ext4 superblock's magic
/// # Ok::<(), lanefs::Error>(())
/// ```
pub struct MemDevice {
    data: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// A zero-filled device of `size` bytes.
    pub fn new(size: u64) -> MemDevice {
        MemDevice {
            data: RwLock::new(&MEM_DEVICE, vec![0; size as usize]),
        }
    }
    /// A device holding `bytes`.
    pub fn from_vec(bytes: Vec<u8>) -> MemDevice {
        MemDevice {
            data: RwLock::new(&MEM_DEVICE, bytes),
        }
    }
    /// A copy of the whole device.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().clone()
    }
}

impl BlockDevice for MemDevice {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let d = self.data.read();
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= d.len() as u64);
        let Some(end) = end else {
            return Err(past_end(false, off, buf.len() as u64, d.len() as u64));
        };
        buf.copy_from_slice(&d[off as usize..end as usize]);
        Ok(())
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        let mut d = self.data.write();
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= d.len() as u64);
        let Some(end) = end else {
            return Err(past_end(true, off, buf.len() as u64, d.len() as u64));
        };
        d[off as usize..end as usize].copy_from_slice(buf);
        Ok(())
    }
    fn punch_zeros(&self, off: u64, len: u64) -> Result<bool> {
        let mut d = self.data.write();
        let end = off.checked_add(len).filter(|&e| e <= d.len() as u64);
        let Some(end) = end else {
            return Err(past_end(true, off, len, d.len() as u64));
        };
        d[off as usize..end as usize].fill(0);
        Ok(true)
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.data.read().len() as u64
    }
}

/// Wraps the device a mount writes through and remembers the first failed write or
/// flush, so the mount can turn read-only (ext4's `errors=remount-ro`): memory is then
/// ahead of the device, and what was committed before the failure must stay as it is.
/// A failed read changes nothing and only fails its operation.
///
/// It is also where a shutdown ([`crate::Fs::shutdown`]) stops the mount: once
/// [`ErrorLatch::shut_down`] has returned, every write and flush fails with
/// [`Error::ShutDown`] without reaching the device, whichever thread issues it (an
/// operation, the commit timer, the flusher, the MMP updater). Reads still reach it, as
/// ext4 still reads metadata after a shutdown.
pub struct ErrorLatch {
    inner: std::sync::Arc<dyn BlockDevice>,
    failed: std::sync::atomic::AtomicBool,
    /// Why the mount stopped writing, when it was not a device error.
    reason: std::sync::Mutex<Option<String>>,
    /// Bytes written through it (the superblock's lifetime writes count them).
    written: std::sync::atomic::AtomicU64,
    /// Closed by a shutdown. Every write and flush holds it shared while it runs, so
    /// the shutdown's exclusive hold waits for those in flight and none starts after.
    /// Shared with the latch of the mount's other device (`sharing_shutdown`).
    gate: std::sync::Arc<ShutGate>,
}

/// The shutdown flag of one mount's devices, under the lock that orders it after every
/// write in flight.
#[derive(Default)]
struct ShutGate {
    shut: std::sync::RwLock<bool>,
}

impl ErrorLatch {
    /// Watch `inner`.
    pub fn new(inner: std::sync::Arc<dyn BlockDevice>) -> ErrorLatch {
        ErrorLatch {
            inner,
            failed: std::sync::atomic::AtomicBool::new(false),
            reason: std::sync::Mutex::new(None),
            written: std::sync::atomic::AtomicU64::new(0),
            gate: Default::default(),
        }
    }
    /// Watch `inner`, a second device of the same mount (the realtime data device): a
    /// shutdown of `other` stops its writes too.
    pub fn sharing_shutdown(
        inner: std::sync::Arc<dyn BlockDevice>,
        other: &ErrorLatch,
    ) -> ErrorLatch {
        ErrorLatch {
            gate: other.gate.clone(),
            ..ErrorLatch::new(inner)
        }
    }
    /// Stop writes for a reason other than a failed write (another host took the image
    /// over, say): the mount turns read-only as after a device error.
    pub fn trip(&self, reason: String) {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        self.failed
            .store(true, std::sync::atomic::Ordering::Release);
    }
    /// Refuse every later write and flush with [`Error::ShutDown`]; returns once no write
    /// or flush is under way on the device.
    pub fn shut_down(&self) {
        *self.gate.shut.write().unwrap_or_else(|e| e.into_inner()) = true;
    }
    /// The reason given to [`ErrorLatch::trip`], if any.
    pub fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// Bytes written through it so far.
    pub fn bytes_written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn count(&self, n: usize) {
        self.written
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
    /// Whether a write or flush has failed.
    pub fn failed(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::Acquire)
    }
    fn note<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.failed
                .store(true, std::sync::atomic::Ordering::Release);
        }
        r
    }
    /// Run `write` (a write or flush of the device) unless the mount was shut down,
    /// holding the gate open while it runs; note its failure.
    fn gated(&self, write: impl FnOnce() -> Result<()>) -> Result<()> {
        let shut = self.gate.shut.read().unwrap_or_else(|e| e.into_inner());
        if *shut {
            return Err(Error::ShutDown);
        }
        self.note(write())
    }
}

impl BlockDevice for ErrorLatch {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        self.gated(|| {
            self.count(buf.len());
            self.inner.write_at(off, buf)
        })
    }
    fn read_scatter_at(&self, off: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        self.inner.read_scatter_at(off, bufs)
    }
    fn write_gather_at(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        self.gated(|| {
            self.count(bufs.iter().map(|b| b.len()).sum());
            self.inner.write_gather_at(off, bufs)
        })
    }
    fn write_log_at(&self, off: u64, bufs: &[&[u8]]) -> Result<()> {
        self.gated(|| {
            self.count(bufs.iter().map(|b| b.len()).sum());
            self.inner.write_log_at(off, bufs)
        })
    }
    fn punch_zeros(&self, off: u64, len: u64) -> Result<bool> {
        let mut done = false;
        self.gated(|| {
            done = self.inner.punch_zeros(off, len)?;
            Ok(())
        })?;
        Ok(done)
    }
    fn flush(&self) -> Result<()> {
        self.gated(|| self.inner.flush())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gathered write lands as one write of the concatenation would, across more
    /// buffers than one `pwritev` takes and with empty ones among them.
    #[test]
    fn gathered_write_equals_concatenation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let dev = FileDevice::create(&path, 1 << 20).unwrap();
        let bufs: Vec<Vec<u8>> = (0..2500)
            .map(|i: usize| vec![(i % 251) as u8; [0, 1, 7, 64, 300][i % 5]])
            .collect();
        let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        let all = refs.concat();
        dev.write_gather_at(4096, &refs).unwrap();
        let mut back = vec![0u8; all.len()];
        dev.read_at(4096, &mut back).unwrap();
        assert_eq!(back, all);
        let past = dev.write_gather_at((1 << 20) - 10, &[&[1u8; 8][..], &[2u8; 8][..]]);
        assert!(past.is_err(), "a gathered write past the end is refused");
    }

    /// A shutdown waits for the write under way, then refuses every write and flush (of
    /// the latch that shares it too) without reaching the device; reads go on.
    #[test]
    fn shutdown_waits_for_writes_in_flight_then_refuses() {
        use std::sync::Arc;
        /// Holds each write for 100 ms, then lands it.
        struct Slow(MemDevice);
        impl BlockDevice for Slow {
            fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
                self.0.read_at(off, buf)
            }
            fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
                std::thread::sleep(std::time::Duration::from_millis(100));
                self.0.write_at(off, buf)
            }
            fn flush(&self) -> Result<()> {
                self.0.flush()
            }
            fn size(&self) -> u64 {
                self.0.size()
            }
        }
        let slow = Arc::new(Slow(MemDevice::new(1 << 16)));
        let latch = Arc::new(ErrorLatch::new(slow.clone()));
        let other = ErrorLatch::sharing_shutdown(Arc::new(MemDevice::new(4096)), &latch);
        let w = {
            let latch = latch.clone();
            std::thread::spawn(move || latch.write_at(0, &[7u8; 512]))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        latch.shut_down();
        let mut b = [0u8; 512];
        slow.read_at(0, &mut b).unwrap();
        assert_eq!(
            b, [7u8; 512],
            "shut_down returned before the write in flight"
        );
        w.join().unwrap().unwrap();
        assert_eq!(latch.write_at(512, &[1u8; 512]), Err(Error::ShutDown));
        assert_eq!(
            latch.write_gather_at(512, &[&[1u8; 8][..]]),
            Err(Error::ShutDown)
        );
        assert_eq!(
            latch.write_log_at(512, &[&[1u8; 8][..]]),
            Err(Error::ShutDown)
        );
        assert_eq!(latch.flush(), Err(Error::ShutDown));
        assert_eq!(other.write_at(0, &[1u8; 8]), Err(Error::ShutDown));
        slow.read_at(512, &mut b).unwrap();
        assert_eq!(b, [0u8; 512], "a refused write reached the device");
        latch.read_at(0, &mut b).unwrap();
        assert!(!latch.failed(), "a refusal is not a device error");
    }

    /// Log runs written past the page cache read back through it, over pages it had
    /// cached before; a run that is not aligned for `O_DIRECT` is written buffered.
    #[test]
    fn log_writes_past_the_cache_stay_coherent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let dev = FileDevice::create(&path, 1 << 20).unwrap();
        // Cache the range's pages with other bytes first.
        dev.write_at(8192, &[7u8; 3 * 4096]).unwrap();
        let mut back = vec![0u8; 3 * 4096];
        dev.read_at(8192, &mut back).unwrap();
        // Three aligned blocks out of one buffer.
        let mut v = vec![0u8; 4 * 4096];
        let start = v.as_ptr().align_offset(DIRECT_ALIGN);
        for (i, b) in v[start..start + 3 * 4096].chunks_mut(4096).enumerate() {
            b.fill(i as u8 + 1);
        }
        let blocks: Vec<&[u8]> = v[start..start + 3 * 4096].chunks(4096).collect();
        dev.write_log_at(8192, &blocks).unwrap();
        dev.read_at(8192, &mut back).unwrap();
        assert_eq!(back, blocks.concat());
        // An aligned run goes past the cache unless this file system refused O_DIRECT
        // (at open, or by turning it off at the write).
        if dev.direct.is_some() && dev.direct_on.load(Ordering::Relaxed) {
            assert_eq!(
                dev.direct_writes(),
                1,
                "an aligned log run was written buffered"
            );
        } else {
            eprintln!("note: this file system refused O_DIRECT; the log was written buffered");
        }
        // Misaligned in memory: not past the cache.
        let before = dev.direct_writes();
        let odd: Vec<&[u8]> = vec![&v[start + 1..start + 4097]];
        dev.write_log_at(4096, &odd).unwrap();
        let mut one = vec![0u8; 4096];
        dev.read_at(4096, &mut one).unwrap();
        assert_eq!(one, odd[0]);
        assert_eq!(
            dev.direct_writes(),
            before,
            "a misaligned run went past the cache"
        );
        assert!(dev.write_log_at(1 << 20, &blocks).is_err(), "past the end");
    }
}
