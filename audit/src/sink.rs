//! The durable writer: flock, read the tail, append one line, fdatasync.

use std::{
    fs::{File, OpenOptions},
    io::{self, Read, Seek, SeekFrom, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::Mutex,
};

use serde_json::Value;
use sha2::{Digest, Sha256};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

use crate::event::Event;

/// `prev_hash` of the first record of a chain.
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// First and largest window read back from the end to find the last record.
const FIRST_TAIL_WINDOW: u64 = 8 * 1024;
const MAX_TAIL_WINDOW: u64 = 8 * 1024 * 1024;

/// Why a record could not be made durable. The caller must not proceed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The log file could not be opened.
    #[error("cannot open audit log {path}: {source}")]
    Open {
        /// The log path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Taking the exclusive lock failed.
    #[error("cannot lock audit log {path}: {source}")]
    Lock {
        /// The log path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Reading the previous record failed.
    #[error("cannot read the tail of audit log {path}: {source}")]
    ReadTail {
        /// The log path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Writing the record failed (disk full, read-only, …).
    #[error("cannot write audit log {path}: {source}")]
    Write {
        /// The log path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `fdatasync` failed: the record may not survive a crash.
    #[error("cannot sync audit log {path}: {source}")]
    Sync {
        /// The log path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The record could not be serialised.
    #[error("cannot encode audit record: {0}")]
    Encode(#[from] serde_json::Error),
    /// A previous holder of the in-process lock panicked.
    #[error("audit writer poisoned")]
    Poisoned,
}

/// Where a record landed in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// Position in the chain (1-based).
    pub seq: u64,
    /// The record's hash.
    pub hash: String,
}

/// An append-only audit log file shared safely between threads and processes.
#[derive(Debug)]
pub struct Sink {
    path: PathBuf,
    state: Mutex<State>,
}

/// The open file and the chain head this process last wrote, keyed by the
/// file length right after that write: if the length is unchanged under the
/// lock, no other process appended and the tail need not be re-read.
#[derive(Debug)]
struct State {
    file: File,
    head: Option<(u64, Tail)>,
}

#[derive(Debug, Clone)]
struct Tail {
    seq: u64,
    hash: String,
    needs_newline: bool,
}

impl Sink {
    /// Open (creating, mode 0600) the log at `path`.
    ///
    /// # Errors
    /// [`AuditError::Open`] when the file cannot be opened for appending.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| AuditError::Open {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            path: path.to_owned(),
            state: Mutex::new(State { file, head: None }),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Chain, append and sync `event`. Only when this returns `Ok` is the
    /// record durable.
    ///
    /// # Errors
    /// Any failure to lock, read the tail, write or sync; the record must then
    /// be treated as not written.
    pub fn append(&self, event: Event) -> Result<Sealed, AuditError> {
        let mut body = match serde_json::to_value(&event)? {
            Value::Object(map) => map,
            _ => return Err(AuditError::Poisoned),
        };
        let mut state = self.state.lock().map_err(|_| AuditError::Poisoned)?;
        let State { file, head } = &mut *state;
        let mut file: &File = file;
        let _lock = FileLock::exclusive(file).map_err(|source| AuditError::Lock {
            path: self.path.clone(),
            source,
        })?;
        let read_error = |source| AuditError::ReadTail {
            path: self.path.clone(),
            source,
        };
        let meta = file.metadata().map_err(read_error)?;
        let tail = match head.take() {
            Some((len, tail)) if meta.file_type().is_file() && len == meta.len() => tail,
            _ => read_tail(file, &meta).map_err(read_error)?,
        };
        let Tail {
            seq: prev_seq,
            hash: prev_hash,
            needs_newline,
        } = tail;
        let seq = prev_seq + 1;
        body.insert("seq".into(), seq.into());
        body.insert("time".into(), now_rfc3339().into());
        body.insert("prev_hash".into(), prev_hash.clone().into());
        // serde_json's Map is key-sorted (no preserve_order), so this
        // serialisation is canonical: the verifier recomputes it exactly.
        let canonical = serde_json::to_string(&body)?;
        let hash = hex_sha256(canonical.as_bytes());
        body.insert("hash".into(), hash.clone().into());
        let mut line = String::new();
        if needs_newline {
            // A torn last line (crash mid-write) stays visible as its own bad
            // line for the verifier; it is never merged into this record.
            line.push('\n');
        }
        line.push_str(&serde_json::to_string(&body)?);
        line.push('\n');
        file.write_all(line.as_bytes())
            .map_err(|source| AuditError::Write {
                path: self.path.clone(),
                source,
            })?;
        file.sync_data().map_err(|source| AuditError::Sync {
            path: self.path.clone(),
            source,
        })?;
        if let Ok(meta) = file.metadata() {
            let tail = Tail {
                seq,
                hash: hash.clone(),
                needs_newline: false,
            };
            *head = Some((meta.len(), tail));
        }
        Ok(Sealed { seq, hash })
    }
}

/// Last complete record's `seq` and `hash`, and whether the file ends mid-line.
/// Reads backwards in growing windows, so a long log costs one small read.
fn read_tail(mut file: &File, meta: &std::fs::Metadata) -> io::Result<Tail> {
    let genesis = |needs_newline| Tail {
        seq: 0,
        hash: GENESIS.to_owned(),
        needs_newline,
    };
    if !meta.file_type().is_file() || meta.len() == 0 {
        // Devices (/dev/full in tests) and empty files start a fresh chain.
        return Ok(genesis(false));
    }
    let len = meta.len();
    let mut window = FIRST_TAIL_WINDOW;
    loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start))?;
        let mut tail = Vec::new();
        file.take(len - start).read_to_end(&mut tail)?;
        let needs_newline = tail.last() != Some(&b'\n');
        // When the window does not reach the start of the file, its first
        // line may be cut: never trust it.
        let lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
        let trusted = if start == 0 { &lines[..] } else { &lines[1..] };
        for line in trusted.iter().rev() {
            if let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(line)
                && let (Some(seq), Some(hash)) = (
                    record.get("seq").and_then(Value::as_u64),
                    record.get("hash").and_then(Value::as_str),
                )
            {
                return Ok(Tail {
                    seq,
                    hash: hash.to_owned(),
                    needs_newline,
                });
            }
        }
        if start == 0 {
            return Ok(genesis(needs_newline));
        }
        if window >= MAX_TAIL_WINDOW {
            // Restarting the chain here would hide whatever this is.
            return Err(io::Error::other(format!(
                "no complete record in the last {MAX_TAIL_WINDOW} bytes"
            )));
        }
        window *= 4;
    }
}

fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An exclusive `flock` held for the life of the value. It serialises
/// appends between server processes sharing one log file.
struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    fn exclusive(file: &'a File) -> io::Result<Self> {
        file.lock()?;
        Ok(Self(file))
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Phase;

    #[test]
    fn records_chain_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let first = Sink::open(&path)
            .unwrap()
            .append(Event::new(Phase::Intent, "c1"))
            .unwrap();
        let second = Sink::open(&path)
            .unwrap()
            .append(Event::new(Phase::Outcome, "c1"))
            .unwrap();
        assert_eq!((first.seq, second.seq), (1, 2));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["prev_hash"], GENESIS);
        assert_eq!(lines[1]["prev_hash"], lines[0]["hash"]);
        assert_eq!(lines[1]["hash"], second.hash);
    }

    #[test]
    fn two_writers_on_one_file_keep_one_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let (a, b) = (Sink::open(&path).unwrap(), Sink::open(&path).unwrap());
        let seqs: Vec<u64> = (0..6)
            .map(|i| {
                let sink = if i % 2 == 0 { &a } else { &b };
                sink.append(Event::new(Phase::Intent, format!("c{i}")))
                    .unwrap()
                    .seq
            })
            .collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for pair in lines.windows(2) {
            assert_eq!(pair[1]["prev_hash"], pair[0]["hash"]);
        }
    }

    #[test]
    fn a_long_log_resumes_from_its_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let sink = Sink::open(&path).unwrap();
        let mut event = Event::new(Phase::Intent, "c");
        event.reason = Some("x".repeat(20_000)); // records larger than the first window
        for _ in 0..3 {
            sink.append(event.clone()).unwrap();
        }
        let sealed = Sink::open(&path).unwrap().append(event).unwrap();
        assert_eq!(sealed.seq, 4);
    }

    #[test]
    fn hash_covers_the_record_without_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        Sink::open(&path)
            .unwrap()
            .append(Event::new(Phase::Denied, "c1"))
            .unwrap();
        let line = std::fs::read_to_string(&path).unwrap();
        let mut record: serde_json::Map<String, Value> = serde_json::from_str(line.trim()).unwrap();
        let hash = record.remove("hash").unwrap();
        let recomputed = hex_sha256(serde_json::to_string(&record).unwrap().as_bytes());
        assert_eq!(hash, recomputed);
    }

    #[test]
    fn a_full_disk_refuses_the_record() {
        let sink = Sink::open(Path::new("/dev/full")).unwrap();
        let err = sink.append(Event::new(Phase::Intent, "c1")).unwrap_err();
        assert!(
            matches!(err, AuditError::Write { .. } | AuditError::Sync { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_torn_last_line_is_not_merged_into_the_next_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let sink = Sink::open(&path).unwrap();
        sink.append(Event::new(Phase::Intent, "c1")).unwrap();
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"seq\":2,\"tor")
            .unwrap();
        let sealed = sink.append(Event::new(Phase::Outcome, "c1")).unwrap();
        assert_eq!(sealed.seq, 2);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1], "{\"seq\":2,\"tor");
    }
}
