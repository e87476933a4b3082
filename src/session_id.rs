//! Session ids as the agent names them, and the daemon names agent-browser sees.
//!
//! The tool accepts `^[a-zA-Z0-9._-]{1,64}$`; agent-browser accepts only
//! `[A-Za-z0-9_-]`, and the name is an argv item (`--session <name>`), where a
//! leading `-` (`-h`, `--version`) would be read as a flag. Safe names — no
//! dot, first character `[A-Za-z0-9_]` — are passed through unchanged (readable
//! in `ps` and in the socket dir). Any other id maps to `_` + hex(SHA-256(id)):
//! 65 characters, so it can never equal a pass-through id (at most 64), and two
//! distinct mapped ids collide only if SHA-256 does. Two distinct session ids
//! therefore never share a daemon. The daemon name is also the per-session
//! output directory name, which is why `..` as a session id is harmless.

use crate::refusal::{Refusal, Rule};

/// Longest session id the tool accepts.
pub(crate) const MAX_SESSION_ID_LEN: usize = 64;

/// A validated session id together with its agent-browser daemon name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SessionId {
    id: String,
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
            daemon_name,
        })
    }

    /// The id exactly as the agent sent it.
    pub(crate) fn as_str(&self) -> &str {
        &self.id
    }

    /// The `--session` value for agent-browser; also the output subdirectory.
    pub(crate) fn daemon_name(&self) -> &str {
        &self.daemon_name
    }
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
mod tests {
    use super::*;

    #[test]
    fn plain_ids_pass_through_unchanged() {
        let s = SessionId::parse("User_1-a").unwrap();
        assert_eq!(s.daemon_name(), "User_1-a");
    }

    #[test]
    fn dotted_ids_map_to_distinct_names_that_no_plain_id_can_take() {
        let a = SessionId::parse("a.b").unwrap();
        let b = SessionId::parse("a_b").unwrap();
        let c = SessionId::parse("a..b").unwrap();
        assert_ne!(a.daemon_name(), b.daemon_name());
        assert_ne!(a.daemon_name(), c.daemon_name());
        assert_eq!(a.daemon_name().len(), MAX_DAEMON_NAME_LEN);
        assert!(a.daemon_name().len() > MAX_SESSION_ID_LEN);
        assert!(
            a.daemon_name()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        );
    }

    #[test]
    fn ids_that_read_as_flags_never_reach_argv() {
        let ids = ["-h", "--help", "-V", "--version", "-x", "-", "--"];
        let names: Vec<String> = ids
            .iter()
            .map(|id| SessionId::parse(id).unwrap().daemon_name().to_owned())
            .collect();
        for (id, name) in ids.iter().zip(&names) {
            assert!(!name.starts_with('-'), "{id:?} -> {name:?}");
            assert_eq!(name.len(), MAX_DAEMON_NAME_LEN, "{id:?}");
            assert!(is_daemon_name(name), "{id:?}");
            assert_eq!(SessionId::parse(id).unwrap().as_str(), *id);
        }
        let distinct: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len());
        // A hyphen after the first character is harmless and stays readable.
        assert_eq!(SessionId::parse("a-b").unwrap().daemon_name(), "a-b");
        assert_eq!(SessionId::parse("_a").unwrap().daemon_name(), "_a");
    }

    #[test]
    fn dot_dot_is_a_harmless_session_id() {
        let s = SessionId::parse("..").unwrap();
        assert!(!s.daemon_name().contains('.'));
    }

    #[test]
    fn rejects_bad_session_ids() {
        for bad in ["", "a b", "a/b", "é", "a\0", &"x".repeat(65)] {
            let err = SessionId::parse(bad).unwrap_err();
            assert_eq!(err.rule, "session_id.invalid", "{bad:?}");
        }
        assert!(SessionId::parse(&"x".repeat(64)).is_ok());
    }

    #[test]
    fn only_names_parse_can_produce_pass_as_daemon_names() {
        for id in ["u1", "a.b", "..", &"x".repeat(64)] {
            let s = SessionId::parse(id).unwrap();
            assert!(is_daemon_name(s.daemon_name()), "{id:?}");
        }
        for name in ["", "..", ".", "a/b", "a.b", "..sock", &"x".repeat(66)] {
            assert!(!is_daemon_name(name), "{name:?}");
        }
    }
}
