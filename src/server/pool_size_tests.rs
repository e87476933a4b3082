use super::*;

fn arrivals_at(offsets_ms: &[u64]) -> (Arrivals, Instant) {
    let start = Instant::now();
    let mut a = Arrivals::default();
    for ms in offsets_ms {
        a.note(start + Duration::from_millis(*ms));
    }
    (a, start)
}

const AUTO: PoolSize = PoolSize::Auto { cap: 16 };

#[test]
fn a_self_sized_pool_wants_nothing_before_the_first_new_session() {
    let (a, _) = arrivals_at(&[]);
    assert_eq!(target(AUTO, &a, None), 0);
}

#[test]
fn one_new_session_asks_for_the_floor() {
    let (a, _) = arrivals_at(&[0]);
    assert_eq!(target(AUTO, &a, None), FLOOR);
}

#[test]
fn a_burst_asks_for_as_many_as_arrived_within_the_span() {
    let (a, _) = arrivals_at(&[0, 200, 400, 600, 800, 1000, 1200, 1400]);
    assert_eq!(a.peak(), 8);
    assert_eq!(target(AUTO, &a, None), 8);
    assert!(a.is_frequent());
}

#[test]
fn sessions_a_second_apart_ask_for_a_few_not_for_all_of_them() {
    let (a, _) = arrivals_at(&[0, 1000, 2000, 3000, 4000, 5000]);
    assert_eq!(target(AUTO, &a, None), 3);
}

#[test]
fn sessions_far_apart_are_not_frequent() {
    let (a, _) = arrivals_at(&[0, 5000]);
    assert!(!a.is_frequent());
    assert_eq!(target(AUTO, &a, None), FLOOR);
}

#[test]
fn the_cap_and_memory_bound_the_size() {
    let (a, _) = arrivals_at(&[0, 100, 200, 300, 400, 500]);
    assert_eq!(target(PoolSize::Auto { cap: 4 }, &a, None), 4);
    assert_eq!(target(AUTO, &a, Some(2)), 2);
    assert_eq!(target(AUTO, &a, Some(0)), 0, "no memory: no pool");
}

#[test]
fn without_arrivals_for_the_idle_time_the_pool_falls_back_to_its_floor() {
    let (mut a, start) = arrivals_at(&[0, 100, 200, 300]);
    a.forget_older_than(Duration::from_secs(10), start + Duration::from_secs(11));
    assert_eq!(a.peak(), 0);
    assert_eq!(target(AUTO, &a, None), FLOOR);
}

#[test]
fn a_pinned_size_is_kept_whatever_arrives() {
    let (a, _) = arrivals_at(&[]);
    assert_eq!(target(PoolSize::Pinned(2), &a, Some(0)), 2);
    assert!(!PoolSize::Pinned(0).is_enabled());
    assert!(AUTO.is_enabled());
}

#[test]
fn mem_available_is_read_in_bytes() {
    let meminfo = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   2048 kB\n";
    assert_eq!(mem_available(meminfo), Some(2048 * 1024));
    assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
}

#[test]
fn the_least_headroom_of_the_cgroup_and_its_ancestors_counts() {
    let root = std::env::temp_dir().join(format!("bs-cgroup-{}", std::process::id()));
    let leaf = root.join("outer/inner");
    std::fs::create_dir_all(&leaf).unwrap();
    std::fs::write(root.join("outer/memory.max"), "1000\n").unwrap();
    std::fs::write(root.join("outer/memory.current"), "900\n").unwrap();
    std::fs::write(leaf.join("memory.max"), "max\n").unwrap();
    std::fs::write(leaf.join("memory.current"), "10\n").unwrap();
    assert_eq!(cgroup_headroom("0::/outer/inner\n", &root), Some(100));
    std::fs::write(root.join("outer/memory.max"), "max\n").unwrap();
    assert_eq!(
        cgroup_headroom("0::/outer/inner\n", &root),
        None,
        "no limit set"
    );
    assert_eq!(cgroup_headroom("1:cpu:/x\n", &root), None, "not cgroup v2");
    std::fs::remove_dir_all(&root).unwrap();
}
