//! Who is calling, and one call's identity while it is in flight.

use std::{sync::Arc, time::Instant};

use tokio_util::sync::CancellationToken;

use super::record::CallRecord;
use crate::{obs::telemetry::ActiveCall, policy::rules::Rules};

/// Who is calling, as far as the protocol tells us.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallContext {
    pub(crate) request_id: Option<String>,
    pub(crate) client: Option<String>,
    pub(crate) protocol_version: Option<String>,
    /// W3C trace context from `params._meta`.
    pub(crate) traceparent: Option<String>,
    pub(crate) tracestate: Option<String>,
    pub(crate) cancel: CancellationToken,
    /// The person at the client, when the client can be asked
    /// (elicitation): an approvals channel.
    pub(crate) asker: Option<Arc<dyn crate::approvals::Ask>>,
    /// A 2026-07-28 client that can be asked by the call's result, and
    /// what its retry brought back: an approvals channel.
    pub(crate) retry: Option<crate::approvals::retry::Retry>,
}

/// One call in flight: its identity in the audit log, its span, its start,
/// and the rules it is decided under from start to end (a reload meanwhile
/// applies to the next call).
pub(crate) struct Call<'a> {
    pub(crate) record: CallRecord,
    pub(crate) rules: Arc<Rules>,
    pub(crate) span: &'a ActiveCall,
    pub(crate) started: Instant,
    pub(crate) cancel: CancellationToken,
    /// As in its [`CallContext`].
    pub(crate) asker: Option<Arc<dyn crate::approvals::Ask>>,
    /// As in its [`CallContext`].
    pub(crate) retry: Option<crate::approvals::retry::Retry>,
}

impl<'a> Call<'a> {
    pub(crate) fn new(ctx: &CallContext, span: &'a ActiveCall, rules: Arc<Rules>) -> Self {
        Self {
            record: CallRecord::new(
                (ctx.request_id.as_ref(), ctx.client.as_ref()),
                span.trace_id(),
                span.span_id(),
                rules.sha256.clone(),
            ),
            rules,
            span,
            started: Instant::now(),
            cancel: ctx.cancel.clone(),
            asker: ctx.asker.clone(),
            retry: ctx.retry.clone(),
        }
    }

    /// Wall time since the call started, in milliseconds (µs precision).
    pub(crate) fn millis(&self) -> f64 {
        (self.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
    }
}
