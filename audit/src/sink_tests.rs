use std::io::Write;

use serde_json::Value;

use super::*;
use crate::canonical::GENESIS;
use crate::{event::Phase, verify::verify};

fn key(dir: &Path) -> SigningKey {
    SigningKey::load_or_create(&dir.join("audit.checkpoint-key")).unwrap()
}

/// What a reviewer checks the checkpoint with: the public half alone.
fn public(dir: &Path) -> crate::CheckpointKey {
    crate::CheckpointKey::Public(key(dir).public())
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn records_chain_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let first = Sink::open(&path, None, None)
        .unwrap()
        .append(Event::new(Phase::Intent, "c1"))
        .unwrap();
    let second = Sink::open(&path, None, None)
        .unwrap()
        .append(Event::new(Phase::Outcome, "c1"))
        .unwrap();
    assert_eq!((first.seq, second.seq), (1, 2));
    let records = lines(&path);
    assert_eq!(records[0]["prev_hash"], GENESIS);
    assert_eq!(records[1]["prev_hash"], records[0]["hash"]);
    assert!(verify(&[path], None).unwrap().is_intact());
}

#[test]
fn two_writers_on_one_file_keep_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let (a, b) = (
        Sink::open(&path, None, None).unwrap(),
        Sink::open(&path, None, None).unwrap(),
    );
    let seqs: Vec<u64> = (0..6)
        .map(|i| {
            let sink = if i % 2 == 0 { &a } else { &b };
            sink.append(Event::new(Phase::Intent, format!("c{i}")))
                .unwrap()
                .seq
        })
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    assert!(verify(&[path], None).unwrap().first_break.is_none());
}

#[test]
fn a_long_log_resumes_from_its_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let sink = Sink::open(&path, None, None).unwrap();
    let mut event = Event::new(Phase::Intent, "c");
    event.reason = Some("x".repeat(20_000)); // records larger than the first window
    for _ in 0..3 {
        sink.append(event.clone()).unwrap();
    }
    assert_eq!(
        Sink::open(&path, None, None)
            .unwrap()
            .append(event)
            .unwrap()
            .seq,
        4
    );
}

#[test]
fn a_full_disk_refuses_the_record() {
    let sink = Sink::open(Path::new("/dev/full"), None, None).unwrap();
    let err = sink.append(Event::new(Phase::Intent, "c1")).unwrap_err();
    assert!(
        matches!(
            err,
            AuditError::Io {
                step: AppendStep::Write | AppendStep::Sync,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_torn_last_line_is_reported_and_never_merged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let sink = Sink::open(&path, None, None).unwrap();
    sink.append(Event::new(Phase::Intent, "c1")).unwrap();
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"seq\":2,\"tor")
        .unwrap();
    let sealed = Sink::open(&path, None, None)
        .unwrap()
        .append(Event::new(Phase::Outcome, "c1"))
        .unwrap();
    assert_eq!(sealed.seq, 2);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().nth(1), Some("{\"seq\":2,\"tor"));
    let v = verify(&[path], None).unwrap();
    assert_eq!(v.torn.len(), 1, "{v:?}");
    assert!(v.first_break.is_none(), "{v:?}");
    assert!(!v.is_intact());
}

#[test]
fn rotation_keeps_one_continuous_chain_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let rotation = Rotation {
        max_bytes: 2_000,
        max_files: 20,
    };
    let sink = Sink::open(&path, Some(key(dir.path())), Some(rotation)).unwrap();
    for i in 0..30 {
        sink.append(Event::new(Phase::Denied, format!("c{i}")))
            .unwrap();
    }
    // Deferred records may still be on their way (and rotate a file): the
    // files are listed once every record is written.
    sink.flush().unwrap();
    let mut files: Vec<PathBuf> = (1..=20)
        .rev()
        .map(|n| rotated(&path, n))
        .filter(|p| p.exists())
        .collect();
    assert!(files.len() >= 2, "expected rotation, got {files:?}");
    files.push(path.clone());
    for file in &files {
        assert!(std::fs::metadata(file).unwrap().len() <= 2_000 + 1_000);
    }
    let v = verify(&files, Some((&checkpoint_path(&path), &public(dir.path())))).unwrap();
    assert!(v.is_intact(), "{v:?}");
    let denied = files
        .iter()
        .flat_map(|f| lines(f))
        .filter(|r| r["phase"] == "denied")
        .count();
    assert_eq!(denied, 30);
    assert_eq!(v.seq_range.map(|(first, _)| first), Some(1));
    assert_eq!(v.start(), crate::Start::Genesis);
}

#[test]
fn a_rotation_says_in_the_chain_which_records_it_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let rotation = Rotation {
        max_bytes: 1_500,
        max_files: 2,
    };
    let sink = Sink::open(&path, None, Some(rotation)).unwrap();
    for i in 0..40 {
        sink.append(Event::new(Phase::Denied, format!("c{i}")))
            .unwrap();
    }
    assert!(!rotated(&path, 3).exists());
    let files = vec![rotated(&path, 2), rotated(&path, 1), path.clone()];
    let oldest_on_disk = lines(&files[0])[0]["seq"].as_u64().unwrap();
    assert!(oldest_on_disk > 1, "nothing was deleted: {oldest_on_disk}");
    let v = verify(&files, None).unwrap();
    assert!(v.is_intact(), "{v:?}");
    match v.start() {
        crate::Start::Rotated { kept_from, by } => {
            assert_eq!(kept_from, oldest_on_disk);
            let record = files
                .iter()
                .flat_map(|f| lines(f))
                .find(|r| r["seq"] == by)
                .unwrap();
            assert_eq!(record["phase"], "rotation");
        }
        other => panic!("expected a start explained by rotation, got {other:?}"),
    }
    // Given the live log alone, the start is not explained by what it holds.
    let live_only = verify(std::slice::from_ref(&path), None).unwrap();
    assert!(matches!(
        live_only.start(),
        crate::Start::Unexplained { .. }
    ));
}

#[test]
fn a_second_writer_follows_a_rotation_done_by_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let rotation = Some(Rotation {
        max_bytes: 1_500,
        max_files: 50,
    });
    let (a, b) = (
        Sink::open(&path, None, rotation).unwrap(),
        Sink::open(&path, None, rotation).unwrap(),
    );
    let mut last = 0;
    for i in 0..40 {
        let sink = if i % 3 == 0 { &b } else { &a };
        let seq = sink
            .append(Event::new(Phase::Denied, format!("c{i}")))
            .unwrap()
            .seq;
        // Rotation records take seqs of their own in between.
        assert!(seq > last, "seq {seq} after {last}");
        last = seq;
    }
    let mut files: Vec<PathBuf> = (1..=50)
        .rev()
        .map(|n| rotated(&path, n))
        .filter(|p| p.exists())
        .collect();
    files.push(path);
    let v = verify(&files, None).unwrap();
    assert!(v.is_intact() && v.records >= 40, "{v:?}");
}

#[test]
fn concurrent_callers_each_get_their_own_durable_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let sink = Arc::new(Sink::open(&path, Some(key(dir.path())), None).unwrap());
    let handles: Vec<_> = (0..16)
        .map(|t| {
            let sink = Arc::clone(&sink);
            std::thread::spawn(move || {
                (0..20)
                    .map(|i| {
                        let sealed = sink
                            .append(Event::new(Phase::Intent, format!("t{t}-{i}")))
                            .unwrap();
                        assert_eq!(
                            sealed.record["call_id"],
                            format!("t{t}-{i}"),
                            "a caller got someone else's record"
                        );
                        sealed.seq
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut seqs: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=320).collect::<Vec<u64>>());
    sink.flush().unwrap();
    let v = verify(
        std::slice::from_ref(&path),
        Some((&checkpoint_path(&path), &public(dir.path()))),
    )
    .unwrap();
    assert!(v.is_intact() && v.records == 320, "{v:?}");
}

#[test]
fn every_caller_of_a_failed_group_commit_gets_the_error() {
    let sink = Arc::new(Sink::open(Path::new("/dev/full"), None, None).unwrap());
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let sink = Arc::clone(&sink);
            std::thread::spawn(move || sink.append(Event::new(Phase::Intent, format!("t{t}"))))
        })
        .collect();
    for h in handles {
        let err = h.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("No space left"), "{err}");
    }
}

#[test]
fn a_deferred_record_is_in_the_file_when_append_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let sink = Sink::open(&path, Some(key(dir.path())), None).unwrap();
    let sealed = sink
        .append_with(Event::new(Phase::Outcome, "c1"), Durability::Deferred)
        .unwrap();
    // Read through another descriptor: the bytes are in the file (the page
    // cache), so a killed process loses nothing.
    let on_disk = lines(&path);
    assert_eq!(on_disk.len(), 1);
    assert_eq!(on_disk[0]["hash"], sealed.hash.as_str());
}

#[test]
fn the_flusher_refreshes_the_checkpoint_within_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let sink = Sink::open(&path, Some(key(dir.path())), None).unwrap();
    sink.append(Event::new(Phase::Intent, "c1")).unwrap();
    let last = sink
        .append_with(Event::new(Phase::Outcome, "c1"), Durability::Deferred)
        .unwrap();
    // Positive control: nothing flushed yet right after the append is fine,
    // but within a few windows the flusher must have vouched for seq 2.
    let deadline = std::time::Instant::now() + DEFERRED_SYNC_WITHIN * 20;
    let checkpoint = loop {
        if let Ok(c) = Checkpoint::read(&checkpoint_path(&path))
            && c.seq == last.seq
        {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint for seq {} after {:?}",
            last.seq,
            DEFERRED_SYNC_WITHIN * 20
        );
        std::thread::sleep(DEFERRED_SYNC_WITHIN / 4);
    };
    assert_eq!(checkpoint.hash, last.hash);
    assert!(checkpoint.authenticate(&public(dir.path())).is_ok());
    drop(sink);
}

#[test]
fn dropping_the_sink_checkpoints_its_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let sink = Sink::open(&path, Some(key(dir.path())), None).unwrap();
    let mut last = None;
    for i in 0..5 {
        last = Some(
            sink.append_with(
                Event::new(Phase::Denied, format!("c{i}")),
                Durability::Deferred,
            )
            .unwrap(),
        );
    }
    drop(sink);
    let last = last.unwrap();
    let checkpoint = Checkpoint::read(&checkpoint_path(&path)).unwrap();
    assert_eq!(
        (checkpoint.seq, checkpoint.hash.as_str()),
        (last.seq, last.hash.as_str())
    );
    let v = verify(
        std::slice::from_ref(&path),
        Some((&checkpoint_path(&path), &public(dir.path()))),
    )
    .unwrap();
    assert!(v.is_intact() && v.records == 5, "{v:?}");
}

#[test]
fn a_checkpoint_vouches_for_records_another_process_appended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let (a, b) = (
        Sink::open(&path, Some(key(dir.path())), None).unwrap(),
        Sink::open(&path, Some(key(dir.path())), None).unwrap(),
    );
    a.append(Event::new(Phase::Intent, "a1")).unwrap();
    let theirs = b
        .append_with(Event::new(Phase::Outcome, "b1"), Durability::Deferred)
        .unwrap();
    a.flush().unwrap();
    let checkpoint = Checkpoint::read(&checkpoint_path(&path)).unwrap();
    assert_eq!(
        checkpoint.seq, theirs.seq,
        "a's checkpoint must name the file's real head"
    );
    assert_eq!(checkpoint.hash, theirs.hash);
}

#[test]
fn a_deferred_record_whose_sync_fails_is_reported_and_latches() {
    // /dev/null takes the write but cannot sync (EINVAL): a real failed
    // fdatasync after a successful write.
    let sink = Sink::open(Path::new("/dev/null"), None, None).unwrap();
    sink.append_with(Event::new(Phase::Intent, "c1"), Durability::Deferred)
        .unwrap();
    let err = sink.sync().unwrap_err();
    assert!(
        matches!(
            err,
            AuditError::Io {
                step: AppendStep::Sync,
                ..
            }
        ),
        "{err}"
    );
    let later = sink
        .append_with(Event::new(Phase::Outcome, "c1"), Durability::Deferred)
        .unwrap_err();
    assert!(
        later.to_string().contains("an earlier sync failed"),
        "{later}"
    );
}

#[test]
fn a_sync_with_nothing_pending_does_not_touch_the_file() {
    // Had it called fdatasync, /dev/null would have answered EINVAL.
    let sink = Sink::open(Path::new("/dev/null"), None, None).unwrap();
    sink.sync().unwrap();
}

#[test]
fn a_checkpoint_never_moves_back_to_an_earlier_record() {
    // Two processes' flushers may finish out of order: the slower one, with
    // the older head, must not replace the newer checkpoint.
    let dir = tempfile::tempdir().unwrap();
    let path = checkpoint_path(&dir.path().join("a.jsonl"));
    let key = key(dir.path());
    let newer = Checkpoint::new(&key, "a.jsonl", 12, "h12", "2026-11-23T00:00:01Z");
    let older = Checkpoint::new(&key, "a.jsonl", 10, "h10", "2026-11-23T00:00:02Z");
    newer.write_unless_older(&path, &key.public()).unwrap();
    older.write_unless_older(&path, &key.public()).unwrap();
    assert_eq!(Checkpoint::read(&path).unwrap(), newer);
    // A later one still replaces it.
    let later = Checkpoint::new(&key, "a.jsonl", 13, "h13", "2026-11-23T00:00:03Z");
    later.write_unless_older(&path, &key.public()).unwrap();
    assert_eq!(Checkpoint::read(&path).unwrap(), later);
}

#[test]
fn a_checkpoint_that_does_not_verify_is_replaced_whatever_seq_it_claims() {
    let dir = tempfile::tempdir().unwrap();
    let path = checkpoint_path(&dir.path().join("a.jsonl"));
    let key = key(dir.path());
    let mut forged = Checkpoint::new(&key, "a.jsonl", 1_000, "h", "2026-11-23T00:00:01Z");
    forged.signature = Some("00".repeat(64));
    forged.write(&path).unwrap();
    let real = Checkpoint::new(&key, "a.jsonl", 5, "h5", "2026-11-23T00:00:02Z");
    real.write_unless_older(&path, &key.public()).unwrap();
    assert_eq!(Checkpoint::read(&path).unwrap(), real);
}

#[test]
fn an_append_does_not_wait_for_the_checkpoint_write() {
    // Hold the checkpoint's own lock, as a slow checkpoint write would: the
    // background flusher stops there, and appends must still go through.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let checkpoint = checkpoint_path(&path);
    let held = OpenOptions::new()
        .create(true)
        .append(true)
        .open(format!("{}.lock", checkpoint.display()))
        .unwrap();
    held.lock().unwrap();
    let sink = Sink::open(&path, Some(key(dir.path())), None).unwrap();
    sink.append(Event::new(Phase::Intent, "c1")).unwrap();
    // Several flusher rounds: it has synced and is waiting for the lock.
    std::thread::sleep(DEFERRED_SYNC_WITHIN * 3);
    assert!(
        !checkpoint.exists(),
        "the flusher did not wait for the checkpoint lock"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            tx.send(sink.append(Event::new(Phase::Outcome, "c1")))
                .unwrap()
        });
        let appended = rx.recv_timeout(Duration::from_secs(5));
        held.unlock().unwrap();
        assert!(
            matches!(appended, Ok(Ok(_))),
            "the append waited for the checkpoint write: {appended:?}"
        );
    });
    drop(sink);
    assert!(Checkpoint::read(&checkpoint).unwrap().seq >= 1);
}
