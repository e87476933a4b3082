use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::{obs::shield::Shield, policy::rules};

fn journal(dir: &std::path::Path, log: &std::path::Path) -> Journal {
    std::fs::write(dir.join("policy.json"), "{}").expect("policy");
    let source = rules::Source {
        policy_file: dir.join("policy.json"),
        secrets_file: None,
        protected_ports: vec![],
        extra_secret_params: vec![],
        key: audit::Key::load_or_create(&dir.join("key")).expect("key"),
        subcommand_known: |_| true,
    };
    let rules = Arc::new(rules::Current::load(source).expect("rules"));
    let sink = audit::Sink::open(log, None, None).expect("sink");
    Journal::new(
        sink,
        crate::obs::telemetry::Telemetry::disabled(),
        Shield::new(rules),
    )
}

#[test]
fn the_oldest_images_are_recorded_as_dropped_before_they_go_and_the_log_stays_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("audit.jsonl");
    let journal = journal(dir.path(), &log);
    let store = audit::ImageStore::open(&log).expect("store");
    let old = store.put(b"an old image").expect("put");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let new = store.put(b"a newer image").expect("put");
    let mut named = audit::Event::new(audit::Phase::Evidence, "c1");
    named.evidence = Some(json!({
        "before": {"image": {"sha256": old.sha256}},
        "after": {"image": {"sha256": new.sha256}},
    }));
    journal.append_unattached(named).expect("append");

    let freed = make_room(&journal, &store, 1, 100).expect("room");
    journal.flush();
    assert_eq!(freed, old.bytes);
    assert!(!store.path_of(&old.sha256).exists() && store.path_of(&new.sha256).exists());
    let records: Vec<Value> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let dropped = records.last().expect("a record");
    assert_eq!(dropped["outcome"], "images_dropped", "{dropped}");
    assert_eq!(dropped["evidence"]["dropped"], json!([old.sha256]));
    let mut v = audit::verify(std::slice::from_ref(&log), None).expect("verify");
    v.check_images(&audit::evidence_dir(&log));
    assert!(v.is_intact(), "{:?}", v.images);
    assert_eq!((v.images.checked, v.images.dropped), (1, 1));
}
