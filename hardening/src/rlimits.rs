//! Per-process resource limits, set in the child before exec and inherited
//! by everything it forks (the agent-browser daemon included).
//!
//! Only lowering: a limit above the current hard limit would need
//! `CAP_SYS_RESOURCE`, and is never what a confinement wants.

use serde::{Deserialize, Serialize};

use crate::step::Step;

/// A resource the policy can limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// What is limited.
    pub resource: Resource,
    /// The value (bytes, descriptors or seconds).
    pub value: u64,
}

/// `setrlimit`'s resource argument: an enum typedef in glibc, an int elsewhere.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
type RawResource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type RawResource = libc::c_int;

impl Resource {
    fn raw(self) -> RawResource {
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

/// Child side: apply every limit, never above the hard limit already in
/// force (the child still has `CAP_SYS_RESOURCE` at this step, so a higher
/// value would raise it). Allocation-free.
pub(crate) fn apply(limits: &[Limit]) -> std::io::Result<()> {
    for limit in limits {
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the `rlimit` struct on our stack and
        // nothing else; the resource is one of the constants above.
        if unsafe { libc::getrlimit(limit.resource.raw(), &mut current) } != 0 {
            return Err(Step::Rlimits.last_os_error());
        }
        let value = libc::rlim_t::try_from(limit.value)
            .unwrap_or(libc::RLIM_INFINITY)
            .min(current.rlim_max);
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// The child's "Max core file size" (soft, hard) from /proc/self/limits.
    fn core_limits_of_a_child_with(first: u64, then: u64) -> String {
        let mut command = std::process::Command::new("/bin/cat");
        command.arg("/proc/self/limits");
        // SAFETY: the closure makes only the setrlimit/getrlimit calls of
        // `apply`, between fork and exec.
        unsafe {
            command.pre_exec(move || {
                apply(&[Limit {
                    resource: Resource::Core,
                    value: first,
                }])?;
                apply(&[Limit {
                    resource: Resource::Core,
                    value: then,
                }])
            });
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .find(|l| l.starts_with(Resource::Core.proc_name()))
            .unwrap()
            .split_whitespace()
            .skip(4)
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn a_limit_lowers_but_never_raises() {
        // Whatever this host allows (a hardened CI may have a hard limit of 0).
        let mut hard = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct on our stack.
        let got = unsafe { libc::getrlimit(Resource::Core.raw(), &mut hard) };
        assert_eq!(got, 0);
        let expect = |v: u64| {
            let v = v.min(hard.rlim_max);
            format!("{v} {v}")
        };
        assert_eq!(core_limits_of_a_child_with(8192, 4096), expect(4096));
        // Even with CAP_SYS_RESOURCE (tests run as root here), 8192 stays out.
        assert_eq!(core_limits_of_a_child_with(4096, 8192), expect(4096));
    }
}
