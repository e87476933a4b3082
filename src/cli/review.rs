//! Reviewer and operator commands that only read: `audit verify`, `audit
//! report` over audit log files, and `policy check`, `policy explain` over a
//! URL policy file. None needs the server's other configuration.

use std::{io::Write, path::PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};

/// Where `audit verify` and `audit report` find what vouches for a log.
#[derive(Debug, Clone, Args)]
pub(super) struct EvidenceArgs {
    /// Checkpoint to check (default: `<log>.checkpoint` beside a given file).
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    /// Public key that checks the checkpoint's signature (default:
    /// `<log>.checkpoint-key.pub`). Keep a copy off the machine: it is all a
    /// reviewer needs, and reveals nothing.
    #[arg(long, value_name = "FILE")]
    pub public_key: Option<PathBuf>,
    /// The audit key, only for checkpoints of schema `/1` (MAC'd under it by
    /// servers before signed checkpoints; default: `<log>.key`).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// A record known from off the machine, as `SEQ:HASH` (the
    /// `browser_shell.audit.seq` and `.hash` of an OTLP log record your
    /// collector holds); the log must hold it. Repeatable. Unlike the
    /// checkpoint, no one on this machine can delete or roll it back.
    #[arg(long, value_name = "SEQ:HASH")]
    pub against: Vec<audit::Anchor>,
}

/// `browser-shell audit verify`.
#[derive(Debug, Clone, Args)]
pub(super) struct VerifyArgs {
    /// Log files: the live log and any rotated ones (`audit.jsonl.1` …), in
    /// any order (they are ordered by their records' `seq`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub evidence: EvidenceArgs,
}

/// Output format of `audit report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Format {
    /// Plain text.
    Table,
    /// One JSON document.
    Json,
    /// One self-contained HTML page.
    Html,
    /// One OCSF API Activity (6003) event per record, as JSON lines.
    Ocsf,
}

/// `browser-shell audit report`.
#[derive(Debug, Clone, Args)]
pub(super) struct ReportArgs {
    /// Log files (any order).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Only this session.
    #[arg(long)]
    pub session: Option<String>,
    /// Only records at or after this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Render a log that is not intact too (its verdict at the top, the
    /// rows from the break on marked unverified); the exit status is 1
    /// all the same.
    #[arg(long)]
    pub render_anyway: bool,
    #[command(flatten)]
    pub evidence: EvidenceArgs,
}

/// What the sink keeps beside a log: named `<log><suffix>`, never records.
const SIBLING_SUFFIXES: &[&str] = &[
    ".key",
    ".checkpoint-key",
    ".checkpoint-key.pub",
    ".lock",
    ".checkpoint",
    ".checkpoint.lock",
    // The checkpoint's temp file, there for an instant before its rename.
    ".checkpoint.tmp",
    // The image store (`--evidence images`), a directory: checked through
    // the records that name its images.
    ".evidence",
    // The approvals desk, a directory of pending requests (no records).
    ".approvals",
    // The serving server's pid (`policy reload` finds it there).
    ".pid",
];

/// The logs among `files`, and the other files that are not a log's own
/// side files. A shell glob such as `audit.jsonl*` also matches the key,
/// lock, checkpoint and pid files beside the log, which hold no records and
/// are passed over without a word; and whatever else lies there. A file
/// beside a given log that is not one of its rotations (`<log>.<n>`) counts
/// as a log only if its first record is one (the schema field says so).
fn logs_only(files: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let names: std::collections::HashSet<String> =
        files.iter().map(|f| f.display().to_string()).collect();
    let side_file = |file: &PathBuf| {
        let name = file.display().to_string();
        SIBLING_SUFFIXES.iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|log| names.contains(log) || std::path::Path::new(log).is_file())
        })
    };
    let (logs, skipped): (Vec<PathBuf>, Vec<PathBuf>) = files.iter().cloned().partition(|file| {
        let name = file.display().to_string();
        let sibling = side_file(file);
        let beside_a_log = names.iter().any(|log| {
            name.strip_prefix(log.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|rest| !rest.is_empty() && !rest.bytes().all(|b| b.is_ascii_digit()))
        });
        !sibling && (!beside_a_log || holds_records(file))
    });
    let others = skipped.into_iter().filter(|f| !side_file(f)).collect();
    (logs, others)
}

/// Does `file` start with an audit record (its first line carries the
/// log's schema)?
fn holds_records(file: &std::path::Path) -> bool {
    use std::io::{BufRead, Read};
    let Ok(opened) = std::fs::File::open(file) else {
        return false;
    };
    let mut first = Vec::new();
    if std::io::BufReader::new(opened.take(1 << 20))
        .read_until(b'\n', &mut first)
        .is_err()
    {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&first)
        .ok()
        .and_then(|record| record.get("schema")?.as_str().map(|s| s == audit::SCHEMA))
        .unwrap_or(false)
}

/// The logs among `files` (siblings named on stderr), ordered by the `seq`
/// of their first record (oldest first).
fn ordered(files: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let (logs, siblings) = logs_only(files);
    if !siblings.is_empty() {
        let names: Vec<String> = siblings.iter().map(|f| f.display().to_string()).collect();
        eprintln!("not audit logs, skipped: {}", names.join(", "));
    }
    let mut keyed = Vec::new();
    for file in &logs {
        // Bytes: a torn line may end mid-character.
        let text =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let first_seq = text
            .split(|b| *b == b'\n')
            .find_map(|l| {
                serde_json::from_slice::<serde_json::Value>(l)
                    .ok()?
                    .get("seq")?
                    .as_u64()
            })
            .unwrap_or(u64::MAX);
        keyed.push((first_seq, file.clone()));
    }
    keyed.sort();
    Ok(keyed.into_iter().map(|(_, f)| f).collect())
}

fn beside(files: &[PathBuf], suffix: &str) -> Option<PathBuf> {
    files
        .iter()
        .map(|f| PathBuf::from(format!("{}{suffix}", f.display())))
        .find(|p| p.exists())
}

/// Verify `given` (ordered as `files`) as `audit verify` does: the
/// checkpoint and key beside the log unless named, the anchors given.
fn integrity(
    given: &[PathBuf],
    files: &[PathBuf],
    args: &EvidenceArgs,
) -> anyhow::Result<audit::report::Integrity> {
    let checkpoint = args
        .checkpoint
        .clone()
        .or_else(|| beside(files, ".checkpoint"));
    let key = checkpoint_key(checkpoint.as_deref(), files, args)?;
    let pair = checkpoint.as_deref().zip(key.as_ref());
    let mut v = audit::verify_with(files, pair, &args.against)?;
    if let Some(live) = live_log(files) {
        v.check_images(&audit::evidence_dir(&live));
    }
    let rotated_elsewhere = match v.start() {
        audit::Start::Unexplained { .. } => rotated_not_given(given, files),
        _ => None,
    };
    let evidence = audit::report::Evidence {
        files: files.to_vec(),
        checkpoint,
        key: key.is_some(),
        anchors: args.against.clone(),
        rotated_elsewhere,
        key_fingerprint: key.as_ref().map(audit::CheckpointKey::fingerprint),
        server_running: v
            .unstopped
            .as_ref()
            .is_some_and(|u| running_here(&u.host, u.pid)),
    };
    Ok(audit::report::assess(&v, &evidence))
}

/// The key that checks `checkpoint`: the public key for a signed one (and
/// when there is none, so a deleted checkpoint is missed, not unchecked);
/// the audit key for a `/1` checkpoint, which was MAC'd under it.
fn checkpoint_key(
    checkpoint: Option<&std::path::Path>,
    files: &[PathBuf],
    args: &EvidenceArgs,
) -> anyhow::Result<Option<audit::CheckpointKey>> {
    let schema = checkpoint.and_then(|path| audit::Checkpoint::read(path).ok().map(|cp| cp.schema));
    if schema.as_deref() == Some(audit::CHECKPOINT_SCHEMA_V1) {
        let path = args.key.clone().or_else(|| beside(files, ".key"));
        return path
            .map(|p| {
                audit::Key::load(&p)
                    .map(audit::CheckpointKey::Legacy)
                    .with_context(|| format!("cannot read the audit key {}", p.display()))
            })
            .transpose();
    }
    let path = args
        .public_key
        .clone()
        .or_else(|| beside(files, ".checkpoint-key.pub"));
    path.map(|p| {
        audit::PublicKey::load(&p)
            .map(audit::CheckpointKey::Public)
            .with_context(|| format!("cannot read the public key {}", p.display()))
    })
    .transpose()
}

/// Is the server `pid` of `host` running on this machine? Verify on a live
/// log must not call its server's missing `stopped` record news. A pid
/// reused by another program does not count: the process must be
/// browser-shell.
fn running_here(host: &str, pid: u64) -> bool {
    let this_host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    pid > 0
        && this_host.trim() == host
        && std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| comm.trim_end() == "browser-shell")
}

/// Run `audit verify`; returns its verdict.
pub(super) fn verify(args: &VerifyArgs) -> anyhow::Result<audit::report::Trust> {
    verify_to(args, &mut std::io::stdout().lock())
}

/// `audit verify`, written to `out`. What comes from the log (a tampered
/// one above all) is printed through [`audit::report::printable`], so it
/// cannot forge a line of the verdict.
fn verify_to(args: &VerifyArgs, out: &mut impl Write) -> anyhow::Result<audit::report::Trust> {
    let files = ordered(&args.files)?;
    let verdict = integrity(&args.files, &files, &args.evidence)?;
    for line in &verdict.lines {
        writeln!(out, "{}", audit::report::printable(line))?;
    }
    writeln!(out, "result: {}", verdict.trust.word())?;
    Ok(verdict.trust)
}

/// Rotated files beside the given ones (`<log>.N`) that were not given,
/// named for the reviewer; `None` when there are none.
fn rotated_not_given(given: &[PathBuf], ordered: &[PathBuf]) -> Option<String> {
    let live = live_log(ordered)?;
    let missing: Vec<String> = (1..=10_000)
        .map(|n| audit::rotated(&live, n))
        .take_while(|p| p.exists())
        .filter(|p| !given.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// The live log of `ordered` files: the newest, or the one it was rotated
/// from (its images and rotated files are named after it).
fn live_log(ordered: &[PathBuf]) -> Option<PathBuf> {
    let newest = ordered.last()?.display().to_string();
    let live = match newest.rsplit_once('.') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            base.to_owned()
        }
        _ => newest,
    };
    Some(PathBuf::from(live))
}

/// Run `audit report`: verify first; render only a log that is not
/// broken (intact, or its tail unvouched, said at the top), unless
/// `--render-anyway`. Returns the verdict.
pub(super) fn report(args: &ReportArgs) -> anyhow::Result<audit::report::Trust> {
    use audit::report::{Trust, printable};
    let files = ordered(&args.files)?;
    let verdict = integrity(&args.files, &files, &args.evidence)?;
    let trust = verdict.trust;
    if trust == Trust::Unvouched {
        eprintln!("audit report: {}", printable(&verdict.headline()));
    }
    if trust == Trust::NotIntact {
        for line in &verdict.lines {
            eprintln!("{}", printable(line));
        }
        eprintln!("audit report: {}", printable(&verdict.headline()));
        if !args.render_anyway {
            eprintln!(
                "audit report: not rendered, the log is not intact (--render-anyway renders it \
                 with this verdict at the top)"
            );
            return Ok(trust);
        }
    }
    let records = audit::report::load(&files)?;
    let filter = audit::report::Filter {
        session: args.session.clone(),
        since: args
            .since
            .as_deref()
            .map(audit::report::parse_time)
            .transpose()
            .map_err(anyhow::Error::msg)?,
    };
    let mut out = std::io::stdout().lock();
    if args.format == Format::Ocsf {
        for (record, event) in records.iter().zip(audit::report::ocsf_events(&records)) {
            let text = |k: &str| record.get(k).and_then(|v| v.as_str());
            let other_session = filter
                .session
                .as_deref()
                .is_some_and(|want| text("session_id") != Some(want));
            let earlier = filter.since.is_some_and(|since| {
                text("time")
                    .and_then(|t| audit::report::parse_time(t).ok())
                    .is_some_and(|t| t < since)
            });
            if !other_session && !earlier {
                writeln!(out, "{event}")?;
            }
        }
        return Ok(trust);
    }
    let mut report = audit::report::build(&records, &filter);
    report.sources = audit::report::sources(&files)?;
    if let Some(live) = live_log(&files) {
        report.attach_images(&audit::evidence_dir(&live));
    }
    report.integrity = Some(verdict);
    match args.format {
        Format::Json => writeln!(out, "{}", report.to_json())?,
        Format::Html => out.write_all(report.to_html().as_bytes())?,
        _ => out.write_all(report.to_table().as_bytes())?,
    }
    Ok(trust)
}

/// `browser-shell policy check`.
#[derive(Debug, Clone, Args)]
pub(super) struct PolicyCheckArgs {
    /// The policy file (default: `--policy`'s default or `BROWSER_SHELL_POLICY`).
    #[arg(
        env = "BROWSER_SHELL_POLICY",
        default_value = super::flags::DEFAULT_POLICY
    )]
    pub file: PathBuf,
}

/// `browser-shell policy explain`.
#[derive(Debug, Clone, Args)]
pub(super) struct PolicyExplainArgs {
    /// The URL (or `open` argument) to decide.
    pub url: String,
    /// The policy file.
    #[arg(
        long,
        env = "BROWSER_SHELL_POLICY",
        default_value = super::flags::DEFAULT_POLICY
    )]
    pub policy: PathBuf,
}

/// Validate a policy file and print the effective policy (JSON).
pub(super) fn policy_check(args: &PolicyCheckArgs) -> anyhow::Result<()> {
    let policy = crate::policy::url_policy::UrlPolicy::load(&args.file)?;
    let unknown = policy
        .approvals
        .unknown_subcommands(crate::call::subcommand_known);
    if !unknown.is_empty() {
        anyhow::bail!(
            "policy file {}: approvals: no such subcommand: {}",
            args.file.display(),
            unknown.join(", ")
        );
    }
    name_policy_source(&args.file);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(&policy)?)?;
    Ok(())
}

/// Say on stderr which file a policy came from (stdout is the result),
/// with a warning when it is missing: a typo in a path must not pass
/// silently as "the default".
fn name_policy_source(path: &std::path::Path) {
    if path.exists() {
        eprintln!("policy file: {}", path.display());
    } else {
        eprintln!(
            "warning: no policy file at the default path {}: the built-in default policy applies",
            path.display()
        );
    }
}

/// Decide one URL with the real resolver; returns whether it is allowed.
pub(super) fn policy_explain(args: &PolicyExplainArgs) -> anyhow::Result<bool> {
    let policy = crate::policy::url_policy::UrlPolicy::load(&args.policy)?;
    let resolver = crate::policy::resolve::SystemResolver::new(policy.dns_timeout)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let verdict = runtime.block_on(policy.check_open(&args.url, &resolver));
    name_policy_source(&args.policy);
    let mut out = std::io::stdout().lock();
    match verdict {
        Ok(checked) => {
            writeln!(out, "allowed: {}", checked.url)?;
            if !checked.resolved.is_empty() {
                let addrs: Vec<String> = checked.resolved.iter().map(ToString::to_string).collect();
                writeln!(out, "addresses: {}", addrs.join(", "))?;
            }
            for (rule, on_page) in policy.approvals.for_open(&checked.url) {
                let when = if on_page {
                    ", if the session's page matches it"
                } else {
                    ""
                };
                writeln!(
                    out,
                    "approval: `open` waits for a person's yes (rule {rule:?}){when}"
                )?;
            }
            Ok(true)
        }
        Err(refusal) => {
            writeln!(out, "refused [{}]: {}", refusal.rule, refusal.message)?;
            Ok(false)
        }
    }
}

#[cfg(test)]
#[path = "review_tests.rs"]
mod tests;
