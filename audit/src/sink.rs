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

/// How far back from the end to look for the last complete record.
const TAIL_WINDOW: u64 = 256 * 1024;

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
    file: Mutex<File>,
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
            file: Mutex::new(file),
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
        let guard = self.file.lock().map_err(|_| AuditError::Poisoned)?;
        let mut file: &File = &guard;
        let _lock = FileLock::exclusive(file).map_err(|source| AuditError::Lock {
            path: self.path.clone(),
            source,
        })?;
        let (prev_seq, prev_hash, needs_newline) =
            read_tail(file).map_err(|source| AuditError::ReadTail {
                path: self.path.clone(),
                source,
            })?;
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
        Ok(Sealed { seq, hash })
    }
}

/// Last complete record's `seq` and `hash`, and whether the file ends mid-line.
fn read_tail(mut file: &File) -> io::Result<(u64, String, bool)> {
    let meta = file.metadata()?;
    if !meta.file_type().is_file() || meta.len() == 0 {
        // Devices (/dev/full in tests) and empty files start a fresh chain.
        return Ok((0, GENESIS.to_owned(), false));
    }
    let len = meta.len();
    let start = len.saturating_sub(TAIL_WINDOW);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.take(len - start).read_to_end(&mut tail)?;
    let needs_newline = tail.last() != Some(&b'\n');
    for line in tail.split(|b| *b == b'\n').rev() {
        if let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(line)
            && let (Some(seq), Some(hash)) = (
                record.get("seq").and_then(Value::as_u64),
                record.get("hash").and_then(Value::as_str),
            )
        {
            return Ok((seq, hash.to_owned(), needs_newline));
        }
    }
    Ok((0, GENESIS.to_owned(), needs_newline))
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
