//! What the server leaves behind for others to read: the audit trail (the
//! durable record, [`journal`]) and its best-effort OTLP copy with one span
//! per call ([`telemetry`]).

mod audit_log;
pub(crate) mod confinement;
mod export_count;
mod export_queue;
pub(crate) mod journal;
mod loose;
mod metrics;
pub(crate) mod shield;
pub mod telemetry;
