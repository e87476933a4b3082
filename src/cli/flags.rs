//! Operator configuration: flags with environment equivalents. They are
//! checked (and the state prepared) by [`super::prepare`], at start, so that
//! bad config fails before any JSON-RPC is read.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// The agent-browser native binary to run (the platform build from the
    /// pinned npm package, not the Node shim).
    #[arg(
        long,
        env = "BROWSER_SHELL_AGENT_BROWSER",
        value_name = "PATH",
        default_value = "/usr/local/lib/browser-shell/agent-browser"
    )]
    pub(crate) agent_browser: PathBuf,

    /// The confinement trampoline every agent-browser child starts as: it
    /// confines itself, then execs agent-browser. By default
    /// `hardening-trampoline` beside browser-shell's own binary (built with
    /// it), else browser-shell's own binary, which can act as one but,
    /// larger, is slower to start each child.
    #[arg(long, env = "BROWSER_SHELL_TRAMPOLINE", value_name = "PATH")]
    pub(crate) trampoline: Option<PathBuf>,

    /// Chromium's remote-debugging port on 127.0.0.1. Only browser-shell
    /// connects to it; agent-browser reaches Chromium through the gate.
    #[arg(long, env = "BROWSER_SHELL_CDP_PORT", value_name = "PORT", default_value_t = 9222,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) cdp_port: u16,

    /// Port of the browser gate on 127.0.0.1, the one TCP port agent-browser
    /// may connect to (forced as its `--cdp` WebSocket URL); 0 picks a free
    /// port at start.
    #[arg(
        long,
        env = "BROWSER_SHELL_GATE_PORT",
        value_name = "PORT",
        default_value_t = 0
    )]
    pub(crate) gate_port: u16,

    /// A port of the stack's own services (an MCP hub, an auth service, VNC)
    /// that no URL may reach on a non-public address, whatever the policy
    /// allows; repeatable. Chromium's DevTools port and the gate's are
    /// always protected.
    #[arg(long = "protect-port", env = "BROWSER_SHELL_PROTECT_PORTS", value_name = "PORT",
          value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) protect_ports: Vec<u16>,

    /// Private state of agent-browser: its HOME, its socket dir and its `{}`
    /// config file. Keep it short: socket paths are limited to 103 bytes.
    #[arg(
        long,
        env = "BROWSER_SHELL_STATE_DIR",
        value_name = "DIR",
        default_value = "/tmp/browser-shell-state"
    )]
    pub(crate) state_dir: PathBuf,

    /// Where screenshots are written, one subdirectory per session.
    #[arg(
        long,
        env = "BROWSER_SHELL_OUTPUT_DIR",
        value_name = "DIR",
        default_value = "/tmp/browser-shell"
    )]
    pub(crate) output_dir: PathBuf,

    /// URL policy file (JSON; see deploy/policy/). At the default path and
    /// missing: the safe default (http/https to public addresses only,
    /// about:blank, navigation guard on), said on stderr. Any other path that
    /// does not exist, or an invalid file: the server refuses to start,
    /// naming it.
    #[arg(
        long,
        env = "BROWSER_SHELL_POLICY",
        value_name = "FILE",
        default_value = DEFAULT_POLICY
    )]
    pub(crate) policy: PathBuf,

    /// Operator secrets (JSON, mode 0600, outside the child's reach): names
    /// mapped to values, each bound to the hosts it may be typed into. The
    /// agent writes `{{secret:NAME}}` in `fill`/`type` text and never sees
    /// the value. Reloaded with the policy.
    #[arg(long, env = "BROWSER_SHELL_SECRETS", value_name = "FILE")]
    pub(crate) secrets: Option<PathBuf>,

    /// Append-only JSONL audit log. Every call is recorded here before it
    /// runs; if it cannot be written, calls are refused.
    #[arg(
        long,
        env = "BROWSER_SHELL_AUDIT_LOG",
        value_name = "FILE",
        default_value = "/var/log/browser-shell/audit.jsonl"
    )]
    pub(crate) audit_log: PathBuf,

    /// Secret key for the redaction MACs of typed text (created, 0600, if
    /// missing). Keep it where the confined agent-browser cannot read it; a
    /// reviewer does not need it. Default: the audit log's path with `.key`
    /// appended.
    #[arg(long, env = "BROWSER_SHELL_AUDIT_KEY", value_name = "FILE")]
    pub(crate) audit_key: Option<PathBuf>,

    /// Secret key that signs the audit checkpoint (Ed25519; created, 0600,
    /// if missing); its public half is written beside the log as
    /// `<log>.checkpoint-key.pub`, for `audit verify`. Default: the audit
    /// log's path with `.checkpoint-key` appended.
    #[arg(long, env = "BROWSER_SHELL_CHECKPOINT_KEY", value_name = "FILE")]
    pub(crate) checkpoint_key: Option<PathBuf>,

    /// Rotate the audit log before it grows past this many bytes (the chain
    /// continues into the new file). 0 disables rotation.
    #[arg(long, env = "BROWSER_SHELL_AUDIT_MAX_BYTES", value_name = "BYTES", default_value_t = 100 * 1024 * 1024)]
    pub(crate) audit_max_bytes: u64,

    /// Rotated audit files kept (`audit.jsonl.1` … `.N`); older ones are deleted.
    #[arg(long, env = "BROWSER_SHELL_AUDIT_MAX_FILES", value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) audit_max_files: u32,

    /// Extra query-parameter names whose values are masked in audited URLs
    /// (repeatable; ','-separated in the environment).
    #[arg(
        long,
        env = "BROWSER_SHELL_AUDIT_SECRET_PARAMS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub(crate) audit_secret_param: Vec<String>,

    /// Calls that may run at once across all sessions; one more waits
    /// (bounded by --busy-wait-sec), then is refused as busy.
    #[arg(long, env = "BROWSER_SHELL_MAX_INFLIGHT", value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) max_inflight: u32,

    /// Seconds a call waits for its session's previous call, or for a free
    /// in-flight slot, before it is refused as busy (never queued forever).
    #[arg(long, env = "BROWSER_SHELL_BUSY_WAIT_SEC", value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=600))]
    pub(crate) busy_wait_sec: u64,

    /// Sessions (agent-browser daemons and browser contexts) this server
    /// keeps live; each has at most --max-tabs pages.
    #[arg(long, env = "BROWSER_SHELL_MAX_SESSIONS", value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) max_sessions: u32,

    /// Pages one session may have open at once, its own tab and popups
    /// alike: one more is closed as it opens (audited as `limits.tabs`).
    #[arg(long, env = "BROWSER_SHELL_MAX_TABS", value_name = "N",
          default_value_t = crate::gate::DEFAULT_MAX_TABS as u32,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) max_tabs: u32,

    /// A new session beyond --max-sessions: `refuse` it, or `evict-lru` the
    /// least recently used idle session (audited as evicted).
    #[arg(long, env = "BROWSER_SHELL_SESSION_OVERFLOW", value_enum, default_value_t = OverflowFlag::Refuse)]
    pub(crate) session_overflow: OverflowFlag,

    /// A session idle this long is reaped: daemon stopped, tab closed,
    /// socket files and screenshots removed (audited as reaped).
    #[arg(long, env = "BROWSER_SHELL_SESSION_IDLE_SEC", value_name = "SECONDS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub(crate) session_idle_sec: u64,

    /// When the server stops (its client left, or SIGTERM): `keep` its
    /// sessions' daemons running for the next server started with the same
    /// --state-dir, which adopts them (pages, cookies and refs as they
    /// were; each exits by itself after --idle-timeout-sec if none does),
    /// or `end` them as the reaper would (audited as closed).
    #[arg(long, env = "BROWSER_SHELL_ON_EXIT", value_enum, default_value_t = OnExitFlag::Keep)]
    pub(crate) on_exit: OnExitFlag,

    /// Bytes of screenshots one session keeps; before each screenshot the
    /// oldest go first so one more fits.
    #[arg(long, env = "BROWSER_SHELL_OUTPUT_QUOTA_SESSION_BYTES", value_name = "BYTES", default_value_t = 256 * 1024 * 1024)]
    pub(crate) output_quota_session_bytes: u64,

    /// Bytes of screenshots all sessions together keep.
    #[arg(long, env = "BROWSER_SHELL_OUTPUT_QUOTA_TOTAL_BYTES", value_name = "BYTES", default_value_t = 2 * 1024 * 1024 * 1024)]
    pub(crate) output_quota_total_bytes: u64,

    /// On SIGTERM: new calls are refused at once; calls in flight get this
    /// many seconds to finish, then are cancelled (and audited as such).
    #[arg(long, env = "BROWSER_SHELL_SHUTDOWN_GRACE_SEC", value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=600))]
    pub(crate) shutdown_grace_sec: u64,

    /// Largest file the confined agent-browser (and its daemon) may write,
    /// e.g. one screenshot (RLIMIT_FSIZE).
    #[arg(long, env = "BROWSER_SHELL_CHILD_MAX_FILE_BYTES", value_name = "BYTES", default_value_t = 64 * 1024 * 1024)]
    pub(crate) child_max_file_bytes: u64,

    /// Open files the confined agent-browser (and its daemon) may hold
    /// (RLIMIT_NOFILE). Core dumps are always off (RLIMIT_CORE 0).
    #[arg(long, env = "BROWSER_SHELL_CHILD_MAX_OPEN_FILES", value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(64..=1_048_576))]
    pub(crate) child_max_open_files: u64,

    /// Also write the server's diagnostics (not the audit trail) to a daily
    /// rolling file `browser-shell.log` in this directory.
    #[arg(long, env = "BROWSER_SHELL_DIAGNOSTICS_DIR", value_name = "DIR")]
    pub(crate) diagnostics_dir: Option<PathBuf>,

    /// Seconds an idle agent-browser daemon lives before it exits by itself.
    #[arg(long, env = "BROWSER_SHELL_IDLE_TIMEOUT_SEC", value_name = "SECONDS",
          default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub(crate) idle_timeout_sec: u64,

    /// Run agent-browser with less than full confinement when the kernel
    /// lacks Landlock ABI 6 or seccomp; every audit record then carries the
    /// degraded status. Without this flag such a kernel refuses to start.
    #[arg(long, env = "BROWSER_SHELL_ALLOW_DEGRADED_CONFINEMENT")]
    pub(crate) allow_degraded_confinement: bool,

    /// The uids agent-browser's children run as, one per session's daemon,
    /// so that a compromised child cannot reach another session's gate
    /// connection, socket, processes or files. `auto`: a free block of 4096
    /// from 2100000000 up when the server runs as root, else off (said at
    /// start). FIRST-LAST: this range, which no other server may hold. `off`:
    /// every child runs as the server's user (sessions then share those routes).
    #[arg(long, env = "BROWSER_SHELL_CHILD_UIDS", value_name = "auto|off|FIRST-LAST",
          default_value = "auto", value_parser = crate::daemons::ChildUids::parse)]
    pub(crate) child_uids: crate::daemons::ChildUids,

    /// Accept an audit log inside a directory the confined agent-browser may
    /// write (such as /tmp). Without this flag that refuses to start: the
    /// process being audited must not be able to touch the evidence.
    #[arg(long, env = "BROWSER_SHELL_ALLOW_WRITABLE_AUDIT_LOG")]
    pub(crate) allow_writable_audit_log: bool,

    /// Start even when a file the unconfined server trusts (the agent-browser
    /// binary, browser-shell's own binary, the policy file, the audit keys)
    /// lies where the confined agent-browser may write: /tmp, the state dir
    /// or the output dir. Without this flag that refuses to start: the child
    /// could replace such a file and steer the server, at once or at its
    /// next start. With it, each such file is named in a warning on stderr.
    #[arg(long, env = "BROWSER_SHELL_ALLOW_CHILD_WRITABLE_INPUTS")]
    pub(crate) allow_child_writable_inputs: bool,

    /// Extra directories the confined agent-browser may read and execute
    /// (repeatable; ':'-separated in the environment). Needed only for a
    /// dynamically linked build or a test stand-in.
    #[arg(
        long,
        env = "BROWSER_SHELL_EXTRA_READ_EXEC",
        value_name = "DIR",
        value_delimiter = ':'
    )]
    pub(crate) extra_read_exec: Vec<PathBuf>,

    /// Most bytes of stdout and of stderr returned per call (the rest is cut
    /// with a marker).
    #[arg(long, env = "BROWSER_SHELL_MAX_OUTPUT_BYTES", value_name = "BYTES",
          default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1024..=10_000_000))]
    pub(crate) max_output_bytes: u64,

    /// Most bytes (as base64) of the PNG image a `screenshot` reply carries;
    /// a larger screenshot is shrunk to fit, or left out, and the reply's
    /// stderr says which. 0: no image, only the path.
    #[arg(long, env = "BROWSER_SHELL_MAX_IMAGE_BYTES", value_name = "BYTES",
          default_value_t = 4 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(0..=64 * 1024 * 1024))]
    pub(crate) max_image_bytes: u64,

    /// Daemons kept ready, each on a fresh about:blank tab of its own, so a
    /// new session's first call does not wait for one to start (each is a
    /// process and a visible tab beyond --max-sessions). `auto`: none before
    /// the first new session, then at least one, growing with the new
    /// sessions seen within 2 s up to --max-sessions and half the memory
    /// the server can see. N (1-64): exactly N, warmed at start. 0: no pool.
    #[arg(long, env = "BROWSER_SHELL_POOL", value_name = "auto|N", default_value = "auto",
          value_parser = parse_pool)]
    pub(crate) pool: PoolFlag,

    /// When no new session has taken a pooled daemon for this long, a
    /// pinned pool's daemons and tabs are closed until the next new session,
    /// and an `auto` pool falls back to one.
    #[arg(long, env = "BROWSER_SHELL_POOL_IDLE_SEC", value_name = "SECONDS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub(crate) pool_idle_sec: u64,

    /// What a call that can change the page (open, click, fill, press, …)
    /// leaves in the audit trail, recorded after its reply: `digests`, the
    /// page's URL and title before and after and the element acted on;
    /// `images`, also a small image of the page before and after (fields
    /// holding a secret blacked out; a page showing one is withheld), kept
    /// beside the log under its SHA-256 and checked by `audit verify`. The
    /// default costs no measurable time (docs/benchmarks.md, "Evidence per
    /// action").
    #[arg(
        long,
        env = "BROWSER_SHELL_EVIDENCE",
        value_name = "off|digests|images",
        value_enum,
        default_value = "digests"
    )]
    pub(crate) evidence: crate::evidence::Level,

    /// Most mebibytes of images one session may add to the evidence store;
    /// past it, its images are recorded as withheld.
    #[arg(long, env = "BROWSER_SHELL_EVIDENCE_SESSION_MB", value_name = "MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub(crate) evidence_session_mb: u64,

    /// Most mebibytes of images the evidence store may hold in all.
    #[arg(long, env = "BROWSER_SHELL_EVIDENCE_MAX_MB", value_name = "MIB", default_value_t = 2048,
          value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
    pub(crate) evidence_max_mb: u64,

    /// The X display (e.g. `:99`) on which a dialog asks for approvals, for
    /// whoever watches it and may click (the stack's VNC): the policy's
    /// `display` channel. Reached once at start; a wrong one stops it, and
    /// so does one that lets in clients without a cookie (XAUTHORITY names
    /// browser-shell's): a confined agent-browser could click Approve there.
    #[arg(long, env = "BROWSER_SHELL_APPROVALS_DISPLAY", value_name = "DISPLAY")]
    pub(crate) approvals_display: Option<String>,
}

/// Where the policy file is when no `--policy` names one.
pub(crate) const DEFAULT_POLICY: &str = crate::policy::url_policy::DEFAULT_PATH;

/// `--session-overflow`, as the command line spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OverflowFlag {
    Refuse,
    EvictLru,
}

/// `--pool`, as the command line spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolFlag {
    Auto,
    Pinned(u32),
}

impl PoolFlag {
    /// The pool's size: `auto` is capped by `max_sessions`.
    pub(crate) fn size(self, max_sessions: usize) -> crate::server::pool_size::PoolSize {
        use crate::server::pool_size::PoolSize;
        match self {
            Self::Auto => PoolSize::Auto { cap: max_sessions },
            Self::Pinned(n) => PoolSize::Pinned(n as usize),
        }
    }
}

fn parse_pool(text: &str) -> Result<PoolFlag, String> {
    if text.eq_ignore_ascii_case("auto") {
        return Ok(PoolFlag::Auto);
    }
    match text.parse::<u32>() {
        Ok(n) if n <= 64 => Ok(PoolFlag::Pinned(n)),
        _ => Err(format!(
            "{text:?} is not a pool size: say `auto` (sized by the new sessions it sees), \
             a number of daemons from 1 to 64, or 0 for no pool"
        )),
    }
}

/// `--on-exit`, as the command line spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OnExitFlag {
    Keep,
    End,
}

impl From<OnExitFlag> for crate::server::registry::OnExit {
    fn from(flag: OnExitFlag) -> Self {
        match flag {
            OnExitFlag::Keep => Self::Keep,
            OnExitFlag::End => Self::End,
        }
    }
}

impl From<OverflowFlag> for crate::server::registry::Overflow {
    fn from(flag: OverflowFlag) -> Self {
        match flag {
            OverflowFlag::Refuse => Self::Refuse,
            OverflowFlag::EvictLru => Self::EvictLru,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn the_overflow_settings_are_spelled_alike_on_the_command_line_and_in_records() {
        for flag in OverflowFlag::value_variants() {
            let name = flag.to_possible_value().map(|v| v.get_name().to_owned());
            let setting: crate::server::registry::Overflow = (*flag).into();
            assert_eq!(name.as_deref(), Some(setting.name()));
        }
        for flag in OnExitFlag::value_variants() {
            let name = flag.to_possible_value().map(|v| v.get_name().to_owned());
            let setting: crate::server::registry::OnExit = (*flag).into();
            assert_eq!(name.as_deref(), Some(setting.name()));
        }
    }
}
