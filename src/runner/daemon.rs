//! The session daemons agent-browser leaves running: who listens on a
//! session's socket (asked of the kernel, never of files the daemon wrote),
//! whether it is confined (read from `/proc`), and stopping, retiring and
//! finding them.

use std::time::Duration;

use super::Runner;
use crate::daemons::SocketFile;
use crate::session_id::{DaemonName, SessionId, is_daemon_name};

impl Runner {
    /// The name of one of a session's files in the socket dir.
    pub(super) fn session_file(daemon_name: &str, suffix: &str) -> String {
        format!("{daemon_name}.{suffix}")
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

    /// Who answers on the session's socket. The socket dir is the child's:
    /// the file there is opened without following a symlink and connected
    /// to through its descriptor, so a link planted there cannot point the
    /// server at another program's socket.
    async fn listener(&self, daemon_name: &str) -> Listener {
        let file = match self
            .socket_dir
            .socket(&Self::session_file(daemon_name, "sock"))
        {
            SocketFile::Missing => return Listener::Nobody,
            // A symlink or anything else planted where the socket belongs.
            SocketFile::Other => return Listener::Foreign,
            SocketFile::Socket(file) => file,
        };
        // A socket another uid made under this name (a child squatting on
        // the session's name in the shared dir) is not the session's.
        if let Some(uid) = self.identities.known(daemon_name)
            && !rustix::fs::fstat(&file).is_ok_and(|st| st.st_uid == uid.get())
        {
            return Listener::Foreign;
        }
        let connect = tokio::net::UnixStream::connect(SocketFile::proc_path(&file));
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
    pub(super) async fn evict_unconfined_daemon(&self, session: &SessionId) {
        let name = session.daemon_name();
        let identity = self.socket_dir.identity(&Self::session_file(name, "sock"));
        if let (Some(identity), Ok(verified)) = (identity, self.verified_sockets.lock())
            && verified.get(name) == Some(&identity)
        {
            return;
        }
        let pid = match self.listener(name).await {
            Listener::Nobody => {
                self.remove_foreign_files(name);
                return;
            }
            Listener::Foreign => {
                self.remove_foreign_files(name);
                // Not our agent-browser (or its pid cannot be told): the CLI
                // must not hand it the batch. Without the socket file the CLI
                // starts a daemon of its own, confined.
                tracing::warn!(
                    session = session.as_str(),
                    "something other than our agent-browser listens on the session's socket; removing the socket"
                );
                self.socket_dir.remove(&Self::session_file(name, "sock"));
                return;
            }
            Listener::Daemon(pid) => pid,
        };
        match self.is_confined(pid, name) {
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
                // Its pinned tab was opened outside the gate, in no browser
                // context of a session: the confined daemon opens its own.
                // Its other files, made under another uid, the confined
                // daemon could not replace.
                for suffix in DAEMON_FILES {
                    self.socket_dir.remove(&Self::session_file(name, suffix));
                }
            }
            // Gone since the connect: nothing to evict, nothing verified.
            None => {}
        }
    }

    /// A daemon's files in the shared socket dir that another uid made
    /// (a child squatting on the session's names) are removed before its
    /// daemon starts: it could not replace them, and would not start.
    fn remove_foreign_files(&self, name: &str) {
        // Given now if it has none: its first child is about to be spawned.
        let Ok(Some(uid)) = self.identities.for_daemon(name) else {
            return;
        };
        for suffix in DAEMON_FILES {
            let file = Self::session_file(name, suffix);
            if self
                .socket_dir
                .owner(&file)
                .is_some_and(|owner| owner != uid.get())
            {
                tracing::warn!(
                    file,
                    "a file of the session's daemon made by another uid was removed"
                );
                self.socket_dir.remove(&file);
            }
        }
    }

    /// Does `/proc/<pid>/status` show the confinement every spawn of this
    /// server applies: no capabilities, no_new_privs, a seccomp filter when
    /// this kernel enforces one, and `daemon`'s own uid when it has one?
    /// `None` when the process is gone.
    fn is_confined(&self, pid: u32, daemon: &str) -> Option<bool> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| status_field(&status, name);
        let seccomp_expected =
            !matches!(self.confinement.report().seccomp, hardening::Layer::Off(_));
        // With a uid per daemon, one the server never gave this daemon (a
        // previous server's without one, say) is not ours to trust.
        let uid_expected = self.identities.range().map(|_| {
            self.identities
                .known(daemon)
                .map_or_else(String::new, |uid| {
                    let id = uid.to_string();
                    format!("{id}\t{id}\t{id}\t{id}")
                })
        });
        Some(
            field("CapEff") == Some("0000000000000000")
                && field("CapPrm") == Some("0000000000000000")
                && field("NoNewPrivs") == Some("1")
                && (!seccomp_expected || field("Seccomp") == Some("2"))
                && uid_expected.is_none_or(|uid| field("Uid") == Some(uid.as_str())),
        )
    }

    /// The pid of the confined daemon of ours listening as `daemon_name`.
    pub(crate) async fn daemon_of(&self, daemon_name: &str) -> Option<u32> {
        let pid = self.daemon_pid(daemon_name).await?;
        self.is_confined(pid, daemon_name)
            .unwrap_or(false)
            .then_some(pid)
    }

    /// SIGKILL the session's daemon (after a timeout or cancellation).
    pub(super) async fn stop_daemon(&self, session: &SessionId) {
        if let Some(pid) = self.daemon_pid(session.daemon_name()).await {
            tracing::info!(
                pid,
                session = session.as_str(),
                "stopping the session's daemon after timeout/cancel"
            );
            kill_and_reap_wait(pid).await;
        }
    }
    /// End a session for good (idle reaper, eviction): kill its daemon,
    /// close its tab in Chromium, remove its socket-dir files and its output
    /// directory (`output_name`, when it has one). Best effort; what could
    /// not be done is returned.
    pub(crate) async fn retire(
        &self,
        daemon_name: &DaemonName,
        output_name: Option<&str>,
        output_dir: &std::path::Path,
    ) -> Vec<String> {
        self.standbys.discard(daemon_name);
        // A later session of this name has a new context, to be labelled.
        if let Ok(mut labelled) = self.labelled.lock() {
            labelled.remove(daemon_name);
        }
        let mut problems = Vec::new();
        self.kill_daemon(daemon_name).await;
        if let Err(e) = self.close_tab(daemon_name).await {
            problems.push(format!("tab not closed: {e}"));
        }
        for suffix in DAEMON_FILES {
            self.socket_dir
                .remove(&Self::session_file(daemon_name, suffix));
        }
        if let Ok(mut verified) = self.verified_sockets.lock() {
            verified.remove(daemon_name);
        }
        self.release_identity(daemon_name);
        let Some(output_name) = output_name else {
            return problems;
        };
        if !is_daemon_name(output_name) {
            problems.push(format!("not an output directory name: {output_name:?}"));
            return problems;
        }
        let dir = output_dir.join(output_name);
        if dir.starts_with(output_dir) && dir != output_dir {
            // The child can swap this tree's directories for symlinks. std's
            // remove_dir_all on Linux is openat/unlinkat with O_NOFOLLOW
            // (documented as protected against symlink TOCTOU races), and it
            // unlinks a symlink at `dir` itself; `daemon_name` is one plain
            // name (checked above) and `output_dir` is the operator's.
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
    pub(crate) async fn running_daemons(&self) -> Vec<(DaemonName, bool)> {
        let mut found = Vec::new();
        for name in self.socket_dir.names() {
            let Some(daemon_name) = name.strip_suffix(".sock").and_then(DaemonName::checked) else {
                continue;
            };
            if let Some(pid) = self.daemon_pid(&daemon_name).await {
                // A daemon gone since the connect needs no decision.
                if let Some(confined) = self.is_confined(pid, &daemon_name) {
                    found.push((daemon_name, confined));
                }
            }
        }
        found
    }

    /// Kill the daemon serving `daemon_name` and wait until it is gone.
    pub(crate) async fn kill_daemon(&self, daemon_name: &str) {
        if let Some(pid) = self.daemon_pid(daemon_name).await {
            kill_and_reap_wait(pid).await;
        }
    }
}

/// The files agent-browser keeps per daemon in the socket dir.
const DAEMON_FILES: [&str; 6] = ["sock", "pid", "version", "config", "stream", "target"];

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
pub(crate) fn is_alive(pid: u32) -> bool {
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
