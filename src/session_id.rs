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
    own_name: DaemonName,
    daemon_name: DaemonName,
}

/// The name of an agent-browser daemon (its `--session`): it names the
/// daemon's socket, its uid, its browser context and that context's egress
/// listener, in the runner, the gate and the egress alike. Not a session id:
/// an agent's id maps to one ([`SessionId::parse`]), a pooled daemon has one
/// before any session does, and a name read back from a file the child could
/// write is one only once checked ([`DaemonName::checked`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub(crate) struct DaemonName(String);

impl DaemonName {
    /// `name`, if it could be a daemon name [`SessionId::parse`] produced
    /// (see [`is_daemon_name`]).
    pub(crate) fn checked(name: &str) -> Option<Self> {
        is_daemon_name(name).then(|| Self(name.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for DaemonName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Read back from a file the server wrote (a memo in the state dir): taken
/// in only if it is a daemon name.
impl<'de> serde::Deserialize<'de> for DaemonName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Self::checked(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("not a daemon name: {name:?}")))
    }
}

/// Read as the text it is (a path segment, a file name, an argv item):
/// the type only guards where a name is taken in.
impl std::ops::Deref for DaemonName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for DaemonName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for DaemonName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// Maps keyed by daemon name are looked up by a name read off the wire.
impl std::borrow::Borrow<str> for DaemonName {
    fn borrow(&self) -> &str {
        &self.0
    }
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
        let daemon_name = DaemonName(if !is_safe_name(id) {
            format!("_{}", audit::sha256_hex(id.as_bytes()))
        } else {
            id.to_owned()
        });
        Ok(Self {
            id: id.to_owned(),
            own_name: daemon_name.clone(),
            daemon_name,
        })
    }

    /// A pooled daemon's own identity (it serves no agent yet).
    pub(crate) fn pooled(name: &DaemonName) -> Self {
        Self {
            id: name.to_string(),
            own_name: name.clone(),
            daemon_name: name.clone(),
        }
    }

    /// The same session, run by the daemon called `daemon_name` (its own,
    /// or the pooled one it was bound to).
    pub(crate) fn run_by(&self, daemon_name: &DaemonName) -> Self {
        Self {
            daemon_name: daemon_name.clone(),
            ..self.clone()
        }
    }

    /// The id exactly as the agent sent it.
    pub(crate) fn as_str(&self) -> &str {
        &self.id
    }

    /// The `--session` value for agent-browser.
    pub(crate) fn daemon_name(&self) -> &DaemonName {
        &self.daemon_name
    }

    /// The name the id maps to on its own: its output subdirectory, and its
    /// daemon's name unless it is bound to a pooled one.
    pub(crate) fn own_name(&self) -> &DaemonName {
        &self.own_name
    }
}

/// Prefix of pooled daemons' names (`pool-` and 60 hex digits).
pub(crate) const POOL_PREFIX: &str = "pool-";

/// A fresh pooled daemon name: 65 characters not starting with `_`, so no
/// session id maps to it (pass-through names have at most 64, hashed ones
/// start with `_`), and random, so a previous server's cannot be reused.
pub(crate) fn new_pool_name() -> DaemonName {
    DaemonName(random_pool_name())
}

fn random_pool_name() -> String {
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
