//! The audit event schema, version 1.

use serde::Serialize;
use serde_json::Value;

/// Schema identifier carried by every record.
pub const SCHEMA: &str = "browser-shell.audit/1";

/// Which stage of a call a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Phase {
    /// Written and synced before the action runs.
    Intent,
    /// Written after the action finished (or failed to start).
    Outcome,
    /// A call refused before anything ran: the only record of that call.
    Denied,
    /// Something the server did to a session on its own: an idle session
    /// reaped, a session evicted for room, an orphaned daemon adopted or
    /// closed at start (`outcome` says which).
    Lifecycle,
    /// The log was rotated: the first record the sink writes after the
    /// records that started the new file. `kept_from_seq` is the oldest
    /// record still on disk; `reason` says which file was dropped, if any.
    Rotation,
    /// What the page looked like before and after a call that can change
    /// it (`evidence`), written after the call's outcome and sharing its
    /// `call_id`.
    Evidence,
    /// A person's yes asked for before a call runs (`outcome`: requested,
    /// then granted, denied or expired; `approval` holds what was shown,
    /// its digest, the channel and who answered), sharing the call's
    /// `call_id` and written before its intent.
    Approval,
}

/// Whether browser-shell let a call run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// It passed validation and policy; its intent was written.
    Allowed,
    /// It was refused; nothing ran.
    Denied,
}

/// How a call, or something the server did to a session, ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// agent-browser ran the command and reported success.
    Ok,
    /// agent-browser ran and reported a failure (or died of a signal).
    Error,
    /// The call ran out of its timeout; its processes were killed.
    Timeout,
    /// The client (or the server's shutdown) cancelled the call.
    Cancelled,
    /// agent-browser could not be started (or its confinement refused).
    SpawnFailed,
    /// The intent could not be made durable; the command was withheld.
    AuditUnavailable,
    /// The page ended up somewhere the policy refuses.
    NavigationBlocked,
    /// The page could not be read (usually: the daemon cannot reach the
    /// browser), so it is not known to be allowed; the reply was withheld.
    PageUnreadable,
    /// A check that needs the page refused the command after its intent
    /// (a secret's hosts; `rule` and `reason` say which); nothing ran.
    Refused,
    /// Lifecycle: an idle session was ended.
    Reaped,
    /// Lifecycle: a session was ended to make room for a new one.
    Evicted,
    /// Lifecycle: a confined daemon found at start was taken over.
    Adopted,
    /// Lifecycle: the server ended a daemon on its own: an unconfined one
    /// (or one it cannot use) found at start, a pooled one, or every
    /// session as it stopped with `--on-exit end`.
    Closed,
    /// Lifecycle: ending a session left something behind (see `reason`).
    RetireIncomplete,
    /// Lifecycle: the server started (`detail`: versions, digests, policy,
    /// limits, confinement, OTLP).
    Started,
    /// Lifecycle: the server stopped (`reason`; `detail`: calls served).
    Stopped,
    /// Lifecycle: the policy was reloaded (`detail`: old and new digests,
    /// the new policy).
    Reloaded,
    /// Lifecycle: a reload was asked for but the file did not load; the
    /// policy in force stays (`reason` says why).
    ReloadRefused,
    /// Lifecycle: a pooled daemon and its tab are being started (durable
    /// before they start; `detail.daemon` names it).
    Warming,
    /// Lifecycle: a pooled daemon is ready (`detail`: daemon, tab, pid).
    Pooled,
    /// Lifecycle: a new session was bound to a pooled daemon (`session_id`;
    /// `detail`: daemon, tab, pid), before its first command's intent.
    Bound,
    /// Lifecycle: images were taken out of the evidence store to keep it
    /// under its bound (`evidence.dropped` names them), synced before they
    /// were deleted.
    ImagesDropped,
    /// Approval: a person was asked; the call waits for the answer.
    Requested,
    /// Approval: a person said yes to exactly what was shown.
    Granted,
    /// Approval: a person said no (or answered for something else); the
    /// call is refused.
    #[serde(rename = "denied")]
    Declined,
    /// Approval: no answer came in time; the call is refused.
    Expired,
}

/// One audit record. Fields left `None` are omitted from the JSON line.
///
/// `seq`, `time`, `prev_hash` and `hash` are filled in by the sink under its
/// lock, so the order they prove is the order of the file.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Event {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Unique id of this record (UUIDv7: time-ordered).
    pub id: String,
    /// The stage this record describes.
    pub phase: Phase,
    /// Identifies the call; the intent and outcome of one call share it.
    pub call_id: String,
    /// The agent's session id, when it was well-formed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The tool name the client asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The JSON-RPC request id, as a string.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// MCP client name and version, when the client said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The argv with free-text arguments redacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<Value>>,
    /// Keyed MAC (HMAC-SHA256) of the unredacted argv: proves which exact
    /// command ran to someone who holds the candidate and the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv_mac: Option<String>,
    /// Whether the call was let through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The rule that decided a denial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Human-readable reason of a denial or failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The reply's exit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Wall time of the call so far, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// Bytes the child wrote to stdout (contents are never logged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_bytes: Option<u64>,
    /// Bytes the child wrote to stderr.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_bytes: Option<u64>,
    /// Outcome records: bytes of the reply's `stdout`, exactly as the agent
    /// was shown it (after normalisation and truncation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_stdout_bytes: Option<u64>,
    /// SHA-256 (hex) of the reply's `stdout`: evidence of what the agent was
    /// shown, never its contents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_stdout_sha256: Option<String>,
    /// Outcome records of screenshots: `attached`, `downscaled` (over the
    /// image bound) or `omitted` (with the reason in the reply's stderr).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_action: Option<String>,
    /// Bytes of the PNG image the reply carried (decoded from base64).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_bytes: Option<u64>,
    /// SHA-256 (hex) of that PNG.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_sha256: Option<String>,
    /// Outcome records: the page URL the navigation guard read when the
    /// command ended, redacted like every URL in the log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_url: Option<String>,
    /// The confinement the spawned process actually ran under (Landlock ABI
    /// and status, seccomp, capabilities, uid, `degraded`), on records of
    /// calls that spawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confinement: Option<Value>,
    /// W3C trace id of the call's span (hex), when traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The call's span id (hex), when traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// Rotation records: the `seq` of the oldest record still on disk (the
    /// ones before it were deleted by the retention of rotated files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_from_seq: Option<u64>,
    /// SHA-256 of the effective URL policy the call was decided under (its
    /// full text is in the server's `started`/`reloaded` lifecycle records).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_sha256: Option<String>,
    /// Structured facts of a server lifecycle record (see [`Outcome`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    /// Evidence records: the page before and after the call (`before`,
    /// `after`: URL, title, and the stored image's `sha256` and `bytes`, or
    /// why no image was kept) and the element acted on (`element`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Value>,
    /// Approval records, and the intent of a call that rests on one: the
    /// approval's id, what was shown (and its SHA-256), the channel, and
    /// who answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
    /// Refusals of the browser gate and egress: who made the refused
    /// request, where it can be known (`agent-browser`, `page`), else
    /// `unknown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
    /// Refusals of a request: where it was going (`hostname`, `port`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<Value>,
    /// Addresses the URL's host resolved to, when a URL was checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Vec<String>>,
    /// Host name of the machine that wrote the record.
    pub host: String,
    /// Producer, e.g. `browser-shell/0.1.0`.
    pub producer: String,
    /// Process id of the server that wrote the record.
    pub pid: u32,
}

impl Event {
    /// A record of `phase` for the call `call_id`, everything else unset.
    pub fn new(phase: Phase, call_id: impl Into<String>) -> Self {
        Self {
            schema: SCHEMA,
            id: uuid::Uuid::now_v7().to_string(),
            phase,
            call_id: call_id.into(),
            session_id: None,
            tool: None,
            request_id: None,
            client: None,
            argv: None,
            argv_mac: None,
            verdict: None,
            rule: None,
            reason: None,
            outcome: None,
            exit_code: None,
            duration_ms: None,
            stdout_bytes: None,
            stderr_bytes: None,
            reply_stdout_bytes: None,
            reply_stdout_sha256: None,
            image_action: None,
            image_bytes: None,
            image_sha256: None,
            page_url: None,
            confinement: None,
            trace_id: None,
            span_id: None,
            requester: None,
            destination: None,
            resolved: None,
            kept_from_seq: None,
            policy_sha256: None,
            detail: None,
            evidence: None,
            approval: None,
            host: host_name(),
            producer: format!("browser-shell/{}", env!("CARGO_PKG_VERSION")),
            pid: std::process::id(),
        }
    }
}

fn host_name() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default()
    })
    .clone()
}

/// The phase a stored record counts as. Servers before the lifecycle
/// phase for pool warm-ups wrote them as intents (`outcome: "warming"`):
/// a warm-up is the server's own act, never a call, so it counts as a
/// lifecycle record, and no count of calls without an outcome includes it.
pub(crate) fn counted_phase<'a>(phase: Option<&'a str>, outcome: Option<&str>) -> Option<&'a str> {
    match (phase?, outcome) {
        ("intent", Some("warming")) => Some("lifecycle"),
        (phase, _) => Some(phase),
    }
}

/// [`counted_phase`] of a record.
pub(crate) fn phase_of(record: &Value) -> Option<&str> {
    counted_phase(
        record.get("phase").and_then(Value::as_str),
        record.get("outcome").and_then(Value::as_str),
    )
}

/// Who a refusal rule's `denied` record speaks for: the browser side, as
/// the gate saw it (`cdp.*`, what agent-browser asked Chromium for;
/// `request.blocked`, what a page asked for), or the MCP client's call.
/// By exact rule, not prefix: `request.invalid` is the call layer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusedFor {
    AgentBrowser,
    WebPage,
    Call,
}

pub(crate) fn refused_for(rule: &str) -> RefusedFor {
    if rule.starts_with("cdp.") {
        RefusedFor::AgentBrowser
    } else if rule == "request.blocked" {
        RefusedFor::WebPage
    } else {
        RefusedFor::Call
    }
}
