//! Normalisation: what agent-browser printed becomes the tool's reply.
//!
//! The reply is `{session_id, exit_code, stdout, stderr}`. `stdout` is the
//! data-only JSON of agent-browser's `{success, data, error}` (its noisy
//! `data.lifecycle` removed), one line; failures carry the error text in
//! `stderr` and a non-zero `exit_code`. Both are truncated to a byte budget at
//! a UTF-8 boundary, with a marker saying how much was cut.

use serde::Serialize;
use serde_json::Value;

use super::{
    boundary::Marked,
    guard::{Guard, GuardRead, guard_read},
};
use crate::{
    policy::secrets::Secrets,
    refusal::{Refusal, exit_code},
    runner::{RawOutcome, Termination, Withhold},
};

/// The tool's reply, exactly as serialised into `structuredContent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Reply {
    pub session_id: String,
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// A screenshot's PNG, base64: an MCP `image` item after the JSON text,
    /// never part of the dict ([`super::image`]).
    #[serde(skip)]
    pub image: Option<String>,
    /// A question for a 2026-07-28 client: the call's result is then
    /// `input_required`, not this reply ([`crate::approvals::retry`]).
    #[serde(skip)]
    pub question: Option<crate::approvals::retry::Question>,
}

impl Reply {
    pub(crate) fn is_error(&self) -> bool {
        self.exit_code != 0
    }

    pub(crate) fn refused(session_id: &str, refusal: &Refusal) -> Self {
        Self {
            session_id: session_id.to_owned(),
            exit_code: exit_code::REFUSED,
            stdout: String::new(),
            stderr: refusal.to_string(),
            image: None,
            question: None,
        }
    }

    /// This reply with every secret's value in `stderr` replaced by its
    /// placeholder: a refusal that replaced the reply may quote the page's
    /// URL. (`stdout` is page data, scrubbed value by value when it was
    /// normalised, before truncation could cut a value in two.)
    pub(crate) fn scrubbed(mut self, secrets: &Secrets) -> Self {
        if !secrets.is_empty() {
            self.stderr = secrets.scrub(&self.stderr).into_owned();
        }
        self
    }

    /// The command ran, but the guard refused where it left the page: its
    /// output is withheld, and the exit code says it failed (not 126,
    /// "refused, nothing ran").
    pub(crate) fn withheld(session_id: &str, refusal: &Refusal) -> Self {
        Self {
            session_id: session_id.to_owned(),
            exit_code: exit_code::FAILED,
            stdout: String::new(),
            stderr: format!("{refusal}; the command ran, and its output was withheld"),
            image: None,
            question: None,
        }
    }

    /// The call asks its client a question (an approval); the reply's own
    /// fields say so to anyone who reads it instead.
    pub(crate) fn asking(session_id: &str, question: crate::approvals::retry::Question) -> Self {
        Self {
            session_id: session_id.to_owned(),
            exit_code: exit_code::REFUSED,
            stdout: String::new(),
            stderr: format!(
                "approval {} is asked of the person at the client; retry with the answer",
                question.id
            ),
            image: None,
            question: Some(question),
        }
    }

    pub(crate) fn internal(session_id: &str, message: &str) -> Self {
        Self {
            session_id: session_id.to_owned(),
            exit_code: exit_code::INTERNAL,
            stdout: String::new(),
            stderr: format!("browser-shell error: {message}"),
            image: None,
            question: None,
        }
    }
}

/// Turn a finished child into a reply, each stream truncated to `max_bytes`.
/// With [`Guard::Trailing`], the guard's entry is not part of the reply.
#[cfg(test)]
pub(crate) fn normalize(
    session_id: &str,
    raw: &RawOutcome,
    max_bytes: usize,
    guard: Guard,
) -> Reply {
    normalize_marked(session_id, raw, max_bytes, guard, None, &Secrets::default())
}

/// [`normalize`], with the page text of `marked`'s command (when given)
/// wrapped in content boundaries ([`super::boundary`]) and every secret's
/// value replaced by its placeholder, both before truncation: a cut reply
/// keeps its opening marker, and a cut can never leave half a secret.
pub(crate) fn normalize_marked(
    session_id: &str,
    raw: &RawOutcome,
    max_bytes: usize,
    guard: Guard,
    marked: Option<Marked<'_>>,
    secrets: &Secrets,
) -> Reply {
    let raw_stderr = String::from_utf8_lossy(&raw.stderr);
    let (exit_code, stdout, stderr) = match ran_to_its_end(raw, &raw_stderr) {
        Err((exit_code, why)) => (exit_code, String::new(), why),
        Ok(code) => {
            // The reply is the agent's command, never the guard's entry
            // (which may fail on its own, mid-navigation).
            let skip_guard =
                guard == Guard::Trailing && guard_read(raw, guard) != GuardRead::NotRun;
            let page = match guard_read(raw, guard) {
                GuardRead::Url(url) => Some(url),
                _ => None,
            };
            let mark = marked.map(|command| (command, page.as_deref()));
            from_envelope(code, &raw.stdout, &raw_stderr, skip_guard, mark, secrets)
        }
    };
    let stderr = secrets.scrub(&stderr);
    let stdout = truncate(
        &stdout,
        max_bytes,
        raw.stdout_total.saturating_sub(raw.stdout.len() as u64),
    );
    Reply {
        session_id: session_id.to_owned(),
        exit_code,
        stdout,
        stderr: truncate(&stderr, max_bytes, 0),
        image: None,
        question: None,
    }
}

/// Ok with agent-browser's exit code when it ran to its end; otherwise the
/// reply's exit code and what stopped it (a timeout, a cancellation, a
/// spawn that failed, a command withheld, a signal).
fn ran_to_its_end(raw: &RawOutcome, raw_stderr: &str) -> Result<i32, (i32, String)> {
    let stopped = match &raw.termination {
        Termination::Exited(code) => return Ok(*code),
        Termination::TimedOut => (
            exit_code::TIMED_OUT,
            format!(
                "timed out after {:.1} s; {}",
                raw.elapsed.as_secs_f64(),
                stopped_early(raw)
            ),
        ),
        Termination::Cancelled => (
            exit_code::CANCELLED,
            format!("cancelled by the client; {}", stopped_early(raw)),
        ),
        Termination::SpawnFailed(why) => {
            (exit_code::INTERNAL, format!("browser-shell error: {why}"))
        }
        Termination::Withheld(Withhold::Audit(why)) => (
            exit_code::INTERNAL,
            format!("audit unavailable, nothing was run: {why}"),
        ),
        // The pipeline replaces this reply with the guard's refusal (whose
        // page URL goes through the redactor).
        Termination::Withheld(Withhold::Blocked { .. }) => (
            exit_code::REFUSED,
            "the page is somewhere the policy refuses; nothing was run".to_owned(),
        ),
        Termination::Withheld(Withhold::Unreadable { .. }) => (
            exit_code::REFUSED,
            "the page could not be read; nothing was run".to_owned(),
        ),
        Termination::Withheld(Withhold::Refused(refusal)) => {
            (exit_code::REFUSED, refusal.to_string())
        }
        Termination::Signaled(sig) => (
            128 + sig,
            join_lines(
                &format!("agent-browser was killed by signal {sig}"),
                raw_stderr,
            ),
        ),
    };
    Err(stopped)
}

/// What the server stopped when it stopped a command early (a timeout, a
/// cancellation): the reply and the outcome record both say it.
pub(crate) fn stopped_early(raw: &RawOutcome) -> String {
    match &raw.loading_stopped {
        None => "the agent-browser process was stopped before it was given the command".to_owned(),
        Some(Ok(())) => "the agent-browser process, the session's daemon and the page's loading \
             were stopped (the next call starts a fresh daemon on the same tab)"
            .to_owned(),
        Some(Err(why)) => format!(
            "the agent-browser process and the session's daemon were stopped, but the page's \
             loading could not be ({why}), so the next call may wait for the page"
        ),
    }
}

/// Read agent-browser's JSON: the batch array `[{command, success, result,
/// error}, …]` whose last entry is the agent's command (or, with `--bail`,
/// the wrapper step that failed), or the plain envelope `{success, data,
/// error}` the CLI prints for errors it catches before running the batch.
fn from_envelope(
    code: i32,
    stdout: &[u8],
    stderr: &str,
    skip_guard: bool,
    mark: Option<(Marked<'_>, Option<&str>)>,
    secrets: &Secrets,
) -> (i32, String, String) {
    let parsed: Option<Value> = serde_json::from_slice(stdout).ok();
    let entry = match parsed {
        Some(Value::Array(mut items)) => {
            if skip_guard {
                items.pop();
            }
            items.pop()
        }
        Some(obj @ Value::Object(_)) => Some(obj),
        _ => None,
    };
    let Some(Value::Object(mut entry)) = entry else {
        let text = String::from_utf8_lossy(stdout);
        let failed = if code == 0 { exit_code::FAILED } else { code };
        return (
            failed,
            String::new(),
            join_lines(
                &format!(
                    "agent-browser printed no JSON result (exit {code}): {}",
                    text.trim()
                ),
                stderr,
            ),
        );
    };
    let success = entry
        .get("success")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut data = entry
        .remove("result")
        .or_else(|| entry.remove("data"))
        .unwrap_or(Value::Null);
    if let Value::Object(map) = &mut data {
        map.remove("lifecycle");
    }
    if let Some((command, page)) = mark {
        super::boundary::mark(&mut data, command, page);
    }
    secrets.scrub_value(&mut data);
    if success {
        let line = format!("{data}\n");
        // A success with a non-zero exit is agent-browser's word; keep it —
        // unless the only failure was the guard's own read after it.
        let code = if skip_guard { 0 } else { code };
        return (code, line, stderr.trim_end().to_owned());
    }
    let error = entry
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("agent-browser reported a failure without a message");
    let stdout = if data.is_null() {
        String::new()
    } else {
        format!("{data}\n")
    };
    let failed = if code == 0 { exit_code::FAILED } else { code };
    let error = match mark {
        Some((_, page)) => super::boundary::mark_error(error, page),
        None => error.to_owned(),
    };
    (failed, stdout, join_lines(&error, stderr))
}

fn join_lines(first: &str, rest: &str) -> String {
    let rest = rest.trim();
    if rest.is_empty() {
        first.to_owned()
    } else {
        format!("{first}\n{rest}")
    }
}

/// Cut `text` to at most `max_bytes` at a char boundary, marking what was cut.
/// `already_cut` counts bytes dropped before `text` was built (capture limit).
pub(crate) fn truncate(text: &str, max_bytes: usize, already_cut: u64) -> String {
    if text.len() <= max_bytes && already_cut == 0 {
        return text.to_owned();
    }
    let total = text.len() as u64 + already_cut;
    let mut end = max_bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = total - end as u64;
    format!(
        "{}\n[browser-shell: output truncated, {cut} of {total} bytes cut]",
        &text[..end]
    )
}

#[cfg(test)]
#[path = "reply_tests.rs"]
mod tests;
