//! The verdict at the top of a report, on real logs: intact, broken at
//! seq N, truncated, intents without outcome, a missing checkpoint.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;
use crate::{Event, Key, Outcome, Phase, Sink, Verdict, verify_with};

/// A real log of `n` calls (intent and outcome), beside its key; flushed
/// so that its checkpoint vouches for every record.
fn real_log(n: usize) -> (tempfile::TempDir, PathBuf, Key) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Key::load_or_create(&dir.path().join("audit.jsonl.key")).unwrap();
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

fn judged(path: &std::path::Path, key: &Key) -> (Integrity, Vec<Value>) {
    let checkpoint = crate::checkpoint_path(path);
    let v = verify_with(&[path.to_path_buf()], Some((&checkpoint, key)), &[]).unwrap();
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
        4
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
