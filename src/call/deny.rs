//! Refusals on the record: a refused call's only audit record is one
//! `denied` record naming its rule, written before the reply. If even that
//! cannot be written, the reply says the audit is unavailable.

use audit::Verdict;

use super::{
    context::{Call, CallContext},
    record::{MAX_RECORDED_REASON_BYTES, capped, refused_argv},
    reply::Reply,
    span::{self, Ending},
};
use crate::{
    obs::{
        journal::Journal,
        telemetry::{CallOutcome, Called},
    },
    policy::rules,
    refusal::{Refusal, Rule, exit_code},
    server::pace::RefusalPace,
    session_id::SessionId,
};

/// A call's reply and how it ended, for its span.
pub(crate) type Replied = (Reply, Ending);

/// Record a refusal (the call's only record) and build its reply.
pub(crate) fn refuse(
    journal: &Journal,
    pace: &RefusalPace,
    call: &Call<'_>,
    session: Option<&SessionId>,
    argv: Option<&[String]>,
    refusal: &Refusal,
) -> Replied {
    let session_id = session.map_or("", SessionId::as_str);
    let subcommand = argv.and_then(|a| a.first().cloned());
    pace.spend();
    let mut event = call.record.event(audit::Phase::Denied, session);
    event.argv = argv.map(|argv| refused_argv(&call.rules.redactor, argv));
    event.argv_mac = argv.map(|argv| call.rules.redactor.argv_mac(argv));
    event.verdict = Some(Verdict::Denied);
    event.rule = Some(refusal.rule.id().to_owned());
    event.reason = Some(capped(&refusal.message, MAX_RECORDED_REASON_BYTES).into_owned());
    event.exit_code = Some(exit_code::REFUSED);
    event.duration_ms = Some(call.millis());
    match journal.append(event, call.span) {
        Ok(()) => (
            Reply::refused(session_id, refusal),
            Ending::Denied {
                rule: refusal.rule,
                subcommand,
            },
        ),
        Err(e) => {
            tracing::error!(error = %e, "audit record of a refusal not written");
            let message = format!("audit unavailable ({e}); the call was refused: {refusal}");
            (
                Reply::internal(session_id, &message),
                Ending::AuditUnavailable { subcommand },
            )
        }
    }
}

/// A refusal the audit log did not take: the call is refused all the same,
/// and the client is told both.
#[derive(Debug, thiserror::Error)]
#[error("audit unavailable ({error}); the call was refused: {refusal}")]
pub(crate) struct UnrecordedRefusal {
    error: audit::AuditError,
    refusal: Refusal,
}

/// Audit a call of a tool this server does not have (answered with a
/// JSON-RPC error). Returns the audit failure, if any.
pub(crate) fn refuse_unknown_tool(
    journal: &Journal,
    pace: &RefusalPace,
    rules: &rules::Current,
    ctx: &CallContext,
    asked: (&str, Option<&serde_json::Map<String, serde_json::Value>>),
) -> Result<(), UnrecordedRefusal> {
    let (tool, arguments) = asked;
    let session = super::request::session_hint(arguments);
    let active = span::start(
        journal,
        ctx,
        Called::UnknownTool,
        session.as_ref().map(SessionId::as_str),
    );
    let call = Call::new(ctx, &active, rules.get());
    let refusal = Refusal::new(
        Rule::ToolUnknown,
        "unknown tool; this server has exactly one tool, browser-shell",
    );
    pace.spend();
    // What was asked, on the record: the tool's name (capped), the session,
    // and a keyed MAC of the argv (a reviewer holding it can match it).
    let mut event = call.record.event(audit::Phase::Denied, session.as_ref());
    event.tool = Some(capped(tool, MAX_RECORDED_TOOL_BYTES).into_owned());
    event.argv_mac = arguments
        .and_then(|a| a.get("argv"))
        .and_then(serde_json::Value::as_array)
        .map(|items| {
            let argv: Vec<String> = items
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect();
            call.rules.redactor.argv_mac(&argv)
        });
    event.verdict = Some(Verdict::Denied);
    event.rule = Some(refusal.rule.id().to_owned());
    event.reason = Some(refusal.message.clone());
    event.exit_code = Some(exit_code::REFUSED);
    event.duration_ms = Some(call.millis());
    let written = journal.append(event, call.span);
    active.finish(&CallOutcome {
        verdict: "denied",
        rule: Some(refusal.rule.id()),
        error_type: Some(if written.is_err() {
            "audit_unavailable"
        } else {
            refusal.rule.error_type()
        }),
        error_message: Some(&refusal.message),
        ..CallOutcome::default()
    });
    written.map_err(|e| {
        tracing::error!(error = %e, "audit record of a refusal not written");
        UnrecordedRefusal { error: e, refusal }
    })
}

/// Most bytes of an unknown tool's name a record stores.
const MAX_RECORDED_TOOL_BYTES: usize = 128;

/// Audit a message the wire answered itself (malformed JSON-RPC). There is
/// no reply to build: the wire already sent the protocol error.
pub(crate) fn record_protocol_fault(
    journal: &Journal,
    rules: &rules::Current,
    rule: Rule,
    message: &str,
    request_id: Option<String>,
) {
    let ctx = CallContext {
        request_id,
        ..CallContext::default()
    };
    let active = span::start(journal, &ctx, Called::Unparsed, None);
    let call = Call::new(&ctx, &active, rules.get());
    let mut event = call.record.event(audit::Phase::Denied, None);
    event.tool = None;
    event.verdict = Some(Verdict::Denied);
    event.rule = Some(rule.id().to_owned());
    event.reason = Some(capped(message, MAX_RECORDED_REASON_BYTES).into_owned());
    if let Err(e) = journal.append(event, call.span) {
        tracing::error!(error = %e, "audit record of a malformed message not written");
    }
    active.finish(&CallOutcome {
        verdict: "denied",
        rule: Some(rule.id()),
        error_type: Some(rule.error_type()),
        error_message: Some(message),
        ..CallOutcome::default()
    });
}
