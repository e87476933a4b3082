//! Confining a child without forking its parent: a trampoline.
//!
//! [`crate::confine`] applies the policy between `fork` and `exec`. But a
//! `fork` write-protects every writable page of the parent until the parent
//! writes it again, so a large multi-threaded parent — a server — takes one
//! page fault per page it touches after each spawn, on its next call's path
//! (docs/design.md, "The trampoline"). A command
//! without a `pre_exec` hook is spawned by std with `posix_spawn`
//! (`CLONE_VM | CLONE_VFORK`), which write-protects nothing.
//!
//! So the parent spawns a trampoline instead: an executable that calls
//! [`main`] when started under the name [`ARG0`] (the parent's own binary,
//! dispatching on `argv[0]` before it does anything else). The trampoline
//! gets the [`Policy`] as JSON in its argv, prepares it, applies it to
//! itself — the same steps in the same order as [`crate::confine`], verified
//! the same way — and only then execs the program. If any step fails,
//! nothing of the program runs: the trampoline exits [`EXIT_REFUSED`] with
//! one line on stderr that starts with [`STDERR_PREFIX`], and [`failure`]
//! gives the parent that reason back.

use std::{
    convert::Infallible,
    ffi::OsString,
    fs::File,
    os::{fd::AsRawFd, unix::process::CommandExt},
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};

use crate::{ConfineError, Policy};

/// `argv[0]` under which an executable must run [`main`] and nothing else;
/// also the file name of browser-shell's small trampoline executable
/// (`src/bin/hardening-trampoline.rs`), which runs nothing but [`main`].
pub const ARG0: &str = "hardening-trampoline";

/// The trampoline's exit status when it refused to run the program.
pub const EXIT_REFUSED: i32 = 126;

/// Start of the one stderr line saying why the trampoline refused.
pub const STDERR_PREFIX: &str = "hardening-trampoline: ";

/// How to start a program confined by `policy` through a trampoline.
///
/// The policy is serialised once, here; each [`Trampoline::command`] only
/// copies it into an argv.
#[derive(Debug, Clone)]
pub struct Trampoline {
    exe: PathBuf,
    /// The policy as data, for [`Trampoline::command_as`].
    data: Policy,
    policy: String,
    /// The executable opened once, for [`Trampoline::pinned`]: `exe` names
    /// this descriptor, which must stay open as long as the trampoline.
    _pinned: Option<Arc<File>>,
}

impl Trampoline {
    /// A trampoline run from `exe`, an executable that calls [`main`] when
    /// [`invoked`] (`/proc/self/exe` for the calling binary itself: it names
    /// the running binary even after an upgrade replaced the file).
    ///
    /// # Errors
    /// When the policy cannot be serialised (it always can; the error is
    /// serde's).
    pub fn new(exe: impl Into<PathBuf>, policy: &Policy) -> Result<Self, serde_json::Error> {
        Ok(Self {
            exe: exe.into(),
            data: policy.clone(),
            policy: serde_json::to_string(policy)?,
            _pinned: None,
        })
    }

    /// A trampoline run from the executable at `path` as it is now: the file
    /// is opened here, and every spawn execs that open file
    /// (`/proc/self/fd/N`, which a spawned child resolves to its own copy of
    /// the descriptor, still open until its exec). An upgrade that replaces
    /// the file later changes nothing for this process, as `/proc/self/exe`
    /// keeps naming a running binary.
    ///
    /// # Errors
    /// When the file cannot be opened for reading (the policy always
    /// serialises).
    pub fn pinned(path: &Path, policy: &Policy) -> std::io::Result<Self> {
        // `File::open` sets O_CLOEXEC: no child keeps the descriptor past
        // its own exec.
        let file = File::open(path)?;
        let exe = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        Ok(Self {
            _pinned: Some(Arc::new(file)),
            ..Self::new(exe, policy).map_err(std::io::Error::other)?
        })
    }

    /// The path every spawn execs: for a [`Trampoline::pinned`] one, a path
    /// to its open file (valid in this process only), so that hashing it
    /// reads what runs rather than what the original path names now.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// A command that runs `program` confined. Add the program's arguments,
    /// environment, directory and stdio to it as to any command; do not add a
    /// `pre_exec` hook, which would bring the `fork` back.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(&self.exe);
        command.arg0(ARG0).arg(&self.policy).arg(program);
        command
    }

    /// [`Trampoline::command`], switching to `identity` (one process of a
    /// set each gets a uid of its own) instead of the policy's own.
    ///
    /// # Errors
    /// When the policy cannot be serialised (it always can; the error is
    /// serde's).
    pub fn command_as(
        &self,
        program: &Path,
        identity: Option<crate::Identity>,
    ) -> Result<Command, serde_json::Error> {
        if identity == self.data.identity {
            return Ok(self.command(program));
        }
        let policy = Policy {
            identity,
            ..self.data.clone()
        };
        let mut command = Command::new(&self.exe);
        command
            .arg0(ARG0)
            .arg(serde_json::to_string(&policy)?)
            .arg(program);
        Ok(command)
    }
}

/// Whether this process was started as a trampoline.
pub fn invoked() -> bool {
    std::env::args_os().next().is_some_and(|arg0| arg0 == ARG0)
}

/// The trampoline: `ARG0 POLICY_JSON PROGRAM [ARGS…]`. Prepares and applies
/// the policy to this process, then execs `PROGRAM ARGS…` with the
/// environment and descriptors it was given. Returns only by exiting
/// [`EXIT_REFUSED`].
pub fn main() -> ! {
    let Err(why) = confine_and_exec(std::env::args_os().skip(1));
    // Everything std would do on a normal exit (flushing stdout) has
    // nothing to do here: nothing was written but this line.
    eprintln!("{STDERR_PREFIX}{why}");
    std::process::exit(EXIT_REFUSED)
}

fn confine_and_exec(mut args: impl Iterator<Item = OsString>) -> Result<Infallible, String> {
    let policy = args.next().ok_or("no policy given")?;
    let policy: Policy = serde_json::from_str(
        policy
            .to_str()
            .ok_or("the policy is not UTF-8 (it must be JSON)")?,
    )
    .map_err(|e| format!("the policy is not valid: {e}"))?;
    let program = PathBuf::from(args.next().ok_or("no program given")?);
    let prepared = crate::prepare(&policy).map_err(|e| e.to_string())?;
    prepared.apply().map_err(|e| {
        ConfineError::from_spawn_error(&e).map_or_else(
            || format!("confinement failed, nothing was run: {e}"),
            |step| step.to_string(),
        )
    })?;
    let err = Command::new(&program).args(args).exec();
    Err(format!("cannot start {}: {err}", program.display()))
}

/// Why the trampoline refused to run the program, from the exit status and
/// stderr of a process started with [`Trampoline::command`]; `None` when
/// the program ran (whatever its own exit status).
pub fn failure(exit_code: Option<i32>, stderr: &[u8]) -> Option<String> {
    if exit_code != Some(EXIT_REFUSED) {
        return None;
    }
    let line = stderr.split(|b| *b == b'\n').next()?;
    let why = line.strip_prefix(STDERR_PREFIX.as_bytes())?;
    Some(String::from_utf8_lossy(why).into_owned())
}

#[cfg(test)]
#[path = "trampoline_tests.rs"]
mod tests;
