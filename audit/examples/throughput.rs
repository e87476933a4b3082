//! Cost of the durable write: median µs of one synced `append` (flock,
//! chain, write, fdatasync), and sustained events/s with 1, 8 and 32
//! concurrent writers on one log. Every event is verified afterwards.
//!
//! `cargo run --release -p audit --example throughput [DIR] [EVENTS_PER_WRITER]`
//! (DIR defaults to /var/tmp; use the filesystem the real log lives on).

#![allow(clippy::print_stdout)] // an example's output is its report

use std::{path::PathBuf, sync::Arc, time::Instant};

use audit::{Event, Key, Phase, Sink, checkpoint_path, verify};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
    let per_writer: usize = std::env::args()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    println!(
        "writer threads share one Sink per process (as one server does); fs: {}",
        base.display()
    );
    for writers in [1usize, 8, 32] {
        let dir = tempfile::tempdir_in(&base)?;
        let path = dir.path().join("audit.jsonl");
        let key = Key::load_or_create(&dir.path().join("audit.key"))?;
        let sink = Arc::new(Sink::open(&path, Some(key.clone()), None)?);
        let started = Instant::now();
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let sink = Arc::clone(&sink);
                std::thread::spawn(move || -> Result<Vec<f64>, audit::AuditError> {
                    let mut lat = Vec::with_capacity(per_writer);
                    for i in 0..per_writer {
                        let mut event = Event::new(Phase::Intent, format!("w{w}-{i}"));
                        event.session_id = Some(format!("s{w}"));
                        let t = Instant::now();
                        sink.append(event)?;
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
        lat.sort_by(f64::total_cmp);
        let total = writers * per_writer;
        sink.flush()?;
        let v = verify(
            std::slice::from_ref(&path),
            Some((&checkpoint_path(&path), &key)),
        )?;
        println!(
            "{writers:>2} writers: {total:>5} events in {secs:.2} s = {:>6.0} events/s; append p50 {:>5.0} µs p95 {:>6.0} µs; verify: {} records, intact {}, lost {}",
            total as f64 / secs,
            lat[lat.len() / 2],
            lat[lat.len() * 95 / 100],
            v.records,
            v.is_intact(),
            total as u64 - v.records,
        );
    }
    Ok(())
}
