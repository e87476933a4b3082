//! Which session each tab belongs to, so that a session's agent-browser
//! sees and drives its own tabs only.
//!
//! Unwatched, every daemon attaches to every tab it can see when it starts:
//! another session's tab, closed meanwhile by the reaper, failed a new
//! session's first command, and each extra attach slowed a new session's
//! start (docs/design.md, "The browser gate").
//! Attaching to another session's tab is refused without an audit record
//! (`relay`'s `Decline`): daemons try it routinely for tabs that appear
//! while they run. A tab becomes a session's when its `Target.createTarget` answer passes
//! through that session's connection, when a tab it owns opens it, or when
//! its daemon's pin file names it (a daemon restarted, or adopted from an
//! earlier server). Tabs nobody owns (Chromium's first tab, a person's on
//! the VNC screen) stay visible to all: agent-browser, seeing no page at
//! all, would create a spare tab of its own besides its pinned one, and
//! leave it open.

use std::{collections::HashMap, sync::Mutex};

use serde_json::Value;

use super::lock;

/// The owners of tabs, across all of the gate's connections.
#[derive(Debug, Default)]
pub(super) struct Tabs {
    owner: Mutex<HashMap<String, String>>,
}

impl Tabs {
    /// Make `target` `session`'s unless another session owns it already.
    pub(super) fn claim(&self, target: &str, session: &str) {
        lock(&self.owner)
            .entry(target.to_owned())
            .or_insert_with(|| session.to_owned());
    }

    /// The session that owns `target`, when one does.
    pub(super) fn owner(&self, target: &str) -> Option<String> {
        lock(&self.owner).get(target).cloned()
    }

    /// A tab that was closed.
    pub(super) fn forget(&self, target: &str) {
        lock(&self.owner).remove(target);
    }

    /// May `session` see the target described by `info` (a CDP
    /// `TargetInfo`)? Only pages have owners; a session sees its own and
    /// those nobody owns. A page opened by an owned page becomes its
    /// opener's owner's.
    pub(super) fn visible_to(&self, session: &str, info: &Value) -> bool {
        let field = |name: &str| info.get(name).and_then(Value::as_str);
        let (Some(target), Some("page")) = (field("targetId"), field("type")) else {
            return true;
        };
        let mut owners = lock(&self.owner);
        if let Some(owner) = owners.get(target) {
            return owner == session;
        }
        // A tab opened by an owned tab is its opener's owner's.
        match field("openerId")
            .and_then(|opener| owners.get(opener))
            .cloned()
        {
            Some(owner) => {
                let visible = owner == session;
                owners.insert(target.to_owned(), owner);
                visible
            }
            None => true,
        }
    }
}

/// Close every tab `session` owns but its pinned one, following opener
/// chains (a popup's popup is the session's too), through the warden's
/// connection. Chromium lists each tab with the tab that opened it.
pub(super) async fn close_other_tabs(
    shared: &std::sync::Arc<super::Shared>,
    session: &str,
) -> Result<usize, String> {
    let listed = shared
        .warden
        .browser_call(shared, "Target.getTargets", serde_json::json!({}))
        .await?;
    let pages: Vec<(String, Option<String>)> = listed
        .get("targetInfos")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|info| info.get("type").and_then(Value::as_str) == Some("page"))
        .filter_map(|info| {
            let id = info.get("targetId").and_then(Value::as_str)?.to_owned();
            let opener = info
                .get("openerId")
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some((id, opener))
        })
        .collect();
    let mut owned: Vec<String> = pages
        .iter()
        .filter(|(id, _)| shared.tabs.owner(id).as_deref() == Some(session))
        .map(|(id, _)| id.clone())
        .collect();
    if let Some(pinned) = crate::daemons::pinned_target(&shared.socket_dir, session) {
        owned.push(pinned);
    }
    loop {
        let more: Vec<String> = pages
            .iter()
            .filter(|(id, opener)| {
                !owned.contains(id) && opener.as_ref().is_some_and(|o| owned.contains(o))
            })
            .map(|(id, _)| id.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        owned.extend(more);
    }
    let pinned = crate::daemons::pinned_target(&shared.socket_dir, session);
    let mut closed = 0;
    for target in owned.iter().filter(|t| Some(*t) != pinned.as_ref()) {
        shared
            .warden
            .browser_call(
                shared,
                "Target.closeTarget",
                serde_json::json!({"targetId": target}),
            )
            .await?;
        shared.tabs.forget(target);
        closed += 1;
    }
    Ok(closed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn page(id: &str) -> Value {
        json!({"targetId": id, "type": "page"})
    }

    #[test]
    fn a_tab_is_visible_to_its_owner_and_hidden_from_other_sessions() {
        let tabs = Tabs::default();
        tabs.claim("T1", "a");
        assert!(tabs.visible_to("a", &page("T1")));
        assert!(!tabs.visible_to("b", &page("T1")));
        tabs.claim("T1", "b");
        assert_eq!(
            tabs.owner("T1").as_deref(),
            Some("a"),
            "a claim never moves a tab"
        );
    }

    #[test]
    fn a_tab_nobody_owns_and_targets_other_than_pages_are_visible_to_all() {
        let tabs = Tabs::default();
        tabs.claim("T1", "a");
        assert!(tabs.visible_to("b", &page("T0")));
        assert!(tabs.visible_to("b", &json!({"targetId": "T1", "type": "iframe"})));
        assert!(tabs.visible_to("b", &json!({"targetId": "W1", "type": "service_worker"})));
    }

    #[test]
    fn a_tab_opened_by_a_sessions_tab_is_that_sessions() {
        let tabs = Tabs::default();
        tabs.claim("T1", "a");
        let popup = json!({"targetId": "T2", "type": "page", "openerId": "T1"});
        assert!(tabs.visible_to("a", &popup));
        assert_eq!(tabs.owner("T2").as_deref(), Some("a"));
        assert!(!tabs.visible_to("b", &popup));
        tabs.forget("T2");
        assert_eq!(tabs.owner("T2"), None);
    }
}
