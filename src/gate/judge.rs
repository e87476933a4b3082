//! Daemon → Chromium: the gate's decision on each of agent-browser's CDP
//! messages. Only allow-listed methods pass; URLs they carry are checked,
//! targets must be the session's own, new tabs open in its context, typed
//! text reaches only frames on a secret's hosts, and a tab is put under the
//! URL policy before its first message is forwarded.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use url::Url;

use super::{
    Shared,
    connection::{Awaited, Connection},
    contexts::{ContextId, context_of},
    methods::{Treatment, treatment},
};
use crate::chromium_ids::TargetId;
use crate::{policy::url_policy::shown, refusal::Rule, sync::lock};

/// What the relay does with one message from agent-browser.
pub(super) enum Judgement {
    Forward(Value),
    Refuse {
        rule: Rule,
        why: String,
    },
    /// Refused without an audit record: what every daemon does routinely
    /// (attach to a tab that appeared while it ran, which turned out to be
    /// another session's) is not evidence of anything.
    Decline {
        why: String,
    },
    /// A command on a tab that has closed: answered as Chromium answers it.
    SessionGone {
        cdp_session: String,
    },
    /// Answered by the gate, as Chromium answered it before.
    Answer(String),
}

/// The gate's decision on one message from agent-browser.
pub(super) async fn judge(
    mut request: Value,
    conn: &Connection,
    shared: &Arc<Shared>,
) -> Judgement {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let shown_method: String = method.chars().take(64).collect();
    let Some(how) = treatment(&method) else {
        return Judgement::Refuse {
            rule: Rule::CdpRefused,
            why: format!("{shown_method} is not on the gate's allowlist"),
        };
    };
    if let Some(answer) = conn.version_answer(&request) {
        return Judgement::Answer(answer);
    }
    if let Some(refused) = refused_url(how, &request, &shown_method, shared) {
        return refused;
    }
    if let Some(refused) = screen_request(&method, &request, conn, shared).await {
        return refused;
    }
    if method == "Target.createTarget"
        && let Err(refused) = open_in_context(&mut request, conn, shared).await
    {
        return refused;
    }
    if method == "Input.dispatchKeyEvent"
        && let Some(why) = request
            .get("params")
            .and_then(super::clipboard::reaches_clipboard)
    {
        return Judgement::Refuse {
            rule: Rule::CdpRefused,
            why: format!("{why}: the clipboard is shared by every session and the person watching"),
        };
    }
    if matches!(
        method.as_str(),
        "Input.insertText" | "Input.dispatchKeyEvent"
    ) && let Err(refused) = check_typing(&request, conn, shared).await
    {
        return refused;
    }
    let reading = shared.reading.may_wait(&conn.session);
    if let Some(left) = reading {
        settled_first(&request, conn, shared, left).await;
    }
    match policed_first(request, &shown_method, conn, shared).await {
        Judgement::Forward(request) => {
            let mut pages = lock(&conn.pages);
            pages.sent(&request);
            // A read's call asks Chromium: it waited for the warden's word
            // that a navigation committed, which this connection's events
            // may not have brought yet. Asked all the same, so that read
            // counts as Chromium's read after a screenshot.
            let answer = pages.answer(&request).filter(|_| reading.is_none());
            match answer {
                Some(answer) => Judgement::Answer(answer),
                None => Judgement::Forward(request),
            }
        }
        other => other,
    }
}

/// A read's command on a tab waits until the tab's navigation (one the
/// session's previous call started) has committed, for what is `left` of
/// the read's few seconds: then it reads the page that call went to
/// ([`super::reading`]).
async fn settled_first(request: &Value, conn: &Connection, shared: &Arc<Shared>, left: Duration) {
    let target = conn.target_of(request).filter(|a| a.kind == "page");
    if let Some(target) = target.map(|a| a.target_id) {
        // Past the bound, or with the warden unreachable, the read goes on
        // and reads what is there, as with evidence off.
        let _ = shared.warden.quiet(shared, &target, left).await;
    }
}

/// A URL in the method's parameters the gate does not let through.
fn refused_url(
    how: Treatment,
    request: &Value,
    shown_method: &str,
    shared: &Shared,
) -> Option<Judgement> {
    let url_of = |param: &str| {
        request
            .pointer(&format!("/params/{param}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let (raw, why) = match how {
        Treatment::Pass => None,
        Treatment::CheckUrl(param) => {
            url_of(param).and_then(|raw| navigation_refused(&raw, shared).map(|why| (raw, why)))
        }
        Treatment::BlankOnly(param) => url_of(param)
            .filter(|raw| !raw.is_empty() && raw != "about:blank")
            .map(|raw| (raw, "a new tab may only start at about:blank".to_owned())),
    }?;
    Some(Judgement::Refuse {
        rule: Rule::CdpRefused,
        why: format!("{shown_method} to {}: {why}", shown(&raw)),
    })
}

/// `Target.createTarget`: the tab opens in the session's browser context
/// (made now if need be), a pooled daemon's unseen.
async fn open_in_context(
    request: &mut Value,
    conn: &Connection,
    shared: &Arc<Shared>,
) -> Result<(), Judgement> {
    let context = shared
        .contexts
        .of(shared, &conn.session)
        .await
        .map_err(|why| Judgement::Refuse {
            rule: Rule::CdpRefused,
            why: format!("the session's browser context could not be made: {why}"),
        })?;
    // The context's first tab opens its window; agent-browser's others
    // (it opens a spare one beside its pinned tab) are tabs of that window.
    let first = conn
        .opened
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        == 0;
    let window = match first {
        true => shared.contexts.window_bounds(shared).await,
        false => None,
    };
    in_own_context(request, context, window.as_ref());
    if crate::session_id::is_pool_name(&conn.session) {
        wait_unseen(request);
    }
    Ok(())
}

/// Text input while the session's call types secrets: only into a focused
/// frame on the secrets' hosts.
async fn check_typing(
    request: &Value,
    conn: &Connection,
    shared: &Arc<Shared>,
) -> Result<(), Judgement> {
    let Some(names) = shared.typing.names(&conn.session) else {
        return Ok(());
    };
    let target = conn.target_of(request).map(|a| a.target_id);
    check_typing_frame(&names, target.as_ref(), shared).await
}

/// A message for a tab goes to it only once the tab is policed. Every CDP
/// session agent-browser holds was announced on this connection, so one the
/// relay never saw is refused rather than let through unpoliced.
async fn policed_first(
    request: Value,
    shown_method: &str,
    conn: &Connection,
    shared: &Arc<Shared>,
) -> Judgement {
    let Some(cdp_session) = request.get("sessionId") else {
        return Judgement::Forward(request);
    };
    let cdp_session = cdp_session.as_str().unwrap_or_default();
    let known = lock(&conn.attached).get(cdp_session).cloned();
    if known.is_none() && lock(&conn.hidden).contains(cdp_session) {
        return Judgement::Decline {
            why: format!("{shown_method}: that tab is another session's"),
        };
    }
    let gone = || Judgement::SessionGone {
        cdp_session: cdp_session.to_owned(),
    };
    if known.is_none() && lock(&conn.in_flight).has_ended(cdp_session) {
        return gone();
    }
    let Some(target) = known else {
        return Judgement::Refuse {
            rule: Rule::CdpUnwarded,
            why: format!("{shown_method} names a CDP session this connection never attached"),
        };
    };
    if target.kind == "page"
        && let Err(why) = shared
            .warden
            .ward(shared, &target.target_id, &conn.session)
            .await
    {
        // The tab closed while it was being put under the policy: there is
        // nothing left to police. Chromium may not have announced it on
        // this connection yet (a popup the tab cap closed as it opened), so
        // a tab Chromium no longer knows counts as closed too; the message
        // is answered, never forwarded, either way.
        if lock(&conn.in_flight).has_ended(cdp_session)
            || !target_exists(shared, &target.target_id).await
        {
            return gone();
        }
        return Judgement::Refuse {
            rule: Rule::CdpUnwarded,
            why: format!("the tab could not be put under the URL policy: {why}"),
        };
    }
    Judgement::Forward(request)
}

/// Does Chromium still know the target? Only its own answer that it does
/// not counts as no: a warden that cannot ask leaves the refusal on the
/// record as it was.
async fn target_exists(shared: &Arc<Shared>, target: &str) -> bool {
    match shared
        .warden
        .browser_call(shared, "Target.getTargetInfo", json!({"targetId": target}))
        .await
    {
        Ok(_) => true,
        Err(e) => !e.is_unknown_target(),
    }
}

/// Secrets are being typed: the text goes to the focused field, whose
/// frame must be on every secret's hosts (the top page may be, and an
/// embedded frame of another origin not). Anything unknown refuses.
async fn check_typing_frame(
    names: &[String],
    target: Option<&TargetId>,
    shared: &Arc<Shared>,
) -> Result<(), Judgement> {
    let refuse = |why: String| Judgement::Refuse {
        rule: Rule::SecretHost,
        why,
    };
    let target = target.ok_or_else(|| {
        refuse("text input for no tab this connection attached; nothing was typed".to_owned())
    })?;
    let frame = shared
        .warden
        .focused_frame(shared, target)
        .await
        .map_err(|e| {
            refuse(format!(
                "the frame of the focused field could not be told ({e}); nothing was typed"
            ))
        })?;
    shared
        .rules
        .get()
        .secrets
        .check_frame(names, &frame)
        .map_err(|refusal| refuse(refusal.message))
}

/// A new tab opens in the session's context, whatever the child asked;
/// given `window` (headed, the context's first tab), in a new window over
/// the browser's first one.
fn in_own_context(request: &mut Value, context: ContextId, window: Option<&Value>) {
    if let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) {
        params.insert(
            "browserContextId".to_owned(),
            Value::String(context.to_string()),
        );
        // Chromium places only a new window.
        if let Some(window) = window {
            params.insert("newWindow".to_owned(), Value::Bool(true));
            for side in ["left", "top", "width", "height"] {
                if let Some(value) = window.get(side) {
                    params.insert(side.to_owned(), value.clone());
                }
            }
        }
    }
}

/// A pooled daemon's tab waits unseen, in the background: opened in
/// front, it would push the tab a session works in to the background,
/// where Chromium stops rendering it and a click waits out agent-browser's
/// 5 s timeout. It comes forward once the first call of the session it is
/// bound to has been answered (headed, where its window may have opened
/// over the one a person watches, the runner brings that one forward again
/// after each warm-up).
fn wait_unseen(request: &mut Value) {
    if let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) {
        params.insert("background".to_owned(), Value::Bool(true));
    }
}

/// Commands that name a target: only one in the session's own context
/// may be touched (a daemon is never shown another, so asking for one is
/// refused and audited); the answers that say which targets exist are
/// awaited.
async fn screen_request(
    method: &str,
    request: &Value,
    conn: &Connection,
    shared: &Arc<Shared>,
) -> Option<Judgement> {
    let id = request.get("id").and_then(Value::as_u64);
    match method {
        "Target.attachToTarget"
        | "Target.activateTarget"
        | "Target.closeTarget"
        | "Target.getTargetInfo" => {
            let target = request
                .pointer("/params/targetId")
                .and_then(Value::as_str)?;
            if lock(&conn.shown).contains(target) {
                return None;
            }
            let own = shared.contexts.known(&conn.session);
            let context = context_of(shared, target).await.ok();
            (own.is_none() || context != own).then(|| Judgement::Refuse {
                rule: Rule::CdpRefused,
                why: format!("{method}: that target is not in this session's browser context"),
            })
        }
        "Target.createTarget" => {
            lock(&conn.awaited).insert(id?, Awaited::NewTab);
            None
        }
        "Target.getTargets" => {
            lock(&conn.awaited).insert(id?, Awaited::TargetList);
            None
        }
        "Browser.getVersion" if request.get("sessionId").is_none() => {
            lock(&conn.awaited).insert(id?, Awaited::Version);
            None
        }
        _ => None,
    }
}

/// Why the gate refuses a URL agent-browser asks Chromium to load, if it
/// does: it lets through only what the warden will see and decide as a
/// request (an allowed scheme), or `about:blank`. Host and addresses are
/// left to the warden, which checks the request the browser actually makes
/// (no second DNS lookup on every `open`).
fn navigation_refused(raw: &str, shared: &Shared) -> Option<String> {
    let url = match Url::parse(raw) {
        Ok(url) => url,
        Err(e) => return Some(format!("not a valid URL: {e}")),
    };
    let rules = shared.rules.get();
    let blank = url.as_str() == "about:blank" && rules.url.allow_about_blank;
    let allowed = blank || rules.url.allow_schemes.iter().any(|s| s == url.scheme());
    (!allowed).then(|| {
        format!(
            "[{}] the {}: scheme is not allowed",
            Rule::UrlScheme,
            url.scheme()
        )
    })
}
