//! Spawning agent-browser: the only place that builds a `Command`.
//!
//! The argv is constant — `<bin> --cdp <port> --json --session <name>
//! --pin-tab batch --bail` — and the agent's tokens travel as JSON on stdin,
//! where agent-browser never reads them as global flags. `--pin-tab` gives
//! every session its own tab: without it, all sessions attached over CDP
//! drive whichever tab is active, i.e. each other's pages. The environment is cleared
//! and rebuilt from a short allow-list, stdin/stdout/stderr are pipes (the
//! server's own stdio, which carries JSON-RPC, is never inherited), and the
//! child leads its own process group so a timeout or a cancellation can kill
//! everything it started in that group. A session's next child may be
//! spawned ahead of its call, as its standby ([`crate::standby`]); it is
//! built here too, the same way.

use std::{collections::HashMap, path::PathBuf, process::Stdio, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWriteExt},
    process::Command,
};
use tokio_util::sync::CancellationToken;

use crate::{session::SessionId, standby::Standbys};

/// Bytes of each stream kept for normalisation; the rest is counted only.
pub const CAPTURE_LIMIT: usize = 8 * 1024 * 1024;

/// A standby is spawned this long after the call that wants it ended, so
/// that call's reply is out first. (It was chosen while a spawn was a fork
/// of the server, whose copy-on-write faults cost the reply path ≈ 0.4 ms.
/// With the trampoline there is no fork; 0 and 1 ms measured alike since:
/// back-to-back `get url` 6.83 / 6.81 ms p50, smoke flow 362.1 / 362.3 ms.)
const STANDBY_AFTER: Duration = Duration::from_millis(1);

/// How long to wait for pipes to close after the child was killed.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Everything needed to run agent-browser; built once from the operator config.
#[derive(Debug, Clone)]
pub struct Runner {
    pub agent_browser: PathBuf,
    pub cdp_port: u16,
    /// HOME and cwd of agent-browser: a private directory.
    pub home_dir: PathBuf,
    /// `AGENT_BROWSER_SOCKET_DIR`: short, private (0700).
    pub socket_dir: PathBuf,
    /// `AGENT_BROWSER_CONFIG`: a wrapper-owned file holding `{}`, so neither
    /// `~/.agent-browser/config.json` nor `./agent-browser.json` is read.
    pub config_file: PathBuf,
    /// `AGENT_BROWSER_SCREENSHOT_DIR`.
    pub output_dir: PathBuf,
    /// `AGENT_BROWSER_IDLE_TIMEOUT_MS`: without it a CDP daemon never exits.
    pub idle_timeout_ms: u64,
    /// What every spawn is confined by (its report goes into the audit
    /// records), and so the daemon it forks too.
    pub confinement: Arc<hardening::Prepared>,
    /// The same policy, applied by the child to itself: every child starts
    /// as a trampoline, so the server never forks (see
    /// [`Runner::confined_command`]).
    pub trampoline: hardening::Trampoline,
    /// For Chromium's DevTools HTTP endpoint (bringing a tab to the front).
    pub http: reqwest::Client,
    /// Session sockets whose listening daemon was found confined, by the
    /// socket file's identity (see `Runner::evict_unconfined_daemon`).
    pub verified_sockets: Arc<std::sync::Mutex<HashMap<String, SocketIdentity>>>,
    /// Children spawned ahead of each session's next call.
    pub standbys: Arc<Standbys>,
}

/// A socket file's (device, inode, ctime): a daemon that binds the path
/// anew creates a new file, so the identity changes.
pub type SocketIdentity = (u64, u64, i64, i64);

/// How the child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Termination {
    Exited(i32),
    Signaled(i32),
    TimedOut,
    Cancelled,
    SpawnFailed(String),
    /// The release gate held the batch back: the child never received it
    /// and was killed.
    Withheld(Withhold),
}

/// Why a release gate held a child's batch back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withhold {
    /// The call's audit intent could not be made durable.
    Audit(String),
    /// The navigation guard, looking before the command, found the page
    /// somewhere the policy refuses (`page`, `why`).
    Blocked { page: String, why: String },
}

/// What the child produced, before normalisation.
#[derive(Debug, Clone)]
pub struct RawOutcome {
    pub termination: Termination,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Total bytes seen on each stream, including what was not kept.
    pub stdout_total: u64,
    pub stderr_total: u64,
    pub elapsed: Duration,
}

impl Runner {
    /// The fixed argv after the binary; no agent token is ever part of it.
    pub fn fixed_args(&self, session: &SessionId) -> Vec<String> {
        vec![
            "--cdp".into(),
            self.cdp_port.to_string(),
            "--json".into(),
            "--session".into(),
            session.daemon_name().into(),
            "--pin-tab".into(),
            "batch".into(),
            "--bail".into(),
        ]
    }

    /// The complete child environment (after `env_clear`).
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HOME", self.home_dir.display().to_string()),
            ("PATH", "/usr/bin:/bin".into()),
            (
                "AGENT_BROWSER_CONFIG",
                self.config_file.display().to_string(),
            ),
            (
                "AGENT_BROWSER_SOCKET_DIR",
                self.socket_dir.display().to_string(),
            ),
            ("AGENT_BROWSER_NO_VERSION_CHECK", "1".into()),
            (
                "AGENT_BROWSER_IDLE_TIMEOUT_MS",
                self.idle_timeout_ms.to_string(),
            ),
            (
                "AGENT_BROWSER_SCREENSHOT_DIR",
                self.output_dir.display().to_string(),
            ),
        ]
    }

    /// Run `batch` (one or more commands, the agent's last) in `session`,
    /// bounded by `timeout` and `cancel`.
    ///
    /// The child is spawned at once, but receives the batch on stdin only
    /// once `release` resolves `Ok` — the caller's audit intent is then
    /// durable. agent-browser does nothing before it has read its whole
    /// batch (it loads its config, then reads stdin to EOF, and only then
    /// connects to its daemon), so the gate's wait overlaps the child's
    /// start-up instead of preceding it. Should `release` fail (the intent
    /// is not durable, or the guard looked first and refused the page), the
    /// child is killed without ever having a command
    /// ([`Termination::Withheld`]).
    ///
    /// With `front`, the session's tab is brought to the front once the gate
    /// opened, while the batch is delivered (see [`Runner::foreground`]), so
    /// no command works on a background tab.
    pub async fn run(
        &self,
        session: &SessionId,
        batch: &[Vec<String>],
        timeout: Duration,
        cancel: &CancellationToken,
        front: bool,
        release: impl Future<Output = Result<(), Withhold>>,
    ) -> RawOutcome {
        let started = tokio::time::Instant::now();
        let finish = |termination, out: Captured, err: Captured| RawOutcome {
            termination,
            stdout: out.kept,
            stderr: err.kept,
            stdout_total: out.total,
            stderr_total: err.total,
            elapsed: started.elapsed(),
        };
        let batch = match serde_json::to_vec(batch) {
            Ok(b) => b,
            Err(e) => {
                return finish(
                    Termination::SpawnFailed(format!("cannot encode the batch: {e}")),
                    Captured::default(),
                    Captured::default(),
                );
            }
        };
        let checked = tokio::time::Instant::now();
        self.evict_unconfined_daemon(session).await;
        let daemon_check = checked.elapsed();
        let spawned = match self.standbys.take_or_await(session.daemon_name()).await {
            Some(standby) => Ok(standby),
            None => self.spawn(session),
        };
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                return finish(
                    Termination::SpawnFailed(self.spawn_error(&e)),
                    Captured::default(),
                    Captured::default(),
                );
            }
        };
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        // Whether the child got its batch: if not, a timeout or cancellation
        // has no daemon command to stop.
        let fed = std::sync::atomic::AtomicBool::new(false);
        let feed = async {
            release.await?;
            fed.store(true, std::sync::atomic::Ordering::SeqCst);
            // After the gate, not before it: bringing the tab to the front is
            // visible to the page, so it waits for the durable intent too. It
            // runs beside the batch's delivery, not before it: the CLI reads
            // its config and talks to its daemon for a millisecond or more
            // before the first command reaches the tab, while Chromium
            // switches tabs in a fraction of that.
            let to_front = async {
                if front {
                    self.foreground(session).await;
                }
            };
            let deliver = async {
                if let Some(mut stdin) = stdin {
                    // A child that exits early closes its stdin; that is its
                    // answer, not an error of ours.
                    let _ = stdin.write_all(&batch).await;
                    let _ = stdin.shutdown().await;
                }
            };
            tokio::join!(to_front, deliver);
            Ok::<(), Withhold>(())
        };
        let out_task = tokio::spawn(capture(stdout));
        let err_task = tokio::spawn(capture(stderr));

        let termination = tokio::select! {
            status = async { feed.await?; Ok::<_, Withhold>(child.wait().await) } => match status {
                Err(why) => Termination::Withheld(why),
                Ok(Ok(status)) => match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                    (Some(code), _) => Termination::Exited(code),
                    (None, Some(sig)) => Termination::Signaled(sig),
                    (None, None) => Termination::Exited(1),
                },
                Ok(Err(e)) => Termination::SpawnFailed(format!("lost the child: {e}")),
            },
            () = tokio::time::sleep(timeout) => Termination::TimedOut,
            () = cancel.cancelled() => Termination::Cancelled,
        };
        if matches!(
            termination,
            Termination::TimedOut | Termination::Cancelled | Termination::Withheld(_)
        ) {
            if let Some(pid) = pid {
                hardening::kill_process_group(pid);
            }
            let _ = child.kill().await;
        }
        if matches!(termination, Termination::TimedOut | Termination::Cancelled)
            && fed.load(std::sync::atomic::Ordering::SeqCst)
        {
            // The daemon keeps running the command the CLI sent it and would
            // hold the session for the rest of it; stop it too. The next call
            // respawns it, and the session keeps its pinned tab.
            self.stop_daemon(session).await;
        }
        let out = join_capture(out_task).await;
        let err = join_capture(err_task).await;
        // The trampoline refused: agent-browser never started.
        let termination = match termination {
            Termination::Exited(code) => hardening::trampoline::failure(Some(code), &err.kept)
                .map_or(Termination::Exited(code), Termination::SpawnFailed),
            other => other,
        };
        tracing::debug!(
            daemon_check_us = daemon_check.as_micros(),
            total_us = started.elapsed().as_micros(),
            "agent-browser call timings"
        );
        finish(termination, out, err)
    }
}

impl Runner {
    /// agent-browser, confined, in its clean environment and private
    /// directory: how every agent-browser process is started.
    ///
    /// Through [`hardening::Trampoline`], not a `pre_exec` hook: std spawns
    /// a command without one with `posix_spawn`, which shares the server's
    /// memory until the exec instead of forking it. A fork would
    /// write-protect every page of the server, and its next call would take
    /// a page fault on each page it touches (≈ 90 faults, 0.15–0.3 ms of a
    /// warm call on a 2-vCPU VM). The trampoline applies the policy to
    /// itself and execs agent-browser; if it cannot, agent-browser never
    /// runs and [`hardening::trampoline::failure`] says why.
    pub fn confined_command(&self) -> std::process::Command {
        let mut command = self.trampoline.command(&self.agent_browser);
        command
            .env_clear()
            .envs(self.environment())
            .current_dir(&self.home_dir);
        command
    }

    /// Spawn agent-browser, confined, for `session`: the one place a child
    /// is made (a call's, or a standby).
    fn spawn(&self, session: &SessionId) -> std::io::Result<tokio::process::Child> {
        let mut command = Command::from(self.confined_command());
        command
            .args(self.fixed_args(session))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        command.spawn()
    }

    /// Spawn the session's standby for its next call, in the background
    /// and [`STANDBY_AFTER`] from now (see [`crate::standby`]). A failure
    /// only means the next call spawns its own child.
    pub fn prepare_standby(&self, session: &SessionId) {
        let ticket = self.standbys.want(session.daemon_name());
        let (runner, session) = (self.clone(), session.clone());
        tokio::spawn(async move {
            tokio::time::sleep(STANDBY_AFTER).await;
            if !runner
                .standbys
                .start_spawning(session.daemon_name(), ticket)
            {
                return; // the next call came first and spawned its own
            }
            let standbys = Arc::clone(&runner.standbys);
            let name = session.daemon_name().to_owned();
            let spawned = tokio::task::spawn_blocking(move || match runner.spawn(&session) {
                Ok(child) => runner.standbys.put(session.daemon_name(), ticket, child),
                Err(e) => {
                    runner.standbys.spawn_failed(session.daemon_name());
                    tracing::debug!(error = %e, "no standby for the session's next call");
                }
            });
            if spawned.await.is_err() {
                // It panicked: no call may keep waiting for it.
                standbys.spawn_failed(&name);
            }
        });
    }

    /// The state dir (parent of HOME and the socket dir).
    pub fn home_dir_parent(&self) -> PathBuf {
        self.home_dir
            .parent()
            .map_or_else(|| self.home_dir.clone(), PathBuf::from)
    }

    /// Explain a failed spawn: the trampoline itself did not start. (A
    /// confinement step that fails is the trampoline's refusal, read from
    /// its exit with `hardening::trampoline::failure`.)
    fn spawn_error(&self, err: &std::io::Error) -> String {
        format!(
            "cannot start the confinement trampoline for {}: {err}",
            self.agent_browser.display()
        )
    }

    /// Run `agent-browser --version` exactly as calls will run it (same
    /// environment, same confinement), so a machine that cannot confine it,
    /// or a binary that cannot run confined, fails at start rather than at
    /// the first call.
    pub fn self_test(&self) -> Result<String, String> {
        let mut command = self.confined_command();
        command
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let output = command.output().map_err(|e| self.spawn_error(&e))?;
        if let Some(why) = hardening::trampoline::failure(output.status.code(), &output.stderr) {
            return Err(why);
        }
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{} --version failed under confinement ({}): {}",
                self.agent_browser.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    fn session_file(&self, daemon_name: &str, suffix: &str) -> PathBuf {
        self.socket_dir.join(format!("{daemon_name}.{suffix}"))
    }

    /// Bring the session's pinned tab to the front of its window, through
    /// Chromium's DevTools HTTP endpoint on 127.0.0.1. Best effort: a failure
    /// only costs the next command time, so it is logged, not returned.
    pub async fn foreground(&self, session: &SessionId) {
        let Some(target) = self.session_target(session) else {
            return;
        };
        let url = format!("http://127.0.0.1:{}/json/activate/{target}", self.cdp_port);
        let request = self.http.get(&url).timeout(Duration::from_secs(2)).send();
        match request.await {
            Ok(response) if response.status().is_success() => {}
            Ok(response) => {
                tracing::warn!(status = %response.status(), "could not bring the session's tab to the front")
            }
            Err(e) => tracing::warn!(error = %e, "could not bring the session's tab to the front"),
        }
    }

    /// The CDP target id of the session's pinned tab, once it has one.
    ///
    /// The daemon writes `<name>.target`; its content is not trusted beyond
    /// being a hex target id, only ever used to address that tab through
    /// Chromium's DevTools HTTP endpoint.
    pub fn session_target(&self, session: &SessionId) -> Option<String> {
        self.target_of(session.daemon_name())
    }

    /// The pid of the process listening on the session's socket — the daemon
    /// the next CLI will talk to — as the kernel reports it (`SO_PEERCRED`),
    /// and only if it runs our agent-browser binary. Files the daemon writes
    /// (`<name>.pid`) are never trusted for this.
    async fn daemon_pid(&self, daemon_name: &str) -> Option<u32> {
        match self.listener(daemon_name).await {
            Listener::Daemon(pid) => Some(pid),
            Listener::Nobody | Listener::Foreign => None,
        }
    }

    /// Who answers on the session's socket.
    async fn listener(&self, daemon_name: &str) -> Listener {
        let socket = self.session_file(daemon_name, "sock");
        let connect = tokio::net::UnixStream::connect(&socket);
        let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(1), connect).await else {
            return Listener::Nobody;
        };
        let pid = stream
            .peer_cred()
            .ok()
            .and_then(|c| c.pid())
            .and_then(|p| u32::try_from(p).ok());
        let ours = |pid: u32| {
            pid > 1
                && pid != std::process::id()
                && std::fs::read_link(format!("/proc/{pid}/exe"))
                    .is_ok_and(|exe| exe == self.agent_browser)
        };
        match pid {
            Some(pid) if ours(pid) => Listener::Daemon(pid),
            _ => Listener::Foreign,
        }
    }

    /// Before a call: if the session's daemon is not confined (started by
    /// anything but a confined spawn, e.g. an operator running agent-browser
    /// by hand with our socket dir), kill it so the CLI starts a confined one.
    ///
    /// A daemon found confined stays trusted while its socket file is the
    /// same file: any other daemon would have to bind the path anew (a new
    /// inode and ctime), so one `stat` replaces the connect and /proc reads
    /// on the calls after the first.
    async fn evict_unconfined_daemon(&self, session: &SessionId) {
        let name = session.daemon_name();
        let identity = socket_identity(&self.session_file(name, "sock"));
        if let (Some(identity), Ok(verified)) = (identity, self.verified_sockets.lock())
            && verified.get(name) == Some(&identity)
        {
            return;
        }
        let pid = match self.listener(name).await {
            Listener::Nobody => return,
            Listener::Foreign => {
                // Not our agent-browser (or its pid cannot be told): the CLI
                // must not hand it the batch. Without the socket file the CLI
                // starts a daemon of its own, confined.
                tracing::warn!(
                    session = session.as_str(),
                    "something other than our agent-browser listens on the session's socket; removing the socket"
                );
                let _ = std::fs::remove_file(self.session_file(name, "sock"));
                return;
            }
            Listener::Daemon(pid) => pid,
        };
        match self.is_confined(pid) {
            Some(true) => {
                if let (Some(identity), Ok(mut verified)) = (identity, self.verified_sockets.lock())
                {
                    verified.insert(name.to_owned(), identity);
                }
            }
            Some(false) => {
                tracing::warn!(
                    pid,
                    session = session.as_str(),
                    "the session's daemon is not confined; killing it so a confined one replaces it"
                );
                kill_and_reap_wait(pid).await;
            }
            // Gone since the connect: nothing to evict, nothing verified.
            None => {}
        }
    }

    /// Does `/proc/<pid>/status` show the confinement every spawn of this
    /// server applies: no capabilities, no_new_privs, and a seccomp filter
    /// when this kernel enforces one? `None` when the process is gone.
    fn is_confined(&self, pid: u32) -> Option<bool> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| status_field(&status, name);
        let seccomp_expected =
            !matches!(self.confinement.report().seccomp, hardening::Layer::Off(_));
        Some(
            field("CapEff") == Some("0000000000000000")
                && field("CapPrm") == Some("0000000000000000")
                && field("NoNewPrivs") == Some("1")
                && (!seccomp_expected || field("Seccomp") == Some("2")),
        )
    }

    /// SIGKILL the session's daemon (after a timeout or cancellation).
    async fn stop_daemon(&self, session: &SessionId) {
        if let Some(pid) = self.daemon_pid(session.daemon_name()).await {
            tracing::info!(
                pid,
                session = session.as_str(),
                "stopping the session's daemon after timeout/cancel"
            );
            kill_and_reap_wait(pid).await;
        }
    }
}

impl Runner {
    /// End a session for good (idle reaper, eviction): kill its daemon,
    /// close its tab in Chromium, remove its socket-dir files and its output
    /// directory. Best effort; what could not be done is returned.
    pub async fn retire(&self, daemon_name: &str, output_dir: &std::path::Path) -> Vec<String> {
        self.standbys.discard(daemon_name);
        let mut problems = Vec::new();
        if !crate::session::is_daemon_name(daemon_name) {
            problems.push(format!("not a session name: {daemon_name:?}"));
            return problems;
        }
        self.kill_daemon(daemon_name).await;
        if let Some(target) = self.target_of(daemon_name) {
            let url = format!("http://127.0.0.1:{}/json/close/{target}", self.cdp_port);
            if let Err(e) = self
                .http
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await
            {
                problems.push(format!("tab not closed: {e}"));
            }
        }
        for suffix in ["sock", "pid", "version", "config", "stream", "target"] {
            let _ = std::fs::remove_file(self.session_file(daemon_name, suffix));
        }
        let dir = output_dir.join(daemon_name);
        if dir.starts_with(output_dir) && dir != output_dir {
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    problems.push(format!("output not removed: {e}"));
                }
                _ => {}
            }
        }
        problems
    }

    /// Daemons listening in our socket dir when the server starts (left by a
    /// previous server, or a sibling one): each with its name and whether it
    /// is confined.
    pub async fn running_daemons(&self) -> Vec<(String, bool)> {
        let Ok(entries) = std::fs::read_dir(&self.socket_dir) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(daemon_name) = name
                .strip_suffix(".sock")
                .filter(|n| crate::session::is_daemon_name(n))
            else {
                continue;
            };
            if let Some(pid) = self.daemon_pid(daemon_name).await {
                // A daemon gone since the connect needs no decision.
                if let Some(confined) = self.is_confined(pid) {
                    found.push((daemon_name.to_owned(), confined));
                }
            }
        }
        found
    }

    /// Kill the daemon serving `daemon_name` and wait until it is gone.
    pub async fn kill_daemon(&self, daemon_name: &str) {
        if let Some(pid) = self.daemon_pid(daemon_name).await {
            kill_and_reap_wait(pid).await;
        }
    }

    fn target_of(&self, daemon_name: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.session_file(daemon_name, "target")).ok()?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        let id = value.get("targetId")?.as_str()?;
        let well_formed = (8..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit());
        well_formed.then(|| id.to_owned())
    }
}

fn socket_identity(path: &std::path::Path) -> Option<SocketIdentity> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()))
}

/// SIGKILL `pid` and wait (bounded) until it is dead. SIGKILL is delivered
/// asynchronously: until the process is gone its socket still accepts, and
/// the next CLI would hand its command to a dying daemon ("connection reset
/// by peer") instead of starting a fresh one.
async fn kill_and_reap_wait(pid: u32) {
    hardening::kill_process(pid);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while is_alive(pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Still running, sockets and all. Not when gone from /proc, nor a zombie
/// whose threads have all exited. A multi-threaded process (the daemon) can
/// show its main thread as a zombie while its other threads still run and
/// still hold its sockets open, so `Threads:` must be down to that one.
fn is_alive(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| status_field(&status, name);
    let exited = field("State").is_some_and(|s| s.starts_with('Z') || s.starts_with('X'));
    let threads = field("Threads").and_then(|n| n.parse::<u32>().ok());
    !(exited && threads.is_none_or(|n| n <= 1))
}

/// The value of one `Name:` line of a `/proc/<pid>/status` text.
fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Who answers on a session's socket.
enum Listener {
    /// Nothing (no file, or nobody listening).
    Nobody,
    /// Our agent-browser binary, with this pid.
    Daemon(u32),
    /// Another program, or a pid that cannot be told.
    Foreign,
}

#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
}

async fn capture<R: AsyncRead + Unpin>(stream: Option<R>) -> Captured {
    let mut captured = Captured::default();
    let Some(mut stream) = stream else {
        return captured;
    };
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                captured.total += n as u64;
                let room = CAPTURE_LIMIT.saturating_sub(captured.kept.len());
                captured.kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    captured
}

async fn join_capture(task: tokio::task::JoinHandle<Captured>) -> Captured {
    match tokio::time::timeout(DRAIN_GRACE, task).await {
        Ok(Ok(captured)) => captured,
        // A pipe still held open by a straggler, or a panicked reader: report
        // what we have rather than hang the call.
        _ => Captured::default(),
    }
}

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;
