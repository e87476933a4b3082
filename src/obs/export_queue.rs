//! What the OTLP copy holds and has not sent yet: each signal's queue,
//! bounded here, in front of the SDK's batch processor, so that its size is
//! known exactly (`otel.sdk.processor.{span,log}.queue.size`; the SDK
//! reports its `.queue.capacity`, the same) and a record it has no room for
//! is counted as dropped where it is dropped
//! (`otel.sdk.processor.{span,log}.processed`, `error.type` `queue_full`).
//!
//! The SDK's processor counts its own drops but never says how full it is;
//! a count of records let in less those handed to the exporter
//! ([`super::export_count`] says when) is exact only if nothing is dropped
//! unseen in between. So the bound is kept here, and the SDK's own queue is
//! made as large, so that it never fills first.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};
use std::time::Duration;

use opentelemetry::{
    Context, InstrumentationScope, KeyValue,
    metrics::{Counter, Meter},
};
use opentelemetry_sdk::{
    Resource,
    error::OTelSdkResult,
    logs::{LogProcessor, SdkLogRecord},
    trace::{Span, SpanData, SpanProcessor},
};

/// Records one signal's queue holds at most, unless the standard
/// `OTEL_BSP_MAX_QUEUE_SIZE` (spans) or `OTEL_BLRP_MAX_QUEUE_SIZE` (logs)
/// says otherwise; the SDK's processor is given the same capacity.
const DEFAULT_CAPACITY: usize = 2048;

/// The capacity of `signal`'s queue (`span` or `log`).
pub(super) fn capacity(signal: &str) -> usize {
    let variable = match signal {
        "span" => "OTEL_BSP_MAX_QUEUE_SIZE",
        _ => "OTEL_BLRP_MAX_QUEUE_SIZE",
    };
    std::env::var(variable)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_CAPACITY)
}

/// Records let in and not yet handed to the exporter, and how many fit.
#[derive(Debug)]
pub(super) struct Waiting {
    count: AtomicU64,
    capacity: u64,
}

impl Waiting {
    /// An empty queue of `capacity` records.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            count: AtomicU64::new(0),
            capacity: capacity as u64,
        }
    }

    /// Room for one more? Taken if so.
    fn admit(&self) -> bool {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok()
    }

    /// `records` left the queue for the exporter.
    pub(super) fn left(&self, records: u64) {
        let _ = self
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(records))
            });
    }

    fn size(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }
}

/// A batch processor behind the bound, and its counters.
#[derive(Debug)]
pub(super) struct Bounded<P> {
    inner: P,
    waiting: Arc<Waiting>,
    dropped: Counter<u64>,
    component: [KeyValue; 2],
}

impl<P> Bounded<P> {
    /// `inner` behind `waiting`'s bound, measured on `meter` as `signal`
    /// (`span` or `log`).
    pub(super) fn new(
        inner: P,
        waiting: Arc<Waiting>,
        meter: &Meter,
        signal: &'static str,
    ) -> Self {
        let (prefix, unit, component) = match signal {
            "span" => (
                "otel.sdk.processor.span",
                "{span}",
                "batching_span_processor",
            ),
            _ => (
                "otel.sdk.processor.log",
                "{log_record}",
                "batching_log_processor",
            ),
        };
        let attributes = [KeyValue::new("otel.component.type", component)];
        let observed = Arc::clone(&waiting);
        let shown = attributes.clone();
        meter
            .i64_observable_up_down_counter(format!("{prefix}.queue.size"))
            .with_unit(unit)
            .with_description("Records in the OTLP copy's queue, not yet handed to the exporter")
            .with_callback(move |observer| {
                observer.observe(i64::try_from(observed.size()).unwrap_or(i64::MAX), &shown);
            })
            .build();
        Self {
            inner,
            waiting,
            dropped: meter
                .u64_counter(format!("{prefix}.processed"))
                .with_unit(unit)
                .with_description(
                    "Records the OTLP copy's queue had no room for (error.type queue_full)",
                )
                .build(),
            component: [
                attributes[0].clone(),
                KeyValue::new("error.type", "queue_full"),
            ],
        }
    }

    /// Let a record through when the queue has room; count it otherwise.
    fn admitted(&self) -> bool {
        let admitted = self.waiting.admit();
        if !admitted {
            self.dropped.add(1, &self.component);
        }
        admitted
    }
}

impl<P: LogProcessor> LogProcessor for Bounded<P> {
    fn emit(&self, record: &mut SdkLogRecord, scope: &InstrumentationScope) {
        if self.admitted() {
            self.inner.emit(record, scope);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.admitted() {
            self.inner.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_lets_in_up_to_its_capacity_and_counts_what_left() {
        let waiting = Waiting::new(DEFAULT_CAPACITY);
        for _ in 0..DEFAULT_CAPACITY {
            assert!(waiting.admit());
        }
        assert!(!waiting.admit(), "full");
        assert_eq!(waiting.size(), DEFAULT_CAPACITY as u64);
        waiting.left(10);
        assert_eq!(waiting.size(), DEFAULT_CAPACITY as u64 - 10);
        assert!(waiting.admit(), "room again");
        waiting.left(u64::MAX);
        assert_eq!(waiting.size(), 0, "never below zero");
    }
}
