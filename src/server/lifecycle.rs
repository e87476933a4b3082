//! The server's own acts on sessions, each audited before it is done, as a
//! call is: retiring a session (idle reaper, eviction), adopting or closing
//! daemons found at start.

use std::sync::Arc;

use audit::Outcome;

use super::{registry::Retiring, sessions::Sessions};
use crate::{obs::journal::new_call_id, session_id::DaemonName};

impl Sessions {
    /// Record why (`reaped`, `evicted`), then end `retiring`'s session for
    /// good. What could not be undone is recorded after, as
    /// `retire_incomplete`.
    ///
    /// The session's turn is held throughout, so a call for it waits and
    /// then starts it anew ([`super::registry::Registry::is_current`]).
    pub(crate) async fn retire(&self, retiring: Retiring, outcome: Outcome, reason: &str) {
        let victim = &retiring.victim;
        self.record_lifecycle(&victim.session_id, outcome, reason.to_owned());
        let mut problems = self
            .runner
            .retire(
                &victim.daemon_name,
                Some(&victim.own_name),
                &self.output_dir,
            )
            .await;
        // Its browser context last, once its daemon is gone and can open
        // no tab in it: its popups, workers and cookies go with it.
        if let Err(e) = self.gate.end_session(&victim.daemon_name).await {
            problems.push(format!("its browser context not disposed of: {e}"));
        }
        if !problems.is_empty() {
            self.record_lifecycle(
                &victim.session_id,
                Outcome::RetireIncomplete,
                problems.join("; "),
            );
        }
        // The session leaves the registry; a call waiting for it starts anew.
        drop(retiring);
    }

    pub(crate) fn record_lifecycle(&self, session_id: &str, outcome: Outcome, reason: String) {
        let mut event = audit::Event::new(audit::Phase::Lifecycle, new_call_id());
        event.session_id = Some(session_id.to_owned());
        event.outcome = Some(outcome);
        event.reason = Some(reason);
        if let Err(e) = self.journal.append_unattached(event) {
            tracing::error!(error = %e, "audit record of a session lifecycle event not written");
        }
    }

    /// Retire every session idle longer than the TTL (the reaper's tick).
    pub(crate) async fn reap_idle(self: &Arc<Self>) {
        let why = format!("idle for more than {} s", self.idle.as_secs());
        let taken = self.registry.take_idle(self.idle);
        self.retire_all(taken, Outcome::Reaped, why).await;
    }

    /// As the server stops with `--on-exit end`: retire every session (each
    /// recorded as `closed` before it goes). Calls have drained by now, so
    /// none is left behind; with `keep`, nothing is done and the daemons
    /// wait to be adopted.
    pub(crate) async fn end_on_exit(self: &Arc<Self>) {
        if self.on_exit != super::registry::OnExit::End {
            // Kept: their pages may send nothing until a server holds their
            // proxy ports again (`crate::gate`, kept contexts).
            self.gate.freeze_kept().await;
            return;
        }
        let taken = self.registry.take_idle(std::time::Duration::ZERO);
        let why = "the server stopped (--on-exit end)".to_owned();
        self.retire_all(taken, Outcome::Closed, why).await;
    }

    /// Retire `taken` all at once: each holds its session's turn until it
    /// is done, so one after the other would keep a call for the last of
    /// them waiting on all the others.
    async fn retire_all(self: &Arc<Self>, taken: Vec<Retiring>, outcome: Outcome, why: String) {
        let mut retirements = tokio::task::JoinSet::new();
        for retiring in taken {
            let (sessions, why) = (Arc::clone(self), why.clone());
            retirements.spawn(async move { sessions.retire(retiring, outcome, &why).await });
        }
        while let Some(done) = retirements.join_next().await {
            if let Err(e) = done {
                // Its `Retiring` was dropped, so the name is free again; what
                // the retirement did not get to is said here, not silently lost.
                tracing::error!(error = %e, %why, "a session's retirement did not finish");
            }
        }
    }

    /// At start: adopt confined daemons already running in our socket dir
    /// (a previous server's sessions; the reaper ends them when idle), and
    /// kill unconfined ones (never reused). When the browser gate is on
    /// another port than the previous server's (`gate_kept` false), no
    /// daemon of that server can reach Chromium again: all are closed.
    pub(crate) async fn adopt_orphans(&self, gate_kept: bool) {
        let running = self.runner.running_daemons().await;
        let names: Vec<DaemonName> = running.iter().map(|(name, _)| name.clone()).collect();
        self.gate.end_unclaimed(&names).await;
        let mut adopted = Vec::new();
        for (name, confined) in running {
            if crate::session_id::is_pool_name(&name) {
                // Which session a pooled daemon served is not known after a
                // restart, and an unbound one is not this server's to hand out.
                self.record_lifecycle(
                    &name,
                    Outcome::Closed,
                    "a pooled daemon of a previous server was running at start".into(),
                );
                let mut problems = self.runner.retire(&name, None, &self.output_dir).await;
                if let Err(e) = self.gate.end_session(&name).await {
                    problems.push(format!("its browser context not disposed of: {e}"));
                }
                if !problems.is_empty() {
                    self.record_lifecycle(&name, Outcome::RetireIncomplete, problems.join("; "));
                }
            } else if confined && !gate_kept {
                self.record_lifecycle(
                    &name,
                    Outcome::Closed,
                    "a daemon was running at start, connected to the previous server's browser \
                     gate on another port"
                        .into(),
                );
                self.runner.kill_daemon(&name).await;
            } else if confined {
                self.registry.adopt(&name);
                adopted.push(name.clone());
                self.record_lifecycle(
                    &name,
                    Outcome::Adopted,
                    "a confined daemon was already running at start".into(),
                );
            } else {
                self.record_lifecycle(
                    &name,
                    Outcome::Closed,
                    "an unconfined daemon was running at start".into(),
                );
                self.runner.kill_daemon(&name).await;
                if let Err(e) = self.gate.end_session(&name).await {
                    tracing::warn!(error = %e, "an unconfined daemon's browser context was not disposed of");
                }
            }
        }
        self.gate.reclaim_kept(&adopted).await;
    }
}
