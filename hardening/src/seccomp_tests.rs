use super::*;

#[test]
fn denylist_holds_each_dangerous_syscall_with_no_conditions() {
    let rules = denylist_rules(&[SocketFamily::Unix]).unwrap();
    for nr in [
        libc::SYS_ptrace,
        libc::SYS_mount,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_bpf,
        libc::SYS_keyctl,
        libc::SYS_io_uring_setup,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
    ] {
        assert_eq!(rules.get(&nr).map(Vec::len), Some(0), "syscall {nr}");
    }
    assert_eq!(rules[&libc::SYS_clone].len(), CLONE_NEW_FLAGS.len());
}

#[test]
fn every_filter_compiles_for_this_architecture() {
    let filters = build(&[
        SocketFamily::Unix,
        SocketFamily::Inet,
        SocketFamily::NetlinkRoute,
    ])
    .unwrap();
    assert!(filters.program.len() > prefix().len());
    assert_eq!(&filters.program[..prefix().len()], &prefix()[..]);
}

/// Run a classic BPF seccomp `program` on one syscall: `Ok(ret)` when
/// it returns, `Err(pc)` when it runs off its end at `pc`.
fn run(program: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> Result<u32, usize> {
    run_counted(program, arch, nr, args).0
}

/// [`run`], and how many instructions it executed.
fn run_counted(
    program: &[sock_filter],
    arch: u32,
    nr: u32,
    args: [u64; 6],
) -> (Result<u32, usize>, usize) {
    // struct seccomp_data: nr, arch, instruction pointer, args (LE).
    let word = |offset: u32| -> u32 {
        match offset {
            0 => nr,
            4 => arch,
            16..=63 => {
                let arg = args[usize::try_from((offset - 16) / 8).unwrap()];
                let shift = if offset.is_multiple_of(8) { 0 } else { 32 };
                u32::try_from((arg >> shift) & 0xffff_ffff).unwrap()
            }
            other => panic!("unexpected offset {other}"),
        }
    };
    let (mut pc, mut a, mut steps) = (0usize, 0u32, 0usize);
    while pc < program.len() {
        let i = &program[pc];
        pc += 1;
        steps += 1;
        let jump = |taken: bool| usize::from(if taken { i.jt } else { i.jf });
        match i.code {
            0x20 => a = word(i.k),                       // LD W ABS
            0x54 => a &= i.k,                            // ALU AND K
            0x05 => pc += usize::try_from(i.k).unwrap(), // JA
            0x15 => pc += jump(a == i.k),                // JEQ K
            0x25 => pc += jump(a > i.k),                 // JGT K
            0x35 => pc += jump(a >= i.k),                // JGE K
            0x06 => return (Ok(i.k), steps),             // RET K
            other => panic!("unexpected opcode {other:#x}"),
        }
    }
    (Err(pc), steps)
}

/// Where the prefix sends a syscall (the denylist must start exactly at
/// its end).
fn run_prefix(arch: u32, nr: u32) -> Result<u32, usize> {
    run(&prefix(), arch, nr, [0; 6])
}

const ALLOW: u32 = 0x7fff_0000;
const NATIVE: u32 = NATIVE_ARCH;
/// The other of the two arches this crate builds for: its numbers mean
/// other syscalls.
const FOREIGN: u32 = 0xc000_00b7 ^ 0xc000_003e ^ NATIVE;
const EPERM: u32 = 0x0005_0000 | 1;

/// The verdict of the whole filter for `families` on one native syscall.
fn verdict(families: &[SocketFamily], nr: libc::c_long, args: [u64; 6]) -> u32 {
    let program = build(families).unwrap().program;
    run(&program, NATIVE, u32::try_from(nr).unwrap(), args).unwrap()
}

#[test]
fn prlimit64_reaches_the_caller_only() {
    let prlimit = |pid: u64| {
        verdict(
            &[SocketFamily::Unix],
            libc::SYS_prlimit64,
            [pid, 1, 0, 0, 0, 0],
        )
    };
    assert_eq!(prlimit(0), ALLOW);
    assert_eq!(prlimit(1), EPERM);
    assert_eq!(prlimit(4_194_304), EPERM);
    assert_eq!(prlimit(u64::from(u32::MAX)), EPERM);
    // The kernel reads a pid_t: upper bits over 0 are still the caller.
    assert_eq!(prlimit(1 << 32), ALLOW);
    assert_eq!(prlimit((1 << 32) | 1), EPERM);
    // The legacy calls act on the caller only.
    assert_eq!(
        verdict(
            &[SocketFamily::Unix],
            libc::SYS_setrlimit,
            [1, 0, 0, 0, 0, 0]
        ),
        ALLOW
    );
}

#[test]
fn inet_sockets_are_tcp_and_udp_only_and_tcp_only_without_udp() {
    use std::collections::BTreeSet;
    let arg = |v: libc::c_int| u64::try_from(v).unwrap();
    let socket = |families: &[SocketFamily], af, ty, proto| {
        verdict(
            families,
            libc::SYS_socket,
            [arg(af), arg(ty), arg(proto), 0, 0, 0],
        )
    };
    let flags = libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    let with_flags = |ty| [0, libc::SOCK_NONBLOCK, libc::SOCK_CLOEXEC, flags].map(|f| ty | f);
    let (stream, dgram) = (libc::SOCK_STREAM | flags, libc::SOCK_DGRAM | flags);
    // Every type the filter lets through, of the 16 in each flag combination.
    let allowed_types = |families: &[SocketFamily], af| {
        (0..16)
            .flat_map(with_flags)
            .filter(|ty| socket(families, af, *ty, 0) == ALLOW)
            .collect::<BTreeSet<_>>()
    };
    let tcp = BTreeSet::from(with_flags(libc::SOCK_STREAM));
    let tcp_and_udp = &tcp | &BTreeSet::from(with_flags(libc::SOCK_DGRAM));
    for (af, with_udp, tcp_only) in [
        (libc::AF_INET, SocketFamily::Inet, SocketFamily::InetTcp),
        (libc::AF_INET6, SocketFamily::Inet6, SocketFamily::Inet6Tcp),
    ] {
        assert_eq!(allowed_types(&[tcp_only], af), tcp);
        assert_eq!(allowed_types(&[with_udp], af), tcp_and_udp);
        assert_eq!(allowed_types(&[tcp_only, with_udp], af), tcp_and_udp);
        assert!(allowed_types(&[SocketFamily::Unix], af).is_empty());
        for families in [&[with_udp][..], &[tcp_only]] {
            assert_eq!(socket(families, af, stream, libc::IPPROTO_TCP), ALLOW);
            // Landlock's TCP port rules do not apply to these.
            assert_eq!(socket(families, af, stream, libc::IPPROTO_MPTCP), EPERM);
            assert_eq!(socket(families, af, stream, libc::IPPROTO_SCTP), EPERM);
            assert_eq!(socket(families, af, dgram, libc::IPPROTO_ICMP), EPERM);
        }
        assert_eq!(socket(&[with_udp], af, dgram, libc::IPPROTO_UDP), ALLOW);
        assert_eq!(socket(&[with_udp], af, dgram, libc::IPPROTO_TCP), EPERM);
    }
    let browser_shell = [SocketFamily::Unix, SocketFamily::InetTcp];
    assert_eq!(
        socket(&browser_shell, libc::AF_UNIX, libc::SOCK_DGRAM, 0),
        ALLOW
    );
    assert_eq!(
        socket(&browser_shell, libc::AF_PACKET, libc::SOCK_RAW, 0),
        EPERM
    );
}

#[test]
fn the_prefix_returns_its_two_verdicts_and_otherwise_falls_into_the_denylist() {
    let end = prefix().len();
    let errno = |e: i32| 0x0005_0000 | errno_u32(e);
    let clone3 = u32::try_from(libc::SYS_clone3).unwrap();
    let arch = NATIVE;
    assert_eq!(run_prefix(arch, clone3), Ok(errno(libc::ENOSYS)));
    for nr in [
        libc::SYS_read,
        libc::SYS_ptrace,
        libc::SYS_clone,
        libc::SYS_socket,
    ] {
        let nr = u32::try_from(nr).unwrap();
        assert_eq!(run_prefix(arch, nr), Err(end), "syscall {nr}");
    }
    if cfg!(target_arch = "x86_64") {
        // x32 numbers, including x32 clone3, never reach the denylist.
        assert_eq!(
            run_prefix(NATIVE, 0x4000_0000 | 101),
            Ok(errno(libc::EPERM))
        );
        assert_eq!(
            run_prefix(NATIVE, 0x4000_0000 | clone3),
            Ok(errno(libc::EPERM))
        );
        // i386 numbers go to seccompiler's arch check untouched.
        assert_eq!(run_prefix(0x4000_0003, clone3), Err(end));
    }
}

/// The filter as it was before the search: the prefix, then
/// seccompiler's chain.
fn without_search(families: &[SocketFamily]) -> BpfProgram {
    let chain: BpfProgram = SeccompFilter::new(
        denylist_rules(families).unwrap(),
        SeccompAction::Allow,
        SeccompAction::Errno(errno_u32(libc::EPERM)),
        ARCH,
    )
    .unwrap()
    .try_into()
    .unwrap();
    let mut program = prefix();
    program.extend(chain);
    program
}

/// Argument vectors that reach every rule of the denylist: namespace
/// flags, personalities, prlimit64's pid, and socket triples.
fn interesting_args() -> Vec<[u64; 6]> {
    let arg = |v: libc::c_int| u64::try_from(v).unwrap();
    let mut all = vec![[0; 6], [u64::MAX; 6], [1, 1, 1, 1, 1, 1]];
    all.extend(CLONE_NEW_FLAGS.iter().map(|f| [*f | 0x11, 0, 0, 0, 0, 0]));
    all.extend(
        HARMLESS_PERSONALITIES
            .iter()
            .chain(&[0x1, 0x40_0000])
            .map(|p| [*p, 0, 0, 0, 0, 0]),
    );
    all.extend([1 << 32, (1 << 32) | 1, 4_194_304].map(|pid| [pid, 1, 0, 0, 0, 0]));
    let domains = [
        libc::AF_UNIX,
        libc::AF_INET,
        libc::AF_INET6,
        libc::AF_NETLINK,
        libc::AF_PACKET,
    ];
    let protocols = [
        0,
        libc::IPPROTO_TCP,
        libc::IPPROTO_UDP,
        libc::IPPROTO_MPTCP,
        libc::IPPROTO_ICMP,
        libc::NETLINK_ROUTE,
        libc::NETLINK_AUDIT,
    ];
    for af in domains {
        for ty in 0..16 {
            for flags in sock_type_flags() {
                for protocol in protocols {
                    all.push([arg(af), arg(ty) | flags, arg(protocol), 0, 0, 0]);
                }
            }
        }
    }
    all
}

#[test]
fn the_search_changes_no_verdict_of_the_filter() {
    let families_sets: [&[SocketFamily]; 3] = [
        &[SocketFamily::Unix],
        &[SocketFamily::Unix, SocketFamily::InetTcp],
        &[
            SocketFamily::Unix,
            SocketFamily::Inet,
            SocketFamily::Inet6,
            SocketFamily::NetlinkRoute,
        ],
    ];
    let args = interesting_args();
    let few = &args[..3];
    // Every number of every arch the kernel has, x32 numbers and edges;
    // i386 and a foreign arch, whose numbers mean other syscalls.
    let numbers: Vec<u32> = (0..1100)
        .chain(0x4000_0000..0x4000_0000 + 1100)
        .chain([0x3fff_ffff, 0x7fff_ffff, u32::MAX])
        .collect();
    let arches = [NATIVE, 0x4000_0003, FOREIGN, 0];
    for families in families_sets {
        let listed = denylist_rules(families).unwrap();
        let (with, without) = (build(families).unwrap().program, without_search(families));
        for arch in arches {
            for nr in &numbers {
                let listed_here = listed.contains_key(&i64::from(*nr));
                for a in if listed_here { &args[..] } else { few } {
                    assert_eq!(
                        run(&with, arch, *nr, *a),
                        run(&without, arch, *nr, *a),
                        "families {families:?}, arch {arch:#x}, nr {nr}, args {a:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_syscall_whose_arguments_do_not_matter_is_decided_without_the_chain() {
    let families = [SocketFamily::Unix, SocketFamily::InetTcp];
    let with = build(&families).unwrap().program;
    let without = without_search(&families);
    for nr in [
        libc::SYS_read,
        libc::SYS_openat,
        libc::SYS_futex,
        libc::SYS_epoll_wait,
    ] {
        let nr = u32::try_from(nr).unwrap();
        let (verdict, steps) = run_counted(&with, NATIVE, nr, [0; 6]);
        let (old_verdict, old_steps) = run_counted(&without, NATIVE, nr, [0; 6]);
        assert_eq!(
            (verdict, old_verdict),
            (Ok(ALLOW), Ok(ALLOW)),
            "syscall {nr}"
        );
        assert!(steps <= 25, "syscall {nr}: {steps} instructions");
        assert!(
            old_steps > 100,
            "syscall {nr}: the chain took only {old_steps}"
        );
    }
    // Denied outright, as quickly.
    for nr in [libc::SYS_ptrace, libc::SYS_mount, libc::SYS_bpf] {
        let nr = u32::try_from(nr).unwrap();
        let (verdict, steps) = run_counted(&with, NATIVE, nr, [0; 6]);
        assert_eq!(verdict, Ok(EPERM), "syscall {nr}");
        assert!(steps <= 25, "syscall {nr}: {steps} instructions");
    }
    // The chain holds only the rules with conditions.
    assert!(
        with.len() < without.len(),
        "{} ≥ {}",
        with.len(),
        without.len()
    );
}
