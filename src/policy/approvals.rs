//! Which calls need a person's yes before they run: the policy file's
//! `approvals` section, as data. A call matches a rule when it meets every
//! criterion the rule gives, and needs a yes when it matches any rule. What
//! cannot be known (an element no snapshot named, a page that could not be
//! read) matches: a rule is there to stop a call, so doubt stops it too. A
//! subcommand no rule can match costs nothing more ([`Approvals::may_need`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use url::Url;

use super::url_policy::{host_list, matches_host};

/// How long a person has to answer when the policy does not say.
const DEFAULT_WAIT: Duration = Duration::from_secs(120);

/// The longest wait the policy may set.
const MAX_WAIT_SECS: u64 = 3600;

/// The `approvals` section as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Section {
    wait_sec: Option<u64>,
    channels: Option<Vec<Channel>>,
    #[serde(default)]
    rules: Vec<RuleSpec>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    name: String,
    subcommands: Option<Vec<String>>,
    element_roles: Option<Vec<String>>,
    element_words: Option<Vec<String>>,
    page_hosts: Option<Vec<String>>,
    page_url_prefixes: Option<Vec<String>>,
    open_hosts: Option<Vec<String>>,
    typed_secrets: Option<Vec<String>>,
}

/// A way of reaching a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Channel {
    /// The person at the MCP client, through elicitation, where the client
    /// supports it. Whoever answers the client's prompts approves: a client
    /// that hands them to the model lets the agent approve itself.
    Elicitation,
    /// A dialog on the browser's X display (`--approvals-display`), for
    /// whoever may send input to it: on the stack, a VNC client with the
    /// control password.
    Display,
    /// The operator on the machine (`browser-shell approvals`).
    Operator,
}

/// The effective approval rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Approvals {
    /// How long a person has to answer; past it, the call is refused.
    #[serde(rename = "wait_sec", serialize_with = "secs")]
    pub(crate) wait: Duration,
    /// The channels that may ask, in order: the first that can reach a
    /// person is used.
    pub(crate) channels: Vec<Channel>,
    pub(crate) rules: Vec<ApprovalRule>,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

impl Default for Approvals {
    fn default() -> Self {
        Self {
            wait: DEFAULT_WAIT,
            channels: vec![Channel::Elicitation, Channel::Display, Channel::Operator],
            rules: Vec::new(),
        }
    }
}

/// One rule; an empty list is a criterion not given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ApprovalRule {
    pub(crate) name: String,
    /// Empty: every subcommand that can change the page.
    subcommands: Vec<String>,
    element_roles: Vec<String>,
    element_words: Vec<String>,
    page_hosts: Vec<String>,
    page_url_prefixes: Vec<String>,
    open_hosts: Vec<String>,
    /// Secret names, or `*` for any.
    typed_secrets: Vec<String>,
}

/// The element a call acts on, as the session's last snapshot named it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Element<'a> {
    pub(crate) role: &'a str,
    pub(crate) name: &'a str,
}

/// What is known of a call when its approval is decided.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    pub(crate) subcommand: &'a str,
    pub(crate) changes_page: bool,
    /// The subcommand acts on an element (`argv[1]`).
    pub(crate) acts_on_element: bool,
    /// That element; `None` when no snapshot named it.
    pub(crate) element: Option<Element<'a>>,
    /// The session's page; `None` when it could not be read.
    pub(crate) page_url: Option<&'a str>,
    /// `open`'s destination, as the policy allowed it.
    pub(crate) open_url: Option<&'a str>,
    /// The secrets the call types (their names).
    pub(crate) typed_secrets: &'a [String],
}

impl Approvals {
    /// Whether some rule may match a call of `subcommand`: if not, nothing
    /// more is looked at.
    pub(crate) fn may_need(&self, subcommand: &str, changes_page: bool) -> bool {
        self.rules
            .iter()
            .any(|rule| rule.admits(subcommand, changes_page))
    }

    /// The first rule the call matches.
    pub(crate) fn needed(&self, facts: &Facts<'_>) -> Option<&ApprovalRule> {
        self.rules.iter().find(|rule| rule.matches(facts))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules an `open` of `url` (as the policy allowed it) matches,
    /// each with whether that depends on the session's page (unknown here).
    pub(crate) fn for_open(&self, url: &str) -> Vec<(&str, bool)> {
        let facts = Facts {
            subcommand: "open",
            changes_page: true,
            acts_on_element: false,
            element: None,
            page_url: None,
            open_url: Some(url),
            typed_secrets: &[],
        };
        self.rules
            .iter()
            .filter(|rule| rule.matches(&facts))
            .map(|rule| {
                let on_page = !rule.page_hosts.is_empty() || !rule.page_url_prefixes.is_empty();
                (rule.name.as_str(), on_page)
            })
            .collect()
    }

    /// The subcommands the rules name that `known` does not know.
    pub(crate) fn unknown_subcommands(&self, known: impl Fn(&str) -> bool) -> Vec<String> {
        let named = self.rules.iter().flat_map(|r| &r.subcommands);
        named.filter(|s| !known(s)).cloned().collect()
    }
}

impl ApprovalRule {
    fn admits(&self, subcommand: &str, changes_page: bool) -> bool {
        if self.subcommands.is_empty() {
            changes_page
        } else {
            self.subcommands.iter().any(|s| s == subcommand)
        }
    }

    fn matches(&self, facts: &Facts<'_>) -> bool {
        self.admits(facts.subcommand, facts.changes_page)
            && self.element_matches(facts)
            && self.page_matches(facts.page_url)
            && self.open_matches(facts.open_url)
            && self.secrets_match(facts.typed_secrets)
    }

    fn element_matches(&self, facts: &Facts<'_>) -> bool {
        if self.element_roles.is_empty() && self.element_words.is_empty() {
            return true;
        }
        if !facts.acts_on_element {
            return false;
        }
        let Some(element) = facts.element else {
            return true;
        };
        let role = element.role.to_lowercase();
        let role_ok = self.element_roles.is_empty() || self.element_roles.contains(&role);
        let name = element.name.to_lowercase();
        let mut words = name.split(|c: char| !c.is_alphanumeric());
        let name_ok = self.element_words.is_empty()
            || words.any(|w| !w.is_empty() && self.element_words.iter().any(|l| w.starts_with(l)));
        role_ok && name_ok
    }

    fn page_matches(&self, page: Option<&str>) -> bool {
        if self.page_hosts.is_empty() && self.page_url_prefixes.is_empty() {
            return true;
        }
        let Some(page) = page else {
            return true;
        };
        let on_host = host_of(page).is_some_and(|host| {
            self.page_hosts
                .iter()
                .any(|entry| matches_host(&host, entry))
        });
        let under = self.page_url_prefixes.iter().any(|p| page.starts_with(p));
        on_host || under
    }

    fn open_matches(&self, open: Option<&str>) -> bool {
        if self.open_hosts.is_empty() {
            return true;
        }
        open.and_then(host_of).is_some_and(|host| {
            self.open_hosts
                .iter()
                .any(|entry| matches_host(&host, entry))
        })
    }

    fn secrets_match(&self, typed: &[String]) -> bool {
        self.typed_secrets.is_empty()
            || typed
                .iter()
                .any(|name| self.typed_secrets.iter().any(|s| s == "*" || s == name))
    }
}

fn host_of(url: &str) -> Option<String> {
    let url = Url::parse(url).ok()?;
    Some(
        url.host_str()?
            .trim_end_matches('.')
            .trim_matches(['[', ']'])
            .to_owned(),
    )
}

/// The section as the effective rules, or what is wrong with it.
pub(super) fn parse(section: Section) -> Result<Approvals, String> {
    let wait = match section.wait_sec {
        None => DEFAULT_WAIT,
        Some(s @ 1..=MAX_WAIT_SECS) => Duration::from_secs(s),
        Some(s) => {
            return Err(format!(
                "approvals.wait_sec: {s} is not within 1..={MAX_WAIT_SECS}"
            ));
        }
    };
    let channels = match section.channels {
        None => Approvals::default().channels,
        Some(list) if list.is_empty() => {
            return Err(
                "approvals.channels: name at least one (elicitation, display, operator)".into(),
            );
        }
        Some(list) => list,
    };
    let mut rules: Vec<ApprovalRule> = Vec::new();
    for (i, spec) in section.rules.into_iter().enumerate() {
        let at = format!("approvals.rules[{i}]");
        let name = spec.name.trim().to_owned();
        if name.is_empty() || rules.iter().any(|r| r.name == name) {
            return Err(format!("{at}.name: {name:?} is empty or not unique"));
        }
        let lowered = |list: Option<Vec<String>>, key: &str| -> Result<Vec<String>, String> {
            let list: Vec<String> = list
                .unwrap_or_default()
                .iter()
                .map(|s| s.trim().to_lowercase())
                .collect();
            match list.iter().find(|s| s.is_empty()) {
                Some(_) => Err(format!("{at}.{key}: an entry is empty")),
                None => Ok(list),
            }
        };
        let hosts = |list: Option<Vec<String>>, key: &str| {
            host_list(&format!("{at}.{key}"), list).map(Option::unwrap_or_default)
        };
        for prefix in spec.page_url_prefixes.iter().flatten() {
            Url::parse(prefix).map_err(|e| format!("{at}.page_url_prefixes: {prefix:?}: {e}"))?;
        }
        let rule = ApprovalRule {
            subcommands: lowered(spec.subcommands, "subcommands")?,
            element_roles: lowered(spec.element_roles, "element_roles")?,
            element_words: lowered(spec.element_words, "element_words")?,
            page_hosts: hosts(spec.page_hosts, "page_hosts")?,
            page_url_prefixes: spec.page_url_prefixes.unwrap_or_default(),
            open_hosts: hosts(spec.open_hosts, "open_hosts")?,
            typed_secrets: spec.typed_secrets.unwrap_or_default(),
            name,
        };
        rules.push(rule);
    }
    Ok(Approvals {
        wait,
        channels,
        rules,
    })
}

#[cfg(test)]
#[path = "approvals_tests.rs"]
mod tests;
