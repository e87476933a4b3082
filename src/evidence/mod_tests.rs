//! What the service remembers of sessions stays bounded without forgetting
//! a session whose look is still running.

use super::*;

fn name(n: usize) -> DaemonName {
    DaemonName::checked(&format!("s{n}")).expect("a daemon name")
}

fn service() -> Arc<Inner> {
    let bounds = Bounds {
        per_session: 1,
        total: 1,
    };
    Witnesses::new(Level::Digests, None, bounds)
        .inner
        .expect("on at digests")
}

fn remembered(inner: &Inner, daemon: &DaemonName) -> bool {
    lock(&inner.sessions).contains_key(daemon)
}

#[tokio::test]
async fn past_the_bound_the_least_recently_used_idle_session_is_forgotten() {
    let inner = service();
    for n in 0..MAX_SESSIONS_REMEMBERED {
        inner.seen(&name(n), |_| ());
    }
    // s0 looks (its lock is held); s1 is then the least recently used idle one.
    let looking = inner.seen(&name(0), |seen| Arc::clone(&seen.looking));
    let _held = looking.lock_owned().await;
    inner.seen(&name(2), |_| ());
    inner.seen(&name(MAX_SESSIONS_REMEMBERED), |_| ());
    assert!(
        remembered(&inner, &name(0)),
        "a session whose look runs was forgotten"
    );
    assert!(
        !remembered(&inner, &name(1)),
        "the least recently used idle session stayed"
    );
    assert!(remembered(&inner, &name(2)));
    assert_eq!(lock(&inner.sessions).len(), MAX_SESSIONS_REMEMBERED);
}

#[tokio::test]
async fn a_session_whose_look_runs_is_kept_even_past_the_bound() {
    let inner = service();
    let mut held = Vec::new();
    for n in 0..MAX_SESSIONS_REMEMBERED {
        let looking = inner.seen(&name(n), |seen| Arc::clone(&seen.looking));
        held.push(looking.lock_owned().await);
    }
    inner.seen(&name(MAX_SESSIONS_REMEMBERED), |_| ());
    assert!((0..=MAX_SESSIONS_REMEMBERED).all(|n| remembered(&inner, &name(n))));
}
