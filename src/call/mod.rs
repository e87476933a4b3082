//! One tool call, start to finish, as a one-way pipeline whose stages hand
//! each other typed values, so the compiler keeps their order:
//!
//! arguments → [`request::validate`] (`Validated`) → [`plan::plan`]
//! (`Planned`: grammar, URL policy, output path) → [`admit::admit`]
//! (`Admitted`: the session's turn and a slot) → [`intent::write`] (`Intent`,
//! which only becomes an [`audit::IntentSynced`] once durable) →
//! [`execute::execute`] (`Executed`: the runner takes the proof, not a
//! promise) → [`guard::judge`] (`GuardVerdict`) → [`reply::normalize`],
//! [`image::attach`] (a screenshot's PNG) and [`conclude`] (outcome record,
//! with digests of what the agent was shown) → reply.
//!
//! Every branch ends in a [`Reply`] and at least one audit record: a refusal
//! is a single `denied` record ([`deny`]); an allowed call gets an `intent`
//! record, durable before its child gets the command, and an `outcome`
//! record after, written before the reply.

mod admit;
mod boundary;
mod conclude;
pub(crate) mod context;
mod deny;
mod execute;
pub(crate) mod grammar;
mod guard;
pub(crate) mod image;
mod intent;
mod laps;
mod plan;
mod png_scale;
mod record;
pub(crate) mod reply;
pub(crate) mod request;
mod span;
pub(crate) mod subcommand;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::{
    refusal::{Refusal, Rule},
    runner::{Termination, Withhold},
    server::Server,
    session_id::SessionId,
};
use context::{Call, CallContext};
use deny::{Replied, refuse};
pub(crate) use deny::{record_protocol_fault, refuse_unknown_tool};
use guard::Guard;
use laps::Laps;
use reply::Reply;
use span::Ending;

/// Handle a `tools/call` of `browser-shell` with these raw arguments.
pub(crate) async fn handle(
    server: &Server,
    arguments: Option<&Map<String, Value>>,
    ctx: &CallContext,
) -> Reply {
    let hint = request::session_hint(arguments);
    let active = span::start(
        server,
        ctx,
        crate::obs::telemetry::Called::Tool,
        hint.as_ref().map(SessionId::as_str),
    );
    server.need_started().await;
    server
        .calls_served
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let rules = server.rules.get();
    let call = Call::new(ctx, &active, Arc::clone(&rules));
    let (reply, ending) = run(server, arguments, &call, hint.as_ref()).await;
    span::finish(&rules.redactor, &server.journal, active, &reply, &ending);
    reply
}

async fn run(
    server: &Server,
    arguments: Option<&Map<String, Value>>,
    call: &Call<'_>,
    hint: Option<&SessionId>,
) -> Replied {
    if server.is_draining() {
        let refusal = Refusal::new(
            Rule::ShuttingDown,
            "the server is shutting down; call again later",
        );
        return refuse(server, call, hint, None, &refusal);
    }
    let request = match request::validate(arguments) {
        Ok(request) => request,
        Err(refusal) => return refuse(server, call, hint, None, &refusal),
    };
    let refused = |refusal| {
        refuse(
            server,
            call,
            Some(&request.session),
            Some(&request.argv),
            &refusal,
        )
    };
    let planned = match plan::plan(server, &call.rules, &request).await {
        Ok(planned) => planned,
        Err(refusal) => return refused(refusal),
    };
    let turn = match admit::admit(server, &request, &call.cancel).await {
        Ok(turn) => turn,
        Err(refusal) => return refused(refusal),
    };
    // From here on the session is named by the daemon that runs it.
    let request = request::Validated {
        session: turn.session.clone(),
        ..request
    };
    run_admitted(server, call, request, planned, turn).await
}

/// An admitted call: intent, execution, guard and reply, outcome.
async fn run_admitted(
    server: &Server,
    call: &Call<'_>,
    request: request::Validated,
    planned: plan::Planned,
    turn: admit::Admitted<'_>,
) -> Replied {
    let mut laps = Laps::start(call.started);
    let confinement = crate::obs::confinement::record(server.runner.confinement().report());
    let intent = intent::write(server, call, &request, &planned, &turn, confinement.clone());
    laps.lap("intent");
    let subcommand = request.argv.first().cloned().unwrap_or_default();
    let intent = match intent {
        Ok(intent) => intent,
        Err(e) => return audit_unavailable(&request, subcommand, &e.to_string()),
    };
    let guard = Guard::for_command(&planned.tokens, call.rules.url.navigation_guard);
    let executed = execute::execute(server, call, &request, &planned, intent, guard).await;
    laps.lap("agent_browser");
    if let Termination::Withheld(Withhold::Audit(why)) = &executed.raw.termination {
        return audit_unavailable(&request, subcommand, why);
    }
    conclude::update_session(server, &request, &executed).await;

    let marked = call
        .rules
        .url
        .content_boundaries
        .then_some(planned.tokens.as_slice());
    let reply = reply::normalize_marked(
        request.session.as_str(),
        &executed.raw,
        server.max_output_bytes,
        guard,
        marked,
        &call.rules.secrets,
    );
    let verdict = guard::judge(
        server,
        &call.rules,
        &request.session,
        guard,
        &executed,
        reply.exit_code == 0,
    )
    .await;
    let (reply, blocked) =
        conclude::enforce(server, call, &request, &planned, &executed, &verdict, reply).await;
    // No reply carries a secret's value back: the page data was scrubbed
    // when normalised; a refusal that replaced it may quote the page's URL.
    let mut reply = reply.scrubbed(&call.rules.secrets);
    let blocked = blocked.map(|r| Refusal::new(r.rule, call.rules.secrets.scrub(&r.message)));
    laps.lap("guard");
    let image = image::attach(server, &planned, &mut reply).await;
    laps.lap("image");
    let outcome = conclude::outcome_of(&executed, &reply, &verdict);
    let outcome_record = (outcome, blocked.as_ref(), confinement);
    let evidence = conclude::Evidence {
        page: verdict.page(),
        image,
    };
    let reply = conclude::record_outcome(
        server,
        call,
        &request,
        &executed,
        reply,
        outcome_record,
        evidence,
    );
    laps.lap("outcome");
    laps.report();
    after_reply(server, &request, &executed, turn.just_bound);
    let error_type = conclude::error_type(outcome);
    (
        reply,
        Ending::Allowed {
            subcommand,
            error_type,
        },
    )
}

/// What follows the reply: the session's next child is readied, and its
/// tab comes forward when a person watching should see it.
fn after_reply(
    server: &Server,
    request: &request::Validated,
    executed: &crate::runner::Executed,
    just_bound: bool,
) {
    conclude::prepare_next(server, request, executed);
    let forward = subcommand::Subcommand::facts_of(&request.argv).is_some_and(|f| f.comes_forward);
    if (just_bound || forward) && !conclude::ends_session(request) {
        server.runner.foreground_after_reply(&request.session);
    }
}

/// The intent could not be made durable: nothing ran.
fn audit_unavailable(request: &request::Validated, subcommand: String, why: &str) -> Replied {
    tracing::error!(error = %why, "audit intent not durable; the command was not run");
    let reply = Reply::internal(
        request.session.as_str(),
        &format!("audit unavailable, nothing was run: {why}"),
    );
    (
        reply,
        Ending::AuditUnavailable {
            subcommand: Some(subcommand),
        },
    )
}
