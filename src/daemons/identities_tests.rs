use super::*;

fn range(first: u32, last: u32) -> Option<crate::daemons::uid_claim::Claim> {
    Some(crate::daemons::uid_claim::Claim::unlocked(UidRange {
        first,
        last,
    }))
}

#[test]
fn each_daemon_gets_a_uid_of_its_own_and_keeps_it() {
    let ids = Identities::new(range(5000, 5009), None);
    let a = ids.for_daemon("a").unwrap().unwrap();
    let b = ids.for_daemon("b").unwrap().unwrap();
    assert_ne!(a, b);
    assert_eq!(ids.for_daemon("a").unwrap(), Some(a));
    assert_eq!(ids.daemon_of(b.get()).as_deref(), Some("b"));
    assert_eq!(ids.daemon_of(5009), None);
}

#[test]
fn a_released_uid_is_the_last_to_be_given_again() {
    let ids = Identities::new(range(5000, 5002), None);
    let a = ids.for_daemon("a").unwrap().unwrap();
    ids.release("a");
    let next: Vec<u32> = ["b", "c", "d"]
        .iter()
        .map(|d| ids.for_daemon(d).unwrap().unwrap().get())
        .collect();
    assert_eq!(next, vec![5001, 5002, a.get()]);
}

#[test]
fn a_full_range_is_an_error_that_says_what_to_do() {
    let ids = Identities::new(range(5000, 5001), None);
    ids.for_daemon("a").unwrap();
    ids.for_daemon("b").unwrap();
    let err = ids.for_daemon("c").unwrap_err();
    assert!(
        err.contains("--child-uids 5000-5001") && err.contains("widen"),
        "{err}"
    );
}

#[test]
fn separation_off_gives_no_uid() {
    let ids = Identities::new(None, None);
    assert_eq!(ids.for_daemon("a").unwrap(), None);
    assert_eq!(ids.known("a"), None);
}

#[test]
fn a_later_server_reads_the_assignment_back_and_drops_what_is_not_its_range() {
    let dir = tempfile::tempdir().unwrap();
    let memo = dir.path().join("uids.json");
    let ids = Identities::new(range(5000, 5009), Some(memo.clone()));
    let a = ids.for_daemon("a").unwrap().unwrap();
    let again = Identities::new(range(5000, 5009), Some(memo.clone()));
    assert_eq!(again.known("a"), Some(a));
    assert_eq!(
        Identities::remembered_range(&memo),
        Some(UidRange {
            first: 5000,
            last: 5009
        })
    );
    // Another range: nothing of the memo applies.
    assert_eq!(
        Identities::new(range(6000, 6009), Some(memo.clone())).known("a"),
        None
    );
    // A memo edited by hand: a uid outside the range, a shared uid, a bad name.
    std::fs::write(
        &memo,
        r#"{"range":"5000-5009","daemons":{"a":5000,"b":5000,"c":1,"../x":5003}}"#,
    )
    .unwrap();
    let edited = Identities::new(range(5000, 5009), Some(memo));
    let kept: Vec<_> = ["a", "b", "c", "../x"]
        .iter()
        .filter(|d| edited.known(d).is_some())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
}

#[test]
fn a_range_is_parsed_strictly() {
    assert_eq!(
        UidRange::parse("10-20").unwrap(),
        UidRange {
            first: 10,
            last: 20
        }
    );
    for bad in ["0-10", "20-10", "10", "a-b", "10-4294967295"] {
        assert!(UidRange::parse(bad).is_err(), "{bad}");
    }
}
