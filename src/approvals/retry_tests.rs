use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use super::{Retries, Stale, Unanswered, Waiting};
use crate::approvals::Binding;

fn waiting() -> Waiting {
    Waiting {
        sha: "d1".into(),
        rule: "payments".into(),
        binding: Binding {
            url: Some("http://127.0.0.1/checkout".into()),
            element: Some(("button".into(), "Pay".into())),
            places: vec![[1, 2, 3, 4]],
        },
        asks: 1,
    }
}

const CALL: &[u8] = br#"{"argv":["click","@e5"],"session_id":"s1"}"#;
const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_state_resumes_the_call_it_was_sealed_for_once() {
    let retries = Retries::new().expect("a key");
    let state = retries
        .hold("a1", waiting(), (CALL, LONG), |_| {})
        .expect("sealed");
    let (id, held) = retries.take(&state, CALL).expect("resumed");
    assert_eq!((id.as_str(), held.sha.as_str()), ("a1", "d1"));
    assert_eq!(retries.take(&state, CALL).unwrap_err(), Stale::Used);
}

#[tokio::test]
async fn a_state_does_not_resume_changed_arguments_and_stays_waiting() {
    let retries = Retries::new().expect("a key");
    let state = retries
        .hold("a1", waiting(), (CALL, LONG), |_| {})
        .expect("sealed");
    let other = br#"{"argv":["click","@e6"],"session_id":"s1"}"#;
    assert_eq!(retries.take(&state, other).unwrap_err(), Stale::NotThisCall);
    assert!(
        retries.take(&state, CALL).is_ok(),
        "a refused replay used up the request"
    );
}

#[tokio::test]
async fn a_forged_or_another_servers_state_resumes_nothing() {
    let retries = Retries::new().expect("a key");
    let state = retries
        .hold("a1", waiting(), (CALL, LONG), |_| {})
        .expect("sealed");
    let restarted = Retries::new().expect("a key");
    assert_eq!(
        restarted.take(&state, CALL).unwrap_err(),
        Stale::NotThisCall
    );
    let mut forged = state.clone();
    forged.push('A');
    assert_eq!(retries.take(&forged, CALL).unwrap_err(), Stale::NotThisCall);
    assert_eq!(
        retries.take("rs2.x.y", CALL).unwrap_err(),
        Stale::NotThisCall
    );
}

/// How each held request ended, as its expiry was told.
type Endings = Arc<Mutex<Vec<Unanswered>>>;

/// A request held for 50 ms, and how it ended.
fn held_briefly() -> (Retries, String, Endings) {
    let retries = Retries::new().expect("a key");
    let ended = Endings::default();
    let seen = Arc::clone(&ended);
    let state = retries
        .hold(
            "a1",
            waiting(),
            (CALL, Duration::from_millis(50)),
            move |why| {
                seen.lock().expect("not poisoned").push(why);
            },
        )
        .expect("sealed");
    (retries, state, ended)
}

fn endings(ended: &Endings) -> Vec<Unanswered> {
    ended.lock().expect("not poisoned").clone()
}

#[tokio::test]
async fn an_unanswered_request_expires_and_says_so_once() {
    let (retries, state, ended) = held_briefly();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(endings(&ended), [Unanswered::WaitOver]);
    assert_eq!(retries.take(&state, CALL).unwrap_err(), Stale::Expired);
}

#[tokio::test]
async fn an_answered_request_does_not_expire() {
    let (retries, state, ended) = held_briefly();
    assert!(retries.take(&state, CALL).is_ok());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(endings(&ended), []);
}

#[tokio::test]
async fn a_request_still_waiting_when_the_server_stops_ends_once_as_stopped() {
    let (retries, state, ended) = held_briefly();
    retries.stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        endings(&ended),
        [Unanswered::ServerStopped],
        "its wait running out later says nothing more"
    );
    assert!(retries.take(&state, CALL).is_err());
}
