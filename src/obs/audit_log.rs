//! One OTLP log record per audit record, in the vocabulary spans and
//! metrics use (docs/configuration.md, "One vocabulary"): every field of
//! the record as a flat `browser_shell.<field>` attribute (an object's
//! members as `browser_shell.<field>.<member>`), the subcommand of an
//! allowed call on its own, a body a person can read, and a severity that
//! matches the call's span.

use std::time::SystemTime;

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, Severity};
use opentelemetry::trace::SpanContext;
use opentelemetry_sdk::logs::SdkLogger;
use serde_json::Value;

/// The log event every audit record is.
pub(super) const AUDIT_EVENT: &str = "browser_shell.audit";

/// The namespace of browser-shell's own attributes, on every signal.
const PREFIX: &str = "browser_shell";

/// Deepest member of a record's objects made an attribute of its own;
/// deeper values (and arrays) are kept as JSON text.
const MAX_DEPTH: usize = 3;

/// Emit `event` as a log record, in `context`'s span when given.
pub(super) fn emit(logger: &SdkLogger, event: &Value, context: Option<&SpanContext>) {
    let mut record = logger.create_log_record();
    record.set_event_name(AUDIT_EVENT);
    record.set_timestamp(SystemTime::now());
    let (severity, severity_text) = severity_of(event);
    record.set_severity_number(severity);
    record.set_severity_text(severity_text);
    record.set_body(AnyValue::from(body(event)));
    for (key, value) in attributes(event) {
        record.add_attribute(key, value);
    }
    if let Some(cx) = context {
        record.set_trace_context(cx.trace_id(), cx.span_id(), Some(cx.trace_flags()));
    }
    logger.emit(record);
}

/// The record's fields, flat, and the subcommand of an allowed call (one
/// the grammar accepted, so one of a known few; a refused call's first
/// token could be anything and stays in `argv`).
fn attributes(event: &Value) -> Vec<(String, AnyValue)> {
    let mut out = Vec::new();
    if let Some(fields) = event.as_object() {
        for (key, value) in fields {
            flatten(&format!("{PREFIX}.{key}"), value, 1, &mut out);
        }
    }
    if let Some(subcommand) = allowed_subcommand(event) {
        out.push((
            format!("{PREFIX}.subcommand"),
            AnyValue::from(subcommand.to_owned()),
        ));
    }
    out
}

fn flatten(key: &str, value: &Value, depth: usize, out: &mut Vec<(String, AnyValue)>) {
    let value = match value {
        Value::Null => return,
        Value::Bool(b) => AnyValue::Boolean(*b),
        Value::Number(n) => n
            .as_i64()
            .map_or_else(|| AnyValue::from(n.to_string()), AnyValue::Int),
        Value::String(s) => AnyValue::from(s.clone()),
        Value::Object(members) if depth < MAX_DEPTH => {
            for (member, value) in members {
                flatten(&format!("{key}.{member}"), value, depth + 1, out);
            }
            return;
        }
        other => AnyValue::from(other.to_string()),
    };
    out.push((key.to_owned(), value));
}

fn allowed_subcommand(event: &Value) -> Option<&str> {
    let allowed = event.get("verdict").and_then(Value::as_str) == Some("allowed");
    let first = event.get("argv")?.as_array()?.first()?.as_str()?;
    allowed.then_some(first)
}

/// What happened, in a line: the phase, whose, what and how it ended
/// (`outcome: s1 fill error, exit code 1`, `denied: s1 url.scheme`,
/// `lifecycle: started`).
fn body(event: &Value) -> String {
    let field = |key: &str| event.get(key).and_then(Value::as_str);
    let mut words: Vec<String> = [field("session_id"), allowed_subcommand(event)]
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .collect();
    match field("phase") {
        Some("denied") => words.extend(field("rule").map(str::to_owned)),
        Some("intent") => words.push("runs".to_owned()),
        _ => words.extend(field("outcome").map(str::to_owned)),
    }
    let mut line = format!(
        "{}: {}",
        field("phase").unwrap_or("record"),
        words.join(" ")
    );
    if let Some(code) = event.get("exit_code").and_then(Value::as_i64)
        && field("phase") == Some("outcome")
    {
        line.push_str(&format!(", exit code {code}"));
    }
    line
}

/// How serious an audit record is, for a dashboard's filters: ERROR for a
/// command that failed and for what browser-shell itself could not do (the
/// audit log, a spawn), WARN for what the policy or a bound stopped (a
/// refusal, a blocked page or request, a timeout, a cancellation), INFO for
/// the rest. A call whose span is an error thus never logs at INFO.
fn severity_of(event: &Value) -> (Severity, &'static str) {
    let field = |key: &str| event.get(key).and_then(Value::as_str);
    match (field("phase"), field("outcome")) {
        (_, Some("error" | "audit_unavailable" | "spawn_failed" | "retire_incomplete")) => {
            (Severity::Error, "ERROR")
        }
        (Some("denied"), _)
        | (
            _,
            Some(
                "navigation_blocked" | "page_unreadable" | "timeout" | "cancelled" | "refused"
                | "reload_refused",
            ),
        ) => (Severity::Warn, "WARN"),
        _ => (Severity::Info, "INFO"),
    }
}

#[cfg(test)]
#[path = "audit_log_tests.rs"]
mod tests;
