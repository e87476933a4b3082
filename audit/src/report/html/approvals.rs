//! The approvals view: each request for a person's yes, what was asked and
//! shown (the digest a yes names), who answered how, and when.

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::Value;

use super::esc;
use crate::report::{Approval, Report, short_time};

impl Report {
    /// The image the person was shown, when the report carries it.
    fn shown_image(&self, a: &Approval) -> String {
        let Some(digest) = a.shown.pointer("/image/sha256").and_then(Value::as_str) else {
            let why = a.shown.get("image_withheld").and_then(Value::as_str);
            return why
                .map(|w| format!("<div class=\"muted\">no image: {}</div>", esc(w)))
                .unwrap_or_default();
        };
        match self.images.get(digest) {
            Some(png) => format!(
                "<img class=\"shown\" alt=\"the page as shown\" data-sha256=\"{}\" src=\"data:image/png;base64,{}\">",
                esc(digest),
                base64::engine::general_purpose::STANDARD.encode(png)
            ),
            None => {
                "<div class=\"muted\">image missing or altered (see the verdict above)</div>".into()
            }
        }
    }

    pub(super) fn approvals_html(&self, o: &mut String) {
        if self.approvals.is_empty() {
            return;
        }
        o.push_str(
            "<h2 id=\"approvals\">Approvals</h2><table class=\"approvals\"><thead><tr>\
             <th>asked</th><th>session</th><th>rule</th><th>what was shown</th><th>channel</th>\
             <th>answer</th><th>by</th><th>answered</th></tr></thead><tbody>",
        );
        for a in &self.approvals {
            row(o, a, &self.shown_image(a));
        }
        o.push_str("</tbody></table>");
    }
}

fn row(o: &mut String, a: &Approval, image: &str) {
    let answer = a.answer.as_deref().unwrap_or("no answer recorded");
    let class = match answer {
        "granted" => "ok",
        "denied" | "expired" => "alert",
        _ => "warn",
    };
    let why = a
        .why
        .as_deref()
        .map(|w| format!("<div class=\"muted\">{}</div>", esc(w)));
    let _ = write!(
        o,
        "<tr data-approval=\"{id}\"><td>{asked}</td><td>{session}</td><td>{rule}</td>\
         <td>{shown}{image}<div class=\"muted\">request <code>{id}</code>, shown sha256 <code>{sha}</code></div></td>\
         <td>{channel}</td><td class=\"{class}\">{answer}{why}</td><td>{by}</td><td>{answered}</td></tr>",
        id = esc(&a.id),
        session = esc(&a.session),
        asked = esc(&short_time(&a.asked)),
        rule = esc(&a.rule),
        shown = shown(&a.shown),
        sha = esc(&a.shown_sha256),
        channel = esc(&a.channel),
        answer = esc(answer),
        why = why.unwrap_or_default(),
        by = by(a.by.as_ref()),
        answered = esc(&a.answered.as_deref().map(short_time).unwrap_or_default()),
    );
}

/// The command, the element and the page, as the person saw them.
fn shown(shown: &Value) -> String {
    let said = crate::report::describe_shown(shown);
    let element = said.element.map(|e| format!(" on {e}")).unwrap_or_default();
    format!(
        "<code>{}</code>{} <div>{} <span class=\"muted\">{}</span></div>",
        esc(&said.command),
        esc(&element),
        esc(&said.title),
        esc(&said.url),
    )
}

/// Who answered: the operator's uid and name, the client, or whoever
/// clicked on the display.
fn by(by: Option<&Value>) -> String {
    let Some(by) = by else {
        return String::new();
    };
    let field = |key: &str| {
        by.get(key)
            .filter(|v| !v.is_null())
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
    };
    let who = match (field("uid"), field("user"), field("client")) {
        (Some(uid), user, _) => format!(
            "uid {uid}{}",
            user.map(|u| format!(" ({u})")).unwrap_or_default()
        ),
        (None, _, Some(client)) => format!("the person at {client}"),
        _ => match field("display") {
            Some(display) => format!("whoever clicked on display {display}"),
            None => "unknown".into(),
        },
    };
    esc(&who)
}
