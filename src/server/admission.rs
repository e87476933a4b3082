//! How many calls run at once and how long one waits for a slot, and the
//! drain at shutdown: new calls are refused, running ones get their grace,
//! then are cancelled.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::Duration,
};

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use crate::refusal::{Refusal, Rule};

/// The server's call slots and its draining state.
#[derive(Debug)]
pub(crate) struct Admission {
    /// One permit per call allowed to run at once.
    inflight: Semaphore,
    max_inflight: u32,
    busy_wait: Duration,
    /// Set on SIGTERM: new calls are refused.
    draining: AtomicBool,
    /// Cancelled when draining runs out of patience: in-flight calls stop.
    shutdown: CancellationToken,
    /// Tool calls handled, for the `stopped` record and the pool's quiet.
    calls_served: AtomicU64,
}

impl Admission {
    pub(crate) fn new(max_inflight: u32, busy_wait: Duration) -> Self {
        Self {
            inflight: Semaphore::new(max_inflight as usize),
            max_inflight,
            busy_wait,
            draining: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
            calls_served: AtomicU64::new(0),
        }
    }

    /// How long a call may wait for its session's turn and for a slot.
    pub(crate) fn busy_wait(&self) -> Duration {
        self.busy_wait
    }

    /// Is the server refusing new calls (SIGTERM)?
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// A token cancelled when the server gives up on in-flight calls.
    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// A tool call arrived.
    pub(crate) fn count_call(&self) {
        self.calls_served.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn calls_served(&self) -> u64 {
        self.calls_served.load(Ordering::Relaxed)
    }

    /// Is no call running?
    pub(crate) fn is_idle(&self) -> bool {
        self.inflight.available_permits() == self.max_inflight as usize
    }

    /// A slot to run in, waiting at most the busy wait.
    pub(crate) async fn slot(&self) -> Result<SemaphorePermit<'_>, Refusal> {
        match tokio::time::timeout(self.busy_wait, self.inflight.acquire()).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(Refusal::new(
                Rule::Busy,
                format!(
                    "{} calls are already running; none finished within {} s; try again",
                    self.max_inflight,
                    self.busy_wait.as_secs()
                ),
            )),
        }
    }

    /// Graceful shutdown: refuse new calls, give in-flight calls up to
    /// `patience` to finish, then cancel the rest (their outcome is audited
    /// as `cancelled`) and wait a little for those records.
    pub(crate) async fn drain(&self, patience: Duration) {
        self.draining.store(true, Ordering::SeqCst);
        // Holding every slot means nothing is running.
        let idle = || async {
            if let Ok(slots) = self.inflight.acquire_many(self.max_inflight).await {
                drop(slots);
            }
        };
        if tokio::time::timeout(patience, idle()).await.is_err() {
            tracing::warn!(
                "calls still running after {} s; cancelling them",
                patience.as_secs()
            );
            self.shutdown.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(5), idle()).await;
        }
    }
}
