//! Operator configuration: flags with environment equivalents, checked at
//! start so that bad config fails before any JSON-RPC is read.

use std::{
    fs,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context, bail};
use clap::Args;

use crate::{exec::Runner, session::MAX_DAEMON_NAME_LEN};

/// Longest unix socket path agent-browser can bind.
const MAX_SOCKET_PATH: usize = 103;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The agent-browser native binary to run (the platform build from the
    /// pinned npm package, not the Node shim).
    #[arg(
        long,
        env = "BROWSER_SHELL_AGENT_BROWSER",
        value_name = "PATH",
        default_value = "/usr/local/lib/browser-shell/agent-browser"
    )]
    pub agent_browser: PathBuf,

    /// Chromium's remote-debugging port on 127.0.0.1; forced as `--cdp` on
    /// every call.
    #[arg(long, env = "BROWSER_SHELL_CDP_PORT", value_name = "PORT", default_value_t = 9222,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub cdp_port: u16,

    /// Private state of agent-browser: its HOME, its socket dir and its `{}`
    /// config file. Keep it short: socket paths are limited to 103 bytes.
    #[arg(
        long,
        env = "BROWSER_SHELL_STATE_DIR",
        value_name = "DIR",
        default_value = "/tmp/browser-shell-state"
    )]
    pub state_dir: PathBuf,

    /// Where screenshots are written, one subdirectory per session.
    #[arg(
        long,
        env = "BROWSER_SHELL_OUTPUT_DIR",
        value_name = "DIR",
        default_value = "/tmp/browser-shell"
    )]
    pub output_dir: PathBuf,

    /// URL policy file (JSON; see deploy/policy/). Missing: the safe default
    /// (http/https to public addresses only, about:blank, navigation guard
    /// on). Invalid: the server refuses to start, naming the key.
    #[arg(
        long,
        env = "BROWSER_SHELL_POLICY",
        value_name = "FILE",
        default_value = "/etc/agent-browser/browser-shell.policy.json"
    )]
    pub policy: PathBuf,

    /// Append-only JSONL audit log. Every call is recorded here before it
    /// runs; if it cannot be written, calls are refused.
    #[arg(
        long,
        env = "BROWSER_SHELL_AUDIT_LOG",
        value_name = "FILE",
        default_value = "/var/log/browser-shell/audit.jsonl"
    )]
    pub audit_log: PathBuf,

    /// Secret key for redaction MACs and audit checkpoints (created, 0600,
    /// if missing). Keep it where the confined agent-browser cannot read it.
    /// Default: the audit log's path with `.key` appended.
    #[arg(long, env = "BROWSER_SHELL_AUDIT_KEY", value_name = "FILE")]
    pub audit_key: Option<PathBuf>,

    /// Rotate the audit log before it grows past this many bytes (the chain
    /// continues into the new file). 0 disables rotation.
    #[arg(long, env = "BROWSER_SHELL_AUDIT_MAX_BYTES", value_name = "BYTES", default_value_t = 100 * 1024 * 1024)]
    pub audit_max_bytes: u64,

    /// Rotated audit files kept (`audit.jsonl.1` … `.N`); older ones are deleted.
    #[arg(long, env = "BROWSER_SHELL_AUDIT_MAX_FILES", value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub audit_max_files: u32,

    /// Extra query-parameter names whose values are masked in audited URLs
    /// (repeatable; ','-separated in the environment).
    #[arg(
        long,
        env = "BROWSER_SHELL_AUDIT_SECRET_PARAMS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub audit_secret_param: Vec<String>,

    /// Calls that may run at once across all sessions; one more waits
    /// (bounded by --busy-wait-sec), then is refused as busy.
    #[arg(long, env = "BROWSER_SHELL_MAX_INFLIGHT", value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_inflight: u32,

    /// Seconds a call waits for its session's previous call, or for a free
    /// in-flight slot, before it is refused as busy (never queued forever).
    #[arg(long, env = "BROWSER_SHELL_BUSY_WAIT_SEC", value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=600))]
    pub busy_wait_sec: u64,

    /// Sessions (agent-browser daemons and tabs) this server keeps live.
    #[arg(long, env = "BROWSER_SHELL_MAX_SESSIONS", value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_sessions: u32,

    /// A new session beyond --max-sessions: `refuse` it, or `evict-lru` the
    /// least recently used idle session (audited as evicted).
    #[arg(long, env = "BROWSER_SHELL_SESSION_OVERFLOW", value_enum, default_value_t = crate::sessions::Overflow::Refuse)]
    pub session_overflow: crate::sessions::Overflow,

    /// A session idle this long is reaped: daemon stopped, tab closed,
    /// socket files and screenshots removed (audited as reaped).
    #[arg(long, env = "BROWSER_SHELL_SESSION_IDLE_SEC", value_name = "SECONDS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub session_idle_sec: u64,

    /// Bytes of screenshots one session keeps; before each screenshot the
    /// oldest go first so one more fits.
    #[arg(long, env = "BROWSER_SHELL_OUTPUT_QUOTA_SESSION_BYTES", value_name = "BYTES", default_value_t = 256 * 1024 * 1024)]
    pub output_quota_session_bytes: u64,

    /// Bytes of screenshots all sessions together keep.
    #[arg(long, env = "BROWSER_SHELL_OUTPUT_QUOTA_TOTAL_BYTES", value_name = "BYTES", default_value_t = 2 * 1024 * 1024 * 1024)]
    pub output_quota_total_bytes: u64,

    /// On SIGTERM: new calls are refused at once; calls in flight get this
    /// many seconds to finish, then are cancelled (and audited as such).
    #[arg(long, env = "BROWSER_SHELL_SHUTDOWN_GRACE_SEC", value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=600))]
    pub shutdown_grace_sec: u64,

    /// Largest file the confined agent-browser (and its daemon) may write,
    /// e.g. one screenshot (RLIMIT_FSIZE).
    #[arg(long, env = "BROWSER_SHELL_CHILD_MAX_FILE_BYTES", value_name = "BYTES", default_value_t = 64 * 1024 * 1024)]
    pub child_max_file_bytes: u64,

    /// Open files the confined agent-browser (and its daemon) may hold
    /// (RLIMIT_NOFILE). Core dumps are always off (RLIMIT_CORE 0).
    #[arg(long, env = "BROWSER_SHELL_CHILD_MAX_OPEN_FILES", value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(64..=1_048_576))]
    pub child_max_open_files: u64,

    /// Also write the server's diagnostics (not the audit trail) to a daily
    /// rolling file `browser-shell.log` in this directory.
    #[arg(long, env = "BROWSER_SHELL_DIAGNOSTICS_DIR", value_name = "DIR")]
    pub diagnostics_dir: Option<PathBuf>,

    /// Seconds an idle agent-browser daemon lives before it exits by itself.
    #[arg(long, env = "BROWSER_SHELL_IDLE_TIMEOUT_SEC", value_name = "SECONDS",
          default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub idle_timeout_sec: u64,

    /// Run agent-browser with less than full confinement when the kernel
    /// lacks Landlock ABI 6 or seccomp; every audit record then carries the
    /// degraded status. Without this flag such a kernel refuses to start.
    #[arg(long, env = "BROWSER_SHELL_ALLOW_DEGRADED_CONFINEMENT")]
    pub allow_degraded_confinement: bool,

    /// Accept an audit log inside a directory the confined agent-browser may
    /// write (such as /tmp). Without this flag that refuses to start: the
    /// process being audited must not be able to touch the evidence.
    #[arg(long, env = "BROWSER_SHELL_ALLOW_WRITABLE_AUDIT_LOG")]
    pub allow_writable_audit_log: bool,

    /// Extra directories the confined agent-browser may read and execute
    /// (repeatable; ':'-separated in the environment). Needed only for a
    /// dynamically linked build or a test stand-in.
    #[arg(
        long,
        env = "BROWSER_SHELL_EXTRA_READ_EXEC",
        value_name = "DIR",
        value_delimiter = ':'
    )]
    pub extra_read_exec: Vec<PathBuf>,

    /// Most bytes of stdout and of stderr returned per call (the rest is cut
    /// with a marker).
    #[arg(long, env = "BROWSER_SHELL_MAX_OUTPUT_BYTES", value_name = "BYTES",
          default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1024..=10_000_000))]
    pub max_output_bytes: u64,
}

/// Everything the server needs, after checking and preparing the directories.
#[derive(Debug)]
pub struct Prepared {
    /// The compiled confinement every agent-browser spawn gets.
    pub confinement: Arc<hardening::Prepared>,
    /// Masks secrets in audit records (keyed by the audit key).
    pub redactor: audit::Redactor,
    /// What `open` (and the navigation guard) may reach.
    pub url_policy: crate::policy::UrlPolicy,
    /// Concurrency limits.
    pub limits: crate::pipeline::Limits,
    pub runner: Runner,
    pub audit: audit::Sink,
    pub output_dir: PathBuf,
    pub max_output_bytes: usize,
}

impl ServeArgs {
    /// Check the configuration and prepare the state directory.
    pub fn prepare(&self) -> anyhow::Result<Prepared> {
        check_executable(&self.agent_browser)?;
        let url_policy = crate::policy::UrlPolicy::load(&self.policy)?;
        let state_dir = absolute(&self.state_dir, "--state-dir")?;
        let output_dir = absolute(&self.output_dir, "--output-dir")?;
        let home_dir = state_dir.join("home");
        let socket_dir = state_dir.join("sock");
        let longest_socket = socket_dir.as_os_str().len() + 1 + MAX_DAEMON_NAME_LEN + ".sock".len();
        if longest_socket > MAX_SOCKET_PATH {
            bail!(
                "--state-dir {} is too long: agent-browser's socket paths would reach {longest_socket} \
                 bytes (limit {MAX_SOCKET_PATH}); use a state dir of at most {} bytes",
                state_dir.display(),
                MAX_SOCKET_PATH - (1 + MAX_DAEMON_NAME_LEN + ".sock".len() + "/sock".len())
            );
        }
        for dir in [&state_dir, &home_dir, &socket_dir, &output_dir] {
            private_dir(dir)?;
        }
        let config_file = state_dir.join("agent-browser.config.json");
        write_empty_config(&config_file)?;
        // The socket dir decides which daemon a CLI talks to: it must be ours
        // alone, even if it existed before this start.
        let owner = fs::metadata(&config_file)?.uid();
        for dir in [&state_dir, &home_dir, &socket_dir] {
            let meta = fs::symlink_metadata(dir)?;
            if meta.uid() != owner {
                bail!(
                    "{} belongs to uid {}, not to this server (uid {owner}); refusing to share \
                     agent-browser's state or sockets with another user",
                    dir.display(),
                    meta.uid()
                );
            }
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .with_context(|| format!("cannot make {} private", dir.display()))?;
        }
        if let Some(parent) = self
            .audit_log
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            private_dir(parent)?;
        }
        let key_path = self.audit_key_path();
        let key = audit::Key::load_or_create(&key_path).with_context(|| {
            format!("cannot load or create the audit key {}", key_path.display())
        })?;
        let rotation = (self.audit_max_bytes > 0).then_some(audit::Rotation {
            max_bytes: self.audit_max_bytes,
            max_files: self.audit_max_files,
        });
        let audit = audit::Sink::open(&self.audit_log, Some(key.clone()), rotation)
            .with_context(|| "the audit log must be writable before any call can run")?;
        let secret_params: Vec<String> = self
            .audit_secret_param
            .iter()
            .chain(&url_policy.secret_query_params)
            .cloned()
            .collect();
        let redactor = audit::Redactor::new(key, &secret_params);

        let policy = self.confinement_policy(&state_dir, &output_dir)?;
        self.check_evidence_outside(&policy, &key_path)?;
        let confinement = Arc::new(
            hardening::prepare(&policy).context("cannot confine agent-browser on this machine")?,
        );
        let runner = Runner {
            // Absolute: the child's cwd is its private HOME, where a relative
            // program path would resolve to nothing (or to something planted).
            agent_browser: self
                .agent_browser
                .canonicalize()
                .with_context(|| format!("cannot resolve {}", self.agent_browser.display()))?,
            cdp_port: self.cdp_port,
            home_dir,
            socket_dir,
            config_file,
            output_dir: output_dir.clone(),
            idle_timeout_ms: self.idle_timeout_sec * 1000,
            confinement: Arc::clone(&confinement),
            trampoline: hardening::Trampoline::new("/proc/self/exe", &policy)
                .context("cannot serialise the confinement policy")?,
            // Only ever 127.0.0.1: no HTTP(S)_PROXY may see target ids.
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .context("cannot build the HTTP client for Chromium's DevTools endpoint")?,
            verified_sockets: Arc::default(),
            standbys: Arc::default(),
        };
        let version = runner
            .self_test()
            .map_err(|e| anyhow::anyhow!("the confined agent-browser does not start: {e}"))?;
        tracing::info!(version, confinement = %confinement.report().summary(), "agent-browser starts confined");
        Ok(Prepared {
            confinement,
            runner,
            audit,
            redactor,
            url_policy,
            limits: crate::pipeline::Limits {
                max_inflight: self.max_inflight,
                busy_wait: std::time::Duration::from_secs(self.busy_wait_sec),
                max_sessions: self.max_sessions as usize,
                overflow: self.session_overflow,
                session_idle: std::time::Duration::from_secs(self.session_idle_sec),
                output_quota: crate::outputs::Quota {
                    per_session: self.output_quota_session_bytes,
                    total: self.output_quota_total_bytes,
                    max_file: self.child_max_file_bytes,
                },
            },
            output_dir,
            max_output_bytes: usize::try_from(self.max_output_bytes).unwrap_or(usize::MAX),
        })
    }

    /// What the spawned agent-browser (and the daemon it forks) may do:
    /// execute its own binary, read /proc, write under /tmp, the state dir
    /// and the output dir, connect to the CDP port only, bind nothing, and
    /// create only unix and IPv4 sockets (`--cdp` is always 127.0.0.1).
    pub fn confinement_policy(
        &self,
        state_dir: &Path,
        output_dir: &Path,
    ) -> anyhow::Result<hardening::Policy> {
        let binary = self
            .agent_browser
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", self.agent_browser.display()))?;
        let binary_dir = binary
            .parent()
            .map(Path::to_path_buf)
            .context("agent-browser has no parent directory")?;
        let mut policy = hardening::Policy::default();
        policy.read_exec_paths = std::iter::once(binary_dir)
            .chain(self.extra_read_exec.iter().cloned())
            .collect();
        policy.read_paths = vec![PathBuf::from("/proc")];
        policy.read_write_paths = vec![
            PathBuf::from("/tmp"),
            state_dir.to_owned(),
            output_dir.to_owned(),
            PathBuf::from("/dev/null"),
        ];
        policy.connect_tcp_ports = vec![self.cdp_port];
        policy.socket_families = vec![hardening::SocketFamily::Unix, hardening::SocketFamily::Inet];
        policy.rlimits = vec![
            hardening::Limit {
                resource: hardening::Resource::Core,
                value: 0,
            },
            hardening::Limit {
                resource: hardening::Resource::FileSize,
                value: self.child_max_file_bytes,
            },
            hardening::Limit {
                resource: hardening::Resource::NoFile,
                value: self.child_max_open_files,
            },
        ];
        policy.degraded = if self.allow_degraded_confinement {
            hardening::Degraded::Allow
        } else {
            hardening::Degraded::Refuse
        };
        Ok(policy)
    }

    /// The audit key file: `--audit-key`, or `<audit log>.key`.
    pub fn audit_key_path(&self) -> PathBuf {
        self.audit_key
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.key", self.audit_log.display())))
    }

    /// The process being audited must not be able to edit the evidence (the
    /// log, its checkpoint, lock and rotated files sit beside it) nor read
    /// the key that authenticates checkpoints and redaction MACs.
    fn check_evidence_outside(&self, policy: &hardening::Policy, key: &Path) -> anyhow::Result<()> {
        let writable: Vec<PathBuf> = policy
            .read_write_paths
            .iter()
            .filter_map(|root| root.canonicalize().ok())
            .collect();
        let readable: Vec<PathBuf> = policy
            .read_exec_paths
            .iter()
            .chain(&policy.read_paths)
            .filter_map(|root| root.canonicalize().ok())
            .chain(writable.iter().cloned())
            .collect();
        let log = canonical_in_parent(&self.audit_log);
        if let Some(root) = writable.iter().find(|root| log.starts_with(root)) {
            if !self.allow_writable_audit_log {
                bail!(
                    "the audit log {} lies under {}, which the confined agent-browser may write: \
                     it could edit or delete the evidence of its own calls; put the log elsewhere \
                     (e.g. /var/log/browser-shell) or pass --allow-writable-audit-log to accept it",
                    log.display(),
                    root.display()
                );
            }
            tracing::warn!(
                audit_log = %log.display(),
                root = %root.display(),
                "audit log is writable by the confined agent-browser (accepted by --allow-writable-audit-log)"
            );
        }
        let key = canonical_in_parent(key);
        if let Some(root) = readable.iter().find(|root| key.starts_with(root))
            && !self.allow_writable_audit_log
        {
            bail!(
                "the audit key {} lies under {}, which the confined agent-browser may read: it \
                 could forge checkpoints; put the key elsewhere (--audit-key)",
                key.display(),
                root.display()
            );
        }
        Ok(())
    }
}

/// `path` with its parent directory resolved (the file may not exist yet).
fn canonical_in_parent(path: &Path) -> PathBuf {
    path.parent()
        .and_then(|dir| dir.canonicalize().ok())
        .map_or_else(
            || path.to_owned(),
            |dir| dir.join(path.file_name().unwrap_or_default()),
        )
}

fn check_executable(path: &Path) -> anyhow::Result<()> {
    let meta = fs::metadata(path).with_context(|| {
        format!(
            "agent-browser binary not found at {} (set --agent-browser or BROWSER_SHELL_AGENT_BROWSER)",
            path.display()
        )
    })?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        bail!("{} is not an executable file", path.display());
    }
    Ok(())
}

fn absolute(path: &Path, flag: &str) -> anyhow::Result<PathBuf> {
    if !path.is_absolute() {
        bail!("{flag} must be an absolute path (got {})", path.display());
    }
    Ok(path.to_owned())
}

fn private_dir(dir: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let meta =
        fs::symlink_metadata(dir).with_context(|| format!("cannot stat {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    Ok(())
}

/// agent-browser reads this instead of discovering `~/.agent-browser/config.json`
/// and `./agent-browser.json`, either of which could enable plugins or debug mode.
fn write_empty_config(path: &Path) -> anyhow::Result<()> {
    let _ = fs::remove_file(path);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    std::io::Write::write_all(&mut file, b"{}\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
