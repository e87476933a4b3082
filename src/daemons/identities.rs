//! One uid per daemon, from a range the operator gives (`--child-uids`):
//! the kernel's word for which session a process, socket or file belongs to.
//!
//! Every child runs under Landlock, seccomp and no capabilities, but as one
//! user it could still reach another session by routes those layers do not
//! split: the browser gate (a TCP connection says no more than the name the
//! child puts in its path), another daemon's unix socket, /proc of another
//! session's processes, files another session left in /tmp. Under a uid of
//! its own, each of those is the kernel's to refuse: the gate asks the
//! kernel whose socket dialled it (`crate::gate`), a socket or file made
//! under the children's umask (077) opens for its owner only, and /proc
//! reads of another uid's process need a capability no child has.
//!
//! The assignment is the server's alone (a memo in the state dir, which no
//! child may write), so a server that adopts a previous one's daemons knows
//! their uids again; a uid is never given to two live daemons.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Mutex,
};

use crate::{session_id::DaemonName, sync::lock};

/// A uid of the children's range; the gid is the same number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ChildUid(u32);

impl ChildUid {
    pub(crate) fn get(self) -> u32 {
        self.0
    }

    /// The identity a child switches to.
    pub(crate) fn identity(self) -> hardening::Identity {
        hardening::Identity {
            uid: self.0,
            gid: self.0,
        }
    }
}

impl std::fmt::Display for ChildUid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The children's uids: `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UidRange {
    pub(crate) first: u32,
    pub(crate) last: u32,
}

impl UidRange {
    pub(crate) fn contains(self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    /// `FIRST-LAST`, as `--child-uids` takes it.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let (first, last) = text
            .split_once('-')
            .ok_or_else(|| format!("{text:?} is not FIRST-LAST (e.g. 2100000000-2100065535)"))?;
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("{s:?} is not a uid (0 to 4294967294)"))
        };
        let (first, last) = (number(first)?, number(last)?);
        if first == 0 || last < first || last == u32::MAX {
            return Err(format!(
                "{text:?}: the range must not include uid 0 or 4294967295, and FIRST ≤ LAST"
            ));
        }
        Ok(Self { first, last })
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// Which daemon has which uid. Off (`range` None), every child runs as the
/// server's own user, as before the range existed.
#[derive(Debug, Default)]
pub(crate) struct Identities {
    range: Option<UidRange>,
    /// Holds `range` for this server alone while it runs.
    _claim: Option<super::uid_claim::Claim>,
    memo: Option<PathBuf>,
    assigned: Mutex<Assigned>,
}

#[derive(Debug, Default)]
struct Assigned {
    by_daemon: HashMap<String, ChildUid>,
    /// Where the next search for a free uid starts: uids go round the
    /// range, so one just released is the last to be given again.
    next: u32,
}

impl Identities {
    /// Identities from the range `claim` holds, remembered in `memo` (a
    /// server-owned file): what a previous server assigned in the same
    /// range is read back.
    pub(crate) fn new(claim: Option<super::uid_claim::Claim>, memo: Option<PathBuf>) -> Self {
        let range = claim.as_ref().map(|c| c.range);
        let mut assigned = Assigned::default();
        if let Some(range) = range {
            assigned.next = range.first;
            if let Some((used, by_daemon)) = memo.as_deref().and_then(read_memo)
                && used == range
            {
                assigned.by_daemon = by_daemon;
            }
        }
        Self {
            range,
            _claim: claim,
            memo,
            assigned: Mutex::new(assigned),
        }
    }

    /// The range a previous server remembered in `memo`, to be claimed
    /// again first.
    pub(crate) fn remembered_range(memo: &Path) -> Option<UidRange> {
        read_memo(memo).map(|(range, _)| range)
    }

    /// Separation is on.
    pub(crate) fn range(&self) -> Option<UidRange> {
        self.range
    }

    /// `daemon`'s uid, given now if it has none; `Ok(None)` when separation
    /// is off. Fails only when every uid of the range is taken.
    pub(crate) fn for_daemon(&self, daemon: &str) -> Result<Option<ChildUid>, String> {
        let Some(range) = self.range else {
            return Ok(None);
        };
        let mut assigned = lock(&self.assigned);
        if let Some(uid) = assigned.by_daemon.get(daemon) {
            return Ok(Some(*uid));
        }
        let taken: std::collections::HashSet<u32> =
            assigned.by_daemon.values().map(|u| u.0).collect();
        let span = u64::from(range.last - range.first) + 1;
        let start = assigned.next.clamp(range.first, range.last);
        let free = (0..span)
            .map(|i| range.first + ((u64::from(start - range.first) + i) % span) as u32)
            .find(|uid| !taken.contains(uid))
            .ok_or_else(|| {
                format!("every uid of --child-uids {range} is in use by a daemon; widen the range")
            })?;
        assigned.next = if free == range.last {
            range.first
        } else {
            free + 1
        };
        assigned.by_daemon.insert(daemon.to_owned(), ChildUid(free));
        self.write_memo(&assigned.by_daemon);
        Ok(Some(ChildUid(free)))
    }

    /// `daemon`'s uid, if it has one.
    pub(crate) fn known(&self, daemon: &str) -> Option<ChildUid> {
        lock(&self.assigned).by_daemon.get(daemon).copied()
    }

    /// The daemon that holds `uid`, if any.
    pub(crate) fn daemon_of(&self, uid: u32) -> Option<DaemonName> {
        lock(&self.assigned)
            .by_daemon
            .iter()
            .find(|(_, u)| u.0 == uid)
            .and_then(|(name, _)| DaemonName::checked(name))
    }

    /// A uid of the range no daemon holds now, for a child that is no
    /// daemon's (the start's self-test); not recorded.
    pub(crate) fn spare(&self) -> Option<ChildUid> {
        let range = self.range?;
        let assigned = lock(&self.assigned);
        (range.first..=range.last)
            .rev()
            .find(|uid| !assigned.by_daemon.values().any(|u| u.0 == *uid))
            .map(ChildUid)
    }

    /// The daemon is gone: its uid may be given again (last).
    pub(crate) fn release(&self, daemon: &str) {
        let mut assigned = lock(&self.assigned);
        if assigned.by_daemon.remove(daemon).is_some() {
            self.write_memo(&assigned.by_daemon);
        }
    }

    fn write_memo(&self, by_daemon: &HashMap<String, ChildUid>) {
        let (Some(path), Some(range)) = (&self.memo, self.range) else {
            return;
        };
        let daemons: serde_json::Map<String, serde_json::Value> = by_daemon
            .iter()
            .map(|(name, uid)| (name.clone(), uid.0.into()))
            .collect();
        let memo = serde_json::json!({"range": range.to_string(), "daemons": daemons});
        if let Err(e) = super::write_memo(path, memo.to_string().as_bytes()) {
            tracing::warn!(error = %e, memo = %path.display(), "the daemons' uids could not be remembered for a later server");
        }
    }
}

/// The memo's range and the assignment in it; an entry outside the range,
/// a uid given twice or a name that is no daemon's is dropped.
fn read_memo(path: &Path) -> Option<(UidRange, HashMap<String, ChildUid>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let memo: serde_json::Value = serde_json::from_str(&text).ok()?;
    let range = UidRange::parse(memo.get("range")?.as_str()?).ok()?;
    let mut seen = std::collections::HashSet::new();
    let by_daemon = memo
        .get("daemons")?
        .as_object()?
        .iter()
        .filter_map(|(name, uid)| {
            let uid = u32::try_from(uid.as_u64()?).ok()?;
            (crate::session_id::is_daemon_name(name) && range.contains(uid) && seen.insert(uid))
                .then(|| (name.clone(), ChildUid(uid)))
        })
        .collect();
    Some((range, by_daemon))
}

#[cfg(test)]
#[path = "identities_tests.rs"]
mod tests;
