//! A file's folio index: a radix tree of 64-slot nodes keyed by block index (the kernel's
//! XArray, `i_pages`). A folio of order n fills its 2^n slots, all in one leaf (orders
//! stop at 6), so every block index inside it finds it in one walk.
//!
//! Lookups take no lock: they walk under a crossbeam-epoch pin (the RCU of this design).
//! Inserts and removals are made by the holder of the mapping's lock (class `page`),
//! which the caller proves by passing the locked state. A removed folio's reference from
//! the index is dropped after the epoch's grace period, so a pinned reader never sees it
//! freed. Nodes are freed only with the index (the mapping), when no reader can hold it.
//! The tree grows upward (a new root over the old one) as the file's cached range grows.

// With `icache`'s bucket chains, the places in the engine with `unsafe`: each block
// states why it is sound.
#![allow(unsafe_code)]

use super::folio::Folio;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crossbeam_epoch::Guard;
use std::sync::Arc;

const BITS: u32 = 6;
const FAN: usize = 1 << BITS;

/// One node: 64 slots of child nodes (`shift > 0`) or folios (`shift == 0`).
struct Node {
    shift: u32,
    slots: [AtomicUsize; FAN],
}

impl Node {
    fn new(shift: u32) -> *mut Node {
        Box::into_raw(Box::new(Node {
            shift,
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
        }))
    }
    /// Whether `idx` is in the range this node covers when it is the root.
    fn spans(&self, idx: u64) -> bool {
        idx >> (self.shift + BITS) == 0
    }
    fn slot(&self, idx: u64) -> &AtomicUsize {
        &self.slots[((idx >> self.shift) as usize) & (FAN - 1)]
    }
}

/// Bytes of one index node (counted against the page cache's limit).
pub const NODE_BYTES: u64 = std::mem::size_of::<Node>() as u64;

/// The index's strong reference to a removed folio, dropped once no pinned reader can
/// hold a pointer to it.
#[cfg(not(shuttle))]
struct Retired(*const Folio);
// SAFETY: the pointer is an `Arc<Folio>` given up by the index (`Arc::into_raw`); it is
// turned back into that Arc exactly once, on whichever thread runs the deferred drop, and
// `Folio` is `Send + Sync`.
#[cfg(not(shuttle))]
unsafe impl Send for Retired {}

/// Proof that the caller holds the mapping's lock (the locked state's address).
pub struct Locked<'a>(pub(crate) std::marker::PhantomData<&'a ()>);

/// The folio index of one file.
pub struct FolioIndex {
    root: AtomicUsize,
    /// Under `cfg(shuttle)`, removed folios are kept here until the index is dropped
    /// instead of going to the epoch: a shuttle execution must leave no crossbeam garbage
    /// behind, whose drops would run after it, on shuttle objects it already freed.
    #[cfg(shuttle)]
    retired: std::sync::Mutex<Vec<Arc<Folio>>>,
}

impl Default for FolioIndex {
    fn default() -> FolioIndex {
        FolioIndex {
            root: AtomicUsize::new(0),
            #[cfg(shuttle)]
            retired: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl FolioIndex {
    /// Whether no folio was ever inserted (the root, once made, stays until the index is
    /// dropped; a caller that holds the mapping's lock sees no insert begin meanwhile).
    pub fn is_empty(&self) -> bool {
        self.root.load(Ordering::Acquire) == 0
    }

    /// The folio holding block `idx`, valid while `_g` is pinned.
    pub fn lookup<'g>(&self, idx: u64, _g: &'g Guard) -> Option<&'g Folio> {
        let p = self.root.load(Ordering::Acquire) as *const Node;
        if p.is_null() {
            return None;
        }
        // SAFETY: nodes are freed only when the index is dropped (`&mut self`), so every
        // node reachable from `&self` lives as long as the borrow, which outlives `'g`'s use
        // here (the caller holds the mapping, which owns the index).
        let mut n = unsafe { &*p };
        if !n.spans(idx) {
            return None;
        }
        loop {
            let s = n.slot(idx).load(Ordering::Acquire);
            if s == 0 {
                return None;
            }
            if n.shift == 0 {
                // SAFETY: a folio pointer in a slot is an `Arc<Folio>` the index owns; on
                // removal its slots are cleared before the Arc is dropped, and the drop is
                // deferred past every pin taken before the clear, including `_g`.
                let f = unsafe { &*(s as *const Folio) };
                debug_assert!(
                    f.index <= idx && idx - f.index < f.blocks(),
                    "slot {idx} holds folio {} of {} blocks",
                    f.index,
                    f.blocks()
                );
                return Some(f);
            }
            // SAFETY: as for the root: child nodes live until the index is dropped.
            n = unsafe { &*(s as *const Node) };
        }
    }

    /// The folio holding block `idx` as a strong reference (the mapping's lock held: it
    /// cannot be removed meanwhile).
    pub fn get(&self, idx: u64, _l: &Locked<'_>) -> Option<Arc<Folio>> {
        let g = crossbeam_epoch::pin();
        let f = self.lookup(idx, &g)? as *const Folio;
        // SAFETY: the index holds a strong count of `f` until a removal, which needs the
        // lock the caller holds; taking another count and wrapping it gives an owned Arc.
        unsafe {
            Arc::increment_strong_count(f);
            Some(Arc::from_raw(f))
        }
    }

    /// Whether no folio holds any block of `a..a + n`.
    pub fn range_empty(&self, a: u64, n: u64, _l: &Locked<'_>) -> bool {
        let g = crossbeam_epoch::pin();
        (a..a + n).all(|i| self.lookup(i, &g).is_none())
    }

    /// Insert `f` into its slots (all empty: the caller checked with `range_empty`).
    /// Returns how many nodes were added (for the memory count).
    pub fn insert(&self, f: Arc<Folio>, _l: &Locked<'_>) -> usize {
        let (first, n) = (f.index, f.blocks());
        // Aligned and at most 64 blocks: every slot in one leaf.
        debug_assert!(
            first % FAN as u64 + n <= FAN as u64,
            "folio {first} of {n} blocks crosses a leaf"
        );
        debug_assert!(!f.is_removed(), "folio {first} inserted after removal");
        let added = self.grow_to(first + n - 1);
        let (leaf, more) = self.leaf_for(first);
        let raw = Arc::into_raw(f) as usize;
        for k in 0..n {
            let s = leaf.slot(first + k);
            debug_assert_eq!(s.load(Ordering::Relaxed), 0, "slot {} taken", first + k);
            s.store(raw, Ordering::Release);
        }
        added + more
    }

    /// Take `f` out of its slots; its reference is dropped after the grace period of `g`.
    pub fn remove(&self, f: &Folio, g: &Guard, _l: &Locked<'_>) {
        let p = self.root.load(Ordering::Acquire) as *const Node;
        assert!(
            !p.is_null(),
            "removal of folio {} from an empty index",
            f.index
        );
        // SAFETY: nodes live until the index is dropped (see `lookup`).
        let mut n = unsafe { &*p };
        while n.shift > 0 {
            let s = n.slot(f.index).load(Ordering::Acquire);
            assert!(s != 0, "folio {} not in the index", f.index);
            // SAFETY: as above.
            n = unsafe { &*(s as *const Node) };
        }
        let me = f as *const Folio as usize;
        for k in 0..f.blocks() {
            let s = n.slot(f.index + k);
            debug_assert_eq!(
                s.load(Ordering::Relaxed),
                me,
                "slot {} of another folio",
                f.index + k
            );
            s.store(0, Ordering::Release);
        }
        #[cfg(shuttle)]
        {
            let _ = g;
            // SAFETY: the index's strong count of the folio, given up by the slots just
            // cleared, is taken back exactly once, into the list dropped with the index.
            let f = unsafe { Arc::from_raw(me as *const Folio) };
            self.retired
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(f);
        }
        #[cfg(not(shuttle))]
        {
            let r = Retired(me as *const Folio);
            // SAFETY: the slots no longer lead to the folio, so only readers pinned before
            // now may hold it; the deferred drop runs after all of them unpin. The index's
            // strong count is given back exactly once (see `Retired`).
            unsafe {
                g.defer_unchecked(move || {
                    let r = r;
                    drop(Arc::from_raw(r.0));
                });
            }
        }
    }

    /// Every folio holding a block of `a..b`, in file order (the lock held).
    pub fn collect(&self, a: u64, b: u64, _l: &Locked<'_>) -> Vec<Arc<Folio>> {
        let mut out = Vec::new();
        let p = self.root.load(Ordering::Acquire) as *const Node;
        if !p.is_null() && a < b {
            // SAFETY: nodes live until the index is dropped (see `lookup`).
            collect_node(unsafe { &*p }, 0, a, b, &mut out);
        }
        debug_assert!(
            out.windows(2)
                .all(|w| w[0].index + w[0].blocks() <= w[1].index),
            "folios of {a}..{b} out of order or overlapping"
        );
        out
    }

    /// Raise the root until it spans `idx`; returns nodes added.
    fn grow_to(&self, idx: u64) -> usize {
        let mut added = 0;
        let mut root = self.root.load(Ordering::Acquire) as *mut Node;
        if root.is_null() {
            root = Node::new(0);
            added += 1;
            self.root.store(root as usize, Ordering::Release);
        }
        // SAFETY: nodes live until the index is dropped (see `lookup`).
        while !unsafe { &*root }.spans(idx) {
            // SAFETY: as above; `root` is the live root node.
            let shift = unsafe { &*root }.shift;
            let up = Node::new(shift + BITS);
            // SAFETY: `up` was just allocated and is not shared yet.
            unsafe { &*up }.slots[0].store(root as usize, Ordering::Release);
            self.root.store(up as usize, Ordering::Release);
            root = up;
            added += 1;
        }
        added
    }

    /// The leaf holding `idx`'s slot, creating nodes on the way; and how many it made.
    fn leaf_for(&self, idx: u64) -> (&Node, usize) {
        let mut added = 0;
        // SAFETY: `grow_to` made the root; nodes live until the index is dropped.
        let mut n = unsafe { &*(self.root.load(Ordering::Acquire) as *const Node) };
        while n.shift > 0 {
            let s = n.slot(idx);
            let mut c = s.load(Ordering::Acquire);
            if c == 0 {
                c = Node::new(n.shift - BITS) as usize;
                s.store(c, Ordering::Release);
                added += 1;
            }
            // SAFETY: as above.
            n = unsafe { &*(c as *const Node) };
        }
        (n, added)
    }
}

/// Collect the folios of `a..b` under node `n`, whose first block is `base`.
fn collect_node(n: &Node, base: u64, a: u64, b: u64, out: &mut Vec<Arc<Folio>>) {
    let span = 1u64 << n.shift;
    for (k, s) in n.slots.iter().enumerate() {
        let lo = base + k as u64 * span;
        let hi = lo + span;
        if hi <= a || lo >= b {
            continue;
        }
        let p = s.load(Ordering::Acquire);
        if p == 0 {
            continue;
        }
        if n.shift > 0 {
            // SAFETY: nodes live until the index is dropped (see `FolioIndex::lookup`).
            collect_node(unsafe { &*(p as *const Node) }, lo, a, b, out);
            continue;
        }
        let f = p as *const Folio;
        // SAFETY: the folio is in the index, which holds a strong count that only a removal
        // (under the lock the caller holds) gives up.
        let folio = unsafe { &*f };
        // A folio fills several slots: take it at its first slot in range only.
        if folio.index == lo || lo == a {
            if out.last().is_some_and(|l| std::ptr::eq(&**l, folio)) {
                continue;
            }
            // SAFETY: as above; the new count is owned by the Arc made here.
            unsafe {
                Arc::increment_strong_count(f);
                out.push(Arc::from_raw(f));
            }
        }
    }
}

impl Drop for FolioIndex {
    fn drop(&mut self) {
        let p = *self.root.get_mut() as *mut Node;
        if !p.is_null() {
            free_node(p);
        }
    }
}

/// Free node `p` and everything under it, giving back the index's folio references.
fn free_node(p: *mut Node) {
    // SAFETY: called only from `Drop` (no reader or writer left); every node was made by
    // `Node::new` (`Box::into_raw`) and is freed once, as the tree has no shared subtrees.
    let n = unsafe { Box::from_raw(p) };
    for (k, s) in n.slots.iter().enumerate() {
        let v = s.load(Ordering::Acquire);
        if v == 0 {
            continue;
        }
        if n.shift > 0 {
            free_node(v as *mut Node);
        } else {
            let f = v as *const Folio;
            // SAFETY: the folio's first slot holds the index's one strong count of it.
            if unsafe { &*f }.index & (FAN as u64 - 1) == k as u64 {
                // SAFETY: this slot stands for the index's one strong count, given back once.
                drop(unsafe { Arc::from_raw(f) });
            }
        }
    }
}
