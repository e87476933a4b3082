//! Durable, append-only, hash-chained audit log for browser-shell.
//!
//! Every record is one JSON line appended to a file under an exclusive
//! `flock`, chained to the previous line by SHA-256 (`prev_hash` → `hash`),
//! and `fdatasync`'d before [`Sink::append`] returns. A caller that gets an
//! error back must not perform the action it was about to record: that is
//! what makes the log write-ahead.
//!
//! This crate knows nothing about MCP or processes: it stores [`Event`]s and
//! proves their order. It does not ship records anywhere else.
//!
//! ```no_run
//! let sink = audit::Sink::open("/var/log/browser-shell/audit.jsonl".as_ref())?;
//! let mut event = audit::Event::new(audit::Phase::Intent, "call-1");
//! event.session_id = Some("u1".into());
//! let sealed = sink.append(event)?;
//! assert!(sealed.seq >= 1);
//! # Ok::<(), audit::AuditError>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod event;
mod sink;

pub use event::{Event, Phase, SCHEMA};
pub use sink::{AuditError, Sealed, Sink};
