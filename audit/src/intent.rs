//! Proof that a write-ahead intent record is durable.
//!
//! A caller that must not act before its intent is on disk asks the sink for
//! an [`IntentSynced`] and hands it to whatever performs the action. Only
//! this module can make one (its field is private), and only after the sync
//! that covers the record returned `Ok`, so "acted before the intent was
//! durable" does not compile rather than being a rule in a comment.

use std::sync::Arc;

use crate::sink::{AuditError, Inner};

/// An intent record written to the log but not yet known to be synced.
///
/// [`IntentWritten::sync`] turns it into an [`IntentSynced`]; in between, the
/// caller may prepare its action (spawn a process that waits for input, say)
/// so the sync overlaps that work instead of preceding it.
#[derive(Debug)]
#[must_use = "an intent that is never synced cannot authorise anything"]
pub struct IntentWritten {
    pub(crate) inner: Arc<Inner>,
    pub(crate) seq: u64,
}

/// An intent record that is in the log and synced: the action it announces
/// may now run.
#[derive(Debug)]
pub struct IntentSynced {
    seq: u64,
}

impl IntentWritten {
    /// The record's position in the chain.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Make the record durable (`fdatasync`, shared with whatever else is
    /// pending), blocking. Records another thread already synced cost nothing.
    ///
    /// # Errors
    /// A failed sync, which latches: this and every later append fail.
    pub fn sync(self) -> Result<IntentSynced, AuditError> {
        self.inner.sync()?;
        Ok(IntentSynced::minted(self.seq))
    }
}

impl IntentSynced {
    /// Only the sink (after a synced append) and [`IntentWritten::sync`] call this.
    pub(crate) fn minted(seq: u64) -> Self {
        Self { seq }
    }

    /// The position in the chain of the intent record this proves durable.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}
