use super::*;

#[test]
fn only_the_refusal_line_with_the_refusal_status_is_a_failure() {
    let line = format!("{STDERR_PREFIX}cannot enforce Landlock: EPERM\nmore");
    assert_eq!(
        failure(Some(EXIT_REFUSED), line.as_bytes()).as_deref(),
        Some("cannot enforce Landlock: EPERM")
    );
    // The program's own exit 126, or the line under another status.
    assert_eq!(failure(Some(EXIT_REFUSED), b"agent-browser: no"), None);
    assert_eq!(failure(Some(1), line.as_bytes()), None);
    assert_eq!(failure(None, line.as_bytes()), None);
}

#[test]
fn a_policy_survives_the_trip_through_argv() {
    let policy = Policy {
        read_exec_paths: vec!["/usr".into()],
        connect_tcp_ports: vec![9222],
        identity: Some(crate::Identity { uid: 1, gid: 2 }),
        rlimits: vec![crate::Limit {
            resource: crate::Resource::Core,
            value: 0,
        }],
        ..Policy::default()
    };
    let trampoline = Trampoline::new("/proc/self/exe", &policy).unwrap();
    let command = trampoline.command(Path::new("/usr/bin/true"));
    let argv: Vec<_> = command.get_args().collect();
    assert_eq!(argv.len(), 2);
    let back: Policy = serde_json::from_str(argv[0].to_str().unwrap()).unwrap();
    assert_eq!(back, policy);
    assert_eq!(argv[1], "/usr/bin/true");
}

#[test]
fn each_command_may_switch_to_an_identity_of_its_own() {
    let policy = Policy {
        umask: Some(0o077),
        ..Policy::default()
    };
    let trampoline = Trampoline::new("/proc/self/exe", &policy).unwrap();
    let id = crate::Identity { uid: 7, gid: 8 };
    let command = trampoline
        .command_as(Path::new("/usr/bin/true"), Some(id))
        .unwrap();
    let argv: Vec<_> = command.get_args().collect();
    let back: Policy = serde_json::from_str(argv[0].to_str().unwrap()).unwrap();
    assert_eq!(back.identity, Some(id));
    assert_eq!(back.umask, Some(0o077));
    // Without one, the policy's own (here none) is what travels.
    let plain = trampoline
        .command_as(Path::new("/usr/bin/true"), None)
        .unwrap();
    let argv: Vec<_> = plain.get_args().collect();
    let back: Policy = serde_json::from_str(argv[0].to_str().unwrap()).unwrap();
    assert_eq!(back.identity, None);
}
