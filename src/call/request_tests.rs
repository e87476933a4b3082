use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

fn check(v: Value) -> Result<Validated, Refusal> {
    validate(v.as_object())
}

#[test]
fn accepts_a_well_formed_request_and_stringifies_scalars() {
    let r =
        check(json!({"session_id": "u1", "argv": ["wait", 500, true], "timeout_sec": 5})).unwrap();
    assert_eq!(r.argv, vec!["wait", "500", "true"]);
    assert_eq!(r.timeout, Duration::from_secs(5));
    assert_eq!(r.session.as_str(), "u1");
}

#[test]
fn timeout_defaults_to_thirty_seconds() {
    let r = check(json!({"session_id": "u1", "argv": ["get", "url"]})).unwrap();
    assert_eq!(r.timeout, Duration::from_secs(30));
}

#[test]
fn rejects_each_contract_violation_with_its_rule() {
    let long = "x".repeat(MAX_ARG_BYTES + 1);
    let many: Vec<&str> = vec!["get"; MAX_ARGV_ITEMS + 1];
    let cases = [
        (json!(null), "request.invalid"),
        (json!({"argv": ["get"]}), "session_id.invalid"),
        (
            json!({"session_id": 7, "argv": ["get"]}),
            "session_id.invalid",
        ),
        (json!({"session_id": "u1"}), "argv.invalid"),
        (
            json!({"session_id": "u1", "argv": "open x"}),
            "argv.invalid",
        ),
        (json!({"session_id": "u1", "argv": []}), "argv.invalid"),
        (json!({"session_id": "u1", "argv": many}), "argv.invalid"),
        (json!({"session_id": "u1", "argv": [long]}), "argv.invalid"),
        (json!({"session_id": "u1", "argv": [null]}), "argv.invalid"),
        (
            json!({"session_id": "u1", "argv": [{"a": 1}]}),
            "argv.invalid",
        ),
        (
            json!({"session_id": "u1", "argv": ["a\u{0}b"]}),
            "argv.invalid",
        ),
        (
            json!({"session_id": "u1", "argv": ["a\u{1b}b"]}),
            "argv.invalid",
        ),
        (
            json!({"session_id": "u1", "argv": ["x"], "timeout_sec": 0}),
            "timeout.invalid",
        ),
        (
            json!({"session_id": "u1", "argv": ["x"], "timeout_sec": 121}),
            "timeout.invalid",
        ),
        (
            json!({"session_id": "u1", "argv": ["x"], "timeout_sec": 1.5}),
            "timeout.invalid",
        ),
        (
            json!({"session_id": "u1", "argv": ["x"], "timeout_sec": "5"}),
            "timeout.invalid",
        ),
        (
            json!({"session_id": "u1", "argv": ["x"], "cwd": "/"}),
            "request.invalid",
        ),
    ];
    for (input, rule) in cases {
        let err = check(input.clone()).unwrap_err();
        assert_eq!(err.rule, rule, "{input}");
    }
}

#[test]
fn error_messages_do_not_echo_the_rejected_value() {
    let secret = format!("hunter2{}", "x".repeat(MAX_ARG_BYTES));
    let err = check(json!({"session_id": "u1", "argv": [secret]})).unwrap_err();
    assert!(!err.message.contains("hunter2"));
}

#[test]
fn tab_and_newline_are_allowed_in_items() {
    assert!(check(json!({"session_id": "u1", "argv": ["type", "#q", "a\tb\nc"]})).is_ok());
}
