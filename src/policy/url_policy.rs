//! The URL policy: which URLs the browser may be sent to.
//!
//! Decided in order, on exactly the URL the browser will load (WHATWG
//! parsing by the `url` crate, never a regex): scheme → host syntax →
//! `deny_hosts` → allowlists → addresses. Addresses come from the host when it
//! is an IP literal (in any form the URL standard accepts), otherwise from DNS;
//! if **any** address is not globally routable (loopback, private, link-local,
//! metadata, …) the URL is refused unless `allow_private_cidrs` covers it.
//! Resolution failure refuses too (fail closed).
//!
//! A scheme-less argument (`example.com/a`, `localhost:8080`) gets `https://`,
//! as agent-browser itself would do; browser-shell prepends it here so the
//! policy decides on, and passes on, the final URL.
//!
//! What a wrapper cannot see: the browser resolves the name again (DNS
//! rebinding), and redirects and subresources inside a page never pass
//! through here. The navigation guard re-checks the page URL after commands
//! that can navigate; an egress firewall and Chrome's `URLBlocklist` policy
//! close the rest.

use std::{net::IpAddr, path::Path, time::Duration};

use serde::{Deserialize, Serialize};
use url::{Host, Url};

use super::{
    address::{self, Allowance},
    resolve::{Resolve, reserved_localhost},
};
use crate::refusal::{Refusal, Rule};

/// Schemes an operator may allow.
const SUPPORTED_SCHEMES: &[&str] = &["http", "https"];

/// The policy file, as written (every key optional, unknown keys refused).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    open: OpenSection,
    #[serde(default)]
    redact: RedactSection,
    #[serde(default)]
    reply: ReplySection,
    #[serde(default)]
    approvals: super::approvals::Section,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ReplySection {
    /// Wrap page-derived text in per-call boundary markers.
    content_boundaries: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RedactSection {
    /// More query-parameter names whose values the audit log masks.
    secret_query_params: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct OpenSection {
    allow_schemes: Option<Vec<String>>,
    allow_about_blank: Option<bool>,
    allow_hosts: Option<Vec<String>>,
    allow_host_suffixes: Option<Vec<String>>,
    allow_private_cidrs: Option<Vec<String>>,
    deny_hosts: Option<Vec<String>>,
    navigation_guard: Option<bool>,
    dns_timeout_ms: Option<u64>,
}

/// A policy file that cannot be used; the server refuses to start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PolicyError {
    #[error("cannot read policy file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("policy file {path}: {message}")]
    Invalid { path: String, message: String },
    #[error(
        "--policy {path}: no such file (only the default path {DEFAULT_PATH} may be missing, for \
         the built-in default policy); fix the path, or leave --policy out"
    )]
    Missing { path: String },
}

/// Where the policy file is when no `--policy` names one: only here may it
/// be missing (a mistyped path must not run the default policy silently).
/// `serve`, a reload, `policy check` and `policy explain` all read a path
/// through [`UrlPolicy::load`], so they agree on what is usable.
pub(crate) const DEFAULT_PATH: &str = "/etc/agent-browser/browser-shell.policy.json";

/// The built-in default stands in for a missing file only at
/// [`DEFAULT_PATH`]; anywhere else a missing file is an error.
pub(crate) fn missing_file(path: &Path) -> Result<(), PolicyError> {
    if path == Path::new(DEFAULT_PATH) {
        Ok(())
    } else {
        Err(PolicyError::Missing {
            path: path.display().to_string(),
        })
    }
}

/// The effective policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct UrlPolicy {
    pub allow_schemes: Vec<String>,
    pub allow_about_blank: bool,
    /// Normalized hosts; `None` when no host allowlist is configured.
    pub allow_hosts: Option<Vec<String>>,
    /// Normalized suffixes, each starting with a dot.
    pub allow_host_suffixes: Option<Vec<String>>,
    /// Non-public ranges that may be reached, each on all ports or on those
    /// it lists.
    #[serde(serialize_with = "as_strings")]
    pub allow_private_cidrs: Vec<Allowance>,
    /// Ports never reached on a non-public address, whatever the policy
    /// allows: Chromium's DevTools, the browser gate, the stack's services
    /// (set by the server, not the file).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub protected_ports: Vec<u16>,
    /// Normalized hosts; an entry starting with a dot denies that suffix.
    pub deny_hosts: Vec<String>,
    /// Re-check the page URL after commands that can navigate.
    pub navigation_guard: bool,
    #[serde(rename = "dns_timeout_ms", with = "millis")]
    pub dns_timeout: Duration,
    /// Extra query-parameter names masked in audited URLs (`redact` section).
    pub secret_query_params: Vec<String>,
    /// Wrap text that comes from the page in unforgeable markers (`reply`
    /// section; on unless turned off).
    pub content_boundaries: bool,
    /// Which calls need a person's yes (`approvals` section).
    #[serde(skip_serializing_if = "super::approvals::Approvals::is_empty")]
    pub approvals: super::approvals::Approvals,
}

fn as_strings<S: serde::Serializer>(entries: &[Allowance], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(entries.iter().map(ToString::to_string))
}

mod millis {
    pub(super) fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u128(d.as_millis())
    }
}

impl Default for UrlPolicy {
    /// What a missing policy file means: http and https to public addresses,
    /// about:blank, the navigation guard on.
    fn default() -> Self {
        Self {
            allow_schemes: SUPPORTED_SCHEMES.iter().map(|s| (*s).to_owned()).collect(),
            allow_about_blank: true,
            allow_hosts: None,
            allow_host_suffixes: None,
            allow_private_cidrs: Vec::new(),
            protected_ports: Vec::new(),
            deny_hosts: Vec::new(),
            navigation_guard: true,
            dns_timeout: Duration::from_secs(2),
            secret_query_params: Vec::new(),
            content_boundaries: true,
            approvals: super::approvals::Approvals::default(),
        }
    }
}

/// What a URL is for: which parts of the policy apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// A page (top-level or a frame's document): the whole policy.
    Page,
    /// A page's subresource: everything but the host allowlists.
    Subresource,
    /// A tunnel through the egress proxy (`CONNECT`, for https and
    /// WebSockets): the scheme is inside it, so everything but the scheme
    /// and the host allowlists.
    Tunnel,
}

/// An allowed URL: what the browser will load, and the addresses checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    pub url: String,
    pub resolved: Vec<IpAddr>,
}

impl UrlPolicy {
    /// Load `path`; a missing file at [`DEFAULT_PATH`] is the default policy.
    ///
    /// # Errors
    /// An unreadable, invalid or (elsewhere) missing file, naming the key
    /// and the problem.
    pub(crate) fn load(path: &Path) -> Result<Self, PolicyError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing_file(path).map(|()| Self::default())
            }
            Err(source) => Err(PolicyError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// Parse a policy file's JSON text.
    ///
    #[cfg(test)]
    /// # Errors
    /// Bad JSON, an unknown key, a wrong type, a bad CIDR or host, or an
    /// unsupported scheme — each named.
    pub(crate) fn from_json(text: &str) -> Result<Self, PolicyError> {
        Self::parse(text, "<inline>")
    }

    /// Parse the text of the policy file `path` (named in errors).
    pub(crate) fn parse(text: &str, path: &str) -> Result<Self, PolicyError> {
        let invalid = |message: String| PolicyError::Invalid {
            path: path.to_owned(),
            message,
        };
        let file = policy_file(text).map_err(&invalid)?;
        let secret_query_params = file.redact.secret_query_params.unwrap_or_default();
        if let Some(bad) = secret_query_params.iter().find(|p| p.trim().is_empty()) {
            return Err(invalid(format!(
                "redact.secret_query_params: {bad:?} is empty"
            )));
        }
        let open = file.open;
        let defaults = Self::default();
        let allow_schemes =
            schemes(open.allow_schemes, defaults.allow_schemes).map_err(&invalid)?;
        let allow_hosts = host_list("open.allow_hosts", open.allow_hosts).map_err(&invalid)?;
        let allow_host_suffixes = host_list("open.allow_host_suffixes", open.allow_host_suffixes)
            .map_err(&invalid)?
            .map(|list| {
                list.into_iter()
                    .map(|s| {
                        if s.starts_with('.') {
                            s
                        } else {
                            format!(".{s}")
                        }
                    })
                    .collect()
            });
        let deny_hosts = host_list("open.deny_hosts", open.deny_hosts)
            .map_err(&invalid)?
            .unwrap_or_default();
        let allow_private_cidrs =
            cidrs(open.allow_private_cidrs.unwrap_or_default()).map_err(&invalid)?;
        let dns_timeout = match open.dns_timeout_ms {
            None => defaults.dns_timeout,
            Some(ms @ 1..=30_000) => Duration::from_millis(ms),
            Some(ms) => {
                return Err(invalid(format!(
                    "open.dns_timeout_ms: {ms} is not within 1..=30000"
                )));
            }
        };
        Ok(Self {
            allow_schemes,
            allow_about_blank: open.allow_about_blank.unwrap_or(defaults.allow_about_blank),
            allow_hosts,
            allow_host_suffixes,
            allow_private_cidrs,
            protected_ports: Vec::new(),
            deny_hosts,
            navigation_guard: open.navigation_guard.unwrap_or(defaults.navigation_guard),
            dns_timeout,
            secret_query_params,
            content_boundaries: file
                .reply
                .content_boundaries
                .unwrap_or(defaults.content_boundaries),
            approvals: super::approvals::parse(file.approvals).map_err(&invalid)?,
        })
    }

    /// Decide an `open` argument; on success, the URL to load and the
    /// addresses that were checked.
    pub(crate) async fn check_open(
        &self,
        raw: &str,
        resolver: &dyn Resolve,
    ) -> Result<Checked, Refusal> {
        let raw = raw.trim();
        let candidate = if has_scheme(raw) {
            raw.to_owned()
        } else {
            format!("https://{raw}")
        };
        let url = Url::parse(&candidate)
            .map_err(|e| Refusal::new(Rule::UrlInvalid, format!("not a valid URL: {e}")))?;
        if url.scheme() == "about" {
            return if url.as_str() == "about:blank" && self.allow_about_blank {
                Ok(Checked {
                    url: "about:blank".into(),
                    resolved: Vec::new(),
                })
            } else {
                Err(Refusal::new(
                    Rule::UrlScheme,
                    "only about:blank may be opened of the about: URLs",
                ))
            };
        }
        self.check_url(&url, resolver).await
    }

    /// The policy for a URL the page itself arrived at (navigation guard).
    pub(crate) async fn check_url(
        &self,
        url: &Url,
        resolver: &dyn Resolve,
    ) -> Result<Checked, Refusal> {
        self.check(url, resolver, Reach::Page).await
    }

    /// The policy for a page's subresource (an absolute-form request at
    /// the egress proxy): all of it but the host allowlists, which name the
    /// sites an agent may visit, not every host those sites load from. A
    /// document, in any frame, is a page ([`Self::check_url`]).
    pub(crate) async fn check_subresource(
        &self,
        url: &Url,
        resolver: &dyn Resolve,
    ) -> Result<Checked, Refusal> {
        self.check(url, resolver, Reach::Subresource).await
    }

    /// The policy for a connection a page asks the egress proxy to tunnel
    /// (`CONNECT host:port`): on success, the addresses the proxy may
    /// connect to, resolved once here.
    pub(crate) async fn check_tunnel(
        &self,
        host: &str,
        port: u16,
        resolver: &dyn Resolve,
    ) -> Result<Checked, Refusal> {
        // The URL type parses and normalises the host as for any request.
        let url = Url::parse(&format!("https://{host}:{port}/")).map_err(|e| {
            Refusal::new(Rule::UrlInvalid, format!("not a valid host and port: {e}"))
        })?;
        self.check(&url, resolver, Reach::Tunnel).await
    }

    async fn check(
        &self,
        url: &Url,
        resolver: &dyn Resolve,
        reach: Reach,
    ) -> Result<Checked, Refusal> {
        if url.as_str() == "about:blank" && self.allow_about_blank {
            return Ok(Checked {
                url: url.to_string(),
                resolved: Vec::new(),
            });
        }
        if reach != Reach::Tunnel && !self.allow_schemes.iter().any(|s| s == url.scheme()) {
            return Err(Refusal::new(
                Rule::UrlScheme,
                format!(
                    "the {}: scheme is not allowed (allowed: {}, and about:blank)",
                    url.scheme(),
                    self.allow_schemes.join(", ")
                ),
            ));
        }
        let host = url
            .host()
            .ok_or_else(|| Refusal::new(Rule::UrlInvalid, "the URL has no host"))?;
        let name = host_key(&host);
        if name.is_empty() {
            return Err(Refusal::new(Rule::UrlInvalid, "the URL has an empty host"));
        }
        if let Some(entry) = self.deny_hosts.iter().find(|d| matches_host(&name, d)) {
            return Err(Refusal::new(
                Rule::HostDenied,
                format!("{name} is denied by the policy ({entry})"),
            ));
        }
        if reach == Reach::Page {
            self.check_allowed_host(&name)?;
        }
        let resolved = match host {
            Host::Ipv4(v4) => vec![IpAddr::V4(v4)],
            Host::Ipv6(v6) => vec![IpAddr::V6(v6)],
            Host::Domain(_) => match reserved_localhost(&name) {
                Some(loopback) => loopback,
                None => resolver.resolve(&name).await.map_err(|e| {
                    Refusal::new(Rule::DnsFailed, format!("cannot resolve {name}: {e}"))
                })?,
            },
        };
        if resolved.is_empty() {
            return Err(Refusal::new(
                Rule::DnsFailed,
                format!("{name} resolved to no address"),
            ));
        }
        let port = url.port_or_known_default().unwrap_or(0);
        for ip in &resolved {
            self.check_address(&name, *ip, port)?;
        }
        Ok(Checked {
            url: url.to_string(),
            resolved,
        })
    }

    /// A page's host must be on the allowlists, when there are any.
    fn check_allowed_host(&self, name: &str) -> Result<(), Refusal> {
        if self.allow_hosts.is_none() && self.allow_host_suffixes.is_none() {
            return Ok(());
        }
        let exact = self.allow_hosts.iter().flatten().any(|h| h == name);
        let suffix = self
            .allow_host_suffixes
            .iter()
            .flatten()
            .any(|s| name.ends_with(s.as_str()) && name.len() > s.len());
        if exact || suffix {
            Ok(())
        } else {
            Err(Refusal::new(
                Rule::HostNotAllowed,
                format!("{name} is not in the policy's allowed hosts"),
            ))
        }
    }

    /// One address `name` resolved to: a public one passes; a special one
    /// only when an allowance covers it and its port, and never on a port
    /// of browser-shell's stack.
    fn check_address(&self, name: &str, ip: IpAddr, port: u16) -> Result<(), Refusal> {
        let Some(kind) = address::special_kind(ip) else {
            return Ok(());
        };
        if self.protected_ports.contains(&port) {
            return Err(Refusal::new(
                Rule::PortProtected,
                format!(
                    "{name}:{port} is {ip} ({kind}) on a port of browser-shell's stack \
                     (Chromium's DevTools, the browser gate or a service listed with \
                     --protect-port); no policy can allow it"
                ),
            ));
        }
        if self
            .allow_private_cidrs
            .iter()
            .any(|allowance| allowance.covers(ip, port))
        {
            Ok(())
        } else {
            Err(Refusal::new(
                Rule::AddressPrivate,
                format!(
                    "{name} is {ip} ({kind}) and port {port}; only public addresses may be \
                     opened unless an entry of the policy's allow_private_cidrs covers the \
                     address and the port{}",
                    self.ipv6_loopback_hint(ip, port)
                ),
            ))
        }
    }
}

impl UrlPolicy {
    /// `localhost` resolves to ::1 as well as 127.0.0.1; a policy written
    /// for 127.0.0.1 alone refuses it on ::1. Say which entry would allow
    /// it, or which URL the policy allows already.
    fn ipv6_loopback_hint(&self, ip: IpAddr, port: u16) -> String {
        let v4_allowed = self
            .allow_private_cidrs
            .iter()
            .any(|allowance| allowance.covers(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), port));
        if ip != IpAddr::V6(std::net::Ipv6Addr::LOCALHOST) || !v4_allowed {
            return String::new();
        }
        format!(
            "; 127.0.0.1:{port} is allowed, and localhost is also ::1: add \"[::1]:{port}\" \
             to allow_private_cidrs, or open http://127.0.0.1:{port}/ instead"
        )
    }
}

/// A host as compared with the lists: WHATWG-normalized (lowercase,
/// punycode, dotted-quad IPv4, bracket-free IPv6), without a trailing dot.
/// `open.allow_schemes`, lowercased; only schemes a page can be checked for.
fn schemes(listed: Option<Vec<String>>, default: Vec<String>) -> Result<Vec<String>, String> {
    let Some(listed) = listed else {
        return Ok(default);
    };
    let schemes: Vec<String> = listed.iter().map(|s| s.to_ascii_lowercase()).collect();
    match schemes
        .iter()
        .find(|s| !SUPPORTED_SCHEMES.contains(&s.as_str()))
    {
        Some(bad) => Err(format!(
            "open.allow_schemes: {bad:?} cannot be allowed (only http and https)"
        )),
        None => Ok(schemes),
    }
}

/// `open.allow_private_cidrs`: CIDRs, or single addresses.
fn cidrs(listed: Vec<String>) -> Result<Vec<Allowance>, String> {
    listed
        .iter()
        .map(|c| Allowance::parse(c).map_err(|e| format!("open.allow_private_cidrs: {c:?}: {e}")))
        .collect()
}

fn host_key(host: &Host<&str>) -> String {
    match host {
        Host::Domain(d) => d.trim_end_matches('.').to_owned(),
        Host::Ipv4(v4) => v4.to_string(),
        Host::Ipv6(v6) => v6.to_string(),
    }
}

/// The policy file's JSON as its sections: an object whose sections are
/// objects (serde would read a struct from an array, positionally), each
/// key known; a message naming where it is not.
fn policy_file(text: &str) -> Result<PolicyFile, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err("the policy must be a JSON object".into());
    }
    for section in ["open", "redact", "reply", "approvals"] {
        if value.get(section).is_some_and(|v| !v.is_object()) {
            return Err(format!("{section}: must be a JSON object"));
        }
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        format!("{path}: {}", e.into_inner())
    })
}

/// A list of host entries of `open.<key>`, each normalised.
/// `key` names the list in errors (`open.allow_hosts`).
pub(super) fn host_list(
    key: &str,
    list: Option<Vec<String>>,
) -> Result<Option<Vec<String>>, String> {
    list.map(|items| {
        items
            .iter()
            .map(|h| normalize_host_entry(h).map_err(|why| format!("{key}: {h:?}: {why}")))
            .collect()
    })
    .transpose()
}

/// Normalize a host written in the policy file the same way URLs are.
/// Wildcards are refused: they would match nothing and fail open silently
/// (`*.example.com` in `deny_hosts` denies nothing); suffixes are written
/// with a leading dot instead.
fn normalize_host_entry(entry: &str) -> Result<String, String> {
    if entry.contains('*') {
        return Err(
            "wildcards are not supported; write a suffix with a leading dot (.example.com)".into(),
        );
    }
    let (dot, bare) = match entry.strip_prefix('.') {
        Some(rest) => (".", rest),
        None => ("", entry),
    };
    let bare = bare.trim_matches(|c| c == '[' || c == ']');
    let host = Host::parse(bare)
        .or_else(|_| Host::parse(&format!("[{bare}]")))
        .map_err(|e| e.to_string())?;
    if let Host::Domain(d) = &host
        && !d.trim_end_matches('.').split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    {
        return Err("not a host name".into());
    }
    Ok(format!("{dot}{}", host_key(&host.as_ref())))
}

trait AsRefHost {
    fn as_ref(&self) -> Host<&str>;
}

impl AsRefHost for Host<String> {
    fn as_ref(&self) -> Host<&str> {
        match self {
            Host::Domain(d) => Host::Domain(d.as_str()),
            Host::Ipv4(v4) => Host::Ipv4(*v4),
            Host::Ipv6(v6) => Host::Ipv6(*v6),
        }
    }
}

/// For `deny_hosts` (and the approval rules' hosts): `entry` is a host, or
/// a `.suffix` that denies that domain and everything under it (denying
/// more is the safe reading).
pub(super) fn matches_host(name: &str, entry: &str) -> bool {
    match entry.strip_prefix('.') {
        Some(apex) => name == apex || name.ends_with(entry),
        None => name == entry,
    }
}

/// True when `raw` starts with `scheme:` in the RFC 3986 sense, except the
/// `host:port` shape (`localhost:8080/x`), which browsers read as scheme-less.
fn has_scheme(raw: &str) -> bool {
    let Some((scheme, rest)) = raw.split_once(':') else {
        return false;
    };
    let is_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let port_digits = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let looks_like_port =
        !port_digits.is_empty() && port_digits.bytes().all(|b| b.is_ascii_digit());
    is_scheme && !looks_like_port
}

/// A URL as it may appear in an audit record: no query, no fragment, no
/// credentials (they can carry secrets), at most 512 bytes.
pub(crate) fn shown(raw: &str) -> String {
    let shown = match Url::parse(raw) {
        Ok(mut url) => {
            url.set_query(None);
            url.set_fragment(None);
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        Err(_) => "(an unparsable URL)".to_owned(),
    };
    shown.chars().take(512).collect()
}

#[cfg(test)]
#[path = "url_policy_tests.rs"]
mod tests;
