//! Normalisation: what agent-browser printed becomes the tool's reply.
//!
//! The reply is `{session_id, exit_code, stdout, stderr}`. `stdout` is the
//! data-only JSON of agent-browser's `{success, data, error}` (its noisy
//! `data.lifecycle` removed), one line; failures carry the error text in
//! `stderr` and a non-zero `exit_code`. Both are truncated to a byte budget at
//! a UTF-8 boundary, with a marker saying how much was cut.

use serde::Serialize;
use serde_json::Value;

use super::guard::{Guard, GuardRead, guard_read};
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
        }
    }

    pub(crate) fn internal(session_id: &str, message: &str) -> Self {
        Self {
            session_id: session_id.to_owned(),
            exit_code: exit_code::INTERNAL,
            stdout: String::new(),
            stderr: format!("browser-shell error: {message}"),
            image: None,
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
    marked: Option<&[String]>,
    secrets: &Secrets,
) -> Reply {
    let raw_stderr = String::from_utf8_lossy(&raw.stderr);
    let (exit_code, stdout, stderr) = match &raw.termination {
        Termination::TimedOut => (
            exit_code::TIMED_OUT,
            String::new(),
            format!(
                "timed out after {:.1} s; the agent-browser process and the session's daemon \
                 were stopped (the next call starts a fresh daemon on the same tab)",
                raw.elapsed.as_secs_f64()
            ),
        ),
        Termination::Cancelled => (
            exit_code::CANCELLED,
            String::new(),
            "cancelled by the client; the agent-browser process and the session's daemon were \
             stopped"
                .to_owned(),
        ),
        Termination::SpawnFailed(why) => (
            exit_code::INTERNAL,
            String::new(),
            format!("browser-shell error: {why}"),
        ),
        Termination::Withheld(Withhold::Audit(why)) => (
            exit_code::INTERNAL,
            String::new(),
            format!("audit unavailable, nothing was run: {why}"),
        ),
        // The pipeline replaces this reply with the guard's refusal (whose
        // page URL goes through the redactor).
        Termination::Withheld(Withhold::Blocked { .. }) => (
            exit_code::REFUSED,
            String::new(),
            "the page is somewhere the policy refuses; nothing was run".to_owned(),
        ),
        Termination::Withheld(Withhold::Refused(refusal)) => {
            (exit_code::REFUSED, String::new(), refusal.to_string())
        }
        Termination::Signaled(sig) => (
            128 + sig,
            String::new(),
            join_lines(
                &format!("agent-browser was killed by signal {sig}"),
                &raw_stderr,
            ),
        ),
        Termination::Exited(code) => {
            // The reply is the agent's command, never the guard's entry
            // (which may fail on its own, mid-navigation).
            let skip_guard =
                guard == Guard::Trailing && guard_read(raw, guard) != GuardRead::NotRun;
            let page = match guard_read(raw, guard) {
                GuardRead::Url(url) => Some(url),
                _ => None,
            };
            let mark = marked.map(|command| (command, page.as_deref()));
            from_envelope(*code, &raw.stdout, &raw_stderr, skip_guard, mark, secrets)
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
    mark: Option<(&[String], Option<&str>)>,
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
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn raw(termination: Termination, stdout: &str, stderr: &str) -> RawOutcome {
        RawOutcome {
            termination,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            stdout_total: stdout.len() as u64,
            stderr_total: stderr.len() as u64,
            elapsed: std::time::Duration::from_millis(5),
        }
    }

    #[test]
    fn success_keeps_only_the_data_without_lifecycle() {
        let out = r#"[{"command":["get","url"],"error":null,"result":{"lifecycle":{"x":1},"url":"about:blank"},"success":true}]"#;
        let reply = normalize(
            "u1",
            &raw(Termination::Exited(0), out, ""),
            30_000,
            Guard::Off,
        );
        assert_eq!(reply.exit_code, 0);
        assert_eq!(reply.stdout, "{\"url\":\"about:blank\"}\n");
        assert_eq!(reply.stderr, "");
    }

    #[test]
    fn only_the_last_batch_entry_is_the_reply() {
        let out = r#"[{"command":["tab","AB12"],"error":null,"result":{"tabId":"t2"},"success":true},{"command":["screenshot","/o/x.png"],"error":null,"result":{"path":"/o/x.png"},"success":true}]"#;
        let reply = normalize(
            "u1",
            &raw(Termination::Exited(0), out, ""),
            30_000,
            Guard::Off,
        );
        assert_eq!(reply.stdout, "{\"path\":\"/o/x.png\"}\n");
    }

    #[test]
    fn the_guard_entry_is_not_the_reply() {
        let out = r#"[{"command":["click","a"],"error":null,"result":{"clicked":"a"},"success":true},{"command":["get","url"],"error":null,"result":{"url":"http://x/"},"success":true}]"#;
        let raw = raw(Termination::Exited(0), out, "");
        assert_eq!(
            guard_read(&raw, Guard::Trailing),
            GuardRead::Url("http://x/".into())
        );
        assert_eq!(
            normalize("u1", &raw, 30_000, Guard::Trailing).stdout,
            "{\"clicked\":\"a\"}\n"
        );
    }

    #[test]
    fn get_url_and_open_are_their_own_guard_read() {
        let tokens = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            Guard::for_command(&tokens(&["get", "url"]), true),
            Guard::OwnResult { field: "url" }
        );
        assert_eq!(
            Guard::for_command(&tokens(&["open", "http://x/"]), true),
            Guard::OwnResult { field: "url" }
        );
        assert_eq!(
            Guard::for_command(&tokens(&["snapshot", "-i"]), true),
            Guard::OwnResult { field: "origin" }
        );
        assert_eq!(
            Guard::for_command(&tokens(&["get", "title"]), true),
            Guard::Trailing
        );
        assert_eq!(
            Guard::for_command(&tokens(&["click", "@e1"]), true),
            Guard::Trailing
        );
        assert_eq!(Guard::for_command(&tokens(&["close"]), true), Guard::Off);
        assert_eq!(
            Guard::for_command(&tokens(&["click", "@e1"]), false),
            Guard::Off
        );
        let out = r#"[{"command":["open","http://a/"],"error":null,"result":{"title":"t","url":"http://b/"},"success":true}]"#;
        let opened = raw(Termination::Exited(0), out, "");
        // The page URL the command reports (after a redirect), not the one asked for.
        assert_eq!(
            guard_read(&opened, Guard::OwnResult { field: "url" }),
            GuardRead::Url("http://b/".into())
        );
        // ... and the entry stays the reply.
        assert_eq!(
            normalize("u1", &opened, 30_000, Guard::OwnResult { field: "url" }).stdout,
            "{\"title\":\"t\",\"url\":\"http://b/\"}\n"
        );
        // A result without a URL is not a read; the pipeline then reads again.
        let out = r#"[{"command":["get","url"],"error":null,"result":{},"success":true}]"#;
        assert_eq!(
            guard_read(
                &raw(Termination::Exited(0), out, ""),
                Guard::OwnResult { field: "url" }
            ),
            GuardRead::Failed
        );
    }

    #[test]
    fn a_snapshot_is_guarded_by_the_origin_it_reports() {
        let snapshot = Guard::OwnResult { field: "origin" };
        let out = r#"[{"command":["snapshot","-i"],"error":null,"result":{"origin":"http://127.0.0.3/next","refs":{},"snapshot":"- heading \"Next page\""},"success":true}]"#;
        assert_eq!(
            guard_read(&raw(Termination::Exited(0), out, ""), snapshot),
            GuardRead::Url("http://127.0.0.3/next".into())
        );
        // agent-browser's "" (its URL read failed) is no read: the pipeline reads again.
        let out = r#"[{"command":["snapshot"],"error":null,"result":{"origin":"","refs":{},"snapshot":""},"success":true}]"#;
        assert_eq!(
            guard_read(&raw(Termination::Exited(0), out, ""), snapshot),
            GuardRead::Failed
        );
        // A snapshot's `url`-named text is not its origin.
        let out = r#"[{"command":["snapshot"],"error":null,"result":{"url":"http://127.0.0.1/","snapshot":""},"success":true}]"#;
        assert_eq!(
            guard_read(&raw(Termination::Exited(0), out, ""), snapshot),
            GuardRead::Failed
        );
    }

    #[test]
    fn a_failed_guard_read_never_replaces_the_agents_result() {
        let out = r#"[{"command":["press","Enter"],"error":null,"result":{"pressed":"Enter"},"success":true},{"command":["get","url"],"error":"CDP error (Runtime.evaluate): Inspected target navigated or closed","result":null,"success":false}]"#;
        let raw = raw(Termination::Exited(1), out, "");
        assert_eq!(guard_read(&raw, Guard::Trailing), GuardRead::Failed);
        let reply = normalize("u1", &raw, 30_000, Guard::Trailing);
        assert_eq!(reply.stdout, "{\"pressed\":\"Enter\"}\n");
        assert_eq!(
            reply.exit_code, 0,
            "the failure was the guard's; the pipeline re-reads the URL"
        );
    }

    #[test]
    fn the_page_on_record_is_the_url_the_guard_read_and_nothing_else() {
        use super::super::guard::GuardVerdict;
        let passed = GuardVerdict::Passed {
            page: "http://127.0.0.1/next".into(),
        };
        assert_eq!(passed.page(), Some("http://127.0.0.1/next"));
        let blocked = GuardVerdict::Blocked {
            page: "blob:http://127.0.0.1/x".into(),
            why: "scheme".into(),
        };
        assert_eq!(blocked.page(), Some("blob:http://127.0.0.1/x"));
        // Not a read: no URL on record.
        let unread = GuardVerdict::Blocked {
            page: "an unknown URL".into(),
            why: "the page URL could not be read after the command".into(),
        };
        assert_eq!(unread.page(), None);
        assert_eq!(GuardVerdict::Unchecked.page(), None);
    }

    #[test]
    fn failure_puts_the_error_in_stderr() {
        let out = r##"[{"command":["click","#x"],"error":"Element not found: #x","result":null,"success":false}]"##;
        let reply = normalize(
            "u1",
            &raw(Termination::Exited(1), out, ""),
            30_000,
            Guard::Off,
        );
        assert_eq!(reply.exit_code, 1);
        assert_eq!(reply.stdout, "");
        assert_eq!(reply.stderr, "Element not found: #x");
    }

    #[test]
    fn success_false_with_exit_zero_is_forced_to_one() {
        let out = r#"{"success":false,"data":null,"error":"nope"}"#;
        let reply = normalize(
            "u1",
            &raw(Termination::Exited(0), out, "⚠ warn"),
            30_000,
            Guard::Off,
        );
        assert_eq!(reply.exit_code, 1);
        assert_eq!(reply.stderr, "nope\n⚠ warn");
    }

    #[test]
    fn non_json_output_is_a_failure_not_data() {
        let reply = normalize(
            "u1",
            &raw(Termination::Exited(0), "hello", ""),
            30_000,
            Guard::Off,
        );
        assert_eq!(reply.exit_code, 1);
        assert!(reply.stderr.contains("no JSON"));
    }

    #[test]
    fn timeout_and_cancel_have_their_own_codes() {
        assert_eq!(
            normalize("u", &raw(Termination::TimedOut, "", ""), 100, Guard::Off).exit_code,
            124
        );
        assert_eq!(
            normalize("u", &raw(Termination::Cancelled, "", ""), 100, Guard::Off).exit_code,
            130
        );
        assert_eq!(
            normalize("u", &raw(Termination::Signaled(9), "", ""), 100, Guard::Off).exit_code,
            137
        );
    }

    #[test]
    fn truncation_is_utf8_safe_and_says_how_much_was_cut() {
        let text = "é".repeat(10); // 20 bytes
        let cut = truncate(&text, 5, 0);
        assert!(cut.starts_with("éé"));
        assert!(!cut.starts_with("ééé"));
        assert!(cut.ends_with("[browser-shell: output truncated, 16 of 20 bytes cut]"));
        assert_eq!(truncate("short", 10, 0), "short");
    }
}
