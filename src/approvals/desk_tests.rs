//! The desk says yes only to the request and the content it was asked
//! about, never replaces an answer, and forgets what a gone server left.

use super::*;

fn request(id: &str, sha: &str) -> Value {
    json!({"id": id, "shown_sha256": sha, "server_pid": std::process::id()})
}

async fn answered(desk: &Desk, id: &str, sha: &str) -> Answer {
    desk.answer(
        id,
        sha,
        Duration::from_millis(300),
        &CancellationToken::new(),
    )
    .await
}

#[tokio::test]
async fn an_approval_of_the_shown_request_is_a_yes_naming_the_file_owner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = Desk::open(&dir.path().join("audit.jsonl")).expect("desk");
    let asked = request("a1", "d1");
    desk.post("a1", &asked).expect("post");
    let listed = requests_in(&dir_of(&dir.path().join("audit.jsonl")));
    assert_eq!(listed.len(), 1);
    write_answer(&desk.dir, &listed[0].1, true, "ops", None).expect("answer");
    let Answer::Yes { by } = answered(&desk, "a1", "d1").await else {
        panic!("not a yes");
    };
    assert_eq!(by["uid"], u64::from(rustix::process::getuid().as_raw()));
    assert_eq!(by["user"], "ops");
    assert!(
        requests_in(&desk.dir).is_empty(),
        "the request stays on the desk"
    );
}

#[tokio::test]
async fn an_answer_for_other_content_is_a_no() {
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = Desk::open(&dir.path().join("audit.jsonl")).expect("desk");
    desk.post("a1", &request("a1", "d1")).expect("post");
    write_answer(&desk.dir, &request("a1", "other"), true, "ops", None).expect("answer");
    assert!(matches!(
        answered(&desk, "a1", "d1").await,
        Answer::No { .. }
    ));
}

#[tokio::test]
async fn a_denial_carries_the_operators_words_and_no_answer_expires() {
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = Desk::open(&dir.path().join("audit.jsonl")).expect("desk");
    desk.post("a1", &request("a1", "d1")).expect("post");
    write_answer(
        &desk.dir,
        &request("a1", "d1"),
        false,
        "ops",
        Some("not today"),
    )
    .expect("answer");
    let Answer::No { why, .. } = answered(&desk, "a1", "d1").await else {
        panic!("not a no");
    };
    assert!(why.contains("not today"), "{why}");
    desk.post("a2", &request("a2", "d2")).expect("post");
    assert_eq!(answered(&desk, "a2", "d2").await, Answer::None);
}

#[test]
fn an_answer_is_never_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let asked = request("a1", "d1");
    write_answer(dir.path(), &asked, false, "ops", None).expect("first");
    assert!(write_answer(dir.path(), &asked, true, "ops", None).is_err());
}

#[test]
fn a_new_server_drops_what_a_gone_one_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("audit.jsonl");
    let desk = Desk::open(&log).expect("desk");
    let mut stale = request("old", "d");
    stale["server_pid"] = json!(u32::MAX - 1);
    desk.post("old", &stale).expect("post");
    desk.post("live", &request("live", "d")).expect("post");
    let mode = fs::metadata(dir_of(&log)).expect("dir").mode() & 0o777;
    assert_eq!(mode, 0o700);
    Desk::open(&log).expect("again");
    let left: Vec<String> = requests_in(&dir_of(&log))
        .into_iter()
        .map(|(_, r)| r["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(left, ["live"]);
}
