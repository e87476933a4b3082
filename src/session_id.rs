//! Session ids as the agent names them, and the daemon names agent-browser sees.
//!
//! The tool accepts `^[a-zA-Z0-9._-]{1,64}$`; agent-browser accepts only
//! `[A-Za-z0-9_-]`, and the name is an argv item (`--session <name>`), where a
//! leading `-` (`-h`, `--version`) would be read as a flag. Safe names — no
//! dot, first character `[A-Za-z0-9_]` — are passed through unchanged (readable
//! in `ps` and in the socket dir). Any other id maps to `_` + hex(SHA-256(id)):
//! 65 characters, so it can never equal a pass-through id (at most 64), and two
//! distinct mapped ids collide only if SHA-256 does. Two distinct session ids
//! therefore never share a daemon. That name is also the per-session output
//! directory name, which is why `..` as a session id is harmless.
//!
//! A session may instead be bound to a pooled daemon (`crate::server::pool`),
//! whose name is 65 characters that do not start with `_`: no agent's id can
//! produce it. Its output directory keeps the id's own name.

use crate::refusal::{Refusal, Rule};

/// Longest session id the tool accepts.
pub(crate) const MAX_SESSION_ID_LEN: usize = 64;

/// A validated session id together with its agent-browser daemon name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SessionId {
    id: String,
    /// The id's own name: its daemon's unless bound to a pooled one, and
    /// always its output directory.
    own_name: String,
    daemon_name: String,
}

impl SessionId {
    /// Validate `id` against `^[a-zA-Z0-9._-]{1,64}$`.
    pub(crate) fn parse(id: &str) -> Result<Self, Refusal> {
        if id.is_empty() || id.len() > MAX_SESSION_ID_LEN {
            return Err(Refusal::new(
                Rule::SessionIdInvalid,
                format!(
                    "session_id must be 1 to {MAX_SESSION_ID_LEN} characters long (got {})",
                    id.chars().count()
                ),
            ));
        }
        if let Some(bad) = id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(Refusal::new(
                Rule::SessionIdInvalid,
                format!("session_id may contain only A-Z a-z 0-9 . _ - (found {bad:?})"),
            ));
        }
        let daemon_name = if !is_safe_name(id) {
            format!("_{}", audit::sha256_hex(id.as_bytes()))
        } else {
            id.to_owned()
        };
        Ok(Self {
            id: id.to_owned(),
            own_name: daemon_name.clone(),
            daemon_name,
        })
    }

    /// A pooled daemon's own identity (it serves no agent yet).
    pub(crate) fn pooled(name: &str) -> Self {
        Self {
            id: name.to_owned(),
            own_name: name.to_owned(),
            daemon_name: name.to_owned(),
        }
    }

    /// The same session, run by the daemon called `daemon_name` (its own,
    /// or the pooled one it was bound to).
    pub(crate) fn run_by(&self, daemon_name: &str) -> Self {
        Self {
            daemon_name: daemon_name.to_owned(),
            ..self.clone()
        }
    }

    /// The id exactly as the agent sent it.
    pub(crate) fn as_str(&self) -> &str {
        &self.id
    }

    /// The `--session` value for agent-browser.
    pub(crate) fn daemon_name(&self) -> &str {
        &self.daemon_name
    }

    /// The name the id maps to on its own: its output subdirectory, and its
    /// daemon's name unless it is bound to a pooled one.
    pub(crate) fn own_name(&self) -> &str {
        &self.own_name
    }
}

/// Prefix of pooled daemons' names (`pool-` and 60 hex digits).
pub(crate) const POOL_PREFIX: &str = "pool-";

/// A fresh pooled daemon name: 65 characters not starting with `_`, so no
/// session id maps to it (pass-through names have at most 64, hashed ones
/// start with `_`), and random, so a previous server's cannot be reused.
pub(crate) fn new_pool_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 30];
    let random = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    if random.map_or(true, |n| n < bytes.len()) {
        // Unique within this server is what matters: pid, time, a counter.
        let seed = format!(
            "{} {:?} {}",
            std::process::id(),
            std::time::SystemTime::now(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let digest = audit::sha256_hex(seed.as_bytes());
        return format!("{POOL_PREFIX}{}", &digest[..60]);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{POOL_PREFIX}{hex}")
}

/// Is `name` a pooled daemon's name (ours, or a previous server's)?
pub(crate) fn is_pool_name(name: &str) -> bool {
    name.len() == MAX_DAEMON_NAME_LEN
        && name
            .strip_prefix(POOL_PREFIX)
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Can a valid id be its own daemon name? Only if no dot (agent-browser's
/// alphabet) and no leading `-` (no agent token may read as a flag in argv).
fn is_safe_name(id: &str) -> bool {
    id.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') && !id.contains('.')
}

/// Longest daemon name [`SessionId::parse`] can produce (a hashed id).
pub(crate) const MAX_DAEMON_NAME_LEN: usize = 65;

/// Could `name` be a daemon name [`SessionId::parse`] produced? Names read
/// back from the socket dir (which the confined agent-browser can write) go
/// into paths the unconfined server deletes: `..` or `a/b` must never pass.
pub(crate) fn is_daemon_name(name: &str) -> bool {
    (1..=MAX_DAEMON_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

#[cfg(test)]
#[path = "session_id_tests.rs"]
mod tests;
