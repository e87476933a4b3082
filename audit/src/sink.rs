//! The durable writer: lock, find the chain head, append one line,
//! fdatasync, rotate by size, refresh the checkpoint.
//!
//! Two durabilities. A [`Durability::Synced`] record (an intent: the gate in
//! front of an action) is on disk when `append` returns: written and
//! `fdatasync`'d. A [`Durability::Deferred`] record (an outcome, a refusal, a
//! lifecycle event: nothing waits on it) is written to the file before
//! `append` returns — so it survives the process being killed — and synced by
//! the next synced append or by the background flusher within
//! [`DEFERRED_SYNC_WITHIN`]; only a kernel crash or power loss inside that
//! window can lose it, and the verifier then shows the call's intent without
//! its outcome. The checkpoint is refreshed by the flusher too, not on every
//! append: it may lag the log by that window, which only weakens the
//! truncation check for the newest records. A failed background sync
//! latches: every later append fails, so a caller that gates on the audit
//! stops.
//!
//! Several server processes may append to one log. They serialise on an
//! exclusive `flock` of `<log>.lock` — a separate file, because rotation
//! renames the log and a lock on the old inode would not exclude a writer of
//! the new one. Under the lock each writer checks that its descriptor still
//! names the current log (another process may have rotated it), takes the
//! chain head from its cache when the file has not grown since its own last
//! write, and otherwise reads the tail back.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write},
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use serde_json::{Map, Value};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

pub use crate::append_error::{AppendStep, AuditError};
pub use crate::log_files::{Rotation, rotated};

use crate::{
    append_error::{io_error, latched},
    canonical::{canonical_json, record_hash},
    checkpoint::{Checkpoint, checkpoint_path},
    event::{Event, Phase},
    intent::{IntentSynced, IntentWritten},
    log_files::{Tail, genesis, open_log, read_tail, rotation_record},
    signing::{SigningKey, public_key_path},
};

/// A deferred record is synced, and the checkpoint refreshed, within this
/// long of being written.
pub const DEFERRED_SYNC_WITHIN: Duration = Duration::from_millis(100);

/// Where a record landed in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// Position in the chain (1-based).
    pub seq: u64,
    /// The record's hash.
    pub hash: String,
    /// The record as written (one JSON object).
    pub record: Value,
}

/// How durable a record must be when [`Sink::append`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Written and `fdatasync`'d: it survives a power loss.
    Synced,
    /// Written (it survives the process being killed); synced within
    /// [`DEFERRED_SYNC_WITHIN`].
    Deferred,
}

/// An append-only audit log shared safely between threads and processes.
///
/// Dropping it syncs what is still pending and refreshes the checkpoint.
#[derive(Debug)]
pub struct Sink {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    path: PathBuf,
    rotation: Option<Rotation>,
    key: Option<SigningKey>,
    lock: Option<File>,
    state: Mutex<State>,
    /// Records waiting for the next group commit, with where to put each result.
    queue: Mutex<Vec<Queued>>,
}

/// A record body waiting for a group commit, its durability, and where its
/// result goes.
type Queued = (Map<String, Value>, Durability, Arc<Slot>);

/// Where a leader leaves one follower's result.
#[derive(Debug, Default)]
struct Slot(Mutex<Option<Result<Sealed, AuditError>>>);

#[derive(Debug)]
struct State {
    file: File,
    /// (inode, length) of the file right after our last write, and the head.
    head: Option<(u64, u64, Tail)>,
    /// Deferred records were written since the last sync.
    unsynced: bool,
    /// Records were written since the last checkpoint.
    checkpoint_due: bool,
    /// A background sync failed: records reported written may be lost, so
    /// every later append fails with this error.
    failed: Option<(io::ErrorKind, String)>,
}

impl Sink {
    /// Open (creating, mode 0600) the log at `path`. With a `key`, a
    /// checkpoint signed by it is kept in `<path>.checkpoint`, and its public
    /// half published as `<path>.checkpoint-key.pub` for reviewers.
    ///
    /// # Errors
    /// [`AuditError::Io`] at [`AppendStep::Open`] when the log or its lock file cannot be opened.
    pub fn open(
        path: &Path,
        key: Option<SigningKey>,
        rotation: Option<Rotation>,
    ) -> Result<Self, AuditError> {
        let open_err = io_error(AppendStep::Open, path);
        let file = open_log(path).map_err(open_err)?;
        let regular = file.metadata().map_err(open_err)?.file_type().is_file();
        // Devices (/dev/full in tests) get neither a lock file nor rotation
        // nor checkpoints: there is nothing to protect on them.
        let lock = if regular {
            Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(format!("{}.lock", path.display()))
                    .map_err(open_err)?,
            )
        } else {
            None
        };
        let key = key.filter(|_| regular);
        if let Some(key) = &key {
            key.public()
                .publish(&public_key_path(path))
                .map_err(open_err)?;
        }
        let inner = Arc::new(Inner {
            path: path.to_owned(),
            rotation: rotation.filter(|_| regular),
            key,
            lock,
            state: Mutex::new(State {
                file,
                head: None,
                unsynced: false,
                checkpoint_due: false,
                failed: None,
            }),
            queue: Mutex::new(Vec::new()),
        });
        if regular {
            start_flusher(Arc::downgrade(&inner)).map_err(open_err)?;
        }
        Ok(Self { inner })
    }

    /// The [`crate::PublicKey::fingerprint`] of the key the checkpoint is signed under;
    /// `None` when no checkpoint is kept (no key, or the log is a device).
    pub fn checkpoint_key_fingerprint(&self) -> Option<String> {
        self.inner
            .key
            .as_ref()
            .map(|key| key.public().fingerprint())
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Chain, append and sync `event` ([`Durability::Synced`]). Only when
    /// this returns `Ok` is the record durable.
    ///
    /// # Errors
    /// See [`Sink::append_with`].
    pub fn append(&self, event: Event) -> Result<Sealed, AuditError> {
        self.inner.append(event, Durability::Synced)
    }

    /// Chain and append `event` with the given durability.
    ///
    /// Group commit: callers queue their record; whoever then holds the
    /// writer lock writes *every* queued record with one `write` and, if any
    /// of them is [`Durability::Synced`], one `fdatasync`, and hands each
    /// caller its result. A synced caller returns only after the sync that
    /// covers its own record.
    ///
    /// # Errors
    /// Any failure to lock, read the tail, write, sync or rotate, or an
    /// earlier background sync that failed; the caller must then treat the
    /// record as not written.
    pub fn append_with(&self, event: Event, durability: Durability) -> Result<Sealed, AuditError> {
        self.inner.append(event, durability)
    }

    /// Append an intent record ([`Phase::Intent`]) and sync it before
    /// returning: the proof that the action it announces may run.
    ///
    /// # Errors
    /// See [`Sink::append_with`]; on error nothing may act on the intent.
    pub fn append_intent_synced(&self, event: Event) -> Result<(Sealed, IntentSynced), AuditError> {
        let sealed = self.inner.append(as_intent(event), Durability::Synced)?;
        let proof = IntentSynced::minted(sealed.seq);
        Ok((sealed, proof))
    }

    /// Append a record of the server's own act (its phase kept, e.g. a
    /// pool warm-up's `lifecycle`) and sync it in the same step: the proof
    /// the act needs before it starts, without counting as a call.
    ///
    /// # Errors
    /// See [`Sink::append_with`].
    pub fn append_synced(&self, event: Event) -> Result<(Sealed, IntentSynced), AuditError> {
        let sealed = self.inner.append(event, Durability::Synced)?;
        let proof = IntentSynced::minted(sealed.seq);
        Ok((sealed, proof))
    }

    /// Append an intent record ([`Phase::Intent`]) without waiting for its
    /// sync; [`IntentWritten::sync`] makes it durable and yields the proof.
    ///
    /// # Errors
    /// See [`Sink::append_with`].
    pub fn append_intent(&self, event: Event) -> Result<(Sealed, IntentWritten), AuditError> {
        let sealed = self.inner.append(as_intent(event), Durability::Deferred)?;
        let written = IntentWritten {
            inner: Arc::clone(&self.inner),
            seq: sealed.seq,
        };
        Ok((sealed, written))
    }

    /// Make every record this sink has written so far durable
    /// (`fdatasync`), without refreshing the checkpoint.
    ///
    /// For a caller that appended a record [`Durability::Deferred`] and must
    /// have it on disk before it acts on it, but has work to prepare
    /// meanwhile: the sync then overlaps that work instead of preceding it.
    /// Records another thread already synced (a group commit, the flusher)
    /// cost nothing here.
    ///
    /// # Errors
    /// A failed sync, which latches: this and every later append fail.
    pub fn sync(&self) -> Result<(), AuditError> {
        self.inner.sync()
    }

    /// Sync what is pending and refresh the checkpoint now (at shutdown;
    /// the background flusher does the same within
    /// [`DEFERRED_SYNC_WITHIN`]).
    ///
    /// # Errors
    /// A failed sync (which latches: every later append fails too) or a
    /// failed checkpoint write (retried at the next flush).
    pub fn flush(&self) -> Result<(), AuditError> {
        self.inner.flush()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.inner.flush();
    }
}

/// An intent is an intent, whatever phase the caller's event said.
fn as_intent(mut event: Event) -> Event {
    event.phase = Phase::Intent;
    event
}

/// The background flusher: every [`DEFERRED_SYNC_WITHIN`], sync pending
/// records and refresh the checkpoint; it ends with its sink.
fn start_flusher(sink: Weak<Inner>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("audit-flush".into())
        .spawn(move || {
            loop {
                std::thread::sleep(DEFERRED_SYNC_WITHIN);
                let Some(inner) = sink.upgrade() else { break };
                // A failed sync latches inside and the next append reports
                // it; a failed checkpoint write is retried next time.
                let _ = inner.flush();
            }
        })
        .map(drop)
}

impl Inner {
    fn append(&self, event: Event, durability: Durability) -> Result<Sealed, AuditError> {
        let body = match serde_json::to_value(&event)? {
            Value::Object(map) => map,
            _ => return Err(AuditError::Poisoned),
        };
        let slot = Arc::new(Slot::default());
        self.queue.lock().map_err(|_| AuditError::Poisoned)?.push((
            body,
            durability,
            Arc::clone(&slot),
        ));
        let mut state = self.state.lock().map_err(|_| AuditError::Poisoned)?;
        // A leader may have committed our record while we waited.
        if let Some(result) = slot.take() {
            return result;
        }
        let batch = std::mem::take(&mut *self.queue.lock().map_err(|_| AuditError::Poisoned)?);
        let sync = batch.iter().any(|(_, d, _)| *d == Durability::Synced);
        let (bodies, followers): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .map(|(body, _, follower)| (body, follower))
            .unzip();
        match self.commit(&mut state, bodies, sync) {
            Ok(sealed) => {
                for (follower, sealed) in followers.iter().zip(sealed) {
                    follower.put(Ok(sealed));
                }
            }
            Err(e) => {
                for follower in &followers {
                    follower.put(Err(e.duplicate()));
                }
            }
        }
        slot.take().unwrap_or(Err(AuditError::Poisoned))
    }

    /// Write `bodies` as consecutive records with one write, and sync them
    /// (and every deferred record before them) when `sync`.
    fn commit(
        &self,
        state: &mut State,
        bodies: Vec<Map<String, Value>>,
        sync: bool,
    ) -> Result<Vec<Sealed>, AuditError> {
        if let Some(failed) = &state.failed {
            return Err(latched(failed, &self.path));
        }
        let _lock = self.cross_process_lock()?;
        let read_err = io_error(AppendStep::ReadTail, &self.path);
        self.reopen_if_rotated(state, AppendStep::ReadTail)?;
        let meta = state.file.metadata().map_err(read_err)?;
        let tail = self.head(state, &meta).map_err(read_err)?;

        let time = now_rfc3339();
        let (mut seq, mut prev) = (tail.seq, tail.hash);
        let mut sealed = Vec::with_capacity(bodies.len());
        let mut records = String::new();
        for body in bodies {
            sealed.push(seal(body, &mut seq, &mut prev, &time, &mut records));
        }
        let mut line = String::new();
        if tail.needs_newline {
            // A torn last line (crash mid-write) stays visible as its own bad
            // line for the verifier; it is never merged into this record.
            line.push('\n');
        }
        line.push_str(&records);
        if let Some(rotation) = self.rotation
            && meta.len() > 0
            && meta.len() + line.len() as u64 > rotation.max_bytes
        {
            // Deferred records (ours or another process's) end the file
            // about to become `log.1`; the new file will chain to them.
            sync_or_latch(state, &self.path)?;
            let (file, kept_from) = crate::log_files::rotate(&self.path, rotation)
                .map_err(io_error(AppendStep::Rotate, &self.path))?;
            state.file = file;
            // The new file says, in the chain, what the rotation kept: so a
            // verifier can tell records deleted by retention from records
            // deleted by someone else.
            seal(
                rotation_record(rotation, kept_from),
                &mut seq,
                &mut prev,
                &time,
                &mut records,
            );
            line = records;
        }

        state
            .file
            .write_all(line.as_bytes())
            .map_err(io_error(AppendStep::Write, &self.path))?;
        if sync {
            sync_or_latch(state, &self.path)?;
        } else {
            state.unsynced = true;
        }
        state.checkpoint_due = self.key.is_some();
        if let Ok(meta) = state.file.metadata() {
            let head = Tail {
                seq,
                hash: prev,
                needs_newline: false,
            };
            state.head = Some((meta.ino(), meta.len(), head));
        }
        Ok(sealed)
    }

    pub(crate) fn sync(&self) -> Result<(), AuditError> {
        let mut state = self.state.lock().map_err(|_| AuditError::Poisoned)?;
        if let Some(failed) = &state.failed {
            return Err(latched(failed, &self.path));
        }
        // `state.file` still holds every record we wrote: a rotation (ours,
        // or another process's noticed by `reopen_if_rotated`) syncs the
        // file it lets go of first, and clears `unsynced`.
        if state.unsynced {
            sync_or_latch(&mut state, &self.path)?;
        }
        Ok(())
    }

    /// Sync pending records, then write the checkpoint for the chain head.
    ///
    /// The sync and the head are taken under the cross-process lock, so the
    /// head read back is the file's real head (another process may have
    /// appended) and `fdatasync` — which covers the whole file, whoever
    /// wrote it — has made it durable before the checkpoint vouches for it.
    /// The checkpoint itself (a temp file, two more syncs and a rename) is
    /// written after both locks are released, so an append that arrives
    /// meanwhile never waits for it. [`Checkpoint::write_unless_older`] keeps
    /// writers of several processes apart and the checkpoint from moving back.
    fn flush(&self) -> Result<(), AuditError> {
        let checkpoint = {
            let mut state = self.state.lock().map_err(|_| AuditError::Poisoned)?;
            if let Some(failed) = &state.failed {
                return Err(latched(failed, &self.path));
            }
            if !state.unsynced && !state.checkpoint_due {
                return Ok(());
            }
            let _lock = self.cross_process_lock()?;
            self.reopen_if_rotated(&mut state, AppendStep::Checkpoint)?;
            // One sync covers our deferred records and, since the head may be
            // another process's record, theirs.
            sync_or_latch(&mut state, &self.path)?;
            let Some(key) = &self.key else {
                return Ok(());
            };
            let checkpoint_err = io_error(AppendStep::Checkpoint, &self.path);
            let meta = state.file.metadata().map_err(checkpoint_err)?;
            let tail = self.head(&mut state, &meta).map_err(checkpoint_err)?;
            let checkpoint = (tail.seq > 0).then(|| {
                let name = self
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (
                    Checkpoint::new(key, &name, tail.seq, &tail.hash, &now_rfc3339()),
                    key,
                )
            });
            state.head = Some((meta.ino(), meta.len(), tail));
            state.checkpoint_due = false;
            checkpoint
        };
        let Some((checkpoint, key)) = checkpoint else {
            return Ok(());
        };
        checkpoint
            .write_unless_older(&checkpoint_path(&self.path), &key.public())
            .map_err(|e| {
                // Retried at the next flush.
                if let Ok(mut state) = self.state.lock() {
                    state.checkpoint_due = true;
                }
                io_error(AppendStep::Checkpoint, &self.path)(e)
            })
    }

    /// The exclusive `flock` every writer process takes (none on a device).
    fn cross_process_lock(&self) -> Result<Option<FileLock<'_>>, AuditError> {
        self.lock
            .as_ref()
            .map(FileLock::exclusive)
            .transpose()
            .map_err(io_error(AppendStep::Lock, &self.path))
    }

    /// The chain head: cached when the file has not changed since our own
    /// last write, read back from the file otherwise.
    fn head(&self, state: &mut State, meta: &std::fs::Metadata) -> io::Result<Tail> {
        match state.head.take() {
            Some((ino, len, tail)) if ino == meta.ino() && len == meta.len() => Ok(tail),
            _ => self.find_head(&state.file, meta),
        }
    }

    /// Another process may have rotated the log: make sure our descriptor
    /// names the file now at `path`.
    fn reopen_if_rotated(&self, state: &mut State, step: AppendStep) -> Result<(), AuditError> {
        if self.lock.is_none() {
            return Ok(());
        }
        let err = io_error(step, &self.path);
        let current = std::fs::metadata(&self.path).ok();
        let ours = state.file.metadata().map_err(err)?;
        if current.is_none_or(|m| m.ino() != ours.ino() || m.dev() != ours.dev()) {
            // Our deferred records are in the file we are letting go of.
            if state.unsynced {
                sync_or_latch(state, &self.path)?;
            }
            state.file = open_log(&self.path).map_err(err)?;
            state.head = None;
        }
        Ok(())
    }

    /// The chain head: the last record of the current file, or, when it is
    /// empty (just rotated), of the newest rotated file.
    fn find_head(&self, file: &File, meta: &std::fs::Metadata) -> io::Result<Tail> {
        if !meta.file_type().is_file() {
            return Ok(genesis(false));
        }
        if meta.len() > 0 {
            return read_tail(file, meta.len());
        }
        match File::open(rotated(&self.path, 1)) {
            Ok(previous) => {
                let len = previous.metadata()?.len();
                let mut tail = if len > 0 {
                    read_tail(&previous, len)?
                } else {
                    genesis(false)
                };
                tail.needs_newline = false;
                Ok(tail)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(genesis(false)),
            Err(e) => Err(e),
        }
    }
}

/// `fdatasync` the log; a failure latches (records already reported as
/// written may be lost, so nothing may be appended after them).
fn sync_or_latch(state: &mut State, path: &Path) -> Result<(), AuditError> {
    match state.file.sync_data() {
        Ok(()) => {
            state.unsynced = false;
            Ok(())
        }
        Err(e) => {
            state.failed = Some((e.kind(), e.to_string()));
            Err(io_error(AppendStep::Sync, path)(e))
        }
    }
}

/// Seal `body` as the record after `seq`/`prev` and append its line to
/// `lines`.
fn seal(
    mut body: Map<String, Value>,
    seq: &mut u64,
    prev: &mut String,
    time: &str,
    lines: &mut String,
) -> Sealed {
    *seq += 1;
    body.insert("seq".into(), (*seq).into());
    body.insert("time".into(), time.into());
    body.insert("prev_hash".into(), prev.clone().into());
    let hash = record_hash(&body);
    body.insert("hash".into(), hash.clone().into());
    let record = Value::Object(body);
    lines.push_str(&canonical_json(&record));
    lines.push('\n');
    prev.clone_from(&hash);
    Sealed {
        seq: *seq,
        hash,
        record,
    }
}

fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

impl Slot {
    fn put(&self, result: Result<Sealed, AuditError>) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(result);
        }
    }

    fn take(&self) -> Option<Result<Sealed, AuditError>> {
        self.0.lock().ok()?.take()
    }
}

/// An exclusive `flock` held for the life of the value.
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
#[path = "sink_tests.rs"]
mod tests;
