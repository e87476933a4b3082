//! The person at a 2026-07-28 client as an approvals channel. That revision
//! lets no server send a request mid-call, so the call ends with its
//! question (`input_required`: an elicitation the client puts to its user)
//! and the client calls again, the same call, with the answer and the
//! request state it was given.
//!
//! The state is sealed (HMAC) with a key that exists only in this process
//! and bound to the call's session, arguments and timeout: an answer cannot
//! be replayed for another call, for changed arguments, or on a restarted
//! server (which drops pending approvals). A request is answered once; one
//! not answered within the policy's `wait_sec`, or still waiting when the
//! server stops, expires, and whoever holds it is told so and why
//! (`on_expiry`), so the trail says how every request ended.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use super::{Answer, Binding};
use rmcp::model::{RequestStateCodec, RequestStateError, SealOptions};
use serde::{Deserialize, Serialize};

/// What the client's retry brought back.
#[derive(Debug, Clone)]
pub(crate) struct Echo {
    /// The request state, as echoed (untrusted until opened).
    pub(crate) state: String,
    /// The person's answer, as the client reported it.
    pub(crate) answer: Answer,
}

/// A call from a client that can be asked by `input_required`.
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    /// The answer to an earlier question, when this call is the retry.
    pub(crate) echo: Option<Echo>,
}

/// The question a call ends with: the client asks its user and retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Question {
    pub(crate) id: String,
    /// What the person reads.
    pub(crate) message: String,
    /// The sealed request state the retry must echo.
    pub(crate) state: String,
}

/// A request waiting for its retry: what a yes must still match.
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    /// The digest of what was shown.
    pub(crate) sha: String,
    pub(crate) rule: String,
    pub(crate) binding: Binding,
    /// How many times this call has been asked so far.
    pub(crate) asks: usize,
}

/// Why an echoed state does not resume a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stale {
    /// Not sealed by this server for this call: other arguments, another
    /// session, a forgery, or a server that has restarted since.
    NotThisCall,
    /// Sealed for this call, but its wait is over.
    Expired,
    /// Sealed for this call, but answered already (or expired a moment ago).
    Used,
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    id: String,
}

/// Why a request ended with no retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// Its wait (`wait_sec`) is over.
    WaitOver,
    /// The server stops: no retry can resume it any more.
    ServerStopped,
}

/// Told how a request ended when no retry took it.
type OnExpiry = Box<dyn FnOnce(Unanswered) + Send>;

/// The requests waiting for a retry, and the key that seals their states.
pub(crate) struct Retries {
    codec: RequestStateCodec,
    waiting: Arc<Mutex<HashMap<String, (Waiting, OnExpiry)>>>,
}

impl std::fmt::Debug for Retries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retries").finish_non_exhaustive()
    }
}

impl Retries {
    /// With a fresh random key: no state outlives this process.
    pub(crate) fn new() -> std::io::Result<Self> {
        let mut key = [0u8; 32];
        let filled = rustix::rand::getrandom(&mut key, rustix::rand::GetRandomFlags::empty())?;
        if filled < key.len() {
            return Err(std::io::Error::other(
                "the kernel gave too few random bytes for the request-state key",
            ));
        }
        let codec = RequestStateCodec::try_new(key.to_vec()).map_err(std::io::Error::other)?;
        Ok(Self {
            codec,
            waiting: Arc::default(),
        })
    }

    /// Hold request `id` for `within`, bound to `call` (the canonical bytes
    /// of the call it belongs to); the sealed state to hand the client.
    /// Past `within`, or at [`Retries::stop`], if no retry took it,
    /// `on_expiry` runs.
    pub(crate) fn hold(
        &self,
        id: &str,
        waiting: Waiting,
        (call, within): (&[u8], Duration),
        on_expiry: impl FnOnce(Unanswered) + Send + 'static,
    ) -> Result<String, RequestStateError> {
        let options = SealOptions::new().associated_data(call).ttl(within);
        let state = self
            .codec
            .seal_json_with(&Sealed { id: id.to_owned() }, &options)?;
        self.lock()
            .insert(id.to_owned(), (waiting, Box::new(on_expiry)));
        let table = Arc::clone(&self.waiting);
        let id = id.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(within).await;
            let gone = table
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            if let Some((_, on_expiry)) = gone {
                on_expiry(Unanswered::WaitOver);
            }
        });
        Ok(state)
    }

    /// The server stops: every request still waiting ends, each told so.
    pub(crate) fn stop(&self) {
        let ended: Vec<_> = self.lock().drain().collect();
        for (_, (_, on_expiry)) in ended {
            on_expiry(Unanswered::ServerStopped);
        }
    }

    /// The request `state` names, taken (a state resumes one call, once),
    /// if it was sealed for `call`.
    pub(crate) fn take(&self, state: &str, call: &[u8]) -> Result<(String, Waiting), Stale> {
        let sealed: Sealed = self
            .codec
            .open_json_with(state, call)
            .map_err(|e| match e {
                RequestStateError::Expired => Stale::Expired,
                _ => Stale::NotThisCall,
            })?;
        let (waiting, _) = self.lock().remove(&sealed.id).ok_or(Stale::Used)?;
        Ok((sealed.id, waiting))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Waiting, OnExpiry)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
