//! Each session's browser context: its own cookies, storage, cache,
//! service workers and tabs, and a proxy that is browser-shell's egress.
//!
//! The gate makes a session's context when the session's agent-browser
//! first opens a tab (every `Target.createTarget` is put into it), with
//! `proxyServer` naming the session's egress listener and loopback not
//! bypassed: whatever the context's pages, workers or popups connect to,
//! the egress decides. A session is shown only its own context's targets,
//! and may touch no other. Ending the session disposes of the context, and
//! nothing of it outlives the session (docs/design.md, "Browser contexts").

use super::error::GateError;
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::Shared;
pub(crate) use crate::chromium_ids::ContextId;
use crate::{session_id::DaemonName, sync::lock};

/// A session's context, made once by whichever connection needs it first.
type Made = Arc<OnceCell<Result<ContextId, GateError>>>;

/// The sessions' contexts, by daemon name.
#[derive(Debug)]
pub(super) struct Contexts {
    made: Mutex<HashMap<DaemonName, Made>>,
    memo: Memo,
    /// Where a new context's window goes: over the browser's first window.
    window: OnceCell<Option<Value>>,
}

/// What a context was made with, kept in the state dir: a daemon that
/// outlives this server keeps its tab in that context, whose proxy port
/// only a later server that listens on it again can serve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Remembered {
    context: ContextId,
    port: u16,
}

/// The remembered contexts, and the server-owned file they are kept in
/// (`None`: not kept, as for an operator's one-off gate).
#[derive(Debug)]
struct Memo {
    file: Option<PathBuf>,
    entries: Mutex<HashMap<DaemonName, Remembered>>,
}

impl Memo {
    fn load(file: Option<PathBuf>) -> Self {
        let entries = file
            .as_deref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Self {
            file,
            entries: Mutex::new(entries),
        }
    }

    fn get(&self, session: &DaemonName) -> Option<Remembered> {
        lock(&self.entries).get(session).cloned()
    }

    /// Remember (or, with `None`, forget) `session`'s context; the file is
    /// replaced whole, so a crash leaves the old version or the new one.
    fn set(&self, session: &DaemonName, remembered: Option<Remembered>) {
        let mut entries = lock(&self.entries);
        match remembered {
            Some(r) => entries.insert(session.to_owned(), r),
            None => entries.remove(session),
        };
        let Some(file) = &self.file else { return };
        let bytes = serde_json::to_vec(&*entries).unwrap_or_default();
        if let Err(e) = crate::daemons::write_memo(file, &bytes) {
            tracing::warn!(error = %e, file = %file.display(), "the sessions' browser contexts could not be remembered; a later server cannot adopt their tabs");
        }
    }
}

impl Contexts {
    /// No context made yet; those remembered in `memo` (a previous
    /// server's) may be adopted.
    pub(super) fn new(memo: Option<PathBuf>) -> Self {
        Self {
            made: Mutex::default(),
            memo: Memo::load(memo),
            window: OnceCell::new(),
        }
    }

    /// The bounds of the window the browser started with (headed, on a
    /// screen someone watches), asked once: each context opens a window of
    /// its own, and it is given the same place and size, so the person
    /// watching sees the session's page where the browser's was. `None`
    /// when there is no such window to copy (headless, or none left).
    pub(super) async fn window_bounds(&self, shared: &Arc<Shared>) -> Option<Value> {
        self.window
            .get_or_init(|| async {
                let listed = shared
                    .warden
                    .browser_call(shared, "Target.getTargets", json!({}))
                    .await
                    .ok()?;
                let first = listed
                    .get("targetInfos")?
                    .as_array()?
                    .iter()
                    .find(|t| t.get("type").and_then(Value::as_str) == Some("page"))?
                    .get("targetId")?
                    .clone();
                let window = shared
                    .warden
                    .browser_call(
                        shared,
                        "Browser.getWindowForTarget",
                        json!({"targetId": first}),
                    )
                    .await
                    .ok()?;
                window.get("bounds").cloned()
            })
            .await
            .clone()
    }

    /// `session`'s context id, made now (with its egress listener) unless
    /// it exists.
    pub(super) async fn of(
        &self,
        shared: &Arc<Shared>,
        session: &DaemonName,
    ) -> Result<ContextId, GateError> {
        let cell = Arc::clone(lock(&self.made).entry(session.to_owned()).or_default());
        let made = cell
            .get_or_init(|| async {
                let (context, port) = make(shared, session).await?;
                let remembered = Remembered {
                    context: context.clone(),
                    port,
                };
                self.memo.set(session, Some(remembered));
                Ok(context)
            })
            .await
            .clone();
        if made.is_err() {
            // Not kept: the next tab the session opens tries again.
            lock(&self.made).remove(session);
            shared.egress.close(session);
        }
        made
    }

    /// Every context made here, with its session.
    pub(super) fn all_known(&self) -> Vec<(DaemonName, ContextId)> {
        lock(&self.made)
            .iter()
            .filter_map(|(session, cell)| {
                Some((session.clone(), cell.get()?.as_ref().ok()?.clone()))
            })
            .collect()
    }

    /// The context and proxy port a previous server remembered for
    /// `session`.
    pub(super) fn remembered(&self, session: &DaemonName) -> Option<(ContextId, u16)> {
        self.memo.get(session).map(|r| (r.context, r.port))
    }

    /// `context`, a previous server's, is `session`'s now.
    pub(super) fn adopt(&self, session: &DaemonName, context: &ContextId) {
        let made = Arc::new(OnceCell::new_with(Some(Ok(context.to_owned()))));
        lock(&self.made).insert(session.to_owned(), made);
    }

    /// No context of `session`'s is remembered any more.
    pub(super) fn forget(&self, session: &DaemonName) {
        self.memo.set(session, None);
    }

    /// `session`'s context id, if it has been made.
    pub(super) fn known(&self, session: &DaemonName) -> Option<ContextId> {
        let cell = lock(&self.made).get(session).cloned()?;
        cell.get()?.as_ref().ok().cloned()
    }

    /// Does `context` belong to any session of this server?
    fn is_ours(&self, context: &ContextId) -> bool {
        self.session_of(context).is_some()
    }

    /// The session whose context `context` is, if it is one of this
    /// server's.
    pub(super) fn session_of(&self, context: &ContextId) -> Option<DaemonName> {
        lock(&self.made)
            .iter()
            .find(|(_, cell)| cell.get().is_some_and(|m| m.as_ref().ok() == Some(context)))
            .map(|(session, _)| session.clone())
    }

    /// Dispose of `session`'s context (closing everything in it) and close
    /// its egress listener.
    pub(super) async fn dispose(
        &self,
        shared: &Arc<Shared>,
        session: &DaemonName,
    ) -> Result<(), GateError> {
        let made = lock(&self.made).remove(session);
        let context = made
            .and_then(|cell| cell.get().and_then(|m| m.as_ref().ok().cloned()))
            .or_else(|| self.memo.get(session).map(|r| r.context));
        self.memo.set(session, None);
        let disposed = match context {
            Some(context) => dispose_context(shared, &context).await,
            None => Ok(()),
        };
        shared.egress.close(session);
        disposed
    }

    /// Dispose of the contexts a previous server remembered for daemons
    /// that are not running any more (`running`: those that are): no
    /// daemon will come back for them.
    pub(super) async fn dispose_unclaimed(&self, shared: &Arc<Shared>, running: &[DaemonName]) {
        let unclaimed: Vec<(DaemonName, Remembered)> = lock(&self.memo.entries)
            .iter()
            .filter(|(session, _)| !running.contains(session))
            .map(|(session, r)| (session.clone(), r.clone()))
            .collect();
        for (session, remembered) in unclaimed {
            if self.known(&session).is_some() {
                continue;
            }
            if let Err(e) = dispose_context(shared, &remembered.context).await {
                tracing::debug!(error = %e, "a previous server's browser context was gone already");
            }
            self.memo.set(&session, None);
        }
    }

    /// A daemon that connects while its session has no context here may
    /// still have a tab in one a previous server made (it was adopted).
    /// When that server remembered the context for this session, its proxy
    /// port is listened on again and the context is the session's. Any
    /// other context of a previous server's is disposed of (its proxy is
    /// gone, nothing in it could load); the daemon opens a new tab. The pin
    /// file is the child's to write, so a context of this server's is never
    /// touched on its word.
    pub(super) async fn adopt_or_drop(&self, shared: &Arc<Shared>, session: &DaemonName) {
        if self.known(session).is_some() {
            return;
        }
        let Some(pinned) = crate::daemons::pinned_target(&shared.socket_dir, session) else {
            return;
        };
        let Ok(context) = context_of(shared, &pinned).await else {
            return;
        };
        if self.is_ours(&context) {
            return;
        }
        if let Some(remembered) = self.memo.get(session).filter(|r| r.context == context) {
            match shared.egress.open_on(session, remembered.port) {
                Ok(_) => {
                    let made = Arc::new(OnceCell::new_with(Some(Ok(context))));
                    lock(&self.made).insert(session.to_owned(), made);
                    tracing::info!(%session, "a previous server's browser context is adopted with its daemon");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, port = remembered.port, "a previous server's egress port could not be listened on again")
                }
            }
        }
        let orphans = shared
            .warden
            .browser_call(shared, "Target.getBrowserContexts", json!({}))
            .await
            .unwrap_or_default();
        let listed = orphans
            .get("browserContextIds")
            .and_then(Value::as_array)
            .is_some_and(|ids| ids.iter().any(|id| id.as_str() == Some(&context)));
        // Not listed: the default context, which no session's tab is in.
        if listed {
            tracing::info!(%session, "a previous server's browser context of an adopted daemon is disposed of");
            if let Err(e) = dispose_context(shared, &context).await {
                tracing::warn!(error = %e, "a previous server's browser context was not disposed of");
            }
        }
    }
}

/// The browser context a target is in, as Chromium says.
pub(super) async fn context_of(shared: &Arc<Shared>, target: &str) -> Result<ContextId, GateError> {
    let info = shared
        .warden
        .browser_call(shared, "Target.getTargetInfo", json!({"targetId": target}))
        .await?;
    info.pointer("/targetInfo/browserContextId")
        .and_then(Value::as_str)
        .map(ContextId::from_chromium)
        .ok_or_else(|| GateError::from("the target is in no browser context"))
}

/// Is the target `info` (a CDP `TargetInfo`) in `context`? Targets that
/// name none are no session's.
pub(super) fn in_context(info: &Value, context: Option<&ContextId>) -> bool {
    let named = info.get("browserContextId").and_then(Value::as_str);
    named.is_some() && named == context.map(|c| &**c)
}

/// A new context whose every connection goes through `session`'s egress
/// listener: loopback included (Chromium bypasses it by default), and it
/// stays when the warden's connection drops (only the gate disposes of it).
async fn make(shared: &Arc<Shared>, session: &DaemonName) -> Result<(ContextId, u16), GateError> {
    let port = shared
        .egress
        .open(session)
        .map_err(|e| format!("the session's egress listener could not be opened: {e}"))?;
    let made = shared
        .warden
        .browser_call(
            shared,
            "Target.createBrowserContext",
            json!({
                "proxyServer": format!("http://127.0.0.1:{port}"),
                "proxyBypassList": "<-loopback>",
                "disposeOnDetach": false,
            }),
        )
        .await?;
    let context = made
        .get("browserContextId")
        .and_then(Value::as_str)
        .map(ContextId::from_chromium)
        .ok_or("Chromium made no browser context")?;
    // The warden's denial covers the default context only: each context
    // denies downloads itself (Chromium is not confined; a download is a
    // write of the page's choosing), and announces each attempt.
    let denied = shared
        .warden
        .browser_call(
            shared,
            "Browser.setDownloadBehavior",
            json!({"behavior": "deny", "browserContextId": *context, "eventsEnabled": true}),
        )
        .await;
    if let Err(e) = denied {
        let _ = dispose_context(shared, &context).await;
        return Err(GateError::Failed(format!(
            "downloads could not be denied in the new context: {e}"
        )));
    }
    Ok((context, port))
}

pub(super) async fn dispose_context(
    shared: &Arc<Shared>,
    context: &ContextId,
) -> Result<(), GateError> {
    shared
        .warden
        .browser_call(
            shared,
            "Target.disposeBrowserContext",
            json!({"browserContextId": **context}),
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_a_sessions_only_when_it_names_that_sessions_context() {
        let page = json!({"targetId": "T1", "type": "page", "browserContextId": "C1"});
        assert!(in_context(&page, Some(&ContextId::from_chromium("C1"))));
        assert!(!in_context(&page, Some(&ContextId::from_chromium("C2"))));
        assert!(!in_context(&page, None));
        let unnamed = json!({"targetId": "B", "type": "browser"});
        assert!(!in_context(&unnamed, Some(&ContextId::from_chromium("C1"))));
        assert!(!in_context(&unnamed, None));
    }
}
