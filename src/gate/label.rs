//! The session's name in its window. Headed, each session's browser
//! context is a window of its own; a person watching the screen sees the
//! window of the session that acted last in front, but not whose it is.
//! agent-browser keeps a spare tab beside the tab it works in, which no
//! command of the agent's ever shows: that tab is given a page naming the
//! session, so the window's tab strip says whose it is. The session's own
//! pages are never touched.

use super::error::GateError;
use crate::chromium_ids::TargetId;
use std::sync::Arc;

use serde_json::{Value, json};

use super::Shared;
use crate::session_id::DaemonName;

/// Put a page naming `session` in the spare tab of `daemon`'s context, or
/// rename the one there (a pooled daemon's window says it waits until a
/// session is bound to it: renaming starts no renderer).
pub(super) async fn show_session(
    shared: &Arc<Shared>,
    daemon: &DaemonName,
    session: &str,
) -> Result<(), GateError> {
    let context = shared
        .contexts
        .known(daemon)
        .ok_or("the daemon has no browser context")?;
    // The pin file is the child's: it only says which tab to leave alone.
    let pinned = crate::daemons::pinned_target(&shared.socket_dir, daemon);
    let listed = shared
        .warden
        .browser_call(shared, "Target.getTargets", json!({}))
        .await?;
    let spare = listed
        .get("targetInfos")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|info| is_spare(info, &context, pinned.as_deref()))
        .ok_or("the context has no spare tab at about:blank or a label page")?;
    let target = spare
        .get("targetId")
        .and_then(Value::as_str)
        .map(TargetId::from_chromium)
        .ok_or("the spare tab has no id")?;
    let labelled = spare
        .get("url")
        .and_then(Value::as_str)
        .is_some_and(is_label_page);
    let (method, params) = if labelled {
        ("Runtime.evaluate", json!({ "expression": rename(session) }))
    } else {
        ("Page.navigate", json!({ "url": label_page(session) }))
    };
    shared
        .warden
        .page_call(shared, &target, daemon, method, params)
        .await
        .map(|_| ())
}

/// A page of `context` at `about:blank` or at a label page that is not the
/// pinned tab: one nothing of the session's has loaded anything in (a page
/// cannot navigate a tab to a `data:` URL itself).
fn is_spare(info: &Value, context: &str, pinned: Option<&str>) -> bool {
    let text = |key: &str| info.get(key).and_then(Value::as_str);
    text("type") == Some("page")
        && text("browserContextId") == Some(context)
        && text("url").is_some_and(|url| url == "about:blank" || is_label_page(url))
        && text("openerId").is_none()
        && text("targetId") != pinned
}

/// The tab's title: the session's id first, since a tab strip shows only
/// a title's first twenty-odd characters.
fn title(session: &str) -> String {
    format!("{session} · browser-shell session")
}

/// How every label page starts: nothing else in a session's context is a
/// `data:` page that starts so (see [`is_spare`]).
const LABEL_HEAD: &str = "<!doctype html><meta name=browser-shell content=label><title>";

fn encode(html: &str) -> String {
    format!(
        "data:text/html;charset=utf-8,{}",
        percent_encoding::utf8_percent_encode(html, percent_encoding::NON_ALPHANUMERIC)
    )
}

fn is_label_page(url: &str) -> bool {
    url.starts_with(&encode(LABEL_HEAD))
}

/// A `data:` page titled with the session's id. Session ids are of
/// `A-Za-z0-9._-` only, and the waiting label is ours: nothing HTML or a
/// URL would read as markup.
fn label_page(session: &str) -> String {
    let title = title(session);
    encode(&format!(
        "{LABEL_HEAD}{title}</title><body style=\"font:20px sans-serif;margin:2em\">\
         This window is browser-shell session <b id=s>{session}</b>. The agent works in the tab \
         beside this one.</body>"
    ))
}

/// The script that renames a label page for `session` (its id as a JSON
/// string, so it is only ever text).
fn rename(session: &str) -> String {
    let (title, id) = (Value::from(title(session)), Value::from(session));
    format!(
        "document.title = {title}; const s = document.getElementById('s'); if (s) s.textContent = {id};"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_blank_unopened_page_of_the_context_other_than_the_pinned_tab_is_the_spare() {
        let page = |id: &str, url: &str| json!({"targetId": id, "type": "page", "browserContextId": "C1", "url": url});
        assert!(is_spare(&page("S", "about:blank"), "C1", Some("P")));
        assert!(!is_spare(&page("P", "about:blank"), "C1", Some("P")));
        assert!(!is_spare(&page("S", "http://127.0.0.1/"), "C1", Some("P")));
        assert!(!is_spare(&page("S", "about:blank"), "C2", Some("P")));
        let mut popup = page("S", "about:blank");
        popup["openerId"] = json!("P");
        assert!(!is_spare(&popup, "C1", Some("P")));
    }

    #[test]
    fn the_label_page_is_a_data_url_titled_with_the_session() {
        let url = label_page("u1");
        assert!(url.starts_with("data:text/html;charset=utf-8,"));
        let decoded = percent_encoding::percent_decode_str(&url).decode_utf8_lossy();
        assert!(decoded.contains("<title>u1 · browser-shell session</title>"));
        assert!(is_label_page(&url));
        assert!(!is_label_page("data:text/html;charset=utf-8,%3Ctitle%3Eu1"));
    }

    #[test]
    fn a_label_page_is_a_spare_tab_and_is_renamed_with_text_only() {
        let info = json!({"targetId": "S", "type": "page", "browserContextId": "C1", "url": label_page("(ready for a new session)")});
        assert!(is_spare(&info, "C1", Some("P")));
        let script = rename("u1");
        assert!(
            script.contains("\"u1 · browser-shell session\"") && script.contains("= \"u1\";"),
            "{script}"
        );
    }
}
