//! Each tab's committed URL as Chromium's own events on a daemon's
//! connection tell it, so the gate can answer agent-browser's read of
//! `location.href` (`open`'s result, the navigation guard's trailing
//! `get url` after a command that sent no input) without a round trip to
//! the page's renderer.
//!
//! `location.href` is the committed document's URL: it changes only when a
//! navigation commits (`Page.frameNavigated`, whose `url` and `urlFragment`
//! are that same URL split) or within the document (`pushState`, a
//! fragment: `Page.navigatedWithinDocument`). The gate answers only what it
//! knows exactly: a tab whose top frame's commit it saw, with Page events
//! on, and nothing since that could change the URL unseen
//! (`document.open()`, a detach, a crash, the browser naming another URL
//! for the tab), nor an input or a screenshot sent since
//! ([`Known::renderer_ahead`]). While a navigation of the tab is under way
//! it asks Chromium, whose read waits for that navigation (a link to a slow
//! page: the read names the new page), so the guard still sees where the
//! command sent the tab. Anything else is asked of Chromium too
//! (docs/design.md, "The navigation guard's reads").

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::chromium_ids::CdpSessionId;

/// The committed top-frame URL of each tab this connection has a CDP
/// session on, where the gate knows it exactly.
#[derive(Debug, Default)]
pub(super) struct PageUrls {
    by_session: HashMap<CdpSessionId, Known>,
}

#[derive(Debug)]
struct Known {
    frame: String,
    url: String,
    /// A navigation of the top frame was asked for, scheduled or started,
    /// and has not committed since. One that never commits (a download, a
    /// 204) keeps the gate asking until the next commit: no event says for
    /// certain that nothing more will come of it.
    navigating: bool,
    /// An input or a screenshot was sent since the last read, so the
    /// renderer may know more than its events have told the gate: a click
    /// on a link asks for its navigation in the renderer, whose event can
    /// arrive after the browser's answer to the input; a screenshot's
    /// pixels can arrive ahead of the commit event that names their page.
    /// Chromium's own read is answered by that renderer after those
    /// events, so the next read is Chromium's.
    renderer_ahead: bool,
}

/// The one read the gate answers: agent-browser's `get url`, exactly these
/// three parameters (another, say `contextId`, reads elsewhere).
fn is_href_read(request: &Value) -> bool {
    let Some(params) = request.get("params").and_then(Value::as_object) else {
        return false;
    };
    request.get("method").and_then(Value::as_str) == Some("Runtime.evaluate")
        && params.len() == 3
        && params.get("awaitPromise") == Some(&Value::Bool(true))
        && params.get("expression").and_then(Value::as_str) == Some("location.href")
        && params.get("returnByValue") == Some(&Value::Bool(true))
}

impl PageUrls {
    /// Chromium's answer to `request`, if it is a read of `location.href`
    /// on a tab whose URL the gate knows.
    pub(super) fn answer(&mut self, request: &Value) -> Option<String> {
        if !is_href_read(request) {
            return None;
        }
        let cdp_session = request.get("sessionId").and_then(Value::as_str)?;
        let known = self.by_session.get_mut(cdp_session)?;
        if std::mem::take(&mut known.renderer_ahead) || known.navigating {
            return None;
        }
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        Some(
            json!({
                "id": id,
                "result": {"result": {"type": "string", "value": known.url}},
                "sessionId": cdp_session,
            })
            .to_string(),
        )
    }

    /// agent-browser sent `request`: after `Page.disable` no event says
    /// where the tab goes; after an input or a screenshot, Chromium reads
    /// the URL.
    pub(super) fn sent(&mut self, request: &Value) {
        let Some(cdp_session) = request.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        match request.get("method").and_then(Value::as_str) {
            Some("Page.disable") => {
                self.by_session.remove(cdp_session);
            }
            Some(method) if method == "Page.captureScreenshot" || method.starts_with("Input.") => {
                if let Some(known) = self.by_session.get_mut(cdp_session) {
                    known.renderer_ahead = true;
                }
            }
            _ => {}
        }
    }

    /// One event from Chromium on this connection. `sessions_of` names the
    /// CDP sessions on a target (for the browser-level target events).
    pub(super) fn event(
        &mut self,
        message: &Value,
        sessions_of: impl Fn(&str) -> Vec<CdpSessionId>,
    ) {
        let params = message.get("params").unwrap_or(&Value::Null);
        let on = message.get("sessionId").and_then(Value::as_str);
        match (message.get("method").and_then(Value::as_str), on) {
            (Some("Page.frameNavigated"), Some(on)) => self.committed(on, params),
            (Some("Page.navigatedWithinDocument"), Some(on)) => match text(params.get("url")) {
                Some(url) => self.top_frame(on, params, |known| known.url = url),
                // A change with no URL said is not one the gate can answer for.
                None => self.forget_if_top(on, params),
            },
            (
                Some(
                    "Page.frameRequestedNavigation"
                    | "Page.frameScheduledNavigation"
                    | "Page.frameStartedNavigating"
                    | "Page.frameStartedLoading",
                ),
                Some(on),
            ) => self.top_frame(on, params, |known| known.navigating = true),
            (Some("Page.documentOpened"), Some(on)) => {
                let frame = params.get("frame").unwrap_or(&Value::Null);
                if frame.get("parentId").is_none() {
                    self.by_session.remove(on);
                }
            }
            (Some("Page.frameDetached"), Some(on)) => self.forget_if_top(on, params),
            (Some("Inspector.targetCrashed" | "Inspector.detached"), Some(on)) => {
                self.by_session.remove(on);
            }
            (Some("Target.detachedFromTarget"), _) => {
                if let Some(gone) = params.get("sessionId").and_then(Value::as_str) {
                    self.by_session.remove(gone);
                }
            }
            (Some("Target.targetInfoChanged"), _) => self.browser_named(params, sessions_of),
            _ => {}
        }
    }
}

impl PageUrls {
    /// A commit: the top frame's is the tab's URL from now on.
    fn committed(&mut self, on: &str, params: &Value) {
        let frame = params.get("frame").unwrap_or(&Value::Null);
        if frame.get("parentId").is_some() {
            return;
        }
        let (Some(id), Some(url)) = (text(frame.get("id")), text(frame.get("url"))) else {
            self.by_session.remove(on);
            return;
        };
        let url = url + &text(frame.get("urlFragment")).unwrap_or_default();
        // An input's other effects (a second navigation its handler asked
        // for) may still be on their way: the commit does not settle them.
        let renderer_ahead = self.by_session.get(on).is_some_and(|k| k.renderer_ahead);
        let known = Known {
            frame: id,
            url,
            navigating: false,
            renderer_ahead,
        };
        self.by_session
            .insert(CdpSessionId::from_chromium(on), known);
    }

    /// The browser's own word for a tab's URL: when it is not the one the
    /// gate holds (a navigation the browser started, an error page,
    /// anything the events did not say), Chromium is asked.
    fn browser_named(&mut self, params: &Value, sessions_of: impl Fn(&str) -> Vec<CdpSessionId>) {
        let info = params.get("targetInfo").unwrap_or(&Value::Null);
        let (Some(target), url) = (text(info.get("targetId")), text(info.get("url"))) else {
            return;
        };
        for on in sessions_of(&target) {
            let other = |known: &Known| url.as_deref() != Some(known.url.as_str());
            if self.by_session.get(&on).is_some_and(other) {
                self.by_session.remove(&on);
            }
        }
    }

    /// Forget the tab on `on` if the event's `frameId` is its top frame.
    fn forget_if_top(&mut self, on: &str, params: &Value) {
        if self.is_top(on, params) {
            self.by_session.remove(on);
        }
    }

    /// Apply `change` to what is known of the tab on `on`, if the event's
    /// `frameId` is its top frame.
    fn top_frame(&mut self, on: &str, params: &Value, change: impl FnOnce(&mut Known)) {
        if self.is_top(on, params)
            && let Some(known) = self.by_session.get_mut(on)
        {
            change(known);
        }
    }

    /// Is the event's `frameId` the top frame of the tab the gate knows on `on`?
    fn is_top(&self, on: &str, params: &Value) -> bool {
        let frame = params.get("frameId").and_then(Value::as_str);
        self.by_session
            .get(on)
            .is_some_and(|known| frame == Some(known.frame.as_str()))
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
#[path = "page_url_tests.rs"]
mod tests;
