//! The server's shared state, built once and used by every call, and its
//! own life beside the calls: reaping idle sessions, evicting for room,
//! adopting a previous server's daemons, draining at shutdown
//! ([`lifecycle`]). One call's flow is `crate::call`.

pub(crate) mod chronicle;
mod lifecycle;
pub(crate) mod pace;
pub(crate) mod pool;
pub(crate) mod sessions;

use std::{path::PathBuf, sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::{
    obs::journal::Journal,
    policy::{
        outputs::Quota,
        resolve::{Resolve, SystemResolver},
        rules,
    },
    runner::Runner,
};
use pool::{Pool, PoolSettings};
use sessions::{Overflow, Sessions};

/// How much may run at once, how long a call waits for its turn, and how
/// many sessions may live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_inflight: u32,
    pub(crate) busy_wait: Duration,
    pub(crate) max_sessions: usize,
    pub(crate) overflow: Overflow,
    pub(crate) session_idle: Duration,
    pub(crate) output_quota: Quota,
}

/// Everything the server is built from, checked and prepared by the CLI.
#[derive(Debug)]
pub(crate) struct Parts {
    /// The browser gate, bound; served once the runtime runs.
    pub(crate) gate: Option<crate::gate::Gate>,
    /// What `open`, the navigation guard and the gate may reach, and how
    /// records are redacted: reloadable.
    pub(crate) rules: Arc<rules::Current>,
    pub(crate) limits: Limits,
    pub(crate) runner: Runner,
    /// What the self-test's `agent-browser --version` said.
    pub(crate) agent_browser_version: String,
    /// The trampoline's file, or `None` when browser-shell's own binary is
    /// the trampoline.
    pub(crate) trampoline_file: Option<PathBuf>,
    pub(crate) audit: audit::Sink,
    pub(crate) output_dir: PathBuf,
    pub(crate) max_output_bytes: usize,
    /// The bound on a reply's image, in base64 bytes (0: no images).
    pub(crate) max_image_bytes: u64,
    pub(crate) pool: PoolSettings,
}

/// Shared state of the server.
pub(crate) struct Server {
    pub(crate) runner: Runner,
    pub(crate) journal: Journal,
    /// The rules in force; each call decides under its own snapshot.
    pub(crate) rules: Arc<rules::Current>,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) output_dir: PathBuf,
    pub(crate) max_output_bytes: usize,
    /// The bound on a reply's image, in base64 bytes (0: no images).
    pub(crate) max_image_bytes: u64,
    pub(crate) limits: Limits,
    /// One permit per call allowed to run at once.
    pub(crate) inflight: tokio::sync::Semaphore,
    pub(crate) sessions: Sessions,
    /// Daemons with fresh tabs, ready for new sessions.
    pub(crate) pool: Pool,
    /// The browser gate, once it serves: which sessions type secrets (it
    /// checks where their text lands), and closing a session's popups.
    pub(crate) gate: crate::gate::Handle,
    /// How fast the client may make refusals (the wire waits on it).
    pub(crate) refusal_pace: Arc<pace::RefusalPace>,
    /// The browser gate's refusals: a budget of records of their own, and
    /// how many came past it unrecorded since the last record.
    gate_pace: pace::RefusalPace,
    gate_unrecorded: std::sync::atomic::AtomicU64,
    /// Set once the `started` record is written.
    started: tokio::sync::watch::Sender<bool>,
    /// A call (or the exit) needs the `started` record now: its hashing
    /// starts at once rather than after the client's first moments.
    started_needed: tokio::sync::Notify,
    /// Tool calls handled, for the `stopped` record.
    pub(crate) calls_served: std::sync::atomic::AtomicU64,
    /// Set on SIGTERM: new calls are refused.
    draining: std::sync::atomic::AtomicBool,
    /// Cancelled when draining runs out of patience: in-flight calls stop.
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("runner", &self.runner)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl Server {
    pub(crate) fn new(parts: Parts, telemetry: crate::obs::telemetry::Telemetry) -> Self {
        Self {
            runner: parts.runner,
            journal: Journal::new(
                parts.audit,
                telemetry,
                crate::obs::shield::Shield::new(Arc::clone(&parts.rules)),
            ),
            resolver: Arc::new(SystemResolver {
                timeout: parts.rules.get().url.dns_timeout,
            }),
            rules: parts.rules,
            output_dir: parts.output_dir,
            max_output_bytes: parts.max_output_bytes,
            max_image_bytes: parts.max_image_bytes,
            limits: parts.limits,
            inflight: tokio::sync::Semaphore::new(parts.limits.max_inflight as usize),
            sessions: Sessions::new(parts.limits.max_sessions, parts.limits.overflow),
            pool: Pool::new(parts.pool),
            gate: crate::gate::Handle::default(),
            refusal_pace: Arc::default(),
            gate_pace: pace::RefusalPace::default(),
            gate_unrecorded: std::sync::atomic::AtomicU64::new(0),
            started: tokio::sync::watch::Sender::new(false),
            started_needed: tokio::sync::Notify::new(),
            calls_served: std::sync::atomic::AtomicU64::new(0),
            draining: std::sync::atomic::AtomicBool::new(false),
            shutdown: CancellationToken::new(),
        }
    }

    /// Is the server refusing new calls (SIGTERM)?
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A token cancelled when the server gives up on in-flight calls.
    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// The idle TTL after which the reaper retires a session.
    pub(crate) fn session_idle(&self) -> Duration {
        self.limits.session_idle
    }

    /// At exit: no standby outlives the server, and deferred audit records
    /// reach the disk (with the checkpoint naming the last one).
    pub(crate) fn close(&self) {
        self.runner.discard_all_standbys();
        self.journal.flush();
    }
}
