//! Chromium → daemon: what the relay reads from each of Chromium's messages
//! (which CDP session is which target, which new tab is the session's, the
//! browser's version and each tab's URL to answer from) and what it leaves out
//! (targets of other sessions' browser contexts, in lists and in events).
//! Pure over the connection's state: no socket, no browser.

use serde_json::Value;

use super::{
    connection::{Attached, Awaited, Connection},
    contexts::{ContextId, in_context},
    in_flight::session_gone_answer,
};
use crate::chromium_ids::{CdpSessionId, TargetId};
use crate::sync::lock;

/// What becomes of one message from Chromium.
pub(super) enum Screened {
    Unchanged,
    Rewritten(Value),
    /// A CDP session ended (unchanged), and these answers are owed for the
    /// commands on it Chromium will not answer.
    Detached(Vec<String>),
    Dropped,
}

/// Read what the relay needs from one message of Chromium's: which CDP
/// session is which target, which new tab is this session's; leave other
/// sessions' tabs out of lists and events. `own_context` says which browser
/// context is the session's (asked only of a message that names targets).
pub(super) fn screen(
    text: &str,
    conn: &Connection,
    own_context: impl Fn() -> Option<ContextId>,
) -> Screened {
    // Cheap tests first: most messages are none of these. An answer no one
    // awaits is not read at all (the large ones, an accessibility tree or a
    // screenshot, are answers); an event only if it may be one read here.
    let awaiting = !lock(&conn.awaited).is_empty();
    if !awaiting && text.starts_with("{\"id\":") {
        return Screened::Unchanged;
    }
    let read_here = ["\"Target.", "\"Page.", "\"Inspector."];
    if !awaiting && !read_here.iter().any(|domain| text.contains(domain)) {
        return Screened::Unchanged;
    }
    let Ok(message) = serde_json::from_str::<Value>(text) else {
        return Screened::Unchanged;
    };
    if let Some(id) = message.get("id").and_then(Value::as_u64) {
        return screen_answer(id, message, conn, &own_context);
    }
    lock(&conn.pages).event(&message, |target| conn.sessions_on(target));
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match message.get("method").and_then(Value::as_str) {
        Some("Target.targetCreated" | "Target.targetInfoChanged") => {
            let info = params.get("targetInfo").unwrap_or(&Value::Null);
            visible_or_dropped(visible(info, conn, &own_context))
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
            if !visible(info, conn, &own_context) {
                // Auto-attach reached a target of another context: its
                // CDP session is not this daemon's, and messages on it are
                // declined.
                if let Some(cdp_session) = params.get("sessionId").and_then(Value::as_str) {
                    lock(&conn.hidden).insert(CdpSessionId::from_chromium(cdp_session));
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

/// The answer to command `id`: a new tab it opened is shown to this
/// connection; a target list keeps the session's own targets only.
fn screen_answer(
    id: u64,
    mut message: Value,
    conn: &Connection,
    own_context: impl Fn() -> Option<ContextId>,
) -> Screened {
    let awaited = lock(&conn.awaited).remove(&id);
    match awaited {
        Some(Awaited::NewTab) => {
            if let Some(target) = message.pointer("/result/targetId").and_then(Value::as_str) {
                lock(&conn.shown).insert(TargetId::from_chromium(target));
            }
            Screened::Unchanged
        }
        Some(Awaited::TargetList) => {
            if let Some(Value::Array(infos)) = message.pointer_mut("/result/targetInfos") {
                infos.retain(|info| visible(info, conn, &own_context));
            }
            Screened::Rewritten(message)
        }
        Some(Awaited::Version) => {
            if let Some(result) = message.get("result") {
                *lock(&conn.version) = Some(result.clone());
            }
            Screened::Unchanged
        }
        None => Screened::Unchanged,
    }
}

/// Is the target `info` in the session's context? If so, this connection
/// has been shown it.
fn visible(info: &Value, conn: &Connection, own_context: impl Fn() -> Option<ContextId>) -> bool {
    let context = own_context();
    let shown = in_context(info, context.as_ref());
    if shown && let Some(target) = info.get("targetId").and_then(Value::as_str) {
        lock(&conn.shown).insert(TargetId::from_chromium(target));
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
        CdpSessionId::from_chromium(cdp_session),
        Attached {
            target_id: TargetId::from_chromium(&field("targetId")),
            kind: field("type"),
        },
    );
}

#[cfg(test)]
#[path = "screen_tests.rs"]
mod tests;
