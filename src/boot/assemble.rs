//! From a checked [`Plan`] to the server's [`Parts`]: the browser gate
//! bound, the children's uids held, agent-browser's confinement prepared and
//! its self-test started (it runs while the rest is built), the audit log
//! and its keys opened, the rules loaded, the runner and the resolver made.
//! `cli` checks the operator's flags and writes the plan; everything the
//! server is built from is built here, in an order that matters: the gate's
//! port goes into the confinement, and every file the server trusts is
//! checked out of the child's reach before any child runs.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context, bail};

use super::child_uids;
use crate::{
    daemons::ChildUids,
    gate::Gate,
    policy::rules,
    runner::{Launch, Runner, RunnerConfig, SelfTest, child_policy},
    server::{Limits, Parts, pool::PoolSettings},
};

/// The file in the state dir naming the last serving gate's port.
const GATE_PORT_MEMO: &str = "gate.port";

/// Remember the serving gate's port for the next server (see
/// [`Plan::bind_gate`]).
pub(crate) fn remember_gate_port(state: &Path, port: u16) -> anyhow::Result<()> {
    let memo = state.join(GATE_PORT_MEMO);
    fs::write(&memo, port.to_string()).with_context(|| format!("cannot write {}", memo.display()))
}

/// agent-browser's private directories under the state dir, made by `cli`.
pub(crate) struct StateDirs {
    pub(crate) state: PathBuf,
    pub(crate) home: PathBuf,
    pub(crate) socket: PathBuf,
    pub(crate) output: PathBuf,
    pub(crate) config_file: PathBuf,
}

/// What confines each agent-browser beyond its own files: the operator's
/// additions and bounds (`crate::runner::child_policy`).
pub(crate) struct ChildBounds {
    pub(crate) extra_read_exec: Vec<PathBuf>,
    pub(crate) max_file_bytes: u64,
    pub(crate) max_open_files: u64,
    pub(crate) allow_degraded: bool,
}

impl ChildBounds {
    /// The confinement of every spawned agent-browser under these bounds
    /// (`crate::runner::child_policy`).
    pub(crate) fn policy(
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
            max_file_bytes: self.max_file_bytes,
            max_open_files: self.max_open_files,
            allow_degraded: self.allow_degraded,
        })
        .map_err(anyhow::Error::msg)
    }
}

/// Where the evidence lives and who may touch it.
pub(crate) struct Evidence {
    pub(crate) audit_log: PathBuf,
    /// The redaction key.
    pub(crate) audit_key: PathBuf,
    /// The key that signs the log's checkpoint.
    pub(crate) checkpoint_key: PathBuf,
    /// `--allow-writable-audit-log`: a log (or key) in the child's reach
    /// is accepted, with a warning.
    pub(crate) allow_in_reach: bool,
    pub(crate) rotation: Option<audit::Rotation>,
}

/// The rules' files and settings, without the redaction key (opened with
/// the audit log) and the gate's port (bound first).
pub(crate) struct RulesFrom {
    pub(crate) policy_file: PathBuf,
    pub(crate) secrets_file: Option<PathBuf>,
    /// Chromium's and the operator's (`--protect-port`).
    pub(crate) protected_ports: Vec<u16>,
    pub(crate) extra_secret_params: Vec<String>,
}

/// Everything the server is built from, as `cli` checked it: paths
/// absolute, dirs made and private, every file the server trusts checked
/// out of the child's reach, the policy parseable.
pub(crate) struct Plan {
    /// agent-browser's binary, canonical.
    pub(crate) agent_browser: PathBuf,
    pub(crate) dirs: StateDirs,
    pub(crate) cdp_port: u16,
    /// `--gate-port` (0: the previous server's, when free, else any).
    pub(crate) gate_port: u16,
    pub(crate) max_tabs: usize,
    pub(crate) child_uids: ChildUids,
    pub(crate) child: ChildBounds,
    /// The trampoline's file, or `None` when this binary is its own.
    pub(crate) trampoline_file: Option<PathBuf>,
    pub(crate) evidence: Evidence,
    pub(crate) rules: RulesFrom,
    pub(crate) idle_timeout_ms: u64,
    pub(crate) limits: Limits,
    pub(crate) pool: PoolSettings,
    pub(crate) max_output_bytes: usize,
    pub(crate) max_image_bytes: u64,
    pub(crate) witness: WitnessPlan,
    /// `--approvals-display`.
    pub(crate) approvals_display: Option<String>,
}

/// `--evidence` and the image store's bounds.
pub(crate) struct WitnessPlan {
    pub(crate) level: crate::evidence::Level,
    pub(crate) bounds: crate::evidence::Bounds,
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

/// What [`Plan::confine`] makes.
struct Confined {
    trampoline: hardening::Trampoline,
    prepared: Arc<hardening::Prepared>,
}

impl Plan {
    /// Build everything, returning as soon as it is built while the confined
    /// self-test may still be running, so that the caller can do its own
    /// preparation meanwhile.
    pub(crate) fn start(self) -> anyhow::Result<Starting> {
        raise_open_files_limit();
        let gate = self.bind_gate()?;
        let dirs = &self.dirs;
        let identities = Arc::new(child_uids::identities(self.child_uids, dirs)?);
        let agent_browser = child_uids::agent_browser_within_reach(
            &self.agent_browser,
            identities.range(),
            &dirs.state,
        )?;
        let Confined {
            trampoline,
            prepared: confinement,
        } = self.confine(&agent_browser, gate.port())?;
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
            idle_timeout_ms: self.idle_timeout_ms,
        }
        .start_self_test(identities.spare())
        .map_err(|e| anyhow::anyhow!("the confined agent-browser does not start: {e}"))?;
        let (audit, key) = self.open_audit()?;
        let rules = self.load_rules(gate.port(), key)?;
        let runner = Runner::new(RunnerConfig {
            agent_browser,
            cdp_port: self.cdp_port,
            gate_port: gate.port(),
            home_dir: dirs.home.clone(),
            socket_dir,
            config_file: dirs.config_file.clone(),
            output_dir: dirs.output.clone(),
            idle_timeout_ms: self.idle_timeout_ms,
            confinement,
            trampoline,
            identities,
        })
        .context("cannot build the HTTP client for Chromium's DevTools")?;
        let resolver = crate::policy::resolve::SystemResolver::new(rules.get().url.dns_timeout)
            .context("cannot keep host-name lookups to glibc's files and dns")?;
        let witnesses = self.witnesses()?;
        let desk = self.desk(&runner)?;
        let (retries, display) = self.approvals()?;
        Ok(Starting {
            parts: Parts {
                gate: Some(gate),
                resolver,
                runner,
                agent_browser_version: String::new(),
                trampoline_file: self.trampoline_file,
                audit,
                rules: Arc::new(rules),
                limits: self.limits,
                output_dir: self.dirs.output,
                max_output_bytes: self.max_output_bytes,
                max_image_bytes: self.max_image_bytes,
                pool: self.pool,
                witnesses,
                desk,
                retries,
                display,
            },
            self_test,
            agent_browser: self.agent_browser,
        })
    }

    /// The key that seals approval questions for 2026-07-28 clients, and
    /// the display approval dialogs are drawn on (empty, as the image's ENV
    /// leaves it: none).
    fn approvals(
        &self,
    ) -> anyhow::Result<(
        crate::approvals::retry::Retries,
        Option<crate::approvals::display::Display>,
    )> {
        let retries = crate::approvals::retry::Retries::new()
            .context("cannot make the key that seals approval questions")?;
        let display = (self.approvals_display.as_deref())
            .filter(|name| !name.is_empty())
            .map(crate::approvals::display::Display::open)
            .transpose()
            .context("cannot draw approval dialogs there (--approvals-display; leave the flag out to ask no one on a display)")?;
        Ok((retries, display))
    }

    /// The operator's desk for approvals, beside the audit log; none when
    /// the confined agent-browser could reach it (the log accepted in its
    /// reach): an approval the agent can write is none, so calls that need
    /// one are refused.
    fn desk(&self, runner: &Runner) -> anyhow::Result<Option<crate::approvals::desk::Desk>> {
        let policy = self.confinement_policy(runner.agent_browser(), runner.gate_port())?;
        let dir = crate::approvals::desk::dir_of(&canonical_in_parent(&self.evidence.audit_log));
        let reachable = policy
            .read_write_paths
            .iter()
            .chain(&policy.read_paths)
            .chain(&policy.read_exec_paths)
            .filter_map(|root| root.canonicalize().ok())
            .any(|root| dir.starts_with(root));
        if reachable {
            tracing::warn!(desk = %dir.display(), "the approvals desk would be in the confined agent-browser's reach: calls that need an approval are refused");
            return Ok(None);
        }
        let desk = crate::approvals::desk::Desk::open(&self.evidence.audit_log)
            .with_context(|| format!("cannot make the approvals desk {}", dir.display()))?;
        Ok(Some(desk))
    }

    /// The evidence service; at `--evidence images` its store beside the
    /// audit log (out of the child's reach, as the log is checked to be).
    fn witnesses(&self) -> anyhow::Result<crate::evidence::Witnesses> {
        let WitnessPlan { level, bounds } = self.witness;
        let store = match level {
            crate::evidence::Level::Images => {
                let log = &self.evidence.audit_log;
                Some(audit::ImageStore::open(log).with_context(|| {
                    format!(
                        "cannot make the image store {}",
                        audit::evidence_dir(log).display()
                    )
                })?)
            }
            _ => None,
        };
        Ok(crate::evidence::Witnesses::new(level, store, bounds))
    }

    /// The confinement of every spawned agent-browser under this plan,
    /// given the gate's port.
    fn confinement_policy(
        &self,
        agent_browser: &Path,
        gate_port: u16,
    ) -> anyhow::Result<hardening::Policy> {
        let dirs = &self.dirs;
        self.child
            .policy(agent_browser, &dirs.state, &dirs.output, gate_port)
    }

    /// agent-browser's confinement, checked against the files the server
    /// trusts (neither key may be in the child's reach), prepared on this
    /// side, and the trampoline that applies it. Before any child runs: a
    /// child (the self-test's, too) can replace what is at those paths, and
    /// a path found missing would fail the start.
    fn confine(&self, agent_browser: &Path, gate_port: u16) -> anyhow::Result<Confined> {
        let policy = self.confinement_policy(agent_browser, gate_port)?;
        let evidence = &self.evidence;
        check_evidence_outside(evidence, &policy, &evidence.audit_key, "--audit-key")?;
        check_evidence_outside(
            evidence,
            &policy,
            &evidence.checkpoint_key,
            "--checkpoint-key",
        )?;
        let trampoline = trampoline_from(self.trampoline_file.as_deref(), &policy)?;
        let prepared = Arc::new(
            hardening::prepare(&policy).context("cannot confine agent-browser on this machine")?,
        );
        Ok(Confined {
            trampoline,
            prepared,
        })
    }

    /// The policy, the secrets and the redaction key, as every call decides
    /// under them; the gate's and Chromium's ports are protected.
    fn load_rules(
        &self,
        gate_port: u16,
        key: audit::Key,
    ) -> Result<rules::Current, rules::LoadError> {
        let RulesFrom {
            policy_file,
            secrets_file,
            protected_ports,
            extra_secret_params,
        } = &self.rules;
        rules::Current::load(rules::Source {
            policy_file: policy_file.clone(),
            secrets_file: secrets_file.clone(),
            protected_ports: std::iter::once(gate_port)
                .chain(protected_ports.iter().copied())
                .collect(),
            extra_secret_params: extra_secret_params.clone(),
            key,
            subcommand_known: crate::call::subcommand_known,
        })
    }

    /// The browser gate's listener: on `--gate-port`, or with 0 on the port
    /// the previous server used (when free), so that the daemons it left
    /// running — which reconnect to the URL they were started with — can be
    /// adopted; otherwise on any free port. Only `serve` remembers the port
    /// ([`remember_gate_port`]).
    fn bind_gate(&self) -> anyhow::Result<Gate> {
        let memo = self.dirs.state.join(GATE_PORT_MEMO);
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
        let watch = self.witness.level != crate::evidence::Level::Off;
        Ok(gate.with_max_tabs(self.max_tabs).watching_pages(watch))
    }

    /// The audit log (writable before any call can run), signing its
    /// checkpoint, and the redaction key, in the directory `cli` made. Two
    /// keys, so that the one a reviewer's check rests on never unmasks typed
    /// text (docs/design.md, Redaction).
    fn open_audit(&self) -> anyhow::Result<(audit::Sink, audit::Key)> {
        let Evidence {
            audit_log,
            audit_key,
            checkpoint_key,
            rotation,
            ..
        } = &self.evidence;
        let key = audit::Key::load_or_create(audit_key).with_context(|| {
            format!(
                "cannot load or create the audit key {}",
                audit_key.display()
            )
        })?;
        // A device (a pipe, /dev/full) keeps no checkpoint, so needs no key
        // beside it: none is made there.
        let device = fs::metadata(audit_log).is_ok_and(|m| !m.is_file());
        let signing = (!device)
            .then(|| audit::SigningKey::load_or_create(checkpoint_key))
            .transpose()
            .with_context(|| {
                format!(
                    "cannot load or create the checkpoint key {}",
                    checkpoint_key.display()
                )
            })?;
        let sink = audit::Sink::open(audit_log, signing, *rotation)
            .with_context(|| "the audit log must be writable before any call can run")?;
        Ok((sink, key))
    }
}

/// The process being audited must not be able to edit the evidence (the
/// log, its checkpoint, lock and rotated files sit beside it) nor read
/// `key` (the redaction key, or the key that signs checkpoints), which
/// `flag` places.
fn check_evidence_outside(
    evidence: &Evidence,
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
    let log = canonical_in_parent(&evidence.audit_log);
    if let Some(root) = writable.iter().find(|root| log.starts_with(root)) {
        if !evidence.allow_in_reach {
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
        && !evidence.allow_in_reach
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
pub(crate) fn executable_file(path: &Path, missing: &str) -> anyhow::Result<()> {
    let meta = fs::metadata(path).context(missing.to_owned())?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        bail!("{} is not an executable file", path.display());
    }
    Ok(())
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
