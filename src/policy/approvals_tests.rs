//! Approval rules as data: each criterion narrows a rule, doubt matches,
//! and a subcommand no rule names costs nothing.

use super::*;
use crate::policy::url_policy::UrlPolicy;

fn approvals(json: &str) -> Approvals {
    UrlPolicy::from_json(json).expect("valid").approvals
}

fn facts<'a>(
    subcommand: &'a str,
    element: Option<Element<'a>>,
    page: Option<&'a str>,
) -> Facts<'a> {
    Facts {
        subcommand,
        changes_page: subcommand != "get",
        acts_on_element: matches!(subcommand, "click" | "fill"),
        element,
        page_url: page,
        open_url: None,
        typed_secrets: &[],
    }
}

const PAY: &str = r#"{"approvals": {"rules": [{"name": "pay", "subcommands": ["click"],
    "element_roles": ["button"], "element_words": ["pay", "buy"]}]}}"#;

#[test]
fn a_button_named_like_pay_needs_a_yes_and_a_search_box_does_not() {
    let a = approvals(PAY);
    let pay = Element {
        role: "button",
        name: "Pay now",
    };
    let payment = Element {
        role: "Button",
        name: "Payment: 12 €",
    };
    let search = Element {
        role: "textbox",
        name: "Query",
    };
    let page = Some("http://127.0.0.1/form");
    assert_eq!(
        a.needed(&facts("click", Some(pay), page))
            .map(|r| r.name.as_str()),
        Some("pay")
    );
    assert!(a.needed(&facts("click", Some(payment), page)).is_some());
    assert!(a.needed(&facts("click", Some(search), page)).is_none());
    assert!(
        a.needed(&facts(
            "click",
            Some(Element {
                role: "button",
                name: "Display"
            }),
            page
        ))
        .is_none()
    );
}

#[test]
fn an_element_no_snapshot_named_needs_a_yes() {
    let a = approvals(PAY);
    assert!(a.needed(&facts("click", None, None)).is_some());
}

#[test]
fn a_subcommand_no_rule_names_is_not_looked_at() {
    let a = approvals(PAY);
    assert!(a.may_need("click", true));
    assert!(!a.may_need("fill", true));
    assert!(!a.may_need("get", false));
    assert!(!Approvals::default().may_need("click", true));
}

#[test]
fn a_rule_without_subcommands_covers_every_page_changing_one() {
    let a =
        approvals(r#"{"approvals": {"rules": [{"name": "shop", "page_hosts": [".shop.test"]}]}}"#);
    assert!(a.may_need("fill", true) && !a.may_need("get", false));
    assert!(
        a.needed(&facts("fill", None, Some("https://www.shop.test/cart")))
            .is_some()
    );
    assert!(
        a.needed(&facts("fill", None, Some("https://shop.example/cart")))
            .is_none()
    );
    assert!(
        a.needed(&facts("fill", None, None)).is_some(),
        "an unread page is doubt"
    );
}

#[test]
fn open_destinations_and_typed_secrets_are_criteria() {
    let a = approvals(
        r#"{"approvals": {"rules": [
            {"name": "bank", "subcommands": ["open"], "open_hosts": ["127.0.0.2"]},
            {"name": "card", "typed_secrets": ["card"]}]}}"#,
    );
    let open = |url| Facts {
        open_url: Some(url),
        ..facts("open", None, None)
    };
    assert!(a.needed(&open("http://127.0.0.2:8080/")).is_some());
    assert!(a.needed(&open("http://127.0.0.1:8080/")).is_none());
    let card = ["card".to_owned()];
    let other = ["pw".to_owned()];
    let typing = |names| Facts {
        typed_secrets: names,
        ..facts("fill", None, None)
    };
    assert_eq!(
        a.needed(&typing(&card)).map(|r| r.name.as_str()),
        Some("card")
    );
    assert!(a.needed(&typing(&other)).is_none());
}

#[test]
fn a_bad_section_is_refused_naming_where() {
    for (json, needle) in [
        (r#"{"approvals": {"wait_sec": 0}}"#, "approvals.wait_sec"),
        (
            r#"{"approvals": {"rules": [{"name": ""}]}}"#,
            "approvals.rules[0].name",
        ),
        (
            r#"{"approvals": {"rules": [{"name": "a"}, {"name": "a"}]}}"#,
            "approvals.rules[1].name",
        ),
        (
            r#"{"approvals": {"rules": [{"name": "a", "page_hosts": ["*.x"]}]}}"#,
            "approvals.rules[0].page_hosts",
        ),
        (
            r#"{"approvals": {"rules": [{"name": "a", "element_words": [" "]}]}}"#,
            "element_words",
        ),
        (
            r#"{"approvals": {"rules": [{"name": "a", "page_url_prefixes": ["nope"]}]}}"#,
            "page_url_prefixes",
        ),
        (
            r#"{"approvals": {"rules": [{"name": "a", "when": 1}]}}"#,
            "unknown field",
        ),
        (r#"{"approvals": []}"#, "approvals: must be a JSON object"),
        (r#"{"approvals": {"channels": []}}"#, "approvals.channels"),
        (
            r#"{"approvals": {"channels": ["email"]}}"#,
            "approvals.channels",
        ),
    ] {
        let err = UrlPolicy::from_json(json).expect_err(json).to_string();
        assert!(err.contains(needle), "{json}: {err}");
    }
}

#[test]
fn a_policy_without_approvals_keeps_its_digest_shape() {
    let policy = UrlPolicy::from_json("{}").expect("valid");
    let json = serde_json::to_value(&policy).expect("json");
    assert!(json.get("approvals").is_none(), "{json}");
    let with = UrlPolicy::from_json(PAY).expect("valid");
    assert_eq!(
        serde_json::to_value(&with).expect("json")["approvals"]["wait_sec"],
        120
    );
}

#[test]
fn explain_names_the_rules_an_open_meets() {
    let a = approvals(
        r#"{"approvals": {"rules": [
            {"name": "bank", "subcommands": ["open"], "open_hosts": [".bank.test"]},
            {"name": "from the shop", "subcommands": ["open"], "page_hosts": ["shop.test"]},
            {"name": "clicks", "subcommands": ["click"]}]}}"#,
    );
    assert_eq!(
        a.for_open("https://www.bank.test/"),
        [("bank", false), ("from the shop", true)]
    );
    assert_eq!(a.for_open("https://news.test/"), [("from the shop", true)]);
}
