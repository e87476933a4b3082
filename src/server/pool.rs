//! The pool: a few confined agent-browser daemons, each attached to a tab of
//! its own that has never left `about:blank`, started before any session
//! asks. A new session is bound to one on its first call, so that call does
//! not wait for a daemon to start and a tab to open (docs/design.md, "The
//! daemon pool").
//!
//! Every step is the server's own act and is audited before it is done:
//! `warming` (durable before the daemon starts), then `pooled` (its tab
//! and pid) or `closed` (it did not come up), `bound` when a session takes
//! it, `reaped` when the pool has gone unused for `--pool-idle-sec`.
//!
//! A pooled daemon is handed out only if it still runs and only once: it
//! leaves the queue under the registry's lock, and a session's entry then
//! carries its name. Its tab is fresh because nothing but the warm-up's
//! `get url` ever ran in it, and the browser gate hides it from every other
//! daemon.

use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{Duration, Instant},
};

use audit::Outcome;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::{
    admission::Admission,
    pool_size::{self, Arrivals, PoolSize},
    sessions::Sessions,
};
use crate::{
    chromium_ids::TargetId,
    obs::journal::new_call_id,
    runner::{Bounds, Termination},
    session_id::{DaemonName, SessionId, new_pool_name},
};

/// Why a pooled daemon did not come up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WarmFailure {
    #[error("audit unavailable, nothing was started: {0}")]
    Audit(audit::AuditError),
    #[error("the warm-up's agent-browser ended {how}: {stderr}")]
    Ended { how: String, stderr: String },
    #[error("the warm-up's reply is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the pooled tab is at {0:?}, not about:blank")]
    NotBlank(Option<String>),
    #[error("the pooled daemon wrote no tab id")]
    NoTab,
    #[error("no confined daemon listens on the pooled session's socket")]
    NoDaemon,
}

/// How long a warm-up (daemon start, CDP attach, new tab, `get url`) may
/// take.
const WARM_TIMEOUT: Duration = Duration::from_secs(30);

/// A warm-up starts once no call has run for this long: it costs a daemon
/// start and a tab's worth of CPU, which a session's next command should
/// not compete with (an agent's think time between calls is longer). A
/// pool that runs empty does not wait: new sessions are arriving.
const QUIET: Duration = Duration::from_millis(250);

/// How often the wait for quiet looks.
const QUIET_LOOK: Duration = Duration::from_millis(25);

/// ... but never waits longer than this for quiet.
const QUIET_AT_MOST: Duration = Duration::from_secs(5);

/// Warm-ups run side by side only to refill an empty pool: each is a
/// daemon start and a new tab, mostly waiting on Chromium, but on two cores
/// more than this would slow the calls they are for.
const MAX_WARMING_AT_ONCE: usize = 2;

/// How long a stopping server waits for a warm-up under way to end (the
/// whole stop is bounded by 5 s in `boot::serving`).
const STOP_WAITS_FOR_WARM_UP: Duration = Duration::from_secs(3);

/// The longest wait between two failed warm-ups (Chromium down): the audit
/// log gets one `closed` record per try, so tries slow down.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A daemon warmed for the next new session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pooled {
    /// Its `--session` name (`pool-` and 60 hex digits).
    pub(crate) name: DaemonName,
    /// The CDP target id of its tab (none when its warm-up failed or was
    /// cut short before it had one).
    pub(crate) tab: Option<TargetId>,
    /// The daemon's pid, as the kernel reported the socket's listener.
    pub(crate) pid: u32,
    /// When it became ready.
    pub(crate) ready_at: Instant,
}

impl Pooled {
    #[cfg(test)]
    pub(crate) fn for_test(name: &str) -> Self {
        Self {
            name: DaemonName::checked(name).unwrap(),
            tab: Some(TargetId::from_chromium("0123456789abcdef")),
            pid: std::process::id(),
            ready_at: Instant::now(),
        }
    }
}

/// The operator's settings: how many daemons to keep ready, and after how
/// long without a new session the pool is emptied (pinned) or falls back
/// to its floor (self-sized).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolSettings {
    pub(crate) size: PoolSize,
    pub(crate) idle: Duration,
}

/// A sizing decision, as records and metrics state it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizing {
    /// How many daemons the pool wants ready.
    pub(crate) target: usize,
    /// How many are ready.
    pub(crate) ready: usize,
    /// The most new sessions seen within [`pool_size::SPAN`].
    pub(crate) peak: usize,
    /// What memory allows, where known (self-sized pools only).
    pub(crate) memory_cap: Option<usize>,
}

impl Sizing {
    fn to_json(self) -> Value {
        json!({
            "target": self.target,
            "ready": self.ready,
            "peak_arrivals": self.peak,
            "memory_cap": self.memory_cap,
        })
    }
}

/// The ready daemons, oldest first.
#[derive(Debug)]
pub(crate) struct Pool {
    settings: PoolSettings,
    inner: Mutex<Inner>,
    /// A daemon was taken, or the pool is wanted again after being emptied.
    wake: Notify,
}

#[derive(Debug)]
struct Inner {
    ready: VecDeque<Pooled>,
    /// Taken from the queue but found dead: to be cleaned up.
    dead: Vec<Pooled>,
    /// When a new session last asked for a daemon (or the server started).
    last_wanted: Instant,
    /// Emptied for idleness (a pinned pool): not refilled until a new
    /// session asks.
    resting: bool,
    /// When new sessions asked, within the idle time (a self-sized pool's
    /// measure).
    arrivals: Arrivals,
    /// Daemons being warmed: a stop cuts their warm-up short, and what it
    /// started must still be closed.
    warming: Vec<DaemonName>,
    /// The server is stopping: no warm-up starts.
    stopping: bool,
}

impl Pool {
    pub(crate) fn new(settings: PoolSettings) -> Self {
        Self {
            settings,
            inner: Mutex::new(Inner {
                ready: VecDeque::new(),
                dead: Vec::new(),
                last_wanted: Instant::now(),
                resting: false,
                arrivals: Arrivals::default(),
                warming: Vec::new(),
                stopping: false,
            }),
            wake: Notify::new(),
        }
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.settings.size.is_enabled()
    }

    pub(crate) fn settings(&self) -> PoolSettings {
        self.settings
    }

    /// A ready daemon for a new session, if one still runs. Asking counts
    /// as wanting the pool: a resting pool starts refilling.
    pub(crate) fn take(&self) -> Option<Pooled> {
        if !self.is_enabled() {
            return None;
        }
        let mut inner = self.lock();
        let now = Instant::now();
        inner.last_wanted = now;
        inner.resting = false;
        inner.arrivals.note(now);
        let mut found = None;
        while let Some(pooled) = inner.ready.pop_front() {
            if crate::runner::is_alive(pooled.pid) {
                found = Some(pooled);
                break;
            }
            inner.dead.push(pooled);
        }
        drop(inner);
        self.wake.notify_one();
        found
    }

    /// How many daemons the pool wants now, and why.
    fn sizing(&self) -> Sizing {
        let memory_cap = match self.settings.size {
            PoolSize::Auto { .. } => pool_size::memory_cap(),
            PoolSize::Pinned(_) => None,
        };
        let mut inner = self.lock();
        inner
            .arrivals
            .forget_older_than(self.settings.idle, Instant::now());
        let target = if inner.resting {
            0
        } else {
            pool_size::target(self.settings.size, &inner.arrivals, memory_cap)
        };
        Sizing {
            target,
            ready: inner.ready.len(),
            peak: inner.arrivals.peak(),
            memory_cap,
        }
    }

    /// How many more daemons to warm now.
    fn missing(&self) -> usize {
        let sizing = self.sizing();
        sizing.target.saturating_sub(sizing.ready)
    }

    /// Should an empty pool refill before the calls go quiet? A pinned one
    /// always (its size says new sessions are expected); a self-sized one
    /// when new sessions come close together.
    fn is_urgent(&self) -> bool {
        match self.settings.size {
            PoolSize::Pinned(_) => true,
            PoolSize::Auto { .. } => self.lock().arrivals.is_frequent(),
        }
    }

    /// Is no daemon ready?
    fn is_empty(&self) -> bool {
        self.lock().ready.is_empty()
    }

    /// Until no daemon is ready (each take wakes it to look).
    async fn until_empty(&self) {
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            // Registered before the look: a take in between still wakes it.
            woken.as_mut().enable();
            if self.is_empty() {
                return;
            }
            woken.await;
        }
    }

    #[cfg(test)]
    fn put(&self, pooled: Pooled) {
        self.lock().ready.push_back(pooled);
    }

    /// Whether `name`'s warm-up may start (not once the server stops).
    fn begin_warming(&self, name: &DaemonName) -> bool {
        let mut inner = self.lock();
        if inner.stopping {
            return false;
        }
        inner.warming.push(name.clone());
        true
    }

    /// `name`'s warm-up is over; `ready`, what it warmed, joins the queue in
    /// the same step, so a stop that sees no warm-up sees the daemon.
    fn end_warming(&self, name: &DaemonName, ready: Option<Pooled>) {
        let mut inner = self.lock();
        inner.warming.retain(|n| n != name);
        inner.ready.extend(ready);
    }

    /// No more warm-ups; whether some are still under way.
    fn stop(&self) -> bool {
        let mut inner = self.lock();
        inner.stopping = true;
        !inner.warming.is_empty()
    }

    fn is_warming(&self) -> bool {
        !self.lock().warming.is_empty()
    }

    /// Everything to close: dead ones, and the ready ones the pool no
    /// longer wants (all of them at shutdown, with `all`): a pinned pool
    /// unused for its idle time rests empty; a self-sized one keeps what
    /// its sizing still wants, oldest first.
    fn to_close(&self, all: bool) -> (Vec<Pooled>, Vec<Pooled>) {
        let keep = match self.settings.size {
            PoolSize::Auto { .. } if !all => self.sizing().target,
            _ => 0,
        };
        let mut inner = self.lock();
        let dead = std::mem::take(&mut inner.dead);
        let unused = match self.settings.size {
            PoolSize::Auto { .. } if !all => {
                let keep = keep.min(inner.ready.len());
                inner.ready.drain(keep..).collect()
            }
            _ => {
                let idle = inner.last_wanted.elapsed() > self.settings.idle;
                if all || (idle && !inner.ready.is_empty()) {
                    inner.resting = true;
                    inner.ready.drain(..).collect()
                } else {
                    Vec::new()
                }
            }
        };
        (dead, unused)
    }

    /// Why ready daemons were closed, as their `reaped` records say.
    fn why_reaped(&self) -> String {
        let idle = self.settings.idle.as_secs();
        match self.settings.size {
            PoolSize::Pinned(_) => {
                format!("no new session for {idle} s: the pool is emptied until one comes")
            }
            PoolSize::Auto { .. } => format!(
                "the pool shrinks to what it wants now ({}): no new session for {idle} s \
                 brings it back to its floor of {}, and memory may allow fewer",
                self.sizing().target,
                pool_size::FLOOR
            ),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing here can be left half-updated by a panic; keep serving.
        crate::sync::lock(&self.inner)
    }
}

impl Sessions {
    /// Keep the pool full until the server stops: warm one daemon at a time
    /// (a warm-up is CPU-heavy; calls come first), back off while warm-ups
    /// fail, and empty the pool when no new session has wanted it for its
    /// idle time.
    pub(crate) async fn keep_pool(&self, admission: &Admission) {
        if !self.pool.is_enabled() {
            return;
        }
        let tick =
            (self.pool.settings().idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
        let mut backoff = Duration::ZERO;
        loop {
            self.close_dead_and_unused().await;
            if self.pool.missing() == 0 || admission.is_draining() {
                let _ = tokio::time::timeout(tick, self.pool.wake.notified()).await;
                continue;
            }
            // A pool that still holds a daemon serves the next new session
            // anyway: its refill waits for quiet. An empty one that new
            // sessions are arriving for (each would start its own daemon,
            // slower than a warm-up) refills at once, several at a time.
            if self.pool.is_empty() {
                if !self.pool.is_urgent() {
                    until_quiet(admission).await;
                }
            } else {
                // New sessions arriving back to back are never quiet: the
                // one that takes the last daemon ends the wait.
                tokio::select! {
                    () = until_quiet(admission) => {}
                    () = self.pool.until_empty() => {}
                }
            }
            match self.refill().await {
                None => backoff = Duration::ZERO,
                Some(why) => {
                    backoff = (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                    tracing::warn!(
                        error = %why,
                        retry_in_s = backoff.as_secs(),
                        "a pooled daemon did not start; new sessions start their own meanwhile"
                    );
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    }

    /// Daemons that exited in the pool, and those idle past the pool's
    /// shrinking, are closed and recorded.
    async fn close_dead_and_unused(&self) {
        let (dead, unused) = self.pool.to_close(false);
        for pooled in dead {
            self.close_pooled(
                &pooled,
                Outcome::Closed,
                "the pooled daemon exited before a session took it",
            )
            .await;
        }
        if !unused.is_empty() {
            let why = self.pool.why_reaped();
            for pooled in unused {
                self.close_pooled(&pooled, Outcome::Reaped, &why).await;
            }
            let sizing = self.pool.sizing();
            self.journal
                .telemetry()
                .pool_sized(sizing.target, sizing.ready);
        }
    }

    /// Warm what the pool is missing, a few at a time; each daemon joins
    /// the queue as soon as it is warm, not once its sibling is (a new
    /// session may be arriving for it). The last failure, if any.
    async fn refill(&self) -> Option<WarmFailure> {
        let sizing = self.pool.sizing();
        let at_once = sizing
            .target
            .saturating_sub(sizing.ready)
            .min(MAX_WARMING_AT_ONCE);
        self.journal
            .telemetry()
            .pool_sized(sizing.target, sizing.ready);
        let warmed = futures_util::future::join_all(
            (0..at_once).map(|_| async { self.warm_one(sizing).await.err() }),
        )
        .await;
        self.runner.forward_again().await;
        warmed.into_iter().flatten().last()
    }

    /// Start one daemon with its own fresh tab, audited before it starts,
    /// and put it in the pool; nothing once the server stops. (`WarmFailure`
    /// is logged and recorded, and the loop backs off.)
    async fn warm_one(&self, sizing: Sizing) -> Result<(), WarmFailure> {
        let name = new_pool_name();
        if !self.pool.begin_warming(&name) {
            return Ok(());
        }
        match self.warm(&name, sizing).await {
            Ok(pooled) => {
                self.pool.end_warming(&name, Some(pooled));
                Ok(())
            }
            Err(why) => {
                self.pool.end_warming(&name, None);
                Err(why)
            }
        }
    }

    async fn warm(&self, name: &DaemonName, sizing: Sizing) -> Result<Pooled, WarmFailure> {
        let name = name.clone();
        let session = SessionId::pooled(&name);
        let started = Instant::now();
        let mut event = pool_event(
            Outcome::Warming,
            "starting a daemon and a fresh tab for the next new session",
        );
        event.detail = Some(json!({ "daemon": name, "pool": sizing.to_json() }));
        let intent = self
            .journal
            .append_unattached_synced(event)
            .map_err(WarmFailure::Audit)?;
        let never = tokio_util::sync::CancellationToken::new();
        let bounds = Bounds {
            timeout: WARM_TIMEOUT,
            cancel: &never,
        };
        let batch = [vec!["get".to_owned(), "url".to_owned()]];
        let executed = self
            .runner
            .run(
                &session,
                &batch,
                bounds,
                false,
                std::future::ready(Ok(intent)),
            )
            .await;
        let checked = match executed.raw.termination {
            Termination::Exited(0) => self.check_warmed(&name, &executed.raw.stdout).await,
            ref other => Err(WarmFailure::Ended {
                how: format!("{other:?}"),
                stderr: String::from_utf8_lossy(&executed.raw.stderr)
                    .trim()
                    .to_owned(),
            }),
        };
        match checked {
            Ok((tab, pid)) => {
                // Rendered and labelled now, off any call's path (the loop
                // brings the watched tab forward again after the warm-ups),
                // and before its record says it is ready: a session may
                // take it as soon as it is.
                self.runner.ready_in_front(&session).await;
                // The first call of the session bound to it takes this
                // standby instead of spawning.
                self.runner.prepare_standby(&session);
                let mut event = pool_event(Outcome::Pooled, "ready for the next new session");
                event.detail = Some(json!({
                    "daemon": name,
                    "tab": tab,
                    "pid": pid,
                    "warm_ms": started.elapsed().as_millis(),
                }));
                self.append_pool_event(event);
                Ok(Pooled {
                    name,
                    tab: Some(tab),
                    pid,
                    ready_at: Instant::now(),
                })
            }
            Err(why) => {
                let failed = Pooled {
                    name,
                    tab: None,
                    pid: 0,
                    ready_at: Instant::now(),
                };
                let reason = format!("the pooled daemon did not come up: {why}");
                self.close_pooled(&failed, Outcome::Closed, &reason).await;
                Err(why)
            }
        }
    }

    /// Did the warm-up leave a running daemon on a tab of its own that is
    /// still `about:blank`? Its tab id and pid, or why not.
    async fn check_warmed(
        &self,
        name: &DaemonName,
        stdout: &[u8],
    ) -> Result<(TargetId, u32), WarmFailure> {
        let items: Value = serde_json::from_slice(stdout).map_err(WarmFailure::NotJson)?;
        let url = items.pointer("/0/result/url").and_then(Value::as_str);
        if url != Some("about:blank") {
            return Err(WarmFailure::NotBlank(url.map(str::to_owned)));
        }
        let tab = crate::daemons::pinned_target(self.runner.socket_dir(), name)
            .ok_or(WarmFailure::NoTab)?;
        let pid = self
            .runner
            .daemon_of(name)
            .await
            .ok_or(WarmFailure::NoDaemon)?;
        Ok((tab, pid))
    }

    /// Record the binding of `session_id` to a pooled daemon, before its
    /// first command's intent.
    pub(super) fn record_bound(&self, session_id: &str, pooled: &Pooled) {
        let mut event = pool_event(
            Outcome::Bound,
            "a new session takes a pooled daemon and its fresh tab",
        );
        event.session_id = Some(session_id.to_owned());
        event.detail = Some(json!({
            "daemon": pooled.name,
            "tab": pooled.tab,
            "pid": pooled.pid,
            "pooled_for_ms": pooled.ready_at.elapsed().as_millis(),
        }));
        self.append_pool_event(event);
    }

    /// Close a pooled daemon nobody uses: recorded first, then its daemon,
    /// tab and files go, and its browser context with the window that said
    /// it waited (left behind, its pages would send to a proxy that is gone).
    async fn close_pooled(&self, pooled: &Pooled, outcome: Outcome, reason: &str) {
        let mut event = pool_event(outcome, reason);
        event.detail = Some(json!({ "daemon": pooled.name, "tab": pooled.tab }));
        self.append_pool_event(event);
        let mut problems = self
            .runner
            .retire(&pooled.name, None, &self.output_dir)
            .await;
        if let Err(e) = self.gate.end_session(&pooled.name).await {
            problems.push(format!("its browser context was not disposed of: {e}"));
        }
        if !problems.is_empty() {
            let mut event = pool_event(Outcome::RetireIncomplete, &problems.join("; "));
            event.detail = Some(json!({ "daemon": pooled.name }));
            self.append_pool_event(event);
        }
    }

    /// At exit: close the daemons no session took (bound ones are sessions
    /// and stay, like any other).
    pub(crate) async fn empty_pool(&self) {
        // A warm-up under way ends first (for a while): closed while its
        // daemon still connects, its browser context would be made again
        // at the first connection and outlive the server.
        if self.pool.stop() {
            let give_up = Instant::now() + STOP_WAITS_FOR_WARM_UP;
            while self.pool.is_warming() && Instant::now() < give_up {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let (dead, unused) = self.pool.to_close(true);
        for pooled in dead.iter().chain(&unused) {
            self.close_pooled(pooled, Outcome::Closed, "the server is stopping")
                .await;
        }
        let cut_short = std::mem::take(&mut self.pool.lock().warming);
        for name in cut_short {
            let unfinished = Pooled {
                name,
                tab: None,
                pid: 0,
                ready_at: Instant::now(),
            };
            let why = "the server is stopping; the daemon's warm-up was cut short";
            self.close_pooled(&unfinished, Outcome::Closed, why).await;
        }
    }

    fn append_pool_event(&self, event: audit::Event) {
        if let Err(e) = self.journal.append_unattached(event) {
            tracing::error!(error = %e, "audit record of the daemon pool not written");
        }
    }
}

/// Until no call has run for [`QUIET`] (looked at every [`QUIET_LOOK`], so
/// the wait ends soon after the last call does), or [`QUIET_AT_MOST`] has
/// passed.
async fn until_quiet(admission: &Admission) {
    let now = tokio::time::Instant::now();
    let give_up = now + QUIET_AT_MOST;
    let mut last_busy = now;
    let mut served = admission.calls_served();
    loop {
        tokio::time::sleep(QUIET_LOOK).await;
        let now = tokio::time::Instant::now();
        let seen = admission.calls_served();
        if seen != served || !admission.is_idle() {
            served = seen;
            last_busy = now;
        }
        if now.duration_since(last_busy) >= QUIET || now >= give_up {
            return;
        }
    }
}

fn pool_event(outcome: Outcome, reason: &str) -> audit::Event {
    let mut event = audit::Event::new(audit::Phase::Lifecycle, new_call_id());
    event.outcome = Some(outcome);
    event.reason = Some(reason.to_owned());
    event
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
