//! How many daemons the pool keeps ready: a size the operator pins, or one
//! the pool finds from the new sessions it sees (docs/design.md, "The daemon
//! pool"). Decisions are plain functions of the arrivals, the cap and the
//! memory the server can see, so they are tested without a browser.

use std::{
    collections::VecDeque,
    path::Path,
    time::{Duration, Instant},
};

/// The operator's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolSize {
    /// Sized by arrivals: nothing before the first new session, then at
    /// least [`FLOOR`], growing toward the largest group of new sessions
    /// seen within [`SPAN`], never above `cap` (`--max-sessions`) nor what
    /// memory allows.
    Auto { cap: usize },
    /// Exactly this many, warmed from the start; 0 is no pool.
    Pinned(usize),
}

impl PoolSize {
    pub(crate) fn is_enabled(self) -> bool {
        !matches!(self, Self::Pinned(0))
    }

    /// As the `started` record and `--help` spell it.
    pub(crate) fn to_json(self) -> serde_json::Value {
        match self {
            Self::Auto { .. } => serde_json::Value::from("auto"),
            Self::Pinned(n) => serde_json::Value::from(n),
        }
    }
}

/// What a self-sized pool keeps once a new session has come: the next one
/// should not wait for a daemon either.
pub(crate) const FLOOR: usize = 1;

/// New sessions this close together count as one group: about the time a
/// warm-up takes on a busy two-core host, so the pool holds what arrives
/// before a refill can land.
pub(crate) const SPAN: Duration = Duration::from_secs(2);

/// What one ready daemon is budgeted in memory: its process (~8 MiB) and
/// its tab's share of a renderer, with room to spare. Only half of the
/// memory the server can see is spent on the pool.
const BUDGET_PER_DAEMON: u64 = 64 * 1024 * 1024;

/// When new sessions asked for a daemon, within the pool's idle time.
#[derive(Debug, Default)]
pub(crate) struct Arrivals {
    seen: VecDeque<Instant>,
    /// Has any new session come since the server started?
    ever: bool,
}

impl Arrivals {
    pub(crate) fn note(&mut self, now: Instant) {
        self.seen.push_back(now);
        self.ever = true;
    }

    /// Forget arrivals older than `idle`: the pool falls back to its floor
    /// once none is left.
    pub(crate) fn forget_older_than(&mut self, idle: Duration, now: Instant) {
        while self
            .seen
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > idle)
        {
            self.seen.pop_front();
        }
    }

    /// The most arrivals within any [`SPAN`] among those remembered.
    pub(crate) fn peak(&self) -> usize {
        let mut peak = 0;
        let mut start = 0;
        for (end, t) in self.seen.iter().enumerate() {
            while t.saturating_duration_since(self.seen[start]) > SPAN {
                start += 1;
            }
            peak = peak.max(end - start + 1);
        }
        peak
    }

    /// Did another new session come within [`SPAN`] of the latest? Then
    /// more are likely: an empty pool refills at once instead of waiting for
    /// the calls to go quiet.
    pub(crate) fn is_frequent(&self) -> bool {
        let mut latest = self.seen.iter().rev();
        match (latest.next(), latest.next()) {
            (Some(last), Some(before)) => last.saturating_duration_since(*before) <= SPAN,
            _ => false,
        }
    }

    pub(crate) fn any_ever(&self) -> bool {
        self.ever
    }
}

/// How many daemons to keep ready now. `memory_cap` is what memory allows
/// (`None`: unknown, no bound from it).
pub(crate) fn target(size: PoolSize, arrivals: &Arrivals, memory_cap: Option<usize>) -> usize {
    match size {
        PoolSize::Pinned(n) => n,
        PoolSize::Auto { .. } if !arrivals.any_ever() => 0,
        PoolSize::Auto { cap } => arrivals
            .peak()
            .max(FLOOR)
            .min(cap)
            .min(memory_cap.unwrap_or(usize::MAX)),
    }
}

/// How many daemons the memory the server can see allows: half of its
/// cgroup's headroom where a limit is set, else half of the host's
/// available memory, at [`BUDGET_PER_DAEMON`] each.
pub(crate) fn memory_cap() -> Option<usize> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|own| cgroup_headroom(&own, Path::new("/sys/fs/cgroup")));
    let headroom = cgroup.or_else(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| mem_available(&m))
    })?;
    Some(usize::try_from(headroom / 2 / BUDGET_PER_DAEMON).unwrap_or(usize::MAX))
}

/// The least headroom (`memory.max` − `memory.current`) of the cgroup v2
/// named in `/proc/self/cgroup` and its ancestors that set a limit, or
/// `None` when none does.
pub(crate) fn cgroup_headroom(proc_self_cgroup: &str, root: &Path) -> Option<u64> {
    let own = proc_self_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))?
        .trim()
        .trim_start_matches('/');
    let mut dir = root.join(own);
    let mut least: Option<u64> = None;
    loop {
        let limit = std::fs::read_to_string(dir.join("memory.max")).ok();
        if let Some(max) = limit.and_then(|s| s.trim().parse::<u64>().ok()) {
            let current = std::fs::read_to_string(dir.join("memory.current"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0);
            let room = max.saturating_sub(current);
            least = Some(least.map_or(room, |l| l.min(room)));
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            return least;
        }
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub(crate) fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
#[path = "pool_size_tests.rs"]
mod tests;
