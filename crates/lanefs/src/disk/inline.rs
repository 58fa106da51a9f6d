//! Inline data (the inline_data feature): a small file's bytes, or a small directory's
//! entries, kept in the inode instead of in blocks.
//!
//! The first 60 bytes live in `i_block`; the rest is the value of the `system.data`
//! extended attribute in the inode body, which exists (possibly empty) on every inline
//! inode. A file's size says how many of those bytes are data. A directory's `i_block`
//! starts with the parent's inode number (4 bytes) followed by 56 bytes of entries; the
//! attribute's value, when not empty, is a second area of entries. Entries never span the
//! two areas, each area's record lengths fill it exactly, and there are no "." and ".."
//! entries. A directory's size is 60 plus the value's length.

use super::inode::{DiskInode, FL_INLINE_DATA, IBLOCK_SIZE};
use super::xattr::{self as dx, Entry};
use super::{le32, put32};
use crate::error::{Error, Result};

/// Bytes of inline data `i_block` holds.
pub const MIN_SIZE: usize = IBLOCK_SIZE;
/// The attribute's name after the `system.` prefix.
pub const XATTR_NAME: &[u8] = b"data";
/// A directory's parent inode number at the start of `i_block`.
pub const DIR_PARENT_SIZE: usize = 4;

/// `EXT4_XATTR_LEN`: an entry's header and padded name.
fn xattr_len(name_len: usize) -> usize {
    debug_assert!(name_len <= dx::NAME_MAX, "name of {name_len} bytes");
    (name_len + 3 + 16) & !3
}

/// `EXT4_XATTR_SIZE`: a value padded to 4.
fn xattr_size(n: usize) -> usize {
    (n + 3) & !3
}

/// Whether the inode keeps its data inline.
pub fn is_inline(d: &DiskInode) -> bool {
    d.flags() & FL_INLINE_DATA != 0
}

/// The in-inode attribute area of `d`, if it has one.
fn ibody(d: &DiskInode) -> Option<(usize, usize)> {
    dx::ibody_range(d.raw.len(), usize::from(d.extra_isize()))
}

/// The in-inode attributes of `d`.
fn ibody_entries(d: &DiskInode, ino: u64) -> Result<Vec<Entry>> {
    match ibody(d) {
        Some((start, _)) => dx::decode_ibody(&d.raw[start..], ino),
        None => Ok(Vec::new()),
    }
}

/// The `system.data` value of an inline inode (empty when absent).
pub fn value(d: &DiskInode, ino: u64) -> Result<Vec<u8>> {
    Ok(ibody_entries(d, ino)?
        .into_iter()
        .find(|e| e.index == dx::INDEX_SYSTEM && e.name == XATTR_NAME)
        .map(|e| e.value)
        .unwrap_or_default())
}

/// The largest `system.data` value the inode body can hold, given its other attributes
/// (the kernel's get_max_inline_xattr_value_size, on lanefs's packing of the body).
pub fn max_value(d: &DiskInode, ino: u64) -> Result<usize> {
    let Some((_, len)) = ibody(d) else {
        return Ok(0);
    };
    debug_assert!(len >= dx::IBODY_HEADER + 4, "in-inode area of {len} bytes");
    let area = len - dx::IBODY_HEADER;
    let entries = ibody_entries(d, ino)?;
    if entries.is_empty() {
        return Ok(xattr_size(
            area.saturating_sub(xattr_len(XATTR_NAME.len()) + 3 + 4),
        ));
    }
    let table: usize = entries.iter().map(Entry::entry_len).sum();
    let values: usize = entries.iter().map(Entry::value_len).sum();
    let mut free = area.saturating_sub(values + table + 4);
    match entries
        .iter()
        .find(|e| e.index == dx::INDEX_SYSTEM && e.name == XATTR_NAME)
    {
        Some(e) => free += xattr_size(e.value.len()),
        None => {
            free = free.saturating_sub(xattr_len(XATTR_NAME.len()));
            free = if free > 3 { xattr_size(free - 3) } else { 0 };
        }
    }
    Ok(free)
}

/// Set the `system.data` value (`None` removes the attribute), keeping the body's other
/// attributes. Fails with `NoSpace` when it does not fit.
pub fn set_value(d: &mut DiskInode, ino: u64, v: Option<&[u8]>) -> Result<()> {
    let Some((start, len)) = ibody(d) else {
        return match v {
            None => Ok(()),
            Some(_) => Err(Error::NoSpace),
        };
    };
    let mut entries = ibody_entries(d, ino)?;
    let at = entries
        .iter()
        .position(|e| e.index == dx::INDEX_SYSTEM && e.name == XATTR_NAME);
    match (at, v) {
        (Some(i), Some(v)) => entries[i].value = v.to_vec(),
        (None, Some(v)) => entries.insert(
            0,
            Entry {
                index: dx::INDEX_SYSTEM,
                name: XATTR_NAME.to_vec(),
                value: v.to_vec(),
                ea_inode: None,
            },
        ),
        (Some(i), None) => {
            entries.remove(i);
        }
        (None, None) => return Ok(()),
    }
    if !dx::fits_ibody(&entries, len) {
        return Err(Error::NoSpace);
    }
    debug_assert_eq!(
        start + len,
        d.raw.len(),
        "in-inode area ends before the inode"
    );
    dx::encode_ibody(&mut d.raw[start..start + len], &entries);
    Ok(())
}

/// A file's inline bytes: `i_block`, then the attribute's value, cut at its size.
pub fn file_data(d: &DiskInode, ino: u64) -> Result<Vec<u8>> {
    let size = d.size();
    let v = value(d, ino)?;
    if size > (MIN_SIZE + v.len()) as u64 {
        return Err(Error::corrupt(
            "inode",
            ino,
            format!(
                "inline file size {size} exceeds its {} inline bytes",
                MIN_SIZE + v.len()
            ),
        ));
    }
    let mut out = d.iblock().to_vec();
    out.extend_from_slice(&v);
    out.truncate(size as usize);
    Ok(out)
}

/// Store `data` as the inode's inline bytes and size, and mark it inline.
pub fn set_file_data(d: &mut DiskInode, ino: u64, data: &[u8]) -> Result<()> {
    let head = data.len().min(MIN_SIZE);
    let tail = &data[head..];
    set_value(d, ino, Some(tail))?;
    debug_assert!(
        head == data.len() || head == MIN_SIZE,
        "inline head of {head} bytes"
    );
    let ib = d.iblock_mut();
    ib.fill(0);
    ib[..head].copy_from_slice(&data[..head]);
    d.set_flags(d.flags() | FL_INLINE_DATA);
    d.set_size(data.len() as u64);
    Ok(())
}

/// An inline directory's two areas of entries and its parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dir {
    /// The parent directory's inode number ("..").
    pub parent: u32,
    /// Entries in `i_block` after the parent (56 bytes).
    pub head: Vec<u8>,
    /// Entries in the attribute's value (may be empty).
    pub tail: Vec<u8>,
}

impl Dir {
    /// Read an inline directory's areas.
    pub fn load(d: &DiskInode, ino: u64) -> Result<Dir> {
        let ib = d.iblock();
        let tail = value(d, ino)?;
        if d.size() != (MIN_SIZE + tail.len()) as u64 {
            return Err(Error::corrupt(
                "inode",
                ino,
                format!(
                    "inline directory size {} is not 60 + {}",
                    d.size(),
                    tail.len()
                ),
            ));
        }
        Ok(Dir {
            parent: le32(ib, 0),
            head: ib[DIR_PARENT_SIZE..].to_vec(),
            tail,
        })
    }

    /// A new empty directory under `parent`: one empty entry spanning `i_block`.
    pub fn empty(parent: u32) -> Dir {
        debug_assert!(parent != 0, "inline directory with parent 0");
        let mut head = vec![0u8; MIN_SIZE - DIR_PARENT_SIZE];
        super::dir::put_entry(&mut head, 0, 0, MIN_SIZE - DIR_PARENT_SIZE, 0, b"");
        Dir {
            parent,
            head,
            tail: Vec::new(),
        }
    }

    /// Write the areas back (the caller made each area's records fill it) and set the
    /// size and the inline flag.
    pub fn store(&self, d: &mut DiskInode, ino: u64) -> Result<()> {
        debug_assert_eq!(self.head.len(), MIN_SIZE - DIR_PARENT_SIZE);
        set_value(d, ino, Some(&self.tail))?;
        let ib = d.iblock_mut();
        put32(ib, 0, self.parent);
        ib[DIR_PARENT_SIZE..].copy_from_slice(&self.head);
        d.set_flags(d.flags() | FL_INLINE_DATA);
        d.set_size((MIN_SIZE + self.tail.len()) as u64);
        Ok(())
    }

    /// The live entries of both areas: (area 0 or 1, entry).
    pub fn entries(&self, ino: u64) -> Result<Vec<(usize, super::dir::RawEntry)>> {
        let mut out = Vec::new();
        for (a, area) in [&self.head, &self.tail].into_iter().enumerate() {
            if area.is_empty() {
                continue;
            }
            for e in super::dir::parse_block(area, false, ino)? {
                if e.ino != 0 {
                    out.push((a, e));
                }
            }
        }
        Ok(out)
    }

    /// The area `a` (0: `i_block`, 1: the attribute's value).
    pub fn area_mut(&mut self, a: usize) -> &mut Vec<u8> {
        debug_assert!(a < 2, "inline directory area {a}");
        if a == 0 {
            &mut self.head
        } else {
            &mut self.tail
        }
    }
}

/// Clear the inline flag and drop the `system.data` attribute (after the data moved to
/// blocks); `i_block` is left for the caller to fill with a map.
pub fn clear(d: &mut DiskInode, ino: u64) -> Result<()> {
    set_value(d, ino, None)?;
    d.set_flags(d.flags() & !FL_INLINE_DATA);
    d.iblock_mut().fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_round_trip_and_limits() {
        let mut d = DiskInode::new(256);
        // 256-byte inode, extra_isize 32: 96 bytes of body, 68 for the value (as mke2fs).
        assert_eq!(max_value(&d, 12).unwrap(), 68);
        let data: Vec<u8> = (0..100u8).collect();
        set_file_data(&mut d, 12, &data).unwrap();
        assert!(is_inline(&d));
        assert_eq!(file_data(&d, 12).unwrap(), data);
        assert_eq!(max_value(&d, 12).unwrap(), 68);
        set_file_data(&mut d, 12, &data[..5]).unwrap();
        assert_eq!(file_data(&d, 12).unwrap(), &data[..5]);
        assert_eq!(value(&d, 12).unwrap(), Vec::<u8>::new());
        assert!(set_file_data(&mut d, 12, &[7u8; 200]).is_err());
        clear(&mut d, 12).unwrap();
        assert!(!is_inline(&d));
        assert_eq!(max_value(&DiskInode::new(128), 1).unwrap(), 0);
    }

    #[test]
    fn dir_round_trip() {
        let mut d = DiskInode::new(256);
        let dir = Dir::empty(2);
        dir.store(&mut d, 20).unwrap();
        assert_eq!(d.size(), 60);
        let got = Dir::load(&d, 20).unwrap();
        assert_eq!(got, dir);
        assert!(got.entries(20).unwrap().is_empty());
    }
}
