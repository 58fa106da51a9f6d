//! Hashed-index directories (dir_index, htree): the walk from the root to a leaf, leaf
//! splits and index growth, as ext4's namei.c (dx_probe, do_split, dx_insert_block).
//!
//! A probe reads the index blocks in place: a binary search over the cached block's
//! entries, no decode into a list and no heap allocation. Index blocks are decoded only
//! when one changes (a leaf split adds an entry), once per about a hundred inserts.

use super::{Digests, DirCtx, Slot};
use crate::buf::Buf;
use crate::disk::dir::{self as dd, DxRootInfo, RawEntry, DX_NODE_COUNT_OFF, DX_ROOT_COUNT_OFF};
use crate::disk::inode::FL_INDEX;
use crate::disk::seal::Seal;
use crate::error::{Error, Result};
use crate::inode::InodeState;
use crate::journal::Handle;
use crate::volume::Features;
use std::sync::Arc;

/// Most index levels: the root and up to two levels of nodes below it (ext4 without
/// large_dir).
const MAX_LEVELS: usize = 3;

/// One index level on the way to a leaf: the block, where its count sits, and the entry
/// the walk took.
pub(super) struct Level {
    lblk: u32,
    buf: Arc<Buf>,
    count_off: usize,
    count: usize,
    pos: usize,
}

/// The index path to a leaf (root first), on the stack.
pub(super) struct Path {
    levels: [Option<Level>; MAX_LEVELS],
    depth: usize,
    /// The leaf the hash belongs to.
    pub(super) leaf: u32,
    /// The hash probed.
    hash: u32,
    /// The directory's hash version (with the unsigned flag applied).
    version: u8,
    /// Where in the leaf the name probed fits, once a search found it missing there.
    room: Option<usize>,
}

impl Path {
    fn level(&self, i: usize) -> &Level {
        debug_assert!(
            i < self.depth,
            "index level {i} of a path of {}",
            self.depth
        );
        self.levels[i].as_ref().expect("level within depth")
    }
    fn last(&self) -> &Level {
        self.level(self.depth - 1)
    }
}

impl DirCtx<'_> {
    /// Block 0 of an htree: its root info, checked (the checksum once per read).
    fn read_root(
        &self,
        ino: u64,
        st: &InodeState,
        dg: &mut Digests,
    ) -> Result<(DxRootInfo, Arc<Buf>)> {
        let b = self.index_block(st, ino, dg, 0)?;
        let info = {
            let d = b.read();
            let info = dd::decode_root_info(&d, b.blk)?;
            self.check_dx(ino, st, &b, &d, DX_ROOT_COUNT_OFF)?;
            info
        };
        Ok((info, b))
    }

    /// Verify a dx block's checksum the first time it is used after a read.
    pub(super) fn check_dx(
        &self,
        ino: u64,
        st: &InodeState,
        b: &Buf,
        d: &[u8],
        count_off: usize,
    ) -> Result<()> {
        if self.csum() && !b.is_verified() {
            dd::verify_dx_csum(self.iseed(ino, st), d, count_off, b.blk)?;
            b.set_verified();
        }
        Ok(())
    }

    /// The hash version an htree's names are hashed with.
    pub(super) fn hash_version(&self, root: &DxRootInfo) -> u8 {
        let v = root.hash_version
            + if self.vol.hash.unsigned && root.hash_version < 3 {
                3
            } else {
                0
            };
        // `decode_root_info` refuses versions past 5.
        debug_assert!(v <= 5, "hash version {v}");
        v
    }

    /// Walk the index to the leaf for `name`.
    pub(super) fn probe(
        &self,
        ino: u64,
        st: &InodeState,
        dg: &mut Digests,
        name: &[u8],
    ) -> Result<Path> {
        let (info, root) = self.read_root(ino, st, dg)?;
        let version = self.hash_version(&info);
        let (hash, _) = self.hash(name, version);
        let mut path = Path {
            levels: [None, None, None],
            depth: 0,
            leaf: 0,
            hash,
            version,
            room: None,
        };
        let nb = self.nblocks(st);
        let (mut buf, mut lblk, mut count_off) = (root, 0u32, DX_ROOT_COUNT_OFF);
        for depth in 0..=usize::from(info.indirect_levels) {
            let (count, pos, child) = {
                let d = buf.read();
                if depth > 0 {
                    self.check_dx(ino, st, &buf, &d, count_off)?;
                }
                let count = dd::dx_count(&d, count_off, self.csum(), buf.blk)?;
                let pos = dd::dx_search(&d, count_off, count, hash);
                (count, pos, dd::dx_entry(&d, count_off, pos).1)
            };
            if child >= nb || child == 0 {
                return Err(Error::corrupt(
                    "directory index",
                    ino,
                    format!("child block {child} out of range"),
                ));
            }
            path.levels[depth] = Some(Level {
                lblk,
                buf,
                count_off,
                count,
                pos,
            });
            path.depth = depth + 1;
            if depth == usize::from(info.indirect_levels) {
                path.leaf = child;
                debug_assert!(path.depth <= MAX_LEVELS);
                return Ok(path);
            }
            buf = self.index_block(st, ino, dg, child)?;
            lblk = child;
            count_off = DX_NODE_COUNT_OFF;
        }
        Err(Error::corrupt(
            "directory index",
            ino,
            "index deeper than its root says",
        ))
    }

    /// Find `name` in an htree along its probed `path`: the leaf, then the leaves
    /// continuing a run of names with its hash (index entries with the same hash and the
    /// low bit set).
    pub(super) fn htree_search(
        &self,
        ino: u64,
        st: &InodeState,
        dg: &mut Digests,
        path: &mut Path,
        name: &[u8],
    ) -> Result<Option<Slot>> {
        let (hit, room) = self.search_leaf_room(ino, st, dg, path.leaf, name)?;
        if hit.is_some() {
            return Ok(hit);
        }
        path.room = room;
        let last = path.last();
        for i in last.pos + 1..last.count {
            let (nh, blk) = dd::dx_entry(&last.buf.read(), last.count_off, i);
            if nh & !1 != path.hash {
                break;
            }
            if let Some(s) = self.search_leaf(ino, st, dg, blk, name)? {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }

    /// Add `name -> child` to an htree: into its leaf, splitting the leaf when full.
    /// `path` is a probe for `name` made since the directory last changed, if any.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn htree_add(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        dg: &mut Digests,
        name: &[u8],
        child: u64,
        ft: u8,
        mut path: Option<Path>,
    ) -> Result<()> {
        debug_assert!(name.len() <= 255, "a name of {} bytes", name.len());
        loop {
            let path = match path.take() {
                Some(p) => p,
                None => self.probe(ino, st, dg, name)?,
            };
            let b = self.leaf_block(st, ino, dg, path.leaf)?;
            if self.try_insert(h, ino, st, dg, path.leaf, &b, path.room, name, child, ft)? {
                return Ok(());
            }
            let (lblk, target) = self.split_leaf(h, ino, st, &path, b)?;
            if self.try_insert(h, ino, st, dg, lblk, &target, None, name, child, ft)? {
                return Ok(());
            }
            // The chosen half is still full (long names): probe again.
        }
    }

    /// Split the full leaf of `path` by hash: the upper half moves to a new block, which
    /// the index learns of. Returns the half `path`'s hash now belongs to (its logical
    /// block and buffer).
    fn split_leaf(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        path: &Path,
        b: Arc<Buf>,
    ) -> Result<(u32, Arc<Buf>)> {
        // The live entries' (hash, minor hash, offset), sorted: in place, without copying
        // a name; the block's bytes are copied once, as both halves are rewritten from them.
        let mut live: Vec<(u32, u32, u32)> = Vec::new();
        let old = {
            let d = b.read();
            self.check_leaf(ino, st, &b, &d)?;
            dd::each_live(&d, self.csum(), b.blk, |off, name| {
                let (a, m) = self.hash(name, path.version);
                live.push((a, m, off as u32));
            })?;
            d.to_vec()
        };
        // Ties in (hash, minor) keep block order, as a stable sort would.
        live.sort_unstable();
        let split = adjust_split(&live, live.len() / 2);
        // Each half fits a block: together they held one (each live entry takes at
        // least what it takes packed).
        debug_assert!(
            [&live[..split], &live[split..]].iter().all(|half| half
                .iter()
                .map(|x| dd::rec_len_for(dd::entry_at(&old, x.2 as usize).2.len()))
                .sum::<usize>()
                <= dd::entries_end(self.bs(), self.csum())),
            "a half of split leaf {} overflows a block",
            path.leaf
        );
        let hash2 = live.get(split).map_or(path.hash, |x| x.0);
        let continued = split > 0 && live.get(split).is_some_and(|x| x.0 == live[split - 1].0);
        let new_lblk = self.nblocks(st);
        let nb = self.append_block(h, ino, st)?;
        debug_assert_eq!(
            self.nblocks(st),
            new_lblk + 1,
            "the new leaf is the last block"
        );
        let entry = |x: &(u32, u32, u32)| dd::entry_at(&old, x.2 as usize);
        self.write_leaf(h, ino, st, &b, live[..split].iter().map(entry));
        self.write_leaf(h, ino, st, &nb, live[split..].iter().map(entry));
        self.insert_index(h, ino, st, path, hash2 | u32::from(continued), new_lblk)?;
        Ok(if path.hash >= hash2 && split < live.len() {
            (new_lblk, nb)
        } else {
            (path.leaf, b)
        })
    }

    /// The decoded entries of index level `lvl`.
    fn level_entries(&self, lvl: &Level) -> Result<Vec<(u32, u32)>> {
        let d = lvl.buf.read();
        Ok(dd::decode_dx(&d, lvl.count_off, self.csum(), lvl.buf.blk)?.entries)
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
        let depth = path.depth - 1;
        let lvl = path.last();
        let limit = dd::dx_limit(self.bs(), lvl.count_off, self.csum());
        let mut entries = self.level_entries(lvl)?;
        // The path was probed since the directory last changed: the level is as read.
        debug_assert_eq!(
            entries.len(),
            lvl.count,
            "index level changed since its probe"
        );
        entries.insert(lvl.pos + 1, (hash, leaf));
        if entries.len() <= limit {
            return self.write_dx(h, ino, st, lvl.lblk, lvl.count_off, &entries);
        }
        if depth == 0 {
            // Root full at one level: move its entries into a new node below it.
            let node_lblk = self.nblocks(st);
            let nb = self.append_block(h, ino, st)?;
            dd::init_dx_node(&mut nb.write());
            let nlimit = dd::dx_limit(self.bs(), DX_NODE_COUNT_OFF, self.csum());
            if entries.len() > nlimit {
                return Err(Error::NoSpace);
            }
            self.write_dx(h, ino, st, node_lblk, DX_NODE_COUNT_OFF, &entries)?;
            self.set_root_levels(ino, st, 1)?;
            return self.write_dx(h, ino, st, 0, DX_ROOT_COUNT_OFF, &[(0, node_lblk)]);
        }
        // Split a full node: the upper half moves to a new node, indexed from the root.
        let root_lvl = path.level(0);
        let root_limit = dd::dx_limit(self.bs(), DX_ROOT_COUNT_OFF, self.csum());
        if path.depth > 2 || root_lvl.count >= root_limit {
            return Err(Error::NoSpace);
        }
        let half = entries.len() / 2;
        let upper = entries.split_off(half);
        let new_lblk = self.nblocks(st);
        let nb = self.append_block(h, ino, st)?;
        dd::init_dx_node(&mut nb.write());
        self.write_dx(h, ino, st, lvl.lblk, DX_NODE_COUNT_OFF, &entries)?;
        self.write_dx(h, ino, st, new_lblk, DX_NODE_COUNT_OFF, &upper)?;
        let mut r = self.level_entries(root_lvl)?;
        r.insert(root_lvl.pos + 1, (upper[0].0, new_lblk));
        debug_assert!(r.len() <= root_limit, "the root overflows its block");
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
        dd::encode_dx(&mut b.write(), count_off, limit, entries);
        self.sealed(h, &b, self.dx_seal(ino, st, count_off));
        Ok(())
    }

    /// The seal of a dx block with its count at `count_off`.
    pub(super) fn dx_seal(&self, ino: u64, st: &InodeState, count_off: usize) -> Seal {
        match (self.csum(), count_off == DX_ROOT_COUNT_OFF) {
            (false, _) => Seal::None,
            (true, true) => Seal::DxRoot(self.iseed(ino, st)),
            (true, false) => Seal::DxNode(self.iseed(ino, st)),
        }
    }

    /// Set the root's level count (the caller rewrites the root's entries next, in the
    /// same handle, which dirties it).
    fn set_root_levels(&self, ino: u64, st: &InodeState, levels: u8) -> Result<()> {
        let b = self.block(st, ino, 0)?;
        dd::set_root_levels(&mut b.write(), levels);
        Ok(())
    }

    /// Turn a full one-block linear directory into an htree: entries move to block 1,
    /// block 0 becomes the index root.
    pub(super) fn make_indexed(&self, h: &Handle, ino: u64, st: &mut InodeState) -> Result<()> {
        let b0 = self.block(st, ino, 0)?;
        let entries = self.leaf_entries(ino, st, &b0)?;
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
        self.write_leaf(
            h,
            ino,
            st,
            &b1,
            live.iter().map(|e| (e.ino, e.ft, &e.name[..])),
        );
        let info = DxRootInfo {
            hash_version: self.vol.hash.version % 3,
            indirect_levels: 0,
        };
        {
            let mut d = b0.write();
            let dot_ft = if self.vol.has(Features::FILETYPE) {
                2
            } else {
                0
            };
            dd::init_dx_root(&mut d, ino as u32, parent, info, dot_ft);
            let limit = dd::dx_limit(self.bs(), DX_ROOT_COUNT_OFF, self.csum());
            dd::encode_dx(&mut d, DX_ROOT_COUNT_OFF, limit, &[(0, 1)]);
        }
        self.sealed(h, &b0, self.dx_seal(ino, st, DX_ROOT_COUNT_OFF));
        st.d.set_flags(st.d.flags() | FL_INDEX);
        Ok(())
    }

    /// Leaf logical blocks of an htree with the lowest hash each may hold, in hash order.
    ///
    /// Every block is named once, as e2fsck requires (and the root never): an index whose
    /// entries all name one node would otherwise list its entries once per naming, 10^8
    /// pairs from two 4 KiB blocks. So the list is at most the directory's blocks long.
    pub(super) fn htree_leaves(&self, ino: u64, st: &InodeState) -> Result<Vec<(u32, u32)>> {
        let (info, root) = self.read_root(ino, st, &mut Digests::Off)?;
        let mut level = self.level_entries_of(&root, DX_ROOT_COUNT_OFF)?;
        let mut seen = std::collections::HashSet::from([0u32]);
        let once = |seen: &mut std::collections::HashSet<u32>, level: &[(u32, u32)]| match level
            .iter()
            .find(|&&(_, n)| !seen.insert(n))
        {
            Some(&(_, n)) => Err(Error::corrupt(
                "directory index",
                ino,
                format!("block {n} named twice"),
            )),
            None => Ok(()),
        };
        for _ in 0..info.indirect_levels {
            once(&mut seen, &level)?;
            let mut next = Vec::new();
            for (h, n) in level {
                let b = self.block(st, ino, n)?;
                self.check_dx(ino, st, &b, &b.read(), DX_NODE_COUNT_OFF)?;
                let mut e = self.level_entries_of(&b, DX_NODE_COUNT_OFF)?;
                e[0].0 = h;
                next.extend(e);
            }
            level = next;
        }
        once(&mut seen, &level)?;
        Ok(level.into_iter().map(|(h, b)| (h & !1, b)).collect())
    }

    fn level_entries_of(&self, b: &Buf, count_off: usize) -> Result<Vec<(u32, u32)>> {
        Ok(dd::decode_dx(&b.read(), count_off, self.csum(), b.blk)?.entries)
    }

    /// The hash version readdir orders an htree's names by.
    pub(super) fn htree_version(&self, ino: u64, st: &InodeState) -> Result<u8> {
        Ok(self.hash_version(&self.read_root(ino, st, &mut Digests::Off)?.0))
    }
}

/// Move the split point so equal hashes stay together when possible.
fn adjust_split(live: &[(u32, u32, u32)], split: usize) -> usize {
    debug_assert!(split <= live.len());
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
    debug_assert!(s <= live.len(), "split at {s} of {}", live.len());
    s
}
