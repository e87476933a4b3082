//! A lock that stays usable after a panic elsewhere. Every map and counter
//! the server guards with a mutex is changed in one step under it, so a
//! holder that panicked left it whole: the server keeps serving instead of
//! failing every later call on the poison.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex`'s guard, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
