//! The report as one self-contained HTML page: inline CSS and a small
//! inline script that filters rows (by session, what stands out, rule,
//! text), no fetches. One timeline, each row about a line tall (digests
//! open on demand), so the page stays readable at hundreds of calls; each
//! session's summary filters the timeline to its rows. A Content-Security-Policy admits only that style and
//! that script (by their SHA-256), images only as `data:` URLs (the
//! evidence images it carries itself), and nothing from anywhere, so even a
//! value that slipped past escaping could not run or load anything.
//!
//! Every value from the log goes through [`printable`] and is then
//! HTML-escaped (quotes included): it is text, never markup.

use std::fmt::Write as _;

use sha2::{Digest as _, Sha256};

mod approvals;
mod replay;
mod rows;
mod sessions;

use super::{Report, Trust, printable, short_time};

const CSS: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("filter.js");

/// `text` from the log as HTML text or attribute value: [`printable`],
/// then escaped.
pub(super) fn esc(text: &str) -> String {
    html_escape(&printable(text))
}

/// `text` (printable already) as HTML text or attribute value.
pub(super) fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `'sha256-<base64>'`, a CSP source for an inline block.
pub(super) fn csp_hash(block: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let digest = Sha256::digest(block.as_bytes());
    let mut out = String::from("'sha256-");
    for chunk in digest.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            out.push(if i <= chunk.len() {
                char::from(ALPHABET[(n >> shift & 63) as usize])
            } else {
                '='
            });
        }
    }
    out.push('\'');
    out
}

impl Report {
    /// One self-contained HTML page.
    pub fn to_html(&self) -> String {
        let mut o = String::with_capacity(64 * 1024 + self.timeline.len() * 1200);
        let _ = write!(
            o,
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
             style-src {}; script-src {}; img-src data:; form-action 'none'; base-uri 'none'\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>browser-shell audit report</title><style>{CSS}</style></head><body><main>\
             <h1>browser-shell audit report</h1>",
            csp_hash(CSS),
            csp_hash(SCRIPT)
        );
        for s in &self.sources {
            let _ = write!(
                o,
                "<div class=\"muted\">file <code>{}</code>, {} bytes, sha256 <code>{}</code></div>",
                esc(&s.file),
                s.bytes,
                esc(&s.sha256)
            );
        }
        self.banner(&mut o);
        self.summary(&mut o);
        self.sessions_html(&mut o);
        self.approvals_html(&mut o);
        o.push_str(
            "<h2 id=\"timeline\">Timeline</h2>\
             <form id=\"filters\" hidden><label>session <select name=\"session\"><option value=\"*\">all</option>",
        );
        for session in self.sessions.keys() {
            let _ = write!(
                o,
                "<option value=\"{0}\">{1}</option>",
                esc(session),
                if session.is_empty() {
                    "(none)".into()
                } else {
                    esc(session)
                }
            );
        }
        o.push_str(
            "</select></label><label>show <select name=\"show\"><option value=\"all\">everything</option>\
             <option value=\"attention\">what stands out</option>\
             <option value=\"alert\">refusals and blocks</option>\
             <option value=\"calls\">calls and refusals only</option>\
             <option value=\"unverified\">unverified rows</option></select></label>\
             <label>rule <select name=\"rule\"><option value=\"*\">any</option>",
        );
        for rule in self.refusals_by_rule.keys() {
            let _ = write!(o, "<option value=\"{0}\">{0}</option>", esc(rule));
        }
        o.push_str(
            "</select></label><label>text <input name=\"text\" type=\"search\" \
             placeholder=\"URL, digest, reason…\"></label><span id=\"shown\" class=\"muted\"></span></form>",
        );
        self.table(&mut o, self.timeline.iter(), "timeline");
        self.servers_table(&mut o);
        self.policies_table(&mut o);
        let _ = writeln!(o, "</main><script>{SCRIPT}</script></body></html>");
        o
    }

    fn banner(&self, o: &mut String) {
        let Some(i) = &self.integrity else {
            o.push_str(
                "<section class=\"banner bad\"><div class=\"verdict\">✖ NOT VERIFIED</div></section>",
            );
            return;
        };
        let (class, mark) = match i.trust {
            Trust::Intact => ("ok", "✔"),
            Trust::Unvouched => ("warn", "⚠"),
            Trust::NotIntact => ("bad", "✖"),
        };
        let _ = write!(
            o,
            "<section class=\"banner {class}\" id=\"verification\"><div class=\"verdict\">{mark} {}</div>",
            esc(&i.headline())
        );
        if i.trust == Trust::Unvouched {
            o.push_str(
                "<p><strong>Nothing here vouches for the end of this log.</strong> Its chain holds, \
                 but the checkpoint its server kept is gone or under another key: records may have \
                 been removed from the end. Verify it <code>--against</code> the newest record your \
                 OTLP collector holds.</p>",
            );
        }
        if i.trust == Trust::NotIntact {
            let from = i.broken_at_seq.map_or_else(String::new, |s| {
                format!(" Rows from seq {s} on are marked UNVERIFIED.")
            });
            let _ = write!(
                o,
                "<p><strong>This log cannot be trusted.</strong> It is shown only because the report was asked \
                 to render anyway.{from}</p>"
            );
        }
        if !i.notes.is_empty() {
            o.push_str("<ul>");
            for note in &i.notes {
                let _ = write!(o, "<li>{}</li>", esc(note));
            }
            o.push_str("</ul>");
        }
        let open = if i.intact { "" } else { " open" };
        let _ = write!(
            o,
            "<details{open}><summary>what <code>audit verify</code> found</summary><pre>"
        );
        for line in &i.lines {
            let _ = writeln!(o, "{}", esc(line));
        }
        o.push_str("</pre></details></section>");
    }

    fn summary(&self, o: &mut String) {
        let count = |label: &str| {
            self.timeline
                .iter()
                .filter(|r| r.flag.as_ref().is_some_and(|f| f.label == label))
                .count()
        };
        let range = self.time_range.as_ref().map_or_else(
            || "-".into(),
            |(a, b)| format!("{}<br>{}", esc(&short_time(a)), esc(&short_time(b))),
        );
        let total = |k: &str| self.total(k);
        let refusals_class = if total("refusals") > 0 {
            "card alert"
        } else {
            "card"
        };
        let _ = write!(
            o,
            "<h2>Summary</h2><div class=\"cards\"><div class=\"card wide\"><div class=\"muted\">time range (UTC)</div>{range}</div>\
             <div class=\"card\" data-count=\"calls\"><div class=\"n\">{}</div>calls (<span data-count=\"allowed\">{}</span> allowed, \
             <span data-count=\"denied\">{}</span> denied)</div>\
             <div class=\"{refusals_class}\" data-count=\"refusals\"><div class=\"n\">{}</div>refusals: \
             {} denied, <span data-count=\"refused\">{}</span> refused while running, \
             <span data-count=\"gate_refusals\">{}</span> by the gate</div>",
            total("calls"),
            total("allowed"),
            total("denied"),
            total("refusals"),
            total("denied"),
            total("refused"),
            total("gate_refusals"),
        );
        for (label, n) in [
            ("DENIED", count("DENIED")),
            ("NAVIGATION BLOCKED", count("NAVIGATION BLOCKED")),
            ("REQUEST BLOCKED", count("REQUEST BLOCKED")),
            ("GATE REFUSED", count("GATE REFUSED")),
            ("REFUSED", count("REFUSED")),
            ("NO OUTCOME", count("NO OUTCOME")),
        ] {
            let class = if n > 0 { "card alert" } else { "card" };
            let _ = write!(
                o,
                "<div class=\"{class}\" data-tile=\"{label}\"><div class=\"n\">{n}</div>{}</div>",
                label.to_lowercase()
            );
        }
        let ms = |d: Option<f64>| d.map_or_else(|| "-".into(), |d| format!("{d:.1}"));
        let _ = write!(
            o,
            "<div class=\"card wide\"><div class=\"n\">{} / {}</div>p50 / p95 ms of allowed calls</div></div>\
             <p class=\"muted\" id=\"totals\">totals: {}<br>refusals by rule: {}</p>",
            ms(self.p50_ms),
            ms(self.p95_ms),
            esc(&pairs(self.totals.iter())),
            esc(&pairs(self.refusals_by_rule.iter())),
        );
        o.push_str("<h3>Where it went, all sessions</h3>");
        sessions::destinations(o, &self.destinations, "all");
    }

    /// Every server whose records are here: its binaries and their digests,
    /// its confinement, its life.
    fn servers_table(&self, o: &mut String) {
        o.push_str(
            "<h2>Servers</h2><table><tr><th>server</th><th>browser-shell</th><th>agent-browser</th>\
             <th>confinement</th><th>life</th><th class=\"num\">records</th></tr>",
        );
        for s in &self.servers {
            let opt = |v: &Option<String>| esc(v.as_deref().unwrap_or("-"));
            let started = s.started.as_deref().map_or_else(
                || format!("no start record (first record {})", short_time(&s.first)),
                |t| format!("started {}", short_time(t)),
            );
            let stopped = s.stopped.as_deref().map_or_else(
                || format!("no stop record (last record {})", short_time(&s.last)),
                |t| {
                    format!(
                        "stopped {} ({}), {} call(s) served",
                        short_time(t),
                        s.stop_reason.as_deref().unwrap_or("-"),
                        s.calls_served.map_or_else(|| "?".into(), |c| c.to_string())
                    )
                },
            );
            let pid = s.pid.map_or_else(|| "?".into(), |p| p.to_string());
            let host = esc(&s.host);
            let producer = opt(&s.producer);
            let version = opt(&s.version);
            let sha = opt(&s.sha256);
            let ab_version = opt(&s.agent_browser_version);
            let ab_path = opt(&s.agent_browser_path);
            let ab_sha = opt(&s.agent_browser_sha256);
            let confinement = opt(&s.confinement);
            let trampoline = opt(&s.trampoline_path);
            let trampoline_sha = opt(&s.trampoline_sha256);
            let otlp = s.otlp.map_or("-", |on| if on { "on" } else { "off" });
            let (started, stopped) = (esc(&started), esc(&stopped));
            let _ = write!(
                o,
                "<tr><td>pid {pid} on {host}<div class=\"muted\">{producer}</div></td>\
                 <td>{version}<div><span class=\"label\">sha256</span> \
                 <code class=\"digest\" title=\"{sha}\">{sha}</code></div></td>\
                 <td>{ab_version}<div class=\"muted wrap\">{ab_path}</div><div><span class=\"label\">sha256</span> \
                 <code class=\"digest\" title=\"{ab_sha}\">{ab_sha}</code></div></td>\
                 <td>{confinement}<div class=\"muted\">OTLP copy {otlp}</div>\
                 <div class=\"muted wrap\">trampoline {trampoline}</div><div><span class=\"label\">sha256</span> \
                 <code class=\"digest\" title=\"{trampoline_sha}\">{trampoline_sha}</code></div></td>\
                 <td>{started}<br>{stopped}</td><td class=\"num\">{}</td></tr>",
                s.records,
            );
        }
        o.push_str("</table>");
    }

    /// Every policy that decided a call: its digest, where it came from,
    /// its changes and its effective content.
    fn policies_table(&self, o: &mut String) {
        o.push_str(
            "<h2>Policies</h2><table><tr><th>policy sha256</th><th>source</th>\
             <th>in force</th><th class=\"num\">decided</th></tr>",
        );
        for p in &self.policies {
            let source = match (&p.file, &p.source) {
                (Some(file), _) => format!(
                    "<code class=\"wrap\">{}</code><br><span class=\"muted\">file sha256 {}</span>",
                    esc(file),
                    esc(p.file_sha256.as_deref().unwrap_or("-"))
                ),
                (None, Some(source)) => esc(source),
                (None, None) => "<span class=\"muted\">content not in these files</span>".into(),
            };
            let mut events: String = p
                .events
                .iter()
                .map(|e| format!("<div>{}</div>", esc(e)))
                .collect();
            if let Some(effective) = &p.effective {
                let pretty = serde_json::to_string_pretty(effective).unwrap_or_default();
                let _ = write!(
                    events,
                    "<details class=\"policy\"><summary>effective policy</summary><pre>{}</pre></details>",
                    esc(&pretty).replace("\\n", "\n")
                );
            }
            let _ = write!(
                o,
                "<tr><td><code class=\"wrap\">{}</code></td><td>{source}</td><td>{events}</td><td class=\"num\">{}</td></tr>",
                esc(&p.sha256),
                p.decided
            );
        }
        o.push_str("</table>");
    }
}

fn pairs<'a>(map: impl Iterator<Item = (&'a String, &'a u64)>) -> String {
    map.map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_csp_hash_is_the_base64_sha256_of_the_block() {
        // echo -n 'abc' | openssl dgst -sha256 -binary | base64
        assert_eq!(
            super::csp_hash("abc"),
            "'sha256-ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0='"
        );
    }
}
