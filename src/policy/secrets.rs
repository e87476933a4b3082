//! Logins without secrets in the model's context: the operator's secrets
//! file maps names to values, each bound to the hosts it may be typed
//! into. The agent writes `{{secret:NAME}}` in the text of `fill` or
//! `type`; browser-shell types the value only when the session's page is
//! on one of the secret's hosts, and no reply carries a value back
//! ([`Secrets::scrub`]). Decisions and text only: the call pipeline reads
//! the page and records (`crate::call`).

use std::{
    borrow::Cow,
    collections::BTreeMap,
    fmt,
    path::Path,
    sync::{PoisonError, RwLock},
};

use serde::Deserialize;

use super::spellings::Spellings;
use crate::refusal::{Refusal, Rule};

/// How a placeholder starts and ends: `{{secret:NAME}}`. Doubled braces and
/// the `secret:` word do not occur in what an agent types into forms.
const OPEN: &str = "{{secret:";
const CLOSE: &str = "}}";
/// Longest secret name.
const MAX_NAME: usize = 64;
/// Shortest value: scrubbing replies replaces every occurrence, and a
/// value of one or two characters would mangle every reply.
const MIN_VALUE_CHARS: usize = 4;

/// Why a secrets file does not load.
#[derive(Debug, thiserror::Error)]
#[error("secrets file {path}: {message}")]
pub(crate) struct SecretsError {
    path: String,
    message: String,
}

/// Most cuts remembered of one secret (one per field length it met).
const MAX_CUTS: usize = 8;

/// One secret. Its value never reaches a `Debug` output, a record or a reply.
struct Secret {
    value: String,
    /// The value in every spelling a page or a serialiser may give it.
    spellings: Spellings,
    /// Prefixes a field kept of the value (its `maxlength` cut it), longest
    /// first, each in every spelling: learned after typing
    /// ([`Secrets::learn_cut`]).
    cuts: RwLock<Vec<(usize, Spellings)>>,
    hosts: Vec<HostPort>,
}

/// A host a secret may be typed into: its name (normalised as a URL's
/// host) and, if given, its port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPort {
    host: String,
    port: Option<u16>,
}

/// The operator's secrets (none when no file is configured).
#[derive(Default)]
pub(crate) struct Secrets {
    by_name: BTreeMap<String, Secret>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("names", &self.by_name.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The file's shape: `{"NAME": {"value": "...", "hosts": ["host[:port]"]}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    value: String,
    hosts: Vec<String>,
}

impl Secrets {
    /// Load the secrets file: owned by this process's user, readable by it
    /// alone (0600 or stricter), every name, value and host checked.
    pub(crate) fn load(path: &Path) -> Result<Self, SecretsError> {
        let error = |message: String| SecretsError {
            path: path.display().to_string(),
            message,
        };
        let text = read_private(path).map_err(error)?;
        let entries: BTreeMap<String, Entry> =
            serde_json::from_str(&text).map_err(|e| error(e.to_string()))?;
        let mut by_name = BTreeMap::new();
        for (name, entry) in entries {
            if !is_name(&name) {
                return Err(error(format!(
                    "{name:?} is not a secret name: 1 to {MAX_NAME} letters, digits or _, \
                     starting with a letter"
                )));
            }
            if entry.value.chars().count() < MIN_VALUE_CHARS {
                return Err(error(format!(
                    "the value of {name} is shorter than {MIN_VALUE_CHARS} characters: replies \
                     are scrubbed of every occurrence, and so short a value would mangle them"
                )));
            }
            let Some(spellings) = Spellings::of(&entry.value) else {
                return Err(error(format!(
                    "the value of {name} is too long to be found in every spelling a page \
                     may give it: at most 256 characters"
                )));
            };
            if entry.value.contains(OPEN) {
                return Err(error(format!("the value of {name} contains a placeholder")));
            }
            if entry.hosts.is_empty() {
                return Err(error(format!(
                    "{name} has no hosts: a secret must name where it may be typed"
                )));
            }
            let hosts = entry
                .hosts
                .iter()
                .map(|h| parse_host(h).map_err(|why| error(format!("{name}: {why}"))))
                .collect::<Result<_, _>>()?;
            by_name.insert(
                name,
                Secret {
                    value: entry.value,
                    spellings,
                    cuts: RwLock::default(),
                    hosts,
                },
            );
        }
        Ok(Self { by_name })
    }

    /// The names of the placeholders in `text`, each checked to be one of
    /// these secrets; a malformed placeholder or an unknown name is refused.
    pub(crate) fn names_in(&self, text: &str) -> Result<Vec<String>, Refusal> {
        let mut names = Vec::new();
        for name in placeholders(text)? {
            if !self.by_name.contains_key(name) {
                return Err(Refusal::new(
                    Rule::SecretUnknown,
                    format!(
                        "no secret named {name:?} is configured ({})",
                        self.known_names()
                    ),
                ));
            }
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    /// Is the page at `page` on the hosts of every secret in `names`?
    pub(crate) fn check_hosts(&self, names: &[String], page: &str) -> Result<(), Refusal> {
        self.check_place(names, page, "the page is on")
    }

    /// Is the frame at `frame`, which holds the focused field, on the hosts
    /// of every secret in `names`? (The top page may be, and an embedded
    /// frame of another origin not.)
    pub(crate) fn check_frame(&self, names: &[String], frame: &str) -> Result<(), Refusal> {
        self.check_place(names, frame, "the field is in a frame on")
    }

    fn check_place(&self, names: &[String], at: &str, place: &str) -> Result<(), Refusal> {
        let on = url::Url::parse(at).ok();
        let host = on
            .as_ref()
            .and_then(|u| u.host_str())
            .map(str::to_ascii_lowercase);
        let port = on.as_ref().and_then(url::Url::port_or_known_default);
        for name in names {
            let secret = self.by_name.get(name).ok_or_else(|| {
                Refusal::new(Rule::SecretUnknown, format!("no secret named {name:?}"))
            })?;
            let allowed = host.as_deref().is_some_and(|h| {
                secret
                    .hosts
                    .iter()
                    .any(|hp| hp.host == h && hp.port.is_none_or(|p| Some(p) == port))
            });
            if !allowed {
                return Err(Refusal::new(
                    Rule::SecretHost,
                    format!(
                        "the secret {name} may be typed only on {}; {place} {}; nothing was typed",
                        secret.hosts_shown(),
                        shown_origin(on.as_ref())
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `text` with each placeholder of a known secret replaced by its value
    /// (after [`Self::names_in`] and [`Self::check_hosts`] said yes).
    pub(crate) fn fill_in(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (name, secret) in &self.by_name {
            let placeholder = placeholder(name);
            if text.contains(&placeholder) {
                text = text.replace(&placeholder, &secret.value);
            }
        }
        text
    }

    /// `text` with every secret's value, in any spelling (URL-encoded in
    /// any charset, JSON-escaped, an HTML reference), replaced by its
    /// placeholder: what a reply or a record may carry.
    pub(crate) fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut text = Cow::Borrowed(text);
        for (name, secret) in &self.by_name {
            let cuts = secret.cuts.read().unwrap_or_else(PoisonError::into_inner);
            for spellings in std::iter::once(&secret.spellings).chain(cuts.iter().map(|(_, s)| s)) {
                if let Cow::Owned(scrubbed) = spellings.replace_all(&text, &placeholder(name)) {
                    text = Cow::Owned(scrubbed);
                }
            }
        }
        text
    }

    /// After `name` was typed into a field that now holds `field_value`: if
    /// the field kept only the value's first characters (its `maxlength`),
    /// that prefix is scrubbed from now on as the value is. A prefix shorter
    /// than a value may be ([`MIN_VALUE_CHARS`]) is not learned: it would
    /// mask ordinary text. Returns whether a cut was learned.
    pub(crate) fn learn_cut(&self, name: &str, field_value: &str) -> bool {
        let Some(secret) = self.by_name.get(name) else {
            return false;
        };
        if field_value.contains(&secret.value) {
            return false;
        }
        let chars: Vec<char> = secret.value.chars().collect();
        let kept = (MIN_VALUE_CHARS..chars.len()).rev().find(|&n| {
            let prefix: String = chars[..n].iter().collect();
            field_value.ends_with(&prefix)
        });
        let Some(kept) = kept else { return false };
        let mut cuts = secret.cuts.write().unwrap_or_else(PoisonError::into_inner);
        if cuts.iter().any(|(n, _)| *n == kept) || cuts.len() >= MAX_CUTS {
            return false;
        }
        let prefix: String = chars[..kept].iter().collect();
        let Some(spellings) = Spellings::of(&prefix) else {
            return false;
        };
        cuts.push((kept, spellings));
        // Longest first: a shorter cut never splits a longer one's match.
        cuts.sort_by_key(|cut| std::cmp::Reverse(cut.0));
        true
    }

    /// Keep what `previous` (the rules before a reload) learned of the
    /// secrets whose values did not change.
    pub(crate) fn keep_cuts_of(&self, previous: &Secrets) {
        for (name, secret) in &self.by_name {
            let Some(old) = previous
                .by_name
                .get(name)
                .filter(|o| o.value == secret.value)
            else {
                continue;
            };
            let learned: Vec<(usize, Spellings)> = old
                .cuts
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            *secret.cuts.write().unwrap_or_else(PoisonError::into_inner) = learned;
        }
    }

    /// [`Self::scrub`] every string in `value` (decoded, so an escape of
    /// the serialisation cannot hide a value, nor a replacement break it).
    pub(crate) fn scrub_value(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(text) => {
                if let Cow::Owned(scrubbed) = self.scrub(text) {
                    *text = scrubbed;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.scrub_value(v)),
            _ => {}
        }
    }

    /// Is any secret configured?
    pub(crate) fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Names and hosts, never values: what a lifecycle record may show.
    pub(crate) fn describe(&self) -> serde_json::Value {
        self.by_name
            .iter()
            .map(|(name, s)| (name.clone(), serde_json::json!(s.hosts_shown())))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    fn known_names(&self) -> String {
        if self.by_name.is_empty() {
            "no secrets are configured on this server: its operator names a secrets file \
             with --secrets (BROWSER_SHELL_SECRETS)"
                .to_owned()
        } else {
            let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            names.sort_unstable();
            format!(
                "known: {}; more are added to the file --secrets names",
                names.join(", ")
            )
        }
    }
}

impl Secret {
    fn hosts_shown(&self) -> String {
        let shown: Vec<String> = self
            .hosts
            .iter()
            .map(|hp| match hp.port {
                Some(port) => format!("{}:{port}", hp.host),
                None => hp.host.clone(),
            })
            .collect();
        shown.join(", ")
    }
}

/// The placeholder of secret `name`.
pub(crate) fn placeholder(name: &str) -> String {
    format!("{OPEN}{name}{CLOSE}")
}

/// Does `text` hold a placeholder (well-formed or not)?
pub(crate) fn mentions_placeholder(text: &str) -> bool {
    text.contains(OPEN)
}

/// The names of the well-formed placeholders in `text` (for the record).
/// Text with a malformed placeholder names none: it never runs (see
/// [`Secrets::names_in`]), and its refusal's record needs no names.
pub(crate) fn placeholder_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in placeholders(text).unwrap_or_default() {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

/// The names in `text`'s placeholders, in order; a placeholder that is not
/// closed or whose name is not a name is refused (it would otherwise be
/// typed as it is, and the agent would not know).
fn placeholders(text: &str) -> Result<Vec<&str>, Refusal> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let name = after
            .find(CLOSE)
            .map(|end| &after[..end])
            .filter(|name| is_name(name))
            .ok_or_else(|| {
                Refusal::new(
                    Rule::SecretUnknown,
                    "a malformed secret placeholder: write {{secret:NAME}} (NAME: letters, \
                     digits, _)",
                )
            })?;
        names.push(name);
        rest = &after[name.len() + CLOSE.len()..];
    }
    Ok(names)
}

fn is_name(name: &str) -> bool {
    name.len() <= MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `host`, `host:port` or `[v6]:port`, normalised as a URL's host.
fn parse_host(entry: &str) -> Result<HostPort, String> {
    let bad = || format!("{entry:?} is not a host or host:port");
    if entry.is_empty() || entry.contains(['/', '@', '?', '#']) {
        return Err(bad());
    }
    let url = url::Url::parse(&format!("http://{entry}/")).map_err(|_| bad())?;
    let host = url.host_str().ok_or_else(bad)?.to_ascii_lowercase();
    // `url` drops an explicit :80 for http; keep what the operator wrote.
    let port = match entry.rsplit_once(':') {
        Some((_, p))
            if !entry.ends_with(']') && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Some(p.parse::<u16>().map_err(|_| bad())?)
        }
        _ => None,
    };
    Ok(HostPort { host, port })
}

fn shown_origin(url: Option<&url::Url>) -> String {
    url.map_or_else(
        || "an unreadable URL".to_owned(),
        |u| match (u.host_str(), u.port_or_known_default()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            // No host: an about: page by its name (about:blank, about:srcdoc),
            // any other by its scheme alone (a data: or blob: URL may carry
            // the whole page).
            _ if u.scheme() == "about" => format!("about:{}", u.path()),
            _ => format!("a {}: URL", u.scheme()),
        },
    )
}

/// Read `path`, refusing a file another user owns or others can read.
fn read_private(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read it: {e}"))?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "it belongs to uid {}, not to this server (uid {me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "its mode is {:o}: others may read it; chmod 600 it",
            meta.mode() & 0o777
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
