//! `SnapDevice`, the image file under lanefs: a copy holds every write off while it runs, so
//! it is one instant of the device; it also counts the bytes written into the journal's log
//! area. `mount_snap` mounts lanefs on it.

use super::*;

// ---------------------------------------------------------------------------------------
// A device that counts log writes and takes instant copies.

/// The image file under lanefs: writes pass straight through (pwrite), but a copy holds
/// every write off while it runs, so it is one instant of the device (what a power cut
/// leaves when every write issued so far has landed). Also counts bytes written into the
/// journal's log area.
pub(super) struct SnapDevice {
    inner: FileDevice,
    path: PathBuf,
    gate: RwLock<()>,
    log: Vec<(u64, u64)>,
    log_bytes: AtomicU64,
}

impl SnapDevice {
    pub(super) fn open(path: &Path) -> Arc<SnapDevice> {
        Arc::new(SnapDevice {
            inner: FileDevice::open(path, false).expect("open image"),
            path: path.to_path_buf(),
            gate: RwLock::new(()),
            log: journal_log_ranges(path),
            log_bytes: AtomicU64::new(0),
        })
    }

    pub(super) fn log_blocks(&self) -> u64 {
        self.log_bytes.load(Ordering::Relaxed) / BS
    }

    pub(super) fn log_len(&self) -> u64 {
        self.log.iter().map(|(a, b)| (b - a) / BS).sum()
    }

    pub(super) fn snapshot(&self, dst: &Path) {
        let _g = self.gate.write().unwrap_or_else(|e| e.into_inner());
        copy_image(&self.path, dst);
    }
}

impl BlockDevice for SnapDevice {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> lanefs::Result<()> {
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> lanefs::Result<()> {
        let _g = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let end = off + buf.len() as u64;
        let n: u64 = self
            .log
            .iter()
            .map(|&(a, b)| end.min(b).saturating_sub(off.max(a)))
            .sum();
        self.log_bytes.fetch_add(n, Ordering::Relaxed);
        self.inner.write_at(off, buf)
    }
    fn flush(&self) -> lanefs::Result<()> {
        let _g = self.gate.read().unwrap_or_else(|e| e.into_inner());
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

pub(super) fn mount_snap(dev: &Arc<SnapDevice>) -> Arc<Fs> {
    let d: Arc<dyn BlockDevice> = dev.clone();
    Fs::mount(
        d,
        MountOptions {
            commit_interval: Duration::ZERO,
            ..Default::default()
        },
    )
    .expect("lanefs mount")
}
