//! The debug-build lock-order checker: a per-thread list of the locks held.

use super::LockClass;
use std::cell::{Cell, RefCell};
use std::panic::Location;

/// Most locks one thread may hold at once; reaching it means guards are being leaked.
const MAX_HELD: usize = 64;

/// One lock held by this thread.
struct Held {
    class: &'static LockClass,
    id: u64,
    at: &'static Location<'static>,
}

// Under `cfg(shuttle)` every shuttle task runs on the one test thread: the held list
// must be the task's (shuttle's thread-locals are per task), not the OS thread's.
#[cfg(shuttle)]
use shuttle::thread_local;

thread_local! {
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
    static NEXT_ID: Cell<u64> = const { Cell::new(0) };
}

/// Panic if blocking on a lock of `class` now breaks the lock order.
#[track_caller]
pub(super) fn check(class: &'static LockClass) {
    let message = HELD.with(|held| violation(&held.borrow(), class));
    if let Some(message) = message {
        panic!("{message}");
    }
}

/// Why taking `class` while holding `held` breaks the order, if it does.
fn violation(held: &[Held], class: &LockClass) -> Option<String> {
    let top = held.iter().max_by_key(|h| h.class.rank())?;
    let (top_rank, rank) = (top.class.rank(), class.rank());
    if top_rank < rank || (top_rank == rank && class.nestable()) {
        return None;
    }
    let why = if top_rank == rank {
        ", and the class is not nestable"
    } else {
        ""
    };
    Some(format!(
        "lock order violation: taking `{}` (rank {}) while holding `{}` (rank {}, taken at \
         {}){}",
        class.name(),
        rank,
        top.class.name(),
        top_rank,
        top.at,
        why
    ))
}

/// Whether blocking on a lock of `class` now keeps the lock order (`super::may_block_on`).
pub(super) fn may_block(class: &'static LockClass) -> bool {
    // At thread exit the list may be gone: nothing is held then.
    HELD.try_with(|held| violation(&held.borrow(), class).is_none())
        .unwrap_or(true)
}

/// Panic if this thread holds a lock ranked above `class`, which a condition-variable wait
/// would hold while re-taking the lock of `class`.
pub(super) fn check_wait(hold: &Hold) {
    let message = HELD.with(|held| {
        let list = held.borrow();
        debug_assert!(
            list.iter().any(|h| h.id == hold.id),
            "condvar wait on `{}`, a lock this thread does not hold",
            hold.class.name()
        );
        let above = list.iter().find(|h| h.class.rank() > hold.class.rank())?;
        Some(format!(
            "lock order violation: condvar wait on `{}` (rank {}) while holding `{}` \
             (rank {}, taken at {})",
            hold.class.name(),
            hold.class.rank(),
            above.class.name(),
            above.class.rank(),
            above.at
        ))
    });
    if let Some(message) = message {
        panic!("{message}");
    }
}

/// The record that this thread holds one lock; removed from the list on drop, in any
/// order.
pub(super) struct Hold {
    class: &'static LockClass,
    id: u64,
}

impl Hold {
    /// Record that this thread now holds a lock of `class`, taken at the caller.
    #[track_caller]
    pub(super) fn push(class: &'static LockClass) -> Hold {
        let at = Location::caller();
        let id = NEXT_ID.with(|next| {
            let id = next.get();
            next.set(id.wrapping_add(1));
            id
        });
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            assert!(
                held.len() < MAX_HELD,
                "a thread holds {MAX_HELD} locks: leaked guards?"
            );
            held.push(Held { class, id, at });
        });
        Hold { class, id }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // At thread exit the list may already be gone; then there is nothing to remove.
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            let pos = held.iter().rposition(|h| h.id == self.id);
            debug_assert!(
                pos.is_some() || std::thread::panicking(),
                "hold not recorded"
            );
            if let Some(pos) = pos {
                held.remove(pos);
            }
        });
    }
}

/// The ranks this thread holds, oldest first.
#[cfg(test)]
pub(super) fn held_ranks() -> Vec<u8> {
    HELD.with(|held| held.borrow().iter().map(|h| h.class.rank()).collect())
}
