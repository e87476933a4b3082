use pretty_assertions::assert_eq;

use super::*;

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn tokens(items: &[&str]) -> Vec<String> {
    parse(&argv(items)).unwrap().tokens
}

fn rule(items: &[&str]) -> &'static str {
    parse(&argv(items)).unwrap_err().rule.id()
}

#[test]
fn allowed_subcommands_keep_their_arguments() {
    assert_eq!(tokens(&["click", "@e3"]), argv(&["click", "@e3"]));
    assert_eq!(
        tokens(&["fill", "#q", "hello"]),
        argv(&["fill", "#q", "hello"])
    );
    assert_eq!(tokens(&["key", "Enter"]), argv(&["press", "Enter"]));
    assert_eq!(
        tokens(&["snapshot", "--interactive", "-d", "3"]),
        argv(&["snapshot", "-i", "-d", "3"])
    );
    assert_eq!(
        tokens(&["wait", "--url", "**/submit**"]),
        argv(&["wait", "--url", "**/submit**"])
    );
    assert_eq!(tokens(&["wait", "500"]), argv(&["wait", "500"]));
    assert_eq!(
        tokens(&["get", "attr", "#a", "href"]),
        argv(&["get", "attr", "#a", "href"])
    );
    assert_eq!(
        tokens(&["scroll", "down", "500"]),
        argv(&["scroll", "down", "500"])
    );
    assert_eq!(
        tokens(&["select", "#c", "a", "b"]),
        argv(&["select", "#c", "a", "b"])
    );
}

#[test]
fn every_global_flag_name_is_accepted_as_fill_text() {
    for flag in GLOBAL_FLAGS {
        assert_eq!(tokens(&["fill", "#q", flag]), argv(&["fill", "#q", flag]));
        assert_eq!(tokens(&["type", "#q", flag]), argv(&["type", "#q", flag]));
    }
}

#[test]
fn every_global_flag_name_is_refused_outside_free_text() {
    for flag in GLOBAL_FLAGS {
        for case in [
            vec!["get", "url", flag],
            vec!["snapshot", flag],
            vec!["click", flag],
            vec![flag, "get", "url"],
            vec!["click", "#q", flag, "x"],
        ] {
            assert_eq!(rule(&case), "args.global_flag", "{case:?}");
        }
    }
    assert_eq!(rule(&["snapshot", "--cdp=9333"]), "args.global_flag");
}

#[test]
fn denied_subcommands_are_refused_with_a_reason() {
    for name in [
        "eval",
        "evaluate",
        "upload",
        "download",
        "route",
        "unroute",
        "network",
        "read",
        "connect",
        "inspect",
        "record",
        "state",
        "trace",
        "profiler",
        "auth",
        "plugin",
        "stream",
        "dashboard",
        "mcp",
        "chat",
        "install",
        "upgrade",
        "batch",
        "cookies",
        "storage",
        "set",
        "tab",
    ] {
        let err = parse(&argv(&[name])).unwrap_err();
        assert_eq!(err.rule, "subcommand.denied", "{name}");
        assert!(err.message.contains(name), "{}", err.message);
    }
    assert_eq!(rule(&["close", "--all"]), "subcommand.denied");
    assert_eq!(rule(&["get", "cdp-url"]), "subcommand.denied");
    assert_eq!(rule(&["wait", "--fn", "true"]), "subcommand.denied");
    assert_eq!(rule(&["frobnicate"]), "subcommand.unknown");
    assert_eq!(rule(&["pdf", "/tmp/x.pdf"]), "subcommand.unknown");
}

#[test]
fn wrong_argument_counts_get_the_usage_line() {
    for case in [
        vec!["click"],
        vec!["click", "a", "b"],
        vec!["fill", "#q"],
        vec!["open"],
        vec!["open", "a", "b"],
        vec!["back", "x"],
        vec!["get"],
        vec!["get", "text"],
        vec!["wait"],
        vec!["wait", "1", "2"],
        vec!["select", "#c"],
        vec!["snapshot", "-d"],
        vec!["snapshot", "-d", "x"],
        vec!["snapshot", "--delta"],
        vec!["scroll", "sideways", "1"],
        vec!["wait", "--load", "never"],
    ] {
        let err = parse(&argv(&case)).unwrap_err();
        assert_eq!(err.rule, "args.invalid", "{case:?}");
    }
}

#[test]
fn selectors_must_not_look_like_flags_or_span_lines() {
    assert_eq!(rule(&["click", "-x"]), "args.invalid");
    assert_eq!(rule(&["click", "a\nb"]), "args.invalid");
    assert_eq!(rule(&["click", " "]), "args.invalid");
}

#[test]
fn open_and_screenshot_leave_their_value_to_later_stages() {
    let open = parse(&argv(&["goto", "example.com"])).unwrap();
    assert_eq!(open.tokens, argv(&["open"]));
    assert_eq!(open.slot, Slot::Url("example.com".into()));

    let shot = parse(&argv(&["screenshot", "--full", "#main", "x.png"])).unwrap();
    assert_eq!(shot.tokens, argv(&["screenshot", "--full", "#main"]));
    assert_eq!(shot.slot, Slot::OutputFile(Some("x.png".into())));

    let bare = parse(&argv(&["screenshot"])).unwrap();
    assert_eq!(bare.slot, Slot::OutputFile(None));
}

#[test]
fn a_shell_line_in_one_item_is_told_to_split_into_items() {
    let err = parse(&argv(&["open http://127.0.0.1:8765/?token=t0k"])).unwrap_err();
    assert_eq!(err.rule, "subcommand.unknown");
    assert!(!err.message.contains("t0k"), "{}", err.message);
    assert!(
        err.message
            .contains(r#"split it into items, one per word: ["open", …]"#),
        "{}",
        err.message
    );
    // An unknown word alone gets the list, and no such advice.
    let alone = parse(&argv(&["frobnicate"])).unwrap_err();
    assert!(!alone.message.contains("split"), "{}", alone.message);
}
