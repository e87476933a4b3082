//! The browser gate: the only way from a confined agent-browser to Chromium.
//!
//! Chromium is not confined, and CDP can do what Landlock forbids (write a
//! download anywhere, open `file:` URLs, drive every tab). So the child may
//! not reach Chromium's DevTools port at all: its only allowed TCP port is
//! the gate's, on 127.0.0.1, and agent-browser is pointed at
//! `ws://127.0.0.1:<gate>/devtools/browser/<session>`. The gate
//! - relays each daemon's connection ([`relay`]): forwards only the CDP
//!   methods on its allowlist ([`methods`]), checks the URLs of the ones
//!   that navigate, denies downloads, and answers anything else with a CDP
//!   error that is audited ([`judge`]); on the way back, leaves out what
//!   belongs to other sessions ([`screen`]), all from what it knows of the
//!   connection ([`connection`]); answers itself what it knows exactly (the
//!   browser's version, a settled tab's URL: [`page_url`]);
//! - before agent-browser's first message reaches a tab, has its warden put
//!   the tab under the URL policy, so every request of every frame is
//!   decided before it leaves the browser ([`warden`]);
//! - gives each session a browser context of its own, whose connections
//!   all go out through the egress proxy, and shows a session only its
//!   own context's targets ([`contexts`]), lets it have at most
//!   `--max-tabs` pages ([`tab_cap`]) and names it in its window
//!   ([`label`]);
//! - while a call types secrets, lets its text reach only a focused frame
//!   on the secrets' hosts ([`typing`]).
//!
//! Plain HTTP (`/json/*`, which can open and close tabs) is not served: the
//! handshake fails. The session in the path must be the dialler's own, as
//! the kernel says through its uid ([`caller`]); with `--child-uids off` it
//! is the child's claim (docs/design.md, "The browser gate").

mod caller;
mod clipboard;
mod connection;
mod contexts;
mod error;
mod failed_loads;
mod in_flight;
mod judge;
mod kept;
mod label;
mod loading;
mod look;
mod methods;
mod page_url;
mod reading;
mod relay;
mod screen;
mod shared;
mod tab_cap;
mod typing;
mod warden;

pub(crate) use error::GateError;
pub(crate) use failed_loads::PAGE_WORD_WITHIN;

pub(crate) use reading::{Readers, Reading};
pub(crate) use typing::SecretTyping;

use shared::{ChromiumSocket, Shared};

/// What the rest of the server asks of the gate once it serves: which
/// sessions type secrets or only read, and ending a session's browser
/// context.
#[derive(Clone, Default)]
pub(crate) struct Handle {
    pub(crate) typing: SecretTyping,
    pub(crate) reading: Readers,
    serving: Arc<std::sync::OnceLock<Arc<Shared>>>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").finish_non_exhaustive()
    }
}

impl Handle {
    /// Dispose of `daemon`'s browser context: every tab, popup, worker,
    /// cookie and cache entry of the session goes with it, and its egress
    /// listener closes. Returns what could not be done.
    pub(crate) async fn end_session(&self, daemon: &DaemonName) -> Result<(), GateError> {
        match self.serving.get() {
            Some(shared) => shared.contexts.dispose(shared, daemon).await,
            None => Ok(()),
        }
    }

    /// Did a page of `daemon` report a failed load of `destination` after
    /// `refused_at`, when the egress proxy refused a connection there?
    pub(crate) fn page_reported(
        &self,
        daemon: &str,
        destination: &crate::browser_refusals::Destination,
        refused_at: std::time::Instant,
    ) -> bool {
        self.serving
            .get()
            .is_some_and(|shared| shared.failed_loads.claim(daemon, destination, refused_at))
    }

    /// Is `target` in `daemon`'s own browser context, as Chromium says?
    /// Its announcement of the page, when the gate counted it, says so
    /// without asking again: every look at a session's tab starts here.
    async fn owns_tab(&self, daemon: &DaemonName, target: &TargetId) -> bool {
        let Some(shared) = self.serving.get() else {
            return false;
        };
        let Some(context) = shared.contexts.known(daemon) else {
            return false;
        };
        if let Some(announced) = shared.tab_cap.context_of(target) {
            return announced == context;
        }
        contexts::context_of(shared, target)
            .await
            .is_ok_and(|of| of == context)
    }

    /// As the server stops keeping its sessions (`--on-exit keep`): the
    /// pages of their contexts are frozen until the next server adopts them.
    pub(crate) async fn freeze_kept(&self) {
        if let Some(shared) = self.serving.get() {
            kept::freeze(shared).await;
        }
    }

    /// At start, for the daemons adopted from a previous server: each
    /// context's proxy port is taken back and its pages run again.
    pub(crate) async fn reclaim_kept(&self, adopted: &[DaemonName]) {
        if let Some(shared) = self.serving.get() {
            kept::reclaim(shared, adopted).await;
        }
    }

    /// At start: dispose of the browser contexts a previous server kept for
    /// daemons that are no longer running (`running` names those that are).
    pub(crate) async fn end_unclaimed(&self, running: &[DaemonName]) {
        if let Some(shared) = self.serving.get() {
            shared.contexts.dispose_unclaimed(shared, running).await;
        }
    }
}

impl crate::daemons::Tabs for Handle {
    fn owns<'a>(
        &'a self,
        daemon: &'a DaemonName,
        target: &'a TargetId,
    ) -> futures_util::future::BoxFuture<'a, bool> {
        Box::pin(self.owns_tab(daemon, target))
    }

    fn label<'a>(
        &'a self,
        daemon: &'a DaemonName,
        session: &'a str,
    ) -> futures_util::future::BoxFuture<'a, bool> {
        Box::pin(async move {
            let Some(shared) = self.serving.get() else {
                return false;
            };
            match label::show_session(shared, daemon, session).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!(error = %e, %session, "the session's window could not be labelled");
                    false
                }
            }
        })
    }

    fn look<'a>(
        &'a self,
        daemon: &'a DaemonName,
        target: &'a TargetId,
        element: Option<crate::daemons::Named<'a>>,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<crate::daemons::PageLook, crate::daemons::LookError>,
    > {
        Box::pin(async move {
            let shared = self
                .serving
                .get()
                .ok_or(crate::daemons::LookError::NoGate)?;
            look::look(shared, daemon, target, element)
                .await
                .map_err(|e| crate::daemons::LookError::Browser(e.to_string()))
        })
    }

    fn shoot<'a>(
        &'a self,
        daemon: &'a DaemonName,
        target: &'a TargetId,
    ) -> futures_util::future::BoxFuture<'a, Result<crate::daemons::Shot, crate::daemons::LookError>>
    {
        Box::pin(async move {
            let shared = self
                .serving
                .get()
                .ok_or(crate::daemons::LookError::NoGate)?;
            look::shoot(shared, daemon, target)
                .await
                .map_err(|e| crate::daemons::LookError::Browser(e.to_string()))
        })
    }
}

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{
    handshake::server::{ErrorResponse, Request, Response},
    http::StatusCode,
    protocol::WebSocketConfig,
};

use crate::{
    browser_refusals::{BrowserRefusal, Reporter},
    chromium_ids::TargetId,
    egress::Egress,
    policy::{resolve::Resolve, rules},
    session_id::DaemonName,
    sync::lock,
};

/// How long a connection may take to finish its WebSocket handshake: one
/// that never does would hold a descriptor for good.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections open at once, handshaking or relaying: a daemon holds one
/// (for a while two, when it reconnects), so this is room for the largest
/// pool and session limits with margin, and far below the descriptors the
/// server has (it raises its soft limit at start).
const MAX_CONNECTIONS: usize = 256;

/// Connections one session may hold at once.
const MAX_CONNECTIONS_PER_SESSION: usize = 4;

/// A bound on one message from agent-browser (its largest are `fill` and
/// `type` texts, bounded by the tool's own argv limits).
const MAX_DAEMON_MESSAGE: usize = 1 << 20;

/// The gate's listener, bound before the child's confinement is built (its
/// port is the one TCP port the child may connect to).
#[derive(Debug)]
pub(crate) struct Gate {
    listener: std::net::TcpListener,
    port: u16,
    upstream_port: u16,
    /// The port the previous server's gate had, when known.
    previous_port: Option<u16>,
    /// Pages one session may have open at once.
    max_tabs: usize,
    /// Follow each tab's loads, for the evidence's looks.
    watch_pages: bool,
}

/// Pages one session may have open at once unless told otherwise:
/// agent-browser's two (its tab and a spare) and two popups, room for a
/// sign-in or payment window.
pub(crate) const DEFAULT_MAX_TABS: usize = 4;

impl Gate {
    /// Listen on `127.0.0.1:<port>` (0: any free port) for daemons, to
    /// relay to Chromium's DevTools on `upstream_port`.
    pub(crate) fn bind(
        port: u16,
        upstream_port: u16,
        previous_port: Option<u16>,
    ) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        Ok(Self {
            listener,
            port,
            upstream_port,
            previous_port,
            max_tabs: DEFAULT_MAX_TABS,
            watch_pages: false,
        })
    }

    /// Let each session have at most `max` pages open at once.
    pub(crate) fn with_max_tabs(mut self, max: usize) -> Self {
        self.max_tabs = max;
        self
    }

    /// Follow each tab's loads (the warden enables the Page domain), so a
    /// look for the evidence waits for a navigation an action started.
    pub(crate) fn watching_pages(mut self, watch: bool) -> Self {
        self.watch_pages = watch;
        self
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Is this the port the previous server's daemons were started with?
    /// Only then can they reach Chromium again.
    pub(crate) fn same_port_as_before(&self) -> bool {
        self.previous_port == Some(self.port)
    }

    /// Serve until the runtime ends. Refusals come out of the returned
    /// receiver, for the audit writer. `contexts_memo`, a server-owned
    /// file, keeps the sessions' browser contexts for a later server.
    pub(crate) fn serve(
        self,
        rules: Arc<rules::Current>,
        resolver: Arc<dyn Resolve>,
        socket_dir: crate::daemons::SocketDir,
        identities: Arc<crate::daemons::Identities>,
        contexts_memo: Option<std::path::PathBuf>,
        handle: &Handle,
    ) -> std::io::Result<mpsc::Receiver<BrowserRefusal>> {
        let listener = tokio::net::TcpListener::from_std(self.listener)?;
        let (reporter, rx) = Reporter::channel();
        let shared = Arc::new(Shared {
            upstream_port: self.upstream_port,
            egress: Egress::new(Arc::clone(&rules), Arc::clone(&resolver), reporter.clone()),
            rules,
            resolver,
            reporter,
            warden: warden::Warden::new(),
            contexts: contexts::Contexts::new(contexts_memo),
            tab_cap: tab_cap::TabCap::new(self.max_tabs),
            failed_loads: failed_loads::FailedLoads::default(),
            typing: handle.typing.clone(),
            reading: handle.reading.clone(),
            socket_dir,
            identities,
            connections: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
            per_session: Mutex::default(),
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .map_err(std::io::Error::other)?,
            watch_pages: self.watch_pages,
        });
        let _ = handle.serving.set(Arc::clone(&shared));
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        // Past the cap, a connection is closed at once: a
                        // flood of them cannot use up the server's descriptors.
                        match Arc::clone(&shared.connections).try_acquire_owned() {
                            Ok(permit) => {
                                tokio::spawn(accept(stream, Arc::clone(&shared), permit));
                            }
                            Err(_) => tracing::debug!(
                                "the browser gate is at {MAX_CONNECTIONS} connections; one more was closed"
                            ),
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the browser gate could not accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        Ok(rx)
    }
}

/// One connection: a WebSocket handshake on the gate's path, then the relay.
// The callback's error type is tungstenite's HTTP response, not ours to shrink.
#[allow(clippy::result_large_err)]
async fn accept(
    stream: tokio::net::TcpStream,
    shared: Arc<Shared>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    // Small CDP messages, answered one by one: Nagle would hold each for a
    // delayed ACK (40 ms), several times per command.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set on a gate connection");
    }
    let caller = match (stream.peer_addr(), stream.local_addr()) {
        (Ok(peer), Ok(local)) => caller::Caller::of(&shared.identities, peer, local),
        _ => caller::Caller::Stranger(None),
    };
    let mut session = None;
    let handshake = tokio_tungstenite::accept_hdr_async_with_config(
        stream,
        |request: &Request, response: Response| {
            let name = session_of(request.uri().path()).ok_or_else(not_found)?;
            if let Some(why) = caller.refuses(&name) {
                tracing::warn!(%why, "the browser gate refused a connection");
                shared.reporter.report(BrowserRefusal::new(
                    Some(caller.blame(&name)),
                    crate::refusal::Rule::GateIdentity,
                    why,
                    crate::browser_refusals::Requester::Unknown,
                ));
                return Err(forbidden());
            }
            let slot = SessionSlot::take(&shared, &name).ok_or_else(too_many)?;
            session = Some((name, slot));
            Ok(response)
        },
        Some(daemon_config()),
    );
    match (
        tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await,
        session,
    ) {
        (Ok(Ok(socket)), Some((session, _slot))) => relay::relay(socket, session, shared).await,
        (Ok(Err(e)), _) => tracing::debug!(error = %e, "the browser gate refused a connection"),
        (Err(_), _) => tracing::debug!("a gate connection did not finish its handshake in time"),
        (Ok(Ok(_)), None) => {}
    }
}

/// One of a session's connections ([`MAX_CONNECTIONS_PER_SESSION`]),
/// given back when dropped.
struct SessionSlot {
    shared: Arc<Shared>,
    session: String,
}

impl SessionSlot {
    fn take(shared: &Arc<Shared>, session: &str) -> Option<Self> {
        let mut counts = lock(&shared.per_session);
        let count = counts.entry(session.to_owned()).or_default();
        if *count >= MAX_CONNECTIONS_PER_SESSION {
            return None;
        }
        *count += 1;
        Some(Self {
            shared: Arc::clone(shared),
            session: session.to_owned(),
        })
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut counts = lock(&self.shared.per_session);
        if let Some(count) = counts.get_mut(&self.session) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.session);
            }
        }
    }
}

/// The daemon named by a gate path, when the path is the gate's.
fn session_of(path: &str) -> Option<DaemonName> {
    DaemonName::checked(path.strip_prefix(crate::daemons::GATE_PATH_PREFIX)?)
}

fn not_found() -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(
        "browser-shell's browser gate serves only its DevTools WebSocket\n".into(),
    ));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

fn forbidden() -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(
        "this connection may name only its own session at the browser gate\n".into(),
    ));
    *response.status_mut() = StatusCode::FORBIDDEN;
    response
}

fn too_many() -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(format!(
        "this session already holds {MAX_CONNECTIONS_PER_SESSION} connections to the browser gate\n"
    )));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response
}

fn daemon_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(shared::READ_CHUNK)
        .max_message_size(Some(MAX_DAEMON_MESSAGE))
        .max_frame_size(Some(MAX_DAEMON_MESSAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_gate_path_with_a_daemon_name_is_served() {
        assert_eq!(session_of("/devtools/browser/u1").as_deref(), Some("u1"));
        assert_eq!(
            session_of("/devtools/browser/_0a1b-c").as_deref(),
            Some("_0a1b-c")
        );
        for refused in [
            "/json/version",
            "/json/new?file:///etc/passwd",
            "/devtools/browser/",
            "/devtools/browser/a/b",
            "/devtools/browser/a.b",
            "/devtools/page/ABC",
        ] {
            assert_eq!(session_of(refused), None, "{refused}");
        }
    }
}
