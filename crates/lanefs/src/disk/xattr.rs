//! Extended attributes: the entry table ext4 keeps in the inode body (after
//! `i_extra_isize`) and in one external block, their hashes and the block checksum; and the
//! on-disk form of POSIX ACLs with its conversion to and from the VFS's xattr form.
//!
//! The code, by concern: this file holds names, entries and the entry table, and the
//! in-inode area; `xattr/block.rs` the external block; `xattr/posix_acl.rs` the ACLs.

use super::{le16, le32, put16, put32};
use crate::error::{Error, Result};

mod block;
mod posix_acl;
pub use block::{
    block_csum, decode_block, encode_block, fits_block, refcount, set_refcount, sort_for_block,
    BlockHeader,
};
pub use posix_acl::{
    acl, acl_chmod_masq, acl_create_masq, acl_from_disk, acl_from_vfs, acl_mode, acl_to_disk,
    acl_to_vfs, acl_valid, AclEntry,
};

/// Magic of the in-inode area and of an xattr block.
pub const MAGIC: u32 = 0xEA02_0000;
/// Size of the block header (`ext4_xattr_header`).
pub const BLOCK_HEADER: usize = 32;
/// Size of the in-inode header (the magic alone).
pub const IBODY_HEADER: usize = 4;
/// Size of an entry before its name.
const ENTRY_HEAD: usize = 16;
/// Longest name after its prefix.
pub const NAME_MAX: usize = 255;
/// Largest value the VFS passes (XATTR_SIZE_MAX).
pub const VALUE_MAX: usize = 65536;

/// Name index of `user.` names.
pub const INDEX_USER: u8 = 1;
/// Name index of `system.posix_acl_access` (empty name).
pub const INDEX_ACL_ACCESS: u8 = 2;
/// Name index of `system.posix_acl_default` (empty name).
pub const INDEX_ACL_DEFAULT: u8 = 3;
/// Name index of `trusted.` names.
pub const INDEX_TRUSTED: u8 = 4;
/// Name index of `security.` names.
pub const INDEX_SECURITY: u8 = 6;
/// Name index of other `system.` names (`system.data` of inline data).
pub const INDEX_SYSTEM: u8 = 7;
/// Name index of `system.richacl`.
pub const INDEX_RICHACL: u8 = 8;

/// Full-name prefixes by index; the ACL and richacl indexes name one attribute each.
const PREFIXES: &[(u8, &[u8], bool)] = &[
    (INDEX_ACL_ACCESS, b"system.posix_acl_access", true),
    (INDEX_ACL_DEFAULT, b"system.posix_acl_default", true),
    (INDEX_RICHACL, b"system.richacl", true),
    (INDEX_USER, b"user.", false),
    (INDEX_TRUSTED, b"trusted.", false),
    (INDEX_SECURITY, b"security.", false),
    (INDEX_SYSTEM, b"system.", false),
];

/// One attribute as stored: name index, name after the prefix, value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Name index (`INDEX_*`).
    pub index: u8,
    /// Name bytes after the prefix.
    pub name: Vec<u8>,
    /// Value bytes (empty when the value lives in an EA inode).
    pub value: Vec<u8>,
    /// ea_inode: the value is the data of this inode instead.
    pub ea_inode: Option<EaRef>,
}

/// An attribute value kept in its own inode (the ea_inode feature).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EaRef {
    /// The inode holding the value (`e_value_inum`).
    pub inum: u32,
    /// The value's length (`e_value_size`).
    pub size: u32,
    /// The entry's stored hash (`e_hash`), which covers the value's hash.
    pub hash: u32,
}

impl Entry {
    /// The full name (prefix and name), or `None` for an index no prefix names.
    pub fn full_name(&self) -> Option<Vec<u8>> {
        let &(_, prefix, whole) = PREFIXES.iter().find(|p| p.0 == self.index)?;
        if whole {
            return self.name.is_empty().then(|| prefix.to_vec());
        }
        Some([prefix, &self.name[..]].concat())
    }

    /// Bytes the entry takes in a table (header and padded name).
    pub fn entry_len(&self) -> usize {
        (ENTRY_HEAD + self.name.len() + 3) & !3
    }

    /// Bytes the value takes (padded to 4).
    pub fn value_len(&self) -> usize {
        (self.value.len() + 3) & !3
    }
}

/// Split a full name into (index, name after the prefix). Unknown prefixes are not
/// supported; an empty name after a prefix is invalid, as the VFS has it.
pub fn split_name(full: &[u8]) -> Result<(u8, Vec<u8>)> {
    for &(index, prefix, whole) in PREFIXES {
        if whole {
            if full == prefix {
                return Ok((index, Vec::new()));
            }
            continue;
        }
        if let Some(rest) = full.strip_prefix(prefix) {
            if rest.is_empty() {
                return Err(Error::Invalid(format!(
                    "xattr name {:?} has nothing after its prefix",
                    String::from_utf8_lossy(full)
                )));
            }
            return Ok((index, rest.to_vec()));
        }
    }
    Err(Error::NotSupported(format!(
        "xattr namespace of {:?}",
        String::from_utf8_lossy(full)
    )))
}

/// The hash of one entry (ext4_xattr_hash_entry, unsigned name bytes).
pub fn entry_hash(name: &[u8], value: &[u8]) -> u32 {
    let mut h = 0u32;
    for &c in name {
        h = (h << 5) ^ (h >> 27) ^ u32::from(c);
    }
    for w in value.chunks(4) {
        let mut b = [0u8; 4];
        b[..w.len()].copy_from_slice(w);
        h = (h << 16) ^ (h >> 16) ^ u32::from_le_bytes(b);
    }
    h
}

/// The same with signed name bytes, as kernels before 6.2 computed it on x86.
pub fn entry_hash_signed(name: &[u8], value: &[u8]) -> u32 {
    let mut h = 0u32;
    for &c in name {
        h = (h << 5) ^ (h >> 27) ^ (c as i8 as i32 as u32);
    }
    for w in value.chunks(4) {
        let mut b = [0u8; 4];
        b[..w.len()].copy_from_slice(w);
        h = (h << 16) ^ (h >> 16) ^ u32::from_le_bytes(b);
    }
    h
}

/// Decode the table at `first` of `area`, values at `value_base + e_value_offs`.
pub fn decode(area: &[u8], first: usize, value_base: usize, at: u64) -> Result<Vec<Entry>> {
    let bad = |why: String| Error::corrupt("xattr", at, why);
    // Where the table ends (its 4-byte zero): values live past it, as check_xattrs
    // requires, so no value overlaps the entries (a block of 4,000 entries whose values
    // all span the table would copy a quarter of a gigabyte per read at 64 KiB).
    let mut table_end = first;
    while table_end + 4 <= area.len() && le32(area, table_end) != 0 {
        let name_len = usize::from(area[table_end]);
        table_end += (ENTRY_HEAD + name_len + 3) & !3;
    }
    let mut out = Vec::new();
    let mut off = first;
    loop {
        if off + 4 > area.len() {
            return Err(bad(format!("entry table runs past the end at {off}")));
        }
        if le32(area, off) == 0 {
            return Ok(out);
        }
        if off + ENTRY_HEAD > area.len() {
            return Err(bad(format!("entry at {off} truncated")));
        }
        let name_len = usize::from(area[off]);
        let index = area[off + 1];
        let voff = usize::from(le16(area, off + 2));
        let inum = le32(area, off + 4);
        let vsize = le32(area, off + 8) as usize;
        let name_end = off + ENTRY_HEAD + name_len;
        if inum != 0 {
            if name_end > area.len() {
                return Err(bad(format!("entry at {off} reaches past the area")));
            }
            out.push(Entry {
                index,
                name: area[off + ENTRY_HEAD..name_end].to_vec(),
                value: Vec::new(),
                ea_inode: Some(EaRef {
                    inum,
                    size: vsize as u32,
                    hash: le32(area, off + 12),
                }),
            });
            off += (ENTRY_HEAD + name_len + 3) & !3;
            continue;
        }
        let vstart = value_base + voff;
        if name_end > area.len() || (vsize > 0 && vstart + vsize > area.len()) {
            return Err(bad(format!("entry at {off} reaches past the area")));
        }
        if vsize > 0 && vstart < table_end + 4 {
            return Err(bad(format!(
                "entry at {off}: its value overlaps the entry table"
            )));
        }
        let value = if vsize == 0 {
            Vec::new()
        } else {
            area[vstart..vstart + vsize].to_vec()
        };
        out.push(Entry {
            index,
            name: area[off + ENTRY_HEAD..name_end].to_vec(),
            value,
            ea_inode: None,
        });
        off += (ENTRY_HEAD + name_len + 3) & !3;
    }
}

/// Whether `entries` fit a table of `area` bytes that starts `first` bytes in (room for
/// the entries, the 4-byte end marker and the padded values).
pub fn fits(entries: &[Entry], area: usize, first: usize) -> bool {
    let need: usize = entries
        .iter()
        .map(|e| e.entry_len() + e.value_len())
        .sum::<usize>()
        + 4;
    first + need <= area
}

/// Write `entries` into `area` from `first` (values packed from the end, offsets relative
/// to `value_base`), zeroing the rest. The caller checked `fits`.
fn encode(area: &mut [u8], first: usize, value_base: usize, entries: &[Entry]) {
    debug_assert!(
        fits(entries, area.len(), first),
        "xattrs overflow their area"
    );
    area[first..].fill(0);
    let mut off = first;
    let mut vend = area.len();
    for e in entries {
        let voff = if e.value.is_empty() {
            0
        } else {
            vend -= e.value_len();
            area[vend..vend + e.value.len()].copy_from_slice(&e.value);
            vend - value_base
        };
        // e_name_len is one byte, e_value_offs two: a longer one is cut to another entry.
        assert!(
            e.name.len() <= NAME_MAX,
            "xattr name of {} bytes",
            e.name.len()
        );
        assert!(voff <= 0xFFFF, "xattr value at offset {voff}");
        debug_assert!(
            e.ea_inode.is_none() || e.value.is_empty(),
            "an ea_inode entry with its value in the area"
        );
        area[off] = e.name.len() as u8;
        area[off + 1] = e.index;
        put16(area, off + 2, voff as u16);
        match e.ea_inode {
            Some(r) => {
                put32(area, off + 4, r.inum);
                put32(area, off + 8, r.size);
                put32(area, off + 12, r.hash);
            }
            None => {
                put32(area, off + 4, 0);
                put32(area, off + 8, e.value.len() as u32);
                put32(area, off + 12, entry_hash(&e.name, &e.value));
            }
        }
        area[off + ENTRY_HEAD..off + ENTRY_HEAD + e.name.len()].copy_from_slice(&e.name);
        off += e.entry_len();
    }
    debug_assert!(off + 4 <= vend, "entries overlap values");
}

/// The in-inode area of an inode's raw bytes: `(start, len)`, or `None` when the inode has
/// no room for one (128-byte inodes, or `i_extra_isize` filling the inode).
pub fn ibody_range(inode_size: usize, extra_isize: usize) -> Option<(usize, usize)> {
    let start = 128 + extra_isize;
    (start + IBODY_HEADER + 4 <= inode_size).then(|| (start, inode_size - start))
}

/// Decode the in-inode attributes (`area` from the end of `i_extra_isize` to the end of
/// the inode); no magic means none.
pub fn decode_ibody(area: &[u8], ino: u64) -> Result<Vec<Entry>> {
    if area.len() < IBODY_HEADER || le32(area, 0) != MAGIC {
        return Ok(Vec::new());
    }
    decode(area, IBODY_HEADER, IBODY_HEADER, ino)
}

/// Write the in-inode attributes; an empty list clears the magic and the area.
pub fn encode_ibody(area: &mut [u8], entries: &[Entry]) {
    if entries.is_empty() {
        area.fill(0);
        return;
    }
    debug_assert!(
        area.len() >= IBODY_HEADER + 4,
        "in-inode area of {} bytes",
        area.len()
    );
    put32(area, 0, MAGIC);
    encode(area, IBODY_HEADER, IBODY_HEADER, entries);
}

/// Whether `entries` fit an in-inode area of `len` bytes.
pub fn fits_ibody(entries: &[Entry], len: usize) -> bool {
    fits(entries, len, IBODY_HEADER)
}

/// An entry of `name` and `value` in namespace `index`, stored in place (for tests).
#[cfg(test)]
fn test_entry(index: u8, name: &str, value: &[u8]) -> Entry {
    Entry {
        index,
        name: name.as_bytes().to_vec(),
        value: value.to_vec(),
        ea_inode: None,
    }
}

#[cfg(test)]
mod tests {
    use super::test_entry as e;
    use super::*;

    #[test]
    fn names_split_and_join() {
        assert_eq!(split_name(b"user.x").unwrap(), (INDEX_USER, b"x".to_vec()));
        assert_eq!(
            split_name(b"system.posix_acl_access").unwrap(),
            (INDEX_ACL_ACCESS, vec![])
        );
        assert!(matches!(split_name(b"user."), Err(Error::Invalid(_))));
        assert!(matches!(split_name(b"os2.x"), Err(Error::NotSupported(_))));
        assert_eq!(
            e(INDEX_TRUSTED, "t", b"").full_name().unwrap(),
            b"trusted.t"
        );
        assert_eq!(
            e(INDEX_ACL_DEFAULT, "", b"").full_name().unwrap(),
            b"system.posix_acl_default"
        );
    }

    #[test]
    fn ibody_round_trips_and_fills() {
        let mut area = vec![0u8; 256 - 160];
        let v = vec![e(INDEX_USER, "k", b"v"), e(INDEX_TRUSTED, "long", &[1; 40])];
        assert!(fits_ibody(&v, area.len()));
        encode_ibody(&mut area, &v);
        assert_eq!(decode_ibody(&area, 12).unwrap(), v);
        let big = vec![e(INDEX_USER, "k", &[0; 90])];
        assert!(!fits_ibody(&big, area.len()));
        encode_ibody(&mut area, &[]);
        assert!(decode_ibody(&area, 12).unwrap().is_empty());
    }
}
