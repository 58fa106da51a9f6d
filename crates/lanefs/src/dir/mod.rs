//! Directories: lookup, insert and remove over linear blocks, hashed indexes
//! (`htree.rs`) and inline directories (`inline.rs`); readdir in `readdir.rs`. Called
//! with the directory inode's state lock held for writing (or reading for lookup and
//! readdir) inside a handle; blocks go through the metadata buffer cache.
//!
//! Entries are found, inserted and removed in place in the cached block: no decode of
//! the block, no heap allocation. A block's checksum is verified once when it is read
//! and stamped once per commit (`disk::seal`), not at every change.

use crate::alloc::Allocator;
use crate::buf::{Buf, BufCache};
use crate::disk::dir::{self as dd, RawEntry, DX_ROOT_COUNT_OFF};
use crate::disk::hash::dirhash;
use crate::disk::inode::FL_INDEX;
use crate::disk::seal::Seal;
use crate::error::{Error, Result};
use crate::extmap::Mapping;
use crate::inode::InodeState;
use crate::journal::Handle;
use crate::leafdigest::{self, LeafDigests};
use crate::volume::{Features, Volume};
use std::sync::Arc;

mod htree;
mod inline;
mod readdir;

/// What directory code needs from the mount.
pub struct DirCtx<'a> {
    /// Allocator (for new directory blocks).
    pub al: &'a Allocator,
    /// Inode allocation (inode table locations).
    pub ial: &'a crate::ialloc::InodeAllocator,
    /// Metadata cache.
    pub bufs: &'a BufCache,
    /// The mount's facts: features, directory hash, digest budget, geometry.
    pub vol: &'a Volume,
}

/// How a search uses the directory's leaf digests.
enum Digests<'a> {
    /// Not at all: digests are off, or the directory has none yet and is only read.
    Off,
    /// The ones that describe their leaves now (a lookup under the directory's shared
    /// lock, which must not change them).
    Read(&'a LeafDigests),
    /// Any, building those that are stale (under the directory's exclusive lock).
    Write(&'a mut LeafDigests),
}

impl Digests<'_> {
    /// The digests to read, in either mode.
    fn read(&self) -> Option<&LeafDigests> {
        match self {
            Digests::Off => None,
            Digests::Read(g) => Some(g),
            Digests::Write(g) => Some(g),
        }
    }

    fn write(&mut self) -> Option<&mut LeafDigests> {
        match self {
            Digests::Write(g) => Some(g),
            _ => None,
        }
    }
}

/// What [`DirCtx::probe_name`] found.
pub enum Probe {
    /// The name is there.
    Found(Found),
    /// It is not; where it would go.
    Vacant(Vacancy),
}

/// An entry found by name: valid while the directory's lock is held and the directory
/// has not changed since.
pub struct Found {
    /// The inode it names.
    pub ino: u64,
    /// Its file type code.
    pub ft: u8,
    /// Where it is (none in an inline directory).
    slot: Option<Slot>,
    /// The directory's size when found (checked in debug builds).
    size: u64,
}

/// Where a missing name would go: the htree path to its leaf (none for linear and
/// inline directories). Valid as [`Found`] is.
pub struct Vacancy {
    path: Option<htree::Path>,
    size: u64,
}

/// Where an entry lives.
struct Slot {
    lblk: u32,
    buf: Arc<Buf>,
    off: usize,
    prev: Option<usize>,
    ino: u32,
    ft: u8,
}
impl DirCtx<'_> {
    fn bs(&self) -> usize {
        self.vol.geo.bs as usize
    }
    fn csum(&self) -> bool {
        self.vol.geo.csum
    }
    fn iseed(&self, ino: u64, st: &InodeState) -> u32 {
        st.d.csum_seed(self.vol.geo.seed, ino as u32)
    }
    fn hash(&self, name: &[u8], version: u8) -> (u32, u32) {
        dirhash(name, version, &self.vol.hash.seed)
    }
    fn nblocks(&self, st: &InodeState) -> u32 {
        (st.d.size() / self.bs() as u64) as u32
    }

    /// The buffer of logical block `lblk` of the directory.
    fn block(&self, st: &InodeState, ino: u64, lblk: u32) -> Result<Arc<Buf>> {
        self.bufs.get(self.phys(st, ino, lblk)?)
    }

    /// Where logical block `lblk` of the directory is.
    fn phys(&self, st: &InodeState, ino: u64, lblk: u32) -> Result<u64> {
        let ext = st
            .ext
            .as_ref()
            .ok_or_else(|| Error::corrupt("directory", ino, "extents not loaded"))?;
        match ext.map(lblk) {
            Mapping::Mapped(p, false, _) => Ok(p),
            _ => Err(Error::corrupt(
                "directory",
                ino,
                format!("block {lblk} is a hole"),
            )),
        }
    }

    /// The buffer of leaf `lblk`: through the hint its digest keeps when it has one
    /// ([`BufCache::get_hinted`]), else mapped and looked up. The hint's block needs no
    /// mapping: a directory's blocks stay where they are while it lives (it never
    /// shrinks; its blocks are freed only with the inode, and a freed block leaves the
    /// cache).
    fn leaf_block(&self, st: &InodeState, ino: u64, dg: &Digests, lblk: u32) -> Result<Arc<Buf>> {
        let hint = dg.read().and_then(|g| g.hint(lblk));
        if let Some(b) = hint.and_then(|(blk, w)| self.bufs.get_hinted(blk, w)) {
            debug_assert_eq!(
                self.phys(st, ino, lblk).ok(),
                Some(b.blk),
                "directory {ino} leaf {lblk}: its digest's buffer is another block"
            );
            return Ok(b);
        }
        self.block(st, ino, lblk)
    }

    /// The buffer of htree index block `lblk`: the one the directory holds
    /// ([`LeafDigests::index_block`]), else mapped and looked up, and held when the
    /// digests may change.
    fn index_block(
        &self,
        st: &InodeState,
        ino: u64,
        dg: &mut Digests,
        lblk: u32,
    ) -> Result<Arc<Buf>> {
        let held = dg.read().and_then(|g| g.index_block(lblk));
        if let Some(b) = held {
            debug_assert_eq!(
                self.phys(st, ino, lblk).ok(),
                Some(b.blk),
                "directory {ino} index block {lblk}: the held buffer is another block"
            );
            return Ok(b.clone());
        }
        let b = self.block(st, ino, lblk)?;
        if let Some(g) = dg.write() {
            g.hold_index(lblk, &b, self.vol.geo.bs as usize);
        }
        Ok(b)
    }

    /// Verify a leaf block's checksum the first time it is used after a read.
    fn check_leaf(&self, ino: u64, st: &InodeState, b: &Buf, d: &[u8]) -> Result<()> {
        if self.csum() && !b.is_verified() {
            dd::verify_leaf_csum(self.iseed(ino, st), d, b.blk)?;
            b.set_verified();
        }
        Ok(())
    }

    /// A leaf block's entries, decoded (splits, emptiness checks, readdir).
    fn leaf_entries(&self, ino: u64, st: &InodeState, b: &Buf) -> Result<Vec<RawEntry>> {
        let d = b.read();
        self.check_leaf(ino, st, b, &d)?;
        dd::parse_block(&d, self.csum(), b.blk)
    }

    /// Find `name` in leaf `lblk`, in place.
    fn search_leaf(
        &self,
        ino: u64,
        st: &InodeState,
        dg: &mut Digests,
        lblk: u32,
        name: &[u8],
    ) -> Result<Option<Slot>> {
        self.search_leaf_room(ino, st, dg, lblk, name)
            .map(|(s, _)| s)
    }

    /// [`DirCtx::search_leaf`], and where in the leaf the name would fit: the leaf's
    /// digest when there is one, else a walk of the leaf ([`dd::search_block_room`]).
    fn search_leaf_room(
        &self,
        ino: u64,
        st: &InodeState,
        dg: &mut Digests,
        lblk: u32,
        name: &[u8],
    ) -> Result<(Option<Slot>, Option<usize>)> {
        let t = leafdigest::tag(name);
        let scanned = dg.read().and_then(|g| g.prefetch(lblk, t));
        let b = self.leaf_block(st, ino, dg, lblk)?;
        let (hit, room) = {
            let d = b.read();
            self.check_leaf(ino, st, &b, &d)?;
            let g = match dg {
                Digests::Off => None,
                Digests::Read(g) => g.current(lblk, &b),
                Digests::Write(g) => Some(g.get_or_build(lblk, &b, &d, self.csum())?),
            };
            match g {
                Some(g) => {
                    // Where the prefetch's scan of the same records stopped (a digest
                    // rebuilt since has another stamp and is scanned whole).
                    let from = scanned.filter(|s| s.1 == g.stamp()).map_or(0, |s| s.0);
                    (
                        g.find_from(&d, name, t, from),
                        g.room(dd::rec_len_for(name.len())),
                    )
                }
                None => dd::search_block_room(&d, self.csum(), b.blk, name)?,
            }
        };
        let slot = hit.map(|h| Slot {
            lblk,
            buf: b,
            off: h.off,
            prev: h.prev,
            ino: h.ino,
            ft: h.ft,
        });
        Ok((slot, room))
    }

    /// Run `f` with the directory's leaf digests taken out of its state (made on first
    /// use), or none when they are off.
    fn with_digests<R>(
        &self,
        st: &mut InodeState,
        f: impl FnOnce(&mut InodeState, Digests) -> R,
    ) -> R {
        if self.vol.digest_budget == 0 {
            return f(st, Digests::Off);
        }
        let mut g = st
            .digests
            .take()
            .unwrap_or_else(|| Box::new(LeafDigests::new(self.vol.digest_budget)));
        let r = f(st, Digests::Write(&mut g));
        st.digests = Some(g);
        r
    }

    /// The seal of the directory's leaf blocks.
    fn leaf_seal(&self, ino: u64, st: &InodeState) -> Seal {
        if self.csum() {
            Seal::DirLeaf(self.iseed(ino, st))
        } else {
            Seal::None
        }
    }

    /// Dirty `b` in `h`, its checksum stamped at commit as `seal` says.
    fn sealed(&self, h: &Handle, b: &Arc<Buf>, seal: Seal) {
        b.set_seal(seal);
        h.dirty(b);
    }

    /// Whether the directory is read and written as an htree.
    pub fn is_htree(&self, st: &InodeState) -> bool {
        st.d.flags() & FL_INDEX != 0 && self.vol.has(Features::DIR_INDEX)
    }

    /// Find `name`: (inode, file type code). Under the directory's shared lock: uses the
    /// leaf digests that are current and changes none.
    pub fn lookup(&self, ino: u64, st: &InodeState, name: &[u8]) -> Result<Option<(u64, u8)>> {
        let dg = match st.digests.as_deref() {
            Some(g) => Digests::Read(g),
            None => Digests::Off,
        };
        Ok(match self.probe_in(ino, st, dg, name)? {
            Probe::Found(f) => Some((f.ino, f.ft)),
            Probe::Vacant(_) => None,
        })
    }

    /// Look `name` up and keep where it is, or where it would go: a create or unlink
    /// then changes the directory without searching it again ([`DirCtx::add_vacant`],
    /// [`DirCtx::remove_found`]), as long as the directory's lock is held in between.
    pub fn probe_name(&self, ino: u64, st: &mut InodeState, name: &[u8]) -> Result<Probe> {
        if self.is_inline(st) {
            return self.probe_in(ino, st, Digests::Off, name);
        }
        self.with_digests(st, |st, dg| self.probe_in(ino, st, dg, name))
    }

    fn probe_in(&self, ino: u64, st: &InodeState, mut dg: Digests, name: &[u8]) -> Result<Probe> {
        let size = st.d.size();
        if self.is_inline(st) {
            return Ok(match self.inline_lookup(ino, st, name)? {
                Some((i, ft)) => Probe::Found(Found {
                    ino: i,
                    ft,
                    slot: None,
                    size,
                }),
                None => Probe::Vacant(Vacancy { path: None, size }),
            });
        }
        let (slot, path) = if self.is_htree(st) {
            let mut path = self.probe(ino, st, &mut dg, name)?;
            (
                self.htree_search(ino, st, &mut dg, &mut path, name)?,
                Some(path),
            )
        } else {
            (self.linear_find(ino, st, &mut dg, name)?, None)
        };
        Ok(match slot {
            Some(s) => Probe::Found(Found {
                ino: u64::from(s.ino),
                ft: s.ft,
                slot: Some(s),
                size,
            }),
            None => Probe::Vacant(Vacancy { path, size }),
        })
    }

    fn linear_find(
        &self,
        ino: u64,
        st: &InodeState,
        dg: &mut Digests,
        name: &[u8],
    ) -> Result<Option<Slot>> {
        for lblk in 0..self.nblocks(st) {
            if let Some(s) = self.search_leaf(ino, st, dg, lblk, name)? {
                return Ok(Some(s));
            }
        }
        Ok(None)
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
        self.add_on(h, ino, st, name, child, ft, None)
    }

    /// [`DirCtx::add`] along an htree `path` probed for `name` since the directory last
    /// changed, if there is one.
    #[allow(clippy::too_many_arguments)]
    fn add_on(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        child: u64,
        ft: u8,
        path: Option<htree::Path>,
    ) -> Result<()> {
        if name.len() > 255 {
            return Err(Error::NameTooLong);
        }
        let ft = if self.vol.has(Features::FILETYPE) {
            ft
        } else {
            0
        };
        if self.is_inline(st) {
            if self.inline_add(ino, st, name, child, ft)? {
                return Ok(());
            }
            self.uninline(h, ino, st)?;
        }
        self.with_digests(st, |st, mut dg| {
            if self.is_htree(st) {
                return self.htree_add(h, ino, st, &mut dg, name, child, ft, path);
            }
            let nb = self.nblocks(st);
            for lblk in 0..nb {
                let b = self.block(st, ino, lblk)?;
                if self.try_insert(h, ino, st, &mut dg, lblk, &b, None, name, child, ft)? {
                    return Ok(());
                }
            }
            if self.vol.has(Features::DIR_INDEX) && nb == 1 {
                self.make_indexed(h, ino, st)?;
                return self.htree_add(h, ino, st, &mut dg, name, child, ft, None);
            }
            let b = self.append_block(h, ino, st)?;
            self.init_leaf(h, ino, st, &b);
            if !self.try_insert(h, ino, st, &mut dg, nb, &b, None, name, child, ft)? {
                return Err(Error::corrupt(
                    "directory",
                    ino,
                    "entry does not fit an empty block",
                ));
            }
            Ok(())
        })
    }

    /// [`DirCtx::add`] where [`DirCtx::probe_name`] found `name` missing, without
    /// walking the index again.
    #[allow(clippy::too_many_arguments)]
    pub fn add_vacant(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        child: u64,
        ft: u8,
        v: Vacancy,
    ) -> Result<()> {
        debug_assert_eq!(st.d.size(), v.size, "directory changed since its probe");
        let path = v.path.filter(|_| self.is_htree(st));
        self.add_on(h, ino, st, name, child, ft, path)
    }

    /// Put `name -> child` into leaf `lblk` (buffer `b`) in place if it has room: into the
    /// record at `room` when a search of the leaf since the directory last changed found
    /// room there (or the leaf's digest knows a record with room), else the first record
    /// with room (the leaf verified first, as a read of it is). The leaf's digest learns of
    /// the new entry.
    #[allow(clippy::too_many_arguments)]
    fn try_insert(
        &self,
        h: &Handle,
        ino: u64,
        st: &InodeState,
        dg: &mut Digests,
        lblk: u32,
        b: &Arc<Buf>,
        room: Option<usize>,
        name: &[u8],
        child: u64,
        ft: u8,
    ) -> Result<bool> {
        let room = room.or_else(|| {
            let g = dg.write()?.current(lblk, b)?;
            g.room(dd::rec_len_for(name.len()))
        });
        let mut d = b.write();
        let (csum, blk, child) = (self.csum(), b.blk, child as u32);
        let placed = match room {
            Some(off) => dd::insert_at(&mut d, csum, blk, off, name, child, ft)?,
            None => None,
        };
        let placed = match placed {
            Some(off) => Some(off),
            None => {
                self.check_leaf(ino, st, b, &d)?;
                dd::insert_in_block(&mut d, csum, blk, name, child, ft)?
            }
        };
        let Some(off) = placed else {
            if let Some(g) = dg.write() {
                g.unchanged(lblk, b);
            }
            return Ok(false);
        };
        if let Some(g) = dg.write() {
            g.inserted(lblk, b, &d, csum, off, leafdigest::tag(name));
        }
        drop(d);
        self.sealed(h, b, self.leaf_seal(ino, st));
        Ok(true)
    }

    fn init_leaf(&self, h: &Handle, ino: u64, st: &InodeState, b: &Arc<Buf>) {
        dd::init_empty_leaf(&mut b.write(), self.csum());
        self.sealed(h, b, self.leaf_seal(ino, st));
    }

    /// Grow the directory by one block; returns its buffer (zeroed, not yet formatted).
    fn append_block(&self, h: &Handle, ino: u64, st: &mut InodeState) -> Result<Arc<Buf>> {
        let lblk = self.nblocks(st);
        let p = crate::bmap::map_one_block(self.al, h, ino, st, lblk)?;
        st.d.set_size(st.d.size() + self.bs() as u64);
        Ok(self.bufs.get_new(p))
    }

    /// Rewrite a leaf block with `entries` packed in order.
    fn write_leaf<'e>(
        &self,
        h: &Handle,
        ino: u64,
        st: &InodeState,
        b: &Arc<Buf>,
        entries: impl ExactSizeIterator<Item = (u32, u8, &'e [u8])>,
    ) {
        let mut d = b.write();
        dd::init_empty_leaf(&mut d, self.csum());
        let end = dd::entries_end(self.bs(), self.csum());
        let (mut off, n) = (0, entries.len());
        for (i, (child, ft, name)) in entries.enumerate() {
            let len = if i + 1 == n {
                end - off
            } else {
                dd::rec_len_for(name.len())
            };
            debug_assert!(off + len <= end, "leaf entries overflow their block");
            dd::put_entry(&mut d, off, child, len, ft, name);
            off += len;
        }
        drop(d);
        self.sealed(h, b, self.leaf_seal(ino, st));
    }

    /// Remove `name`; returns the inode it pointed to.
    pub fn remove(&self, h: &Handle, ino: u64, st: &mut InodeState, name: &[u8]) -> Result<u64> {
        match self.probe_name(ino, st, name)? {
            Probe::Found(f) => {
                let child = f.ino;
                self.remove_found(h, ino, st, name, f)?;
                Ok(child)
            }
            Probe::Vacant(_) => Err(Error::NotFound),
        }
    }

    /// Remove the entry [`DirCtx::probe_name`] found for `name`, in place.
    pub fn remove_found(
        &self,
        h: &Handle,
        ino: u64,
        st: &mut InodeState,
        name: &[u8],
        f: Found,
    ) -> Result<()> {
        debug_assert_eq!(st.d.size(), f.size, "directory changed since its probe");
        let Some(s) = f.slot else {
            return self.inline_remove(ino, st, name).map(|_| ());
        };
        let mut d = s.buf.write();
        dd::remove_entry(&mut d, s.off, s.prev);
        if let Some(g) = st.digests.as_deref_mut() {
            g.removed(s.lblk, &s.buf, &d, self.csum(), s.off, s.prev);
        }
        drop(d);
        self.sealed(h, &s.buf, self.leaf_seal(ino, st));
        Ok(())
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
            let ft = if self.vol.has(Features::FILETYPE) {
                ft
            } else {
                0
            };
            return self.inline_replace(ino, st, name, child, ft);
        }
        let Probe::Found(Found { slot: Some(s), .. }) = self.probe_name(ino, st, name)? else {
            return Err(Error::NotFound);
        };
        let mut d = s.buf.write();
        let ft = if self.vol.has(Features::FILETYPE) {
            ft
        } else {
            0
        };
        dd::retarget_entry(&mut d, s.off, child as u32, ft);
        drop(d);
        self.sealed(h, &s.buf, self.leaf_seal(ino, st));
        Ok(u64::from(s.ino))
    }

    /// Point ".." at `parent`.
    pub fn set_dotdot(&self, h: &Handle, ino: u64, st: &mut InodeState, parent: u64) -> Result<()> {
        if self.is_inline(st) {
            return self.inline_set_dotdot(ino, st, parent);
        }
        let b = self.block(st, ino, 0)?;
        let mut d = b.write();
        if self.is_htree(st) {
            self.check_dx(ino, st, &b, &d, DX_ROOT_COUNT_OFF)?;
        } else {
            self.check_leaf(ino, st, &b, &d)?;
        }
        if !dd::set_dotdot(&mut d, parent as u32) {
            return Err(Error::corrupt("directory", ino, "second entry is not .."));
        }
        drop(d);
        let seal = if self.is_htree(st) {
            self.dx_seal(ino, st, DX_ROOT_COUNT_OFF)
        } else {
            self.leaf_seal(ino, st)
        };
        self.sealed(h, &b, seal);
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

    /// Whether the directory holds nothing but "." and "..".
    pub fn is_empty(&self, ino: u64, st: &InodeState) -> Result<bool> {
        if self.is_inline(st) {
            return self.inline_is_empty(ino, st);
        }
        for (_, lblk) in self.leaf_blocks(ino, st)? {
            let entries = self.leaf_entries(ino, st, &*self.block(st, ino, lblk)?)?;
            if entries
                .iter()
                .any(|e| e.ino != 0 && e.name != b"." && e.name != b"..")
            {
                return Ok(false);
            }
        }
        Ok(true)
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
        let ft = if self.vol.has(Features::FILETYPE) {
            2
        } else {
            0
        };
        dd::put_entry(&mut d, 0, ino as u32, 12, ft, b".");
        dd::put_entry(&mut d, 12, parent as u32, end - 12, ft, b"..");
        drop(d);
        self.sealed(h, &b, self.leaf_seal(ino, st));
        Ok(())
    }
}
