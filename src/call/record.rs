//! What the audit log says about a call: its identity across records and
//! its argv with secrets redacted.
//!
//! What a client sends is stored capped ([`capped`]): a refusal costs the
//! client nothing, and records of megabytes each would rotate older evidence
//! out of the log within a few hundred calls.

use serde_json::{Value, json};

use super::subcommand::{Subcommand, UrlArg};
pub(crate) use crate::obs::journal::{MAX_RECORDED_REASON_BYTES, capped};
use crate::{TOOL_NAME, obs::journal::new_call_id, session_id::SessionId};

/// Most bytes of a request id or client name a record stores.
pub(crate) const MAX_RECORDED_ID_BYTES: usize = 256;
/// Most bytes of one argv item a refusal's record stores (the contract
/// allows 4096 per item, 32 items).
pub(crate) const MAX_RECORDED_ARG_BYTES: usize = 512;
fn capped_owned(value: Option<&String>, max: usize) -> Option<String> {
    value.map(|v| capped(v, max).into_owned())
}

/// Identity of one call across its audit records.
#[derive(Debug, Clone)]
pub(crate) struct CallRecord {
    call_id: String,
    request_id: Option<String>,
    client: Option<String>,
    trace_id: Option<String>,
    span_id: Option<String>,
    /// The policy the call is decided under: every record of it names it.
    policy_sha256: String,
}

impl CallRecord {
    /// `asked` is the client's request id and name, as it sent them.
    pub(crate) fn new(
        asked: (Option<&String>, Option<&String>),
        trace_id: Option<String>,
        span_id: Option<String>,
        policy_sha256: String,
    ) -> Self {
        let (request_id, client) = asked;
        Self {
            call_id: new_call_id(),
            request_id: capped_owned(request_id, MAX_RECORDED_ID_BYTES),
            client: capped_owned(client, MAX_RECORDED_ID_BYTES),
            trace_id,
            span_id,
            policy_sha256,
        }
    }

    pub(crate) fn event(&self, phase: audit::Phase, session: Option<&SessionId>) -> audit::Event {
        let mut event = audit::Event::new(phase, self.call_id.clone());
        event.tool = Some(TOOL_NAME.to_owned());
        event.session_id = session.map(|s| s.as_str().to_owned());
        event.request_id.clone_from(&self.request_id);
        event.client.clone_from(&self.client);
        event.trace_id.clone_from(&self.trace_id);
        event.span_id.clone_from(&self.span_id);
        event.policy_sha256 = Some(self.policy_sha256.clone());
        event
    }
}

/// The argv as the audit log stores it. Free text (what `fill`, `type`,
/// `select` put into a page) becomes its length and a keyed MAC, so a
/// password never reaches the log yet equal values can be correlated; URLs
/// (`open`, `wait --url`) lose userinfo and secret-looking query values.
pub(super) fn redact_argv(redactor: &audit::Redactor, argv: &[String]) -> Vec<Value> {
    let facts = Subcommand::facts_of(argv);
    let typed_from = argv.len() - free_text(argv).len();
    argv.iter()
        .enumerate()
        .map(|(i, arg)| {
            let is_url = match facts.map(|f| f.url) {
                Some(UrlArg::At(at)) => i == at,
                Some(UrlArg::AfterFlag(flag)) => i > 0 && argv[i - 1] == flag,
                _ => false,
            };
            if i >= typed_from {
                with_secret_names(redactor.secret(arg), arg)
            } else if is_url {
                Value::String(redactor.url(arg))
            } else {
                Value::String(arg.clone())
            }
        })
        .collect()
}

/// The arguments of `argv` that are text put into a page (what `fill`,
/// `type`, `select` type or choose): never stored in clear.
pub(super) fn free_text(argv: &[String]) -> &[String] {
    Subcommand::facts_of(argv)
        .and_then(|f| f.typed_from)
        .and_then(|from| argv.get(from..))
        .unwrap_or_default()
}

/// Redacted free text that holds `{{secret:NAME}}` placeholders also names
/// them: which secret was typed is evidence; its value never is (the MAC is
/// of the text as the agent wrote it).
fn with_secret_names(mut redacted: Value, text: &str) -> Value {
    let names = crate::policy::secrets::placeholder_names(text);
    if let (Value::Object(map), false) = (&mut redacted, names.is_empty()) {
        map.insert("secrets".to_owned(), json!(names));
    }
    redacted
}

/// A refused argv as its record stores it: redacted, then each item capped
/// (the digest is of the redacted item, so it reveals no secret the
/// redaction removed). `argv_mac` still covers the whole argv.
pub(super) fn refused_argv(redactor: &audit::Redactor, argv: &[String]) -> Vec<Value> {
    redact_argv(redactor, argv)
        .into_iter()
        .map(|item| match item {
            Value::String(s) if s.len() > MAX_RECORDED_ARG_BYTES => {
                Value::String(capped(&s, MAX_RECORDED_ARG_BYTES).into_owned())
            }
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn redactor() -> audit::Redactor {
        let dir = tempfile::tempdir().unwrap();
        audit::Redactor::new(
            audit::Key::load_or_create(&dir.path().join("k")).unwrap(),
            &[],
        )
    }

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn fill_text_is_redacted_but_the_selector_is_kept() {
        let r = redactor();
        let redacted = redact_argv(&r, &argv(&["fill", "#password", "hunter2"]));
        assert_eq!(redacted[1], "#password");
        assert_eq!(redacted[2]["len"], 7);
        assert_eq!(redacted[2]["redacted"], true);
        assert!(
            !serde_json::to_string(&redacted)
                .unwrap()
                .contains("hunter2")
        );
    }

    #[test]
    fn urls_keep_their_shape_but_not_their_secrets() {
        let r = redactor();
        let redacted = redact_argv(&r, &argv(&["open", "https://u:p@h.test/x?token=t&q=1"]));
        assert_eq!(redacted[1], "https://***@h.test/x?token=***&q=1");
        let redacted = redact_argv(&r, &argv(&["wait", "--url", "https://h.test/?sig=abc"]));
        assert_eq!(redacted[2], "https://h.test/?sig=***");
    }

    /// The record `event` becomes in a real log, as its line.
    fn sealed(event: audit::Event) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let sink = audit::Sink::open(&path, None, None).unwrap();
        sink.append(event).unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn a_megabyte_request_id_makes_a_small_record_with_its_digest() {
        let id = "r".repeat(1024 * 1024);
        let client = "c".repeat(1024 * 1024);
        let event = CallRecord::new((Some(&id), Some(&client)), None, None, "0".repeat(64))
            .event(audit::Phase::Denied, None);
        let line = sealed(event);
        assert!(line.len() < 4096, "a record of {} bytes", line.len());
        let record: Value = serde_json::from_str(&line).unwrap();
        let stored = record["request_id"].as_str().unwrap();
        assert!(stored.starts_with(&"r".repeat(MAX_RECORDED_ID_BYTES)));
        assert!(stored.ends_with(&format!(
            "…[1048576 bytes, sha256:{}]",
            audit::sha256_hex(id.as_bytes())
        )));
        let stored = record["client"].as_str().unwrap();
        assert!(stored.ends_with(&format!("sha256:{}]", audit::sha256_hex(client.as_bytes()))));
    }

    #[test]
    fn a_refused_argv_is_capped_item_by_item() {
        let r = redactor();
        let big = "#".repeat(crate::call::request::MAX_ARG_BYTES);
        let mut items = vec!["click".to_owned()];
        items.resize(crate::call::request::MAX_ARGV_ITEMS, big.clone());
        let stored = refused_argv(&r, &items);
        assert_eq!(stored[0], "click");
        let total = serde_json::to_string(&stored).unwrap().len();
        assert!(total < 32 * 1024, "{total} bytes of argv");
        let item = stored[1].as_str().unwrap();
        assert!(item.len() > MAX_RECORDED_ARG_BYTES);
        assert!(item.ends_with(&format!("sha256:{}]", audit::sha256_hex(big.as_bytes()))));
        // Short items, and redacted text, are stored as before.
        let fill = refused_argv(&r, &argv(&["fill", "#q", &big]));
        assert_eq!(fill, redact_argv(&r, &argv(&["fill", "#q", &big])));
    }

    #[test]
    fn capping_cuts_at_a_character_boundary_and_is_never_ambiguous() {
        assert!(matches!(capped("short", 8), Cow::Borrowed("short")));
        assert_eq!(capped("12345678", 8), "12345678");
        let value = "é".repeat(10);
        let cut = capped(&value, 9);
        assert!(cut.starts_with("éééé…["), "{cut}");
        assert!(cut.len() > 9);
    }

    #[test]
    fn non_text_commands_are_kept_verbatim() {
        let r = redactor();
        assert_eq!(
            redact_argv(&r, &argv(&["click", "@e1"])),
            vec![json!("click"), json!("@e1")]
        );
    }
}
