//! Storing an inode's block map from its extent map: the extent tree rewritten from the
//! first changed leaf on (tree blocks reused, added or freed at the end, i_blocks
//! following), or the direct and indirect blocks of an inode without extents.

use super::InodeState;
use crate::alloc::Allocator;
use crate::buf::BufCache;
use crate::disk::blockmap;
use crate::disk::extent::{self, Extent, Node};
use crate::disk::inode::FL_EXTENTS;
use crate::disk::seal::Seal;
use crate::error::{Error, Result};
use crate::extmap::ExtentMap;
use crate::journal::Handle;

/// Rewrite the on-disk extent tree from the extent map, reusing tree blocks.
/// Adjusts i_blocks for tree blocks gained or freed.
pub fn store_tree(
    al: &Allocator,
    bufs: &BufCache,
    h: &Handle,
    ino: u64,
    st: &mut InodeState,
) -> Result<()> {
    let Some(map) = st.ext.as_ref() else {
        return Ok(());
    };
    if st.d.flags() & FL_EXTENTS == 0 {
        let exts: Vec<Extent> = map.extents().copied().collect();
        return store_block_map(al, bufs, h, st, &exts);
    }
    let cap = extent::block_capacity(al.geo.bs as usize);
    let n = map.len();
    let levels = tree_levels(n, cap, ino);
    let need: usize = levels.iter().sum();
    let goal = map.extents().next().map_or(0, |e| e.pblk);
    // Leaves are packed full from the first extent, so the extents before the first
    // change are where the last store wrote them, in the same blocks (blocks are only
    // added or dropped at the end): the leaves before it are kept, the leaf it falls in
    // is rewritten from it on in place, the later leaves whole. An append rewrites the
    // entries it adds, not the file's tree. (Not in that layout, as loaded: all of it.)
    let dirty_from = map.dirty_from();
    let first = if st.leaf_keys.is_empty() {
        0
    } else {
        n - map.range_from(dirty_from).count()
    };
    let blocks = resize_tree_blocks(al, h, st, need, goal)?;
    let Some(map) = st.ext.as_ref() else {
        return Ok(());
    };
    let w = TreeWriter {
        al,
        bufs,
        h,
        ino,
        seed: st.d.csum_seed(al.geo.seed, ino as u32),
        cap,
    };
    let root = if levels.is_empty() {
        st.leaf_keys.clear();
        Node::Leaf(map.extents().copied().collect())
    } else {
        let from = if first == 0 { 0 } else { dirty_from };
        let leaves = w.write_leaves(map, &mut st.leaf_keys, &blocks[..levels[0]], first, from)?;
        w.write_index_levels(&levels, &blocks, leaves)
    };
    extent::encode_node(st.d.iblock_mut(), &root);
    if let Some(map) = st.ext.as_mut() {
        map.mark_stored();
    }
    st.ext_dirty = false;
    Ok(())
}

/// The tree's level sizes bottom-up for `n` extents, `cap` entries to a tree block:
/// leaves hold extents, each upper level the pointers to the one below; none when the
/// extents fit the inode's root (four). Not deeper than the format (and readers: `walk`)
/// allows.
fn tree_levels(n: usize, cap: usize, ino: u64) -> Vec<usize> {
    let mut levels: Vec<usize> = Vec::new();
    let mut m = n;
    while m > 4 {
        m = m.div_ceil(cap);
        levels.push(m);
    }
    debug_assert!(
        levels.len() <= usize::from(extent::MAX_DEPTH),
        "inode {ino}: a tree of {levels:?} nodes for {n} extents"
    );
    levels
}

/// What writing one inode's tree blocks needs: the allocator (geometry, checksums), the
/// buffers and handle they are dirtied in, the inode (named in errors) and its checksum
/// seed, and how many entries a tree block holds.
struct TreeWriter<'a> {
    al: &'a Allocator,
    bufs: &'a BufCache,
    h: &'a Handle<'a>,
    ino: u64,
    seed: u32,
    cap: usize,
}

impl TreeWriter<'_> {
    /// Write the leaves into `blocks` (one each) from extent index `first` on: the leaves
    /// before its leaf are kept as they are, the leaf it falls in is rewritten from it on
    /// in place, the later ones whole, from the map's extents from logical block `from`.
    /// Records every leaf's first logical block in `leaf_keys` and returns the leaves as
    /// (first logical block, block) for the level above.
    fn write_leaves(
        &self,
        map: &ExtentMap,
        leaf_keys: &mut Vec<u32>,
        blocks: &[u64],
        first: usize,
        from: u32,
    ) -> Result<Vec<(u32, u64)>> {
        let (ino, cap) = (self.ino, self.cap);
        let (keep, off) = (first / cap, first % cap);
        debug_assert!(keep <= leaf_keys.len() && keep <= blocks.len());
        // Children of the current level: (first logical block, block number).
        let mut children: Vec<(u32, u64)> = (0..keep).map(|i| (leaf_keys[i], blocks[i])).collect();
        let mut rest = map.range_from(from).copied();
        let mut chunk = Vec::with_capacity(cap);
        for (j, &blk) in blocks.iter().enumerate().skip(keep) {
            chunk.clear();
            if j == keep && off > 0 {
                chunk.extend(rest.by_ref().take(cap - off));
                children.push((leaf_keys[j], blk));
                self.rewrite_leaf_tail(blk, off, &chunk)?;
                continue;
            }
            chunk.extend(rest.by_ref().take(cap));
            debug_assert!(!chunk.is_empty(), "inode {ino}: a leaf without extents");
            children.push((chunk[0].lblk, blk));
            let leaf = Node::Leaf(std::mem::take(&mut chunk));
            write_tree_block(self.bufs, self.h, blk, &leaf, self.seed, self.al.geo.csum);
        }
        debug_assert!(
            rest.next().is_none(),
            "inode {ino}: extents left past the leaves"
        );
        leaf_keys.clear();
        leaf_keys.extend(children.iter().map(|c| c.0));
        // Leaves in logical order, each starting at its first extent: what the index
        // keys say and a lookup's binary search needs.
        debug_assert!(
            leaf_keys.windows(2).all(|w| w[0] < w[1]),
            "inode {ino}: leaf keys out of order"
        );
        Ok(children)
    }

    /// Rewrite leaf block `blk` from entry `off` on with `tail` (its first `off` entries
    /// are kept), checking a leaf read back since the last store first.
    fn rewrite_leaf_tail(&self, blk: u64, off: usize, tail: &[Extent]) -> Result<()> {
        // Entries kept and rewritten share one leaf.
        debug_assert!(off + tail.len() <= self.cap, "leaf {blk} overfull");
        let csum = self.al.geo.csum;
        let b = self.bufs.get(blk)?;
        let mut data = b.write();
        // Read back since the last store (the cache dropped it): checked first.
        if csum && !b.is_verified() {
            extent::verify_block_csum(self.seed, &data, blk)?;
        }
        extent::rewrite_leaf_tail(&mut data, off, tail, blk)?;
        if csum {
            b.set_seal(Seal::ExtentBlock(self.seed));
        }
        drop(data);
        self.h.dirty(&b);
        Ok(())
    }

    /// Write the index levels above the leaves (`children`) into the blocks after the
    /// leaves' in `blocks`, level by level, and return the root that points to the top
    /// level (held in the inode's `i_block`).
    fn write_index_levels(
        &self,
        levels: &[usize],
        blocks: &[u64],
        mut children: Vec<(u32, u64)>,
    ) -> Node {
        let cap = self.cap;
        let mut next = levels[0];
        for (depth, &count) in levels.iter().enumerate().skip(1) {
            let mut nodes = Vec::with_capacity(count);
            for i in 0..count {
                let blk = blocks[next];
                next += 1;
                let chunk = &children[i * cap..((i + 1) * cap).min(children.len())];
                nodes.push((chunk[0].0, blk));
                let idx = chunk
                    .iter()
                    .map(|&(l, c)| extent::Index { lblk: l, child: c })
                    .collect();
                let node = Node::Index(depth as u16, idx);
                write_tree_block(self.bufs, self.h, blk, &node, self.seed, self.al.geo.csum);
            }
            children = nodes;
        }
        // Every tree block holds a node, and the top level fits the inode's root.
        debug_assert_eq!(next, blocks.len(), "inode {}: tree blocks", self.ino);
        debug_assert!(
            children.len() <= 4,
            "inode {}: a root of {}",
            self.ino,
            children.len()
        );
        let idx = children
            .iter()
            .map(|&(l, c)| extent::Index { lblk: l, child: c })
            .collect();
        Node::Index(levels.len() as u16, idx)
    }
}

/// Rewrite a block-mapped inode's `i_block` and indirect blocks from its extent map:
/// indirect blocks no longer needed are freed, missing ones allocated near the data they
/// map, and only blocks whose bytes change are dirtied. Adjusts i_blocks.
fn store_block_map(
    al: &Allocator,
    bufs: &BufCache,
    h: &Handle,
    st: &mut InodeState,
    runs: &[Extent],
) -> Result<()> {
    let bs = al.geo.bs as usize;
    if !blockmap::fits(runs, bs) {
        return Err(Error::FileTooBig);
    }
    let spb = u64::from(al.geo.bs / 512);
    let need = blockmap::needed(runs, bs);
    let keep: std::collections::HashSet<_> = need.iter().copied().collect();
    let gone: Vec<_> = st
        .ind
        .keys()
        .filter(|k| !keep.contains(k))
        .copied()
        .collect();
    for k in gone {
        if let Some(p) = st.ind.remove(&k) {
            al.free_blocks_range(h, p, 1, true)?;
            let cur = st.d.blocks_512(al.geo.bs);
            st.d.set_blocks_512(cur.saturating_sub(spb), al.geo.bs);
        }
    }
    for k in need {
        if st.ind.contains_key(&k) {
            continue;
        }
        let i = runs.partition_point(|e| e.lend() <= k.base);
        let goal = runs
            .get(i)
            .map_or(0, |e| e.pblk + k.base.saturating_sub(u64::from(e.lblk)));
        let (p, _) = al.alloc_blocks(h, goal, 1)?;
        st.ind.insert(k, p);
        let cur = st.d.blocks_512(al.geo.bs);
        st.d.set_blocks_512(cur + spb, al.geo.bs);
    }
    let (iblock, blocks) = blockmap::encode(runs, &st.ind, bs);
    for (blk, fresh) in blocks {
        let b = bufs.get_new_keep(blk);
        let mut data = b.write();
        if data[..] != fresh[..] {
            data.copy_from_slice(&fresh);
            drop(data);
            h.dirty(&b);
        }
    }
    st.d.iblock_mut().copy_from_slice(&iblock);
    st.ext_dirty = false;
    Ok(())
}

fn write_tree_block(bufs: &BufCache, h: &Handle, blk: u64, node: &Node, seed: u32, csum: bool) {
    let b = bufs.get_new_keep(blk);
    let mut data = b.write();
    // Its checksum is stamped when a commit logs it (`Seal::ExtentBlock`): the tail in
    // memory may be stale, so it is left out of the comparison.
    if csum {
        b.set_seal(Seal::ExtentBlock(seed));
    }
    let mut fresh = vec![0u8; data.len()];
    extent::encode_block(&mut fresh, node);
    let body = extent::tail_offset(data.len());
    if data[..body] != fresh[..body] {
        data[..body].copy_from_slice(&fresh[..body]);
        drop(data);
        h.dirty(&b);
    }
}

/// Grow or shrink the set of tree blocks to `need`, adjusting i_blocks.
fn resize_tree_blocks(
    al: &Allocator,
    h: &Handle,
    st: &mut InodeState,
    need: usize,
    goal: u64,
) -> Result<Vec<u64>> {
    let spb = u64::from(al.geo.bs / 512);
    while st.tree_blocks.len() > need {
        if let Some(b) = st.tree_blocks.pop() {
            al.free_blocks_range(h, b, 1, true)?;
            let cur = st.d.blocks_512(al.geo.bs);
            st.d.set_blocks_512(cur.saturating_sub(spb), al.geo.bs);
        }
    }
    while st.tree_blocks.len() < need {
        let (b, _) = al.alloc_blocks(h, goal, 1)?;
        st.tree_blocks.push(b);
        let cur = st.d.blocks_512(al.geo.bs);
        st.d.set_blocks_512(cur + spb, al.geo.bs);
    }
    Ok(st.tree_blocks.clone())
}
