//! The verdict of [`crate::verify_with`] in a reviewer's words: the lines
//! `audit verify` prints, and the one line `audit report` puts at its top
//! (intact, broken at seq N, truncated, an unvouched tail, intents without
//! outcome).
//!
//! Texts are kept raw (a tampered record's `found` value included): each
//! renderer escapes them for its medium.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::verify::{Anchor, Promised, Start, Verification, VouchFailure};

/// What a verification was given besides the records, and what the
/// caller found beside them.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// The log files, oldest first.
    pub files: Vec<PathBuf>,
    /// The checkpoint (given, or found beside the log), if any.
    pub checkpoint: Option<PathBuf>,
    /// Whether a key to check the checkpoint with was at hand (the public
    /// key, or for a `/1` checkpoint the audit key; given, or found beside
    /// the log).
    pub key: bool,
    /// The anchors checked, in the order given.
    pub anchors: Vec<Anchor>,
    /// Rotated files beside the log that were not given, named; they
    /// explain a chain that does not start at seq 1.
    pub rotated_elsewhere: Option<String>,
    /// The [`crate::CheckpointKey::fingerprint`] of the key at hand, if any.
    pub key_fingerprint: Option<String>,
    /// The server of [`Verification::unstopped`] is running on this
    /// machine: its missing `stopped` record is no news.
    pub server_running: bool,
}

/// How far a log can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// Chain, checkpoint, anchors and start hold.
    Intact,
    /// The chain holds, but its server kept a checkpoint that cannot be
    /// checked here (gone, or under another key) and no anchor reaches
    /// the log's end: records may have been removed from the end.
    Unvouched,
    /// Broken, truncated, started after deleted records, torn, or a failed
    /// checkpoint or anchor.
    NotIntact,
}

impl Trust {
    /// The exit status of `audit verify` and `audit report`: 0 intact,
    /// 1 not intact, 3 an unvouched tail (2 is a usage or read error).
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Intact => 0,
            Self::NotIntact => 1,
            Self::Unvouched => 3,
        }
    }

    /// The word `audit verify` ends with.
    pub fn word(self) -> &'static str {
        match self {
            Self::Intact => "INTACT",
            Self::NotIntact => "NOT INTACT",
            Self::Unvouched => "UNVOUCHED",
        }
    }
}

/// What verification concluded.
#[derive(Debug, Clone, Serialize)]
pub struct Integrity {
    /// The log can be trusted: chain, checkpoint, anchors and start hold.
    pub intact: bool,
    /// The verdict: intact, an unvouched tail, or not intact.
    pub trust: Trust,
    /// Why it cannot, one short item each (empty when intact).
    pub problems: Vec<String>,
    /// Why nothing here vouches for the log's tail, when its server kept a
    /// checkpoint (empty unless [`Trust::Unvouched`] or not intact).
    pub unvouched: Vec<String>,
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
        match self.trust {
            Trust::NotIntact => format!("NOT INTACT: {}", self.problems.join("; ")),
            Trust::Unvouched => format!(
                "UNVOUCHED: the chain holds, but nothing here vouches for its end: {}",
                self.unvouched.join("; ")
            ),
            Trust::Intact => match self.dangling.len() {
                0 => "INTACT".into(),
                n => format!("INTACT, {n} intent(s) without outcome"),
            },
        }
    }
}

/// Judge `v`, the verification of `evidence`.
pub fn assess(v: &Verification, evidence: &Evidence) -> Integrity {
    let mut out = Integrity {
        intact: true,
        trust: Trust::Intact,
        problems: Vec::new(),
        unvouched: Vec::new(),
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
            Err(failure) => {
                out.lines
                    .push(format!("anchor {}: FAILED, {failure}", anchor.seq));
                out.problems.push(match failure {
                    VouchFailure::Truncated(msg) => format!("truncated: {msg}"),
                    VouchFailure::Other(msg) => format!("anchor seq {} failed: {msg}", anchor.seq),
                });
            }
        }
    }
    vouched_by_anchor(v, evidence, &mut out);
    images(v, &mut out);
    server_end(v, evidence, &mut out);
    out.trust = if !out.problems.is_empty() {
        Trust::NotIntact
    } else if !out.unvouched.is_empty() {
        Trust::Unvouched
    } else {
        Trust::Intact
    };
    out.intact = out.trust == Trust::Intact;
    out
}

/// An anchor that the log holds vouches for it up to that record, with no
/// checkpoint: at the log's last record, for all of it.
fn vouched_by_anchor(v: &Verification, evidence: &Evidence, out: &mut Integrity) {
    if out.unvouched.is_empty() {
        return;
    }
    let Some((first, last)) = v.seq_range else {
        return;
    };
    // An anchor checked Ok inside the range is one the log holds with its hash.
    let reached = evidence
        .anchors
        .iter()
        .zip(&v.anchors)
        .filter(|(anchor, result)| result.is_ok() && (first..=last).contains(&anchor.seq))
        .map(|(anchor, _)| anchor.seq)
        .max();
    match reached {
        Some(seq) if seq >= last => {
            let line = format!(
                "tail: the anchor at seq {seq}, the log's last record, vouches for the whole log \
                 in place of the checkpoint"
            );
            out.notes.push(line.clone());
            out.lines.push(line);
            out.unvouched.clear();
        }
        Some(seq) => out.unvouched.push(format!(
            "an anchor vouches up to seq {seq}; seq {}..{last} are vouched for by nothing",
            seq + 1
        )),
        None => {}
    }
}

/// The last server to start, when it has no `stopped` record. A running
/// server has none yet, and a killed one never writes it: said plainly,
/// never a verdict (the checkpoint and anchors decide whether the tail was
/// cut).
fn server_end(v: &Verification, evidence: &Evidence, out: &mut Integrity) {
    let Some(u) = &v.unstopped else {
        return;
    };
    if evidence.server_running {
        out.lines.push(format!(
            "server: pid {} (started at seq {}) is running on this host, so it has no `stopped` \
             record yet",
            u.pid, u.seq
        ));
        return;
    }
    let line = format!(
        "server: pid {} on {}, started at seq {} ({}), has no `stopped` record and no server \
         started after it: it was killed or crashed, is still running on another machine, or \
         the records after it were cut from the log",
        u.pid, u.host, u.seq, u.time
    );
    out.notes.push(line.clone());
    out.lines.push(line);
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
    // A server that said it keeps a checkpoint: without it, or under
    // another key, the tail is vouched for by nothing here.
    let promised = v.checkpoint_promised.as_ref();
    let other_key = promised.and_then(|p| {
        evidence
            .key_fingerprint
            .as_deref()
            .filter(|fingerprint| *fingerprint != p.key_fingerprint)
            .map(|fingerprint| (p, fingerprint))
    });
    match (&v.checkpoint, &evidence.checkpoint) {
        _ if missing => {
            out.lines.push(
                "checkpoint: MISSING, its public key is here but no checkpoint is beside the log: it \
                 was deleted, and the log's tail cannot be vouched for (verify --against an \
                 exported record)"
                    .into(),
            );
            out.problems
                .push("checkpoint missing: the log's tail cannot be vouched for".into());
        }
        (Some(Ok(msg)), _) => match other_key {
            Some((p, fingerprint)) => {
                out.lines.push(format!(
                    "checkpoint: UNVOUCHED, {msg}, but under key {fingerprint}, while {}: a \
                     checkpoint under a replaced key vouches for nothing",
                    kept(p)
                ));
                out.unvouched.push(format!(
                    "the checkpoint is under key {fingerprint}, not {} of the server that started \
                     at seq {}",
                    p.key_fingerprint, p.seq
                ));
            }
            None => out.lines.push(format!("checkpoint: ok, {msg}")),
        },
        (Some(Err(failure)), _) => {
            out.lines.push(format!("checkpoint: FAILED, {failure}"));
            out.problems.push(match failure {
                VouchFailure::Truncated(msg) => format!("truncated: {msg}"),
                VouchFailure::Other(msg) => format!("checkpoint failed: {msg}"),
            });
        }
        (None, cp) => unchecked(cp.as_deref(), promised, out),
    }
}

/// What a server's `started` record promised, in a reviewer's words.
fn kept(p: &Promised) -> String {
    format!(
        "the server that started at seq {} keeps a checkpoint under key {}",
        p.seq, p.key_fingerprint
    )
}

/// No checkpoint was checked: none is here, or no key to check `cp` with.
/// Unvouched when a server promised one; a note when none did (a log from
/// before the promise, or one written without a key).
fn unchecked(cp: Option<&Path>, promised: Option<&Promised>, out: &mut Integrity) {
    match (cp, promised) {
        (Some(cp), Some(p)) => {
            out.lines.push(format!(
                "checkpoint: UNVOUCHED, {} not checked (no key given: --public-key), and {}",
                cp.display(),
                kept(p)
            ));
            out.unvouched.push(format!(
                "the public key {} is not here, so the checkpoint cannot be checked (--public-key)",
                p.key_fingerprint
            ));
        }
        (Some(cp), None) => {
            out.lines.push(format!(
                "checkpoint: {} not checked (no key given: --public-key)",
                cp.display()
            ));
            out.notes.push(
                "checkpoint not checked (no key): truncation of the tail cannot be detected".into(),
            );
        }
        (None, Some(p)) => {
            out.lines.push(format!(
                "checkpoint: UNVOUCHED, none is here, but {}: the checkpoint and its key are \
                 gone, so records may have been removed from the end (verify --against the \
                 newest record your OTLP collector holds)",
                kept(p)
            ));
            out.unvouched.push(format!(
                "the checkpoint and the key {} its server kept it under (started at seq {}) are \
                 gone",
                p.key_fingerprint, p.seq
            ));
        }
        (None, None) => {
            out.lines
                .push("checkpoint: none given; truncation of the tail cannot be detected".into());
            out.notes
                .push("no checkpoint: truncation of the tail cannot be detected".into());
        }
    }
}

/// What the image check found: every image a record names must be in
/// the store, unaltered; one that is not is a problem like a broken chain.
fn images(v: &Verification, out: &mut Integrity) {
    let check = &v.images;
    let Some(dir) = &check.dir else {
        return;
    };
    out.lines.push(format!(
        "images: {} named by the records, present and unaltered in {}; {} dropped by the store's bound, as recorded",
        check.checked,
        dir.display(),
        check.dropped
    ));
    for problem in &check.problems {
        out.lines.push(format!(
            "  image {} (named at seq {}): {}",
            problem.sha256, problem.seq, problem.found
        ));
        out.problems.push(format!(
            "image {} named at seq {}: {}",
            problem.sha256, problem.seq, problem.found
        ));
    }
}
