//! Admission: one call at a time per session (agent-browser serialises in
//! its daemon anyway, and the server's own bookkeeping must not interleave),
//! at most `max_inflight` calls at all, and at most `max_sessions` sessions.
//! Every wait is bounded; a call that cannot start in time is refused busy.

use std::sync::Arc;

use tokio::sync::{OwnedMutexGuard, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::request::Validated;
use crate::{
    refusal::{Refusal, Rule},
    server::{admission::Admission, sessions::Sessions},
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
    /// A read let in before the previous call's look: the gate holds its
    /// commands while the page navigates.
    _reading: Option<crate::gate::Reading>,
}

/// How often a call starts over when its session is retired while it waits.
const MAX_TRIES: u32 = 3;

/// The one bound of an admission: a time, and the call's cancellation.
#[derive(Clone, Copy)]
struct Bound<'a> {
    give_up: tokio::time::Instant,
    wait: std::time::Duration,
    cancel: &'a CancellationToken,
}

impl Bound<'_> {
    /// `what`, within the bound: past it the session is `busy` (what it is
    /// still doing); `named` is what a cancelled call waited for.
    async fn wait_for<T>(
        self,
        what: impl Future<Output = T>,
        (busy, named): (&str, &str),
    ) -> Result<T, Refusal> {
        tokio::select! {
            done = tokio::time::timeout_at(self.give_up, what) => done.map_err(|_| {
                Refusal::new(Rule::Busy, format!(
                    "the session is still {busy} after {} s; try again",
                    self.wait.as_secs()
                ))
            }),
            () = self.cancel.cancelled() => Err(Refusal::new(
                Rule::Cancelled,
                format!("cancelled while waiting for {named}"),
            )),
        }
    }
}

/// The session's turn for `request`, once the look after its previous call
/// is taken; a call that `reads_only` goes in at once, its commands held by
/// the gate (`readers`) while the page navigates instead.
pub(crate) async fn admit<'s>(
    (sessions, admission): (&Sessions, &'s Admission),
    (witnesses, readers): (&crate::evidence::Witnesses, &crate::gate::Readers),
    (request, reads_only): (&Validated, bool),
    cancel: &CancellationToken,
) -> Result<Admitted<'s>, Refusal> {
    let wait = admission.busy_wait();
    // One bound for the whole admission, however often it starts over.
    let give_up = tokio::time::Instant::now() + wait;
    let mut tries = 0;
    let mut just_bound = false;
    let bound = Bound {
        give_up,
        wait,
        cancel,
    };
    let mut reading = None;
    let (turn, name) = loop {
        let turn = sessions.enter(&request.session).await?;
        just_bound |= turn.bound.is_some();
        let (lock, name) = (turn.lock, turn.daemon_name);
        let turn = bound
            .wait_for(
                Arc::clone(&lock).lock_owned(),
                ("busy with its previous call", "the session's previous call"),
            )
            .await?;
        // The session may have been retired (reaped, evicted) while this
        // call waited for its turn: then it starts anew, as a new session.
        if sessions.is_current(&name, &lock) {
            if reads_only && witnesses.level() != crate::evidence::Level::Off {
                reading = Some(readers.begin(name.as_str()));
                break (turn, name);
            }
            // The look after the previous call is the end of that call's
            // work: this one acts only on the page it left.
            bound
                .wait_for(
                    witnesses.looked(&name),
                    (
                        "looking at what its previous call left",
                        "the look after the session's previous call",
                    ),
                )
                .await?;
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
    let slot = admission.slot().await?;
    Ok(Admitted {
        _turn: turn,
        _slot: slot,
        session: request.session.run_by(&name),
        just_bound,
        _reading: reading,
    })
}
