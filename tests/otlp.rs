//! OTLP export of `browser_shell::telemetry` against real receivers on
//! 127.0.0.1: a tonic gRPC server and an axum http/protobuf server, both
//! decoding the `opentelemetry-proto` messages the SDK sends.

// Tests fail by panicking; unwrap/expect/panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)] // each test binary uses a different part
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::otlp_receiver::{Store, attrs, grpc_receiver, hex, http_receiver, int_value};
use opentelemetry_proto::tonic::common::v1::any_value;

use browser_shell::telemetry::{
    ActiveCall, CallMeta, CallOutcome, Called, Protocol, Target, Telemetry, TelemetryConfig,
    TelemetryError,
};
use opentelemetry_proto::tonic::metrics::v1::metric;
use opentelemetry_proto::tonic::trace::v1::{span, status};
use serde_json::json;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The config `from_env` would build from `OTEL_EXPORTER_OTLP_ENDPOINT=base`.
fn config(protocol: Protocol, base: &str) -> TelemetryConfig {
    let target = |path: &str| {
        let endpoint = match protocol {
            Protocol::Grpc => base.to_owned(),
            Protocol::HttpProtobuf => format!("{base}/{path}"),
        };
        Some(Target { endpoint, protocol })
    };
    TelemetryConfig {
        service_name: "browser-shell-test".into(),
        resource_attributes: vec![("deployment.environment.name".into(), "test".into())],
        traces: target("v1/traces"),
        logs: target("v1/logs"),
        metrics: target("v1/metrics"),
    }
}

async fn shutdown(telemetry: &Telemetry, timeout: Duration) {
    let telemetry = telemetry.clone();
    tokio::task::spawn_blocking(move || telemetry.shutdown(timeout))
        .await
        .unwrap();
}

fn assert_subset(got: &BTreeMap<String, String>, want: &[(&str, &str)]) {
    for (key, value) in want {
        assert_eq!(
            got.get(*key).map(String::as_str),
            Some(*value),
            "{key} in {got:#?}"
        );
    }
}

/// One call with a traceparent, two audit events and an error outcome; then
/// everything the receiver got is checked against the conventions.
async fn one_call_exports_span_logs_and_metric(protocol: Protocol, base: String, store: Store) {
    let telemetry = Telemetry::from_config(&config(protocol, &base)).unwrap();
    assert!(telemetry.is_enabled());
    let call = telemetry.start_call(&CallMeta {
        called: Called::Tool,
        request_id: Some("7"),
        traceparent: Some(TRACEPARENT),
        tracestate: Some("vendor=x"),
        protocol_version: Some("2025-11-25"),
        session_id: Some("s1"),
    });
    assert_eq!(call.trace_id().as_deref(), Some(TRACE_ID));
    let span_id = call.span_id().unwrap();
    assert_ne!(span_id, PARENT_SPAN_ID);
    call.log_audit_event(&json!({
        "phase": "intent", "verdict": "allowed", "seq": 1, "time": "2026-01-02T03:04:05Z",
        "argv": ["fill", "#pw", {"redacted": true, "len": 7}],
    }));
    call.log_audit_event(&json!({"phase": "result", "outcome": "error", "exit_code": 1}));
    call.finish(&CallOutcome {
        subcommand: Some("fill"),
        verdict: "allowed",
        outcome: Some("error"),
        rule: None,
        exit_code: Some(1),
        error_type: Some("tool_error"),
        error_message: Some("agent-browser exited with status 1"),
    });
    shutdown(&telemetry, Duration::from_secs(10)).await;
    let got = store.lock().unwrap();

    let resource_spans: Vec<_> = got.traces.iter().flat_map(|r| &r.resource_spans).collect();
    let resource = attrs(&resource_spans[0].resource.as_ref().unwrap().attributes);
    assert_subset(
        &resource,
        &[
            ("service.name", "browser-shell-test"),
            ("deployment.environment.name", "test"),
            ("telemetry.sdk.language", "rust"),
            ("process.pid", &std::process::id().to_string()),
        ],
    );
    // Each start is an instance of its own, on a named host.
    assert_eq!(resource["service.instance.id"].len(), 32, "{resource:#?}");
    assert!(!resource["host.name"].is_empty(), "{resource:#?}");
    let spans: Vec<_> = resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect();
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let span = spans[0];
    assert_eq!(span.name, "tools/call browser-shell");
    assert_eq!(span.kind, span::SpanKind::Server as i32);
    assert_eq!(hex(&span.trace_id), TRACE_ID);
    assert_eq!(hex(&span.parent_span_id), PARENT_SPAN_ID);
    assert_eq!(hex(&span.span_id), span_id);
    let status = span.status.as_ref().unwrap();
    assert_eq!(status.code, status::StatusCode::Error as i32);
    assert_eq!(status.message, "agent-browser exited with status 1");
    let span_attrs = attrs(&span.attributes);
    assert_subset(
        &span_attrs,
        &[
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "browser-shell"),
            ("gen_ai.operation.name", "execute_tool"),
            ("jsonrpc.request.id", "7"),
            ("mcp.protocol.version", "2025-11-25"),
            ("network.transport", "pipe"),
            ("error.type", "tool_error"),
            ("browser_shell.error.type", "tool_error"),
            ("browser_shell.session_id", "s1"),
            ("browser_shell.verdict", "allowed"),
            ("browser_shell.exit_code", "1"),
            ("browser_shell.subcommand", "fill"),
        ],
    );
    assert!(!span_attrs.contains_key("mcp.session.id"));
    assert!(!span_attrs.contains_key("browser_shell.rule"));

    let logs = got.log_records();
    assert_eq!(logs.len(), 2, "{logs:#?}");
    for log in &logs {
        assert_eq!(log.event_name, "browser_shell.audit");
        assert_eq!(hex(&log.trace_id), TRACE_ID);
        assert_eq!(hex(&log.span_id), span_id);
        assert_ne!(log.time_unix_nano, 0);
    }
    let intent = attrs(&logs[0].attributes);
    // The record's own time is one attribute among its fields, not a bare `time`.
    assert!(!intent.contains_key("time"), "{intent:#?}");
    assert_eq!(logs[0].severity_text, "INFO");
    assert_subset(
        &intent,
        &[
            ("browser_shell.time", "2026-01-02T03:04:05Z"),
            ("browser_shell.phase", "intent"),
            ("browser_shell.verdict", "allowed"),
            ("browser_shell.seq", "1"),
            ("browser_shell.subcommand", "fill"),
            (
                "browser_shell.argv",
                r##"["fill","#pw",{"len":7,"redacted":true}]"##,
            ),
        ],
    );
    let body = logs[0].body.as_ref().and_then(|b| b.value.as_ref());
    assert_eq!(
        body,
        Some(&any_value::Value::StringValue("intent: fill runs".into()))
    );
    let result = attrs(&logs[1].attributes);
    assert_subset(
        &result,
        &[
            ("browser_shell.outcome", "error"),
            ("browser_shell.exit_code", "1"),
        ],
    );

    let metrics: Vec<_> = got
        .metrics()
        .into_iter()
        .filter(|m| m.name == "mcp.server.operation.duration")
        .collect();
    let metric = metrics.last().expect("duration metric exported");
    assert_eq!(metric.unit, "s");
    let Some(metric::Data::Histogram(histogram)) = &metric.data else {
        panic!("not a histogram: {metric:#?}");
    };
    assert_eq!(histogram.data_points.len(), 1);
    let point = &histogram.data_points[0];
    assert_eq!(point.count, 1);
    assert_eq!(
        point.explicit_bounds,
        [
            0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0
        ]
    );
    assert_subset(
        &attrs(&point.attributes),
        &[
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "browser-shell"),
            ("gen_ai.operation.name", "execute_tool"),
            ("network.transport", "pipe"),
            ("error.type", "tool_error"),
            ("browser_shell.subcommand", "fill"),
        ],
    );
}

/// The metrics a dashboard groups by: refusals by rule (a refused call's
/// and the browser gate's alike, a refused call's subcommand never a
/// dimension), and the MCP session's duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_counted_by_rule_and_the_session_duration_recorded() {
    let (base, store) = http_receiver().await;
    let telemetry = Telemetry::from_config(&config(Protocol::HttpProtobuf, &base)).unwrap();
    let refused = telemetry.start_call(&CallMeta {
        called: Called::Tool,
        ..CallMeta::default()
    });
    refused.finish(&CallOutcome {
        subcommand: Some("anything-the-client-sent"),
        verdict: "denied",
        rule: Some("url.scheme"),
        error_type: Some("policy_denied"),
        ..CallOutcome::default()
    });
    telemetry.count_refusals("request.blocked", 3);
    telemetry.session_ended(Duration::from_millis(1500), Some("2025-11-25"));
    shutdown(&telemetry, Duration::from_secs(10)).await;
    let got = store.lock().unwrap();
    let named = |name: &str| -> Vec<opentelemetry_proto::tonic::metrics::v1::Metric> {
        got.metrics()
            .into_iter()
            .filter(|m| m.name == name)
            .cloned()
            .collect()
    };
    let counted: BTreeMap<String, u64> = named("browser_shell.refusals")
        .iter()
        .flat_map(|m| match &m.data {
            Some(metric::Data::Sum(sum)) => sum.data_points.clone(),
            other => panic!("not a sum: {other:#?}"),
        })
        .map(|p| {
            let value = u64::try_from(int_value(&p)).unwrap();
            (attrs(&p.attributes)["browser_shell.rule"].clone(), value)
        })
        .collect();
    assert_eq!(
        counted,
        BTreeMap::from([("request.blocked".into(), 3), ("url.scheme".into(), 1)])
    );
    let operation = named("mcp.server.operation.duration");
    let Some(metric::Data::Histogram(histogram)) = &operation.last().unwrap().data else {
        panic!("not a histogram");
    };
    let point = attrs(&histogram.data_points[0].attributes);
    assert!(!point.contains_key("browser_shell.subcommand"), "{point:?}");
    let session = named("mcp.server.session.duration");
    let Some(metric::Data::Histogram(histogram)) = &session.last().expect("session duration").data
    else {
        panic!("not a histogram");
    };
    let point = &histogram.data_points[0];
    assert_eq!(point.count, 1);
    assert!((point.sum.unwrap() - 1.5).abs() < 1e-9, "{point:?}");
    assert_subset(
        &attrs(&point.attributes),
        &[
            ("mcp.protocol.version", "2025-11-25"),
            ("network.transport", "pipe"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_export_of_one_call() {
    let (base, store) = grpc_receiver().await;
    one_call_exports_span_logs_and_metric(Protocol::Grpc, base, store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_call_of_the_tool_is_named_and_attributed_as_one() {
    let (base, store) = http_receiver().await;
    let telemetry = Telemetry::from_config(&config(Protocol::HttpProtobuf, &base)).unwrap();
    for called in [Called::Tool, Called::UnknownTool, Called::Unparsed] {
        let call = telemetry.start_call(&CallMeta {
            called,
            ..CallMeta::default()
        });
        call.finish(&CallOutcome {
            verdict: "denied",
            ..CallOutcome::default()
        });
    }
    shutdown(&telemetry, Duration::from_secs(10)).await;
    let got = store.lock().unwrap();
    let spans = got.spans();
    let named: BTreeMap<&str, BTreeMap<String, String>> = spans
        .iter()
        .map(|s| (s.name.as_str(), attrs(&s.attributes)))
        .collect();
    assert_eq!(
        named.keys().copied().collect::<Vec<_>>(),
        [
            "invalid JSON-RPC message",
            "tools/call",
            "tools/call browser-shell"
        ]
    );
    assert_eq!(
        named["tools/call browser-shell"]["gen_ai.tool.name"],
        "browser-shell"
    );
    assert_eq!(named["tools/call"]["mcp.method.name"], "tools/call");
    assert!(!named["tools/call"].contains_key("gen_ai.tool.name"));
    assert!(!named["invalid JSON-RPC message"].contains_key("mcp.method.name"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_made_outside_a_call_joins_the_trace_it_names() {
    let (base, store) = http_receiver().await;
    let telemetry = Telemetry::from_config(&config(Protocol::HttpProtobuf, &base)).unwrap();
    // A gate refusal during a call names the call's trace and span; a
    // lifecycle record names none.
    telemetry.log_audit_event(&json!({
        "phase": "denied", "rule": "request.blocked",
        "trace_id": TRACE_ID, "span_id": PARENT_SPAN_ID,
    }));
    telemetry.log_audit_event(&json!({ "phase": "lifecycle", "outcome": "reaped" }));
    shutdown(&telemetry, Duration::from_secs(10)).await;
    let got = store.lock().unwrap();
    let logs = got.log_records();
    assert_eq!(logs.len(), 2);
    let joined = logs
        .iter()
        .find(|l| {
            attrs(&l.attributes)
                .get("browser_shell.phase")
                .map(String::as_str)
                == Some("denied")
        })
        .expect("the refusal's log record");
    assert_eq!(hex(&joined.trace_id), TRACE_ID);
    assert_eq!(hex(&joined.span_id), PARENT_SPAN_ID);
    let alone = logs
        .iter()
        .find(|l| l.trace_id != joined.trace_id || l.span_id != joined.span_id)
        .expect("the lifecycle record's log record");
    assert!(
        alone.trace_id.iter().all(|b| *b == 0),
        "a lifecycle record joins no trace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_export_of_one_call() {
    let (base, store) = http_receiver().await;
    one_call_exports_span_logs_and_metric(Protocol::HttpProtobuf, base, store).await;
}

/// A collector that is not there: every call still completes and shutdown
/// returns within its bound. Timing is printed, never asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_down_calls_still_complete() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let telemetry = Telemetry::from_config(&config(protocol, &base)).unwrap();
        let started = Instant::now();
        let mut finished = 0;
        for i in 0..200 {
            let request_id = i.to_string();
            let call = telemetry.start_call(&CallMeta {
                request_id: Some(&request_id),
                traceparent: Some(TRACEPARENT),
                ..CallMeta::default()
            });
            call.log_audit_event(&json!({"phase": "intent", "verdict": "allowed", "seq": i}));
            call.finish(&CallOutcome {
                verdict: "allowed",
                exit_code: Some(0),
                ..CallOutcome::default()
            });
            finished += 1;
        }
        let calls = started.elapsed();
        let started = Instant::now();
        shutdown(&telemetry, Duration::from_secs(2)).await;
        eprintln!(
            "collector down ({protocol:?}): {finished} calls in {calls:?}, shutdown(2s) took {:?}",
            started.elapsed()
        );
        assert_eq!(finished, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_is_a_no_op_that_still_reports_the_incoming_trace() {
    let telemetry =
        Telemetry::from_config(&TelemetryConfig::from_lookup(|_| None).unwrap()).unwrap();
    assert!(!telemetry.is_enabled());
    let call = telemetry.start_call(&CallMeta {
        traceparent: Some(TRACEPARENT),
        ..CallMeta::default()
    });
    assert_eq!(
        (call.trace_id().as_deref(), call.span_id()),
        (Some(TRACE_ID), None)
    );
    call.log_audit_event(&json!({"phase": "intent"}));
    call.finish(&CallOutcome {
        verdict: "denied",
        ..CallOutcome::default()
    });
    let bad = telemetry.start_call(&CallMeta {
        traceparent: Some("00-zz-00-01"),
        ..CallMeta::default()
    });
    assert_eq!((bad.trace_id(), bad.span_id()), (None, None));
    telemetry.shutdown(Duration::from_secs(1));
    Telemetry::disabled().shutdown(Duration::from_secs(1));
}

#[test]
fn exporters_need_a_multi_thread_runtime() {
    let result = Telemetry::from_config(&config(Protocol::Grpc, "http://127.0.0.1:4317"));
    assert!(
        matches!(result, Err(TelemetryError::NoRuntime)),
        "{result:?}"
    );
}

#[test]
fn active_call_can_cross_await_points() {
    fn send<T: Send + 'static>() {}
    send::<ActiveCall>();
    send::<Telemetry>();
}

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| vars.get(name).cloned()
}

#[test]
fn config_from_otel_variables() {
    let none = TelemetryConfig::from_lookup(lookup(&[])).unwrap();
    assert_eq!((none.traces, none.logs, none.metrics), (None, None, None));
    assert_eq!(none.service_name, "browser-shell");

    // Default protocol http/protobuf: signal paths appended to the generic endpoint only.
    let http = TelemetryConfig::from_lookup(lookup(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
        (
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
            "http://logs:9999/custom",
        ),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=from-attrs, deployment.environment.name=prod",
        ),
    ]))
    .unwrap();
    let target = |endpoint: &str, protocol| {
        Some(Target {
            endpoint: endpoint.into(),
            protocol,
        })
    };
    assert_eq!(
        http.traces,
        target("http://collector:4318/v1/traces", Protocol::HttpProtobuf)
    );
    assert_eq!(
        http.logs,
        target("http://logs:9999/custom", Protocol::HttpProtobuf)
    );
    assert_eq!(
        http.metrics,
        target("http://collector:4318/v1/metrics", Protocol::HttpProtobuf)
    );
    assert_eq!(http.service_name, "from-attrs");
    assert_eq!(
        http.resource_attributes[1],
        ("deployment.environment.name".into(), "prod".into())
    );

    let grpc = TelemetryConfig::from_lookup(lookup(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
        ("OTEL_LOGS_EXPORTER", "none"),
        ("OTEL_SERVICE_NAME", "svc"),
        ("OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored"),
    ]))
    .unwrap();
    assert_eq!(grpc.traces, target("http://collector:4317", Protocol::Grpc));
    assert_eq!(grpc.logs, None);
    assert_eq!(
        grpc.metrics,
        target("http://collector:4317/v1/metrics", Protocol::HttpProtobuf)
    );
    assert_eq!(grpc.service_name, "svc");

    let only_traces = TelemetryConfig::from_lookup(lookup(&[(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "http://t:4318/v1/traces",
    )]))
    .unwrap();
    assert!(
        only_traces.traces.is_some() && only_traces.logs.is_none() && only_traces.metrics.is_none()
    );

    let off = TelemetryConfig::from_lookup(lookup(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
        ("OTEL_SDK_DISABLED", "true"),
    ]))
    .unwrap();
    assert_eq!((off.traces, off.logs, off.metrics), (None, None, None));

    let bad = TelemetryConfig::from_lookup(lookup(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
    ]));
    assert!(
        matches!(&bad, Err(TelemetryError::Protocol { var, value }) if var == "OTEL_EXPORTER_OTLP_PROTOCOL" && value == "http/json"),
        "{bad:?}"
    );
}

/// The daemon pool's size decisions reach a dashboard: one gauge, the
/// size it wants and the daemons it has ready, told apart by an attribute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pools_wanted_and_ready_sizes_are_a_gauge() {
    let (base, store) = http_receiver().await;
    let telemetry = Telemetry::from_config(&config(Protocol::HttpProtobuf, &base)).unwrap();
    telemetry.pool_sized(3, 1);
    shutdown(&telemetry, Duration::from_secs(10)).await;
    let got = store.lock().unwrap();
    let points: BTreeMap<String, i64> = got
        .metrics()
        .into_iter()
        .filter(|m| m.name == "browser_shell.pool.daemons")
        .flat_map(|m| match &m.data {
            Some(metric::Data::Gauge(gauge)) => gauge.data_points.clone(),
            other => panic!("not a gauge: {other:#?}"),
        })
        .map(|p| {
            let value = int_value(&p);
            (
                attrs(&p.attributes)["browser_shell.pool.state"].clone(),
                value,
            )
        })
        .collect();
    assert_eq!(
        points,
        BTreeMap::from([("ready".into(), 1), ("target".into(), 3)])
    );
}
