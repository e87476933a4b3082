//! From records (log order) to a [`Report`]: intents joined with their
//! outcomes, refusals and events as rows of their own, totals (the servers
//! and policies are [`context`]'s).

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::{
    Filter, context, counts,
    model::{Flag, Report, Row, SessionSummary},
    parse_time,
};

pub(super) fn text(record: &Value, key: &str) -> Option<String> {
    record.get(key).and_then(Value::as_str).map(str::to_owned)
}

pub(super) fn at(record: &Value, pointer: &str) -> Option<String> {
    record
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Summarise `records` (log order).
pub fn build(records: &[Value], filter: &Filter) -> Report {
    let all = rows(records);
    let servers = context::servers(records);
    let policies = context::policies(records, &all);
    let timeline: Vec<Row> = all.into_iter().filter(|r| keep(r, filter)).collect();
    let mut report = Report {
        servers,
        policies,
        approvals: super::approvals::of(records, filter.session.as_deref()),
        ..Report::default()
    };
    let times: Vec<_> = timeline
        .iter()
        .filter_map(|r| parse_time(&r.time).ok().map(|t| (t, r.time.clone())))
        .collect();
    let first = times.iter().min_by_key(|(t, _)| *t);
    let last = times.iter().max_by_key(|(t, _)| *t);
    report.time_range = first.zip(last).map(|(a, b)| (a.1.clone(), b.1.clone()));
    totals(&mut report, &timeline);
    report.timeline = timeline;
    report
}

fn keep(row: &Row, filter: &Filter) -> bool {
    if filter.session.as_ref().is_some_and(|s| *s != row.session) {
        return false;
    }
    !filter
        .since
        .is_some_and(|since| parse_time(&row.time).is_ok_and(|t| t < since))
}

/// One row per call or event, in the order of each one's first record.
fn rows(records: &[Value]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    // Every call's row, after its outcome too: its evidence follows.
    let mut calls: HashMap<String, usize> = HashMap::new();
    for record in records {
        let call_id = text(record, "call_id").unwrap_or_default();
        match crate::event::phase_of(record) {
            Some("intent") => {
                open.insert(call_id.clone(), rows.len());
                calls.insert(call_id, rows.len());
                rows.push(row(record, "call"));
            }
            // Its call's intent is in a file not given: nothing to add it to.
            Some("evidence") => {
                if let Some(&i) = calls.get(&call_id) {
                    rows[i].evidence = record.get("evidence").cloned();
                }
            }
            Some("outcome") => match open.remove(&call_id) {
                Some(i) => conclude(&mut rows[i], record),
                // Its intent is in a file not given.
                None => {
                    calls.insert(call_id, rows.len());
                    let mut r = row(record, "call");
                    conclude(&mut r, record);
                    rows.push(r);
                }
            },
            Some("denied") => {
                let rule = text(record, "rule").unwrap_or_default();
                let gate = crate::event::refused_for(&rule) != crate::event::RefusedFor::Call;
                let mut r = row(record, if gate { "gate" } else { "refusal" });
                if r.verdict.is_empty() {
                    r.verdict = "denied".into();
                }
                rows.push(r);
            }
            Some("lifecycle") => {
                let kind = if record.get("session_id").is_some() {
                    "session"
                } else {
                    "server"
                };
                let mut r = row(record, kind);
                r.subcommand = r.outcome.clone().unwrap_or_else(|| "-".into());
                rows.push(r);
            }
            Some("rotation") => {
                let mut r = row(record, "rotation");
                r.subcommand = "rotation".into();
                if let Some(kept) = record.get("kept_from_seq").and_then(Value::as_u64) {
                    let why = r.reason.take().unwrap_or_default();
                    r.reason = Some(format!("kept from seq {kept}; {why}"));
                }
                rows.push(r);
            }
            _ => {}
        }
    }
    for r in &mut rows {
        r.flag = flag(r);
    }
    rows
}

fn row(record: &Value, kind: &str) -> Row {
    let argv: Vec<Value> = record
        .get("argv")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut r = Row {
        seq: record.get("seq").and_then(Value::as_u64),
        time: text(record, "time").unwrap_or_default(),
        kind: kind.into(),
        session: text(record, "session_id").unwrap_or_default(),
        call_id: text(record, "call_id").unwrap_or_default(),
        subcommand: argv
            .first()
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned(),
        argv,
        verdict: text(record, "verdict").unwrap_or_default(),
        resolved: record
            .get("resolved")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        argv_mac: text(record, "argv_mac"),
        policy_sha256: text(record, "policy_sha256"),
        client: text(record, "client"),
        requester: text(record, "requester"),
        host: text(record, "host").unwrap_or_default(),
        pid: record.get("pid").and_then(Value::as_u64),
        ..Row::default()
    };
    conclude(&mut r, record);
    r.end_seq = None;
    r
}

/// Take what `record` says of how the call ended.
fn conclude(r: &mut Row, record: &Value) {
    let u = |key: &str| record.get(key).and_then(Value::as_u64);
    r.end_seq = u("seq");
    r.outcome = text(record, "outcome").or(r.outcome.take());
    r.rule = text(record, "rule").or(r.rule.take());
    r.reason = text(record, "reason").or(r.reason.take());
    r.exit_code = record
        .get("exit_code")
        .and_then(Value::as_i64)
        .or(r.exit_code);
    r.duration_ms = record
        .get("duration_ms")
        .and_then(Value::as_f64)
        .or(r.duration_ms);
    r.page_url = text(record, "page_url").or(r.page_url.take());
    r.reply_stdout_bytes = u("reply_stdout_bytes").or(r.reply_stdout_bytes);
    r.reply_stdout_sha256 = text(record, "reply_stdout_sha256").or(r.reply_stdout_sha256.take());
    r.image_action = text(record, "image_action").or(r.image_action.take());
    r.image_bytes = u("image_bytes").or(r.image_bytes);
    r.image_sha256 = text(record, "image_sha256").or(r.image_sha256.take());
    if r.verdict.is_empty() {
        r.verdict = text(record, "verdict").unwrap_or_default();
    }
    if r.kind == "call" && r.verdict.is_empty() {
        r.verdict = "allowed".into();
    }
}

/// Why a reviewer should look at `r`, if at all.
fn flag(r: &Row) -> Option<Flag> {
    let alert = |label: &str| {
        Some(Flag {
            level: "alert",
            label: label.into(),
        })
    };
    let warn = |label: &str| {
        Some(Flag {
            level: "warn",
            label: label.into(),
        })
    };
    match (r.kind.as_str(), r.outcome.as_deref()) {
        ("refusal", _) => alert("DENIED"),
        // No page said it made the request: Chromium's own services use the
        // session's proxy too. Worth a look, not the red of what a page did.
        ("gate", _)
            if r.rule.as_deref() == Some("request.blocked")
                && r.requester.as_deref() == Some("unknown") =>
        {
            warn("REQUEST BLOCKED, REQUESTER UNKNOWN")
        }
        ("gate", _) if r.rule.as_deref() == Some("request.blocked") => alert("REQUEST BLOCKED"),
        ("gate", _) => alert("GATE REFUSED"),
        ("call", None) => warn("NO OUTCOME"),
        ("call", Some("ok")) => None,
        ("call", Some("navigation_blocked")) => alert("NAVIGATION BLOCKED"),
        ("call", Some("page_unreadable")) => alert("PAGE UNREADABLE"),
        ("call", Some("refused")) => alert("REFUSED"),
        ("call", Some("audit_unavailable")) => alert("AUDIT UNAVAILABLE"),
        ("call", Some(other)) => warn(&other.replace('_', " ").to_uppercase()),
        ("server", Some("reload_refused")) => warn("RELOAD REFUSED"),
        ("session", Some("retire_incomplete")) => warn("RETIRE INCOMPLETE"),
        _ => None,
    }
}

/// The first 12 hex digits of a digest.
pub(super) fn short(digest: &str) -> String {
    digest.chars().take(12).collect()
}

fn totals(report: &mut Report, rows: &[Row]) {
    let mut durations = Vec::new();
    let bump = |map: &mut BTreeMap<String, u64>, key: &str| {
        *map.entry(key.to_owned()).or_insert(0) += 1;
    };
    for r in rows {
        let kind = r.kind.as_str();
        if matches!(kind, "call" | "refusal") {
            bump(&mut report.totals, "calls");
        }
        // A refused call is counted as `denied` with the other refusals.
        if kind == "call" {
            bump(&mut report.totals, "allowed");
            match &r.outcome {
                Some(outcome) => {
                    bump(&mut report.totals, &format!("outcome_{outcome}"));
                    if let Some(d) = r.duration_ms {
                        durations.push(d);
                    }
                }
                None => bump(&mut report.totals, "no_outcome"),
            }
        }
        let refusal = counts::refusal(r);
        if let Some(refusal) = refusal {
            bump(&mut report.totals, refusal.key());
            bump(&mut report.totals, "refusals");
            bump(
                &mut report.refusals_by_rule,
                r.rule.as_deref().unwrap_or(counts::NO_RULE),
            );
        }
        let destination = counts::destination(r);
        match &destination {
            Some(counts::Went::Reached(origin)) => {
                bump(&mut report.totals, "reached");
                bump(&mut report.destinations.reached, origin);
            }
            Some(counts::Went::Refused(origin)) => {
                bump(&mut report.totals, "refused_destinations");
                bump(&mut report.destinations.refused, origin);
            }
            None => {}
        }
        if kind == "server" || kind == "rotation" {
            continue;
        }
        let s = report
            .sessions
            .entry(r.session.clone())
            .or_insert_with(|| SessionSummary {
                first: r.time.clone(),
                ..SessionSummary::default()
            });
        session_row(s, r, refusal, destination);
    }
    durations.sort_by(f64::total_cmp);
    let pct =
        |p: usize| (!durations.is_empty()).then(|| durations[(durations.len() - 1) * p / 100]);
    report.p50_ms = pct(50);
    report.p95_ms = pct(95);
}

/// Count `r` into its session's summary, as [`totals`] counts it into the
/// report's.
fn session_row(
    s: &mut SessionSummary,
    r: &Row,
    refusal: Option<counts::Refusal>,
    destination: Option<counts::Went>,
) {
    s.last.clone_from(&r.time);
    match r.kind.as_str() {
        "call" => {
            s.calls += 1;
            s.allowed += 1;
        }
        "refusal" => s.calls += 1,
        _ => {}
    }
    match refusal {
        Some(counts::Refusal::Denied) => s.denied += 1,
        Some(counts::Refusal::Refused) => s.refused += 1,
        Some(counts::Refusal::Gate) => s.gate_refusals += 1,
        None => {}
    }
    s.refusals += u64::from(refusal.is_some());
    match destination {
        Some(counts::Went::Reached(origin)) => {
            *s.destinations.reached.entry(origin).or_insert(0) += 1
        }
        Some(counts::Went::Refused(origin)) => {
            *s.destinations.refused.entry(origin).or_insert(0) += 1
        }
        None => {}
    }
    match r.flag.as_ref().map(|f| f.level) {
        Some("alert") => s.alerts += 1,
        Some(_) => s.warnings += 1,
        None => {}
    }
}
