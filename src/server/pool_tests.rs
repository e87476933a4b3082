use super::*;

fn pool(size: usize) -> Pool {
    Pool::new(PoolSettings {
        size: PoolSize::Pinned(size),
        idle: Duration::from_secs(600),
    })
}

fn exited_pid() -> u32 {
    let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_pooled_daemon_is_handed_out_once_oldest_first() {
    let p = pool(2);
    p.put(Pooled::for_test("pool-a"));
    p.put(Pooled::for_test("pool-b"));
    assert_eq!(p.take().map(|d| d.name).as_deref(), Some("pool-a"));
    assert_eq!(p.take().map(|d| d.name).as_deref(), Some("pool-b"));
    assert_eq!(p.take(), None);
    assert_eq!(p.missing(), 2);
}

#[test]
fn a_pooled_daemon_that_exited_is_skipped_and_kept_for_closing() {
    let p = pool(2);
    p.put(Pooled {
        pid: exited_pid(),
        ..Pooled::for_test("pool-dead")
    });
    p.put(Pooled::for_test("pool-live"));
    assert_eq!(p.take().map(|d| d.name).as_deref(), Some("pool-live"));
    let (dead, unused) = p.to_close(false);
    assert_eq!(
        dead.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["pool-dead"]
    );
    assert!(unused.is_empty());
}

#[test]
fn a_pool_unused_for_its_idle_time_is_emptied_until_a_session_asks() {
    let p = Pool::new(PoolSettings {
        size: PoolSize::Pinned(1),
        idle: Duration::ZERO,
    });
    p.put(Pooled::for_test("pool-a"));
    std::thread::sleep(Duration::from_millis(2));
    let (_, unused) = p.to_close(false);
    assert_eq!(unused.len(), 1);
    assert_eq!(p.missing(), 0, "a resting pool is not refilled");
    assert_eq!(p.take(), None);
    assert_eq!(p.missing(), 1, "asking wakes it");
}

#[test]
fn a_pool_of_zero_hands_out_nothing() {
    let p = pool(0);
    p.put(Pooled::for_test("pool-a"));
    assert!(!p.is_enabled());
    assert_eq!(p.take(), None);
}

#[tokio::test]
async fn the_wait_for_an_empty_pool_ends_when_the_last_daemon_is_taken() {
    let p = std::sync::Arc::new(pool(2));
    p.put(Pooled::for_test("pool-a"));
    p.put(Pooled::for_test("pool-b"));
    let waiting = {
        let p = std::sync::Arc::clone(&p);
        tokio::spawn(async move { p.until_empty().await })
    };
    assert!(p.take().is_some());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "one daemon is still ready");
    assert!(p.take().is_some());
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the last take ended the wait")
        .unwrap();
}

#[test]
fn a_self_sized_pool_closes_only_what_it_no_longer_wants() {
    let p = Pool::new(PoolSettings {
        size: PoolSize::Auto { cap: 4 },
        idle: Duration::from_secs(600),
    });
    let (dead, unused) = p.to_close(false);
    assert!(
        dead.is_empty() && unused.is_empty(),
        "an empty pool closes nothing"
    );
    assert_eq!(p.missing(), 0, "nothing before the first new session");
    assert_eq!(p.take(), None);
    p.put(Pooled::for_test("pool-a"));
    p.put(Pooled::for_test("pool-b"));
    let (_, unused) = p.to_close(false);
    assert_eq!(
        unused.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["pool-b"],
        "one arrival wants one: the newer one goes"
    );
}

#[test]
fn a_stopped_pool_starts_no_warm_up() {
    let p = pool(2);
    let name = DaemonName::checked("pool-a").unwrap();
    assert!(p.begin_warming(&name));
    assert!(p.stop(), "a warm-up was under way");
    assert!(!p.begin_warming(&DaemonName::checked("pool-b").unwrap()));
    assert!(p.is_warming());
}

#[test]
fn a_warm_up_that_ends_during_a_stop_is_in_the_queue_as_it_ends() {
    let p = pool(2);
    let name = DaemonName::checked("pool-a").unwrap();
    assert!(p.begin_warming(&name));
    assert!(p.stop());
    p.end_warming(&name, Some(Pooled::for_test("pool-a")));
    assert!(!p.is_warming());
    let (_, unused) = p.to_close(true);
    assert_eq!(
        unused.into_iter().map(|d| d.name).collect::<Vec<_>>(),
        ["pool-a"]
    );
}
