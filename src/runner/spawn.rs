//! The one place a `Command` for agent-browser is built.
//!
//! The argv is constant — `<bin> --cdp <the gate's URL for the session>
//! --json --session <name> --pin-tab batch --bail` — and the agent's tokens travel as JSON on stdin,
//! where agent-browser never reads them as global flags. The environment is
//! cleared and rebuilt from a short allow-list, stdin/stdout/stderr are pipes
//! (the server's own stdio, which carries JSON-RPC, is never inherited), and
//! the child leads its own process group so a timeout can kill everything
//! it started. Every child starts as the trampoline, which confines itself
//! and execs agent-browser (see docs/design.md, "The trampoline").

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use tokio::process::Command;

use super::Runner;
use crate::{daemons::ChildUid, session_id::SessionId};

/// A standby is spawned this long after the call that wants it ended, so
/// that call's reply is out first.
const STANDBY_AFTER: Duration = Duration::from_millis(1);

impl Runner {
    /// The fixed argv after the binary; no agent token is ever part of it.
    /// `--pin-tab` gives every session its own tab: without it, all sessions
    /// attached over CDP drive whichever tab is active.
    pub(crate) fn fixed_args(&self, session: &SessionId) -> Vec<String> {
        vec![
            "--cdp".into(),
            crate::daemons::gate_endpoint(self.gate_port, session.daemon_name()),
            "--json".into(),
            "--session".into(),
            session.daemon_name().to_string(),
            "--pin-tab".into(),
            "batch".into(),
            "--bail".into(),
        ]
    }

    /// How this runner starts agent-browser.
    fn launch(&self) -> Launch<'_> {
        Launch {
            trampoline: &self.trampoline,
            agent_browser: &self.agent_browser,
            home_dir: &self.home_dir,
            socket_dir: self.socket_dir.path(),
            config_file: &self.config_file,
            output_dir: &self.output_dir,
            idle_timeout_ms: self.idle_timeout_ms,
        }
    }

    /// agent-browser, confined, in its clean environment and private
    /// directory, as `daemon`'s uid: how every agent-browser process is
    /// started. If the trampoline cannot confine itself, agent-browser never
    /// runs and [`hardening::trampoline::failure`] says why.
    pub(crate) fn confined_command(&self, daemon: &str) -> std::io::Result<std::process::Command> {
        let (uid, home) = self.child_home(daemon)?;
        self.launch().confined_command(uid, &home)
    }

    /// The uid `daemon`'s children run as (given now if it has none) and
    /// their HOME.
    pub(crate) fn child_home(&self, daemon: &str) -> std::io::Result<(Option<ChildUid>, PathBuf)> {
        let uid = self
            .identities
            .for_daemon(daemon)
            .map_err(std::io::Error::other)?;
        Ok((uid, self.home_of(uid)?))
    }

    /// The HOME (and cwd) of the children that run as `uid`: its own dir
    /// under the HOME root, made and handed to it at its first spawn. With
    /// no uid of their own, children share the root.
    fn home_of(&self, uid: Option<ChildUid>) -> std::io::Result<PathBuf> {
        let Some(uid) = uid else {
            return Ok(self.home_dir.clone());
        };
        let home = self.home_dir.join(uid.to_string());
        let mut made = crate::sync::lock(&self.homes_made);
        if !made.contains(&uid.get()) {
            super::homes::make(&self.home_dir, uid)?;
            made.insert(uid.get());
        }
        Ok(home)
    }

    /// Forget `daemon`'s uid and remove its HOME: whatever its session left
    /// there must not reach the next daemon given that uid.
    pub(crate) fn release_identity(&self, daemon: &str) {
        let Some(uid) = self.identities.known(daemon) else {
            return;
        };
        crate::sync::lock(&self.homes_made).remove(&uid.get());
        super::homes::remove(&self.home_dir, uid);
        self.identities.release(daemon);
    }

    /// Spawn agent-browser, confined, for `session`: the one place a child
    /// is made (a call's, or a standby).
    pub(super) fn spawn(&self, session: &SessionId) -> std::io::Result<tokio::process::Child> {
        let mut command = Command::from(self.confined_command(session.daemon_name())?);
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
    /// and [`STANDBY_AFTER`] from now (see [`super::standby`]). A failure
    /// only means the next call spawns its own child.
    pub(crate) fn prepare_standby(&self, session: &SessionId) {
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

    /// Explain a failed spawn: the trampoline itself did not start. (A
    /// confinement step that fails is the trampoline's refusal, read from
    /// its exit with `hardening::trampoline::failure`.)
    pub(super) fn spawn_error(&self, err: &std::io::Error) -> String {
        self.launch().spawn_error(err)
    }
}

/// What every agent-browser child is started from: a [`Runner`]'s, or the
/// start's before the runner exists (see [`Launch::start_self_test`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launch<'a> {
    pub(crate) trampoline: &'a hardening::Trampoline,
    /// Absolute: the child's cwd is its private HOME.
    pub(crate) agent_browser: &'a Path,
    pub(crate) home_dir: &'a Path,
    pub(crate) socket_dir: &'a Path,
    pub(crate) config_file: &'a Path,
    pub(crate) output_dir: &'a Path,
    pub(crate) idle_timeout_ms: u64,
}

impl Launch<'_> {
    /// The complete child environment (after `env_clear`).
    fn environment(&self, home: &Path) -> Vec<(&'static str, String)> {
        let path = |p: &Path| p.display().to_string();
        vec![
            ("HOME", path(home)),
            ("PATH", "/usr/bin:/bin".into()),
            ("AGENT_BROWSER_CONFIG", path(self.config_file)),
            ("AGENT_BROWSER_SOCKET_DIR", path(self.socket_dir)),
            ("AGENT_BROWSER_NO_VERSION_CHECK", "1".into()),
            (
                "AGENT_BROWSER_IDLE_TIMEOUT_MS",
                self.idle_timeout_ms.to_string(),
            ),
            ("AGENT_BROWSER_SCREENSHOT_DIR", path(self.output_dir)),
        ]
    }

    fn spawn_error(&self, err: &std::io::Error) -> String {
        format!(
            "cannot start the confinement trampoline for {}: {err}",
            self.agent_browser.display()
        )
    }

    fn confined_command(
        &self,
        uid: Option<ChildUid>,
        home: &Path,
    ) -> std::io::Result<std::process::Command> {
        let mut command = self
            .trampoline
            .command_as(self.agent_browser, uid.map(ChildUid::identity))
            .map_err(std::io::Error::other)?;
        command
            .env_clear()
            .envs(self.environment(home))
            .current_dir(home);
        Ok(command)
    }

    /// Start `agent-browser --version` exactly as calls will run it (same
    /// environment, same confinement), so a machine that cannot confine it,
    /// or a binary that cannot run confined, fails at start rather than at
    /// the first call. It runs while the caller prepares the rest of the
    /// start; [`SelfTest::finish`] gives its verdict.
    pub(crate) fn start_self_test(&self, uid: Option<ChildUid>) -> Result<SelfTest, String> {
        // Its cwd is the HOME root, which a uid of the range may enter (not
        // list or write): `--version` writes nothing.
        let mut command = self
            .confined_command(uid, self.home_dir)
            .map_err(|e| self.spawn_error(&e))?;
        command
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command.spawn().map_err(|e| self.spawn_error(&e))?;
        Ok(SelfTest {
            child: Some(child),
            agent_browser: self.agent_browser.to_owned(),
        })
    }
}

/// The self-test's `agent-browser --version`, running. Dropped unfinished
/// (the start failed elsewhere), it is killed and reaped.
#[derive(Debug)]
pub(crate) struct SelfTest {
    child: Option<std::process::Child>,
    agent_browser: PathBuf,
}

impl SelfTest {
    /// Wait for it: agent-browser's version, or why it did not run confined.
    pub(crate) fn finish(mut self) -> Result<String, String> {
        let child = self
            .child
            .take()
            .ok_or("the self-test was already finished")?;
        let output = child.wait_with_output().map_err(|e| {
            format!(
                "cannot read the self-test of {}: {e}",
                self.agent_browser.display()
            )
        })?;
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
}

impl Drop for SelfTest {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
