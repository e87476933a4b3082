//! Page content, marked as such. Text a page controls may carry prompt
//! injection; wrapped in markers that carry a nonce drawn after the page
//! produced the text, and the page's origin, it cannot pass itself off as
//! browser-shell's words or close its own marker early. The markers are
//! agent-browser's own (`--content-boundaries`), which it does not print in
//! the batch JSON mode browser-shell uses. On unless the policy's
//! `reply.content_boundaries` is false.
//!
//! Every string the page controls is inside a marker or left out: the
//! `snapshot` text, the values of `get text`/`value`/`attr`/`title`, a
//! `title` in any command's data (`open`, `back`, …), and agent-browser's
//! error text (which may quote the page, e.g. `select`'s list of options)
//! are marked; the `name`s in `snapshot`'s `refs` are left out (each is in
//! the marked snapshot text, beside its `[ref=eN]`).

use serde_json::Value;

use super::subcommand::{PageText, Subcommand};

/// Fields of a reply's data that hold no page text (agent-browser's own
/// metadata, and URLs the policy already judged).
const NOT_PAGE_TEXT: &[&str] = &["origin", "url", "selector", "count"];

/// A command whose reply's page text is marked: its subcommand and tokens.
pub(crate) type Marked<'a> = (Subcommand, &'a [String]);

/// Wrap the page-derived strings of a successful `command`'s `data` (its
/// `subcommand`'s). `page` is where the page was, when known (the guard's
/// read).
pub(crate) fn mark(data: &mut Value, (subcommand, command): Marked<'_>, page: Option<&str>) {
    let Value::Object(map) = data else { return };
    let page_text = subcommand.facts().page_text;
    let mut fields: Vec<String> = match page_text {
        PageText::Snapshot => {
            if let Some(Value::Object(refs)) = map.get_mut("refs") {
                for node in refs.values_mut().filter_map(Value::as_object_mut) {
                    node.remove("name");
                }
            }
            vec!["snapshot".to_owned()]
        }
        // `get url` and `get count` return no page text.
        PageText::GetValues
            if matches!(
                command.get(1).map(String::as_str),
                Some("text" | "value" | "attr" | "title")
            ) =>
        {
            map.iter()
                .filter(|(k, v)| v.is_string() && !NOT_PAGE_TEXT.contains(&k.as_str()))
                .map(|(k, _)| k.clone())
                .collect()
        }
        _ => vec![],
    };
    if map.get("title").is_some_and(Value::is_string) && !fields.iter().any(|f| f == "title") {
        fields.push("title".to_owned());
    }
    if fields.is_empty() {
        return;
    }
    let origin = map
        .get("origin")
        .and_then(Value::as_str)
        .or(page)
        .map_or_else(|| "unknown".to_owned(), origin_of);
    let nonce = nonce();
    for field in fields {
        if let Some(Value::String(text)) = map.get_mut(&field) {
            *text = wrapped(text, &nonce, &origin);
        }
    }
}

/// agent-browser's error text, marked: it may quote the page (`select`
/// lists the page's options, a failed wait its text).
pub(crate) fn mark_error(error: &str, page: Option<&str>) -> String {
    let origin = page.map_or_else(|| "unknown".to_owned(), origin_of);
    wrapped(error, &nonce(), &origin)
}

fn wrapped(text: &str, nonce: &str, origin: &str) -> String {
    format!(
        "--- AGENT_BROWSER_PAGE_CONTENT nonce={nonce} origin={origin} ---\n{text}\n\
         --- END_AGENT_BROWSER_PAGE_CONTENT nonce={nonce} ---"
    )
}

/// `scheme://host[:port]` of a URL; the text itself when it does not parse.
fn origin_of(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => parsed.origin().ascii_serialization(),
        Err(_) => url
            .chars()
            .filter(|c| !c.is_whitespace())
            .take(200)
            .collect(),
    }
}

/// 128 random bits, hex. Should the kernel not give them, the time and the
/// pid still differ per call; the page never sees either before its text
/// is fixed.
fn nonce() -> String {
    let mut bytes = [0u8; 16];
    if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = (now ^ u128::from(std::process::id())).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "boundary_tests.rs"]
mod tests;
