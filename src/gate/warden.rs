//! The warden: browser-shell's own CDP connection to Chromium, which puts
//! every document a session's tabs load under the whole URL policy (host
//! allowlists included), naming the session. Every other connection goes
//! out through the session's egress proxy (`crate::egress`).
//!
//! The gate hands agent-browser's first message for a tab to Chromium only
//! after the warden has attached to that tab and enabled the Fetch domain
//! there for documents — and, through auto-attach with
//! `waitForDebuggerOnStart`, in every out-of-process frame the tab starts
//! later, before it runs. Each document is paused until the policy has
//! decided; a refused one fails with `BlockedByClient` before a byte leaves
//! the browser. Its own
//! connection keeps the warden's sessions, ids and events apart from
//! agent-browser's, which the relay forwards untouched.

use super::error::GateError;
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use url::Url;

use super::Shared;
use crate::chromium_ids::{CdpSessionId, TargetId};
use crate::sync::lock;
use crate::{
    browser_refusals::{BrowserRefusal, Destination, Requester},
    policy::url_policy::shown,
    refusal::Rule,
    session_id::DaemonName,
};

/// How long one of the warden's own CDP commands may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Deepest nesting of frames followed to the focused field.
const MAX_FRAME_DEPTH: usize = 8;

/// Every document, at the request stage (before it is sent): a page or a
/// frame's document meets the whole policy here, host allowlists included,
/// and is named with its session. Every other connection goes out through
/// the session's egress proxy, which decides it there; pausing each
/// subresource as well cost most of a page's load time
/// (docs/benchmarks.md, "Subresources").
fn intercept_documents() -> Value {
    json!({"patterns": [{"urlPattern": "*", "resourceType": "Document", "requestStage": "Request"}]})
}

/// A tab's policing, set up once by whichever message reaches it first.
type Ward = Arc<OnceCell<Result<(), GateError>>>;

/// The warden of one server: lazily connected, reconnected after a loss.
pub(super) struct Warden {
    link: tokio::sync::Mutex<Option<Arc<Link>>>,
}

/// One live connection of the warden.
struct Link {
    tx: mpsc::UnboundedSender<Message>,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Value, GateError>>>>,
    /// Tabs put under the policy (by target id), each decided once.
    wards: Mutex<HashMap<TargetId, Ward>>,
    /// The warden's CDP sessions, and the browser-shell session each
    /// polices for (named in audit records of blocked requests).
    owners: Mutex<HashMap<CdpSessionId, DaemonName>>,
    /// The warden's CDP session on each target it is attached to.
    sessions: Mutex<HashMap<TargetId, CdpSessionId>>,
    /// The frames loading, when the gate watches pages for the evidence.
    loading: Option<super::loading::Loading>,
    alive: tokio_util::sync::CancellationToken,
}

impl Warden {
    pub(super) fn new() -> Self {
        Self {
            link: tokio::sync::Mutex::new(None),
        }
    }

    /// Put the tab `target_id` under the URL policy (once; later calls
    /// return the first result at once). An error means the tab is not
    /// policed, and nothing may be sent to it.
    pub(super) async fn ward(
        &self,
        shared: &Arc<Shared>,
        target_id: &TargetId,
        session: &DaemonName,
    ) -> Result<(), GateError> {
        let link = self.link(shared).await?;
        let cell = {
            let mut wards = lock(&link.wards);
            Arc::clone(wards.entry(target_id.clone()).or_default())
        };
        let result = cell
            .get_or_init(|| link.attach(target_id, session))
            .await
            .clone();
        if result.is_err() {
            // Not cached: the next message for the tab tries again.
            lock(&link.wards).remove(target_id);
        }
        result
    }

    /// The URL of the frame whose element has focus in the tab (or
    /// out-of-process frame) `target_id`: where Chromium delivers typed
    /// text. Read in an isolated world, so the page's scripts cannot answer
    /// for the DOM; each frame owner that has focus is followed into its
    /// frame, in or out of process.
    pub(super) async fn focused_frame(
        &self,
        shared: &Arc<Shared>,
        target_id: &TargetId,
    ) -> Result<String, GateError> {
        let link = self.link(shared).await?;
        let mut session = link
            .session_of(target_id)
            .ok_or("the tab is not under the warden")?;
        let mut frame = None;
        for _ in 0..MAX_FRAME_DEPTH {
            let frame_id = match frame.take() {
                Some(id) => id,
                None => link.main_frame(&session).await?,
            };
            let world = link
                .call(
                    Some(&session),
                    "Page.createIsolatedWorld",
                    json!({"frameId": frame_id, "worldName": "browser-shell"}),
                )
                .await?;
            let context = world
                .get("executionContextId")
                .cloned()
                .ok_or("Chromium made no isolated world")?;
            let evaluate = |expression: &str, by_value: bool| {
                link.call(
                    Some(&session),
                    "Runtime.evaluate",
                    json!({"expression": expression, "contextId": context, "returnByValue": by_value}),
                )
            };
            let focused = evaluate("document.activeElement", false).await?;
            let owner = match focused.pointer("/result/objectId").and_then(Value::as_str) {
                Some(object) => {
                    let node = link
                        .call(
                            Some(&session),
                            "DOM.describeNode",
                            json!({"objectId": object}),
                        )
                        .await;
                    let _ = link
                        .call(
                            Some(&session),
                            "Runtime.releaseObject",
                            json!({"objectId": object}),
                        )
                        .await;
                    frame_owned(&node?)
                }
                None => None,
            };
            match owner {
                // Out of process, the frame is a target of its own (the
                // warden attached to it); in process, a frame of this one.
                Some(child) => match link.session_of(&child) {
                    Some(own) => session = own,
                    None => frame = Some(child),
                },
                None => {
                    let href = evaluate("location.href", true).await?;
                    return href
                        .pointer("/result/value")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| GateError::from("the frame's URL could not be read"));
                }
            }
        }
        Err(GateError::Failed(format!(
            "frames nested deeper than {MAX_FRAME_DEPTH}"
        )))
    }

    /// One command to the tab `target_id`, on the warden's own connection:
    /// the tab is put under the URL policy first, if it is not yet.
    pub(super) async fn page_call(
        &self,
        shared: &Arc<Shared>,
        target_id: &TargetId,
        session: &DaemonName,
        method: &str,
        params: Value,
    ) -> Result<Value, GateError> {
        self.ward(shared, target_id, session).await?;
        let link = self.link(shared).await?;
        let cdp_session = link
            .session_of(target_id)
            .ok_or("the tab is not under the warden")?;
        link.call(Some(&cdp_session), method, params).await
    }

    /// Wait until the tab `target_id` is not navigating or loading, for at
    /// most `within`; whether it is quiet (always, when pages are not
    /// watched).
    pub(super) async fn quiet(
        &self,
        shared: &Arc<Shared>,
        target_id: &TargetId,
        within: Duration,
    ) -> Result<bool, GateError> {
        let link = self.link(shared).await?;
        // A tab's main frame id is its target id.
        match &link.loading {
            Some(loading) => Ok(loading.quiet(target_id, within).await),
            None => Ok(true),
        }
    }

    /// One browser-level command on the warden's own connection.
    pub(super) async fn browser_call(
        &self,
        shared: &Arc<Shared>,
        method: &str,
        params: Value,
    ) -> Result<Value, GateError> {
        self.link(shared).await?.call(None, method, params).await
    }

    async fn link(&self, shared: &Arc<Shared>) -> Result<Arc<Link>, GateError> {
        let mut slot = self.link.lock().await;
        if let Some(link) = slot.as_ref().filter(|l| !l.alive.is_cancelled()) {
            return Ok(Arc::clone(link));
        }
        let link = Link::connect(shared).await?;
        *slot = Some(Arc::clone(&link));
        Ok(link)
    }
}

impl Link {
    async fn connect(shared: &Arc<Shared>) -> Result<Arc<Self>, GateError> {
        let (mut sink, mut stream) = shared
            .connect_browser()
            .await
            .map_err(|e| format!("the warden: {e}"))?
            .split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
        let link = Arc::new(Self {
            tx,
            next_id: AtomicU64::new(1),
            pending: Mutex::default(),
            wards: Mutex::default(),
            owners: Mutex::default(),
            sessions: Mutex::default(),
            loading: shared.watch_pages.then(super::loading::Loading::default),
            alive: tokio_util::sync::CancellationToken::new(),
        });
        let alive = link.alive.clone();
        tokio::spawn(async move {
            while let Some(message) = rx.recv().await {
                if sink.send(message).await.is_err() {
                    break;
                }
            }
            alive.cancel();
        });
        let (reader, shared_reader) = (Arc::clone(&link), Arc::clone(shared));
        tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                if let Message::Text(text) = message
                    && let Ok(value) = serde_json::from_str::<Value>(&text)
                {
                    reader.dispatch(value, &shared_reader);
                }
            }
            reader.alive.cancel();
            for (_, waiter) in lock(&reader.pending).drain() {
                let _ = waiter.send(Err(GateError::Closed));
            }
        });
        // Chromium is not confined: a download is a write of the page's
        // choosing into its downloads directory. None happens while the
        // warden is connected (which it is before any session's tab is
        // driven), and each attempt is announced, to be recorded.
        link.call(
            None,
            "Browser.setDownloadBehavior",
            json!({"behavior": "deny", "eventsEnabled": true}),
        )
        .await
        .map_err(|e| format!("the warden could not deny downloads: {e}"))?;
        // Every target is announced (and, now, every one there is): the
        // sessions' pages are counted against --max-tabs, afresh, since
        // pages may have closed while no connection was there to hear it.
        shared.tab_cap.forget_all();
        link.call(None, "Target.setDiscoverTargets", json!({"discover": true}))
            .await
            .map_err(|e| format!("the warden could not watch for new tabs: {e}"))?;
        Ok(link)
    }

    /// One CDP command on the warden's connection, answered or timed out.
    async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, GateError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = Value::from(session);
        }
        if self.tx.send(Message::text(message.to_string())).is_err() {
            lock(&self.pending).remove(&id);
            return Err(GateError::Closed);
        }
        match tokio::time::timeout(COMMAND_TIMEOUT, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(GateError::Closed),
            Err(_) => {
                lock(&self.pending).remove(&id);
                Err(GateError::TimedOut(method.to_owned()))
            }
        }
    }

    /// Send a command whose answer no one waits for (its reply, matched to
    /// no waiter, is dropped).
    fn send(&self, session: &str, method: &str, params: Value) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let message = json!({"id": id, "method": method, "params": params, "sessionId": session});
        let _ = self.tx.send(Message::text(message.to_string()));
    }

    /// The warden's CDP session on a target (a tab, or an out-of-process
    /// frame it auto-attached).
    fn session_of(&self, target_id: &str) -> Option<CdpSessionId> {
        lock(&self.sessions).get(target_id).cloned()
    }

    /// The id of the main frame of the target behind `cdp_session`.
    async fn main_frame(&self, cdp_session: &str) -> Result<String, GateError> {
        let tree = self
            .call(Some(cdp_session), "Page.getFrameTree", json!({}))
            .await?;
        tree.pointer("/frameTree/frame/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| GateError::from("the target has no main frame"))
    }

    /// Attach to a tab and police it.
    async fn attach(
        self: &Arc<Self>,
        target_id: &TargetId,
        session: &DaemonName,
    ) -> Result<(), GateError> {
        let attached = self
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await?;
        let cdp_session = attached
            .get("sessionId")
            .and_then(Value::as_str)
            .map(CdpSessionId::from_chromium)
            .ok_or("Chromium's answer to Target.attachToTarget has no sessionId")?;
        lock(&self.owners).insert(cdp_session.clone(), session.clone());
        lock(&self.sessions).insert(target_id.clone(), cdp_session.clone());
        self.police(&cdp_session).await
    }

    /// Intercept every request in `cdp_session`, and have every frame or
    /// worker it starts attached (paused) so it is policed before it runs.
    /// Its log, too: a page reports each load that failed there, which
    /// tells a refused connection of the page's from one Chromium made
    /// (`failed_loads`). Not waited for: nothing is decided on it.
    async fn police(&self, cdp_session: &str) -> Result<(), GateError> {
        self.send(cdp_session, "Log.enable", json!({}));
        if self.loading.is_some() {
            self.send(cdp_session, "Page.enable", json!({}));
        }
        self.call(Some(cdp_session), "Fetch.enable", intercept_documents())
            .await?;
        self.call(
            Some(cdp_session),
            "Target.setAutoAttach",
            json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true}),
        )
        .await?;
        Ok(())
    }

    /// A message from Chromium: an answer to one of the warden's commands,
    /// a paused request, or a frame/worker to police.
    fn dispatch(self: &Arc<Self>, message: Value, shared: &Arc<Shared>) {
        if let Some(id) = message.get("id").and_then(Value::as_u64) {
            if let Some(waiter) = lock(&self.pending).remove(&id) {
                let answer = match message.get("error") {
                    Some(error) => Err(GateError::Refused(error.clone())),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = waiter.send(answer);
            }
            return;
        }
        let session = message.get("sessionId").and_then(Value::as_str);
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match (message.get("method").and_then(Value::as_str), session) {
            (Some("Fetch.requestPaused"), Some(session)) => {
                let (link, shared, session) =
                    (Arc::clone(self), Arc::clone(shared), session.to_owned());
                tokio::spawn(async move { link.decide(&session, &params, &shared).await });
            }
            (Some("Target.attachedToTarget"), Some(parent)) => self.attached(parent, &params),
            (Some("Log.entryAdded"), Some(session)) => {
                let entry = params.get("entry");
                let text = |key: &str| entry.and_then(|e| e.get(key)).and_then(Value::as_str);
                if let (Some("network"), Some(url)) = (text("source"), text("url"))
                    && let Some(owner) = lock(&self.owners).get(session).cloned()
                {
                    shared.failed_loads.note(&owner, url);
                }
            }
            (Some("Browser.downloadWillBegin"), None) => self.download_denied(&params, shared),
            (Some(page), Some(_)) if page.starts_with("Page.") => {
                if let Some(loading) = &self.loading {
                    loading.note(page, &params);
                }
            }
            (Some("Target.targetCreated"), None) => {
                if let Some(info) = params.get("targetInfo") {
                    super::tab_cap::on_created(shared, info);
                }
            }
            (Some("Target.targetDestroyed"), None) => {
                if let Some(target) = params.get("targetId").and_then(Value::as_str) {
                    shared.tab_cap.closed(target);
                }
            }
            (Some("Target.detachedFromTarget"), _) => {
                if let Some(gone) = params.get("sessionId").and_then(Value::as_str) {
                    lock(&self.owners).remove(gone);
                }
                if let Some(target) = params.get("targetId").and_then(Value::as_str) {
                    lock(&self.wards).remove(target);
                    lock(&self.sessions).remove(target);
                }
            }
            _ => {}
        }
    }

    /// A frame or worker attached under a tab: it belongs to the tab's
    /// owner, and is policed before it runs ([`Self::police_child`]).
    fn attached(self: &Arc<Self>, parent: &str, params: &Value) {
        let owner = lock(&self.owners).get(parent).cloned();
        let Some(child) = params.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        let child_session = CdpSessionId::from_chromium(child);
        if let Some(owner) = owner {
            lock(&self.owners).insert(child_session.clone(), owner);
        }
        if let Some(target) = params
            .pointer("/targetInfo/targetId")
            .and_then(Value::as_str)
        {
            lock(&self.sessions).insert(TargetId::from_chromium(target), child_session);
        }
        let (link, child) = (Arc::clone(self), child.to_owned());
        let waiting = params
            .get("waitingForDebugger")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let frame = params.pointer("/targetInfo/type").and_then(Value::as_str) == Some("iframe");
        tokio::spawn(async move { link.police_child(&child, waiting, frame).await });
    }

    /// Chromium denied a download (the browser's download behaviour is
    /// `deny`): recorded as the page's, named by the tab it came from.
    fn download_denied(&self, params: &Value, shared: &Shared) {
        // A tab's main frame id is its target id: the session is the
        // tab's owner (a download from a subframe is named by URL only).
        let frame = params.get("frameId").and_then(Value::as_str);
        let owner = frame
            .and_then(|f| lock(&self.sessions).get(f).cloned())
            .and_then(|cdp| lock(&self.owners).get(&cdp).cloned());
        let text = |key: &str| params.get(key).and_then(Value::as_str).unwrap_or_default();
        let name: String = text("suggestedFilename").chars().take(128).collect();
        shared.reporter.report(
            BrowserRefusal::new(
                owner,
                Rule::RequestBlocked,
                format!(
                    "a download of {name:?} from {} was denied (browser-shell allows no downloads)",
                    shown(text("url"))
                ),
                Requester::Page,
            )
            .to(destination_of(text("url"))),
        );
    }

    /// A frame or worker attached under a policed tab: police it, then let
    /// it run. A frame that cannot be policed stays paused (it never loads);
    /// a worker loads no document, and its connections meet the egress
    /// proxy, so it runs on either way.
    async fn police_child(&self, child: &str, waiting: bool, frame: bool) {
        if let Err(e) = self.police(child).await {
            if frame {
                tracing::warn!(error = %e, "a frame could not be policed; it stays paused");
                return;
            }
            tracing::debug!(error = %e, "a worker's own requests are not policed");
        }
        if waiting
            && let Err(e) = self
                .call(Some(child), "Runtime.runIfWaitingForDebugger", json!({}))
                .await
        {
            tracing::warn!(error = %e, "a paused frame or worker could not be resumed");
        }
    }

    /// Let a paused request go on, or fail it, as the policy says.
    async fn decide(&self, cdp_session: &str, params: &Value, shared: &Arc<Shared>) {
        let Some(request_id) = params.get("requestId").and_then(Value::as_str) else {
            return;
        };
        let raw = params
            .pointer("/request/url")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = params
            .get("resourceType")
            .and_then(Value::as_str)
            .unwrap_or("Other");
        let refused = document_refused(raw, shared).await;
        let (method, answer) = match refused {
            None => ("Fetch.continueRequest", json!({"requestId": request_id})),
            Some(why) => {
                let owner = lock(&self.owners).get(cdp_session).cloned();
                shared.reporter.report(
                    BrowserRefusal::new(
                        owner,
                        Rule::RequestBlocked,
                        format!("a {kind} request to {} was blocked: {why}", shown(raw)),
                        Requester::Page,
                    )
                    .to(destination_of(raw)),
                );
                (
                    "Fetch.failRequest",
                    json!({"requestId": request_id, "errorReason": "BlockedByClient"}),
                )
            }
        };
        if let Err(e) = self.call(Some(cdp_session), method, answer).await {
            tracing::debug!(error = %e, "a paused request was gone before it was decided");
        }
    }
}

/// The frame an element owns, when it is a frame owner (`DOM.describeNode`'s
/// answer): focus inside a frame shows as its owner element outside it.
fn frame_owned(described: &Value) -> Option<String> {
    let node = described.get("node")?;
    let name = node.get("nodeName").and_then(Value::as_str)?;
    if !matches!(name, "IFRAME" | "FRAME" | "FENCEDFRAME") {
        return None;
    }
    node.get("frameId")
        .or_else(|| node.pointer("/contentDocument/frameId"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Why the whole policy refuses a document (a tab's or a frame's: the
/// warden pauses nothing else), if it does. Schemes that load nothing from
/// the network or the disk (`data:`, `blob:`, `about:`) pass.
async fn document_refused(raw: &str, shared: &Shared) -> Option<String> {
    let url = match Url::parse(raw) {
        Ok(url) => url,
        Err(e) => return Some(format!("its URL does not parse: {e}")),
    };
    if matches!(url.scheme(), "data" | "blob" | "about") {
        return None;
    }
    shared
        .rules
        .get()
        .url
        .check_url(&url, shared.resolver.as_ref())
        .await
        .err()
        .map(|refusal| format!("[{}] {}", refusal.rule, refusal.message))
}

/// Where a request to `raw` was going, if it names a host.
fn destination_of(raw: &str) -> Option<Destination> {
    Url::parse(raw)
        .ok()
        .and_then(|url| Destination::of_url(&url))
}
