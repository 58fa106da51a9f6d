//! Directory blocks: linear entries (`ext4_dir_entry_2`), the checksum tail, and the
//! htree index blocks (dx_root, dx_node) with their tail.

use super::{crc32c_raw, le16, le32, put16, put32};
use crate::error::{Error, Result};

/// Size of the checksum tail of a leaf block.
pub const TAIL_SIZE: usize = 12;
/// File type code stored in the tail's pseudo entry.
const TAIL_FT: u8 = 0xDE;

/// Space an entry with a name of `name_len` bytes needs.
pub fn rec_len_for(name_len: usize) -> usize {
    (8 + name_len + 3) & !3
}

/// Largest record length a 16-bit field holds as itself; a 64 KiB record is stored as
/// this (EXT4_MAX_REC_LEN).
const MAX_REC_LEN: usize = 65535;

/// A record length as stored in an area of `area_len` bytes (ext4_rec_len_from_disk): on
/// blocks of 64 KiB and more, 65535 or 0 is the whole block and the low two bits carry
/// bits 16-17.
pub fn rec_len_from_disk(v: u16, area_len: usize) -> usize {
    let len = usize::from(v);
    if area_len < 65536 {
        return len;
    }
    if len == MAX_REC_LEN || len == 0 {
        return area_len;
    }
    (len & 65532) | ((len & 3) << 16)
}

/// The stored form of record length `len` (ext4_rec_len_to_disk).
pub fn rec_len_to_disk(len: usize, area_len: usize) -> u16 {
    if area_len < 65536 || len < 65536 {
        return len as u16;
    }
    if len == area_len {
        return if area_len == 65536 {
            MAX_REC_LEN as u16
        } else {
            0
        };
    }
    ((len & 65532) | ((len >> 16) & 3)) as u16
}

/// The record length of the entry at `off`.
pub fn rec_len_at(area: &[u8], off: usize) -> usize {
    rec_len_from_disk(le16(area, off + 4), area.len())
}

/// Set the record length of the entry at `off`.
pub fn set_rec_len(area: &mut [u8], off: usize, len: usize) {
    let v = rec_len_to_disk(len, area.len());
    put16(area, off + 4, v);
}

/// One raw entry inside a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawEntry {
    /// Offset of the entry in the block.
    pub off: usize,
    /// Inode (0 = unused slot).
    pub ino: u32,
    /// Record length.
    pub rec_len: usize,
    /// File type code.
    pub ft: u8,
    /// Name bytes.
    pub name: Vec<u8>,
}

/// Where the entries end: before the tail when checksums are on.
pub fn entries_end(block_size: usize, csum: bool) -> usize {
    if csum {
        block_size - TAIL_SIZE
    } else {
        block_size
    }
}

/// The record at `off` of a leaf block whose entries end at `end`, validated as
/// ext4_check_dir_entry does: (rec_len, name_len).
fn record_at(b: &[u8], off: usize, end: usize, at: u64) -> Result<(usize, usize)> {
    if off + 8 > end {
        return Err(Error::corrupt(
            "directory block",
            at,
            format!("entry at {off} truncated"),
        ));
    }
    let rec_len = rec_len_at(b, off);
    let name_len = usize::from(b[off + 6]);
    if rec_len < 8 || !rec_len.is_multiple_of(4) || off + rec_len > end || 8 + name_len > rec_len {
        return Err(Error::corrupt(
            "directory block",
            at,
            format!("entry at offset {off}: rec_len {rec_len}, name_len {name_len}"),
        ));
    }
    Ok((rec_len, name_len))
}

/// Visit every record of a leaf block in order, validating each (`record_at`):
/// `f(offset, record length)`.
fn each_record(b: &[u8], csum: bool, at: u64, mut f: impl FnMut(usize, usize)) -> Result<()> {
    let end = entries_end(b.len(), csum);
    let mut off = 0;
    while off < end {
        let (rec_len, _) = record_at(b, off, end, at)?;
        f(off, rec_len);
        off += rec_len;
    }
    Ok(())
}

/// Walk the entries of a leaf block, validating each record.
pub fn parse_block(b: &[u8], csum: bool, at: u64) -> Result<Vec<RawEntry>> {
    let mut out = Vec::new();
    each_record(b, csum, at, |off, rec_len| {
        let (ino, ft, name) = entry_at(b, off);
        out.push(RawEntry {
            off,
            ino,
            rec_len,
            ft,
            name: name.to_vec(),
        });
    })?;
    Ok(out)
}

/// Visit the live entries (inode not 0) of a leaf block in order, validating every record
/// as [`parse_block`] does, without copying anything: `f(offset, name)`.
pub fn each_live(b: &[u8], csum: bool, at: u64, mut f: impl FnMut(usize, &[u8])) -> Result<()> {
    each_record(b, csum, at, |off, _| {
        let (ino, _, name) = entry_at(b, off);
        if ino != 0 {
            f(off, name);
        }
    })
}

/// The inode, file type code and name of the (validated) entry at `off`.
pub fn entry_at(b: &[u8], off: usize) -> (u32, u8, &[u8]) {
    let name_len = usize::from(b[off + 6]);
    (le32(b, off), b[off + 7], &b[off + 8..off + 8 + name_len])
}

/// A live entry found by name in a leaf block (`search_block`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Offset of the entry in the block.
    pub off: usize,
    /// Offset of the entry before it, if any.
    pub prev: Option<usize>,
    /// Its inode.
    pub ino: u32,
    /// Its file type code.
    pub ft: u8,
}

/// Find the live entry called `name` in a leaf block without copying anything, validating
/// each record up to it (as ext4_search_dir: records past the match are not looked at).
pub fn search_block(b: &[u8], csum: bool, at: u64, name: &[u8]) -> Result<Option<Hit>> {
    search_block_room(b, csum, at, name).map(|(hit, _)| hit)
}

/// Whether two names of one length are equal, their last bytes compared first: names
/// made in a series (`file.1041`, `file.1042`) share their start and differ at the end,
/// and one byte settles most of a leaf's same-length names without a `memcmp` call
/// (which was 7 % of a create in a 2,000,000-file directory, as a create walks the
/// whole leaf).
#[inline]
fn names_match(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    a.last() == b.last() && a == b
}

/// [`search_block`], also noting the first record with room for `name` (a free record or
/// a live one's slack, as [`insert_in_block`] takes it): when the name is missing the
/// whole block was walked, and [`insert_at`] puts it there without walking it again.
pub fn search_block_room(
    b: &[u8],
    csum: bool,
    at: u64,
    name: &[u8],
) -> Result<(Option<Hit>, Option<usize>)> {
    let end = entries_end(b.len(), csum);
    let need = rec_len_for(name.len());
    let (mut off, mut prev, mut room) = (0, None, None);
    while off < end {
        let (rec_len, name_len) = record_at(b, off, end, at)?;
        let ino = le32(b, off);
        if ino != 0 && name_len == name.len() && names_match(&b[off + 8..off + 8 + name_len], name)
        {
            let hit = Hit {
                off,
                prev,
                ino,
                ft: b[off + 7],
            };
            return Ok((Some(hit), room));
        }
        if room.is_none() {
            let used = if ino == 0 { 0 } else { rec_len_for(name_len) };
            if rec_len - used >= need {
                room = Some(off);
            }
        }
        prev = Some(off);
        off += rec_len;
    }
    Ok((None, room))
}

/// Write an entry header and name at `off` with record length `rec_len`.
pub fn put_entry(b: &mut [u8], off: usize, ino: u32, rec_len: usize, ft: u8, name: &[u8]) {
    // name_len is one byte and the name must fit its record; a record past its area, or
    // off a 4-byte boundary, breaks every later walk of it.
    assert!(
        name.len() <= 255 && 8 + name.len() <= rec_len,
        "name of {} bytes in a record of {rec_len}",
        name.len()
    );
    assert!(
        off.is_multiple_of(4) && rec_len.is_multiple_of(4) && off + rec_len <= b.len(),
        "record {off}+{rec_len} in a {}-byte area",
        b.len()
    );
    put32(b, off, ino);
    set_rec_len(b, off, rec_len);
    b[off + 6] = name.len() as u8;
    b[off + 7] = ft;
    b[off + 8..off + 8 + name.len()].copy_from_slice(name);
}

/// Put `name -> child` into the first record of a leaf area (a block's entries, or an
/// inline directory's area) with room: a free record, or the slack after a live entry,
/// which is split. `entries` is what [`parse_block`] found there. Returns whether it fit.
pub fn insert_entry(
    area: &mut [u8],
    entries: &[RawEntry],
    name: &[u8],
    child: u32,
    ft: u8,
) -> bool {
    let need = rec_len_for(name.len());
    for e in entries {
        let used = if e.ino == 0 {
            0
        } else {
            rec_len_for(e.name.len())
        };
        debug_assert!(e.rec_len >= used, "entry {e:?} shorter than its name");
        if e.rec_len - used < need {
            continue;
        }
        if used == 0 {
            put_entry(area, e.off, child, e.rec_len, ft, name);
        } else {
            put_entry(area, e.off, e.ino, used, e.ft, &e.name);
            put_entry(area, e.off + used, child, e.rec_len - used, ft, name);
        }
        return true;
    }
    false
}

/// [`insert_entry`] without a parse first: scan a leaf block's records in place
/// (validating each one passed, as [`parse_block`] would) and put `name -> child` into
/// the first with room. Returns where the new entry went, `None` when no record had room;
/// allocates nothing.
pub fn insert_in_block(
    b: &mut [u8],
    csum: bool,
    at: u64,
    name: &[u8],
    child: u32,
    ft: u8,
) -> Result<Option<usize>> {
    let end = entries_end(b.len(), csum);
    let need = rec_len_for(name.len());
    let mut off = 0;
    while off < end {
        let (rec_len, name_len) = record_at(b, off, end, at)?;
        let ino = le32(b, off);
        let used = if ino == 0 { 0 } else { rec_len_for(name_len) };
        if rec_len - used >= need {
            return insert_at(b, csum, at, off, name, child, ft);
        }
        off += rec_len;
    }
    Ok(None)
}

/// Put `name -> child` into the record at `off` (as [`search_block_room`] found it) if it
/// still has room, validating that record. Returns where the new entry went: `off` itself
/// when the record was free, else the slack after its entry, which is split off; `None`
/// when it does not fit.
pub fn insert_at(
    b: &mut [u8],
    csum: bool,
    at: u64,
    off: usize,
    name: &[u8],
    child: u32,
    ft: u8,
) -> Result<Option<usize>> {
    let end = entries_end(b.len(), csum);
    let (rec_len, name_len) = record_at(b, off, end, at)?;
    let ino = le32(b, off);
    let used = if ino == 0 { 0 } else { rec_len_for(name_len) };
    if rec_len - used < rec_len_for(name.len()) {
        return Ok(None);
    }
    debug_assert!(
        off + rec_len <= end,
        "record at {off} past the entries' end {end}"
    );
    if used == 0 {
        put_entry(b, off, child, rec_len, ft, name);
    } else {
        set_rec_len(b, off, used);
        put_entry(b, off + used, child, rec_len - used, ft, name);
    }
    debug_assert!(search_block(b, csum, at, name).is_ok_and(|h| h.is_some()));
    Ok(Some(off + used))
}

/// The room of the (validated) record at `off`: its whole length when it is free (inode
/// 0), else what its entry leaves of it; a name needing [`rec_len_for`] of at most this
/// fits there.
pub fn room_at(b: &[u8], off: usize) -> usize {
    let rec_len = rec_len_at(b, off);
    if le32(b, off) == 0 {
        rec_len
    } else {
        rec_len - rec_len_for(usize::from(b[off + 6]))
    }
}

/// Visit every record of a leaf block in order, validating each as [`parse_block`] does,
/// without copying anything: `f(offset, inode, name, room)` ([`room_at`]).
pub fn each_entry(
    b: &[u8],
    csum: bool,
    at: u64,
    mut f: impl FnMut(usize, u32, &[u8], usize),
) -> Result<()> {
    each_record(b, csum, at, |off, _| {
        let (ino, _, name) = entry_at(b, off);
        f(off, ino, name, room_at(b, off));
    })
}

/// Remove the entry at `off`: its record joins the one before it (`prev`), or, first in
/// its area, it becomes a free record (inode 0).
pub fn remove_entry(area: &mut [u8], off: usize, prev: Option<usize>) {
    match prev {
        Some(p) => {
            // Merging into a record that does not end where this one starts would
            // swallow or split the entries between.
            debug_assert_eq!(
                p + rec_len_at(area, p),
                off,
                "record at {p} is not before {off}"
            );
            let len = rec_len_at(area, p) + rec_len_at(area, off);
            debug_assert!(
                p + len <= area.len(),
                "merged record {p}+{len} past the area"
            );
            set_rec_len(area, p, len);
        }
        None => put32(area, off, 0),
    }
}

/// Point the entry at `off` at inode `ino` of type `ft`.
pub fn retarget_entry(area: &mut [u8], off: usize, ino: u32, ft: u8) {
    debug_assert!(off + 8 <= area.len(), "entry at {off} outside the area");
    put32(area, off, ino);
    area[off + 7] = ft;
}

/// Offset of the ".." entry in a directory's first block (after "." with its 12-byte
/// record).
pub const DOTDOT_OFF: usize = 12;

/// The inode ".." names in a directory's first block, if that entry is "..".
pub fn dotdot(b: &[u8]) -> Option<u32> {
    let o = DOTDOT_OFF;
    (b.len() >= o + 10 && b[o + 6] == 2 && &b[o + 8..o + 10] == b"..").then(|| le32(b, o))
}

/// Point ".." in a directory's first block at `parent`; false if that entry is not "..".
pub fn set_dotdot(b: &mut [u8], parent: u32) -> bool {
    if dotdot(b).is_none() {
        return false;
    }
    put32(b, DOTDOT_OFF, parent);
    true
}

/// Initialize the checksum tail of a leaf block.
pub fn init_tail(b: &mut [u8]) {
    debug_assert!(b.len() >= 1024, "directory block of {} bytes", b.len());
    let t = b.len() - TAIL_SIZE;
    b[t..].fill(0);
    put16(b, t + 4, TAIL_SIZE as u16);
    b[t + 7] = TAIL_FT;
}

/// Whether the block ends with a well-formed checksum tail.
pub fn has_tail(b: &[u8]) -> bool {
    let t = b.len() - TAIL_SIZE;
    le32(b, t) == 0
        && usize::from(le16(b, t + 4)) == TAIL_SIZE
        && b[t + 6] == 0
        && b[t + 7] == TAIL_FT
}

/// Compute and store a leaf block's checksum.
/// Returns the checksum: the crc32c of the bytes before the tail from `inode_seed`.
pub fn set_leaf_csum(inode_seed: u32, b: &mut [u8]) -> u32 {
    debug_assert!(b.len() >= 1024, "directory block of {} bytes", b.len());
    let t = b.len() - TAIL_SIZE;
    let c = crc32c_raw(inode_seed, &b[..t]);
    put32(b, t + 8, c);
    c
}

/// Verify a leaf block's tail and checksum.
pub fn verify_leaf_csum(inode_seed: u32, b: &[u8], at: u64) -> Result<()> {
    if !has_tail(b) {
        return Err(Error::corrupt(
            "directory block",
            at,
            "missing checksum tail",
        ));
    }
    let t = b.len() - TAIL_SIZE;
    let (stored, want) = (le32(b, t + 8), crc32c_raw(inode_seed, &b[..t]));
    if stored != want {
        return Err(Error::corrupt(
            "directory block",
            at,
            format!("checksum mismatch (stored {stored:#010x}, computed {want:#010x})"),
        ));
    }
    Ok(())
}

/// Format an empty leaf block: one unused entry spanning it, plus the tail.
pub fn init_empty_leaf(b: &mut [u8], csum: bool) {
    b.fill(0);
    let end = entries_end(b.len(), csum);
    put_entry(b, 0, 0, end, 0, b"");
    if csum {
        init_tail(b);
    }
}

/// The htree root's fixed fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DxRootInfo {
    /// Hash version (0..=2; +3 unsigned applied at runtime from the superblock flags).
    pub hash_version: u8,
    /// Levels of index below the root (0 = root points at leaves).
    pub indirect_levels: u8,
}

/// Offset of the count/limit header in a dx_root block.
pub const DX_ROOT_COUNT_OFF: usize = 0x20;
/// Offset of the count/limit header in a dx_node block.
pub const DX_NODE_COUNT_OFF: usize = 0x8;

/// Entries a dx block can hold given where its count/limit header sits.
pub fn dx_limit(block_size: usize, count_off: usize, csum: bool) -> usize {
    debug_assert!(
        block_size > count_off + 16,
        "index block of {block_size} bytes"
    );
    (block_size - count_off - if csum { 8 } else { 0 }) / 8
}

/// A decoded index block: (hash, block) pairs; the first hash is implicitly 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxEntries {
    /// Limit stored on disk.
    pub limit: usize,
    /// (hash, logical block) pairs.
    pub entries: Vec<(u32, u32)>,
}

/// Decode the count/limit header and entries at `count_off`.
pub fn decode_dx(b: &[u8], count_off: usize, csum: bool, at: u64) -> Result<DxEntries> {
    let count = dx_count(b, count_off, csum, at)?;
    let entries = (0..count).map(|i| dx_entry(b, count_off, i)).collect();
    Ok(DxEntries {
        limit: usize::from(le16(b, count_off)),
        entries,
    })
}

/// The entry count of the dx block `b` (header at `count_off`), after checking it and the
/// limit as [`decode_dx`] does; entries are then read in place with [`dx_entry`].
pub fn dx_count(b: &[u8], count_off: usize, csum: bool, at: u64) -> Result<usize> {
    let limit = usize::from(le16(b, count_off));
    let count = usize::from(le16(b, count_off + 2));
    let want = dx_limit(b.len(), count_off, csum);
    if limit != want || count == 0 || count > limit {
        return Err(Error::corrupt(
            "directory index",
            at,
            format!("count {count} / limit {limit} (expected limit {want})"),
        ));
    }
    Ok(count)
}

/// Entry `i` of a dx block: (hash, logical block); entry 0's hash is 0.
pub fn dx_entry(b: &[u8], count_off: usize, i: usize) -> (u32, u32) {
    let o = count_off + 8 * i;
    debug_assert!(o + 8 <= b.len(), "dx entry {i} outside the block");
    let hash = if i == 0 { 0 } else { le32(b, o) };
    (hash, le32(b, o + 4))
}

/// The entry of a dx block (of `count` entries) whose range holds hash `h`: the last
/// whose hash is at most `h` (dx_probe's binary search), read in place.
pub fn dx_search(b: &[u8], count_off: usize, count: usize, h: u32) -> usize {
    debug_assert!(
        count >= 1 && count_off + 8 * count <= b.len(),
        "dx search over {count} entries"
    );
    let (mut lo, mut hi) = (1, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if le32(b, count_off + 8 * mid) <= h {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo - 1
}

/// Encode entries at `count_off` (the first entry's hash slot holds count/limit).
pub fn encode_dx(b: &mut [u8], count_off: usize, limit: usize, entries: &[(u32, u32)]) {
    assert!(
        !entries.is_empty() && entries.len() <= limit,
        "dx entries out of range"
    );
    assert!(
        count_off + 8 * limit <= b.len() && limit <= 0xFFFF,
        "dx limit {limit} past the block"
    );
    b[count_off..count_off + 8 * limit].fill(0);
    put16(b, count_off, limit as u16);
    put16(b, count_off + 2, entries.len() as u16);
    for (i, &(h, blk)) in entries.iter().enumerate() {
        let o = count_off + 8 * i;
        if i > 0 {
            put32(b, o, h);
        }
        put32(b, o + 4, blk);
    }
}

/// Compute and store a dx block's checksum (tail right after `limit` entries).
///
/// The tail's first word (`dt_reserved`) is covered by the checksum and kept as it is:
/// the kernel leaves stale bytes there (whatever the block held before it became an
/// index), so zeroing it would both change bytes the kernel wrote and, unless the
/// checksum were computed afterwards, break it.
pub fn set_dx_csum(inode_seed: u32, b: &mut [u8], count_off: usize) {
    let (limit, count) = (
        usize::from(le16(b, count_off)),
        usize::from(le16(b, count_off + 2)),
    );
    let t = count_off + 8 * limit;
    if t + 8 > b.len() || count > limit {
        // Corrupt count/limit: no room for a tail, so nothing to checksum.
        return;
    }
    let c = dx_csum(inode_seed, b, count_off, count, t);
    put32(b, t + 4, c);
}

fn dx_csum(seed: u32, b: &[u8], count_off: usize, count: usize, t: usize) -> u32 {
    debug_assert!(
        count_off + 8 * count <= t && t + 8 <= b.len(),
        "dx checksum span"
    );
    let c = crc32c_raw(seed, &b[..count_off + 8 * count]);
    let c = crc32c_raw(c, &b[t..t + 4]);
    crc32c_raw(c, &[0; 4])
}

/// Verify a dx block's checksum.
pub fn verify_dx_csum(inode_seed: u32, b: &[u8], count_off: usize, at: u64) -> Result<()> {
    let (limit, count) = (
        usize::from(le16(b, count_off)),
        usize::from(le16(b, count_off + 2)),
    );
    let t = count_off + 8 * limit;
    if t + 8 > b.len() || count > limit {
        return Err(Error::corrupt(
            "directory index",
            at,
            "no room for checksum tail",
        ));
    }
    let (stored, want) = (le32(b, t + 4), dx_csum(inode_seed, b, count_off, count, t));
    if stored != want {
        return Err(Error::corrupt(
            "directory index",
            at,
            format!("checksum mismatch (stored {stored:#010x}, computed {want:#010x})"),
        ));
    }
    Ok(())
}

/// Offsets in a dx_root of its info: hash version, info length, indirect levels.
const DX_ROOT_HASH_VERSION: usize = 0x1C;
const DX_ROOT_INFO_LEN: usize = 0x1D;
const DX_ROOT_LEVELS: usize = 0x1E;

/// Set the number of index levels below a dx_root (its `indirect_levels`).
pub fn set_root_levels(b: &mut [u8], levels: u8) {
    debug_assert!(levels <= 2, "{levels} index levels");
    b[DX_ROOT_LEVELS] = levels;
}

/// Decode the dx_root info of block 0 of an indexed directory.
pub fn decode_root_info(b: &[u8], at: u64) -> Result<DxRootInfo> {
    // "." at 0 (rec_len 12) and ".." at 12 spanning the rest of the block.
    if le16(b, 4) != 12 || b[6] != 1 || b[8] != b'.' || b[12 + 6] != 2 {
        return Err(Error::corrupt(
            "directory index",
            at,
            "root lacks . and .. entries",
        ));
    }
    // ".." spans the rest of the block (the index lives inside it); any other length
    // makes the kernel's and e2fsck's walk of the block as entries fail.
    let dotdot = rec_len_at(b, 12);
    if dotdot != b.len() - 12 {
        return Err(Error::corrupt(
            "directory index",
            at,
            format!(
                "root's .. entry has length {dotdot} (expected {})",
                b.len() - 12
            ),
        ));
    }
    let info_len = b[DX_ROOT_INFO_LEN];
    let hash_version = b[DX_ROOT_HASH_VERSION];
    let levels = b[DX_ROOT_LEVELS];
    if info_len != 8 || hash_version > 5 || levels > 2 {
        return Err(Error::corrupt(
            "directory index",
            at,
            format!("root info: length {info_len}, hash {hash_version}, levels {levels}"),
        ));
    }
    Ok(DxRootInfo {
        hash_version,
        indirect_levels: levels,
    })
}

/// Write the dx_root header: ".", ".." (file type `dot_ft`: 2, or 0 without the filetype
/// feature) and the root info; entries follow via `encode_dx`.
pub fn init_dx_root(b: &mut [u8], self_ino: u32, parent_ino: u32, info: DxRootInfo, dot_ft: u8) {
    debug_assert!(
        info.hash_version <= 5 && info.indirect_levels <= 2,
        "root info {info:?}"
    );
    b.fill(0);
    put_entry(b, 0, self_ino, 12, dot_ft, b".");
    put_entry(b, 12, parent_ino, b.len() - 12, dot_ft, b"..");
    b[DX_ROOT_HASH_VERSION] = info.hash_version;
    b[DX_ROOT_INFO_LEN] = 8;
    b[DX_ROOT_LEVELS] = info.indirect_levels;
}

/// Write an empty dx_node header (a fake unused entry spanning the block).
pub fn init_dx_node(b: &mut [u8]) {
    b.fill(0);
    set_rec_len(b, 0, b.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `each_live` visits the live entries `parse_block` finds, in block order, with the
    /// names `entry_at` reads back; a removed entry is passed over, and a corrupt record
    /// is an error as in `parse_block`.
    #[test]
    fn live_entries_in_place_match_parse_block() {
        let mut b = vec![0u8; 1024];
        init_empty_leaf(&mut b, true);
        for i in 0..20u32 {
            let name = format!("n{i}-{}", "y".repeat(i as usize % 7));
            assert!(
                insert_in_block(&mut b, true, 9, name.as_bytes(), 100 + i, 1)
                    .unwrap()
                    .is_some()
            );
        }
        let victim = search_block(&b, true, 9, b"n5-yyyyy").unwrap().expect("n5");
        remove_entry(&mut b[..entries_end(1024, true)], victim.off, victim.prev);
        let want: Vec<(usize, u32, Vec<u8>)> = parse_block(&b, true, 9)
            .unwrap()
            .into_iter()
            .filter(|e| e.ino != 0)
            .map(|e| (e.off, e.ino, e.name))
            .collect();
        let mut got = Vec::new();
        each_live(&b, true, 9, |off, name| {
            let (ino, ft, n) = entry_at(&b, off);
            assert_eq!((n, ft), (name, 1));
            got.push((off, ino, name.to_vec()));
        })
        .unwrap();
        assert_eq!(got, want);
        assert_eq!(got.len(), 19);
        // A record length past the block is refused, as parse_block refuses it.
        set_rec_len(&mut b, 0, 2048);
        assert!(each_live(&b, true, 9, |_, _| {}).is_err());
        assert!(parse_block(&b, true, 9).is_err());
    }

    /// The room a search notes is the record an in-place insert takes: inserting there
    /// gives the same block, through fills, removals and a full block.
    #[test]
    fn search_room_is_where_insert_goes() {
        let mut b = vec![0u8; 1024];
        init_empty_leaf(&mut b, true);
        let mut n = 0u32;
        for round in 0..40 {
            let name = format!("file-{round:03}-{}", "x".repeat(round % 13));
            let (hit, room) = search_block_room(&b, true, 1, name.as_bytes()).unwrap();
            assert!(hit.is_none());
            let mut by_scan = b.clone();
            let fits = insert_in_block(&mut by_scan, true, 1, name.as_bytes(), 100 + n, 1);
            assert_eq!(fits.unwrap().is_some(), room.is_some(), "{name}");
            if let Some(off) = room {
                assert!(insert_at(&mut b, true, 1, off, name.as_bytes(), 100 + n, 1)
                    .unwrap()
                    .is_some());
                assert_eq!(b, by_scan, "{name}");
                n += 1;
            }
            if round % 5 == 4 {
                // Remove the second live entry, leaving slack mid-block.
                let live = parse_block(&b, true, 1).unwrap();
                let live: Vec<_> = live.into_iter().filter(|e| e.ino != 0).collect();
                if live.len() > 2 {
                    remove_entry(&mut b, live[1].off, Some(live[0].off));
                }
            }
        }
    }

    /// `search_block` finds what `parse_block` lists, with the entry before it, skips
    /// unused slots, and refuses a bad record on its way.
    #[test]
    fn search_agrees_with_parse() {
        let mut b = vec![0u8; 1024];
        put_entry(&mut b, 0, 11, 12, 1, b"a");
        put_entry(&mut b, 12, 12, 12, 2, b"bb");
        put_entry(&mut b, 24, 0, 16, 1, b"gone");
        put_entry(&mut b, 40, 13, 1024 - 40, 1, b"dd");
        let all = parse_block(&b, false, 7).unwrap();
        for (i, e) in all.iter().enumerate().filter(|(_, e)| e.ino != 0) {
            let h = search_block(&b, false, 7, &e.name).unwrap().unwrap();
            assert_eq!((h.off, h.ino, h.ft), (e.off, e.ino, e.ft));
            assert_eq!(h.prev, i.checked_sub(1).map(|p| all[p].off));
        }
        assert_eq!(search_block(&b, false, 7, b"gone").unwrap(), None);
        assert_eq!(search_block(&b, false, 7, b"d").unwrap(), None);
        set_rec_len(&mut b, 12, 10);
        assert!(search_block(&b, false, 7, b"a").unwrap().is_some());
        assert!(search_block(&b, false, 7, b"dd").is_err());
    }

    /// The in-place reads of a dx block agree with `decode_dx`, and `dx_search` picks
    /// the entry a partition of the decoded hashes does.
    #[test]
    fn dx_in_place_agrees_with_decode() {
        let mut b = vec![0u8; 1024];
        let limit = dx_limit(1024, DX_NODE_COUNT_OFF, true);
        let entries = [(0, 5), (10, 6), (20, 7), (20, 8), (41, 9)];
        encode_dx(&mut b, DX_NODE_COUNT_OFF, limit, &entries);
        let count = dx_count(&b, DX_NODE_COUNT_OFF, true, 0).unwrap();
        let dec = decode_dx(&b, DX_NODE_COUNT_OFF, true, 0).unwrap();
        assert_eq!(count, dec.entries.len());
        for (i, e) in dec.entries.iter().enumerate() {
            assert_eq!(dx_entry(&b, DX_NODE_COUNT_OFF, i), *e);
        }
        for h in [0, 1, 9, 10, 11, 20, 21, 40, 41, 42, u32::MAX] {
            let want = dec.entries.partition_point(|&(eh, _)| eh <= h) - 1;
            assert_eq!(dx_search(&b, DX_NODE_COUNT_OFF, count, h), want, "hash {h}");
        }
        assert!(dx_count(&b, DX_NODE_COUNT_OFF, false, 0).is_err());
    }

    /// `insert_in_block` puts a name where `insert_entry` (on the parsed block) does.
    #[test]
    fn insert_in_place_agrees_with_parsed_insert() {
        let mut b = vec![0u8; 1024];
        put_entry(&mut b, 0, 11, 12, 1, b"a");
        put_entry(&mut b, 12, 0, 28, 1, b"gone");
        put_entry(&mut b, 40, 13, 1024 - 40, 1, b"dd");
        for name in [&b"xy"[..], b"a-longer-name-than-the-hole", b"z"] {
            let mut want = b.clone();
            let entries = parse_block(&want, false, 7).unwrap();
            assert!(insert_entry(&mut want, &entries, name, 99, 1));
            assert!(insert_in_block(&mut b, false, 7, name, 99, 1)
                .unwrap()
                .is_some());
            assert_eq!(b, want);
        }
        let mut full = vec![0u8; 64];
        put_entry(&mut full, 0, 5, 64, 1, &[b'n'; 50]);
        assert!(insert_in_block(&mut full, false, 7, b"x", 6, 1)
            .unwrap()
            .is_none());
    }
}
