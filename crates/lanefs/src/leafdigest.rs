//! Directory leaf digests: for each record of a cached directory leaf block, where it is
//! and a 16-bit tag of its name, kept with the directory's in-memory inode.
//!
//! A create must show its name is missing, which walks the whole leaf (about a hundred
//! and fifty records of a 4 KiB block, every cache line of it); an unlink walks half of it
//! on average. In a directory of millions of files the leaves are not in the CPU's caches,
//! and that walk was a third of a create (`docs/directories.md`, "Measured"). The digest is the
//! records' offsets and tags packed four bytes each, in block order: a search compares
//! tags in a few lines and reads the block only at a matching tag. It also keeps one
//! record with room for new entries (the one with the most when it was built), so an
//! insert that fits there needs no walk either.
//!
//! A digest describes one `Buf` as its bytes were at one write generation
//! ([`Buf::write_gen`]). The directory code updates it after its own inserts and removals
//! (holding the directory's lock, so no other writer of the leaf runs in between); any
//! other write (a split rewriting the leaf, a rename retargeting an entry, a re-read after
//! eviction) leaves the generation or the buffer different, and the next use rebuilds it
//! from the block, validating every record as a walk would. The digests of one directory
//! are bounded (`budget` bytes; past it they are dropped and rebuilt as leaves are used
//! again), and go when the inode leaves the inode cache.
//!
//! The kernel walks the leaf (`ext4_search_dir`, `add_dirent_to_buf`); this cache is ours.
//! `dir_digest=0` mounts without it, the baseline.

use std::sync::{Arc, Weak};

use crate::buf::Buf;
use crate::disk::dir::{self as dd, Hit};
use crate::error::Result;
use crate::hint::prefetch;
use crate::numhash::mix;

/// The tag of a free record (inode 0): no name's tag is 0.
const FREE: u16 = 0;

/// The 16-bit tag of a name (never 0, the tag of a free record).
pub fn tag(name: &[u8]) -> u16 {
    let mut h = name.len() as u64;
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        h = mix(h ^ u64::from_le_bytes(c.try_into().expect("8 bytes")));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    match (h >> 48) as u16 {
        FREE => 1,
        t => t,
    }
}

/// One leaf's digest.
pub struct Digest {
    /// The buffer it describes (compared by address; the weak reference keeps the
    /// address from being reused while the digest lives).
    buf: Weak<Buf>,
    /// That buffer's block (so a fetch can find the shard without touching the buffer).
    blk: u64,
    /// Where the buffer's bytes were when the digest was built: only ever a prefetch
    /// address ([`LeafDigests::prefetch`]), never read through.
    data: usize,
    /// The buffer's write generation it describes.
    gen: u64,
    /// One per record, in block order: offset in the high 16 bits, tag in the low.
    recs: Vec<u32>,
    /// A record with room and how much it has ([`dd::room_at`]), kept exact.
    room: (u32, u32),
}

fn off_of(r: u32) -> usize {
    (r >> 16) as usize
}

fn rec(off: usize, tag: u16) -> u32 {
    debug_assert!(off < 1 << 16, "leaf offsets fit 16 bits");
    ((off as u32) << 16) | u32::from(tag)
}

impl Digest {
    /// The live entry called `name` (tag `t`), read from the leaf's bytes `d` at the
    /// records whose tags match.
    pub fn find(&self, d: &[u8], name: &[u8], t: u16) -> Option<Hit> {
        self.find_from(d, name, t, 0)
    }

    /// [`Digest::find`] from record `from` on: the caller knows no record before it has
    /// tag `t` ([`LeafDigests::prefetch`] found the first that does).
    pub fn find_from(&self, d: &[u8], name: &[u8], t: u16, from: usize) -> Option<Hit> {
        debug_assert!(self.recs[..from.min(self.recs.len())]
            .iter()
            .all(|&r| r as u16 != t));
        for (i, &r) in self.recs.iter().enumerate().skip(from) {
            if r as u16 != t {
                continue;
            }
            let off = off_of(r);
            let (ino, ft, n) = dd::entry_at(d, off);
            if ino != 0 && n == name {
                let prev = i.checked_sub(1).map(|j| off_of(self.recs[j]));
                return Some(Hit { off, prev, ino, ft });
            }
        }
        None
    }

    /// A record with room for an entry needing `need` bytes ([`dd::rec_len_for`]), if
    /// the one the digest keeps has it. `None` does not mean the leaf is full.
    pub fn room(&self, need: usize) -> Option<usize> {
        (self.room.1 as usize >= need).then_some(self.room.0 as usize)
    }

    fn bytes(&self) -> usize {
        self.recs.capacity() * 4
    }

    /// Which buffer and write generation it describes: equal stamps, equal records.
    pub fn stamp(&self) -> (usize, u64) {
        (self.buf.as_ptr() as usize, self.gen)
    }

    /// Whether it describes `b` as `b` was `writes` writes ago.
    fn describes(&self, b: &Arc<Buf>, writes: u64) -> bool {
        std::ptr::eq(self.buf.as_ptr(), Arc::as_ptr(b)) && self.gen + writes == b.write_gen()
    }

    /// Build from the leaf's bytes, validating every record.
    fn build(b: &Arc<Buf>, d: &[u8], csum: bool) -> Result<Digest> {
        let mut recs = Vec::with_capacity(d.len() / 24);
        let mut room = (0u32, 0u32);
        dd::each_entry(d, csum, b.blk, |off, ino, name, r| {
            recs.push(rec(off, if ino == 0 { FREE } else { tag(name) }));
            if r as u32 > room.1 {
                room = (off as u32, r as u32);
            }
        })?;
        // Records tile the block in order: `index` searches them by offset.
        debug_assert!(
            recs.windows(2).all(|w| off_of(w[0]) < off_of(w[1])),
            "leaf {} records out of order",
            b.blk
        );
        Ok(Digest {
            buf: Arc::downgrade(b),
            blk: b.blk,
            data: d.as_ptr() as usize,
            gen: b.write_gen(),
            recs,
            room,
        })
    }

    /// The index of the record at `off`.
    fn index(&self, off: usize) -> std::result::Result<usize, usize> {
        self.recs.binary_search_by_key(&off, |&r| off_of(r))
    }

    /// Check against a fresh build (debug builds, after every change).
    fn check(&self, b: &Arc<Buf>, d: &[u8], csum: bool) {
        let fresh = Digest::build(b, d, csum).expect("a digested leaf stays valid");
        assert_eq!(
            self.recs, fresh.recs,
            "leaf digest of block {} is stale",
            b.blk
        );
        assert_eq!(
            self.room.1 as usize,
            dd::room_at(d, self.room.0 as usize),
            "leaf digest of block {}: room record",
            b.blk
        );
    }
}

/// Most index blocks (dx root and nodes) one directory holds: the root and the second
/// level of a directory of about 16 million names (a 2,000,000-name directory has 33).
pub const INDEX_HELD: usize = 64;

/// The digests of one directory's leaves, by logical block, and its index blocks held.
pub struct LeafDigests {
    leaves: Vec<Option<Digest>>,
    /// The directory's htree index blocks (root and nodes) as a probe last fetched them,
    /// held, by logical block (sorted): a probe takes them without the buffer cache's
    /// lookup and shard lock. A held buffer is never evicted (the cache evicts only
    /// blocks nobody holds) and a directory's blocks neither move nor are freed while it
    /// lives, so a held buffer stays its block's cached one; it is checked
    /// ([`Buf::is_cached`]) anyway. Charged at a block each.
    index: Vec<(u32, Arc<Buf>)>,
    /// What the held index blocks are charged.
    index_bytes: usize,
    /// Bytes the digests hold (their records and slots).
    bytes: usize,
    /// Most bytes kept before they are all dropped.
    budget: usize,
}

impl LeafDigests {
    /// No digests yet, at most `budget` bytes of them.
    pub fn new(budget: usize) -> LeafDigests {
        LeafDigests {
            leaves: Vec::new(),
            index: Vec::new(),
            index_bytes: 0,
            bytes: 0,
            budget,
        }
    }

    /// Bytes held (for the inode cache's accounting).
    pub fn bytes(&self) -> usize {
        self.bytes
            + self.leaves.capacity() * std::mem::size_of::<Option<Digest>>()
            + self.index_bytes
    }

    /// The held buffer of index block `lblk`, if it is held and still cached.
    pub fn index_block(&self, lblk: u32) -> Option<&Arc<Buf>> {
        let i = self.index.binary_search_by_key(&lblk, |e| e.0).ok()?;
        Some(&self.index[i].1).filter(|b| b.is_cached())
    }

    /// Hold `b`, the buffer of index block `lblk`, of `len` bytes (up to [`INDEX_HELD`]
    /// blocks and a quarter of the budget); one held for `lblk` before is replaced.
    pub fn hold_index(&mut self, lblk: u32, b: &Arc<Buf>, len: usize) {
        let cost = std::mem::size_of::<(u32, Arc<Buf>)>() + len;
        match self.index.binary_search_by_key(&lblk, |e| e.0) {
            Ok(i) => self.index[i].1 = b.clone(),
            Err(i)
                if self.index.len() < INDEX_HELD && self.index_bytes + cost <= self.budget / 4 =>
            {
                self.index.insert(i, (lblk, b.clone()));
                self.index_bytes += cost;
            }
            Err(_) => {}
        }
        debug_assert!(self.index.windows(2).all(|w| w[0].0 < w[1].0));
    }

    /// The block and buffer leaf `lblk`'s digest was built from, if it has one (a hint
    /// for [`crate::buf::BufCache::get_hinted`]; the digest may be stale).
    pub fn hint(&self, lblk: u32) -> Option<(u64, &Weak<Buf>)> {
        let g = self.leaves.get(lblk as usize)?.as_ref()?;
        Some((g.blk, &g.buf))
    }

    /// Ask the CPU for what a search of leaf `lblk` for a name of tag `t` reads after its
    /// records: the leaf's buffer and the entry of the first record whose tag matches
    /// (and the record before it, which an unlink rewrites), at the addresses the digest
    /// saw. In a directory too large for the CPU's caches each is a miss that otherwise
    /// waits for the one before it (the buffer's locks come between the records and the
    /// entry). A hint: a stale digest costs a wasted prefetch, nothing is read here.
    /// Returns where the search can start ([`Digest::find_from`]: the first record with
    /// tag `t`, or the end) for the digest of that [`Digest::stamp`], so the records are
    /// scanned once.
    pub fn prefetch(&self, lblk: u32, t: u16) -> Option<(usize, (usize, u64))> {
        let g = self.leaves.get(lblk as usize)?.as_ref()?;
        prefetch(g.buf.as_ptr() as usize);
        let first = g.recs.iter().position(|&r| r as u16 == t);
        match first {
            Some(i) => {
                prefetch(g.data + off_of(g.recs[i]));
                if let Some(&p) = i.checked_sub(1).and_then(|j| g.recs.get(j)) {
                    prefetch(g.data + off_of(p));
                }
            }
            // No such name here: most likely a create, which writes its entry into the
            // record with room (and the line after it, where the entry goes when the
            // record keeps its own).
            None => {
                let at = g.data + g.room.0 as usize;
                prefetch(at);
                prefetch(at + 64);
            }
        }
        Some((first.unwrap_or(g.recs.len()), g.stamp()))
    }

    /// The digest of leaf `lblk` if it describes `b`'s bytes now.
    pub fn current(&self, lblk: u32, b: &Arc<Buf>) -> Option<&Digest> {
        self.leaves
            .get(lblk as usize)?
            .as_ref()
            .filter(|g| g.describes(b, 0))
    }

    /// The digest of leaf `lblk`, built from `d` (the bytes of `b`, read under its lock)
    /// unless it describes them already. An error when a record is invalid.
    pub fn get_or_build(
        &mut self,
        lblk: u32,
        b: &Arc<Buf>,
        d: &[u8],
        csum: bool,
    ) -> Result<&Digest> {
        let i = lblk as usize;
        if self.current(lblk, b).is_none() {
            let g = Digest::build(b, d, csum)?;
            if self.leaves.len() <= i {
                self.leaves.resize_with(i + 1, || None);
            }
            let old = self.leaves[i].as_ref().map_or(0, Digest::bytes);
            self.bytes = self.bytes - old + g.bytes();
            self.leaves[i] = Some(g);
            if self.bytes() > self.budget {
                // Over budget: keep only this one; the others rebuild as they are used.
                let g = self.leaves[i].take();
                self.leaves = Vec::new();
                self.leaves.resize_with(i + 1, || None);
                self.bytes = g.as_ref().map_or(0, Digest::bytes);
                self.leaves[i] = g;
            }
        }
        Ok(self.leaves[i].as_ref().expect("built above"))
    }

    /// Drop the digest of leaf `lblk`.
    fn forget(&mut self, lblk: u32) {
        if let Some(g) = self.leaves.get_mut(lblk as usize).and_then(Option::take) {
            debug_assert!(self.bytes >= g.bytes(), "digest bytes undercounted");
            self.bytes -= g.bytes();
        }
    }

    /// The digest of leaf `lblk` if it described `b` just before the caller's one write
    /// of it; otherwise it is dropped.
    fn before_write(&mut self, lblk: u32, b: &Arc<Buf>) -> Option<&mut Digest> {
        let ok = self
            .leaves
            .get(lblk as usize)?
            .as_ref()
            .is_some_and(|g| g.describes(b, 1));
        if !ok {
            self.forget(lblk);
            return None;
        }
        self.leaves[lblk as usize].as_mut()
    }

    /// The caller's one write of leaf `lblk` changed nothing (an insert that did not fit):
    /// the digest stays current.
    pub fn unchanged(&mut self, lblk: u32, b: &Arc<Buf>) {
        if let Some(g) = self.before_write(lblk, b) {
            g.gen = b.write_gen();
        }
    }

    /// Leaf `lblk` (buffer `b`, bytes `d` after the change) gained an entry called by tag
    /// `t` at `off`, placed by [`dd::insert_at`] in one write of the buffer.
    pub fn inserted(&mut self, lblk: u32, b: &Arc<Buf>, d: &[u8], csum: bool, off: usize, t: u16) {
        // A live entry's tag: `FREE` marks free records only.
        debug_assert_ne!(t, FREE, "leaf {lblk}: an entry inserted with the free tag");
        let Some(g) = self.before_write(lblk, b) else {
            return;
        };
        let old = g.bytes();
        let split_from = match g.index(off) {
            // A free record taken whole.
            Ok(i) if g.recs[i] as u16 == FREE => {
                g.recs[i] = rec(off, t);
                off
            }
            // The slack after the record before it, split off.
            Err(i) if i > 0 => {
                g.recs.insert(i, rec(off, t));
                off_of(g.recs[i - 1])
            }
            // Not what an insert does to the leaf this digest describes.
            _ => {
                debug_assert!(
                    false,
                    "leaf {lblk}: an insert at {off} the digest cannot place"
                );
                self.forget(lblk);
                return;
            }
        };
        if g.room.0 as usize == split_from {
            g.room = (off as u32, dd::room_at(d, off) as u32);
        }
        g.gen = b.write_gen();
        let grew = g.bytes() - old;
        if cfg!(debug_assertions) {
            g.check(b, d, csum);
        }
        self.bytes += grew;
    }

    /// Leaf `lblk` lost the entry at `off` (its record joined `prev`'s, or became free
    /// when first), in one write of the buffer.
    pub fn removed(
        &mut self,
        lblk: u32,
        b: &Arc<Buf>,
        d: &[u8],
        csum: bool,
        off: usize,
        prev: Option<usize>,
    ) {
        let Some(g) = self.before_write(lblk, b) else {
            return;
        };
        let i = g.index(off).ok().filter(|&i| match prev {
            Some(p) => i > 0 && off_of(g.recs[i - 1]) == p,
            None => true,
        });
        let Some(i) = i else {
            debug_assert!(
                false,
                "leaf {lblk}: a removal at {off} the digest cannot place"
            );
            self.forget(lblk);
            return;
        };
        let kept = match prev {
            Some(p) => {
                g.recs.remove(i);
                p
            }
            None => {
                g.recs[i] = rec(off, FREE);
                off
            }
        };
        let r = dd::room_at(d, kept) as u32;
        let room_off = g.room.0 as usize;
        if room_off == off || room_off == kept || r > g.room.1 {
            g.room = (kept as u32, r);
        }
        g.gen = b.write_gen();
        if cfg!(debug_assertions) {
            g.check(b, d, csum);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::BufCache;
    use crate::dev::MemDevice;
    use rand::{Rng, SeedableRng};

    fn cache() -> BufCache {
        BufCache::new(Arc::new(MemDevice::new(1 << 20)), 4096, 1 << 20)
    }

    /// Random inserts (where the digest's room says, else by a walk) and removals on one
    /// leaf: the digest, updated in place, always equals a fresh build, and finds exactly
    /// the names a walk finds.
    #[test]
    fn updates_match_a_rebuild() {
        for (seed, csum) in [(1u64, true), (2, false), (3, true)] {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let bufs = cache();
            let b = bufs.get_new(9);
            dd::init_empty_leaf(&mut b.write(), csum);
            let mut dg = LeafDigests::new(1 << 20);
            let mut names: Vec<Vec<u8>> = Vec::new();
            for step in 0..3000 {
                {
                    let d = b.read();
                    dg.get_or_build(0, &b, &d, csum).unwrap();
                }
                if names.is_empty() || rng.gen_bool(0.55) {
                    let len = rng.gen_range(1..40);
                    let name: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..=b'z')).collect();
                    let d = b.read();
                    let g = dg.current(0, &b).expect("current");
                    let t = tag(&name);
                    let hit = g.find(&d, &name, t);
                    assert_eq!(hit, dd::search_block(&d, csum, 9, &name).unwrap(), "{step}");
                    if hit.is_some() {
                        continue;
                    }
                    let room = g.room(dd::rec_len_for(name.len()));
                    drop(d);
                    let mut d = b.write();
                    let at = match room {
                        Some(r) => dd::insert_at(&mut d, csum, 9, r, &name, 7, 1).unwrap(),
                        None => dd::insert_in_block(&mut d, csum, 9, &name, 7, 1).unwrap(),
                    };
                    match at {
                        Some(off) => {
                            dg.inserted(0, &b, &d, csum, off, t);
                            names.push(name);
                        }
                        None => dg.unchanged(0, &b),
                    }
                } else {
                    let name = names.swap_remove(rng.gen_range(0..names.len()));
                    let hit = {
                        let d = b.read();
                        dg.current(0, &b).unwrap().find(&d, &name, tag(&name))
                    }
                    .expect("a live name is found");
                    let mut d = b.write();
                    dd::remove_entry(&mut d, hit.off, hit.prev);
                    dg.removed(0, &b, &d, csum, hit.off, hit.prev);
                }
                let d = b.read();
                let g = dg.current(0, &b).expect("updates keep the digest current");
                g.check(&b, &d, csum);
            }
        }
    }

    /// A write the digest was not told of makes it stale; the next use rebuilds it.
    #[test]
    fn a_foreign_write_makes_it_stale() {
        let bufs = cache();
        let b = bufs.get_new(3);
        dd::init_empty_leaf(&mut b.write(), true);
        let mut dg = LeafDigests::new(1 << 20);
        dg.get_or_build(0, &b, &b.read(), true).unwrap();
        assert!(dg.current(0, &b).is_some());
        let off = dd::insert_in_block(&mut b.write(), true, 3, b"x", 5, 1)
            .unwrap()
            .unwrap();
        assert!(dg.current(0, &b).is_none());
        // An update after a write it missed drops the digest instead of applying.
        let mut d = b.write();
        dd::remove_entry(&mut d, off, None);
        dg.removed(0, &b, &d, true, off, None);
        drop(d);
        assert!(dg.current(0, &b).is_none());
        let g = dg.get_or_build(0, &b, &b.read(), true).unwrap();
        assert_eq!(g.recs.len(), 1);
        // Another buffer of the same block (after eviction) is not described either.
        let other = cache().get_new(3);
        assert!(dg.current(0, &other).is_none());
    }

    /// Past its budget the digests are dropped but the one just built.
    #[test]
    fn the_budget_holds() {
        let bufs = cache();
        let mut dg = LeafDigests::new(2048);
        for lblk in 0..40u32 {
            let b = bufs.get_new(100 + u64::from(lblk));
            dd::init_empty_leaf(&mut b.write(), false);
            for i in 0..30u32 {
                let name = format!("n{i}");
                dd::insert_in_block(&mut b.write(), false, 1, name.as_bytes(), i + 1, 1).unwrap();
            }
            dg.get_or_build(lblk, &b, &b.read(), false).unwrap();
            assert!(dg.current(lblk, &b).is_some());
            assert!(dg.bytes() <= 2048 + 40 * std::mem::size_of::<Option<Digest>>());
        }
    }

    /// Tags spread: a leaf's worth of names in a series rarely share one.
    #[test]
    fn tags_spread() {
        let tags: std::collections::HashSet<u16> = (0..200)
            .map(|i| tag(format!("file.{i}").as_bytes()))
            .collect();
        assert!(tags.len() >= 198, "{}", tags.len());
        assert!((0..10_000).all(|i| tag(format!("{i}").as_bytes()) != FREE));
    }
}
