//! What the report counts, defined once: which rows are refusals (and of
//! which kind), and where a row's call went — the origin it reached or the
//! one it was refused. The header, the tiles, every session's section and
//! the JSON all count through these, so their numbers agree.
//!
//! A refusal is one of:
//! - `denied`: a call refused before it ran (its `denied` record is its only
//!   record);
//! - `refused`: an allowed call whose outcome is a refusal decided while it
//!   ran (`refused`, e.g. `secret.host`, or `navigation_blocked`);
//! - `gate`: the browser gate or the egress proxy refused what a page or
//!   the child asked (`request.blocked`, `cdp.*`); not a call.
//!
//! Every refusal has one rule (`(no rule)` when its record names none), so
//! the refusals by rule add up to `denied + refused + gate_refusals`.

use super::model::Row;

/// The kinds of refusal, as the totals name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Refused before it ran.
    Denied,
    /// Allowed, then refused while it ran.
    Refused,
    /// Refused by the browser gate or the egress proxy.
    Gate,
}

impl Refusal {
    /// The key of this kind in the totals and in each session's summary.
    pub(super) const fn key(self) -> &'static str {
        match self {
            Self::Denied => "denied",
            Self::Refused => "refused",
            Self::Gate => "gate_refusals",
        }
    }
}

/// The rule a refusal is counted under when its record names none.
pub(super) const NO_RULE: &str = "(no rule)";

/// Whether `row` is a refusal, and which kind.
pub(super) fn refusal(row: &Row) -> Option<Refusal> {
    match (row.kind.as_str(), row.outcome.as_deref()) {
        ("refusal", _) => Some(Refusal::Denied),
        ("gate", _) => Some(Refusal::Gate),
        ("call", Some("refused" | "navigation_blocked" | "page_unreadable")) => {
            Some(Refusal::Refused)
        }
        _ => None,
    }
}

/// Where a row went: the origin it reached, or the origin it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Went {
    Reached(String),
    Refused(String),
}

/// Where `row` went, if it names a destination.
///
/// - An allowed call reached the origin of the page it ended on (its
///   outcome's `page_url`); when the outcome holds no page URL, an `open`
///   that ended `ok` reached the origin of its URL. A call is counted once.
/// - A navigation the guard blocked was refused the page it had reached
///   (`page_url`: the refused page).
/// - A refused `open` (`url.*`, `host.*`, `dns.*`, `address.*`, `port.*`)
///   was refused its URL's origin.
/// - A `request.blocked` record was refused the URL or `host:port` its
///   reason names.
///
/// Everything else (a refused subcommand, a `cdp.*` refusal, a call with no
/// outcome or no page URL) names no destination.
pub(super) fn destination(row: &Row) -> Option<Went> {
    match (row.kind.as_str(), row.outcome.as_deref()) {
        ("call", Some("navigation_blocked")) => {
            row.page_url.as_deref().map(|u| Went::Refused(origin(u)))
        }
        ("call", Some("refused") | None) => None,
        ("call", outcome) => match &row.page_url {
            Some(page) => Some(Went::Reached(origin(page))),
            None if outcome == Some("ok") => opened(row).map(|u| Went::Reached(origin(u))),
            None => None,
        },
        ("refusal", _) => {
            let rule = row.rule.as_deref().unwrap_or_default();
            let url_rule = ["url.", "host.", "dns.", "address.", "port."]
                .iter()
                .any(|p| rule.starts_with(p));
            if url_rule {
                opened(row).map(|u| Went::Refused(origin(u)))
            } else {
                None
            }
        }
        ("gate", _) if row.rule.as_deref() == Some("request.blocked") => row
            .reason
            .as_deref()
            .and_then(named_in_reason)
            .map(|u| Went::Refused(origin(u))),
        _ => None,
    }
}

/// The URL an `open` (or its aliases) asked for, as logged.
fn opened(row: &Row) -> Option<&str> {
    let open = matches!(
        row.argv.first().and_then(|a| a.as_str()),
        Some("open" | "goto" | "navigate")
    );
    if open {
        row.argv.get(1).and_then(|a| a.as_str())
    } else {
        None
    }
}

/// The URL or `host:port` a `request.blocked` reason names: the gate's
/// "a Document request to URL was blocked: …", "a download of "…" from URL
/// was denied …", the egress proxy's "a connection to HOST:PORT was refused
/// …" and "a request to URL was refused …".
pub(super) fn named_in_reason(reason: &str) -> Option<&str> {
    let after = [" request to ", " connection to ", "\" from "]
        .iter()
        .find_map(|marker| reason.find(marker).map(|at| &reason[at + marker.len()..]))?;
    let named = after.split(char::is_whitespace).next()?;
    (!named.is_empty()).then_some(named)
}

/// The origin of `url` as logged: `scheme://authority` (without userinfo)
/// for a URL with one; `blob:` and the origin it names; `about:` pages by
/// name; any other scheme by its scheme alone (a `data:` or `javascript:`
/// URL may carry a whole page); a `host:port` or a URL without a scheme up
/// to its path.
pub(super) fn origin(url: &str) -> String {
    let url = url.trim();
    let scheme_end = url
        .find(':')
        .filter(|&i| {
            i > 0
                && url[..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                && url[..i].starts_with(|c: char| c.is_ascii_alphabetic())
        })
        .filter(|&i| !url[i + 1..].starts_with(|c: char| c.is_ascii_digit()));
    let Some(end) = scheme_end else {
        // `host:port`, or a URL without a scheme: up to its path.
        return authority(url).to_owned();
    };
    let (scheme, rest) = (url[..end].to_ascii_lowercase(), &url[end + 1..]);
    if let Some(rest) = rest.strip_prefix("//") {
        let host = authority(rest);
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        return format!("{scheme}://{host}");
    }
    match scheme.as_str() {
        "blob" => format!("blob:{}", origin(rest)),
        "about" => format!("about:{}", authority(rest)),
        _ => format!("{scheme}:"),
    }
}

/// `text` up to its first `/`, `?` or `#`.
fn authority(text: &str) -> &str {
    text.split(['/', '?', '#']).next().unwrap_or_default()
}
