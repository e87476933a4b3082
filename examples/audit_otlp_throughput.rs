//! Audit throughput at the server's strictest durability: every event appended
//! *synced*, as an intent is (`fdatasync` before `append` returns, group commit
//! across writers; the server appends outcomes and refusals deferred, cheaper) and then copied to OTLP as a log record, with 1, 8 and 32
//! concurrent writers, each with the exporter off, on with a collector up (a
//! real gRPC OTLP receiver on 127.0.0.1), and on with the collector down
//! (a closed loopback port). Afterwards the log is verified (lost = appended
//! − verified) and, collector up, the log records received are counted.
//!
//! `cargo run --release --example audit_otlp_throughput [DIR] [EVENTS_PER_WRITER]`
//! (DIR defaults to /var/tmp: use the filesystem the real log lives on).

#![allow(clippy::print_stdout)] // an example's output is its report

// The test suite's real OTLP receiver (test code: it may unwrap).
#[allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#[path = "../tests/common/otlp_receiver.rs"]
mod otlp_receiver;

use std::{path::PathBuf, sync::Arc, time::Instant};

use audit::{CheckpointKey, Event, Phase, SigningKey, Sink, checkpoint_path, verify};
use browser_shell::telemetry::{Telemetry, TelemetryConfig};

/// Where the exporter sends, for one row of the table.
enum Collector {
    Off,
    Up(String, otlp_receiver::Store),
    Down(String),
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
    let per_writer: usize = std::env::args()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(100);
    let runtime = tokio::runtime::Runtime::new()?;
    println!(
        "synced appends (group commit) + one OTLP log record each; fs: {}",
        base.display()
    );
    for writers in [1usize, 8, 32] {
        let (up_endpoint, store) = runtime.block_on(otlp_receiver::grpc_receiver());
        // A port that was just free: nothing listens there.
        let down_endpoint = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
            format!("http://{}", probe.local_addr()?)
        };
        for collector in [
            Collector::Off,
            Collector::Up(up_endpoint.clone(), Arc::clone(&store)),
            Collector::Down(down_endpoint.clone()),
        ] {
            row(&runtime, &base, writers, per_writer, &collector)?;
        }
    }
    Ok(())
}

fn row(
    runtime: &tokio::runtime::Runtime,
    base: &std::path::Path,
    writers: usize,
    per_writer: usize,
    collector: &Collector,
) -> Result<(), Box<dyn std::error::Error>> {
    let (label, endpoint) = match collector {
        Collector::Off => ("OTLP off ", None),
        Collector::Up(endpoint, _) => ("OTLP up  ", Some(endpoint.clone())),
        Collector::Down(endpoint) => ("OTLP down", Some(endpoint.clone())),
    };
    let telemetry = {
        let _entered = runtime.enter();
        let config = TelemetryConfig::from_lookup(|name| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => endpoint.clone(),
            "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("grpc".into()),
            _ => None,
        })?;
        Telemetry::from_config(&config)?
    };
    let dir = tempfile::tempdir_in(base)?;
    let path = dir.path().join("audit.jsonl");
    let key = SigningKey::load_or_create(&dir.path().join("audit.checkpoint-key"))?;
    let sink = Arc::new(Sink::open(&path, Some(key.clone()), None)?);
    let received_before = match collector {
        Collector::Up(_, store) => received(store),
        _ => 0,
    };
    let started = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (sink, telemetry) = (Arc::clone(&sink), telemetry.clone());
            std::thread::spawn(move || -> Result<Vec<f64>, audit::AuditError> {
                let mut lat = Vec::with_capacity(per_writer);
                for i in 0..per_writer {
                    let mut event = Event::new(Phase::Intent, format!("w{w}-{i}"));
                    event.session_id = Some(format!("s{w}"));
                    let t = Instant::now();
                    let sealed = sink.append(event)?;
                    telemetry.log_audit_event(&sealed.record);
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
                Ok(lat)
            })
        })
        .collect();
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.join().map_err(|_| "writer panicked")??);
    }
    let secs = started.elapsed().as_secs_f64();
    sink.flush()?;
    telemetry.shutdown(std::time::Duration::from_secs(5));
    lat.sort_by(f64::total_cmp);
    let total = writers * per_writer;
    let v = verify(
        std::slice::from_ref(&path),
        Some((
            &checkpoint_path(&path),
            &CheckpointKey::Public(key.public()),
        )),
    )?;
    let exported = match collector {
        Collector::Up(_, store) => {
            format!("; collector received {}", received(store) - received_before)
        }
        _ => String::new(),
    };
    println!(
        "{writers:>2} writers, {label}: {total:>5} events in {secs:.2} s = {:>6.0} events/s; p50 {:>5.0} µs p95 {:>6.0} µs; verified {}, intact {}, lost {}{exported}",
        total as f64 / secs,
        lat[lat.len() / 2],
        lat[lat.len() * 95 / 100],
        v.records,
        v.is_intact(),
        total as u64 - v.records,
    );
    Ok(())
}

fn received(store: &otlp_receiver::Store) -> usize {
    store.lock().map_or(0, |r| r.log_records().len())
}
