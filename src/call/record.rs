//! What the audit log says about a call: its identity across records, its
//! argv with secrets redacted, and the confinement it ran under.

use serde_json::{Value, json};

use super::context::CallContext;
use crate::{TOOL_NAME, obs::journal::new_call_id, session_id::SessionId};

/// Identity of one call across its audit records.
#[derive(Debug, Clone)]
pub(crate) struct CallRecord {
    call_id: String,
    request_id: Option<String>,
    client: Option<String>,
    trace_id: Option<String>,
    span_id: Option<String>,
}

impl CallRecord {
    pub(crate) fn new(
        ctx: &CallContext,
        trace_id: Option<String>,
        span_id: Option<String>,
    ) -> Self {
        Self {
            call_id: new_call_id(),
            request_id: ctx.request_id.clone(),
            client: ctx.client.clone(),
            trace_id,
            span_id,
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
        event
    }
}

/// The argv as the audit log stores it. Free text (what `fill`, `type`,
/// `select` put into a page) becomes its length and a keyed MAC, so a
/// password never reaches the log yet equal values can be correlated; URLs
/// (`open`, `wait --url`) lose userinfo and secret-looking query values.
pub(super) fn redact_argv(redactor: &audit::Redactor, argv: &[String]) -> Vec<Value> {
    let subcommand = argv.first().map(String::as_str);
    let secret_from = match subcommand {
        Some("fill" | "type" | "select" | "keyboard") => 2,
        _ => usize::MAX,
    };
    argv.iter()
        .enumerate()
        .map(|(i, arg)| {
            let after_url_flag = i > 0 && argv[i - 1] == "--url";
            if i >= secret_from {
                redactor.secret(arg)
            } else if (i == 1 && matches!(subcommand, Some("open" | "goto" | "navigate")))
                || after_url_flag
            {
                Value::String(redactor.url(arg))
            } else {
                Value::String(arg.clone())
            }
        })
        .collect()
}

/// The confinement applied to a spawn, as the audit log records it.
pub(super) fn confinement_record(report: &hardening::Report) -> Value {
    json!({
        "landlock_abi": report.landlock_abi,
        "landlock": report.landlock.to_string(),
        "seccomp": report.seccomp.to_string(),
        "capabilities": "cleared",
        "bounding_set_empty": report.bounding_set_dropped,
        "no_new_privs": true,
        "uid": report.uid,
        "degraded": report.is_degraded(),
        "memory_cpu": report.cgroup,
        "rlimits": report
            .rlimits
            .iter()
            .map(|l| (l.resource.proc_name().to_owned(), l.value))
            .collect::<std::collections::BTreeMap<String, u64>>(),
    })
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn non_text_commands_are_kept_verbatim() {
        let r = redactor();
        assert_eq!(
            redact_argv(&r, &argv(&["click", "@e1"])),
            vec![json!("click"), json!("@e1")]
        );
    }
}
