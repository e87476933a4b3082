//! Standby processes: for each live session, one confined agent-browser CLI
//! spawned ahead of its next call, so that call does not pay for the spawn
//! (the server's `fork` plus the confinement's attach, ≈ 1.3 ms here) on
//! its critical path.
//!
//! Why a process spawned before its call's intent record is safe: started
//! with `batch`, agent-browser loads its config and then reads stdin to EOF
//! before it touches anything — no socket, no daemon, no network (traced on
//! 0.41.2; `tests/e2e` keeps checking it). A standby is that process,
//! blocked in that read. It is spawned by the same code as any child (same
//! argv, environment and confinement); it gets a batch only from the call
//! that takes it, and only once that call's intent is durable; and should
//! the server die, its stdin closes, it rejects the empty batch and exits
//! without having contacted anything.
//!
//! A standby is wanted from the moment a call schedules one until the
//! session ends ([`Standbys::discard`]); one whose spawn finishes after that
//! is dropped (and so killed) instead of kept.

use std::{collections::HashMap, sync::Mutex};

use tokio::process::Child;

/// The ready standby of each session, by daemon name.
#[derive(Debug, Default)]
pub struct Standbys {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Ready and still running (as of when it was put).
    ready: HashMap<String, Child>,
    /// The ticket of the one spawn in flight that may still be kept.
    wanted: HashMap<String, u64>,
    next_ticket: u64,
}

impl Standbys {
    /// The session's standby, if one is ready and still running. Whatever
    /// it was, the session has none left afterwards, and none is wanted any
    /// more: a call that arrives before its standby is ready spawns its own
    /// child, and a second spawn at the same moment would only slow both.
    pub fn take(&self, daemon_name: &str) -> Option<Child> {
        let mut inner = self.lock();
        inner.wanted.remove(daemon_name);
        let mut child = inner.ready.remove(daemon_name)?;
        // Exited (killed from outside, or read EOF): useless, and reaped here.
        matches!(child.try_wait(), Ok(None)).then_some(child)
    }

    /// Is the spawn announced with `ticket` still wanted?
    pub fn is_wanted(&self, daemon_name: &str, ticket: u64) -> bool {
        self.lock().wanted.get(daemon_name) == Some(&ticket)
    }

    /// Announce a spawn for the session's next call; the ticket lets
    /// [`Standbys::put`] tell whether it is still wanted when it is ready.
    pub fn want(&self, daemon_name: &str) -> u64 {
        let mut inner = self.lock();
        inner.next_ticket += 1;
        let ticket = inner.next_ticket;
        inner.wanted.insert(daemon_name.to_owned(), ticket);
        ticket
    }

    /// Keep `child` as the session's standby if its ticket is still the
    /// wanted one; otherwise (the session ended, or a newer spawn was
    /// announced) it is dropped, which kills it.
    pub fn put(&self, daemon_name: &str, ticket: u64, child: Child) {
        let mut inner = self.lock();
        if inner.wanted.get(daemon_name) == Some(&ticket) {
            inner.wanted.remove(daemon_name);
            // A previous standby still there is replaced (and killed).
            inner.ready.insert(daemon_name.to_owned(), child);
        }
    }

    /// The session ended: kill its standby and forget any spawn in flight.
    pub fn discard(&self, daemon_name: &str) {
        let mut inner = self.lock();
        inner.wanted.remove(daemon_name);
        inner.ready.remove(daemon_name);
    }

    /// Is a standby ready for the session (tests wait on it)?
    #[cfg(test)]
    pub fn is_ready(&self, daemon_name: &str) -> bool {
        self.lock().ready.contains_key(daemon_name)
    }

    /// At shutdown: kill every standby.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.wanted.clear();
        inner.ready.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing here can be left half-updated by a panic; keep serving.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
