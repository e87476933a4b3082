//! The table of sessions this server process knows: one lock per session (calls on a
//! session never interleave), when each was last used, and how many may live.
//!
//! A session costs an agent-browser daemon and a browser tab. The registry
//! caps their number (`--max-sessions`): a new session beyond the cap is
//! refused, or, with `--session-overflow evict-lru`, the least recently used
//! idle session is evicted to make room. Sessions idle longer than the TTL
//! are handed to the reaper. Counts are per server process: a hub that runs
//! one server per client gets one budget per client.
//!
//! A new session may be bound to a pooled daemon (`super::pool`): its entry
//! is then kept under the pooled daemon's name and found by its session id.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::session_id::{DaemonName, SessionId};

/// What to do with a new session when the cap is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// Refuse the new session (`limits.sessions`): predictable for agents.
    Refuse,
    /// Evict the least recently used idle session (audited as `evicted`).
    EvictLru,
}

impl Overflow {
    /// The setting as `--session-overflow` spells it (and records show it).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Refuse => "refuse",
            Self::EvictLru => "evict-lru",
        }
    }
}

/// What a stopping server does with its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnExit {
    /// Leave their daemons running, for the next server on the same
    /// dirs to adopt; unadopted, each exits after `--idle-timeout-sec`.
    Keep,
    /// End each one as the reaper would: daemon, tab, context and
    /// screenshots (audited as `closed`).
    End,
}

impl OnExit {
    /// The setting as `--on-exit` spells it (and records show it).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::End => "end",
        }
    }
}

/// A session as the registry tracks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    /// The `--session` name.
    pub daemon_name: DaemonName,
    /// The agent's session id (the daemon name for adopted orphans).
    pub session_id: String,
    /// The session's output directory name (the id's own name).
    pub own_name: String,
    /// Bound to a pooled daemon: no session of another life shares its tab.
    pub pooled: bool,
}

struct Entry {
    session_id: String,
    own_name: String,
    /// The daemon is a pooled one this session was bound to.
    pooled: bool,
    lock: Arc<tokio::sync::Mutex<()>>,
    last_used: Instant,
    /// Being retired (reaped or evicted): its lock is held until the daemon,
    /// tab and files are gone, and it no longer counts against the cap.
    retiring: bool,
    /// The navigation guard has not looked at the page since the session's
    /// last command (it failed, timed out or was cancelled; or the session
    /// was adopted): the next command must look before it acts.
    unlooked: bool,
}

/// A session being retired: its turn is held, so a call that arrives for
/// the same name meanwhile waits, then finds it gone and registers anew
/// (see [`Registry::is_current`]).
///
/// Dropping it ends the retirement: the session leaves the registry, then
/// its turn is released. That holds however the retirement ends — done, or
/// abandoned midway (a reaper or a call whose future is dropped) — so a
/// name is never left behind as a retiring entry that no call can use.
pub(crate) struct Retiring {
    pub victim: Known,
    registry: SharedMap,
    turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Retiring {
    /// The lock of the session being retired (the one its turn holds).
    fn lock(&self) -> &Arc<tokio::sync::Mutex<()>> {
        tokio::sync::OwnedMutexGuard::mutex(&self.turn)
    }
}

impl Drop for Retiring {
    fn drop(&mut self) {
        let mut map = lock_map(&self.registry);
        if map
            .get(&self.victim.daemon_name)
            .is_some_and(|e| Arc::ptr_eq(&e.lock, self.lock()))
        {
            map.remove(&self.victim.daemon_name);
        }
        // `turn` is released after this body: a waiting call wakes to find
        // the session gone.
    }
}

/// The outcome of admitting a call's session.
pub(crate) enum Arrival {
    /// Run under this turn.
    Go(Turn),
    /// Run under this turn; `victim` was evicted to make room and must be
    /// stopped.
    Evicted(Turn, Retiring),
    /// The cap is reached and nothing could be evicted.
    Full,
}

/// Where an admitted call runs: its session's lock and daemon, and the
/// pooled daemon the session was bound to just now, if it was.
pub(crate) struct Turn {
    pub lock: Arc<tokio::sync::Mutex<()>>,
    pub daemon_name: DaemonName,
    pub bound: Option<super::pool::Pooled>,
}

type SharedMap = Arc<Mutex<HashMap<DaemonName, Entry>>>;

fn lock_map(registry: &SharedMap) -> std::sync::MutexGuard<'_, HashMap<DaemonName, Entry>> {
    crate::sync::lock(registry)
}

/// Who is live, each session's turn and last use, and the cap on their number.
pub(crate) struct Registry {
    map: SharedMap,
    max: usize,
    overflow: Overflow,
    /// Sessions ended by `close`. Their pinned tab stays in Chromium, and a
    /// page there may navigate on its own, so the first command of the
    /// session's next life looks at the page first.
    closed: Mutex<Closed>,
}

/// Names of closed sessions, bounded: once too many were kept, every new
/// session looks first (fail closed) rather than the set growing forever.
#[derive(Debug, Default)]
struct Closed {
    names: std::collections::HashSet<String>,
    overflowed: bool,
}

/// Closed session names kept before every new session looks first.
const MAX_CLOSED: usize = 4096;

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("max", &self.max)
            .field("overflow", &self.overflow)
            .finish_non_exhaustive()
    }
}

/// A lock nobody holds or waits on, of a session not already retiring.
fn is_idle(entry: &Entry) -> bool {
    !entry.retiring && Arc::strong_count(&entry.lock) == 1 && entry.lock.try_lock().is_ok()
}

/// Mark `entry` retiring and take its turn (free: it is idle).
fn start_retiring(registry: &SharedMap, name: &DaemonName, entry: &mut Entry) -> Option<Retiring> {
    let turn = Arc::clone(&entry.lock).try_lock_owned().ok()?;
    entry.retiring = true;
    Some(Retiring {
        victim: known(name, entry),
        registry: Arc::clone(registry),
        turn,
    })
}

fn known(daemon_name: &DaemonName, entry: &Entry) -> Known {
    Known {
        daemon_name: daemon_name.clone(),
        session_id: entry.session_id.clone(),
        own_name: entry.own_name.clone(),
        pooled: entry.pooled,
    }
}

impl Registry {
    pub(crate) fn new(max: usize, overflow: Overflow) -> Self {
        Self {
            map: Arc::new(Mutex::new(HashMap::new())),
            max,
            overflow,
            closed: Mutex::default(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<DaemonName, Entry>> {
        lock_map(&self.map)
    }

    /// Admit a call of `session`, registering the session if it is new.
    ///
    /// A new session is bound to a daemon from `pool` when it offers one,
    /// unless the session's own daemon left a tab behind at a `close` (that
    /// tab is its to take up again).
    pub(crate) fn admit(
        &self,
        session: &SessionId,
        pool: impl FnOnce() -> Option<super::pool::Pooled>,
    ) -> Arrival {
        let mut map = self.map();
        let own = session.own_name();
        // Its own name (one lookup, the usual case), or the pooled daemon it
        // was bound to.
        let known = if map.contains_key(own) {
            Some(own.clone())
        } else {
            map.iter()
                .find(|(_, e)| e.pooled && e.session_id == session.as_str())
                .map(|(name, _)| name.clone())
        };
        if let Some(daemon_name) = known
            && let Some(entry) = map.get_mut(&daemon_name)
        {
            entry.last_used = Instant::now();
            return Arrival::Go(Turn {
                lock: Arc::clone(&entry.lock),
                daemon_name,
                bound: None,
            });
        }
        let mut victim = None;
        if map.values().filter(|e| !e.retiring).count() >= self.max {
            if self.overflow == Overflow::Refuse {
                return Arrival::Full;
            }
            let oldest = map
                .iter_mut()
                .filter(|(_, e)| is_idle(e))
                .min_by_key(|(_, e)| e.last_used);
            let Some((name, entry)) = oldest else {
                return Arrival::Full;
            };
            let name = name.clone();
            victim = start_retiring(&self.map, &name, entry);
            if victim.is_none() {
                return Arrival::Full;
            }
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        // A pooled daemon is a context of its own: whatever the closed
        // session under this name left behind stays out of its reach. Only
        // a session that runs under its own name again looks first.
        let bound = pool();
        let reopens = bound.is_none() && self.reopens_a_closed_tab(own);
        let daemon_name = bound.as_ref().map_or(own, |p| &p.name).clone();
        map.insert(
            daemon_name.clone(),
            Entry {
                session_id: session.as_str().to_owned(),
                own_name: own.to_string(),
                pooled: bound.is_some(),
                lock: Arc::clone(&lock),
                last_used: Instant::now(),
                retiring: false,
                unlooked: reopens,
            },
        );
        let turn = Turn {
            lock,
            daemon_name,
            bound,
        };
        match victim {
            Some(victim) => Arrival::Evicted(turn, victim),
            None => Arrival::Go(turn),
        }
    }

    /// The agent's session id of the daemon called `daemon_name`, when a
    /// live session runs on it (the browser gate knows only daemon names).
    pub(crate) fn session_of(&self, daemon_name: &str) -> Option<String> {
        self.map().get(daemon_name).map(|e| e.session_id.clone())
    }

    /// Mark the session used now (at the end of a call, so idleness counts
    /// from the last activity).
    pub(crate) fn touch(&self, daemon_name: &str) {
        if let Some(entry) = self.map().get_mut(daemon_name) {
            entry.last_used = Instant::now();
        }
    }

    /// Record whether the guard has looked at the session's page since its
    /// last command.
    pub(crate) fn set_unlooked(&self, daemon_name: &str, unlooked: bool) {
        if let Some(entry) = self.map().get_mut(daemon_name) {
            entry.unlooked = unlooked;
        }
    }

    /// Must the guard look at the session's page before its next command?
    pub(crate) fn is_unlooked(&self, daemon_name: &str) -> bool {
        self.map().get(daemon_name).is_some_and(|e| e.unlooked)
    }

    /// The session ended (`close`): forget it, but remember that its tab
    /// may still be there — unless it ran on a pooled daemon, whose tab no
    /// later session takes up (the caller closes it). Returns what it was.
    pub(crate) fn forget(&self, daemon_name: &str) -> Option<Known> {
        let (name, entry) = self.map().remove_entry(daemon_name)?;
        let gone = known(&name, &entry);
        if !entry.pooled {
            self.remember_closed(daemon_name);
        }
        Some(gone)
    }

    fn remember_closed(&self, daemon_name: &str) {
        let Ok(mut closed) = self.closed.lock() else {
            return;
        };
        if closed.names.len() < MAX_CLOSED {
            closed.names.insert(daemon_name.to_owned());
        } else {
            closed.overflowed = true;
        }
    }

    /// Does a new session take over the tab of a closed one (or can that no
    /// longer be told)? Then its first command looks first.
    fn reopens_a_closed_tab(&self, daemon_name: &str) -> bool {
        self.closed.lock().map_or(true, |mut closed| {
            closed.names.remove(daemon_name) || closed.overflowed
        })
    }

    /// Is `lock` (a call's, once it holds it) still the session's own? Not
    /// when the session was retired while the call waited: the call must
    /// then be admitted again, as a new session.
    pub(crate) fn is_current(&self, daemon_name: &str, lock: &Arc<tokio::sync::Mutex<()>>) -> bool {
        self.map()
            .get(daemon_name)
            .is_some_and(|e| !e.retiring && Arc::ptr_eq(&e.lock, lock))
    }

    /// Track a daemon found running at start (an orphan of a previous server).
    pub(crate) fn adopt(&self, daemon_name: &DaemonName) {
        self.map()
            .entry(daemon_name.clone())
            .or_insert_with(|| Entry {
                session_id: daemon_name.to_string(),
                own_name: daemon_name.to_string(),
                pooled: false,
                lock: Arc::new(tokio::sync::Mutex::new(())),
                last_used: Instant::now(),
                retiring: false,
                // A previous server's session: nobody knows where its page is.
                unlooked: true,
            });
    }

    /// Start retiring the sessions idle for longer than `ttl`.
    pub(crate) fn take_idle(&self, ttl: Duration) -> Vec<Retiring> {
        self.map()
            .iter_mut()
            .filter(|(_, e)| e.last_used.elapsed() > ttl && is_idle(e))
            .filter_map(|(name, entry)| start_retiring(&self.map, name, entry))
            .collect()
    }

    #[cfg(test)]
    /// How many sessions are live (not being retired).
    pub(crate) fn len(&self) -> usize {
        self.map().values().filter(|e| !e.retiring).count()
    }

    #[cfg(test)]
    /// Whether no session is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
