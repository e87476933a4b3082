//! Checking the operator's configuration and preparing what the server
//! needs: private state directories, the audit log and key, the URL policy,
//! the compiled confinement, and a runner whose agent-browser has already
//! started once, confined (so a machine that cannot confine it fails here,
//! not at the first call).

use std::{
    fs,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, bail};

use super::{flags::ServeArgs, instance};
use crate::{
    gate::Gate,
    policy::{outputs::Quota, rules, url_policy::UrlPolicy},
    runner::{
        Launch, Runner, RunnerConfig, SelfTest,
        child_policy::{self, CONFIG_FILE, HOME_DIR, SOCKET_DIR},
    },
    server::{Limits, Parts},
    session_id::MAX_DAEMON_NAME_LEN,
};

/// The file in the state dir naming the last serving gate's port.
const GATE_PORT_MEMO: &str = "gate.port";

/// Remember the serving gate's port for the next server (see
/// `ServeArgs::bind_gate`).
pub(crate) fn remember_gate_port(state: &Path, port: u16) -> anyhow::Result<()> {
    let memo = state.join(GATE_PORT_MEMO);
    fs::write(&memo, port.to_string()).with_context(|| format!("cannot write {}", memo.display()))
}

/// Longest unix socket path agent-browser can bind.
const MAX_SOCKET_PATH: usize = 103;

/// agent-browser's private directories under the state dir.
struct StateDirs {
    state: PathBuf,
    home: PathBuf,
    socket: PathBuf,
    output: PathBuf,
    config_file: PathBuf,
}

impl StateDirs {
    fn of_children(&self) -> super::child_uids::ChildDirs<'_> {
        super::child_uids::ChildDirs {
            state: &self.state,
            home: &self.home,
            socket: &self.socket,
            output: &self.output,
            config_file: &self.config_file,
        }
    }
}

/// A start whose self-test is still running: [`Starting::finish`] waits
/// for it and gives the [`Parts`].
pub(crate) struct Starting {
    parts: Parts,
    self_test: SelfTest,
    agent_browser: PathBuf,
}

impl Starting {
    /// Wait for the self-test: the parts, or why agent-browser does not
    /// start confined.
    pub(crate) fn finish(self) -> anyhow::Result<Parts> {
        let Self {
            mut parts,
            self_test,
            agent_browser,
        } = self;
        parts.agent_browser_version = self_test.finish().map_err(|e| {
            anyhow::anyhow!(
                "the confined agent-browser does not start: {e}{}",
                script_hint(&agent_browser)
            )
        })?;
        tracing::info!(
            version = parts.agent_browser_version,
            confinement = %parts.runner.confinement().report().summary(),
            "agent-browser starts confined"
        );
        Ok(parts)
    }
}

impl ServeArgs {
    /// Check the configuration and prepare everything the server is built from.
    pub(crate) fn prepare(&self) -> anyhow::Result<Parts> {
        self.start()?.finish()
    }

    /// [`ServeArgs::prepare`], returning as soon as everything is checked and
    /// built while the confined self-test may still be running, so that the
    /// caller can do its own preparation meanwhile.
    pub(crate) fn start(&self) -> anyhow::Result<Starting> {
        raise_open_files_limit();
        let (agent_browser, dirs) = self.checked_inputs()?;
        let gate = self.bind_gate(&dirs.state)?;
        let identities = Arc::new(super::child_uids::identities(
            self.child_uids,
            &dirs.of_children(),
        )?);
        let agent_browser = super::child_uids::agent_browser_within_reach(
            &agent_browser,
            identities.range(),
            &dirs.state,
        )?;
        let Confined {
            trampoline_file,
            trampoline,
            prepared: confinement,
        } = self.confine(&agent_browser, &dirs, gate.port())?;
        let idle_timeout_ms = self.idle_timeout_sec * 1000;
        // The socket dir is opened before any child runs, as the
        // confinement was: a child (the self-test's, too) can replace what
        // is at its path.
        let socket_dir = crate::daemons::SocketDir::open(&dirs.socket)
            .with_context(|| format!("cannot open the socket dir {}", dirs.socket.display()))?;
        // Every check that may refuse to run agent-browser is behind us: the
        // self-test runs while the audit log is opened and the rules are
        // built, which need nothing from it.
        let self_test = Launch {
            trampoline: &trampoline,
            agent_browser: &agent_browser,
            home_dir: &dirs.home,
            socket_dir: &dirs.socket,
            config_file: &dirs.config_file,
            output_dir: &dirs.output,
            idle_timeout_ms,
        }
        .start_self_test(identities.spare())
        .map_err(|e| anyhow::anyhow!("the confined agent-browser does not start: {e}"))?;
        let (audit, key) = self.open_audit()?;
        self.say_when_default_policy();
        let rules = self.load_rules(gate.port(), key)?;
        let runner = Runner::new(RunnerConfig {
            agent_browser: agent_browser.clone(),
            cdp_port: self.cdp_port,
            gate_port: gate.port(),
            home_dir: dirs.home.clone(),
            socket_dir,
            config_file: dirs.config_file.clone(),
            output_dir: dirs.output.clone(),
            idle_timeout_ms,
            confinement,
            trampoline,
            identities,
        })
        .context("cannot build the HTTP client for Chromium's DevTools")?;
        let resolver = crate::policy::resolve::SystemResolver::new(rules.get().url.dns_timeout)
            .context("cannot keep host-name lookups to glibc's files and dns")?;
        Ok(Starting {
            parts: Parts {
                gate: Some(gate),
                resolver,
                runner,
                agent_browser_version: String::new(),
                trampoline_file,
                audit,
                rules: Arc::new(rules),
                limits: self.limits(),
                output_dir: dirs.output,
                max_output_bytes: usize::try_from(self.max_output_bytes).unwrap_or(usize::MAX),
                max_image_bytes: self.max_image_bytes,
                pool: self.pool_settings(),
            },
            self_test,
            agent_browser: self.agent_browser.clone(),
        })
    }

    /// agent-browser's binary and the server's dirs, made; every file the
    /// server trusts checked out of the child's reach before the policy and
    /// the key are read (a file the child could have written is not to be
    /// trusted even once); the policy checked before the audit log is opened
    /// (loaded for good later); the log's directory made, so that the
    /// evidence's paths are checked resolved.
    fn checked_inputs(&self) -> anyhow::Result<(PathBuf, StateDirs)> {
        let agent_browser = self.agent_browser_path()?;
        let dirs = self.prepare_dirs()?;
        self.check_inputs_outside(&child_policy::writable_roots(&dirs.state, &dirs.output))?;
        UrlPolicy::load(&self.policy)?;
        self.audit_dir()?;
        Ok((agent_browser, dirs))
    }

    /// agent-browser's confinement, checked against the files the server
    /// trusts (neither key may be in the child's reach), prepared on this
    /// side, and the trampoline that applies it. Before any child runs: a
    /// child (the self-test's, too) can replace what is at those paths, and
    /// a path found missing would fail the start.
    fn confine(
        &self,
        agent_browser: &Path,
        dirs: &StateDirs,
        gate_port: u16,
    ) -> anyhow::Result<Confined> {
        let policy =
            self.confinement_policy(agent_browser, &dirs.state, &dirs.output, gate_port)?;
        self.check_evidence_outside(&policy, &self.audit_key_path(), "--audit-key")?;
        self.check_evidence_outside(&policy, &self.checkpoint_key_path(), "--checkpoint-key")?;
        let trampoline_file = self.trampoline_file()?;
        let trampoline = trampoline_from(trampoline_file.as_deref(), &policy)?;
        let prepared = Arc::new(
            hardening::prepare(&policy).context("cannot confine agent-browser on this machine")?,
        );
        Ok(Confined {
            trampoline_file,
            trampoline,
            prepared,
        })
    }

    fn pool_settings(&self) -> crate::server::pool::PoolSettings {
        crate::server::pool::PoolSettings {
            size: self.pool.size(self.max_sessions as usize),
            idle: Duration::from_secs(self.pool_idle_sec),
        }
    }

    /// The policy, the secrets and the redaction key, as every call decides
    /// under them; the gate's and Chromium's ports are protected.
    fn load_rules(
        &self,
        gate_port: u16,
        key: audit::Key,
    ) -> Result<rules::Current, rules::LoadError> {
        rules::Current::load(rules::Source {
            policy_file: self.policy.clone(),
            secrets_file: self.secrets.clone(),
            protected_ports: [self.cdp_port, gate_port]
                .into_iter()
                .chain(self.protect_ports.iter().copied())
                .collect(),
            extra_secret_params: self.audit_secret_param.clone(),
            key,
        })
    }

    /// Say on stderr when the built-in default policy applies (no file at
    /// the default path). A missing file anywhere else was refused already
    /// by [`UrlPolicy::load`].
    fn say_when_default_policy(&self) {
        if !self.policy.exists() {
            tracing::warn!(
                path = %self.policy.display(),
                "no policy file at the default path: the built-in default policy applies \
                 (http/https to public addresses only)"
            );
        }
    }

    /// The trampoline's file: `--trampoline`, else `hardening-trampoline`
    /// beside this binary if there is one; `None` when this binary is its
    /// own trampoline.
    pub(crate) fn trampoline_file(&self) -> anyhow::Result<Option<PathBuf>> {
        if let Some(path) = &self.trampoline {
            return absolute(path, "--trampoline").map(Some);
        }
        let me = std::env::current_exe()
            .context("cannot locate browser-shell's own binary (/proc/self/exe)")?;
        Ok(me
            .parent()
            .map(|dir| dir.join(hardening::trampoline::ARG0))
            .filter(|sibling| sibling.is_file()))
    }

    /// The state, HOME, socket and output dirs, private (0700) and ours
    /// alone, and agent-browser's empty config file.
    fn prepare_dirs(&self) -> anyhow::Result<StateDirs> {
        let given = absolute(&self.state_dir, "--state-dir")?;
        // Before anything is made there: the dir as given must fit.
        room_for_sockets(&given, &given)?;
        let place = instance::claim(
            &given,
            &absolute(&self.output_dir, "--output-dir")?,
            private_dir,
        )?;
        let (state, output, ordinal) = (place.state.clone(), place.output.clone(), place.ordinal);
        place.hold_until_exit();
        if ordinal > 1 {
            tracing::info!(
                state = %state.display(),
                output = %output.display(),
                "another live server uses --state-dir {}: this one keeps to dirs of its own",
                given.display()
            );
            room_for_sockets(&given, &state)?;
        }
        let home = state.join(HOME_DIR);
        let socket = state.join(SOCKET_DIR);
        // A child of an earlier server could write where the state dir
        // lies (under /tmp): a link it left in place of its home or socket
        // dir is removed (the link, not where it points), not followed.
        for dir in [&home, &socket] {
            if fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
                tracing::warn!(path = %dir.display(), "a symlink stood where a state directory belongs; removing it");
                fs::remove_file(dir)
                    .with_context(|| format!("cannot remove the symlink {}", dir.display()))?;
            }
        }
        for dir in [&state, &home, &socket, &output] {
            private_dir(dir)?;
        }
        let config_file = state.join(CONFIG_FILE);
        write_empty_config(&config_file)?;
        // The socket dir decides which daemon a CLI talks to: it must be ours
        // alone, even if it existed before this start.
        let owner = fs::metadata(&config_file)?.uid();
        for dir in [&state, &home, &socket] {
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
        Ok(StateDirs {
            state,
            home,
            socket,
            output,
            config_file,
        })
    }

    /// agent-browser's binary, absolute: the child's cwd is its private
    /// HOME, where a relative program path would resolve to nothing (or to
    /// something planted).
    fn agent_browser_path(&self) -> anyhow::Result<PathBuf> {
        executable_file(
            &self.agent_browser,
            &format!(
                "agent-browser binary not found at {} (set --agent-browser or \
                 BROWSER_SHELL_AGENT_BROWSER)",
                self.agent_browser.display()
            ),
        )?;
        self.agent_browser
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", self.agent_browser.display()))
    }

    /// The browser gate's listener: on `--gate-port`, or with 0 on the port
    /// the previous server used (when free), so that the daemons it left
    /// running — which reconnect to the URL they were started with — can be
    /// adopted; otherwise on any free port. Only `serve` remembers the port
    /// ([`remember_gate_port`]).
    fn bind_gate(&self, state: &Path) -> anyhow::Result<Gate> {
        let memo = state.join(GATE_PORT_MEMO);
        let previous = fs::read_to_string(&memo)
            .ok()
            .and_then(|text| text.trim().parse::<u16>().ok())
            .filter(|port| *port != 0);
        let gate = if self.gate_port != 0 {
            Gate::bind(self.gate_port, self.cdp_port, previous).with_context(|| {
                format!(
                    "cannot listen on 127.0.0.1:{} for the browser gate (--gate-port)",
                    self.gate_port
                )
            })?
        } else {
            previous
                .and_then(|port| Gate::bind(port, self.cdp_port, previous).ok())
                .map_or_else(|| Gate::bind(0, self.cdp_port, previous), Ok)
                .context("cannot listen on 127.0.0.1 for the browser gate")?
        };
        Ok(gate.with_max_tabs(self.max_tabs as usize))
    }

    /// The audit log's directory, made private when it is created.
    fn audit_dir(&self) -> anyhow::Result<()> {
        if let Some(parent) = self
            .audit_log
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            private_dir(parent)?;
        }
        Ok(())
    }

    /// The audit log (writable before any call can run), signing its
    /// checkpoint, and the redaction key, in the directory
    /// [`ServeArgs::audit_dir`] made. Two keys, so that the one a reviewer's
    /// check rests on never unmasks typed text (docs/design.md, Redaction).
    fn open_audit(&self) -> anyhow::Result<(audit::Sink, audit::Key)> {
        let key_path = self.audit_key_path();
        let key = audit::Key::load_or_create(&key_path).with_context(|| {
            format!("cannot load or create the audit key {}", key_path.display())
        })?;
        // A device (a pipe, /dev/full) keeps no checkpoint, so needs no key
        // beside it: none is made there.
        let device = fs::metadata(&self.audit_log).is_ok_and(|m| !m.is_file());
        let signing_path = self.checkpoint_key_path();
        let signing = (!device)
            .then(|| audit::SigningKey::load_or_create(&signing_path))
            .transpose()
            .with_context(|| {
                format!(
                    "cannot load or create the checkpoint key {}",
                    signing_path.display()
                )
            })?;
        let rotation = (self.audit_max_bytes > 0).then_some(audit::Rotation {
            max_bytes: self.audit_max_bytes,
            max_files: self.audit_max_files,
        });
        let sink = audit::Sink::open(&self.audit_log, signing, rotation)
            .with_context(|| "the audit log must be writable before any call can run")?;
        Ok((sink, key))
    }

    fn limits(&self) -> Limits {
        Limits {
            max_inflight: self.max_inflight,
            busy_wait: Duration::from_secs(self.busy_wait_sec),
            max_sessions: self.max_sessions as usize,
            overflow: self.session_overflow.into(),
            session_idle: Duration::from_secs(self.session_idle_sec),
            on_exit: self.on_exit.into(),
            output_quota: Quota {
                per_session: self.output_quota_session_bytes,
                total: self.output_quota_total_bytes,
                max_file: self.child_max_file_bytes,
            },
        }
    }

    /// The confinement of every spawned agent-browser under these flags
    /// (`crate::runner::child_policy`).
    pub(crate) fn confinement_policy(
        &self,
        agent_browser: &Path,
        state_dir: &Path,
        output_dir: &Path,
        gate_port: u16,
    ) -> anyhow::Result<hardening::Policy> {
        child_policy::policy(&child_policy::ChildSettings {
            agent_browser,
            extra_read_exec: &self.extra_read_exec,
            state_dir,
            output_dir,
            gate_port,
            max_file_bytes: self.child_max_file_bytes,
            max_open_files: self.child_max_open_files,
            allow_degraded: self.allow_degraded_confinement,
        })
        .map_err(anyhow::Error::msg)
    }

    /// The audit key file: `--audit-key`, or `<audit log>.key`.
    pub(crate) fn audit_key_path(&self) -> PathBuf {
        self.audit_key
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.key", self.audit_log.display())))
    }

    /// The checkpoint's signing key file: `--checkpoint-key`, or
    /// `<audit log>.checkpoint-key`.
    pub(crate) fn checkpoint_key_path(&self) -> PathBuf {
        self.checkpoint_key.clone().unwrap_or_else(|| {
            PathBuf::from(format!("{}.checkpoint-key", self.audit_log.display()))
        })
    }

    /// The process being audited must not be able to edit the evidence (the
    /// log, its checkpoint, lock and rotated files sit beside it) nor read
    /// `key` (the redaction key, or the key that signs checkpoints), which
    /// `flag` places.
    fn check_evidence_outside(
        &self,
        policy: &hardening::Policy,
        key: &Path,
        flag: &str,
    ) -> anyhow::Result<()> {
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
                "the key {} lies under {}, which the confined agent-browser may read: it could \
                 forge checkpoints or unmask typed text; put the key elsewhere ({flag})",
                key.display(),
                root.display()
            );
        }
        Ok(())
    }
}

/// The state dir's parts: the child's home, its socket dir, its config.
/// `path` with its parent directory resolved (the file may not exist yet).
fn canonical_in_parent(path: &Path) -> PathBuf {
    path.parent()
        .and_then(|dir| dir.canonicalize().ok())
        .map_or_else(
            || path.to_owned(),
            |dir| dir.join(path.file_name().unwrap_or_default()),
        )
}

/// `path` is a file someone may execute; `missing` says what to do when it
/// is not there.
fn executable_file(path: &Path, missing: &str) -> anyhow::Result<()> {
    let meta = fs::metadata(path).context(missing.to_owned())?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        bail!("{} is not an executable file", path.display());
    }
    Ok(())
}

/// What [`ServeArgs::confine`] makes.
struct Confined {
    trampoline_file: Option<PathBuf>,
    trampoline: hardening::Trampoline,
    prepared: Arc<hardening::Prepared>,
}

/// The trampoline run from `file` (pinned: opened now), or from this
/// binary when there is no file.
pub(crate) fn trampoline_from(
    file: Option<&Path>,
    policy: &hardening::Policy,
) -> anyhow::Result<hardening::Trampoline> {
    match file {
        Some(path) => {
            executable_file(
                path,
                &format!(
                    "the trampoline {} is not there (set --trampoline or \
                     BROWSER_SHELL_TRAMPOLINE to hardening-trampoline, built beside browser-shell)",
                    path.display()
                ),
            )?;
            hardening::Trampoline::pinned(path, policy)
                .with_context(|| format!("cannot open the trampoline {}", path.display()))
        }
        None => hardening::Trampoline::new("/proc/self/exe", policy)
            .context("cannot serialise the confinement policy"),
    }
}

/// A script (the npm package's Node shim, say) needs an interpreter the
/// confined child cannot reach: name the native binary to use instead.
fn script_hint(path: &Path) -> String {
    if !is_script(path) {
        return String::new();
    }
    let arch = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "x64"
    };
    format!(
        "\n{} is a script (the npm package's Node shim?): its interpreter is outside the \
         confinement. Point --agent-browser at the native binary, \
         node_modules/agent-browser/bin/agent-browser-linux-musl-{arch}",
        path.display()
    )
}

/// Does the file start with `#!`?
fn is_script(path: &Path) -> bool {
    let mut head = [0u8; 2];
    fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| &head == b"#!")
}

/// agent-browser's sockets (`<state>/sock/<name>.sock`) fit the 103 bytes a
/// unix socket path may have; `state` is where this server goes for
/// `--state-dir given` (another live server may hold `given` itself).
fn room_for_sockets(given: &Path, state: &Path) -> anyhow::Result<()> {
    let socket = state.join(SOCKET_DIR);
    let longest = socket.as_os_str().len() + 1 + MAX_DAEMON_NAME_LEN + ".sock".len();
    if longest <= MAX_SOCKET_PATH {
        return Ok(());
    }
    let elsewhere = if state == given {
        String::new()
    } else {
        format!(
            " in {}, where this server goes because another live server uses the dir",
            state.display()
        )
    };
    bail!(
        "--state-dir {} is too long: agent-browser's socket paths would reach {longest} bytes \
         (limit {MAX_SOCKET_PATH}){elsewhere}; use a state dir of at most {} bytes",
        given.display(),
        MAX_SOCKET_PATH
            - (1 + MAX_DAEMON_NAME_LEN + ".sock".len() + "/sock".len())
            - (state.as_os_str().len() - given.as_os_str().len())
    )
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

/// Raise the soft limit on open files to the hard one: each session holds a
/// few descriptors (its gate connection, Chromium's, the child's pipes), and
/// a service manager's default soft limit (1024) would make spawns fail with
/// "Too many open files" long before the gate's own caps
/// (`crate::gate`) are reached. The child gets its own limit (`--child-max-open-files`).
fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    if let Err(e) = setrlimit(Resource::Nofile, raised) {
        tracing::warn!(error = %e, "the soft limit on open files could not be raised");
    }
}
