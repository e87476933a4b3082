use super::*;

fn admit(s: &Registry, id: &str) -> Arrival {
    s.admit(&SessionId::parse(id).unwrap(), || None)
}

fn pooled(name: &str) -> crate::server::pool::Pooled {
    crate::server::pool::Pooled::for_test(name)
}

fn go(a: Arrival) -> Arc<tokio::sync::Mutex<()>> {
    match a {
        Arrival::Go(turn) | Arrival::Evicted(turn, _) => turn.lock,
        Arrival::Full => panic!("unexpected Full"),
    }
}

#[test]
fn a_session_reopened_after_close_looks_at_its_page_first() {
    let s = Registry::new(4, Overflow::Refuse);
    go(admit(&s, "a"));
    assert!(
        !s.is_unlooked("a"),
        "a brand-new session has no page to look at"
    );
    s.forget("a");
    go(admit(&s, "a"));
    assert!(s.is_unlooked("a"), "its pinned tab outlived the close");
    s.set_unlooked("a", false);
    s.forget("a");
    go(admit(&s, "b"));
    assert!(!s.is_unlooked("b"), "another session is not affected");
}

#[test]
fn a_new_session_is_bound_to_a_pooled_daemon_and_found_again_by_its_id() {
    let s = Registry::new(4, Overflow::Refuse);
    let u1 = SessionId::parse("u1").unwrap();
    let Arrival::Go(turn) = s.admit(&u1, || Some(pooled("pool-a"))) else {
        panic!("expected Go");
    };
    assert_eq!(turn.daemon_name, "pool-a");
    assert!(turn.bound.is_some());
    assert!(!s.is_unlooked("pool-a"), "a pooled tab is fresh");
    assert_eq!(s.session_of("pool-a").as_deref(), Some("u1"));
    drop(turn);
    // The next call of u1 finds its daemon; the pool is not asked again.
    let Arrival::Go(again) = s.admit(&u1, || panic!("asked the pool twice")) else {
        panic!("expected Go");
    };
    assert_eq!(again.daemon_name, "pool-a");
    assert!(again.bound.is_none());
}

#[test]
fn a_closed_pooled_session_leaves_no_tab_to_take_up_and_binds_anew() {
    let s = Registry::new(4, Overflow::Refuse);
    let u1 = SessionId::parse("u1").unwrap();
    drop(go(s.admit(&u1, || Some(pooled("pool-a")))));
    let gone = s.forget("pool-a").unwrap();
    assert!(gone.pooled && gone.session_id == "u1" && gone.own_name == "u1");
    let Arrival::Go(turn) = s.admit(&u1, || Some(pooled("pool-b"))) else {
        panic!("expected Go");
    };
    assert_eq!(turn.daemon_name, "pool-b");
    assert!(!s.is_unlooked("pool-b"));
}

#[test]
fn a_session_back_after_close_takes_a_pooled_daemon_and_its_old_name_stays_marked() {
    let s = Registry::new(4, Overflow::Refuse);
    drop(go(admit(&s, "u1")));
    s.forget("u1");
    let u1 = SessionId::parse("u1").unwrap();
    let Arrival::Go(turn) = s.admit(&u1, || Some(pooled("pool-a"))) else {
        panic!("expected Go");
    };
    assert_eq!(turn.daemon_name, "pool-a");
    assert!(!s.is_unlooked("pool-a"), "a pooled tab is fresh");
    drop(turn);
    s.forget("pool-a");
    // Back again with no daemon ready: its own name, whose tab may have
    // outlived the first close, is looked at first.
    go(admit(&s, "u1"));
    assert!(s.is_unlooked("u1"));
}

#[test]
fn the_cap_refuses_a_new_session_but_not_a_known_one() {
    let s = Registry::new(2, Overflow::Refuse);
    drop(go(admit(&s, "a")));
    drop(go(admit(&s, "b")));
    assert!(matches!(admit(&s, "c"), Arrival::Full));
    assert!(matches!(admit(&s, "a"), Arrival::Go(_)));
}

#[test]
fn evict_lru_picks_the_least_recently_used_idle_session() {
    let s = Registry::new(2, Overflow::EvictLru);
    drop(go(admit(&s, "a.1")));
    std::thread::sleep(Duration::from_millis(5));
    drop(go(admit(&s, "b")));
    s.touch("b");
    match admit(&s, "c") {
        Arrival::Evicted(_, retiring) => assert_eq!(retiring.victim.session_id, "a.1"),
        _ => panic!("expected an eviction"),
    }
    assert_eq!(s.len(), 2);
}

#[test]
fn a_busy_session_is_never_evicted_or_reaped() {
    let s = Registry::new(1, Overflow::EvictLru);
    let held = go(admit(&s, "a"));
    let _guard = held.try_lock().unwrap();
    assert!(matches!(admit(&s, "b"), Arrival::Full));
    assert!(s.take_idle(Duration::ZERO).is_empty());
}

#[test]
fn idle_sessions_are_taken_once() {
    let s = Registry::new(4, Overflow::Refuse);
    drop(go(admit(&s, "a")));
    std::thread::sleep(Duration::from_millis(5));
    let taken = s.take_idle(Duration::from_millis(1));
    assert_eq!(taken.len(), 1);
    assert!(s.take_idle(Duration::from_millis(1)).is_empty());
    assert!(s.is_empty());
    for retiring in taken {
        drop(retiring);
    }
    assert!(s.take_idle(Duration::ZERO).is_empty());
}

#[test]
fn a_call_for_a_session_being_retired_waits_then_starts_it_anew() {
    let s = Registry::new(4, Overflow::Refuse);
    drop(go(admit(&s, "a")));
    let mut taken = s.take_idle(Duration::ZERO);
    let retiring = taken.pop().unwrap();
    // A call arrives mid-retirement: it gets the retiring session's lock,
    // which the retirement holds.
    let waiting = go(admit(&s, "a"));
    assert!(waiting.try_lock().is_err());
    drop(retiring);
    // Its turn comes, but that session is gone: it must be admitted again.
    let _turn = waiting.try_lock().unwrap();
    assert!(!s.is_current("a", &waiting));
    let fresh = go(admit(&s, "a"));
    assert!(!Arc::ptr_eq(&fresh, &waiting));
    assert!(s.is_current("a", &fresh));
}

#[tokio::test]
async fn a_retirement_abandoned_midway_still_frees_the_name() {
    let s = Registry::new(4, Overflow::Refuse);
    drop(go(admit(&s, "a")));
    let retiring = s.take_idle(Duration::ZERO).pop().unwrap();
    // The retirement's task is aborted while it works (a reaper stopped
    // at shutdown, a call's future dropped): it never finishes its job.
    let task = tokio::spawn(async move {
        let _retiring = retiring;
        std::future::pending::<()>().await;
    });
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    // The name is free: a call gets a session of its own, not a lock
    // that leads back to the abandoned entry forever.
    let fresh = go(admit(&s, "a"));
    assert!(fresh.try_lock().is_ok());
    assert!(s.is_current("a", &fresh));
    assert_eq!(s.len(), 1);
}

#[test]
fn an_evicted_session_being_retired_does_not_count_against_the_cap() {
    let s = Registry::new(1, Overflow::EvictLru);
    drop(go(admit(&s, "a")));
    let Arrival::Evicted(b, retiring) = admit(&s, "b") else {
        panic!("expected an eviction");
    };
    assert_eq!(s.len(), 1);
    assert!(s.is_current("b", &b.lock));
    assert!(!s.is_current("a", retiring.lock()));
    drop(retiring);
    assert_eq!(s.len(), 1);
}
