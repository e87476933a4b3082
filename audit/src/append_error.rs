//! Why an append failed, naming the step and the log: the one error a
//! caller of the sink sees, and must not proceed past.

use std::{
    io,
    path::{Path, PathBuf},
};

/// Why a record could not be made durable. The caller must not proceed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// An OS call on the log failed at `step` (disk full, read-only, …).
    #[error("cannot {step} audit log {path}: {source}")]
    Io {
        /// Which step of the append failed.
        step: AppendStep,
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

/// The step of opening or appending to the log that an [`AuditError::Io`]
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppendStep {
    /// Opening the log or its lock file.
    Open,
    /// Taking the exclusive cross-process lock.
    Lock,
    /// Reading back the previous record.
    ReadTail,
    /// Writing the record.
    Write,
    /// `fdatasync`: the record may not survive a crash.
    Sync,
    /// Rotating to a new file.
    Rotate,
    /// Writing the signed checkpoint.
    Checkpoint,
}

impl std::fmt::Display for AppendStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Open => "open",
            Self::Lock => "lock",
            Self::ReadTail => "read the tail of",
            Self::Write => "write",
            Self::Sync => "sync",
            Self::Rotate => "rotate",
            Self::Checkpoint => "write the checkpoint of",
        })
    }
}

/// The error every append returns after a failed sync.
pub(crate) fn latched(failed: &(io::ErrorKind, String), path: &Path) -> AuditError {
    AuditError::Io {
        step: AppendStep::Sync,
        path: path.to_owned(),
        source: io::Error::new(
            failed.0,
            format!(
                "{} (an earlier sync failed; restart once the disk is healthy)",
                failed.1
            ),
        ),
    }
}

/// Names the failed step and the log for an OS error.
pub(crate) fn io_error(
    step: AppendStep,
    path: &Path,
) -> impl Fn(io::Error) -> AuditError + Copy + '_ {
    move |source| AuditError::Io {
        step,
        path: path.to_owned(),
        source,
    }
}

impl AuditError {
    /// The same failure for another caller of the same group commit (the OS
    /// error code, and so its message, is kept).
    pub(crate) fn duplicate(&self) -> Self {
        let io = |e: &io::Error| {
            e.raw_os_error().map_or_else(
                || io::Error::new(e.kind(), e.to_string()),
                io::Error::from_raw_os_error,
            )
        };
        match self {
            Self::Io { step, path, source } => Self::Io {
                step: *step,
                path: path.clone(),
                source: io(source),
            },
            Self::Encode(e) => Self::Encode(serde_json::Error::io(io::Error::other(e.to_string()))),
            Self::Poisoned => Self::Poisoned,
        }
    }
}
