//! OTLP export: a best-effort copy of the audit trail, one SERVER span and one
//! duration measurement per `tools/call`.
//!
//! The local audit file is the system of record; nothing here gates, delays or
//! fails a call. Spans and log records go to batch processors and metrics to a
//! periodic reader, each exporting from its own thread: a collector that is
//! down, slow or refusing costs a call nothing (a full queue drops data).
//! Everything is a cheap no-op unless an `OTEL_EXPORTER_OTLP_*ENDPOINT` is set.
//! OTel's own diagnostics go through `tracing` (stderr); stdout is JSON-RPC.
//!
//! Names follow the MCP semantic conventions (semantic-conventions-genai,
//! Development status), declared here because the crate constants are
//! deprecated: span `tools/call browser-shell`, metric
//! `mcp.server.operation.duration`, log event `browser_shell.audit`.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::logs::LoggerProvider as _;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{LogExporter, MetricExporter, SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::resource::TelemetryResourceDetector;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use serde_json::Value;

use super::export_count::{Counted, EXPORT_TIMEOUT};
use super::export_queue::{Bounded, Waiting, capacity};

const TOOL: &str = "browser-shell";
const SPAN_NAME: &str = "tools/call browser-shell";
const ERROR_TYPE: &str = "error.type";
/// `error.type` of a tool result with `isError` (MCP semantic conventions).
const TOOL_ERROR: &str = "tool_error";
/// What kind of tool error it was: `policy_denied`, `timeout`, `tool_error`, …
const BROWSER_SHELL_ERROR_TYPE: &str = "browser_shell.error.type";
const RPC_RESPONSE_STATUS_CODE: &str = "rpc.response.status_code";

/// OTLP wire protocol of one signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Where one signal goes; `endpoint` is used verbatim (for http/protobuf it
/// already ends in `/v1/traces`, `/v1/logs` or `/v1/metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub endpoint: String,
    pub protocol: Protocol,
}

/// Everything [`Telemetry::from_config`] needs; a signal left `None` is not exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    pub service_name: String,
    pub resource_attributes: Vec<(String, String)>,
    pub traces: Option<Target>,
    pub logs: Option<Target>,
    pub metrics: Option<Target>,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{var}={value:?}: unsupported OTLP protocol (use grpc or http/protobuf)")]
    Protocol { var: String, value: String },
    #[error("OTLP export must be set up inside a multi-thread tokio runtime")]
    NoRuntime,
    #[error("OTLP {signal} exporter: {source}")]
    Exporter {
        signal: &'static str,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

impl TelemetryConfig {
    /// Reads the standard `OTEL_*` variables from the process environment.
    pub fn from_env() -> Result<Self, TelemetryError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`Self::from_env`], with `lookup` standing in for the environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, TelemetryError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let resource_attributes: Vec<(String, String)> = get("OTEL_RESOURCE_ATTRIBUTES")
            .unwrap_or_default()
            .split_terminator(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        let service_name = get("OTEL_SERVICE_NAME")
            .or_else(|| {
                resource_attributes
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| TOOL.to_owned());
        let disabled =
            get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let target = |signal: &str, path: &str| -> Result<Option<Target>, TelemetryError> {
            let exporter = get(&format!("OTEL_{signal}_EXPORTER"));
            if disabled || exporter.is_some_and(|e| e.trim() == "none") {
                return Ok(None);
            }
            let own = get(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"));
            let Some(base) = own.clone().or_else(|| get("OTEL_EXPORTER_OTLP_ENDPOINT")) else {
                return Ok(None);
            };
            let own_var = format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL");
            let (var, value) = match get(&own_var) {
                Some(value) => (own_var, value),
                None => (
                    "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(),
                    get("OTEL_EXPORTER_OTLP_PROTOCOL")
                        .unwrap_or_else(|| "http/protobuf".to_owned()),
                ),
            };
            let protocol = match value.trim() {
                "grpc" => Protocol::Grpc,
                "http/protobuf" => Protocol::HttpProtobuf,
                _ => return Err(TelemetryError::Protocol { var, value }),
            };
            let endpoint = match (own, protocol) {
                (None, Protocol::HttpProtobuf) => format!("{}/{path}", base.trim_end_matches('/')),
                _ => base,
            };
            Ok(Some(Target { endpoint, protocol }))
        };
        Ok(Self {
            traces: target("TRACES", "v1/traces")?,
            logs: target("LOGS", "v1/logs")?,
            metrics: target("METRICS", "v1/metrics")?,
            service_name,
            resource_attributes,
        })
    }
}

/// The OTLP side of the server; cheap to clone.
#[derive(Clone, Default)]
pub struct Telemetry(Option<Arc<Inner>>);

#[derive(Default)]
struct Inner {
    traces: Option<(SdkTracerProvider, SdkTracer)>,
    logs: Option<(SdkLoggerProvider, SdkLogger)>,
    metrics: Option<super::metrics::Metrics>,
}

/// The span a record names in its `trace_id` and `span_id`, if both parse.
fn named_span(event: &Value) -> Option<SpanContext> {
    let hex = |key| event.get(key).and_then(Value::as_str);
    let trace = opentelemetry::trace::TraceId::from_hex(hex("trace_id")?).ok()?;
    let span = opentelemetry::trace::SpanId::from_hex(hex("span_id")?).ok()?;
    let cx = SpanContext::new(
        trace,
        span,
        opentelemetry::trace::TraceFlags::SAMPLED,
        true,
        opentelemetry::trace::TraceState::default(),
    );
    cx.is_valid().then_some(cx)
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.is_enabled())
            .finish_non_exhaustive()
    }
}

/// The exporter's own bound on one request: past [`EXPORT_TIMEOUT`], so the
/// bound on the whole export always fires first and a collector that never
/// answers is counted as one class of failure (`timeout`), not two.
const REQUEST_TIMEOUT: Duration = EXPORT_TIMEOUT.saturating_add(Duration::from_secs(1));

/// Builds one exporter for `target` over gRPC or http/protobuf.
macro_rules! exporter {
    ($ty:ty, $target:expr, $signal:literal) => {
        match $target.protocol {
            Protocol::Grpc => <$ty>::builder()
                .with_tonic()
                .with_endpoint($target.endpoint.clone())
                .with_timeout(REQUEST_TIMEOUT)
                .build(),
            Protocol::HttpProtobuf => <$ty>::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint($target.endpoint.clone())
                .with_timeout(REQUEST_TIMEOUT)
                .build(),
        }
        .map_err(|source| TelemetryError::Exporter {
            signal: $signal,
            source,
        })?
    };
}

impl Telemetry {
    /// From the standard `OTEL_*` variables (see [`TelemetryConfig::from_lookup`]);
    /// disabled when no endpoint is set. Call inside a multi-thread tokio runtime.
    pub fn from_env() -> Result<Self, TelemetryError> {
        Self::from_config(&TelemetryConfig::from_env()?)
    }

    /// Sets up the exporters named in `config`. Call inside a multi-thread tokio runtime.
    pub fn from_config(config: &TelemetryConfig) -> Result<Self, TelemetryError> {
        if config.traces.is_none() && config.logs.is_none() && config.metrics.is_none() {
            return Ok(Self::disabled());
        }
        // The tonic channel spawns a task and the export threads wait on it.
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => h,
            _ => return Err(TelemetryError::NoRuntime),
        };
        let resource = resource(config);
        let scope = InstrumentationScope::builder(TOOL)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let mut inner = Inner::default();
        // Metrics first: the other exporters and the SDK's batch processors
        // count on them what they exported, failed or dropped
        // (`super::export_count`); the SDK's processors find the provider
        // as the global one.
        let meter = match &config.metrics {
            Some(target) => {
                let provider = SdkMeterProvider::builder()
                    .with_periodic_exporter(exporter!(MetricExporter, target, "metrics"))
                    .with_resource(resource.clone())
                    .build();
                opentelemetry::global::set_meter_provider(provider.clone());
                let meter = provider.meter_with_scope(scope.clone());
                inner.metrics = Some(super::metrics::Metrics::new(provider, &meter));
                meter
            }
            // No metrics exported: the global provider is the no-op one.
            None => opentelemetry::global::meter(TOOL),
        };
        if let Some(target) = &config.traces {
            let exporter = exporter!(SpanExporter, target, "traces");
            let waiting = Arc::new(Waiting::new(capacity("span")));
            let exporter = Counted::new(exporter, &meter, "span", runtime.clone(), &waiting);
            let batch = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
                .with_batch_config(
                    opentelemetry_sdk::trace::BatchConfigBuilder::default()
                        .with_max_queue_size(capacity("span"))
                        .build(),
                )
                .build();
            let provider = SdkTracerProvider::builder()
                .with_span_processor(Bounded::new(batch, waiting, &meter, "span"))
                .with_resource(resource.clone())
                .build();
            inner.traces = Some((provider.clone(), provider.tracer_with_scope(scope.clone())));
        }
        if let Some(target) = &config.logs {
            let exporter = exporter!(LogExporter, target, "logs");
            let waiting = Arc::new(Waiting::new(capacity("log")));
            let exporter = Counted::new(exporter, &meter, "log", runtime.clone(), &waiting);
            let batch = opentelemetry_sdk::logs::BatchLogProcessor::builder(exporter)
                .with_batch_config(
                    opentelemetry_sdk::logs::BatchConfigBuilder::default()
                        .with_max_queue_size(capacity("log"))
                        .build(),
                )
                .build();
            let provider = SdkLoggerProvider::builder()
                .with_log_processor(Bounded::new(batch, waiting, &meter, "log"))
                .with_resource(resource)
                .build();
            inner.logs = Some((provider.clone(), provider.logger_with_scope(scope)));
        }
        Ok(Self(Some(Arc::new(inner))))
    }

    pub fn disabled() -> Self {
        Self(None)
    }

    /// A refusal made outside a call (the browser gate's, the egress's),
    /// counted beside the calls' refusals.
    pub fn count_refusals(&self, rule: &str, count: u64) {
        if let Some(metrics) = self.0.as_ref().and_then(|i| i.metrics.as_ref()) {
            metrics.refusals(rule, count);
        }
    }

    /// The daemon pool's size decision: how many it wants and has ready.
    pub fn pool_sized(&self, target: usize, ready: usize) {
        if let Some(metrics) = self.0.as_ref().and_then(|i| i.metrics.as_ref()) {
            metrics.pool(target, ready);
        }
    }

    /// The MCP session (this stdio connection) ended after `duration`.
    pub fn session_ended(&self, duration: Duration, protocol_version: Option<&str>) {
        if let Some(metrics) = self.0.as_ref().and_then(|i| i.metrics.as_ref()) {
            let mut attributes = vec![KeyValue::new("network.transport", "pipe")];
            push_some(
                &mut attributes,
                [("mcp.protocol.version", protocol_version)],
            );
            metrics.session(duration.as_secs_f64(), &attributes);
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.0.is_some()
    }

    /// One OTLP log record for an audit record made outside a call (session
    /// lifecycle; a gate or egress refusal, which names the trace and span
    /// of the call in flight, if one was, and then joins that trace).
    pub fn log_audit_event(&self, event: &Value) {
        if let Some((_, logger)) = self.0.as_ref().and_then(|i| i.logs.as_ref()) {
            super::audit_log::emit(logger, event, named_span(event).as_ref());
        }
    }

    /// Starts the SERVER span named after what was called, child of a valid `traceparent`.
    pub fn start_call(&self, meta: &CallMeta<'_>) -> ActiveCall {
        let carrier: HashMap<String, String> = [
            ("traceparent", meta.traceparent),
            ("tracestate", meta.tracestate),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
        let parent_cx = TraceContextPropagator::new().extract(&carrier);
        let span = self
            .0
            .as_ref()
            .and_then(|i| i.traces.as_ref())
            .map(|(_, tracer)| {
                let mut attributes = base_attributes(meta.called, meta.protocol_version);
                let optional = [
                    ("jsonrpc.request.id", meta.request_id),
                    ("browser_shell.session_id", meta.session_id),
                ];
                push_some(&mut attributes, optional);
                tracer
                    .span_builder(meta.called.span_name())
                    .with_kind(SpanKind::Server)
                    .with_attributes(attributes)
                    .start_with_context(tracer, &parent_cx)
            });
        ActiveCall {
            inner: self.0.clone(),
            span,
            parent: parent_cx.span().span_context().clone(),
            called: meta.called,
            protocol_version: meta.protocol_version.map(str::to_owned),
            start: Instant::now(),
        }
    }

    /// Flushes, then shuts down, every exporter; returns after `timeout` at the latest.
    pub fn shutdown(&self, timeout: Duration) {
        let Some(inner) = self.0.clone() else { return };
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("otel-shutdown".into())
            .spawn(move || {
                let mut results = Vec::new();
                if let Some((p, _)) = &inner.traces {
                    results.extend([p.force_flush(), p.shutdown_with_timeout(timeout)]);
                }
                if let Some((p, _)) = &inner.logs {
                    results.extend([p.force_flush(), p.shutdown_with_timeout(timeout)]);
                }
                if let Some(m) = &inner.metrics {
                    let p = &m.provider;
                    results.extend([p.force_flush(), p.shutdown_with_timeout(timeout)]);
                }
                for error in results.into_iter().filter_map(Result::err) {
                    tracing::warn!("OTLP export at shutdown: {error}");
                }
                let _ = done.send(());
            });
        if let Err(error) = spawned {
            tracing::warn!("OTLP shutdown skipped: {error}");
        } else if finished.recv_timeout(timeout).is_err() {
            tracing::warn!(
                "OTLP shutdown still running after {timeout:?}; unsent telemetry is dropped"
            );
        }
    }
}

/// What is known when a `tools/call` arrives.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallMeta<'a> {
    /// What arrived: the span is named after it.
    pub called: Called,
    pub request_id: Option<&'a str>,
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
    /// The tool's `session_id` argument (deliberately not `mcp.session.id`).
    pub session_id: Option<&'a str>,
}

/// What a span stands for, which names it: only a real call of the tool is
/// `tools/call browser-shell` with the GenAI tool attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Called {
    /// A `tools/call` of `browser-shell`.
    #[default]
    Tool,
    /// A `tools/call` of a tool this server does not have.
    UnknownTool,
    /// A message the wire could not read as JSON-RPC.
    Unparsed,
    /// Another MCP request (`initialize`, `tools/list`, …), by its name
    /// from a fixed set.
    Method(&'static str),
}

impl Called {
    fn span_name(self) -> &'static str {
        match self {
            Self::Tool => SPAN_NAME,
            Self::UnknownTool => "tools/call",
            Self::Unparsed => "invalid JSON-RPC message",
            Self::Method(name) => name,
        }
    }
}

/// How a `tools/call` ended.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOutcome<'a> {
    pub subcommand: Option<&'a str>,
    pub verdict: &'a str,
    /// How an allowed call ended (`ok`, `error`, `timeout`, …), as its
    /// outcome record says.
    pub outcome: Option<&'a str>,
    /// The rule that refused it.
    pub rule: Option<&'a str>,
    pub exit_code: Option<i32>,
    pub error_type: Option<&'a str>,
    pub error_message: Option<&'a str>,
}

/// One call in flight: its span (when traces are exported) and start time.
pub struct ActiveCall {
    inner: Option<Arc<Inner>>,
    span: Option<opentelemetry_sdk::trace::Span>,
    parent: SpanContext,
    called: Called,
    protocol_version: Option<String>,
    start: Instant,
}

impl fmt::Debug for ActiveCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActiveCall")
            .field("trace_id", &self.trace_id())
            .finish_non_exhaustive()
    }
}

impl ActiveCall {
    /// This call's span context, else the incoming traceparent's.
    fn context(&self) -> Option<&SpanContext> {
        let own = self.span.as_ref().map(|s| s.span_context());
        own.or(Some(&self.parent)).filter(|cx| cx.is_valid())
    }

    pub fn trace_id(&self) -> Option<String> {
        self.context().map(|cx| cx.trace_id().to_string())
    }

    pub fn span_id(&self) -> Option<String> {
        self.span
            .as_ref()
            .map(|s| s.span_context().span_id().to_string())
    }

    /// One log record for an (already redacted) audit event, on this call's span.
    pub fn log_audit_event(&self, event: &Value) {
        if let Some((_, logger)) = self.inner.as_ref().and_then(|i| i.logs.as_ref()) {
            super::audit_log::emit(logger, event, self.context());
        }
    }

    /// Ends the span with the outcome and records the duration.
    pub fn finish(mut self, outcome: &CallOutcome<'_>) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        // A JSON-RPC error code as `error.type` is also the response status
        // code. Any other error is a tool result with `isError`, which the
        // MCP conventions call `tool_error`; the specific class (a refusal,
        // a timeout, …) is browser-shell's own attribute.
        let code = outcome.error_type.filter(|e| e.parse::<i64>().is_ok());
        let class = outcome.error_type.filter(|_| code.is_none());
        let errors = [
            (ERROR_TYPE, code.or(class.map(|_| TOOL_ERROR))),
            (RPC_RESPONSE_STATUS_CODE, code),
            (BROWSER_SHELL_ERROR_TYPE, class),
        ];
        if let Some(mut span) = self.span.take() {
            let mut attributes = vec![KeyValue::new(
                "browser_shell.verdict",
                outcome.verdict.to_owned(),
            )];
            let exit_code = outcome.exit_code.map(i64::from);
            attributes.extend(exit_code.map(|c| KeyValue::new("browser_shell.exit_code", c)));
            let optional = [
                ("browser_shell.subcommand", outcome.subcommand),
                ("browser_shell.outcome", outcome.outcome),
                ("browser_shell.rule", outcome.rule),
            ];
            push_some(&mut attributes, optional);
            push_some(&mut attributes, errors);
            span.set_attributes(attributes);
            if let Some(error_type) = outcome.error_type {
                span.set_status(Status::error(
                    outcome.error_message.unwrap_or(error_type).to_owned(),
                ));
            }
            span.end();
        }
        if let Some(metrics) = &inner.metrics {
            let mut attributes = base_attributes(self.called, self.protocol_version.as_deref());
            push_some(&mut attributes, errors);
            // Only an allowed call's subcommand: the grammar accepted it, so
            // it is one of a known few; a refused call's could be anything.
            let allowed = outcome.verdict == "allowed";
            let subcommand = outcome.subcommand.filter(|_| allowed);
            push_some(&mut attributes, [("browser_shell.subcommand", subcommand)]);
            metrics.operation(self.start.elapsed().as_secs_f64(), &attributes);
            if let Some(rule) = outcome.rule {
                metrics.refusals(rule, 1);
            }
        }
    }
}

/// Attributes shared by the span and the metric.
fn base_attributes(called: Called, protocol_version: Option<&str>) -> Vec<KeyValue> {
    let mut attributes = vec![KeyValue::new("network.transport", "pipe")];
    match called {
        Called::Unparsed => {}
        Called::Method(name) => attributes.push(KeyValue::new("mcp.method.name", name)),
        Called::Tool | Called::UnknownTool => {
            attributes.push(KeyValue::new("mcp.method.name", "tools/call"));
        }
    }
    if called == Called::Tool {
        attributes.push(KeyValue::new("gen_ai.tool.name", TOOL));
        attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    }
    push_some(
        &mut attributes,
        [("mcp.protocol.version", protocol_version)],
    );
    attributes
}

fn push_some<const N: usize>(
    attributes: &mut Vec<KeyValue>,
    pairs: [(&'static str, Option<&str>); N],
) {
    attributes.extend(
        pairs
            .into_iter()
            .filter_map(|(k, v)| Some(KeyValue::new(k, v?.to_owned()))),
    );
}

fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Who exports: this service, its version, and this start of it (two
/// servers, a restart or a sibling, must not feed one series: each start is
/// an instance of its own; the operator's attributes, added after, can
/// still name them otherwise).
fn resource(config: &TelemetryConfig) -> Resource {
    Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_attributes(instance_attributes())
        .with_attributes(
            config
                .resource_attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_service_name(config.service_name.clone())
        .build()
}

/// `service.instance.id` (random, per start), `host.name`, `process.pid`.
fn instance_attributes() -> Vec<KeyValue> {
    let mut bytes = [0u8; 16];
    let id = match rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()) {
        Ok(16) => bytes.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        _ => format!("{}-{}", std::process::id(), now_rfc3339()),
    };
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    vec![
        KeyValue::new("service.instance.id", id),
        KeyValue::new("host.name", host),
        KeyValue::new("process.pid", i64::from(std::process::id())),
    ]
}
