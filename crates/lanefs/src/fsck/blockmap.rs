//! Pass 1: block maps (extent trees and indirect blocks), each block claimed once.

use super::*;

impl Checker<'_> {
    pub(super) fn walk_blocks(
        &mut self,
        ino: u32,
        inode: &DiskInode,
        collect: bool,
    ) -> Result<Walk> {
        debug_assert!(
            ino >= 1 && u64::from(ino) <= self.geo.inodes(),
            "walk of inode {ino}"
        );
        let mut w = Walk {
            ino,
            seed: inode.csum_seed(self.geo.seed, ino),
            collect,
            rt: self.is_rt(inode),
            ..Walk::default()
        };
        if inode.flags() & FL_EXTENTS != 0 {
            let root = inode.iblock().to_vec();
            self.extent_node(&mut w, &root, None, None, (0, 1 << 32))?;
        } else {
            self.walk_indirect(&mut w, inode)?;
        }
        Ok(w)
    }

    pub(super) fn bad_block(&mut self, w: &mut Walk, what: &str, blk: u64) {
        w.bad += 1;
        if w.bad > MAX_BAD_BLOCKS {
            if !w.aborted {
                self.out.add("INODE_TOO_MANY_BAD_BLOCKS", format!("inode {}: more than {MAX_BAD_BLOCKS} invalid blocks, rest of the map skipped", w.ino));
            }
            w.aborted = true;
            return;
        }
        self.out.add(
            "BLOCK_OUT_OF_RANGE",
            format!("inode {}: {what} {blk} is outside the file system", w.ino),
        );
    }

    /// Record `len` data blocks at logical `lblk`, physical `pblk` (already range-checked).
    pub(super) fn map_data(&mut self, w: &mut Walk, lblk: u64, pblk: u64, len: u64, init: bool) {
        // Callers range-check first: a claim past the end would count blocks not there.
        debug_assert!(len >= 1, "empty run at {pblk}");
        debug_assert!(
            w.rt || self.geo.in_fs(pblk, len),
            "unchecked run {pblk}+{len}"
        );
        if w.rt {
            if let Some(rt) = self.rt.as_mut() {
                rt.claims.push((pblk, len, w.ino));
            }
        } else if w.ino == BADBLOCKS_INO {
            for b in pblk..pblk + len {
                if !self.claims.is_used(b) {
                    self.claims.claim(b, 1, Owner::Inode(w.ino));
                }
            }
        } else if self.claims.claim(pblk, len, Owner::Inode(w.ino)) > 0 {
            // Bound the claim log: an inode re-claiming blocks this often is garbage.
            w.conflicts += 1;
            if w.conflicts > MAX_CONFLICTS_PER_INODE && !w.aborted {
                w.aborted = true;
                let msg = format!(
                    "inode {}: more than {MAX_CONFLICTS_PER_INODE} extents overlap other owners, rest of the map skipped",
                    w.ino
                );
                self.out.add("INODE_TOO_MANY_BAD_BLOCKS", msg);
            }
        }
        w.blocks += len;
        let last = lblk + len - 1;
        w.last_lblk = Some(w.last_lblk.map_or(last, |l| l.max(last)));
        if init {
            w.last_init = Some(w.last_init.map_or(last, |l| l.max(last)));
        }
        if !w.collect {
            return;
        }
        w.mapped += len;
        if w.mapped > self.geo.blocks {
            if w.mapped - len <= self.geo.blocks {
                self.out.add(
                    "DIR_TOO_BIG",
                    format!("inode {}: maps more blocks than the file system has", w.ino),
                );
            }
            return;
        }
        match w.runs.last_mut() {
            Some(r) if r.lblk + r.len == lblk && r.pblk + r.len == pblk => r.len += len,
            _ => w.runs.push(Run { lblk, pblk, len }),
        }
    }

    pub(super) fn extent_node(
        &mut self,
        w: &mut Walk,
        buf: &[u8],
        at: Option<u64>,
        want_depth: Option<u16>,
        range: (u64, u64),
    ) -> Result<()> {
        debug_assert!(range.0 <= range.1, "index range {range:?}");
        let place = at.map_or("i_block".to_string(), |b| format!("block {b}"));
        let node = match extent::decode_node(buf, at.unwrap_or(0)) {
            Ok(n) => n,
            Err(e) => {
                self.out.add(
                    "EXTENT_BAD_HEADER",
                    format!("inode {}: extent node in {place}: {e}", w.ino),
                );
                w.bad += 1;
                return Ok(());
            }
        };
        let cap = if at.is_some() {
            extent::block_capacity(buf.len())
        } else {
            extent::node_capacity(buf.len())
        };
        if usize::from(le16(buf, 4)) + 2 < cap {
            self.out.add(
                "EXTENT_BAD_HEADER",
                format!(
                    "inode {}: extent node in {place}: max entries {} below capacity {cap}",
                    w.ino,
                    le16(buf, 4)
                ),
            );
        }
        let depth = match &node {
            Node::Leaf(_) => 0,
            Node::Index(d, _) => *d,
        };
        if want_depth.is_some_and(|d| d != depth) {
            self.out.add(
                "EXTENT_BAD_DEPTH",
                format!(
                    "inode {}: extent node in {place} has depth {depth}, expected {}",
                    w.ino,
                    want_depth.unwrap_or(0)
                ),
            );
            return Ok(());
        }
        if let (Some(b), true) = (at, self.geo.csum) {
            if let Err(e) = extent::verify_block_csum(w.seed, buf, b) {
                self.out
                    .add("EXTENT_CHECKSUM", format!("inode {}: {e}", w.ino));
            }
        }
        match node {
            Node::Leaf(v) => v.iter().for_each(|e| self.leaf_extent(w, e, range)),
            Node::Index(d, v) => {
                for (i, ix) in v.iter().enumerate() {
                    let next = v.get(i + 1).map_or(range.1, |n| u64::from(n.lblk));
                    self.index_entry(w, ix, d, (u64::from(ix.lblk), next), range)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn leaf_extent(&mut self, w: &mut Walk, e: &Extent, range: (u64, u64)) {
        if w.aborted {
            return;
        }
        let len = u64::from(e.len);
        if u64::from(e.lblk) < range.0 || e.lend() > range.1 {
            self.out.add(
                "EXTENT_OUT_OF_ORDER",
                format!(
                    "inode {}: extent at logical {} (+{len}) outside its index range {}..{}",
                    w.ino, e.lblk, range.0, range.1
                ),
            );
            return;
        }
        let in_range = match (&self.rt, w.rt) {
            (Some(rt), true) => rt.in_device(e.pblk, len),
            _ => self.geo.in_fs(e.pblk, len),
        };
        if !in_range {
            let what = if w.rt {
                "extent at rt device block"
            } else {
                "extent at block"
            };
            self.bad_block(w, what, e.pblk);
            return;
        }
        self.map_data(w, u64::from(e.lblk), e.pblk, len, !e.unwritten);
    }

    pub(super) fn index_entry(
        &mut self,
        w: &mut Walk,
        ix: &Index,
        depth: u16,
        child: (u64, u64),
        range: (u64, u64),
    ) -> Result<()> {
        if w.aborted {
            return Ok(());
        }
        if child.0 < range.0 || child.0 >= range.1 {
            self.out.add(
                "EXTENT_OUT_OF_ORDER",
                format!(
                    "inode {}: index key {} outside its range {}..{}",
                    w.ino, child.0, range.0, range.1
                ),
            );
            return Ok(());
        }
        if !self.geo.in_fs(ix.child, 1) {
            self.bad_block(w, "extent tree block", ix.child);
            return Ok(());
        }
        debug_assert!(depth >= 1, "index entry in a leaf");
        w.blocks += 1;
        // A block already claimed is not descended into: the duplicate is reported, and
        // every tree block being read at most once bounds the walk.
        if self.claims.claim(ix.child, 1, Owner::Inode(w.ino)) > 0 {
            return Ok(());
        }
        let b = self.read_block(ix.child)?;
        let first_key = u64::from(le32(&b, 12));
        if le16(&b, 0) == extent::EXT_MAGIC && le16(&b, 2) > 0 && first_key != child.0 {
            self.out.add(
                "EXTENT_INDEX_START",
                format!(
                    "inode {}: index key {} but child block {} starts at {first_key}",
                    w.ino, child.0, ix.child
                ),
            );
        }
        self.extent_node(w, &b, Some(ix.child), Some(depth.saturating_sub(1)), child)
    }

    /// Walk a classic block map: 12 direct pointers, then single, double, triple indirect.
    pub(super) fn walk_indirect(&mut self, w: &mut Walk, inode: &DiskInode) -> Result<()> {
        for i in 0..bmap::NDIR {
            self.map_pointer(w, i as u64, u64::from(inode.iblock_ptr(i)));
        }
        let per = self.geo.block_bytes() / 4;
        let mut lblk = bmap::NDIR as u64;
        for level in 1..=3u32 {
            let b = u64::from(inode.iblock_ptr(bmap::IND_SLOT + level as usize - 1));
            if b != 0 {
                self.indirect(w, b, level, lblk)?;
            }
            lblk += per.pow(level);
        }
        Ok(())
    }

    pub(super) fn map_pointer(&mut self, w: &mut Walk, lblk: u64, pblk: u64) {
        if pblk == 0 || w.aborted {
            return;
        }
        if !self.geo.in_fs(pblk, 1) {
            self.bad_block(w, "block", pblk);
            return;
        }
        self.map_data(w, lblk, pblk, 1, true);
    }

    pub(super) fn indirect(&mut self, w: &mut Walk, blk: u64, level: u32, lblk: u64) -> Result<()> {
        if w.aborted {
            return Ok(());
        }
        if !self.geo.in_fs(blk, 1) {
            self.bad_block(w, "indirect block", blk);
            return Ok(());
        }
        w.blocks += 1;
        if self.claims.claim(blk, 1, Owner::Inode(w.ino)) > 0 {
            return Ok(());
        }
        debug_assert!((1..=3).contains(&level), "indirect level {level}");
        let b = self.read_block(blk)?;
        let per = self.geo.block_bytes() / 4;
        let span = per.pow(level - 1);
        for i in 0..per {
            let p = u64::from(le32(&b, (4 * i) as usize));
            if p == 0 {
                continue;
            }
            if level == 1 {
                self.map_pointer(w, lblk + i, p);
            } else {
                self.indirect(w, p, level - 1, lblk + i * span)?;
            }
        }
        Ok(())
    }
}
