use std::borrow::Cow;

use serde_json::{Value, json};

use super::*;

fn forged() -> Vec<Value> {
    vec![json!({
        "phase": "denied",
        "seq": 1,
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
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("session forged"))
        .collect();
    // Once, in the timeline: one line.
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
        table.contains("[subcommand.denied\\nsession evil]"),
        "{table}"
    );
    assert!(table.contains("subcommand.denied\\nsession evil=1"));
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

/// A run: a server starts, a call opens a page, one is refused, the gate
/// blocks a request, a page is refused by the guard, the policy is reloaded,
/// an intent never gets its outcome, the server stops.
fn run() -> Vec<Value> {
    let base = |seq: u64, phase: &str, call: &str| {
        json!({"seq": seq, "phase": phase, "call_id": call, "host": "vm", "pid": 7,
               "producer": "browser-shell/0.1.0", "policy_sha256": "p1".repeat(32),
               "time": format!("2026-11-25T07:19:{:02}.500000000Z", 10 + seq)})
    };
    let with = |mut v: Value, extra: Value| {
        if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
            v.extend(extra);
        }
        v
    };
    vec![
        with(
            base(1, "lifecycle", "l1"),
            json!({"outcome": "started", "reason": "the server is ready", "detail": {
                "browser_shell": {"version": "0.1.0", "sha256": "b".repeat(64)},
                "agent_browser": {"path": "/opt/ab", "version": "agent-browser 0.41.2", "sha256": "a".repeat(64)},
                "trampoline": {"path": "/opt/hardening-trampoline", "sha256": "t".repeat(64)},
                "confinement": {"landlock": "enforced", "landlock_abi": 7, "seccomp": "enforced", "capabilities": "cleared", "degraded": false},
                "otlp": false,
                "policy": {"file": "/etc/p.json", "file_sha256": "f".repeat(64), "source": "file", "sha256": "p1".repeat(32), "effective": {"allow_schemes": ["http"]}}}}),
        ),
        with(
            base(2, "intent", "c1"),
            json!({"session_id": "u1", "client": "mcp/1.0", "verdict": "allowed",
                   "argv": ["open", "http://127.0.0.1:8000/form?token=***"], "argv_mac": "m".repeat(64), "resolved": ["127.0.0.1"]}),
        ),
        with(
            base(3, "denied", "c2"),
            json!({"session_id": "u2", "verdict": "denied", "rule": "subcommand.denied",
                   "reason": "`eval` is not allowed", "argv": ["eval", "1"], "exit_code": 126, "duration_ms": 0.2}),
        ),
        with(
            base(4, "outcome", "c1"),
            json!({"session_id": "u1", "outcome": "ok", "exit_code": 0, "duration_ms": 500.0,
                   "page_url": "http://127.0.0.1:8000/form?token=***", "reply_stdout_bytes": 450, "reply_stdout_sha256": "d".repeat(64)}),
        ),
        with(
            base(5, "intent", "c3"),
            json!({"session_id": "u1", "verdict": "allowed",
                   "argv": ["fill", "#pw", {"redacted": true, "len": 12, "mac": "0123456789abcdef", "secrets": ["PW"]}]}),
        ),
        with(
            base(6, "outcome", "c3"),
            json!({"session_id": "u1", "outcome": "navigation_blocked", "exit_code": 126, "duration_ms": 20.0,
                   "page_url": "blob:http://127.0.0.1:8000/x", "reason": "the page navigated to blob:…"}),
        ),
        with(
            base(7, "denied", "g1"),
            json!({"session_id": "u1", "verdict": "denied", "rule": "request.blocked",
                   "reason": "Document http://127.0.0.3:9/next: address.private"}),
        ),
        with(
            base(8, "lifecycle", "l2"),
            json!({"outcome": "reloaded", "policy_sha256": "p2".repeat(32), "reason": "reloaded",
                   "detail": {"previous_policy_sha256": "p1".repeat(32), "policy": {"source": "file", "file": "/etc/p.json", "sha256": "p2".repeat(32)}}}),
        ),
        with(
            base(9, "intent", "c4"),
            json!({"session_id": "u2", "verdict": "allowed", "argv": ["wait", "10000"], "policy_sha256": "p2".repeat(32)}),
        ),
        with(
            base(10, "lifecycle", "l3"),
            json!({"outcome": "stopped", "reason": "stdin closed", "detail": {"calls_served": 4}}),
        ),
    ]
}

#[test]
fn an_intent_and_its_outcome_are_one_row_with_argv_page_and_digests() {
    let report = build(&run(), &Filter::default());
    let open: Vec<&Row> = report
        .timeline
        .iter()
        .filter(|r| r.call_id == "c1")
        .collect();
    assert_eq!(open.len(), 1);
    let r = open[0];
    assert_eq!((r.seq, r.end_seq), (Some(2), Some(4)));
    assert_eq!(r.outcome.as_deref(), Some("ok"));
    assert_eq!(r.argv[1], "http://127.0.0.1:8000/form?token=***");
    assert_eq!(
        r.page_url.as_deref(),
        Some("http://127.0.0.1:8000/form?token=***")
    );
    assert_eq!(r.reply_stdout_bytes, Some(450));
    assert_eq!(r.client.as_deref(), Some("mcp/1.0"));
    assert!(r.flag.is_none());
    let table = report.to_table();
    assert!(
        table.contains("open http://127.0.0.1:8000/form?token=***"),
        "{table}"
    );
    assert!(
        table.contains("page after: http://127.0.0.1:8000/form?token=***"),
        "{table}"
    );
    assert!(
        table.contains(&format!("stdout sha256 {} (450 B)", "d".repeat(64))),
        "{table}"
    );
}

#[test]
fn the_timeline_is_in_log_order_across_sessions() {
    let report = build(&run(), &Filter::default());
    let seqs: Vec<Option<u64>> = report.timeline.iter().map(|r| r.seq).collect();
    let expected: Vec<Option<u64>> = [1, 2, 3, 5, 7, 8, 9, 10].into_iter().map(Some).collect();
    assert_eq!(seqs, expected);
    let sessions: Vec<&str> = report.timeline.iter().map(|r| r.session.as_str()).collect();
    assert_eq!(sessions, ["", "u1", "u2", "u1", "u1", "", "u2", ""]);
    assert_eq!(report.sessions["u1"].calls, 2);
    assert_eq!(report.sessions["u1"].gate_refusals, 1);
    assert_eq!(report.sessions["u2"].denied, 1);
    let only_u2 = build(
        &run(),
        &Filter {
            session: Some("u2".into()),
            since: None,
        },
    );
    assert!(only_u2.timeline.iter().all(|r| r.session == "u2"));
    assert_eq!(only_u2.timeline.len(), 2);
}

#[test]
fn denials_and_blocks_stand_out_with_a_label_not_colour_alone() {
    let report = build(&run(), &Filter::default());
    let label = |call: &str| {
        report
            .timeline
            .iter()
            .find(|r| r.call_id == call)
            .and_then(|r| r.flag.clone())
            .map(|f| (f.level, f.label))
    };
    assert_eq!(label("c2"), Some(("alert", "DENIED".into())));
    assert_eq!(label("c3"), Some(("alert", "NAVIGATION BLOCKED".into())));
    assert_eq!(label("g1"), Some(("alert", "REQUEST BLOCKED".into())));
    assert_eq!(label("c4"), Some(("warn", "NO OUTCOME".into())));
    assert_eq!(label("c1"), None);
    let html = report.to_html();
    for text in [
        "DENIED",
        "NAVIGATION BLOCKED",
        "REQUEST BLOCKED",
        "NO OUTCOME",
    ] {
        assert!(html.contains(&format!(">{text}</span>")), "{text}");
    }
    assert_eq!(report.totals["no_outcome"], 1);
    assert_eq!(report.totals["gate_refusals"], 1);
    assert_eq!(report.refusals_by_rule["request.blocked"], 1);
}

#[test]
fn servers_and_policies_come_from_the_lifecycle_records() {
    let report = build(&run(), &Filter::default());
    assert_eq!(report.servers.len(), 1);
    let s = &report.servers[0];
    assert_eq!(s.sha256.as_deref(), Some("b".repeat(64).as_str()));
    assert_eq!(
        s.agent_browser_version.as_deref(),
        Some("agent-browser 0.41.2")
    );
    assert_eq!(s.calls_served, Some(4));
    assert_eq!(
        s.trampoline_path.as_deref(),
        Some("/opt/hardening-trampoline")
    );
    assert_eq!(
        s.trampoline_sha256.as_deref(),
        Some("t".repeat(64).as_str())
    );
    assert!(s.started.is_some() && s.stopped.is_some());
    assert_eq!(
        s.confinement.as_deref(),
        Some("landlock enforced (ABI 7), seccomp enforced, capabilities cleared")
    );
    let digests: Vec<&str> = report.policies.iter().map(|p| p.sha256.as_str()).collect();
    assert_eq!(digests, ["p1".repeat(32), "p2".repeat(32)]);
    let first = &report.policies[0];
    assert_eq!(first.file.as_deref(), Some("/etc/p.json"));
    assert!(first.events[0].contains("in force when server pid 7 started"));
    assert!(first.events[1].contains("replaced by p2p2p2p2p2p2 on reload"));
    assert!(report.policies[1].events[0].contains("replacing p1p1p1p1p1p1"));
    // Calls, refusals, gate refusals: the open, eval, fill, gate block under
    // the first; the wait under the second.
    assert_eq!((first.decided, report.policies[1].decided), (4, 1));
    assert_eq!(
        report.time_range,
        Some((
            "2026-11-25T07:19:11.500000000Z".into(),
            "2026-11-25T07:19:20.500000000Z".into()
        ))
    );
}

#[test]
fn redacted_free_text_shows_its_length_mac_and_secret_never_a_forgeable_string() {
    let redacted =
        json!({"redacted": true, "len": 12, "mac": "0123456789abcdef", "secrets": ["PW"]});
    assert_eq!(
        arg_text(&redacted),
        "‹redacted secret PW 12 chars mac 0123456789abcdef›"
    );
    // A string that looks like one is quoted, as is one with spaces.
    assert_eq!(
        arg_text(&json!("‹redacted 3 chars›")),
        "\"‹redacted 3 chars›\""
    );
    assert_eq!(arg_text(&json!("a b")), "\"a b\"");
    assert_eq!(arg_text(&json!("#q")), "#q");
    let html = build(&run(), &Filter::default()).to_html();
    assert!(html.contains(
        "<span class=\"redacted\">‹redacted secret PW 12 chars mac 0123456789abcdef›</span>"
    ));
}

#[test]
fn html_is_self_contained_and_runs_no_markup_from_the_log() {
    let mut records = run();
    records.push(json!({"seq": 11, "phase": "denied", "call_id": "x", "time": "2026-11-25T07:19:30Z",
        "session_id": "\"><img src=x onerror=alert(1)>", "rule": "</script><script>alert(2)</script>",
        "reason": "<a href='http://evil.example/'>x</a> & 'quotes'", "argv": ["<b>bold</b>"]}));
    let html = build(&records, &Filter::default()).to_html();
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the page's own script"
    );
    assert_eq!(html.matches("<style").count(), 1);
    // Every tag is one of the page's own, and none loads or runs anything.
    for piece in html.split('<').skip(1) {
        let tag = &piece[..piece.find('>').unwrap_or(piece.len())];
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        assert!(
            OUR_TAGS.contains(&name.to_ascii_lowercase().as_str()) || tag.starts_with("!doctype"),
            "<{tag}>"
        );
        let outside_values = unquoted(tag);
        for attribute in ["src=", "href=", " on", "action=", "style="] {
            assert!(
                !outside_values.contains(attribute),
                "{attribute} in <{tag}>"
            );
        }
    }
    assert!(!html.contains("url(") && !html.contains("@import"));
    assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(2)&lt;/script&gt;"));
    assert!(html.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
    assert!(html.contains("&#39;quotes&#39;"));
    // The CSP admits exactly the page's own style and script.
    let csp = html
        .split("Content-Security-Policy\" content=\"")
        .nth(1)
        .unwrap_or_default();
    let csp = &csp[..csp.find('"').unwrap_or(0)];
    assert!(
        csp.starts_with("default-src 'none'; style-src 'sha256-"),
        "{csp}"
    );
    assert!(
        csp.contains("script-src 'sha256-") && !csp.contains("unsafe"),
        "{csp}"
    );
}

const OUR_TAGS: &[&str] = &[
    "button", "html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "div",
    "section", "p", "strong", "ul", "li", "details", "summary", "pre", "code", "span", "table",
    "tr", "th", "td", "form", "label", "select", "option", "input", "em", "br", "script",
];

/// `tag` without its quoted attribute values.
fn unquoted(tag: &str) -> String {
    let mut inside = false;
    tag.chars()
        .filter(|c| {
            if *c == '"' {
                inside = !inside;
                return false;
            }
            !inside
        })
        .collect()
}

#[test]
fn the_csp_hashes_are_those_of_the_inline_blocks() {
    let html = build(&run(), &Filter::default()).to_html();
    let between = |open: &str, close: &str| {
        let start = html.find(open).unwrap_or(0) + open.len();
        html[start..start + html[start..].find(close).unwrap_or(0)].to_owned()
    };
    let style = between("<style>", "</style>");
    let script = between("<script>", "</script>");
    assert!(html.contains(&html::csp_hash(&style)));
    assert!(html.contains(&html::csp_hash(&script)));
}

fn no_nulls(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(a) => a.iter().all(no_nulls),
        Value::Object(o) => o.values().all(no_nulls),
        _ => true,
    }
}

#[test]
fn ocsf_maps_the_url_and_the_actor() {
    let events = ocsf_events(&run());
    assert!(events.iter().all(no_nulls), "no null values");
    let intent = &events[1];
    assert_eq!(intent["class_uid"], 6003);
    assert_eq!(intent["activity_name"], "open");
    assert_eq!(intent["actor"]["session"]["uid"], "u1");
    assert_eq!(intent["actor"]["app_name"], "mcp/1.0");
    let url = &intent["http_request"]["url"];
    assert_eq!(url["url_string"], "http://127.0.0.1:8000/form?token=***");
    assert_eq!(url["hostname"], "127.0.0.1");
    assert_eq!(url["port"], 8000);
    assert_eq!(url["path"], "/form");
    assert_eq!(url["query_string"], "token=***");
    assert_eq!(intent["dst_endpoint"]["ip"], "127.0.0.1");
    assert!(intent["unmapped"].get("session_id").is_none());
    assert_eq!(intent["unmapped"]["argv"][0], "open");
    // The outcome carries its intent's URL, and the page it ended on.
    let outcome = &events[3];
    assert_eq!(outcome["metadata"]["correlation_uid"], "c1");
    assert_eq!(outcome["http_request"]["url"]["hostname"], "127.0.0.1");
    assert_eq!(outcome["resources"][0]["type"], "web_page");
    assert_eq!(outcome["resources"][0]["data"]["url"]["path"], "/form");
    // Refusals and blocks are blocked, with their rule.
    let refused = &events[2];
    assert_eq!(
        (
            refused["disposition_id"].clone(),
            refused["status_detail"].clone()
        ),
        (json!(2), json!("subcommand.denied"))
    );
    assert_eq!(events[5]["disposition_id"], 2, "navigation_blocked");
    let gate = &events[6];
    assert_eq!(gate["actor"]["app_name"], "web page (via the browser gate)");
    assert_eq!(gate["actor"]["session"]["uid"], "u1");
}

#[test]
fn ocsf_server_lifecycle_is_application_lifecycle() {
    let events = ocsf_events(&run());
    let started = &events[0];
    assert_eq!(
        (started["class_uid"].clone(), started["activity_id"].clone()),
        (json!(6002), json!(3))
    );
    assert_eq!(started["type_uid"], 600_203);
    assert_eq!(started["app"]["version"], "0.1.0");
    assert_eq!(started["device"]["hostname"], "vm");
    assert_eq!(started["actor"]["process"]["pid"], 7);
    let stopped = &events[9];
    assert_eq!(
        (stopped["activity_id"].clone(), stopped["type_uid"].clone()),
        (json!(4), json!(600_204))
    );
    assert_eq!(events[7]["activity_id"], 99, "reloaded");
}

#[test]
fn a_server_that_was_its_own_trampoline_is_reported_as_such() {
    let mut records = run();
    records[0]["detail"]["trampoline"]["path"] = Value::Null;
    records[0]["detail"]["trampoline"]["sha256"] = json!("b".repeat(64));
    let report = build(&records, &Filter::default());
    let s = &report.servers[0];
    assert_eq!(
        s.trampoline_path.as_deref(),
        Some("browser-shell's own binary")
    );
    assert_eq!(s.trampoline_sha256, s.sha256);
}

#[test]
fn ocsf_counts_a_call_once_and_a_timeout_is_not_informational() {
    let mut records = run();
    records.push(
        json!({"seq": 11, "phase": "outcome", "call_id": "c4", "session_id": "u2",
        "outcome": "timeout", "exit_code": 124, "duration_ms": 10_000.0, "host": "vm", "pid": 7,
        "time": "2026-11-25T07:19:31.500000000Z"}),
    );
    let events = ocsf_events(&records);
    let of_call = |call: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["metadata"]["correlation_uid"] == call)
            .collect()
    };
    // The intent says nothing of the result: only the outcome is a success.
    let open = of_call("c1");
    assert_eq!(
        open.iter()
            .map(|e| (e["status"].clone(), e["status_id"].clone()))
            .collect::<Vec<_>>(),
        vec![(json!("Unknown"), json!(0)), (json!("Success"), json!(1))]
    );
    assert_eq!(open[0]["disposition"], "Allowed", "the gate allowed it");
    let timed_out = of_call("c4");
    assert_eq!(timed_out[0]["status"], "Unknown");
    assert_eq!(
        (
            timed_out[1]["status"].clone(),
            timed_out[1]["severity_id"].clone()
        ),
        (json!("Failure"), json!(2))
    );
    let successes = events.iter().filter(|e| e["status"] == "Success").count();
    // Calls that succeeded (c1) and the server's start, reload and stop.
    assert_eq!(successes, 4);
}

#[test]
fn ocsf_declares_a_version_with_every_attribute_used_and_its_profiles() {
    let events = ocsf_events(&run());
    assert!(events.iter().all(|e| e["metadata"]["version"] == "1.4.0"));
    assert_eq!(events[0]["activity_name"], "Start");
    assert_eq!(events[9]["activity_name"], "Stop");
    assert_eq!(events[7]["activity_name"], "Reload");
    assert_eq!(events[0]["metadata"]["profiles"], json!(["host"]));
    let mut traced = run();
    traced[1]["trace_id"] = json!("0af7651916cd43dd8448eb211c80319c");
    let event = &ocsf_events(&traced)[1];
    assert!(event.get("trace").is_some());
    assert_eq!(
        event["metadata"]["profiles"],
        json!(["security_control", "trace"])
    );
}

#[test]
fn ocsf_names_the_mcp_client_for_a_malformed_call_not_the_browser() {
    let denied = |rule: &str| {
        json!({"seq": 1, "phase": "denied", "call_id": "c1", "host": "vm", "pid": 7,
               "time": "2026-11-25T07:19:10.000000000Z", "session_id": "u1",
               "verdict": "denied", "rule": rule})
    };
    let events = ocsf_events(&[denied("request.invalid"), denied("request.blocked")]);
    assert_eq!(events[0]["actor"]["app_name"], "MCP client (unidentified)");
    assert_eq!(
        events[1]["actor"]["app_name"],
        "web page (via the browser gate)"
    );
}
