//! File data: read, write, fallocate, truncate (write-back, fsync, sync and unmount are
//! in `durable.rs`).

use super::ops::flags;
use super::{Fs, MAX_FILE_BLOCKS};
use crate::bmap::{self, Prior};
use crate::disk::inline;
use crate::disk::inode::FL_EXTENTS;
use crate::error::{Error, Result};
use crate::extmap::{ExtentMap, Mapping};
use crate::icache::IRef;
use crate::inode::{Inode, InodeState};
use crate::journal::Handle;
use crate::page::Run;
use crate::types::*;

/// Commits `retry_nospace` makes before an ENOSPC stands.
const RETRY_NOSPACE: u32 = 16;
/// How long `retry_nospace` waits for a removed file still open to be let go.
const ORPHAN_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Where block `lblk` of a file mapped by `ext` lives, for the page cache.
fn run_at(ext: &ExtentMap, lblk: u64) -> Run {
    match u32::try_from(lblk).map(|b| ext.map(b)) {
        Ok(Mapping::Mapped(p, false, l)) => Run::Data(p, u64::from(l)),
        Ok(Mapping::Mapped(_, true, l)) => Run::Zero(u64::from(l)),
        Ok(Mapping::Hole(l)) => Run::Zero(l),
        Err(_) => Run::Zero(1),
    }
}

impl Fs {
    /// Refuse anything but a regular file.
    fn regular_kind(&self, st: &InodeState) -> Result<()> {
        match FileType::from_mode(st.d.mode()) {
            Some(FileType::Regular) => Ok(()),
            Some(FileType::Directory) => Err(Error::IsDir),
            _ => Err(Error::Invalid("not a regular file".into())),
        }
    }

    fn regular<'a>(&self, st: &'a InodeState) -> Result<&'a ExtentMap> {
        self.regular_kind(st)?;
        st.ext
            .as_ref()
            .ok_or_else(|| Error::Unsupported("file without extents".into()))
    }

    /// Read at `off` into `buf`; returns bytes read (0 at end of file). Cached data is
    /// copied without the inode's lock (the size as last stored, then the folios); a miss
    /// reads through the page cache under the inode's shared lock. Holes read as zeros.
    ///
    /// See [`Fs::write`] for an example.
    pub fn read(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        // After a shutdown, as ext4_file_read_iter: EIO, cached or not.
        self.check_live()?;
        let i = self.iget(ino)?;
        if let Some(n) = i.mapping.read_fast(self.vol.bs() as usize, off, buf) {
            return Ok(n);
        }
        let st = self.read_loaded(&i)?;
        self.regular_kind(&st)?;
        if inline::is_inline(&st.d) {
            return self.read_inline(ino, &st, off, buf);
        }
        let ext = self.regular(&st)?;
        let size = st.d.size();
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (size - off).min(buf.len() as u64) as usize;
        i.mapping
            .read(&self.pages, off, &mut buf[..n], size, &|lblk| {
                run_at(ext, lblk)
            })?;
        Ok(n)
    }

    /// The first offset at or after `off` that holds data (lseek's SEEK_DATA), or `None`
    /// when only hole is left before the end of the file (ENXIO). Unwritten extents read
    /// as zeros and count as hole, as ext4 reports them when no page is cached over them
    /// (lanefs marks blocks written when it caches their pages). Costs per extent, not per
    /// block, whatever the size says.
    pub fn seek_data(&self, ino: Ino, off: u64) -> Result<Option<u64>> {
        let i = self.iget(ino)?;
        let st = self.read_loaded(&i)?;
        self.regular_kind(&st)?;
        if inline::is_inline(&st.d) {
            return Ok((off < st.d.size()).then_some(off));
        }
        let ext = self.regular(&st)?;
        let (size, bs) = (st.d.size(), self.vol.bs() as u64);
        let Ok(lblk) = u32::try_from(off / bs) else {
            return Ok(None);
        };
        if off >= size {
            return Ok(None);
        }
        let data = ext
            .from_block(lblk)
            .find(|e| !e.unwritten)
            .map(|e| (u64::from(e.lblk) * bs).max(off));
        Ok(data.filter(|&d| d < size))
    }

    /// The first offset at or after `off` in a hole (lseek's SEEK_HOLE); the end of the
    /// file counts as one. `None` when `off` is at or past the end (ENXIO).
    pub fn seek_hole(&self, ino: Ino, off: u64) -> Result<Option<u64>> {
        let i = self.iget(ino)?;
        let st = self.read_loaded(&i)?;
        self.regular_kind(&st)?;
        if inline::is_inline(&st.d) {
            return Ok((off < st.d.size()).then_some(st.d.size()));
        }
        let ext = self.regular(&st)?;
        let (size, bs) = (st.d.size(), self.vol.bs() as u64);
        if off >= size {
            return Ok(None);
        }
        let Ok(lblk) = u32::try_from(off / bs) else {
            return Ok(Some(off));
        };
        let mut pos = off;
        for e in ext.from_block(lblk) {
            if e.unwritten || u64::from(e.lblk) * bs > pos {
                break;
            }
            pos = pos.max(e.lend() * bs);
        }
        Ok(Some(pos.min(size)))
    }

    /// The file's block map, in logical order (FIEMAP): one entry per extent as stored
    /// (an extent-mapped file) or per run of contiguous blocks (a block-mapped one); empty
    /// for an inline or empty file.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// use lanefs::FallocMode;
    /// let f = fs.create(ROOT_INO, b"pre", 0o644, Owner::default())?;
    /// fs.fallocate(f.ino, FallocMode::default(), 0, 1 << 20)?;
    /// fs.write(f.ino, 0, &[7; 4096])?;
    /// let map = fs.extents(f.ino)?;
    /// assert_eq!((map[0].logical, map[0].len, map[0].unwritten), (0, 1, false));
    /// assert_eq!((map[1].logical, map[1].len, map[1].unwritten), (1, 255, true));
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn extents(&self, ino: Ino) -> Result<Vec<crate::types::FileExtent>> {
        let i = self.iget(ino)?;
        let st = self.read_loaded(&i)?;
        self.regular_kind(&st)?;
        if inline::is_inline(&st.d) {
            return Ok(Vec::new());
        }
        let ext = self.regular(&st)?;
        Ok(ext
            .extents()
            .map(|e| crate::types::FileExtent {
                logical: u64::from(e.lblk),
                physical: e.pblk,
                len: e.len,
                unwritten: e.unwritten,
            })
            .collect())
    }

    /// Write `data` at `off`; returns bytes written (all of them, or an error). A write
    /// past the end extends the file, leaving a hole between. The data goes to the page
    /// cache and reaches the device at write-back: by the commit timer, under memory
    /// pressure, or at [`Fs::fsync`] and [`Fs::sync`], always before the commit that maps
    /// its blocks (ordered data).
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let f = fs.create(ROOT_INO, b"sparse", 0o644, Owner::default())?;
    /// assert_eq!(fs.write(f.ino, 0, b"head")?, 4);
    /// fs.write(f.ino, 1 << 20, b"tail")?; // 1 MiB on: a hole between
    /// assert_eq!(fs.getattr(f.ino)?.size, (1 << 20) + 4);
    ///
    /// let mut buf = vec![0xFF; 8];
    /// assert_eq!(fs.read(f.ino, 4096, &mut buf)?, 8);
    /// assert_eq!(buf, [0; 8]); // the hole
    /// assert_eq!(fs.read(f.ino, (1 << 20) + 2, &mut buf)?, 2); // short at the end
    /// assert_eq!(&buf[..2], b"il");
    /// assert_eq!(fs.read(f.ino, 2 << 20, &mut buf)?, 0); // past the end
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn write(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        self.retry_nospace(|| self.write_once(ino, off, data, false))
    }

    /// Write as [`Fs::write`] does, but straight to the device rather than through the
    /// page cache (as O_DIRECT) when `off` is block-aligned and `data` fills whole blocks
    /// or ends at or past the end of the file; otherwise through the page cache. The range's
    /// cached blocks are dropped, and the data is on the device (not yet flushed) when
    /// this returns: a bulk copy (`lanefs cp`, `mkfs -d`) skips a copy of every byte and
    /// the cache's memory. Durable as a write is: after [`Fs::fsync`] or [`Fs::sync`].
    pub fn write_direct(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        self.retry_nospace(|| self.write_once(ino, off, data, true))
    }

    fn write_once(&self, ino: Ino, off: u64, data: &[u8], direct: bool) -> Result<usize> {
        self.check_rw()?;
        if data.is_empty() {
            return Ok(0);
        }
        let bs = self.vol.bs() as u64;
        let end = off
            .checked_add(data.len() as u64)
            .ok_or(Error::FileTooBig)?;
        if end > MAX_FILE_BLOCKS * bs {
            return Err(Error::FileTooBig);
        }
        debug_assert!(end > off && bs.is_power_of_two());
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        self.load(&i, &mut st)?;
        self.regular_kind(&st)?;
        if end > self.max_bytes(&st.d) {
            return Err(Error::FileTooBig);
        }
        // chattr +i: no writes; +a: only at the end (Linux wants O_APPEND to open it).
        if flags::immutable(&st) || (flags::pinned(&st) && off != st.d.size()) {
            return Err(Error::NotPermitted);
        }
        let h = self.journal.start();
        let _change = i.mapping.change();
        if self.inline_candidate(&st) && self.write_inline(&h, &i, &mut st, off, data)? {
            let t = self.now();
            st.d.set_mtime(t);
            st.d.set_ctime(t);
            self.store(&h, &i, &mut st)?;
            i.mapping.set_size(st.d.size());
            return Ok(data.len());
        }
        self.regular(&st)?;
        let (first, last) = (off / bs, (end - 1) / bs);
        debug_assert!(
            first <= last && last < MAX_FILE_BLOCKS,
            "blocks {first}..={last}"
        );
        let prior = self.map_for_write(&h, &i, &mut st, first, last)?;
        if !i.is_open() {
            // Without an open file there is no close to give a reservation back at.
            self.al.discard_pa(&mut st.pa);
        }
        // Straight to the device: whole blocks, or a last one past the end of the file
        // (its bytes after the data are zeros). The handle held keeps the commit that
        // maps the blocks from completing before they are written.
        if direct && off.is_multiple_of(bs) && (end.is_multiple_of(bs) || end >= st.d.size()) {
            let pblks = self.mapped_blocks(&i, &st, first, last)?;
            self.settle_ordered(&h, &i)?;
            let blk = |lblk: u64| {
                let k = lblk.wrapping_sub(first) as usize;
                pblks.get(k).copied().unwrap_or(0)
            };
            i.mapping.write_direct(&self.pages, off, data, &blk)?;
        } else {
            self.copy_in(&i, &st, off, data, &prior)?;
        }
        if end > st.d.size() {
            st.d.set_size(end);
            // The new size must not commit before the bytes it covers.
            h.add_ordered(i.arc());
        }
        let t = self.now();
        st.d.set_mtime(t);
        st.d.set_ctime(t);
        self.store(&h, &i, &mut st)?;
        i.mapping.set_size(st.d.size());
        Ok(data.len())
    }

    /// Map blocks `first..=last` of `i` for a write and mark them written, the tree
    /// stored before any data or size changes. Returns what each block held before
    /// ([`Prior`]: blocks that hold no data yet, new or unwritten, start from zeros, not
    /// the device). Out of space part way, what this write mapped is given back and the
    /// file is stored as it was (no written blocks past its size): the write fails whole.
    fn map_for_write(
        &self,
        h: &Handle,
        i: &IRef,
        st: &mut InodeState,
        first: u64,
        last: u64,
    ) -> Result<Vec<Prior>> {
        let prior = bmap::prior_blocks(st, first, last);
        debug_assert_eq!(
            prior.len() as u64,
            last + 1 - first,
            "a prior state per block"
        );
        if let Err(e) = bmap::map_blocks(
            &self.al,
            self.rt(),
            h,
            i,
            st,
            first,
            last + 1 - first,
            false,
        ) {
            // Out of space part way: give back what this write mapped, so the file is
            // as it was (no written blocks past its size), and persist that.
            bmap::undo(&self.al, self.rt(), h, st, first, &prior)?;
            self.store(h, i, st)?;
            return Err(e);
        }
        // Only a write over holes or unwritten blocks changes the map: a plain overwrite
        // leaves the extent tree as it is.
        if prior.iter().any(|&p| p != Prior::Written) {
            let ext = st
                .ext
                .as_mut()
                .ok_or_else(|| Error::Unsupported("no extents".into()))?;
            ext.mark_written(first as u32, (last + 1 - first) as u32);
            st.ext_dirty = true;
            // The tree first, before any data or size change: if it needs a block the
            // full disk cannot give, the write fails whole and the map is as it was
            // (the blocks it mapped are freed, unwritten ones are unwritten again).
            if let Err(e) = self.store(h, i, st) {
                if matches!(e, Error::NoSpace) {
                    bmap::undo(&self.al, self.rt(), h, st, first, &prior)?;
                    self.store(h, i, st)?;
                }
                return Err(e);
            }
            // Newly mapped data must reach the device before this transaction commits.
            h.add_ordered(i.arc());
        }
        Ok(prior)
    }

    /// Map blocks 0.. of an empty file and write `bytes` into them through the page cache
    /// (ordered: the data reaches the device before the commit that maps it); the caller
    /// stores the inode. Used where
    /// bytes kept elsewhere become a file's data: an inline file moving to a block, an
    /// attribute value moving to its EA inode.
    pub(super) fn fill_new_blocks(
        &self,
        h: &Handle,
        i: &IRef,
        st: &mut InodeState,
        bytes: &[u8],
    ) -> Result<()> {
        debug_assert!(st.ext.as_ref().is_some_and(ExtentMap::is_empty));
        if bytes.is_empty() {
            return Ok(());
        }
        let n = (bytes.len() as u64).div_ceil(u64::from(self.vol.bs()));
        bmap::map_blocks(&self.al, self.rt(), h, i, st, 0, n, false)?;
        h.add_ordered(i.arc());
        self.copy_in(i, st, 0, bytes, &vec![Prior::Hole; n as usize])?;
        if !i.is_open() {
            self.al.discard_pa(&mut st.pa);
        }
        Ok(())
    }

    /// Copy `data` into the page cache, dirty (blocks already mapped and written); blocks
    /// `prior` says held no data start from zeros instead of the device.
    fn copy_in(
        &self,
        i: &Inode,
        st: &InodeState,
        off: u64,
        data: &[u8],
        prior: &[Prior],
    ) -> Result<()> {
        let bs = self.vol.bs() as u64;
        let (first, last) = (off / bs, (off + data.len() as u64).saturating_sub(1) / bs);
        let pblks = self.mapped_blocks(i, st, first, last)?;
        let blk = |lblk: u64| {
            let k = lblk.wrapping_sub(first) as usize;
            let fresh = prior.get(k).is_some_and(|&p| p != Prior::Written);
            (pblks.get(k).copied().unwrap_or(0), fresh)
        };
        i.mapping.write(&self.pages, off, data, &blk)
    }

    /// The physical blocks of mapped blocks `first..=last`, looked up once each.
    fn mapped_blocks(&self, i: &Inode, st: &InodeState, first: u64, last: u64) -> Result<Vec<u64>> {
        let ext = self.regular(st)?;
        // Block 0 never holds file data (superblock or boot block): a map that says so is
        // corrupt (a damaged bitmap can hand it out).
        let mut pblks = Vec::with_capacity((last + 1 - first) as usize);
        for lblk in first..=last {
            match ext.map(lblk as u32) {
                Mapping::Mapped(p, _, _) if p != 0 => pblks.push(p),
                _ => {
                    return Err(Error::corrupt(
                        "extent map",
                        i.ino,
                        format!("block {lblk} unmapped after allocation"),
                    ))
                }
            }
        }
        Ok(pblks)
    }

    /// Allocate or punch `[off, off+len)`, as fallocate(2) with `mode`: allocate as
    /// unwritten extents (the default, extending the size unless `keep_size`), punch a
    /// hole, or zero a range.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// use lanefs::FallocMode;
    /// let f = fs.create(ROOT_INO, b"pre", 0o644, Owner::default())?;
    /// fs.fallocate(f.ino, FallocMode::default(), 0, 1 << 20)?; // reserve 1 MiB
    /// assert_eq!(fs.getattr(f.ino)?.size, 1 << 20);
    /// let punch = FallocMode { punch_hole: true, keep_size: true, ..FallocMode::default() };
    /// fs.fallocate(f.ino, punch, 0, 512 << 10)?; // give the first half back
    /// assert_eq!(fs.getattr(f.ino)?.blocks, 1024); // 512 KiB in 512-byte sectors
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn fallocate(&self, ino: Ino, mode: FallocMode, off: u64, len: u64) -> Result<()> {
        self.retry_nospace(|| self.fallocate_once(ino, mode, off, len))
    }

    fn fallocate_once(&self, ino: Ino, mode: FallocMode, off: u64, len: u64) -> Result<()> {
        self.check_rw()?;
        if len == 0 {
            return Err(Error::Invalid("fallocate length 0".into()));
        }
        let bs = self.vol.bs() as u64;
        let end = off
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_BLOCKS * bs)
            .ok_or(Error::FileTooBig)?;
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        self.load(&i, &mut st)?;
        self.regular_kind(&st)?;
        // As ext4_fallocate: an inline file moves to a block first.
        let h = self.journal.start();
        let _change = i.mapping.change();
        if inline::is_inline(&st.d) {
            if flags::immutable(&st) {
                return Err(Error::NotPermitted);
            }
            self.uninline(&h, &i, &mut st)?;
            self.store(&h, &i, &mut st)?;
        }
        // As ext4: block-mapped files can punch holes but not preallocate (no unwritten
        // state to record).
        if mode.punch_hole && mode.zero_range {
            return Err(Error::Invalid("punch hole and zero range together".into()));
        }
        if !mode.punch_hole && st.d.flags() & FL_EXTENTS == 0 {
            return Err(Error::NotSupported(
                "fallocate on a file mapped by indirect blocks".into(),
            ));
        }
        if !mode.punch_hole && end > self.max_bytes(&st.d) {
            return Err(Error::FileTooBig);
        }
        // vfs_fallocate: nothing on an immutable file, only allocation on an append-only one.
        if flags::immutable(&st) || (flags::pinned(&st) && (mode.punch_hole || mode.zero_range)) {
            return Err(Error::NotPermitted);
        }
        if mode.punch_hole {
            self.punch(&h, &i, &mut st, off, end)?;
        } else {
            if mode.zero_range {
                // As ext4_zero_range: the partial edges are zeroed in the page cache, the
                // whole blocks between become unwritten (here: freed, then allocated
                // unwritten below).
                self.punch(&h, &i, &mut st, off, end)?;
            }
            let first = off / bs;
            let holes = bmap::holes(&st, first, end.div_ceil(bs));
            let alloc = bmap::map_blocks(
                &self.al,
                self.rt(),
                &h,
                &i,
                &mut st,
                first,
                end.div_ceil(bs) - first,
                true,
            );
            // The tree first: if it needs a block the full disk cannot give, everything
            // this call mapped is freed again and the map is as it was.
            if let Err(e) = self.store(&h, &i, &mut st) {
                if matches!(e, Error::NoSpace) {
                    for &(a, b) in &holes {
                        self.unmap(&h, &i, &mut st, a, b)?;
                    }
                    self.store(&h, &i, &mut st)?;
                }
                return Err(e);
            }
            // As ext4: when allocation stops part way, what was allocated stays
            // (unwritten, reads as zeros) and the size does not change.
            alloc?;
            if !mode.keep_size && end > st.d.size() {
                st.d.set_size(end);
                i.mapping.set_size(end);
            }
        }
        let t = self.now();
        st.d.set_ctime(t);
        if mode.punch_hole || !mode.keep_size {
            st.d.set_mtime(t);
        }
        self.store(&h, &i, &mut st)
    }

    /// Zero `[off, end)` within the file: partial blocks through the page cache, whole
    /// blocks freed. Like ext4, the range is clipped to the end of the last block.
    fn punch(&self, h: &Handle, i: &Inode, st: &mut InodeState, off: u64, end: u64) -> Result<()> {
        let bs = self.vol.bs() as u64;
        let size = st.d.size();
        if off >= size {
            return Ok(());
        }
        let end = end.min(size.div_ceil(bs) * bs);
        let (a, b) = (off.div_ceil(bs), end / bs);
        if a > b {
            return self.zero_partial(i, st, off, end);
        }
        self.zero_partial(i, st, off, a * bs)?;
        self.zero_partial(i, st, b * bs, end)?;
        self.unmap(h, i, st, a, b)
    }

    /// Before cached pages of `i` are dropped unwritten: a transaction still committing
    /// may have mapped their blocks and not yet written them (data=ordered; its commit
    /// writes them after the next transaction opens), so its commit would map blocks
    /// holding another file's old bytes. Written back first, as ext4's
    /// `jbd2_journal_begin_ordered_truncate` does; the transaction of `h` cannot commit
    /// before its handles stop, so its own pages need nothing.
    pub(super) fn settle_ordered(&self, h: &Handle, i: &Inode) -> Result<()> {
        if self.journal.committed_tid() + 1 < h.tid() && i.mapping.has_dirty() {
            self.pages.write_back(&i.mapping)?;
        }
        Ok(())
    }

    /// Drop the pages of `[a, b)` and free its blocks.
    pub(super) fn unmap(
        &self,
        h: &Handle,
        i: &Inode,
        st: &mut InodeState,
        a: u64,
        b: u64,
    ) -> Result<()> {
        if b > a {
            self.settle_ordered(h, i)?;
            i.mapping.drop_range(&self.pages, a, b);
            bmap::unmap_blocks(&self.al, self.rt(), h, st, a, b, false)?;
        }
        Ok(())
    }

    /// Zero bytes `[from, to)` inside one block if that block holds written data.
    fn zero_partial(&self, i: &Inode, st: &InodeState, from: u64, to: u64) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        let bs = self.vol.bs() as u64;
        let lblk = from / bs;
        debug_assert!((to - 1) / bs == lblk, "zero_partial spans blocks");
        let ext = self.regular(st)?;
        let Mapping::Mapped(p, false, _) = ext.map(lblk as u32) else {
            return Ok(());
        };
        let zeros = vec![0u8; (to - from) as usize];
        i.mapping.write(&self.pages, from, &zeros, &|_| (p, false))
    }

    /// Set the size: free blocks past a smaller size, zero the tail of the last block.
    pub(super) fn truncate(
        &self,
        h: &Handle,
        i: &IRef,
        st: &mut InodeState,
        size: u64,
    ) -> Result<()> {
        let bs = self.vol.bs() as u64;
        let old = st.d.size();
        let _change = i.mapping.change();
        if inline::is_inline(&st.d) && self.truncate_inline(h, i, st, size)? {
            if size != old {
                let t = self.now();
                st.d.set_mtime(t);
                st.d.set_ctime(t);
            }
            return Ok(());
        }
        if size < old {
            let keep = size.div_ceil(bs);
            debug_assert!(keep <= old.div_ceil(bs), "shrinking {old} to {size}");
            if !size.is_multiple_of(bs) {
                self.zero_partial(i, st, size, keep * bs)?;
            }
            self.unmap(h, i, st, keep, MAX_FILE_BLOCKS)?;
        }
        st.d.set_size(size);
        i.mapping.set_size(size);
        if size != old {
            let t = self.now();
            st.d.set_mtime(t);
            st.d.set_ctime(t);
        }
        Ok(())
    }

    /// Run `f`; on ENOSPC while frees wait for their commit, commit and try again (as
    /// ext4's `ext4_should_retry_alloc`), so ENOSPC means the space is really gone. Other
    /// threads may free more meanwhile (a realtime allocation that lands on an extent
    /// freed since the last commit must wait for the next one), hence more tries than
    /// ext4's 3; once nothing is pending a commit frees nothing more and the loop ends.
    /// With nothing pending but removed files still open (orphans), it waits up to
    /// [`ORPHAN_WAIT`] once for one of them to be let go: a FUSE frontend holds a removed
    /// file until the kernel's FORGET for it, which comes a moment after the removal
    /// returned (`rm` then a write of the space it freed met ENOSPC 1 time in 200 on a
    /// full 256 MiB file system, fstests generic/371), where the kernel's ext4 frees it
    /// within the unlink.
    pub(super) fn retry_nospace<T>(&self, f: impl Fn() -> Result<T>) -> Result<T> {
        let mut tries = 0;
        let mut waited = false;
        loop {
            match f() {
                Err(Error::NoSpace) if tries < RETRY_NOSPACE && self.pending_frees() => {
                    tries += 1;
                    self.journal.commit_running()?;
                }
                Err(Error::NoSpace) if !waited && self.orphans_open() > 0 => {
                    waited = true;
                    let before = self.orphans_open();
                    let start = std::time::Instant::now();
                    while self.orphans_open() >= before && start.elapsed() < ORPHAN_WAIT {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    if self.orphans_open() >= before {
                        return Err(Error::NoSpace);
                    }
                }
                r => return r,
            }
        }
    }
}
