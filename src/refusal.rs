//! The vocabulary of "no": every refusal rule, its stable id and how it is
//! answered, and the [`Refusal`] value every stage returns when it says no.
//!
//! This is the one place that lists the rules. A reply, an audit record, a
//! span and a test all name a rule by [`Rule::id`]; the README's table of
//! rules is checked against [`Rule::ALL`] by a test.

use std::fmt;

/// Exit codes of the tool's reply besides agent-browser's own 0 and 1.
pub(crate) mod exit_code {
    /// agent-browser reported a failure (or exited 0 while saying `success:false`).
    pub(crate) const FAILED: i32 = 1;
    /// The call ran out of `timeout_sec`; the child's process group was killed.
    pub(crate) const TIMED_OUT: i32 = 124;
    /// browser-shell itself could not run the call (audit unavailable, spawn failed).
    pub(crate) const INTERNAL: i32 = 125;
    /// browser-shell refused the call (validation or policy); nothing ran.
    pub(crate) const REFUSED: i32 = 126;
    /// The client cancelled the call; the child's process group was killed.
    pub(crate) const CANCELLED: i32 = 130;
}

/// How a refusal reaches the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A tool reply with `isError` and this exit code.
    Tool(i32),
    /// A JSON-RPC error with this code; there is no tool reply.
    JsonRpc(i32),
    /// An error to agent-browser from the browser gate (a CDP error, or a
    /// request failed inside the browser); the call's reply carries what
    /// agent-browser made of it.
    Browser,
}

macro_rules! rules {
    ($( $(#[$doc:meta])* $variant:ident = $id:literal => $answer:expr, )*) => {
        /// Every rule browser-shell can refuse a call or a message under.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum Rule {
            $( $(#[$doc])* $variant, )*
        }

        impl Rule {
            /// Every rule, in the order the README lists them.
            #[cfg(test)]
            pub(crate) const ALL: &[Rule] = &[$(Rule::$variant,)*];

            /// The stable, dotted identifier in replies, audit records and spans.
            pub(crate) const fn id(self) -> &'static str {
                match self { $(Rule::$variant => $id,)* }
            }

            /// How a refusal under this rule is answered.
            pub(crate) const fn answer(self) -> Answer {
                match self { $(Rule::$variant => $answer,)* }
            }
        }
    };
}

rules! {
    /// `arguments` is not an object, or has an unknown key.
    RequestInvalid = "request.invalid" => Answer::Tool(exit_code::REFUSED),
    /// `session_id` is missing, too long or has characters outside the safe set.
    SessionIdInvalid = "session_id.invalid" => Answer::Tool(exit_code::REFUSED),
    /// `argv` is missing, empty, too long, or holds an item of the wrong type or size.
    ArgvInvalid = "argv.invalid" => Answer::Tool(exit_code::REFUSED),
    /// `timeout_sec` is not an integer in range.
    TimeoutInvalid = "timeout.invalid" => Answer::Tool(exit_code::REFUSED),
    /// `argv[0]` is no agent-browser subcommand browser-shell knows.
    SubcommandUnknown = "subcommand.unknown" => Answer::Tool(exit_code::REFUSED),
    /// `argv[0]` is a known subcommand that is not allow-listed.
    SubcommandDenied = "subcommand.denied" => Answer::Tool(exit_code::REFUSED),
    /// The subcommand's arguments do not match its grammar.
    ArgsInvalid = "args.invalid" => Answer::Tool(exit_code::REFUSED),
    /// An argument is one of agent-browser's global flags (`--cdp`, `--session`, …).
    ArgsGlobalFlag = "args.global_flag" => Answer::Tool(exit_code::REFUSED),
    /// The URL (or a page URL the guard read) does not parse.
    UrlInvalid = "url.invalid" => Answer::Tool(exit_code::REFUSED),
    /// The URL's scheme is not allowed by the policy.
    UrlScheme = "url.scheme" => Answer::Tool(exit_code::REFUSED),
    /// The host is on the policy's deny list.
    HostDenied = "host.denied" => Answer::Tool(exit_code::REFUSED),
    /// The policy has a host allow list and the host is not on it.
    HostNotAllowed = "host.not_allowed" => Answer::Tool(exit_code::REFUSED),
    /// The host did not resolve (or not in time).
    DnsFailed = "dns.failed" => Answer::Tool(exit_code::REFUSED),
    /// The host resolves to a loopback, private, link-local or otherwise special address.
    AddressPrivate = "address.private" => Answer::Tool(exit_code::REFUSED),
    /// The address is not public and the port is one of browser-shell's stack (Chromium's DevTools, the gate, a listed service).
    PortProtected = "port.protected" => Answer::Tool(exit_code::REFUSED),
    /// A `{{secret:NAME}}` placeholder names no configured secret, is
    /// malformed, or is outside the text of `fill`/`type`.
    SecretUnknown = "secret.unknown" => Answer::Tool(exit_code::REFUSED),
    /// The session's page is not on a host the secret is bound to; nothing was typed.
    SecretHost = "secret.host" => Answer::Tool(exit_code::REFUSED),
    /// A screenshot path escapes the session's output directory or is not an image name.
    OutputPath = "output.path" => Answer::Tool(exit_code::REFUSED),
    /// The output quota cannot fit one more screenshot.
    OutputQuota = "limits.output_quota" => Answer::Tool(exit_code::REFUSED),
    /// The session, or the server, is busy beyond the wait bound.
    Busy = "limits.busy" => Answer::Tool(exit_code::REFUSED),
    /// The session cap is reached and no idle session may be evicted.
    Sessions = "limits.sessions" => Answer::Tool(exit_code::REFUSED),
    /// A page beyond `--max-tabs` in one session (a popup, a new tab) was closed as it opened.
    Tabs = "limits.tabs" => Answer::Browser,
    /// A person said no to the call (or no channel could ask one); nothing ran.
    ApprovalDenied = "approval.denied" => Answer::Tool(exit_code::REFUSED),
    /// The call needed a person's yes and none came within the policy's `approvals.wait_sec`; nothing ran.
    ApprovalExpired = "approval.expired" => Answer::Tool(exit_code::REFUSED),
    /// The client cancelled the call while it waited for its turn.
    Cancelled = "call.cancelled" => Answer::Tool(exit_code::REFUSED),
    /// The server is draining after SIGTERM.
    ShuttingDown = "server.shutting_down" => Answer::Tool(exit_code::REFUSED),
    /// The page ended up somewhere the policy refuses; it was sent to about:blank.
    NavigationBlocked = "navigation.blocked" => Answer::Tool(exit_code::REFUSED),
    /// The guard could not read the page URL (the daemon may not reach the browser); not known to be allowed, it was treated as refused.
    PageUnreadable = "page.unreadable" => Answer::Tool(exit_code::REFUSED),
    /// agent-browser asked Chromium for a CDP method, or a parameter, the gate does not allow.
    CdpRefused = "cdp.refused" => Answer::Browser,
    /// The gate could not put a tab under the URL policy, so no command reached that tab.
    CdpUnwarded = "cdp.unwarded" => Answer::Browser,
    /// A connection to the browser gate named a session other than the one whose uid dialled it.
    GateIdentity = "gate.identity" => Answer::Browser,
    /// A request a page made, in any frame, is refused by the policy; it failed inside the browser.
    RequestBlocked = "request.blocked" => Answer::Browser,
    /// A `tools/call` named a tool other than `browser-shell`.
    ToolUnknown = "tool.unknown" => Answer::JsonRpc(-32602),
    /// A line on stdin is not JSON.
    JsonRpcParseError = "jsonrpc.parse_error" => Answer::JsonRpc(-32700),
    /// A JSON message that is not a valid JSON-RPC request or notification.
    JsonRpcInvalidRequest = "jsonrpc.invalid_request" => Answer::JsonRpc(-32600),
    /// A request whose params are not what its method takes.
    JsonRpcInvalidParams = "jsonrpc.invalid_params" => Answer::JsonRpc(-32602),
    /// A message larger than the wire's bound.
    JsonRpcTooLarge = "jsonrpc.too_large" => Answer::JsonRpc(-32600),
}

impl Rule {
    /// The `error.type` a span of a call refused under this rule carries:
    /// the JSON-RPC code for protocol refusals, `policy_denied` otherwise.
    pub(crate) fn error_type(self) -> &'static str {
        match self.answer() {
            Answer::Tool(_) | Answer::Browser => "policy_denied",
            Answer::JsonRpc(-32700) => "-32700",
            Answer::JsonRpc(-32602) => "-32602",
            Answer::JsonRpc(_) => "-32600",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl PartialEq<&str> for Rule {
    fn eq(&self, other: &&str) -> bool {
        self.id() == *other
    }
}

/// Why browser-shell refused a call, before anything was spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The rule that decided.
    pub(crate) rule: Rule,
    /// Human-readable explanation for the agent; never echoes secrets.
    pub(crate) message: String,
}

impl Refusal {
    pub(crate) fn new(rule: Rule, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused [{}]: {}", self.rule, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_id_is_unique_and_dotted() {
        let mut seen = std::collections::HashSet::new();
        for rule in Rule::ALL {
            assert!(seen.insert(rule.id()), "duplicate rule id {}", rule.id());
            assert!(rule.id().contains('.'), "{} is not dotted", rule.id());
        }
    }

    #[test]
    fn the_readme_lists_exactly_the_rules_of_the_code() {
        let readme = include_str!("../README.md");
        let section = readme
            .split("### Refusal rules")
            .nth(1)
            .map(|rest| rest.split("\n#").next().unwrap_or(rest))
            .unwrap_or_default();
        let listed: Vec<&str> = section
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .filter_map(|rest| rest.split('`').next())
            .collect();
        let code: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
        assert_eq!(
            listed, code,
            "README.md's `### Refusal rules` table and `Rule::ALL` differ"
        );
    }

    #[test]
    fn tool_refusals_exit_126_and_protocol_refusals_are_json_rpc_errors() {
        for rule in Rule::ALL {
            match rule.answer() {
                Answer::Tool(code) => assert_eq!(code, exit_code::REFUSED, "{rule}"),
                Answer::JsonRpc(code) => {
                    assert!((-32700..=-32600).contains(&code), "{rule}: {code}");
                    assert!(rule.id().starts_with("jsonrpc.") || *rule == Rule::ToolUnknown);
                }
                Answer::Browser => assert!(
                    rule.id().starts_with("cdp.")
                        || rule.id().starts_with("request.")
                        || *rule == Rule::Tabs
                        || *rule == Rule::GateIdentity,
                    "{rule}"
                ),
            }
        }
    }
}
