//! Every kind of tampering a reviewer must catch is caught, and located.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

use std::path::{Path, PathBuf};

use audit::{
    Anchor, CheckpointKey, Event, Phase, SigningKey, Sink, checkpoint_path, verify, verify_with,
};

struct Log {
    _dir: tempfile::TempDir,
    path: PathBuf,
    key: SigningKey,
}

/// Ten records: five calls, intent + outcome each.
fn log() -> Log {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = SigningKey::load_or_create(&dir.path().join("audit.checkpoint-key")).unwrap();
    let sink = Sink::open(&path, Some(key.clone()), None).unwrap();
    for i in 0..5 {
        let mut intent = Event::new(Phase::Intent, format!("call-{i}"));
        intent.session_id = Some("s1".into());
        sink.append(intent).unwrap();
        let mut outcome = Event::new(Phase::Outcome, format!("call-{i}"));
        outcome.exit_code = Some(0);
        sink.append(outcome).unwrap();
    }
    Log {
        _dir: dir,
        path,
        key,
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write(path: &Path, lines: &[String]) {
    std::fs::write(
        path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
}

fn check(log: &Log) -> audit::Verification {
    verify(
        std::slice::from_ref(&log.path),
        Some((
            &checkpoint_path(&log.path),
            &CheckpointKey::Public(log.key.public()),
        )),
    )
    .unwrap()
}

#[test]
fn an_untouched_log_verifies() {
    let log = log();
    let v = check(&log);
    assert!(v.is_intact(), "{v:?}");
    assert_eq!(v.records, 10);
    assert!(v.dangling.is_empty());
    assert!(matches!(v.checkpoint, Some(Ok(_))));
}

#[test]
fn a_log_nothing_was_appended_to_is_intact_and_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    drop(Sink::open(&path, None, None).unwrap());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    let v = verify(std::slice::from_ref(&path), None).unwrap();
    assert!(
        v.is_intact() && v.torn.is_empty() && v.records == 0,
        "{v:?}"
    );
}

#[test]
fn a_log_emptied_after_the_fact_is_caught_by_the_checkpoint() {
    let log = log();
    write(&log.path, &[]);
    let v = check(&log);
    assert!(v.torn.is_empty(), "{v:?}");
    assert!(matches!(&v.checkpoint, Some(Err(_))), "{v:?}");
    assert!(!v.is_intact());
}

#[test]
fn an_edited_byte_is_a_hash_break_at_that_line() {
    let log = log();
    let mut l = lines(&log.path);
    l[3] = l[3].replacen("\"exit_code\":0", "\"exit_code\":1", 1);
    write(&log.path, &l);
    let b = check(&log).first_break.expect("edit must break the chain");
    assert_eq!((b.at.line, b.seq, b.check), (4, Some(4), "hash"), "{b}");
}

#[test]
fn a_deleted_middle_line_is_a_seq_break_at_the_next_one() {
    let log = log();
    let mut l = lines(&log.path);
    l.remove(4);
    write(&log.path, &l);
    let b = check(&log)
        .first_break
        .expect("deletion must break the chain");
    assert_eq!(
        (b.at.line, b.check, b.expected.as_str(), b.found.as_str()),
        (5, "seq", "5", "6"),
        "{b}"
    );
}

#[test]
fn two_reordered_lines_break_the_chain() {
    let log = log();
    let mut l = lines(&log.path);
    l.swap(2, 3);
    write(&log.path, &l);
    let b = check(&log)
        .first_break
        .expect("reordering must break the chain");
    assert_eq!(b.at.line, 3, "{b}");
}

#[test]
fn a_truncated_tail_is_caught_by_the_checkpoint() {
    let log = log();
    let l = lines(&log.path);
    write(&log.path, &l[..7]);
    let v = check(&log);
    assert!(
        v.first_break.is_none(),
        "the remaining chain is consistent: {v:?}"
    );
    let Some(Err(why)) = &v.checkpoint else {
        panic!("truncation not detected: {v:?}")
    };
    assert!(
        why.to_string().contains("ends at seq 7") && why.to_string().contains("seq 10"),
        "{why}"
    );
    assert!(!v.is_intact());
    // …which the chain alone cannot see.
    assert!(
        verify(std::slice::from_ref(&log.path), None)
            .unwrap()
            .is_intact()
    );
}

#[test]
fn a_forged_checkpoint_is_rejected() {
    let log = log();
    let cp = checkpoint_path(&log.path);
    let text = std::fs::read_to_string(&cp)
        .unwrap()
        .replace("\"seq\":10", "\"seq\":7");
    std::fs::write(&cp, text).unwrap();
    let Some(Err(why)) = check(&log).checkpoint else {
        panic!("forgery not detected")
    };
    assert!(
        why.to_string().contains("signature does not verify"),
        "{why}"
    );
}

/// A `/1` checkpoint (MAC'd under the audit key, as servers wrote before
/// signed checkpoints) is still checked, with that key and only with it.
#[test]
fn an_old_mac_checkpoint_is_checked_with_the_audit_key() {
    use audit::{CHECKPOINT_SCHEMA_V1, Checkpoint, Key, canonical_json};
    let log = log();
    let dir = log.path.parent().unwrap();
    let key = Key::load_or_create(&dir.join("audit.key")).unwrap();
    let current = Checkpoint::read(&checkpoint_path(&log.path)).unwrap();
    let fields = serde_json::json!({
        "schema": CHECKPOINT_SCHEMA_V1,
        "file": current.file,
        "seq": current.seq,
        "hash": current.hash,
        "time": current.time,
    });
    let mac = key.checkpoint_mac(canonical_json(&fields).as_bytes());
    let mut old = fields.clone();
    old["mac"] = mac.into();
    std::fs::write(checkpoint_path(&log.path), old.to_string()).unwrap();
    let with = |key: &CheckpointKey| {
        verify(
            std::slice::from_ref(&log.path),
            Some((&checkpoint_path(&log.path), key)),
        )
        .unwrap()
        .checkpoint
        .unwrap()
    };
    assert!(with(&CheckpointKey::Legacy(key.clone())).is_ok());
    let other = Key::load_or_create(&dir.join("other.key")).unwrap();
    assert!(with(&CheckpointKey::Legacy(other)).is_err());
    let Err(why) = with(&CheckpointKey::Public(log.key.public())) else {
        panic!("a MAC'd checkpoint is not vouched for by a public key")
    };
    assert!(why.to_string().contains("--key"), "{why}");
}

#[test]
fn an_intent_without_outcome_is_listed_as_dangling() {
    let log = log();
    let sink = Sink::open(&log.path, Some(log.key.clone()), None).unwrap();
    let mut intent = Event::new(Phase::Intent, "call-killed");
    intent.session_id = Some("s2".into());
    sink.append(intent).unwrap();
    let v = check(&log);
    assert!(v.is_intact(), "{v:?}");
    assert_eq!(v.dangling.len(), 1);
    assert_eq!(
        (v.dangling[0].call_id.as_str(), v.dangling[0].seq),
        ("call-killed", 11)
    );
}

#[test]
fn a_pool_warm_up_is_no_call_so_it_is_never_counted_as_one_without_outcome() {
    let log = log();
    let sink = Sink::open(&log.path, Some(log.key.clone()), None).unwrap();
    // Today's: a lifecycle record, synced before the act.
    let mut warming = Event::new(Phase::Lifecycle, "warm-1");
    warming.outcome = Some(audit::Outcome::Warming);
    let (sealed, _proof) = sink.append_synced(warming).unwrap();
    assert_eq!(sealed.record["phase"], "lifecycle");
    // An older server's: the same act written as an intent.
    let mut legacy = Event::new(Phase::Lifecycle, "warm-2");
    legacy.outcome = Some(audit::Outcome::Warming);
    sink.append_intent_synced(legacy).unwrap();
    let v = check(&log);
    assert!(v.is_intact(), "{v:?}");
    assert!(v.dangling.is_empty(), "{:?}", v.dangling);
}

#[test]
fn an_anchor_catches_a_cut_tail_behind_a_rolled_back_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = SigningKey::load_or_create(&dir.path().join("audit.checkpoint-key")).unwrap();
    let sink = Sink::open(&path, Some(key.clone()), None).unwrap();
    for i in 0..5 {
        sink.append(Event::new(Phase::Denied, format!("c{i}")))
            .unwrap();
    }
    sink.flush().unwrap();
    let old_checkpoint = std::fs::read(checkpoint_path(&path)).unwrap();
    let mut newest = None;
    for i in 5..10 {
        newest = Some(
            sink.append(Event::new(Phase::Denied, format!("c{i}")))
                .unwrap(),
        );
    }
    sink.flush().unwrap();
    drop(sink);
    let newest = newest.unwrap();
    // Cut the tail back to where the older, authentic checkpoint vouched, and put that back.
    write(&path, &lines(&path)[..5]);
    std::fs::write(checkpoint_path(&path), old_checkpoint).unwrap();
    let checkpoint = Some((checkpoint_path(&path), CheckpointKey::Public(key.public())));
    let pair = checkpoint.as_ref().map(|(p, k)| (p.as_path(), k));
    let fooled = verify(std::slice::from_ref(&path), pair).unwrap();
    assert!(
        fooled.is_intact(),
        "the rolled-back checkpoint vouches: {fooled:?}"
    );
    let anchor: Anchor = format!("{}:{}", newest.seq, newest.hash).parse().unwrap();
    let v = verify_with(std::slice::from_ref(&path), pair, &[anchor]).unwrap();
    assert!(!v.is_intact(), "{v:?}");
    let why = v.anchors[0].as_ref().unwrap_err();
    assert!(
        why.to_string().contains("ends at seq 5") && why.to_string().contains("seq 10"),
        "{why}"
    );
}

#[test]
fn an_anchor_that_the_log_holds_passes_and_a_rewritten_one_fails() {
    let log = log();
    let records: Vec<serde_json::Value> = lines(&log.path)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let anchor = |seq: usize, hash: &str| -> Anchor { format!("{seq}:{hash}").parse().unwrap() };
    let good = anchor(7, records[6]["hash"].as_str().unwrap());
    let wrong = anchor(7, &"0".repeat(64));
    let v = verify_with(std::slice::from_ref(&log.path), None, &[good, wrong]).unwrap();
    assert!(
        v.anchors[0].is_ok() && v.anchors[1].is_err(),
        "{:?}",
        v.anchors
    );
    assert!(!v.is_intact());
    assert!("7:zz".parse::<Anchor>().is_err());
    assert!("x:".parse::<Anchor>().is_err());
}
