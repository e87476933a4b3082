//! The relay's screening of Chromium's messages, without a socket: each
//! test feeds one message to a connection's state and reads what the
//! daemon would get and what the connection now knows.

use std::cell::Cell;

use serde_json::{Value, json};

use super::{Screened, screen};
use crate::chromium_ids::TargetId;
use crate::{
    gate::{
        connection::{Awaited, Connection},
        contexts::ContextId,
    },
    sync::lock,
};

const OWN: &str = "CTX-OWN";
const OTHER: &str = "CTX-OTHER";

fn daemon() -> crate::session_id::DaemonName {
    crate::session_id::DaemonName::checked("s1").unwrap()
}

fn own() -> Option<ContextId> {
    Some(ContextId::from_chromium(OWN))
}

fn info(target: &str, context: &str) -> Value {
    json!({"targetId": target, "type": "page", "url": "about:blank", "browserContextId": context})
}

fn screened(conn: &Connection, message: &Value) -> Screened {
    screen(&message.to_string(), conn, own)
}

fn kept(screened: &Screened) -> &'static str {
    match screened {
        Screened::Unchanged => "unchanged",
        Screened::Rewritten(_) => "rewritten",
        Screened::Detached(_) => "detached",
        Screened::Dropped => "dropped",
    }
}

#[test]
fn a_message_that_names_no_target_passes_without_asking_whose_context_it_is() {
    let conn = Connection::new(daemon());
    let asked = Cell::new(false);
    let message = json!({"method": "Page.loadEventFired", "params": {"timestamp": 1.0}});
    let out = screen(&message.to_string(), &conn, || {
        asked.set(true);
        own()
    });
    assert_eq!(kept(&out), "unchanged");
    assert!(!asked.get(), "the cheap path looked the context up");
}

#[test]
fn a_target_list_keeps_only_the_sessions_own_targets_and_shows_them() {
    let conn = Connection::new(daemon());
    lock(&conn.awaited).insert(7, Awaited::TargetList);
    let answer =
        json!({"id": 7, "result": {"targetInfos": [info("T-OWN", OWN), info("T-OTHER", OTHER)]}});
    let Screened::Rewritten(list) = screened(&conn, &answer) else {
        panic!("a target list must be rewritten");
    };
    let ids: Vec<&str> = list["result"]["targetInfos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["targetId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["T-OWN"]);
    assert!(lock(&conn.shown).contains("T-OWN"));
    assert!(!lock(&conn.shown).contains("T-OTHER"));
    assert!(lock(&conn.awaited).is_empty(), "the answer is awaited once");
}

#[test]
fn a_session_whose_context_is_not_known_is_shown_no_target() {
    let conn = Connection::new(daemon());
    lock(&conn.awaited).insert(1, Awaited::TargetList);
    let answer = json!({"id": 1, "result": {"targetInfos": [info("T-OWN", OWN)]}});
    let Screened::Rewritten(list) = screen(&answer.to_string(), &conn, || None) else {
        panic!("a target list must be rewritten");
    };
    assert_eq!(list["result"]["targetInfos"], json!([]));
    // A target that names no context is no session's, even one without a context.
    let unnamed =
        json!({"method": "Target.targetCreated", "params": {"targetInfo": {"targetId": "T"}}});
    assert_eq!(
        kept(&screen(&unnamed.to_string(), &conn, || None)),
        "dropped"
    );
}

#[test]
fn a_target_created_in_another_context_is_dropped_and_one_in_its_own_is_shown() {
    let conn = Connection::new(daemon());
    let created = |i: Value| json!({"method": "Target.targetCreated", "params": {"targetInfo": i}});
    assert_eq!(
        kept(&screened(&conn, &created(info("T-OTHER", OTHER)))),
        "dropped"
    );
    assert_eq!(
        kept(&screened(&conn, &created(info("T-OWN", OWN)))),
        "unchanged"
    );
    assert_eq!(
        lock(&conn.shown).iter().cloned().collect::<Vec<_>>(),
        ["T-OWN"]
    );
}

#[test]
fn a_target_destroyed_is_passed_only_if_it_was_shown_and_then_forgotten() {
    let conn = Connection::new(daemon());
    lock(&conn.shown).insert(TargetId::from_chromium("T-OWN"));
    let destroyed =
        |t: &str| json!({"method": "Target.targetDestroyed", "params": {"targetId": t}});
    assert_eq!(kept(&screened(&conn, &destroyed("T-OTHER"))), "dropped");
    assert_eq!(kept(&screened(&conn, &destroyed("T-OWN"))), "unchanged");
    assert!(lock(&conn.shown).is_empty());
    // The same target again is no longer this connection's to hear about.
    assert_eq!(kept(&screened(&conn, &destroyed("T-OWN"))), "dropped");
}

#[test]
fn an_auto_attach_to_another_sessions_tab_is_dropped_and_its_cdp_session_hidden() {
    let conn = Connection::new(daemon());
    let attached = json!({"method": "Target.attachedToTarget",
        "params": {"sessionId": "CDP-1", "targetInfo": info("T-OTHER", OTHER), "waitingForDebugger": false}});
    assert_eq!(kept(&screened(&conn, &attached)), "dropped");
    assert!(lock(&conn.hidden).contains("CDP-1"));
    assert!(
        lock(&conn.attached).is_empty(),
        "a hidden CDP session is never a known one"
    );
}

#[test]
fn an_attach_in_its_own_context_maps_the_cdp_session_to_its_target() {
    let conn = Connection::new(daemon());
    let attached = json!({"method": "Target.attachedToTarget",
        "params": {"sessionId": "CDP-1", "targetInfo": info("T-OWN", OWN), "waitingForDebugger": false}});
    assert_eq!(kept(&screened(&conn, &attached)), "unchanged");
    let known = lock(&conn.attached).get("CDP-1").cloned().unwrap();
    assert_eq!((&*known.target_id, known.kind.as_str()), ("T-OWN", "page"));
}

#[test]
fn a_detach_owes_an_answer_for_each_command_left_on_its_cdp_session() {
    let conn = Connection::new(daemon());
    let attached = json!({"method": "Target.attachedToTarget",
        "params": {"sessionId": "CDP-1", "targetInfo": info("T-OWN", OWN), "waitingForDebugger": false}});
    screened(&conn, &attached);
    conn.sent(&json!({"id": 3, "sessionId": "CDP-1", "method": "Runtime.evaluate"}));
    conn.sent(&json!({"id": 4, "sessionId": "CDP-2", "method": "Runtime.evaluate"}));
    let detached = json!({"method": "Target.detachedFromTarget", "params": {"sessionId": "CDP-1"}});
    let Screened::Detached(owed) = screened(&conn, &detached) else {
        panic!("a detach must say which answers are owed");
    };
    let ids: Vec<Value> = owed
        .iter()
        .map(|a| serde_json::from_str::<Value>(a).unwrap()["id"].clone())
        .collect();
    assert_eq!(
        ids,
        [json!(3)],
        "only the commands on the CDP session that ended"
    );
    assert!(lock(&conn.attached).is_empty());
    assert!(lock(&conn.in_flight).has_ended("CDP-1"));
}

#[test]
fn the_answer_to_a_new_tab_shows_the_tab_it_opened() {
    let conn = Connection::new(daemon());
    lock(&conn.awaited).insert(9, Awaited::NewTab);
    let answer = json!({"id": 9, "result": {"targetId": "T-NEW"}});
    assert_eq!(kept(&screened(&conn, &answer)), "unchanged");
    assert!(lock(&conn.shown).contains("T-NEW"));
    // An answer nobody awaited shows nothing.
    let stray = json!({"id": 10, "result": {"targetId": "T-STRAY"}});
    assert_eq!(kept(&screened(&conn, &stray)), "unchanged");
    assert!(!lock(&conn.shown).contains("T-STRAY"));
}

#[test]
fn the_browser_version_is_answered_by_the_gate_once_chromium_has_answered_it() {
    let conn = Connection::new(daemon());
    let probe = |id: u64| json!({"id": id, "method": "Browser.getVersion"});
    assert_eq!(
        conn.version_answer(&probe(1)),
        None,
        "nothing to answer with yet"
    );
    lock(&conn.awaited).insert(1, Awaited::Version);
    let version = json!({"product": "Chrome/1", "revision": "@r"});
    let answer = json!({"id": 1, "result": version});
    assert_eq!(kept(&screened(&conn, &answer)), "unchanged");
    let own: Value = conn
        .version_answer(&probe(42))
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    assert_eq!(own, json!({"id": 42, "result": version}));
    // On a tab's CDP session it is not the browser's probe: it goes on.
    let on_tab = json!({"id": 43, "method": "Browser.getVersion", "sessionId": "CDP-1"});
    assert_eq!(conn.version_answer(&on_tab), None);
}

#[test]
fn an_error_to_the_version_probe_is_not_kept_as_the_answer() {
    let conn = Connection::new(daemon());
    lock(&conn.awaited).insert(1, Awaited::Version);
    let error = json!({"id": 1, "error": {"code": -32000, "message": "busy"}});
    assert_eq!(kept(&screened(&conn, &error)), "unchanged");
    let probe = json!({"id": 2, "method": "Browser.getVersion"});
    assert_eq!(conn.version_answer(&probe), None);
}
