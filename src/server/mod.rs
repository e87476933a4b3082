//! The server's services, built once in [`Server::new`] and each used by
//! the stages that need it: [`admission`] (call slots, the drain),
//! [`sessions`] (the registry, the pool, a session's start and end),
//! [`chronicle`] (the server's own records), the runner and the journal.
//! One call's flow is `crate::call`.

pub(crate) mod admission;
pub(crate) mod chronicle;
mod lifecycle;
pub(crate) mod pace;
pub(crate) mod pool;
pub(crate) mod pool_size;
pub(crate) mod registry;
pub(crate) mod sessions;

use std::{path::PathBuf, sync::Arc, time::Duration};

use crate::{
    obs::journal::Journal,
    policy::{
        outputs::{Outputs, Quota},
        resolve::{Resolve, SystemResolver},
        rules,
    },
    runner::Runner,
};
use admission::Admission;
use chronicle::Chronicle;
use pool::PoolSettings;
use registry::{OnExit, Overflow};
use sessions::{SessionSettings, Sessions};

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
    pub(crate) on_exit: OnExit,
}

/// Everything the server is built from, checked and prepared by the CLI.
#[derive(Debug)]
pub(crate) struct Parts {
    /// The browser gate, bound; served once the runtime runs.
    pub(crate) gate: Option<crate::gate::Gate>,
    /// What `open`, the navigation guard and the gate may reach, and how
    /// records are redacted: reloadable.
    pub(crate) rules: Arc<rules::Current>,
    /// Host-name lookups for the URL policy, the gate and the egress.
    pub(crate) resolver: SystemResolver,
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
    pub(crate) witnesses: crate::evidence::Witnesses,
    /// Where approvals are asked for; `None` when no channel can reach a
    /// person.
    pub(crate) desk: Option<crate::approvals::desk::Desk>,
    /// Approval requests waiting for a 2026-07-28 client's retry.
    pub(crate) retries: crate::approvals::retry::Retries,
    /// The X display approval dialogs are drawn on (`--approvals-display`).
    pub(crate) display: Option<crate::approvals::display::Display>,
}

/// The server: its services, each owned here and handed by reference to
/// the stages and tasks that use it (`crate::call::Services`).
pub(crate) struct Server {
    /// The rules in force; each call decides under its own snapshot.
    pub(crate) rules: Arc<rules::Current>,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) runner: Runner,
    pub(crate) journal: Journal,
    pub(crate) outputs: Outputs,
    pub(crate) admission: Admission,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) chronicle: Chronicle,
    /// How fast the client may make refusals (the wire waits on it).
    pub(crate) refusal_pace: Arc<pace::RefusalPace>,
    /// The browser gate, once it serves: which sessions type secrets (it
    /// checks where their text lands), and ending a session's context.
    pub(crate) gate: crate::gate::Handle,
    /// The evidence of calls that can change the page.
    pub(crate) witnesses: crate::evidence::Witnesses,
    /// The operator's desk for approvals.
    pub(crate) desk: Option<crate::approvals::desk::Desk>,
    /// Approval requests waiting for a 2026-07-28 client's retry.
    pub(crate) retries: crate::approvals::retry::Retries,
    /// The X display approval dialogs are drawn on (`--approvals-display`).
    pub(crate) display: Option<crate::approvals::display::Display>,
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
    /// Build every service from the checked parts, in one place.
    pub(crate) fn new(parts: Parts, telemetry: crate::obs::telemetry::Telemetry) -> Self {
        let journal = Journal::new(
            parts.audit,
            telemetry,
            crate::obs::shield::Shield::new(Arc::clone(&parts.rules)),
        );
        let gate = crate::gate::Handle::default();
        let runner = parts.runner.with_tabs(Arc::new(gate.clone()));
        let limits = parts.limits;
        let outputs = Outputs {
            dir: parts.output_dir,
            quota: limits.output_quota,
            max_reply_bytes: parts.max_output_bytes,
            max_image_bytes: parts.max_image_bytes,
        };
        let sessions = Sessions::new(
            SessionSettings {
                max: limits.max_sessions,
                overflow: limits.overflow,
                idle: limits.session_idle,
                on_exit: limits.on_exit,
                pool: parts.pool,
                output_dir: outputs.dir.clone(),
            },
            runner.clone(),
            journal.clone(),
            gate.clone(),
        );
        let chronicle = Chronicle::new(
            journal.clone(),
            Arc::clone(&parts.rules),
            runner.clone(),
            chronicle::Settings {
                limits,
                max_output_bytes: parts.max_output_bytes,
                pool: parts.pool,
                evidence: parts.witnesses.level(),
            },
        );
        Self {
            resolver: Arc::new(parts.resolver),
            rules: parts.rules,
            runner,
            journal,
            outputs,
            admission: Admission::new(limits.max_inflight, limits.busy_wait),
            sessions: Arc::new(sessions),
            chronicle,
            refusal_pace: Arc::default(),
            gate,
            witnesses: parts.witnesses,
            desk: parts.desk,
            retries: parts.retries,
            display: parts.display,
        }
    }

    /// At exit: no standby outlives the server, and deferred audit records
    /// reach the disk (with the checkpoint naming the last one).
    pub(crate) fn close(&self) {
        self.runner.discard_all_standbys();
        self.journal.flush();
    }
}
