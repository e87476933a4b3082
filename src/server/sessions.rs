//! The sessions this server process knows: one lock per session (calls on a
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

use clap::ValueEnum;

use crate::session_id::SessionId;

/// What to do with a new session when the cap is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Overflow {
    /// Refuse the new session (`limits.sessions`): predictable for agents.
    Refuse,
    /// Evict the least recently used idle session (audited as `evicted`).
    EvictLru,
}

/// A session as the registry tracks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    /// The `--session` name.
    pub daemon_name: String,
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
/// (see [`Sessions::is_current`]).
///
/// Dropping it ends the retirement: the session leaves the registry, then
/// its turn is released. That holds however the retirement ends — done, or
/// abandoned midway (a reaper or a call whose future is dropped) — so a
/// name is never left behind as a retiring entry that no call can use.
pub(crate) struct Retiring {
    pub victim: Known,
    registry: Registry,
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
        let mut map = lock_registry(&self.registry);
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
pub(crate) enum Admission {
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
    pub daemon_name: String,
    pub bound: Option<super::pool::Pooled>,
}

type Registry = Arc<Mutex<HashMap<String, Entry>>>;

fn lock_registry(registry: &Registry) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
    registry
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The registry.
pub(crate) struct Sessions {
    map: Registry,
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

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
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
fn start_retiring(registry: &Registry, name: &str, entry: &mut Entry) -> Option<Retiring> {
    let turn = Arc::clone(&entry.lock).try_lock_owned().ok()?;
    entry.retiring = true;
    Some(Retiring {
        victim: known(name, entry),
        registry: Arc::clone(registry),
        turn,
    })
}

fn known(daemon_name: &str, entry: &Entry) -> Known {
    Known {
        daemon_name: daemon_name.to_owned(),
        session_id: entry.session_id.clone(),
        own_name: entry.own_name.clone(),
        pooled: entry.pooled,
    }
}

impl Sessions {
    pub(crate) fn new(max: usize, overflow: Overflow) -> Self {
        Self {
            map: Arc::new(Mutex::new(HashMap::new())),
            max,
            overflow,
            closed: Mutex::default(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        lock_registry(&self.map)
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
    ) -> Admission {
        let mut map = self.map();
        let own = session.own_name();
        // Its own name (one lookup, the usual case), or the pooled daemon it
        // was bound to.
        let known = if map.contains_key(own) {
            Some(own.to_owned())
        } else {
            map.iter()
                .find(|(_, e)| e.pooled && e.session_id == session.as_str())
                .map(|(name, _)| name.clone())
        };
        if let Some(daemon_name) = known
            && let Some(entry) = map.get_mut(&daemon_name)
        {
            entry.last_used = Instant::now();
            return Admission::Go(Turn {
                lock: Arc::clone(&entry.lock),
                daemon_name,
                bound: None,
            });
        }
        let mut victim = None;
        if map.values().filter(|e| !e.retiring).count() >= self.max {
            if self.overflow == Overflow::Refuse {
                return Admission::Full;
            }
            let oldest = map
                .iter_mut()
                .filter(|(_, e)| is_idle(e))
                .min_by_key(|(_, e)| e.last_used);
            let Some((name, entry)) = oldest else {
                return Admission::Full;
            };
            let name = name.clone();
            victim = start_retiring(&self.map, &name, entry);
            if victim.is_none() {
                return Admission::Full;
            }
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        let reopens = self.reopens_a_closed_tab(own);
        let bound = if reopens { None } else { pool() };
        let daemon_name = bound.as_ref().map_or(own, |p| p.name.as_str()).to_owned();
        map.insert(
            daemon_name.clone(),
            Entry {
                session_id: session.as_str().to_owned(),
                own_name: own.to_owned(),
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
            Some(victim) => Admission::Evicted(turn, victim),
            None => Admission::Go(turn),
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
        let entry = self.map().remove(daemon_name)?;
        let gone = known(daemon_name, &entry);
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
    pub(crate) fn adopt(&self, daemon_name: &str) {
        self.map()
            .entry(daemon_name.to_owned())
            .or_insert_with(|| Entry {
                session_id: daemon_name.to_owned(),
                own_name: daemon_name.to_owned(),
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
mod tests {
    use super::*;

    fn admit(s: &Sessions, id: &str) -> Admission {
        s.admit(&SessionId::parse(id).unwrap(), || None)
    }

    fn pooled(name: &str) -> crate::server::pool::Pooled {
        crate::server::pool::Pooled::for_test(name)
    }

    fn go(a: Admission) -> Arc<tokio::sync::Mutex<()>> {
        match a {
            Admission::Go(turn) | Admission::Evicted(turn, _) => turn.lock,
            Admission::Full => panic!("unexpected Full"),
        }
    }

    #[test]
    fn a_session_reopened_after_close_looks_at_its_page_first() {
        let s = Sessions::new(4, Overflow::Refuse);
        go(admit(&s, "a"));
        assert!(
            !s.is_unlooked("a"),
            "a brand-new session has no page to look at"
        );
        s.forget("a");
        go(admit(&s, "a"));
        assert!(s.is_unlooked("a"), "its pinned tab outlived the close");
        s.set_unlooked("a", false);
        s.forget("a");
        go(admit(&s, "b"));
        assert!(!s.is_unlooked("b"), "another session is not affected");
    }

    #[test]
    fn a_new_session_is_bound_to_a_pooled_daemon_and_found_again_by_its_id() {
        let s = Sessions::new(4, Overflow::Refuse);
        let u1 = SessionId::parse("u1").unwrap();
        let Admission::Go(turn) = s.admit(&u1, || Some(pooled("pool-a"))) else {
            panic!("expected Go");
        };
        assert_eq!(turn.daemon_name, "pool-a");
        assert!(turn.bound.is_some());
        assert!(!s.is_unlooked("pool-a"), "a pooled tab is fresh");
        assert_eq!(s.session_of("pool-a").as_deref(), Some("u1"));
        drop(turn);
        // The next call of u1 finds its daemon; the pool is not asked again.
        let Admission::Go(again) = s.admit(&u1, || panic!("asked the pool twice")) else {
            panic!("expected Go");
        };
        assert_eq!(again.daemon_name, "pool-a");
        assert!(again.bound.is_none());
    }

    #[test]
    fn a_closed_pooled_session_leaves_no_tab_to_take_up_and_binds_anew() {
        let s = Sessions::new(4, Overflow::Refuse);
        let u1 = SessionId::parse("u1").unwrap();
        drop(go(s.admit(&u1, || Some(pooled("pool-a")))));
        let gone = s.forget("pool-a").unwrap();
        assert!(gone.pooled && gone.session_id == "u1" && gone.own_name == "u1");
        let Admission::Go(turn) = s.admit(&u1, || Some(pooled("pool-b"))) else {
            panic!("expected Go");
        };
        assert_eq!(turn.daemon_name, "pool-b");
        assert!(!s.is_unlooked("pool-b"));
    }

    #[test]
    fn a_session_whose_own_tab_outlived_a_close_takes_it_up_not_a_pooled_one() {
        let s = Sessions::new(4, Overflow::Refuse);
        drop(go(admit(&s, "u1")));
        s.forget("u1");
        let u1 = SessionId::parse("u1").unwrap();
        let Admission::Go(turn) = s.admit(&u1, || panic!("a pooled daemon was taken")) else {
            panic!("expected Go");
        };
        assert_eq!(turn.daemon_name, "u1");
        assert!(s.is_unlooked("u1"));
    }

    #[test]
    fn the_cap_refuses_a_new_session_but_not_a_known_one() {
        let s = Sessions::new(2, Overflow::Refuse);
        drop(go(admit(&s, "a")));
        drop(go(admit(&s, "b")));
        assert!(matches!(admit(&s, "c"), Admission::Full));
        assert!(matches!(admit(&s, "a"), Admission::Go(_)));
    }

    #[test]
    fn evict_lru_picks_the_least_recently_used_idle_session() {
        let s = Sessions::new(2, Overflow::EvictLru);
        drop(go(admit(&s, "a.1")));
        std::thread::sleep(Duration::from_millis(5));
        drop(go(admit(&s, "b")));
        s.touch("b");
        match admit(&s, "c") {
            Admission::Evicted(_, retiring) => assert_eq!(retiring.victim.session_id, "a.1"),
            _ => panic!("expected an eviction"),
        }
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn a_busy_session_is_never_evicted_or_reaped() {
        let s = Sessions::new(1, Overflow::EvictLru);
        let held = go(admit(&s, "a"));
        let _guard = held.try_lock().unwrap();
        assert!(matches!(admit(&s, "b"), Admission::Full));
        assert!(s.take_idle(Duration::ZERO).is_empty());
    }

    #[test]
    fn idle_sessions_are_taken_once() {
        let s = Sessions::new(4, Overflow::Refuse);
        drop(go(admit(&s, "a")));
        std::thread::sleep(Duration::from_millis(5));
        let taken = s.take_idle(Duration::from_millis(1));
        assert_eq!(taken.len(), 1);
        assert!(s.take_idle(Duration::from_millis(1)).is_empty());
        assert!(s.is_empty());
        for retiring in taken {
            drop(retiring);
        }
        assert!(s.take_idle(Duration::ZERO).is_empty());
    }

    #[test]
    fn a_call_for_a_session_being_retired_waits_then_starts_it_anew() {
        let s = Sessions::new(4, Overflow::Refuse);
        drop(go(admit(&s, "a")));
        let mut taken = s.take_idle(Duration::ZERO);
        let retiring = taken.pop().unwrap();
        // A call arrives mid-retirement: it gets the retiring session's lock,
        // which the retirement holds.
        let waiting = go(admit(&s, "a"));
        assert!(waiting.try_lock().is_err());
        drop(retiring);
        // Its turn comes, but that session is gone: it must be admitted again.
        let _turn = waiting.try_lock().unwrap();
        assert!(!s.is_current("a", &waiting));
        let fresh = go(admit(&s, "a"));
        assert!(!Arc::ptr_eq(&fresh, &waiting));
        assert!(s.is_current("a", &fresh));
    }

    #[tokio::test]
    async fn a_retirement_abandoned_midway_still_frees_the_name() {
        let s = Sessions::new(4, Overflow::Refuse);
        drop(go(admit(&s, "a")));
        let retiring = s.take_idle(Duration::ZERO).pop().unwrap();
        // The retirement's task is aborted while it works (a reaper stopped
        // at shutdown, a call's future dropped): it never finishes its job.
        let task = tokio::spawn(async move {
            let _retiring = retiring;
            std::future::pending::<()>().await;
        });
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        // The name is free: a call gets a session of its own, not a lock
        // that leads back to the abandoned entry forever.
        let fresh = go(admit(&s, "a"));
        assert!(fresh.try_lock().is_ok());
        assert!(s.is_current("a", &fresh));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn an_evicted_session_being_retired_does_not_count_against_the_cap() {
        let s = Sessions::new(1, Overflow::EvictLru);
        drop(go(admit(&s, "a")));
        let Admission::Evicted(b, retiring) = admit(&s, "b") else {
            panic!("expected an eviction");
        };
        assert_eq!(s.len(), 1);
        assert!(s.is_current("b", &b.lock));
        assert!(!s.is_current("a", retiring.lock()));
        drop(retiring);
        assert_eq!(s.len(), 1);
    }
}
