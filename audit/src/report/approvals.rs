//! The approvals a log records: for each request, what was asked (the
//! session, the call, what was shown and its digest, the channel) and how
//! it ended (granted, denied, expired, cancelled), who answered and when.
//! Built from the `approval` records by request id, in the order asked.

use serde::Serialize;
use serde_json::Value;

use super::build::{at, text};

/// One request for a person's yes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Approval {
    /// The request's id (records and channels name it).
    pub id: String,
    /// The session that waited.
    pub session: String,
    /// The call that waited.
    pub call_id: String,
    /// When it was asked.
    pub asked: String,
    /// The policy's rule that asked.
    pub rule: String,
    /// `elicitation`, `operator`, or `none`.
    pub channel: String,
    /// What the person was shown (argv redacted, page, element, image).
    pub shown: Value,
    /// Its SHA-256, which a yes names.
    pub shown_sha256: String,
    /// `granted`, `denied`, `expired`, `cancelled`; none while pending (or
    /// when the server stopped before an answer).
    pub answer: Option<String>,
    /// When it was answered.
    pub answered: Option<String>,
    /// Who answered, as the channel can vouch (the operator's uid, the
    /// client's name).
    pub by: Option<Value>,
    /// Why a no was a no.
    pub why: Option<String>,
}

/// The approvals of `records` (log order), of `session` only when given.
pub(super) fn of(records: &[Value], session: Option<&str>) -> Vec<Approval> {
    let mut found: Vec<Approval> = Vec::new();
    for record in records {
        if crate::event::phase_of(record) != Some("approval") {
            continue;
        }
        let id = at(record, "/approval/id").unwrap_or_default();
        let outcome = text(record, "outcome").unwrap_or_default();
        let time = text(record, "time").unwrap_or_default();
        if outcome == "requested" {
            let approval = record.get("approval").cloned().unwrap_or(Value::Null);
            found.push(Approval {
                id,
                session: text(record, "session_id").unwrap_or_default(),
                call_id: text(record, "call_id").unwrap_or_default(),
                asked: time,
                rule: at(record, "/approval/rule").unwrap_or_default(),
                channel: at(record, "/approval/channel").unwrap_or_default(),
                shown: approval.get("shown").cloned().unwrap_or(Value::Null),
                shown_sha256: at(record, "/approval/shown_sha256").unwrap_or_default(),
                ..Approval::default()
            });
        } else if let Some(asked) = found
            .iter_mut()
            .rev()
            .find(|a| a.id == id && a.answer.is_none())
        {
            asked.answer = Some(outcome);
            asked.answered = Some(time);
            asked.by = record.pointer("/approval/by").cloned();
            asked.why = at(record, "/approval/why");
        }
    }
    found.retain(|a| session.is_none_or(|s| s == a.session));
    found
}

/// What a request showed, in words (for the report and for the person
/// asked): the command as redacted, the element, the page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    /// The argv as the request holds it (free text redacted).
    pub command: String,
    /// `button “Pay 12 €”`, or the element as given when no snapshot
    /// named it; none for a call that acts on no element.
    pub element: Option<String>,
    /// The page's title.
    pub title: String,
    /// The page's URL (redacted), or why it was not seen.
    pub url: String,
}

/// `shown` (a request's `shown` object) in words.
pub fn describe(shown: &Value) -> Shown {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let argv = shown["argv"].as_array().into_iter().flatten().map(text);
    let element = &shown["element"];
    let named = match (element.get("role"), element.get("name")) {
        (Some(role), Some(name)) => Some(format!("{} “{}”", text(role), text(name))),
        _ if element.is_null() => None,
        _ => Some(format!("{element} (not named by a snapshot)")),
    };
    let page = &shown["page"];
    Shown {
        command: argv.collect::<Vec<_>>().join(" "),
        element: named,
        title: page["title"].as_str().unwrap_or_default().to_owned(),
        url: page["url"]
            .as_str()
            .map_or_else(|| text(page), str::to_owned),
    }
}
