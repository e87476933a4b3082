//! What the agent saw and did, per action. After a call whose subcommand
//! can change the page (its row's `Witness`), an `evidence` record joins
//! the chain, sharing the call's `call_id`: the page before and after (its
//! URL, title and, at `--evidence images`, a small image kept in the store
//! beside the log under its digest) and the element acted on, as the
//! session's last snapshot named it. A record names an image only once the
//! image is synced, so `audit verify` can hold every image to its digest.
//!
//! All of it happens after the reply, off the call's path. The session's
//! next call waits for the look ([`Witnesses::looked`]), so "after" is what
//! this call left; at `digests` the record is written then too. The
//! session's turn is not held for it: to the registry (eviction, reaping)
//! the session is idle once its call has ended. At `images` the
//! screenshot is taken, masked, shrunk, stored and recorded once the next
//! call may start, in the order of the session's calls, and an image a
//! page-changing call may have raced says so. The "before" of a call is
//! the "after" of the session's previous action (named by its `call_id`);
//! the calls between them change no page.

mod picture;
mod refs;
mod room;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use serde_json::{Value, json};
use tokio::sync::OwnedMutexGuard;

use crate::{
    daemons::PageLook, obs::journal::Journal, policy::rules::Rules, runner::Runner,
    session_id::DaemonName, sync::lock,
};

/// Most bytes of a page title kept in a record.
const MAX_TITLE_BYTES: usize = 300;

/// Sessions whose last look and refs are remembered at once; past this the
/// least recently used idle one is forgotten (its next action's "before" is
/// then unseen). Sessions that end by `close` are forgotten at once.
const MAX_SESSIONS_REMEMBERED: usize = 1024;

/// What the evidence of a subcommand's call holds (a row of
/// `call::subcommand`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Witness {
    /// None: it reads, waits, or ends the session; it changes no page.
    Nothing,
    /// The page before and after.
    Page,
    /// The page before and after, and the element `argv[1]` names.
    Element,
}

/// `--evidence`: how much a call that can change the page leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Level {
    /// Nothing.
    Off,
    /// URL, title and element; no image.
    Digests,
    /// Also an image of the page before and after, masked and bounded.
    Images,
}

impl Level {
    /// As the flag spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Digests => "digests",
            Self::Images => "images",
        }
    }
}

/// How many bytes of images the store may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) per_session: u64,
    pub(crate) total: u64,
}

/// The evidence service; cheap to clone. At `--evidence off` it does
/// nothing at all.
#[derive(Debug, Clone, Default)]
pub(crate) struct Witnesses {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    level: Level,
    store: Option<audit::ImageStore>,
    bounds: Bounds,
    /// Bytes the store holds (its files at start, and every new image).
    held: AtomicU64,
    making_room: tokio::sync::Mutex<()>,
    sessions: Mutex<HashMap<DaemonName, Seen>>,
    /// Counts uses of `sessions`, so the least recently used goes first.
    ticks: AtomicU64,
}

/// What the service remembers of a session.
#[derive(Debug, Default)]
struct Seen {
    /// Held by the look after a call; the session's next call waits for it.
    looking: Arc<tokio::sync::Mutex<()>>,
    /// Ends when the record of its last look is written: the next look's
    /// record waits for it, so records follow the session's calls.
    recorded: Option<tokio::sync::oneshot::Receiver<()>>,
    /// The look after its last action, and that call's id.
    last: Option<(String, Value)>,
    refs: Option<refs::Refs>,
    /// Image bytes it added to the store.
    bytes: u64,
    /// Its calls that can change the page begun so far (at `images`): a
    /// screenshot that sees this move may show the work of the next one.
    begun: u64,
    /// When it was last used (`Inner::ticks`).
    used: u64,
}

/// A screenshot (or why none was taken), and whether the session's next
/// call began before it was.
type Taken = (
    Result<crate::daemons::Shot, crate::daemons::LookError>,
    bool,
);

/// Why an image that could be kept was not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotKept {
    #[error("no image store")]
    NoStore,
    #[error("the session's images reached their bound ({0} bytes)")]
    SessionBound(u64),
    #[error("one image is over the image store's bound ({0} bytes)")]
    StoreBound(u64),
    #[error("no room was made in the image store: {0}")]
    NoRoom(String),
    #[error("the image could not be stored: {0}")]
    Unwritten(String),
}

/// A call that ran, as its evidence needs it.
pub(crate) struct Acted {
    pub(crate) daemon: DaemonName,
    /// The subcommand's name.
    pub(crate) name: &'static str,
    pub(crate) witness: Witness,
    /// A `snapshot`: its refs name the elements of the calls after it.
    pub(crate) names_refs: bool,
    /// It ended the session: what was remembered of it goes.
    pub(crate) ended_session: bool,
    /// The element the command acted on (its `argv[1]`), as the session's
    /// last snapshot named it when the command ran ([`Witnesses::named`]):
    /// a snapshot read after it must not rename it.
    pub(crate) element: Option<Value>,
    /// agent-browser's output (a snapshot's refs are learnt from it).
    pub(crate) stdout: Vec<u8>,
    /// The command reached the browser (it was not withheld).
    pub(crate) ran: bool,
    /// The evidence record, its call's ids filled in.
    pub(crate) record: audit::Event,
    pub(crate) rules: Arc<Rules>,
}

impl Witnesses {
    /// The service at `level`; `store` is the image store when images are
    /// kept.
    pub(crate) fn new(level: Level, store: Option<audit::ImageStore>, bounds: Bounds) -> Self {
        if level == Level::Off {
            return Self::default();
        }
        let held = store
            .as_ref()
            .and_then(|s| s.bytes_held().ok())
            .unwrap_or(0);
        Self {
            inner: Some(Arc::new(Inner {
                level,
                store,
                bounds,
                held: AtomicU64::new(held),
                making_room: tokio::sync::Mutex::new(()),
                sessions: Mutex::default(),
                ticks: AtomicU64::new(0),
            })),
        }
    }

    /// A call of `daemon`'s whose `witness` is not `Nothing` is about to
    /// run: a screenshot still being taken of the page may show its work.
    pub(crate) fn begin(&self, daemon: &DaemonName, witness: Witness) {
        if let Some(inner) = &self.inner
            && inner.level == Level::Images
            && witness != Witness::Nothing
        {
            inner.seen(daemon, |seen| seen.begun += 1);
        }
    }

    /// The level, for the server's `started` record.
    pub(crate) fn level(&self) -> Level {
        self.inner.as_ref().map_or(Level::Off, |inner| inner.level)
    }

    /// The element `target` (a command's `argv[1]`) names, as the
    /// session's last snapshot named it: its role and name, and how a
    /// record names it. `None` when no snapshot named it (a selector, a ref
    /// not in the last snapshot, or evidence off).
    pub(crate) fn named(
        &self,
        daemon: &DaemonName,
        target: &str,
        secrets: &crate::policy::secrets::Secrets,
    ) -> (Option<(String, String)>, Value) {
        let Some(inner) = &self.inner else {
            return (None, refs::element(target, None, secrets));
        };
        inner.seen(daemon, |seen| {
            let refs = seen.refs.as_ref();
            let known = target
                .strip_prefix('@')
                .and_then(|id| refs?.get(id).cloned());
            (known, refs::element(target, refs, secrets))
        })
    }

    /// An image of `daemon`'s tab `target` as it is now, masked and kept in
    /// the store, for what an approval request shows: `("image", what a
    /// record says of it)` or `("image_withheld", why)`; `None` when images
    /// are not kept (below `--evidence images`).
    pub(crate) async fn picture(
        &self,
        journal: &Journal,
        runner: &Runner,
        (daemon, target): (&DaemonName, &crate::chromium_ids::TargetId),
        secrets: &crate::policy::secrets::Secrets,
    ) -> Option<(&'static str, Value)> {
        let inner = self.inner.as_ref().filter(|i| i.level == Level::Images)?;
        let kept = runner
            .shoot(daemon, target)
            .await
            .map_err(|e| e.to_string())
            .and_then(|shot| picture::keep(&shot, secrets).map_err(|e| e.to_string()));
        Some(match kept {
            Ok(kept) => match inner.store(journal, daemon, kept).await {
                Ok(image) => ("image", image),
                Err(why) => ("image_withheld", json!(why.to_string())),
            },
            Err(why) => ("image_withheld", json!(why)),
        })
    }

    /// Wait until the look after `daemon`'s previous call is taken: a call
    /// of the session is admitted only then (the session's turn is not held
    /// for it, so the registry never sees a session busy with its evidence).
    pub(crate) async fn looked(&self, daemon: &DaemonName) {
        if let Some(inner) = &self.inner {
            let looking = inner.seen(daemon, |seen| Arc::clone(&seen.looking));
            drop(looking.lock().await);
        }
    }

    /// After `acted`'s reply: learn a snapshot's refs, or look at the page
    /// and record the evidence; the session's next call waits for the look
    /// ([`Witnesses::looked`]).
    pub(crate) fn after(&self, journal: &Journal, runner: &Runner, acted: Acted) {
        let Some(inner) = self.inner.clone() else {
            return;
        };
        if acted.ended_session {
            lock(&inner.sessions).remove(&acted.daemon);
            return;
        }
        if !acted.ran || (acted.witness == Witness::Nothing && !acted.names_refs) {
            return;
        }
        if acted.witness == Witness::Nothing {
            inner.learn_refs_in_turn(&acted);
            return;
        }
        // Taken here, before the reply's call ends: the session's next call
        // cannot start before it (only one call of a session runs at once).
        let looking = inner.seen(&acted.daemon, |seen| Arc::clone(&seen.looking));
        let (journal, runner) = (journal.clone(), runner.clone());
        let Ok(held) = looking.try_lock_owned() else {
            // Every call waits for the look before it is admitted, so this
            // is not expected; if it happens, the record says so.
            tokio::spawn(async move {
                let busy = Err(crate::daemons::LookError::Busy);
                inner.witness(&journal, busy, None, acted).await;
            });
            return;
        };
        tokio::spawn(async move {
            let look = runner.look(&acted.daemon, None).await;
            if inner.level == Level::Images {
                inner
                    .shoot_after(&journal, &runner, look, acted, held)
                    .await;
            } else {
                // Nothing to shoot: the record is written before the
                // session's next call starts.
                let look = look.map(|(_, look)| look);
                inner.witness(&journal, look, None, acted).await;
            }
        });
    }
}

impl Inner {
    /// After the look (taken while `held`, the session's look lock, is
    /// held, so its next call waits for it): let the next call start, take
    /// the screenshot, and record, in the order of the session's calls.
    async fn shoot_after(
        &self,
        journal: &Journal,
        runner: &Runner,
        look: Result<(crate::chromium_ids::TargetId, PageLook), crate::daemons::LookError>,
        acted: Acted,
        held: OwnedMutexGuard<()>,
    ) {
        let (done, previous) = self.in_line(&acted.daemon);
        let begun = self.seen(&acted.daemon, |seen| seen.begun);
        drop(held);
        let shot = match &look {
            Ok((target, _)) => {
                let shot = runner.shoot(&acted.daemon, target).await;
                // A call of the session's that can change the page may
                // have begun meanwhile.
                let raced = self.seen(&acted.daemon, |seen| seen.begun) != begun;
                Some((shot, raced))
            }
            Err(_) => None,
        };
        if let Some(previous) = previous {
            // Sent, or dropped with a task that ended early: either way, done.
            let _ = previous.await;
        }
        let look = look.map(|(_, look)| look);
        self.witness(journal, look, shot, acted).await;
        let _ = done.send(());
    }

    /// A snapshot's refs, learnt before the session's next action is let
    /// in (it waits for the look lock, held here until they are): off the
    /// reply's path when the lock is free; on it, rarely, when the previous
    /// action's look still runs (a read does not wait for it).
    fn learn_refs_in_turn(self: &Arc<Self>, acted: &Acted) {
        let looking = self.seen(&acted.daemon, |seen| Arc::clone(&seen.looking));
        let Ok(held) = looking.try_lock_owned() else {
            self.learn_refs(&acted.daemon, &acted.stdout, &acted.rules);
            return;
        };
        let (inner, daemon) = (Arc::clone(self), acted.daemon.clone());
        let (stdout, rules) = (acted.stdout.clone(), Arc::clone(&acted.rules));
        tokio::spawn(async move {
            inner.learn_refs(&daemon, &stdout, &rules);
            drop(held);
        });
    }

    fn learn_refs(&self, daemon: &DaemonName, stdout: &[u8], rules: &Rules) {
        if let Some(refs) = refs::of_snapshot(stdout, &rules.secrets) {
            self.seen(daemon, |seen| seen.refs = Some(refs));
        }
    }

    /// Look at the page after `acted`, keep its image, and record both
    /// looks and the element.
    async fn witness(
        &self,
        journal: &Journal,
        look: Result<PageLook, crate::daemons::LookError>,
        shot: Option<Taken>,
        acted: Acted,
    ) {
        let after = match look {
            Ok(look) => self.described(journal, look, shot, &acted).await,
            Err(why) => json!({ "unseen": why.to_string() }),
        };
        let call_id = acted.record.call_id.clone();
        let before = self.seen(&acted.daemon, |seen| {
            match seen.last.replace((call_id, after.clone())) {
                Some((previous, mut look)) => {
                    look["after_call"] = json!(previous);
                    look
                }
                None => json!({"unseen": "no earlier action of this session was looked at"}),
            }
        });
        let mut record = acted.record;
        let mut evidence = json!({
            "subcommand": acted.name,
            "before": before,
            "after": after,
        });
        if let Some(element) = acted.element {
            evidence["element"] = element;
        }
        record.evidence = Some(evidence);
        if let Err(e) = journal.append_unattached(record) {
            tracing::error!(error = %e, "the evidence record could not be written");
        }
    }

    /// A look as the record holds it: the URL redacted, the title scrubbed,
    /// the image stored (or why not).
    async fn described(
        &self,
        journal: &Journal,
        look: PageLook,
        shot: Option<Taken>,
        acted: &Acted,
    ) -> Value {
        let rules = &acted.rules;
        let title = rules.secrets.scrub(&look.title);
        let mut described = json!({
            "url": rules.redactor.url(&rules.secrets.scrub(&look.url)),
            "title": crate::obs::journal::capped(&title, MAX_TITLE_BYTES),
        });
        if let Some((shot, raced)) = shot {
            if raced {
                // Said, not hidden: the image may show the next call's work.
                described["image_raced"] =
                    json!("the session's next call began before the screenshot was taken");
            }
            let kept = shot
                .map_err(|e| e.to_string())
                .and_then(|shot| picture::keep(&shot, &rules.secrets).map_err(|e| e.to_string()));
            match kept {
                Ok(kept) => match self.store(journal, &acted.daemon, kept).await {
                    Ok(image) => described["image"] = image,
                    Err(why) => described["image_withheld"] = json!(why.to_string()),
                },
                Err(why) => described["image_withheld"] = json!(why),
            }
        }
        described
    }

    /// Put an image in the store within the bounds; what the record says
    /// of it.
    async fn store(
        &self,
        journal: &Journal,
        daemon: &DaemonName,
        kept: picture::Kept,
    ) -> Result<Value, NotKept> {
        let store = self.store.clone().ok_or(NotKept::NoStore)?;
        let size = kept.png.len() as u64;
        let session_bytes = self.seen(daemon, |seen| seen.bytes);
        if session_bytes + size > self.bounds.per_session {
            return Err(NotKept::SessionBound(self.bounds.per_session));
        }
        if size > self.bounds.total {
            return Err(NotKept::StoreBound(self.bounds.total));
        }
        // One room-maker at a time: two would drop twice what is needed.
        let _making_room = self.making_room.lock().await;
        let over = (self.held.load(Ordering::Relaxed) + size).saturating_sub(self.bounds.total);
        if over > 0 {
            let (journal, room_in, bound) = (journal.clone(), store.clone(), self.bounds.total);
            let freed = tokio::task::spawn_blocking(move || {
                room::make_room(&journal, &room_in, over, bound)
            })
            .await
            .map_err(|e| NotKept::Unwritten(e.to_string()))?
            .map_err(|e| NotKept::NoRoom(e.to_string()))?;
            self.held.fetch_sub(
                freed.min(self.held.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        let png = kept.png;
        let stored = tokio::task::spawn_blocking(move || store.put(&png))
            .await
            .map_err(|e| NotKept::Unwritten(e.to_string()))?
            .map_err(|e| NotKept::Unwritten(e.to_string()))?;
        if stored.new {
            self.held.fetch_add(stored.bytes, Ordering::Relaxed);
            self.seen(daemon, |seen| seen.bytes += stored.bytes);
        }
        Ok(json!({
            "sha256": stored.sha256,
            "bytes": stored.bytes,
            "width": kept.width,
            "height": kept.height,
            "masked_fields": kept.masks.len(),
            "masks": kept.masks,
        }))
    }

    /// A place in the session's line of records: what to say when this
    /// one is written, and what to wait for before writing it.
    fn in_line(
        &self,
        daemon: &DaemonName,
    ) -> (
        tokio::sync::oneshot::Sender<()>,
        Option<tokio::sync::oneshot::Receiver<()>>,
    ) {
        let (done, recorded) = tokio::sync::oneshot::channel();
        let previous = self.seen(daemon, |seen| seen.recorded.replace(recorded));
        (done, previous)
    }

    /// Do `with` to what is remembered of `daemon`.
    fn seen<T>(&self, daemon: &DaemonName, with: impl FnOnce(&mut Seen) -> T) -> T {
        let mut sessions = lock(&self.sessions);
        if !sessions.contains_key(daemon) && sessions.len() >= MAX_SESSIONS_REMEMBERED {
            // The least recently used of those no look is running for: a
            // session whose look runs keeps its lock, or its next call would
            // not wait for it.
            let old = sessions
                .iter()
                .filter(|(_, seen)| Arc::strong_count(&seen.looking) == 1)
                .min_by_key(|(_, seen)| seen.used)
                .map(|(name, _)| name.clone());
            if let Some(old) = old {
                sessions.remove(&old);
            }
        }
        let tick = self.ticks.fetch_add(1, Ordering::Relaxed);
        let seen = sessions.entry(daemon.clone()).or_default();
        seen.used = tick;
        with(seen)
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
