//! Confinement of a child process: applied before it execs its program,
//! every step verified, fail-closed.
//!
//! The one job of this crate is to take a [`Policy`] (plain data: readable
//! and writable paths, allowed TCP ports, socket families, identity) and make
//! a spawned process — and everything it forks, since every layer is
//! inherited — unable to do anything else:
//!
//! 1. inherited descriptors marked close-on-exec, resource limits and the
//!    umask set,
//! 2. securebits locked, bounding set emptied (needs `CAP_SETPCAP`),
//! 3. optional uid/gid switch,
//! 4. ambient/effective/inheritable/permitted capabilities cleared,
//! 5. `no_new_privs`,
//! 6. Landlock: files, TCP connect/bind by port, scopes — fully enforced or
//!    the spawn fails,
//! 7. seccomp: `clone3 → ENOSYS`, an x32 guard, an EPERM denylist,
//! 8. a read-back of what must now hold.
//!
//! Two ways to apply it, the same steps either way:
//!
//! - [`Trampoline`]: the child starts as a trampoline executable that
//!   prepares the policy, applies it to itself and execs the program. The
//!   parent never forks (std spawns it with `posix_spawn`), so a large
//!   server's memory is not write-protected by every spawn. A failing step
//!   makes the trampoline exit before the program runs, and
//!   [`trampoline::failure`] says why. browser-shell starts every
//!   agent-browser this way.
//! - [`confine`]: [`prepare`] does everything that allocates or opens files,
//!   in the parent, and a `pre_exec` hook only issues syscalls on that
//!   prepared memory between `fork` and `exec`; any failing step makes
//!   `spawn()` return an error that [`ConfineError::from_spawn_error`]
//!   decodes, and nothing runs.
//!
//! One measure is for the parent itself: [`nss::hosts_from_builtin_modules`]
//! keeps its host-name lookups from loading code from the host.
//!
//! This crate knows nothing about MCP or agent-browser.
//!
//! ```no_run
//! use std::{process::Command, sync::Arc};
//! let mut policy = hardening::Policy::default();
//! policy.read_exec_paths = vec!["/usr".into(), "/lib".into()];
//! policy.read_write_paths = vec!["/tmp".into()];
//! let prepared = Arc::new(hardening::prepare(&policy)?);
//! let mut command = Command::new("/usr/bin/true");
//! hardening::confine(&mut command, prepared);
//! command.status()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod caps;
mod fds;
mod landlock;
pub mod nss;
mod policy;
pub mod probe;
mod process_group;
mod rlimits;
mod seccomp;
mod seccomp_dispatch;
mod step;
pub mod trampoline;

use std::{fmt, os::unix::process::CommandExt, path::PathBuf, sync::Arc};

pub use caps::effective_caps;
pub use landlock::kernel_abi;
pub use policy::{Degraded, Identity, Policy, SocketFamily};
pub use process_group::{kill_process, kill_process_group};
pub use rlimits::{Limit, Resource};
pub use seccomp::denied_syscalls;
pub use step::{ConfineError, Step};
pub use trampoline::Trampoline;

/// Why a policy cannot be prepared on this machine. The caller must not spawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// The kernel's Landlock is missing or too old and degraded mode is refused.
    #[error(
        "Landlock ABI {found} is below the required {required} (files, TCP ports and scopes); \
         refusing to run unconfined (an operator may accept degraded confinement explicitly)"
    )]
    LandlockTooOld {
        /// The kernel's ABI (0: none).
        found: i32,
        /// The ABI this crate requires.
        required: i32,
    },
    /// The kernel has no seccomp filter support and degraded mode is refused.
    #[error("seccomp filters are unavailable on this kernel; refusing to run unconfined")]
    SeccompUnavailable,
    /// A path named in the policy does not exist.
    #[error("policy path {path} is unusable: {reason}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Building the Landlock ruleset failed.
    #[error("cannot build the Landlock ruleset: {0}")]
    Landlock(String),
    /// Compiling the seccomp filters failed.
    #[error("cannot compile the seccomp filters: {0}")]
    Seccomp(String),
    /// Reading the process's capability state failed.
    #[error("cannot read capability state: {0}")]
    Caps(#[from] std::io::Error),
}

/// How one layer is enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layer {
    /// Fully enforced.
    Enforced,
    /// Partly enforced; why.
    Partial(String),
    /// Not enforced; why.
    Off(String),
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Enforced => f.write_str("enforced"),
            Self::Partial(why) => write!(f, "partial ({why})"),
            Self::Off(why) => write!(f, "off ({why})"),
        }
    }
}

/// What [`confine`] will apply on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: i32,
    /// Landlock (files, TCP ports, scopes).
    pub landlock: Layer,
    /// seccomp filters.
    pub seccomp: Layer,
    /// Bounding set emptied and securebits locked (needs `CAP_SETPCAP`).
    pub bounding_set_dropped: bool,
    /// The uid the child runs as, when switched.
    pub uid: Option<u32>,
    /// Resource limits set on the child.
    pub rlimits: Vec<Limit>,
    /// Memory and CPU: this crate sets no cgroup limits; what the machine
    /// offers, so an operator knows where to set them.
    pub cgroup: String,
}

impl Report {
    /// True when anything is less than fully enforced.
    pub fn is_degraded(&self) -> bool {
        self.landlock != Layer::Enforced
            || self.seccomp != Layer::Enforced
            || !self.bounding_set_dropped
    }

    /// One short line for logs and audit records.
    pub fn summary(&self) -> String {
        format!(
            "landlock abi {} {}; seccomp {}; caps cleared{}; no_new_privs{}",
            self.landlock_abi,
            self.landlock,
            self.seccomp,
            if self.bounding_set_dropped {
                ", bounding set empty, securebits locked"
            } else {
                " (bounding set kept: no CAP_SETPCAP)"
            },
            self.uid.map(|u| format!("; uid {u}")).unwrap_or_default(),
        )
    }
}

/// What the machine offers for memory/CPU limits (not applied here).
fn cgroup_note() -> String {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let version = if root.join("cgroup.controllers").exists() {
        "cgroup v2"
    } else if root.join("memory").exists() {
        "cgroup v1"
    } else {
        "no cgroup filesystem"
    };
    format!(
        "{version}; memory/CPU limits are not set per call: set them on the container or service"
    )
}

/// A policy compiled for this kernel, shared by every spawn.
#[derive(Debug)]
pub struct Prepared {
    rlimits: Vec<Limit>,
    umask: Option<u32>,
    ruleset: Option<::landlock::RulesetCreated>,
    require_full_landlock: bool,
    filters: Option<seccomp::Filters>,
    caps: caps::CapsPlan,
    report: Report,
}

impl Prepared {
    /// What will be applied.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Child side, in `pre_exec` order. Only syscalls on prepared memory.
    fn apply(&self) -> std::io::Result<()> {
        fds::apply()?;
        rlimits::apply(&self.rlimits)?;
        if let Some(mask) = self.umask {
            // SAFETY: umask(2) cannot fail and touches no memory.
            unsafe { libc::umask(mask) };
        }
        caps::apply(&self.caps)?;
        if let Some(ruleset) = &self.ruleset {
            landlock::apply(ruleset, self.require_full_landlock)?;
        }
        if let Some(filters) = &self.filters {
            seccomp::apply(filters)?;
        }
        caps::verify(&self.caps)
    }
}

/// Compile `policy` for this kernel.
///
/// # Errors
/// [`PrepareError`] when the kernel cannot enforce the policy and
/// [`Degraded::Refuse`] is set, or when the policy itself is unusable.
pub fn prepare(policy: &Policy) -> Result<Prepared, PrepareError> {
    // SAFETY: PR_GET_SECCOMP takes no arguments and touches no memory; it
    // answers EINVAL when the kernel has no seccomp at all.
    let seccomp_available = unsafe { libc::prctl(libc::PR_GET_SECCOMP) } >= 0;
    prepare_for(policy, kernel_abi(), seccomp_available)
}

/// [`prepare`] against a stated kernel: the decision logic, testable on any
/// machine.
fn prepare_for(
    policy: &Policy,
    abi: i32,
    seccomp_available: bool,
) -> Result<Prepared, PrepareError> {
    let allow_degraded = policy.degraded == Degraded::Allow;
    let (ruleset, require_full, landlock_layer) = if abi >= landlock::REQUIRED_ABI {
        let ruleset = landlock::build(policy, abi, ::landlock::CompatLevel::HardRequirement)?;
        (Some(ruleset), true, Layer::Enforced)
    } else if !allow_degraded {
        return Err(PrepareError::LandlockTooOld {
            found: abi,
            required: landlock::REQUIRED_ABI,
        });
    } else if abi > 0 {
        let ruleset = landlock::build(policy, abi, ::landlock::CompatLevel::BestEffort)?;
        let why = format!("kernel ABI {abi} < {}", landlock::REQUIRED_ABI);
        (Some(ruleset), false, Layer::Partial(why))
    } else {
        (None, false, Layer::Off("no Landlock in this kernel".into()))
    };

    let (filters, seccomp_layer) = if seccomp_available {
        (
            Some(seccomp::build(&policy.socket_families)?),
            Layer::Enforced,
        )
    } else if allow_degraded {
        (None, Layer::Off("no seccomp in this kernel".into()))
    } else {
        return Err(PrepareError::SeccompUnavailable);
    };

    let caps = caps::build(policy.identity)?;
    Ok(Prepared {
        rlimits: policy.rlimits.clone(),
        umask: policy.umask,
        ruleset,
        require_full_landlock: require_full,
        filters,
        report: Report {
            landlock_abi: abi,
            landlock: landlock_layer,
            seccomp: seccomp_layer,
            bounding_set_dropped: caps.can_set_pcap,
            uid: policy.identity.map(|i| i.uid),
            rlimits: policy.rlimits.clone(),
            cgroup: cgroup_note(),
        },
        caps,
    })
}

/// Make `command` apply `prepared` between fork and exec.
///
/// A failing step makes `spawn()` return an error (decode it with
/// [`ConfineError::from_spawn_error`]); the program never runs.
pub fn confine(command: &mut std::process::Command, prepared: Arc<Prepared>) {
    // SAFETY: the closure runs in the forked child before exec. It only reads
    // `prepared`, which the parent built and never mutates, and makes raw
    // syscalls (prctl, close_range, set*id, landlock_restrict_self, seccomp)
    // plus the landlock/caps/seccompiler calls that are allocation-free on
    // success; it takes no locks, so a lock held by another parent thread at
    // fork time cannot deadlock it.
    unsafe {
        command.pre_exec(move || prepared.apply());
    }
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
