//! Inline directories (inline_data): entries kept in the inode, in `i_block` after the
//! parent's number and in the `system.data` attribute's value (`disk::inline::Dir`).
//!
//! As ext4 does: a new directory starts inline; an entry that fits neither area grows the
//! attribute to the most the inode body allows (ext4_update_inline_dir), and when even
//! that is full the directory moves to a block with "." and ".." in front
//! (ext4_convert_inline_dir) and goes on as a block directory. Readdir returns entries in
//! the same hash order and with the same cookies as a linear directory, so a listing
//! resumed after the directory moved to a block loses and repeats nothing.

use super::DirCtx;
use crate::disk::dir::{self as dd, RawEntry};
use crate::disk::inline::{self, Dir};
use crate::disk::inode::FL_EXTENTS;
use crate::error::{Error, Result};
use crate::inode::InodeState;
use crate::journal::Handle;
use crate::types::DirEntry;
use crate::volume::Features;

impl DirCtx<'_> {
    /// Whether the directory keeps its entries in the inode.
    pub fn is_inline(&self, st: &InodeState) -> bool {
        inline::is_inline(&st.d)
    }

    /// Look `name` up in an inline directory.
    pub(super) fn inline_lookup(
        &self,
        ino: u64,
        st: &InodeState,
        name: &[u8],
    ) -> Result<Option<(u64, u8)>> {
        let dir = Dir::load(&st.d, ino)?;
        Ok(dir
            .entries(ino)?
            .into_iter()
            .find(|(_, e)| e.name == name)
            .map(|(_, e)| (u64::from(e.ino), e.ft)))
    }

    /// Add `name -> child`; false when neither area nor a grown attribute holds it.
    pub(super) fn inline_add(
        &self,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        child: u64,
        ft: u8,
    ) -> Result<bool> {
        debug_assert!(name.len() <= 255, "a name of {} bytes", name.len());
        let mut dir = Dir::load(&st.d, ino)?;
        for a in 0..2 {
            let area = dir.area_mut(a);
            if area.is_empty() {
                continue;
            }
            let entries = dd::parse_block(area, false, ino)?;
            if dd::insert_entry(area, &entries, name, child as u32, ft) {
                dir.store(&mut st.d, ino)?;
                return Ok(true);
            }
        }
        // Grow the attribute to the most the body allows, if that adds room for a name.
        let old = dir.tail.len();
        let max = inline::max_value(&st.d, ino)?;
        if max <= old || max - old <= dd::rec_len_for(1) {
            return Ok(false);
        }
        let grown = max - old;
        if old == 0 {
            dir.tail = vec![0u8; max];
            dd::put_entry(&mut dir.tail, 0, 0, max, 0, b"");
        } else {
            // The last record of the old value takes the new space.
            let entries = dd::parse_block(&dir.tail, false, ino)?;
            let Some(last) = entries.last() else {
                return Ok(false);
            };
            // Validated records tile the value: the last ends at its end.
            debug_assert_eq!(last.off + last.rec_len, old, "inline value's last record");
            dir.tail.resize(max, 0);
            dd::set_rec_len(&mut dir.tail, last.off, last.rec_len + grown);
        }
        let entries = dd::parse_block(&dir.tail, false, ino)?;
        if !dd::insert_entry(&mut dir.tail, &entries, name, child as u32, ft) {
            return Ok(false);
        }
        dir.store(&mut st.d, ino)?;
        Ok(true)
    }

    /// Remove `name`; the inode it named.
    pub(super) fn inline_remove(&self, ino: u64, st: &mut InodeState, name: &[u8]) -> Result<u64> {
        self.inline_edit(ino, st, name, |area, e, prev| {
            dd::remove_entry(area, e.off, prev)
        })
    }

    /// Point `name` at `child`; the inode it named before.
    pub(super) fn inline_replace(
        &self,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        child: u64,
        ft: u8,
    ) -> Result<u64> {
        self.inline_edit(ino, st, name, |area, e, _| {
            dd::retarget_entry(area, e.off, child as u32, ft)
        })
    }

    /// Apply `f` to the live entry `name` (its area, the entry, the record before it) and
    /// store the directory; the inode the entry named.
    fn inline_edit(
        &self,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        f: impl FnOnce(&mut [u8], &RawEntry, Option<usize>),
    ) -> Result<u64> {
        let mut dir = Dir::load(&st.d, ino)?;
        for a in 0..2 {
            let area = dir.area_mut(a);
            if area.is_empty() {
                continue;
            }
            let mut prev = None;
            for e in dd::parse_block(area, false, ino)? {
                if e.ino != 0 && e.name == name {
                    f(area, &e, prev);
                    dir.store(&mut st.d, ino)?;
                    return Ok(u64::from(e.ino));
                }
                prev = Some(e.off);
            }
        }
        Err(Error::NotFound)
    }

    /// Point ".." at `parent`.
    pub(super) fn inline_set_dotdot(
        &self,
        ino: u64,
        st: &mut InodeState,
        parent: u64,
    ) -> Result<()> {
        let mut dir = Dir::load(&st.d, ino)?;
        dir.parent = parent as u32;
        dir.store(&mut st.d, ino)
    }

    /// The parent's inode number.
    pub(super) fn inline_dotdot(&self, ino: u64, st: &InodeState) -> Result<u64> {
        Ok(u64::from(Dir::load(&st.d, ino)?.parent))
    }

    /// Whether no name but "." and ".." is left.
    pub(super) fn inline_is_empty(&self, ino: u64, st: &InodeState) -> Result<bool> {
        Ok(Dir::load(&st.d, ino)?.entries(ino)?.is_empty())
    }

    /// Entries after cursor `pos` (cookies as a linear directory's: hash keys after
    /// "." at 0 and ".." at 1), at most about `max`.
    pub(super) fn inline_readdir(
        &self,
        ino: u64,
        st: &InodeState,
        pos: u64,
        max: usize,
    ) -> Result<Vec<DirEntry>> {
        let dir = Dir::load(&st.d, ino)?;
        let mut out = Vec::new();
        super::readdir::dots(ino, u64::from(dir.parent), pos, &mut out);
        let version = self.def_version();
        let mut all = super::readdir::Smallest::new(ino, max.saturating_sub(out.len()));
        for (_, e) in dir.entries(ino)? {
            let key = self.readdir_key(&e.name, version);
            if key >= pos.max(3) {
                all.push(key, e)?;
            }
        }
        self.emit_sorted(all.into_vec(), max, &mut out);
        Ok(out)
    }

    /// Make a new directory inline under `parent`, when the image and inode allow it;
    /// false leaves it to a block.
    pub(super) fn inline_init(&self, ino: u64, st: &mut InodeState, parent: u64) -> Result<bool> {
        if !self.vol.has(Features::INLINE_DATA) {
            return Ok(false);
        }
        let mut d = st.d.clone();
        d.set_flags(d.flags() & !FL_EXTENTS);
        d.iblock_mut().fill(0);
        if Dir::empty(parent as u32).store(&mut d, ino).is_err() {
            return Ok(false);
        }
        st.d = d;
        st.ext = None;
        st.ext_dirty = false;
        Ok(true)
    }

    /// Move an inline directory to a block: "." and ".." first, then every entry.
    pub(super) fn uninline(&self, h: &Handle, ino: u64, st: &mut InodeState) -> Result<()> {
        let dir = Dir::load(&st.d, ino)?;
        let entries = dir.entries(ino)?;
        inline::clear(&mut st.d, ino)?;
        crate::inode::init_empty_map(st, self.vol.has(Features::EXTENTS));
        st.d.set_size(0);
        let b = self.append_block(h, ino, st)?;
        let mut d = b.write();
        dd::init_empty_leaf(&mut d, self.csum());
        let end = dd::entries_end(self.bs(), self.csum());
        let dot_ft = if self.vol.has(Features::FILETYPE) {
            2
        } else {
            0
        };
        dd::put_entry(&mut d, 0, ino as u32, 12, dot_ft, b".");
        dd::put_entry(&mut d, 12, dir.parent, end - 12, dot_ft, b"..");
        for (_, e) in &entries {
            let cur = dd::parse_block(&d, self.csum(), ino)?;
            if !dd::insert_entry(&mut d, &cur, &e.name, e.ino, e.ft) {
                return Err(Error::corrupt(
                    "directory",
                    ino,
                    "inline entries do not fit one block",
                ));
            }
        }
        drop(d);
        self.sealed(h, &b, self.leaf_seal(ino, st));
        Ok(())
    }
}
