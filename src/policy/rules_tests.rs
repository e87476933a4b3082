use super::*;

/// A source whose policy file is `{}` (every key at its default): only
/// the default path may be missing.
fn source(dir: &Path) -> Source {
    std::fs::write(dir.join("policy.json"), "{}").expect("write");
    Source {
        policy_file: dir.join("policy.json"),
        secrets_file: None,
        protected_ports: vec![9222],
        extra_secret_params: vec![],
        key: audit::Key::load_or_create(&dir.join("key")).expect("key"),
        subcommand_known: |_| true,
    }
}

#[test]
fn a_valid_file_replaces_the_rules_and_a_snapshot_taken_before_keeps_the_old_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let current = Current::load(source(dir.path())).expect("default loads");
    let before = current.get();
    assert_eq!(before.file_sha256, Some(audit::sha256_hex(b"{}")));
    std::fs::write(
        dir.path().join("policy.json"),
        r#"{"open":{"allow_private_cidrs":["127.0.0.1:8765"]}}"#,
    )
    .expect("write");
    let Reload::Replaced { old, new } = current.reload() else {
        panic!("a valid file must replace the rules");
    };
    assert_eq!(old.sha256, before.sha256);
    assert_ne!(new.sha256, before.sha256);
    assert_eq!(current.get().sha256, new.sha256);
    assert!(before.url.allow_private_cidrs.is_empty());
    assert_eq!(new.url.protected_ports, vec![9222]);
}

#[test]
fn an_invalid_file_keeps_the_rules_in_force_and_names_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let current = Current::load(source(dir.path())).expect("default loads");
    let before = current.get().sha256.clone();
    std::fs::write(dir.path().join("policy.json"), r#"{"open":{"nope":1}}"#).expect("write");
    let Reload::Kept { rules, error } = current.reload() else {
        panic!("an invalid file must keep the rules");
    };
    assert_eq!(rules.sha256, before);
    assert_eq!(current.get().sha256, before);
    assert!(error.to_string().contains("nope"), "{error}");
}

#[test]
fn the_digest_names_the_effective_policy_not_the_file_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source(dir.path());
    std::fs::write(&src.policy_file, r#"{"open":{"allow_schemes":["https"]}}"#).expect("w");
    let compact = src.load().expect("loads");
    std::fs::write(
        &src.policy_file,
        "{\n  \"open\": { \"allow_schemes\": [ \"https\" ] }\n}\n",
    )
    .expect("w");
    let spaced = src.load().expect("loads");
    assert_eq!(compact.sha256, spaced.sha256);
    assert_ne!(compact.file_sha256, spaced.file_sha256);
}

#[test]
fn the_digest_is_the_same_across_restarts_whose_gate_port_differs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut src = source(dir.path());
    std::fs::write(&src.policy_file, r#"{"open":{"allow_schemes":["https"]}}"#).expect("w");
    let first = src.load().expect("loads");
    src.protected_ports = vec![9222, 40121];
    let second = src.load().expect("loads");
    assert_eq!(first.sha256, second.sha256);
    assert_ne!(
        first.policy_json(),
        second.policy_json(),
        "the ports are on the record"
    );
    std::fs::write(&src.policy_file, r#"{"open":{"allow_schemes":["http"]}}"#).expect("w");
    assert_ne!(
        src.load().expect("loads").sha256,
        first.sha256,
        "other rules, other digest"
    );
}

#[test]
fn a_policy_file_removed_from_a_named_path_is_refused_on_reload_and_the_rules_stay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let current = Current::load(source(dir.path())).expect("loads");
    std::fs::remove_file(dir.path().join("policy.json")).expect("remove");
    let Reload::Kept { error, .. } = current.reload() else {
        panic!("a missing file at a path of the operator's must not become the default policy");
    };
    assert!(error.to_string().contains("no such file"), "{error}");
}
