//! The call's OTLP span: opened with what the protocol said, closed with how
//! the call ended (redacted: the error text only through the redactor, and
//! only its first line).

use super::{context::CallContext, record, reply::Reply};
use crate::{
    obs::{
        journal::Journal,
        telemetry::{ActiveCall, CallMeta, CallOutcome, Called},
    },
    refusal::Rule,
};

/// How a call ended, for its span.
#[derive(Debug, Clone)]
pub(crate) enum Ending {
    Allowed {
        subcommand: String,
        error_type: Option<&'static str>,
    },
    Denied {
        rule: Rule,
        subcommand: Option<String>,
    },
    AuditUnavailable {
        subcommand: Option<String>,
    },
}

pub(crate) fn start(
    journal: &Journal,
    ctx: &CallContext,
    called: Called,
    session_id: Option<&str>,
) -> ActiveCall {
    let request_id = ctx
        .request_id
        .as_deref()
        .map(|id| record::capped(id, record::MAX_RECORDED_ID_BYTES));
    journal.telemetry().start_call(&CallMeta {
        called,
        request_id: request_id.as_deref(),
        traceparent: ctx.traceparent.as_deref(),
        tracestate: ctx.tracestate.as_deref(),
        protocol_version: ctx.protocol_version.as_deref(),
        session_id,
    })
}

pub(crate) fn finish(
    redactor: &audit::Redactor,
    journal: &Journal,
    span: ActiveCall,
    reply: &Reply,
    ending: &Ending,
) {
    // The span is a record too: no secret, no typed text in a URL.
    let message = reply
        .stderr
        .lines()
        .next()
        .map(|l| journal.shielded(&redactor.text(l)));
    let message: Option<String> = message.map(|m| m.chars().take(200).collect());
    let outcome = match ending {
        Ending::Allowed {
            subcommand,
            error_type,
        } => CallOutcome {
            subcommand: Some(subcommand),
            verdict: "allowed",
            exit_code: Some(reply.exit_code),
            error_type: *error_type,
            error_message: error_type.and(message.as_deref()),
            ..CallOutcome::default()
        },
        Ending::Denied { rule, subcommand } => CallOutcome {
            subcommand: subcommand.as_deref(),
            verdict: "denied",
            deny_reason: Some(rule.id()),
            exit_code: Some(reply.exit_code),
            error_type: Some(rule.error_type()),
            error_message: message.as_deref(),
        },
        Ending::AuditUnavailable { subcommand } => CallOutcome {
            subcommand: subcommand.as_deref(),
            verdict: "denied",
            exit_code: Some(reply.exit_code),
            error_type: Some("audit_unavailable"),
            error_message: message.as_deref(),
            ..CallOutcome::default()
        },
    };
    span.finish(&outcome);
}
