//! Per-process resource limits, set in the child before exec and inherited
//! by everything it forks (the agent-browser daemon included).
//!
//! Only lowering: a limit above the current hard limit would need
//! `CAP_SYS_RESOURCE`, and is never what a confinement wants.

use crate::step::Step;

/// A resource the policy can limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resource {
    /// Core dump size (0: none — a crashing child must not dump memory).
    Core,
    /// Open file descriptors.
    NoFile,
    /// Largest file the process may write, in bytes.
    FileSize,
    /// CPU seconds.
    Cpu,
}

/// One limit: soft and hard set to the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What is limited.
    pub resource: Resource,
    /// The value (bytes, descriptors or seconds).
    pub value: u64,
}

impl Resource {
    fn raw(self) -> libc::__rlimit_resource_t {
        match self {
            Self::Core => libc::RLIMIT_CORE,
            Self::NoFile => libc::RLIMIT_NOFILE,
            Self::FileSize => libc::RLIMIT_FSIZE,
            Self::Cpu => libc::RLIMIT_CPU,
        }
    }

    /// Its name in `/proc/<pid>/limits`.
    pub fn proc_name(self) -> &'static str {
        match self {
            Self::Core => "Max core file size",
            Self::NoFile => "Max open files",
            Self::FileSize => "Max file size",
            Self::Cpu => "Max cpu time",
        }
    }
}

/// Child side: apply every limit. Allocation-free.
pub(crate) fn apply(limits: &[Limit]) -> std::io::Result<()> {
    for limit in limits {
        let value = libc::rlim_t::try_from(limit.value).unwrap_or(libc::RLIM_INFINITY);
        let rlim = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit reads the `rlimit` struct on our stack and nothing
        // else; the resource is one of the constants above.
        if unsafe { libc::setrlimit(limit.resource.raw(), &rlim) } != 0 {
            return Err(Step::Rlimits.last_os_error());
        }
    }
    Ok(())
}
