//! One file's cached data (the kernel's `address_space`): its folio index, its dirty
//! folios, its read-ahead state and a mirror of its size for the lock-free read path.
//!
//! Who holds what:
//! - a read hit takes no lock but the folio's read lock: an epoch pin, an index walk, the
//!   copy ([`Mapping::read_hits`]);
//! - a read miss runs under the inode's state lock (shared), so no write, truncation or
//!   hole punch runs meanwhile: it reads the read-ahead window into new folios with one
//!   device read per physically contiguous run, then inserts them under the mapping's lock
//!   (class `page`), dropping any a racing reader inserted first;
//! - writes, truncation and hole punching run under the inode's state lock (exclusive) and
//!   the mapping's lock, then one folio's lock at a time;
//! - write-back (`writeback`, one writer per file) takes the dirty set under the mapping's
//!   lock, then holds the read locks of one device write's folios in file order;
//! - the eviction sweep only try-locks the mapping and the folio.

use super::folio::{mask, Folio, FolioData};
use super::index::{FolioIndex, Locked, NODE_BYTES};
use super::PageCache;
use crate::error::{Error, Result};
use crate::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use crate::sync::{Mutex, PAGE, WRITEBACK};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

/// The size mirror before the file's size is known to the mapping.
const SIZE_UNKNOWN: u64 = u64::MAX;

/// Where a run of file blocks lives, from the file's block map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// `len` blocks that read as zeros (a hole or unwritten extent).
    Zero(u64),
    /// `len` blocks stored from physical block `pblk` on.
    Data(u64, u64),
}

/// Sequential read-ahead: the window and the folio order grow while reads continue where
/// the last window ended (the kernel's `page_cache_ra_order`), and fall back to what was
/// asked on any other miss.
#[derive(Default, Debug, Clone, Copy)]
pub struct Readahead {
    /// The block after the last window.
    next: u64,
    /// Blocks in the last window (0: none).
    size: u64,
    /// Folio order of the last window.
    order: u8,
}

impl Readahead {
    /// The window for a miss at `idx` of a read wanting blocks up to `want_end`: its end
    /// (before `eof`) and its largest folio order.
    pub fn window(
        &mut self,
        idx: u64,
        want_end: u64,
        eof: u64,
        max: u64,
        max_order: u8,
    ) -> (u64, u8) {
        let req = want_end.saturating_sub(idx).max(1);
        let (size, order) = if self.size > 0 && idx == self.next {
            let size = (self.size * 2).max(req).min(max.max(req));
            (size, (self.order + 2).min(max_order))
        } else {
            (req, (63 - req.leading_zeros()) as u8)
        };
        let order = order.min(max_order).min(63 - size.leading_zeros() as u8);
        let end = (idx + size).min(eof.max(idx + 1));
        *self = Readahead {
            next: end,
            size: end - idx,
            order,
        };
        (end, order)
    }
}

struct Inner {
    /// Folios with dirty blocks, by first block.
    dirty: BTreeMap<u64, Arc<Folio>>,
    ra: Readahead,
}

/// One file's page cache.
pub struct Mapping {
    index: FolioIndex,
    inner: Mutex<Inner>,
    wb: Mutex<()>,
    /// The file's size as of its last store (`SIZE_UNKNOWN` before), for reads that take no
    /// inode lock.
    size: AtomicU64,
    /// Changes of the file's data made so far, twice, odd while one runs (a seqcount): a
    /// read without the inode lock that sees it move tries again under the lock, so every
    /// read sees a write whole or not at all.
    seq: AtomicU64,
    /// On the page cache's list of dirty files.
    pub(super) listed: AtomicBool,
    /// The device holding this file's blocks when it is not the cache's own (a realtime
    /// file's data device); changed only while the file has no blocks. A plain lock held
    /// for a clone, outside the lock order: IO takes a copy.
    dev: std::sync::RwLock<Option<Arc<dyn crate::dev::BlockDevice>>>,
}

/// An open change of a file's data and size ([`Mapping::change`]).
pub struct Change<'a>(Option<&'a AtomicU64>);

impl Drop for Change<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.0 {
            let before = s.fetch_add(1, Ordering::Release);
            debug_assert!(before & 1 == 1, "a change closed that was not open");
        }
    }
}

impl Mapping {
    /// Keep this file's blocks on `dev` (a realtime file's data device), or on the
    /// cache's device (`None`). Only while the file maps no block and caches no page.
    pub fn set_device(&self, dev: Option<Arc<dyn crate::dev::BlockDevice>>) {
        *self.dev.write().unwrap_or_else(|e| e.into_inner()) = dev;
    }

    /// The device of this file's blocks when it is not the cache's.
    pub fn own_device(&self) -> Option<Arc<dyn crate::dev::BlockDevice>> {
        self.dev.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Default for Mapping {
    fn default() -> Mapping {
        Mapping {
            index: FolioIndex::default(),
            inner: Mutex::new(
                &PAGE,
                Inner {
                    dirty: BTreeMap::new(),
                    ra: Readahead::default(),
                },
            ),
            wb: Mutex::new(&WRITEBACK, ()),
            size: AtomicU64::new(SIZE_UNKNOWN),
            seq: AtomicU64::new(0),
            listed: AtomicBool::new(false),
            dev: std::sync::RwLock::new(None),
        }
    }
}

/// The largest order `<= max` of a folio starting at `pos` that is aligned and ends by
/// `end`.
fn fit_order(pos: u64, end: u64, max: u8) -> u8 {
    let mut o = max.min(pos.trailing_zeros().min(63) as u8);
    while o > 0 && pos + (1 << o) > end {
        o -= 1;
    }
    o
}

impl Mapping {
    /// Open a change of the file's data or size: lock-free reads that overlap it retry
    /// under the inode's lock. The inode's state lock is held exclusively (so changes are
    /// never concurrent); a change inside another one is part of it.
    pub fn change(&self) -> Change<'_> {
        if self.seq.load(Ordering::Relaxed) & 1 == 1 {
            return Change(None);
        }
        let before = self.seq.fetch_add(1, Ordering::AcqRel);
        // Changes run under the inode's exclusive lock: never two at once.
        debug_assert!(before & 1 == 0, "two changes of a file's data at once");
        fence(Ordering::Release);
        Change(Some(&self.seq))
    }

    /// Copy `buf.len()` cached bytes at `off` without the inode's lock, if the file is at
    /// least that long and every block is cached and no change ran meanwhile; returns how
    /// many bytes (`None`: take the locked path).
    pub fn read_fast(&self, bs: usize, off: u64, buf: &mut [u8]) -> Option<usize> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return None;
        }
        let size = self.size()?;
        if off >= size || buf.is_empty() {
            return None;
        }
        let n = (size - off).min(buf.len() as u64) as usize;
        if self.read_hits(bs, off, &mut buf[..n]) < n {
            return None;
        }
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s1).then_some(n)
    }

    /// Record the file's size (the inode's state lock held, after any change to it).
    pub fn set_size(&self, size: u64) {
        self.size.store(size, Ordering::Release);
    }

    /// The size recorded by [`Mapping::set_size`], if any.
    pub fn size(&self) -> Option<u64> {
        let s = self.size.load(Ordering::Acquire);
        (s != SIZE_UNKNOWN).then_some(s)
    }

    /// Copy cached bytes from `off` into `buf` while they are cached; returns how many.
    /// Takes no lock but each folio's read lock.
    pub fn read_hits(&self, bs: usize, off: u64, buf: &mut [u8]) -> usize {
        let g = crossbeam_epoch::pin();
        let bs = bs as u64;
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let Some(f) = self.index.lookup(pos / bs, &g) else {
                break;
            };
            let d = f.read();
            if f.is_removed() {
                // Split or evicted since the walk: look again.
                continue;
            }
            let inb = (pos - f.index * bs) as usize;
            let k = (d.bytes.len() - inb).min(buf.len() - done);
            buf[done..done + k].copy_from_slice(&d.bytes[inb..inb + k]);
            drop(d);
            f.touch();
            done += k;
        }
        done
    }

    /// Read `buf.len()` bytes at `off` (all inside the file of `size` bytes), filling misses
    /// from the device through `map`. The inode's state lock is held (shared or not).
    pub fn read(
        self: &Arc<Self>,
        pc: &PageCache,
        off: u64,
        buf: &mut [u8],
        size: u64,
        map: &dyn Fn(u64) -> Run,
    ) -> Result<()> {
        self.set_size(size);
        let bs = pc.bs as u64;
        let mut done = 0usize;
        let want_end = (off + buf.len() as u64).div_ceil(bs);
        while done < buf.len() {
            done += self.read_hits(pc.bs, off + done as u64, &mut buf[done..]);
            if done < buf.len() {
                let pos = off + done as u64;
                done += self.fill(pc, pos, &mut buf[done..], want_end, size.div_ceil(bs), map)?;
            }
        }
        Ok(())
    }

    /// Read the read-ahead window for a miss at byte `pos` into new folios and insert
    /// them (the inode's state lock held, so the block map is stable); copies into `out`
    /// what the new folios hold from `pos` on (so a read progresses even when the cache
    /// evicts them at once) and returns how many bytes.
    fn fill(
        self: &Arc<Self>,
        pc: &PageCache,
        pos_byte: u64,
        out: &mut [u8],
        want_end: u64,
        eof: u64,
        map: &dyn Fn(u64) -> Run,
    ) -> Result<usize> {
        let bs = pc.bs as u64;
        let plan = self.plan_fill(pc, pos_byte / bs, want_end, eof);
        let datas = self.read_plan(pc, &plan, map)?;
        // The caller's bytes, from the new folios (contiguous from the first).
        let mut copied = 0usize;
        for (d, &(start, _)) in datas.iter().zip(&plan) {
            let at = pos_byte + copied as u64;
            if copied == out.len() {
                break;
            }
            let inb = (at - start * bs) as usize;
            let k = (d.bytes.len() - inb).min(out.len() - copied);
            out[copied..copied + k].copy_from_slice(&d.bytes[inb..inb + k]);
            copied += k;
        }
        // The first folio holds `pos_byte`: the read progresses.
        debug_assert!(copied > 0 || out.is_empty(), "a read miss copied nothing");
        self.insert_filled(pc, datas, plan);
        Ok(copied)
    }

    /// Plan the folios of a miss at block `idx`: the first one as large as fits around
    /// `idx` in blocks no folio holds, the rest aligned pieces of the read-ahead window,
    /// stopping at the first cached block. One run of folios, each aligned to its size,
    /// as (first block, order).
    fn plan_fill(&self, pc: &PageCache, idx: u64, want_end: u64, eof: u64) -> Vec<(u64, u8)> {
        let (mut end, order) =
            self.inner
                .lock()
                .ra
                .window(idx, want_end, eof, pc.max_ra_blocks(), pc.max_order);
        let g = crossbeam_epoch::pin();
        let empty = |a: u64, n: u64| (a..a + n).all(|i| self.index.lookup(i, &g).is_none());
        let mut plan: Vec<(u64, u8)> = Vec::new();
        let mut first = (idx, 0u8);
        for o in (1..=order).rev() {
            let start = idx & !((1u64 << o) - 1);
            if start + (1 << o) <= eof.max(1) && empty(start, 1 << o) {
                first = (start, o);
                break;
            }
        }
        debug_assert!(
            first.0 <= idx && idx < first.0 + (1 << first.1),
            "first folio {first:?} misses block {idx}"
        );
        plan.push(first);
        let mut pos = first.0 + (1 << first.1);
        end = end.max(pos);
        while pos < end {
            if self.index.lookup(pos, &g).is_some() {
                break;
            }
            let mut o = fit_order(pos, end, order);
            while o > 0 && !empty(pos, 1 << o) {
                o -= 1;
            }
            plan.push((pos, o));
            pos += 1 << o;
        }
        drop(g);
        debug_assert!(
            plan.windows(2).all(|w| w[0].0 + (1 << w[0].1) == w[1].0)
                && plan.iter().all(|&(s, o)| s.is_multiple_of(1 << o)),
            "read-ahead plan {plan:?}"
        );
        plan
    }

    /// The folios of `plan`, read from the device through `map` (one read per physically
    /// contiguous run; holes stay zeros), each block's physical block recorded.
    fn read_plan(
        &self,
        pc: &PageCache,
        plan: &[(u64, u8)],
        map: &dyn Fn(u64) -> Run,
    ) -> Result<Vec<FolioData>> {
        let bs = pc.bs as u64;
        let mut datas: Vec<FolioData> = plan
            .iter()
            .map(|&(_, o)| FolioData {
                bytes: vec![0u8; (bs as usize) << o].into_boxed_slice(),
                pblk: vec![0u64; 1 << o].into_boxed_slice(),
            })
            .collect();
        let (lo, hi) = match (plan.first(), plan.last()) {
            (Some(&(lo, _)), Some(&(s, o))) => (lo, s + (1 << o)),
            _ => return Ok(datas),
        };
        let mut l = lo;
        while l < hi {
            let (len, pblk) = match map(l) {
                Run::Zero(n) => (n.max(1).min(hi - l), None),
                Run::Data(p, n) => (n.max(1).min(hi - l), Some(p)),
            };
            if let Some(p) = pblk {
                let mut slices: Vec<&mut [u8]> = Vec::new();
                for (d, &(fs, o)) in datas.iter_mut().zip(plan) {
                    let fe = fs + (1 << o);
                    if fe <= l || fs >= l + len {
                        continue;
                    }
                    let a = l.max(fs);
                    let b = (l + len).min(fe);
                    for k in a..b {
                        d.pblk[(k - fs) as usize] = p + (k - l);
                    }
                    slices.push(&mut d.bytes[((a - fs) * bs) as usize..((b - fs) * bs) as usize]);
                }
                pc.count_read(len * bs);
                let own = self.own_device();
                own.as_deref()
                    .unwrap_or(&*pc.dev)
                    .read_scatter_at(p * bs, &mut slices)?;
            }
            l += len;
        }
        Ok(datas)
    }

    /// Insert the new folios no racing reader inserted first (each checked under the
    /// mapping's lock), then let the cache balance its memory.
    fn insert_filled(
        self: &Arc<Self>,
        pc: &PageCache,
        datas: Vec<FolioData>,
        plan: Vec<(u64, u8)>,
    ) {
        debug_assert_eq!(datas.len(), plan.len(), "a folio per planned piece");
        let inner = self.inner.lock();
        let lk = Locked(std::marker::PhantomData);
        for (d, (start, o)) in datas.into_iter().zip(plan) {
            if !self.index.range_empty(start, 1 << o, &lk) {
                continue;
            }
            let f = pc.new_folio(self, start, o, d);
            let nodes = self.index.insert(f.clone(), &lk);
            pc.charge(nodes as u64 * NODE_BYTES);
            pc.track(f);
        }
        drop(inner);
        pc.balance();
    }

    /// Write `data` at `off` into folios, dirtying them; `blk(lblk)` gives each block's
    /// physical block and whether it holds no data yet (its old bytes are not read). The
    /// inode's state lock is held exclusively and the blocks are mapped.
    pub fn write(
        self: &Arc<Self>,
        pc: &PageCache,
        off: u64,
        data: &[u8],
        blk: &dyn Fn(u64) -> (u64, bool),
    ) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let _c = self.change();
        let bs = pc.bs as u64;
        let end = off + data.len() as u64;
        let (first, last) = (off / bs, (end - 1) / bs);
        let mut inner = self.inner.lock();
        let lk = Locked(std::marker::PhantomData);
        let mut done = 0usize;
        let mut dirtied = false;
        while done < data.len() {
            let pos = off + done as u64;
            let idx = pos / bs;
            let f = match self.index.get(idx, &lk) {
                Some(f) => f,
                None => {
                    let mut o = fit_order(idx, last + 1, pc.max_order);
                    while o > 0 && !self.index.range_empty(idx, 1 << o, &lk) {
                        o -= 1;
                    }
                    let n = 1u64 << o;
                    let mut d = FolioData {
                        bytes: vec![0u8; (bs as usize) << o].into_boxed_slice(),
                        pblk: (idx..idx + n).map(|b| blk(b).0).collect(),
                    };
                    // The edge blocks this write covers in part keep their other bytes.
                    for b in [first, last] {
                        let partial = (b == first && !off.is_multiple_of(bs))
                            || (b == last && !end.is_multiple_of(bs));
                        if partial && b >= idx && b < idx + n && !blk(b).1 {
                            let k = ((b - idx) * bs) as usize;
                            pc.count_read(bs);
                            let own = self.own_device();
                            own.as_deref()
                                .unwrap_or(&*pc.dev)
                                .read_at(blk(b).0 * bs, &mut d.bytes[k..k + bs as usize])?;
                        }
                    }
                    let f = pc.new_folio(self, idx, o, d);
                    let nodes = self.index.insert(f.clone(), &lk);
                    pc.charge(nodes as u64 * NODE_BYTES);
                    pc.track(f.clone());
                    f
                }
            };
            debug_assert!(
                f.index <= idx && idx < f.index + f.blocks(),
                "folio {} of {} blocks for block {idx}",
                f.index,
                f.blocks()
            );
            let mut d = f.write();
            debug_assert!(
                !f.is_removed(),
                "folio {} removed under the mapping lock",
                f.index
            );
            let inb = (pos - f.index * bs) as usize;
            let k = (d.bytes.len() - inb).min(data.len() - done);
            d.bytes[inb..inb + k].copy_from_slice(&data[done..done + k]);
            let (b0, b1) = (pos / bs, (pos + k as u64 - 1) / bs);
            for b in b0..=b1 {
                let p = blk(b).0;
                debug_assert!(p != 0, "block {b} written unmapped");
                d.pblk[(b - f.index) as usize] = p;
            }
            if f.mark_dirty(&d, mask(b0 - f.index, b1 - b0 + 1)) != 0 {
                inner.dirty.entry(f.index).or_insert_with(|| f.clone());
                dirtied = true;
            }
            drop(d);
            done += k;
        }
        drop(inner);
        if dirtied {
            pc.note_dirty(self);
        }
        if pc.dirty_over_limit() {
            // Throttled: the writer writes its own file back (balance_dirty_pages).
            self.write_back(&*pc.dev, pc.bs)?;
        } else if pc.over_background() {
            pc.wake_flusher();
        }
        pc.balance();
        Ok(())
    }

    /// Write `data` at block-aligned `off` straight to the device, not through folios (as
    /// O_DIRECT): the cached blocks of the range are dropped first (their dirty bytes
    /// are all overwritten here), then the data goes out in runs of contiguous physical
    /// blocks, `blk(lblk)` giving each block's. A last block the data ends inside is
    /// written with zeros after the data, so the caller makes this the file's end. The
    /// inode's state lock is held exclusively and the blocks are mapped, so no read can
    /// cache the range meanwhile. No flush.
    pub fn write_direct(
        self: &Arc<Self>,
        pc: &PageCache,
        off: u64,
        data: &[u8],
        blk: &dyn Fn(u64) -> u64,
    ) -> Result<()> {
        let bs = pc.bs;
        assert!(
            off.is_multiple_of(bs as u64),
            "direct write at {off} unaligned"
        );
        if data.is_empty() {
            return Ok(());
        }
        let first = off / bs as u64;
        let nblk = data.len().div_ceil(bs) as u64;
        self.drop_range(pc, first, first + nblk);
        let _c = self.change();
        let own = self.own_device();
        let dev = own.as_deref().unwrap_or(&*pc.dev);
        let mapped = |b: u64| match blk(b) {
            0 => Err(Error::io_other(
                format!("writing block {b} of a file"),
                "no physical block",
            )),
            p => Ok(p),
        };
        // The whole blocks in runs of contiguous physical blocks, each one slice of `data`.
        let whole = (data.len() / bs) as u64;
        let mut k = 0;
        while k < whole {
            let p = mapped(first + k)?;
            let mut n = 1;
            while k + n < whole && n < 1024 && blk(first + k + n) == p + n {
                n += 1;
            }
            let bytes = &data[k as usize * bs..(k + n) as usize * bs];
            dev.write_at(p * bs as u64, bytes)?;
            k += n;
        }
        let tail = &data[whole as usize * bs..];
        if !tail.is_empty() {
            let p = mapped(first + whole)?;
            // Zeros after the data.
            let mut block = vec![0u8; bs];
            block[..tail.len()].copy_from_slice(tail);
            dev.write_at(p * bs as u64, &block)?;
        }
        Ok(())
    }

    /// Write every dirty block to the device, in runs of contiguous physical blocks, one
    /// writer per file at a time. No flush.
    pub fn write_back(&self, dev: &dyn crate::dev::BlockDevice, bs: usize) -> Result<()> {
        let own = self.own_device();
        let dev = own.as_deref().unwrap_or(dev);
        let _wb = self.wb.lock();
        let folios: Vec<Arc<Folio>> = self.inner.lock().dirty.values().cloned().collect();
        if folios.is_empty() {
            return Ok(());
        }
        // Folios whose read locks one batch holds (the lock checker tracks at most 64
        // held locks per thread).
        const BATCH: usize = 48;
        for chunk in folios.chunks(BATCH) {
            let guards: Vec<_> = chunk.iter().map(|f| f.read()).collect();
            let masks: Vec<u64> = chunk.iter().map(|f| f.dirty_mask()).collect();
            let mut runs: Vec<(u64, Vec<&[u8]>)> = Vec::new();
            for ((f, d), &m) in chunk.iter().zip(&guards).zip(&masks) {
                for b in 0..f.blocks() {
                    if m & (1 << b) == 0 {
                        continue;
                    }
                    let p = d.pblk[b as usize];
                    if p == 0 {
                        return Err(Error::io_other(
                            format!("writing back dirty block {} of a file", f.index + b),
                            "no physical block",
                        ));
                    }
                    let bytes = &d.bytes[b as usize * bs..(b as usize + 1) * bs];
                    match runs.last_mut() {
                        Some((start, v)) if *start + v.len() as u64 == p && v.len() < 1024 => {
                            v.push(bytes)
                        }
                        _ => runs.push((p, vec![bytes])),
                    }
                }
            }
            for (start, v) in &runs {
                dev.write_gather_at(start * bs as u64, v)?;
            }
            for (f, &m) in chunk.iter().zip(&masks) {
                // The read locks held keep writers (which set bits) out, and the
                // write-back lock other write-backs: the bits written are still set.
                let was = f.clear_dirty(m);
                debug_assert_eq!(was, m, "folio {}: dirty bits cleared meanwhile", f.index);
            }
            drop(guards);
        }
        let mut inner = self.inner.lock();
        for f in &folios {
            if f.dirty_mask() == 0 && inner.dirty.get(&f.index).is_some_and(|g| Arc::ptr_eq(g, f)) {
                inner.dirty.remove(&f.index);
            }
        }
        Ok(())
    }

    /// Whether any block is dirty (a mapping being changed counts as dirty).
    pub fn has_dirty(&self) -> bool {
        self.inner.try_lock().is_none_or(|i| !i.dirty.is_empty())
    }

    /// Drop the cached blocks of `a..b` (truncate, punch hole, delete): folios inside go,
    /// a large folio the range ends inside is split into aligned pieces and keeps the rest.
    /// The inode's state lock is held exclusively.
    pub fn drop_range(self: &Arc<Self>, pc: &PageCache, a: u64, b: u64) {
        if a >= b {
            return;
        }
        let _c = self.change();
        let mut inner = self.inner.lock();
        if self.index.is_empty() {
            // Nothing was ever cached here: the index's root is made by its first insert,
            // under `inner`, which this holds.
            return;
        }
        let lk = Locked(std::marker::PhantomData);
        let g = crossbeam_epoch::pin();
        for f in self.index.collect(a, b, &lk) {
            let mut d = f.write();
            let (fa, fb) = (f.index, f.index + f.blocks());
            let dirty = f.clear_dirty(u64::MAX);
            self.index.remove(&f, &g, &lk);
            if inner.dirty.get(&fa).is_some_and(|x| Arc::ptr_eq(x, &f)) {
                inner.dirty.remove(&fa);
            }
            for (ka, kb) in [(fa, a.min(fb)), (b.max(fa), fb)] {
                let mut pos = ka;
                while pos < kb {
                    let o = fit_order(pos, kb, f.order);
                    let n = 1u64 << o;
                    let (s, e) = ((pos - fa) as usize, (pos - fa + n) as usize);
                    let bsz = pc.bs;
                    let piece = FolioData {
                        bytes: d.bytes[s * bsz..e * bsz].to_vec().into_boxed_slice(),
                        pblk: d.pblk[s..e].to_vec().into_boxed_slice(),
                    };
                    let p = pc.new_folio(self, pos, o, piece);
                    let keep = (dirty >> s) & mask(0, n);
                    if keep != 0 {
                        let pd = p.write();
                        p.mark_dirty(&pd, keep);
                        drop(pd);
                        inner.dirty.insert(pos, p.clone());
                    }
                    let nodes = self.index.insert(p.clone(), &lk);
                    pc.charge(nodes as u64 * NODE_BYTES);
                    pc.track(p);
                    pos += n;
                }
            }
            f.set_removed(&mut d);
        }
        drop((g, inner));
        // The sweeps of operations beside this one may have skipped folios it held.
        pc.balance();
    }

    /// Drop every clean folio nobody holds (the bench's cold reads; `drop_caches`).
    pub fn drop_clean(&self) {
        let Some(_inner) = self.inner.try_lock() else {
            return;
        };
        let lk = Locked(std::marker::PhantomData);
        let g = crossbeam_epoch::pin();
        for f in self.index.collect(0, u64::MAX, &lk) {
            if let Some(mut d) = f.try_write() {
                if f.dirty_mask() == 0 {
                    self.index.remove(&f, &g, &lk);
                    f.set_removed(&mut d);
                }
            }
        }
    }

    /// Evict `f` if it is clean and nobody holds it or its mapping (the sweep).
    pub(crate) fn evict(&self, f: &Folio) -> bool {
        let Some(_inner) = self.inner.try_lock() else {
            return false;
        };
        let Some(mut d) = f.try_write() else {
            return false;
        };
        if f.is_removed() || f.dirty_mask() != 0 {
            return false;
        }
        let lk = Locked(std::marker::PhantomData);
        let g = crossbeam_epoch::pin();
        self.index.remove(f, &g, &lk);
        f.set_removed(&mut d);
        true
    }

    /// A weak reference for the folios' back pointer.
    pub(crate) fn weak(self: &Arc<Self>) -> Weak<Mapping> {
        Arc::downgrade(self)
    }
}

#[cfg(test)]
mod tests {
    use super::{fit_order, Readahead};

    #[test]
    fn orders_fit_alignment_and_end() {
        assert_eq!(fit_order(0, 100, 4), 4);
        assert_eq!(fit_order(8, 100, 4), 3);
        assert_eq!(fit_order(16, 20, 4), 2);
        assert_eq!(fit_order(3, 100, 4), 0);
    }

    #[test]
    fn readahead_grows_on_sequential_misses_and_resets_on_others() {
        let mut ra = Readahead::default();
        assert_eq!(ra.window(0, 16, 1 << 20, 512, 6), (16, 4));
        assert_eq!(ra.window(16, 32, 1 << 20, 512, 6), (48, 5));
        assert_eq!(ra.window(48, 64, 1 << 20, 512, 6), (112, 6));
        let mut last = (0, 0);
        let mut at = 112;
        for _ in 0..10 {
            last = ra.window(at, at + 16, 1 << 20, 512, 6);
            at = last.0;
        }
        assert_eq!(ra.size, 512, "the window stops at its largest");
        // A jump elsewhere reads only what was asked.
        assert_eq!(ra.window(5000, 5016, 1 << 20, 512, 6), (5016, 4));
        // The end of the file cuts the window.
        assert_eq!(ra.window(5016, 5032, 5020, 512, 6).0, 5020);
        let _ = last;
    }
}
