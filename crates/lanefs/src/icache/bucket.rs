//! The `bucket` table's buckets: intrusive chains through the cached inodes' own links,
//! read under the epoch with no lock, written under the bucket's lock.

use super::*;

/// A table entry.
#[derive(Clone)]
pub enum Slot {
    /// A set-up inode.
    Ready(Arc<Inode>),
    /// A placeholder while the inode is read or created.
    New(Arc<Setup>),
}

impl Slot {
    pub(super) fn same(&self, other: &Slot) -> bool {
        match (self, other) {
            (Slot::Ready(a), Slot::Ready(b)) => Arc::ptr_eq(a, b),
            (Slot::New(a), Slot::New(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// How many victims ahead of the one it drops a sweep's deferred drop asks for lines
/// ([`Bucket::retire_all`]).
const RELEASE_AHEAD: usize = 4;

/// The tag of a placeholder's link.
pub(super) const SETUP_TAG: usize = 1;

/// The chain's link value for `s`, taking one strong count for the chain.
pub(super) fn into_link(s: Slot) -> usize {
    // The tag is the low bit of an aligned pointer: it must be free in the pointer.
    let p = match &s {
        Slot::Ready(i) => Arc::as_ptr(i) as usize,
        Slot::New(x) => Arc::as_ptr(x) as usize,
    };
    debug_assert_eq!(
        p & SETUP_TAG,
        0,
        "entry at {p:#x} leaves no room for the tag"
    );
    match s {
        Slot::Ready(i) => Arc::into_raw(i) as usize,
        Slot::New(x) => Arc::into_raw(x) as usize | SETUP_TAG,
    }
}

/// The link value `s` has in a chain (no count taken).
pub(super) fn link_of(s: &Slot) -> usize {
    match s {
        Slot::Ready(i) => Arc::as_ptr(i) as usize,
        Slot::New(x) => Arc::as_ptr(x) as usize | SETUP_TAG,
    }
}

/// The inode number `s` is the entry of.
fn slot_ino(s: &Slot) -> u64 {
    match s {
        Slot::Ready(i) => i.cache.next.key(),
        Slot::New(x) => x.next.key(),
    }
}

/// An entry of a chain, borrowed.
#[derive(Clone, Copy)]
pub(super) enum Entry<'a> {
    Ready(&'a Inode),
    New(&'a Setup),
}

impl<'a> Entry<'a> {
    pub(super) fn ino(self) -> u64 {
        self.next().key()
    }
    pub(super) fn next(self) -> &'a Link {
        match self {
            Entry::Ready(i) => &i.cache.next,
            Entry::New(x) => &x.next,
        }
    }
}

/// One bucket of the `bucket` table: an intrusive chain through the entries' own links,
/// so inserting and removing allocate nothing. Writers hold `lock`; readers pin the epoch
/// and walk with no lock. A writer publishes a change with one release store of one link
/// (a new entry's own link is set before it is linked; a replacement takes over its
/// predecessor's successor first), and never changes the link of an entry it unlinked, so
/// a reader standing on it walks on into the chain. An unlinked entry is never linked
/// again, and the chain's count of it is dropped through the epoch, after every reader
/// that could stand on it has unpinned.
pub(super) struct Bucket {
    pub(super) lock: Mutex<()>,
    pub(super) head: Link,
}

// `unsafe` here walks a bucket's chain under the epoch and hands its entries' counts back,
// each block stating why it is sound.
#[allow(unsafe_code)]
impl Bucket {
    pub(super) fn new() -> Bucket {
        Bucket {
            lock: Mutex::new(&ICACHE_BUCKET, ()),
            head: Link::new(0),
        }
    }

    /// The entry a non-zero link value points to.
    ///
    /// # Safety
    /// `v` was read from this chain's links by a thread that is pinned (or holds the
    /// bucket's lock) since before it read `v`, and the borrow ends before it unpins (or
    /// lets the lock go).
    pub(super) unsafe fn entry<'a>(v: usize) -> Entry<'a> {
        debug_assert!(v != 0, "the end of a chain is no entry");
        if v & SETUP_TAG != 0 {
            // SAFETY: the caller's contract: `v` came from `into_link` of an `Arc<Setup>`
            // the chain (or a deferred drop that waits for this pin) still counts.
            Entry::New(unsafe { &*((v & !SETUP_TAG) as *const Setup) })
        } else {
            // SAFETY: as above, for an `Arc<Inode>`.
            Entry::Ready(unsafe { &*(v as *const Inode) })
        }
    }

    /// A counted `Slot` for a link value.
    ///
    /// # Safety
    /// As [`Bucket::entry`].
    pub(super) unsafe fn slot(v: usize) -> Slot {
        if v & SETUP_TAG != 0 {
            let p = (v & !SETUP_TAG) as *const Setup;
            // SAFETY: `p` is from `Arc::into_raw` and its count is held by the chain (or
            // its deferred drop) until after the caller's pin: adding a count is sound.
            unsafe {
                Arc::increment_strong_count(p);
                Slot::New(Arc::from_raw(p))
            }
        } else {
            let p = v as *const Inode;
            // SAFETY: as above, for an `Arc<Inode>`.
            unsafe {
                Arc::increment_strong_count(p);
                Slot::Ready(Arc::from_raw(p))
            }
        }
    }

    /// Ask the CPU for the lines a sweep reads of the chain's first inode (its counts,
    /// cache link, open count and state lock), so that a sweep a few buckets behind finds
    /// them loaded: in a cache of cold inodes (millions of files created, the oldest
    /// evicted) each inode the hand reaches is several cache misses in a row otherwise.
    /// Only a hint: nothing is read through the pointer here.
    pub(super) fn prefetch_head(&self) {
        Self::prefetch_entry(self.head.get());
    }

    /// Ask for the lines of the inode linked as `v` (if it is one) that a sweep reads and
    /// a drop writes. A hint: nothing is read through `v`.
    pub(super) fn prefetch_entry(v: usize) {
        if v == 0 || v & SETUP_TAG != 0 {
            return;
        }
        // `Arc::into_raw` points past the two counts (the strong count is what a sweep's
        // `slot_locked` increments).
        let base = v.wrapping_sub(2 * std::mem::size_of::<usize>());
        prefetch(base);
        prefetch(v + std::mem::offset_of!(Inode, cache));
        prefetch(v + std::mem::offset_of!(Inode, state));
        prefetch(v + std::mem::offset_of!(Inode, open));
    }

    /// The entry for `ino`, without a lock.
    pub(super) fn find(&self, ino: u64) -> Option<Slot> {
        let _g = epoch::pin();
        let mut v = self.head.get();
        while v != 0 {
            // SAFETY: `v` was read from the chain while pinned (`_g`), and is used before
            // `_g` drops.
            let e = unsafe { Self::entry(v) };
            if e.ino() == ino {
                // SAFETY: as above.
                return Some(unsafe { Self::slot(v) });
            }
            v = e.next().get();
        }
        None
    }

    /// Run `f` on every entry, without a lock.
    pub(super) fn for_each(&self, f: &mut impl FnMut(&Slot)) {
        let _g = epoch::pin();
        let mut v = self.head.get();
        while v != 0 {
            // SAFETY: as in `find`.
            let s = unsafe { Self::slot(v) };
            f(&s);
            // SAFETY: as in `find`.
            v = unsafe { Self::entry(v) }.next().get();
        }
    }

    /// A counted `Slot` for the linked entry `v` (lock held).
    pub(super) fn slot_locked(&self, v: usize) -> Slot {
        debug_assert!(self.lock.is_locked(), "bucket changed without its lock");
        // SAFETY: the lock is held, so no one else unlinks: `v`, read from this chain's
        // links under the lock, stays linked and counted by the chain meanwhile.
        unsafe { Self::slot(v) }
    }

    /// The link inside the linked entry `v` (lock held; the borrow must end before the
    /// lock is let go, which every caller's guard outlives).
    pub(super) fn next_locked(&self, v: usize) -> &Link {
        debug_assert!(self.lock.is_locked(), "bucket changed without its lock");
        // SAFETY: as in `slot_locked`; the entry is not freed before it is unlinked and
        // every pin taken meanwhile ends, which is after this lock is let go.
        unsafe { Self::entry(v) }.next()
    }

    /// The link pointing to `ino`'s entry and the entry (lock held).
    pub(super) fn find_locked(&self, ino: u64) -> Option<(&Link, usize)> {
        debug_assert!(
            self.lock.is_locked(),
            "bucket walked for a change without its lock"
        );
        let mut pred = &self.head;
        loop {
            let v = pred.get();
            if v == 0 {
                return None;
            }
            // SAFETY: as in `slot_locked`.
            if unsafe { Self::entry(v) }.ino() == ino {
                return Some((pred, v));
            }
            pred = self.next_locked(v);
        }
    }

    /// Link `s` at the head (lock held; no entry of its number is linked).
    pub(super) fn push_locked(&self, s: Slot) {
        // One entry per number in a chain.
        debug_assert!(
            self.find_locked(slot_ino(&s)).is_none(),
            "inode {} linked twice",
            slot_ino(&s)
        );
        let v = into_link(s);
        // `v` is counted by the chain from now on; its link is set before it is reachable.
        self.next_locked(v).set(self.head.get());
        self.head.set(v);
    }

    /// Put `s` where `old` (linked at `pred`) is, in one store (lock held); the chain's
    /// count of `old` is dropped once no reader can stand on it.
    pub(super) fn replace_locked(&self, pred: &Link, old: usize, s: Slot) {
        debug_assert_eq!(
            pred.get(),
            old,
            "replaced entry not linked at its predecessor"
        );
        debug_assert_eq!(
            self.next_locked(old).key(),
            slot_ino(&s),
            "an entry replaced by another number's"
        );
        let v = into_link(s);
        self.next_locked(v).set(self.next_locked(old).get());
        pred.set(v);
        Self::retire(old);
    }

    /// Unlink `old` (linked at `pred`; lock held); its count is dropped as in `replace`.
    pub(super) fn unlink_locked(&self, pred: &Link, old: usize) {
        Self::retire(self.unlink_keep_locked(pred, old));
    }

    /// Unlink `old` (linked at `pred`; lock held) and hand the chain's count of it to the
    /// caller, who gives it back through [`Bucket::retire_all`].
    pub(super) fn unlink_keep_locked(&self, pred: &Link, old: usize) -> usize {
        debug_assert_eq!(
            pred.get(),
            old,
            "unlinked entry not linked at its predecessor"
        );
        pred.set(self.next_locked(old).get());
        old
    }

    /// [`Bucket::retire`] for many entries at once, in one deferred drop that asks for the
    /// lines of the entries a few ahead of the one it drops: a sweep's victims are the
    /// coldest inodes in the cache, and each drop was a few misses waited for one by one.
    /// The thread's deferred drops are flushed to the global queue at once: a batch left
    /// in the bag of a thread that then went quiet would hold uncharged inodes (and a
    /// realtime file's device claim) for as long as it stays quiet.
    pub(super) fn retire_all(vs: Vec<usize>) {
        if vs.is_empty() {
            return;
        }
        let g = epoch::pin();
        // SAFETY: as in `retire`, for each entry of `vs`: each was unlinked (by
        // `unlink_keep_locked`) before this pin, is never linked again, and its count is
        // given back once, by this closure, after every reader pinned before the unlink
        // has unpinned. The closure moves a vector of integers, `Send` whatever thread
        // runs it.
        unsafe {
            g.defer_unchecked(move || {
                for (i, &v) in vs.iter().enumerate() {
                    if let Some(&n) = vs.get(i + RELEASE_AHEAD) {
                        Self::prefetch_entry(n);
                    }
                    Self::release(v);
                }
            })
        };
        g.flush();
    }

    /// Drop the chain's count of the unlinked `v` after every current pin ends.
    pub(super) fn retire(v: usize) {
        let g = epoch::pin();
        // SAFETY: `v` is unlinked and never linked again, so only readers pinned now can
        // reach it; the closure runs after all of them unpin, and owns the count the chain
        // held (taken by `into_link`), which it gives back exactly once. The closure moves
        // a plain integer, so it is `Send` whatever thread runs it.
        unsafe { g.defer_unchecked(move || Self::release(v)) };
    }

    /// Give back the count a chain held of the entry `v` (taken by `into_link`).
    ///
    /// # Safety
    /// `v` is unlinked (or its chain is being dropped), no reader can stand on it any
    /// more, and its count is given back only this once.
    pub(super) unsafe fn release(v: usize) {
        // SAFETY: the caller's contract; `v` came from `Arc::into_raw` of the tagged type.
        unsafe {
            if v & SETUP_TAG != 0 {
                drop(Arc::from_raw((v & !SETUP_TAG) as *const Setup));
            } else {
                drop(Arc::from_raw(v as *const Inode));
            }
        }
    }
}

#[allow(unsafe_code)]
impl Drop for Bucket {
    fn drop(&mut self) {
        // `&mut self`: no reader or writer can reach this bucket any more; every linked
        // entry's count is the chain's, given back here.
        let mut v = self.head.get();
        while v != 0 {
            // SAFETY: exclusive access; `v` is linked and counted.
            let next = unsafe { Self::entry(v) }.next().get();
            // SAFETY: exclusive access: no reader remains; the chain's count, given back once.
            unsafe { Self::release(v) };
            v = next;
        }
    }
}
