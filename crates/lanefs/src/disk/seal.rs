//! Checksums a block gets when its transaction commits rather than at every change.
//!
//! A directory block changes many times per transaction (every create and unlink in the
//! directory), and so does the last leaf of a growing file's extent tree (every
//! allocation); the checksum covers the whole block, so computing it per change costs a
//! pass over 4 KiB each time. Instead the block carries a [`Seal`] naming how its
//! checksum is made, and the journal stamps it on the copy it logs, once per commit (as
//! jbd2's frozen-buffer trigger, `t_frozen`, lets ocfs2 checksum its blocks). The copy in
//! memory keeps a stale checksum: it was verified when read from disk and is not
//! verified again while cached.

use super::dir::{self, DX_NODE_COUNT_OFF, DX_ROOT_COUNT_OFF};

/// How a block's checksum is computed at commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seal {
    /// Nothing: the block's bytes are logged as they are.
    None,
    /// A directory leaf with a checksum tail; the directory inode's checksum seed.
    DirLeaf(u32),
    /// An htree root (dx_root) with its tail.
    DxRoot(u32),
    /// An htree interior node (dx_node) with its tail.
    DxNode(u32),
    /// An extent tree block (leaf or index) with its tail; the inode's checksum seed.
    ExtentBlock(u32),
}

impl Seal {
    /// The seal as one word (kind in the high bits, seed in the low 32), so a buffer
    /// keeps it in an atomic.
    pub fn to_word(self) -> u64 {
        let (kind, seed) = match self {
            Seal::None => (0u64, 0),
            Seal::DirLeaf(s) => (1, s),
            Seal::DxRoot(s) => (2, s),
            Seal::DxNode(s) => (3, s),
            Seal::ExtentBlock(s) => (4, s),
        };
        let w = kind << 32 | u64::from(seed);
        debug_assert_eq!(
            Seal::from_word(w),
            self,
            "seal word {w:#x} does not round-trip"
        );
        w
    }

    /// The seal [`Seal::to_word`] made.
    pub fn from_word(w: u64) -> Seal {
        let seed = w as u32;
        match w >> 32 {
            1 => Seal::DirLeaf(seed),
            2 => Seal::DxRoot(seed),
            3 => Seal::DxNode(seed),
            4 => Seal::ExtentBlock(seed),
            _ => Seal::None,
        }
    }

    /// Stamp the checksum on `b`, a copy of the block about to be logged. Where the
    /// checksum covers all of the block but its last bytes, returns that crc as a
    /// [`Prefix`], from which the log's checksum of the whole block follows without a
    /// second pass over it ([`super::jbd2::block_csum_after`]).
    pub fn apply(self, b: &mut [u8]) -> Option<Prefix> {
        match self {
            Seal::None => None,
            Seal::DirLeaf(s) => {
                let crc = dir::set_leaf_csum(s, b);
                Some(Prefix {
                    seed: s,
                    len: b.len() - dir::TAIL_SIZE,
                    crc,
                })
            }
            Seal::DxRoot(s) => {
                dir::set_dx_csum(s, b, DX_ROOT_COUNT_OFF);
                None
            }
            Seal::DxNode(s) => {
                dir::set_dx_csum(s, b, DX_NODE_COUNT_OFF);
                None
            }
            Seal::ExtentBlock(s) => {
                super::extent::set_block_csum(s, b);
                None
            }
        }
    }
}

/// A raw crc32c (`crc32c_raw`) from `seed` of a block's first `len` bytes, which a seal
/// computed and did not change afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// The crc's seed.
    pub seed: u32,
    /// How many bytes it covers, from the block's start.
    pub len: usize,
    /// The crc.
    pub crc: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seal survives its word; the word of `None` is zero (a buffer's default).
    #[test]
    fn words_round_trip() {
        assert_eq!(Seal::None.to_word(), 0);
        for s in [
            Seal::None,
            Seal::DirLeaf(0),
            Seal::DirLeaf(u32::MAX),
            Seal::DxRoot(7),
            Seal::DxNode(0xdead_beef),
            Seal::ExtentBlock(1),
        ] {
            assert_eq!(Seal::from_word(s.to_word()), s);
        }
    }

    /// A sealed leaf verifies, as one checksummed at each change would.
    #[test]
    fn sealed_leaf_verifies() {
        let mut b = vec![0u8; 1024];
        dir::init_empty_leaf(&mut b, true);
        assert!(dir::insert_in_block(&mut b, true, 0, b"name", 12, 1)
            .unwrap()
            .is_some());
        Seal::DirLeaf(42).apply(&mut b);
        dir::verify_leaf_csum(42, &b, 0).unwrap();
        assert!(dir::verify_leaf_csum(43, &b, 0).is_err());
    }
}
