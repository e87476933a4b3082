//! The OTLP metrics: how long each `tools/call` took
//! (`mcp.server.operation.duration`, with the subcommand of an allowed
//! call), how long the MCP session lasted (`mcp.server.session.duration`),
//! how many refusals each rule made (`browser_shell.refusals`, the
//! gate's and the egress's included), and the daemon pool's size
//! (`browser_shell.pool.daemons`, wanted and ready).

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Gauge, Histogram, Meter},
};
use opentelemetry_sdk::metrics::SdkMeterProvider;

const OPERATION_DURATION: &str = "mcp.server.operation.duration";
const SESSION_DURATION: &str = "mcp.server.session.duration";
const REFUSALS: &str = "browser_shell.refusals";
const POOL: &str = "browser_shell.pool.daemons";
const OPERATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
const SESSION_BUCKETS: [f64; 12] = [
    1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 10800.0, 43200.0, 86400.0,
];

/// The instruments, and the provider that exports them.
pub(super) struct Metrics {
    pub(super) provider: SdkMeterProvider,
    operation: Histogram<f64>,
    session: Histogram<f64>,
    refusals: Counter<u64>,
    pool: Gauge<u64>,
}

impl Metrics {
    pub(super) fn new(provider: SdkMeterProvider, meter: &Meter) -> Self {
        Self {
            operation: meter
                .f64_histogram(OPERATION_DURATION)
                .with_unit("s")
                .with_description("Duration of MCP requests handled by the server")
                .with_boundaries(OPERATION_BUCKETS.to_vec())
                .build(),
            session: meter
                .f64_histogram(SESSION_DURATION)
                .with_unit("s")
                .with_description("Duration of the MCP session as observed by the server")
                .with_boundaries(SESSION_BUCKETS.to_vec())
                .build(),
            refusals: meter
                .u64_counter(REFUSALS)
                .with_unit("{refusal}")
                .with_description(
                    "Refusals by browser-shell's rules: calls, and the browser gate's and egress's",
                )
                .build(),
            pool: meter
                .u64_gauge(POOL)
                .with_unit("{daemon}")
                .with_description("The daemon pool: daemons it wants (target) and has ready")
                .build(),
            provider,
        }
    }

    pub(super) fn operation(&self, seconds: f64, attributes: &[KeyValue]) {
        self.operation.record(seconds, attributes);
    }

    pub(super) fn session(&self, seconds: f64, attributes: &[KeyValue]) {
        self.session.record(seconds, attributes);
    }

    pub(super) fn pool(&self, target: usize, ready: usize) {
        for (state, n) in [("target", target), ("ready", ready)] {
            self.pool.record(
                u64::try_from(n).unwrap_or(u64::MAX),
                &[KeyValue::new("browser_shell.pool.state", state)],
            );
        }
    }

    /// `count` refusals by `rule` (its stable id: a bounded set, never
    /// input).
    pub(super) fn refusals(&self, rule: &str, count: u64) {
        self.refusals.add(
            count,
            &[KeyValue::new("browser_shell.rule", rule.to_owned())],
        );
    }
}
