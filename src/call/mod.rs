//! One tool call, start to finish, as a one-way pipeline whose stages hand
//! each other typed values, so the compiler keeps their order:
//!
//! arguments → [`request::validate`] (`Validated`) → [`plan::plan`]
//! (`Planned`: grammar, URL policy, output path) → [`admit::admit`]
//! (`Admitted`: the session's turn and a slot) → [`approve::approve`] (a
//! person's yes, where the policy's approval rules ask for one) →
//! [`intent::write`] (`Intent`,
//! which only becomes an [`audit::IntentSynced`] once durable) →
//! [`execute::execute`] (`Executed`: the runner takes the proof, not a
//! promise) → [`secret_cut::learn`] (what a short field kept of a secret)
//! → [`guard::judge`] (`GuardVerdict`) → [`reply::normalize`],
//! [`image::attach`] (a screenshot's PNG) and [`conclude`] (outcome record,
//! with digests of what the agent was shown) → reply; then, off the
//! reply's path, [`crate::evidence`] looks at the page the call left.
//!
//! Every branch ends in a [`Reply`] and at least one audit record: a refusal
//! is a single `denied` record ([`deny`]); an allowed call gets an `intent`
//! record, durable before its child gets the command, and an `outcome`
//! record after, written before the reply.

mod admit;
mod approve;
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
mod record;
pub(crate) mod reply;
pub(crate) mod request;
mod secret_cut;
mod span;
pub(crate) mod subcommand;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::{
    gate::SecretTyping,
    obs::journal::Journal,
    policy::{outputs::Outputs, resolve::Resolve, rules},
    refusal::{Refusal, Rule},
    runner::{Runner, Termination, Withhold},
    server::{admission::Admission, chronicle::Chronicle, pace::RefusalPace, sessions::Sessions},
    session_id::SessionId,
};
use context::{Call, CallContext};
use deny::{Replied, refuse};
pub(crate) use deny::{record_protocol_fault, refuse_unknown_tool};
use guard::Guard;
use laps::Laps;
use reply::Reply;
use span::Ending;
use subcommand::Subcommand;

/// The server's services a call's stages use. The pipeline below hands
/// each stage only the ones its signature names; none sees the others.
#[derive(Clone, Copy)]
pub(crate) struct Services<'a> {
    pub(crate) rules: &'a rules::Current,
    pub(crate) resolver: &'a dyn Resolve,
    pub(crate) journal: &'a Journal,
    pub(crate) refusal_pace: &'a RefusalPace,
    pub(crate) chronicle: &'a Chronicle,
    pub(crate) admission: &'a Admission,
    pub(crate) sessions: &'a Sessions,
    pub(crate) runner: &'a Runner,
    pub(crate) outputs: &'a Outputs,
    /// Where a secret's text may land while it is typed (the browser gate).
    pub(crate) typing: &'a SecretTyping,
    /// Sessions whose call only reads (the browser gate holds their
    /// commands on a tab while it navigates).
    pub(crate) reading: &'a crate::gate::Readers,
    /// The evidence of calls that can change the page.
    pub(crate) witnesses: &'a crate::evidence::Witnesses,
    /// Where approvals are asked for (`None`: nowhere).
    pub(crate) desk: Option<&'a crate::approvals::desk::Desk>,
    pub(crate) display: Option<&'a crate::approvals::display::Display>,
    pub(crate) retries: &'a crate::approvals::retry::Retries,
}

impl<'a> Services<'a> {
    fn guard(self) -> guard::GuardServices<'a> {
        guard::GuardServices {
            runner: self.runner,
            resolver: self.resolver,
            sessions: self.sessions,
            admission: self.admission,
        }
    }

    fn approving(self) -> approve::Approving<'a> {
        approve::Approving {
            journal: self.journal,
            runner: self.runner,
            witnesses: self.witnesses,
            desk: self.desk,
            display: self.display,
            retries: self.retries,
        }
    }
}

/// Handle a `tools/call` of `browser-shell` with these raw arguments.
pub(crate) async fn handle(
    services: Services<'_>,
    arguments: Option<&Map<String, Value>>,
    ctx: &CallContext,
) -> Reply {
    let hint = request::session_hint(arguments);
    let active = span::start(
        services.journal,
        ctx,
        crate::obs::telemetry::Called::Tool,
        hint.as_ref().map(SessionId::as_str),
    );
    services.chronicle.need_started().await;
    services.admission.count_call();
    let rules = services.rules.get();
    let call = Call::new(ctx, &active, Arc::clone(&rules));
    let (reply, ending) = run(services, arguments, &call, hint.as_ref()).await;
    span::finish(active, &reply, &ending);
    reply
}

async fn run(
    services: Services<'_>,
    arguments: Option<&Map<String, Value>>,
    call: &Call<'_>,
    hint: Option<&SessionId>,
) -> Replied {
    let (journal, pace) = (services.journal, services.refusal_pace);
    if services.admission.is_draining() {
        let refusal = Refusal::new(
            Rule::ShuttingDown,
            "the server is shutting down; call again later",
        );
        return refuse(journal, pace, call, hint, None, &refusal);
    }
    let request = match request::validate(arguments) {
        Ok(request) => request,
        Err(refusal) => return refuse(journal, pace, call, hint, None, &refusal),
    };
    let refused = |refusal| {
        refuse(
            journal,
            pace,
            call,
            Some(&request.session),
            Some(&request.argv),
            &refusal,
        )
    };
    let planned = plan::plan(services.resolver, services.outputs, &call.rules, &request).await;
    let planned = match planned {
        Ok(planned) => planned,
        Err(refusal) => return refused(refusal),
    };
    let reads_only = planned.subcommand.facts().reads_only;
    let admitted = admit::admit(
        (services.sessions, services.admission),
        (services.witnesses, services.reading),
        (&request, reads_only),
        &call.cancel,
    )
    .await;
    let turn = match admitted {
        Ok(turn) => turn,
        Err(refusal) => return refused(refusal),
    };
    // From here on the session is named by the daemon that runs it.
    let request = request::Validated {
        session: turn.session.clone(),
        ..request
    };
    // A person's yes, where the policy asks for one, before the intent.
    let approval = match approve::approve(services.approving(), call, &request, &planned).await {
        Ok(approve::Approved::Run(approval)) => approval,
        Ok(approve::Approved::Posed(question)) => {
            let subcommand = request.argv.first().cloned();
            let reply = Reply::asking(request.session.as_str(), question);
            return (reply, Ending::Asking { subcommand });
        }
        Err(refusal) => {
            let argv = Some(request.argv.as_slice());
            return refuse(journal, pace, call, Some(&request.session), argv, &refusal);
        }
    };
    run_admitted(services, call, request, planned, turn, approval).await
}

/// Whether `name` is a subcommand browser-shell knows (the policy's
/// approval rules may name only these).
pub(crate) fn subcommand_known(name: &str) -> bool {
    Subcommand::named(name).is_some()
}

/// An admitted call: intent, execution, guard and reply, outcome.
async fn run_admitted(
    services: Services<'_>,
    call: &Call<'_>,
    request: request::Validated,
    planned: plan::Planned,
    turn: admit::Admitted<'_>,
    approval: Option<Value>,
) -> Replied {
    let mut laps = Laps::start(call.started);
    // What the gate and the egress refuse while this call runs names it.
    let _in_flight = services
        .sessions
        .mark_in_flight(request.session.daemon_name(), call.record.mark());
    let runner = services.runner;
    let confinement = crate::obs::confinement::record(runner.confinement().report());
    let intent = intent::write(
        services.journal,
        runner,
        call,
        (&request, &planned),
        &turn,
        intent::Grounds {
            confinement: confinement.clone(),
            approval,
        },
    );
    laps.lap("intent");
    let subcommand = request.argv.first().cloned().unwrap_or_default();
    let intent = match intent {
        Ok(intent) => intent,
        Err(e) => return audit_unavailable(&request, subcommand, &e.to_string()),
    };
    let guard = Guard::for_command(
        planned.subcommand,
        &planned.tokens,
        call.rules.url.navigation_guard,
    );
    services.witnesses.begin(
        request.session.daemon_name(),
        planned.subcommand.facts().witness,
    );
    let how = (guard, turn.just_bound);
    let executed = execute::execute(services, call, &request, &planned, intent, how).await;
    laps.lap("agent_browser");
    if let Termination::Withheld(Withhold::Audit(why)) = &executed.raw.termination {
        return audit_unavailable(&request, subcommand, why);
    }
    let secrets = &call.rules.secrets;
    secret_cut::learn(runner, secrets, &request.session, &planned, &executed).await;
    conclude::update_session(services.sessions, &request, planned.subcommand, &executed).await;

    let ran = Ran {
        request: &request,
        planned: &planned,
        executed: &executed,
        guard,
    };
    let (reply, outcome) = answer(services, call, ran, confinement, &mut laps).await;
    laps.report(planned.subcommand.facts().name);
    after_reply(
        runner,
        &request,
        planned.subcommand,
        &executed,
        turn.just_bound,
    );
    witness(services, call, ran);
    (
        reply,
        Ending::Allowed {
            subcommand,
            outcome,
        },
    )
}

/// What an admitted call ran, as the steps after it read it.
#[derive(Clone, Copy)]
struct Ran<'a> {
    request: &'a request::Validated,
    planned: &'a plan::Planned,
    executed: &'a crate::runner::Executed,
    guard: Guard,
}

/// The reply to a call that ran: agent-browser's output normalised, the
/// guard's verdict enforced on it, a screenshot attached, and the outcome
/// recorded.
async fn answer(
    services: Services<'_>,
    call: &Call<'_>,
    ran: Ran<'_>,
    confinement: Value,
    laps: &mut Laps,
) -> (Reply, audit::Outcome) {
    let reply = normalized(services.outputs, call, ran);
    let verdict = guard::judge(
        services.guard(),
        &call.rules,
        &ran.request.session,
        ran.guard,
        ran.executed,
        reply.exit_code == 0,
    )
    .await;
    let judged = conclude::Judged {
        request: ran.request,
        planned: ran.planned,
        executed: ran.executed,
        verdict: &verdict,
    };
    let (mut reply, blocked) = enforced(services, call, &judged, reply).await;
    laps.lap("guard");
    let image = image::attach(services.outputs, ran.planned, &mut reply).await;
    laps.lap("image");
    let outcome = conclude::outcome_of(ran.executed, &reply, &verdict);
    let ended = conclude::Ended {
        outcome,
        blocked: blocked.as_ref(),
        confinement,
        page: verdict.page(),
        image,
    };
    let reply = conclude::record_outcome(services.journal, call, &judged, reply, ended);
    laps.lap("outcome");
    (reply, outcome)
}

/// agent-browser's output as the reply's: bounded, the guard's read taken
/// out, page text marked when the policy asks for content boundaries.
fn normalized(outputs: &Outputs, call: &Call<'_>, ran: Ran<'_>) -> Reply {
    let Ran {
        request,
        planned,
        executed,
        guard,
    } = ran;
    let marked = call
        .rules
        .url
        .content_boundaries
        .then_some((planned.subcommand, planned.tokens.as_slice()));
    reply::normalize_marked(
        request.session.as_str(),
        &executed.raw,
        outputs.max_reply_bytes,
        guard,
        marked,
        &call.rules.secrets,
    )
}

/// The guard's verdict enforced on the reply (a page it blocked replaces
/// it), and the secrets scrubbed from both.
async fn enforced(
    services: Services<'_>,
    call: &Call<'_>,
    judged: &conclude::Judged<'_>,
    reply: Reply,
) -> (Reply, Option<Refusal>) {
    let (reply, blocked) =
        conclude::enforce(services.guard(), services.outputs, call, judged, reply).await;
    // No reply carries a secret's value back: the page data was scrubbed
    // when normalised; a refusal that replaced it may quote the page's URL.
    let reply = reply.scrubbed(&call.rules.secrets);
    let blocked = blocked.map(|r| Refusal::new(r.rule, call.rules.secrets.scrub(&r.message)));
    (reply, blocked)
}

/// What follows the reply: the session's next child is readied, and its
/// tab comes forward if the call should have brought it but could not.
fn after_reply(
    runner: &Runner,
    request: &request::Validated,
    subcommand: Subcommand,
    executed: &crate::runner::Executed,
    just_bound: bool,
) {
    conclude::prepare_next(runner, request, subcommand, executed);
    let facts = subcommand.facts();
    if (just_bound || facts.comes_forward) && !facts.ends_session {
        runner.foreground_after_reply(&request.session);
    }
}

/// Hand the call to the evidence service with the session's turn, which
/// it holds until it has looked at the page the call left.
fn witness(services: Services<'_>, call: &Call<'_>, ran: Ran<'_>) {
    let witnesses = services.witnesses;
    if witnesses.level() == crate::evidence::Level::Off {
        return;
    }
    let subcommand = ran.planned.subcommand;
    let facts = subcommand.facts();
    let raw = &ran.executed.raw;
    let acted = crate::evidence::Acted {
        daemon: ran.request.session.daemon_name().clone(),
        name: facts.name,
        witness: facts.witness,
        names_refs: subcommand == Subcommand::Snapshot,
        ended_session: facts.ends_session,
        element: (facts.witness == crate::evidence::Witness::Element).then(|| {
            let target = ran.planned.tokens.get(1).map_or("", String::as_str);
            let daemon = ran.request.session.daemon_name();
            witnesses.named(daemon, target, &call.rules.secrets).1
        }),
        stdout: if subcommand == Subcommand::Snapshot {
            raw.stdout.clone()
        } else {
            Vec::new()
        },
        ran: !matches!(
            raw.termination,
            Termination::Withheld(_) | Termination::SpawnFailed(_)
        ),
        record: call
            .record
            .event(audit::Phase::Evidence, Some(&ran.request.session)),
        rules: Arc::clone(&call.rules),
    };
    witnesses.after(services.journal, services.runner, acted);
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
