//! Which frames have a navigation pending, from the Page events of the
//! warden's sessions (enabled only when the evidence looks at pages): a
//! look at a tab waits until its main frame's navigation has committed (or
//! ended without), since "after" should show where the action went, and a
//! screenshot taken mid-navigation waits for a frame the old document will
//! never paint. Loads after the commit (a slow image) are not waited for.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use serde_json::Value;
use tokio::sync::Notify;

use crate::sync::lock;

/// A frame said to be loading longer than this is forgotten (its stop
/// event was lost with its tab).
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// The frames with a navigation requested or started and not yet ended.
#[derive(Debug, Default)]
pub(super) struct Loading {
    frames: Mutex<HashMap<String, Instant>>,
    /// Woken when a frame's navigation ends: a wait for quiet is over the
    /// moment the commit is seen, not at its next poll (a poll's period
    /// was the whole cost of a read right after a navigating action).
    ended: Notify,
}

impl Loading {
    /// Take in a `Page.*` event.
    pub(super) fn note(&self, method: &str, params: &Value) {
        // `frameNavigated` names its frame inside the frame it describes.
        let frame = params
            .get("frameId")
            .or_else(|| params.pointer("/frame/id"));
        let Some(frame) = frame.and_then(Value::as_str) else {
            return;
        };
        // A navigation into another tab or window (a popup, `target=_blank`)
        // or a download leaves this frame where it is.
        let elsewhere = params
            .get("disposition")
            .and_then(Value::as_str)
            .is_some_and(|d| d != "currentTab");
        if elsewhere {
            return;
        }
        let mut frames = lock(&self.frames);
        match method {
            // A renderer-initiated navigation (a form's submission) is
            // requested before it starts: the first sign of it.
            "Page.frameRequestedNavigation"
            | "Page.frameStartedNavigating"
            | "Page.frameStartedLoading" => {
                let now = Instant::now();
                frames.retain(|_, since| now.duration_since(*since) < FORGET_AFTER);
                frames.insert(frame.to_owned(), now);
            }
            // Committed, within the document, or given up (a download, a
            // 204, a refusal: loading stops without a commit).
            "Page.frameNavigated" | "Page.navigatedWithinDocument" | "Page.frameStoppedLoading" => {
                frames.remove(frame);
                self.ended.notify_waiters();
            }
            _ => {}
        }
    }

    /// Wait until `frame` has no navigation pending, for at most `within`;
    /// whether it has none.
    pub(super) async fn quiet(&self, frame: &str, within: Duration) -> bool {
        let give_up = tokio::time::Instant::now() + within;
        loop {
            // Registered before the look at the frames, so an end noted
            // between the look and the wait still wakes this one.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !lock(&self.frames).contains_key(frame) {
                return true;
            }
            if tokio::time::timeout_at(give_up, ended).await.is_err() {
                return !lock(&self.frames).contains_key(frame);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_frame_is_quiet_once_its_navigation_committed() {
        let loading = Loading::default();
        assert!(loading.quiet("F", Duration::ZERO).await);
        loading.note("Page.frameRequestedNavigation", &json!({"frameId": "F"}));
        assert!(!loading.quiet("F", Duration::from_millis(30)).await);
        assert!(
            loading.quiet("G", Duration::ZERO).await,
            "another frame is not held"
        );
        loading.note("Page.frameNavigated", &json!({"frame": {"id": "F"}}));
        assert!(loading.quiet("F", Duration::ZERO).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_for_quiet_ends_when_the_commit_is_noted_not_at_a_poll() {
        let loading = std::sync::Arc::new(Loading::default());
        loading.note("Page.frameRequestedNavigation", &json!({"frameId": "F"}));
        let waiting = {
            let loading = std::sync::Arc::clone(&loading);
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                let quiet = loading.quiet("F", Duration::from_secs(3)).await;
                (quiet, started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(7)).await;
        loading.note("Page.frameNavigated", &json!({"frame": {"id": "F"}}));
        let (quiet, elapsed) = waiting.await.expect("the wait ends");
        assert!(quiet);
        assert_eq!(
            elapsed,
            Duration::from_millis(7),
            "woken by the commit itself"
        );
    }
}
