//! Reviewer reports of an audit log: the verdict of its verification
//! first ([`integrity`]), then the servers and policies seen, one timeline
//! across sessions and a view per session with every call's redacted argv,
//! verdict, rule and reason, exit, duration, page URL and digests ([`build`]),
//! totals — as a table, JSON, a self-contained HTML page, or OCSF events.
//!
//! Everything shown comes from the log, which may have been tampered with:
//! every value goes through [`printable`], and into HTML escaped.

mod approvals;
mod build;
mod context;
mod counts;
mod html;
mod images;
mod integrity;
mod model;
mod ocsf;
mod table;

use std::{borrow::Cow, fmt::Write as _, path::PathBuf};

use serde_json::Value;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

pub use approvals::{Approval, Shown, describe as describe_shown};
pub use build::build;
pub use images::MAX_REPORT_IMAGE_BYTES;
pub use integrity::{Evidence, Integrity, Trust, assess};
pub use model::{Destinations, Flag, Policy, Report, Row, Server, SessionSummary, Source};
pub use ocsf::{OCSF_VERSION, ocsf, ocsf_events};

/// Which records to include.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this session.
    pub session: Option<String>,
    /// Only records at or after this time.
    pub since: Option<OffsetDateTime>,
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

/// Size and SHA-256 of each of `files`, for the record of what was read.
///
/// # Errors
/// When a file cannot be read.
pub fn sources(files: &[PathBuf]) -> std::io::Result<Vec<Source>> {
    files
        .iter()
        .map(|file| {
            let mut reader = std::fs::File::open(file)?;
            let bytes = reader.metadata()?.len();
            Ok(Source {
                file: file.display().to_string(),
                bytes,
                sha256: crate::sha256_reader(&mut reader)?,
            })
        })
        .collect()
}

/// `time` (RFC 3339) as `YYYY-MM-DD HH:MM:SS.mmmZ` in UTC; as it is when
/// it does not parse.
pub fn short_time(time: &str) -> String {
    match parse_time(time) {
        Ok(t) => {
            let t = t.to_offset(time::UtcOffset::UTC);
            format!(
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.millisecond()
            )
        }
        Err(_) => time.to_owned(),
    }
}

/// One argv item as a reviewer reads it, already [`printable`] (do not
/// pass it through again): a string as it is, in quotes (inner quotes as
/// `\"`) when it is empty, holds whitespace or a quote, or starts like a
/// redaction; redacted free text as `‹redacted N chars mac …›`, with the
/// names of the secrets typed, when any.
pub fn arg_text(item: &Value) -> String {
    match item {
        Value::String(s) => {
            let shown = printable(s);
            let quote = s.is_empty()
                || s.starts_with('‹')
                || s.contains('"')
                || s.chars().any(char::is_whitespace);
            if quote {
                format!("\"{}\"", shown.replace('"', "\\\""))
            } else {
                shown.into_owned()
            }
        }
        Value::Object(o) if o.get("redacted") == Some(&Value::Bool(true)) => {
            let mut out = String::from("‹redacted");
            if let Some(secrets) = o.get("secrets").and_then(Value::as_array) {
                let names: Vec<String> = secrets.iter().map(plain).collect();
                let _ = write!(out, " secret {}", names.join(","));
            }
            if let Some(len) = o.get("len") {
                let _ = write!(out, " {} chars", plain(len));
            }
            if let Some(mac) = o.get("mac") {
                let _ = write!(out, " mac {}", plain(mac));
            }
            out.push('›');
            printable(&out).into_owned()
        }
        other => printable(&other.to_string()).into_owned(),
    }
}

/// A string as it is, anything else as JSON.
fn plain(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

#[cfg(test)]
mod counts_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod verdict_tests;
