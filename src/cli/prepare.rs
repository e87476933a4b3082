//! Checking the operator's configuration: agent-browser's binary, the
//! private state directories (made here), every file the server trusts out
//! of the child's reach, the policy parseable, the audit log's directory;
//! then the [`Plan`] the server is built from (`crate::boot::assemble`).

use std::{
    fs,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, bail};

use super::{flags::ServeArgs, instance};
use crate::{
    boot::assemble::{
        ChildBounds, Evidence, Plan, RulesFrom, Starting, StateDirs, executable_file,
    },
    policy::{outputs::Quota, url_policy::UrlPolicy},
    runner::child_policy::{self, CONFIG_FILE, HOME_DIR, SOCKET_DIR},
    server::{Limits, Parts},
    session_id::MAX_DAEMON_NAME_LEN,
};

/// Longest unix socket path agent-browser can bind.
const MAX_SOCKET_PATH: usize = 103;

impl ServeArgs {
    /// Check the configuration and build everything the server is built from.
    pub(crate) fn prepare(&self) -> anyhow::Result<Parts> {
        self.start()?.finish()
    }

    /// [`ServeArgs::prepare`], returning as soon as everything is built
    /// while the confined self-test may still be running.
    pub(crate) fn start(&self) -> anyhow::Result<Starting> {
        self.plan()?.start()
    }

    /// The configuration, checked, as the plan the server is built from.
    pub(crate) fn plan(&self) -> anyhow::Result<Plan> {
        let (agent_browser, dirs) = self.checked_inputs()?;
        self.say_when_default_policy();
        Ok(Plan {
            agent_browser,
            dirs,
            cdp_port: self.cdp_port,
            gate_port: self.gate_port,
            max_tabs: self.max_tabs as usize,
            child_uids: self.child_uids,
            child: self.child_bounds(),
            trampoline_file: self.trampoline_file()?,
            evidence: Evidence {
                audit_log: self.audit_log.clone(),
                audit_key: self.audit_key_path(),
                checkpoint_key: self.checkpoint_key_path(),
                allow_in_reach: self.allow_writable_audit_log,
                rotation: (self.audit_max_bytes > 0).then_some(audit::Rotation {
                    max_bytes: self.audit_max_bytes,
                    max_files: self.audit_max_files,
                }),
            },
            rules: RulesFrom {
                policy_file: self.policy.clone(),
                secrets_file: self.secrets.clone(),
                protected_ports: std::iter::once(self.cdp_port)
                    .chain(self.protect_ports.iter().copied())
                    .collect(),
                extra_secret_params: self.audit_secret_param.clone(),
            },
            idle_timeout_ms: self.idle_timeout_sec * 1000,
            limits: self.limits(),
            pool: self.pool_settings(),
            max_output_bytes: usize::try_from(self.max_output_bytes).unwrap_or(usize::MAX),
            max_image_bytes: self.max_image_bytes,
            witness: crate::boot::assemble::WitnessPlan {
                level: self.evidence,
                bounds: crate::evidence::Bounds {
                    per_session: self.evidence_session_mb << 20,
                    total: self.evidence_max_mb << 20,
                },
            },
            approvals_display: self.approvals_display.clone(),
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

    fn pool_settings(&self) -> crate::server::pool::PoolSettings {
        crate::server::pool::PoolSettings {
            size: self.pool.size(self.max_sessions as usize),
            idle: Duration::from_secs(self.pool_idle_sec),
        }
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

    /// What confines each agent-browser beyond its own files, from the flags.
    fn child_bounds(&self) -> ChildBounds {
        ChildBounds {
            extra_read_exec: self.extra_read_exec.clone(),
            max_file_bytes: self.child_max_file_bytes,
            max_open_files: self.child_max_open_files,
            allow_degraded: self.allow_degraded_confinement,
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
        self.child_bounds()
            .policy(agent_browser, state_dir, output_dir, gate_port)
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
