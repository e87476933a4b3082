use std::path::PathBuf;

use super::{EvidenceArgs, VerifyArgs, logs_only, verify_to};

fn no_evidence() -> EvidenceArgs {
    EvidenceArgs {
        checkpoint: None,
        public_key: None,
        key: None,
        against: Vec::new(),
    }
}

/// `audit verify audit.jsonl*`, as the README writes it: the log's own
/// side files are passed over without a word (naming them on every run
/// is noise); only a file that is neither is named as skipped.
#[test]
fn a_glob_of_the_log_keeps_the_logs_and_passes_over_their_side_files_quietly() {
    let files: Vec<PathBuf> = [
        "a/audit.jsonl",
        "a/audit.jsonl.1",
        "a/audit.jsonl.checkpoint",
        "a/audit.jsonl.checkpoint.lock",
        "a/audit.jsonl.checkpoint.tmp",
        "a/audit.jsonl.key",
        "a/audit.jsonl.checkpoint-key",
        "a/audit.jsonl.checkpoint-key.pub",
        "a/audit.jsonl.lock",
        "a/audit.jsonl.pid",
        "a/audit.jsonl.evidence",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let (logs, skipped) = logs_only(&files);
    assert_eq!(logs, files[..2].to_vec());
    assert_eq!(skipped, Vec::<PathBuf>::new());
}

#[test]
fn another_file_beside_the_log_is_skipped_unless_it_holds_records() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let record = format!("{{\"schema\":\"{}\",\"seq\":1}}\n", audit::SCHEMA);
    std::fs::write(&log, &record).unwrap();
    let notes = dir.path().join("audit.jsonl.notes");
    std::fs::write(&notes, "reviewed on Monday\n").unwrap();
    let renamed = dir.path().join("audit.jsonl.old");
    std::fs::write(&renamed, &record).unwrap();
    let rotated = dir.path().join("audit.jsonl.2");
    std::fs::write(&rotated, "not even JSON\n").unwrap();
    let (logs, skipped) =
        logs_only(&[log.clone(), notes.clone(), renamed.clone(), rotated.clone()]);
    assert_eq!(
        logs,
        vec![log, renamed, rotated],
        "a rotation is always checked"
    );
    assert_eq!(skipped, vec![notes]);
}

#[test]
fn a_log_named_like_a_sibling_is_kept_when_no_log_is_beside_it() {
    let files = vec![PathBuf::from("/nonexistent/evidence.key")];
    assert_eq!(logs_only(&files).0, files);
}

#[test]
fn a_tampered_log_cannot_forge_lines_of_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let sink = audit::Sink::open(&log, None, None).unwrap();
    sink.append(audit::Event::new(audit::Phase::Denied, "c1"))
        .unwrap();
    drop(sink);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut record: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    record["hash"] = "x\nchain: intact\nresult: INTACT".into();
    std::fs::write(&log, format!("{record}\n")).unwrap();
    let args = VerifyArgs {
        files: vec![log],
        evidence: no_evidence(),
    };
    let mut out = Vec::new();
    assert_eq!(
        verify_to(&args, &mut out).unwrap(),
        audit::report::Trust::NotIntact
    );
    let out = String::from_utf8(out).unwrap();
    assert!(!out.lines().any(|l| l == "result: INTACT"), "{out}");
    assert!(!out.lines().any(|l| l == "chain: intact"), "{out}");
    assert!(
        out.contains("the record stores x\\nchain: intact\\nresult: INTACT"),
        "{out}"
    );
}

/// `audit verify` of `files` beside a key: its verdict and output.
fn verify_log(files: Vec<PathBuf>) -> (bool, String) {
    let args = VerifyArgs {
        files,
        evidence: no_evidence(),
    };
    let mut out = Vec::new();
    let trust = verify_to(&args, &mut out).unwrap();
    (
        trust == audit::report::Trust::Intact,
        String::from_utf8(out).unwrap(),
    )
}

fn log_of(records: usize, rotation: Option<audit::Rotation>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let key =
        audit::SigningKey::load_or_create(&dir.path().join("audit.jsonl.checkpoint-key")).unwrap();
    let sink = audit::Sink::open(&log, Some(key), rotation).unwrap();
    for i in 0..records {
        sink.append(audit::Event::new(audit::Phase::Denied, format!("c{i}")))
            .unwrap();
    }
    sink.flush().unwrap();
    (dir, log)
}

#[test]
fn a_deleted_checkpoint_is_not_intact_when_the_key_is_there() {
    let (_dir, log) = log_of(3, None);
    assert!(verify_log(vec![log.clone()]).0);
    std::fs::remove_file(audit::checkpoint_path(&log)).unwrap();
    let (intact, out) = verify_log(vec![log]);
    assert!(!intact, "{out}");
    assert!(out.contains("checkpoint: MISSING"), "{out}");
}

#[test]
fn a_start_deleted_by_hand_is_not_intact_and_one_rotated_away_is_explained() {
    let rotation = audit::Rotation {
        max_bytes: 1_500,
        max_files: 2,
    };
    let (_dir, log) = log_of(40, Some(rotation));
    let all = vec![
        audit::rotated(&log, 2),
        audit::rotated(&log, 1),
        log.clone(),
    ];
    let (intact, out) = verify_log(all);
    assert!(intact && out.contains("deleted by rotation"), "{out}");
    // The live log alone: the older records are named where they are.
    let (intact, out) = verify_log(vec![log.clone()]);
    assert!(intact && out.contains("audit.jsonl.1"), "{out}");
    // The oldest file deleted by hand: nothing explains the missing records.
    std::fs::remove_file(audit::rotated(&log, 2)).unwrap();
    let (intact, out) = verify_log(vec![audit::rotated(&log, 1), log]);
    assert!(!intact && out.contains("DELETED"), "{out}");
}
