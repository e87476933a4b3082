//! `browser-shell policy reload`: make a running server read its policy
//! file again, and say what it did.
//!
//! A server spawned by an MCP hub has no terminal and an unknown pid, so
//! it lists itself in a pid file beside its audit log (servers side by side
//! may share the log, and each is signalled) (never in the state dir, which
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
    /// The running server's audit log (its pid file `<FILE>.pid` and its
    /// approvals desk `<FILE>.approvals/` lie beside it).
    #[arg(
        long,
        env = "BROWSER_SHELL_AUDIT_LOG",
        value_name = "FILE",
        default_value = "/var/log/browser-shell/audit.jsonl"
    )]
    pub audit_log: PathBuf,
}

/// The live servers of an audit log, in the pid file beside it: servers
/// side by side may share one log, and a reload is for each of them.
#[derive(Debug)]
pub(crate) struct PidFile {
    path: PathBuf,
}

/// One server, as the pid file lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Listed {
    pid: u32,
    policy_file: String,
}

impl PidFile {
    /// Add this process to the servers of `audit_log` (dropping any that
    /// are gone).
    pub(crate) fn write(audit_log: &Path, policy_file: &Path) -> anyhow::Result<Self> {
        let path = pid_path(audit_log);
        let me = Listed {
            pid: std::process::id(),
            policy_file: policy_file.display().to_string(),
        };
        update(&path, |servers| servers.push(me))
            .with_context(|| format!("cannot write the pid file {}", path.display()))?;
        Ok(Self { path })
    }

    /// At exit: the next `policy reload` must not find a stale pid, nor
    /// lose a server that still runs beside this one.
    pub(crate) fn remove(&self) {
        let me = std::process::id();
        if let Err(e) = update(&self.path, |servers| servers.retain(|s| s.pid != me)) {
            tracing::warn!(error = %e, file = %self.path.display(), "this server could not take itself off the pid file");
        }
    }
}

/// Change the list in the pid file under its lock (every server and
/// `policy reload` take it), keeping only servers that still run; the
/// file goes when none is left.
fn update(path: &Path, change: impl FnOnce(&mut Vec<Listed>)) -> std::io::Result<()> {
    let mut file = crate::sync::open_lock_file(path)?;
    file.lock()?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut servers: Vec<Listed> = listed(&text)
        .into_iter()
        .filter(|s| runs_a_server(s.pid))
        .collect();
    change(&mut servers);
    if servers.is_empty() {
        return fs::remove_file(path);
    }
    let body = serde_json::to_string(&json!({ "servers": servers }))?;
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(format!("{body}\n").as_bytes())
}

/// The servers a pid file lists (`{"servers": [...]}`, or one server's
/// `{"pid": N, "policy_file": F}` as an older server wrote it).
fn listed(text: &str) -> Vec<Listed> {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    match value.get("servers") {
        Some(servers) => serde_json::from_value(servers.clone()).unwrap_or_default(),
        None => serde_json::from_value(value)
            .map(|one| vec![one])
            .unwrap_or_default(),
    }
}

fn runs_a_server(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| check_is_server(pid, Path::new("the pid file")).is_ok())
}

fn pid_path(audit_log: &Path) -> PathBuf {
    PathBuf::from(format!("{}.pid", audit_log.display()))
}

/// Signal every server of the log and report each one's answer; `Ok(false)`
/// when one kept its policy because the file does not load.
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
    let servers = listed(&text);
    if servers.is_empty() {
        bail!("{} names no server", pid_file.display());
    }
    let mut all = true;
    let mut reached = 0;
    for server in &servers {
        let pid = i32::try_from(server.pid).context("a pid out of range")?;
        if let Err(e) = check_is_server(pid, &pid_file) {
            eprintln!("{e:#}");
            continue;
        }
        eprintln!("policy file: {}", server.policy_file);
        all &= reload_one(&args.audit_log, pid)?;
        reached += 1;
    }
    if reached == 0 {
        bail!(
            "no server listed in {} is running; is the server up?",
            pid_file.display()
        );
    }
    Ok(all)
}

/// Signal the server `pid` and report its answer, read from the log.
fn reload_one(audit_log: &Path, pid: i32) -> anyhow::Result<bool> {
    let mut log = fs::File::open(audit_log)
        .with_context(|| format!("cannot read {}", audit_log.display()))?;
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
