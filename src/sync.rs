//! A lock that stays usable after a panic elsewhere, and the lock files a
//! server holds while it runs (its place in a state dir, its block of child
//! uids). Every map and counter the server guards with a mutex is changed
//! in one step under it, so a holder that panicked left it whole: the server
//! keeps serving instead of failing every later call on the poison.

use std::{
    fs::{File, OpenOptions},
    os::unix::fs::OpenOptionsExt,
    path::Path,
    sync::{Mutex, MutexGuard, PoisonError},
};

/// `mutex`'s guard, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A file the server locks, opened (created 0600 if missing) for reading
/// and writing, its contents kept. Not followed if a link: it may lie where
/// a confined child can write (/tmp), and the server may be root.
pub(crate) fn open_lock_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}
