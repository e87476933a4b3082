//! The confinement every spawned agent-browser (and the daemon it forks)
//! runs under, as data: what it may execute, read and write, which port it
//! may connect to, which sockets it may make, and its resource limits. The
//! `hardening` crate enforces it; this file decides it.

use std::path::{Path, PathBuf};

/// agent-browser's private directories and config file under the state dir.
pub(crate) const HOME_DIR: &str = "home";
pub(crate) const SOCKET_DIR: &str = "sock";
pub(crate) const CONFIG_FILE: &str = "agent-browser.config.json";

/// What the child's policy depends on.
#[derive(Debug)]
pub(crate) struct ChildSettings<'a> {
    pub(crate) agent_browser: &'a Path,
    /// More directories the child may read and execute (`--extra-read-exec`).
    pub(crate) extra_read_exec: &'a [PathBuf],
    pub(crate) state_dir: &'a Path,
    pub(crate) output_dir: &'a Path,
    /// The browser gate's port: the only one the child may connect to.
    pub(crate) gate_port: u16,
    pub(crate) max_file_bytes: u64,
    pub(crate) max_open_files: u64,
    /// Run even where a mechanism cannot be enforced (never by default).
    pub(crate) allow_degraded: bool,
}

/// What the child may do: execute its own binary, read /proc and its
/// config, write under /tmp, its home and socket dirs and the output dir,
/// connect to the browser gate's port only (never to Chromium's DevTools
/// port: see `crate::gate`), bind nothing, and create only unix and IPv4
/// TCP sockets (the gate is always 127.0.0.1; no UDP, which Landlock cannot
/// restrict).
pub(crate) fn policy(settings: &ChildSettings<'_>) -> Result<hardening::Policy, String> {
    let binary = settings
        .agent_browser
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", settings.agent_browser.display()))?;
    let binary_dir = binary
        .parent()
        .map(Path::to_path_buf)
        .ok_or("agent-browser has no parent directory")?;
    let mut policy = hardening::Policy::default();
    policy.read_exec_paths = std::iter::once(binary_dir)
        .chain(settings.extra_read_exec.iter().cloned())
        .collect();
    // The config file is read in place: the state dir itself is not the
    // child's (see `writable_roots`).
    policy.read_paths = vec![PathBuf::from("/proc"), settings.state_dir.join(CONFIG_FILE)];
    policy.read_write_paths = writable_roots(settings.state_dir, settings.output_dir);
    policy.connect_tcp_ports = vec![settings.gate_port];
    policy.socket_families = vec![
        hardening::SocketFamily::Unix,
        hardening::SocketFamily::InetTcp,
    ];
    let limit = |resource, value| hardening::Limit { resource, value };
    policy.rlimits = vec![
        limit(hardening::Resource::Core, 0),
        limit(hardening::Resource::FileSize, settings.max_file_bytes),
        limit(hardening::Resource::NoFile, settings.max_open_files),
    ];
    // What a child makes (its socket, pid and pin files, screenshots, files
    // in /tmp) is its own uid's alone: another session's child runs as
    // another uid (`crate::daemons::Identities`).
    policy.umask = Some(0o077);
    policy.degraded = if settings.allow_degraded {
        hardening::Degraded::Allow
    } else {
        hardening::Degraded::Refuse
    };
    Ok(policy)
}

/// Where the child may write: inside its home and socket dirs, never the
/// state dir that holds them, so it cannot put a symlink where the server
/// looks for them (the server's file operations on daemons run through
/// those two names).
pub(crate) fn writable_roots(state_dir: &Path, output_dir: &Path) -> Vec<PathBuf> {
    vec![
        PathBuf::from("/tmp"),
        state_dir.join(HOME_DIR),
        state_dir.join(SOCKET_DIR),
        output_dir.to_owned(),
        PathBuf::from("/dev/null"),
    ]
}
