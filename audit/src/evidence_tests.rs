use std::path::Path;

use serde_json::json;

use super::*;
use crate::{Event, Phase, Sink, verify::verify};

/// A log of one call's evidence record naming `before` and `after` (an
/// image stored, or a look that kept none).
fn log_naming(dir: &Path, before: Value, after: Value) -> PathBuf {
    let path = dir.join("audit.jsonl");
    let mut event = Event::new(Phase::Evidence, "c1");
    event.evidence = Some(json!({"subcommand": "click", "before": before, "after": after}));
    Sink::open(&path, None, None)
        .unwrap()
        .append(event)
        .unwrap();
    path
}

fn look(image: &StoredImage) -> Value {
    json!({"url": "http://127.0.0.1/", "image": {"sha256": image.sha256, "bytes": image.bytes}})
}

fn verified(log: &Path) -> crate::Verification {
    let mut v = verify(&[log.to_owned()], None).unwrap();
    v.check_images(&evidence_dir(log));
    v
}

#[test]
fn stored_images_named_by_the_chain_verify() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("audit.jsonl")).unwrap();
    let (a, b) = (store.put(b"before").unwrap(), store.put(b"after").unwrap());
    let log = log_naming(dir.path(), look(&a), look(&b));
    let v = verified(&log);
    assert!(v.is_intact(), "{:?}", v.images);
    assert_eq!(v.images.checked, 2);
}

#[test]
fn an_altered_image_breaks_integrity() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("audit.jsonl")).unwrap();
    let (a, b) = (store.put(b"before").unwrap(), store.put(b"after").unwrap());
    let log = log_naming(dir.path(), look(&a), look(&b));
    std::fs::write(store.path_of(&b.sha256), b"edited").unwrap();
    let v = verified(&log);
    assert!(!v.is_intact());
    assert_eq!(v.images.problems.len(), 1);
    assert!(
        v.images.problems[0].found.contains("altered"),
        "{:?}",
        v.images
    );
}

#[test]
fn a_missing_image_breaks_integrity() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("audit.jsonl")).unwrap();
    let (a, b) = (store.put(b"before").unwrap(), store.put(b"after").unwrap());
    let log = log_naming(dir.path(), look(&a), look(&b));
    std::fs::remove_file(store.path_of(&a.sha256)).unwrap();
    let v = verified(&log);
    assert!(!v.is_intact());
    assert!(
        v.images.problems[0].found.contains("missing"),
        "{:?}",
        v.images
    );
    assert_eq!(v.images.problems[0].seq, 1);
}

#[test]
fn a_look_that_kept_no_image_is_not_an_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let withheld = json!({"url": "http://127.0.0.1/", "image_withheld": "over the store's bound"});
    let log = log_naming(dir.path(), withheld.clone(), withheld);
    let v = verified(&log);
    assert!(v.is_intact());
    assert_eq!(v.images.checked, 0);
}

#[test]
fn one_image_named_twice_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("audit.jsonl")).unwrap();
    let first = store.put(b"same").unwrap();
    let again = store.put(b"same").unwrap();
    assert!(first.new && !again.new);
    assert_eq!(store.bytes_held().unwrap(), 4);
}

#[test]
fn the_store_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("audit.jsonl")).unwrap();
    let image = store.put(b"png").unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(store.dir()), 0o700);
    assert_eq!(mode(&store.path_of(&image.sha256)), 0o600);
}

#[test]
fn a_digest_that_is_not_one_is_missing_not_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let escape = json!({"image": {"sha256": "../audit.jsonl"}});
    let log = log_naming(dir.path(), escape.clone(), escape);
    let v = verified(&log);
    assert!(!v.is_intact());
    assert!(
        v.images.problems[0].found.contains("not a SHA-256"),
        "{:?}",
        v.images
    );
}

#[test]
fn an_image_a_record_says_was_dropped_is_no_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let store = ImageStore::open(&log).unwrap();
    let (a, b) = (store.put(b"before").unwrap(), store.put(b"after").unwrap());
    let sink = Sink::open(&log, None, None).unwrap();
    let mut named = Event::new(Phase::Evidence, "c1");
    named.evidence = Some(json!({"before": look(&a), "after": look(&b)}));
    sink.append(named).unwrap();
    let mut dropped = Event::new(Phase::Lifecycle, "store");
    dropped.outcome = Some(crate::Outcome::ImagesDropped);
    dropped.evidence = Some(json!({"dropped": [a.sha256]}));
    sink.append(dropped).unwrap();
    store.remove(&a.sha256).unwrap();
    let v = verified(&log);
    assert!(v.is_intact(), "{:?}", v.images);
    assert_eq!((v.images.checked, v.images.dropped), (1, 1));
}

#[test]
fn the_oldest_images_go_first_and_only_as_many_as_needed() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("audit.jsonl")).unwrap();
    let first = store.put(b"first image").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let second = store.put(b"second image").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    store.put(b"third image").unwrap();
    let oldest = store.oldest(first.bytes + 1).unwrap();
    assert_eq!(
        oldest,
        vec![(first.sha256, first.bytes), (second.sha256, second.bytes)]
    );
    assert!(store.oldest(0).unwrap().is_empty());
}
