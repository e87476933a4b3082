//! The contexts a stopped server keeps for the next one (`--on-exit
//! keep`). A context's only way out is its egress listener's port, which
//! dies with the server; Chromium keeps the context's proxy setting. So as
//! the server stops, every page of a kept context is frozen (it runs no
//! script and starts no request), and the next server takes each port back
//! at start, before anything else can, and lets the pages run again. A port
//! someone else took meanwhile means that context is disposed of.
//!
//! What remains (docs/design.md, "Kept contexts"): between the stop and the
//! next start a kept context's workers are not frozen, and whatever listens
//! on its port then receives what they send.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Shared, contexts};
use crate::chromium_ids::TargetId;
use crate::session_id::DaemonName;

/// As the server stops keeping its sessions: every page of every context
/// it made, frozen.
pub(super) async fn freeze(shared: &Arc<Shared>) {
    for (daemon, context) in shared.contexts.all_known() {
        set_pages(shared, &daemon, &context, "frozen").await;
    }
}

/// At start, for the daemons adopted from a previous server: take each
/// remembered context's port back and let its pages run; dispose of a
/// context whose port another process holds now.
pub(super) async fn reclaim(shared: &Arc<Shared>, adopted: &[DaemonName]) {
    let existing = shared
        .warden
        .browser_call(shared, "Target.getBrowserContexts", json!({}))
        .await
        .unwrap_or_default();
    let exists = |context: &str| {
        existing
            .get("browserContextIds")
            .and_then(Value::as_array)
            .is_some_and(|ids| ids.iter().any(|id| id.as_str() == Some(context)))
    };
    for daemon in adopted {
        let Some((context, port)) = shared.contexts.remembered(daemon) else {
            continue;
        };
        if shared.contexts.known(daemon).is_some() {
            continue;
        }
        if !exists(&context) {
            // Chromium restarted: nothing of it is left to adopt.
            shared.contexts.forget(daemon);
            continue;
        }
        match shared.egress.open_on(daemon, port) {
            Ok(_) => {
                shared.contexts.adopt(daemon, &context);
                set_pages(shared, daemon, &context, "active").await;
                tracing::info!(session = %daemon, port, "a kept browser context is adopted, its proxy port taken back");
            }
            Err(e) => {
                tracing::warn!(error = %e, session = %daemon, port, "a kept browser context's proxy port is held by another process: the context is disposed of");
                if let Err(e) = contexts::dispose_context(shared, &context).await {
                    tracing::warn!(error = %e, "a kept browser context was not disposed of");
                }
                shared.contexts.forget(daemon);
            }
        }
    }
}

/// Put every page of `context` in the web lifecycle `state` (`frozen`,
/// `active`). Best effort: a page gone meanwhile needs nothing.
async fn set_pages(
    shared: &Arc<Shared>,
    daemon: &DaemonName,
    context: &contexts::ContextId,
    state: &str,
) {
    let Ok(listed) = shared
        .warden
        .browser_call(shared, "Target.getTargets", json!({}))
        .await
    else {
        return;
    };
    let pages = listed
        .get("targetInfos")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("page"))
        .filter(|t| contexts::in_context(t, Some(context)))
        .filter_map(|t| t.get("targetId").and_then(Value::as_str))
        .map(TargetId::from_chromium);
    for page in pages {
        let params = json!({"state": state});
        let set = shared
            .warden
            .page_call(shared, &page, daemon, "Page.setWebLifecycleState", params)
            .await;
        if let Err(e) = set {
            tracing::debug!(error = %e, state, "a kept page's lifecycle was not set");
        }
    }
}
