//! The navigation guard: after every command that runs in a page, the page
//! URL is read and checked against the URL policy; a page somewhere the
//! policy refuses is taken away (sent to about:blank) and the reply replaced
//! by a refusal, so no content from it reaches the agent (docs/design.md,
//! "The navigation guard").

use audit::IntentSynced;
use serde_json::Value;

use super::{
    request::Validated,
    subcommand::{GuardBy, Subcommand},
};
use crate::{
    policy::{resolve::Resolve, rules::Rules},
    refusal::{Refusal, Rule},
    runner::{Bounds, Executed, RawOutcome, Runner, Termination, Withheld, Withhold},
    server::{admission::Admission, sessions::Sessions},
    session_id::SessionId,
};

/// What the guard works with after a command: the runner to read and reset
/// the page, the resolver the URL policy checks hosts with, the sessions
/// that remember whether a page was seen, and the server's shutdown.
#[derive(Clone, Copy)]
pub(crate) struct GuardServices<'a> {
    pub(crate) runner: &'a Runner,
    pub(crate) resolver: &'a dyn Resolve,
    pub(crate) sessions: &'a Sessions,
    pub(crate) admission: &'a Admission,
}

/// How long the guard's reset to about:blank may take.
const RESET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long one of the guard's own reads of the page URL may take.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The command the navigation guard appends to a batch.
pub(crate) const GUARD_COMMAND: [&str; 2] = ["get", "url"];

/// How the navigation guard learns the page URL after a command.
///
/// Every command but `close` runs in a page, and the page may have navigated
/// since the last check — by a link, a redirect, a script, or a navigation
/// that committed only after the previous command returned — so the guard
/// reads the URL after each one and, if the page is somewhere the policy
/// refuses, replaces the reply (content included) with a refusal. No content
/// from a disallowed page reaches the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Not checked (`close` ends the session; or the policy turns the guard off).
    Off,
    /// The command reports the page URL itself, in its result's `field`:
    /// `get url` and `open` (`url`, for `open` once the load settled), and
    /// `snapshot` (`origin`, which agent-browser reads right after taking
    /// the snapshot — the same read as `get url`). No second read, which
    /// would cost a round trip to Chromium.
    OwnResult { field: &'static str },
    /// A `get url` is appended to the batch; its entry is not part of the reply.
    Trailing,
}

impl Guard {
    /// The guard for the agent's `subcommand` (its `tokens`) when the
    /// policy enables it.
    pub(crate) fn for_command(subcommand: Subcommand, tokens: &[String], enabled: bool) -> Self {
        let by = subcommand.facts().guard;
        match by {
            _ if !enabled => Self::Off,
            GuardBy::Nothing => Self::Off,
            GuardBy::OwnField(field) => Self::OwnResult { field },
            // `get url` is the guard's own read.
            GuardBy::Trailing if tokens.iter().map(String::as_str).eq(GUARD_COMMAND) => {
                Self::OwnResult { field: "url" }
            }
            GuardBy::Trailing => Self::Trailing,
        }
    }

    pub(crate) fn is_on(self) -> bool {
        self != Self::Off
    }
}

/// What the guard's read of the page URL saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GuardRead {
    /// The batch never got there (with `--bail`, the agent's command failed).
    NotRun,
    /// The page URL.
    Url(String),
    /// It ran but could not read the URL (e.g. mid-navigation).
    Failed,
}

/// The page URL a guarded batch reported, if the batch got that far: the
/// trailing guard entry, or the agent's own entry for [`Guard::OwnResult`].
pub(crate) fn guard_read(raw: &RawOutcome, guard: Guard) -> GuardRead {
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(&raw.stdout) else {
        return GuardRead::NotRun;
    };
    let last = match guard {
        Guard::Off => None,
        Guard::OwnResult { .. } => items.last().filter(|_| items.len() == 1),
        Guard::Trailing => items.last().filter(|_| items.len() >= 2).filter(|last| {
            last.get("command")
                .and_then(Value::as_array)
                .is_some_and(|c| {
                    c.iter()
                        .map(Value::as_str)
                        .eq(GUARD_COMMAND.iter().map(|s| Some(*s)))
                })
        }),
    };
    let Some(last) = last else {
        return GuardRead::NotRun;
    };
    let field = match guard {
        Guard::OwnResult { field } => field,
        Guard::Off | Guard::Trailing => "url",
    };
    let url = last
        .get("result")
        .and_then(|r| r.get(field))
        .and_then(Value::as_str);
    match url {
        // agent-browser reports "" when it could not read the URL: no read.
        Some(url)
            if !url.is_empty() && last.get("success").and_then(Value::as_bool) == Some(true) =>
        {
            GuardRead::Url(url.to_owned())
        }
        _ => GuardRead::Failed,
    }
}

/// The batch sent on stdin: the agent's command, followed, when the guard
/// needs its own read, by `get url`.
pub(crate) fn batch_for(tokens: Vec<String>, guard: Guard) -> Vec<Vec<String>> {
    let mut batch = vec![tokens];
    if guard == Guard::Trailing {
        batch.push(guard_command());
    }
    batch
}

fn guard_command() -> Vec<String> {
    GUARD_COMMAND.iter().map(|s| (*s).to_owned()).collect()
}

/// What the guard concluded about the page a command left the session on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GuardVerdict {
    /// It did not look: the guard is off, or the command did not succeed
    /// (the next command of the session looks first).
    Unchecked,
    /// The page is somewhere the policy allows (`page`).
    Passed { page: String },
    /// The page is somewhere the policy refuses (`page`, `why`).
    Blocked { page: String, why: String },
    /// The page URL could not be read (`why`: what the reads returned,
    /// agent-browser's own words when it gave any). Not known to be
    /// allowed, so treated as refused; but named as what it is, usually a
    /// daemon that cannot reach the browser, not a navigation.
    Unreadable { why: String },
}

impl GuardVerdict {
    /// The page URL the guard read when the command ended, if it read one:
    /// evidence of where the agent's output came from.
    pub(crate) fn page(&self) -> Option<&str> {
        match self {
            Self::Passed { page } | Self::Blocked { page, .. } => {
                Some(page.as_str()).filter(|page| url::Url::parse(page).is_ok())
            }
            Self::Unchecked | Self::Unreadable { .. } => None,
        }
    }
}

/// Before a command, for a session whose page the guard has not seen since
/// its last command: read the page URL and check it. Part of the release
/// gate, so it runs once the call's intent is durable.
///
/// Passed, it also returns what made the look slow, if a read did not
/// answer: the call's outcome record says why the call waited.
pub(crate) async fn look_before(
    runner: &Runner,
    resolver: &dyn Resolve,
    rules: &Rules,
    session: &SessionId,
    intent: IntentSynced,
) -> Result<(IntentSynced, Option<String>), Withheld> {
    let read = read_page_url(runner, &intent, session, false).await;
    let (page, why) = match read.url {
        None => {
            return Err(Withheld {
                why: Withhold::Unreadable {
                    why: format!("before the command: {}", said_once(&read.missed)),
                },
                intent: Some(intent),
            });
        }
        Some(page) => match check_page(resolver, rules, &page).await {
            Ok(()) => {
                let waited = (!read.missed.is_empty()).then(|| {
                    format!(
                        "the guard looked at the page before the command (the session's last \
                         command had ended unchecked), and {} of its reads of the page URL did \
                         not answer: {}",
                        read.missed.len(),
                        said_once(&read.missed)
                    )
                });
                return Ok((intent, waited));
            }
            Err(refusal) => (page, refusal.message),
        },
    };
    Err(Withheld {
        why: Withhold::Blocked { page, why },
        intent: Some(intent),
    })
}

/// Before a command that types secrets: the page must be on the hosts of
/// each, or nothing is typed. Part of the release check, like
/// [`look_before`]: the batch (which holds the values) reaches agent-browser
/// only if this passes.
pub(crate) async fn check_secret_hosts(
    runner: &Runner,
    rules: &Rules,
    session: &SessionId,
    intent: IntentSynced,
    names: &[String],
) -> Result<IntentSynced, Withheld> {
    let page = read_page_url(runner, &intent, session, false)
        .await
        .url
        .unwrap_or_default();
    match rules.secrets.check_hosts(names, &page) {
        Ok(()) => Ok(intent),
        Err(refusal) => Err(Withheld {
            why: Withhold::Refused(refusal),
            intent: Some(intent),
        }),
    }
}

/// After the command: where did it leave the page? The session remembers
/// whether it was seen, so its next command looks first if not.
pub(crate) async fn judge(
    with: GuardServices<'_>,
    rules: &Rules,
    session: &SessionId,
    guard: Guard,
    executed: &Executed,
    succeeded: bool,
) -> GuardVerdict {
    let verdict = 'looked: {
        if let Termination::Withheld(Withhold::Blocked { page, why }) = &executed.raw.termination {
            // It looked before the command, which never ran.
            break 'looked GuardVerdict::Blocked {
                page: page.clone(),
                why: format!(
                    "{why}; the command was not run (the guard looked first: the session's last command had ended unchecked)"
                ),
            };
        }
        if let Termination::Withheld(Withhold::Unreadable { why }) = &executed.raw.termination {
            break 'looked GuardVerdict::Unreadable {
                why: format!(
                    "{why}; the command was not run (the guard looked first: the session's last command had ended unchecked)"
                ),
            };
        }
        let Some(intent) = executed
            .intent
            .as_ref()
            .filter(|_| guard.is_on() && succeeded)
        else {
            break 'looked GuardVerdict::Unchecked;
        };
        let read = match guard_read(&executed.raw, guard) {
            GuardRead::Url(url) => Ok(url),
            // Read mid-navigation: look again once it has settled.
            GuardRead::Failed => {
                let read = read_page_url(with.runner, intent, session, true).await;
                read.url.ok_or_else(|| said_once(&read.missed))
            }
            GuardRead::NotRun => Err("the command's batch did not read it".to_owned()),
        };
        let page = match read {
            Ok(page) => page,
            // Fail closed: a page whose URL cannot be read is not known to be allowed.
            Err(missed) => {
                break 'looked GuardVerdict::Unreadable {
                    why: format!("after the command: {missed}"),
                };
            }
        };
        match check_page(with.resolver, rules, &page).await {
            Ok(()) => GuardVerdict::Passed { page },
            Err(refusal) => GuardVerdict::Blocked {
                page,
                why: refusal.message,
            },
        }
    };
    if guard.is_on() {
        let unlooked = verdict == GuardVerdict::Unchecked;
        with.sessions.set_unlooked(session.daemon_name(), unlooked);
    }
    verdict
}

/// The page already went where the guard refuses (a browser follows links
/// and redirects before anyone can look): take it away again. Not bounded by
/// the agent's timeout or cancellation: this must happen. Returns what was
/// done, for the refusal's message.
pub(crate) async fn take_away(
    with: GuardServices<'_>,
    request: &Validated,
    intent: Option<&IntentSynced>,
) -> String {
    let name = request.session.daemon_name();
    let failed = match intent {
        Some(intent) => {
            let reset = vec![vec!["open".to_owned(), "about:blank".to_owned()]];
            let cancel = with.admission.shutdown_token();
            let bounds = Bounds {
                timeout: RESET_TIMEOUT,
                cancel: &cancel,
            };
            let reset = with
                .runner
                .run_more(intent, &request.session, &reset, bounds)
                .await;
            if matches!(reset.termination, Termination::Exited(0)) {
                return "the session was sent to about:blank".to_owned();
            }
            format!("{:?}", reset.termination)
        }
        None => "no durable intent to run it under".to_owned(),
    };
    // Whatever the page is, the session's daemon no longer serves it; the
    // next command looks first.
    with.runner.kill_daemon(name).await;
    with.sessions.set_unlooked(name, true);
    format!(
        "sending the session to about:blank failed ({failed}), so its browser daemon was stopped"
    )
}

/// The guard's own read of the page URL: the URL, if a try read it, and how
/// each try before it ended.
struct PageRead {
    url: Option<String>,
    missed: Vec<String>,
}

/// Read the session's page URL on its own: up to three tries, 100 ms apart —
/// the first at once, or, with `settle` (the batch's read fell in the middle
/// of a navigation), after 100 ms too.
async fn read_page_url(
    runner: &Runner,
    intent: &IntentSynced,
    session: &SessionId,
    settle: bool,
) -> PageRead {
    let mut missed = Vec::new();
    let read = vec![guard_command()];
    let never = tokio_util::sync::CancellationToken::new();
    let bounds = Bounds {
        timeout: READ_TIMEOUT,
        cancel: &never,
    };
    for attempt in 0..3 {
        if settle || attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let raw = runner.run_more(intent, session, &read, bounds).await;
        if let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(&raw.stdout)
            && let Some(url) = items
                .first()
                .and_then(|entry| entry.pointer("/result/url"))
                .and_then(Value::as_str)
        {
            return PageRead {
                url: Some(url.to_owned()),
                missed,
            };
        }
        missed.push(match raw.termination {
            Termination::TimedOut => format!(
                "one timed out after {:.1} s ({})",
                raw.elapsed.as_secs_f64(),
                super::reply::stopped_early(&raw)
            ),
            other => match agent_browser_error(&raw.stdout) {
                // Its own words: "cannot connect to the browser" says more
                // than an exit status.
                Some(error) => format!("agent-browser said {error:?}"),
                None => format!("one ended without it ({other:?})"),
            },
        });
    }
    PageRead { url: None, missed }
}

/// What the reads said, each different thing once, with how many said it:
/// three retries that failed alike are one line, not three.
fn said_once(missed: &[String]) -> String {
    let mut said: Vec<(&str, usize)> = Vec::new();
    for what in missed {
        match said.iter_mut().find(|(seen, _)| *seen == what.as_str()) {
            Some((_, times)) => *times += 1,
            None => said.push((what, 1)),
        }
    }
    let parts: Vec<String> = said
        .into_iter()
        .map(|(what, times)| match times {
            1 => what.to_owned(),
            n => format!("{what} (×{n})"),
        })
        .collect();
    parts.join("; ")
}

/// The error a batch's first command reported, cut to a line of 200
/// characters (it quotes the browser, not the page).
fn agent_browser_error(stdout: &[u8]) -> Option<String> {
    let items: Value = serde_json::from_slice(stdout).ok()?;
    let error = items.get(0)?.get("error")?.as_str()?;
    let line = error.lines().next().unwrap_or_default();
    Some(line.chars().take(200).collect())
}

/// Is a page URL allowed? Chromium's own error page (a failed load) is not
/// a destination.
async fn check_page(resolver: &dyn Resolve, rules: &Rules, page: &str) -> Result<(), Refusal> {
    let url = url::Url::parse(page)
        .map_err(|e| Refusal::new(Rule::UrlInvalid, format!("unparsable page URL: {e}")))?;
    if url.scheme() == "chrome-error" {
        return Ok(());
    }
    rules.url.check_url(&url, resolver).await.map(drop)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_that_failed_alike_are_said_once_with_their_count() {
        let missed = ["a".to_owned(), "b".to_owned(), "a".to_owned()];
        assert_eq!(super::said_once(&missed), "a (×2); b");
        assert_eq!(super::said_once(&[]), "");
    }
}
