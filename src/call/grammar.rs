//! The subcommand allow-list and each subcommand's argument grammar.
//!
//! A validated argv becomes a [`Command`]: the exact tokens browser-shell will
//! hand to agent-browser, plus at most one [`Slot`] whose value a later stage
//! decides (the URL of `open`, after the URL policy; the file of `screenshot`,
//! chosen under the output dir). This module is pure syntax: it does no I/O and
//! knows nothing about policy files.
//!
//! Tokens reach agent-browser inside a wrapper-built `batch` on stdin, where
//! they are never parsed as global flags. The grammar still refuses flag-shaped
//! tokens in every position that is not free text, so a mistake here cannot
//! turn into a flag either (defence in depth).
//!
//! Every match over subcommands names each one: a new row in
//! [`Subcommand`] does not compile until it has a grammar here.
#![deny(
    clippy::wildcard_enum_match_arm,
    clippy::match_wildcard_for_single_variants
)]

use super::subcommand::Subcommand;
use crate::refusal::{Refusal, Rule};

/// A subcommand with its arguments, ready for the slot to be filled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    /// The subcommand (`goto` and `navigate` are `open`).
    pub subcommand: Subcommand,
    /// Tokens for agent-browser, `tokens[0] == subcommand`; the slot value, if
    /// any, is appended as the last token.
    pub tokens: Vec<String>,
    pub slot: Slot,
}

/// A value the grammar cannot decide alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slot {
    None,
    /// The raw URL argument of `open`; the URL policy turns it into the URL
    /// the browser will load.
    Url(String),
    /// The output file of `screenshot`: a name the agent asked for, or none.
    OutputFile(Option<String>),
}

/// Subcommands refused on purpose, with the reason given to the agent.
const DENIED: &[(&str, &str)] = &[
    ("eval", "it runs arbitrary JavaScript in the page"),
    ("evaluate", "it runs arbitrary JavaScript in the page"),
    ("upload", "it makes Chromium read local files"),
    ("download", "it writes files chosen by the page"),
    ("route", "it rewrites network traffic"),
    ("unroute", "it rewrites network traffic"),
    (
        "network",
        "it rewrites or exposes network traffic, headers and bodies",
    ),
    (
        "read",
        "the daemon fetches URLs itself, bypassing the browser and the URL policy",
    ),
    (
        "connect",
        "it re-targets the session to another CDP endpoint",
    ),
    ("inspect", "it binds a port and launches a desktop opener"),
    ("record", "it writes recordings and runs ffmpeg"),
    ("trace", "it writes trace files"),
    ("profiler", "it writes profile files"),
    (
        "state",
        "it saves and loads cookies and auth state from files",
    ),
    ("auth", "it writes the credential vault"),
    ("plugin", "it runs commands from configuration"),
    (
        "stream",
        "it starts an unauthenticated screencast and input server",
    ),
    ("dashboard", "it starts a web server"),
    ("mcp", "it starts a second MCP server"),
    ("chat", "it calls an external AI gateway"),
    ("install", "it downloads software"),
    ("upgrade", "it downloads software"),
    ("doctor", "it inspects and may delete local files"),
    (
        "batch",
        "browser-shell builds the batch itself; a user batch would bypass per-command checks",
    ),
    ("cookies", "it reads or changes session secrets"),
    ("storage", "it reads or changes session secrets"),
    (
        "set",
        "it changes credentials, headers and browser settings",
    ),
    ("tab", "it sees and closes other sessions' tabs"),
    ("session", "it lists and touches other sessions"),
];

/// agent-browser 0.41.2's global flags. It parses these anywhere in argv, so
/// none may ever appear where agent-browser would read a flag.
pub(crate) const GLOBAL_FLAGS: &[&str] = &[
    "--profile",
    "--restore",
    "--restore-save",
    "--restore-check-url",
    "--restore-check-text",
    "--restore-check-fn",
    "--session-name",
    "--state",
    "--auto-connect",
    "--headers",
    "--session",
    "--namespace",
    "--executable-path",
    "--extension",
    "--init-script",
    "--enable",
    "--args",
    "--user-agent",
    "--proxy",
    "--proxy-bypass",
    "--ignore-https-errors",
    "--ca-cert",
    "--no-ca-cert",
    "--use-system-ca",
    "--allow-file-access",
    "--hide-scrollbars",
    "-p",
    "--provider",
    "--device",
    "--json",
    "--annotate",
    "--screenshot-dir",
    "--screenshot-quality",
    "--screenshot-format",
    "--input-mode",
    "--headed",
    "--webgpu",
    "--no-webmcp",
    "--cdp",
    "--cdp-headers",
    "--pin-tab",
    "--no-pin-tab",
    "--color-scheme",
    "--download-path",
    "--content-boundaries",
    "--max-output",
    "--allowed-domains",
    "--action-policy",
    "--confirm-actions",
    "--confirm-interactive",
    "--idle-timeout",
    "--engine",
    "--no-auto-dialog",
    "--model",
    "-v",
    "--verbose",
    "-q",
    "--quiet",
    "--config",
    "--debug",
    "--version",
    "-V",
    "--help",
    "-h",
];

/// Parse a validated argv (`argv[0]` is the subcommand) into a [`Command`].
pub(crate) fn parse(argv: &[String]) -> Result<Command, Refusal> {
    let Some((first, args)) = argv.split_first() else {
        return Err(Refusal::new(Rule::ArgvInvalid, "argv is empty"));
    };
    let subcommand = canonical(first)?;
    let mut out = Builder::new(subcommand);
    match subcommand {
        Subcommand::Open => {
            let [url] = exactly(subcommand, args)?;
            out.slot = Slot::Url(word(url, "the URL")?.to_owned());
        }
        Subcommand::Back | Subcommand::Forward | Subcommand::Reload => {
            exactly::<0>(subcommand, args)?;
        }
        Subcommand::Close => {
            if args.iter().any(|a| a == "--all") {
                return Err(Refusal::new(
                    Rule::SubcommandDenied,
                    "`close --all` is not allowed: it closes every session's daemon, not only yours",
                ));
            }
            exactly::<0>(subcommand, args)?;
        }
        Subcommand::Click
        | Subcommand::Dblclick
        | Subcommand::Hover
        | Subcommand::Focus
        | Subcommand::Check
        | Subcommand::Uncheck => {
            let [target] = exactly(subcommand, args)?;
            out.push(selector(target)?);
        }
        Subcommand::Fill | Subcommand::Type => {
            let [target, text] = exactly(subcommand, args)?;
            out.push(selector(target)?);
            // Free text: anything the request layer accepted, flag names included.
            out.push(text);
        }
        Subcommand::Press => {
            let [key] = exactly(subcommand, args)?;
            out.push(word(key, "the key")?);
        }
        Subcommand::Select => {
            let Some((target, values)) = args.split_first().filter(|(_, v)| !v.is_empty()) else {
                return Err(usage(subcommand));
            };
            out.push(selector(target)?);
            for value in values {
                out.push(value);
            }
        }
        Subcommand::Snapshot => parse_snapshot(args, &mut out)?,
        Subcommand::Wait => parse_wait(args, &mut out)?,
        Subcommand::Screenshot => parse_screenshot(args, &mut out)?,
        Subcommand::Get => parse_get(args, &mut out)?,
        Subcommand::Scroll => parse_scroll(args, &mut out)?,
    }
    Ok(out.finish())
}

/// One line per subcommand, for `--help`, errors and the tool description.
pub(crate) fn usages() -> impl Iterator<Item = (&'static str, &'static str)> {
    Subcommand::ALL
        .iter()
        .map(|s| (s.facts().name, s.facts().usage))
}

fn canonical(name: &str) -> Result<Subcommand, Refusal> {
    if let Some(allowed) = Subcommand::named(name) {
        return Ok(allowed);
    }
    if let Some((denied, why)) = DENIED.iter().find(|(d, _)| *d == name) {
        return Err(Refusal::new(
            Rule::SubcommandDenied,
            format!("`{denied}` is not allowed: {why}"),
        ));
    }
    if is_flag_like(name) {
        return Err(flag_refusal(name));
    }
    Err(Refusal::new(
        Rule::SubcommandUnknown,
        format!(
            "unknown or unsupported subcommand (argv[0] must be one of: {}){}",
            usages()
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
                .join(", "),
            shell_line_hint(name)
        ),
    ))
}

/// An argv[0] that is a whole command line in one item (`"open http://…"`)
/// is the usual slip of a caller used to shells: name the fix. Only the
/// subcommand is echoed: the rest may be a URL with a token in it, and a
/// refusal's reason is recorded as it is.
fn shell_line_hint(item: &str) -> String {
    let mut words = item.split_whitespace();
    let Some(first) = words.next().and_then(Subcommand::named) else {
        return String::new();
    };
    if words.next().is_none() {
        return String::new();
    }
    format!(
        "; argv[0] holds a whole command line: argv is a list, not a shell string; \
         split it into items, one per word: [\"{}\", …]",
        first.facts().name
    )
}

struct Builder {
    subcommand: Subcommand,
    tokens: Vec<String>,
    slot: Slot,
}

impl Builder {
    fn new(subcommand: Subcommand) -> Self {
        Self {
            subcommand,
            tokens: vec![subcommand.facts().name.to_owned()],
            slot: Slot::None,
        }
    }

    fn push(&mut self, token: &str) {
        self.tokens.push(token.to_owned());
    }

    fn finish(self) -> Command {
        Command {
            subcommand: self.subcommand,
            tokens: self.tokens,
            slot: self.slot,
        }
    }
}

fn usage(subcommand: Subcommand) -> Refusal {
    let line = subcommand.facts().usage;
    Refusal::new(Rule::ArgsInvalid, format!("usage: {line}"))
}

fn exactly<const N: usize>(subcommand: Subcommand, args: &[String]) -> Result<[&str; N], Refusal> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    // Free-text positions may hold flag names (they travel as batch data);
    // only when the count is wrong is a flag the likelier explanation.
    refs.try_into().map_err(|_| {
        args.iter()
            .find(|a| is_global_flag(a))
            .map_or_else(|| usage(subcommand), |flag| flag_refusal(flag))
    })
}

fn is_global_flag(token: &str) -> bool {
    let name = token.split_once('=').map_or(token, |(name, _)| name);
    GLOBAL_FLAGS.contains(&name)
}

fn is_flag_like(token: &str) -> bool {
    token.starts_with('-')
}

fn flag_refusal(token: &str) -> Refusal {
    if is_global_flag(token) {
        let name = token.split_once('=').map_or(token, |(name, _)| name);
        Refusal::new(
            Rule::ArgsGlobalFlag,
            format!(
                "`{name}` is an agent-browser global flag; browser-shell sets --cdp, --json and \
                 --session itself and passes no other global flag"
            ),
        )
    } else {
        Refusal::new(
            Rule::ArgsInvalid,
            "unexpected flag-like argument (only the flags shown in the subcommand's usage are accepted)",
        )
    }
}

/// A selector or `@ref`: non-empty, one line, never flag-shaped.
fn selector(token: &str) -> Result<&str, Refusal> {
    word(token, "the selector")
}

/// A non-text positional argument: non-empty, no control characters, and not
/// something agent-browser could read as a flag.
fn word<'a>(token: &'a str, what: &str) -> Result<&'a str, Refusal> {
    if token.trim().is_empty() {
        return Err(Refusal::new(Rule::ArgsInvalid, format!("{what} is empty")));
    }
    if token.chars().any(char::is_control) {
        return Err(Refusal::new(
            Rule::ArgsInvalid,
            format!("{what} must be a single line without control characters"),
        ));
    }
    if is_flag_like(token) {
        return Err(flag_refusal(token));
    }
    Ok(token)
}

fn integer(token: &str, what: &str, max: u64) -> Result<u64, Refusal> {
    match token.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(Refusal::new(
            Rule::ArgsInvalid,
            format!("{what} must be a whole number from 0 to {max}"),
        )),
    }
}

fn parse_snapshot(args: &[String], out: &mut Builder) -> Result<(), Refusal> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-i" | "--interactive" => out.push("-i"),
            "-c" | "--compact" => out.push("-c"),
            "-u" | "--urls" => out.push("-u"),
            "-d" | "--depth" => {
                let depth = it.next().ok_or_else(|| usage(Subcommand::Snapshot))?;
                integer(depth, "the depth", 1000)?;
                out.push("-d");
                out.push(depth);
            }
            "-s" | "--selector" => {
                let sel = it.next().ok_or_else(|| usage(Subcommand::Snapshot))?;
                out.push("-s");
                out.push(selector(sel)?);
            }
            other if is_flag_like(other) && !is_global_flag(other) => {
                return Err(usage(Subcommand::Snapshot));
            }
            other if is_global_flag(other) => return Err(flag_refusal(other)),
            _ => return Err(usage(Subcommand::Snapshot)),
        }
    }
    Ok(())
}

/// Longest `wait <ms>`: the largest call timeout.
const MAX_WAIT_MS: u64 = 120_000;

fn parse_wait(args: &[String], out: &mut Builder) -> Result<(), Refusal> {
    match args {
        [ms] if ms.bytes().all(|b| b.is_ascii_digit()) => {
            integer(ms, "the wait in milliseconds", MAX_WAIT_MS)?;
            out.push(ms);
        }
        [flag, value] if flag == "--text" => {
            out.push(flag);
            out.push(value);
        }
        [flag, value] if flag == "--url" => {
            out.push(flag);
            out.push(word(value, "the URL pattern")?);
        }
        [flag, state] if flag == "--load" => {
            if !matches!(state.as_str(), "load" | "domcontentloaded" | "networkidle") {
                return Err(Refusal::new(
                    Rule::ArgsInvalid,
                    "wait --load takes load, domcontentloaded or networkidle",
                ));
            }
            out.push(flag);
            out.push(state);
        }
        [flag, ..] if matches!(flag.as_str(), "--fn" | "--download") => {
            return Err(Refusal::new(
                Rule::SubcommandDenied,
                format!(
                    "`wait {flag}` is not allowed: {}",
                    if flag == "--fn" {
                        "it runs arbitrary JavaScript in the page"
                    } else {
                        "it writes files chosen by the page"
                    }
                ),
            ));
        }
        [target] => {
            out.push(selector(target)?);
        }
        _ => {
            if let Some(flag) = args.iter().find(|a| is_global_flag(a)) {
                return Err(flag_refusal(flag));
            }
            return Err(usage(Subcommand::Wait));
        }
    }
    Ok(())
}

/// File name endings agent-browser treats as a screenshot path.
const IMAGE_EXTENSIONS: &[&str] = &[".png", ".jpg", ".jpeg", ".webp"];

fn is_image_path(token: &str) -> bool {
    let lower = token.to_ascii_lowercase();
    token.starts_with('/')
        || token.starts_with('.')
        || IMAGE_EXTENSIONS.iter().any(|ext| lower.ends_with(ext))
}

fn parse_screenshot(args: &[String], out: &mut Builder) -> Result<(), Refusal> {
    let mut target = None;
    let mut file = None;
    for arg in args {
        match arg.as_str() {
            "--full" | "-f" => out.push("--full"),
            _ if is_image_path(arg) && file.is_none() => file = Some(arg.clone()),
            _ if target.is_none() && file.is_none() => target = Some(selector(arg)?.to_owned()),
            _ => return Err(usage(Subcommand::Screenshot)),
        }
    }
    if let Some(target) = target {
        out.push(&target);
    }
    out.slot = Slot::OutputFile(file);
    Ok(())
}

fn parse_get(args: &[String], out: &mut Builder) -> Result<(), Refusal> {
    let Some((what, rest)) = args.split_first() else {
        return Err(usage(Subcommand::Get));
    };
    match (what.as_str(), rest) {
        ("title" | "url", []) => out.push(what),
        ("text" | "value" | "count", [target]) => {
            out.push(what);
            out.push(selector(target)?);
        }
        ("attr", [target, name]) => {
            out.push(what);
            out.push(selector(target)?);
            out.push(word(name, "the attribute name")?);
        }
        ("cdp-url", _) => {
            return Err(Refusal::new(
                Rule::SubcommandDenied,
                "`get cdp-url` is not allowed: the browser WebSocket URL gives full control of the browser",
            ));
        }
        _ => {
            if let Some(flag) = args.iter().find(|a| is_global_flag(a)) {
                return Err(flag_refusal(flag));
            }
            return Err(usage(Subcommand::Get));
        }
    }
    Ok(())
}

fn parse_scroll(args: &[String], out: &mut Builder) -> Result<(), Refusal> {
    let mut rest = args;
    if let Some((dir, tail)) = rest.split_first()
        && matches!(dir.as_str(), "up" | "down" | "left" | "right")
    {
        out.push(dir);
        rest = tail;
    }
    match rest {
        [] => {}
        [px] => {
            integer(px, "the scroll amount in pixels", 100_000)?;
            out.push(px);
        }
        _ => {
            if let Some(flag) = rest.iter().find(|a| is_global_flag(a)) {
                return Err(flag_refusal(flag));
            }
            return Err(usage(Subcommand::Scroll));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "grammar_tests.rs"]
mod tests;
