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
        loading_stopped: None,
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
    let guard = |t: &[&str], enabled: bool| {
        let tokens = t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let subcommand = crate::call::Subcommand::of(&tokens).unwrap();
        Guard::for_command(subcommand, &tokens, enabled)
    };
    assert_eq!(
        guard(&["get", "url"], true),
        Guard::OwnResult { field: "url" }
    );
    assert_eq!(
        guard(&["open", "http://x/"], true),
        Guard::OwnResult { field: "url" }
    );
    assert_eq!(
        guard(&["snapshot", "-i"], true),
        Guard::OwnResult { field: "origin" }
    );
    assert_eq!(guard(&["get", "title"], true), Guard::Trailing);
    assert_eq!(guard(&["click", "@e1"], true), Guard::Trailing);
    assert_eq!(guard(&["close"], true), Guard::Off);
    assert_eq!(guard(&["click", "@e1"], false), Guard::Off);
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
    let unread = GuardVerdict::Unreadable {
        why: "after the command: agent-browser said \"no browser\"".into(),
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
fn a_command_stopped_early_says_what_was_stopped_with_it() {
    let stopped = |loading_stopped| {
        let raw = RawOutcome {
            loading_stopped,
            ..raw(Termination::TimedOut, "", "")
        };
        normalize("u", &raw, 1000, Guard::Off).stderr
    };
    assert!(
        stopped(Some(Ok(()))).contains("the session's daemon and the page's loading were stopped")
    );
    let failed = stopped(Some(Err(crate::runner::cdp::TabActError::NoAnswer(
        std::time::Duration::from_secs(2),
    ))));
    assert!(
        failed.contains("the page's loading could not be (no answer within 2s)"),
        "{failed}"
    );
    assert!(
        failed.contains("the next call may wait for the page"),
        "{failed}"
    );
    // Never given the command: it started nothing to stop.
    assert!(stopped(None).contains("stopped before it was given the command"));
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
