//! The composition root: from the plan `cli` checked to a running server.
//! [`assemble`] builds the parts (the gate, the confinement and its
//! self-test, the audit log, the rules, the runner); [`Boot::new`] builds
//! the runtime, OTLP and the thread that hashes the binaries for the
//! `started` record (while the self-test still runs); [`Boot::run`] builds
//! the [`Server`]'s services and serves ([`serving`]) until EOF or SIGTERM,
//! then flushes and exits in bounded time.

pub(crate) mod assemble;
mod child_uids;
mod refusals;
mod serving;

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;

use crate::{
    obs::telemetry::Telemetry,
    server::{
        Parts, Server,
        chronicle::{BinaryFacts, Digest, StartFacts, TrampolineFacts},
    },
};

/// How long the binaries' hashing waits after the handshake, unless a call
/// needs the `started` record first.
const HASH_AFTER_HANDSHAKE: Duration = Duration::from_millis(50);

/// What hashing needs once the server exists: the server to record into,
/// the facts to complete, and agent-browser's file.
type HandOver = (Arc<Server>, StartFacts, PathBuf);

/// A server on its way up: its runtime and OTLP exist, its parts not yet.
pub(crate) struct Boot {
    runtime: tokio::runtime::Runtime,
    telemetry: Telemetry,
    hand_over: std::sync::mpsc::SyncSender<HandOver>,
}

impl Boot {
    /// The runtime, OTLP (whose exporters must be built inside the runtime:
    /// tonic spawns a task) and the hashing thread.
    pub(crate) fn new() -> anyhow::Result<Self> {
        // One worker: a call's own work is a fraction of a millisecond
        // (fsyncs, images and spawns run on blocking threads), and each idle
        // worker keeps a stack and a malloc arena resident
        // (docs/benchmarks.md, "Idle RSS").
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let telemetry = {
            let _entered = runtime.enter();
            Telemetry::from_env().context("bad OTEL_* configuration")?
        };
        let hand_over = spawn_hashing(runtime.handle().clone());
        Ok(Self {
            runtime,
            telemetry,
            hand_over,
        })
    }

    /// Serve with these parts until the client hangs up or SIGTERM, waiting
    /// at most `grace` for calls in flight at SIGTERM.
    pub(crate) fn run(self, mut parts: Parts, grace: Duration) -> anyhow::Result<()> {
        let Self {
            runtime,
            telemetry,
            hand_over,
        } = self;
        let gate = parts
            .gate
            .take()
            .context("the browser gate was not bound")?;
        tracing::info!(
            agent_browser = %parts.runner.agent_browser().display(),
            trampoline = %parts.trampoline_file.as_deref().map_or_else(
                || "browser-shell's own binary".to_owned(),
                |p| p.display().to_string()
            ),
            cdp_port = parts.runner.cdp_port(),
            gate_port = gate.port(),
            audit_log = %parts.audit.path().display(),
            "browser-shell ready on stdio"
        );
        if telemetry.is_enabled() {
            tracing::info!("OTLP export on (best effort; the audit log is the record)");
        }
        let mut facts = start_facts(&mut parts);
        facts.otlp = telemetry.is_enabled();
        facts.gate_port = gate.port();
        let agent_browser = parts.runner.agent_browser().to_owned();
        let server = Arc::new(Server::new(parts, telemetry.clone()));
        server.journal.guard_diagnostics();
        let hashing = move |server: &Arc<Server>| {
            let _ = hand_over.send((Arc::clone(server), facts, agent_browser));
        };
        let served = runtime.block_on(serving::run(server, gate, grace, hashing));
        // Flush OTLP with a bound; a dead collector cannot hold the exit longer.
        telemetry.shutdown(Duration::from_secs(2));
        // When stdin is not a pipe, tokio reads it on a blocking thread that
        // cannot be interrupted while the client keeps it open (SIGTERM): do
        // not wait for it.
        runtime.shutdown_timeout(Duration::from_millis(200));
        served
    }
}

/// What the `started` record will say of the binaries, their digests still
/// pending.
fn start_facts(parts: &mut Parts) -> StartFacts {
    StartFacts {
        browser_shell_sha256: Digest::Pending,
        agent_browser: BinaryFacts {
            path: parts.runner.agent_browser().display().to_string(),
            version: std::mem::take(&mut parts.agent_browser_version),
            sha256: Digest::Pending,
        },
        trampoline: TrampolineFacts {
            path: parts
                .trampoline_file
                .as_ref()
                .map(|p| p.display().to_string()),
            // The open file every spawn execs, not the path, which may have
            // been replaced since.
            exe: parts.runner.trampoline_exe().to_owned(),
            sha256: Digest::Pending,
        },
        otlp: false,
        gate_port: 0,
    }
}

/// Hashing the binaries is for the `started` record, which tool calls wait
/// for (`Chronicle::need_started`), not the handshake: serving hands the
/// server over once the client's first request is past, so that hashing
/// slows neither the self-test nor the handshake on a small machine (a nice
/// value does not keep the scheduler from waking them on its core). The
/// thread is made early, while the self-test runs.
fn spawn_hashing(runtime: tokio::runtime::Handle) -> std::sync::mpsc::SyncSender<HandOver> {
    let (hand_over, handed) = std::sync::mpsc::sync_channel::<HandOver>(1);
    std::thread::spawn(move || {
        // No server: the start failed, and there is nothing to record.
        let Ok((server, mut facts, agent_browser)) = handed.recv() else {
            return;
        };
        // On Linux a nice value is per thread: this one yields to calls on a
        // busy machine.
        let _ = rustix::process::setpriority_process(None, 19);
        facts.browser_shell_sha256 = Digest::of_file(std::path::Path::new("/proc/self/exe"));
        facts.agent_browser.sha256 = Digest::of_file(&agent_browser);
        facts.trampoline.sha256 = if facts.trampoline.path.is_some() {
            Digest::of_file(&facts.trampoline.exe)
        } else {
            facts.browser_shell_sha256.clone()
        };
        let _entered = runtime.enter();
        server.chronicle.record_started(&facts);
    });
    hand_over
}
