use serde_json::{Value, json};

use super::PageUrls;
use crate::chromium_ids::CdpSessionId;

fn read(id: u64, on: &str) -> Value {
    json!({"id": id, "method": "Runtime.evaluate", "sessionId": on,
           "params": {"awaitPromise": true, "expression": "location.href", "returnByValue": true}})
}

/// The URL the gate answers `read` with, if it answers.
fn answered(pages: &mut PageUrls, read: &Value) -> Option<String> {
    let answer: Value = serde_json::from_str(&pages.answer(read)?).ok()?;
    assert_eq!(answer["id"], read["id"], "{answer}");
    assert_eq!(answer["sessionId"], read["sessionId"], "{answer}");
    answer["result"]["result"]["value"]
        .as_str()
        .map(str::to_owned)
}

fn event(pages: &mut PageUrls, on: &str, method: &str, params: Value) {
    let message = json!({"method": method, "params": params, "sessionId": on});
    pages.event(&message, |_| Vec::new());
}

fn navigated(pages: &mut PageUrls, on: &str, frame: Value) {
    event(
        pages,
        on,
        "Page.frameNavigated",
        json!({"frame": frame, "type": "Navigation"}),
    );
}

/// A tab on CDP session "S1" whose top frame "F1" committed `url`.
fn at(url: &str) -> PageUrls {
    let mut pages = PageUrls::default();
    navigated(&mut pages, "S1", json!({"id": "F1", "url": url}));
    pages
}

#[test]
fn the_top_frames_committed_url_with_its_fragment_answers_the_href_read() {
    let mut pages = PageUrls::default();
    assert_eq!(
        answered(&mut pages, &read(1, "S1")),
        None,
        "nothing seen yet"
    );
    navigated(
        &mut pages,
        "S1",
        json!({"id": "F1", "url": "http://127.0.0.1:8000/a", "urlFragment": "#x"}),
    );
    assert_eq!(
        answered(&mut pages, &read(2, "S1")).as_deref(),
        Some("http://127.0.0.1:8000/a#x")
    );
    assert_eq!(
        answered(&mut pages, &read(3, "S2")),
        None,
        "another tab's session"
    );
}

#[test]
fn only_the_exact_href_read_is_answered() {
    let mut pages = at("http://127.0.0.1:8000/a");
    let mut other = read(1, "S1");
    other["params"]["expression"] = json!("document.title");
    assert_eq!(pages.answer(&other), None);
    let mut in_a_context = read(2, "S1");
    in_a_context["params"]["contextId"] = json!(7);
    assert_eq!(pages.answer(&in_a_context), None, "another world or frame");
    let mut not_awaited = read(4, "S1");
    not_awaited["params"]["awaitPromise"] = json!(false);
    assert_eq!(pages.answer(&not_awaited), None);
    let mut fewer = read(5, "S1");
    fewer["params"]
        .as_object_mut()
        .map(|m| m.remove("returnByValue"));
    assert_eq!(
        pages.answer(&fewer),
        None,
        "a remote object is not a string"
    );
    let mut no_session = read(3, "S1");
    no_session.as_object_mut().map(|m| m.remove("sessionId"));
    assert_eq!(pages.answer(&no_session), None);
}

#[test]
fn a_subframe_commit_leaves_the_tabs_url_as_it_was() {
    let mut pages = at("http://127.0.0.1:8000/a");
    navigated(
        &mut pages,
        "S1",
        json!({"id": "F2", "parentId": "F1", "url": "blob:x"}),
    );
    assert_eq!(
        answered(&mut pages, &read(1, "S1")).as_deref(),
        Some("http://127.0.0.1:8000/a")
    );
}

#[test]
fn a_same_document_navigation_of_the_top_frame_is_followed_and_a_frames_is_not() {
    let mut pages = at("http://127.0.0.1:8000/a");
    let within = |frame: &str, url: &str| json!({"frameId": frame, "url": url, "navigationType": "historyApi"});
    event(
        &mut pages,
        "S1",
        "Page.navigatedWithinDocument",
        within("F2", "http://127.0.0.1:8000/frame"),
    );
    assert_eq!(
        answered(&mut pages, &read(1, "S1")).as_deref(),
        Some("http://127.0.0.1:8000/a")
    );
    event(
        &mut pages,
        "S1",
        "Page.navigatedWithinDocument",
        within("F1", "http://127.0.0.1:8000/b#y"),
    );
    assert_eq!(
        answered(&mut pages, &read(2, "S1")).as_deref(),
        Some("http://127.0.0.1:8000/b#y")
    );
}

#[test]
fn whatever_could_change_the_url_unseen_makes_the_gate_ask_chromium() {
    let forgets: [(&str, Value); 5] = [
        (
            "Page.documentOpened",
            json!({"frame": {"id": "F1", "url": "http://127.0.0.1:8000/o"}}),
        ),
        ("Page.frameDetached", json!({"frameId": "F1"})),
        ("Inspector.targetCrashed", json!({})),
        ("Inspector.detached", json!({"reason": "replaced"})),
        ("Page.frameNavigated", json!({"frame": {"id": "F1"}})),
    ];
    for (method, params) in forgets {
        let mut pages = at("http://127.0.0.1:8000/a");
        event(&mut pages, "S1", method, params);
        assert_eq!(answered(&mut pages, &read(1, "S1")), None, "{method}");
    }
    let mut pages = at("http://127.0.0.1:8000/a");
    pages.event(
        &json!({"method": "Target.detachedFromTarget", "params": {"sessionId": "S1"}}),
        |_| Vec::new(),
    );
    assert_eq!(answered(&mut pages, &read(1, "S1")), None, "detached");
    let mut pages = at("http://127.0.0.1:8000/a");
    pages.sent(&json!({"id": 5, "method": "Page.disable", "sessionId": "S1"}));
    assert_eq!(
        answered(&mut pages, &read(1, "S1")),
        None,
        "no more Page events"
    );
}

#[test]
fn the_browser_naming_another_url_for_the_tab_makes_the_gate_ask_and_the_same_one_does_not() {
    let on_t1 = |target: &str| {
        if target == "T1" {
            vec![CdpSessionId::from_chromium("S1")]
        } else {
            Vec::new()
        }
    };
    let info = |url: &str| {
        json!({"method": "Target.targetInfoChanged",
                                  "params": {"targetInfo": {"targetId": "T1", "type": "page", "url": url}}})
    };
    let mut pages = at("http://127.0.0.1:8000/a");
    pages.event(&info("http://127.0.0.1:8000/a"), on_t1);
    assert_eq!(
        answered(&mut pages, &read(1, "S1")).as_deref(),
        Some("http://127.0.0.1:8000/a")
    );
    pages.event(&info("http://127.0.0.1:8000/pending"), on_t1);
    assert_eq!(answered(&mut pages, &read(2, "S1")), None);
    // The commit it announced brings it back.
    navigated(
        &mut pages,
        "S1",
        json!({"id": "F1", "url": "http://127.0.0.1:8000/pending"}),
    );
    assert_eq!(
        answered(&mut pages, &read(3, "S1")).as_deref(),
        Some("http://127.0.0.1:8000/pending")
    );
}

#[test]
fn while_the_tab_navigates_chromium_is_asked_until_the_commit() {
    for started in [
        "Page.frameRequestedNavigation",
        "Page.frameScheduledNavigation",
        "Page.frameStartedNavigating",
        "Page.frameStartedLoading",
    ] {
        let mut pages = at("http://127.0.0.1:8000/a");
        event(&mut pages, "S1", started, json!({"frameId": "F2"}));
        assert!(
            answered(&mut pages, &read(1, "S1")).is_some(),
            "{started}: a frame's navigation"
        );
        event(
            &mut pages,
            "S1",
            started,
            json!({"frameId": "F1", "url": "http://127.0.0.1:8000/slow"}),
        );
        assert_eq!(answered(&mut pages, &read(2, "S1")), None, "{started}");
        navigated(
            &mut pages,
            "S1",
            json!({"id": "F1", "url": "http://127.0.0.1:8000/slow"}),
        );
        assert_eq!(
            answered(&mut pages, &read(3, "S1")).as_deref(),
            Some("http://127.0.0.1:8000/slow"),
            "{started}"
        );
    }
    // One that never commits (a download) leaves it to Chromium until the next commit.
    let mut pages = at("http://127.0.0.1:8000/a");
    event(
        &mut pages,
        "S1",
        "Page.frameStartedLoading",
        json!({"frameId": "F1"}),
    );
    event(
        &mut pages,
        "S1",
        "Page.frameStoppedLoading",
        json!({"frameId": "F1"}),
    );
    assert_eq!(answered(&mut pages, &read(1, "S1")), None, "a download");
}

#[test]
fn the_read_after_a_screenshot_is_chromiums_and_the_one_after_that_the_gates() {
    let mut pages = at("http://127.0.0.1:8000/a");
    pages.sent(&json!({"id": 4, "method": "Page.captureScreenshot", "sessionId": "S1"}));
    assert_eq!(answered(&mut pages, &read(5, "S1")), None);
    assert_eq!(
        answered(&mut pages, &read(6, "S1")).as_deref(),
        Some("http://127.0.0.1:8000/a")
    );
}

#[test]
fn the_read_after_an_input_is_chromiums_even_if_a_commit_came_between() {
    for input in [
        "Input.dispatchMouseEvent",
        "Input.dispatchKeyEvent",
        "Input.insertText",
    ] {
        let mut pages = at("http://127.0.0.1:8000/a");
        pages.sent(&json!({"id": 4, "method": input, "sessionId": "S1"}));
        assert_eq!(answered(&mut pages, &read(5, "S1")), None, "{input}");
        assert!(answered(&mut pages, &read(6, "S1")).is_some(), "{input}");

        pages.sent(&json!({"id": 7, "method": input, "sessionId": "S1"}));
        navigated(
            &mut pages,
            "S1",
            json!({"id": "F1", "url": "http://127.0.0.1:8000/b"}),
        );
        assert_eq!(answered(&mut pages, &read(8, "S1")), None, "{input}");
        assert_eq!(
            answered(&mut pages, &read(9, "S1")).as_deref(),
            Some("http://127.0.0.1:8000/b"),
            "{input}"
        );
    }
}

#[test]
fn an_input_on_another_tab_leaves_this_ones_read_to_the_gate() {
    let mut pages = at("http://127.0.0.1:8000/a");
    pages.sent(&json!({"id": 4, "method": "Input.dispatchMouseEvent", "sessionId": "S2"}));
    assert!(answered(&mut pages, &read(5, "S1")).is_some());
}

#[test]
fn a_same_document_change_without_a_url_forgets_the_tab_and_a_frames_does_not() {
    let mut pages = at("http://127.0.0.1:8000/a");
    event(
        &mut pages,
        "S1",
        "Page.navigatedWithinDocument",
        json!({"frameId": "F2"}),
    );
    assert!(
        answered(&mut pages, &read(1, "S1")).is_some(),
        "another frame's"
    );
    event(
        &mut pages,
        "S1",
        "Page.navigatedWithinDocument",
        json!({"frameId": "F1"}),
    );
    assert_eq!(answered(&mut pages, &read(2, "S1")), None);
}
