//! Chromium's DevTools HTTP endpoint on 127.0.0.1, for the two things the
//! server does to a session's tab itself: bring it to the front and close it.

use std::time::Duration;

use super::Runner;
use crate::session_id::SessionId;

impl Runner {
    /// Bring the session's pinned tab to the front of its window. Best
    /// effort: a failure only costs the next command time, so it is logged,
    /// not returned.
    pub(super) async fn foreground(&self, session: &SessionId) {
        let Some(target) = self.target_of(session.daemon_name()) else {
            return;
        };
        match self.devtools(&format!("activate/{target}")).await {
            Ok(()) => {
                if let Ok(mut front) = self.in_front.lock() {
                    *front = Some(session.daemon_name().to_owned());
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not bring the session's tab to the front"),
        }
    }

    /// Bring the tab that came forward last to the front again. Headed,
    /// each session's browser context has a window of its own, and without
    /// a window manager (Xvfb) a new window opens on top: a pooled
    /// daemon's warm-up would cover the page a person is watching.
    pub(crate) async fn forward_again(&self) {
        let last = self.in_front.lock().ok().and_then(|front| front.clone());
        if let Some(target) = last.and_then(|daemon| self.target_of(&daemon)) {
            let _ = self.devtools(&format!("activate/{target}")).await;
        }
    }

    /// Bring the session's tab forward once the call's reply is out: a tab a
    /// new session was just bound to waits in the background, and the person
    /// watching the browser should see that session's page. Done after the
    /// reply because Chromium renders a tab for the first time before it
    /// answers, which would delay the call (docs/benchmarks.md, "The daemon
    /// pool").
    pub(crate) fn foreground_after_reply(&self, session: &SessionId) {
        let (runner, session) = (self.clone(), session.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            runner.foreground(&session).await;
        });
    }

    /// Close the session's pinned tab, if it has one.
    pub(super) async fn close_tab(&self, daemon_name: &str) -> Result<(), String> {
        match self.target_of(daemon_name) {
            Some(target) => self.devtools(&format!("close/{target}")).await,
            None => Ok(()),
        }
    }

    /// One GET of `/json/<path>`, bounded to 2 s.
    async fn devtools(&self, path: &str) -> Result<(), String> {
        let url = format!("http://127.0.0.1:{}/json/{path}", self.cdp_port);
        let request = self.http.get(&url).timeout(Duration::from_secs(2)).send();
        match request.await {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(format!("DevTools answered {}", response.status())),
            Err(e) => Err(e.to_string()),
        }
    }

    fn target_of(&self, daemon_name: &str) -> Option<String> {
        crate::daemons::pinned_target(&self.socket_dir, daemon_name)
    }
}
