//! The call's OTLP span: opened with what the protocol said, closed with how
//! the call ended. A failed call's status names what failed from a bounded
//! set (its class, the rule or subcommand, the exit code), so a dashboard can
//! group by it; the words of the failure are in its log records.

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
        outcome: audit::Outcome,
    },
    Denied {
        rule: Rule,
        subcommand: Option<String>,
    },
    AuditUnavailable {
        subcommand: Option<String>,
    },
    /// It ended with a question for the client; its retry is another call.
    Asking {
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

pub(crate) fn finish(span: ActiveCall, reply: &Reply, ending: &Ending) {
    let status = status_of(ending, reply.exit_code);
    let outcome = match ending {
        Ending::Allowed {
            subcommand,
            outcome,
        } => CallOutcome {
            subcommand: Some(subcommand),
            verdict: "allowed",
            outcome: Some(outcome_name(*outcome)),
            exit_code: Some(reply.exit_code),
            error_type: super::conclude::error_type(*outcome),
            error_message: status.as_deref(),
            ..CallOutcome::default()
        },
        Ending::Denied { rule, subcommand } => CallOutcome {
            subcommand: subcommand.as_deref(),
            verdict: "denied",
            rule: Some(rule.id()),
            exit_code: Some(reply.exit_code),
            error_type: Some(rule.error_type()),
            error_message: status.as_deref(),
            ..CallOutcome::default()
        },
        Ending::Asking { subcommand } => CallOutcome {
            subcommand: subcommand.as_deref(),
            verdict: "pending",
            ..CallOutcome::default()
        },
        Ending::AuditUnavailable { subcommand } => CallOutcome {
            subcommand: subcommand.as_deref(),
            verdict: "denied",
            exit_code: Some(reply.exit_code),
            error_type: Some("audit_unavailable"),
            error_message: status.as_deref(),
            ..CallOutcome::default()
        },
    };
    span.finish(&outcome);
}

/// A failed call's span status: its error class, then the rule that refused
/// it or the (allow-listed) subcommand that failed and its exit code. None
/// of it is the agent's or the page's text, so it holds no secret either.
fn status_of(ending: &Ending, exit_code: i32) -> Option<String> {
    match ending {
        Ending::Allowed {
            subcommand,
            outcome,
        } => super::conclude::error_type(*outcome)
            .map(|class| format!("{class}: {subcommand}, exit code {exit_code}")),
        Ending::Denied { rule, .. } => Some(format!("{}: {}", rule.error_type(), rule.id())),
        Ending::Asking { .. } => None,
        Ending::AuditUnavailable { .. } => {
            Some("audit_unavailable: the intent was not made durable, nothing ran".to_owned())
        }
    }
}

/// An outcome's name, as its audit record spells it.
fn outcome_name(outcome: audit::Outcome) -> &'static str {
    match outcome {
        audit::Outcome::Ok => "ok",
        audit::Outcome::Error => "error",
        audit::Outcome::Timeout => "timeout",
        audit::Outcome::Cancelled => "cancelled",
        audit::Outcome::SpawnFailed => "spawn_failed",
        audit::Outcome::AuditUnavailable => "audit_unavailable",
        audit::Outcome::NavigationBlocked => "navigation_blocked",
        audit::Outcome::PageUnreadable => "page_unreadable",
        audit::Outcome::Refused => "refused",
        // Lifecycle outcomes never end a call.
        _ => "internal",
    }
}
