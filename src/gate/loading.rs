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

use crate::sync::lock;

/// How often a wait for quiet looks again.
const POLL: Duration = Duration::from_millis(20);

/// A frame said to be loading longer than this is forgotten (its stop
/// event was lost with its tab).
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// The frames with a navigation requested or started and not yet ended.
#[derive(Debug, Default)]
pub(super) struct Loading {
    frames: Mutex<HashMap<String, Instant>>,
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
            }
            _ => {}
        }
    }

    /// Wait until `frame` has no navigation pending, for at most `within`;
    /// whether it has none.
    pub(super) async fn quiet(&self, frame: &str, within: Duration) -> bool {
        let give_up = Instant::now() + within;
        loop {
            if !lock(&self.frames).contains_key(frame) {
                return true;
            }
            if Instant::now() >= give_up {
                return false;
            }
            tokio::time::sleep(POLL).await;
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
}
