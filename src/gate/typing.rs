//! Which sessions are typing secrets right now, so the gate can check the
//! frame each keystroke lands in.
//!
//! The call pipeline checks the top page before a secret is released, but
//! a field may sit in a frame of another origin: agent-browser sends the
//! text to the page, and Chromium delivers it to whatever frame has focus.
//! While a session's call types secrets, the relay holds each text input
//! of that session until the warden has found the focused frame and the
//! secrets' hosts allow it ([`super::relay`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use crate::sync::lock;

/// Sessions typing secrets, by daemon name, with the secrets' names.
#[derive(Debug, Clone, Default)]
pub(crate) struct SecretTyping {
    by_daemon: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

/// A session's secret typing, ended when dropped.
#[derive(Debug)]
pub(crate) struct Typing {
    registry: SecretTyping,
    daemon: String,
}

impl SecretTyping {
    /// `daemon`'s call is about to type the secrets `names`.
    pub(crate) fn begin(&self, daemon: &str, names: &[String]) -> Typing {
        lock(&self.by_daemon).insert(daemon.to_owned(), names.to_vec());
        Typing {
            registry: self.clone(),
            daemon: daemon.to_owned(),
        }
    }

    /// The secrets `daemon` is typing, if it is.
    pub(super) fn names(&self, daemon: &str) -> Option<Vec<String>> {
        lock(&self.by_daemon).get(daemon).cloned()
    }
}

impl Drop for Typing {
    fn drop(&mut self) {
        lock(&self.registry.by_daemon).remove(&self.daemon);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_types_secrets_only_while_its_call_holds_the_typing() {
        let registry = SecretTyping::default();
        let typing = registry.begin("d1", &["pw".to_owned()]);
        assert_eq!(registry.names("d1"), Some(vec!["pw".to_owned()]));
        assert_eq!(registry.names("d2"), None);
        drop(typing);
        assert_eq!(registry.names("d1"), None);
    }
}
