//! After the command: the session's bookkeeping, a refused page taken away,
//! the outcome record (written before the reply, synced within 100 ms), and
//! the session's next standby.

use audit::{Outcome, Verdict};
use serde_json::Value;

use super::{
    context::Call,
    guard::{self, GuardServices, GuardVerdict},
    image::Shown,
    plan::Planned,
    record,
    reply::Reply,
    request::Validated,
    subcommand::Subcommand,
};
use crate::{
    obs::journal::Journal,
    policy::outputs::{self, Outputs},
    refusal::{Refusal, Rule},
    runner::{Executed, Runner, Termination, Withhold},
    server::sessions::Sessions,
};

/// The session after its command: a successful `close` ends it whole
/// (before the session's turn is given back: a session of the same name
/// may follow at once); anything else counts as use.
pub(crate) async fn update_session(
    sessions: &Sessions,
    request: &Validated,
    subcommand: Subcommand,
    executed: &Executed,
) {
    let closed = subcommand.facts().ends_session
        && matches!(executed.raw.termination, Termination::Exited(0));
    if closed {
        sessions.close(&request.session).await;
    } else {
        sessions.touch(request.session.daemon_name());
    }
}

/// An allowed call after its command and the guard's look: what the
/// concluding steps read.
pub(crate) struct Judged<'a> {
    pub(crate) request: &'a Validated,
    pub(crate) planned: &'a Planned,
    pub(crate) executed: &'a Executed,
    pub(crate) verdict: &'a GuardVerdict,
}

/// Act on the guard's verdict: replace the reply of a command that left the
/// page somewhere refused, or where it could not be read (returning the
/// refusal for the outcome record).
pub(crate) async fn enforce(
    with: GuardServices<'_>,
    outputs: &Outputs,
    call: &Call<'_>,
    judged: &Judged<'_>,
    reply: Reply,
) -> (Reply, Option<Refusal>) {
    let refused = match judged.verdict {
        GuardVerdict::Blocked { page, why } => Refusal::new(
            Rule::NavigationBlocked,
            format!(
                "the page navigated to {}: {why}",
                call.rules.redactor.url(page)
            ),
        ),
        // Its reads' errors are agent-browser's words, which may quote what
        // a page held: scrubbed like a gate refusal's reason.
        GuardVerdict::Unreadable { why } => Refusal::new(
            Rule::PageUnreadable,
            // What agent-browser said first: a reviewer's two-line view shows it.
            format!(
                "the page could not be read ({}), so it is not known to be allowed: is the \
                 browser out of the daemon's reach?",
                call.rules.secrets.scrub(why)
            ),
        ),
        GuardVerdict::Unchecked | GuardVerdict::Passed { .. } => return (reply, None),
    };
    let refusal = block(with, outputs, judged, refused).await;
    let session = judged.request.session.as_str();
    // 126 says nothing ran; after a command that did, that would be false.
    let withheld = matches!(judged.executed.raw.termination, Termination::Withheld(_));
    let reply = if withheld {
        Reply::refused(session, &refusal)
    } else {
        Reply::withheld(session, &refusal)
    };
    (reply, Some(refusal))
}

/// A page the guard refused (or could not read): take it away, delete a
/// screenshot this call wrote of it, and say so in the refusal that
/// replaces the reply.
async fn block(
    with: GuardServices<'_>,
    outputs: &Outputs,
    judged: &Judged<'_>,
    refused: Refusal,
) -> Refusal {
    let executed = judged.executed;
    let reset = guard::take_away(with, judged.request, executed.intent.as_ref()).await;
    // Only a screenshot this call wrote: a withheld command wrote nothing.
    let wrote = !matches!(executed.raw.termination, Termination::Withheld(_));
    let removed = match &judged.planned.output {
        Some(target) if wrote && outputs::remove(&outputs.dir, target) => {
            "; the screenshot was deleted"
        }
        _ => "",
    };
    Refusal::new(
        refused.rule,
        format!("{}; {reset}{removed}", refused.message),
    )
}

/// How the call ended, as the audit log and the span name it.
pub(crate) fn outcome_of(executed: &Executed, reply: &Reply, verdict: &GuardVerdict) -> Outcome {
    match verdict {
        GuardVerdict::Blocked { .. } => return Outcome::NavigationBlocked,
        GuardVerdict::Unreadable { .. } => return Outcome::PageUnreadable,
        GuardVerdict::Unchecked | GuardVerdict::Passed { .. } => {}
    }
    match &executed.raw.termination {
        Termination::Exited(0) if reply.exit_code == 0 => Outcome::Ok,
        Termination::Exited(_) | Termination::Signaled(_) => Outcome::Error,
        Termination::TimedOut => Outcome::Timeout,
        Termination::Cancelled => Outcome::Cancelled,
        Termination::SpawnFailed(_) => Outcome::SpawnFailed,
        Termination::Withheld(Withhold::Audit(_)) => Outcome::AuditUnavailable,
        Termination::Withheld(Withhold::Blocked { .. }) => Outcome::NavigationBlocked,
        Termination::Withheld(Withhold::Unreadable { .. }) => Outcome::PageUnreadable,
        Termination::Withheld(Withhold::Refused(_)) => Outcome::Refused,
    }
}

/// The one mapping from how a call ended to its span's `error.type`.
pub(crate) fn error_type(outcome: Outcome) -> Option<&'static str> {
    match outcome {
        Outcome::Ok => None,
        Outcome::Error => Some("tool_error"),
        Outcome::Timeout => Some("timeout"),
        Outcome::Cancelled => Some("cancelled"),
        Outcome::SpawnFailed => Some("spawn_failed"),
        Outcome::AuditUnavailable => Some("audit_unavailable"),
        Outcome::NavigationBlocked => Some("navigation_blocked"),
        Outcome::PageUnreadable => Some("page_unreadable"),
        Outcome::Refused => Some("policy_denied"),
        // Lifecycle outcomes never end a call.
        _ => Some("internal"),
    }
}

/// How an allowed call ended, for its outcome record: the outcome, the
/// refusal that replaced its reply, the confinement its child ran under, and
/// what the agent was shown (the page the command ended on, as the guard
/// read it, and what became of a screenshot).
pub(crate) struct Ended<'a> {
    pub(crate) outcome: Outcome,
    pub(crate) blocked: Option<&'a Refusal>,
    pub(crate) confinement: Value,
    pub(crate) page: Option<&'a str>,
    pub(crate) image: Option<Shown>,
}

/// Write the call's outcome record; a reply whose record could not be
/// written says so.
pub(crate) fn record_outcome(
    journal: &Journal,
    call: &Call<'_>,
    judged: &Judged<'_>,
    mut reply: Reply,
    ended: Ended<'_>,
) -> Reply {
    let executed = judged.executed;
    let mut done = call
        .record
        .event(audit::Phase::Outcome, Some(&judged.request.session));
    done.verdict = Some(Verdict::Allowed);
    done.confinement = Some(ended.confinement);
    done.outcome = Some(ended.outcome);
    match &executed.raw.termination {
        Termination::SpawnFailed(why) => {
            done.reason = Some(record::capped(why, record::MAX_RECORDED_REASON_BYTES).into_owned());
        }
        // What the server stopped with the command (the page's loading
        // included, or why not): what the session's next call meets.
        Termination::TimedOut | Termination::Cancelled => {
            let stopped = super::reply::stopped_early(&executed.raw);
            let why = match &executed.waited {
                Some(waited) => format!("{stopped}; before the command, {waited}"),
                None => stopped,
            };
            done.reason =
                Some(record::capped(&why, record::MAX_RECORDED_REASON_BYTES).into_owned());
        }
        // A call that had to wait before its command ran says why.
        _ => {
            done.reason = executed
                .waited
                .as_deref()
                .map(|why| record::capped(why, record::MAX_RECORDED_REASON_BYTES).into_owned());
        }
    }
    if let Termination::Withheld(Withhold::Refused(refusal)) = &executed.raw.termination {
        done.rule = Some(refusal.rule.id().to_owned());
        done.reason =
            Some(record::capped(&refusal.message, record::MAX_RECORDED_REASON_BYTES).into_owned());
    }
    if let Some(refusal) = ended.blocked {
        done.rule = Some(refusal.rule.id().to_owned());
        done.reason =
            Some(record::capped(&refusal.message, record::MAX_RECORDED_REASON_BYTES).into_owned());
    }
    done.exit_code = Some(reply.exit_code);
    done.duration_ms = Some(call.millis());
    done.stdout_bytes = Some(executed.raw.stdout_total);
    done.stderr_bytes = Some(executed.raw.stderr_total);
    // Digests, never contents: a reviewer holding a reply can prove it is
    // the one this call gave.
    done.reply_stdout_bytes = Some(reply.stdout.len() as u64);
    done.reply_stdout_sha256 = Some(audit::sha256_hex(reply.stdout.as_bytes()));
    // A form may have put a typed secret into the page's URL.
    done.page_url = ended
        .page
        .map(|page| call.rules.redactor.url(&call.rules.secrets.scrub(page)));
    if let Some(image) = ended.image {
        done.image_action = Some(image.action.to_owned());
        done.image_bytes = image.bytes;
        done.image_sha256 = image.sha256;
    }
    if let Err(e) = journal.append(done, call.span) {
        // The command already ran and its intent proves it was allowed; say
        // so loudly. The next call's intent write is the gate: while the log
        // stays broken, every call is refused.
        tracing::error!(error = %e, "audit outcome not written");
        reply.stderr = format!(
            "{}\n[browser-shell: the audit outcome of this call could not be written: {e}]",
            reply.stderr
        )
        .trim_start()
        .to_owned();
    }
    reply
}

/// The next call of a session in working order gets a child that is already
/// running; after a timeout or a cancellation it spawns its own. Last, so
/// the guard's own reads do not use it up.
pub(crate) fn prepare_next(
    runner: &Runner,
    request: &Validated,
    subcommand: Subcommand,
    executed: &Executed,
) {
    let closed = subcommand.facts().ends_session;
    if matches!(executed.raw.termination, Termination::Exited(_)) && !closed {
        runner.prepare_standby(&request.session);
    }
}
