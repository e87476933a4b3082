//! Escape attempts a confined process makes to prove its own confinement.
//!
//! Each probe performs one real operation and reports `ok` or the errno
//! name it failed with. Run unconfined, most succeed (or fail differently);
//! run confined, each must fail with the errno of the layer that stops it —
//! errnos the operation would not produce by chance, so a pass proves the
//! layer fired.

use std::{
    io,
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    time::Duration,
};

/// What to probe beyond the fixed list.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    /// The TCP port the process is allowed to connect to.
    pub allowed_port: Option<u16>,
    /// A directory writes must succeed in.
    pub writable_dir: Option<PathBuf>,
    /// Extra files to try to append to (they must not be writable).
    pub protected_files: Vec<PathBuf>,
    /// Ports that must be out of reach (e.g. Chromium's DevTools, which
    /// can do what the confinement forbids).
    pub forbidden_ports: Vec<u16>,
}

/// One probe and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The probe's name.
    pub name: String,
    /// `ok`, an errno name (`EACCES`), or a read-back value.
    pub result: String,
}

fn outcome(name: impl Into<String>, result: io::Result<()>) -> Outcome {
    Outcome {
        name: name.into(),
        result: match result {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.raw_os_error().map_or_else(|| e.to_string(), errno_name),
        },
    }
}

/// A probe's preparation failed: reported as such, never as an errno the
/// probed operation could be expected to fail with.
fn setup(what: &str, e: &io::Error) -> io::Error {
    io::Error::other(format!("setup failed: {what}: {e}"))
}

/// What each probe must report inside a full confinement (root, Landlock ABI
/// ≥ 6, the probed port allowed, the probed directory writable, protected
/// files outside every writable root, sockets: unix and IPv4 TCP only).
pub const EXPECTED_WHEN_CONFINED: &[(&str, &str)] = &[
    // Landlock, files
    ("write_in_writable_dir", "ok"),
    ("write_through_symlink_into_etc", "EACCES"),
    ("write_root_home", "EACCES"),
    ("append_etc_passwd", "EACCES"),
    ("read_root_home", "EACCES"),
    // Landlock, TCP
    ("tcp_connect_allowed_port", "ok"),
    ("tcp_connect_other_port", "EACCES"),
    ("tcp_bind", "EACCES"),
    // MPTCP is not TCP to Landlock: its port rules would not apply
    ("mptcp_connect_other_port", "EPERM"),
    // Landlock, execute: writable roots are not executable
    ("exec_written_file", "EACCES"),
    // seccomp: nor is a file written into memory (a memfd has no path)
    ("exec_memfd", "EPERM"),
    // seccomp, socket families
    ("socket_unix", "ok"),
    ("socket_inet", "ok"),
    ("socket_packet", "EPERM"),
    ("socket_netlink_audit", "EPERM"),
    ("socket_vsock", "EPERM"),
    // seccomp, socket types: UDP is invisible to Landlock
    ("udp_sendto", "EPERM"),
    // seccomp, kernel surface
    ("ptrace_traceme", "EPERM"),
    ("mount_tmpfs", "EPERM"),
    ("unshare_newuser", "EPERM"),
    ("clone_newuser", "EPERM"),
    ("clone3", "ENOSYS"),
    ("bpf", "EPERM"),
    ("io_uring_setup", "EPERM"),
    ("keyctl", "EPERM"),
    ("perf_event_open", "EPERM"),
    ("personality_addr_no_randomize", "EPERM"),
    // Landlock signal scope
    ("kill_parent", "EPERM"),
    ("kill_self", "ok"),
    // seccomp: another process's limits (the server's RLIMIT_FSIZE) are out
    // of reach; its own stay settable
    ("prlimit_parent", "EPERM"),
    ("prlimit_self", "ok"),
    // clone3 → ENOSYS must not break threads
    ("thread_spawn", "ok"),
    // read-backs
    ("securebits", "0xef"),
    ("status_CapInh", "0000000000000000"),
    ("status_CapPrm", "0000000000000000"),
    ("status_CapEff", "0000000000000000"),
    ("status_CapBnd", "0000000000000000"),
    ("status_CapAmb", "0000000000000000"),
    ("status_NoNewPrivs", "1"),
    ("status_Seccomp", "2"),
];

/// Compare probe results with [`EXPECTED_WHEN_CONFINED`] (and every
/// `append_protected_*` and `tcp_connect_forbidden_*` with `EACCES`);
/// return one line per mismatch.
pub fn gaps(results: &[Outcome]) -> Vec<String> {
    let get = |name: &str| {
        results
            .iter()
            .find(|o| o.name == name)
            .map(|o| o.result.as_str())
    };
    let mut gaps: Vec<String> = EXPECTED_WHEN_CONFINED
        .iter()
        .filter(|(name, want)| get(name) != Some(*want))
        .map(|(name, want)| {
            format!(
                "{name}: expected {want}, got {}",
                get(name).unwrap_or("<missing>")
            )
        })
        .collect();
    gaps.extend(
        results
            .iter()
            .filter(|o| is_per_target(&o.name) && o.result != "EACCES")
            .map(|o| format!("{}: expected EACCES, got {}", o.name, o.result)),
    );
    gaps
}

/// A probe of one of [`Targets`]' protected files or forbidden ports, which
/// must each fail with `EACCES`.
pub fn is_per_target(name: &str) -> bool {
    name.starts_with("append_protected_") || name.starts_with("tcp_connect_forbidden_")
}

/// `EACCES` for 13 and so on; `errno N` for the rest.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::ENOSYS => "ENOSYS",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EROFS => "EROFS",
        libc::EEXIST => "EEXIST",
        libc::EFAULT => "EFAULT",
        libc::EBADF => "EBADF",
        libc::ENOTSUP => "ENOTSUP",
        _ => return format!("errno {errno}"),
    };
    name.to_owned()
}

/// Make one raw syscall for a probe and return its value or errno.
fn raw_syscall_value(nr: libc::c_long, args: [libc::c_long; 5]) -> io::Result<libc::c_long> {
    // SAFETY: every probe passes integers, null pointers, pointers to
    // static NUL-terminated strings (mount's source, target and type), or
    // pointers to live structs on the caller's stack (connect's address,
    // prlimit64's new limit); the kernel only reads through them. None of
    // the probed calls can succeed in a way that corrupts this process: at
    // worst it changes a setting of this probe process, which exits right
    // after reporting.
    let rc = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4]) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn raw_syscall(nr: libc::c_long, args: [libc::c_long; 5]) -> io::Result<()> {
    raw_syscall_value(nr, args).map(drop)
}

fn append_to(path: &Path) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map(drop)
}

fn create_in(path: &Path) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map(drop)?;
    std::fs::remove_file(path)
}

fn socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<()> {
    let fd = raw_syscall_value(
        libc::SYS_socket,
        [domain.into(), ty.into(), proto.into(), 0, 0],
    )?;
    // Only whether it could be created matters; close it again.
    raw_syscall(libc::SYS_close, [fd, 0, 0, 0, 0])
}

/// Run every probe. Call it inside the confined process.
pub fn run(targets: &Targets) -> Vec<Outcome> {
    let mut out = Vec::new();
    filesystem(targets, &mut out);
    network(targets, &mut out);
    kernel_surface(&mut out);
    read_backs(&mut out);
    out
}

/// Writes, links and execs against the Landlock rules.
fn filesystem(targets: &Targets, out: &mut Vec<Outcome>) {
    let pid = std::process::id();
    // Filesystem (Landlock).
    if let Some(dir) = &targets.writable_dir {
        let file = dir.join(format!(".bs-probe-{pid}"));
        out.push(outcome("write_in_writable_dir", create_in(&file)));
        let link = dir.join(format!(".bs-probe-link-{pid}"));
        let outside = PathBuf::from(format!("/etc/.bs-probe-target-{pid}"));
        let via_link = std::os::unix::fs::symlink(&outside, &link).and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&link)
                .map(drop)
        });
        // Unconfined, the write lands in /etc: remove both ends either way.
        let _ = std::fs::remove_file(&outside);
        let _ = std::fs::remove_file(&link);
        out.push(outcome("write_through_symlink_into_etc", via_link));
        // Spawns a child: before ptrace_traceme, which (unconfined) stops
        // this process at its child's SIGCHLD until a tracer that never comes.
        out.push(outcome(
            "exec_written_file",
            exec_copy_of_true(&dir.join(format!(".bs-probe-exec-{pid}"))),
        ));
    }
    out.push(outcome("exec_memfd", exec_memfd_copy_of_true()));
    out.push(outcome(
        "write_root_home",
        create_in(Path::new("/root/.bs-probe")),
    ));
    out.push(outcome(
        "append_etc_passwd",
        append_to(Path::new("/etc/passwd")),
    ));
    out.push(outcome(
        "read_root_home",
        std::fs::read_dir("/root").map(drop),
    ));
    for (i, file) in targets.protected_files.iter().enumerate() {
        out.push(outcome(format!("append_protected_{i}"), append_to(file)));
    }
}

/// Connections and sockets against the port rule and the socket filter.
fn network(targets: &Targets, out: &mut Vec<Outcome>) {
    // Network (Landlock ports, seccomp families).
    let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let connect =
        |port| TcpStream::connect_timeout(&loopback(port), Duration::from_secs(2)).map(drop);
    if let Some(port) = targets.allowed_port {
        out.push(outcome("tcp_connect_allowed_port", connect(port)));
        let other = if port == u16::MAX { port - 1 } else { port + 1 };
        out.push(outcome("tcp_connect_other_port", connect(other)));
        out.push(outcome("mptcp_connect_other_port", mptcp_connect(other)));
    }
    for (i, port) in targets.forbidden_ports.iter().enumerate() {
        out.push(outcome(
            format!("tcp_connect_forbidden_{i}"),
            connect(*port),
        ));
    }
    out.push(outcome(
        "tcp_bind",
        TcpListener::bind(loopback(0)).map(drop),
    ));
    out.push(outcome("udp_sendto", udp_sendto()));
    out.push(outcome(
        "socket_unix",
        socket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
    ));
    out.push(outcome(
        "socket_inet",
        socket(libc::AF_INET, libc::SOCK_STREAM, 0),
    ));
    out.push(outcome(
        "socket_packet",
        socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
    ));
    out.push(outcome(
        "socket_netlink_audit",
        socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_AUDIT),
    ));
    out.push(outcome(
        "socket_vsock",
        socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0),
    ));
}

/// Syscalls the seccomp filter must refuse.
fn kernel_surface(out: &mut Vec<Outcome>) {
    let pid = std::process::id();
    // Kernel surface (seccomp). Arguments are chosen so that an unfiltered
    // call fails harmlessly with a different errno or changes nothing.
    // mount targets a path that does not exist: ENOENT unfiltered, EPERM
    // filtered — never an actual mount, even when run unconfined as root.
    let tmpfs = c"tmpfs".as_ptr() as libc::c_long;
    let nowhere = c"/nonexistent/bs-probe".as_ptr() as libc::c_long;
    let flag = |v: libc::c_int| libc::c_long::from(v);
    let probes: [(&str, libc::c_long, [libc::c_long; 5]); 10] = [
        (
            "ptrace_traceme",
            libc::SYS_ptrace,
            [libc::c_long::from(libc::PTRACE_TRACEME), 0, 0, 0, 0],
        ),
        (
            "mount_tmpfs",
            libc::SYS_mount,
            [tmpfs, nowhere, tmpfs, 0, 0],
        ),
        (
            "unshare_newuser",
            libc::SYS_unshare,
            [flag(libc::CLONE_NEWUSER), 0, 0, 0, 0],
        ),
        // CLONE_NEWUSER | CLONE_FS is an invalid combination: EINVAL
        // unfiltered, EPERM filtered; it never forks.
        (
            "clone_newuser",
            libc::SYS_clone,
            [flag(libc::CLONE_NEWUSER | libc::CLONE_FS), 0, 0, 0, 0],
        ),
        ("clone3", libc::SYS_clone3, [0, 0, 0, 0, 0]),
        ("bpf", libc::SYS_bpf, [0, 0, 0, 0, 0]),
        ("io_uring_setup", libc::SYS_io_uring_setup, [1, 0, 0, 0, 0]),
        // KEYCTL_GET_KEYRING_ID of the session keyring, without creating it.
        ("keyctl", libc::SYS_keyctl, [0, -3, 0, 0, 0]),
        (
            "perf_event_open",
            libc::SYS_perf_event_open,
            [0, 0, -1, -1, 0],
        ),
        // ADDR_NO_RANDOMIZE
        (
            "personality_addr_no_randomize",
            libc::SYS_personality,
            [0x0040_0000, 0, 0, 0, 0],
        ),
    ];
    for (name, nr, args) in probes {
        out.push(outcome(name, raw_syscall(nr, args)));
    }
    let parent = libc::c_long::from(std::os::unix::process::parent_id());
    let me = libc::c_long::from(pid);
    out.push(outcome(
        "kill_parent",
        raw_syscall(libc::SYS_kill, [parent, 0, 0, 0, 0]),
    ));
    out.push(outcome(
        "kill_self",
        raw_syscall(libc::SYS_kill, [me, 0, 0, 0, 0]),
    ));
    out.push(outcome(
        "prlimit_parent",
        prlimit_fsize_unchanged(std::os::unix::process::parent_id()),
    ));
    out.push(outcome("prlimit_self", prlimit_fsize_unchanged(0)));
    let thread = std::thread::spawn(|| ()).join();
    out.push(outcome(
        "thread_spawn",
        thread.map_err(|_| io::Error::from_raw_os_error(libc::EAGAIN)),
    ));
}

/// What the kernel says this process runs under.
fn read_backs(out: &mut Vec<Outcome>) {
    let flag = |v: libc::c_int| libc::c_long::from(v);
    // Read-backs.
    let securebits =
        raw_syscall_value(libc::SYS_prctl, [flag(libc::PR_GET_SECUREBITS), 0, 0, 0, 0]);
    out.push(Outcome {
        name: "securebits".into(),
        result: securebits.map_or_else(
            |e| errno_name(e.raw_os_error().unwrap_or(0)),
            |v| format!("{v:#x}"),
        ),
    });
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            if let Some((key, value)) = line.split_once(':')
                && matches!(
                    key,
                    "CapInh"
                        | "CapPrm"
                        | "CapEff"
                        | "CapBnd"
                        | "CapAmb"
                        | "NoNewPrivs"
                        | "Seccomp"
                        | "Seccomp_filters"
                        | "Uid"
                )
            {
                out.push(Outcome {
                    name: format!("status_{key}"),
                    result: value.split_whitespace().collect::<Vec<_>>().join(" "),
                });
            }
        }
    }
}

/// Copy `/bin/true` to `path`, make it executable, run it, remove it.
fn exec_copy_of_true(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let result = std::fs::copy("/bin/true", path)
        .and_then(|_| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)))
        .map_err(|e| setup("copy /bin/true", &e))
        .and_then(|()| {
            std::process::Command::new(path)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
        });
    let _ = std::fs::remove_file(path);
    match result? {
        status if status.success() => Ok(()),
        status => Err(io::Error::other(format!("ran, {status}"))),
    }
}

/// Write `/bin/true` into a memfd and run it through its `/proc/self/fd`
/// path: `memfd_create`'s own errno when it is filtered.
fn exec_memfd_copy_of_true() -> io::Result<()> {
    use std::{io::Write, os::fd::FromRawFd};
    let name = c"bs-probe".as_ptr() as libc::c_long;
    let fd = raw_syscall_value(libc::SYS_memfd_create, [name, 0, 0, 0, 0])?;
    let fd = libc::c_int::try_from(fd).map_err(|e| setup("memfd fd", &io::Error::other(e)))?;
    // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let bytes = std::fs::read("/bin/true").map_err(|e| setup("read /bin/true", &e))?;
    file.write_all(&bytes)
        .map_err(|e| setup("write the memfd", &e))?;
    let status = std::process::Command::new(format!("/proc/self/fd/{fd}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    drop(file);
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("ran, {status}")))
    }
}

/// One UDP datagram to the discard port of a loopback address.
fn udp_sendto() -> io::Result<()> {
    let socket = std::net::UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    socket
        .send_to(b"bs-probe", SocketAddr::from(([127, 0, 0, 2], 9)))
        .map(drop)
}

/// A TCP connection to 127.0.0.1:`port` over an MPTCP socket.
fn mptcp_connect(port: u16) -> io::Result<()> {
    let fd = raw_syscall_value(
        libc::SYS_socket,
        [
            libc::c_long::from(libc::AF_INET),
            libc::c_long::from(libc::SOCK_STREAM | libc::SOCK_CLOEXEC),
            libc::c_long::from(libc::IPPROTO_MPTCP),
            0,
            0,
        ],
    )?;
    let addr = libc::sockaddr_in {
        sin_family: libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(0),
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = libc::c_long::try_from(size_of_val(&addr)).unwrap_or(0);
    let connected = raw_syscall(
        libc::SYS_connect,
        [fd, std::ptr::from_ref(&addr) as libc::c_long, len, 0, 0],
    );
    let _ = raw_syscall(libc::SYS_close, [fd, 0, 0, 0, 0]);
    connected
}

/// `prlimit64(pid, RLIMIT_FSIZE)` set to the limit `pid` already has (read
/// from `/proc`): if it is allowed, nothing changes.
fn prlimit_fsize_unchanged(pid: u32) -> io::Result<()> {
    let proc = if pid == 0 {
        "/proc/self/limits".to_owned()
    } else {
        format!("/proc/{pid}/limits")
    };
    let limits = std::fs::read_to_string(&proc).map_err(|e| setup(&proc, &e))?;
    let parse = |v: &str| match v {
        "unlimited" => Some(libc::RLIM_INFINITY),
        v => v.parse().ok(),
    };
    let current = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max file size"))
        .and_then(|rest| {
            let mut values = rest.split_whitespace().map(parse);
            Some(libc::rlimit {
                rlim_cur: values.next()??,
                rlim_max: values.next()??,
            })
        })
        .ok_or_else(|| io::Error::other(format!("setup failed: no file size in {proc}")))?;
    raw_syscall(
        libc::SYS_prlimit64,
        [
            libc::c_long::from(pid.cast_signed()),
            libc::c_long::from(libc::RLIMIT_FSIZE),
            std::ptr::from_ref(&current) as libc::c_long,
            0,
            0,
        ],
    )
}
