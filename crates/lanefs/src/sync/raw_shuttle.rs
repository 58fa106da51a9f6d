//! Under `cfg(shuttle)` (the shuttle models of the inode cache and the page cache,
//! `tests/shuttle_icache.rs` and `tests/shuttle_pagecache.rs`, run with
//! `RUSTFLAGS="--cfg shuttle"`), shuttle's mutex, reader-writer lock and condition variable
//! behind `parking_lot`'s interface, so that shuttle's scheduler sees every acquisition,
//! release and wait as a switch point and reports a deadlock. Locks of such a build work
//! only inside a shuttle test.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{PoisonError, TryLockError};
use std::time::Duration;

/// shuttle's mutex; poisoning is ignored, as `parking_lot` has none.
pub(super) struct Mutex<T>(shuttle::sync::Mutex<T>);

/// shuttle's guard, in an `Option` so that a condition-variable wait, which takes the
/// guard by value, can take it out and put it back behind a `&mut`.
pub(super) struct MutexGuard<'a, T>(Option<shuttle::sync::MutexGuard<'a, T>>);

impl<T> Mutex<T> {
    pub(super) const fn new(v: T) -> Mutex<T> {
        Mutex(shuttle::sync::Mutex::new(v))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, T> {
        MutexGuard(Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)))
    }

    pub(super) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(g) => Some(MutexGuard(Some(g))),
            Err(TryLockError::Poisoned(e)) => Some(MutexGuard(Some(e.into_inner()))),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// shuttle's mutex cannot say; a try-lock (a switch point itself) answers.
    pub(super) fn is_locked(&self) -> bool {
        self.try_lock().is_none()
    }

    pub(super) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_deref().expect("guard taken by a condvar wait")
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0
            .as_deref_mut()
            .expect("guard taken by a condvar wait")
    }
}

/// shuttle's reader-writer lock; poisoning is ignored, as `parking_lot` has none.
pub(super) struct RwLock<T>(shuttle::sync::RwLock<T>);
pub(super) type RwLockReadGuard<'a, T> = shuttle::sync::RwLockReadGuard<'a, T>;
pub(super) type RwLockWriteGuard<'a, T> = shuttle::sync::RwLockWriteGuard<'a, T>;

impl<T> RwLock<T> {
    pub(super) const fn new(v: T) -> RwLock<T> {
        RwLock(shuttle::sync::RwLock::new(v))
    }

    pub(super) fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        match self.0.try_read() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    pub(super) fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        match self.0.try_write() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    pub(super) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// shuttle's condition variable. Its timed wait never times out, and it does not say
/// how many waiters a notification woke: `notify_one` answers false, `notify_all` 0.
#[derive(Debug, Default)]
pub(super) struct Condvar(shuttle::sync::Condvar);

impl Condvar {
    pub(super) const fn new() -> Condvar {
        Condvar(shuttle::sync::Condvar::new())
    }

    pub(super) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        let g = guard.0.take().expect("guard taken by a condvar wait");
        guard.0 = Some(self.0.wait(g).unwrap_or_else(PoisonError::into_inner));
    }

    pub(super) fn wait_for<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> shuttle::sync::WaitTimeoutResult {
        let g = guard.0.take().expect("guard taken by a condvar wait");
        let (g, timed_out) = self
            .0
            .wait_timeout(g, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        guard.0 = Some(g);
        timed_out
    }

    pub(super) fn notify_one(&self) -> bool {
        self.0.notify_one();
        false
    }

    pub(super) fn notify_all(&self) -> usize {
        self.0.notify_all();
        0
    }
}
