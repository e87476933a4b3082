use super::*;

fn policy(degraded: Degraded) -> Policy {
    Policy {
        read_write_paths: vec![PathBuf::from("/tmp")],
        degraded,
        ..Policy::default()
    }
}

#[test]
fn a_kernel_without_landlock_is_refused_unless_degraded_is_allowed() {
    let err = prepare_for(&policy(Degraded::Refuse), 0, true).unwrap_err();
    assert!(
        matches!(
            err,
            PrepareError::LandlockTooOld {
                found: 0,
                required: 6
            }
        ),
        "{err}"
    );
    let prepared = prepare_for(&policy(Degraded::Allow), 0, true).unwrap();
    assert!(prepared.report().is_degraded());
    assert!(matches!(prepared.report().landlock, Layer::Off(_)));
    assert!(
        prepared.report().summary().contains("off"),
        "{}",
        prepared.report().summary()
    );
}

#[test]
fn an_old_landlock_abi_is_refused_unless_degraded_is_allowed() {
    assert!(matches!(
        prepare_for(&policy(Degraded::Refuse), 3, true),
        Err(PrepareError::LandlockTooOld { found: 3, .. })
    ));
    let report = prepare_for(&policy(Degraded::Allow), 3, true)
        .unwrap()
        .report()
        .clone();
    assert!(matches!(report.landlock, Layer::Partial(_)), "{report:?}");
    assert!(report.is_degraded());
}

#[test]
fn a_kernel_without_seccomp_is_refused_unless_degraded_is_allowed() {
    assert!(matches!(
        prepare_for(&policy(Degraded::Refuse), 7, false),
        Err(PrepareError::SeccompUnavailable)
    ));
    let report = prepare_for(&policy(Degraded::Allow), 7, false)
        .unwrap()
        .report()
        .clone();
    assert!(
        matches!(report.seccomp, Layer::Off(_)) && report.is_degraded(),
        "{report:?}"
    );
}
