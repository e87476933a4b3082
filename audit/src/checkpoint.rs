//! Checkpoints: a MAC'd statement of the chain head, kept beside the log.
//!
//! A hash chain proves order and detects edits, deletions and reordering in
//! the middle, but not the loss of its last records. After every append the
//! sink replaces `<log>.checkpoint` with `{file, seq, hash, time, mac}`, where
//! `mac` is an HMAC under a key the audited process cannot read. The verifier
//! then knows the log must reach at least `seq`, ending there in `hash`.
//!
//! What it does not prove: that nothing was appended *and* removed after the
//! checkpoint was written, or anything against someone who holds the key
//! (root on the box). Ship the OTLP copy of the events elsewhere for that.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{canonical::canonical_json, key::Key};

/// Schema identifier of checkpoint files.
pub const CHECKPOINT_SCHEMA: &str = "browser-shell.audit-checkpoint/1";

/// The chain head at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Always [`CHECKPOINT_SCHEMA`].
    pub schema: String,
    /// File name (not path) of the log the head record is in.
    pub file: String,
    /// `seq` of the head record.
    pub seq: u64,
    /// `hash` of the head record.
    pub hash: String,
    /// When the checkpoint was written (RFC 3339 UTC).
    pub time: String,
    /// HMAC-SHA256 over the canonical JSON of the fields above.
    pub mac: String,
}

impl Checkpoint {
    /// A checkpoint for `seq`/`hash`, MAC'd with `key`.
    pub fn new(key: &Key, file: &str, seq: u64, hash: &str, time: &str) -> Self {
        let mut checkpoint = Self {
            schema: CHECKPOINT_SCHEMA.to_owned(),
            file: file.to_owned(),
            seq,
            hash: hash.to_owned(),
            time: time.to_owned(),
            mac: String::new(),
        };
        checkpoint.mac = checkpoint.expected_mac(key);
        checkpoint
    }

    fn expected_mac(&self, key: &Key) -> String {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut value {
            map.remove("mac");
        }
        key.checkpoint_mac(canonical_json(&value).as_bytes())
    }

    /// Does the MAC match under `key`?
    pub fn is_authentic(&self, key: &Key) -> bool {
        self.mac == self.expected_mac(key)
    }

    /// Read the checkpoint file at `path`.
    ///
    /// # Errors
    /// When it cannot be read or parsed.
    pub fn read(path: &Path) -> io::Result<Self> {
        serde_json::from_str(&std::fs::read_to_string(path)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Replace the checkpoint at `path` unless it already vouches for this
    /// record or a later one, under an exclusive `flock` of
    /// `<path>.lock`: that is how writers in several processes share one
    /// checkpoint without the log's own lock, which appenders wait for. The
    /// lock keeps them from writing the same temp file at once, and the
    /// comparison keeps a slower writer from moving the checkpoint back.
    /// A checkpoint that does not verify under `key` is replaced.
    ///
    /// # Errors
    /// Opening or locking the lock file, and any error of [`Checkpoint::write`].
    pub fn write_unless_older(&self, path: &Path, key: &Key) -> io::Result<()> {
        let lock = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(format!("{}.lock", path.display()))?;
        // Released when `lock` is closed, after the write.
        lock.lock()?;
        if let Ok(current) = Self::read(path)
            && current.is_authentic(key)
            && current.seq >= self.seq
        {
            return Ok(());
        }
        self.write(path)
    }

    /// Replace the checkpoint at `path`: temp file, fdatasync, rename, and
    /// an fsync of the directory. Without that last one, the rename's
    /// metadata waits in the filesystem journal until the next sync of
    /// anything — usually the next call's intent record, whose `fdatasync`
    /// then commits it too, on the call's critical path. The flusher writes
    /// checkpoints in the background, so that is where the cost belongs. (A crash before it only brings the previous checkpoint
    /// back, which makes the check weaker, never wrong.)
    ///
    /// # Errors
    /// Any write, sync or rename failure.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(serde_json::to_string(self).unwrap_or_default().as_bytes())?;
        file.sync_data()?;
        std::fs::rename(&tmp, path)?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()
    }
}

/// Where the checkpoint of the log at `log` lives.
pub fn checkpoint_path(log: &Path) -> PathBuf {
    PathBuf::from(format!("{}.checkpoint", log.display()))
}
