use std::os::unix::fs::PermissionsExt;

use super::*;

fn secrets(json: &str) -> Secrets {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("secrets.json");
    std::fs::write(&path, json).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    Secrets::load(&path).expect("loads")
}

fn demo() -> Secrets {
    secrets(r#"{"pw": {"value": "hunter22", "hosts": ["127.0.0.1:8765", "Login.Example"]}}"#)
}

#[test]
fn a_placeholder_becomes_the_value_only_on_a_host_of_the_secret() {
    let s = demo();
    let names = vec!["pw".to_owned()];
    s.check_hosts(&names, "http://127.0.0.1:8765/login")
        .expect("host and port");
    s.check_hosts(&names, "https://login.example/")
        .expect("any port of a host listed without one");
    assert_eq!(
        s.fill_in("x{{secret:pw}}y{{secret:pw}}"),
        "xhunter22yhunter22"
    );
    for page in [
        "http://127.0.0.1:8766/",
        "http://127.0.0.2:8765/",
        "about:blank",
        "not a url",
    ] {
        let refusal = s.check_hosts(&names, page).expect_err(page);
        assert_eq!(refusal.rule, Rule::SecretHost, "{page}");
        assert!(!refusal.message.contains("hunter22"));
    }
    // A page without a host is named as a person would say it.
    for (page, named) in [
        ("about:blank", "the page is on about:blank;"),
        ("about:blank#x", "the page is on about:blank;"),
        ("data:text/html,<p>hi", "the page is on a data: URL;"),
    ] {
        let refusal = s.check_hosts(&names, page).expect_err(page);
        assert!(
            refusal.message.contains(named),
            "{page}: {}",
            refusal.message
        );
    }
}

#[test]
fn an_unknown_or_malformed_placeholder_is_refused_before_anything_runs() {
    let s = demo();
    assert_eq!(
        s.names_in("a {{secret:pw}} b {{secret:pw}}")
            .expect("known"),
        vec!["pw"]
    );
    assert!(
        s.names_in("plain {{text}} and {secret:x}")
            .expect("none")
            .is_empty()
    );
    for text in [
        "{{secret:nope}}",
        "{{secret:pw",
        "{{secret:p w}}",
        "{{secret:}}",
    ] {
        let refusal = s.names_in(text).expect_err(text);
        assert_eq!(refusal.rule, Rule::SecretUnknown, "{text}");
    }
}

#[test]
fn scrubbing_replaces_every_value_with_its_placeholder() {
    let s = demo();
    assert_eq!(
        s.scrub(r#"{"value":"hunter22","again":"xhunter22x"}"#),
        r#"{"value":"{{secret:pw}}","again":"x{{secret:pw}}x"}"#
    );
    assert!(matches!(s.scrub("nothing here"), Cow::Borrowed(_)));
}

#[test]
fn a_value_with_quotes_and_spaces_is_scrubbed_from_decoded_strings_and_urls() {
    let s = secrets(r#"{"pw": {"value": "pa\"ss w\\0rd", "hosts": ["127.0.0.1"]}}"#);
    let mut data = serde_json::json!({
        "value": "pa\"ss w\\0rd",
        "origin": "http://127.0.0.1/s?pw=pa%22ss+w%5C0rd",
        "refs": {"e1": {"name": "xpa\"ss w\\0rdx"}},
    });
    s.scrub_value(&mut data);
    assert_eq!(
        data,
        serde_json::json!({
            "value": "{{secret:pw}}",
            "origin": "http://127.0.0.1/s?pw={{secret:pw}}",
            "refs": {"e1": {"name": "x{{secret:pw}}x"}},
        })
    );
}

#[test]
fn a_file_others_can_read_or_with_a_bad_entry_does_not_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("secrets.json");
    std::fs::write(
        &path,
        r#"{"pw": {"value": "hunter22", "hosts": ["a.test"]}}"#,
    )
    .expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let e = Secrets::load(&path).expect_err("0644");
    assert!(e.to_string().contains("chmod 600"), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    for bad in [
        r#"{"pw": {"value": "abc", "hosts": ["a.test"]}}"#,
        r#"{"pw": {"value": "hunter22", "hosts": []}}"#,
        r#"{"1pw": {"value": "hunter22", "hosts": ["a.test"]}}"#,
        r#"{"pw": {"value": "hunter22", "hosts": ["http://a.test/"]}}"#,
        r#"{"pw": {"value": "hunter22", "hosts": ["a.test"], "extra": 1}}"#,
    ] {
        std::fs::write(&path, bad).expect("write");
        assert!(Secrets::load(&path).is_err(), "{bad}");
    }
}

#[test]
fn debug_output_names_secrets_but_never_shows_a_value() {
    let shown = format!("{:?}", demo());
    assert!(
        shown.contains("pw") && !shown.contains("hunter22"),
        "{shown}"
    );
}

#[test]
fn an_unknown_secret_names_the_flag_that_configures_secrets() {
    let none = Secrets::default()
        .names_in("{{secret:pw}}")
        .expect_err("no secrets");
    assert_eq!(none.rule, Rule::SecretUnknown);
    assert!(none.message.contains("--secrets"), "{}", none.message);
    let other = demo().names_in("{{secret:bank}}").expect_err("not known");
    assert!(other.message.contains("known: pw"), "{}", other.message);
    assert!(other.message.contains("--secrets"), "{}", other.message);
}

#[test]
fn a_cut_a_field_kept_is_scrubbed_from_then_on_and_a_short_one_is_not_learned() {
    let s = secrets(r#"{"long": {"value": "k3y-0f-tw3nty-ch4rs!", "hosts": ["127.0.0.1"]}}"#);
    assert_eq!(
        s.scrub("got k3y-0f-tw3"),
        "got k3y-0f-tw3",
        "not known before"
    );
    // The whole value in the field: nothing was cut.
    assert!(!s.learn_cut("long", "k3y-0f-tw3nty-ch4rs!"));
    assert!(s.learn_cut("long", "k3y-0f-tw3"));
    assert_eq!(
        s.scrub("got k3y-0f-tw3 and k3y-0f-tw3nty-ch4rs!"),
        "got {{secret:long}} and {{secret:long}}"
    );
    // Another field, another cut; the same one is not learned twice.
    assert!(s.learn_cut("long", "me: k3y-0f-tw3nt"));
    assert!(!s.learn_cut("long", "k3y-0f-tw3"));
    assert_eq!(s.scrub("k3y-0f-tw3nt"), "{{secret:long}}");
    // Three characters are not learned: they would mask ordinary text.
    assert!(!s.learn_cut("long", "k3y"));
    assert_eq!(s.scrub("k3y"), "k3y");
    // A reload keeps what was learned of an unchanged value.
    let reloaded =
        secrets(r#"{"long": {"value": "k3y-0f-tw3nty-ch4rs!", "hosts": ["127.0.0.1"]}}"#);
    reloaded.keep_cuts_of(&s);
    assert_eq!(reloaded.scrub("k3y-0f-tw3"), "{{secret:long}}");
}
