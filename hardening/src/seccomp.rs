//! seccomp: an EPERM denylist over kernel surface a browser driver never
//! needs, `clone3 → ENOSYS`, and on x86_64 a guard against x32 syscall
//! numbers.
//!
//! seccompiler gives each filter one match action, so the EPERM denylist is
//! its program and the other two verdicts are a short hand-built prefix in
//! front of it: ONE program, attached once. Every attached filter costs the
//! child a BPF conversion, a JIT and the kernel's per-syscall action-cache
//! emulation; three stacked filters cost about three times that on every
//! spawn. Between the prefix and seccompiler's program, a binary search
//! decides every syscall whose arguments do not matter, so seccompiler's
//! linear chain holds only the rules with conditions
//! ([`crate::seccomp_dispatch`]). Compiled in the parent; the child only
//! attaches it.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

use crate::{
    PrepareError,
    policy::SocketFamily,
    seccomp_dispatch::{self, JEQ_K, JGE_K, LD_W_ABS, Listed, NATIVE_ARCH, RET_K, Verdicts},
    step::Step,
};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Syscalls denied outright (EPERM), whatever their arguments.
const DENIED: &[(&str, libc::c_long)] = &[
    // host and kernel state
    ("reboot", libc::SYS_reboot),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("acct", libc::SYS_acct),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("syslog", libc::SYS_syslog),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("vhangup", libc::SYS_vhangup),
    // namespaces and mounts
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("setns", libc::SYS_setns),
    ("unshare", libc::SYS_unshare),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    // tracing and introspection of other processes
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("process_madvise", libc::SYS_process_madvise),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("bpf", libc::SYS_bpf),
    // An anonymous file the child writes and then executes: Landlock's
    // execute rights cover paths, and a memfd has none.
    ("memfd_create", libc::SYS_memfd_create),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("fanotify_init", libc::SYS_fanotify_init),
    // keyrings are not namespaced
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("keyctl", libc::SYS_keyctl),
    // io_uring operations never pass through this filter
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    // file handles: a history of container breakouts
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    // NUMA policy (parity with Docker's default profile)
    ("mbind", libc::SYS_mbind),
    ("set_mempolicy", libc::SYS_set_mempolicy),
    ("migrate_pages", libc::SYS_migrate_pages),
    ("move_pages", libc::SYS_move_pages),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib),
    #[cfg(target_arch = "x86_64")]
    ("ustat", libc::SYS_ustat),
    #[cfg(target_arch = "x86_64")]
    ("sysfs", libc::SYS_sysfs),
    #[cfg(target_arch = "x86_64")]
    ("_sysctl", libc::SYS__sysctl),
];

/// `clone` flags that create namespaces (include/uapi/linux/sched.h).
const CLONE_NEW_FLAGS: &[u64] = &[
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

/// `personality(2)` values that change nothing dangerous: PER_LINUX,
/// PER_LINUX32 (0x8), UNAME26 (0x20000), both, and the 0xffffffff query.
const HARMLESS_PERSONALITIES: &[u64] = &[0x0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// The compiled filter: the hand-built prefix (x32 guard, `clone3` →
/// ENOSYS), the search over the denylist's numbers, then seccompiler's
/// program of the rules with conditions.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    program: BpfProgram,
}

/// The denied syscalls by name, for reports and tests.
pub fn denied_syscalls() -> Vec<&'static str> {
    let mut names: Vec<&str> = DENIED.iter().map(|(name, _)| *name).collect();
    names.extend([
        "clone (namespace flags)",
        "clone3 (ENOSYS)",
        "personality (non-default)",
    ]);
    names.extend([
        "prlimit64 (other processes)",
        "socket (other families; inet: other than TCP, or UDP where allowed)",
        "socketpair (non-unix)",
    ]);
    names
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, PrepareError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(compile_err)
}

fn compile_err(e: impl std::fmt::Display) -> PrepareError {
    PrepareError::Seccomp(e.to_string())
}

/// The rule map of the EPERM filter: syscall number → rules (ORed; an empty
/// list matches on the number alone).
pub(crate) fn denylist_rules(
    families: &[SocketFamily],
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, PrepareError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|(_, nr)| (*nr, Vec::new())).collect();

    let clone_rules = CLONE_NEW_FLAGS
        .iter()
        .map(|flag| {
            SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(*flag), *flag)?])
                .map_err(compile_err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);

    let personality = HARMLESS_PERSONALITIES
        .iter()
        .map(|v| cond(0, SeccompCmpOp::Ne, *v))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(
        libc::SYS_personality,
        vec![SeccompRule::new(personality).map_err(compile_err)?],
    );

    // prlimit64(pid, …) with a pid but 0 (the caller) reaches processes
    // outside the sandbox: the server's RLIMIT_FSIZE lowered to its audit
    // log's size kills it (SIGXFSZ) on its next append. libcs' get/setrlimit
    // pass 0; the caller's own pid cannot be told apart in a filter built
    // before the fork. The low 32 bits: the kernel reads a pid_t.
    rules.insert(
        libc::SYS_prlimit64,
        vec![SeccompRule::new(vec![cond(0, SeccompCmpOp::Ne, 0)?]).map_err(compile_err)?],
    );

    rules.insert(libc::SYS_socket, socket_rules(families)?);
    rules.insert(
        libc::SYS_socketpair,
        vec![
            SeccompRule::new(vec![cond(0, SeccompCmpOp::Ne, domain(SocketFamily::Unix))?])
                .map_err(compile_err)?,
        ],
    );
    Ok(rules)
}

/// socket(domain, type, protocol): what is denied of it, given the
/// families the policy allows.
fn socket_rules(families: &[SocketFamily]) -> Result<Vec<SeccompRule>, PrepareError> {
    // socket(domain, type, protocol): deny every domain not listed...
    let mut socket_rules = vec![
        SeccompRule::new(
            families
                .iter()
                .map(|f| cond(0, SeccompCmpOp::Ne, domain(*f)))
                .collect::<Result<Vec<_>, _>>()?,
        )
        .map_err(compile_err)?,
    ];
    // ...inet sockets other than TCP (and UDP where listed): Landlock's port
    // rules cover TCP alone (an MPTCP socket connected to a port they deny),
    // and UDP not at all...
    for (af, allowed) in inet_socket_types(families) {
        // A type argument that is none of the allowed types, with or without
        // SOCK_NONBLOCK and SOCK_CLOEXEC (other flags the kernel refuses).
        let mut other_type = vec![cond(0, SeccompCmpOp::Eq, af)?];
        for (ty, _) in &allowed {
            for flags in sock_type_flags() {
                other_type.push(cond(1, SeccompCmpOp::Ne, ty | flags)?);
            }
        }
        socket_rules.push(SeccompRule::new(other_type).map_err(compile_err)?);
        // An allowed type with a protocol but 0 or its own.
        for (ty, protocol) in &allowed {
            socket_rules.push(
                SeccompRule::new(vec![
                    cond(0, SeccompCmpOp::Eq, af)?,
                    cond(1, SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK), *ty)?,
                    cond(2, SeccompCmpOp::Ne, 0)?,
                    cond(2, SeccompCmpOp::Ne, *protocol)?,
                ])
                .map_err(compile_err)?,
            );
        }
    }
    // ...and netlink with any protocol but NETLINK_ROUTE.
    if families.contains(&SocketFamily::NetlinkRoute) {
        socket_rules.push(
            SeccompRule::new(vec![
                cond(0, SeccompCmpOp::Eq, domain(SocketFamily::NetlinkRoute))?,
                cond(
                    2,
                    SeccompCmpOp::Ne,
                    u64::try_from(libc::NETLINK_ROUTE).unwrap_or(0),
                )?,
            ])
            .map_err(compile_err)?,
        );
    }
    Ok(socket_rules)
}

/// The type bits of `socket(2)`'s type argument (the rest are
/// `SOCK_NONBLOCK` and `SOCK_CLOEXEC`).
const SOCK_TYPE_MASK: u64 = 0xf;

/// The flags `socket(2)` accepts in its type argument, in each combination.
fn sock_type_flags() -> [u64; 4] {
    let (nonblock, cloexec) = (as_arg(libc::SOCK_NONBLOCK), as_arg(libc::SOCK_CLOEXEC));
    [0, nonblock, cloexec, nonblock | cloexec]
}

fn as_arg(v: libc::c_int) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

fn domain(f: SocketFamily) -> u64 {
    as_arg(match f {
        SocketFamily::Unix => libc::AF_UNIX,
        SocketFamily::Inet | SocketFamily::InetTcp => libc::AF_INET,
        SocketFamily::Inet6 | SocketFamily::Inet6Tcp => libc::AF_INET6,
        SocketFamily::NetlinkRoute => libc::AF_NETLINK,
    })
}

/// Each listed inet domain with the (type, protocol) pairs it may create:
/// TCP, and UDP unless only the TCP-only family is listed.
fn inet_socket_types(families: &[SocketFamily]) -> Vec<(u64, Vec<(u64, u64)>)> {
    let tcp = (as_arg(libc::SOCK_STREAM), as_arg(libc::IPPROTO_TCP));
    let udp = (as_arg(libc::SOCK_DGRAM), as_arg(libc::IPPROTO_UDP));
    [
        (SocketFamily::Inet, SocketFamily::InetTcp),
        (SocketFamily::Inet6, SocketFamily::Inet6Tcp),
    ]
    .into_iter()
    .filter_map(|(with_udp, tcp_only)| {
        if families.contains(&with_udp) {
            Some((domain(with_udp), vec![tcp, udp]))
        } else if families.contains(&tcp_only) {
            Some((domain(tcp_only), vec![tcp]))
        } else {
            None
        }
    })
    .collect()
}

/// Parent side: compile the filter.
pub(crate) fn build(families: &[SocketFamily]) -> Result<Filters, PrepareError> {
    let rules = denylist_rules(families)?;
    let listed = rules
        .iter()
        .map(|(nr, chain)| {
            let what = if chain.is_empty() {
                Listed::Denied
            } else {
                Listed::Conditional
            };
            u32::try_from(*nr).map(|nr| (nr, what)).map_err(compile_err)
        })
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    let verdicts = Verdicts {
        allow: u32::from(SeccompAction::Allow),
        deny: u32::from(SeccompAction::Errno(errno_u32(libc::EPERM))),
    };
    let search = seccomp_dispatch::search(&listed, verdicts);
    // The search decides the rest; seccompiler's chain costs four
    // instructions per syscall in it.
    let conditional: BTreeMap<i64, Vec<SeccompRule>> = rules
        .into_iter()
        .filter(|(_, chain)| !chain.is_empty())
        .collect();
    let denylist: BpfProgram = SeccompFilter::new(
        conditional,
        SeccompAction::Allow,
        SeccompAction::Errno(errno_u32(libc::EPERM)),
        ARCH,
    )
    .map_err(compile_err)?
    .try_into()
    .map_err(compile_err)?;
    // The prefix and the search only return or fall through to their end,
    // and seccompiler's jumps are relative within its own program, which
    // starts by reloading the arch and the number: appending it unchanged is
    // sound.
    let mut program = prefix();
    program.extend(search);
    program.extend(denylist);
    // The kernel's limit (BPF_MAXINSNS); seccompiler checked only its part.
    if program.len() > 4096 {
        return Err(PrepareError::Seccomp(format!(
            "the seccomp program has {} instructions, more than the kernel's 4096",
            program.len()
        )));
    }
    Ok(Filters { program })
}

fn errno_u32(errno: i32) -> u32 {
    u32::try_from(errno).unwrap_or(1)
}

/// The verdicts seccompiler cannot add to an EPERM filter, as classic BPF
/// that either returns or falls through into the denylist:
///
/// - x86_64 only: on kernels with `CONFIG_X86_X32_ABI`, x32 syscalls carry
///   the same `AUDIT_ARCH_X86_64` with bit 0x40000000 set in the number, so
///   a denylist keyed on x86_64 numbers would miss them: EPERM for any
///   number ≥ 0x40000000 on x86_64.
/// - `clone3` → ENOSYS: it hides its flags behind a pointer no filter can
///   read; ENOSYS makes every libc fall back to `clone(2)`, whose flags the
///   denylist does check.
///
/// Any other arch falls through untouched (past the search, which checks
/// the arch too) to seccompiler's own arch check.
fn prefix() -> BpfProgram {
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const RET_ERRNO: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let clone3 = u32::try_from(libc::SYS_clone3).unwrap_or(u32::MAX);
    if cfg!(target_arch = "x86_64") {
        vec![
            op(LD_W_ABS, 0, 0, 4),                               // 0: A = seccomp_data.arch
            op(JEQ_K, 0, 5, NATIVE_ARCH),                        // 1: not x86_64 → 7 (denylist)
            op(LD_W_ABS, 0, 0, 0),                               // 2: A = seccomp_data.nr
            op(JGE_K, 0, 1, X32_SYSCALL_BIT),                    // 3: x32 number? → 4, else 5
            op(RET_K, 0, 0, RET_ERRNO | errno_u32(libc::EPERM)), // 4
            op(JEQ_K, 0, 1, clone3),                             // 5: clone3? → 6, else 7
            op(RET_K, 0, 0, RET_ERRNO | errno_u32(libc::ENOSYS)), // 6
        ]
    } else {
        // Other arches have no x32 twin. The number is checked before
        // seccompiler's arch check: a compat call that happens to carry
        // clone3's number gets ENOSYS instead of being killed — refused either way.
        vec![
            op(LD_W_ABS, 0, 0, 0),                                // 0: A = seccomp_data.nr
            op(JEQ_K, 0, 1, clone3),                              // 1: clone3? → 2, else 3
            op(RET_K, 0, 0, RET_ERRNO | errno_u32(libc::ENOSYS)), // 2
        ]
    }
}

/// Child side: attach the filter. Allocation-free.
pub(crate) fn apply(filters: &Filters) -> std::io::Result<()> {
    if seccompiler::apply_filter(&filters.program).is_err() {
        return Err(Step::Seccomp.last_os_error());
    }
    Ok(())
}

#[cfg(test)]
#[path = "seccomp_tests.rs"]
mod tests;
