//! `browser-shell policy reload`: make a running server read its policy
//! file again, and say what it did.
//!
//! A server spawned by an MCP hub has no terminal and an unknown pid, so
//! it leaves a pid file beside its audit log (never in the state dir, which
//! the confined agent-browser may write: a planted pid would aim the
//! signal at any process). This command finds the server there, checks
//! that the pid is a browser-shell `serve`, sends SIGHUP, and reads the
//! answer where it is recorded anyway: the `reloaded` or `reload_refused`
//! record the server appends to its audit log.

use std::{
    fs,
    io::{Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

/// How long to wait for the server's record of the reload.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// `browser-shell policy reload`.
#[derive(Debug, Clone, Args)]
pub(super) struct ReloadArgs {
    /// The running server's audit log (its pid file is `<FILE>.pid`).
    #[arg(
        long,
        env = "BROWSER_SHELL_AUDIT_LOG",
        value_name = "FILE",
        default_value = "/var/log/browser-shell/audit.jsonl"
    )]
    pub audit_log: PathBuf,
}

/// The running server's pid file, removed when it exits.
#[derive(Debug)]
pub(crate) struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Record this process as the server of `audit_log`. Servers side by
    /// side may share one log: the one started last is recorded.
    pub(crate) fn write(audit_log: &Path, policy_file: &Path) -> anyhow::Result<Self> {
        let path = pid_path(audit_log);
        let body = json!({
            "pid": std::process::id(),
            "policy_file": policy_file.display().to_string(),
        });
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        fs::write(&tmp, format!("{body}\n"))
            .and_then(|()| fs::rename(&tmp, &path))
            .with_context(|| format!("cannot write the pid file {}", path.display()))?;
        Ok(Self { path })
    }

    /// At exit: the next `policy reload` must not find a stale pid. Only
    /// while the file still names this process: a server started later
    /// beside it on the same log (which rewrote the file) stays findable.
    pub(crate) fn remove(&self) {
        let ours = fs::read_to_string(&self.path)
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .is_some_and(|v| v["pid"].as_u64() == Some(u64::from(std::process::id())));
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn pid_path(audit_log: &Path) -> PathBuf {
    PathBuf::from(format!("{}.pid", audit_log.display()))
}

/// Signal the server and report its answer; `Ok(false)` when it kept its
/// policy because the file does not load.
pub(super) fn reload(args: &ReloadArgs) -> anyhow::Result<bool> {
    let pid_file = pid_path(&args.audit_log);
    let text = fs::read_to_string(&pid_file).with_context(|| {
        format!(
            "no running browser-shell server found for the audit log {} (cannot read {}); \
             pass the server's --audit-log (or BROWSER_SHELL_AUDIT_LOG)",
            args.audit_log.display(),
            pid_file.display()
        )
    })?;
    let recorded: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a browser-shell pid file", pid_file.display()))?;
    let pid = recorded["pid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .with_context(|| format!("{} names no pid", pid_file.display()))?;
    check_is_server(pid, &pid_file)?;
    if let Some(file) = recorded["policy_file"].as_str() {
        eprintln!("policy file: {file}");
    }
    let mut log = fs::File::open(&args.audit_log)
        .with_context(|| format!("cannot read {}", args.audit_log.display()))?;
    let from = log.seek(SeekFrom::End(0))?;
    let target = rustix::process::Pid::from_raw(pid).context("pid 0 is not a server")?;
    rustix::process::kill_process(target, rustix::process::Signal::HUP)
        .with_context(|| format!("cannot signal the server (pid {pid})"))?;
    let answer = wait_for_answer(&mut log, from, pid)?;
    let outcome = answer["outcome"].as_str().unwrap_or_default();
    let reason = answer["reason"].as_str().unwrap_or_default();
    let sha = answer["policy_sha256"].as_str().unwrap_or_default();
    if outcome == "reloaded" {
        let previous = answer["detail"]["previous_policy_sha256"]
            .as_str()
            .unwrap_or_default();
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "reloaded (pid {pid}): policy {previous} -> {sha}; {reason}"
        )?;
        Ok(true)
    } else {
        eprintln!("NOT reloaded (pid {pid}): {reason}");
        eprintln!("the server keeps policy {sha}; fix the file and run this again");
        Ok(false)
    }
}

/// The pid must be a browser-shell serving process: a stale pid file
/// whose pid was reused must not get a SIGHUP (which ends most programs).
fn check_is_server(pid: i32, pid_file: &Path) -> anyhow::Result<()> {
    let stale = || {
        format!(
            "the server recorded in {} (pid {pid}) is not running; is the server up?",
            pid_file.display()
        )
    };
    let exe = fs::read_link(format!("/proc/{pid}/exe")).with_context(stale)?;
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A rebuilt binary shows as "browser-shell (deleted)".
    if !name.starts_with("browser-shell") {
        bail!("{}: pid {pid} runs {}", stale(), exe.display());
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).with_context(stale)?;
    let is_other_command = cmdline
        .split(|b| *b == 0)
        .nth(1)
        .is_some_and(|arg| matches!(arg, b"policy" | b"audit" | b"hardening"));
    if is_other_command {
        bail!("{}: pid {pid} is not a serving browser-shell", stale());
    }
    Ok(())
}

/// Read the audit log from `from` until the server's reload record appears.
fn wait_for_answer(log: &mut fs::File, from: u64, pid: i32) -> anyhow::Result<Value> {
    let deadline = Instant::now() + ANSWER_WITHIN;
    let mut pending = String::new();
    let mut offset = from;
    loop {
        log.seek(SeekFrom::Start(offset))?;
        let mut chunk = String::new();
        offset += log.read_to_string(&mut chunk)? as u64;
        pending.push_str(&chunk);
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if let Ok(record) = serde_json::from_str::<Value>(&line)
                && record["pid"].as_i64() == Some(i64::from(pid))
                && matches!(
                    record["outcome"].as_str(),
                    Some("reloaded" | "reload_refused")
                )
            {
                return Ok(record);
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the server (pid {pid}) was signalled but recorded no reload within {} s; \
                 see its stderr",
                ANSWER_WITHIN.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
