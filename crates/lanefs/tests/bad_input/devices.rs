//! A failing device: a memory device that fails writes after a budget and reads of
//! chosen blocks, for the tests that expect `Error::Io` (or a read-only file system) and
//! committed data still readable.

use super::*;

// ---------------------------------------------------------------------------------------
// A failing device.

/// A memory device that fails writes after a budget and reads of chosen blocks.
pub(super) struct FailDev {
    pub(super) inner: MemDevice,
    writes: AtomicU64,
    pub(super) refused: AtomicU64,
    budget: AtomicU64,
    bad_reads: Mutex<Vec<u64>>,
}

impl FailDev {
    pub(super) fn new(img: Vec<u8>) -> Arc<FailDev> {
        Arc::new(FailDev {
            inner: MemDevice::from_vec(img),
            writes: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            budget: AtomicU64::new(u64::MAX),
            bad_reads: Mutex::new(Vec::new()),
        })
    }
    /// Allow `n` more writes, then fail every write.
    pub(super) fn fail_writes_after(&self, n: u64) {
        self.budget
            .store(self.writes.load(Ordering::SeqCst) + n, Ordering::SeqCst);
    }
    pub(super) fn fail_reads_of(&self, blk: u64) {
        self.bad_reads.lock().expect("bad_reads").push(blk);
    }
}

impl BlockDevice for FailDev {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> lanefs::Result<()> {
        let (first, last) = (
            off / bs() as u64,
            (off + buf.len().max(1) as u64 - 1) / bs() as u64,
        );
        if self
            .bad_reads
            .lock()
            .expect("bad_reads")
            .iter()
            .any(|b| (first..=last).contains(b))
        {
            return Err(Error::io_other(
                format!("reading at byte {off}"),
                "injected error",
            ));
        }
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> lanefs::Result<()> {
        if self.writes.fetch_add(1, Ordering::SeqCst) >= self.budget.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(Error::io_other(
                format!("writing at byte {off}"),
                "injected error",
            ));
        }
        self.inner.write_at(off, buf)
    }
    fn flush(&self) -> lanefs::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

pub(super) fn is_io_or_ro(e: &Error) -> bool {
    matches!(e, Error::Io { .. } | Error::ReadOnly)
}
