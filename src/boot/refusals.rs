//! The browser gate's and the egress proxy's refusals, on their way to the
//! audit log: each named with its session and the call in flight when it
//! arrives, a refused connection's requester confirmed by the page's word
//! (`gate::failed_loads`), and, at stop, every one already queued written
//! before the server's last record.

use std::{sync::Arc, time::Duration};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    browser_refusals::{BrowserRefusal, Requester},
    server::Server,
};

/// How long the stop waits for the queued refusals to be written.
const DRAIN_WITHIN: Duration = Duration::from_secs(1);

/// The running recorder, for the stop.
pub(super) struct Recorder {
    stopping: CancellationToken,
    drained: oneshot::Receiver<()>,
}

impl Recorder {
    /// Record `refusals` as they come, on `server`'s chronicle.
    pub(super) fn start(
        server: &Arc<Server>,
        mut refusals: mpsc::Receiver<BrowserRefusal>,
    ) -> Self {
        let stopping = CancellationToken::new();
        let (done, drained) = oneshot::channel();
        let (server, token) = (Arc::clone(server), stopping.clone());
        tokio::spawn(async move {
            let mut done = Some(done);
            loop {
                let event = tokio::select! {
                    event = refusals.recv() => event,
                    () = token.cancelled(), if done.is_some() => {
                        // What is queued now is written without waiting, before `stopped`.
                        while let Ok(event) = refusals.try_recv() {
                            record(&server, event, &token).await;
                        }
                        if let Some(done) = done.take() {
                            let _ = done.send(());
                        }
                        continue;
                    }
                };
                let Some(event) = event else { break };
                record(&server, event, &token).await;
            }
        });
        Self { stopping, drained }
    }

    /// Write what is queued now, without waiting for pages' words; bounded.
    pub(super) async fn drain(self) {
        self.stopping.cancel();
        let _ = tokio::time::timeout(DRAIN_WITHIN, self.drained).await;
    }
}

async fn record(server: &Server, mut event: BrowserRefusal, stopping: &CancellationToken) {
    // Named now: the call in flight may end while the page's word is awaited.
    let daemon = event.daemon.as_deref();
    let session = daemon.and_then(|d| server.sessions.session_of(d));
    let in_call = daemon.and_then(|d| server.sessions.call_in_flight(d));
    confirm_requester(&server.gate, &mut event, stopping).await;
    server
        .chronicle
        .record_gate_refusal(event, session, in_call);
}

/// A connection the egress proxy refused is the page's when one of the
/// session's pages says that load failed, within a moment (cut short at
/// stop); else its requester is unknown. Refusals come in the order they
/// were made, so a burst waits about once, not once per refusal.
async fn confirm_requester(
    gate: &crate::gate::Handle,
    event: &mut BrowserRefusal,
    stopping: &CancellationToken,
) {
    let Requester::Unconfirmed { at } = event.requester else {
        return;
    };
    tokio::select! {
        () = tokio::time::sleep_until((at + crate::gate::PAGE_WORD_WITHIN).into()) => {}
        () = stopping.cancelled() => {}
    }
    let confirmed = event
        .destination
        .as_ref()
        .zip(event.daemon.as_ref())
        .is_some_and(|(to, daemon)| gate.page_reported(daemon, to, at));
    event.requester = if confirmed {
        Requester::Page
    } else {
        Requester::Unknown
    };
}
