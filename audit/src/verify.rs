//! Verification of one or more log files: the reviewer's side of the chain.
//!
//! Checks, record by record: the line is a JSON object; its `hash` is the
//! SHA-256 of its canonical form; `seq` follows the previous record's by one;
//! `prev_hash` is the previous record's `hash` (across files, oldest first).
//! Then the checkpoint, when given: authentic under the key, and the chain
//! reaches its `seq` with its `hash` (tail truncation). Then each anchor — a
//! `seq` and `hash` kept off the machine (the OTLP copy carries both), which
//! neither a deleted nor a rolled-back checkpoint can undo. Also reported,
//! without breaking the chain: torn lines (a crash mid-write), intents that
//! never got an outcome (a crash or kill mid-call), and where the chain
//! starts when that is not seq 1 (what the last rotation record kept).
//! Last, when asked, the images the records name (`crate::evidence`).

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};

use crate::{
    canonical::{GENESIS, record_hash},
    checkpoint::{Checkpoint, CheckpointKey},
    evidence::{ImageCheck, Named},
};

/// What a failed checkpoint or anchor check says when the log was cut
/// short: [`crate::report::Integrity`] calls such a log truncated.
const REMOVED_FROM_THE_END: &str = "records were removed from the end";

/// Why a checkpoint or an anchor does not vouch for the log. The report
/// names a truncation as one; every other failure it quotes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VouchFailure {
    /// The log ends before the record vouched for: records were removed
    /// from the end (the message says which seqs).
    #[error("{0}")]
    Truncated(String),
    /// Rewritten, missing from the files given, unreadable or not signed by
    /// the key: said in full.
    #[error("{0}")]
    Other(String),
}

/// Where in which file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub file: PathBuf,
    /// 1-based line number.
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// The first place the chain does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    /// Where.
    pub at: Location,
    /// The record's `seq`, when it has one.
    pub seq: Option<u64>,
    /// What was checked: `hash`, `seq`, `prev_hash`, `json`, `checkpoint`.
    pub check: &'static str,
    /// What the chain required (for `hash`: what the record's content
    /// hashes to).
    pub expected: String,
    /// What the record stores.
    pub found: String,
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.at)?;
        if let Some(seq) = self.seq {
            write!(f, " (seq {seq})")?;
        }
        // Say which value the record stores and where the other comes from:
        // "expected/found" leaves a reviewer guessing which one is on disk.
        let (stored, required) = match self.check {
            "hash" => ("the record stores", "its content hashes to"),
            "prev_hash" => ("the record stores", "the previous record's hash is"),
            "seq" => ("the record stores", "the chain requires"),
            _ => ("the line holds", "a record needs"),
        };
        write!(
            f,
            ": {} mismatch: {stored} {}, {required} {}",
            self.check, self.found, self.expected
        )
    }
}

/// An intent with no outcome record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dangling {
    /// Where the intent is.
    pub at: Location,
    /// Its `seq`.
    pub seq: u64,
    /// Its `call_id`.
    pub call_id: String,
    /// Its `session_id`, if any.
    pub session_id: Option<String>,
}

/// The result of [`verify`].
#[derive(Debug, Clone, Default)]
pub struct Verification {
    /// Records read.
    pub records: u64,
    /// First and last `seq` seen.
    pub seq_range: Option<(u64, u64)>,
    /// The first break, if any (later problems follow from it).
    pub first_break: Option<Break>,
    /// Problems after the first break (count).
    pub further_problems: u64,
    /// Lines cut short by a crash mid-write.
    pub torn: Vec<Location>,
    /// Intents without an outcome.
    pub dangling: Vec<Dangling>,
    /// What the checkpoint check found, when a checkpoint was given.
    pub checkpoint: Option<Result<String, VouchFailure>>,
    /// The chain does not start at the genesis (older files not given).
    pub starts_mid_chain: bool,
    /// What each anchor check found, in the order given.
    pub anchors: Vec<Result<String, VouchFailure>>,
    /// The last rotation record's `kept_from_seq` and its own `seq`: the
    /// records before the former were deleted by rotation.
    pub kept_from: Option<(u64, u64)>,
    /// The last `started` record that says its server keeps a checkpoint:
    /// one must be beside the log, under the key it names.
    pub checkpoint_promised: Option<Promised>,
    /// The server of the last `started` record, when it has no `stopped`
    /// record after it.
    pub unstopped: Option<Unstopped>,
    /// What [`Verification::check_images`] found of the images the records
    /// name.
    pub images: ImageCheck,
    named: Named,
}

/// A server's word, in its `started` record, that it keeps a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promised {
    /// The `started` record's seq.
    pub seq: u64,
    /// The [`crate::Key::fingerprint`] of the key the checkpoint is kept under.
    pub key_fingerprint: String,
}

/// A server that started and has no `stopped` record, with no server
/// started after it: still running, killed, or the log's tail was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unstopped {
    /// Its `started` record's seq.
    pub seq: u64,
    /// When it started (RFC 3339, as recorded).
    pub time: String,
    /// Its machine.
    pub host: String,
    /// Its process id.
    pub pid: u64,
}

/// A record known from elsewhere (an OTLP copy, a ticket): the log must
/// hold `seq` with exactly this `hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    /// The record's `seq`.
    pub seq: u64,
    /// Its `hash` (64 hex digits).
    pub hash: String,
}

impl std::str::FromStr for Anchor {
    type Err = String;

    /// `SEQ:HASH`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (seq, hash) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?} is not SEQ:HASH"))?;
        let seq = seq
            .parse()
            .map_err(|e| format!("{seq:?} is not a sequence number: {e}"))?;
        let hash = hash.to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{hash:?} is not a SHA-256 hash (64 hex digits)"));
        }
        Ok(Self { seq, hash })
    }
}

/// Why the chain starts where it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At seq 1.
    Genesis,
    /// Where a rotation record (at `by`) says the retained records begin.
    Rotated {
        /// The first record on disk.
        kept_from: u64,
        /// The rotation record's own seq.
        by: u64,
    },
    /// Later than any rotation explains: older files were not given, or
    /// records were deleted.
    Unexplained {
        /// The first record given.
        first: u64,
    },
}

impl Verification {
    /// True when the chain holds, no line is torn and the checkpoint (if
    /// any) is consistent. Dangling intents do not make a log untrustworthy;
    /// they are listed for the reviewer.
    pub fn is_intact(&self) -> bool {
        self.first_break.is_none()
            && self.torn.is_empty()
            && !matches!(self.checkpoint, Some(Err(_)))
            && self.anchors.iter().all(Result::is_ok)
            && self.images.problems.is_empty()
    }

    /// Check every image the records name against the store in `dir`
    /// (see [`crate::evidence_dir`]): each must be there, hashing to its
    /// name.
    pub fn check_images(&mut self, dir: &Path) {
        self.images = self.named.check(dir);
    }

    /// Where the chain starts, and why.
    pub fn start(&self) -> Start {
        match self.seq_range {
            None | Some((1, _)) => Start::Genesis,
            Some((first, _)) => match self.kept_from {
                Some((kept_from, by)) if kept_from == first => Start::Rotated { kept_from, by },
                _ => Start::Unexplained { first },
            },
        }
    }
}

/// Verify `files` (oldest first) and, optionally, a checkpoint with the key
/// that checks it.
///
/// # Errors
/// When a file cannot be read.
pub fn verify(
    files: &[PathBuf],
    checkpoint: Option<(&Path, &CheckpointKey)>,
) -> std::io::Result<Verification> {
    verify_with(files, checkpoint, &[])
}

/// [`verify`], and check each of `anchors` against the chain.
///
/// # Errors
/// When a file cannot be read.
pub fn verify_with(
    files: &[PathBuf],
    checkpoint: Option<(&Path, &CheckpointKey)>,
    anchors: &[Anchor],
) -> std::io::Result<Verification> {
    let mut v = Verification::default();
    let mut prev: Option<(u64, String)> = None;
    let mut intents: BTreeMap<String, Dangling> = BTreeMap::new();
    let mut hashes_by_seq: BTreeMap<u64, String> = BTreeMap::new();
    for file in files {
        let text = std::fs::read(file)?;
        if text.is_empty() {
            // A log nothing was appended to yet (a server that served no
            // call): no records, nothing torn.
            continue;
        }
        let ends_with_newline = text.last() == Some(&b'\n');
        let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
        let count = if ends_with_newline {
            lines.len() - 1
        } else {
            lines.len()
        };
        for (i, raw) in lines.iter().take(count).enumerate() {
            let at = Location {
                file: file.clone(),
                line: i + 1,
            };
            let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(raw) else {
                let unterminated = i + 1 == count && !ends_with_newline;
                not_a_record(&mut v, at, raw, unterminated);
                continue;
            };
            v.records += 1;
            check_record(&mut v, &record, at.clone(), &mut prev);
            let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
            if let Some(hash) = record.get("hash").and_then(Value::as_str) {
                hashes_by_seq.insert(seq, hash.to_owned());
            }
            v.named.note(&record, seq);
            follow(&mut v, &mut intents, &record, at, seq);
        }
    }
    v.dangling = intents.into_values().collect();
    if let Some((path, key)) = checkpoint {
        v.checkpoint = Some(check_checkpoint(path, key, &hashes_by_seq, v.seq_range));
    }
    v.anchors = anchors
        .iter()
        .map(|anchor| check_anchor(anchor, &hashes_by_seq, v.seq_range))
        .collect();
    Ok(v)
}

/// A line that is not a JSON object: torn (the last line, unterminated, or
/// one that looks cut) or a break.
fn not_a_record(v: &mut Verification, at: Location, raw: &[u8], unterminated: bool) {
    if unterminated || looks_torn(raw) {
        v.torn.push(at);
    } else {
        note(
            v,
            Break {
                at,
                seq: None,
                check: "json",
                expected: "a JSON object".into(),
                found: excerpt(raw),
            },
        );
    }
}

/// What a record says beyond its own integrity: a server's life, a call's
/// intent (open until its outcome), a rotation's kept range.
fn follow(
    v: &mut Verification,
    intents: &mut BTreeMap<String, Dangling>,
    record: &Map<String, Value>,
    at: Location,
    seq: u64,
) {
    let text = |key: &str| record.get(key).and_then(Value::as_str);
    let call_id = text("call_id").unwrap_or_default().to_owned();
    let outcome = text("outcome");
    server_life(v, record, seq, outcome);
    match crate::event::counted_phase(text("phase"), outcome) {
        Some("intent") => {
            let session_id = text("session_id").map(str::to_owned);
            intents.insert(
                call_id.clone(),
                Dangling {
                    at,
                    seq,
                    call_id,
                    session_id,
                },
            );
        }
        Some("outcome") => {
            intents.remove(&call_id);
        }
        Some("rotation") => {
            if let Some(kept) = record.get("kept_from_seq").and_then(Value::as_u64) {
                v.kept_from = Some((kept, seq));
            }
        }
        _ => {}
    }
}

/// What a server's own `started` or `stopped` record tells about the
/// checkpoint and the log's end; other records tell nothing of it.
fn server_life(v: &mut Verification, record: &Map<String, Value>, seq: u64, outcome: Option<&str>) {
    let own = record.get("phase").and_then(Value::as_str) == Some("lifecycle")
        && record.get("session_id").is_none();
    if !own {
        return;
    }
    let text = |key: &str| record.get(key).and_then(Value::as_str).unwrap_or_default();
    let pid = record.get("pid").and_then(Value::as_u64).unwrap_or(0);
    match outcome {
        Some("started") => {
            v.unstopped = Some(Unstopped {
                seq,
                time: text("time").to_owned(),
                host: text("host").to_owned(),
                pid,
            });
            // A server from before the field says nothing either way: the
            // promise of an earlier one stands.
            if let Some(checkpoint) = record.get("detail").and_then(|d| d.get("checkpoint")) {
                v.checkpoint_promised = checkpoint
                    .get("key_fingerprint")
                    .and_then(Value::as_str)
                    .filter(|_| checkpoint.get("kept") == Some(&Value::Bool(true)))
                    .map(|fingerprint| Promised {
                        seq,
                        key_fingerprint: fingerprint.to_owned(),
                    });
            }
        }
        Some("stopped")
            if v.unstopped
                .as_ref()
                .is_some_and(|u| u.pid == pid && u.host == text("host")) =>
        {
            v.unstopped = None;
        }
        _ => {}
    }
}

fn check_anchor(
    anchor: &Anchor,
    hashes: &BTreeMap<u64, String>,
    range: Option<(u64, u64)>,
) -> Result<String, VouchFailure> {
    let (first, last) = range.unwrap_or((0, 0));
    match hashes.get(&anchor.seq) {
        Some(hash) if *hash == anchor.hash => Ok(format!("seq {} matches", anchor.seq)),
        Some(hash) => Err(VouchFailure::Other(format!(
            "seq {} has hash {hash} in the log, the anchor says {}: the record was rewritten",
            anchor.seq, anchor.hash
        ))),
        None if anchor.seq > last => Err(VouchFailure::Truncated(format!(
            "the log ends at seq {last} but the anchor vouches for seq {}: {REMOVED_FROM_THE_END} \
             (a deleted or rolled-back checkpoint cannot hide this)",
            anchor.seq
        ))),
        None if anchor.seq < first => Ok(format!(
            "seq {} precedes the files given; not checked (give the rotated files too)",
            anchor.seq
        )),
        None => Err(VouchFailure::Other(format!(
            "seq {} is not in the files given",
            anchor.seq
        ))),
    }
}

fn check_record(
    v: &mut Verification,
    record: &Map<String, Value>,
    at: Location,
    prev: &mut Option<(u64, String)>,
) {
    let seq = record.get("seq").and_then(Value::as_u64);
    let text = |key: &str| {
        record
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (hash, prev_hash) = (text("hash"), text("prev_hash"));
    let recomputed = record_hash(record);
    if recomputed != hash {
        broke(v, &at, seq, "hash", recomputed, hash.clone());
    }
    match (prev.as_ref(), seq) {
        (Some((prev_seq, prev_h)), Some(seq)) => {
            if seq != prev_seq + 1 {
                let expected = (prev_seq + 1).to_string();
                broke(v, &at, Some(seq), "seq", expected, seq.to_string());
            }
            if &prev_hash != prev_h {
                broke(v, &at, Some(seq), "prev_hash", prev_h.clone(), prev_hash);
            }
        }
        (None, Some(seq)) => {
            if seq == 1 && prev_hash != GENESIS {
                broke(v, &at, Some(seq), "prev_hash", GENESIS.into(), prev_hash);
            }
            if seq != 1 {
                v.starts_mid_chain = true;
            }
        }
        (_, None) => broke(
            v,
            &at,
            None,
            "seq",
            "a sequence number".into(),
            "none".into(),
        ),
    }
    if let Some(seq) = seq {
        let first = v.seq_range.map_or(seq, |(first, _)| first);
        v.seq_range = Some((first, seq));
        *prev = Some((seq, hash));
    }
}

/// Note that the record at `at` fails `check`: it should hold `expected`.
fn broke(
    v: &mut Verification,
    at: &Location,
    seq: Option<u64>,
    check: &'static str,
    expected: String,
    found: String,
) {
    let at = at.clone();
    note(
        v,
        Break {
            at,
            seq,
            check,
            expected,
            found,
        },
    );
}

fn check_checkpoint(
    path: &Path,
    key: &CheckpointKey,
    hashes: &BTreeMap<u64, String>,
    range: Option<(u64, u64)>,
) -> Result<String, VouchFailure> {
    let cp = Checkpoint::read(path).map_err(|e| {
        VouchFailure::Other(format!("unreadable checkpoint {}: {e}", path.display()))
    })?;
    cp.authenticate(key)
        .map_err(|why| VouchFailure::Other(format!("checkpoint {}: {why}", path.display())))?;
    let last = range.map_or(0, |(_, last)| last);
    match hashes.get(&cp.seq) {
        Some(hash) if *hash == cp.hash => Ok(format!(
            "checkpoint at seq {} ({}) matches; the log reaches seq {last}",
            cp.seq, cp.time
        )),
        Some(hash) => Err(VouchFailure::Other(format!(
            "checkpoint says seq {} has hash {}, the log has {hash}",
            cp.seq, cp.hash
        ))),
        // The checkpoint lags the log by up to 100 ms: just after a rotation
        // it may still name the tail of a file not given here.
        None if range.is_some_and(|(first, _)| cp.seq < first) => Ok(format!(
            "checkpoint at seq {} ({}) precedes the files given; not checked (give the rotated files too)",
            cp.seq, cp.time
        )),
        None if cp.seq > last => Err(VouchFailure::Truncated(format!(
            "the log ends at seq {last} but the checkpoint of {} vouches for seq {}: {REMOVED_FROM_THE_END}",
            cp.time, cp.seq
        ))),
        None => Err(VouchFailure::Other(format!(
            "seq {} of the checkpoint is not in the files given",
            cp.seq
        ))),
    }
}

fn note(v: &mut Verification, b: Break) {
    if v.first_break.is_none() {
        v.first_break = Some(b);
    } else {
        v.further_problems += 1;
    }
}

/// A line that starts like a record but does not parse, followed by a good
/// one: what a crash mid-write leaves once the next record is appended.
fn looks_torn(raw: &[u8]) -> bool {
    raw.starts_with(b"{") && serde_json::from_slice::<Value>(raw).is_err_and(|e| e.is_eof())
}

fn excerpt(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() {
        format!("{cut}…")
    } else {
        cut
    }
}
