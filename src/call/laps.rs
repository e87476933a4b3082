//! A stopwatch for one call: where its time went, phase by phase (intent
//! write, agent-browser, guard, outcome write), reported as one debug event.
//! Only the profile behind the benchmark reads it; with debug logging off it
//! costs a few `Instant::now()` calls and one small `Vec` per call.

use std::time::Instant;

/// Where an allowed call's time went, phase by phase, for one debug event
/// (`RUST_LOG=browser_shell=debug`): the profile behind the benchmark.
pub(super) struct Laps {
    started: Instant,
    last: Instant,
    laps: Vec<(&'static str, u128)>,
}

impl Laps {
    pub(super) fn start(started: Instant) -> Self {
        Self {
            laps: vec![("before_intent", started.elapsed().as_micros())],
            started,
            last: Instant::now(),
        }
    }

    pub(super) fn lap(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.laps.push((phase, (now - self.last).as_micros()));
        self.last = now;
    }

    pub(super) fn report(&self, subcommand: &str) {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let laps: Vec<String> = self
                .laps
                .iter()
                .map(|(p, us)| format!("{p}={us}"))
                .collect();
            tracing::debug!(
                subcommand,
                total_us = self.started.elapsed().as_micros(),
                laps_us = laps.join(" "),
                "call phases"
            );
        }
    }
}
