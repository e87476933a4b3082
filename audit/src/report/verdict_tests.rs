//! The verdict at the top of a report, on real logs: intact, broken at
//! seq N, truncated, intents without outcome, a missing checkpoint.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;
use crate::{CheckpointKey, Event, Outcome, Phase, SigningKey, Sink, Verdict, verify_with};

/// A real log of `n` calls (intent and outcome), beside its key; flushed
/// so that its checkpoint vouches for every record.
fn real_log(n: usize) -> (tempfile::TempDir, PathBuf, SigningKey) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = SigningKey::load_or_create(&dir.path().join("audit.jsonl.checkpoint-key")).unwrap();
    let sink = Sink::open(&path, Some(key.clone()), None).unwrap();
    for i in 0..n {
        let mut intent = Event::new(Phase::Intent, format!("c{i}"));
        intent.session_id = Some("s1".into());
        intent.verdict = Some(Verdict::Allowed);
        intent.argv = Some(vec![json!("get"), json!("url")]);
        sink.append(intent).unwrap();
        let mut outcome = Event::new(Phase::Outcome, format!("c{i}"));
        outcome.session_id = Some("s1".into());
        outcome.outcome = Some(Outcome::Ok);
        outcome.exit_code = Some(0);
        sink.append(outcome).unwrap();
    }
    sink.flush().unwrap();
    (dir, path, key)
}

fn judged(path: &std::path::Path, key: &SigningKey) -> (Integrity, Vec<Value>) {
    let checkpoint = crate::checkpoint_path(path);
    let public = CheckpointKey::Public(key.public());
    let v = verify_with(&[path.to_path_buf()], Some((&checkpoint, &public)), &[]).unwrap();
    let evidence = Evidence {
        files: vec![path.to_path_buf()],
        checkpoint: Some(checkpoint),
        key: true,
        ..Evidence::default()
    };
    (assess(&v, &evidence), load(&[path.to_path_buf()]).unwrap())
}

#[test]
fn an_intact_log_says_intact_at_the_top() {
    let (_dir, path, key) = real_log(3);
    let (integrity, records) = judged(&path, &key);
    assert!(integrity.intact, "{integrity:?}");
    assert_eq!(integrity.headline(), "INTACT");
    let mut report = build(&records, &Filter::default());
    report.integrity = Some(integrity);
    assert!(report.to_table().starts_with("verification: INTACT\n"));
    let html = report.to_html();
    assert!(html.contains("class=\"banner ok\"") && html.contains("✔ INTACT<"));
    assert!(!html.contains("UNVERIFIED</span>"));
}

#[test]
fn an_edited_record_is_broken_at_its_seq_and_every_row_from_it_is_unverified() {
    let (_dir, path, key) = real_log(3);
    let text = std::fs::read_to_string(&path).unwrap();
    let tampered: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 2 {
                l.replace("\"get\"", "\"gxt\"")
            } else {
                l.to_owned()
            }
        })
        .collect();
    std::fs::write(&path, tampered.join("\n") + "\n").unwrap();
    let (integrity, records) = judged(&path, &key);
    assert!(!integrity.intact);
    assert_eq!(integrity.broken_at_seq, Some(3));
    assert!(
        integrity
            .headline()
            .starts_with("NOT INTACT: broken at seq 3 (hash mismatch"),
        "{}",
        integrity.headline()
    );
    let mut report = build(&records, &Filter::default());
    report.integrity = Some(integrity);
    let unverified: Vec<u64> = report
        .timeline
        .iter()
        .filter(|r| report.unverified(r))
        .filter_map(|r| r.seq)
        .collect();
    assert_eq!(unverified, [3, 5]);
    let table = report.to_table();
    assert!(
        table.starts_with("verification: NOT INTACT: broken at seq 3"),
        "{table}"
    );
    assert!(table.contains("UNVERIFIED"), "{table}");
    let html = report.to_html();
    assert!(
        html.contains("class=\"banner bad\"") && html.contains("✖ NOT INTACT: broken at seq 3")
    );
    assert!(html.contains("This log cannot be trusted"));
    assert_eq!(
        html.matches("<span class=\"badge unverified\">UNVERIFIED</span>")
            .count(),
        2,
        "once each, in the one timeline"
    );
}

#[test]
fn a_log_cut_short_is_called_truncated() {
    let (_dir, path, key) = real_log(3);
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text.lines().take(4).collect();
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    let (integrity, _) = judged(&path, &key);
    assert!(!integrity.intact);
    assert!(
        integrity
            .headline()
            .starts_with("NOT INTACT: truncated: the log ends at seq 4 but the checkpoint"),
        "{}",
        integrity.headline()
    );
}

#[test]
fn an_intent_without_outcome_is_intact_and_said_at_the_top() {
    let (_dir, path, key) = real_log(2);
    let text = std::fs::read_to_string(&path).unwrap();
    let sink = Sink::open(&path, Some(key.clone()), None).unwrap();
    let mut intent = Event::new(Phase::Intent, "late");
    intent.session_id = Some("s1".into());
    sink.append(intent).unwrap();
    sink.flush().unwrap();
    assert!(std::fs::read_to_string(&path).unwrap().len() > text.len());
    let (integrity, records) = judged(&path, &key);
    assert!(integrity.intact);
    assert_eq!(integrity.headline(), "INTACT, 1 intent(s) without outcome");
    assert_eq!(integrity.dangling, [5]);
    let report = build(&records, &Filter::default());
    let last = report.timeline.last().unwrap();
    assert_eq!(
        last.flag.as_ref().map(|f| f.label.as_str()),
        Some("NO OUTCOME")
    );
}

#[test]
fn a_deleted_checkpoint_with_the_key_at_hand_is_not_intact() {
    let (_dir, path, _key) = real_log(1);
    let v = verify_with(std::slice::from_ref(&path), None, &[]).unwrap();
    let evidence = Evidence {
        files: vec![path],
        checkpoint: None,
        key: true,
        ..Evidence::default()
    };
    let integrity = assess(&v, &evidence);
    assert!(!integrity.intact);
    assert!(integrity.headline().contains("checkpoint missing"));
    assert!(
        integrity
            .lines
            .iter()
            .any(|l| l.starts_with("checkpoint: MISSING"))
    );
}

/// A real log whose server said, in its `started` record, that it keeps a
/// checkpoint under `key` (as browser-shell's server does), then `n` calls.
fn promised_log(n: usize, stopped: bool) -> (tempfile::TempDir, PathBuf, SigningKey) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = SigningKey::load_or_create(&dir.path().join("audit.jsonl.checkpoint-key")).unwrap();
    let sink = Sink::open(&path, Some(key.clone()), None).unwrap();
    let mut started = Event::new(Phase::Lifecycle, "l1");
    started.outcome = Some(Outcome::Started);
    started.detail = Some(json!({"checkpoint": {
        "kept": true,
        "key_fingerprint": sink.checkpoint_key_fingerprint().unwrap(),
    }}));
    sink.append(started).unwrap();
    for i in 0..n {
        let mut denied = Event::new(Phase::Denied, format!("c{i}"));
        denied.verdict = Some(Verdict::Denied);
        sink.append(denied).unwrap();
    }
    if stopped {
        let mut stop = Event::new(Phase::Lifecycle, "l2");
        stop.outcome = Some(Outcome::Stopped);
        sink.append(stop).unwrap();
    }
    sink.flush().unwrap();
    (dir, path, key)
}

/// `path` judged with no checkpoint and no key, as `audit verify` finds
/// it once both were deleted, with `anchors` given.
fn judged_bare(path: &std::path::Path, anchors: &[crate::Anchor]) -> Integrity {
    let v = verify_with(&[path.to_path_buf()], None, anchors).unwrap();
    let evidence = Evidence {
        files: vec![path.to_path_buf()],
        anchors: anchors.to_vec(),
        ..Evidence::default()
    };
    assess(&v, &evidence)
}

fn cut(path: &std::path::Path, records: usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let kept = &lines[..lines.len() - records];
    std::fs::write(path, kept.join("\n") + "\n").unwrap();
}

#[test]
fn a_cut_log_without_its_checkpoint_and_key_is_unvouched_not_intact() {
    let (_dir, path, key) = promised_log(10, true);
    cut(&path, 5);
    std::fs::remove_file(crate::checkpoint_path(&path)).unwrap();
    std::fs::remove_file(crate::public_key_path(&path)).unwrap();
    let integrity = judged_bare(&path, &[]);
    assert!(!integrity.intact, "{integrity:?}");
    assert_eq!(integrity.trust, Trust::Unvouched);
    assert_eq!(integrity.trust.exit_code(), 3);
    let headline = integrity.headline();
    assert!(headline.starts_with("UNVOUCHED: "), "{headline}");
    assert!(headline.contains(&key.public().fingerprint()), "{headline}");
    let mut report = build(
        &load(std::slice::from_ref(&path)).unwrap(),
        &Filter::default(),
    );
    report.integrity = Some(integrity);
    assert!(report.to_table().starts_with("verification: UNVOUCHED: "));
    let html = report.to_html();
    assert!(
        html.contains("class=\"banner warn\"") && html.contains("⚠ UNVOUCHED: "),
        "amber, not green"
    );
    assert!(!html.contains("✔ INTACT") && !html.contains("UNVERIFIED</span>"));
}

#[test]
fn a_checkpoint_under_a_replaced_key_vouches_for_nothing() {
    let (dir, path, _key) = promised_log(10, true);
    cut(&path, 5);
    // The forger's own key and a checkpoint of the cut log under it.
    let key_path = dir.path().join("audit.jsonl.checkpoint-key");
    std::fs::remove_file(&key_path).unwrap();
    let forged = SigningKey::load_or_create(&key_path).unwrap();
    let records = load(std::slice::from_ref(&path)).unwrap();
    let last = records.last().unwrap();
    let checkpoint = crate::checkpoint_path(&path);
    crate::Checkpoint::new(
        &forged,
        "audit.jsonl",
        last["seq"].as_u64().unwrap(),
        last["hash"].as_str().unwrap(),
        "2026-01-01T00:00:00Z",
    )
    .write(&checkpoint)
    .unwrap();
    let forged = CheckpointKey::Public(forged.public());
    let v = verify_with(
        std::slice::from_ref(&path),
        Some((&checkpoint, &forged)),
        &[],
    )
    .unwrap();
    let evidence = Evidence {
        files: vec![path],
        checkpoint: Some(checkpoint),
        key: true,
        key_fingerprint: Some(forged.fingerprint()),
        ..Evidence::default()
    };
    let integrity = assess(&v, &evidence);
    assert_eq!(integrity.trust, Trust::Unvouched, "{integrity:?}");
    assert!(
        integrity.headline().contains("not "),
        "{}",
        integrity.headline()
    );
}

#[test]
fn an_anchor_at_the_last_record_vouches_in_place_of_the_checkpoint() {
    let (_dir, path, _key) = promised_log(3, true);
    std::fs::remove_file(crate::checkpoint_path(&path)).unwrap();
    let records = load(std::slice::from_ref(&path)).unwrap();
    let anchor = |r: &Value| crate::Anchor {
        seq: r["seq"].as_u64().unwrap(),
        hash: r["hash"].as_str().unwrap().to_owned(),
    };
    let whole = judged_bare(&path, &[anchor(&records[4])]);
    assert_eq!(whole.trust, Trust::Intact, "{whole:?}");
    let part = judged_bare(&path, &[anchor(&records[2])]);
    assert_eq!(part.trust, Trust::Unvouched, "{part:?}");
    assert!(
        part.headline()
            .contains("seq 4..5 are vouched for by nothing")
    );
}

#[test]
fn a_log_with_no_word_of_a_checkpoint_stays_intact_with_a_note() {
    // Servers from before the `started` record said so: nothing to expect.
    let (_dir, path, _key) = real_log(2);
    std::fs::remove_file(crate::checkpoint_path(&path)).unwrap();
    let integrity = judged_bare(&path, &[]);
    assert_eq!(integrity.trust, Trust::Intact);
    assert!(integrity.notes.iter().any(|n| n.contains("no checkpoint")));
}

#[test]
fn a_server_without_stopped_is_said_plainly_unless_it_is_running() {
    let (_dir, path, key) = promised_log(2, false);
    let checkpoint = crate::checkpoint_path(&path);
    let key = CheckpointKey::Public(key.public());
    let v = verify_with(std::slice::from_ref(&path), Some((&checkpoint, &key)), &[]).unwrap();
    let unstopped = v.unstopped.clone().unwrap();
    assert_eq!(
        (unstopped.seq, unstopped.pid),
        (1, u64::from(std::process::id()))
    );
    let mut evidence = Evidence {
        files: vec![path.clone()],
        checkpoint: Some(checkpoint.clone()),
        key: true,
        key_fingerprint: Some(key.fingerprint()),
        ..Evidence::default()
    };
    let integrity = assess(&v, &evidence);
    assert_eq!(integrity.trust, Trust::Intact, "a warning, not a verdict");
    assert!(
        integrity.notes.iter().any(|n| n.contains(
            "has no `stopped` record and no server started after it: it was killed or crashed"
        )),
        "{:?}",
        integrity.notes
    );
    evidence.server_running = true;
    let live = assess(&v, &evidence);
    assert!(
        live.notes.is_empty(),
        "a live server is no news: {:?}",
        live.notes
    );
    assert!(
        live.lines
            .iter()
            .any(|l| l.contains("is running on this host"))
    );
    // Stopped: nothing to say.
    let (_dir, path, _key) = promised_log(2, true);
    assert!(verify_with(&[path], None, &[]).unwrap().unstopped.is_none());
}
