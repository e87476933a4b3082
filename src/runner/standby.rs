//! Standby processes: for each live session, one confined agent-browser CLI
//! spawned ahead of its next call, so that call does not pay for the spawn
//! (the trampoline's start, its confinement of itself and its exec of
//! agent-browser) on its critical path (docs/design.md, "Standbys").
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

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::Duration,
};

use tokio::{process::Child, sync::Notify};

/// How long a call waits for its session's standby that is being spawned
/// right now (a spawn takes a few ms) before it spawns a child of its own.
const SPAWN_WAIT: Duration = Duration::from_millis(20);

/// The ready standby of each session, by daemon name.
#[derive(Debug, Default)]
pub(super) struct Standbys {
    inner: Mutex<Inner>,
    /// A spawn in flight ended (kept or not).
    spawned: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    /// Ready and still running (as of when it was put).
    ready: HashMap<String, Child>,
    /// The ticket of the one spawn in flight that may still be kept.
    wanted: HashMap<String, u64>,
    /// Sessions whose standby is being spawned right now.
    spawning: HashSet<String>,
    next_ticket: u64,
}

impl Standbys {
    /// The session's standby, if one is ready and still running. Whatever
    /// it was, the session has none left afterwards, and none is wanted any
    /// more: a call that arrives before its standby is ready spawns its own
    /// child, and a second spawn at the same moment would only slow both.
    pub(super) fn take(&self, daemon_name: &str) -> Option<Child> {
        let mut inner = self.lock();
        inner.wanted.remove(daemon_name);
        let mut child = inner.ready.remove(daemon_name)?;
        // Exited (killed from outside, or read EOF): useless, and reaped here.
        matches!(child.try_wait(), Ok(None)).then_some(child)
    }

    /// Like [`Standbys::take`], but when the session's standby is being
    /// spawned right now, wait for it (up to [`SPAWN_WAIT`]): a call that
    /// comes right after the previous one would otherwise spawn a second
    /// child beside it.
    pub(super) async fn take_or_await(&self, daemon_name: &str) -> Option<Child> {
        let spawned = self.spawned.notified();
        tokio::pin!(spawned);
        // Registered before the check, so a spawn ending after it wakes us.
        spawned.as_mut().enable();
        let in_flight = {
            let inner = self.lock();
            !inner.ready.contains_key(daemon_name) && inner.spawning.contains(daemon_name)
        };
        if in_flight {
            let _ = tokio::time::timeout(SPAWN_WAIT, spawned).await;
        }
        self.take(daemon_name)
    }

    /// The announced spawn is starting now, if it is still wanted.
    pub(super) fn start_spawning(&self, daemon_name: &str, ticket: u64) -> bool {
        let mut inner = self.lock();
        let wanted = inner.wanted.get(daemon_name) == Some(&ticket);
        if wanted {
            inner.spawning.insert(daemon_name.to_owned());
        }
        wanted
    }

    /// The spawn failed: nobody should wait for it.
    pub(super) fn spawn_failed(&self, daemon_name: &str) {
        self.lock().spawning.remove(daemon_name);
        self.spawned.notify_waiters();
    }

    /// Announce a spawn for the session's next call; the ticket lets
    /// [`Standbys::put`] tell whether it is still wanted when it is ready.
    pub(super) fn want(&self, daemon_name: &str) -> u64 {
        let mut inner = self.lock();
        inner.next_ticket += 1;
        let ticket = inner.next_ticket;
        inner.wanted.insert(daemon_name.to_owned(), ticket);
        ticket
    }

    /// Keep `child` as the session's standby if its ticket is still the
    /// wanted one; otherwise (the session ended, or a newer spawn was
    /// announced) it is dropped, which kills it.
    pub(super) fn put(&self, daemon_name: &str, ticket: u64, child: Child) {
        let mut inner = self.lock();
        inner.spawning.remove(daemon_name);
        if inner.wanted.get(daemon_name) == Some(&ticket) {
            inner.wanted.remove(daemon_name);
            // A previous standby still there is replaced (and killed).
            inner.ready.insert(daemon_name.to_owned(), child);
        }
        drop(inner);
        self.spawned.notify_waiters();
    }

    /// The session ended: kill its standby and forget any spawn in flight.
    pub(super) fn discard(&self, daemon_name: &str) {
        let mut inner = self.lock();
        inner.wanted.remove(daemon_name);
        inner.ready.remove(daemon_name);
    }

    /// Is a standby ready for the session? (A call that will take it
    /// spawns nothing; tests wait on it.)
    pub(super) fn is_ready(&self, daemon_name: &str) -> bool {
        self.lock().ready.contains_key(daemon_name)
    }

    /// At shutdown: kill every standby.
    pub(super) fn clear(&self) {
        let mut inner = self.lock();
        inner.wanted.clear();
        inner.ready.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing here can be left half-updated by a panic; keep serving.
        crate::sync::lock(&self.inner)
    }
}
