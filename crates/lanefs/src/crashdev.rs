//! The crash-recording memory device, [`CrashDevice`].

use crate::dev::BlockDevice;
use crate::error::{Error, Result};
use crate::sync::{Mutex, MEM_DEVICE};

/// Sector size: the unit a torn write is cut at.
pub const SECTOR: usize = 512;

/// One write since the last flush: where, what, and what it overwrote (to rebuild the
/// durable image without keeping a second copy of the device).
#[derive(Debug, Clone)]
struct Pending {
    off: usize,
    new: Vec<u8>,
    old: Vec<u8>,
}

struct State {
    /// The latest data: durable bytes with every pending write applied in order.
    current: Vec<u8>,
    /// Writes since the last flush, in issue order.
    pending: Vec<Pending>,
    /// Successful writes since creation.
    writes: u64,
    /// Successful flushes since creation.
    flushes: u64,
    /// Power is off: writes and flushes fail.
    cut: bool,
    /// Cut power when a write would make the total exceed this count.
    cut_writes: Option<u64>,
    /// Cut power right after the flush that brings the total to this count.
    cut_flushes: Option<u64>,
    /// Cut power instead of doing the flush that would bring the total to this count.
    cut_at_flush: Option<u64>,
}

/// A memory device for crash testing: it remembers which writes are durable and can build
/// the images a power cut could leave behind.
///
/// The model is the usual one for a disk with a volatile write cache (as in dm-log-writes or
/// CrashMonkey): a write is durable once a later [`BlockDevice::flush`] has returned. Writes
/// issued since the last flush are *pending*: after a power cut any subset of them may have
/// reached the medium, in any order, and the last one may be torn (only some of its 512-byte
/// sectors written). Reads always see the latest data, as the kernel's page cache would.
///
/// [`CrashDevice::durable`], [`CrashDevice::with_writes`] and [`CrashDevice::torn`] build
/// those images from the pending list. [`CrashDevice::power_cut`] (or an armed
/// [`CrashDevice::cut_after_writes`], [`CrashDevice::cut_after_flushes`] or
/// [`CrashDevice::cut_at_flush`]) makes every
/// later write and flush fail with [`Error::Io`] and change nothing, so a test can stop an
/// engine in the middle of a commit and then look at what the device holds.
///
/// # Example
///
/// ```
/// use lanefs::{BlockDevice, CrashDevice};
///
/// let dev = CrashDevice::new(4096);
/// dev.write_at(0, &[1; 512])?;
/// dev.flush()?;
/// dev.write_at(512, &[2; 1024])?; // pending: not durable yet
/// dev.write_at(0, &[3; 512])?;
/// assert_eq!(dev.pending_len(), 2);
/// assert_eq!(dev.durable()[..1024], [[1u8; 512], [0; 512]].concat()[..]);
/// // Only the second pending write reached the medium:
/// assert_eq!(dev.with_writes(&[1])[..512], [3u8; 512]);
/// // The first one torn after one sector:
/// assert_eq!(dev.torn(&[0], 1)[512..1536], [[2u8; 512], [0; 512]].concat()[..]);
/// dev.power_cut();
/// assert!(dev.write_at(0, &[9; 512]).is_err());
/// # Ok::<(), lanefs::Error>(())
/// ```
pub struct CrashDevice {
    state: Mutex<State>,
}

impl std::fmt::Debug for CrashDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("CrashDevice")
            .field("size", &s.current.len())
            .field("pending", &s.pending.len())
            .field("writes", &s.writes)
            .field("flushes", &s.flushes)
            .field("cut", &s.cut)
            .finish()
    }
}

/// Where a pending write went, for messages and for choosing writes to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingWrite {
    /// Byte offset on the device.
    pub off: u64,
    /// Length in bytes.
    pub len: usize,
}

impl CrashDevice {
    /// A zero-filled device of `size` bytes, all of it durable.
    pub fn new(size: u64) -> CrashDevice {
        CrashDevice::from_vec(vec![0; size as usize])
    }

    /// A device holding `bytes`, all of them durable.
    pub fn from_vec(bytes: Vec<u8>) -> CrashDevice {
        CrashDevice {
            state: Mutex::new(
                &MEM_DEVICE,
                State {
                    current: bytes,
                    pending: Vec::new(),
                    writes: 0,
                    flushes: 0,
                    cut: false,
                    cut_writes: None,
                    cut_flushes: None,
                    cut_at_flush: None,
                },
            ),
        }
    }

    /// Cut the power now: every later write and flush fails and changes nothing; reads
    /// still see the latest data. The pending list stays as it is, for building states.
    pub fn power_cut(&self) {
        self.state.lock().cut = true;
    }

    /// Whether the power is cut.
    pub fn is_cut(&self) -> bool {
        self.state.lock().cut
    }

    /// Cut the power at write number `n` (counted from 0 since the device was made): `n`
    /// writes in all succeed, and the one after them fails, as does everything later. With
    /// `n` at or below [`CrashDevice::writes`] the next write fails.
    pub fn cut_after_writes(&self, n: u64) {
        self.state.lock().cut_writes = Some(n);
    }

    /// Cut the power right after flush number `n` (counted from 1 since the device was
    /// made) has made the pending writes durable: that flush succeeds, every later write
    /// and flush fails. With `n` at or below [`CrashDevice::flushes`] the power is cut at
    /// once.
    pub fn cut_after_flushes(&self, n: u64) {
        let mut s = self.state.lock();
        s.cut_flushes = Some(n);
        if s.flushes >= n {
            s.cut = true;
        }
    }

    /// Cut the power instead of doing flush number `n` (counted from 1 since the device was
    /// made): that flush fails and the writes before it stay pending, so a state can keep
    /// any subset of them. With `n` at or below [`CrashDevice::flushes`] the next flush
    /// fails.
    pub fn cut_at_flush(&self, n: u64) {
        self.state.lock().cut_at_flush = Some(n);
    }

    /// Successful writes since the device was made.
    pub fn writes(&self) -> u64 {
        self.state.lock().writes
    }

    /// Successful flushes since the device was made.
    pub fn flushes(&self) -> u64 {
        self.state.lock().flushes
    }

    /// Writes issued since the last flush.
    pub fn pending_len(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// Offset and length of every write since the last flush, in issue order.
    pub fn pending(&self) -> Vec<PendingWrite> {
        self.state
            .lock()
            .pending
            .iter()
            .map(|p| PendingWrite {
                off: p.off as u64,
                len: p.new.len(),
            })
            .collect()
    }

    /// The latest data: every write applied, as if all pending writes had been flushed.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.snapshot_into(&mut out);
        out
    }

    /// The image after a power cut that lost every pending write: the state as of the
    /// last flush.
    pub fn durable(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.durable_into(&mut out);
        out
    }

    /// The durable image with the pending writes `keep` (indexes into the pending list)
    /// applied in the order given, which may differ from issue order.
    ///
    /// # Panics
    ///
    /// If an index is out of range.
    pub fn with_writes(&self, keep: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        self.with_writes_into(keep, &mut out);
        out
    }

    /// As [`CrashDevice::with_writes`], but the last write in `keep` is torn: only its
    /// first `sectors` 512-byte sectors (counted from the start of the write) reach the
    /// medium, the rest of its range keeps the bytes it had before. An empty `keep` gives
    /// the durable image.
    ///
    /// # Panics
    ///
    /// If an index is out of range.
    pub fn torn(&self, keep: &[usize], sectors: usize) -> Vec<u8> {
        let mut out = Vec::new();
        self.torn_into(keep, sectors, &mut out);
        out
    }

    /// [`CrashDevice::snapshot`] into `out` (replacing its contents). Reusing one buffer
    /// saves the page faults of a fresh allocation, which dominate for big images.
    pub fn snapshot_into(&self, out: &mut Vec<u8>) {
        let s = self.state.lock();
        out.clear();
        out.extend_from_slice(&s.current);
    }

    /// [`CrashDevice::durable`] into `out` (replacing its contents).
    pub fn durable_into(&self, out: &mut Vec<u8>) {
        self.build(&[], None, out);
    }

    /// [`CrashDevice::with_writes`] into `out` (replacing its contents).
    ///
    /// # Panics
    ///
    /// If an index is out of range.
    pub fn with_writes_into(&self, keep: &[usize], out: &mut Vec<u8>) {
        self.build(keep, None, out);
    }

    /// [`CrashDevice::torn`] into `out` (replacing its contents).
    ///
    /// # Panics
    ///
    /// If an index is out of range.
    pub fn torn_into(&self, keep: &[usize], sectors: usize, out: &mut Vec<u8>) {
        self.build(keep, Some(sectors), out);
    }

    /// The latest data, consuming the device (no copy).
    pub fn into_vec(self) -> Vec<u8> {
        self.state.into_inner().current
    }

    fn build(&self, keep: &[usize], torn: Option<usize>, img: &mut Vec<u8>) {
        let s = self.state.lock();
        for &k in keep {
            assert!(
                k < s.pending.len(),
                "pending write {k} of {}",
                s.pending.len()
            );
        }
        img.clear();
        img.extend_from_slice(&s.current);
        for p in s.pending.iter().rev() {
            // write_at records only in-range writes, with the bytes they replaced.
            debug_assert!(
                p.old.len() == p.new.len() && p.off + p.old.len() <= img.len(),
                "pending write at {} of {} bytes",
                p.off,
                p.new.len()
            );
            img[p.off..p.off + p.old.len()].copy_from_slice(&p.old);
        }
        for (n, &k) in keep.iter().enumerate() {
            let p = &s.pending[k];
            let len = match torn {
                Some(sectors) if n + 1 == keep.len() => {
                    sectors.saturating_mul(SECTOR).min(p.new.len())
                }
                _ => p.new.len(),
            };
            img[p.off..p.off + len].copy_from_slice(&p.new[..len]);
        }
    }
}

/// Why a write or flush of a cut device fails.
const POWER_CUT: &str = "power cut (nothing more reaches the device)";

impl BlockDevice for CrashDevice {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let s = self.state.lock();
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= s.current.len() as u64);
        let Some(end) = end else {
            let size = s.current.len() as u64;
            return Err(crate::dev::past_end(false, off, buf.len() as u64, size));
        };
        buf.copy_from_slice(&s.current[off as usize..end as usize]);
        Ok(())
    }

    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        let mut s = self.state.lock();
        if s.cut_writes.is_some_and(|n| s.writes >= n) {
            s.cut = true;
        }
        if s.cut {
            let op = crate::dev::transfer(true, off, buf.len() as u64);
            return Err(Error::io_other(op, POWER_CUT));
        }
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= s.current.len() as u64);
        let Some(end) = end else {
            let size = s.current.len() as u64;
            return Err(crate::dev::past_end(true, off, buf.len() as u64, size));
        };
        let (off, end) = (off as usize, end as usize);
        let old = s.current[off..end].to_vec();
        s.current[off..end].copy_from_slice(buf);
        s.pending.push(Pending {
            off,
            new: buf.to_vec(),
            old,
        });
        s.writes += 1;
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut s = self.state.lock();
        if s.cut_at_flush.is_some_and(|n| s.flushes + 1 >= n) {
            s.cut = true;
        }
        if s.cut {
            return Err(Error::io_other("flushing the device", POWER_CUT));
        }
        s.pending.clear();
        s.flushes += 1;
        if s.cut_flushes.is_some_and(|n| s.flushes >= n) {
            s.cut = true;
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.state.lock().current.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev_with_pending() -> CrashDevice {
        // Durable: sector 0 = 1s. Pending: w0 = sectors 1..3 of 2s, w1 = sector 0 of 3s,
        // w2 = sector 1 of 4s (overlaps w0).
        let d = CrashDevice::new(8 * SECTOR as u64);
        d.write_at(0, &[1; SECTOR]).unwrap();
        d.flush().unwrap();
        d.write_at(SECTOR as u64, &[2; 2 * SECTOR]).unwrap();
        d.write_at(0, &[3; SECTOR]).unwrap();
        d.write_at(SECTOR as u64, &[4; SECTOR]).unwrap();
        d
    }

    /// The first byte of each sector of an image.
    fn sectors(img: &[u8]) -> Vec<u8> {
        img.chunks(SECTOR)
            .map(|c| {
                assert!(c.iter().all(|&b| b == c[0]), "sector not uniform");
                c[0]
            })
            .collect()
    }

    #[test]
    fn reads_see_latest_and_counts() {
        let d = dev_with_pending();
        let mut buf = [0u8; 3 * SECTOR];
        d.read_at(0, &mut buf).unwrap();
        assert_eq!(sectors(&buf), [3, 4, 2]);
        assert_eq!(sectors(&d.snapshot()), [3, 4, 2, 0, 0, 0, 0, 0]);
        assert_eq!((d.writes(), d.flushes(), d.pending_len()), (4, 1, 3));
        assert_eq!(
            d.pending(),
            vec![
                PendingWrite {
                    off: 512,
                    len: 1024
                },
                PendingWrite { off: 0, len: 512 },
                PendingWrite { off: 512, len: 512 },
            ]
        );
        assert_eq!(d.size(), 8 * SECTOR as u64);
        assert!(d.read_at(8 * SECTOR as u64 - 1, &mut [0; 2]).is_err());
        assert!(d.write_at(8 * SECTOR as u64, &[0; 1]).is_err());
    }

    #[test]
    fn durable_drops_every_pending_write() {
        let d = dev_with_pending();
        assert_eq!(sectors(&d.durable()), [1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(d.durable(), d.with_writes(&[]));
        assert_eq!(d.durable(), d.torn(&[], 3));
        d.flush().unwrap();
        assert_eq!(d.pending_len(), 0);
        assert_eq!(sectors(&d.durable()), [3, 4, 2, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn with_writes_applies_subsets_in_given_order() {
        let d = dev_with_pending();
        assert_eq!(
            sectors(&d.with_writes(&[0, 1, 2])),
            [3, 4, 2, 0, 0, 0, 0, 0]
        );
        assert_eq!(d.with_writes(&[0, 1, 2]), d.snapshot());
        assert_eq!(sectors(&d.with_writes(&[1])), [3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(sectors(&d.with_writes(&[0])), [1, 2, 2, 0, 0, 0, 0, 0]);
        // Reordered: the older overlapping write lands last and wins.
        assert_eq!(sectors(&d.with_writes(&[2, 0])), [1, 2, 2, 0, 0, 0, 0, 0]);
        assert_eq!(sectors(&d.with_writes(&[0, 2])), [1, 4, 2, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn torn_keeps_a_sector_prefix_of_the_last_write() {
        let d = dev_with_pending();
        assert_eq!(sectors(&d.torn(&[0], 0)), [1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(sectors(&d.torn(&[0], 1)), [1, 2, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            sectors(&d.torn(&[0], 2)),
            d.with_writes(&[0])
                .chunks(SECTOR)
                .map(|c| c[0])
                .collect::<Vec<_>>()
        );
        assert_eq!(d.torn(&[0], 99), d.with_writes(&[0]));
        // Only the last write is torn; earlier ones land whole.
        assert_eq!(sectors(&d.torn(&[1, 0], 1)), [3, 2, 0, 0, 0, 0, 0, 0]);
        // Torn over data another pending write put there: the rest is the older data.
        assert_eq!(sectors(&d.torn(&[2, 0], 1)), [1, 2, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    #[should_panic(expected = "pending write 3 of 3")]
    fn out_of_range_index_panics() {
        dev_with_pending().with_writes(&[3]);
    }

    #[test]
    fn power_cut_fails_writes_and_flushes_and_keeps_reads() {
        let d = dev_with_pending();
        d.power_cut();
        assert!(d.is_cut());
        let e = d.write_at(0, &[9; SECTOR]).unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.to_string() == POWER_CUT),
            "{e:?}"
        );
        assert!(
            matches!(d.flush(), Err(Error::Io { source, .. }) if source.to_string() == POWER_CUT)
        );
        let mut buf = [0u8; SECTOR];
        d.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [3; SECTOR]);
        assert_eq!((d.writes(), d.flushes(), d.pending_len()), (4, 1, 3));
        assert_eq!(sectors(&d.durable()), [1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn cut_after_writes_lets_exactly_n_through() {
        let d = CrashDevice::new(4 * SECTOR as u64);
        d.cut_after_writes(2);
        d.write_at(0, &[1; SECTOR]).unwrap();
        d.flush().unwrap();
        d.write_at(512, &[2; SECTOR]).unwrap();
        assert!(!d.is_cut());
        assert!(d.write_at(1024, &[3; SECTOR]).is_err());
        assert!(d.is_cut());
        assert!(d.flush().is_err());
        assert_eq!((d.writes(), d.flushes(), d.pending_len()), (2, 1, 1));
        assert_eq!(sectors(&d.snapshot()), [1, 2, 0, 0]);
        assert_eq!(sectors(&d.durable()), [1, 0, 0, 0]);

        let d = CrashDevice::new(SECTOR as u64);
        d.cut_after_writes(0);
        assert!(d.write_at(0, &[1; SECTOR]).is_err());
        assert_eq!(d.snapshot(), vec![0; SECTOR]);
    }

    #[test]
    fn cut_after_flushes_keeps_that_flush() {
        let d = CrashDevice::new(4 * SECTOR as u64);
        d.cut_after_flushes(2);
        d.write_at(0, &[1; SECTOR]).unwrap();
        d.flush().unwrap();
        d.write_at(512, &[2; SECTOR]).unwrap();
        assert!(!d.is_cut());
        d.flush().unwrap();
        assert!(d.is_cut());
        assert!(d.write_at(1024, &[3; SECTOR]).is_err());
        assert_eq!((d.writes(), d.flushes(), d.pending_len()), (2, 2, 0));
        assert_eq!(sectors(&d.durable()), [1, 2, 0, 0]);
        // Arming at or below the count cuts at once.
        let d = CrashDevice::new(SECTOR as u64);
        d.flush().unwrap();
        d.cut_after_flushes(1);
        assert!(d.is_cut());
    }

    #[test]
    fn cut_at_flush_fails_that_flush_and_keeps_pending() {
        let d = CrashDevice::new(4 * SECTOR as u64);
        d.cut_at_flush(2);
        d.write_at(0, &[1; SECTOR]).unwrap();
        d.flush().unwrap();
        d.write_at(512, &[2; SECTOR]).unwrap();
        d.write_at(1024, &[3; SECTOR]).unwrap();
        assert!(!d.is_cut());
        assert!(
            matches!(d.flush(), Err(Error::Io { source, .. }) if source.to_string() == POWER_CUT)
        );
        assert!(d.is_cut());
        assert!(d.write_at(1536, &[4; SECTOR]).is_err());
        assert_eq!((d.writes(), d.flushes(), d.pending_len()), (3, 1, 2));
        assert_eq!(sectors(&d.durable()), [1, 0, 0, 0]);
        assert_eq!(sectors(&d.with_writes(&[1])), [1, 0, 3, 0]);
        assert_eq!(sectors(&d.snapshot()), [1, 2, 3, 0]);
    }

    #[test]
    fn into_variants_reuse_the_buffer() {
        let d = dev_with_pending();
        let mut buf = vec![0xAA; 3];
        d.durable_into(&mut buf);
        assert_eq!(buf, d.durable());
        d.with_writes_into(&[2, 0], &mut buf);
        assert_eq!(buf, d.with_writes(&[2, 0]));
        d.torn_into(&[1, 0], 1, &mut buf);
        assert_eq!(buf, d.torn(&[1, 0], 1));
        d.snapshot_into(&mut buf);
        assert_eq!(buf, d.snapshot());
        assert_eq!(d.into_vec(), buf);
    }

    #[test]
    fn usable_as_shared_block_device() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<CrashDevice>();
        let d: std::sync::Arc<dyn BlockDevice> = std::sync::Arc::new(CrashDevice::new(1024));
        d.write_at(0, &[7; 8]).unwrap();
        let mut b = [0u8; 8];
        d.read_at(0, &mut b).unwrap();
        assert_eq!(b, [7; 8]);
    }
}
