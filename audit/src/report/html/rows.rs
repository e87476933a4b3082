//! The rows of the page's tables: one `<tr>` per call or event, its flag
//! as a class and a labelled badge, its values escaped.

use std::fmt::Write as _;

use serde_json::Value;

use super::{esc, html_escape};
use crate::report::{Report, Row, arg_text, short_time, table::digests};

impl Report {
    pub(super) fn table<'a>(
        &self,
        o: &mut String,
        rows: impl Iterator<Item = &'a Row>,
        view: &str,
    ) {
        let timeline = view == "timeline";
        let _ = write!(
            o,
            "<table class=\"rows\"><tr><th>seq</th><th>time (UTC)</th>{}<th>command (redacted)</th>\
             <th>result</th><th class=\"num\">exit</th><th class=\"num\">ms</th><th>rule, reason, page after, digests</th></tr>",
            if timeline { "<th>session</th>" } else { "" }
        );
        for r in rows {
            self.html_row(o, r, view);
        }
        o.push_str("</table>");
    }

    fn html_row(&self, o: &mut String, r: &Row, view: &str) {
        let level = r.flag.as_ref().map_or("", |f| f.level);
        let event = matches!(r.kind.as_str(), "server" | "session" | "rotation");
        let unverified = self.unverified(r);
        let class = format!(
            "row {level}{}{}",
            if event && level.is_empty() {
                " event"
            } else {
                ""
            },
            if unverified { " unverified" } else { "" }
        );
        let _ = write!(
            o,
            "<tr class=\"{class}\" data-view=\"{view}\" data-session=\"{}\" data-kind=\"{}\" data-level=\"{level}\" \
             data-rule=\"{}\" data-unverified=\"{}\"><td class=\"num\">{}</td><td class=\"time\">{}</td>",
            esc(&r.session),
            esc(&r.kind),
            esc(r.rule.as_deref().unwrap_or("")),
            u8::from(unverified),
            r.seq.map_or_else(|| "-".into(), |s| s.to_string()),
            esc(&short_time(&r.time)),
        );
        if view == "timeline" {
            let _ = write!(
                o,
                "<td class=\"wrap\">{}</td>",
                esc(if r.session.is_empty() {
                    "-"
                } else {
                    &r.session
                })
            );
        }
        o.push_str("<td>");
        command_cell(o, r, event);
        o.push_str("</td><td>");
        result_cell(o, r, event, unverified);
        let _ = write!(
            o,
            "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"detail\">",
            r.exit_code.map_or_else(|| "-".into(), |e| e.to_string()),
            r.duration_ms
                .map_or_else(|| "-".into(), |d| format!("{d:.1}")),
        );
        detail_cell(o, r);
        o.push_str("</td></tr>");
    }
}

/// What was asked: the event, or the command's (redacted) arguments.
fn command_cell(o: &mut String, r: &Row, event: bool) {
    if event {
        let _ = write!(o, "<em>{} {}</em>", esc(&r.kind), esc(&r.subcommand));
        if r.kind == "server" {
            let _ = write!(
                o,
                " <span class=\"muted\">pid {}</span>",
                r.pid.unwrap_or(0)
            );
        }
    } else if r.argv.is_empty() {
        let _ = write!(o, "<em>{}</em>", esc(&r.kind));
    }
    for item in &r.argv {
        match item {
            Value::Object(_) => {
                let _ = write!(
                    o,
                    "<span class=\"redacted\">{}</span>",
                    html_escape(&arg_text(item))
                );
            }
            _ => {
                let _ = write!(
                    o,
                    "<code class=\"arg\">{}</code>",
                    html_escape(&arg_text(item))
                );
            }
        }
    }
}

/// The flag's badge, or the verdict and outcome.
fn result_cell(o: &mut String, r: &Row, event: bool, unverified: bool) {
    match &r.flag {
        Some(f) => {
            // The verdict and outcome on hover: the badge says what stands out,
            // and a second line on every flagged row doubled the page's length.
            let what = [Some(r.verdict.as_str()), r.outcome.as_deref()]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" · ");
            let _ = write!(
                o,
                "<span class=\"badge {}\" title=\"{}\">{}</span>",
                f.level,
                esc(&what),
                esc(&f.label)
            );
        }
        None if event => {
            let _ = write!(
                o,
                "<span class=\"badge event\">{}</span>",
                esc(&r.subcommand)
            );
        }
        None => {
            let _ = write!(
                o,
                "<span class=\"badge ok\">{} · {}</span>",
                esc(&r.verdict),
                esc(r.outcome.as_deref().unwrap_or("-"))
            );
        }
    }
    if unverified {
        o.push_str(" <span class=\"badge unverified\">UNVERIFIED</span>");
    }
}

/// Rule and reason, the page after, the resolved addresses, the digests.
fn detail_cell(o: &mut String, r: &Row) {
    // On demand: the same policy digest on every row drowned what differs.
    // First, so they float beside the reason's first line.
    let digests = digests(r);
    if !digests.is_empty() {
        o.push_str("<details class=\"digests\"><summary>digests</summary>");
        for (label, value, note) in digests {
            let _ = write!(
                o,
                "<div><span class=\"label\">{}</span> <code class=\"wrap\">{}</code>{}</div>",
                esc(&label),
                esc(&value),
                esc(&note)
            );
        }
        o.push_str("</details>");
    }
    if r.rule.is_some() || r.reason.is_some() {
        o.push_str("<div class=\"reason\">");
        if let Some(rule) = &r.rule {
            let _ = write!(o, "<code class=\"rule\">{}</code> ", esc(rule));
        }
        let _ = write!(o, "{}</div>", esc(r.reason.as_deref().unwrap_or("")));
    }
    if let Some(requester) = &r.requester {
        let _ = write!(
            o,
            "<div><span class=\"label\">requested by</span> {}</div>",
            esc(requester)
        );
    }
    if let Some(page) = &r.page_url {
        let _ = write!(
            o,
            "<div><span class=\"label\">page after</span> <code class=\"wrap\">{}</code></div>",
            esc(page)
        );
    }
    if !r.resolved.is_empty() {
        let _ = write!(
            o,
            "<div><span class=\"label\">resolved</span> <code>{}</code></div>",
            esc(&r.resolved.join(", "))
        );
    }
}
