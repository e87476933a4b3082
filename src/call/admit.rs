//! Admission: one call at a time per session (agent-browser serialises in
//! its daemon anyway, and the server's own bookkeeping must not interleave),
//! at most `max_inflight` calls at all, and at most `max_sessions` sessions.
//! Every wait is bounded; a call that cannot start in time is refused busy.

use std::sync::Arc;

use audit::Outcome;
use tokio::sync::{OwnedMutexGuard, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::request::Validated;
use crate::{
    refusal::{Refusal, Rule},
    server::{Server, sessions::Admission},
    session_id::SessionId,
};

/// A call's turn: held until the call ends.
pub(crate) struct Admitted<'s> {
    _turn: OwnedMutexGuard<()>,
    _slot: SemaphorePermit<'s>,
    /// The session as its daemon runs it (bound to a pooled one or not).
    pub(crate) session: SessionId,
    /// Bound to a pooled daemon by this call: its tab is still in the
    /// background.
    pub(crate) just_bound: bool,
}

/// How often a call starts over when its session is retired while it waits.
const MAX_TRIES: u32 = 3;

pub(crate) async fn admit<'s>(
    server: &'s Server,
    request: &Validated,
    cancel: &CancellationToken,
) -> Result<Admitted<'s>, Refusal> {
    let wait = server.limits.busy_wait;
    // One bound for the whole admission, however often it starts over.
    let give_up = tokio::time::Instant::now() + wait;
    let mut tries = 0;
    let mut just_bound = false;
    let (turn, name) = loop {
        let turn = match server
            .sessions
            .admit(&request.session, || server.pool.take())
        {
            Admission::Go(turn) => turn,
            Admission::Evicted(turn, victim) => {
                let why = "the session cap was reached; least recently used idle session";
                server.retire(victim, Outcome::Evicted, why).await;
                turn
            }
            Admission::Full => {
                return Err(Refusal::new(
                    Rule::Sessions,
                    format!(
                        "{} sessions are already live; close one (argv [\"close\"]) or wait for idle ones to be reaped",
                        server.limits.max_sessions
                    ),
                ));
            }
        };
        if let Some(pooled) = &turn.bound {
            server.record_bound(request.session.as_str(), pooled);
            just_bound = true;
        }
        let (lock, name) = (turn.lock, turn.daemon_name);
        let turn = tokio::select! {
            turn = tokio::time::timeout_at(give_up, Arc::clone(&lock).lock_owned()) => turn.map_err(|_| {
                Refusal::new(Rule::Busy, format!(
                    "the session is still busy with its previous call after {} s; try again",
                    wait.as_secs()
                ))
            })?,
            () = cancel.cancelled() => {
                return Err(Refusal::new(
                    Rule::Cancelled,
                    "cancelled while waiting for the session's previous call",
                ));
            }
        };
        // The session may have been retired (reaped, evicted) while this
        // call waited for its turn: then it starts anew, as a new session.
        if server.sessions.is_current(&name, &lock) {
            break (turn, name);
        }
        tries += 1;
        if tries == MAX_TRIES {
            return Err(Refusal::new(
                Rule::Busy,
                "the session kept being retired while this call waited; try again",
            ));
        }
    };
    let slot = match tokio::time::timeout(wait, server.inflight.acquire()).await {
        Ok(Ok(slot)) => slot,
        _ => {
            return Err(Refusal::new(
                Rule::Busy,
                format!(
                    "{} calls are already running; none finished within {} s; try again",
                    server.limits.max_inflight,
                    wait.as_secs()
                ),
            ));
        }
    };
    Ok(Admitted {
        _turn: turn,
        _slot: slot,
        session: request.session.run_by(&name),
        just_bound,
    })
}
