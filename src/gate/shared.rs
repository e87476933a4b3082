//! What every connection of the gate shares: the rules, the warden, each
//! session's browser context, its tabs and egress, who may name which
//! session; and the gate's own way to Chromium's browser endpoint. Each
//! submodule takes the part it needs from here.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::{SecretTyping, contexts, error::GateError, failed_loads, tab_cap, warden};
use crate::{
    browser_refusals::Reporter,
    egress::Egress,
    policy::{resolve::Resolve, rules},
};

/// What every connection of the gate shares.
pub(super) struct Shared {
    pub(super) upstream_port: u16,
    /// The rules in force, read per decision (a reload applies at once).
    pub(super) rules: Arc<rules::Current>,
    pub(super) resolver: Arc<dyn Resolve>,
    pub(super) reporter: Reporter,
    pub(super) warden: warden::Warden,
    /// Each session's browser context.
    pub(super) contexts: contexts::Contexts,
    /// Each session's open pages, at most `--max-tabs`.
    pub(super) tab_cap: tab_cap::TabCap,
    /// The loads the sessions' pages said failed.
    pub(super) failed_loads: failed_loads::FailedLoads,
    /// Where each context's connections go out.
    pub(super) egress: Egress,
    /// Sessions whose call is typing secrets: their text input waits for
    /// the focused frame's check.
    pub(super) typing: SecretTyping,
    /// Sessions whose call only reads: their commands on a tab wait for
    /// its navigation to commit.
    pub(super) reading: super::Readers,
    /// The daemons' socket dir, where each writes its pinned tab's id.
    pub(super) socket_dir: crate::daemons::SocketDir,
    /// Each daemon's uid: who may name which session.
    pub(super) identities: Arc<crate::daemons::Identities>,
    /// Room for more connections ([`super::MAX_CONNECTIONS`]).
    pub(super) connections: Arc<tokio::sync::Semaphore>,
    /// Connections per session ([`super::MAX_CONNECTIONS_PER_SESSION`]).
    pub(super) per_session: Mutex<HashMap<String, usize>>,
    pub(super) http: reqwest::Client,
    /// The warden follows each tab's loads (for the evidence's looks).
    pub(super) watch_pages: bool,
}

/// A WebSocket to Chromium's browser endpoint.
pub(super) type ChromiumSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl Shared {
    /// A connection of browser-shell's own to Chromium's browser endpoint.
    pub(super) async fn connect_browser(&self) -> Result<ChromiumSocket, GateError> {
        let url = self.browser_url().await?;
        let (socket, _) = tokio_tungstenite::connect_async_with_config(
            url.as_str(),
            Some(upstream_config()),
            // Small CDP messages, answered one by one: Nagle would hold each
            // for a delayed ACK (40 ms).
            true,
        )
        .await
        .map_err(|e| format!("cannot reach Chromium's DevTools: {e}"))?;
        Ok(socket)
    }

    /// Chromium's browser-level DevTools WebSocket URL (it changes when
    /// Chromium restarts, so it is asked for each connection).
    async fn browser_url(&self) -> Result<String, GateError> {
        let url = format!("http://127.0.0.1:{}/json/version", self.upstream_port);
        let answer = self
            .http
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map_err(|e| {
                format!(
                    "Chromium's DevTools on port {} did not answer: {e}",
                    self.upstream_port
                )
            })?;
        let body = answer
            .bytes()
            .await
            .map_err(|e| format!("Chromium's /json/version could not be read: {e}"))?;
        let version: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| format!("Chromium's /json/version is not JSON: {e}"))?;
        let ws = version
            .get("webSocketDebuggerUrl")
            .and_then(serde_json::Value::as_str)
            .ok_or("Chromium's /json/version has no webSocketDebuggerUrl")?;
        // Only ever loopback: the port is Chromium's, the path its browser id.
        let path = ws
            .split_once("/devtools/browser/")
            .map(|(_, id)| id)
            .filter(|id| {
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
            .ok_or("Chromium's webSocketDebuggerUrl is not a browser endpoint")?;
        Ok(format!(
            "ws://127.0.0.1:{}/devtools/browser/{path}",
            self.upstream_port
        ))
    }
}

/// Chromium's messages carry screenshots; tungstenite's default bound
/// (64 MiB) is kept for them.
fn upstream_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(READ_CHUNK)
}

/// Bytes read from a gate socket at a time. tungstenite zeroes the whole
/// chunk before each read, even one that finds nothing: at its default
/// (128 KiB) that was the largest part of the gate's own work per CDP
/// message, mostly a few hundred bytes; a screenshot takes more reads instead.
pub(super) const READ_CHUNK: usize = 16 << 10;
