//! What became of the OTLP copy: each exporter wrapped so that every batch
//! it was handed is counted as exported, or as failed with why
//! (`otel.sdk.exporter.{span,log}.exported`, `error.type` on a failure, as
//! the OpenTelemetry SDK-metrics conventions name them), and a failure is
//! said on stderr. What waits in the queue, and what it had no room for, is
//! [`super::export_queue`]'s to count.
//!
//! The copy is best effort (the audit log is the record); these counters are
//! how a dashboard learns it was not complete, once a collector answers.

use std::{sync::Arc, time::Duration};

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Meter},
};
use opentelemetry_sdk::{
    Resource,
    error::{OTelSdkError, OTelSdkResult},
    logs::{LogBatch, LogExporter},
    trace::{SpanData, SpanExporter},
};

use super::export_queue::Waiting;

/// How long one export may take. The exporter's own timeout covers a
/// request once a connection stands; a collector that accepts the
/// connection and never answers its handshake would hold the batch (and
/// every later one) until exit.
pub(super) const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// An exporter, and the counter of what it exported or failed to.
#[derive(Debug)]
pub(super) struct Counted<E> {
    inner: E,
    exported: Counter<u64>,
    component: &'static str,
    /// The server's runtime, for the export's timer: the SDK polls exports
    /// on threads of its own, outside any runtime.
    runtime: tokio::runtime::Handle,
    /// The queue the batches come from: what is handed here has left it.
    waiting: Arc<Waiting>,
}

impl<E> Counted<E> {
    /// `inner`, counted on `meter` as `signal` (`span` or `log`), its
    /// exports timed on `runtime`, each batch taken off `waiting`.
    pub(super) fn new(
        inner: E,
        meter: &Meter,
        signal: &'static str,
        runtime: tokio::runtime::Handle,
        waiting: &Arc<Waiting>,
    ) -> Self {
        let (name, component) = match signal {
            "span" => ("otel.sdk.exporter.span.exported", "otlp_span_exporter"),
            _ => ("otel.sdk.exporter.log.exported", "otlp_log_exporter"),
        };
        Self {
            inner,
            exported: meter
                .u64_counter(name)
                .with_unit(if signal == "span" {
                    "{span}"
                } else {
                    "{log_record}"
                })
                .with_description(
                    "Records the OTLP exporter was handed, exported or failed (error.type)",
                )
                .build(),
            component,
            runtime,
            waiting: Arc::clone(waiting),
        }
    }

    /// `export`, or a timeout after [`EXPORT_TIMEOUT`] (the export is then
    /// dropped, and its request with it).
    async fn bounded(&self, export: impl Future<Output = OTelSdkResult>) -> OTelSdkResult {
        // The sleep is made inside the task: only there is the runtime current.
        let timer = self
            .runtime
            .spawn(async { tokio::time::sleep(EXPORT_TIMEOUT).await });
        match futures_util::future::select(std::pin::pin!(export), timer).await {
            futures_util::future::Either::Left((result, timer)) => {
                timer.abort();
                result
            }
            futures_util::future::Either::Right(_) => Err(OTelSdkError::Timeout(EXPORT_TIMEOUT)),
        }
    }

    fn count(&self, records: usize, result: &OTelSdkResult) {
        let mut attributes = vec![KeyValue::new("otel.component.type", self.component)];
        if let Err(error) = result {
            attributes.push(KeyValue::new("error.type", error_type(error)));
            tracing::warn!(
                records,
                component = self.component,
                %error,
                "OTLP export failed: these records are not in the copy (the audit log has them)"
            );
        }
        self.exported.add(records as u64, &attributes);
    }
}

/// A failure's class, from a small fixed set.
fn error_type(error: &OTelSdkError) -> &'static str {
    match error {
        OTelSdkError::Timeout(_) => "timeout",
        OTelSdkError::AlreadyShutdown => "already_shutdown",
        _ => "export_failed",
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let records = batch.len();
        self.waiting.left(records as u64);
        let result = self.bounded(self.inner.export(batch)).await;
        self.count(records, &result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: LogExporter> LogExporter for Counted<E> {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let records = batch.iter().count();
        self.waiting.left(records as u64);
        let result = self.bounded(self.inner.export(batch)).await;
        self.count(records, &result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
