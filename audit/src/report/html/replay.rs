//! A session replayed: its calls and refusals in order, each action with
//! the element it acted on and the page before and after, as images the
//! page carries itself (`data:` URLs; the page's policy admits no other).

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::Value;

use super::esc;
use crate::report::{Report, Row, images};

impl Report {
    /// The replay of `session`, when any of its rows has evidence.
    pub(super) fn replay(&self, o: &mut String, session: &str) {
        let rows: Vec<&Row> = self
            .timeline
            .iter()
            .filter(|r| {
                r.session == session && matches!(r.kind.as_str(), "call" | "refusal" | "gate")
            })
            .collect();
        if !rows.iter().any(|r| r.evidence.is_some()) {
            return;
        }
        // Open when it is the only session shown (`audit report --session`).
        let open = if self.sessions.len() == 1 {
            " open"
        } else {
            ""
        };
        let _ = write!(
            o,
            "<details class=\"replay\"{open} data-replay=\"{}\"><summary>replay: what the session did, step by step</summary><ol>",
            esc(session)
        );
        for r in rows {
            self.step(o, r);
        }
        o.push_str("</ol></details>");
    }

    fn step(&self, o: &mut String, r: &Row) {
        let level = r.flag.as_ref().map_or("", |f| f.level);
        let _ = write!(
            o,
            "<li class=\"step {level}\" data-call=\"{}\" data-seq=\"{}\"><div><b>{}</b> {}",
            esc(&r.call_id),
            r.seq.map_or_else(String::new, |s| s.to_string()),
            esc(&r.subcommand),
            element(r.evidence.as_ref().and_then(|e| e.get("element"))),
        );
        if let Some(flag) = &r.flag {
            let _ = write!(
                o,
                " <span class=\"badge {level}\">{}</span>",
                esc(&flag.label)
            );
        }
        if let Some(reason) = &r.reason {
            let _ = write!(o, " <span class=\"muted\">{}</span>", esc(reason));
        }
        o.push_str("</div>");
        if let Some(evidence) = &r.evidence {
            o.push_str("<div class=\"looks\">");
            for which in ["before", "after"] {
                self.look(o, which, evidence.get(which).unwrap_or(&Value::Null));
            }
            o.push_str("</div>");
        }
        o.push_str("</li>");
    }

    fn look(&self, o: &mut String, which: &str, look: &Value) {
        let (url, title) = images::caption(look);
        let _ = write!(o, "<figure data-look=\"{which}\">");
        let digest = look.pointer("/image/sha256").and_then(Value::as_str);
        match digest.and_then(|d| self.images.get(d).map(|png| (d, png))) {
            Some((digest, png)) => {
                let _ = write!(
                    o,
                    "<img alt=\"the page {which}\" data-sha256=\"{}\" src=\"data:image/png;base64,{}\">",
                    esc(digest),
                    base64::engine::general_purpose::STANDARD.encode(png)
                );
            }
            None => {
                let why = match (digest, look.get("image_withheld"), look.get("unseen")) {
                    (Some(_), _, _) => {
                        "image missing or altered (see the verdict above)".to_owned()
                    }
                    (None, Some(why), _) | (None, None, Some(why)) => {
                        format!("no image: {}", why.as_str().unwrap_or_default())
                    }
                    (None, None, None) => "no image".to_owned(),
                };
                let _ = write!(o, "<div class=\"noimage muted\">{}</div>", esc(&why));
            }
        }
        let _ = write!(
            o,
            "<figcaption><span class=\"muted\">{which}</span> <code class=\"wrap\">{}</code> {}</figcaption></figure>",
            esc(&url),
            esc(&title)
        );
    }
}

/// The element an action named: a ref with its role and name, or a
/// selector.
fn element(element: Option<&Value>) -> String {
    let Some(element) = element else {
        return String::new();
    };
    let text = |key: &str| element.get(key).and_then(Value::as_str);
    match (text("ref"), text("selector")) {
        (Some(id), _) => format!(
            "<span data-element=\"ref\">@{} {} <q>{}</q></span>",
            esc(id),
            esc(text("role").unwrap_or("?")),
            esc(text("name").unwrap_or_default())
        ),
        (None, Some(selector)) => {
            format!("<code data-element=\"selector\">{}</code>", esc(selector))
        }
        (None, None) => String::new(),
    }
}
