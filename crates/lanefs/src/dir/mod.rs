//! Directories: linear and hashed-index (htree, dir_index) lookup, insert, remove and
//! readdir. Called with the directory inode's state lock held for writing (or reading
//! for lookup/readdir) inside a handle; blocks go through the metadata buffer cache.
//!
//! readdir walks entries in hash order, so its cursor stays valid while entries move
//! between blocks when a leaf splits: the cursor of an entry is `3 + (major>>1)<<32 | minor`
//! (0 = start, 1 = after ".", 3 = after "..").

use crate::alloc::Allocator;
use crate::buf::{Buf, BufCache};
use crate::disk::dir::{self as dd, DxRootInfo, RawEntry, DX_NODE_COUNT_OFF, DX_ROOT_COUNT_OFF};
use crate::disk::extent::Extent;
use crate::disk::hash::dirhash;
use crate::disk::inode::FL_INDEX;
use crate::error::{Error, Result};
use crate::extmap::Mapping;
use crate::inode::InodeState;
use crate::journal::Handle;
use crate::types::{DirEntry, FileType};
use std::sync::Arc;

mod inline;

/// What directory code needs from the mount.
pub struct DirCtx<'a> {
    /// Allocator (for new directory blocks).
    pub al: &'a Allocator,
    /// Inode allocation (inode table locations).
    pub ial: &'a crate::ialloc::InodeAllocator,
    /// Metadata cache.
    pub bufs: &'a BufCache,
    /// Superblock hash seed.
    pub seed: [u32; 4],
    /// Superblock says unsigned-char hashes.
    pub unsigned: bool,
    /// Default hash version for new indexes.
    pub def_hash: u8,
    /// dir_index feature on: grow directories into htrees.
    pub dir_index: bool,
    /// filetype feature on: entries record their inode's type (else the byte is 0, the
    /// high byte of a 16-bit name length, as ext2 without filetype has it).
    pub filetype: bool,
    /// inline_data feature on: new directories start in their inode.
    pub inline_data: bool,
    /// extent feature on: directories leaving their inode become extent-mapped.
    pub extents: bool,
}

/// Where an entry lives.
struct Slot {
    buf: Arc<Buf>,
    off: usize,
    prev: Option<usize>,
    ino: u32,
    ft: u8,
}

impl DirCtx<'_> {
    fn bs(&self) -> usize {
        self.al.geo.bs as usize
    }
    fn csum(&self) -> bool {
        self.al.geo.csum
    }
    fn iseed(&self, ino: u64, st: &InodeState) -> u32 {
        st.d.csum_seed(self.al.geo.seed, ino as u32)
    }
    fn hash_version(&self, root: &DxRootInfo) -> u8 {
        root.hash_version
            + if self.unsigned && root.hash_version < 3 {
                3
            } else {
                0
            }
    }
    fn hash(&self, name: &[u8], version: u8) -> (u32, u32) {
        dirhash(name, version, &self.seed)
    }
    fn nblocks(&self, st: &InodeState) -> u32 {
        (st.d.size() / self.bs() as u64) as u32
    }

    /// The buffer of logical block `lblk` of the directory.
    fn block(&self, st: &InodeState, ino: u64, lblk: u32) -> Result<Arc<Buf>> {
        let ext = st
            .ext
            .as_ref()
            .ok_or_else(|| Error::corrupt("directory", ino, "extents not loaded"))?;
        match ext.map(lblk) {
            Mapping::Mapped(p, false, _) => self.bufs.get(p),
            _ => Err(Error::corrupt(
                "directory",
                ino,
                format!("block {lblk} is a hole"),
            )),
        }
    }

    /// A leaf block, verified.
    fn leaf(&self, st: &InodeState, ino: u64, lblk: u32) -> Result<(Arc<Buf>, Vec<RawEntry>)> {
        let b = self.block(st, ino, lblk)?;
        let entries = {
            let d = b.read();
            if self.csum() {
                dd::verify_leaf_csum(self.iseed(ino, st), &d, b.blk)?;
            }
            dd::parse_block(&d, self.csum(), b.blk)?
        };
        Ok((b, entries))
    }

    /// Whether the directory is read and written as an htree.
    pub fn is_htree(&self, st: &InodeState) -> bool {
        st.d.flags() & FL_INDEX != 0 && self.dir_index
    }

    /// Find `name`: (inode, file type code).
    pub fn lookup(&self, ino: u64, st: &InodeState, name: &[u8]) -> Result<Option<(u64, u8)>> {
        if self.is_inline(st) {
            return self.inline_lookup(ino, st, name);
        }
        Ok(self.find(ino, st, name)?.map(|s| (u64::from(s.ino), s.ft)))
    }

    fn find(&self, ino: u64, st: &InodeState, name: &[u8]) -> Result<Option<Slot>> {
        let leaves = if self.is_htree(st) {
            self.htree_candidates(ino, st, name)?
        } else {
            (0..self.nblocks(st)).collect()
        };
        for lblk in leaves {
            let b = self.block(st, ino, lblk)?;
            let hit = {
                let d = b.read();
                if self.csum() {
                    dd::verify_leaf_csum(self.iseed(ino, st), &d, b.blk)?;
                }
                dd::search_block(&d, self.csum(), b.blk, name)?
            };
            if let Some(h) = hit {
                return Ok(Some(Slot {
                    buf: b,
                    off: h.off,
                    prev: h.prev,
                    ino: h.ino,
                    ft: h.ft,
                }));
            }
        }
        Ok(None)
    }

    /// Leaves that may hold `name`: the probed leaf and hash-collision continuations.
    fn htree_candidates(&self, ino: u64, st: &InodeState, name: &[u8]) -> Result<Vec<u32>> {
        let root = self.read_root(ino, st)?;
        let (h, _) = self.hash(name, self.hash_version(&root.0));
        let path = self.probe(ino, st, &root, h)?;
        let mut out = vec![path.leaf];
        // Follow continuation leaves: the next index entry with the same hash (low bit set).
        let (node_entries, pos) = path.last_level();
        for &(nh, blk) in node_entries.iter().skip(pos + 1) {
            if nh & !1 != h {
                break;
            }
            out.push(blk);
        }
        Ok(out)
    }

    fn read_root(
        &self,
        ino: u64,
        st: &InodeState,
    ) -> Result<(DxRootInfo, dd::DxEntries, Arc<Buf>)> {
        let b = self.block(st, ino, 0)?;
        let d = b.read();
        let info = dd::decode_root_info(&d, b.blk)?;
        if self.csum() {
            dd::verify_dx_csum(self.iseed(ino, st), &d, DX_ROOT_COUNT_OFF, b.blk)?;
        }
        let e = dd::decode_dx(&d, DX_ROOT_COUNT_OFF, self.csum(), b.blk)?;
        drop(d);
        Ok((info, e, b))
    }

    fn read_node(&self, ino: u64, st: &InodeState, lblk: u32) -> Result<(dd::DxEntries, Arc<Buf>)> {
        let b = self.block(st, ino, lblk)?;
        let d = b.read();
        if self.csum() {
            dd::verify_dx_csum(self.iseed(ino, st), &d, DX_NODE_COUNT_OFF, b.blk)?;
        }
        let e = dd::decode_dx(&d, DX_NODE_COUNT_OFF, self.csum(), b.blk)?;
        drop(d);
        Ok((e, b))
    }

    /// Walk the index to the leaf for hash `h`.
    fn probe(
        &self,
        ino: u64,
        st: &InodeState,
        root: &(DxRootInfo, dd::DxEntries, Arc<Buf>),
        h: u32,
    ) -> Result<Path> {
        let mut levels = Vec::new();
        let mut entries = root.1.entries.clone();
        let mut blk_lblk = 0u32;
        let nb = self.nblocks(st);
        for depth in 0..=root.0.indirect_levels {
            let pos = entries
                .partition_point(|&(eh, _)| eh <= h)
                .saturating_sub(1);
            let child = entries[pos].1;
            if child >= nb || child == 0 {
                return Err(Error::corrupt(
                    "directory index",
                    ino,
                    format!("child block {child} out of range"),
                ));
            }
            levels.push(Level {
                lblk: blk_lblk,
                entries: entries.clone(),
                pos,
            });
            if depth == root.0.indirect_levels {
                return Ok(Path {
                    levels,
                    leaf: child,
                });
            }
            let (n, _) = self.read_node(ino, st, child)?;
            entries = n.entries;
            blk_lblk = child;
        }
        Err(Error::corrupt(
            "directory index",
            ino,
            "index deeper than its root says",
        ))
    }

    /// Add `name` -> `child` (the caller checked it is absent).
    pub fn add(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        child: u64,
        ft: u8,
    ) -> Result<()> {
        if name.len() > 255 {
            return Err(Error::NameTooLong);
        }
        let ft = if self.filetype { ft } else { 0 };
        if self.is_inline(st) {
            if self.inline_add(ino, st, name, child, ft)? {
                return Ok(());
            }
            self.uninline(h, ino, st)?;
        }
        if self.is_htree(st) {
            return self.htree_add(h, ino, st, name, child, ft);
        }
        let nb = self.nblocks(st);
        for lblk in 0..nb {
            let b = self.block(st, ino, lblk)?;
            if self.try_insert(h, ino, st, &b, name, child, ft)? {
                return Ok(());
            }
        }
        if self.dir_index && nb == 1 {
            self.make_indexed(h, ino, st)?;
            return self.htree_add(h, ino, st, name, child, ft);
        }
        let b = self.append_block(h, ino, st)?;
        self.init_leaf(h, ino, st, &b);
        if !self.try_insert(h, ino, st, &b, name, child, ft)? {
            return Err(Error::corrupt(
                "directory",
                ino,
                "entry does not fit an empty block",
            ));
        }
        Ok(())
    }

    /// Put `name -> child` into leaf block `b` in place if it has room (verified first,
    /// as a read of the leaf is).
    #[allow(clippy::too_many_arguments)]
    fn try_insert(
        &self,
        h: &Handle,
        ino: u64,
        st: &InodeState,
        b: &Arc<Buf>,
        name: &[u8],
        child: u64,
        ft: u8,
    ) -> Result<bool> {
        let mut d = b.write();
        if self.csum() {
            dd::verify_leaf_csum(self.iseed(ino, st), &d, b.blk)?;
        }
        if !dd::insert_in_block(&mut d, self.csum(), b.blk, name, child as u32, ft)? {
            return Ok(false);
        }
        if self.csum() {
            dd::set_leaf_csum(self.iseed(ino, st), &mut d);
        }
        drop(d);
        h.dirty(b);
        Ok(true)
    }

    fn init_leaf(&self, h: &Handle, ino: u64, st: &InodeState, b: &Arc<Buf>) {
        let mut d = b.write();
        dd::init_empty_leaf(&mut d, self.csum());
        if self.csum() {
            dd::set_leaf_csum(self.iseed(ino, st), &mut d);
        }
        drop(d);
        h.dirty(b);
    }

    /// Grow the directory by one block; returns its buffer (zeroed, not yet formatted).
    fn append_block(&self, h: &Handle, ino: u64, st: &mut InodeState) -> Result<Arc<Buf>> {
        let lblk = self.nblocks(st);
        let ext = st
            .ext
            .as_mut()
            .ok_or_else(|| Error::corrupt("directory", ino, "extents not loaded"))?;
        let goal = ext
            .goal_for(lblk)
            .unwrap_or_else(|| self.al.geo.group_first(self.al.geo.group_of_inode(ino)));
        let (p, _) = self.al.alloc_blocks(h, goal, 1)?;
        ext.insert(Extent {
            lblk,
            len: 1,
            pblk: p,
            unwritten: false,
        });
        st.ext_dirty = true;
        let bs = self.bs() as u64;
        st.d.set_size(st.d.size() + bs);
        let sectors = st.d.blocks_512(self.al.geo.bs) + bs / 512;
        st.d.set_blocks_512(sectors, self.al.geo.bs);
        Ok(self.bufs.get_new(p))
    }

    /// Turn a full one-block linear directory into an htree: entries move to block 1,
    /// block 0 becomes the index root.
    fn make_indexed(&self, h: &Handle, ino: u64, st: &mut InodeState) -> Result<()> {
        let (b0, entries) = self.leaf(st, ino, 0)?;
        if entries.len() < 2 || entries[0].name != b"." || entries[1].name != b".." {
            return Err(Error::corrupt(
                "directory",
                ino,
                "first block lacks . and ..",
            ));
        }
        let parent = entries[1].ino;
        let b1 = self.append_block(h, ino, st)?;
        let live: Vec<&RawEntry> = entries[2..].iter().filter(|e| e.ino != 0).collect();
        self.write_leaf(h, ino, st, &b1, &live);
        let info = DxRootInfo {
            hash_version: self.def_hash % 3,
            indirect_levels: 0,
        };
        let mut d = b0.write();
        let dot_ft = if self.filetype { 2 } else { 0 };
        dd::init_dx_root(&mut d, ino as u32, parent, info, dot_ft);
        let limit = dd::dx_limit(self.bs(), DX_ROOT_COUNT_OFF, self.csum());
        dd::encode_dx(&mut d, DX_ROOT_COUNT_OFF, limit, &[(0, 1)]);
        if self.csum() {
            dd::set_dx_csum(self.iseed(ino, st), &mut d, DX_ROOT_COUNT_OFF);
        }
        drop(d);
        h.dirty(&b0);
        st.d.set_flags(st.d.flags() | FL_INDEX);
        Ok(())
    }

    /// Rewrite a leaf block with `entries` packed in order.
    fn write_leaf(
        &self,
        h: &Handle,
        ino: u64,
        st: &InodeState,
        b: &Arc<Buf>,
        entries: &[&RawEntry],
    ) {
        let mut d = b.write();
        dd::init_empty_leaf(&mut d, self.csum());
        let end = dd::entries_end(self.bs(), self.csum());
        let mut off = 0;
        for (i, e) in entries.iter().enumerate() {
            let len = if i + 1 == entries.len() {
                end - off
            } else {
                dd::rec_len_for(e.name.len())
            };
            dd::put_entry(&mut d, off, e.ino, len, e.ft, &e.name);
            off += len;
        }
        if self.csum() {
            dd::set_leaf_csum(self.iseed(ino, st), &mut d);
        }
        drop(d);
        h.dirty(b);
    }

    fn htree_add(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        child: u64,
        ft: u8,
    ) -> Result<()> {
        let root = self.read_root(ino, st)?;
        let version = self.hash_version(&root.0);
        let (hash, _) = self.hash(name, version);
        let path = self.probe(ino, st, &root, hash)?;
        let b = self.block(st, ino, path.leaf)?;
        if self.try_insert(h, ino, st, &b, name, child, ft)? {
            return Ok(());
        }
        let (b, entries) = self.leaf(st, ino, path.leaf)?;
        // Split the leaf by hash: the upper half moves to a new block.
        let mut live: Vec<(u32, u32, RawEntry)> = entries
            .into_iter()
            .filter(|e| e.ino != 0)
            .map(|e| {
                let (a, m) = self.hash(&e.name, version);
                (a, m, e)
            })
            .collect();
        live.sort_by_key(|x| (x.0, x.1));
        let split = live.len() / 2;
        let split = adjust_split(&live, split);
        let hash2 = live.get(split).map_or(hash, |x| x.0);
        let continued = split > 0 && live.get(split).is_some_and(|x| x.0 == live[split - 1].0);
        let new_lblk = self.nblocks(st);
        let nb = self.append_block(h, ino, st)?;
        let lower: Vec<&RawEntry> = live[..split].iter().map(|x| &x.2).collect();
        let upper: Vec<&RawEntry> = live[split..].iter().map(|x| &x.2).collect();
        self.write_leaf(h, ino, st, &b, &lower);
        self.write_leaf(h, ino, st, &nb, &upper);
        self.insert_index(h, ino, st, &path, hash2 | u32::from(continued), new_lblk)?;
        let target = if hash >= hash2 && !upper.is_empty() {
            &nb
        } else {
            &b
        };
        if self.try_insert(h, ino, st, target, name, child, ft)? {
            return Ok(());
        }
        // The chosen half is still full (long names): retry from the top.
        self.htree_add(h, ino, st, name, child, ft)
    }

    /// Insert index entry (hash, leaf) after the path's position in the last level,
    /// splitting index nodes or adding a level when full.
    fn insert_index(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        path: &Path,
        hash: u32,
        leaf: u32,
    ) -> Result<()> {
        let depth = path.levels.len() - 1;
        let lvl = &path.levels[depth];
        let count_off = if depth == 0 {
            DX_ROOT_COUNT_OFF
        } else {
            DX_NODE_COUNT_OFF
        };
        let limit = dd::dx_limit(self.bs(), count_off, self.csum());
        let mut entries = lvl.entries.clone();
        entries.insert(lvl.pos + 1, (hash, leaf));
        if entries.len() <= limit {
            return self.write_dx(h, ino, st, lvl.lblk, count_off, &entries);
        }
        if depth == 0 {
            // Root full at one level: move its entries into a new node below it.
            if path.levels.len() > 1 {
                return Err(Error::NoSpace);
            }
            let node_lblk = self.nblocks(st);
            let nb = self.append_block(h, ino, st)?;
            {
                let mut d = nb.write();
                dd::init_dx_node(&mut d);
            }
            let nlimit = dd::dx_limit(self.bs(), DX_NODE_COUNT_OFF, self.csum());
            if entries.len() > nlimit {
                return Err(Error::NoSpace);
            }
            self.write_dx(h, ino, st, node_lblk, DX_NODE_COUNT_OFF, &entries)?;
            self.set_root_levels(h, ino, st, 1)?;
            return self.write_dx(h, ino, st, 0, DX_ROOT_COUNT_OFF, &[(0, node_lblk)]);
        }
        // Split a full node: the upper half moves to a new node, indexed from the root.
        let root_lvl = &path.levels[0];
        let root_limit = dd::dx_limit(self.bs(), DX_ROOT_COUNT_OFF, self.csum());
        if root_lvl.entries.len() >= root_limit {
            return Err(Error::NoSpace);
        }
        let half = entries.len() / 2;
        let upper = entries.split_off(half);
        let new_lblk = self.nblocks(st);
        let nb = self.append_block(h, ino, st)?;
        dd::init_dx_node(&mut nb.write());
        self.write_dx(h, ino, st, lvl.lblk, DX_NODE_COUNT_OFF, &entries)?;
        self.write_dx(h, ino, st, new_lblk, DX_NODE_COUNT_OFF, &upper)?;
        let mut r = root_lvl.entries.clone();
        r.insert(root_lvl.pos + 1, (upper[0].0, new_lblk));
        self.write_dx(h, ino, st, 0, DX_ROOT_COUNT_OFF, &r)
    }

    fn write_dx(
        &self,
        h: &Handle,
        ino: u64,
        st: &InodeState,
        lblk: u32,
        count_off: usize,
        entries: &[(u32, u32)],
    ) -> Result<()> {
        let b = self.block(st, ino, lblk)?;
        let limit = dd::dx_limit(self.bs(), count_off, self.csum());
        let mut d = b.write();
        dd::encode_dx(&mut d, count_off, limit, entries);
        if self.csum() {
            dd::set_dx_csum(self.iseed(ino, st), &mut d, count_off);
        }
        drop(d);
        h.dirty(&b);
        Ok(())
    }

    fn set_root_levels(&self, h: &Handle, ino: u64, st: &InodeState, levels: u8) -> Result<()> {
        let b = self.block(st, ino, 0)?;
        b.write()[0x1E] = levels;
        h.dirty(&b);
        Ok(())
    }

    /// Remove `name`; returns the inode it pointed to.
    pub fn remove(&self, h: &Handle, ino: u64, st: &mut InodeState, name: &[u8]) -> Result<u64> {
        if self.is_inline(st) {
            return self.inline_remove(ino, st, name);
        }
        let s = self.find(ino, st, name)?.ok_or(Error::NotFound)?;
        let mut d = s.buf.write();
        dd::remove_entry(&mut d, s.off, s.prev);
        if self.csum() {
            dd::set_leaf_csum(self.iseed(ino, st), &mut d);
        }
        drop(d);
        h.dirty(&s.buf);
        Ok(u64::from(s.ino))
    }

    /// Point existing entry `name` at `child` (rename over an existing target).
    pub fn replace(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        child: u64,
        ft: u8,
    ) -> Result<u64> {
        if self.is_inline(st) {
            let ft = if self.filetype { ft } else { 0 };
            return self.inline_replace(ino, st, name, child, ft);
        }
        let s = self.find(ino, st, name)?.ok_or(Error::NotFound)?;
        let mut d = s.buf.write();
        let ft = if self.filetype { ft } else { 0 };
        dd::retarget_entry(&mut d, s.off, child as u32, ft);
        if self.csum() {
            dd::set_leaf_csum(self.iseed(ino, st), &mut d);
        }
        drop(d);
        h.dirty(&s.buf);
        Ok(u64::from(s.ino))
    }

    /// Point ".." at `parent`.
    pub fn set_dotdot(&self, h: &Handle, ino: u64, st: &mut InodeState, parent: u64) -> Result<()> {
        if self.is_inline(st) {
            return self.inline_set_dotdot(ino, st, parent);
        }
        let b = self.block(st, ino, 0)?;
        let mut d = b.write();
        if !dd::set_dotdot(&mut d, parent as u32) {
            return Err(Error::corrupt("directory", ino, "second entry is not .."));
        }
        if self.csum() {
            if self.is_htree(st) {
                dd::set_dx_csum(self.iseed(ino, st), &mut d, DX_ROOT_COUNT_OFF);
            } else {
                dd::set_leaf_csum(self.iseed(ino, st), &mut d);
            }
        }
        drop(d);
        h.dirty(&b);
        Ok(())
    }

    /// Inode of "..".
    pub fn dotdot(&self, ino: u64, st: &InodeState) -> Result<u64> {
        if self.is_inline(st) {
            return self.inline_dotdot(ino, st);
        }
        let b = self.block(st, ino, 0)?;
        let d = b.read();
        dd::dotdot(&d)
            .map(u64::from)
            .ok_or_else(|| Error::corrupt("directory", ino, "second entry is not .."))
    }

    /// Leaf logical blocks of the directory with the lowest hash each may hold, in
    /// hash order (every block but index blocks; linear directories: hash 0 each).
    fn leaf_blocks(&self, ino: u64, st: &InodeState) -> Result<Vec<(u32, u32)>> {
        if !self.is_htree(st) {
            return Ok((0..self.nblocks(st)).map(|b| (0, b)).collect());
        }
        let (info, root, _) = self.read_root(ino, st)?;
        let mut level = root.entries;
        for _ in 0..info.indirect_levels {
            let mut next = Vec::new();
            for (h, n) in level {
                let mut e = self.read_node(ino, st, n)?.0.entries;
                e[0].0 = h;
                next.extend(e);
            }
            level = next;
        }
        Ok(level.into_iter().map(|(h, b)| (h & !1, b)).collect())
    }

    /// Whether the directory holds nothing but "." and "..".
    pub fn is_empty(&self, ino: u64, st: &InodeState) -> Result<bool> {
        if self.is_inline(st) {
            return self.inline_is_empty(ino, st);
        }
        for (_, lblk) in self.leaf_blocks(ino, st)? {
            let (_, entries) = self.leaf(st, ino, lblk)?;
            if entries
                .iter()
                .any(|e| e.ino != 0 && e.name != b"." && e.name != b"..")
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Entries after cursor `pos`, at most about `max` (equal-hash runs are not split).
    pub fn readdir(
        &self,
        ino: u64,
        st: &InodeState,
        pos: u64,
        max: usize,
    ) -> Result<Vec<DirEntry>> {
        if self.is_inline(st) {
            return self.inline_readdir(ino, st, pos, max);
        }
        let mut out = Vec::new();
        if pos <= 1 {
            dots(ino, self.dotdot(ino, st)?, pos, &mut out);
        }
        let version = if self.is_htree(st) {
            self.hash_version(&self.read_root(ino, st)?.0)
        } else {
            self.def_version()
        };
        let leaves = self.leaf_blocks(ino, st)?;
        // In an htree, start at the last leaf whose range begins below the cursor's hash:
        // earlier leaves hold only smaller hashes. Stop once enough entries are collected
        // and the next leaf starts above everything collected. A linear directory's
        // blocks hold any hashes: every block is read every time.
        let major = (pos.saturating_sub(3) >> 32) << 1;
        let first = if self.is_htree(st) {
            leaves
                .partition_point(|&(h, _)| u64::from(h) < major)
                .saturating_sub(1)
        } else {
            0
        };
        let mut all: Vec<(u64, RawEntry)> = Vec::new();
        for (k, &(_, lblk)) in leaves.iter().enumerate().skip(first) {
            let (_, entries) = self.leaf(st, ino, lblk)?;
            for e in entries {
                if e.ino == 0 || e.name == b"." || e.name == b".." {
                    continue;
                }
                let key = self.readdir_key(&e.name, version);
                if key >= pos.max(3) {
                    all.push((key, e));
                }
            }
            let top = all.iter().map(|x| x.0).max().unwrap_or(0);
            let next_start = leaves
                .get(k + 1)
                .map(|&(h, _)| 3 + ((u64::from(h) >> 1) << 32));
            if out.len() + all.len() >= max
                && next_start.is_some_and(|n| n > top)
                && self.is_htree(st)
            {
                break;
            }
        }
        self.emit_sorted(all, max, &mut out);
        Ok(out)
    }

    /// A name's readdir cookie: its hash key, above "." (0) and ".." (1).
    fn readdir_key(&self, name: &[u8], version: u8) -> u64 {
        let (a, m) = self.hash(name, version);
        3 + ((u64::from(a) >> 1) << 32 | u64::from(m))
    }

    /// Append `all` to `out` in cookie order, stopping past `max` entries at a change of
    /// cookie (entries with equal cookies are never split between calls).
    fn emit_sorted(&self, mut all: Vec<(u64, RawEntry)>, max: usize, out: &mut Vec<DirEntry>) {
        all.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        let mut last = None;
        for (key, e) in all {
            if out.len() >= max && last != Some(key) {
                break;
            }
            let kind = match FileType::from_dirent_code(e.ft) {
                Some(k) if self.filetype => k,
                // No type in the entry: the inode's mode says it.
                _ => crate::inode::read_disk_inode(self.ial, self.bufs, u64::from(e.ino))
                    .ok()
                    .and_then(|d| FileType::from_mode(d.mode()))
                    .unwrap_or(FileType::Regular),
            };
            out.push(DirEntry {
                ino: u64::from(e.ino),
                kind,
                name: e.name,
                next: key + 1,
            });
            last = Some(key);
        }
    }

    fn def_version(&self) -> u8 {
        let v = self.def_hash % 3;
        v + if self.unsigned { 3 } else { 0 }
    }

    /// Format block 0 of a new directory: "." and "..".
    pub fn init_dir(&self, h: &Handle, ino: u64, st: &mut InodeState, parent: u64) -> Result<()> {
        if self.inline_init(ino, st, parent)? {
            return Ok(());
        }
        let b = self.append_block(h, ino, st)?;
        let mut d = b.write();
        dd::init_empty_leaf(&mut d, self.csum());
        let end = dd::entries_end(self.bs(), self.csum());
        let ft = if self.filetype { 2 } else { 0 };
        dd::put_entry(&mut d, 0, ino as u32, 12, ft, b".");
        dd::put_entry(&mut d, 12, parent as u32, end - 12, ft, b"..");
        if self.csum() {
            dd::set_leaf_csum(self.iseed(ino, st), &mut d);
        }
        drop(d);
        h.dirty(&b);
        Ok(())
    }
}

/// Move the split point so equal hashes stay together when possible.
fn adjust_split(live: &[(u32, u32, RawEntry)], split: usize) -> usize {
    let mut s = split;
    while s > 0 && s < live.len() && live[s].0 == live[s - 1].0 {
        s += 1;
    }
    if s >= live.len() {
        s = split;
        while s > 1 && live[s].0 == live[s - 1].0 {
            s -= 1;
        }
    }
    s
}

/// One index level on the way to a leaf.
struct Level {
    lblk: u32,
    entries: Vec<(u32, u32)>,
    pos: usize,
}

/// The index path to a leaf.
struct Path {
    levels: Vec<Level>,
    leaf: u32,
}

impl Path {
    fn last_level(&self) -> (&[(u32, u32)], usize) {
        let l = &self.levels[self.levels.len() - 1];
        (&l.entries, l.pos)
    }
}

/// "." (cookie 0) and ".." (cookie 1) as readdir returns them after cursor `pos`.
fn dots(ino: u64, parent: u64, pos: u64, out: &mut Vec<DirEntry>) {
    let dot = |name: &[u8], ino, next| DirEntry {
        ino,
        kind: FileType::Directory,
        name: name.to_vec(),
        next,
    };
    if pos == 0 {
        out.push(dot(b".", ino, 1));
    }
    if pos <= 1 {
        out.push(dot(b"..", parent, 3));
    }
}
