//! A record keeps neither a secret nor typed text, whatever URL, reason or
//! detail carries them; everything else in it stays as it was.

use std::os::unix::fs::PermissionsExt;

use super::*;

const SECRET: &str = "correct horse battery";

fn shield(dir: &std::path::Path) -> Shield {
    let secrets = dir.join("secrets.json");
    std::fs::write(
        &secrets,
        format!(r#"{{"pw": {{"value": "{SECRET}", "hosts": ["127.0.0.1"]}}}}"#),
    )
    .expect("write");
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(dir.join("policy.json"), "{}").expect("write");
    let source = rules::Source {
        policy_file: dir.join("policy.json"),
        secrets_file: Some(secrets),
        protected_ports: vec![],
        extra_secret_params: vec![],
        key: audit::Key::load_or_create(&dir.join("key")).expect("key"),
        subcommand_known: |_| true,
    };
    Shield::new(Arc::new(rules::Current::load(source).expect("rules")))
}

fn outcome(page_url: &str, reason: &str) -> audit::Event {
    let mut event = audit::Event::new(audit::Phase::Outcome, "c".to_owned());
    event.page_url = Some(page_url.to_owned());
    event.reason = Some(reason.to_owned());
    event.detail = Some(serde_json::json!({"url": page_url}));
    event
}

#[test]
fn a_secret_in_a_page_url_becomes_its_placeholder_in_every_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shield = shield(dir.path());
    let url = "http://127.0.0.1:8765/s?pw=correct+horse+battery&q=1";
    let mut event = outcome(url, &format!("the page navigated to {url}: refused"));
    shield.apply(&mut event);
    let want = "http://127.0.0.1:8765/s?pw={{secret:pw}}&q=1";
    assert_eq!(event.page_url.as_deref(), Some(want));
    assert_eq!(
        event.reason.as_deref(),
        Some(format!("the page navigated to {want}: refused").as_str())
    );
    assert_eq!(event.detail, Some(serde_json::json!({"url": want})));
}

#[test]
fn typed_text_in_a_url_becomes_the_intents_marker_and_other_values_stay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shield = shield(dir.path());
    let typed = "my search, über";
    shield.remember_typed(typed);
    shield.remember_typed("ab");
    let mac = shield.rules.get().redactor.secret(typed);
    let marker = format!("[typed:len=15:mac={}]", mac["mac"].as_str().expect("mac"));
    for (url, want) in [
        (
            "http://h/s?q=my+search%2C+%C3%BCber&page=2",
            format!("http://h/s?q={marker}&page=2"),
        ),
        (
            "http://h/s?x=1&q=pre-my%20search,%20%FCber-post#frag",
            format!("http://h/s?x=1&q={marker}#frag"),
        ),
        (
            "http://h/s?q=ab&r=abc",
            "http://h/s?q=[typed:len=2:mac=".to_owned(),
        ),
    ] {
        let mut event = outcome(url, "r");
        shield.apply(&mut event);
        let got = event.page_url.expect("page_url");
        assert!(got.starts_with(&want), "{url} -> {got}");
        assert!(!got.contains("search") && !got.contains("q=ab&"), "{got}");
    }
    // A character windows-1252 cannot hold is sent as a reference, percent-encoded.
    shield.remember_typed("日本 search");
    let mut event = outcome("http://h/s?q=%26%2326085%3B%26%2326412%3B+search&p=1", "r");
    shield.apply(&mut event);
    let got = event.page_url.expect("page_url");
    assert!(
        got.starts_with("http://h/s?q=[typed:len=9:mac=") && got.ends_with("]&p=1"),
        "{got}"
    );
    let mut untouched = outcome("http://h/s?page=2&r=abc", "plain reason");
    shield.apply(&mut untouched);
    assert_eq!(
        untouched.page_url.as_deref(),
        Some("http://h/s?page=2&r=abc")
    );
    assert_eq!(untouched.reason.as_deref(), Some("plain reason"));
}

#[test]
fn the_typed_memory_is_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shield = shield(dir.path());
    for i in 0..REMEMBERED + 10 {
        shield.remember_typed(&format!("text number {i}"));
    }
    assert_eq!(shield.typed.lock().expect("lock").len(), REMEMBERED);
}

/// A page can name any host it likes: a refused request's destination is
/// shielded like its reason.
#[test]
fn a_secret_in_a_refused_requests_destination_becomes_its_placeholder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shield = shield(dir.path());
    let mut event = audit::Event::new(audit::Phase::Denied, "c".to_owned());
    event.destination = Some(serde_json::json!({"hostname": SECRET, "port": 80}));
    shield.apply(&mut event);
    let kept = serde_json::to_string(&event.destination).expect("json");
    assert!(!kept.contains(SECRET), "{kept}");
    assert!(
        kept.contains("{{secret:pw}}") && kept.contains("80"),
        "{kept}"
    );
}

#[test]
fn typed_text_in_an_evidence_records_page_text_is_masked_wherever_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shield = shield(dir.path());
    shield.remember_typed("hello world");
    let mut event = audit::Event::new(audit::Phase::Evidence, "c".to_owned());
    event.evidence = Some(serde_json::json!({
        "after": {"url": "http://h/s?q=hello+world", "title": "Results for HELLO   World"},
        "element": {"ref": "e1", "role": "link", "name": "hello\nworld (2)"},
        "before": {"url": "http://h/form", "title": "Form"},
    }));
    shield.apply(&mut event);
    let text = serde_json::to_string(&event.evidence).expect("json");
    assert!(!text.to_lowercase().contains("hello"), "{text}");
    assert_eq!(
        event.evidence.as_ref().expect("kept")["before"]["title"],
        "Form"
    );
    assert!(
        event.evidence.as_ref().expect("kept")["after"]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("Results for [typed:len=11:mac=")),
        "{text}"
    );
}

#[test]
fn what_an_approval_showed_keeps_no_typed_text_and_no_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shield = shield(dir.path());
    shield.remember_typed("hello world");
    let mut event = audit::Event::new(audit::Phase::Approval, "c".to_owned());
    event.approval = Some(serde_json::json!({
        "id": "a1",
        "shown": {
            "page": {"url": "http://h/s?q=hello+world", "title": "Results for Hello World"},
            "element": {"role": "button", "name": format!("Pay with {SECRET}")},
        },
    }));
    shield.apply(&mut event);
    let text = serde_json::to_string(&event.approval).expect("json");
    assert!(
        !text.to_lowercase().contains("hello") && !text.contains(SECRET),
        "{text}"
    );
    assert_eq!(event.approval.as_ref().expect("kept")["id"], "a1");
}
