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
