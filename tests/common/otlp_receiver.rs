//! Real OTLP receivers for tests, on 127.0.0.1 only: a tonic gRPC server
//! and an axum http/protobuf server, both keeping the decoded
//! `opentelemetry-proto` requests they were sent.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use axum::{extract::State, routing::post};
use opentelemetry_proto::tonic::{
    collector::{
        logs::v1::{
            ExportLogsServiceRequest, ExportLogsServiceResponse,
            logs_service_server::{LogsService, LogsServiceServer},
        },
        metrics::v1::{
            ExportMetricsServiceRequest, ExportMetricsServiceResponse,
            metrics_service_server::{MetricsService, MetricsServiceServer},
        },
        trace::v1::{
            ExportTraceServiceRequest, ExportTraceServiceResponse,
            trace_service_server::{TraceService, TraceServiceServer},
        },
    },
    common::v1::{KeyValue, any_value},
};
use prost::Message as _;

/// Everything a receiver was sent, undecoded beyond protobuf.
#[derive(Default)]
pub(crate) struct Received {
    pub(crate) traces: Vec<ExportTraceServiceRequest>,
    pub(crate) logs: Vec<ExportLogsServiceRequest>,
    pub(crate) metrics: Vec<ExportMetricsServiceRequest>,
}

pub(crate) type Store = Arc<Mutex<Received>>;

impl Received {
    /// Every span received, flattened.
    pub(crate) fn spans(&self) -> Vec<&opentelemetry_proto::tonic::trace::v1::Span> {
        self.traces
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .collect()
    }

    /// Every metric received, flattened (one per export that carried it).
    pub(crate) fn metrics(&self) -> Vec<&opentelemetry_proto::tonic::metrics::v1::Metric> {
        self.metrics
            .iter()
            .flat_map(|r| &r.resource_metrics)
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .collect()
    }

    /// Every log record received, flattened.
    pub(crate) fn log_records(&self) -> Vec<&opentelemetry_proto::tonic::logs::v1::LogRecord> {
        self.logs
            .iter()
            .flat_map(|r| &r.resource_logs)
            .flat_map(|r| &r.scope_logs)
            .flat_map(|s| &s.log_records)
            .collect()
    }
}

#[derive(Clone)]
struct Grpc(Store);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().traces.push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().logs.push(request.into_inner());
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().metrics.push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// An OTLP/gRPC receiver on 127.0.0.1; returns its base endpoint.
pub(crate) async fn grpc_receiver() -> (String, Store) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let store = Store::default();
    let server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(Grpc(store.clone())))
        .add_service(LogsServiceServer::new(Grpc(store.clone())))
        .add_service(MetricsServiceServer::new(Grpc(store.clone())));
    tokio::spawn(server.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)));
    (endpoint, store)
}

/// An OTLP/HTTP (protobuf) receiver on 127.0.0.1; returns its base endpoint.
pub(crate) async fn http_receiver() -> (String, Store) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let store = Store::default();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(
                |State(s): State<Store>, body: axum::body::Bytes| async move {
                    let request = ExportTraceServiceRequest::decode(body).unwrap();
                    s.lock().unwrap().traces.push(request);
                },
            ),
        )
        .route(
            "/v1/logs",
            post(
                |State(s): State<Store>, body: axum::body::Bytes| async move {
                    let request = ExportLogsServiceRequest::decode(body).unwrap();
                    s.lock().unwrap().logs.push(request);
                },
            ),
        )
        .route(
            "/v1/metrics",
            post(
                |State(s): State<Store>, body: axum::body::Bytes| async move {
                    let request = ExportMetricsServiceRequest::decode(body).unwrap();
                    s.lock().unwrap().metrics.push(request);
                },
            ),
        )
        .with_state(store.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (endpoint, store)
}

/// Attributes as strings, the way a reviewer reads them.
pub(crate) fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::IntValue(i)) => i.to_string(),
                Some(any_value::Value::BoolValue(b)) => b.to_string(),
                Some(any_value::Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A metric point's integer value (counters and gauges of counts); a test
/// that meets another kind fails here.
#[allow(clippy::panic)]
pub(crate) fn int_value(point: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint) -> i64 {
    match point.value {
        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(v)) => v,
        other => panic!("not an integer: {other:?}"),
    }
}

/// A collector that takes every connection and never answers: its
/// endpoint. The connections stay open until the test process ends.
pub(crate) fn silent_collector() -> String {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", silent.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept() {
            held.push(conn); // open, read by no one, never answered
        }
    });
    endpoint
}

/// The largest value received of the metric `name`'s points whose
/// `error.type` is `error` (`None`: without one).
pub(crate) fn largest_point(store: &Store, name: &str, error: Option<&str>) -> Option<i64> {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let received = store.lock().expect("store");
    received
        .metrics()
        .into_iter()
        .filter(|m| m.name == name)
        .flat_map(|m| match &m.data {
            Some(Data::Sum(sum)) => sum.data_points.clone(),
            Some(Data::Gauge(gauge)) => gauge.data_points.clone(),
            _ => Vec::new(),
        })
        .filter(|p| attrs(&p.attributes).get("error.type").map(String::as_str) == error)
        .map(|p| int_value(&p))
        .max()
}
