//! Inline files (inline_data): small files whose bytes live in the inode, as ext4 keeps
//! them. A write that fits stays inline (and a small first write to an empty file goes
//! inline, as ext4_try_to_write_inline_data does); one that does not fit, an fallocate,
//! or a truncate past the inline room moves the bytes to a block first
//! (ext4_convert_inline_data) and carries on as for any file.

use super::Fs;
use crate::disk::inline;
use crate::disk::inode::FL_EXTENTS;
use crate::error::Result;
use crate::extmap::ExtentMap;
use crate::icache::IRef;
use crate::inode::InodeState;
use crate::journal::Handle;
use crate::types::*;
use crate::volume::Features;

impl Fs {
    /// Whether `st` is an inline file, or an empty one a small write may make inline.
    pub(super) fn inline_candidate(&self, st: &InodeState) -> bool {
        if inline::is_inline(&st.d) {
            return true;
        }
        self.vol.has(Features::INLINE_DATA)
            && FileType::from_mode(st.d.mode()) == Some(FileType::Regular)
            && st.d.size() == 0
            && st.ext.as_ref().is_some_and(ExtentMap::is_empty)
            && st.d.file_acl() == 0
            && !super::rt::is_rt_file(&st.d)
    }

    /// Bytes an inline file of `st` may hold.
    fn inline_room(&self, ino: Ino, st: &InodeState) -> Result<u64> {
        Ok((inline::MIN_SIZE + inline::max_value(&st.d, ino)?) as u64)
    }

    /// Write `data` at `off` into an inline file (or make an empty file inline); `false`
    /// when it does not fit, after moving an inline file's bytes to a block.
    pub(super) fn write_inline(
        &self,
        h: &Handle,
        i: &IRef,
        st: &mut InodeState,
        off: u64,
        data: &[u8],
    ) -> Result<bool> {
        let ino = i.ino;
        let end = off + data.len() as u64;
        if end <= self.inline_room(ino, st)? {
            let mut bytes = if inline::is_inline(&st.d) {
                inline::file_data(&st.d, ino)?
            } else {
                Vec::new()
            };
            if bytes.len() < end as usize {
                bytes.resize(end as usize, 0);
            }
            bytes[off as usize..end as usize].copy_from_slice(data);
            // An empty extent-mapped file gives up its (empty) tree root.
            st.d.set_flags(st.d.flags() & !FL_EXTENTS);
            st.ext = None;
            inline::set_file_data(&mut st.d, ino, &bytes)?;
            return Ok(true);
        }
        if inline::is_inline(&st.d) {
            self.uninline(h, i, st)?;
        }
        Ok(false)
    }

    /// Truncate an inline file to `size`; `false` when the size does not fit inline,
    /// after moving the bytes to a block.
    pub(super) fn truncate_inline(
        &self,
        h: &Handle,
        i: &IRef,
        st: &mut InodeState,
        size: u64,
    ) -> Result<bool> {
        if size <= self.inline_room(i.ino, st)? {
            let mut bytes = inline::file_data(&st.d, i.ino)?;
            bytes.resize(size as usize, 0);
            inline::set_file_data(&mut st.d, i.ino, &bytes)?;
            return Ok(true);
        }
        self.uninline(h, i, st)?;
        Ok(false)
    }

    /// Read an inline file at `off`.
    pub(super) fn read_inline(
        &self,
        ino: Ino,
        st: &InodeState,
        off: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        let bytes = inline::file_data(&st.d, ino)?;
        let Some(rest) = usize::try_from(off).ok().and_then(|o| bytes.get(o..)) else {
            return Ok(0);
        };
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }

    /// Move an inline file's bytes to a newly mapped block 0 (extent-mapped when the image
    /// has extents, else block-mapped) and drop its `system.data` attribute.
    pub(super) fn uninline(&self, h: &Handle, i: &IRef, st: &mut InodeState) -> Result<()> {
        let ino = i.ino;
        let bytes = inline::file_data(&st.d, ino)?;
        inline::clear(&mut st.d, ino)?;
        crate::inode::init_empty_map(st, self.vol.has(Features::EXTENTS));
        self.fill_new_blocks(h, i, st, &bytes)
    }
}
