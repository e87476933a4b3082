//! Checkpoints: a signed statement of the chain head, kept beside the log.
//!
//! A hash chain proves order and detects edits, deletions and reordering in
//! the middle, but not the loss of its last records. After every append the
//! sink replaces `<log>.checkpoint` with `{file, seq, hash, time, signature}`,
//! signed (Ed25519) by a key the audited process cannot read. The verifier,
//! holding only the public half, then knows the log must reach at least
//! `seq`, ending there in `hash`. Checkpoints of schema `/1` carry a `mac`
//! under a key derived from the redaction key instead; they are still read.
//!
//! What it does not prove: that nothing was appended *and* removed after the
//! checkpoint was written, or anything against someone who holds the secret
//! key (root on the box). Ship the OTLP copy of the events elsewhere for that.

use std::{
    fs::OpenOptions,
    io,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    canonical::canonical_json,
    key::Key,
    signing::{PublicKey, SigningKey},
};

/// Schema identifier of the checkpoint files written now (signed).
pub const CHECKPOINT_SCHEMA: &str = "browser-shell.audit-checkpoint/2";

/// Schema identifier of the MAC'd checkpoints written before.
pub const CHECKPOINT_SCHEMA_V1: &str = "browser-shell.audit-checkpoint/1";

/// What checks a checkpoint: the public key for `/2`, the redaction key for
/// the `/1` checkpoints older servers MAC'd under it.
#[derive(Debug, Clone)]
pub enum CheckpointKey {
    /// The public half of the checkpoint's signing key.
    Public(PublicKey),
    /// The audit key of a server that kept `/1` checkpoints.
    Legacy(Key),
}

impl CheckpointKey {
    /// The fingerprint a server's `started` record names for this key.
    pub fn fingerprint(&self) -> String {
        match self {
            Self::Public(key) => key.fingerprint(),
            Self::Legacy(key) => key.fingerprint(),
        }
    }
}

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
    /// `/2`: Ed25519 signature (hex) over the canonical JSON of the fields
    /// above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// `/1`: HMAC-SHA256 over the canonical JSON of the fields above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// Why a checkpoint does not authenticate, in a reviewer's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAuthentic {
    /// A `/2` checkpoint whose signature is missing or does not verify.
    #[error(
        "its signature does not verify under the public key {fingerprint} (forged, edited, or \
         signed by another key)"
    )]
    Signature {
        /// The public key's fingerprint it was checked under.
        fingerprint: String,
    },
    /// A `/1` checkpoint whose MAC is missing or wrong.
    #[error("it has a bad MAC (forged or wrong key)")]
    Mac,
    /// A `/2` checkpoint checked with the audit key.
    #[error("it is signed; check it with the public key (--public-key), not the audit key")]
    SignedNotMaced,
    /// A `/1` checkpoint checked with a public key.
    #[error("it is a /1 checkpoint, MAC'd under the audit key; check it with --key")]
    MacedNotSigned,
    /// A schema no verifier of this version knows.
    #[error("its schema {0:?} is not one this verifier knows")]
    Schema(String),
}

impl Checkpoint {
    /// A checkpoint for `seq`/`hash`, signed with `key`.
    pub fn new(key: &SigningKey, file: &str, seq: u64, hash: &str, time: &str) -> Self {
        let mut checkpoint = Self {
            schema: CHECKPOINT_SCHEMA.to_owned(),
            file: file.to_owned(),
            seq,
            hash: hash.to_owned(),
            time: time.to_owned(),
            signature: None,
            mac: None,
        };
        checkpoint.signature = Some(key.sign(&checkpoint.signed_bytes()));
        checkpoint
    }

    /// What the signature (or `/1` MAC) covers: every field but those two.
    fn signed_bytes(&self) -> Vec<u8> {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut value {
            map.remove("mac");
            map.remove("signature");
        }
        canonical_json(&value).into_bytes()
    }

    /// Is it what its schema says, authenticated under `key`?
    ///
    /// # Errors
    /// A bad or missing signature or MAC, or a key of the other kind.
    pub fn authenticate(&self, key: &CheckpointKey) -> Result<(), NotAuthentic> {
        match (self.schema.as_str(), key) {
            (CHECKPOINT_SCHEMA, CheckpointKey::Public(public)) => match &self.signature {
                Some(signature) if public.verifies(&self.signed_bytes(), signature) => Ok(()),
                _ => Err(NotAuthentic::Signature {
                    fingerprint: public.fingerprint(),
                }),
            },
            (CHECKPOINT_SCHEMA_V1, CheckpointKey::Legacy(key)) => match &self.mac {
                Some(mac) if *mac == key.checkpoint_mac(&self.signed_bytes()) => Ok(()),
                _ => Err(NotAuthentic::Mac),
            },
            (CHECKPOINT_SCHEMA, CheckpointKey::Legacy(_)) => Err(NotAuthentic::SignedNotMaced),
            (CHECKPOINT_SCHEMA_V1, CheckpointKey::Public(_)) => Err(NotAuthentic::MacedNotSigned),
            (other, _) => Err(NotAuthentic::Schema(other.to_owned())),
        }
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
    pub fn write_unless_older(&self, path: &Path, key: &PublicKey) -> io::Result<()> {
        let lock = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(format!("{}.lock", path.display()))?;
        // Released when `lock` is closed, after the write.
        lock.lock()?;
        if let Ok(current) = Self::read(path)
            && current
                .authenticate(&CheckpointKey::Public(key.clone()))
                .is_ok()
            && current.seq >= self.seq
        {
            return Ok(());
        }
        self.write(path)
    }

    /// Replace the checkpoint at `path` ([`crate::replace::replace`]). The
    /// flusher writes checkpoints in the background, so that is where the
    /// syncs' cost belongs. (A crash before them only brings the previous
    /// checkpoint back, which makes the check weaker, never wrong.)
    ///
    /// # Errors
    /// Any write, sync or rename failure.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        let text = serde_json::to_string(self).unwrap_or_default();
        crate::replace::replace(path, &tmp, text.as_bytes(), 0o600)
    }
}

/// Where the checkpoint of the log at `log` lives.
pub fn checkpoint_path(log: &Path) -> PathBuf {
    PathBuf::from(format!("{}.checkpoint", log.display()))
}
