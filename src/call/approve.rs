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
//! approval it rests on. A 2026-07-28 client is asked by the call's result
//! instead (`input_required`): the call ends, releasing its turn, and its
//! retry brings the answer; what was shown is bound the same way.

use serde_json::{Value, json};

use super::{context::Call, plan::Planned, record::redact_argv, request::Validated};
use crate::{
    approvals::{
        Answer, Ask, Binding,
        desk::Desk,
        display::Display,
        retry::{Echo, Question, Retries, Stale, Unanswered, Waiting},
    },
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
    /// The operator's desk; `None` when the log is in the child's reach.
    pub(crate) desk: Option<&'a Desk>,
    /// The display dialogs are drawn on, if one was given.
    pub(crate) display: Option<&'a Display>,
    /// Requests waiting for a 2026-07-28 client's retry.
    pub(crate) retries: &'a Retries,
}

/// What a person is shown, and what a yes is bound to.
struct Shown {
    /// The request as shown (URLs redacted, page text scrubbed).
    content: Value,
    binding: Binding,
    rule: Option<String>,
}

/// How the stage lets a call go on.
pub(crate) enum Approved {
    /// It may run, with the approval its intent names when one was needed.
    Run(Option<Value>),
    /// It ends with a question for the client (`input_required`); the
    /// client's retry of the same call brings the answer.
    Posed(Question),
}

/// Decide whether `request` may run: at once when no rule needs a yes,
/// with the approval a person gave, after a question to the client, or
/// refused.
pub(crate) async fn approve(
    with: Approving<'_>,
    call: &Call<'_>,
    request: &Validated,
    planned: &Planned,
) -> Result<Approved, Refusal> {
    let asked = Asked {
        with,
        call,
        request,
        planned,
    };
    if let Some(echo) = call.retry.as_ref().and_then(|r| r.echo.as_ref()) {
        return asked.resume(echo).await;
    }
    let facts = planned.subcommand.facts();
    if !call
        .rules
        .url
        .approvals
        .may_need(facts.name, facts.witness != Witness::Nothing)
    {
        return Ok(Approved::Run(None));
    }
    let shown = look(with, call, (request, planned), true).await;
    asked.ask(shown, 0).await
}

/// How a request reaches a person.
enum Via<'a> {
    /// Asked while the call waits for the answer.
    Live(Live<'a>),
    /// The person at a 2026-07-28 client, asked by the call's result (the
    /// call ends; its retry brings the answer).
    Retry,
}

/// A channel the call waits on for its answer.
enum Live<'a> {
    /// The person at the MCP client, asked mid-call (elicitation).
    Client(&'a dyn Ask),
    /// A dialog on the browser's display.
    Display(&'a Display),
    /// The operator's desk.
    Desk(&'a Desk),
}

impl Via<'_> {
    fn name(&self) -> &'static str {
        match self {
            Self::Live(Live::Client(_)) => "elicitation",
            Self::Retry => "input_required",
            Self::Live(Live::Display(_)) => "display",
            Self::Live(Live::Desk(_)) => "operator",
        }
    }
}

/// The first of the policy's channels that can reach a person for this
/// call; the client's, on either revision's way of asking, is one channel.
fn via<'a>(with: Approving<'a>, call: &'a Call<'_>) -> Option<Via<'a>> {
    let channels = &call.rules.url.approvals.channels;
    channels.iter().find_map(|channel| match channel {
        Channel::Elicitation => (call.asker.as_deref().map(|a| Via::Live(Live::Client(a))))
            .or_else(|| call.retry.as_ref().map(|_| Via::Retry)),
        Channel::Display => with.display.map(|d| Via::Live(Live::Display(d))),
        Channel::Operator => with.desk.map(|d| Via::Live(Live::Desk(d))),
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

/// The call as a retry must repeat it: its session, arguments and
/// timeout. A question's state is bound to these bytes.
fn call_bytes(request: &Validated) -> Vec<u8> {
    let call = json!({
        "session_id": request.session.as_str(),
        "argv": request.argv,
        "timeout_ms": u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX),
    });
    audit::canonical_json(&call).into_bytes()
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
    /// Ask about `shown` (this call was asked `asks` times before), again
    /// while the page keeps changing under the question.
    async fn ask(&self, mut shown: Shown, asks: usize) -> Result<Approved, Refusal> {
        let Self {
            with,
            call,
            request,
            planned,
        } = *self;
        for asks in asks..MAX_ASKS {
            let Some(rule) = shown.rule.clone() else {
                // What it acts on (now) needs no yes.
                return Ok(Approved::Run(None));
            };
            let via = via(with, call);
            let (id, sha) = requested(with, call, request, (&rule, via.as_ref()), &shown)?;
            let answer = match via {
                Some(Via::Retry) => return self.pose((&id, &sha), &rule, shown, asks + 1),
                Some(Via::Live(live)) => self.hear(live, (&id, &sha), &rule, &shown).await,
                None => return Err(self.nobody_to_ask(&id, &rule)),
            };
            match self
                .settle(answer, (&id, &sha), &rule, &shown.binding)
                .await?
            {
                Settled::Granted(grant) => return Ok(Approved::Run(Some(grant))),
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

    /// End the call with its question; the retry resumes it. Unanswered
    /// within the wait, it is recorded expired.
    fn pose(
        &self,
        (id, sha): (&str, &str),
        rule: &str,
        shown: Shown,
        asks: usize,
    ) -> Result<Approved, Refusal> {
        let Self { with, call, .. } = *self;
        let wait = call.rules.url.approvals.wait;
        let mut expired = call
            .record
            .event(audit::Phase::Approval, Some(&self.request.session));
        expired.outcome = Some(audit::Outcome::Expired);
        expired.approval = Some(json!({"id": id, "waited_sec": wait.as_secs()}));
        let journal = with.journal.clone();
        let id_owned = id.to_owned();
        let on_expiry = move |why| {
            if why == Unanswered::ServerStopped {
                expired.approval = Some(json!({
                    "id": id_owned,
                    "why": "the server stopped before the client's retry came",
                }));
            }
            if let Err(e) = journal.append_unattached(expired) {
                tracing::error!(error = %e, "audit record of an approval's expiry not written");
            }
        };
        let message = message(id, sha, rule, &shown);
        let waiting = Waiting {
            sha: sha.to_owned(),
            rule: rule.to_owned(),
            binding: shown.binding,
            asks,
        };
        let bytes = call_bytes(self.request);
        match with.retries.hold(id, waiting, (&bytes, wait), on_expiry) {
            Ok(state) => Ok(Approved::Posed(Question {
                id: id.to_owned(),
                message,
                state,
            })),
            Err(e) => {
                let why = format!("the question's state could not be sealed: {e}");
                self.record(id, audit::Outcome::Declined, json!({"why": why}));
                Err(Refusal::new(
                    Rule::ApprovalDenied,
                    format!("approval {id} was not asked for: {why}; nothing ran"),
                ))
            }
        }
    }

    /// The client's retry: the answer to the question its state names, if
    /// that state was sealed for exactly this call and is still waiting.
    async fn resume(&self, echo: &Echo) -> Result<Approved, Refusal> {
        let bytes = call_bytes(self.request);
        let (id, waiting) = self.with.retries.take(&echo.state, &bytes).map_err(stale)?;
        let answer = echo.answer.clone();
        let (sha, rule) = (&waiting.sha, &waiting.rule);
        match self
            .settle(answer, (&id, sha), rule, &waiting.binding)
            .await?
        {
            Settled::Granted(grant) => Ok(Approved::Run(Some(grant))),
            Settled::Changed => {
                let (with, call) = (self.with, self.call);
                let shown = look(with, call, (self.request, self.planned), true).await;
                self.ask(shown, waiting.asks).await
            }
        }
    }

    /// The answer from `live` to request `id` (`sha`: what was shown).
    async fn hear(
        &self,
        live: Live<'_>,
        (id, sha): (&str, &str),
        rule: &str,
        shown: &Shown,
    ) -> Answer {
        let call = self.call;
        let wait = call.rules.url.approvals.wait;
        match live {
            Live::Desk(desk) => desk.answer(id, sha, wait, &call.cancel).await,
            Live::Display(display) => {
                (display.answer(message(id, sha, rule, shown), wait, &call.cancel)).await
            }
            Live::Client(asker) => tokio::select! {
                answer = asker.ask(message(id, sha, rule, shown), wait) => answer,
                () = call.cancel.cancelled() => Answer::Cancelled,
            },
        }
    }

    /// No channel can reach a person: request `id` is declined, and the
    /// call refused.
    fn nobody_to_ask(&self, id: &str, rule: &str) -> Refusal {
        let why = "no channel can ask a person: the client cannot elicit, no \
                   --approvals-display was given, and the operator's desk is unavailable (the \
                   audit log in the confined agent-browser's reach), or the policy's \
                   approvals.channels leaves out those that could";
        self.record(id, audit::Outcome::Declined, json!({"why": why}));
        Refusal::new(
            Rule::ApprovalDenied,
            format!("approval {id} (rule {rule:?}) was not given: {why}"),
        )
    }

    /// Record how request `id` was answered; a yes holds only if the page
    /// and the element are still as `bound`. A no, no answer or a
    /// cancellation is the call's refusal.
    async fn settle(
        &self,
        answer: Answer,
        (id, sha): (&str, &str),
        rule: &str,
        bound: &Binding,
    ) -> Result<Settled, Refusal> {
        let wait = self.call.rules.url.approvals.wait;
        match answer {
            Answer::Yes { by } => {
                let (with, call) = (self.with, self.call);
                let again = look(with, call, (self.request, self.planned), false).await;
                if again.binding == *bound {
                    let grant = json!({"id": id, "rule": rule, "shown_sha256": sha, "by": by});
                    self.record(id, audit::Outcome::Granted, grant.clone());
                    return Ok(Settled::Granted(grant));
                }
                let why = "the page or the element changed after it was shown: asked again";
                self.record(id, audit::Outcome::Declined, json!({"by": by, "why": why}));
                Ok(Settled::Changed)
            }
            Answer::No { by, why } => {
                self.record(id, audit::Outcome::Declined, json!({"by": by, "why": why}));
                Err(Refusal::new(
                    Rule::ApprovalDenied,
                    format!("approval {id} (rule {rule:?}) was denied: {why}; nothing ran"),
                ))
            }
            Answer::None => {
                let waited = json!({"waited_sec": wait.as_secs()});
                self.record(id, audit::Outcome::Expired, waited);
                Err(Refusal::new(
                    Rule::ApprovalExpired,
                    format!(
                        "approval {id} (rule {rule:?}) got no answer within {} s; nothing ran",
                        wait.as_secs()
                    ),
                ))
            }
            Answer::Cancelled => {
                self.record(id, audit::Outcome::Cancelled, json!({}));
                Err(Refusal::new(
                    Rule::Cancelled,
                    "cancelled while waiting for a person's approval",
                ))
            }
        }
    }

    fn record(&self, id: &str, outcome: audit::Outcome, approval: Value) {
        answered(self.with, self.call, self.request, id, outcome, approval);
    }
}

/// Why a retry's state resumes nothing: its own refusal, saying what to do.
fn stale(why: Stale) -> Refusal {
    let (rule, said) = match why {
        Stale::NotThisCall => (
            Rule::ApprovalDenied,
            "the retry's request state was not issued by this server for this call (its session, \
             arguments or timeout differ, it was altered, or the server restarted)",
        ),
        Stale::Expired => (
            Rule::ApprovalExpired,
            "the approval's wait ended before the retry came",
        ),
        Stale::Used => (
            Rule::ApprovalDenied,
            "the approval this retry answers was answered already (an answer is used once)",
        ),
    };
    Refusal::new(
        rule,
        format!("{said}; nothing ran. Call again without it to be asked anew"),
    )
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
    if let Some(Via::Live(Live::Desk(desk))) = via {
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
