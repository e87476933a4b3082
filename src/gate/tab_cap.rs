//! Each session's pages, counted. A page a session's context opens beyond
//! `--max-tabs` (a popup, a `target=_blank` link, a tab agent-browser
//! opens) is closed as Chromium announces it, and the attempt is audited
//! (`limits.tabs`): without a cap, a page that opens popups in a loop holds
//! Chromium's memory and CPU for as long as its session lives, and
//! `--max-sessions` would bound nothing (docs/design.md, "Browser
//! contexts").
//!
//! The count is Chromium's own announcements on the warden's connection
//! (`Target.targetCreated` and `Target.targetDestroyed` with target
//! discovery on), so it covers every way a page can be opened, and a page
//! that is closed frees its place.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use serde_json::{Value, json};

use super::Shared;
use crate::chromium_ids::{ContextId, TargetId};
use crate::sync::lock;
use crate::{
    browser_refusals::{BrowserRefusal, Requester},
    policy::url_policy::shown,
    refusal::Rule,
};

/// The pages of the sessions' contexts, by target id.
#[derive(Debug)]
pub(super) struct TabCap {
    max: usize,
    /// Each counted page's browser context.
    pages: Mutex<HashMap<TargetId, ContextId>>,
}

/// Whether a page Chromium announced has a place in its context.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// Counted (or not a session's page): it stays.
    Stays,
    /// One more than its context may have: it is to be closed.
    OverCap { open: usize },
}

impl TabCap {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            pages: Mutex::default(),
        }
    }

    /// A page `target` appeared in `context` (a session's): count it, or
    /// say it is one too many. Announced twice, it is counted once.
    pub(super) fn opened(&self, target: &TargetId, context: &ContextId) -> Place {
        let mut pages = lock(&self.pages);
        if pages.contains_key(target) {
            return Place::Stays;
        }
        let open = pages.values().filter(|c| *c == context).count();
        if open >= self.max {
            return Place::OverCap { open };
        }
        pages.insert(target.clone(), context.clone());
        Place::Stays
    }

    /// Forget every page: the count is about to be made again from
    /// Chromium's announcements.
    pub(super) fn forget_all(&self) {
        lock(&self.pages).clear();
    }

    /// The browser context Chromium announced `target` in, while it is a
    /// counted page (a target never changes context).
    pub(super) fn context_of(&self, target: &TargetId) -> Option<ContextId> {
        lock(&self.pages).get(target).cloned()
    }

    /// A target is gone: its place is free.
    pub(super) fn closed(&self, target: &str) {
        lock(&self.pages).remove(target);
    }
}

/// Chromium announced a target (`Target.targetCreated`): a page of a
/// session's context beyond the cap is closed, and the attempt reported
/// with the session's name.
pub(super) fn on_created(shared: &Arc<Shared>, info: &Value) {
    let text = |key: &str| info.get(key).and_then(Value::as_str);
    let (Some("page"), Some(target), Some(context)) =
        (text("type"), text("targetId"), text("browserContextId"))
    else {
        return;
    };
    let (target, context) = (
        TargetId::from_chromium(target),
        ContextId::from_chromium(context),
    );
    let Some(session) = shared.contexts.session_of(&context) else {
        return;
    };
    let Place::OverCap { open } = shared.tab_cap.opened(&target, &context) else {
        return;
    };
    // A page's popup names its opener; a tab without one was opened by
    // agent-browser, or by a page that asked for no opener: not known.
    let (kind, requester) = if text("openerId").is_some() {
        ("a popup", Requester::Page)
    } else {
        ("a tab", Requester::Unknown)
    };
    let reason = format!(
        "{kind} at {} was closed as it opened: the session has {open} pages open, as many as --max-tabs allows",
        shown(text("url").unwrap_or_default())
    );
    let (shared, target) = (Arc::clone(shared), target.to_owned());
    tokio::spawn(async move {
        let closed = shared
            .warden
            .browser_call(&shared, "Target.closeTarget", json!({"targetId": target}))
            .await;
        let reason = match closed {
            Ok(_) => reason,
            Err(e) => format!("{reason} (closing it failed: {e})"),
        };
        shared.reporter.report(BrowserRefusal::new(
            Some(session.clone()),
            Rule::Tabs,
            reason,
            requester,
        ));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: &str) -> TargetId {
        TargetId::from_chromium(id)
    }

    fn c(id: &str) -> ContextId {
        ContextId::from_chromium(id)
    }

    #[test]
    fn a_context_keeps_at_most_max_pages_and_a_closed_page_frees_its_place() {
        let cap = TabCap::new(2);
        assert_eq!(cap.opened(&t("T1"), &c("C1")), Place::Stays);
        assert_eq!(cap.opened(&t("T2"), &c("C1")), Place::Stays);
        assert_eq!(cap.opened(&t("T3"), &c("C1")), Place::OverCap { open: 2 });
        // Another context has places of its own.
        assert_eq!(cap.opened(&t("T4"), &c("C2")), Place::Stays);
        cap.closed("T1");
        assert_eq!(cap.opened(&t("T3"), &c("C1")), Place::Stays);
    }

    #[test]
    fn a_counted_page_names_its_context_and_a_closed_or_refused_one_none() {
        let cap = TabCap::new(1);
        assert_eq!(cap.opened(&t("T1"), &c("C1")), Place::Stays);
        assert_eq!(cap.opened(&t("T2"), &c("C1")), Place::OverCap { open: 1 });
        assert_eq!(cap.context_of(&t("T1")), Some(c("C1")));
        assert_eq!(
            cap.context_of(&t("T2")),
            None,
            "a page being closed is no one's"
        );
        cap.closed("T1");
        assert_eq!(cap.context_of(&t("T1")), None);
    }

    #[test]
    fn a_page_announced_twice_is_counted_once() {
        let cap = TabCap::new(1);
        assert_eq!(cap.opened(&t("T1"), &c("C1")), Place::Stays);
        assert_eq!(cap.opened(&t("T1"), &c("C1")), Place::Stays);
        assert_eq!(cap.opened(&t("T2"), &c("C1")), Place::OverCap { open: 1 });
    }

    #[test]
    fn a_page_closed_while_nobody_listened_frees_its_place_once_the_count_is_made_again() {
        let cap = TabCap::new(2);
        assert_eq!(cap.opened(&t("T1"), &c("C1")), Place::Stays);
        assert_eq!(cap.opened(&t("T2"), &c("C1")), Place::Stays);
        // T2 closed while the warden was reconnecting; only T1 is announced again.
        cap.forget_all();
        assert_eq!(cap.opened(&t("T1"), &c("C1")), Place::Stays);
        assert_eq!(cap.opened(&t("T3"), &c("C1")), Place::Stays);
    }
}
