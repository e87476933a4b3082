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
};

use crate::sync::lock;

/// Sessions reading right now, by daemon name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Readers {
    by_daemon: Arc<Mutex<HashSet<String>>>,
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
    pub(super) fn is_reading(&self, daemon: &str) -> bool {
        lock(&self.by_daemon).contains(daemon)
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
        assert!(readers.is_reading("d1"));
        assert!(!readers.is_reading("d2"));
        drop(reading);
        assert!(!readers.is_reading("d1"));
    }
}
