//! The server's side of the audit trail: every record goes to the durable,
//! hash-chained log first and, once there, is copied to OTLP (best effort,
//! inside the call's span when there is one).
//!
//! Records nothing waits on (refusals, outcomes, lifecycle) are appended
//! deferred: written at once, synced within [`audit::DEFERRED_SYNC_WITHIN`].
//! The one record that gates something, an allowed call's intent, yields an
//! [`audit::IntentSynced`] only once it is durable (docs/design.md,
//! "Write-ahead intent"). What a record stores from outside (a client, a
//! page, a child) is [`capped`]: records of megabytes each would rotate older
//! evidence out of the log within a few hundred of them.

use std::{borrow::Cow, sync::Arc};

use audit::{AuditError, IntentSynced, IntentWritten};

use super::{
    shield::Shield,
    telemetry::{ActiveCall, Telemetry},
};

/// The audit sink and the OTLP exporter, written to together, behind the
/// shield that keeps secrets and typed text out of both.
#[derive(Debug, Clone)]
pub(crate) struct Journal {
    sink: Arc<audit::Sink>,
    telemetry: Telemetry,
    shield: Arc<Shield>,
}

impl Journal {
    pub(crate) fn new(sink: audit::Sink, telemetry: Telemetry, shield: Shield) -> Self {
        Self {
            sink: Arc::new(sink),
            telemetry,
            shield: Arc::new(shield),
        }
    }

    /// Diagnostics pass this journal's shield from now on
    /// ([`super::shield::scrub_diagnostic`]).
    pub(crate) fn guard_diagnostics(&self) {
        super::shield::guard_diagnostics(Arc::clone(&self.shield));
    }

    /// Text the agent had typed into a page: no record will hold it in
    /// clear from now on ([`Shield`]).
    pub(crate) fn remember_typed(&self, text: &str) {
        self.shield.remember_typed(text);
    }

    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Append a record of a call (deferred durability); copy it into the
    /// call's span.
    pub(crate) fn append(
        &self,
        mut event: audit::Event,
        span: &ActiveCall,
    ) -> Result<(), AuditError> {
        self.shield.apply(&mut event);
        self.write(span, |sink| {
            sink.append_with(event, audit::Durability::Deferred)
                .map(|sealed| (sealed, ()))
        })
    }

    /// Append a record that belongs to no call (a session's lifecycle).
    pub(crate) fn append_unattached(&self, mut event: audit::Event) -> Result<(), AuditError> {
        self.shield.apply(&mut event);
        let sealed = off_the_workers(|| self.sink.append_with(event, audit::Durability::Deferred))?;
        self.telemetry.log_audit_event(&sealed.record);
        Ok(())
    }

    /// Append a record of the server's own act and sync it before the act
    /// (a pooled daemon's warm-up): the proof a child needs to run.
    pub(crate) fn append_unattached_synced(
        &self,
        mut event: audit::Event,
    ) -> Result<IntentSynced, AuditError> {
        self.shield.apply(&mut event);
        let (sealed, proof) = off_the_workers(|| self.sink.append_synced(event))?;
        self.telemetry.log_audit_event(&sealed.record);
        Ok(proof)
    }

    /// Append a call's intent and sync it in the same step.
    pub(crate) fn intent_synced(
        &self,
        mut event: audit::Event,
        span: &ActiveCall,
    ) -> Result<IntentSynced, AuditError> {
        self.shield.apply(&mut event);
        self.write(span, |sink| sink.append_intent_synced(event))
    }

    /// Append a call's intent; the caller syncs it ([`IntentWritten::sync`])
    /// while it prepares the command.
    pub(crate) fn intent_written(
        &self,
        mut event: audit::Event,
        span: &ActiveCall,
    ) -> Result<IntentWritten, AuditError> {
        self.shield.apply(&mut event);
        self.write(span, |sink| sink.append_intent(event))
    }

    /// One blocking write to the log, then its copy into the call's span.
    fn write<T>(
        &self,
        span: &ActiveCall,
        write: impl FnOnce(&audit::Sink) -> Result<(audit::Sealed, T), AuditError>,
    ) -> Result<T, AuditError> {
        let (sealed, value) = off_the_workers(|| write(&self.sink))?;
        span.log_audit_event(&sealed.record);
        Ok(value)
    }

    /// The fingerprint of the key the log's checkpoint is kept under;
    /// `None` when none is kept.
    pub(crate) fn checkpoint_key_fingerprint(&self) -> Option<String> {
        self.sink.checkpoint_key_fingerprint()
    }

    /// Sync deferred records and refresh the checkpoint now (at exit).
    pub(crate) fn flush(&self) {
        if let Err(e) = off_the_workers(|| self.sink.flush()) {
            tracing::error!(error = %e, "audit log not synced at exit");
        }
    }
}

/// A fresh id for a call (or a lifecycle event): time, pid and a counter,
/// unique across the servers that share one log.
pub(crate) fn new_call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{nanos:x}-{:x}-{:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Run blocking audit I/O (flock, write, fdatasync). On the multi-threaded
/// runtime the worker hands its other tasks to another thread for the
/// duration (`block_in_place`), so a wait behind another call's sync never
/// stalls other sessions; elsewhere (a current-thread runtime, where that
/// would panic, or no runtime) it simply runs.
fn off_the_workers<T>(io: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(io)
    } else {
        io()
    }
}

/// Most bytes of a reason a record stores (a refusal may quote an argv item,
/// a blocked navigation the page's URL).
pub(crate) const MAX_RECORDED_REASON_BYTES: usize = 1024;

/// `value` if it is at most `max` bytes; else its first `max` bytes (at a
/// character boundary) then `…[<len> bytes, sha256:<hex>]`, the digest of
/// the whole value. A capped value is always longer than `max`, so it can
/// never be mistaken for one stored whole.
pub(crate) fn capped(value: &str, max: usize) -> Cow<'_, str> {
    if value.len() <= max {
        return Cow::Borrowed(value);
    }
    let mut end = max;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + 100);
    out.push_str(&value[..end]);
    out.push_str(&format!(
        "…[{} bytes, sha256:{}]",
        value.len(),
        audit::sha256_hex(value.as_bytes())
    ));
    Cow::Owned(out)
}
