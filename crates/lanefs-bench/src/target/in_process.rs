//! The engine in-process: the same operations as calls on `Fs`.

use super::*;

/// The engine in-process.
pub struct LanefsBackend {
    pub(super) fs: Arc<Fs>,
    pub(super) image: PathBuf,
    /// The realtime data device, when the run's image has one (a [`Template`]'s copy).
    pub(super) rtdev: Option<PathBuf>,
    pub(super) base: Dir,
    /// File-system block size, which is also the journal's.
    pub(super) block_size: u64,
}

impl LanefsBackend {
    fn ino(&self, d: &Dir) -> Result<Ino, String> {
        match d {
            Dir::Ino(ino) => Ok(*ino),
            Dir::Path { path, .. } => Err(format!(
                "path {} given to the lanefs target",
                path.display()
            )),
        }
    }
    fn file_ino(&self, h: &Handle) -> Result<Ino, String> {
        match h {
            Handle::Ino(ino) => Ok(*ino),
            Handle::File(_) => Err("file descriptor given to the lanefs target".to_string()),
        }
    }
}

impl Backend for LanefsBackend {
    fn label(&self) -> String {
        "lanefs".to_string()
    }
    fn location(&self) -> String {
        format!("lanefs image {}", self.image.display())
    }
    fn base(&self) -> &Dir {
        &self.base
    }
    fn mkdir(&self, parent: &Dir, name: &Name) -> Result<Dir, String> {
        let dir = self.ino(parent)?;
        let attr = self
            .fs
            .mkdir(dir, name.as_bytes(), DIR_PERM, Owner::default())
            .map_err(|e| format!("mkdir {} in inode {dir}: {e}", name.display()))?;
        Ok(Dir::Ino(attr.ino))
    }
    fn create(&self, dir: &Dir, name: &Name) -> Result<Handle, String> {
        let dir = self.ino(dir)?;
        // `create` takes one open reference, dropped by `release` in `close`.
        let attr = self
            .fs
            .create(dir, name.as_bytes(), FILE_PERM, Owner::default())
            .map_err(|e| format!("create {} in inode {dir}: {e}", name.display()))?;
        Ok(Handle::Ino(attr.ino))
    }
    fn close(&self, h: Handle) -> Result<(), String> {
        let ino = self.file_ino(&h)?;
        self.fs
            .release(ino)
            .map_err(|e| format!("release inode {ino}: {e}"))
    }
    fn unlink(&self, dir: &Dir, name: &Name) -> Result<(), String> {
        let dir = self.ino(dir)?;
        self.fs
            .unlink(dir, name.as_bytes())
            .map_err(|e| format!("unlink {} in inode {dir}: {e}", name.display()))
    }
    fn stat(&self, dir: &Dir, name: &Name) -> Result<(), String> {
        let dir = self.ino(dir)?;
        let found = self
            .fs
            .lookup(dir, name.as_bytes())
            .map_err(|e| format!("lookup {} in inode {dir}: {e}", name.display()))?;
        self.fs
            .getattr(found.ino)
            .map(|_| ())
            .map_err(|e| format!("getattr inode {}: {e}", found.ino))
    }
    fn free_inodes(&self) -> Result<Option<u64>, String> {
        self.fs
            .statfs()
            .map(|st| Some(st.free_inodes))
            .map_err(|e| format!("statfs of {}: {e}", self.image.display()))
    }
    fn icache(&self) -> Option<IcacheStats> {
        Some(self.fs.diagnostics().icache_stats())
    }
    fn bufcache(&self) -> Option<BufCacheStats> {
        Some(self.fs.diagnostics().bufcache_stats())
    }
    fn fallocate(&self, h: &Handle, off: u64, len: u64) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        self.fs
            .fallocate(ino, FallocMode::default(), off, len)
            .map_err(|e| format!("fallocate {len} bytes at {off} of inode {ino}: {e}"))
    }
    fn truncate(&self, h: &Handle, size: u64) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        let set = SetAttr {
            size: Some(size),
            ..Default::default()
        };
        self.fs
            .setattr(ino, &set)
            .map(|_| ())
            .map_err(|e| format!("truncate inode {ino} to {size}: {e}"))
    }
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        let n = self
            .fs
            .write(ino, off, data)
            .map_err(|e| format!("write {} bytes at {off} of inode {ino}: {e}", data.len()))?;
        if n != data.len() {
            return Err(format!(
                "short write of inode {ino} at {off}: {n} of {} bytes",
                data.len()
            ));
        }
        Ok(())
    }
    fn read(&self, h: &Handle, off: u64, buf: &mut [u8]) -> Result<usize, String> {
        let ino = self.file_ino(h)?;
        self.fs
            .read(ino, off, buf)
            .map_err(|e| format!("read {} bytes at {off} of inode {ino}: {e}", buf.len()))
    }
    fn fsync(&self, h: &Handle, datasync: bool) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        self.fs
            .fsync(ino, datasync)
            .map_err(|e| format!("fsync inode {ino}: {e}"))
    }
    fn extents(&self, h: &Handle) -> Result<Option<u64>, String> {
        let ino = self.file_ino(h)?;
        self.fs
            .diagnostics()
            .extent_count(ino)
            .map(|n| Some(n as u64))
            .map_err(|e| format!("extents of inode {ino}: {e}"))
    }
    fn free_space(&self) -> Result<Option<FreeSpace>, String> {
        let f = self
            .fs
            .diagnostics()
            .free_space()
            .map_err(|e| format!("free space of {}: {e}", self.image.display()))?;
        Ok(Some(FreeSpace {
            extents: f.free_extents,
            avg_extent_kib: f.avg_extent_blocks() * self.block_size as f64 / 1024.0,
        }))
    }
    fn drop_cache(&self, h: &Handle) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        self.fs
            .diagnostics()
            .drop_cache(ino)
            .map_err(|e| format!("drop the cached data of inode {ino}: {e}"))
    }
    fn device_reads(&self) -> Option<DeviceReads> {
        let s = self.fs.diagnostics().pagecache_stats();
        Some(DeviceReads {
            reads: s.device_reads,
            bytes: s.device_read_bytes,
        })
    }
    fn cache_limit(&self) -> Option<u64> {
        Some(self.fs.diagnostics().pagecache_stats().limit)
    }
    fn journal(&self) -> Option<JournalCounters> {
        let s = self.fs.diagnostics().journal_stats();
        Some(JournalCounters {
            commits: s.commits,
            log_bytes: s.log_blocks.saturating_mul(self.block_size),
        })
    }
    fn set_realtime(&self, d: &Dir, hint: u32) -> Result<(), String> {
        let ino = self.ino(d)?;
        self.fs
            .set_realtime(ino, true)
            .map_err(|e| format!("make inode {ino} realtime: {e}"))?;
        if hint > 0 {
            self.fs
                .set_extsize(ino, hint)
                .map_err(|e| format!("extent size hint {hint} on inode {ino}: {e}"))?;
        }
        Ok(())
    }
    fn punch(&self, h: &Handle, off: u64, len: u64) -> Result<(), String> {
        let ino = self.file_ino(h)?;
        let mode = FallocMode {
            punch_hole: true,
            keep_size: true,
            ..FallocMode::default()
        };
        self.fs
            .fallocate(ino, mode, off, len)
            .map_err(|e| format!("punch {len} bytes at {off} of inode {ino}: {e}"))
    }
    fn sync(&self) -> Result<(), String> {
        self.fs
            .sync()
            .map_err(|e| format!("sync {}: {e}", self.image.display()))
    }
    fn rt_stats(&self) -> Option<RtStats> {
        self.fs.diagnostics().rt_stats()
    }
    fn block_size(&self) -> Option<u64> {
        Some(self.block_size)
    }
    fn rt_check(&self) -> Result<(), String> {
        self.fs
            .diagnostics()
            .rt_check()
            .map_err(|e| format!("realtime allocator of {}: {e}", self.image.display()))
    }
}
