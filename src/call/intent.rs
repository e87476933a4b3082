//! The write-ahead intent: an allowed call's record, written before its
//! command goes anywhere. Only a durable intent yields the
//! [`audit::IntentSynced`] the runner demands (docs/design.md,
//! "Write-ahead intent").
//!
//! A call whose session has a standby ready spawns nothing, so its intent is
//! synced with the write, in one step. A call that must spawn its child
//! writes the intent, starts the `fdatasync` on a blocking thread and spawns
//! meanwhile: the child gets its batch only once the sync succeeded.

use audit::{AuditError, IntentSynced, IntentWritten, Verdict};
use serde_json::Value;

use super::{
    admit::Admitted, context::Call, plan::Planned, record::redact_argv, request::Validated,
};
use crate::{obs::journal::Journal, runner::Runner};

/// An intent on its way to disk.
pub(crate) enum Intent {
    /// Written and synced in one step.
    Synced(IntentSynced),
    /// Written; its sync is still due.
    Written(IntentWritten),
}

/// What an intent rests on besides the call itself.
pub(crate) struct Grounds {
    /// The record of the confinement its child will run under.
    pub(crate) confinement: Value,
    /// The approval a person gave it (`call::approve`), when one was needed.
    pub(crate) approval: Option<Value>,
}

/// Write the intent of an admitted call.
pub(crate) fn write(
    journal: &Journal,
    runner: &Runner,
    call: &Call<'_>,
    (request, planned): (&Validated, &Planned),
    _turn: &Admitted<'_>,
    grounds: Grounds,
) -> Result<Intent, AuditError> {
    let mut event = call
        .record
        .event(audit::Phase::Intent, Some(&request.session));
    event.argv = Some(redact_argv(&call.rules.redactor, &request.argv));
    event.argv_mac = Some(call.rules.redactor.argv_mac(&request.argv));
    event.verdict = Some(Verdict::Allowed);
    event.confinement = Some(grounds.confinement);
    // The approval it rests on: its id, the digest of what was shown, who.
    event.approval = grounds.approval;
    if !planned.resolved.is_empty() {
        event.resolved = Some(planned.resolved.iter().map(ToString::to_string).collect());
    }
    if runner.has_standby(&request.session) {
        journal.intent_synced(event, call.span).map(Intent::Synced)
    } else {
        journal
            .intent_written(event, call.span)
            .map(Intent::Written)
    }
}

/// Why an intent did not become durable: nothing may run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotDurable {
    #[error(transparent)]
    Sync(AuditError),
    /// The blocking thread that synced it panicked or was cancelled.
    #[error("the audit sync did not finish: {0}")]
    Unfinished(tokio::task::JoinError),
}

/// A sync under way, or none needed.
enum Pending {
    Ready(IntentSynced),
    Syncing(tokio::task::JoinHandle<Result<IntentSynced, AuditError>>),
}

impl Intent {
    /// The proof, once the intent is durable. A pending sync starts now, on
    /// a blocking thread, not at the future's first poll: it overlaps the
    /// child's spawn.
    pub(crate) fn durable(self) -> impl Future<Output = Result<IntentSynced, NotDurable>> {
        let pending = match self {
            Self::Synced(proof) => Pending::Ready(proof),
            Self::Written(written) => {
                Pending::Syncing(tokio::task::spawn_blocking(move || written.sync()))
            }
        };
        async move {
            match pending {
                Pending::Ready(proof) => Ok(proof),
                Pending::Syncing(sync) => match sync.await {
                    Ok(Ok(proof)) => Ok(proof),
                    Ok(Err(e)) => Err(NotDurable::Sync(e)),
                    Err(e) => Err(NotDurable::Unfinished(e)),
                },
            }
        }
    }
}
