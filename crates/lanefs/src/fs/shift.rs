//! Moving a file's data within it: `FALLOC_FL_COLLAPSE_RANGE` ([`Fs::collapse_range`]) and
//! `FALLOC_FL_INSERT_RANGE` ([`Fs::insert_range`]) as ext4 has them (`ext4_collapse_range`
//! and `ext4_insert_range` in fs/ext4/extents.c), with the checks Linux's `vfs_fallocate`
//! makes before them, in its order.
//!
//! A collapse removes `[off, off + len)` and moves the rest of the file down by `len`; an
//! insert moves the file from `off` on up by `len`, leaving a hole there. No data block
//! moves: the extents keep their physical blocks and change their logical starts.
//!
//! How, under the inode's lock:
//! 1. the file's dirty data is written back and its cached folios from `off` on are
//!    dropped (ext4's `filemap_write_and_wait_range` and `truncate_pagecache`): the cache
//!    never holds a block at its old offset, and later reads fetch the moved blocks;
//! 2. one journal handle then carries the whole change, so a crash replays to the old file
//!    or the new one, never a mix (ext4 restarts its handle every few leaves, and a crash
//!    can leave its file half shifted);
//! 3. if the change cuts an extent in two (an insert inside one, a collapse inside one),
//!    the cut is stored first: the same mapping in one record more, so the tree takes any
//!    block it needs while a refusal (ENOSPC) can still be undone by joining the two
//!    records again; the map the change then stores has no more records than that, so its
//!    store takes no block and cannot fail for space after the range's blocks are freed;
//! 4. the range's blocks are freed (collapse), the extents moved, the size and times set,
//!    and the tree and inode stored.
//!
//! Realtime files are shifted too, in whole realtime extents only (EINVAL otherwise, as
//! XFS's `xfs_is_falloc_aligned` requires): a realtime file's mapping is made of whole rt
//! extents whose file offset and device block agree modulo the rt extent size, which a
//! shift by whole rt extents keeps, and a collapse by whole rt extents frees whole ones.

use super::ops::flags;
use super::{Fs, MAX_FILE_BLOCKS};
use crate::bmap;
use crate::disk::inline;
use crate::disk::inode::FL_EXTENTS;
use crate::disk::rtdev::is_rt_file;
use crate::error::{Error, Result};
use crate::icache::IRef;
use crate::inode::InodeState;
use crate::types::{FileType, Ino};
use crate::volume::Features;

/// Which way the data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shift {
    /// `FALLOC_FL_COLLAPSE_RANGE`: the range goes, what follows moves down.
    Collapse,
    /// `FALLOC_FL_INSERT_RANGE`: a hole at the range, what was there on moves up.
    Insert,
}

/// The block no extent may reach: an extent ends at or below 2^32 - 1 (ext4's
/// `EXT_MAX_BLOCKS`).
const EXT_MAX_BLOCKS: u64 = u32::MAX as u64;

impl Fs {
    /// Remove `[off, off + len)` from a regular file and move the rest of it down by
    /// `len` bytes: the size shrinks by `len` (`fallocate(2)`'s `FALLOC_FL_COLLAPSE_RANGE`,
    /// as ext4 does it). The data after the range keeps its blocks; the range's blocks are
    /// freed. One transaction: after a crash the file is as before or as after.
    ///
    /// Errors as Linux gives them on ext4: `off` and `len` not multiples of the block size
    /// (of the realtime extent on a realtime file), `len` 0, or `off + len` at or past the
    /// end of the file: [`Error::Invalid`]; a file mapped by indirect blocks:
    /// [`Error::NotSupported`]; an immutable or append-only file: [`Error::NotPermitted`];
    /// `off + len` past the largest file: [`Error::FileTooBig`]; a directory:
    /// [`Error::IsDir`]; another kind of file: [`Error::Invalid`].
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let f = fs.create(ROOT_INO, b"log", 0o644, Owner::default())?;
    /// for (k, b) in [b'a', b'b', b'c'].into_iter().enumerate() {
    ///     fs.write(f.ino, k as u64 * 4096, &[b; 4096])?;
    /// }
    /// fs.collapse_range(f.ino, 4096, 4096)?; // the b block goes
    /// assert_eq!(fs.getattr(f.ino)?.size, 8192);
    /// let mut buf = [0u8; 1];
    /// fs.read(f.ino, 4096, &mut buf)?;
    /// assert_eq!(buf, [b'c']);
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn collapse_range(&self, ino: Ino, off: u64, len: u64) -> Result<()> {
        self.retry_nospace(|| self.shift_once(ino, Shift::Collapse, off, len))
    }

    /// Move the data of a regular file from `off` on up by `len` bytes, leaving a hole of
    /// `len` bytes at `off`: the size grows by `len` (`fallocate(2)`'s
    /// `FALLOC_FL_INSERT_RANGE`, as ext4 does it). No data block moves or is allocated.
    /// One transaction: after a crash the file is as before or as after.
    ///
    /// Errors as Linux gives them on ext4: `off` and `len` not multiples of the block size
    /// (of the realtime extent on a realtime file), `len` 0, `off` at or past the end of
    /// the file, or blocks mapped past the end that would move beyond the last logical
    /// block: [`Error::Invalid`]; the new size past the largest file:
    /// [`Error::FileTooBig`]; the rest as [`Fs::collapse_range`].
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let f = fs.create(ROOT_INO, b"table", 0o644, Owner::default())?;
    /// fs.write(f.ino, 0, &[b'x'; 8192])?;
    /// fs.insert_range(f.ino, 4096, 4096)?; // a hole between the two blocks
    /// assert_eq!(fs.getattr(f.ino)?.size, 12288);
    /// let mut buf = [9u8; 2];
    /// fs.read(f.ino, 8191, &mut buf)?;
    /// assert_eq!(buf, [0, b'x']);
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn insert_range(&self, ino: Ino, off: u64, len: u64) -> Result<()> {
        self.retry_nospace(|| self.shift_once(ino, Shift::Insert, off, len))
    }

    fn shift_once(&self, ino: Ino, how: Shift, off: u64, len: u64) -> Result<()> {
        self.check_rw()?;
        // vfs_fallocate's checks, in its order.
        if len == 0 {
            return Err(Error::Invalid("fallocate length 0".into()));
        }
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        self.load(&i, &mut st)?;
        // Only allocation on an append-only file, nothing on an immutable one.
        if flags::pinned(&st) {
            return Err(Error::NotPermitted);
        }
        match FileType::from_mode(st.d.mode()) {
            Some(FileType::Regular) => {}
            Some(FileType::Directory) => return Err(Error::IsDir),
            _ => return Err(Error::Invalid("not a regular file".into())),
        }
        let end = off
            .checked_add(len)
            .filter(|&e| e <= self.s_maxbytes())
            .ok_or(Error::FileTooBig)?;
        let _change = i.mapping.change();
        // ext4_fallocate: an inline file moves to a block before the mode's own checks.
        if inline::is_inline(&st.d) {
            let h = self.journal.start();
            self.uninline(&h, &i, &mut st)?;
            self.store(&h, &i, &mut st)?;
        }
        self.shift_checks(&st, how, off, len, end)?;
        let bs = u64::from(self.vol.bs());
        // ext4: filemap_write_and_wait_range, then truncate_pagecache from the range on.
        self.pages.write_back(&i.mapping)?;
        i.mapping.drop_range(&self.pages, off / bs, MAX_FILE_BLOCKS);
        let h = self.journal.start();
        self.shift_split(&h, &i, &mut st, how, off / bs, len / bs)?;
        self.shift_move(&h, &i, &mut st, how, off / bs, len / bs)
    }

    /// ext4's `s_maxbytes`: the largest file of this image's kind of block map.
    fn s_maxbytes(&self) -> u64 {
        let bs = self.vol.bs() as usize;
        if self.vol.has(Features::EXTENTS) {
            crate::disk::extent::max_file_bytes(bs, self.vol.has(Features::HUGE_FILE))
        } else {
            crate::disk::blockmap::max_file_bytes(bs, self.vol.has(Features::HUGE_FILE))
        }
    }

    /// `ext4_collapse_range`'s and `ext4_insert_range`'s checks, in their order, and the
    /// realtime file's alignment.
    fn shift_checks(
        &self,
        st: &InodeState,
        how: Shift,
        off: u64,
        len: u64,
        end: u64,
    ) -> Result<()> {
        // As ext4 (and xfstests expects of a file system without the mode): EOPNOTSUPP.
        let Some(ext) = st.ext.as_ref().filter(|_| st.d.flags() & FL_EXTENTS != 0) else {
            return Err(Error::NotSupported(
                "collapse or insert range on a file mapped by indirect blocks".into(),
            ));
        };
        // Whole clusters, which are blocks here (lanefs writes no bigalloc image).
        let bs = u64::from(self.vol.bs());
        if !(off | len).is_multiple_of(bs) {
            return Err(Error::Invalid(format!(
                "collapse or insert range at {off} of {len} bytes: not whole {bs}-byte blocks"
            )));
        }
        if let Some(rext) = self.rt_extent_blocks(st) {
            if !((off / bs) | (len / bs)).is_multiple_of(rext) {
                return Err(Error::Invalid(format!(
                    "collapse or insert range on a realtime file: not whole {rext}-block rt extents"
                )));
            }
        }
        let size = st.d.size();
        match how {
            // Reaching the end would be a truncate: ext4 refuses it.
            Shift::Collapse if end >= size => Err(Error::Invalid(format!(
                "collapse range ending at {end} reaches the end of the file ({size} bytes)"
            ))),
            Shift::Collapse => Ok(()),
            Shift::Insert if off >= size => Err(Error::Invalid(format!(
                "insert range at {off} is not inside the file ({size} bytes)"
            ))),
            Shift::Insert if len > self.max_bytes(&st.d).saturating_sub(size) => {
                Err(Error::FileTooBig)
            }
            // ext4_ext_shift_extents: blocks mapped past the end (fallocated with
            // KEEP_SIZE) must still fit below the last logical block. ext4 finds this out
            // after it has grown the size ("Expand file to avoid data loss if there is
            // error while shifting": its shift may stop half way) and keeps the growth
            // with the EINVAL; lanefs, shifting in one transaction, changes nothing.
            Shift::Insert if ext.end() + len / bs > EXT_MAX_BLOCKS => Err(Error::Invalid(
                "insert range would move mapped blocks past the last logical block".into(),
            )),
            Shift::Insert => Ok(()),
        }
    }

    /// The rt extent size in blocks of a realtime file (on an image with its device).
    fn rt_extent_blocks(&self, st: &InodeState) -> Option<u64> {
        if !is_rt_file(st.d.mode(), st.d.flags()) {
            return None;
        }
        let rt = self.rt()?;
        Some(u64::from(rt.geometry().rextsize))
    }

    /// Store the extent cut the change needs first, if any (step 3 of the module's list):
    /// a collapse inside one extent leaves its head and its tail, an insert inside one
    /// parts it. On a failed store the cut is joined again and the old tree stored.
    fn shift_split(
        &self,
        h: &crate::journal::Handle,
        i: &IRef,
        st: &mut InodeState,
        how: Shift,
        a: u64,
        n: u64,
    ) -> Result<()> {
        let ext = extents(st)?;
        let inside = ext.find(a as u32).filter(|e| e.lblk < a as u32);
        let cut = match how {
            Shift::Collapse => inside.is_some_and(|e| e.lend() > a + n),
            Shift::Insert => inside.is_some(),
        };
        if !cut {
            return Ok(());
        }
        let before = ext.len();
        assert!(ext.split_at(a as u32), "no extent to cut at block {a}");
        debug_assert_eq!(ext.len(), before + 1);
        st.ext_dirty = true;
        let Err(e) = self.store(h, i, st) else {
            return Ok(());
        };
        // The tree may have taken blocks before it failed: the old map gives them back.
        let ext = extents(st)?;
        ext.join_at(a as u32);
        ext.mark_all_changed();
        debug_assert_eq!(ext.len(), before);
        st.ext_dirty = true;
        self.store(h, i, st)?;
        Err(e)
    }

    /// Free the collapsed range's blocks or open the inserted hole, move the extents after
    /// it, set the size and times, and store (step 4 of the module's list).
    fn shift_move(
        &self,
        h: &crate::journal::Handle,
        i: &IRef,
        st: &mut InodeState,
        how: Shift,
        a: u64,
        n: u64,
    ) -> Result<()> {
        let bs = u64::from(self.vol.bs());
        let size = st.d.size();
        let records = extents(st)?.len();
        // Blocks are below 2^32 - 1 (checked against s_maxbytes and the last extent).
        let (a32, n32) = (a as u32, n as u32);
        match how {
            Shift::Collapse => {
                bmap::unmap_blocks(&self.al, self.rt(), h, st, a, a + n, false)?;
                extents(st)?.shift_down(a32 + n32, n32);
                st.d.set_size(size - n * bs);
            }
            Shift::Insert => {
                // Preallocations name logical blocks that are moving.
                self.al.discard_pa(&mut st.pa);
                extents(st)?.shift_up(a32, n32);
                st.d.set_size(size + n * bs);
            }
        }
        // No more records than the tree already holds blocks for (`shift_split`).
        debug_assert!(extents(st)?.len() <= records);
        st.ext_dirty = true;
        let t = self.now();
        st.d.set_mtime(t);
        st.d.set_ctime(t);
        let r = self.store(h, i, st);
        debug_assert!(
            !matches!(r, Err(Error::NoSpace)),
            "inode {}: a shift's store needed a block",
            i.ino
        );
        r?;
        i.mapping.set_size(st.d.size());
        Ok(())
    }
}

fn extents(st: &mut InodeState) -> Result<&mut crate::extmap::ExtentMap> {
    st.ext
        .as_mut()
        .ok_or_else(|| Error::Unsupported("file without extents".into()))
}
