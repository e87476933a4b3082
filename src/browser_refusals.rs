//! Refusals made outside any call, by the browser gate (a CDP message, a
//! page's document) or the egress proxy (a connection a page wanted), on
//! their way to the audit writer.
//!
//! A page or a compromised child can make them far faster than a client
//! makes calls, so handing one over never waits: what does not fit the
//! queue is counted, and the count goes into the next record written.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use tokio::sync::mpsc;

use crate::refusal::Rule;

/// Refusals waiting for the audit writer, at most.
const QUEUE: usize = 256;

/// One refusal, for the audit trail.
#[derive(Debug)]
pub(crate) struct BrowserRefusal {
    /// The daemon (session) it is attributed to: the one whose connection
    /// or browser context made it.
    pub(crate) session: String,
    pub(crate) rule: Rule,
    pub(crate) reason: String,
    /// Refusals before this one that could not be queued.
    pub(crate) unrecorded_before: u64,
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
    pub(crate) fn report(&self, session: String, rule: Rule, reason: String) {
        use tokio::sync::mpsc::error::TrySendError;
        let event = BrowserRefusal {
            session,
            rule,
            reason,
            unrecorded_before: self.unrecorded.swap(0, Ordering::Relaxed),
        };
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
            reporter.report("s".into(), Rule::RequestBlocked, format!("{i}"));
        }
        for _ in 0..QUEUE {
            assert!(rx.try_recv().is_ok());
        }
        reporter.report("s".into(), Rule::RequestBlocked, "next".into());
        let next = rx.try_recv().expect("room again");
        assert_eq!((next.reason.as_str(), next.unrecorded_before), ("next", 3));
    }
}
