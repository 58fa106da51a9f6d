//! ext4 and jbd2 on-disk structures: plain encode/decode and checksums.
//!
//! Pure functions over byte slices: no IO, no locks, so every decoder can be fuzzed on
//! its own. Structures are kept as their raw bytes with typed accessors, so fields lanefs
//! does not interpret (in-inode xattrs, reserved words) survive every rewrite.

pub mod blockmap;
pub mod dir;
pub mod extent;
pub mod geometry;
pub mod group;
pub mod hash;
pub mod inline;
pub mod inode;
pub mod jbd2;
pub mod mmp;
pub mod quota;
pub mod reseal;
pub mod rtdev;
pub mod seal;
pub mod signature;
pub mod superblock;
pub mod xattr;

/// crc32c as ext4 computes it: no final inversion, caller-supplied seed.
pub fn crc32c_raw(seed: u32, data: &[u8]) -> u32 {
    !crc32c::crc32c_append(!seed, data)
}

/// Read a little-endian u16 at `off`.
#[inline]
pub fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Read a little-endian u32 at `off`.
#[inline]
pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Read a little-endian u64 at `off`.
#[inline]
pub fn le64(b: &[u8], off: usize) -> u64 {
    u64::from(le32(b, off)) | (u64::from(le32(b, off + 4)) << 32)
}

/// Write a little-endian u16 at `off`.
#[inline]
pub fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Write a little-endian u32 at `off`.
#[inline]
pub fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Write a little-endian u64 at `off`.
#[inline]
pub fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Word `w` of a little-endian bitmap: its bits `64w..64w + 64`, bit `i` at `1 << (i % 64)`.
#[inline]
pub fn bitmap_word(map: &[u8], w: usize) -> u64 {
    le64(map, w * 8)
}

/// Store word `w` of a little-endian bitmap ([`bitmap_word`]).
#[inline]
pub fn put_bitmap_word(map: &mut [u8], w: usize, v: u64) {
    put64(map, w * 8, v);
}

/// Bit `i` of a little-endian bitmap.
#[inline]
pub fn test_bit(map: &[u8], i: usize) -> bool {
    map[i / 8] & (1 << (i % 8)) != 0
}

/// Set bit `i`.
#[inline]
pub fn set_bit(map: &mut [u8], i: usize) {
    map[i / 8] |= 1 << (i % 8);
}

/// Clear bit `i`.
#[inline]
pub fn clear_bit(map: &mut [u8], i: usize) {
    map[i / 8] &= !(1 << (i % 8));
}

/// First zero bit in `[from, end)`, scanning whole 64-bit words where possible.
pub fn find_zero(map: &[u8], from: usize, end: usize) -> Option<usize> {
    debug_assert!(
        end <= map.len() * 8,
        "scan to bit {end} of a {}-byte map",
        map.len()
    );
    let mut i = from;
    while i < end {
        if i.is_multiple_of(64) && i + 64 <= end {
            let w = u64::from_le_bytes(map[i / 8..i / 8 + 8].try_into().ok()?);
            if w == u64::MAX {
                i += 64;
                continue;
            }
            return Some(i + (!w).trailing_zeros() as usize);
        }
        if !test_bit(map, i) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// First set bit in `[from, end)`.
pub fn find_one(map: &[u8], from: usize, end: usize) -> Option<usize> {
    debug_assert!(
        end <= map.len() * 8,
        "scan to bit {end} of a {}-byte map",
        map.len()
    );
    let mut i = from;
    while i < end {
        if i.is_multiple_of(64) && i + 64 <= end {
            let w = u64::from_le_bytes(map[i / 8..i / 8 + 8].try_into().ok()?);
            if w == 0 {
                i += 64;
                continue;
            }
            return Some(i + w.trailing_zeros() as usize);
        }
        if test_bit(map, i) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Number of set bits in the first `bits` bits.
pub fn count_ones(map: &[u8], bits: usize) -> usize {
    debug_assert!(
        bits <= map.len() * 8,
        "{bits} bits of a {}-byte map",
        map.len()
    );
    let full = bits / 8;
    let mut n: usize = map[..full].iter().map(|b| b.count_ones() as usize).sum();
    for i in full * 8..bits {
        n += test_bit(map, i) as usize;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_known_vector() {
        // Standard crc32c("123456789") = 0xE3069283; raw form is its inversion from seed ~0.
        assert_eq!(!crc32c_raw(!0, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn bit_search() {
        let mut m = vec![0xffu8; 32];
        assert_eq!(find_zero(&m, 0, 256), None);
        clear_bit(&mut m, 200);
        assert_eq!(find_zero(&m, 3, 256), Some(200));
        assert_eq!(find_zero(&m, 201, 256), None);
        let z = vec![0u8; 32];
        assert_eq!(find_one(&z, 0, 256), None);
        assert_eq!(count_ones(&m, 256), 255);
        assert_eq!(count_ones(&m, 13), 13);
    }
}
