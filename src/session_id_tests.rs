use super::*;

#[test]
fn plain_ids_pass_through_unchanged() {
    let s = SessionId::parse("User_1-a").unwrap();
    assert_eq!(s.daemon_name(), "User_1-a");
}

#[test]
fn dotted_ids_map_to_distinct_names_that_no_plain_id_can_take() {
    let a = SessionId::parse("a.b").unwrap();
    let b = SessionId::parse("a_b").unwrap();
    let c = SessionId::parse("a..b").unwrap();
    assert_ne!(a.daemon_name(), b.daemon_name());
    assert_ne!(a.daemon_name(), c.daemon_name());
    assert_eq!(a.daemon_name().len(), MAX_DAEMON_NAME_LEN);
    assert!(a.daemon_name().len() > MAX_SESSION_ID_LEN);
    assert!(
        a.daemon_name()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    );
}

#[test]
fn ids_that_read_as_flags_never_reach_argv() {
    let ids = ["-h", "--help", "-V", "--version", "-x", "-", "--"];
    let names: Vec<String> = ids
        .iter()
        .map(|id| SessionId::parse(id).unwrap().daemon_name().to_string())
        .collect();
    for (id, name) in ids.iter().zip(&names) {
        assert!(!name.starts_with('-'), "{id:?} -> {name:?}");
        assert_eq!(name.len(), MAX_DAEMON_NAME_LEN, "{id:?}");
        assert!(is_daemon_name(name), "{id:?}");
        assert_eq!(SessionId::parse(id).unwrap().as_str(), *id);
    }
    let distinct: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(distinct.len(), names.len());
    // A hyphen after the first character is harmless and stays readable.
    assert_eq!(SessionId::parse("a-b").unwrap().daemon_name(), "a-b");
    assert_eq!(SessionId::parse("_a").unwrap().daemon_name(), "_a");
}

#[test]
fn no_session_id_maps_to_a_pool_name() {
    let pool = new_pool_name();
    assert!(is_pool_name(&pool) && is_daemon_name(&pool), "{pool}");
    assert_ne!(pool, new_pool_name());
    // The longest pass-through id is one character short of a pool name,
    // and a hashed id starts with `_`.
    let longest = SessionId::parse(&format!("pool-{}", "a".repeat(59))).unwrap();
    assert!(!is_pool_name(longest.daemon_name()));
    let hashed = SessionId::parse(&format!("pool.{}", "a".repeat(59))).unwrap();
    assert!(!is_pool_name(hashed.daemon_name()));
    let bound = longest.run_by(&pool);
    assert_eq!(bound.daemon_name(), &pool);
    assert_eq!(bound.own_name(), longest.own_name());
    assert_eq!(bound.as_str(), longest.as_str());
}

#[test]
fn dot_dot_is_a_harmless_session_id() {
    let s = SessionId::parse("..").unwrap();
    assert!(!s.daemon_name().contains('.'));
}

#[test]
fn rejects_bad_session_ids() {
    for bad in ["", "a b", "a/b", "é", "a\0", &"x".repeat(65)] {
        let err = SessionId::parse(bad).unwrap_err();
        assert_eq!(err.rule, "session_id.invalid", "{bad:?}");
    }
    assert!(SessionId::parse(&"x".repeat(64)).is_ok());
}

#[test]
fn only_names_parse_can_produce_pass_as_daemon_names() {
    for id in ["u1", "a.b", "..", &"x".repeat(64)] {
        let s = SessionId::parse(id).unwrap();
        assert!(is_daemon_name(s.daemon_name()), "{id:?}");
    }
    for name in ["", "..", ".", "a/b", "a.b", "..sock", &"x".repeat(66)] {
        assert!(!is_daemon_name(name), "{name:?}");
    }
}
