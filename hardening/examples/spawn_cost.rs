//! Added cost of confinement per spawn: `/usr/bin/true` spawned plainly,
//! confined by a `pre_exec` hook (fork), and confined by a trampoline
//! (`posix_spawn` of the trampoline, which confines itself and execs),
//! interleaved, N times each; prints medians and p95 in µs.
//!
//! `cargo run --release -p hardening --example spawn_cost [N] [TRAMPOLINE]`
//!
//! TRAMPOLINE is the executable to use as the trampoline (browser-shell's
//! own binary, to measure what browser-shell pays); by default this
//! example is its own trampoline.

#![allow(clippy::print_stdout)] // an example's output is its report

use std::{path::PathBuf, process::Command, sync::Arc, time::Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if hardening::trampoline::invoked() {
        hardening::trampoline::main();
    }
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let trampoline_exe = args
        .next()
        .map_or_else(|| PathBuf::from("/proc/self/exe"), PathBuf::from);
    let mut policy = hardening::Policy::default();
    policy.read_exec_paths = vec!["/usr".into(), "/lib".into()];
    policy.read_write_paths = vec!["/tmp".into()];
    let started = Instant::now();
    let prepared = Arc::new(hardening::prepare(&policy)?);
    let prepare_us = started.elapsed().as_secs_f64() * 1e6;
    let trampoline = hardening::Trampoline::new(&trampoline_exe, &policy)?;
    let program = PathBuf::from("/usr/bin/true");
    let time = |mut command: Command| -> Result<f64, std::io::Error> {
        let t = Instant::now();
        let output = command.output()?;
        assert!(output.status.success(), "{output:?}");
        Ok(t.elapsed().as_secs_f64() * 1e6)
    };
    let (mut plain, mut hooked, mut trampolined) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for _ in 0..n {
        plain.push(time(Command::new(&program))?);
        let mut command = Command::new(&program);
        hardening::confine(&mut command, Arc::clone(&prepared));
        hooked.push(time(command)?);
        trampolined.push(time(trampoline.command(&program))?);
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() * 95 / 100])
    };
    let (p50, p95) = stats(&mut plain);
    println!("{}", prepared.report().summary());
    println!("prepare (ruleset + filters), in the parent once for pre_exec: {prepare_us:.0} µs");
    println!("spawn+wait /usr/bin/true, n={n} each, interleaved:");
    println!("  plain                   p50 {p50:>7.0} µs  p95 {p95:>7.0} µs");
    for (name, times) in [
        ("pre_exec hook (fork)", &mut hooked),
        ("trampoline", &mut trampolined),
    ] {
        let (c50, c95) = stats(times);
        println!(
            "  {name:<23} p50 {c50:>7.0} µs  p95 {c95:>7.0} µs  added p50 {:>6.0} µs  ratio {:.2}",
            c50 - p50,
            c50 / p50
        );
    }
    println!("  (trampoline: {})", trampoline_exe.display());
    Ok(())
}
