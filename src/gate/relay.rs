//! One daemon's connection through the gate: agent-browser's CDP messages
//! judged one by one on their way to Chromium, Chromium's screened on their
//! way back.
//!
//! Messages to Chromium keep their order: one that must wait (its tab is
//! being put under the policy, or its URL resolved) holds the ones after it.
//! Messages from Chromium pass unchanged, except that targets outside the
//! session's browser context are left out of target lists and events
//! ([`super::contexts`]); a new tab is opened in that context. A command on
//! a tab that closes before Chromium answers it is answered by the gate
//! ([`super::in_flight`]).

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::{
    net::TcpStream,
    sync::{OwnedSemaphorePermit, Semaphore, mpsc},
};
use tokio_tungstenite::{WebSocketStream, tungstenite::Message};
use url::Url;

use super::{
    Shared,
    contexts::{context_of, in_context},
    in_flight::{InFlight, answer_id, session_gone_answer},
    lock,
    methods::{Treatment, treatment},
};
use crate::{
    browser_refusals::{BrowserRefusal, Requester},
    policy::url_policy::shown,
    refusal::Rule,
};

use super::ChromiumSocket;
type ChromiumSink = futures_util::stream::SplitSink<ChromiumSocket, Message>;
type ChromiumStream = futures_util::stream::SplitStream<ChromiumSocket>;

/// A tab (or frame, or worker) agent-browser is attached to.
#[derive(Debug, Clone)]
struct Attached {
    target_id: String,
    kind: String,
}

/// A command of agent-browser's whose answer the relay reads.
#[derive(Debug, Clone, Copy)]
enum Awaited {
    /// `Target.createTarget`: the new tab is shown to this connection.
    NewTab,
    /// `Target.getTargets`: targets of other contexts are left out.
    TargetList,
}

/// What the relay knows of one daemon's connection.
struct Connection {
    session: String,
    /// agent-browser's CDP sessions, by id.
    attached: Mutex<HashMap<String, Attached>>,
    /// CDP sessions on tabs the relay hid (another session claimed the tab
    /// between agent-browser's attach and Chromium's announcement of it).
    hidden: Mutex<HashSet<String>>,
    /// agent-browser's commands whose answers are read, by id.
    awaited: Mutex<HashMap<u64, Awaited>>,
    /// Targets this connection was shown (all in the session's context).
    shown: Mutex<HashSet<String>>,
    /// Tabs this connection opened: only the first gets a window of its own.
    opened: std::sync::atomic::AtomicUsize,
    /// Commands on tabs not answered yet, and the CDP sessions that ended.
    in_flight: Mutex<InFlight>,
}

impl Connection {
    fn new(session: String) -> Self {
        Self {
            session,
            attached: Mutex::default(),
            hidden: Mutex::default(),
            awaited: Mutex::default(),
            shown: Mutex::default(),
            opened: std::sync::atomic::AtomicUsize::new(0),
            in_flight: Mutex::default(),
        }
    }

    /// `request` goes to Chromium: a command on a tab is awaited.
    fn sent(&self, request: &Value) {
        if let (Some(id), Some(cdp_session)) = (
            request.get("id").and_then(Value::as_u64),
            request.get("sessionId").and_then(Value::as_str),
        ) {
            lock(&self.in_flight).sent(id, cdp_session);
        }
    }
}

/// What the relay does with one message from agent-browser.
enum Judgement {
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
}

pub(super) async fn relay(
    client: WebSocketStream<TcpStream>,
    session: String,
    shared: Arc<Shared>,
) {
    shared.contexts.adopt_or_drop(&shared, &session).await;
    let conn = Arc::new(Connection::new(session));
    let (mut to_daemon, mut from_daemon) = client.split();
    // One writer to the daemon, fed by Chromium's messages and the gate's
    // own refusals, at most MAX_QUEUED_BYTES of them waiting.
    let (daemon_tx, mut daemon_rx) = mpsc::unbounded_channel::<Queued>();
    let budget = Arc::new(Semaphore::new(MAX_QUEUED_BYTES));
    let writer = tokio::spawn(async move {
        while let Some((message, room)) = daemon_rx.recv().await {
            if to_daemon.send(message).await.is_err() {
                break;
            }
            drop(room);
        }
        let _ = to_daemon.close().await;
    });
    // Connected on the first message that is forwarded: a refusal needs no
    // browser.
    let mut chromium: Option<ChromiumSink> = None;
    let mut reader = None;
    while let Some(Ok(message)) = from_daemon.next().await {
        let text = match message {
            Message::Text(text) => text,
            Message::Close(_) => break,
            _ => continue,
        };
        let Ok(request) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!(
                "a daemon sent a CDP message that is not JSON; its connection is closed"
            );
            break;
        };
        let answer = match judge(request.clone(), &conn, &shared).await {
            Judgement::Forward(request) => {
                conn.sent(&request);
                tracing::trace!(session = %conn.session, message = %request, "the browser gate forwards");
                if chromium.is_none() {
                    match connect(&shared).await {
                        Ok((sink, stream)) => {
                            chromium = Some(sink);
                            reader = Some(tokio::spawn(from_chromium(
                                stream,
                                (daemon_tx.clone(), Arc::clone(&budget)),
                                Arc::clone(&conn),
                                Arc::clone(&shared),
                            )));
                        }
                        Err(why) => {
                            tracing::warn!(%why, "a daemon's browser connection was not relayed");
                            break;
                        }
                    }
                }
                let Some(sink) = chromium.as_mut() else { break };
                if sink.send(Message::text(request.to_string())).await.is_err() {
                    break;
                }
                continue;
            }
            Judgement::Refuse { rule, why } => {
                report_refused(&shared, &conn.session, rule, &why);
                refusal_answer(&request, rule, &why)
            }
            Judgement::Decline { why } => {
                tracing::debug!(session = %conn.session, "the browser gate declined a CDP message");
                refusal_answer(&request, Rule::CdpRefused, &why)
            }
            Judgement::SessionGone { cdp_session } => {
                session_gone_answer(request.get("id").cloned(), &cdp_session)
            }
        };
        // A daemon that sends refused messages and never reads the answers
        // has its connection closed, not a queue that grows.
        let Ok(room) = Arc::clone(&budget).try_acquire_many_owned(room_for(answer.len())) else {
            tracing::warn!(session = %conn.session, "a daemon does not read the gate's answers; its connection is closed");
            break;
        };
        if daemon_tx.send((Message::text(answer), Some(room))).is_err() {
            break;
        }
    }
    if let Some(mut sink) = chromium {
        let _ = sink.close().await;
    }
    if let Some(reader) = reader {
        reader.abort();
    }
    drop(daemon_tx);
    let _ = writer.await;
}

/// A CDP message the gate refused, on its way to the audit writer. The
/// reason stays out of diagnostics: it may quote a URL or text a page
/// holds; the record's copy is scrubbed.
fn report_refused(shared: &Shared, session: &str, rule: Rule, why: &str) {
    tracing::info!(%session, %rule, "the browser gate refused a CDP message; the audit record says why");
    shared.reporter.report(BrowserRefusal::new(
        session.to_owned(),
        rule,
        why.to_owned(),
        Requester::AgentBrowser,
    ));
}

/// The CDP error a refused message of agent-browser's is answered with.
fn refusal_answer(request: &Value, rule: Rule, why: &str) -> String {
    let mut answer = json!({
        "id": request.get("id").cloned().unwrap_or(Value::Null),
        "error": {"code": -32000, "message": format!("browser-shell refused [{rule}]: {why}")},
    });
    if let Some(cdp_session) = request.get("sessionId") {
        answer["sessionId"] = cdp_session.clone();
    }
    answer.to_string()
}

/// The relay's own connection to Chromium's browser endpoint.
async fn connect(shared: &Shared) -> Result<(ChromiumSink, ChromiumStream), String> {
    Ok(shared.connect_browser().await?.split())
}

/// Chromium → daemon: screened (see [`screen`]), otherwise unchanged. While
/// the daemon's queue is full, Chromium is not read; when it stays full, the
/// daemon is not reading, and its connection is closed.
async fn from_chromium(
    mut stream: ChromiumStream,
    (daemon, budget): (mpsc::UnboundedSender<Queued>, Arc<Semaphore>),
    conn: Arc<Connection>,
    shared: Arc<Shared>,
) {
    'relay: while let Some(Ok(message)) = stream.next().await {
        match message {
            Message::Text(text) => {
                tracing::trace!(session = %conn.session, message = %text.chars().take(160).collect::<String>(), "the browser gate relays back");
                let already_answered = {
                    let mut in_flight = lock(&conn.in_flight);
                    in_flight.waiting()
                        && answer_id(&text).is_some_and(|id| !in_flight.answered(id))
                };
                if already_answered {
                    continue;
                }
                let (passed, owed) = match screen(&text, &conn, &shared) {
                    Screened::Unchanged => (Message::Text(text), Vec::new()),
                    Screened::Rewritten(value) => (Message::text(value.to_string()), Vec::new()),
                    Screened::Detached(owed) => (Message::Text(text), owed),
                    Screened::Dropped => continue,
                };
                // The detach first, then the answers Chromium will not give.
                for passed in std::iter::once(passed).chain(owed.into_iter().map(Message::text)) {
                    let room = Arc::clone(&budget).acquire_many_owned(room_for(passed.len()));
                    let Ok(Ok(room)) = tokio::time::timeout(QUEUE_PATIENCE, room).await else {
                        tracing::warn!(session = %conn.session, "a daemon does not read what Chromium sends it; its connection is closed");
                        break 'relay;
                    };
                    if daemon.send((passed, Some(room))).is_err() {
                        break 'relay;
                    }
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    // Chromium went away, or the daemon stopped reading: its connection ends.
    let _ = daemon.send((Message::Close(None), None));
}

/// A message for the daemon, and the room it takes in the queue.
type Queued = (Message, Option<OwnedSemaphorePermit>);

/// Bytes of messages that may wait for a daemon at once: a screenshot or a
/// large evaluation fits, a daemon that never reads does not grow the
/// server (a message larger than this waits for an empty queue).
const MAX_QUEUED_BYTES: usize = 32 << 20;

/// How long a message may wait for room before the daemon is taken to be
/// not reading.
const QUEUE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The room a message of `len` bytes takes: all of the queue at most.
fn room_for(len: usize) -> u32 {
    u32::try_from(len.clamp(1, MAX_QUEUED_BYTES)).unwrap_or(u32::MAX)
}

/// The gate's decision on one message from agent-browser.
async fn judge(mut request: Value, conn: &Connection, shared: &Arc<Shared>) -> Judgement {
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
    policed_first(request, &shown_method, conn, shared).await
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
            url_of(param).and_then(|raw| check_navigation(&raw, shared).err().map(|why| (raw, why)))
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
    let target = request
        .get("sessionId")
        .and_then(Value::as_str)
        .and_then(|cdp_session| {
            lock(&conn.attached)
                .get(cdp_session)
                .map(|a| a.target_id.clone())
        });
    check_typing_frame(&names, target.as_deref(), shared)
        .await
        .map_err(|why| Judgement::Refuse {
            rule: Rule::SecretHost,
            why,
        })
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
        Err(why) => !why.contains("No target with given id"),
    }
}

/// Secrets are being typed: the text goes to the focused field, whose
/// frame must be on every secret's hosts (the top page may be, and an
/// embedded frame of another origin not). Anything unknown refuses.
async fn check_typing_frame(
    names: &[String],
    target: Option<&str>,
    shared: &Arc<Shared>,
) -> Result<(), String> {
    let target =
        target.ok_or("text input for no tab this connection attached; nothing was typed")?;
    let frame = shared
        .warden
        .focused_frame(shared, target)
        .await
        .map_err(|e| {
            format!("the frame of the focused field could not be told ({e}); nothing was typed")
        })?;
    shared
        .rules
        .get()
        .secrets
        .check_frame(names, &frame)
        .map_err(|refusal| refusal.message)
}

/// A new tab opens in the session's context, whatever the child asked;
/// given `window` (headed, the context's first tab), in a new window over
/// the browser's first one.
fn in_own_context(request: &mut Value, context: String, window: Option<&Value>) {
    if let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) {
        params.insert("browserContextId".to_owned(), Value::String(context));
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
        _ => None,
    }
}

/// What becomes of one message from Chromium.
enum Screened {
    Unchanged,
    Rewritten(Value),
    /// A CDP session ended (unchanged), and these answers are owed for the
    /// commands on it Chromium will not answer.
    Detached(Vec<String>),
    Dropped,
}

/// Read what the relay needs from one message of Chromium's: which CDP
/// session is which target, which new tab is this session's; leave other
/// sessions' tabs out of lists and events.
fn screen(text: &str, conn: &Connection, shared: &Shared) -> Screened {
    // Cheap test first: most messages are none of these.
    let awaiting = !lock(&conn.awaited).is_empty();
    if !awaiting && !text.contains("\"Target.") {
        return Screened::Unchanged;
    }
    let Ok(mut message) = serde_json::from_str::<Value>(text) else {
        return Screened::Unchanged;
    };
    if let Some(id) = message.get("id").and_then(Value::as_u64) {
        let awaited = lock(&conn.awaited).remove(&id);
        return match awaited {
            Some(Awaited::NewTab) => {
                if let Some(target) = message.pointer("/result/targetId").and_then(Value::as_str) {
                    lock(&conn.shown).insert(target.to_owned());
                }
                Screened::Unchanged
            }
            Some(Awaited::TargetList) => {
                if let Some(Value::Array(infos)) = message.pointer_mut("/result/targetInfos") {
                    infos.retain(|info| visible(info, conn, shared));
                }
                Screened::Rewritten(message)
            }
            None => Screened::Unchanged,
        };
    }
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match message.get("method").and_then(Value::as_str) {
        Some("Target.targetCreated" | "Target.targetInfoChanged") => {
            let info = params.get("targetInfo").unwrap_or(&Value::Null);
            visible_or_dropped(visible(info, conn, shared))
        }
        Some("Target.targetDestroyed" | "Target.targetCrashed") => {
            let target = params
                .get("targetId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let was_shown = if message.get("method").and_then(Value::as_str)
                == Some("Target.targetDestroyed")
            {
                lock(&conn.shown).remove(target)
            } else {
                lock(&conn.shown).contains(target)
            };
            visible_or_dropped(was_shown)
        }
        Some("Target.attachedToTarget") => {
            let info = params.get("targetInfo").unwrap_or(&Value::Null);
            if !visible(info, conn, shared) {
                // Auto-attach reached a target of another context: its
                // CDP session is not this daemon's, and messages on it are
                // declined.
                if let Some(cdp_session) = params.get("sessionId").and_then(Value::as_str) {
                    lock(&conn.hidden).insert(cdp_session.to_owned());
                }
                return Screened::Dropped;
            }
            note_attached(&params, info, conn);
            Screened::Unchanged
        }
        Some("Target.detachedFromTarget") => {
            let Some(cdp_session) = params.get("sessionId").and_then(Value::as_str) else {
                return Screened::Unchanged;
            };
            lock(&conn.attached).remove(cdp_session);
            lock(&conn.hidden).remove(cdp_session);
            let orphans = lock(&conn.in_flight).ended(cdp_session);
            if !orphans.is_empty() {
                tracing::debug!(session = %conn.session, commands = ?orphans, "a tab closed with commands on it unanswered; the gate answers them");
            }
            Screened::Detached(
                orphans
                    .into_iter()
                    .map(|id| session_gone_answer(Some(id.into()), cdp_session))
                    .collect(),
            )
        }
        _ => Screened::Unchanged,
    }
}

/// Is the target `info` in the session's context? If so, this connection
/// has been shown it.
fn visible(info: &Value, conn: &Connection, shared: &Shared) -> bool {
    let context = shared.contexts.known(&conn.session);
    let shown = in_context(info, context.as_deref());
    if shown && let Some(target) = info.get("targetId").and_then(Value::as_str) {
        lock(&conn.shown).insert(target.to_owned());
    }
    shown
}

fn visible_or_dropped(visible: bool) -> Screened {
    if visible {
        Screened::Unchanged
    } else {
        Screened::Dropped
    }
}

/// Remember which target a CDP session of agent-browser's is.
fn note_attached(params: &Value, info: &Value, conn: &Connection) {
    let Some(cdp_session) = params.get("sessionId").and_then(Value::as_str) else {
        return;
    };
    let field = |name: &str| {
        info.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    lock(&conn.attached).insert(
        cdp_session.to_owned(),
        Attached {
            target_id: field("targetId"),
            kind: field("type"),
        },
    );
}

/// A URL agent-browser asks Chromium to load: only what the warden will
/// see and decide as a request (an allowed scheme), or `about:blank`.
/// Host and addresses are left to the warden, which checks the request the
/// browser actually makes (no second DNS lookup on every `open`).
fn check_navigation(raw: &str, shared: &Shared) -> Result<(), String> {
    let url = Url::parse(raw).map_err(|e| format!("not a valid URL: {e}"))?;
    let rules = shared.rules.get();
    let blank = url.as_str() == "about:blank" && rules.url.allow_about_blank;
    if blank || rules.url.allow_schemes.iter().any(|s| s == url.scheme()) {
        Ok(())
    } else {
        Err(format!(
            "[{}] the {}: scheme is not allowed",
            Rule::UrlScheme,
            url.scheme()
        ))
    }
}
