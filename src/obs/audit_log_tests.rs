use serde_json::json;

use super::*;

fn keys(event: &Value) -> Vec<String> {
    attributes(event).into_iter().map(|(k, _)| k).collect()
}

#[test]
fn a_records_fields_are_flat_attributes_in_the_shared_vocabulary() {
    let record = json!({
        "phase": "outcome", "session_id": "s1", "verdict": "allowed", "outcome": "error",
        "exit_code": 1, "argv": ["fill", "#pw", "[typed:len=3:mac=ab]"], "rule": null,
        "confinement": {"landlock": "enforced", "rlimits": {"core": 0}},
        "detail": {"pool": {"target": 1, "sizes": {"deep": 2}}},
    });
    let keys = keys(&record);
    for want in [
        "browser_shell.phase",
        "browser_shell.session_id",
        "browser_shell.verdict",
        "browser_shell.outcome",
        "browser_shell.exit_code",
        "browser_shell.subcommand",
        "browser_shell.argv",
        "browser_shell.confinement.landlock",
        "browser_shell.confinement.rlimits.core",
        "browser_shell.detail.pool.target",
        "browser_shell.detail.pool.sizes",
    ] {
        assert!(
            keys.iter().any(|k| k == want),
            "{want} missing from {keys:?}"
        );
    }
    assert!(
        !keys
            .iter()
            .any(|k| k.contains("audit.") || k.ends_with(".rule")),
        "{keys:?}"
    );
}

#[test]
fn a_refused_calls_first_token_is_no_subcommand_attribute() {
    let record = json!({"phase": "denied", "verdict": "denied", "rule": "subcommand.unknown",
                        "argv": ["anything-at-all"]});
    assert!(
        !keys(&record)
            .iter()
            .any(|k| k == "browser_shell.subcommand")
    );
    assert!(keys(&record).iter().any(|k| k == "browser_shell.rule"));
}

#[test]
fn a_body_says_what_happened_in_a_line() {
    let cases = [
        (
            json!({"phase": "intent", "session_id": "s1", "verdict": "allowed", "argv": ["open", "u"]}),
            "intent: s1 open runs",
        ),
        (
            json!({"phase": "outcome", "session_id": "s1", "verdict": "allowed", "outcome": "error",
                "exit_code": 1, "argv": ["fill"]}),
            "outcome: s1 fill error, exit code 1",
        ),
        (
            json!({"phase": "denied", "session_id": "s1", "verdict": "denied", "rule": "url.scheme",
                "argv": ["open"]}),
            "denied: s1 url.scheme",
        ),
        (
            json!({"phase": "lifecycle", "outcome": "started"}),
            "lifecycle: started",
        ),
    ];
    for (record, want) in cases {
        assert_eq!(body(&record), want);
    }
}

#[test]
fn what_the_policy_stopped_warns_and_what_failed_is_an_error() {
    for (record, want) in [
        (json!({"phase": "intent"}), "INFO"),
        (json!({"phase": "outcome", "outcome": "ok"}), "INFO"),
        (json!({"phase": "outcome", "outcome": "error"}), "ERROR"),
        (json!({"phase": "outcome", "outcome": "cancelled"}), "WARN"),
        (json!({"phase": "denied", "rule": "url.scheme"}), "WARN"),
        (
            json!({"phase": "outcome", "outcome": "navigation_blocked"}),
            "WARN",
        ),
        (json!({"phase": "outcome", "outcome": "timeout"}), "WARN"),
        (json!({"phase": "outcome", "outcome": "refused"}), "WARN"),
        (
            json!({"phase": "outcome", "outcome": "spawn_failed"}),
            "ERROR",
        ),
        (
            json!({"phase": "outcome", "outcome": "audit_unavailable"}),
            "ERROR",
        ),
        (
            json!({"phase": "lifecycle", "outcome": "retire_incomplete"}),
            "ERROR",
        ),
        (json!({"phase": "lifecycle", "outcome": "started"}), "INFO"),
    ] {
        assert_eq!(severity_of(&record).1, want, "{record}");
    }
}
