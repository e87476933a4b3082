//! The real server exports over OTLP: one span per `tools/call`, one log
//! record per audit record, correlated, honouring the client's
//! `traceparent` — and a filled password reaches neither the OTLP payload,
//! the audit log, nor the server's stderr.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

#[allow(dead_code)] // each test binary uses a different part
mod common;

use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
};

use common::{
    Dirs, agent_browser, binaries_under_tmp_flag, closed_port, dirs,
    otlp_receiver::{attrs, grpc_receiver, hex, largest_point, silent_collector},
};
use prost::Message as _;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_browser-shell");
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

fn call(id: u64, name: &str, arguments: Value, meta: Option<Value>) -> String {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

/// The real server with OTLP pointed at `endpoint`, no Chromium (`cdp_port`
/// closed), audit log at `audit_log`; returns the child and a `send` that
/// writes one JSON-RPC line and reads the reply.
fn spawn_server(
    scratch: &std::path::Path,
    audit_log: &std::path::Path,
    cdp_port: u16,
    endpoint: &str,
    stderr: Stdio,
    env: &[(&str, String)],
) -> (std::process::Child, impl FnMut(String) -> Value) {
    let mut child = Command::new(BIN)
        .args(["serve", "--agent-browser"])
        .arg(agent_browser())
        .args(["--cdp-port", &cdp_port.to_string(), "--state-dir"])
        .arg(scratch.join("s"))
        .arg("--output-dir")
        .arg(scratch.join("o"))
        .arg("--audit-log")
        .arg(audit_log)
        .arg("--policy")
        .arg({
            // Every key at its default; a missing file is refused unless at
            // the default path.
            let policy = audit_log.with_file_name("default-policy.json");
            std::fs::write(&policy, "{}").expect("write the policy");
            policy
        })
        .args(binaries_under_tmp_flag(BIN.as_ref()))
        // A pool of one, warmed at start: its gauge is a signal the
        // vocabulary covers too.
        .args(["--pool", "1"])
        .env_clear()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_SERVICE_NAME", "browser-shell-e2e")
        .env("RUST_LOG", "debug")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let send = move |line: String| {
        writeln!(stdin, "{line}").unwrap();
        let mut reply = String::new();
        stdout.read_line(&mut reply).unwrap();
        serde_json::from_str::<Value>(&reply).unwrap()
    };
    (child, send)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_exports_one_span_per_call_and_one_log_per_record() {
    let (endpoint, store) = grpc_receiver().await;
    let Dirs { scratch, evidence } = dirs();
    let closed_port = closed_port();
    let audit_log = evidence.path().join("audit.jsonl");
    let password = format!("pw-{}", std::process::id());

    let stderr = tokio::task::spawn_blocking({
        let (scratch, audit_log, password) = (scratch.path().to_owned(), audit_log.clone(), password.clone());
        move || {
            let (child, mut send) = spawn_server(&scratch, &audit_log, closed_port, &endpoint, Stdio::piped(), &[]);
            send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"otlp-test","version":"1"}}}).to_string());
            let denied = send(call(1, "browser-shell", json!({"session_id":"o1","argv":["eval","1"]}), Some(json!({"traceparent": TRACEPARENT}))));
            assert_eq!(denied["result"]["structuredContent"]["exit_code"], 126, "{denied}");
            // Allowed: spawns agent-browser, which fails (no browser on that port).
            let filled = send(call(2, "browser-shell", json!({"session_id":"o1","argv":["fill","#pw",password]}), None));
            assert_eq!(filled["result"]["structuredContent"]["exit_code"], 1, "{filled}");
            let unknown = send(call(3, "nope", json!({}), None));
            assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
            let listed = send(json!({"jsonrpc":"2.0","id":4,"method":"tools/list"}).to_string());
            assert!(listed["result"]["tools"].is_array(), "{listed}");
            drop(send); // closes stdin
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    })
    .await
    .unwrap();

    let received = store.lock().unwrap();
    let all_spans = received.spans();
    // Every request the server answered has a span: the handshake and the listing too.
    let method_of = |span: &opentelemetry_proto::tonic::trace::v1::Span| {
        attrs(&span.attributes)["mcp.method.name"].clone()
    };
    let others: Vec<(String, String)> = all_spans
        .iter()
        .filter(|s| method_of(s) != "tools/call")
        .map(|s| (s.name.clone(), method_of(s)))
        .collect();
    assert_eq!(
        others,
        [
            ("initialize".to_owned(), "initialize".to_owned()),
            ("tools/list".to_owned(), "tools/list".to_owned())
        ]
    );
    let spans: Vec<_> = all_spans
        .into_iter()
        .filter(|s| method_of(s) == "tools/call")
        .collect();
    assert_eq!(spans.len(), 3, "one span per tools/call");
    for span in &spans {
        let a = attrs(&span.attributes);
        assert_eq!(a["mcp.method.name"], "tools/call");
        assert_eq!(a["network.transport"], "pipe");
        // Named after the tool only when it is the tool that was called.
        let unknown = a["jsonrpc.request.id"] == "3";
        let name = if unknown {
            "tools/call"
        } else {
            "tools/call browser-shell"
        };
        assert_eq!(span.name, name);
        assert_eq!(a.contains_key("gen_ai.operation.name"), !unknown, "{a:#?}");
    }
    let by_request = |id: &str| {
        spans
            .iter()
            .find(|s| {
                attrs(&s.attributes)
                    .get("jsonrpc.request.id")
                    .map(String::as_str)
                    == Some(id)
            })
            .unwrap()
    };
    let denied = by_request("1");
    assert_eq!(
        hex(&denied.trace_id),
        TRACE_ID,
        "the client's traceparent is the parent"
    );
    let a = attrs(&denied.attributes);
    assert_eq!(
        (
            a["browser_shell.verdict"].as_str(),
            a["browser_shell.rule"].as_str()
        ),
        ("denied", "subcommand.denied")
    );
    // A refusal is a tool result with isError: `tool_error`, its class beside it.
    assert_eq!(
        (
            a["error.type"].as_str(),
            a["browser_shell.error.type"].as_str()
        ),
        ("tool_error", "policy_denied")
    );
    let filled = attrs(&by_request("2").attributes);
    assert_eq!(
        (
            filled["browser_shell.subcommand"].as_str(),
            filled["error.type"].as_str()
        ),
        ("fill", "tool_error")
    );
    // A failed tool's status groups by what failed, never by the page's words or a nonce.
    let status = |id: &str| {
        by_request(id)
            .status
            .clone()
            .expect("a failed call's span has a status")
    };
    assert_eq!(status("1").message, "policy_denied: subcommand.denied");
    assert_eq!(status("2").message, "tool_error: fill, exit code 1");
    let malformed = attrs(&by_request("3").attributes);
    assert_eq!(malformed["error.type"], "-32602");
    assert!(
        !malformed.contains_key("browser_shell.error.type"),
        "a JSON-RPC error is not a tool error: {malformed:?}"
    );

    let logs = received.log_records();
    assert_vocabulary(&spans, &logs, &metric_points(&received));
    let audit_lines = std::fs::read_to_string(&audit_log).unwrap();
    assert_eq!(
        logs.len(),
        audit_lines.lines().count(),
        "one OTLP log per audit record"
    );
    // The failed command's outcome logs at ERROR, as its span is an error; the refusal at WARN.
    let severity_of = |phase: &str, outcome: Option<&str>| -> Vec<String> {
        logs.iter()
            .filter(|l| {
                let a = attrs(&l.attributes);
                a.get("browser_shell.phase").map(String::as_str) == Some(phase)
                    && a.get("browser_shell.outcome").map(String::as_str) == outcome
            })
            .map(|l| l.severity_text.clone())
            .collect()
    };
    assert_eq!(severity_of("outcome", Some("error")), ["ERROR"]);
    assert_eq!(
        severity_of("denied", None),
        ["WARN", "WARN"],
        "`eval` and the unknown tool"
    );
    for log in &logs {
        assert_eq!(log.event_name, "browser_shell.audit");
        // The server's own started/stopped records belong to no call.
        if log.span_id.iter().all(|b| *b == 0) {
            continue;
        }
        assert!(
            spans
                .iter()
                .any(|s| s.trace_id == log.trace_id && s.span_id == log.span_id),
            "log not correlated to a span"
        );
    }
    // The audit records carry the same trace/span ids as the spans.
    let first: Value = audit_lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["phase"] != "lifecycle")
        .unwrap();
    assert_eq!(first["trace_id"], TRACE_ID);

    // The password went into the page (and failed) but nowhere else.
    let mut payload = Vec::new();
    for r in &received.traces {
        payload.extend(r.encode_to_vec());
    }
    for r in &received.logs {
        payload.extend(r.encode_to_vec());
    }
    let needle = password.as_bytes();
    assert!(
        !payload.windows(needle.len()).any(|w| w == needle),
        "password in the OTLP payload"
    );
    assert!(
        !audit_lines.contains(&password),
        "password in the audit log"
    );
    assert!(
        !stderr.contains(&password),
        "password in the server's stderr (RUST_LOG=debug)"
    );
}

/// One row of docs/configuration.md's "One vocabulary" table: the
/// attribute, and whether spans, logs and metrics carry it.
struct Row {
    attribute: String,
    carried: [bool; 3],
}

fn vocabulary() -> Vec<Row> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let table = doc
        .split("### One vocabulary")
        .nth(1)
        .expect("docs/configuration.md has the vocabulary table");
    let rows: Vec<Row> = table
        .lines()
        .skip_while(|l| !l.starts_with("| what |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let mark = |cell: &str| match cell {
                "✓" => true,
                "–" => false,
                other => panic!("a vocabulary cell is ✓ or –, not {other:?}"),
            };
            Row {
                attribute: cells[2].trim_matches('`').to_owned(),
                carried: [mark(cells[3]), mark(cells[4]), mark(cells[5])],
            }
        })
        .collect();
    assert!(rows.len() >= 6, "the vocabulary table is not where it was");
    rows
}

/// Every data point's attributes of every metric received.
fn metric_points(
    received: &common::otlp_receiver::Received,
) -> Vec<std::collections::BTreeMap<String, String>> {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    received
        .metrics()
        .into_iter()
        .flat_map(|m| match &m.data {
            Some(Data::Histogram(h)) => {
                h.data_points.iter().map(|p| attrs(&p.attributes)).collect()
            }
            Some(Data::Sum(s)) => s.data_points.iter().map(|p| attrs(&p.attributes)).collect(),
            Some(Data::Gauge(g)) => g.data_points.iter().map(|p| attrs(&p.attributes)).collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// The three signals hold to the table: an attribute marked ✓ is on some
/// record of that signal, one marked – on none; no signal spells a shared
/// thing another way; every `browser_shell.*` key of a span or a metric is
/// in the table.
fn assert_vocabulary(
    spans: &[&opentelemetry_proto::tonic::trace::v1::Span],
    logs: &[&opentelemetry_proto::tonic::logs::v1::LogRecord],
    points: &[std::collections::BTreeMap<String, String>],
) {
    let signals: [Vec<std::collections::BTreeMap<String, String>>; 3] = [
        spans.iter().map(|s| attrs(&s.attributes)).collect(),
        logs.iter().map(|l| attrs(&l.attributes)).collect(),
        points.to_vec(),
    ];
    let rows = vocabulary();
    for row in &rows {
        for (signal, name) in signals.iter().zip(["spans", "logs", "metrics"]) {
            let seen = signal.iter().any(|a| a.contains_key(&row.attribute));
            let want = row.carried[["spans", "logs", "metrics"]
                .iter()
                .position(|n| *n == name)
                .unwrap()];
            assert_eq!(
                seen, want,
                "{} on {name}: the table says {want}",
                row.attribute
            );
        }
    }
    for (signal, name) in signals.iter().zip(["spans", "logs", "metrics"]) {
        for attributes in signal {
            for key in attributes.keys() {
                assert!(
                    !key.starts_with("browser_shell.audit.") && key != "browser_shell.deny_reason",
                    "{name} spell {key} their own way"
                );
                let listed = rows.iter().any(|r| &r.attribute == key);
                let shared = name == "logs" || !key.starts_with("browser_shell.");
                assert!(listed || shared, "{name}: {key} is not in the table");
            }
        }
    }
}

#[test]
fn a_dead_collector_costs_calls_nothing_and_loses_no_audit_record() {
    let Dirs { scratch, evidence } = dirs();
    let closed_port = closed_port();
    let audit_log = evidence.path().join("audit.jsonl");
    // On 127.0.0.3, which no receiver binds: a port released on 127.0.0.1
    // can be taken by the other test's receiver, running at the same time,
    // which then got this test's 20 spans.
    let endpoint = format!("http://127.0.0.3:{closed_port}");
    let (mut child, mut send) =
        spawn_server(scratch.path(), &audit_log, 9, &endpoint, Stdio::null(), &[]);
    send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string());
    let calls = 20;
    let started = std::time::Instant::now();
    for id in 1..=calls {
        let reply = send(call(
            id,
            "browser-shell",
            json!({"session_id":"d","argv":["eval","1"]}),
            None,
        ));
        assert_eq!(
            reply["result"]["structuredContent"]["exit_code"], 126,
            "{reply}"
        );
    }
    // Reported, not asserted: timing targets live in the benchmark.
    eprintln!(
        "{calls} refused calls with the collector down: {:?}",
        started.elapsed()
    );
    drop(send); // closes stdin
    assert!(child.wait().unwrap().success());
    let records = std::fs::read_to_string(&audit_log)
        .unwrap()
        .lines()
        .filter(|l| !l.contains(r#""phase":"lifecycle""#))
        .count();
    assert_eq!(
        records,
        usize::try_from(calls).unwrap(),
        "every call is in the JSONL"
    );
}

/// A collector that takes every connection and never answers: the copy
/// sent to it fails each batch after the exporter's timeout, is counted as
/// failed on the metrics (sent to a collector that answers), and is said on
/// stderr, while the server runs; the calls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_is_counted_and_said_while_the_server_runs() {
    let (metrics_endpoint, store) = grpc_receiver().await;
    let silent_endpoint = silent_collector();
    let Dirs { scratch, evidence } = dirs();
    let audit_log = evidence.path().join("audit.jsonl");
    let env = [
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", silent_endpoint.clone()),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", silent_endpoint),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            metrics_endpoint.clone(),
        ),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500".to_owned()),
    ];
    let failed_logs = {
        let store = store.clone();
        move || {
            largest_point(&store, "otel.sdk.exporter.log.exported", Some("timeout")).unwrap_or(0)
        }
    };
    let (counted, stderr) = tokio::task::spawn_blocking({
        let (scratch, audit_log) = (scratch.path().to_owned(), audit_log.clone());
        move || {
            let (child, mut send) =
                spawn_server(&scratch, &audit_log, 9, &metrics_endpoint, Stdio::piped(), &env);
            send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string());
            for id in 1..=3 {
                let reply = send(call(id, "browser-shell", json!({"session_id":"q","argv":["eval","1"]}), None));
                assert_eq!(reply["result"]["structuredContent"]["exit_code"], 126, "{reply}");
            }
            // The batch leaves within a second and fails three seconds
            // later; the next metric export (every 0.5 s) carries the count.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while failed_logs() == 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            let counted = failed_logs();
            drop(send);
            let out = child.wait_with_output().unwrap();
            (counted, String::from_utf8_lossy(&out.stderr).into_owned())
        }
    })
    .await
    .unwrap();
    assert!(
        counted >= 1,
        "no failed log export counted; stderr:\n{stderr}"
    );
    assert!(stderr.contains("OTLP export failed"), "{stderr}");
    // The SDK's own count of what its queue took, on the same provider.
    let received = store.lock().unwrap();
    let names: Vec<String> = received.metrics().iter().map(|m| m.name.clone()).collect();
    assert!(
        names
            .iter()
            .any(|n| n == "otel.sdk.processor.log.processed"),
        "{names:?}"
    );
}

/// The copy's queue is bounded where it is measured: while the exporter
/// hangs on a collector that never answers, a queue of two (the standard
/// `OTEL_BLRP_MAX_QUEUE_SIZE`) fills, what it has no room for is counted as
/// dropped (`queue_full`), and its size and capacity are reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_counts_its_drops_and_reports_its_size() {
    let (metrics_endpoint, store) = grpc_receiver().await;
    let silent_endpoint = silent_collector();
    let Dirs { scratch, evidence } = dirs();
    let audit_log = evidence.path().join("audit.jsonl");
    let env = [
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", silent_endpoint),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            metrics_endpoint.clone(),
        ),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500".to_owned()),
        ("OTEL_BLRP_MAX_QUEUE_SIZE", "2".to_owned()),
    ];
    let largest = {
        let store = store.clone();
        move |name: &str, error: Option<&str>| largest_point(&store, name, error)
    };
    let seen = tokio::task::spawn_blocking({
        let (scratch, audit_log) = (scratch.path().to_owned(), audit_log.clone());
        move || {
            let (child, mut send) =
                spawn_server(&scratch, &audit_log, 9, &metrics_endpoint, Stdio::piped(), &env);
            send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string());
            for id in 1..=8 {
                let reply = send(call(id, "browser-shell", json!({"session_id":"q","argv":["eval","1"]}), None));
                assert_eq!(reply["result"]["structuredContent"]["exit_code"], 126, "{reply}");
            }
            let dropped = "otel.sdk.processor.log.processed";
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while largest(dropped, Some("queue_full")).unwrap_or(0) == 0
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            let seen = (
                largest(dropped, Some("queue_full")),
                largest("otel.sdk.processor.log.queue.size", None),
                largest("otel.sdk.processor.log.queue.capacity", None),
            );
            drop(send);
            let _ = child.wait_with_output();
            seen
        }
    })
    .await
    .unwrap();
    let (dropped, size, capacity) = seen;
    assert!(dropped.unwrap_or(0) >= 1, "no drop counted: {seen:?}");
    assert_eq!(capacity, Some(2), "{seen:?}");
    assert!(size.is_some_and(|s| (1..=2).contains(&s)), "{seen:?}");
}
