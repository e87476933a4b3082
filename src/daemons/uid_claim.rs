//! Which uids this server's children may use: a range no other server on
//! the machine holds at the same time.
//!
//! Two servers whose children shared uids would share what the uids
//! separate (/proc, files in /tmp). So a server holds its range with a lock
//! file under [`LOCK_DIR`] (root's alone; no child may write there) for as
//! long as it runs: `auto` takes the first free block of [`BLOCK`] uids, the
//! one a previous server at the same state dir used first, so its daemons
//! can be adopted; a range given with `--child-uids` is held the same way,
//! and a second server given it refuses to start.

use std::{fs::File, path::Path};

use super::UidRange;

/// Where the ranges' lock files live.
pub(crate) const LOCK_DIR: &str = "/run/browser-shell/child-uids";

/// uids per block of `auto`: far more than `--max-sessions` and the pool.
pub(crate) const BLOCK: u32 = 4096;

/// The first block's first uid: far above any account a machine hands out.
const BASE: u32 = 2_100_000_000;

/// Blocks `auto` may take: servers that can run side by side.
const BLOCKS: u32 = 256;

/// `--child-uids`: where each daemon's uid comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildUids {
    /// A free block when the server may switch uids; else off, said at start.
    Auto,
    /// Every child runs as the server's own user.
    Off,
    /// This range, held alone.
    Range(UidRange),
}

impl ChildUids {
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            range => UidRange::parse(range).map(Self::Range),
        }
    }
}

/// A range held for this server's life (the lock goes with the process).
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) range: UidRange,
    _lock: File,
}

/// Hold the range `choice` asks for; `Ok(None)` when children keep the
/// server's uid (`off`, or `auto` where the server may not switch uids:
/// `why_not` says why). `preferred` is the range a previous server used.
pub(crate) fn claim(
    choice: ChildUids,
    preferred: Option<UidRange>,
) -> Result<Option<Claim>, String> {
    match choice {
        ChildUids::Off => Ok(None),
        ChildUids::Auto if why_not().is_some() => Ok(None),
        ChildUids::Auto => {
            let blocks = (0..BLOCKS).map(|k| UidRange {
                first: BASE + k * BLOCK,
                last: BASE + k * BLOCK + BLOCK - 1,
            });
            let preferred = preferred.filter(|p| blocks.clone().any(|b| b == *p));
            for range in preferred.into_iter().chain(blocks) {
                if let Some(lock) = hold(range)? {
                    return Ok(Some(Claim { range, _lock: lock }));
                }
            }
            Err(format!(
                "all {BLOCKS} blocks of child uids are held by other servers; pass \
                 --child-uids FIRST-LAST with a range of its own"
            ))
        }
        ChildUids::Range(range) => {
            if let Some(why) = why_not() {
                return Err(format!("--child-uids {range}: {why}"));
            }
            match hold(range)? {
                Some(lock) => Ok(Some(Claim { range, _lock: lock })),
                None => Err(format!(
                    "another server holds --child-uids {range}; give each server a range of its own"
                )),
            }
        }
    }
}

/// Why this process cannot give its children uids of their own, if it
/// cannot: it must be root with `CAP_SETUID`, `CAP_SETGID` and `CAP_CHOWN`.
pub(crate) fn why_not() -> Option<String> {
    const NEEDED: u64 = (1 << 0) | (1 << 6) | (1 << 7); // CHOWN, SETGID, SETUID
    if !rustix::process::geteuid().is_root() {
        return Some("the server does not run as root, so its children share its uid".into());
    }
    match hardening::effective_caps() {
        Ok(caps) if caps & NEEDED == NEEDED => None,
        _ => Some(
            "the server lacks CAP_SETUID, CAP_SETGID or CAP_CHOWN, so its children share its uid"
                .into(),
        ),
    }
}

/// Lock `range`'s file; `None` when another process holds it.
fn hold(range: UidRange) -> Result<Option<File>, String> {
    let dir = Path::new(LOCK_DIR);
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create {LOCK_DIR} for the child uids' locks: {e}"))?;
    let path = dir.join(format!("{range}.lock"));
    let file = crate::sync::open_lock_file(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

#[cfg(test)]
impl Claim {
    /// A range held by no lock, for tests of what uses it.
    pub(crate) fn unlocked(range: UidRange) -> Self {
        Self {
            range,
            _lock: tempfile::tempfile().expect("a temporary file"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_held_by_one_server_is_refused_to_a_second() {
        if why_not().is_some() {
            return; // not root here: nothing to hold
        }
        // A range of its own, so that no server running here is disturbed.
        let range = UidRange {
            first: 4_000_000_000,
            last: 4_000_000_007,
        };
        let first = claim(ChildUids::Range(range), None).unwrap();
        assert!(first.is_some());
        let second = claim(ChildUids::Range(range), None).unwrap_err();
        assert!(
            second.contains("another server holds --child-uids 4000000000-4000000007"),
            "{second}"
        );
        drop(first);
        assert!(claim(ChildUids::Range(range), None).unwrap().is_some());
    }

    #[test]
    fn the_flag_reads_auto_off_or_a_range() {
        assert_eq!(ChildUids::parse("auto"), Ok(ChildUids::Auto));
        assert_eq!(ChildUids::parse("off"), Ok(ChildUids::Off));
        assert!(matches!(ChildUids::parse("5-9"), Ok(ChildUids::Range(_))));
        assert!(ChildUids::parse("on").is_err());
    }
}
