//! Which sessions run a call that only reads, let in before the look after
//! their previous call, so the gate can hold its commands on a tab until
//! that tab's navigation has committed.
//!
//! A read (`get`, `snapshot`) need not wait for the previous call's whole
//! look (its history read and its record), but it must not read the page a
//! click or a key is leaving: `get url` right after a submitting `press`
//! names where the press went. agent-browser reads through the gate, so its
//! commands wait here for the commit while its own start overlaps the
//! navigation (docs/design.md, "Reads after an action").

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::Notify;

use crate::sync::lock;

/// Sessions reading right now, by daemon name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Readers {
    by_daemon: Arc<Mutex<HashSet<String>>>,
    /// Woken when a read ends.
    ended: Arc<Notify>,
}

/// A session's read, ended when dropped.
#[derive(Debug)]
pub(crate) struct Reading {
    readers: Readers,
    daemon: String,
}

impl Readers {
    /// `daemon`'s call, which only reads, is about to run.
    pub(crate) fn begin(&self, daemon: &str) -> Reading {
        lock(&self.by_daemon).insert(daemon.to_owned());
        Reading {
            readers: self.clone(),
            daemon: daemon.to_owned(),
        }
    }

    /// Whether `daemon`'s call only reads.
    pub(crate) fn is_reading(&self, daemon: &str) -> bool {
        lock(&self.by_daemon).contains(daemon)
    }

    /// Wait until `daemon`'s read has ended, for at most `within`.
    pub(crate) async fn finished(&self, daemon: &str, within: Duration) {
        let give_up = tokio::time::Instant::now() + within;
        loop {
            // Registered before the look, so an end between them wakes it.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self.is_reading(daemon) || tokio::time::timeout_at(give_up, ended).await.is_err() {
                return;
            }
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        lock(&self.readers.by_daemon).remove(&self.daemon);
        self.readers.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_for_a_read_ends_when_it_does_or_at_its_bound() {
        let readers = Readers::default();
        let reading = readers.begin("d1");
        let waiting = {
            let readers = readers.clone();
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                readers.finished("d1", Duration::from_secs(2)).await;
                started.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(9)).await;
        drop(reading);
        let elapsed = waiting.await.expect("the wait ends");
        assert_eq!(elapsed, Duration::from_millis(9), "woken by the read's end");
        let _endless = readers.begin("d2");
        let started = tokio::time::Instant::now();
        readers.finished("d2", Duration::from_secs(2)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(2), "bounded");
    }

    #[test]
    fn a_session_reads_only_while_its_call_holds_the_reading() {
        let readers = Readers::default();
        let reading = readers.begin("d1");
        assert!(readers.is_reading("d1"));
        assert!(!readers.is_reading("d2"));
        drop(reading);
        assert!(!readers.is_reading("d1"));
    }
}
