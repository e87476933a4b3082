//! Refusals made outside any call, by the browser gate (a CDP message, a
//! page's document) or the egress proxy (a connection a page wanted), on
//! their way to the audit writer.
//!
//! A page or a compromised child can make them far faster than a client
//! makes calls, so handing one over never waits: what does not fit the
//! queue is counted, and the count goes into the next record written.
//!
//! Each names who made the refused request, where that can be known
//! ([`Requester`]): the egress proxy cannot tell a page's connection from
//! one Chromium makes for itself through the same context, so it leaves
//! that to the page's own word, checked when the refusal is recorded.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use tokio::sync::mpsc;

use crate::{refusal::Rule, session_id::DaemonName};

/// Refusals waiting for the audit writer, at most.
const QUEUE: usize = 256;

/// Who made a refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requester {
    /// agent-browser, on its own CDP connection: the agent's command as its
    /// daemon carried it out.
    AgentBrowser,
    /// A page of the session (a document, one of its frames, or what it
    /// loaded).
    Page,
    /// No one this server can name.
    Unknown,
    /// A connection the session's egress proxy refused at `at`: a page's
    /// when one of the session's pages reports that load failed, else
    /// unknown (Chromium's own services use the context's proxy too).
    Unconfirmed {
        /// When the proxy refused it.
        at: Instant,
    },
}

impl Requester {
    /// The record's word for it (`requester`).
    pub(crate) fn id(&self) -> &'static str {
        match self {
            Self::AgentBrowser => "agent-browser",
            Self::Page => "page",
            Self::Unknown | Self::Unconfirmed { .. } => "unknown",
        }
    }
}

/// Where a refused request was going.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    /// The host as the request named it (a name or an address literal).
    pub(crate) hostname: String,
    pub(crate) port: u16,
}

impl Destination {
    /// The host and port of `url` (its scheme's default port when it names
    /// none); `None` for a URL without a host.
    pub(crate) fn of_url(url: &url::Url) -> Option<Self> {
        Some(Self {
            hostname: url.host_str()?.to_owned(),
            port: url.port_or_known_default()?,
        })
    }

    /// `host:port` as a `CONNECT` names it, spelled as a URL's host would
    /// be (lower case, IPv6 in brackets).
    pub(crate) fn of_authority(host: &str, port: u16) -> Option<Self> {
        let url = url::Url::parse(&format!("http://{host}:{port}/")).ok()?;
        Some(Self {
            hostname: url.host_str()?.to_owned(),
            port,
        })
    }
}

/// One refusal, for the audit trail.
#[derive(Debug)]
pub(crate) struct BrowserRefusal {
    /// The daemon it is attributed to: the one whose connection or browser
    /// context made it, when the gate or the proxy could tell (the call
    /// layer maps it to the session it serves).
    pub(crate) daemon: Option<DaemonName>,
    pub(crate) rule: Rule,
    pub(crate) reason: String,
    pub(crate) requester: Requester,
    /// Where the refused request was going, when it was a request.
    pub(crate) destination: Option<Destination>,
    /// Refusals before this one that could not be queued.
    pub(crate) unrecorded_before: u64,
}

impl BrowserRefusal {
    /// A refusal of `daemon`'s, made by `requester`.
    pub(crate) fn new(
        daemon: Option<DaemonName>,
        rule: Rule,
        reason: String,
        requester: Requester,
    ) -> Self {
        Self {
            daemon,
            rule,
            reason,
            requester,
            destination: None,
            unrecorded_before: 0,
        }
    }

    /// … of a request to `destination`.
    pub(crate) fn to(mut self, destination: Option<Destination>) -> Self {
        self.destination = destination;
        self
    }
}

/// The sending side, cloned into the gate and the egress proxy.
#[derive(Clone, Debug)]
pub(crate) struct Reporter {
    tx: mpsc::Sender<BrowserRefusal>,
    unrecorded: Arc<AtomicU64>,
}

impl Reporter {
    /// A reporter and the receiver the audit writer reads.
    pub(crate) fn channel() -> (Self, mpsc::Receiver<BrowserRefusal>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let reporter = Self {
            tx,
            unrecorded: Arc::default(),
        };
        (reporter, rx)
    }

    /// Hand a refusal to the audit writer; never waits.
    pub(crate) fn report(&self, mut event: BrowserRefusal) {
        use tokio::sync::mpsc::error::TrySendError;
        event.unrecorded_before = self.unrecorded.swap(0, Ordering::Relaxed);
        if let Err(TrySendError::Full(event) | TrySendError::Closed(event)) =
            self.tx.try_send(event)
        {
            self.unrecorded
                .fetch_add(event.unrecorded_before + 1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_past_the_queue_are_counted_into_the_next_record() {
        let (reporter, mut rx) = Reporter::channel();
        for i in 0..QUEUE + 3 {
            reporter.report(BrowserRefusal::new(
                DaemonName::checked("s"),
                Rule::RequestBlocked,
                format!("{i}"),
                Requester::Unknown,
            ));
        }
        for _ in 0..QUEUE {
            assert!(rx.try_recv().is_ok());
        }
        reporter.report(BrowserRefusal::new(
            DaemonName::checked("s"),
            Rule::RequestBlocked,
            "next".into(),
            Requester::Unknown,
        ));
        let next = rx.try_recv().expect("room again");
        assert_eq!((next.reason.as_str(), next.unrecorded_before), ("next", 3));
    }
}
