//! The rules a call is decided under — the URL policy, the redactor built
//! from it, and their digest — as one value. A reload (SIGHUP, `policy
//! reload`) builds a new value and swaps it in whole: a call takes its
//! snapshot when it starts and finishes under it, and the next call sees
//! the new one. A file that does not load changes nothing.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, PoisonError, RwLock},
};

use serde_json::{Value, json};

use super::{
    secrets::{Secrets, SecretsError},
    url_policy::{PolicyError, UrlPolicy},
};

/// Why the rules did not load.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Secrets(#[from] SecretsError),
}

/// One loaded set of rules.
#[derive(Debug)]
pub(crate) struct Rules {
    pub(crate) url: UrlPolicy,
    /// Masks secrets in audit records (the policy's `redact` section adds
    /// query parameters to it).
    pub(crate) redactor: audit::Redactor,
    /// SHA-256 of the effective policy's canonical JSON: what every call
    /// record names, and what the lifecycle records carry in full.
    pub(crate) sha256: String,
    /// SHA-256 of the file's bytes (`None`: no file, the built-in default),
    /// to match against the file the operator deployed.
    pub(crate) file_sha256: Option<String>,
    /// What `{{secret:NAME}}` placeholders stand for (reloaded with the
    /// policy).
    pub(crate) secrets: Secrets,
}

impl Rules {
    /// The effective policy as a record shows it.
    pub(crate) fn policy_json(&self) -> Value {
        serde_json::to_value(&self.url).unwrap_or(Value::Null)
    }

    /// What a lifecycle record says about these rules.
    pub(crate) fn describe(&self, file: &Path) -> Value {
        json!({
            "secrets": self.secrets.describe(),
            "file": file.display().to_string(),
            "file_sha256": self.file_sha256,
            "source": if self.file_sha256.is_some() { "file" } else { "built-in default (no file)" },
            "sha256": self.sha256,
            "effective": self.policy_json(),
        })
    }
}

/// Where the rules come from, and what the server adds to every version
/// of them (the ports it protects, the operator's extra secret params).
#[derive(Debug)]
pub(crate) struct Source {
    pub(crate) policy_file: PathBuf,
    /// The operator's secrets file, if any (`--secrets`).
    pub(crate) secrets_file: Option<PathBuf>,
    pub(crate) protected_ports: Vec<u16>,
    pub(crate) extra_secret_params: Vec<String>,
    pub(crate) key: audit::Key,
    /// Whether a name is a subcommand browser-shell knows (approval rules
    /// naming another would never match: refused).
    pub(crate) subcommand_known: fn(&str) -> bool,
}

impl Source {
    /// Read and check the policy file; a missing file at the default path
    /// is the built-in default (the caller says so: see `cli::review`).
    pub(crate) fn load(&self) -> Result<Rules, LoadError> {
        let path = &self.policy_file;
        let (mut url, file_sha256) = match std::fs::read(path) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes).map_err(|_| PolicyError::Invalid {
                    path: path.display().to_string(),
                    message: "the file is not UTF-8".into(),
                })?;
                let policy = UrlPolicy::parse(&text, &path.display().to_string())?;
                (policy, Some(audit::sha256_hex(text.as_bytes())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                super::url_policy::missing_file(path)?;
                (UrlPolicy::default(), None)
            }
            Err(source) => {
                return Err(PolicyError::Read {
                    path: path.display().to_string(),
                    source,
                }
                .into());
            }
        };
        let unknown = url.approvals.unknown_subcommands(self.subcommand_known);
        if !unknown.is_empty() {
            return Err(PolicyError::Invalid {
                path: path.display().to_string(),
                message: format!("approvals: no such subcommand: {}", unknown.join(", ")),
            }
            .into());
        }
        url.protected_ports.clone_from(&self.protected_ports);
        let secret_params: Vec<String> = self
            .extra_secret_params
            .iter()
            .chain(&url.secret_query_params)
            .cloned()
            .collect();
        let secrets = match &self.secrets_file {
            Some(file) => Secrets::load(file)?,
            None => Secrets::default(),
        };
        // The digest names the rules, not this start: the ports the server
        // protects (the gate's changes with each start) are left out, so one
        // version of the file has one digest across restarts. Records still
        // carry the effective policy in full, ports included.
        let mut rules_only = serde_json::to_value(&url).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut rules_only {
            map.remove("protected_ports");
        }
        let sha256 = audit::sha256_hex(audit::canonical_json(&rules_only).as_bytes());
        Ok(Rules {
            redactor: audit::Redactor::new(self.key.clone(), &secret_params),
            url,
            sha256,
            file_sha256,
            secrets,
        })
    }
}

/// The rules in force, replaced whole by a reload.
#[derive(Debug)]
pub(crate) struct Current {
    source: Source,
    rules: RwLock<Arc<Rules>>,
}

/// What a reload did.
#[derive(Debug)]
pub(crate) enum Reload {
    /// The file loaded: these rules replaced those.
    Replaced { old: Arc<Rules>, new: Arc<Rules> },
    /// The file did not load: the rules in force stay, for this reason.
    Kept { rules: Arc<Rules>, error: LoadError },
}

impl Current {
    /// The rules loaded once from `source`.
    pub(crate) fn load(source: Source) -> Result<Self, LoadError> {
        let rules = Arc::new(source.load()?);
        Ok(Self {
            source,
            rules: RwLock::new(rules),
        })
    }

    /// The rules in force now; a call keeps this snapshot to its end.
    pub(crate) fn get(&self) -> Arc<Rules> {
        // A writer never panics while holding the lock (it only swaps an Arc).
        Arc::clone(&self.rules.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The policy file the rules come from.
    pub(crate) fn policy_file(&self) -> &Path {
        &self.source.policy_file
    }

    /// Read the file again: a valid one replaces the rules for the next
    /// call; an invalid one keeps them.
    pub(crate) fn reload(&self) -> Reload {
        match self.source.load() {
            Ok(rules) => {
                let new = Arc::new(rules);
                let mut slot = self.rules.write().unwrap_or_else(PoisonError::into_inner);
                new.secrets.keep_cuts_of(&slot.secrets);
                let old = std::mem::replace(&mut *slot, Arc::clone(&new));
                Reload::Replaced { old, new }
            }
            Err(error) => Reload::Kept {
                rules: self.get(),
                error,
            },
        }
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
