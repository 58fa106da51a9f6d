//! Direct and indirect block maps: how ext2, ext3 and ext4 inodes without the extents flag
//! map logical blocks.
//!
//! `i_block` holds 15 little-endian 32-bit pointers: 12 direct blocks, then one single-,
//! one double- and one triple-indirect block. An indirect block is an array of `bs / 4`
//! pointers, to data blocks (single) or to indirect blocks one level down. Zero is a hole;
//! an indirect block exists only if something under it is mapped.
//!
//! Every indirect block is named by a [`NodeKey`]: its level (1 single, 2 double, 3 triple)
//! and the first logical block it covers. Decoding returns the mapped runs and the nodes
//! that hold them; encoding takes runs and a block for every node [`needed`] lists, and
//! gives `i_block` and each node's bytes. Reads go through a caller's closure: the module
//! does no IO.

use super::extent::Extent;
use super::{le32, put32};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// Direct pointers in `i_block`.
pub const NDIR: usize = 12;
/// Slot of the single-indirect pointer.
pub const IND_SLOT: usize = 12;
/// Slot of the double-indirect pointer.
pub const DIND_SLOT: usize = 13;
/// Slot of the triple-indirect pointer.
pub const TIND_SLOT: usize = 14;
/// Bytes of `i_block` a block map uses.
pub const IBLOCK_BYTES: usize = 60;
/// Logical blocks are 32-bit (ext4's `ext4_lblk_t`); the last one stays unused.
pub const MAX_LBLK: u64 = (1 << 32) - 1;

/// An indirect block: level 1 maps data blocks, 2 and 3 map the level below; `base` is
/// the first logical block it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeKey {
    /// 1 = single, 2 = double, 3 = triple indirect.
    pub level: u8,
    /// First logical block under it.
    pub base: u64,
}

/// Where each indirect block of a file lives.
pub type Nodes = BTreeMap<NodeKey, u64>;

/// Pointers per indirect block.
pub fn per_block(bs: usize) -> u64 {
    debug_assert!(bs >= 1024 && bs.is_power_of_two(), "block size {bs}");
    (bs / 4) as u64
}

/// Logical blocks one node of `level` covers.
fn span(level: u8, apb: u64) -> u64 {
    debug_assert!((1..=3).contains(&level), "indirect level {level}");
    apb.saturating_pow(u32::from(level) - 1).saturating_mul(apb)
}

/// The top-level nodes: (slot, level, first logical block).
fn tops(apb: u64) -> [(usize, u8, u64); 3] {
    let d = NDIR as u64;
    [
        (IND_SLOT, 1, d),
        (DIND_SLOT, 2, d + apb),
        (TIND_SLOT, 3, d + apb + apb * apb),
    ]
}

/// Logical blocks a block map can address (capped at ext4's 32-bit logical blocks).
pub fn capacity(bs: usize) -> u64 {
    let apb = per_block(bs);
    (NDIR as u64 + apb + apb * apb + apb * apb * apb).min(MAX_LBLK)
}

/// The largest size of a block-mapped file (ext4_max_bitmap_size): what the tree
/// addresses, less what its data and indirect blocks may count in `i_blocks` (32 bits of
/// 512-byte sectors without huge_file, 48 with it).
pub fn max_file_bytes(bs: usize, huge_file: bool) -> u64 {
    debug_assert!(bs >= 1024 && bs.is_power_of_two(), "block size {bs}");
    let bits = bs.trailing_zeros();
    let ppb = per_block(bs);
    let mut upper: u64 = if huge_file {
        (1 << 48) - 1
    } else {
        (1 << 32) - 1
    };
    upper >>= bits - 9;
    let mut res = NDIR as u64 + ppb + ppb * ppb + ppb * ppb * ppb;
    let meta = 1 + (1 + ppb) + (1 + ppb + ppb * ppb);
    if res + meta > upper {
        res = upper;
        let mut left = upper - NDIR as u64 - ppb;
        let mut meta = 1;
        if left < ppb * ppb {
            meta += 1 + left.div_ceil(ppb);
        } else {
            meta += 1 + ppb;
            left -= ppb * ppb;
            meta += 1 + left.div_ceil(ppb) + left.div_ceil(ppb * ppb);
        }
        res -= meta;
    }
    // Logical blocks are 32-bit in lanefs's map (the kernel's ext4_lblk_t).
    (res.min(MAX_LBLK) << bits).min(i64::MAX as u64)
}

/// Decode the map of inode `ino`: its runs of mapped blocks (merged where contiguous) and
/// its indirect blocks. `read` returns a block's bytes; a pointer outside
/// `[first_data, blocks)` is corruption.
pub fn decode(
    iblock: &[u8],
    bs: usize,
    first_data: u64,
    blocks: u64,
    ino: u64,
    read: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
) -> Result<(Vec<Extent>, Nodes)> {
    debug_assert!(
        iblock.len() >= IBLOCK_BYTES,
        "i_block of {} bytes",
        iblock.len()
    );
    let mut d = Decoder {
        apb: per_block(bs),
        first_data,
        blocks,
        ino,
        runs: Vec::new(),
        nodes: Nodes::new(),
        seen: std::collections::HashSet::new(),
    };
    for (i, slot) in iblock[..NDIR * 4].chunks_exact(4).enumerate() {
        d.data(i as u64, u64::from(le32(slot, 0)))?;
    }
    for (slot, level, base) in tops(d.apb) {
        let p = u64::from(le32(iblock, slot * 4));
        if p != 0 && base < MAX_LBLK {
            d.node(NodeKey { level, base }, p, read)?;
        }
    }
    Ok((d.runs, d.nodes))
}

struct Decoder {
    apb: u64,
    first_data: u64,
    blocks: u64,
    ino: u64,
    runs: Vec<Extent>,
    nodes: Nodes,
    seen: std::collections::HashSet<u64>,
}

impl Decoder {
    fn check(&self, what: &str, p: u64) -> Result<()> {
        if p < self.first_data || p >= self.blocks {
            return Err(Error::corrupt(
                "inode",
                self.ino,
                format!("block map: {what} pointer {p} outside the file system"),
            ));
        }
        Ok(())
    }

    fn data(&mut self, lblk: u64, p: u64) -> Result<()> {
        if p == 0 || lblk >= MAX_LBLK {
            return Ok(());
        }
        self.check("data", p)?;
        if let Some(last) = self.runs.last_mut() {
            if last.lend() == lblk && last.pblk + u64::from(last.len) == p && last.len < u32::MAX {
                last.len += 1;
                return Ok(());
            }
        }
        self.runs.push(Extent {
            lblk: lblk as u32,
            len: 1,
            pblk: p,
            unwritten: false,
        });
        Ok(())
    }

    fn node(
        &mut self,
        key: NodeKey,
        p: u64,
        read: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
    ) -> Result<()> {
        self.check("indirect", p)?;
        if !self.seen.insert(p) {
            return Err(Error::corrupt(
                "inode",
                self.ino,
                format!("block map: indirect block {p} used twice"),
            ));
        }
        debug_assert!((1..=3).contains(&key.level), "indirect level {}", key.level);
        self.nodes.insert(key, p);
        let b = read(p)?;
        debug_assert!(
            b.len() as u64 >= self.apb * 4,
            "indirect block read as {} bytes",
            b.len()
        );
        let child = span(key.level, self.apb) / self.apb;
        for i in 0..self.apb {
            let q = u64::from(le32(&b, i as usize * 4));
            let base = key.base + i * child;
            if q == 0 || base >= MAX_LBLK {
                continue;
            }
            if key.level == 1 {
                self.data(base, q)?;
            } else {
                let k = NodeKey {
                    level: key.level - 1,
                    base,
                };
                self.node(k, q, read)?;
            }
        }
        Ok(())
    }
}

/// The indirect blocks a map of `runs` (sorted, written, within [`capacity`]) needs, in
/// logical order with each node before the nodes under it.
pub fn needed(runs: &[Extent], bs: usize) -> Vec<NodeKey> {
    let apb = per_block(bs);
    let mut out = Vec::new();
    for (_, level, base) in tops(apb) {
        walk_needed(runs, apb, NodeKey { level, base }, &mut out);
    }
    out
}

/// Whether any run maps a block in `[a, b)`.
fn any_mapped(runs: &[Extent], a: u64, b: u64) -> bool {
    let i = runs.partition_point(|e| e.lend() <= a);
    runs.get(i).is_some_and(|e| u64::from(e.lblk) < b)
}

fn walk_needed(runs: &[Extent], apb: u64, key: NodeKey, out: &mut Vec<NodeKey>) {
    let end = key.base.saturating_add(span(key.level, apb));
    if key.base >= MAX_LBLK || !any_mapped(runs, key.base, end) {
        return;
    }
    out.push(key);
    if key.level > 1 {
        let child = span(key.level - 1, apb);
        let mut base = key.base;
        while base < end && base < MAX_LBLK {
            // Skip straight to the next child that has something mapped.
            let i = runs.partition_point(|e| e.lend() <= base);
            let Some(e) = runs.get(i) else { break };
            let first = u64::from(e.lblk).max(base);
            if first >= end {
                break;
            }
            base = key.base + (first - key.base) / child * child;
            walk_needed(
                runs,
                apb,
                NodeKey {
                    level: key.level - 1,
                    base,
                },
                out,
            );
            base += child;
        }
    }
}

/// Encode `runs` (sorted, written) with the indirect blocks `nodes` (which must hold every
/// key [`needed`] lists, and may hold no other): `i_block` and each node's bytes.
pub fn encode(
    runs: &[Extent],
    nodes: &Nodes,
    bs: usize,
) -> ([u8; IBLOCK_BYTES], Vec<(u64, Vec<u8>)>) {
    let apb = per_block(bs);
    let mut iblock = [0u8; IBLOCK_BYTES];
    let mut blocks: BTreeMap<NodeKey, Vec<u8>> =
        nodes.keys().map(|k| (*k, vec![0u8; bs])).collect();
    // Pointers from each node to the nodes under it, and from the inode to the top ones.
    for (key, &p) in nodes {
        match tops(apb)
            .iter()
            .find(|t| t.1 == key.level && t.2 == key.base)
        {
            Some(&(slot, _, _)) => {
                assert!(p < 1 << 32, "indirect block {p} past 2^32");
                put32(&mut iblock, slot * 4, p as u32)
            }
            None => {
                assert!(p < 1 << 32, "indirect block {p} past 2^32");
                let parent = parent_of(*key, apb);
                let idx = (key.base - parent.base) / span(key.level, apb);
                debug_assert!(idx < apb, "node {key:?} is slot {idx} of {parent:?}");
                let pb = blocks.get_mut(&parent);
                debug_assert!(pb.is_some(), "node {key:?} has no parent {parent:?}");
                if let Some(pb) = pb {
                    put32(pb, idx as usize * 4, p as u32);
                }
            }
        }
    }
    // Data pointers: direct slots, then level-1 nodes.
    for e in runs {
        debug_assert!(!e.unwritten, "block maps have no unwritten extents");
        // Pointers are 32 bits: a longer one would be cut to another file's block.
        assert!(
            e.pblk + u64::from(e.len) <= 1 << 32,
            "run {e:?} past 2^32 in a block map"
        );
        for i in 0..u64::from(e.len) {
            let (l, p) = (u64::from(e.lblk) + i, e.pblk + i);
            if l < NDIR as u64 {
                put32(&mut iblock, l as usize * 4, p as u32);
                continue;
            }
            let leaf = leaf_of(l, apb);
            debug_assert!(l - leaf.base < apb, "block {l} outside {leaf:?}");
            let b = blocks.get_mut(&leaf);
            debug_assert!(b.is_some(), "block {l} has no indirect block {leaf:?}");
            if let Some(b) = b {
                put32(b, (l - leaf.base) as usize * 4, p as u32);
            }
        }
    }
    let out = blocks.into_iter().map(|(k, b)| (nodes[&k], b)).collect();
    (iblock, out)
}

/// The level-1 node that maps logical block `l` (at least `NDIR`).
fn leaf_of(l: u64, apb: u64) -> NodeKey {
    debug_assert!(l >= NDIR as u64, "direct block {l} has no indirect block");
    let mut key = top_of(l, apb);
    while key.level > 1 {
        let child = span(key.level - 1, apb);
        key = NodeKey {
            level: key.level - 1,
            base: key.base + (l - key.base) / child * child,
        };
    }
    key
}

/// The top-level node whose range holds logical block `l` (at least `NDIR`).
fn top_of(l: u64, apb: u64) -> NodeKey {
    let t = tops(apb);
    let (_, level, base) = if l < t[1].2 {
        t[0]
    } else if l < t[2].2 {
        t[1]
    } else {
        t[2]
    };
    NodeKey { level, base }
}

/// The node one level up that points to `key` (which is not a top-level node).
fn parent_of(key: NodeKey, apb: u64) -> NodeKey {
    debug_assert!(key.level < 3, "a triple-indirect block has no parent");
    let mut p = top_of(key.base, apb);
    while p.level > key.level + 1 {
        let child = span(p.level - 1, apb);
        p = NodeKey {
            level: p.level - 1,
            base: p.base + (key.base - p.base) / child * child,
        };
    }
    p
}

/// Whether `runs` fit a block map: written, 32-bit physical blocks, within [`capacity`].
pub fn fits(runs: &[Extent], bs: usize) -> bool {
    runs.iter()
        .all(|e| !e.unwritten && e.pblk + u64::from(e.len) <= 1 << 32 && e.lend() <= capacity(bs))
}

/// A contiguous file laid out as mke2fs and the kernel do: starting at `start`, each
/// indirect block placed just before the first data block it maps. Returns the data runs
/// and the nodes for `nblocks` logical blocks; `start + nblocks + nodes` blocks are used.
// `next` also advances for each indirect block, so it is no plain loop counter.
#[allow(clippy::explicit_counter_loop)]
pub fn contiguous(start: u64, nblocks: u64, bs: usize) -> (Vec<Extent>, Nodes) {
    let apb = per_block(bs);
    let mut nodes = Nodes::new();
    let mut runs: Vec<Extent> = Vec::new();
    let mut next = start;
    for l in 0..nblocks.min(capacity(bs)) {
        if l >= NDIR as u64 {
            // Every node whose range starts at l comes first, outermost first.
            let mut key = top_of(l, apb);
            loop {
                nodes.entry(key).or_insert_with(|| {
                    next += 1;
                    next - 1
                });
                if key.level == 1 {
                    break;
                }
                let child = span(key.level - 1, apb);
                key = NodeKey {
                    level: key.level - 1,
                    base: key.base + (l - key.base) / child * child,
                };
            }
        }
        match runs.last_mut() {
            Some(e) if e.pblk + u64::from(e.len) == next && e.len < u32::MAX => e.len += 1,
            _ => runs.push(Extent {
                lblk: l as u32,
                len: 1,
                pblk: next,
                unwritten: false,
            }),
        }
        next += 1;
    }
    debug_assert_eq!(
        next - start,
        nblocks.min(capacity(bs)) + nodes.len() as u64,
        "contiguous: data and indirect blocks do not fill the range"
    );
    (runs, nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(lblk: u32, len: u32, pblk: u64) -> Extent {
        Extent {
            lblk,
            len,
            pblk,
            unwritten: false,
        }
    }

    /// Encode, then decode through a map of the written blocks: the same runs and nodes.
    fn round_trip(runs: &[Extent], bs: usize) -> Nodes {
        let keys = needed(runs, bs);
        let nodes: Nodes = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, 1_000_000 + i as u64))
            .collect();
        let (iblock, blocks) = encode(runs, &nodes, bs);
        let disk: HashMap<u64, Vec<u8>> = blocks.into_iter().collect();
        let mut read = |b: u64| Ok(disk[&b].clone());
        let (got, got_nodes) = decode(&iblock, bs, 1, 1 << 32, 7, &mut read).unwrap();
        assert_eq!(got, runs);
        assert_eq!(got_nodes, nodes);
        nodes
    }

    #[test]
    fn direct_only_needs_no_nodes() {
        assert!(round_trip(&[run(0, 12, 100)], 1024).is_empty());
    }

    #[test]
    fn every_level() {
        let bs = 1024;
        let apb = per_block(bs) as u32;
        // Direct, single, double and triple indirect ranges, with holes between.
        let runs = [
            run(0, 3, 500),
            run(11, 2, 600),
            run(12 + apb - 1, 3, 700),
            run(12 + apb + apb * apb + 5, 1, 800),
        ];
        let nodes = round_trip(&runs, bs);
        let levels: Vec<u8> = nodes.keys().map(|k| k.level).collect();
        // IND, DIND + one IND under it, TIND + DIND + IND.
        assert_eq!(nodes.len(), 1 + 2 + 3, "{levels:?}");
        assert_eq!(needed(&runs, bs).len(), nodes.len());
    }

    #[test]
    fn sparse_high_block_and_capacity() {
        for bs in [1024, 4096, 65536] {
            let last = (capacity(bs) - 1) as u32;
            round_trip(&[run(0, 1, 9), run(last, 1, 10)], bs);
        }
        assert_eq!(capacity(1024), 12 + 256 + 65536 + 16_777_216);
        assert_eq!(capacity(4096), 12 + 1024 + 1024 * 1024 + 1024 * 1024 * 1024);
        assert_eq!(capacity(65536), MAX_LBLK);
    }

    #[test]
    fn contiguous_places_nodes_before_their_data() {
        let bs = 1024;
        let n = 12 + 256 + 300;
        let (runs, nodes) = contiguous(100, n, bs);
        let total: u64 = runs.iter().map(|e| u64::from(e.len)).sum();
        assert_eq!(total, n);
        let mut want = needed(&runs, bs);
        want.sort();
        assert_eq!(want, nodes.keys().copied().collect::<Vec<_>>());
        // IND right after 12 direct blocks; DIND then its first IND after the IND's 256.
        assert_eq!(nodes[&NodeKey { level: 1, base: 12 }], 112);
        assert_eq!(
            nodes[&NodeKey {
                level: 2,
                base: 268
            }],
            100 + 12 + 1 + 256
        );
        assert_eq!(
            nodes[&NodeKey {
                level: 1,
                base: 268
            }],
            100 + 12 + 1 + 256 + 1
        );
        round_trip(&runs, bs);
    }

    #[test]
    fn max_sizes_match_the_kernel() {
        // 1 KiB blocks: the whole tree (16,843,020 blocks) fits 2^32 sectors.
        assert_eq!(
            max_file_bytes(1024, false),
            (12 + 256 + 65536 + 16_777_216) << 10
        );
        // 4 KiB blocks without huge_file: 2^32 - 1 sectors less the tree's own blocks.
        let upper = ((1u64 << 32) - 1) >> 3;
        let left = upper - 12 - 1024 - 1024 * 1024;
        let meta = 1 + 1 + 1024 + 1 + left.div_ceil(1024) + left.div_ceil(1024 * 1024);
        assert_eq!(max_file_bytes(4096, false), (upper - meta) << 12);
    }

    #[test]
    fn corrupt_pointers_are_errors() {
        let mut iblock = [0u8; IBLOCK_BYTES];
        put32(&mut iblock, 0, 5000);
        let mut read = |_b: u64| -> Result<Vec<u8>> { Ok(vec![0u8; 1024]) };
        assert!(decode(&iblock, 1024, 1, 4000, 3, &mut read).is_err());
        let mut iblock = [0u8; IBLOCK_BYTES];
        put32(&mut iblock, IND_SLOT * 4, 50);
        put32(&mut iblock, DIND_SLOT * 4, 50);
        assert!(decode(&iblock, 1024, 1, 4000, 3, &mut read).is_err());
    }
}
