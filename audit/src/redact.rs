//! Redaction: what the log may say about secrets.
//!
//! Free text (what an agent types into a page) becomes its length and a keyed
//! MAC, so two records of the same secret can be correlated without the
//! secret being recoverable. URLs keep their shape but lose userinfo and the
//! values of query parameters whose names look secret.

use serde_json::{Value, json};
use url::Url;

use crate::key::Key;

/// Query parameter names whose values are masked (matched case-insensitively
/// as substrings of the name).
pub const DEFAULT_SECRET_PARAMS: &[&str] = &[
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "pwd",
    "pass",
    "auth",
    "sig",
    "code",
    "session",
    "credential",
    "jwt",
    "otp",
];

/// Masks secrets with a keyed MAC.
#[derive(Debug, Clone)]
pub struct Redactor {
    key: Key,
    secret_params: Vec<String>,
}

/// What a masked value is replaced with.
pub const MASK: &str = "***";

impl Redactor {
    /// A redactor using `key` and the default secret parameter names plus `extra`.
    pub fn new(key: Key, extra: &[String]) -> Self {
        let mut secret_params: Vec<String> = DEFAULT_SECRET_PARAMS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        secret_params.extend(extra.iter().map(|s| s.to_ascii_lowercase()));
        Self { key, secret_params }
    }

    /// `{"redacted": true, "len": n, "mac": <16 hex>}` for free text.
    pub fn secret(&self, text: &str) -> Value {
        let mac = self.key.redaction_mac(text.as_bytes());
        json!({"redacted": true, "len": text.chars().count(), "mac": &mac[..16]})
    }

    /// Keyed MAC of a whole argv (unredacted), so a reviewer holding a
    /// candidate command can prove it is the one that ran.
    pub fn argv_mac(&self, argv: &[String]) -> String {
        let encoded = serde_json::to_string(argv).unwrap_or_default();
        self.key.redaction_mac(encoded.as_bytes())
    }

    /// A URL with userinfo removed and secret-looking query values masked;
    /// text that is not an absolute URL is returned unchanged.
    pub fn url(&self, text: &str) -> String {
        let Ok(mut url) = Url::parse(text) else {
            return text.to_owned();
        };
        if !url.has_host() {
            return text.to_owned();
        }
        let mut changed = false;
        if !url.username().is_empty() || url.password().is_some() {
            let _ = url.set_username(MASK);
            let _ = url.set_password(None);
            changed = true;
        }
        if url.query().is_some() {
            let pairs: Vec<(String, String)> = url
                .query_pairs()
                .map(|(k, v)| {
                    let secret = self.is_secret_param(&k);
                    changed |= secret;
                    (
                        k.into_owned(),
                        if secret {
                            MASK.to_owned()
                        } else {
                            v.into_owned()
                        },
                    )
                })
                .collect();
            if changed {
                url.query_pairs_mut().clear().extend_pairs(pairs);
            }
        }
        if changed { url.into() } else { text.to_owned() }
    }

    /// Mask URLs found anywhere in `text` (for output excerpts sent elsewhere).
    pub fn text(&self, text: &str) -> String {
        text.split_inclusive(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .map(|piece| {
                let trimmed =
                    piece.trim_end_matches(|c: char| c.is_whitespace() || c == '"' || c == '\'');
                let tail = &piece[trimmed.len()..];
                if trimmed.contains("://") {
                    format!("{}{tail}", self.url(trimmed))
                } else {
                    piece.to_owned()
                }
            })
            .collect()
    }

    fn is_secret_param(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        self.secret_params.iter().any(|p| name.contains(p.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor() -> Redactor {
        let dir = tempfile::tempdir().unwrap();
        Redactor::new(
            Key::load_or_create(&dir.path().join("k")).unwrap(),
            &["x-api".to_owned()],
        )
    }

    #[test]
    fn equal_secrets_correlate_without_being_revealed() {
        let r = redactor();
        let a = r.secret("hunter2");
        assert_eq!(a, r.secret("hunter2"));
        assert_ne!(a, r.secret("hunter3"));
        assert_eq!(a["len"], 7);
        assert!(!a.to_string().contains("hunter2"));
    }

    #[test]
    fn urls_lose_userinfo_and_secret_query_values() {
        let r = redactor();
        assert_eq!(
            r.url("https://bob:pw@example.com/a?token=abc&q=shoes&X-API-Key=1"),
            "https://***@example.com/a?token=***&q=shoes&X-API-Key=***"
        );
        assert_eq!(
            r.url("https://example.com/a?q=1"),
            "https://example.com/a?q=1"
        );
        assert_eq!(r.url("not a url"), "not a url");
    }

    #[test]
    fn urls_inside_text_are_masked() {
        let r = redactor();
        assert_eq!(
            r.text("went to \"https://h/?password=x\" then"),
            "went to \"https://h/?password=***\" then"
        );
    }
}
