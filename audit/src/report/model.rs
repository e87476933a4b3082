//! What a report holds: one row per call or event, the servers and
//! policies seen, per-session summaries and totals. Every value is as the
//! log has it (raw); renderers escape.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::integrity::Integrity;

/// One line of the timeline: a call (its intent joined with its outcome),
/// a refusal, a browser-gate refusal, or something the server did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// `seq` of the row's first record (a call's intent).
    pub seq: Option<u64>,
    /// `seq` of the record that concluded it (a call's outcome).
    pub end_seq: Option<u64>,
    /// Time of the first record.
    pub time: String,
    /// `call` (allowed: intent and outcome), `refusal` (a refused call),
    /// `gate` (the browser gate refused something a page or the child
    /// asked), `session` (the server ended or adopted a session), `server`
    /// (started, reloaded, stopped), `rotation`.
    pub kind: String,
    /// The session, or empty.
    pub session: String,
    /// The call id shared by the row's records.
    pub call_id: String,
    /// `argv[0]`, the lifecycle outcome of an event, or `-`.
    pub subcommand: String,
    /// The argv as logged (redacted), one item each: strings as they are,
    /// redacted free text as `{"redacted": true, "len", "mac", "secrets"?}`.
    pub argv: Vec<Value>,
    /// `allowed`, `denied`, or empty for events.
    pub verdict: String,
    /// The refusing rule.
    pub rule: Option<String>,
    /// The refusal's reason, why a call failed, or what an event was.
    pub reason: Option<String>,
    /// How a call ended (`ok`, `error`, `navigation_blocked`, …) or the
    /// event (`started`, `reaped`, …); none for an intent without outcome.
    pub outcome: Option<String>,
    /// The reply's exit code.
    pub exit_code: Option<i64>,
    /// Wall time in ms.
    pub duration_ms: Option<f64>,
    /// The page the command ended on (redacted).
    pub page_url: Option<String>,
    /// Addresses a checked URL resolved to.
    pub resolved: Vec<String>,
    /// HMAC of the unredacted argv.
    pub argv_mac: Option<String>,
    /// Size of the reply's stdout.
    pub reply_stdout_bytes: Option<u64>,
    /// SHA-256 of the reply's stdout.
    pub reply_stdout_sha256: Option<String>,
    /// `attached`, `downscaled` or `omitted`.
    pub image_action: Option<String>,
    /// Size of the image the reply carried.
    pub image_bytes: Option<u64>,
    /// SHA-256 of that image.
    pub image_sha256: Option<String>,
    /// The policy the row was decided under.
    pub policy_sha256: Option<String>,
    /// The MCP client.
    pub client: Option<String>,
    /// A browser refusal's: who made the refused request (`agent-browser`,
    /// `page`, `unknown`).
    pub requester: Option<String>,
    /// Host and pid of the server that wrote it.
    pub host: String,
    /// Process id of that server.
    pub pid: Option<u64>,
    /// Why a reviewer should look: `alert` (refusals, blocks) or `warn`
    /// (failures, no outcome), with a label that says so in words.
    pub flag: Option<Flag>,
    /// A call's `evidence` record: the page before and after, the element.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Value>,
}

/// What makes a row stand out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flag {
    /// `alert` or `warn`.
    pub level: &'static str,
    /// E.g. `DENIED`, `NAVIGATION BLOCKED`, `REQUEST BLOCKED`, `NO OUTCOME`.
    pub label: String,
}

/// One browser-shell server process seen in the log.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Server {
    /// Machine.
    pub host: String,
    /// Process id.
    pub pid: Option<u64>,
    /// `browser-shell/<version>` as its records say.
    pub producer: Option<String>,
    /// When its `started` record was written.
    pub started: Option<String>,
    /// When its `stopped` record was written.
    pub stopped: Option<String>,
    /// Why it stopped.
    pub stop_reason: Option<String>,
    /// Calls it served, as its `stopped` record says.
    pub calls_served: Option<u64>,
    /// browser-shell version and binary SHA-256.
    pub version: Option<String>,
    /// SHA-256 of the browser-shell binary.
    pub sha256: Option<String>,
    /// agent-browser path.
    pub agent_browser_path: Option<String>,
    /// agent-browser version.
    pub agent_browser_version: Option<String>,
    /// SHA-256 of the agent-browser binary.
    pub agent_browser_sha256: Option<String>,
    /// The trampoline every child started as: its file, or
    /// `browser-shell's own binary`.
    pub trampoline_path: Option<String>,
    /// SHA-256 of the trampoline as the server opened it.
    pub trampoline_sha256: Option<String>,
    /// The confinement it applied, in short.
    pub confinement: Option<String>,
    /// Whether it copied records to OTLP.
    pub otlp: Option<bool>,
    /// Its first and last record in the files.
    pub first: String,
    /// Time of its last record.
    pub last: String,
    /// Records it wrote.
    pub records: u64,
}

/// One URL policy seen, by digest.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Policy {
    /// SHA-256 of the effective policy (canonical JSON).
    pub sha256: String,
    /// `file` or `default`.
    pub source: Option<String>,
    /// The policy file.
    pub file: Option<String>,
    /// SHA-256 of that file.
    pub file_sha256: Option<String>,
    /// The effective policy, as a `started`/`reloaded` record holds it
    /// (absent: no such record in the files).
    pub effective: Option<Value>,
    /// When it came into force, was replaced, or was kept over a bad file.
    pub events: Vec<String>,
    /// Calls, refusals and gate refusals decided under it.
    pub decided: u64,
}

/// Where calls went: origins reached and origins refused, each with how
/// many rows went there (see `counts::destination`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Destinations {
    /// Origins of the pages calls ended on (or an `ok` open's URL).
    pub reached: BTreeMap<String, u64>,
    /// Origins refused: refused opens, blocked requests, blocked navigations.
    pub refused: BTreeMap<String, u64>,
}

/// One session in short. The refusal counts are those of `counts`:
/// `refusals = denied + refused + gate_refusals`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionSummary {
    /// Calls (allowed and denied).
    pub calls: u64,
    /// Allowed calls (those refused while they ran included).
    pub allowed: u64,
    /// Calls refused before they ran.
    pub denied: u64,
    /// Allowed calls refused while they ran (outcome `refused` or
    /// `navigation_blocked`).
    pub refused: u64,
    /// Refusals of the browser gate and the egress proxy.
    pub gate_refusals: u64,
    /// Every refusal: `denied + refused + gate_refusals`.
    pub refusals: u64,
    /// Where its calls went.
    pub destinations: Destinations,
    /// Rows flagged `alert`.
    pub alerts: u64,
    /// Rows flagged `warn`.
    pub warnings: u64,
    /// Time of its first row.
    pub first: String,
    /// Time of its last row.
    pub last: String,
}

/// A log file read.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    /// Its path.
    pub file: String,
    /// Its size.
    pub bytes: u64,
    /// Its SHA-256.
    pub sha256: String,
}

/// The summary.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// The verification of the files, when the caller verified them.
    pub integrity: Option<Integrity>,
    /// The files read.
    pub sources: Vec<Source>,
    /// Time of the first and last row shown.
    pub time_range: Option<(String, String)>,
    /// Server processes seen (in every record, whatever the filter).
    pub servers: Vec<Server>,
    /// Policies seen (in every record, whatever the filter).
    pub policies: Vec<Policy>,
    /// Every row, in log order (chronological across sessions).
    pub timeline: Vec<Row>,
    /// Per session.
    pub sessions: BTreeMap<String, SessionSummary>,
    /// Totals: `calls`, `allowed`, `denied`, `refused`, `gate_refusals`,
    /// `refusals` (the sum of the three), `outcome_<outcome>`, `no_outcome`,
    /// `reached` and `refused_destinations` (rows that name a destination).
    pub totals: BTreeMap<String, u64>,
    /// Every refusal (denied, refused, gate) by its rule: adds up to
    /// `totals.refusals`.
    pub refusals_by_rule: BTreeMap<String, u64>,
    /// Where every session's calls went (the sum of the sessions').
    pub destinations: Destinations,
    /// The requests for a person's yes, in the order asked.
    pub approvals: Vec<super::approvals::Approval>,
    /// Median duration of allowed calls (ms).
    pub p50_ms: Option<f64>,
    /// 95th percentile duration of allowed calls (ms).
    pub p95_ms: Option<f64>,
    /// The images the rows' evidence names, as the store holds them and
    /// only when their bytes hash to their names (see
    /// [`Report::attach_images`]): SHA-256 → PNG.
    #[serde(skip)]
    pub images: BTreeMap<String, Vec<u8>>,
}

impl Report {
    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Whether a row is after the first break of the chain (unverified).
    pub fn unverified(&self, row: &Row) -> bool {
        match (
            self.integrity.as_ref().and_then(|i| i.broken_at_seq),
            row.seq,
        ) {
            (Some(broken), Some(seq)) => seq >= broken || row.end_seq.is_some_and(|e| e >= broken),
            (Some(_), None) => true,
            _ => false,
        }
    }

    /// The rows of `session`, in log order.
    pub fn rows_of<'a>(&'a self, session: &'a str) -> impl Iterator<Item = &'a Row> + 'a {
        self.timeline
            .iter()
            .filter(move |r| r.session == session && r.kind != "server" && r.kind != "rotation")
    }
}
