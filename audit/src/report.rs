//! Reviewer summaries of an audit log: per-session timelines, totals,
//! denials by rule, latency percentiles — as a table, JSON, a self-contained
//! HTML page, or OCSF events.

use std::{borrow::Cow, collections::BTreeMap, fmt::Write as _, path::PathBuf};

use serde::Serialize;
use serde_json::{Value, json};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

/// One call: its final record joined with its intent.
#[derive(Debug, Clone, Serialize)]
pub struct CallRow {
    /// When the call ended (or was refused).
    pub time: String,
    /// The session, if known.
    pub session: String,
    /// `argv[0]`, if known.
    pub subcommand: String,
    /// `allowed` or `denied`.
    pub verdict: String,
    /// The refusing rule, for denials.
    pub rule: Option<String>,
    /// `ok`, `error`, `timeout`, … for allowed calls.
    pub outcome: Option<String>,
    /// Wall time in ms.
    pub duration_ms: Option<f64>,
    /// The reply's exit code.
    pub exit_code: Option<i64>,
}

/// Which records to include.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this session.
    pub session: Option<String>,
    /// Only records at or after this time.
    pub since: Option<OffsetDateTime>,
}

/// The summary.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Every call, in log order.
    pub calls: Vec<CallRow>,
    /// Calls per session, in log order.
    pub sessions: BTreeMap<String, Vec<CallRow>>,
    /// Totals by verdict and outcome.
    pub totals: BTreeMap<String, u64>,
    /// Denials grouped by rule.
    pub denials_by_rule: BTreeMap<String, u64>,
    /// Median duration of allowed calls (ms).
    pub p50_ms: Option<f64>,
    /// 95th percentile duration of allowed calls (ms).
    pub p95_ms: Option<f64>,
}

/// Parse an RFC 3339 time for [`Filter::since`].
///
/// # Errors
/// When `text` is not RFC 3339.
pub fn parse_time(text: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(text, &Rfc3339).map_err(|e| format!("not an RFC 3339 time ({e}): {text}"))
}

/// Read every JSON record of `files`, skipping lines that do not parse.
///
/// # Errors
/// When a file cannot be read.
pub fn load(files: &[PathBuf]) -> std::io::Result<Vec<Value>> {
    let mut records = Vec::new();
    for file in files {
        // Bytes, not a String: a line torn mid-character by a crash must be
        // skipped like any other bad line, not fail the whole report.
        for line in std::fs::read(file)?.split(|b| *b == b'\n') {
            if let Ok(value @ Value::Object(_)) = serde_json::from_slice::<Value>(line) {
                records.push(value);
            }
        }
    }
    Ok(records)
}

/// `text` safe to print on a terminal or in a page a reviewer reads: line
/// breaks, other C0/C1 controls (terminal escapes), and the Unicode line
/// separators and bidi controls become `\n`, `\r`, `\t` or `\u{…}`, and
/// `\` becomes `\\`, so no value can start a line of its own (a forged row
/// or session header) or reorder what is shown, and the escape is
/// unambiguous.
pub fn printable(text: &str) -> Cow<'_, str> {
    let needs = |c: char| {
        c == '\\'
            || c.is_control()
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}'
            )
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.contains(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if needs(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn text(record: &Value, key: &str) -> Option<String> {
    record.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Summarise `records` (log order).
pub fn build(records: &[Value], filter: &Filter) -> Report {
    let mut subcommands: BTreeMap<String, String> = BTreeMap::new();
    let mut calls = Vec::new();
    for record in records {
        let session = text(record, "session_id").unwrap_or_default();
        if filter.session.as_ref().is_some_and(|s| *s != session) {
            continue;
        }
        let time = text(record, "time").unwrap_or_default();
        if let Some(since) = filter.since
            && parse_time(&time).is_ok_and(|t| t < since)
        {
            continue;
        }
        let call_id = text(record, "call_id").unwrap_or_default();
        let first_arg = record
            .pointer("/argv/0")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match text(record, "phase").as_deref() {
            Some("intent") => {
                if let Some(sub) = first_arg {
                    subcommands.insert(call_id, sub);
                }
            }
            Some(phase @ ("outcome" | "denied")) => calls.push(CallRow {
                time,
                session,
                subcommand: first_arg
                    .or_else(|| subcommands.remove(&call_id))
                    .unwrap_or_else(|| "-".into()),
                verdict: text(record, "verdict").unwrap_or_else(|| {
                    if phase == "denied" {
                        "denied".into()
                    } else {
                        "allowed".into()
                    }
                }),
                rule: text(record, "rule"),
                outcome: text(record, "outcome"),
                duration_ms: record.get("duration_ms").and_then(Value::as_f64),
                exit_code: record.get("exit_code").and_then(Value::as_i64),
            }),
            _ => {}
        }
    }
    let mut totals = BTreeMap::new();
    let mut denials_by_rule = BTreeMap::new();
    let mut sessions: BTreeMap<String, Vec<CallRow>> = BTreeMap::new();
    let mut durations = Vec::new();
    for call in &calls {
        *totals.entry("calls".to_owned()).or_insert(0) += 1;
        *totals.entry(call.verdict.clone()).or_insert(0) += 1;
        if let Some(outcome) = &call.outcome {
            *totals.entry(format!("outcome_{outcome}")).or_insert(0) += 1;
            if let Some(d) = call.duration_ms {
                durations.push(d);
            }
        }
        if let Some(rule) = &call.rule {
            *denials_by_rule.entry(rule.clone()).or_insert(0) += 1;
        }
        sessions
            .entry(call.session.clone())
            .or_default()
            .push(call.clone());
    }
    durations.sort_by(f64::total_cmp);
    let pct =
        |p: usize| (!durations.is_empty()).then(|| durations[(durations.len() - 1) * p / 100]);
    Report {
        p50_ms: pct(50),
        p95_ms: pct(95),
        calls,
        sessions,
        totals,
        denials_by_rule,
    }
}

impl Report {
    /// A plain-text report; every value from the log through [`printable`].
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let ms = |d: Option<f64>| d.map_or_else(|| "-".into(), |d| format!("{d:.1}"));
        for (session, calls) in &self.sessions {
            let _ = writeln!(
                out,
                "session {}",
                if session.is_empty() {
                    Cow::Borrowed("(none)")
                } else {
                    printable(session)
                }
            );
            let _ = writeln!(
                out,
                "  {:<32} {:<12} {:<8} {:>10} {:>5}  rule/outcome",
                "time", "subcommand", "verdict", "ms", "exit"
            );
            for c in calls {
                let detail = c
                    .rule
                    .clone()
                    .or_else(|| c.outcome.clone())
                    .unwrap_or_default();
                let exit = c.exit_code.map_or_else(|| "-".into(), |e| e.to_string());
                let _ = writeln!(
                    out,
                    "  {:<32} {:<12} {:<8} {:>10} {:>5}  {}",
                    printable(&c.time),
                    printable(&c.subcommand),
                    printable(&c.verdict),
                    ms(c.duration_ms),
                    exit,
                    printable(&detail),
                );
            }
        }
        let _ = writeln!(out, "\ntotals: {}", pairs(&self.totals));
        let _ = writeln!(out, "denials by rule: {}", pairs(&self.denials_by_rule));
        let _ = writeln!(
            out,
            "allowed-call duration: p50 {} ms, p95 {} ms",
            ms(self.p50_ms),
            ms(self.p95_ms)
        );
        out
    }

    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// One self-contained HTML page (inline CSS, no scripts, no fetches).
    pub fn to_html(&self) -> String {
        let esc = |s: &str| {
            printable(s)
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
        };
        let mut out = String::from(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>browser-shell audit report</title>\
             <style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse;margin:0 0 2em}\
             td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}.denied{background:#fde8e8}\
             .error,.timeout,.cancelled,.spawn_failed{background:#fff4d6}</style></head><body>\
             <h1>browser-shell audit report</h1>",
        );
        let _ = write!(out, "<h2>Totals</h2><table>");
        for (k, v) in &self.totals {
            let _ = write!(out, "<tr><th>{}</th><td>{v}</td></tr>", esc(k));
        }
        let _ = write!(
            out,
            "<tr><th>p50 / p95 (ms)</th><td>{:.1} / {:.1}</td></tr></table>",
            self.p50_ms.unwrap_or(0.0),
            self.p95_ms.unwrap_or(0.0)
        );
        let _ = write!(out, "<h2>Denials by rule</h2><table>");
        for (k, v) in &self.denials_by_rule {
            let _ = write!(out, "<tr><th>{}</th><td>{v}</td></tr>", esc(k));
        }
        out.push_str("</table>");
        for (session, calls) in &self.sessions {
            let _ = write!(
                out,
                "<h2>Session {}</h2><table><tr><th>time</th><th>subcommand</th><th>verdict</th><th>ms</th><th>exit</th><th>rule / outcome</th></tr>",
                esc(session)
            );
            for c in calls {
                let class = if c.verdict == "denied" {
                    "denied".to_owned()
                } else {
                    c.outcome.clone().unwrap_or_default()
                };
                let _ = write!(
                    out,
                    "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&class),
                    esc(&c.time),
                    esc(&c.subcommand),
                    esc(&c.verdict),
                    c.duration_ms
                        .map_or_else(String::new, |d| format!("{d:.1}")),
                    c.exit_code.map_or_else(String::new, |e| e.to_string()),
                    esc(c.rule.as_deref().or(c.outcome.as_deref()).unwrap_or("")),
                );
            }
            out.push_str("</table>");
        }
        out.push_str("</body></html>\n");
        out
    }
}

/// `key=value key=value …`.
fn pairs(map: &BTreeMap<String, u64>) -> String {
    map.iter()
        .map(|(k, v)| format!("{}={v}", printable(k)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// OCSF 1.x projection of one record as API Activity (class 6003): the call
/// to the `browser-shell` tool, `activity_id` 99 (Other), the verdict as
/// `status`/`disposition`, native fields kept under `unmapped`.
pub fn ocsf(record: &Value) -> Value {
    let time_ms = text(record, "time")
        .and_then(|t| parse_time(&t).ok())
        .map_or(0, |t| {
            i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
        });
    let denied = text(record, "verdict").as_deref() == Some("denied");
    let failed = record
        .get("exit_code")
        .and_then(Value::as_i64)
        .is_some_and(|c| c != 0);
    let (status_id, status) = match (denied, failed) {
        (true, _) | (false, true) => (2, "Failure"),
        _ => (1, "Success"),
    };
    json!({
        "class_uid": 6003,
        "class_name": "API Activity",
        "category_uid": 6,
        "activity_id": 99,
        "type_uid": 600_399,
        "severity_id": if denied { 3 } else { 1 },
        "time": time_ms,
        "status_id": status_id,
        "status": status,
        "status_code": record.get("exit_code").map(ToString::to_string),
        "status_detail": text(record, "rule").or_else(|| text(record, "outcome")),
        "disposition_id": if denied { 2 } else { 1 },
        "duration": record.get("duration_ms"),
        "message": text(record, "reason"),
        "metadata": {
            "version": "1.3.0",
            "product": {"name": "browser-shell", "vendor_name": "browser-shell", "version": text(record, "producer")},
            "uid": text(record, "id"),
            "correlation_uid": text(record, "call_id"),
            "sequence": record.get("seq"),
            "log_name": "browser-shell.audit",
        },
        "actor": {"session": {"uid": text(record, "session_id")}, "app_name": text(record, "client")},
        "api": {
            "operation": "tools/call",
            "service": {"name": text(record, "tool").unwrap_or_else(|| "browser-shell".into())},
            "request": {"uid": text(record, "request_id")},
        },
        "src_endpoint": {"hostname": text(record, "host")},
        "trace": {"uid": text(record, "trace_id"), "span": {"uid": text(record, "span_id")}},
        "unmapped": record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forged() -> Vec<Value> {
        vec![json!({
            "phase": "denied",
            "time": "2025-01-01T00:00:00Z",
            "session_id": "s1",
            "call_id": "c1",
            "argv": ["x\nsession forged\n  2025-01-01T00:00:00Z  open  allowed  1.0  0  ok\r\t\u{1b}[2J\u{202e}z\\n"],
            "verdict": "denied",
            "rule": "subcommand.denied\nsession evil",
        })]
    }

    #[test]
    fn a_forged_argv_renders_as_one_escaped_row() {
        let table = build(&forged(), &Filter::default()).to_table();
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("  2025")).collect();
        assert_eq!(rows.len(), 1, "{table}");
        assert_eq!(
            table.lines().filter(|l| l.starts_with("session ")).count(),
            1,
            "{table}"
        );
        assert!(rows[0].contains(
            "x\\nsession forged\\n  2025-01-01T00:00:00Z  open  allowed  1.0  0  ok\\r\\t\\u{001b}[2J\\u{202e}z\\\\n"
        ));
        assert!(
            rows[0].ends_with("subcommand.denied\\nsession evil"),
            "{table}"
        );
        assert!(table.contains("denials by rule: subcommand.denied\\nsession evil=1"));
        assert!(!table.contains('\r') && !table.contains('\u{1b}') && !table.contains('\u{202e}'));
    }

    #[test]
    fn html_shows_controls_escaped_too() {
        let html = build(&forged(), &Filter::default()).to_html();
        assert!(html.contains("x\\nsession forged"));
        assert!(!html.contains('\u{202e}') && !html.contains('\u{1b}'));
    }

    #[test]
    fn printable_leaves_ordinary_text_alone_and_escapes_every_control() {
        assert!(matches!(printable("open é 日本"), Cow::Borrowed(_)));
        for (c, shown) in [
            ('\u{0}', "\\u{0000}"),
            ('\u{7f}', "\\u{007f}"),
            ('\u{85}', "\\u{0085}"),
            ('\u{9b}', "\\u{009b}"),
            ('\u{2028}', "\\u{2028}"),
            ('\u{202a}', "\\u{202a}"),
            ('\u{2066}', "\\u{2066}"),
            ('\u{2069}', "\\u{2069}"),
        ] {
            assert_eq!(printable(&format!("a{c}b")), format!("a{shown}b"));
        }
    }
}
