//! Chromium's DevTools endpoint on 127.0.0.1, for the three things the
//! server does to a session's tab itself: bring it to the front, close it
//! (both over HTTP), and stop its loading (one CDP command on the tab's own
//! WebSocket, which HTTP cannot do). Each only on a tab the gate vouches is
//! the session's; the first time a tab comes forward, the gate also names
//! the session in its window (`daemons::Tabs`).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::Runner;
use crate::{
    chromium_ids::TargetId,
    session_id::{DaemonName, SessionId},
};

/// How long stopping a tab's loading may take, connection included.
const STOP_LOADING_TIMEOUT: Duration = Duration::from_secs(2);

/// Why something the server did to a session's tab itself did not happen.
/// Only ever logged or recorded: each of these acts is best effort.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TabActError {
    /// The DevTools HTTP endpoint answered with this status.
    #[error("DevTools answered {0}")]
    Status(reqwest::StatusCode),
    /// The endpoint (HTTP or the tab's WebSocket) could not be reached.
    #[error("cannot reach the tab's DevTools: {0}")]
    Unreachable(String),
    /// Chromium answered the CDP command with an error.
    #[error("{method} failed: {error}")]
    Refused { method: &'static str, error: String },
    /// The tab's WebSocket closed or failed before the answer.
    #[error("{method}: {why}")]
    Lost { method: &'static str, why: String },
    /// No answer in time.
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
}

impl Runner {
    /// Bring the session's pinned tab to the front of its window. Best
    /// effort: a failure only costs the next command time, so it is logged,
    /// not returned.
    pub(super) async fn foreground(&self, session: &SessionId) {
        let Some(target) = self.own_tab(session.daemon_name()).await else {
            // A daemon started by this very call has no tab yet: whatever
            // was in front, this session's page is not.
            if let Ok(mut front) = self.in_front.lock()
                && front.as_deref() == Some(session.daemon_name())
            {
                *front = None;
            }
            return;
        };
        match self.devtools(&format!("activate/{target}")).await {
            Ok(()) => {
                if let Ok(mut front) = self.in_front.lock() {
                    *front = Some(session.daemon_name().to_owned());
                }
                self.label_once(session);
            }
            Err(e) => tracing::warn!(error = %e, "could not bring the session's tab to the front"),
        }
    }

    /// The first time a session's tab comes forward, its window is given
    /// the session's name (see `gate/label.rs`), apart from the call that
    /// brought it forward; tried again next time if it could not be. A
    /// pooled daemon's window is labelled as waiting when it is warmed, so
    /// the session bound to it later only renames a page already there.
    fn label_once(&self, session: &SessionId) {
        let daemon = session.daemon_name().to_owned();
        let shown = session.as_str().to_owned();
        let first = self.labelled.lock().is_ok_and(|mut done| {
            done.insert(daemon.clone(), shown.clone()).as_ref() != Some(&shown)
        });
        if !first {
            return;
        }
        let runner = self.clone();
        tokio::spawn(async move {
            if !runner.tabs.label(&daemon, &shown).await
                && let Ok(mut done) = runner.labelled.lock()
            {
                done.remove(&daemon);
            }
        });
    }

    /// Bring a pooled daemon's tab to the front of its own window and label
    /// that window as waiting, while it waits: Chromium renders a tab the
    /// first time it comes forward and starts a renderer for the label
    /// page, work that would otherwise fall on the bound session's next
    /// command (docs/benchmarks.md, "The daemon pool"). It does not become
    /// the tab [`Runner::forward_again`] restores, and it is done before the
    /// daemon can be taken, so a session's own label never races it.
    pub(crate) async fn ready_in_front(&self, pooled: &SessionId) {
        let daemon = pooled.daemon_name();
        let Some(target) = self.own_tab(daemon).await else {
            return;
        };
        if let Err(e) = self.devtools(&format!("activate/{target}")).await {
            tracing::debug!(error = %e, "a pooled tab could not be brought forward");
            return;
        }
        let waiting = crate::daemons::WAITING_LABEL;
        if self.tabs.label(daemon, waiting).await
            && let Ok(mut done) = self.labelled.lock()
        {
            done.insert(daemon.to_owned(), waiting.to_owned());
        }
    }

    /// Bring the tab that came forward last to the front again. Headed,
    /// each session's browser context has a window of its own, and without
    /// a window manager (Xvfb) a new window opens on top: a pooled
    /// daemon's warm-up would cover the page a person is watching.
    pub(crate) async fn forward_again(&self) {
        let last = self.in_front.lock().ok().and_then(|front| front.clone());
        let Some(daemon) = last else { return };
        if let Some(target) = self.own_tab(&daemon).await {
            let _ = self.devtools(&format!("activate/{target}")).await;
        }
    }

    /// Bring the session's tab forward once the call's reply is out, unless
    /// the call already did: a daemon that call started had no tab when its
    /// batch went out. After the reply, because Chromium renders a tab for
    /// the first time before it answers (docs/benchmarks.md, "The daemon
    /// pool").
    pub(crate) fn foreground_after_reply(&self, session: &SessionId) {
        let in_front = self
            .in_front
            .lock()
            .is_ok_and(|front| front.as_deref() == Some(session.daemon_name()));
        if in_front {
            return;
        }
        let (runner, session) = (self.clone(), session.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            runner.foreground(&session).await;
        });
    }

    /// Close the session's pinned tab, if it has one of its own (any other
    /// tab of its context goes when the gate disposes of the context).
    pub(super) async fn close_tab(&self, daemon_name: &DaemonName) -> Result<(), TabActError> {
        match self.own_tab(daemon_name).await {
            Some(target) => self.devtools(&format!("close/{target}")).await,
            None => Ok(()),
        }
    }

    /// Stop whatever the session's tab is loading (`Page.stopLoading`, as
    /// Esc would), once the command that may have started it was stopped
    /// early. A navigation that has not committed (a server holding the
    /// document back) otherwise outlives the killed daemon: Chromium holds a
    /// newly attached client's commands to the page until it commits, so the
    /// next daemon's first probe of the tab, and every command after it,
    /// waits for the slow server (docs/design.md, "Sessions and their
    /// daemons"). Chromium handles the command itself, without the page's
    /// renderer, so it answers while that navigation is pending.
    pub(super) async fn stop_loading(&self, daemon_name: &DaemonName) -> Result<(), TabActError> {
        let Some(target) = self.own_tab(daemon_name).await else {
            // No pinned tab of its own yet: the command never reached a page.
            return Ok(());
        };
        let url = format!("ws://127.0.0.1:{}/devtools/page/{target}", self.cdp_port);
        // Boxed: a WebSocket handshake's future is large, and inline it would
        // grow every call's future (it lives in the runner's), which
        // overflowed a worker thread's stack in debug builds.
        let command = Box::pin(page_command(&url, "Page.stopLoading"));
        tokio::time::timeout(STOP_LOADING_TIMEOUT, command)
            .await
            .unwrap_or(Err(TabActError::NoAnswer(STOP_LOADING_TIMEOUT)))
    }

    /// One GET of `/json/<path>`, bounded to 2 s.
    async fn devtools(&self, path: &str) -> Result<(), TabActError> {
        let url = format!("http://127.0.0.1:{}/json/{path}", self.cdp_port);
        let request = self.http.get(&url).timeout(Duration::from_secs(2)).send();
        match request.await {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(TabActError::Status(response.status())),
            Err(e) => Err(TabActError::Unreachable(e.to_string())),
        }
    }

    /// The tab the daemon pinned, if the gate vouches that it is in the
    /// daemon's own browser context: the pin file is the child's to write.
    /// Look at the session's pinned tab (see `daemons::Tabs::look`), once
    /// the gate vouches it is the session's own; the tab, for its shot.
    pub(crate) async fn look(
        &self,
        daemon_name: &DaemonName,
        element: Option<crate::daemons::Named<'_>>,
    ) -> Result<(TargetId, crate::daemons::PageLook), crate::daemons::LookError> {
        let target = self
            .own_tab(daemon_name)
            .await
            .ok_or(crate::daemons::LookError::NoTab)?;
        let look = self.tabs.look(daemon_name, &target, element).await?;
        Ok((target, look))
    }

    /// A screenshot of the tab a look was just vouched for.
    pub(crate) async fn shoot(
        &self,
        daemon_name: &DaemonName,
        target: &TargetId,
    ) -> Result<crate::daemons::Shot, crate::daemons::LookError> {
        self.tabs.shoot(daemon_name, target).await
    }

    async fn own_tab(&self, daemon_name: &DaemonName) -> Option<TargetId> {
        let target = crate::daemons::pinned_target(&self.socket_dir, daemon_name)?;
        if self.tabs.owns(daemon_name, &target).await {
            return Some(target);
        }
        tracing::warn!(daemon = %daemon_name, %target, "the gate does not vouch for the daemon's pinned tab (another context's, or its context is not known yet); not acted on");
        None
    }
}

/// Send one parameterless CDP command on a page's own WebSocket and wait
/// for its answer.
async fn page_command(url: &str, method: &'static str) -> Result<(), TabActError> {
    // Nagle off: one small message, answered at once.
    let connected = tokio_tungstenite::connect_async_with_config(url, None, true).await;
    let mut socket = match connected {
        Ok((socket, _)) => socket,
        // The tab is gone (the command closed it): it loads nothing.
        Err(tokio_tungstenite::tungstenite::Error::Http(response))
            if response.status() == reqwest::StatusCode::NOT_FOUND =>
        {
            return Ok(());
        }
        Err(e) => return Err(TabActError::Unreachable(e.to_string())),
    };
    let command = serde_json::json!({"id": 1, "method": method});
    socket
        .send(Message::text(command.to_string()))
        .await
        .map_err(|e| TabActError::Lost {
            method,
            why: format!("cannot send: {e}"),
        })?;
    while let Some(message) = socket.next().await {
        let message = message.map_err(|e| TabActError::Lost {
            method,
            why: e.to_string(),
        })?;
        let Message::Text(text) = message else {
            continue;
        };
        let Ok(answer) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if answer.get("id") != Some(&serde_json::Value::from(1)) {
            continue;
        }
        let _ = socket.close(None).await;
        return match answer.get("error") {
            None => Ok(()),
            Some(error) => Err(TabActError::Refused {
                method,
                error: error.to_string(),
            }),
        };
    }
    Err(TabActError::Lost {
        method,
        why: "the tab's DevTools closed the connection".to_owned(),
    })
}
