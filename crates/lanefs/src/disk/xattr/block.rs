//! The external xattr block: its header (magic, refcount, one block, hash), its entries
//! sorted as ext4 keeps them, and its checksum.

use super::{decode, encode, entry_hash, fits, Entry, BLOCK_HEADER, MAGIC};
use crate::disk::{crc32c_raw, le32, put32};
use crate::error::{Error, Result};

/// Offset of `h_refcount` in a block.
const H_REFCOUNT: usize = 4;
/// Offset of `h_blocks` in a block.
const H_BLOCKS: usize = 8;
/// Offset of `h_hash` in a block.
const H_HASH: usize = 12;
/// Offset of `h_checksum` in a block.
const H_CHECKSUM: usize = 16;

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

#[cfg(test)]
mod tests {
    use super::super::{test_entry as e, INDEX_SECURITY, INDEX_USER};
    use super::*;

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
}
