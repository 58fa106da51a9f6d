//! Extended attributes: the entry table ext4 keeps in the inode body (after
//! `i_extra_isize`) and in one external block, their hashes and the block checksum; and the
//! on-disk form of POSIX ACLs with its conversion to and from the VFS's xattr form.

use super::{crc32c_raw, le16, le32, put16, put32};
use crate::error::{Error, Result};

/// Magic of the in-inode area and of an xattr block.
pub const MAGIC: u32 = 0xEA02_0000;
/// Size of the block header (`ext4_xattr_header`).
pub const BLOCK_HEADER: usize = 32;
/// Size of the in-inode header (the magic alone).
pub const IBODY_HEADER: usize = 4;
/// Size of an entry before its name.
const ENTRY_HEAD: usize = 16;
/// Offset of `h_refcount` in a block.
const H_REFCOUNT: usize = 4;
/// Offset of `h_blocks` in a block.
const H_BLOCKS: usize = 8;
/// Offset of `h_hash` in a block.
const H_HASH: usize = 12;
/// Offset of `h_checksum` in a block.
const H_CHECKSUM: usize = 16;
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

/// A decoded xattr block header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    /// Inodes sharing the block.
    pub refcount: u32,
}

/// Decode and check an xattr block (magic, one block, entries); checksum verified when
/// `csum_seed` is given.
pub fn decode_block(
    b: &[u8],
    blk: u64,
    csum_seed: Option<u32>,
) -> Result<(BlockHeader, Vec<Entry>)> {
    if le32(b, 0) != MAGIC || le32(b, H_BLOCKS) != 1 {
        return Err(Error::corrupt(
            "xattr block",
            blk,
            format!("magic {:#010x}, h_blocks {}", le32(b, 0), le32(b, H_BLOCKS)),
        ));
    }
    if let Some(seed) = csum_seed {
        let (stored, want) = (le32(b, H_CHECKSUM), block_csum(seed, blk, b));
        if stored != want {
            return Err(Error::corrupt(
                "xattr block",
                blk,
                format!("checksum {stored:#010x}, computed {want:#010x}"),
            ));
        }
    }
    let refcount = le32(b, H_REFCOUNT);
    if refcount == 0 {
        return Err(Error::corrupt("xattr block", blk, "refcount 0"));
    }
    debug_assert!(
        b.len() >= 1024,
        "xattr block {blk} read as {} bytes",
        b.len()
    );
    let entries = decode(b, BLOCK_HEADER, 0, blk)?;
    Ok((BlockHeader { refcount }, entries))
}

/// Entries in the order ext4 keeps them in a block: by index, name length, name.
pub fn sort_for_block(entries: &mut [Entry]) {
    entries.sort_by(|a, b| (a.index, a.name.len(), &a.name).cmp(&(b.index, b.name.len(), &b.name)));
}

/// Whether `entries` fit one block of `bs` bytes.
pub fn fits_block(entries: &[Entry], bs: usize) -> bool {
    fits(entries, bs, BLOCK_HEADER)
}

/// Write a whole xattr block: header (refcount, one block, hash), sorted entries, values,
/// and the checksum when `csum_seed` is given.
pub fn encode_block(
    b: &mut [u8],
    blk: u64,
    refcount: u32,
    entries: &[Entry],
    csum_seed: Option<u32>,
) {
    debug_assert!(refcount >= 1, "xattr block {blk} written with refcount 0");
    debug_assert!(
        entries
            .windows(2)
            .all(|w| (w[0].index, w[0].name.len(), &w[0].name)
                < (w[1].index, w[1].name.len(), &w[1].name)),
        "xattr block {blk}: entries out of order or repeated"
    );
    debug_assert!(b.len() >= 1024, "xattr block {blk} of {} bytes", b.len());
    b.fill(0);
    put32(b, 0, MAGIC);
    put32(b, H_REFCOUNT, refcount);
    put32(b, H_BLOCKS, 1);
    encode(b, BLOCK_HEADER, 0, entries);
    put32(b, H_HASH, block_hash(entries));
    if let Some(seed) = csum_seed {
        let c = block_csum(seed, blk, b);
        put32(b, H_CHECKSUM, c);
    }
}

/// Change only the refcount of an encoded block (and its checksum).
pub fn set_refcount(b: &mut [u8], blk: u64, refcount: u32, csum_seed: Option<u32>) {
    debug_assert!(
        refcount >= 1,
        "xattr block {blk}: refcount 0 (free it instead)"
    );
    put32(b, H_REFCOUNT, refcount);
    if let Some(seed) = csum_seed {
        let c = block_csum(seed, blk, b);
        put32(b, H_CHECKSUM, c);
    }
}

/// The refcount of an encoded block.
pub fn refcount(b: &[u8]) -> u32 {
    le32(b, H_REFCOUNT)
}

/// The block hash over its entries' hashes (ext4_xattr_rehash).
fn block_hash(entries: &[Entry]) -> u32 {
    let mut h = 0u32;
    for e in entries {
        let eh = e
            .ea_inode
            .map_or_else(|| entry_hash(&e.name, &e.value), |r| r.hash);
        if eh == 0 {
            return 0;
        }
        h = (h << 16) ^ (h >> 16) ^ eh;
    }
    h
}

/// The block checksum: crc32c of the file system seed, the 64-bit block number, and the
/// block with `h_checksum` taken as zero.
pub fn block_csum(seed: u32, blk: u64, b: &[u8]) -> u32 {
    debug_assert!(
        b.len() >= BLOCK_HEADER,
        "xattr block {blk} of {} bytes",
        b.len()
    );
    let c = crc32c_raw(seed, &blk.to_le_bytes());
    let c = crc32c_raw(c, &b[..H_CHECKSUM]);
    let c = crc32c_raw(c, &[0; 4]);
    crc32c_raw(c, &b[H_CHECKSUM + 4..])
}

/// POSIX ACL entry tags.
pub mod acl {
    /// The owner.
    pub const USER_OBJ: u16 = 0x01;
    /// A named user.
    pub const USER: u16 = 0x02;
    /// The owning group.
    pub const GROUP_OBJ: u16 = 0x04;
    /// A named group.
    pub const GROUP: u16 = 0x08;
    /// The mask.
    pub const MASK: u16 = 0x10;
    /// Everyone else.
    pub const OTHER: u16 = 0x20;
}

/// One ACL entry: tag, permission bits (rwx), id (named entries only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    /// `acl::*` tag.
    pub tag: u16,
    /// rwx bits.
    pub perm: u16,
    /// User or group id of a named entry (0 otherwise).
    pub id: u32,
}

/// Version of the VFS's xattr form (`posix_acl_xattr_header`).
const VFS_ACL_VERSION: u32 = 2;
/// Version of ext4's on-disk form (`ext4_acl_header`).
const EXT4_ACL_VERSION: u32 = 1;

/// Check an ACL as posix_acl_valid does: one owner, owning group and other; named
/// entries in increasing id order; a mask whenever there are named entries; tags in order.
pub fn acl_valid(acl: &[AclEntry]) -> Result<()> {
    let bad = |why: &str| Err(Error::Invalid(format!("POSIX ACL: {why}")));
    let mut state = acl::USER_OBJ;
    let mut last_id: Option<u32> = None;
    let mut needs_mask = false;
    let mut has_mask = false;
    for e in acl {
        if e.perm & !0o7 != 0 {
            return bad("permission bits beyond rwx");
        }
        match e.tag {
            acl::USER_OBJ if state == acl::USER_OBJ => state = acl::USER,
            acl::USER if state == acl::USER => {
                if last_id.is_some_and(|l| e.id <= l) {
                    return bad("named users out of order");
                }
                last_id = Some(e.id);
                needs_mask = true;
            }
            acl::GROUP_OBJ if state == acl::USER => {
                state = acl::GROUP;
                last_id = None;
            }
            acl::GROUP if state == acl::GROUP => {
                if last_id.is_some_and(|l| e.id <= l) {
                    return bad("named groups out of order");
                }
                last_id = Some(e.id);
                needs_mask = true;
            }
            acl::MASK if state == acl::GROUP => {
                state = acl::OTHER;
                has_mask = true;
            }
            acl::OTHER if state == acl::OTHER || (state == acl::GROUP && !needs_mask) => {
                state = 0;
            }
            _ => return bad("entries missing, repeated or out of order"),
        }
    }
    if state != 0 {
        return bad("no entry for others");
    }
    if needs_mask && !has_mask {
        return bad("named entries without a mask");
    }
    Ok(())
}

/// Decode the VFS form (what getxattr/setxattr carry).
pub fn acl_from_vfs(v: &[u8]) -> Result<Vec<AclEntry>> {
    if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) || le32(v, 0) != VFS_ACL_VERSION {
        return Err(Error::Invalid("POSIX ACL: bad header or length".into()));
    }
    let acl: Vec<AclEntry> = v[4..]
        .chunks_exact(8)
        .map(|c| {
            let tag = le16(c, 0);
            let named = tag == acl::USER || tag == acl::GROUP;
            AclEntry {
                tag,
                perm: le16(c, 2),
                id: if named { le32(c, 4) } else { 0 },
            }
        })
        .collect();
    acl_valid(&acl)?;
    Ok(acl)
}

/// Encode the VFS form (unnamed entries carry id -1, as the kernel returns them).
pub fn acl_to_vfs(acl: &[AclEntry]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + 8 * acl.len());
    v.extend_from_slice(&VFS_ACL_VERSION.to_le_bytes());
    for e in acl {
        let named = e.tag == acl::USER || e.tag == acl::GROUP;
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        v.extend_from_slice(&(if named { e.id } else { u32::MAX }).to_le_bytes());
    }
    v
}

/// Decode ext4's on-disk form: short entries (tag, perm) for the unnamed tags, long ones
/// (tag, perm, id) for named users and groups.
pub fn acl_from_disk(v: &[u8], at: u64) -> Result<Vec<AclEntry>> {
    let bad = |why: &str| Error::corrupt("POSIX ACL", at, why.to_string());
    if v.len() < 4 || le32(v, 0) != EXT4_ACL_VERSION {
        return Err(bad("bad header"));
    }
    let mut out = Vec::new();
    let mut off = 4;
    while off < v.len() {
        if off + 4 > v.len() {
            return Err(bad("truncated entry"));
        }
        let (tag, perm) = (le16(v, off), le16(v, off + 2));
        let id = if tag == acl::USER || tag == acl::GROUP {
            if off + 8 > v.len() {
                return Err(bad("truncated named entry"));
            }
            let id = le32(v, off + 4);
            off += 8;
            id
        } else {
            off += 4;
            0
        };
        out.push(AclEntry { tag, perm, id });
    }
    Ok(out)
}

/// Encode ext4's on-disk form.
pub fn acl_to_disk(acl: &[AclEntry]) -> Vec<u8> {
    let mut v = EXT4_ACL_VERSION.to_le_bytes().to_vec();
    for e in acl {
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        if e.tag == acl::USER || e.tag == acl::GROUP {
            v.extend_from_slice(&e.id.to_le_bytes());
        }
    }
    v
}

/// The permission bits an access ACL gives the mode (owner, mask or group, other), and
/// whether the mode says all the ACL says (posix_acl_equiv_mode: no named entries and no
/// mask; an ACL with a mask is kept as an attribute even when it names no one, as ext4
/// keeps it).
pub fn acl_mode(acl: &[AclEntry]) -> (u16, bool) {
    let (mut mode, mut equiv) = (0u16, true);
    for e in acl {
        match e.tag {
            acl::USER_OBJ => mode |= (e.perm & 7) << 6,
            acl::GROUP_OBJ => mode |= (e.perm & 7) << 3,
            acl::MASK => {
                mode = (mode & !0o070) | ((e.perm & 7) << 3);
                equiv = false;
            }
            acl::OTHER => mode |= e.perm & 7,
            _ => equiv = false,
        }
    }
    (mode, equiv)
}

/// A directory's default ACL turned into a new inode's access ACL, and the new inode's
/// permission bits (posix_acl_create_masq): each of owner, mask (or owning group without
/// one) and other keeps only what both the ACL and the requested `mode` grant. Returns
/// the ACL, the new mode (type and special bits kept), and whether the ACL says more than
/// the mode (named entries or a mask), which is when it is stored.
pub fn acl_create_masq(default: &[AclEntry], mode: u16) -> (Vec<AclEntry>, u16, bool) {
    let mut acl = default.to_vec();
    let mut m = mode & 0o777;
    let mut not_equiv = false;
    let (mut group_obj, mut mask) = (None, None);
    for (i, e) in acl.iter_mut().enumerate() {
        match e.tag {
            acl::USER_OBJ => {
                e.perm &= (m >> 6) & 7;
                m &= (e.perm << 6) | !0o700;
            }
            acl::USER | acl::GROUP => not_equiv = true,
            acl::GROUP_OBJ => group_obj = Some(i),
            acl::OTHER => {
                e.perm &= m & 7;
                m &= e.perm | !0o007;
            }
            acl::MASK => {
                mask = Some(i);
                not_equiv = true;
            }
            _ => {}
        }
    }
    if let Some(g) = mask.or(group_obj) {
        let e = &mut acl[g];
        e.perm &= (m >> 3) & 7;
        m &= (e.perm << 3) | !0o070;
    }
    debug_assert_eq!(m & !0o777, 0);
    (acl, (mode & !0o777) | m, not_equiv)
}

/// An access ACL brought in line with a new `mode` (posix_acl_chmod_masq): owner and
/// other take the mode's bits, and the mask (or the owning group without one) the group
/// bits; named entries keep theirs.
pub fn acl_chmod_masq(access: &[AclEntry], mode: u16) -> Vec<AclEntry> {
    let mut acl = access.to_vec();
    let has_mask = acl.iter().any(|e| e.tag == acl::MASK);
    for e in acl.iter_mut() {
        match e.tag {
            acl::USER_OBJ => e.perm = (mode >> 6) & 7,
            acl::OTHER => e.perm = mode & 7,
            acl::MASK => e.perm = (mode >> 3) & 7,
            acl::GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 7,
            _ => {}
        }
    }
    acl
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    #[test]
    fn acl_create_masq_as_the_kernel() {
        use acl::*;
        // Three entries: the mode is the default ACL masked by the requested mode, and
        // nothing needs storing.
        let d = [ent(USER_OBJ, 7, 0), ent(GROUP_OBJ, 5, 0), ent(OTHER, 0, 0)];
        let (a, m, store) = acl_create_masq(&d, 0o100666);
        assert_eq!(m, 0o100640);
        assert!(!store);
        assert_eq!(acl_mode(&a).0, 0o640);
        // A named user and a mask: the mask, not the owning group, takes the group bits.
        let d = [
            ent(USER_OBJ, 7, 0),
            ent(USER, 7, 1000),
            ent(GROUP_OBJ, 7, 0),
            ent(MASK, 7, 0),
            ent(OTHER, 5, 0),
        ];
        let (a, m, store) = acl_create_masq(&d, 0o40750);
        assert_eq!(m, 0o40750);
        assert!(store);
        assert_eq!(a[3], ent(MASK, 5, 0));
        assert_eq!(a[2], ent(GROUP_OBJ, 7, 0));
        assert_eq!(a[4], ent(OTHER, 0, 0));
    }

    #[test]
    fn acl_chmod_masq_as_the_kernel() {
        use acl::*;
        let a = [
            ent(USER_OBJ, 7, 0),
            ent(GROUP, 6, 50),
            ent(GROUP_OBJ, 5, 0),
            ent(MASK, 7, 0),
            ent(OTHER, 4, 0),
        ];
        let b = acl_chmod_masq(&a, 0o4710);
        assert_eq!(
            b,
            [
                ent(USER_OBJ, 7, 0),
                ent(GROUP, 6, 50),
                ent(GROUP_OBJ, 5, 0),
                ent(MASK, 1, 0),
                ent(OTHER, 0, 0),
            ]
        );
        assert_eq!(acl_mode(&b).0, 0o710);
    }

    fn e(index: u8, name: &str, value: &[u8]) -> Entry {
        Entry {
            index,
            name: name.as_bytes().to_vec(),
            value: value.to_vec(),
            ea_inode: None,
        }
    }

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
    fn block_round_trips_with_checksum() {
        let mut v = vec![
            e(INDEX_USER, "bb", &[7; 300]),
            e(INDEX_USER, "a", b"x"),
            e(INDEX_SECURITY, "selinux", b"ctx\0"),
        ];
        sort_for_block(&mut v);
        let mut b = vec![0u8; 4096];
        encode_block(&mut b, 1234, 2, &v, Some(99));
        let (h, got) = decode_block(&b, 1234, Some(99)).unwrap();
        assert_eq!((h.refcount, got), (2, v));
        assert!(
            decode_block(&b, 1235, Some(99)).is_err(),
            "block number is under the checksum"
        );
        set_refcount(&mut b, 1234, 1, Some(99));
        assert_eq!(decode_block(&b, 1234, Some(99)).unwrap().0.refcount, 1);
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

    #[test]
    fn acls_convert_and_validate() {
        use acl::*;
        let a = [
            AclEntry {
                tag: USER_OBJ,
                perm: 6,
                id: 0,
            },
            AclEntry {
                tag: USER,
                perm: 4,
                id: 1000,
            },
            AclEntry {
                tag: GROUP_OBJ,
                perm: 4,
                id: 0,
            },
            AclEntry {
                tag: MASK,
                perm: 4,
                id: 0,
            },
            AclEntry {
                tag: OTHER,
                perm: 0,
                id: 0,
            },
        ];
        acl_valid(&a).unwrap();
        assert_eq!(acl_from_vfs(&acl_to_vfs(&a)).unwrap(), a);
        assert_eq!(acl_from_disk(&acl_to_disk(&a), 0).unwrap(), a);
        assert_eq!(acl_to_disk(&a).len(), 4 + 4 * 4 + 8);
        assert_eq!(acl_mode(&a), (0o640, false));
        assert!(acl_valid(&a[1..]).is_err(), "no owner entry");
        assert!(
            acl_valid(&[a[0], a[1], a[2], a[4]]).is_err(),
            "named without mask"
        );
        let minimal = [a[0], a[2], a[4]];
        acl_valid(&minimal).unwrap();
        assert_eq!(acl_mode(&minimal), (0o640, true));
        // A mask alone makes the ACL more than the mode (posix_acl_equiv_mode).
        let masked = [a[0], a[2], a[3], a[4]];
        acl_valid(&masked).unwrap();
        assert!(!acl_mode(&masked).1);
    }
}
