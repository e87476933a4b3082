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

    /// The call's identity for records made outside it while it runs.
    pub(crate) fn mark(&self) -> crate::server::sessions::CallMark {
        crate::server::sessions::CallMark {
            call_id: self.call_id.clone(),
            trace_id: self.trace_id.clone(),
            span_id: self.span_id.clone(),
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
#[path = "record_tests.rs"]
mod tests;
