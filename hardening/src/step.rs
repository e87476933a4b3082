//! Which confinement step failed, carried through `pre_exec`'s only channel:
//! the errno std sends back to the parent.
//!
//! std reports a failing `pre_exec` closure to the parent as a raw `i32`
//! errno, so each step encodes itself into that number:
//! `MAGIC | step << 12 | errno` (errno < 4096). [`ConfineError::from_spawn_error`]
//! decodes it so the parent can say *which* step failed and why.

use std::{fmt, io};

const MAGIC: i32 = 0x4253_0000; // "BS"
const MAGIC_MASK: i32 = 0x7fff_0000;

/// One step of applying a confinement in the child, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Mark inherited descriptors close-on-exec.
    CloseFds = 1,
    /// Set resource limits.
    Rlimits = 10,
    /// Lock securebits.
    Securebits = 2,
    /// Empty the capability bounding set.
    BoundingSet = 3,
    /// Switch uid/gid.
    Identity = 4,
    /// Clear ambient, effective, inheritable and permitted capabilities.
    ClearCaps = 5,
    /// Set no_new_privs.
    NoNewPrivs = 6,
    /// Enforce the Landlock ruleset.
    Landlock = 7,
    /// Install the seccomp filters.
    Seccomp = 8,
    /// Read back what was applied.
    Verify = 9,
}

impl Step {
    const ALL: [Self; 10] = [
        Self::CloseFds,
        Self::Rlimits,
        Self::Securebits,
        Self::BoundingSet,
        Self::Identity,
        Self::ClearCaps,
        Self::NoNewPrivs,
        Self::Landlock,
        Self::Seccomp,
        Self::Verify,
    ];

    /// The error a failing step returns from `pre_exec`.
    pub(crate) fn fail(self, errno: i32) -> io::Error {
        io::Error::from_raw_os_error(MAGIC | ((self as i32) << 12) | (errno & 0xfff))
    }

    /// The error for the step's last OS error.
    pub(crate) fn last_os_error(self) -> io::Error {
        self.fail(
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    fn name(self) -> &'static str {
        match self {
            Self::CloseFds => "mark inherited fds close-on-exec",
            Self::Rlimits => "set resource limits",
            Self::Securebits => "lock securebits",
            Self::BoundingSet => "drop the capability bounding set",
            Self::Identity => "switch uid/gid",
            Self::ClearCaps => "clear capabilities",
            Self::NoNewPrivs => "set no_new_privs",
            Self::Landlock => "enforce Landlock",
            Self::Seccomp => "install seccomp filters",
            Self::Verify => "verify the confinement",
        }
    }
}

/// A confinement step failed in the child; the child never ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfineError {
    /// The step that failed.
    pub step: Step,
    /// The errno it failed with.
    pub errno: i32,
}

impl ConfineError {
    /// Decode a `spawn()` error produced by a failing confinement step.
    /// Returns `None` for ordinary spawn errors (ENOENT, EACCES, …).
    pub fn from_spawn_error(err: &io::Error) -> Option<Self> {
        let raw = err.raw_os_error()?;
        if raw & MAGIC_MASK != MAGIC {
            return None;
        }
        let step_id = (raw >> 12) & 0xf;
        let step = Step::ALL.into_iter().find(|s| *s as i32 == step_id)?;
        Some(Self {
            step,
            errno: raw & 0xfff,
        })
    }
}

impl fmt::Display for ConfineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "confinement failed, nothing was run: cannot {}: {}",
            self.step.name(),
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for ConfineError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_round_trips_through_an_errno() {
        for step in Step::ALL {
            let err = step.fail(libc::EPERM);
            assert_eq!(
                ConfineError::from_spawn_error(&err),
                Some(ConfineError {
                    step,
                    errno: libc::EPERM
                })
            );
        }
    }

    #[test]
    fn ordinary_spawn_errors_are_not_confinement_errors() {
        let err = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(ConfineError::from_spawn_error(&err), None);
    }
}
