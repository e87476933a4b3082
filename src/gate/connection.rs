//! What the gate knows of one daemon's connection: which CDP sessions are
//! which targets, which targets it was shown, which answers it awaits and
//! which commands are still in flight. The relay writes it as messages pass
//! both ways ([`super::relay`], [`super::screen`]); nothing else reads it.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

use serde_json::Value;

use super::{in_flight::InFlight, page_url::PageUrls};
use crate::chromium_ids::{CdpSessionId, TargetId};
use crate::session_id::DaemonName;
use crate::sync::lock;

/// A tab (or frame, or worker) agent-browser is attached to.
#[derive(Debug, Clone)]
pub(super) struct Attached {
    pub(super) target_id: TargetId,
    pub(super) kind: String,
}

/// A command of agent-browser's whose answer the relay reads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Awaited {
    /// `Target.createTarget`: the new tab is shown to this connection.
    NewTab,
    /// `Target.getTargets`: targets of other contexts are left out.
    TargetList,
    /// `Browser.getVersion`: kept, to answer the next ones
    /// ([`Connection::version_answer`]).
    Version,
}

/// What the relay knows of one daemon's connection.
pub(super) struct Connection {
    pub(super) session: DaemonName,
    /// agent-browser's CDP sessions, by id.
    pub(super) attached: Mutex<HashMap<CdpSessionId, Attached>>,
    /// CDP sessions on tabs the relay hid (another session claimed the tab
    /// between agent-browser's attach and Chromium's announcement of it).
    pub(super) hidden: Mutex<HashSet<CdpSessionId>>,
    /// agent-browser's commands whose answers are read, by id.
    pub(super) awaited: Mutex<HashMap<u64, Awaited>>,
    /// Targets this connection was shown (all in the session's context).
    pub(super) shown: Mutex<HashSet<TargetId>>,
    /// Tabs this connection opened: only the first gets a window of its own.
    pub(super) opened: std::sync::atomic::AtomicUsize,
    /// Commands on tabs not answered yet, and the CDP sessions that ended.
    pub(super) in_flight: Mutex<InFlight>,
    /// Chromium's answer to `Browser.getVersion`, once it gave one.
    pub(super) version: Mutex<Option<Value>>,
    /// Each tab's committed URL, where the events said it exactly.
    pub(super) pages: Mutex<PageUrls>,
}

impl Connection {
    pub(super) fn new(session: DaemonName) -> Self {
        Self {
            session,
            attached: Mutex::default(),
            hidden: Mutex::default(),
            awaited: Mutex::default(),
            shown: Mutex::default(),
            opened: std::sync::atomic::AtomicUsize::new(0),
            in_flight: Mutex::default(),
            version: Mutex::default(),
            pages: Mutex::default(),
        }
    }

    /// The CDP sessions this connection holds on `target`.
    pub(super) fn sessions_on(&self, target: &str) -> Vec<CdpSessionId> {
        lock(&self.attached)
            .iter()
            .filter(|(_, attached)| *attached.target_id == *target)
            .map(|(cdp_session, _)| cdp_session.clone())
            .collect()
    }

    /// The gate's own answer to a `Browser.getVersion` of the browser's
    /// (no CDP session), once Chromium has answered one on this
    /// connection. agent-browser sends it before every command as a
    /// liveness probe; the answer never changes while the connection
    /// lives, and this connection ends with Chromium's, so the gate's
    /// answer says the same. Asked of Chromium, it waits behind whatever
    /// the browser's UI thread is doing, often input the last command sent
    /// (docs/design.md, "The browser gate").
    pub(super) fn version_answer(&self, request: &Value) -> Option<String> {
        if request.get("method").and_then(Value::as_str) != Some("Browser.getVersion")
            || request.get("sessionId").is_some()
        {
            return None;
        }
        let result = lock(&self.version).clone()?;
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        Some(serde_json::json!({ "id": id, "result": result }).to_string())
    }

    /// The target `request` is for (its CDP session's), if it names one
    /// this connection attached to.
    pub(super) fn target_of(&self, request: &Value) -> Option<Attached> {
        let cdp_session = request.get("sessionId").and_then(Value::as_str)?;
        lock(&self.attached).get(cdp_session).cloned()
    }

    /// `request` goes to Chromium: a command on a tab is awaited.
    pub(super) fn sent(&self, request: &Value) {
        if let (Some(id), Some(cdp_session)) = (
            request.get("id").and_then(Value::as_u64),
            request.get("sessionId").and_then(Value::as_str),
        ) {
            lock(&self.in_flight).sent(id, cdp_session);
        }
    }
}
