//! The server's own life on the record, beside its calls: `started` (what
//! runs, under which rules, limits and confinement), `reloaded` or
//! `reload_refused` (the policy file read again), `stopped` (why, and how
//! many calls it served). A reviewer can tell from the log alone which
//! rules decided a call: every call record names its policy's SHA-256, and
//! these records carry the policy behind each digest.

use std::{
    path::Path,
    sync::{Arc, atomic::AtomicU64},
};

use audit::Outcome;
use serde_json::{Value, json};

use super::{Limits, pace::RefusalPace, pool::PoolSettings};
use crate::{
    obs::journal::{Journal, MAX_RECORDED_REASON_BYTES, capped, new_call_id},
    policy::rules::{self, Reload},
    runner::Runner,
};

/// How long a call waits for the `started` record: far longer than hashing
/// takes, so only a stuck hash fails a call (docs/benchmarks.md, "A quieter
/// start").
const STARTED_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// What the server knows about itself once it is ready.
#[derive(Debug)]
pub(crate) struct StartFacts {
    /// SHA-256 of browser-shell's own binary.
    pub(crate) browser_shell_sha256: Digest,
    pub(crate) agent_browser: BinaryFacts,
    pub(crate) trampoline: TrampolineFacts,
    pub(crate) otlp: bool,
    pub(crate) gate_port: u16,
}

/// The agent-browser binary the server runs.
#[derive(Debug)]
pub(crate) struct BinaryFacts {
    pub(crate) path: String,
    pub(crate) version: String,
    pub(crate) sha256: Digest,
}

/// The program every child starts as, unconfined, before it confines
/// itself and execs agent-browser.
#[derive(Debug)]
pub(crate) struct TrampolineFacts {
    /// Its file; `None` when it is browser-shell's own binary.
    pub(crate) path: Option<String>,
    /// What every spawn execs (the file as opened at start), to hash.
    pub(crate) exe: std::path::PathBuf,
    /// Of the file as opened at start (what every spawn runs).
    pub(crate) sha256: Digest,
}

/// A binary's SHA-256 for the `started` record. Hashing waits until the
/// client's first moments are past, so a digest starts out pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Digest {
    Pending,
    Sha256(String),
    /// The file could not be read: why.
    Unreadable(String),
}

impl Digest {
    /// The SHA-256 of the file at `path`, or why not.
    pub(crate) fn of_file(path: &Path) -> Self {
        match std::fs::File::open(path).and_then(audit::sha256_reader) {
            Ok(sha) => Self::Sha256(sha),
            Err(e) => Self::Unreadable(format!("cannot read {}: {e}", path.display())),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Self::Sha256(sha) => json!(sha),
            Self::Unreadable(why) => json!({ "unavailable": why }),
            Self::Pending => json!({ "unavailable": "not hashed yet" }),
        }
    }
}

/// The server's own records, and the `started` record's timing.
pub(crate) struct Chronicle {
    journal: Journal,
    rules: Arc<rules::Current>,
    runner: Runner,
    settings: Settings,
    /// Set once the `started` record is written.
    started: tokio::sync::watch::Sender<bool>,
    /// A call (or the exit) needs the `started` record now: its hashing
    /// starts at once rather than after the client's first moments.
    started_needed: tokio::sync::Notify,
    /// The browser gate's refusals: a budget of records of their own, and
    /// how many came past it unrecorded since the last record.
    gate_pace: RefusalPace,
    gate_unrecorded: AtomicU64,
}

/// The settings the `started` record states.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) limits: Limits,
    pub(crate) max_output_bytes: usize,
    pub(crate) pool: PoolSettings,
    /// `--evidence`: what a reviewer can expect after each page-changing call.
    pub(crate) evidence: crate::evidence::Level,
}

impl std::fmt::Debug for Chronicle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chronicle").finish_non_exhaustive()
    }
}

impl Chronicle {
    pub(crate) fn new(
        journal: Journal,
        rules: Arc<rules::Current>,
        runner: Runner,
        settings: Settings,
    ) -> Self {
        Self {
            journal,
            rules,
            runner,
            settings,
            started: tokio::sync::watch::Sender::new(false),
            started_needed: tokio::sync::Notify::new(),
            gate_pace: RefusalPace::default(),
            gate_unrecorded: AtomicU64::new(0),
        }
    }

    /// The first record of this server's life.
    pub(crate) fn record_started(&self, facts: &StartFacts) {
        let rules = self.rules.get();
        let limits = &self.settings.limits;
        let detail = json!({
            "browser_shell": {
                "version": env!("CARGO_PKG_VERSION"),
                "sha256": facts.browser_shell_sha256.to_json(),
            },
            "agent_browser": {
                "path": facts.agent_browser.path,
                "version": facts.agent_browser.version,
                "sha256": facts.agent_browser.sha256.to_json(),
            },
            "trampoline": {
                "path": facts.trampoline.path,
                "sha256": facts.trampoline.sha256.to_json(),
            },
            "policy": rules.describe(self.rules.policy_file()),
            "limits": {
                "max_inflight": limits.max_inflight,
                "busy_wait_sec": limits.busy_wait.as_secs(),
                "max_sessions": limits.max_sessions,
                "session_overflow": limits.overflow.name(),
                "session_idle_sec": limits.session_idle.as_secs(),
                "on_exit": limits.on_exit.name(),
                "output_quota_session_bytes": limits.output_quota.per_session,
                "output_quota_total_bytes": limits.output_quota.total,
                "max_output_bytes": self.settings.max_output_bytes,
                "pool": self.settings.pool.size.to_json(),
                "pool_idle_sec": self.settings.pool.idle.as_secs(),
                "evidence": self.settings.evidence.name(),
            },
            "confinement": crate::obs::confinement::record(self.runner.confinement().report()),
            "cdp_port": self.runner.cdp_port(),
            "gate_port": facts.gate_port,
            "otlp": facts.otlp,
            // So that `audit verify` knows a checkpoint must exist, and under
            // which key, even once both were deleted.
            "checkpoint": match self.journal.checkpoint_key_fingerprint() {
                Some(fingerprint) => json!({ "kept": true, "key_fingerprint": fingerprint }),
                None => json!({ "kept": false }),
            },
        });
        let mut event = self.server_event(Outcome::Started, "the server is ready".to_owned());
        event.policy_sha256 = Some(rules.sha256.clone());
        event.detail = Some(detail);
        self.append_server_event(event);
        self.started.send_replace(true);
    }

    /// Until the `started` record is written (at most [`STARTED_WITHIN`]): a
    /// call's records come after the record that says which binaries and
    /// policy decided them. A disk too slow to hash the binaries in time
    /// does not hold calls back; the record then follows them.
    pub(crate) async fn wait_started(&self) {
        let mut started = self.started.subscribe();
        let written = started.wait_for(|written| *written);
        // The sender lives as long as the server: only the bound can end it early.
        let _ = tokio::time::timeout(STARTED_WITHIN, written).await;
    }

    /// [`Chronicle::wait_started`] for one that needs the record now (a call,
    /// the exit): the binaries are hashed at once if they were not yet.
    pub(crate) async fn need_started(&self) {
        // A permit is kept when nothing waits yet: the need is not lost.
        self.started_needed.notify_one();
        self.wait_started().await;
    }

    /// Until something needs the `started` record ([`Chronicle::need_started`]).
    pub(crate) async fn started_needed(&self) {
        self.started_needed.notified().await;
    }

    /// Read the policy file again (SIGHUP, `browser-shell policy reload`):
    /// a valid file replaces the rules for the next call; an invalid one
    /// keeps them and says why, on stderr and in the record.
    pub(crate) fn reload_rules(&self) {
        let file = self.rules.policy_file().display().to_string();
        let event = match self.rules.reload() {
            Reload::Replaced { old, new } => {
                tracing::info!(
                    policy = %file,
                    old = %old.sha256,
                    new = %new.sha256,
                    "policy reloaded: the next call is decided under the new one"
                );
                if old.url.dns_timeout != new.url.dns_timeout {
                    tracing::warn!(
                        "dns_timeout_ms changed: it takes effect at the next start, not on reload"
                    );
                }
                let reason = if old.sha256 == new.sha256 {
                    "the policy file was read again; the policy did not change"
                } else {
                    "the policy file was read again and replaces the policy for the next call"
                };
                let mut event = self.server_event(Outcome::Reloaded, reason.to_owned());
                event.policy_sha256 = Some(new.sha256.clone());
                event.detail = Some(json!({
                    "previous_policy_sha256": old.sha256,
                    "policy": new.describe(self.rules.policy_file()),
                }));
                event
            }
            Reload::Kept { rules, error } => {
                tracing::error!(
                    policy = %file,
                    error = %error,
                    kept = %rules.sha256,
                    "policy NOT reloaded: the file does not load; the policy in force stays"
                );
                let reason = format!("the policy in force stays: {error}");
                let mut event = self.server_event(
                    Outcome::ReloadRefused,
                    capped(&reason, MAX_RECORDED_REASON_BYTES).into_owned(),
                );
                event.policy_sha256 = Some(rules.sha256.clone());
                event.detail = Some(json!({ "file": file }));
                event
            }
        };
        self.append_server_event(event);
    }

    /// Something the browser gate or the egress refused (a CDP method, a
    /// request a page made): a `denied` record of its own, attributed to
    /// `session` (the agent's id of the daemon the connection named; a
    /// pooled daemon serves a session whose id is another), else to the
    /// daemon.
    ///
    /// A page or a child can make refusals far faster than a client can, so
    /// they have a budget of their own (the client's is the wire's, see
    /// [`super::pace`]): past it, refusals are counted, and the count goes
    /// into the next record. They are not calls; none is lost unsaid.
    pub(crate) fn record_gate_refusal(
        &self,
        refused: crate::browser_refusals::BrowserRefusal,
        session: Option<String>,
        in_call: Option<super::sessions::CallMark>,
    ) {
        use std::sync::atomic::Ordering;
        let earlier = refused.unrecorded_before;
        // Every refusal is counted, the ones too fast to record included.
        let telemetry = self.journal.telemetry();
        telemetry.count_refusals(refused.rule.id(), earlier + 1);
        if !self.gate_pace.delay().is_zero() {
            self.gate_unrecorded
                .fetch_add(earlier + 1, Ordering::Relaxed);
            return;
        }
        self.gate_pace.spend();
        let unrecorded = earlier + self.gate_unrecorded.swap(0, Ordering::Relaxed);
        let mut event = audit::Event::new(audit::Phase::Denied, new_call_id());
        // A daemon no live session runs on (a connection that named one, a
        // session just closed) is recorded by the name it was called by.
        event.session_id = session.or_else(|| refused.daemon.as_ref().map(ToString::to_string));
        event.verdict = Some(audit::Verdict::Denied);
        event.rule = Some(refused.rule.id().to_owned());
        event.requester = Some(refused.requester.id().to_owned());
        event.destination = refused
            .destination
            .as_ref()
            .map(|to| json!({ "hostname": to.hostname, "port": to.port }));
        if let Some(call) = in_call {
            // The call in flight: its trace and span, and its id, so that a
            // dashboard and a reviewer find the refusal beside the call.
            event.trace_id = call.trace_id;
            event.span_id = call.span_id;
            event.detail = Some(json!({ "in_call": call.call_id }));
        }
        let rules = self.rules.get();
        event.policy_sha256 = Some(rules.sha256.clone());
        // A page may put a typed secret into a URL it then requests.
        let reason = rules.secrets.scrub(&refused.reason);
        let reason = capped(&reason, MAX_RECORDED_REASON_BYTES);
        event.reason = Some(if unrecorded > 0 {
            format!(
                "{reason} ({unrecorded} earlier gate refusals came too fast to be recorded one by one)"
            )
        } else {
            reason.into_owned()
        });
        if let Err(e) = self.journal.append_unattached(event) {
            tracing::error!(error = %e, "audit record of a browser gate refusal not written");
        }
    }

    /// The last record of this server's life.
    pub(crate) fn record_stopped(&self, reason: &str, calls_served: u64) {
        let mut event = self.server_event(Outcome::Stopped, reason.to_owned());
        event.policy_sha256 = Some(self.rules.get().sha256.clone());
        event.detail = Some(json!({ "calls_served": calls_served }));
        self.append_server_event(event);
    }

    fn server_event(&self, outcome: Outcome, reason: String) -> audit::Event {
        let mut event = audit::Event::new(audit::Phase::Lifecycle, new_call_id());
        event.outcome = Some(outcome);
        event.reason = Some(reason);
        event
    }

    fn append_server_event(&self, event: audit::Event) {
        if let Err(e) = self.journal.append_unattached(event) {
            tracing::error!(error = %e, "audit record of the server's lifecycle not written");
        }
    }
}
