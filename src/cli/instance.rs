//! Which of the live servers started with the same `--state-dir` and
//! `--output-dir` this one is (two MCP clients on one machine each start
//! one, with the same defaults).
//!
//! A server holds an exclusive `flock` on `server.lock` in the state dir it
//! uses, for as long as it runs: the first live server uses the dirs as
//! given, each further one `<dir>.2`, `<dir>.3`, … Its daemons, their
//! sockets and pin files, its gate port and contexts memo, and its
//! screenshots all lie under those dirs, so two live servers never see
//! each other's. A server that starts after one ended takes the lowest free
//! place, and with it the daemons left there to be adopted (docs/design.md,
//! "Lifecycle"). The kernel drops the lock however the process ends.

use std::{
    fs::{File, TryLockError},
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};

/// The lock file in a state dir, held by the server that uses the dir.
const LOCK_FILE: &str = "server.lock";

/// Live servers one pair of dirs can serve; one more is refused at start.
const MAX_PLACES: u32 = 64;

/// The dirs this server uses, and its lock on them.
pub(super) struct Place {
    pub(super) state: PathBuf,
    pub(super) output: PathBuf,
    /// 1 for the dirs as given; N for `<dir>.N`.
    pub(super) ordinal: u32,
    /// Locked; released when dropped ([`Place::hold_until_exit`]).
    lock: File,
}

impl Place {
    /// Keep the lock for as long as this process runs, whatever part of it
    /// outlives the start: the kernel releases it when the process ends,
    /// however it ends. (Opened close-on-exec: no child inherits it, so a
    /// daemon that outlives the server does not hold its place.)
    pub(super) fn hold_until_exit(self) {
        std::mem::forget(self.lock);
    }
}

/// The first place under `state` and `output` that no live server holds,
/// locked for this one. `make_dir` makes a state dir (private) before its
/// lock file is opened in it.
pub(super) fn claim(
    state: &Path,
    output: &Path,
    make_dir: impl Fn(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<Place> {
    for ordinal in 1..=MAX_PLACES {
        let (state_n, output_n) = (nth(state, ordinal), nth(output, ordinal));
        make_dir(&state_n)?;
        let path = state_n.join(LOCK_FILE);
        let lock = crate::sync::open_lock_file(&path)
            .with_context(|| format!("cannot open the server lock {}", path.display()))?;
        match lock.try_lock() {
            Ok(()) => {
                return Ok(Place {
                    state: state_n,
                    output: output_n,
                    ordinal,
                    lock,
                });
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => {
                return Err(e)
                    .with_context(|| format!("cannot lock the server lock {}", path.display()));
            }
        }
    }
    bail!(
        "{MAX_PLACES} live servers already use --state-dir {} (each holds server.lock in \
         it or in {}.N); give this one a --state-dir and --output-dir of its own",
        state.display(),
        state.display()
    )
}

/// `dir` for the first live server, `<dir>.N` for the Nth.
fn nth(dir: &Path, ordinal: u32) -> PathBuf {
    if ordinal == 1 {
        return dir.to_owned();
    }
    let mut name = dir.as_os_str().to_owned();
    name.push(format!(".{ordinal}"));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make(dir: &Path) -> anyhow::Result<()> {
        Ok(std::fs::create_dir_all(dir)?)
    }

    #[test]
    fn a_second_live_claim_gets_dirs_of_its_own_and_a_freed_place_is_taken_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (state, output) = (tmp.path().join("state"), tmp.path().join("out"));
        let first = claim(&state, &output, make).expect("first");
        assert_eq!((first.state.clone(), first.ordinal), (state.clone(), 1));
        let second = claim(&state, &output, make).expect("second");
        assert_eq!(second.state, tmp.path().join("state.2"));
        assert_eq!(second.output, tmp.path().join("out.2"));
        // The first's place is free once it is gone (its lock dropped with
        // it), and the next claim takes it: its daemons are there.
        drop(first);
        let third = claim(&state, &output, make).expect("third");
        assert_eq!(third.ordinal, 1);
        assert_eq!(second.ordinal, 2);
    }

    #[test]
    fn a_symlink_in_place_of_the_lock_is_not_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&state).expect("mkdir");
        let elsewhere = tmp.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, state.join(LOCK_FILE)).expect("symlink");
        let refused = claim(&state, &tmp.path().join("out"), make)
            .err()
            .map(|e| format!("{e:#}"));
        assert!(refused.is_some_and(|e| e.contains("server lock")));
        assert!(!elsewhere.exists());
    }
}
