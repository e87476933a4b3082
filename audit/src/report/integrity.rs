//! The verdict of [`crate::verify_with`] in a reviewer's words: the lines
//! `audit verify` prints, and the one line `audit report` puts at its top
//! (intact, broken at seq N, truncated, intents without outcome).
//!
//! Texts are kept raw (a tampered record's `found` value included): each
//! renderer escapes them for its medium.

use std::path::PathBuf;

use serde::Serialize;

use crate::verify::{Anchor, REMOVED_FROM_THE_END, Start, Verification};

/// What a verification was given besides the records, and what the
/// caller found beside them.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// The log files, oldest first.
    pub files: Vec<PathBuf>,
    /// The checkpoint (given, or found beside the log), if any.
    pub checkpoint: Option<PathBuf>,
    /// Whether a key was at hand (given, or found beside the log).
    pub key: bool,
    /// The anchors checked, in the order given.
    pub anchors: Vec<Anchor>,
    /// Rotated files beside the log that were not given, named; they
    /// explain a chain that does not start at seq 1.
    pub rotated_elsewhere: Option<String>,
}

/// What verification concluded.
#[derive(Debug, Clone, Serialize)]
pub struct Integrity {
    /// The log can be trusted: chain, checkpoint, anchors and start hold.
    pub intact: bool,
    /// Why it cannot, one short item each (empty when intact).
    pub problems: Vec<String>,
    /// What a reviewer should know of an intact log: intents without an
    /// outcome, a tail no checkpoint vouches for, where the chain starts.
    pub notes: Vec<String>,
    /// The full account, as `audit verify` prints it (without its result line).
    pub lines: Vec<String>,
    /// The `seq` of the first record the chain does not hold, if any: it
    /// and every later record are unverified.
    pub broken_at_seq: Option<u64>,
    /// Records read.
    pub records: u64,
    /// First and last `seq`.
    pub seq_range: Option<(u64, u64)>,
    /// `seq` of each intent that never got an outcome.
    pub dangling: Vec<u64>,
}

impl Integrity {
    /// The one line for the top of a report.
    pub fn headline(&self) -> String {
        if !self.intact {
            return format!("NOT INTACT: {}", self.problems.join("; "));
        }
        match self.dangling.len() {
            0 => "INTACT".into(),
            n => format!("INTACT, {n} intent(s) without outcome"),
        }
    }
}

/// Judge `v`, the verification of `evidence`.
pub fn assess(v: &Verification, evidence: &Evidence) -> Integrity {
    let mut out = Integrity {
        intact: true,
        problems: Vec::new(),
        notes: Vec::new(),
        lines: Vec::new(),
        broken_at_seq: None,
        records: v.records,
        seq_range: v.seq_range,
        dangling: v.dangling.iter().map(|d| d.seq).collect(),
    };
    let range = v
        .seq_range
        .map_or_else(|| "-".into(), |(a, b)| format!("{a}..{b}"));
    out.lines.push(format!(
        "verified {} file(s), {} record(s), seq {range}",
        evidence.files.len(),
        v.records
    ));
    start(v, evidence, &mut out);
    chain(v, &mut out);
    checkpoint(v, evidence, &mut out);
    out.lines.push(format!(
        "dangling intents (allowed calls with no outcome: crash or kill mid-call): {}",
        v.dangling.len()
    ));
    for d in &v.dangling {
        out.lines.push(format!(
            "  {} seq {} call {} session {}",
            d.at,
            d.seq,
            d.call_id,
            d.session_id.as_deref().unwrap_or("-")
        ));
    }
    if !v.dangling.is_empty() {
        let seqs: Vec<String> = out.dangling.iter().map(u64::to_string).collect();
        out.notes.push(format!(
            "{} intent(s) without outcome (a crash or kill mid-call, or a call still running): seq {}",
            v.dangling.len(),
            seqs.join(", ")
        ));
    }
    for (anchor, result) in evidence.anchors.iter().zip(&v.anchors) {
        match result {
            Ok(msg) => out.lines.push(format!("anchor {}: ok, {msg}", anchor.seq)),
            Err(msg) => {
                out.lines
                    .push(format!("anchor {}: FAILED, {msg}", anchor.seq));
                out.problems.push(if msg.contains(REMOVED_FROM_THE_END) {
                    format!("truncated: {msg}")
                } else {
                    format!("anchor seq {} failed: {msg}", anchor.seq)
                });
            }
        }
    }
    out.intact = out.problems.is_empty();
    out
}

fn start(v: &Verification, evidence: &Evidence, out: &mut Integrity) {
    match v.start() {
        Start::Genesis => {}
        Start::Rotated { kept_from, by } => {
            let line = format!(
                "start: seq {kept_from}; the records before it were deleted by rotation (the \
                 rotation record at seq {by} says so)"
            );
            out.notes.push(line.clone());
            out.lines.push(line);
        }
        Start::Unexplained { first } => match &evidence.rotated_elsewhere {
            Some(elsewhere) => {
                let line = format!(
                    "start: seq {first}; the records before it are in {elsewhere} (not given: \
                     verify with them too)"
                );
                out.notes.push(line.clone());
                out.lines.push(line);
            }
            None => {
                out.lines.push(format!(
                    "start: seq {first}, but no rotation deleted the records before it and no \
                     rotated file holds them: records were DELETED"
                ));
                out.problems.push(format!(
                    "records before seq {first} were deleted (no rotation explains the start)"
                ));
            }
        },
    }
}

fn chain(v: &Verification, out: &mut Integrity) {
    match &v.first_break {
        None => out.lines.push("chain: intact".into()),
        Some(b) => {
            let further = if v.further_problems > 0 {
                format!(" (+{} further problems)", v.further_problems)
            } else {
                String::new()
            };
            out.lines.push(format!("chain: BROKEN at {b}{further}"));
            out.problems.push(match b.seq {
                Some(seq) => format!("broken at seq {seq} ({} mismatch at {})", b.check, b.at),
                None => format!("broken at {} ({} mismatch)", b.at, b.check),
            });
            // A line that is not a record has no seq: then nothing is
            // vouched for, from the first record on.
            out.broken_at_seq = b
                .seq
                .or_else(|| Some(v.seq_range.map_or(0, |(first, _)| first)));
        }
    }
    if v.torn.is_empty() {
        out.lines.push("torn lines: none".into());
    } else {
        for at in &v.torn {
            out.lines
                .push(format!("torn line (a record cut short by a crash): {at}"));
        }
        out.problems
            .push(format!("{} torn line(s) (a crash mid-write)", v.torn.len()));
    }
}

fn checkpoint(v: &Verification, evidence: &Evidence, out: &mut Integrity) {
    // With the key at hand, a log with records must have its checkpoint:
    // deleting it must not turn "truncated" into "not checked".
    let missing = evidence.key && evidence.checkpoint.is_none() && v.records > 0;
    match (&v.checkpoint, &evidence.checkpoint) {
        _ if missing => {
            out.lines.push(
                "checkpoint: MISSING, the key is here but no checkpoint is beside the log: it \
                 was deleted, and the log's tail cannot be vouched for (verify --against an \
                 exported record)"
                    .into(),
            );
            out.problems
                .push("checkpoint missing: the log's tail cannot be vouched for".into());
        }
        (Some(Ok(msg)), _) => out.lines.push(format!("checkpoint: ok, {msg}")),
        (Some(Err(msg)), _) => {
            out.lines.push(format!("checkpoint: FAILED, {msg}"));
            out.problems.push(if msg.contains(REMOVED_FROM_THE_END) {
                format!("truncated: {msg}")
            } else {
                format!("checkpoint failed: {msg}")
            });
        }
        (None, Some(cp)) => {
            out.lines.push(format!(
                "checkpoint: {} not checked (no key given: --key)",
                cp.display()
            ));
            out.notes.push(
                "checkpoint not checked (no key): truncation of the tail cannot be detected".into(),
            );
        }
        (None, None) => {
            out.lines
                .push("checkpoint: none given; truncation of the tail cannot be detected".into());
            out.notes
                .push("no checkpoint: truncation of the tail cannot be detected".into());
        }
    }
}
