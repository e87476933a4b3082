//! OCSF projection of the records, one event per record (the native JSONL
//! stays the canonical form). The events declare [`OCSF_VERSION`], the
//! first with every attribute used (`trace` came in 1.4.0), and in
//! `metadata.profiles` the profiles whose attributes they carry (`host`:
//! `device` and `actor` of a lifecycle event; `security_control`: a call's
//! `disposition`; `trace`).
//!
//! - A server's `started`, `stopped`, `reloaded`, `reload_refused` record:
//!   **Application Lifecycle** (6002), activity Start (3), Stop (4) or
//!   Other (99, named Reload); `app` is browser-shell, `device.hostname` the
//!   machine.
//! - A call is two records, its intent and its outcome, and so two events:
//!   only the outcome says Success or Failure. The intent's status is
//!   Unknown (the command had not run yet), so a count of successes counts
//!   each call once, and a call that then timed out or failed never.
//! - Severity: Informational for what went as asked, Low for a call that
//!   failed or timed out, Medium for a refusal or a block, High when the
//!   audit record could not be kept.
//! - Everything else (calls, refusals, gate refusals, session events,
//!   rotation): **API Activity** (6003), activity Other (99) named by the
//!   subcommand. The actor is who asked: `actor.session.uid` the session,
//!   `actor.app_name` the MCP client; what the server did on its own has the
//!   server process as `actor.process` and the session under `resources`.
//!   The URL a command sends the browser to (`open`, redacted) is
//!   `http_request.url` (an OCSF URL object) with `dst_endpoint` (host,
//!   resolved address, port); the page the command ended on (`page_url`) is
//!   a `resources` entry of type `web_page` with its URL object.
//!
//! Fields with no OCSF home (argv, digests, hashes, policy digest,
//! confinement, …) stay under `unmapped`. Absent values are omitted, never
//! `null`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::parse_time;
use crate::event::{RefusedFor, refused_for};

/// The OCSF schema version the events declare.
pub const OCSF_VERSION: &str = "1.4.0";

/// Keys every projection maps; the rest of a record goes under `unmapped`.
const MAPPED: &[&str] = &[
    "time",
    "id",
    "call_id",
    "seq",
    "session_id",
    "client",
    "tool",
    "request_id",
    "host",
    "pid",
    "producer",
    "trace_id",
    "span_id",
    "exit_code",
    "duration_ms",
    "reason",
    "rule",
    "verdict",
    "page_url",
    "resolved",
    "schema",
];

/// The OCSF events of `records` (log order); an outcome also carries the
/// URL of its intent's argv.
pub fn ocsf_events(records: &[Value]) -> Vec<Value> {
    let mut argv_of: HashMap<String, Value> = HashMap::new();
    records
        .iter()
        .map(|record| {
            let call_id = str_of(record, "call_id").unwrap_or_default();
            let phase = crate::event::phase_of(record).unwrap_or_default();
            let argv = match phase {
                "intent" => {
                    if let Some(argv) = record.get("argv") {
                        argv_of.insert(call_id.to_owned(), argv.clone());
                    }
                    record.get("argv")
                }
                "outcome" => record.get("argv").or_else(|| argv_of.get(call_id)),
                _ => record.get("argv"),
            }
            .cloned();
            let event = project(record, argv.as_ref());
            if phase == "outcome" {
                argv_of.remove(call_id);
            }
            event
        })
        .collect()
}

/// The OCSF event of one record on its own.
pub fn ocsf(record: &Value) -> Value {
    project(record, record.get("argv"))
}

fn str_of<'a>(record: &'a Value, key: &str) -> Option<&'a str> {
    record.get(key).and_then(Value::as_str)
}

fn project(record: &Value, argv: Option<&Value>) -> Value {
    let phase = str_of(record, "phase").unwrap_or_default();
    let outcome = str_of(record, "outcome");
    let server_event = phase == "lifecycle" && record.get("session_id").is_none();
    let mut event = if server_event {
        lifecycle(record, outcome)
    } else {
        api_activity(record, phase, outcome, argv)
    };
    let time_ms = str_of(record, "time")
        .and_then(|t| parse_time(t).ok())
        .map_or(0, |t| {
            i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
        });
    let e = &mut event;
    put(e, "time", Some(json!(time_ms)));
    put(e, "message", str_of(record, "reason").map(Value::from));
    // Each profile whose attributes the event carries: a lifecycle event's
    // `device` and `actor` are the host profile's, a call's `disposition`
    // the security_control profile's.
    let mut profiles = Vec::new();
    if server_event {
        profiles.push("host");
    } else {
        profiles.push("security_control");
    }
    if e.get("trace").is_some() {
        profiles.push("trace");
    }
    let mut metadata = json!({
        "version": OCSF_VERSION,
        "profiles": profiles,
        "product": {"name": "browser-shell", "vendor_name": "browser-shell"},
        "log_name": "browser-shell.audit",
    });
    put(
        &mut metadata["product"],
        "version",
        str_of(record, "producer")
            .map(|p| p.strip_prefix("browser-shell/").unwrap_or(p))
            .map(Value::from),
    );
    put(&mut metadata, "uid", record.get("id").cloned());
    put(
        &mut metadata,
        "correlation_uid",
        record.get("call_id").cloned(),
    );
    put(&mut metadata, "sequence", record.get("seq").cloned());
    put(e, "metadata", Some(metadata));
    let mut unmapped = Map::new();
    if let Value::Object(fields) = record {
        for (k, v) in fields {
            if !MAPPED.contains(&k.as_str()) {
                unmapped.insert(k.clone(), v.clone());
            }
        }
    }
    put(e, "unmapped", Some(Value::Object(unmapped)));
    event
}

/// Application Lifecycle (6002) of the server itself.
fn lifecycle(record: &Value, outcome: Option<&str>) -> Value {
    // The canonical names of the activities; a reload has none in OCSF
    // (Other), so it is named for what it is.
    let (activity_id, activity) = match outcome {
        Some("started") => (3, "Start"),
        Some("stopped") => (4, "Stop"),
        Some("reloaded" | "reload_refused") => (99, "Reload"),
        _ => (99, "Other"),
    };
    let failed = outcome == Some("reload_refused");
    let mut app = json!({"name": "browser-shell", "vendor_name": "browser-shell"});
    put(
        &mut app,
        "version",
        record.pointer("/detail/browser_shell/version").cloned(),
    );
    let mut event = json!({
        "class_uid": 6002,
        "class_name": "Application Lifecycle",
        "category_uid": 6,
        "category_name": "Application Activity",
        "activity_id": activity_id,
        "activity_name": activity,
        "type_uid": 600_200 + activity_id,
        "type_name": format!("Application Lifecycle: {activity}"),
        "severity_id": if failed { 2 } else { 1 },
        "severity": if failed { "Low" } else { "Informational" },
        "status_id": if failed { 2 } else { 1 },
        "status": if failed { "Failure" } else { "Success" },
        "app": app,
    });
    put(&mut event, "status_detail", outcome.map(Value::from));
    let mut device = json!({"type_id": 0});
    put(&mut device, "hostname", record.get("host").cloned());
    put(&mut event, "device", Some(device));
    put(&mut event, "actor", Some(server_process(record)));
    event
}

/// API Activity (6003): a call, a refusal, or the server acting on a session.
fn api_activity(record: &Value, phase: &str, outcome: Option<&str>, argv: Option<&Value>) -> Value {
    let Classified {
        blocked,
        status: (status_id, status),
        severity: (severity_id, severity),
    } = classify(record, phase, outcome);
    let subcommand = argv
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .or(if phase == "lifecycle" { outcome } else { None })
        .unwrap_or(phase);
    let mut event = json!({
        "class_uid": 6003,
        "class_name": "API Activity",
        "category_uid": 6,
        "category_name": "Application Activity",
        "activity_id": 99,
        "activity_name": subcommand,
        "type_uid": 600_399,
        "type_name": "API Activity: Other",
        "severity_id": severity_id,
        "severity": severity,
        "status_id": status_id,
        "status": status,
        "disposition_id": if blocked { 2 } else { 1 },
        "disposition": if blocked { "Blocked" } else { "Allowed" },
    });
    let e = &mut event;
    put(
        e,
        "status_code",
        record.get("exit_code").map(|c| Value::from(c.to_string())),
    );
    put(
        e,
        "status_detail",
        str_of(record, "rule").or(outcome).map(Value::from),
    );
    put(
        e,
        "duration",
        record
            .get("duration_ms")
            .and_then(Value::as_f64)
            .map(|d| Value::from(d.round() as i64)),
    );
    let mut api = json!({"operation": "tools/call", "service": {"name": str_of(record, "tool").unwrap_or("browser-shell")}});
    if let Some(id) = record.get("request_id") {
        api["request"] = json!({"uid": id});
    }
    put(e, "api", Some(api));
    put_actor_and_resources(e, record, phase);
    put_endpoints(e, record, argv);
    put_trace(e, record);
    event
}

/// How an event ended, in OCSF's terms.
struct Classified {
    blocked: bool,
    status: (u8, &'static str),
    severity: (u8, &'static str),
}

/// Blocked (a denial, a refusal, a page the guard stopped), failed (a
/// nonzero exit, a timeout, …), still pending (an intent), or a success;
/// and how severe.
fn classify(record: &Value, phase: &str, outcome: Option<&str>) -> Classified {
    let denied = str_of(record, "verdict") == Some("denied");
    let blocked = denied || matches!(outcome, Some("navigation_blocked" | "page_unreadable"));
    let blocked = blocked || outcome == Some("refused");
    let failed = record
        .get("exit_code")
        .and_then(Value::as_i64)
        .is_some_and(|c| c != 0);
    let failed = failed
        || matches!(
            outcome,
            Some("error" | "timeout" | "cancelled" | "spawn_failed" | "audit_unavailable")
        );
    // An intent is written before the command runs: its result is the
    // outcome's to tell, or nobody's when the server died mid-call. An
    // evidence record tells what the page looked like, an approval record
    // what a person was asked and said, not a result: a SIEM counts each
    // call once (a refusal after a no is its own denied record).
    let pending = matches!(phase, "intent" | "evidence" | "approval") && !blocked;
    let status = if blocked || failed {
        (2, "Failure")
    } else if pending {
        (0, "Unknown")
    } else {
        (1, "Success")
    };
    let severity = if outcome == Some("audit_unavailable") {
        (4, "High")
    } else if blocked {
        (3, "Medium")
    } else if failed {
        (2, "Low")
    } else {
        (1, "Informational")
    };
    Classified {
        blocked,
        status,
        severity,
    }
}

/// Who acted: the server on its own (a lifecycle or rotation record, on the
/// session as a resource) or the agent through a session; and the page.
fn put_actor_and_resources(e: &mut Value, record: &Value, phase: &str) {
    let mut resources = Vec::new();
    if phase == "lifecycle" || phase == "rotation" {
        // The server acted on its own: it is the actor; the session is what it acted on.
        put(e, "actor", Some(server_process(record)));
        if let Some(session) = record.get("session_id") {
            resources.push(json!({"type": "browser_session", "uid": session}));
        }
    } else {
        put(e, "actor", Some(actor(record)));
    }
    if let Some(page) = str_of(record, "page_url") {
        resources
            .push(json!({"type": "web_page", "name": page, "data": {"url": url_object(page)}}));
    }
    if !resources.is_empty() {
        put(e, "resources", Some(Value::Array(resources)));
    }
}

/// Where the call came from (the host) and went (the URL it was given,
/// with the address it was checked at).
fn put_endpoints(e: &mut Value, record: &Value, argv: Option<&Value>) {
    let mut src = Map::new();
    if let Some(host) = record.get("host") {
        src.insert("hostname".into(), host.clone());
    }
    put(e, "src_endpoint", Some(Value::Object(src)));
    // A refused request's own destination (hostname, port): the same names.
    if let Some(to) = record.get("destination").filter(|to| to.is_object()) {
        put(e, "dst_endpoint", Some(to.clone()));
        return;
    }
    let Some(target) = target_url(argv) else {
        return;
    };
    let url = url_object(target);
    let mut dst = Map::new();
    for (from, to) in [("hostname", "hostname"), ("port", "port")] {
        if let Some(v) = url.get(from) {
            dst.insert(to.into(), v.clone());
        }
    }
    if let Some(ip) = record.pointer("/resolved/0") {
        dst.insert("ip".into(), ip.clone());
    }
    if !dst.is_empty() {
        put(e, "dst_endpoint", Some(Value::Object(dst)));
    }
    put(e, "http_request", Some(json!({ "url": url })));
}

/// The call's trace and span, when it had them.
fn put_trace(e: &mut Value, record: &Value) {
    let mut trace = Map::new();
    if let Some(t) = record.get("trace_id") {
        trace.insert("uid".into(), t.clone());
    }
    if let Some(s) = record.get("span_id") {
        trace.insert("span".into(), json!({ "uid": s }));
    }
    if !trace.is_empty() {
        put(e, "trace", Some(Value::Object(trace)));
    }
}

/// Who asked: the session and the MCP client, as far as the record knows.
fn actor(record: &Value) -> Value {
    let mut actor = Map::new();
    if let Some(session) = record.get("session_id") {
        actor.insert("session".into(), json!({ "uid": session }));
    }
    let rule = str_of(record, "rule").unwrap_or_default();
    let via = if rule.starts_with("cdp.") || rule.starts_with("gate.") {
        "the browser gate"
    } else {
        "browser-shell"
    };
    let app = match (str_of(record, "client"), refused_for(rule)) {
        (Some(client), _) => client.to_owned(),
        // The record says who made the request, where that is known.
        (None, _) if record.get("requester").is_some() => {
            match str_of(record, "requester").unwrap_or_default() {
                "page" => format!("web page (via {via})"),
                "agent-browser" => format!("agent-browser (via {via})"),
                _ => format!("unknown: no page of the session reported this request (via {via})"),
            }
        }
        // A gate refusal: what asked was the session's browser side.
        (None, RefusedFor::WebPage) => "web page (via the browser gate)".into(),
        (None, RefusedFor::AgentBrowser) => "agent-browser (via the browser gate)".into(),
        (None, RefusedFor::Call) => "MCP client (unidentified)".into(),
    };
    actor.insert("app_name".into(), Value::from(app));
    Value::Object(actor)
}

/// The browser-shell server process that wrote `record`.
fn server_process(record: &Value) -> Value {
    let mut process = json!({"name": "browser-shell"});
    put(&mut process, "pid", record.get("pid").cloned());
    json!({ "process": process })
}

/// The URL an `open` (`goto`, `navigate`) sends the browser to.
fn target_url(argv: Option<&Value>) -> Option<&str> {
    let argv = argv?.as_array()?;
    match argv.first()?.as_str()? {
        "open" | "goto" | "navigate" => argv.get(1)?.as_str(),
        _ => None,
    }
}

/// An OCSF URL object (`url_string` and what parses of it).
fn url_object(text: &str) -> Value {
    let mut url = json!({ "url_string": text });
    if let Ok(parsed) = url::Url::parse(text) {
        url["scheme"] = parsed.scheme().into();
        if let Some(host) = parsed.host_str() {
            url["hostname"] = host.into();
        }
        if let Some(port) = parsed.port_or_known_default() {
            url["port"] = port.into();
        }
        url["path"] = parsed.path().into();
        if let Some(query) = parsed.query() {
            url["query_string"] = query.into();
        }
    }
    url
}

/// Set `key` on the object `target` when `value` is present.
fn put(target: &mut Value, key: &str, value: Option<Value>) {
    if let (Value::Object(map), Some(value)) = (target, value) {
        map.insert(key.to_owned(), value);
    }
}
