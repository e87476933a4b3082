//! The approval stage, between a call's admission and its intent: a call
//! the policy's `approvals` rules match runs only after a person says yes
//! to exactly what was shown (docs/design.md, "Approvals").
//!
//! A subcommand no rule names costs nothing here. Otherwise the session's
//! page is looked at (its URL and title, through the warden) and the
//! element named as the last snapshot named it; if a rule matches, an
//! `approval.requested` record is synced, the request goes to a channel
//! (`crate::approvals`) and the call waits, holding its session's turn,
//! up to the policy's `wait_sec` (not `timeout_sec`, which bounds the
//! command once it may run). A yes is bound to what was shown: the page
//! and element are looked at again, and if either changed the person is
//! asked again. A no, or no answer, refuses the call (exit 126) and nothing
//! runs. Each answer is a record before the intent, which names the
//! approval it rests on.

use serde_json::{Value, json};

use super::{context::Call, plan::Planned, record::redact_argv, request::Validated};
use crate::{
    approvals::{Answer, Ask, desk::Desk},
    evidence::{Witness, Witnesses},
    obs::journal::Journal,
    policy::approvals::{Channel, Element, Facts},
    refusal::{Refusal, Rule},
    runner::Runner,
};

/// How often a call is asked about again when its page keeps changing
/// under the question.
const MAX_ASKS: usize = 3;

/// What the stage borrows.
#[derive(Clone, Copy)]
pub(crate) struct Approving<'a> {
    pub(crate) journal: &'a Journal,
    pub(crate) runner: &'a Runner,
    pub(crate) witnesses: &'a Witnesses,
    /// The operator's desk; `None` when no channel can reach a person.
    pub(crate) desk: Option<&'a Desk>,
}

/// What a yes covers, unredacted, and nothing else: the page's URL, the
/// element's role and name, and where the elements so named are.
#[derive(Debug, PartialEq)]
struct Binding {
    url: Option<String>,
    element: Option<(String, String)>,
    places: Vec<[i64; 4]>,
}

/// What a person is shown, and what a yes is bound to.
struct Shown {
    /// The request as shown (URLs redacted, page text scrubbed).
    content: Value,
    binding: Binding,
    rule: Option<String>,
}

/// Decide whether `request` may run: `None` when no rule needs a yes, the
/// approval the intent names when a person gave one, or the refusal.
pub(crate) async fn approve(
    with: Approving<'_>,
    call: &Call<'_>,
    request: &Validated,
    planned: &Planned,
) -> Result<Option<Value>, Refusal> {
    let facts = planned.subcommand.facts();
    if !call
        .rules
        .url
        .approvals
        .may_need(facts.name, facts.witness != Witness::Nothing)
    {
        return Ok(None);
    }
    let asked = Asked {
        with,
        call,
        request,
        planned,
    };
    let mut shown = look(with, call, (request, planned), true).await;
    for _ in 0..MAX_ASKS {
        let Some(rule) = shown.rule.clone() else {
            // What it acts on (now) needs no yes.
            return Ok(None);
        };
        let via = via(with, call);
        let (id, sha) = requested(with, call, request, (&rule, via.as_ref()), &shown)?;
        match asked.answer(via, (&id, &sha), &rule, &shown).await? {
            Settled::Granted(grant) => return Ok(Some(grant)),
            // Asked about again, as the page is now (its image too).
            Settled::Changed => shown = look(with, call, (request, planned), true).await,
        }
    }
    Err(Refusal::new(
        Rule::ApprovalDenied,
        format!(
            "the page kept changing while a person was asked about it ({MAX_ASKS} times); nothing ran"
        ),
    ))
}

/// How a request reaches a person.
enum Via<'a> {
    /// The person at the MCP client (elicitation).
    Client(&'a dyn Ask),
    /// The operator's desk.
    Desk(&'a Desk),
}

impl Via<'_> {
    fn name(&self) -> &'static str {
        match self {
            Self::Client(_) => "elicitation",
            Self::Desk(_) => "operator",
        }
    }
}

/// The first of the policy's channels that can reach a person for this call.
fn via<'a>(with: Approving<'a>, call: &'a Call<'_>) -> Option<Via<'a>> {
    let channels = &call.rules.url.approvals.channels;
    channels.iter().find_map(|channel| match channel {
        Channel::Elicitation => call.asker.as_deref().map(Via::Client),
        Channel::Operator => with.desk.map(Via::Desk),
    })
}

/// What the person at the client reads: what will happen, and the digest
/// a yes covers.
fn message(id: &str, sha: &str, rule: &str, shown: &Shown) -> String {
    let said = audit::report::describe_shown(&shown.content);
    let element = said
        .element
        .map(|e| format!("\nElement: {e}"))
        .unwrap_or_default();
    let session = shown.content["session_id"].as_str().unwrap_or_default();
    format!(
        "browser-shell asks for your approval before an AI agent acts (rule \"{rule}\").\n\
         Session: {session}\nCommand: {}{element}\nPage: {} ({})\n\
         Approve only if you are a person who wants this to happen. Request {id}, shown {}.",
        said.command,
        said.title,
        said.url,
        &sha[..sha.len().min(16)],
    )
}

/// One call being asked about.
struct Asked<'a, 'c> {
    with: Approving<'a>,
    call: &'a Call<'c>,
    request: &'a Validated,
    planned: &'a Planned,
}

/// How a yes ended.
enum Settled {
    /// It holds: the grant the intent names.
    Granted(Value),
    /// The page or the element changed since it was shown.
    Changed,
}

impl Asked<'_, '_> {
    /// Wait for the answer to request `id` (`sha`: what was shown) and
    /// record it; a no, no answer or no channel is the call's refusal.
    async fn answer(
        &self,
        via: Option<Via<'_>>,
        (id, sha): (&str, &str),
        rule: &str,
        shown: &Shown,
    ) -> Result<Settled, Refusal> {
        let Self {
            with,
            call,
            request,
            planned,
        } = *self;
        let record = |outcome, approval| answered(with, call, request, id, outcome, approval);
        let wait = call.rules.url.approvals.wait;
        let answer = match via {
            Some(Via::Desk(desk)) => desk.answer(id, sha, wait, &call.cancel).await,
            Some(Via::Client(asker)) => tokio::select! {
                answer = asker.ask(message(id, sha, rule, shown), wait) => answer,
                () = call.cancel.cancelled() => Answer::Cancelled,
            },
            None => {
                let why = "no channel can ask a person: the client cannot elicit (or the policy's \
                           approvals.channels leaves it out) and the operator's desk is left out or \
                           unavailable (the audit log in the confined agent-browser's reach)";
                record(audit::Outcome::Declined, json!({"why": why}));
                return Err(Refusal::new(
                    Rule::ApprovalDenied,
                    format!("approval {id} (rule {rule:?}) was not given: {why}"),
                ));
            }
        };
        match answer {
            Answer::Yes { by } => {
                let again = look(with, call, (request, planned), false).await;
                if again.binding == shown.binding {
                    let grant = json!({"id": id, "rule": rule, "shown_sha256": sha, "by": by});
                    record(audit::Outcome::Granted, grant.clone());
                    return Ok(Settled::Granted(grant));
                }
                let why = "the page or the element changed after it was shown: asked again";
                record(audit::Outcome::Declined, json!({"by": by, "why": why}));
                Ok(Settled::Changed)
            }
            Answer::No { by, why } => {
                record(audit::Outcome::Declined, json!({"by": by, "why": why}));
                Err(Refusal::new(
                    Rule::ApprovalDenied,
                    format!("approval {id} (rule {rule:?}) was denied: {why}; nothing ran"),
                ))
            }
            Answer::None => {
                record(
                    audit::Outcome::Expired,
                    json!({"waited_sec": wait.as_secs()}),
                );
                Err(Refusal::new(
                    Rule::ApprovalExpired,
                    format!(
                        "approval {id} (rule {rule:?}) got no answer within {} s; nothing ran",
                        wait.as_secs()
                    ),
                ))
            }
            Answer::Cancelled => {
                record(audit::Outcome::Cancelled, json!({}));
                Err(Refusal::new(
                    Rule::Cancelled,
                    "cancelled while waiting for a person's approval",
                ))
            }
        }
    }
}

/// The session's page and the element, and the rule the call matches;
/// when `pictured` and a rule matches, an image of the page too (at
/// `--evidence images`).
async fn look(
    with: Approving<'_>,
    call: &Call<'_>,
    (request, planned): (&Validated, &Planned),
    pictured: bool,
) -> Shown {
    let facts = planned.subcommand.facts();
    let rules = &call.rules;
    let daemon = request.session.daemon_name();
    let acts_on_element = facts.witness == Witness::Element;
    let target = planned.tokens.get(1).map_or("", String::as_str);
    let (named, element_json) = if acts_on_element {
        let (named, json) = with.witnesses.named(daemon, target, &rules.secrets);
        (named, Some(json))
    } else {
        (None, None)
    };
    let named_now = named
        .as_ref()
        .map(|(role, name)| (role.as_str(), name.as_str()));
    let (tab, page) = with.runner.look(daemon, named_now).await.ok().unzip();
    let open_url = (facts.name == "open").then_some(target);
    let decided = Facts {
        subcommand: facts.name,
        changes_page: facts.witness != Witness::Nothing,
        acts_on_element,
        element: named.as_ref().map(|(role, name)| Element { role, name }),
        page_url: page.as_ref().map(|p| p.url.as_str()),
        open_url,
        typed_secrets: &planned.secrets,
    };
    let rule = rules.url.approvals.needed(&decided).map(|r| r.name.clone());
    let mut content = json!({
        "session_id": request.session.as_str(),
        "subcommand": facts.name,
        "argv": redact_argv(&rules.redactor, &request.argv),
        "page": match &page {
            Some(p) => json!({
                "url": rules.redactor.url(&rules.secrets.scrub(&p.url)),
                "title": rules.secrets.scrub(&p.title),
            }),
            None => json!({"unseen": "the page could not be read"}),
        },
    });
    let places = page.as_ref().map(|p| p.places.clone()).unwrap_or_default();
    if let Some(mut element) = element_json {
        if named.is_some() {
            element["places"] = json!(places);
        }
        content["element"] = element;
    }
    if let (true, Some(_), Some(tab)) = (pictured, &rule, &tab) {
        let image = with
            .witnesses
            .picture(with.journal, with.runner, (daemon, tab), &rules.secrets)
            .await;
        if let Some((key, image)) = image {
            content[key] = image;
        }
    }
    Shown {
        content,
        binding: Binding {
            url: page.map(|p| p.url),
            element: named,
            places,
        },
        rule,
    }
}

/// Record the request (synced: it is durable before anyone sees it) and
/// post it; its id and the digest of what was shown.
fn requested(
    with: Approving<'_>,
    call: &Call<'_>,
    request: &Validated,
    (rule, via): (&str, Option<&Via<'_>>),
    shown: &Shown,
) -> Result<(String, String), Refusal> {
    let id = crate::obs::journal::new_call_id();
    let sha = audit::sha256_hex(audit::canonical_json(&shown.content).as_bytes());
    let wait = call.rules.url.approvals.wait.as_secs();
    let approval = json!({
        "id": id, "rule": rule, "channel": via.map_or("none", Via::name), "shown": shown.content,
        "shown_sha256": sha, "wait_sec": wait,
    });
    let mut event = call
        .record
        .event(audit::Phase::Approval, Some(&request.session));
    event.outcome = Some(audit::Outcome::Requested);
    event.approval = Some(approval.clone());
    with.journal.append_unattached_synced(event).map_err(|e| {
        Refusal::new(
            Rule::ApprovalDenied,
            format!("audit unavailable ({e}): no approval was asked for; nothing ran"),
        )
    })?;
    if let Some(Via::Desk(desk)) = via {
        let mut posted = approval;
        posted["server_pid"] = json!(std::process::id());
        if let Err(e) = desk.post(&id, &posted) {
            let why = format!("the request could not be put on the operator's desk: {e}");
            answered(
                with,
                call,
                request,
                &id,
                audit::Outcome::Declined,
                json!({"why": why}),
            );
            return Err(Refusal::new(
                Rule::ApprovalDenied,
                format!("approval {id} was not asked for: {why}; nothing ran"),
            ));
        }
    }
    Ok((id, sha))
}

/// Record how request `id` ended.
fn answered(
    with: Approving<'_>,
    call: &Call<'_>,
    request: &Validated,
    id: &str,
    outcome: audit::Outcome,
    mut approval: Value,
) {
    approval["id"] = json!(id);
    let mut event = call
        .record
        .event(audit::Phase::Approval, Some(&request.session));
    event.outcome = Some(outcome);
    event.approval = Some(approval);
    if let Err(e) = with.journal.append(event, call.span) {
        tracing::error!(error = %e, "audit record of an approval's answer not written");
    }
}
