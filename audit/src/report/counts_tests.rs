//! The counts agree everywhere (header, tiles, sessions, JSON, table) on a
//! log with every kind of refusal, and each session says where it went.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    counts::{named_in_reason, origin},
    *,
};

/// Two sessions and a sessionless refusal: opens that reached a page, an
/// open refused by address, a refused subcommand, an allowed `fill` refused
/// by `secret.host` while it ran, a navigation the guard blocked, a request
/// the gate blocked, a connection the egress proxy refused, a `cdp.refused`,
/// a `javascript:` open with markup in it, a failed call, a malformed
/// message, a call refused as `request.invalid`, an intent without outcome.
fn every_kind() -> Vec<Value> {
    let mut seq = 0;
    let mut record = |phase: &str, session: Option<&str>, extra: Value| {
        seq += 1;
        let mut v = json!({"seq": seq, "phase": phase, "call_id": format!("c{seq}"), "host": "vm", "pid": 7,
                           "time": format!("2026-11-25T07:19:{:02}.000000000Z", seq)});
        if let Some(s) = session {
            v["session_id"] = json!(s);
        }
        if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
            v.extend(extra);
        }
        v
    };
    let mut call = |session: &str, argv: Value, outcome: Value| {
        let intent = record(
            "intent",
            Some(session),
            json!({"verdict": "allowed", "argv": argv}),
        );
        let mut out = record("outcome", Some(session), outcome);
        out["call_id"] = intent["call_id"].clone();
        [intent, out]
    };
    let mut log = vec![];
    log.extend(call("s1", json!(["open", "http://127.0.0.1:8000/form?token=***"]),
        json!({"outcome": "ok", "exit_code": 0, "page_url": "http://127.0.0.1:8000/form?token=***"})));
    log.extend(call(
        "s1",
        json!(["open", "http://127.0.0.1:8000/next"]),
        json!({"outcome": "ok", "exit_code": 0}),
    ));
    log.extend(call("s2", json!(["fill", "#pw", {"redacted": true, "len": 18, "mac": "0123456789abcdef"}]),
        json!({"outcome": "refused", "exit_code": 126, "rule": "secret.host",
               "reason": "the secret PW may be typed only on 127.0.0.1:8000; the page is on 127.0.0.2:8000; nothing was typed"})));
    log.extend(call("s2", json!(["click", "#away"]), json!({"outcome": "navigation_blocked", "exit_code": 126,
        "rule": "navigation.blocked", "page_url": "blob:http://127.0.0.1:8000/0b5e", "reason": "blob: is not allowed"})));
    log.extend(call(
        "s1",
        json!(["get", "title"]),
        json!({"outcome": "error", "exit_code": 1}),
    ));
    let mut more = vec![
        record(
            "denied",
            Some("s1"),
            json!({"verdict": "denied", "rule": "address.private",
            "argv": ["open", "http://***@10.0.0.1:8080/admin"], "reason": "10.0.0.1 is private"}),
        ),
        record(
            "denied",
            Some("s2"),
            json!({"verdict": "denied", "rule": "subcommand.denied", "argv": ["eval", "1"]}),
        ),
        record(
            "denied",
            Some("s1"),
            json!({"verdict": "denied", "rule": "request.blocked",
            "reason": "a Document request to http://127.0.0.3:9/next was blocked: address.private"}),
        ),
        record(
            "denied",
            Some("s2"),
            json!({"verdict": "denied", "rule": "request.blocked",
            "reason": "a connection to 169.254.169.254:80 was refused by the egress proxy: [address.private] link-local"}),
        ),
        record(
            "denied",
            Some("s2"),
            json!({"verdict": "denied", "rule": "cdp.refused", "reason": "Browser.close"}),
        ),
        record(
            "denied",
            Some("s2"),
            json!({"verdict": "denied", "rule": "url.scheme",
            "argv": ["open", "javascript:<script>alert(1)</script>"]}),
        ),
        record(
            "denied",
            None,
            json!({"verdict": "denied", "rule": "jsonrpc.parse_error"}),
        ),
        // The call layer's refusal of malformed arguments: shares the
        // `request.` prefix with the gate's `request.blocked`, but no
        // browser asked for it.
        record(
            "denied",
            Some("s1"),
            json!({"verdict": "denied", "rule": "request.invalid", "reason": "unknown key `argvv`"}),
        ),
        record(
            "intent",
            Some("s2"),
            json!({"verdict": "allowed", "argv": ["wait", "10000"]}),
        ),
    ];
    log.append(&mut more);
    log
}

/// The number after `data-count="key">` (and a tile's `<div class="n">`),
/// at its first occurrence in `html`.
fn tagged(html: &str, key: &str) -> u64 {
    let marker = format!("data-count=\"{key}\">");
    let at = html.find(&marker).unwrap_or_else(|| panic!("no {marker}")) + marker.len();
    let rest = html[at..].trim_start_matches("<div class=\"n\">");
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {marker}"))
}

const KEYS: [&str; 6] = [
    "calls",
    "allowed",
    "denied",
    "refused",
    "gate_refusals",
    "refusals",
];

fn of(s: &SessionSummary, key: &str) -> u64 {
    match key {
        "calls" => s.calls,
        "allowed" => s.allowed,
        "denied" => s.denied,
        "refused" => s.refused,
        "gate_refusals" => s.gate_refusals,
        _ => s.refusals,
    }
}

#[test]
fn refusals_are_counted_once_and_agree_in_every_view() {
    let log = every_kind();
    let report = build(&log, &Filter::default());
    // From the records themselves: refusals are the denied records and the
    // outcomes that refused; the gate's are the denied records it wrote.
    let phase = |r: &Value, p: &str| r["phase"] == p;
    let denied_records = log.iter().filter(|r| phase(r, "denied")).count() as u64;
    let gate = log
        .iter()
        .filter(|r| {
            phase(r, "denied")
                && r["rule"]
                    .as_str()
                    .is_some_and(|x| x == "request.blocked" || x.starts_with("cdp."))
        })
        .count() as u64;
    let refused = log
        .iter()
        .filter(|r| {
            phase(r, "outcome")
                && matches!(
                    r["outcome"].as_str(),
                    Some("refused" | "navigation_blocked")
                )
        })
        .count() as u64;
    let expected = BTreeMap::from([
        ("calls", 11),
        ("allowed", 6),
        ("denied", denied_records - gate),
        ("refused", refused),
        ("gate_refusals", gate),
        ("refusals", denied_records + refused),
    ]);
    assert_eq!((denied_records - gate, refused, gate), (5, 2, 3));
    for (key, n) in &expected {
        assert_eq!(report.totals[*key], *n, "totals.{key}");
        let sessions: u64 = report.sessions.values().map(|s| of(s, key)).sum();
        assert_eq!(sessions, *n, "the sessions' {key}");
    }
    assert_eq!(
        report.refusals_by_rule.values().sum::<u64>(),
        expected["refusals"]
    );
    assert_eq!(report.refusals_by_rule["secret.host"], 1);
    assert_eq!(report.refusals_by_rule["navigation.blocked"], 1);
    for s in report.sessions.values() {
        assert_eq!(s.refusals, s.denied + s.refused + s.gate_refusals);
    }

    // The page: the tiles, and each session's section.
    let html = report.to_html();
    let (head, sections) = html.split_once("<h2 id=\"sessions\">").unwrap_or_default();
    let summary = &head[head.find("<h2>Summary</h2>").unwrap_or_default()..];
    for (key, n) in &expected {
        assert_eq!(tagged(summary, key), *n, "tile {key}");
    }
    let tile = |label: &str| {
        tagged(
            &summary.replace(&format!("data-tile=\"{label}\""), "data-count=\"tile\""),
            "tile",
        )
    };
    assert_eq!(tile("DENIED"), expected["denied"]);
    assert_eq!(
        tile("REFUSED") + tile("NAVIGATION BLOCKED"),
        expected["refused"]
    );
    assert_eq!(
        tile("REQUEST BLOCKED") + tile("GATE REFUSED"),
        expected["gate_refusals"]
    );
    assert!(
        summary.contains(&format!("refusals={}", expected["refusals"])),
        "{summary}"
    );
    assert!(!summary.contains("denials"), "one name for one count");
    let shown: Vec<&str> = sections
        .split("<details class=\"session\"")
        .skip(1)
        .collect();
    assert_eq!(shown.len(), report.sessions.len());
    for key in KEYS {
        let sum: u64 = shown.iter().map(|s| tagged(s, key)).sum();
        assert_eq!(sum, expected[key], "the sections' {key}");
    }

    // JSON and the table say the same.
    let json = report.to_json();
    for (key, n) in &expected {
        assert_eq!(json["totals"][key], *n, "json totals.{key}");
    }
    let by_rule: u64 = json["refusals_by_rule"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
    assert_eq!(by_rule, expected["refusals"]);
    let table = report.to_table();
    assert!(
        table
            .contains("refusals by rule (10 = 5 denied + 2 refused while running + 3 by the gate)"),
        "{table}"
    );
    assert!(
        table.contains("totals: allowed=6 calls=11 denied=5 gate_refusals=3"),
        "{table}"
    );
}

#[test]
fn each_session_lists_the_origins_it_reached_and_was_refused() {
    let report = build(&every_kind(), &Filter::default());
    let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    };
    let s1 = &report.sessions["s1"].destinations;
    assert_eq!(s1.reached, map(&[("http://127.0.0.1:8000", 2)]));
    assert_eq!(
        s1.refused,
        map(&[("http://10.0.0.1:8080", 1), ("http://127.0.0.3:9", 1)])
    );
    let s2 = &report.sessions["s2"].destinations;
    assert!(s2.reached.is_empty(), "{s2:?}");
    assert_eq!(
        s2.refused,
        map(&[
            ("169.254.169.254:80", 1),
            ("blob:http://127.0.0.1:8000", 1),
            ("javascript:", 1)
        ])
    );
    assert_eq!(report.destinations.reached, s1.reached);
    assert_eq!(report.destinations.refused.values().sum::<u64>(), 5);
    assert_eq!(
        (
            report.totals["reached"],
            report.totals["refused_destinations"]
        ),
        (2, 5)
    );

    let table = report.to_table();
    assert!(
        table.contains("  reached 2: http://127.0.0.1:8000 ×2\n"),
        "{table}"
    );
    assert!(
        table.contains("  refused 2: http://10.0.0.1:8080 ×1, http://127.0.0.3:9 ×1\n"),
        "{table}"
    );
    assert!(
        table.contains("destinations: 2 reached http://127.0.0.1:8000 ×2; 5 refused "),
        "{table}"
    );
    let html = report.to_html();
    let s2_html = html
        .split("<details class=\"session\" open data-session=\"s2\"")
        .nth(1)
        .unwrap_or_default();
    let (_, s2_where) = s2_html.split_once("class=\"where\"").unwrap_or_default();
    assert_eq!(tagged(s2_where, "reached"), 0);
    assert_eq!(tagged(s2_where, "refused"), 3);
    assert!(s2_html.contains("<li data-origin=\"169.254.169.254:80\" data-count=\"1\">"));
    // The markup of the refused URL is shown in its row, escaped; its origin is the scheme alone.
    assert!(s2_html.contains("javascript:&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!html.contains("<script>alert"));
    let json = report.to_json();
    assert_eq!(
        json["sessions"]["s1"]["destinations"]["reached"]["http://127.0.0.1:8000"],
        2
    );
}

#[test]
fn origins_are_what_the_record_holds_less_path_and_userinfo() {
    for (url, shown) in [
        (
            "http://127.0.0.1:8000/form?token=***",
            "http://127.0.0.1:8000",
        ),
        ("HTTPS://***@example.test/x#y", "https://example.test"),
        (
            "blob:http://127.0.0.1:8000/0b5e",
            "blob:http://127.0.0.1:8000",
        ),
        ("about:blank", "about:blank"),
        ("data:text/html,<h1>page</h1>", "data:"),
        ("127.0.0.3:443", "127.0.0.3:443"),
        ("localhost:8080", "localhost:8080"),
        ("example.test/path", "example.test"),
        ("", ""),
    ] {
        assert_eq!(origin(url), shown, "{url}");
    }
    for (reason, named) in [
        (
            "a Document request to http://127.0.0.3:9/next was blocked: address.private",
            Some("http://127.0.0.3:9/next"),
        ),
        (
            "a download of \"x.zip\" from http://127.0.0.1:1/x.zip was denied (…)",
            Some("http://127.0.0.1:1/x.zip"),
        ),
        (
            "a connection to 10.0.0.1:443 was refused by the egress proxy: [address.private] …",
            Some("10.0.0.1:443"),
        ),
        (
            "a request to http://10.0.0.1/ was refused by the egress proxy: …",
            Some("http://10.0.0.1/"),
        ),
        ("something else", None),
    ] {
        assert_eq!(named_in_reason(reason), named, "{reason}");
    }
}
