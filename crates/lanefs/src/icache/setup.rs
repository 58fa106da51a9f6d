//! Claims on inode numbers: the placeholder ([`Setup`]) an inode being read or created
//! sits in the table as, which lookups of its number wait on, and the claim
//! ([`NewInode`]) that publishes the inode or, dropped, removes the placeholder.

use super::{gate_switch, ICache, IRef, Ordering, Slot};
use crate::inode::Inode;
use crate::usegate::Link;
#[cfg(not(shuttle))]
use parking_lot::{Condvar, Mutex as SetupMutex};
#[cfg(shuttle)]
use shuttle::sync::{Condvar, Mutex as SetupMutex};
use std::sync::Arc;

/// An inode being set up (read from disk or created): lookups wait on it. Finishing
/// wakes nobody (no system call) unless someone waits: `parking_lot`'s condition
/// variable knows (std's always calls futex wake).
pub struct Setup {
    done: SetupMutex<bool>,
    cv: Condvar,
    /// Its link in a `bucket` chain (with the number it holds).
    pub(super) next: Link,
}

impl Setup {
    pub(super) fn new(ino: u64) -> Arc<Setup> {
        Arc::new(Setup {
            done: SetupMutex::new(false),
            cv: Condvar::new(),
            next: Link::new(ino),
        })
    }
    #[cfg(not(shuttle))]
    pub(super) fn wait(&self) {
        let mut d = self.done.lock();
        while !*d {
            self.cv.wait(&mut d);
        }
    }
    #[cfg(not(shuttle))]
    fn finish(&self) {
        let mut d = self.done.lock();
        debug_assert!(!*d, "inode {} set up twice", self.next.key());
        *d = true;
        drop(d);
        self.cv.notify_all();
    }
    #[cfg(shuttle)]
    pub(super) fn wait(&self) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*d {
            d = self.cv.wait(d).unwrap_or_else(|e| e.into_inner());
        }
    }
    #[cfg(shuttle)]
    fn finish(&self) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        debug_assert!(!*d, "inode {} set up twice", self.next.key());
        *d = true;
        drop(d);
        self.cv.notify_all();
    }
}

impl ICache {
    /// The cached inode `ino` (a lookup: marked referenced), or, when it is not cached,
    /// a claim on its number: a placeholder that lookups of the number wait on until the
    /// claim is finished with the inode or dropped. A caller may also work on the inode's
    /// disk bytes under the claim and drop it without ever caching the inode (an unlink of
    /// a cold inode, `Fs::remove`).
    pub fn get_or_claim(&self, ino: u64) -> Got<'_> {
        loop {
            if let Some(r) = self.find_use(ino, true) {
                return Got::Cached(r);
            }
            let setup = Setup::new(ino);
            let slot = Slot::New(setup.clone());
            // Another lookup or a create may have claimed the number meanwhile.
            if let Ok(old) = self.put(ino, slot.clone(), |_| false) {
                debug_assert!(old.is_none(), "inode {ino}: an entry replaced by a lookup");
                return Got::Claimed(NewInode {
                    cache: self,
                    ino,
                    slot,
                    setup,
                    done: false,
                });
            }
        }
    }

    /// Replace placeholder `slot` by the set-up `inode`; returns a use of it.
    fn publish(&self, ino: u64, slot: &Slot, inode: Inode) -> IRef {
        let a = Arc::new(inode);
        gate_switch();
        let first = a.cache.gate.try_use();
        debug_assert!(first, "a new inode is not dead");
        let charge = a.mem_bytes() as u64;
        a.cache.charge.store(charge, Ordering::Relaxed);
        let put = self.put(ino, Slot::Ready(a.clone()), |s| s.same(slot));
        debug_assert!(
            matches!(put, Ok(Some(Slot::New(_)))),
            "inode {ino}: placeholder lost"
        );
        self.charged.add(charge as i64, 1);
        IRef(a)
    }

    /// Claim `ino` for a new inode that its creator sets up (insert_inode_locked): a
    /// cached copy of a freed inode of that number is replaced; one being read waits.
    /// A live cached inode with the number means the bitmap was wrong: an error.
    pub fn begin_new(&self, ino: u64) -> crate::error::Result<NewInode<'_>> {
        loop {
            let setup = Setup::new(ino);
            let slot = Slot::New(setup.clone());
            let dead_copy = |s: &Slot| matches!(s, Slot::Ready(i) if i.is_freed());
            match self.put(ino, slot.clone(), dead_copy) {
                Ok(old) => {
                    debug_assert!(
                        old.as_ref().is_none_or(dead_copy),
                        "inode {ino}: a live entry replaced by a new inode"
                    );
                    if let Some(Slot::Ready(i)) = old {
                        self.uncharge(&i);
                    }
                    return Ok(NewInode {
                        cache: self,
                        ino,
                        slot,
                        setup,
                        done: false,
                    });
                }
                Err(Slot::New(s)) => s.wait(),
                Err(Slot::Ready(_)) => {
                    return Err(crate::error::Error::corrupt(
                        "inode bitmap",
                        ino,
                        "a free inode number is in use in memory",
                    ))
                }
            }
        }
    }
}

/// What [`ICache::get_or_claim`] found.
pub enum Got<'a> {
    /// The inode was cached: a use of it.
    Cached(IRef),
    /// It was not: the caller holds its number.
    Claimed(NewInode<'a>),
}

/// A new inode's claim on its number: [`NewInode::finish`] publishes the inode;
/// dropping the claim unfinished removes it and wakes waiters (a failed create).
pub struct NewInode<'a> {
    cache: &'a ICache,
    ino: u64,
    slot: Slot,
    setup: Arc<Setup>,
    done: bool,
}

impl NewInode<'_> {
    /// The number claimed.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Publish the set-up inode; returns a use of it.
    pub fn finish(mut self, inode: Inode) -> IRef {
        debug_assert_eq!(inode.ino, self.ino);
        let r = self.cache.publish(self.ino, &self.slot, inode);
        self.done = true;
        self.setup.finish();
        self.cache.maybe_sweep();
        r
    }
}

impl Drop for NewInode<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Only `finish` (this claim's) replaces a placeholder: it is still there.
            let took = self.cache.take(self.ino, &self.slot);
            debug_assert!(
                took || std::thread::panicking(),
                "inode {}: placeholder lost",
                self.ino
            );
            self.setup.finish();
        }
    }
}
