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
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::sync::lock;

/// How long a read's commands, all told, may wait for a navigation.
const SETTLE_WITHIN: Duration = Duration::from_secs(3);

/// Sessions reading right now, by daemon name, with when their read stops
/// waiting for navigations.
#[derive(Debug, Clone, Default)]
pub(crate) struct Readers {
    by_daemon: Arc<Mutex<HashMap<String, Instant>>>,
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
        let until = Instant::now() + SETTLE_WITHIN;
        lock(&self.by_daemon).insert(daemon.to_owned(), until);
        Reading {
            readers: self.clone(),
            daemon: daemon.to_owned(),
        }
    }

    /// How much longer `daemon`'s read may wait for a navigation: `None`
    /// when its call does not only read. One bound for the whole read, not
    /// one per command (a snapshot sends several).
    pub(super) fn may_wait(&self, daemon: &str) -> Option<Duration> {
        let until = *lock(&self.by_daemon).get(daemon)?;
        Some(until.saturating_duration_since(Instant::now()))
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        lock(&self.readers.by_daemon).remove(&self.daemon);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_reads_only_while_its_call_holds_the_reading() {
        let readers = Readers::default();
        let reading = readers.begin("d1");
        let left = readers.may_wait("d1").expect("d1 reads");
        assert!(left > Duration::ZERO && left <= SETTLE_WITHIN, "{left:?}");
        assert_eq!(readers.may_wait("d2"), None);
        drop(reading);
        assert_eq!(readers.may_wait("d1"), None);
    }
}
