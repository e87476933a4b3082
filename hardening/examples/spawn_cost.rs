//! Added cost of confinement per spawn: `/usr/bin/true` spawned plainly and
//! confined, interleaved, N times each; prints medians and p95 in µs.
//!
//! `cargo run --release -p hardening --example spawn_cost [N]`

#![allow(clippy::print_stdout)] // an example's output is its report

use std::{process::Command, sync::Arc, time::Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let mut policy = hardening::Policy::default();
    policy.read_exec_paths = vec!["/usr".into(), "/lib".into()];
    policy.read_write_paths = vec!["/tmp".into()];
    let started = Instant::now();
    let prepared = Arc::new(hardening::prepare(&policy)?);
    let prepare_us = started.elapsed().as_secs_f64() * 1e6;
    let time = |confined: bool| -> Result<f64, std::io::Error> {
        let mut command = Command::new("/usr/bin/true");
        if confined {
            hardening::confine(&mut command, Arc::clone(&prepared));
        }
        let t = Instant::now();
        let status = command.status()?;
        assert!(status.success());
        Ok(t.elapsed().as_secs_f64() * 1e6)
    };
    let (mut plain, mut confined) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        plain.push(time(false)?);
        confined.push(time(true)?);
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() * 95 / 100])
    };
    let (p50, p95) = stats(&mut plain);
    let (c50, c95) = stats(&mut confined);
    println!("{}", prepared.report().summary());
    println!("prepare (ruleset + filters, once): {prepare_us:.0} µs");
    println!("spawn+wait /usr/bin/true, n={n} each, interleaved:");
    println!("  plain     p50 {p50:>7.0} µs  p95 {p95:>7.0} µs");
    println!("  confined  p50 {c50:>7.0} µs  p95 {c95:>7.0} µs");
    println!(
        "  added     p50 {:>7.0} µs  ratio {:.2}",
        c50 - p50,
        c50 / p50
    );
    Ok(())
}
