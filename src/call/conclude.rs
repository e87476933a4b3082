//! After the command: the session's bookkeeping, a refused page taken away,
//! the outcome record (written before the reply, synced within 100 ms), and
//! the session's next standby.

use audit::{Outcome, Verdict};
use serde_json::Value;

use super::{
    context::Call,
    guard::{self, GuardVerdict},
    image::Shown,
    plan::Planned,
    record,
    reply::Reply,
    request::Validated,
    subcommand::Subcommand,
};
use crate::{
    policy::outputs,
    refusal::{Refusal, Rule},
    runner::{Executed, Termination, Withhold},
    server::Server,
};

/// The session's registry entry after its command: a successful `close`
/// ends the session; anything else counts as use.
///
/// A closed session ends whole: its daemon is stopped and its browser
/// context, with every tab, popup, worker and cookie of it, is disposed of.
/// A session of the same name may follow at once, so that is done before
/// the session's turn is given back; a pooled daemon's name is its own, and
/// its end runs off the reply's path.
pub(crate) async fn update_session(server: &Server, request: &Validated, executed: &Executed) {
    let name = request.session.daemon_name();
    let closed =
        ends_session(request) && matches!(executed.raw.termination, Termination::Exited(0));
    if !closed {
        server.sessions.touch(name);
        return;
    }
    let gone = server.sessions.forget(name);
    server.runner.discard_standby(name);
    let pooled = gone.is_some_and(|known| known.pooled);
    let (gate, daemon) = (server.gate.clone(), name.to_owned());
    // The daemon first, so that it opens nothing in the context meanwhile.
    let end = end_daemon_task(server, request, pooled);
    let ended = async move {
        end.await;
        if let Err(e) = gate.end_session(&daemon).await {
            tracing::warn!(error = %e, "a closed session's browser context was not disposed of");
        }
    };
    if pooled {
        tokio::spawn(ended);
    } else {
        ended.await;
    }
}

/// Stop a closed session's daemon and remove its files. A pooled daemon
/// is the session's alone, and no later session takes it up: its end is
/// recorded now.
fn end_daemon_task(
    server: &Server,
    request: &Validated,
    pooled: bool,
) -> impl Future<Output = ()> + Send + 'static {
    let session = &request.session;
    if pooled {
        server.record_lifecycle(
            session.as_str(),
            Outcome::Closed,
            format!(
                "the session closed; its pooled daemon {} and tab are closed",
                session.daemon_name()
            ),
        );
    }
    let (runner, name, dir) = (
        server.runner.clone(),
        session.daemon_name().to_owned(),
        server.output_dir.clone(),
    );
    async move {
        let problems = runner.retire(&name, None, &dir).await;
        if !problems.is_empty() {
            tracing::warn!(daemon = %name, problems = %problems.join("; "), "a closed session left something behind");
        }
    }
}

/// Act on the guard's verdict: replace the reply of a command that left the
/// page somewhere refused (returning the refusal for the outcome record).
pub(crate) async fn enforce(
    server: &Server,
    call: &Call<'_>,
    request: &Validated,
    planned: &Planned,
    executed: &Executed,
    verdict: &GuardVerdict,
    reply: Reply,
) -> (Reply, Option<Refusal>) {
    match verdict {
        GuardVerdict::Blocked { page, why } => {
            let redactor = &call.rules.redactor;
            let refusal = block(server, redactor, request, planned, executed, page, why).await;
            let session = request.session.as_str();
            // 126 says nothing ran; after a command that did, that would be false.
            let reply = if matches!(executed.raw.termination, Termination::Withheld(_)) {
                Reply::refused(session, &refusal)
            } else {
                Reply::withheld(session, &refusal)
            };
            (reply, Some(refusal))
        }
        GuardVerdict::Unchecked | GuardVerdict::Passed { .. } => (reply, None),
    }
}

/// A page the guard refused: take it away, delete a screenshot this call
/// wrote of it, and say so in the refusal that replaces the reply.
async fn block(
    server: &Server,
    redactor: &audit::Redactor,
    request: &Validated,
    planned: &Planned,
    executed: &Executed,
    page: &str,
    why: &str,
) -> Refusal {
    let reset = guard::take_away(server, request, executed.intent.as_ref()).await;
    // Only a screenshot this call wrote: a withheld command wrote nothing.
    let wrote = !matches!(executed.raw.termination, Termination::Withheld(_));
    let removed = match &planned.output {
        Some(target) if wrote && outputs::remove(&server.output_dir, target) => {
            "; the screenshot was deleted"
        }
        _ => "",
    };
    Refusal::new(
        Rule::NavigationBlocked,
        format!(
            "the page navigated to {}: {why}; {reset}{removed}",
            redactor.url(page)
        ),
    )
}

/// How the call ended, as the audit log and the span name it.
pub(crate) fn outcome_of(executed: &Executed, reply: &Reply, verdict: &GuardVerdict) -> Outcome {
    if matches!(verdict, GuardVerdict::Blocked { .. }) {
        return Outcome::NavigationBlocked;
    }
    match &executed.raw.termination {
        Termination::Exited(0) if reply.exit_code == 0 => Outcome::Ok,
        Termination::Exited(_) | Termination::Signaled(_) => Outcome::Error,
        Termination::TimedOut => Outcome::Timeout,
        Termination::Cancelled => Outcome::Cancelled,
        Termination::SpawnFailed(_) => Outcome::SpawnFailed,
        Termination::Withheld(Withhold::Audit(_)) => Outcome::AuditUnavailable,
        Termination::Withheld(Withhold::Blocked { .. }) => Outcome::NavigationBlocked,
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
        Outcome::Refused => Some("policy_denied"),
        // Lifecycle outcomes never end a call.
        _ => Some("internal"),
    }
}

/// What the agent was shown, for the outcome record: the page the command
/// ended on (as the guard read it) and what became of a screenshot.
pub(crate) struct Evidence<'a> {
    pub(crate) page: Option<&'a str>,
    pub(crate) image: Option<Shown>,
}

/// Write the call's outcome record; a reply whose record could not be
/// written says so.
pub(crate) fn record_outcome(
    server: &Server,
    call: &Call<'_>,
    request: &Validated,
    executed: &Executed,
    mut reply: Reply,
    (outcome, blocked, confinement): (Outcome, Option<&Refusal>, Value),
    evidence: Evidence<'_>,
) -> Reply {
    let mut done = call
        .record
        .event(audit::Phase::Outcome, Some(&request.session));
    done.verdict = Some(Verdict::Allowed);
    done.confinement = Some(confinement);
    done.outcome = Some(outcome);
    if let Termination::SpawnFailed(why) = &executed.raw.termination {
        done.reason = Some(record::capped(why, record::MAX_RECORDED_REASON_BYTES).into_owned());
    }
    if let Termination::Withheld(Withhold::Refused(refusal)) = &executed.raw.termination {
        done.rule = Some(refusal.rule.id().to_owned());
        done.reason =
            Some(record::capped(&refusal.message, record::MAX_RECORDED_REASON_BYTES).into_owned());
    }
    if let Some(refusal) = blocked {
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
    done.page_url = evidence
        .page
        .map(|page| call.rules.redactor.url(&call.rules.secrets.scrub(page)));
    if let Some(image) = evidence.image {
        done.image_action = Some(image.action.to_owned());
        done.image_bytes = image.bytes;
        done.image_sha256 = image.sha256;
    }
    if let Err(e) = server.journal.append(done, call.span) {
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
pub(crate) fn prepare_next(server: &Server, request: &Validated, executed: &Executed) {
    let closed = ends_session(request);
    if matches!(executed.raw.termination, Termination::Exited(_)) && !closed {
        server.runner.prepare_standby(&request.session);
    }
}

/// Does the request's subcommand end its session (`close`)?
pub(crate) fn ends_session(request: &Validated) -> bool {
    Subcommand::facts_of(&request.argv).is_some_and(|f| f.ends_session)
}
