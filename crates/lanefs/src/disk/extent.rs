//! Extent tree nodes: a 12-byte header followed by leaf extents or index entries.

use super::{crc32c_raw, le16, le32, put16, put32};
use crate::error::{Error, Result};

/// Extent header magic.
pub const EXT_MAGIC: u16 = 0xF30A;
/// Longest initialized extent.
pub const MAX_INIT_LEN: u32 = 32768;
/// Longest unwritten extent.
pub const MAX_UNWRITTEN_LEN: u32 = 32767;
/// Deepest tree the kernel accepts.
pub const MAX_DEPTH: u16 = 5;

/// A leaf extent: `len` blocks of the file from `lblk` map to `pblk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// First logical block.
    pub lblk: u32,
    /// Length in blocks.
    pub len: u32,
    /// First physical block.
    pub pblk: u64,
    /// Allocated but not written: reads as zeros.
    pub unwritten: bool,
}

impl Extent {
    /// One past the last logical block.
    pub fn lend(&self) -> u64 {
        u64::from(self.lblk) + u64::from(self.len)
    }
}

/// An index entry: the subtree for logical blocks from `lblk` lives in block `child`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Index {
    /// First logical block covered.
    pub lblk: u32,
    /// Child node block.
    pub child: u64,
}

/// A decoded extent node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// depth 0: extents.
    Leaf(Vec<Extent>),
    /// depth > 0: index entries and the depth.
    Index(u16, Vec<Index>),
}

/// Capacity of a node stored in `bytes` bytes (4 in the inode, 340 in a 4 KiB block).
pub fn node_capacity(bytes: usize) -> usize {
    debug_assert!(
        bytes >= 12,
        "extent node of {bytes} bytes has no room for its header"
    );
    (bytes - 12) / 12
}

/// Decode a node. `at` names where it came from for errors.
pub fn decode_node(b: &[u8], at: u64) -> Result<Node> {
    let bad = |d: String| Err(Error::corrupt("extent node", at, d));
    if b.len() < 12 || le16(b, 0) != EXT_MAGIC {
        return bad(format!(
            "bad magic {:#06x}",
            if b.len() >= 2 { le16(b, 0) } else { 0 }
        ));
    }
    let (entries, max, depth) = (le16(b, 2) as usize, le16(b, 4) as usize, le16(b, 6));
    if max > node_capacity(b.len()) || entries > max {
        return bad(format!("entries {entries} / max {max} exceed capacity"));
    }
    if depth > MAX_DEPTH {
        return bad(format!("depth {depth} too large"));
    }
    let mut prev_end: u64 = 0;
    if depth == 0 {
        let mut v = Vec::with_capacity(entries);
        for i in 0..entries {
            let o = 12 + 12 * i;
            let raw_len = u32::from(le16(b, o + 4));
            let (len, unwritten) = if raw_len > MAX_INIT_LEN {
                (raw_len - MAX_INIT_LEN, true)
            } else {
                (raw_len, false)
            };
            let pblk = u64::from(le32(b, o + 8)) | (u64::from(le16(b, o + 6)) << 32);
            let e = Extent {
                lblk: le32(b, o),
                len,
                pblk,
                unwritten,
            };
            if len == 0 || u64::from(e.lblk) < prev_end {
                return bad(format!(
                    "extent {i} (lblk {}, len {len}) overlaps or is empty",
                    e.lblk
                ));
            }
            // The kernel's ext4_valid_extent (`lblock + len <= lblock` in 32 bits): the
            // end must stay below 2^32.
            if e.lend() >= 1 << 32 {
                return bad(format!(
                    "extent {i} (lblk {}, len {len}) reaches 2^32 logical blocks",
                    e.lblk
                ));
            }
            prev_end = e.lend();
            v.push(e);
        }
        Ok(Node::Leaf(v))
    } else {
        let mut v = Vec::with_capacity(entries);
        for i in 0..entries {
            let o = 12 + 12 * i;
            let child = u64::from(le32(b, o + 4)) | (u64::from(le16(b, o + 8)) << 32);
            let ix = Index {
                lblk: le32(b, o),
                child,
            };
            if i > 0 && u64::from(ix.lblk) <= prev_end {
                return bad(format!("index {i} out of order"));
            }
            prev_end = u64::from(ix.lblk);
            v.push(ix);
        }
        Ok(Node::Index(depth, v))
    }
}

/// Encode a node into `b` (whole area: 60 bytes for the root, a block otherwise).
pub fn encode_node(b: &mut [u8], node: &Node) {
    let max = node_capacity(b.len()).min(if b.len() == 60 { 4 } else { usize::MAX });
    let (count, depth) = match node {
        Node::Leaf(v) => (v.len(), 0),
        Node::Index(d, v) => (v.len(), *d),
    };
    assert!(count <= max, "extent node overflow: {count} > {max}");
    debug_assert!(
        depth <= MAX_DEPTH && (depth > 0) == matches!(node, Node::Index(..)),
        "extent node of depth {depth}"
    );
    b.fill(0);
    put16(b, 0, EXT_MAGIC);
    put16(b, 2, count as u16);
    put16(b, 4, max as u16);
    put16(b, 6, depth);
    match node {
        Node::Leaf(v) => {
            for (i, e) in v.iter().enumerate() {
                put_extent(b, i, e);
            }
        }
        Node::Index(_, v) => {
            debug_assert!(
                v.windows(2).all(|w| w[0].lblk < w[1].lblk),
                "index entries out of order: {v:?}"
            );
            for (i, ix) in v.iter().enumerate() {
                let o = 12 + 12 * i;
                assert!(ix.child < 1 << 48, "index child {} past 48 bits", ix.child);
                put32(b, o, ix.lblk);
                put32(b, o + 4, ix.child as u32);
                put16(b, o + 8, (ix.child >> 32) as u16);
            }
        }
    }
}

/// Entry `i` of a leaf.
fn put_extent(b: &mut [u8], i: usize, e: &Extent) {
    let o = 12 + 12 * i;
    // ee_len is 16 bits with the top values meaning unwritten: a longer run would be
    // stored as another length or flip its written state.
    let max = if e.unwritten {
        MAX_UNWRITTEN_LEN
    } else {
        MAX_INIT_LEN
    };
    assert!(
        e.len >= 1 && e.len <= max,
        "extent {e:?} length out of range"
    );
    assert!(e.pblk < 1 << 48, "extent {e:?} past 48-bit block numbers");
    debug_assert!(e.lend() <= 1 << 32, "extent {e:?} past 2^32 logical blocks");
    put32(b, o, e.lblk);
    let len = if e.unwritten {
        e.len + MAX_INIT_LEN
    } else {
        e.len
    };
    put16(b, o + 4, len as u16);
    put16(b, o + 6, (e.pblk >> 32) as u16);
    put32(b, o + 8, e.pblk as u32);
}

/// Rewrite a leaf block in place from entry `from` on: `tail` becomes its entries
/// `from..`, the count follows, and entries the old count held past the new one are
/// zeroed, so the block is byte for byte what [`encode_block`] makes of the whole leaf
/// (its tail checksum aside). The entries before `from` are the caller's to keep; `at`
/// names the block in the error when it is not a leaf holding them.
pub fn rewrite_leaf_tail(b: &mut [u8], from: usize, tail: &[Extent], at: u64) -> Result<()> {
    let max = usize::from(le16(b, 4));
    let old = usize::from(le16(b, 2));
    let count = from + tail.len();
    if le16(b, 0) != EXT_MAGIC
        || le16(b, 6) != 0
        || from > old
        || count > max
        || 12 + 12 * max > b.len()
    {
        return Err(Error::corrupt(
            "extent leaf",
            at,
            format!("cannot hold entries {from}..{count}: count {old}, max {max}"),
        ));
    }
    debug_assert!(
        tail.windows(2).all(|w| w[0].lend() <= u64::from(w[1].lblk)),
        "leaf tail out of order: {tail:?}"
    );
    for (i, e) in tail.iter().enumerate() {
        put_extent(b, from + i, e);
    }
    if old > count {
        b[12 + 12 * count..12 + 12 * old].fill(0);
    }
    put16(b, 2, count as u16);
    Ok(())
}

/// Offset of the checksum tail in an extent block of `block_size` bytes (the header and
/// every entry the block holds come before it).
pub fn tail_offset(block_size: usize) -> usize {
    12 + 12 * block_capacity(block_size)
}

/// Compute the tail checksum of an extent block.
pub fn block_csum(inode_seed: u32, b: &[u8]) -> u32 {
    debug_assert!(b.len() >= 16, "extent block of {} bytes", b.len());
    let off = 12 + 12 * usize::from(le16(b, 4));
    crc32c_raw(inode_seed, &b[..off.min(b.len() - 4)])
}

/// Store the tail checksum (the block must already be encoded with `encode_block`).
/// A block whose header claims more entries than fit gets no checksum (it is corrupt).
pub fn set_block_csum(inode_seed: u32, b: &mut [u8]) {
    let off = 12 + 12 * usize::from(le16(b, 4));
    if off + 4 > b.len() {
        return;
    }
    let c = block_csum(inode_seed, b);
    put32(b, off, c);
}

/// Verify the tail checksum.
pub fn verify_block_csum(inode_seed: u32, b: &[u8], at: u64) -> Result<()> {
    let off = 12 + 12 * usize::from(le16(b, 4));
    if off + 4 > b.len() {
        return Err(Error::corrupt(
            "extent block",
            at,
            "max entries leave no room for checksum",
        ));
    }
    let stored = le32(b, off);
    let want = block_csum(inode_seed, b);
    if stored != want {
        return Err(Error::corrupt(
            "extent block",
            at,
            format!("checksum mismatch (stored {stored:#010x}, computed {want:#010x})"),
        ));
    }
    Ok(())
}

/// Encode a node into a full block, leaving room for the checksum tail.
pub fn encode_block(b: &mut [u8], node: &Node) {
    let cap = tail_offset(b.len());
    debug_assert!(cap + 4 <= b.len(), "no room for the tail after {cap} bytes");
    b.fill(0);
    encode_node(&mut b[..cap], node);
}

/// The largest size of an extent-mapped file (ext4_max_size): 2^32 - 1 blocks, or what
/// 2^32 - 1 sectors of `i_blocks` count without huge_file.
pub fn max_file_bytes(bs: usize, huge_file: bool) -> u64 {
    debug_assert!(bs >= 1024 && bs.is_power_of_two(), "block size {bs}");
    let bits = bs.trailing_zeros();
    let res = ((1u64 << 32) - 1) << bits;
    if huge_file {
        return res;
    }
    let upper = (((1u64 << 32) - 1) >> (bits - 9)) << bits;
    res.min(upper)
}

/// Entries one tree block holds.
pub fn block_capacity(block_size: usize) -> usize {
    node_capacity(block_size - 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leaf rewritten in place from an entry on is, but for its tail checksum, the
    /// block `encode_block` makes of the whole leaf: longer, shorter and emptied tails.
    #[test]
    fn leaf_tail_rewrite_matches_a_whole_encode() {
        let ext = |i: u32| Extent {
            lblk: i * 10,
            len: 1 + i % 7,
            pblk: 1000 + u64::from(i) * 13,
            unwritten: i.is_multiple_of(3),
        };
        let old: Vec<Extent> = (0..50).map(ext).collect();
        for (from, n) in [(20, 10), (20, 40), (0, 5), (50, 0), (30, 0), (49, 1)] {
            let mut b = vec![0u8; 1024];
            encode_block(&mut b, &Node::Leaf(old.clone()));
            let tail: Vec<Extent> = (0..n).map(|i| ext(1000 + i)).collect();
            rewrite_leaf_tail(&mut b, from, &tail, 0).unwrap();
            let mut whole = old[..from].to_vec();
            whole.extend_from_slice(&tail);
            let mut want = vec![0u8; 1024];
            encode_block(&mut want, &Node::Leaf(whole));
            let body = tail_offset(1024);
            assert_eq!(b[..body], want[..body], "from {from}, {n} entries");
        }
    }

    /// A block that is not a leaf holding the kept entries is refused with a one-line
    /// corruption error naming it, and left as it was.
    #[test]
    fn leaf_tail_rewrite_refuses_what_is_not_such_a_leaf() {
        let e = Extent {
            lblk: 0,
            len: 1,
            pblk: 100,
            unwritten: false,
        };
        let mut leaf = vec![0u8; 1024];
        encode_block(&mut leaf, &Node::Leaf(vec![e; 3]));
        let mut index = vec![0u8; 1024];
        encode_block(
            &mut index,
            &Node::Index(1, vec![Index { lblk: 0, child: 9 }]),
        );
        let full = vec![e; block_capacity(1024)];
        for (mut b, from, tail) in [
            (vec![0u8; 1024], 0, vec![e]),
            (index, 0, vec![e]),
            (leaf.clone(), 4, vec![e]),
            (leaf, 1, full),
        ] {
            let before = b.clone();
            let err = rewrite_leaf_tail(&mut b, from, &tail, 77).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("77") && !msg.contains('\n'), "{msg}");
            assert_eq!(b, before);
        }
    }

    #[test]
    fn leaf_round_trip() {
        let v = vec![
            Extent {
                lblk: 0,
                len: 10,
                pblk: 1 << 33,
                unwritten: false,
            },
            Extent {
                lblk: 10,
                len: 32767,
                pblk: 99,
                unwritten: true,
            },
        ];
        let mut b = vec![0u8; 4096];
        encode_block(&mut b, &Node::Leaf(v.clone()));
        set_block_csum(7, &mut b);
        verify_block_csum(7, &b, 0).unwrap();
        assert_eq!(decode_node(&b, 0).unwrap(), Node::Leaf(v));
        assert_eq!(le16(&b, 4), 340);
        let mut r = vec![0u8; 60];
        encode_node(&mut r, &Node::Index(1, vec![Index { lblk: 0, child: 5 }]));
        assert_eq!(le16(&r, 4), 4);
        assert_eq!(
            decode_node(&r, 0).unwrap(),
            Node::Index(1, vec![Index { lblk: 0, child: 5 }])
        );
    }

    #[test]
    fn garbage_is_an_error() {
        let mut b = vec![0xffu8; 60];
        assert!(decode_node(&b, 3).is_err());
        put16(&mut b, 0, EXT_MAGIC);
        assert!(decode_node(&b, 3).is_err());
    }

    #[test]
    fn an_extent_must_end_below_2_pow_32() {
        let at = |lblk: u32, len: u32| {
            let mut b = vec![0u8; 60];
            encode_node(&mut b, &Node::Leaf(vec![]));
            put16(&mut b, 2, 1);
            put32(&mut b, 12, lblk);
            put16(&mut b, 16, len as u16);
            put32(&mut b, 20, 100);
            decode_node(&b, 3)
        };
        assert!(at(u32::MAX - 10, 10).is_ok());
        let err = at(u32::MAX - 9, 10).unwrap_err().to_string();
        assert!(err.contains("2^32"), "{err}");
        // An unwritten run's raw length is offset by 32768: its true length counts.
        assert!(at(u32::MAX, 32768 + 2).is_err());
    }
}
