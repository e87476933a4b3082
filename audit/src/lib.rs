//! Durable, append-only, hash-chained audit log for browser-shell.
//!
//! Every record is one JSON line appended under an exclusive lock shared by
//! all writer processes, chained to the previous record by SHA-256
//! (`prev_hash` → `hash`), and `fdatasync`'d before [`Sink::append`] returns.
//! A caller that gets an error back must not perform the action it was about
//! to record: that is what makes the log write-ahead. Records nothing waits
//! on (outcomes, refusals) may be appended [`Durability::Deferred`]: written
//! at once, synced within [`DEFERRED_SYNC_WITHIN`] by a background flusher. A signed checkpoint of
//! the chain head, kept beside the log under a key the audited process cannot
//! read, lets [`verify`] detect records removed from the end with nothing but
//! the key's public half; the redaction key is a separate secret.
//!
//! This crate knows nothing about MCP or processes: it stores [`Event`]s,
//! redacts what they must not reveal, proves their order, and summarises
//! them for reviewers. Shipping copies elsewhere (OTLP) is the caller's job.
//!
//! ```no_run
//! let key = audit::SigningKey::load_or_create("/var/log/browser-shell/audit.jsonl.checkpoint-key".as_ref())?;
//! let sink = audit::Sink::open("/var/log/browser-shell/audit.jsonl".as_ref(), Some(key), None)?;
//! let mut event = audit::Event::new(audit::Phase::Intent, "call-1");
//! event.session_id = Some("u1".into());
//! let sealed = sink.append(event)?;
//! assert!(sealed.seq >= 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod append_error;
mod canonical;
mod checkpoint;
mod event;
mod evidence;
mod intent;
mod key;
mod log_files;
mod redact;
mod replace;
pub mod report;
mod secret_file;
mod signing;
mod sink;
mod verify;

pub use canonical::{GENESIS, canonical_json, record_hash, sha256_hex, sha256_reader};
pub use checkpoint::{
    CHECKPOINT_SCHEMA, CHECKPOINT_SCHEMA_V1, Checkpoint, CheckpointKey, NotAuthentic,
    checkpoint_path,
};
pub use event::{Event, Outcome, Phase, SCHEMA, Verdict};
pub use evidence::{ImageCheck, ImageProblem, ImageStore, StoredImage, evidence_dir};
pub use intent::{IntentSynced, IntentWritten};
pub use key::Key;
pub use redact::{DEFAULT_SECRET_PARAMS, MASK, Redactor};
pub use signing::{PublicKey, SigningKey, public_key_path};
pub use sink::{
    AppendStep, AuditError, DEFERRED_SYNC_WITHIN, Durability, Rotation, Sealed, Sink, rotated,
};
pub use verify::{
    Anchor, Break, Dangling, Location, Promised, Start, Unstopped, Verification, VouchFailure,
    verify, verify_with,
};
