//! Running agent-browser: a batch in, a [`RawOutcome`] out.
//!
//! The runner gives a child its command only in exchange for an
//! [`audit::IntentSynced`] — proof, minted by the audit sink alone, that the
//! call's intent record is durable. The child may be spawned (or taken from
//! its session's standby) before that proof exists; it then waits on stdin,
//! having done nothing, until the proof arrives or it is killed.
//!
//! [`spawn`] builds every child, [`standby`] keeps one ready per session,
//! [`daemon`] checks and stops the daemons agent-browser leaves running,
//! [`cdp`] talks to Chromium's DevTools HTTP endpoint, [`capture`] bounds
//! what is read from a child's pipes.

mod capture;
pub(crate) mod cdp;
pub(crate) mod child_policy;
mod daemon;
mod homes;
pub(crate) use daemon::is_alive;
mod spawn;
mod standby;

use std::{collections::HashMap, path::PathBuf, sync::Arc, time::Duration};

use audit::IntentSynced;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::{
    daemons::{SocketDir, SocketIdentity},
    session_id::{DaemonName, SessionId},
};
use capture::{Captured, capture, join_capture};
pub(crate) use spawn::{Launch, SelfTest};
use standby::Standbys;

/// What the runner is built from (the operator's configuration, prepared).
#[derive(Debug)]
pub(crate) struct RunnerConfig {
    /// The native agent-browser binary, absolute.
    pub(crate) agent_browser: PathBuf,
    pub(crate) cdp_port: u16,
    /// The browser gate's port: agent-browser's only way to Chromium.
    pub(crate) gate_port: u16,
    /// HOME and cwd of agent-browser: a private directory.
    pub(crate) home_dir: PathBuf,
    /// `AGENT_BROWSER_SOCKET_DIR`: short, private (0700), opened before any
    /// child could replace it.
    pub(crate) socket_dir: SocketDir,
    /// `AGENT_BROWSER_CONFIG`: a wrapper-owned file holding `{}`, so neither
    /// `~/.agent-browser/config.json` nor `./agent-browser.json` is read.
    pub(crate) config_file: PathBuf,
    /// `AGENT_BROWSER_SCREENSHOT_DIR`.
    pub(crate) output_dir: PathBuf,
    /// `AGENT_BROWSER_IDLE_TIMEOUT_MS`: without it a CDP daemon never exits.
    pub(crate) idle_timeout_ms: u64,
    /// What every spawn is confined by (its report goes into audit records).
    pub(crate) confinement: Arc<hardening::Prepared>,
    /// The same policy, applied by each child to itself.
    pub(crate) trampoline: hardening::Trampoline,
    /// The uid each daemon (and every child of its session) runs as.
    pub(crate) identities: Arc<crate::daemons::Identities>,
}

/// Everything needed to run agent-browser; built once from [`RunnerConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Runner {
    agent_browser: PathBuf,
    cdp_port: u16,
    gate_port: u16,
    home_dir: PathBuf,
    socket_dir: SocketDir,
    config_file: PathBuf,
    output_dir: PathBuf,
    idle_timeout_ms: u64,
    confinement: Arc<hardening::Prepared>,
    trampoline: hardening::Trampoline,
    identities: Arc<crate::daemons::Identities>,
    /// The uids whose HOME under `home_dir` is made and theirs.
    homes_made: Arc<std::sync::Mutex<std::collections::HashSet<u32>>>,
    /// For Chromium's DevTools HTTP endpoint; only ever 127.0.0.1.
    http: reqwest::Client,
    /// Session sockets whose listening daemon was found confined, by the
    /// socket file's identity (see `Runner::evict_unconfined_daemon`).
    verified_sockets: Arc<std::sync::Mutex<HashMap<DaemonName, SocketIdentity>>>,
    /// Children spawned ahead of each session's next call.
    standbys: Arc<Standbys>,
    /// The daemon whose tab came forward last (see `Runner::forward_again`).
    in_front: Arc<std::sync::Mutex<Option<DaemonName>>>,
    /// The gate's part in a daemon's tabs (once the server is built; until
    /// then no tab is acted on).
    tabs: Arc<dyn crate::daemons::Tabs>,
    /// Daemons whose window names their session already.
    /// The id each daemon's window shows (a pooled daemon's says it waits).
    labelled: Arc<std::sync::Mutex<HashMap<DaemonName, String>>>,
}

/// How the child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Termination {
    Exited(i32),
    Signaled(i32),
    TimedOut,
    Cancelled,
    SpawnFailed(String),
    /// The release check held the batch back: the child never received it
    /// and was killed.
    Withheld(Withhold),
}

/// Why a release check held a child's batch back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Withhold {
    /// The call's audit intent could not be made durable.
    Audit(String),
    /// The navigation guard, looking before the command, found the page
    /// somewhere the policy refuses (`page`, `why`).
    Blocked { page: String, why: String },
    /// The navigation guard, looking before the command, could not read the
    /// page URL at all (`why`: what the reads returned).
    Unreadable { why: String },
    /// A check that needs the page (a secret's hosts) refused the command.
    Refused(crate::refusal::Refusal),
}

/// A release check that did not open: why, and the proof it had obtained
/// before it decided (so the call can still act for itself, e.g. reset a
/// page the guard refused).
#[derive(Debug)]
pub(crate) struct Withheld {
    pub(crate) why: Withhold,
    pub(crate) intent: Option<IntentSynced>,
}

/// What the child produced, before normalisation.
#[derive(Debug, Clone)]
pub(crate) struct RawOutcome {
    pub(crate) termination: Termination,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    /// Total bytes seen on each stream, including what was not kept.
    pub(crate) stdout_total: u64,
    pub(crate) stderr_total: u64,
    /// From the spawn (or the standby's take) to the end.
    pub(crate) elapsed: Duration,
    /// A command stopped early (timed out or cancelled) after the child had
    /// it: whether the page load it may have started was stopped too. `None`
    /// when there was nothing to stop.
    pub(crate) loading_stopped: Option<Result<(), cdp::TabActError>>,
}

/// A call's command, run: what the child produced, and the proof that let
/// it run (absent only when the check never passed for lack of one).
#[derive(Debug)]
pub(crate) struct Executed {
    pub(crate) raw: RawOutcome,
    pub(crate) intent: Option<IntentSynced>,
    /// Why the release check made the command wait, when something did
    /// (the call fills it in: a look at the page whose read did not answer).
    pub(crate) waited: Option<String>,
}

/// How long a command may take and what stops it early.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds<'a> {
    pub(crate) timeout: Duration,
    pub(crate) cancel: &'a CancellationToken,
}

impl Runner {
    /// # Errors
    /// The HTTP client for Chromium's DevTools cannot be built (no TLS is
    /// configured, so only a broken system would do it).
    pub(crate) fn new(config: RunnerConfig) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder().no_proxy().build()?;
        Ok(Self {
            agent_browser: config.agent_browser,
            cdp_port: config.cdp_port,
            gate_port: config.gate_port,
            home_dir: config.home_dir,
            socket_dir: config.socket_dir,
            config_file: config.config_file,
            output_dir: config.output_dir,
            idle_timeout_ms: config.idle_timeout_ms,
            confinement: config.confinement,
            trampoline: config.trampoline,
            identities: config.identities,
            homes_made: Arc::default(),
            http,
            verified_sockets: Arc::default(),
            in_front: Arc::default(),
            standbys: Arc::default(),
            tabs: Arc::new(crate::daemons::NoTabs),
            labelled: Arc::default(),
        })
    }

    /// The same runner, acting on a daemon's pinned tab only when `tabs`
    /// says it is the daemon's own.
    pub(crate) fn with_tabs(mut self, tabs: Arc<dyn crate::daemons::Tabs>) -> Self {
        self.tabs = tabs;
        self
    }

    /// Which uid each daemon runs as (the gate asks it who dialled).
    pub(crate) fn identities(&self) -> &Arc<crate::daemons::Identities> {
        &self.identities
    }

    pub(crate) fn agent_browser(&self) -> &std::path::Path {
        &self.agent_browser
    }

    /// The path every spawn execs as the trampoline.
    pub(crate) fn trampoline_exe(&self) -> &std::path::Path {
        self.trampoline.exe()
    }

    pub(crate) fn cdp_port(&self) -> u16 {
        self.cdp_port
    }

    pub(crate) fn gate_port(&self) -> u16 {
        self.gate_port
    }

    /// The daemons' socket dir (where their pin files are).
    pub(crate) fn socket_dir(&self) -> &SocketDir {
        &self.socket_dir
    }

    /// The confinement every child runs under.
    pub(crate) fn confinement(&self) -> &hardening::Prepared {
        &self.confinement
    }

    /// Is a standby child ready for this session's next call?
    pub(crate) fn has_standby(&self, session: &SessionId) -> bool {
        self.standbys.is_ready(session.daemon_name())
    }

    /// The session ended: its standby (if any) is killed, none is wanted.
    pub(crate) fn discard_standby(&self, daemon_name: &str) {
        self.standbys.discard(daemon_name);
    }

    /// At exit: no standby outlives the server.
    pub(crate) fn discard_all_standbys(&self) {
        self.standbys.clear();
    }

    /// Run a call's `batch` (one or more commands, the agent's last) in
    /// `session`, within `bounds`.
    ///
    /// The child is spawned at once, but receives the batch on stdin only
    /// once `release` yields the call's [`IntentSynced`]. agent-browser does
    /// nothing before it has read its whole batch, so the check's wait
    /// overlaps the child's start-up instead of preceding it. Should the check
    /// not open, the child is killed without ever having a command
    /// ([`Termination::Withheld`]).
    ///
    /// With `front`, the session's tab is brought to the front once the check
    /// opened, while the batch is delivered, so no command works on a
    /// background tab.
    pub(crate) async fn run(
        &self,
        session: &SessionId,
        batch: &[Vec<String>],
        bounds: Bounds<'_>,
        front: bool,
        release: impl Future<Output = Result<IntentSynced, Withheld>>,
    ) -> Executed {
        let mut proof = None;
        let release = async {
            match release.await {
                Ok(intent) => {
                    proof = Some(intent);
                    Ok(())
                }
                Err(withheld) => {
                    proof = withheld.intent;
                    Err(withheld.why)
                }
            }
        };
        let raw = self
            .run_released(session, batch, bounds, front, release)
            .await;
        Executed {
            raw,
            intent: proof,
            waited: None,
        }
    }

    /// Run one more batch for a call that already holds its proof (the
    /// navigation guard's own reads, its reset of a refused page).
    pub(crate) async fn run_more(
        &self,
        _intent: &IntentSynced,
        session: &SessionId,
        batch: &[Vec<String>],
        bounds: Bounds<'_>,
    ) -> RawOutcome {
        self.run_released(session, batch, bounds, false, std::future::ready(Ok(())))
            .await
    }

    /// The child's whole life: spawn (or take the standby), wait for the
    /// release check, deliver the batch, wait for the end within `bounds`, clean up.
    async fn run_released(
        &self,
        session: &SessionId,
        batch: &[Vec<String>],
        bounds: Bounds<'_>,
        front: bool,
        release: impl Future<Output = Result<(), Withhold>>,
    ) -> RawOutcome {
        let started = tokio::time::Instant::now();
        let finish = |termination, out: Captured, err: Captured, loading_stopped| RawOutcome {
            termination,
            stdout: out.kept,
            stderr: err.kept,
            stdout_total: out.total,
            stderr_total: err.total,
            elapsed: started.elapsed(),
            loading_stopped,
        };
        let failed = |why: String| {
            finish(
                Termination::SpawnFailed(why),
                Captured::default(),
                Captured::default(),
                None,
            )
        };
        let batch = match serde_json::to_vec(batch) {
            Ok(b) => b,
            Err(e) => return failed(format!("cannot encode the batch: {e}")),
        };
        let mut child = match self.child_for(session).await {
            Ok(child) => child,
            Err(e) => return failed(self.spawn_error(&e)),
        };
        let pid = child.id();
        let stdin = child.stdin.take();
        let out_task = tokio::spawn(capture(child.stdout.take()));
        let err_task = tokio::spawn(capture(child.stderr.take()));
        // Whether the child got its batch: if not, a timeout or cancellation
        // has no daemon command to stop.
        let fed = std::sync::atomic::AtomicBool::new(false);
        let feed = self.feed(session, release, (stdin, &batch), front, &fed);
        let termination = tokio::select! {
            status = async { feed.await?; Ok::<_, Withhold>(child.wait().await) } => match status {
                Err(why) => Termination::Withheld(why),
                Ok(status) => termination_of(status),
            },
            () = tokio::time::sleep(bounds.timeout) => Termination::TimedOut,
            () = bounds.cancel.cancelled() => Termination::Cancelled,
        };
        let loading_stopped = self
            .stop_leftovers(session, &termination, pid, &mut child, fed.into_inner())
            .await;
        let out = join_capture(out_task).await;
        let err = join_capture(err_task).await;
        // The trampoline refused: agent-browser never started.
        let termination = match termination {
            Termination::Exited(code) => hardening::trampoline::failure(Some(code), &err.kept)
                .map_or(Termination::Exited(code), Termination::SpawnFailed),
            other => other,
        };
        finish(termination, out, err, loading_stopped)
    }

    /// The session's child: its standby when one is ready (or about to be),
    /// else one spawned now. A daemon started unconfined is evicted first.
    async fn child_for(&self, session: &SessionId) -> std::io::Result<tokio::process::Child> {
        self.evict_unconfined_daemon(session).await;
        match self.standbys.take_or_await(session.daemon_name()).await {
            Some(standby) => Ok(standby),
            None => self.spawn(session),
        }
    }

    /// Once `release` allows it, the batch goes to the child's stdin (and
    /// `fed` says so) while the session's tab comes forward if `front`.
    async fn feed(
        &self,
        session: &SessionId,
        release: impl Future<Output = Result<(), Withhold>>,
        (stdin, batch): (Option<tokio::process::ChildStdin>, &[u8]),
        front: bool,
        fed: &std::sync::atomic::AtomicBool,
    ) -> Result<(), Withhold> {
        release.await?;
        fed.store(true, std::sync::atomic::Ordering::SeqCst);
        // After the check (bringing a tab forward is visible to the page),
        // and beside the delivery: the CLI talks to its daemon for a
        // millisecond or more before the command reaches the tab.
        let to_front = async {
            if front {
                self.foreground(session).await;
            }
        };
        let deliver = async {
            if let Some(mut stdin) = stdin {
                // A child that exits early closes its stdin; that is its
                // answer, not an error of ours.
                let _ = stdin.write_all(batch).await;
                let _ = stdin.shutdown().await;
            }
        };
        tokio::join!(to_front, deliver);
        Ok(())
    }

    /// A child stopped before its end is killed with its process group; a
    /// command it had already handed to the session's daemon is stopped there
    /// too, or the daemon would hold the session for the rest of it (the next
    /// call respawns it, on the same pinned tab); and so is the page load
    /// that command may have started, or the next daemon would wait for it
    /// (see [`Runner::stop_loading`]). Returns whether that load was stopped.
    async fn stop_leftovers(
        &self,
        session: &SessionId,
        termination: &Termination,
        pid: Option<u32>,
        child: &mut tokio::process::Child,
        fed: bool,
    ) -> Option<Result<(), cdp::TabActError>> {
        let stopped_early = matches!(
            termination,
            Termination::TimedOut | Termination::Cancelled | Termination::Withheld(_)
        );
        if stopped_early {
            if let Some(pid) = pid {
                hardening::kill_process_group(pid);
            }
            let _ = child.kill().await;
        }
        if !(matches!(termination, Termination::TimedOut | Termination::Cancelled) && fed) {
            return None;
        }
        self.stop_daemon(session).await;
        // After the daemon is gone, so nothing starts the load again.
        let stopped = self.stop_loading(session.daemon_name()).await;
        if let Err(e) = &stopped {
            tracing::warn!(
                error = %e,
                session = session.as_str(),
                "could not stop the session's tab loading after timeout/cancel"
            );
        }
        Some(stopped)
    }

    /// The state dir (parent of HOME and the socket dir).
    pub(crate) fn state_dir(&self) -> PathBuf {
        self.home_dir
            .parent()
            .map_or_else(|| self.home_dir.clone(), PathBuf::from)
    }
}

/// How a child that ran to its end ended, as the reply tells it.
fn termination_of(status: std::io::Result<std::process::ExitStatus>) -> Termination {
    match status {
        Ok(status) => match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(code), _) => Termination::Exited(code),
            (None, Some(sig)) => Termination::Signaled(sig),
            (None, None) => Termination::Exited(1),
        },
        Err(e) => Termination::SpawnFailed(format!("lost the child: {e}")),
    }
}

#[cfg(test)]
mod tests;
