//! The sessions service: who is live ([`super::registry`]), the pool of
//! warm daemons ([`super::pool`]), and every act that starts or ends a
//! session's daemon and browser context, each audited before it is done
//! ([`super::lifecycle`]).

use std::{collections::HashMap, path::PathBuf, sync::Mutex, time::Duration};

use audit::Outcome;

use super::{
    pool::{Pool, PoolSettings},
    registry::{Arrival, OnExit, Overflow, Registry, Turn},
};
use crate::{
    gate,
    obs::journal::Journal,
    refusal::{Refusal, Rule},
    runner::Runner,
    session_id::SessionId,
};

/// The sessions of this server and what they run on.
#[derive(Debug)]
pub(crate) struct Sessions {
    pub(super) registry: Registry,
    /// Daemons with fresh tabs, ready for new sessions.
    pub(super) pool: Pool,
    pub(super) runner: Runner,
    pub(super) journal: Journal,
    /// The browser gate: a session's browser context ends with it.
    pub(super) gate: gate::Handle,
    /// Where sessions' screenshots are (they go with the session).
    pub(super) output_dir: PathBuf,
    /// The idle TTL after which the reaper retires a session.
    pub(super) idle: Duration,
    /// Whether the sessions end with the server or wait to be adopted.
    pub(super) on_exit: OnExit,
    max: usize,
    /// The call each daemon runs now, so that what the browser gate and the
    /// egress refuse meanwhile names it.
    in_flight: Mutex<HashMap<String, CallMark>>,
}

/// A call's identity, as a record made outside it (a gate or egress
/// refusal during it) names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallMark {
    pub(crate) call_id: String,
    pub(crate) trace_id: Option<String>,
    pub(crate) span_id: Option<String>,
}

/// A call marked in flight on its daemon until this is dropped.
pub(crate) struct InFlight<'a> {
    sessions: &'a Sessions,
    daemon: String,
    call_id: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut map = self.sessions.in_flight();
        if map
            .get(&self.daemon)
            .is_some_and(|m| m.call_id == self.call_id)
        {
            map.remove(&self.daemon);
        }
    }
}

/// How the sessions service is set up.
#[derive(Debug)]
pub(crate) struct SessionSettings {
    pub(crate) max: usize,
    pub(crate) overflow: Overflow,
    pub(crate) idle: Duration,
    pub(crate) on_exit: OnExit,
    pub(crate) pool: PoolSettings,
    pub(crate) output_dir: PathBuf,
}

impl Sessions {
    pub(crate) fn new(
        settings: SessionSettings,
        runner: Runner,
        journal: Journal,
        gate: gate::Handle,
    ) -> Self {
        Self {
            registry: Registry::new(settings.max, settings.overflow),
            pool: Pool::new(settings.pool),
            runner,
            journal,
            gate,
            output_dir: settings.output_dir,
            idle: settings.idle,
            on_exit: settings.on_exit,
            max: settings.max,
            in_flight: Mutex::default(),
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<String, CallMark>> {
        crate::sync::lock(&self.in_flight)
    }

    /// Mark `call` as the one `daemon_name` runs, until the guard drops.
    pub(crate) fn mark_in_flight(&self, daemon_name: &str, call: CallMark) -> InFlight<'_> {
        let call_id = call.call_id.clone();
        self.in_flight().insert(daemon_name.to_owned(), call);
        InFlight {
            sessions: self,
            daemon: daemon_name.to_owned(),
            call_id,
        }
    }

    /// The call `daemon_name` runs now, if one.
    pub(crate) fn call_in_flight(&self, daemon_name: &str) -> Option<CallMark> {
        self.in_flight().get(daemon_name).cloned()
    }

    /// The idle TTL after which the reaper retires a session.
    pub(crate) fn idle_ttl(&self) -> Duration {
        self.idle
    }

    /// Register a call's session, or find it: a new one is bound to a pooled
    /// daemon when one is ready, and may evict the least recently used idle
    /// session (retired before this returns) or be refused when the cap is
    /// reached.
    pub(crate) async fn enter(&self, session: &SessionId) -> Result<Turn, Refusal> {
        let turn = match self.registry.admit(session, || self.pool.take()) {
            Arrival::Go(turn) => turn,
            Arrival::Evicted(turn, victim) => {
                let why = "the session cap was reached; least recently used idle session";
                self.retire(victim, Outcome::Evicted, why).await;
                turn
            }
            Arrival::Full => {
                return Err(Refusal::new(
                    Rule::Sessions,
                    format!(
                        "{} sessions are already live; close one (argv [\"close\"]) or wait for idle ones to be reaped",
                        self.max
                    ),
                ));
            }
        };
        if let Some(pooled) = &turn.bound {
            self.record_bound(session.as_str(), pooled);
        }
        Ok(turn)
    }

    /// Is `lock` still the turn of the live session `daemon_name` (not
    /// retired while a call waited for it)?
    pub(crate) fn is_current(
        &self,
        daemon_name: &str,
        lock: &std::sync::Arc<tokio::sync::Mutex<()>>,
    ) -> bool {
        self.registry.is_current(daemon_name, lock)
    }

    /// The session was used now (its idleness counts from here).
    pub(crate) fn touch(&self, daemon_name: &str) {
        self.registry.touch(daemon_name);
    }

    /// Whether the navigation guard must look at the session's page before
    /// its next command.
    pub(crate) fn set_unlooked(&self, daemon_name: &str, unlooked: bool) {
        self.registry.set_unlooked(daemon_name, unlooked);
    }

    pub(crate) fn is_unlooked(&self, daemon_name: &str) -> bool {
        self.registry.is_unlooked(daemon_name)
    }

    /// The agent's session id of the daemon called `daemon_name`, when a
    /// live session runs on it (the browser gate knows only daemon names).
    pub(crate) fn session_of(&self, daemon_name: &str) -> Option<String> {
        self.registry.session_of(daemon_name)
    }

    /// End a session its agent closed, whole: its daemon is stopped and its
    /// browser context, with every tab, popup, worker and cookie of it, is
    /// disposed of.
    ///
    /// A session of the same name may follow at once, so that is done
    /// before this returns (the caller still holds the session's turn); a
    /// pooled daemon's name is its own, and its end runs in the background.
    pub(crate) async fn close(&self, session: &SessionId) {
        let name = session.daemon_name();
        let gone = self.registry.forget(name);
        self.runner.discard_standby(name);
        let pooled = gone.is_some_and(|known| known.pooled);
        if pooled {
            self.record_lifecycle(
                session.as_str(),
                Outcome::Closed,
                format!("the session closed; its pooled daemon {name} and tab are closed"),
            );
        }
        let (runner, gate, dir) = (
            self.runner.clone(),
            self.gate.clone(),
            self.output_dir.clone(),
        );
        let daemon = name.to_owned();
        // The daemon first, so that it opens nothing in the context meanwhile.
        let ended = async move {
            let problems = runner.retire(&daemon, None, &dir).await;
            if !problems.is_empty() {
                tracing::warn!(daemon = %daemon, problems = %problems.join("; "), "a closed session left something behind");
            }
            if let Err(e) = gate.end_session(&daemon).await {
                tracing::warn!(error = %e, "a closed session's browser context was not disposed of");
            }
        };
        if pooled {
            tokio::spawn(ended);
        } else {
            ended.await;
        }
    }
}
