//! One tool call, start to finish, as a one-way pipeline:
//!
//! request → validate → grammar → policy → audit intent → confined spawn →
//! normalize → audit outcome → reply.
//!
//! Every branch ends in a [`Reply`] and at least one audit record. A refusal is
//! recorded as a single `denied` record; an allowed call gets an `intent`
//! record, synced to disk *before* the child is spawned, and an `outcome`
//! record after, written before the reply and synced within 100 ms (see
//! `Pipeline::append`). If the intent cannot be written, nothing runs. Each
//! record, once in the log, is copied to OTLP, best effort, inside the call's
//! span.

use std::{net::IpAddr, path::PathBuf, sync::Arc, time::Instant};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::{
    command::{self, Slot},
    config::Prepared,
    exec::{Runner, Termination, Withhold},
    laps::Laps,
    outcome::{self, Reply, exit_code},
    outputs,
    policy::UrlPolicy,
    record::{CallRecord, confinement_record, redact_argv},
    refusal::Refusal,
    request::{self, ValidRequest},
    resolve::{Resolve, SystemResolver},
    session::SessionId,
    sessions::{Admission, Overflow, Retiring, Sessions},
    telemetry::{ActiveCall, CallMeta, CallOutcome, Telemetry},
};

/// Who is calling, as far as the protocol tells us.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    pub request_id: Option<String>,
    pub client: Option<String>,
    pub protocol_version: Option<String>,
    /// W3C trace context from `params._meta`.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub cancel: CancellationToken,
}

/// Shared state of the server: built once, used by every call.
pub struct Pipeline {
    pub runner: Runner,
    pub audit: Arc<audit::Sink>,
    pub redactor: audit::Redactor,
    pub telemetry: Telemetry,
    pub url_policy: UrlPolicy,
    pub resolver: Arc<dyn Resolve>,
    pub output_dir: PathBuf,
    pub max_output_bytes: usize,
    limits: Limits,
    inflight: tokio::sync::Semaphore,
    sessions: Sessions,
    /// Set on SIGTERM: new calls are refused.
    draining: std::sync::atomic::AtomicBool,
    /// Cancelled when draining runs out of patience: in-flight calls stop.
    shutdown: CancellationToken,
}

/// How much may run at once, how long a call waits for its turn, and how
/// many sessions may live.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_inflight: u32,
    pub busy_wait: std::time::Duration,
    pub max_sessions: usize,
    pub overflow: Overflow,
    pub session_idle: std::time::Duration,
    pub output_quota: outputs::Quota,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("runner", &self.runner)
            .field("url_policy", &self.url_policy)
            .finish_non_exhaustive()
    }
}

/// How long the navigation guard's reset to about:blank may take.
const RESET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How a call ended, for its span.
#[derive(Debug, Clone)]
enum Verdict {
    Allowed {
        subcommand: String,
        error_type: Option<&'static str>,
    },
    Denied {
        rule: &'static str,
        subcommand: Option<String>,
    },
    AuditUnavailable {
        subcommand: Option<String>,
    },
}

/// One call in flight: its identity in the audit log and its span.
struct Call<'a> {
    record: CallRecord,
    span: &'a ActiveCall,
    started: Instant,
}

impl Pipeline {
    pub fn new(prepared: Prepared, telemetry: Telemetry) -> Self {
        Self {
            runner: prepared.runner,
            audit: Arc::new(prepared.audit),
            redactor: prepared.redactor,
            telemetry,
            resolver: Arc::new(SystemResolver {
                timeout: prepared.url_policy.dns_timeout,
            }),
            url_policy: prepared.url_policy,
            output_dir: prepared.output_dir,
            max_output_bytes: prepared.max_output_bytes,
            limits: prepared.limits,
            inflight: tokio::sync::Semaphore::new(prepared.limits.max_inflight as usize),
            sessions: Sessions::new(prepared.limits.max_sessions, prepared.limits.overflow),
            draining: std::sync::atomic::AtomicBool::new(false),
            shutdown: CancellationToken::new(),
        }
    }

    /// Handle a `tools/call` of `browser-shell` with these raw arguments.
    pub async fn handle(&self, arguments: Option<&Map<String, Value>>, ctx: &CallContext) -> Reply {
        let hint = request::session_hint(arguments);
        let span = self.start_span(ctx, hint.as_ref().map(SessionId::as_str));
        let call = self.call(ctx, &span);
        let (reply, verdict) = self.run(arguments, ctx, &call, hint).await;
        self.finish_span(span, &reply, &verdict);
        reply
    }

    async fn run(
        &self,
        arguments: Option<&Map<String, Value>>,
        ctx: &CallContext,
        call: &Call<'_>,
        hint: Option<SessionId>,
    ) -> (Reply, Verdict) {
        if self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            let refusal = Refusal::new(
                "server.shutting_down",
                "the server is shutting down; call again later",
            );
            return self.deny(call, hint.as_ref(), None, &refusal);
        }
        let request = match request::validate(arguments) {
            Ok(request) => request,
            Err(refusal) => return self.deny(call, hint.as_ref(), None, &refusal),
        };
        let session_id = request.session.as_str();
        let subcommand = request.argv.first().cloned().unwrap_or_default();
        let (tokens, resolved, output) = match self.plan(&request).await {
            Ok(planned) => planned,
            Err(refusal) => {
                return self.deny(call, Some(&request.session), Some(&request.argv), &refusal);
            }
        };

        // One call at a time per session (agent-browser serialises in its
        // daemon anyway, and the wrapper's own bookkeeping must not
        // interleave), and at most `max_inflight` calls at all. Each wait is
        // bounded: a call that cannot start in time is refused as busy.
        let wait = self.limits.busy_wait;
        // One bound for the whole admission, however often it starts over.
        let give_up = tokio::time::Instant::now() + wait;
        let busy = |what: String| Refusal::new("limits.busy", what);
        let mut tries = 0;
        let _session_turn = loop {
            let lock = match self
                .sessions
                .admit(request.session.daemon_name(), request.session.as_str())
            {
                Admission::Go(lock) => lock,
                Admission::Evicted(lock, victim) => {
                    self.retire(
                        victim,
                        "evicted",
                        "the session cap was reached; least recently used idle session",
                    )
                    .await;
                    lock
                }
                Admission::Full => {
                    let refusal = Refusal::new(
                        "limits.sessions",
                        format!(
                            "{} sessions are already live; close one (argv [\"close\"]) or wait for idle ones to be reaped",
                            self.limits.max_sessions
                        ),
                    );
                    return self.deny(call, Some(&request.session), Some(&request.argv), &refusal);
                }
            };
            let turn = tokio::select! {
                turn = tokio::time::timeout_at(give_up, Arc::clone(&lock).lock_owned()) => match turn {
                    Ok(turn) => turn,
                    Err(_) => {
                        let refusal = busy(format!("the session is still busy with its previous call after {} s; try again", wait.as_secs()));
                        return self.deny(call, Some(&request.session), Some(&request.argv), &refusal);
                    }
                },
                () = ctx.cancel.cancelled() => {
                    let refusal = Refusal::new("call.cancelled", "cancelled while waiting for the session's previous call");
                    return self.deny(call, Some(&request.session), Some(&request.argv), &refusal);
                }
            };
            // The session may have been retired (reaped, evicted) while this
            // call waited for its turn: then it starts anew, as a new session.
            if self
                .sessions
                .is_current(request.session.daemon_name(), &lock)
            {
                break turn;
            }
            tries += 1;
            if tries == 3 {
                let refusal = busy(
                    "the session kept being retired while this call waited; try again".to_owned(),
                );
                return self.deny(call, Some(&request.session), Some(&request.argv), &refusal);
            }
        };
        let _slot = match tokio::time::timeout(wait, self.inflight.acquire()).await {
            Ok(Ok(slot)) => slot,
            _ => {
                let refusal = busy(format!(
                    "{} calls are already running; none finished within {} s; try again",
                    self.limits.max_inflight,
                    wait.as_secs()
                ));
                return self.deny(call, Some(&request.session), Some(&request.argv), &refusal);
            }
        };

        let confinement = confinement_record(self.runner.confinement.report());
        let mut intent = call
            .record
            .event(audit::Phase::Intent, Some(&request.session));
        intent.argv = Some(redact_argv(&self.redactor, &request.argv));
        intent.argv_mac = Some(self.redactor.argv_mac(&request.argv));
        intent.verdict = Some("allowed");
        intent.confinement = Some(confinement.clone());
        if !resolved.is_empty() {
            intent.resolved = Some(resolved.iter().map(ToString::to_string).collect());
        }
        let mut laps = Laps::start(call.started);
        // The intent must be on disk before the child gets its batch. A
        // call that must spawn its child lets the `fdatasync` run while it
        // spawns (below); one whose session has a standby ready spawns
        // nothing, so it syncs right here, in the same blocking section as
        // the write: overlapping would only add two thread hand-offs (one
        // to a blocking thread, one back), ≈ 0.1 ms on this path.
        let overlap_sync = !self.runner.standbys.is_ready(request.session.daemon_name());
        let durability = if overlap_sync {
            audit::Durability::Deferred
        } else {
            audit::Durability::Synced
        };
        let intent_written = self.append_with(call, intent, durability);
        laps.lap("intent");
        if let Err(e) = intent_written {
            tracing::error!(error = %e, "audit intent not written; refusing the call");
            let reply = Reply::internal(
                session_id,
                &format!("audit unavailable, nothing was run: {e}"),
            );
            return (
                reply,
                Verdict::AuditUnavailable {
                    subcommand: Some(subcommand),
                },
            );
        }

        let guard = outcome::Guard::for_command(&tokens, self.url_policy.navigation_guard);
        // Chromium renders only the visible tab of a window: in a background
        // tab agent-browser's actions (click, fill, …) wait out a 5 s
        // timeout. Each session has its own pinned tab; bring it to the
        // front as the batch goes out (through Chromium, not agent-browser,
        // whose `tab` command would drop the session's snapshot refs).
        // `open`, `get` and `close` do not need it, nor does `snapshot`: it
        // reads the accessibility tree, which a background tab serves the
        // same (same refs, same time; a `click` there took 5 s). Activating
        // anyway switched tabs whenever two sessions took turns on one
        // Chromium, and the snapshot waited for that: 38 ms a `snapshot -i`
        // against 11 ms without (one session alone: no difference).
        let front = tokens
            .first()
            .is_some_and(|t| !matches!(t.as_str(), "open" | "get" | "close" | "snapshot"));
        let batch = Self::batch_for(tokens, guard);
        // The client's cancellation, or the server's shutdown, stops the call.
        let cancel = self.shutdown.child_token();
        let forward = {
            let (from_client, to_call) = (ctx.cancel.clone(), cancel.clone());
            tokio::spawn(async move {
                from_client.cancelled().await;
                to_call.cancel();
            })
        };
        // The intent is written; unless it is synced already, its fdatasync
        // runs while the child starts, and the child gets its batch only
        // once that sync succeeded (see `Runner::run`). Started here, before
        // the spawn, not at first poll.
        let intent_synced = {
            let sync = overlap_sync.then(|| {
                tokio::task::spawn_blocking({
                    let audit = Arc::clone(&self.audit);
                    move || audit.sync()
                })
            });
            async move {
                let Some(sync) = sync else {
                    return Ok(());
                };
                match sync.await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(e) => Err(format!("the audit sync did not finish: {e}")),
                }
            }
        };
        // The session's last command ended without the guard looking at the
        // page (it failed, timed out or was cancelled): look now, before
        // this command acts on whatever page that is.
        let look_first = guard.is_on() && self.sessions.is_unlooked(request.session.daemon_name());
        let release = async {
            intent_synced.await.map_err(Withhold::Audit)?;
            if look_first {
                self.look_before(&request.session).await?;
            }
            // A screenshot's room is made (the oldest files deleted) last:
            // it is the call's first side effect, due only once the intent
            // is durable and the guard let the command run.
            if let Some(dir) = output.as_ref().and_then(|file| file.parent()) {
                self.make_room(&request.session, dir).await;
            }
            Ok(())
        };
        let raw = self
            .runner
            .run(
                &request.session,
                &batch,
                request.timeout,
                &cancel,
                front,
                release,
            )
            .await;
        forward.abort();
        laps.lap("agent_browser");
        if let Termination::Withheld(Withhold::Audit(why)) = &raw.termination {
            tracing::error!(error = %why, "audit intent not synced; the command was withheld and its process killed");
            return (
                Reply::internal(
                    session_id,
                    &format!("audit unavailable, nothing was run: {why}"),
                ),
                Verdict::AuditUnavailable {
                    subcommand: Some(subcommand),
                },
            );
        }
        if subcommand == "close" && matches!(raw.termination, Termination::Exited(0)) {
            self.sessions.forget(request.session.daemon_name());
            self.runner.standbys.discard(request.session.daemon_name());
        } else {
            self.sessions.touch(request.session.daemon_name());
        }
        let mut reply = outcome::normalize(session_id, &raw, self.max_output_bytes, guard);
        let (mut outcome_name, mut error_type) = match &raw.termination {
            Termination::Exited(0) if reply.exit_code == 0 => ("ok", None),
            Termination::Exited(_) | Termination::Signaled(_) => ("error", Some("tool_error")),
            Termination::TimedOut => ("timeout", Some("timeout")),
            Termination::Cancelled => ("cancelled", Some("cancelled")),
            Termination::SpawnFailed(_) => ("spawn_failed", Some("spawn_failed")),
            Termination::Withheld(Withhold::Audit(_)) => {
                ("audit_unavailable", Some("audit_unavailable"))
            }
            Termination::Withheld(Withhold::Blocked { .. }) => {
                ("navigation_blocked", Some("navigation_blocked"))
            }
        };
        let mut blocked = None;
        let verdict = match &raw.termination {
            // It looked before the command, which never ran.
            Termination::Withheld(Withhold::Blocked { page, why }) => Some(Err((
                page.clone(),
                format!(
                    "{why}; the command was not run (the guard looked first: the session's last command had ended unchecked)"
                ),
            ))),
            _ if guard.is_on() && reply.exit_code == 0 => {
                let page = match outcome::guard_read(&raw, guard) {
                    outcome::GuardRead::Url(url) => Some(url),
                    // Read mid-navigation: look again once it has settled.
                    outcome::GuardRead::Failed => self.read_page_url(&request.session, true).await,
                    outcome::GuardRead::NotRun => None,
                };
                Some(match &page {
                    Some(page) => self
                        .guard(page)
                        .await
                        .map_err(|r| (page.clone(), r.message)),
                    // Fail closed: a page whose URL cannot be read is not known to be allowed.
                    None => Err((
                        "an unknown URL".to_owned(),
                        "the page URL could not be read after the command".to_owned(),
                    )),
                })
            }
            _ => None,
        };
        if guard.is_on() {
            self.sessions
                .set_unlooked(request.session.daemon_name(), verdict.is_none());
        }
        if let Some(Err((page, why))) = verdict {
            // The page already went there (a browser follows links and
            // redirects before anyone can look); take it away again.
            // Not the agent's timeout or cancellation: this must happen.
            let reset = vec![vec!["open".to_owned(), "about:blank".to_owned()]];
            let reset = self
                .runner
                .run(
                    &request.session,
                    &reset,
                    RESET_TIMEOUT,
                    &self.shutdown.child_token(),
                    false,
                    // Part of this call, whose intent is already durable.
                    std::future::ready(Ok(())),
                )
                .await;
            let reset = if matches!(reset.termination, Termination::Exited(0)) {
                "the session was sent to about:blank".to_owned()
            } else {
                // Whatever the page is, the session's daemon no longer
                // serves it; the next command looks first.
                self.runner.kill_daemon(request.session.daemon_name()).await;
                self.sessions
                    .set_unlooked(request.session.daemon_name(), true);
                format!(
                    "sending the session to about:blank failed ({:?}), so its browser daemon was stopped",
                    reset.termination
                )
            };
            // A screenshot of that page is not left behind either.
            // (Only one this call wrote: a withheld command wrote nothing.)
            let wrote = !matches!(raw.termination, Termination::Withheld(_));
            let removed = match &output {
                Some(file) if wrote && std::fs::remove_file(file).is_ok() => {
                    "; the screenshot was deleted"
                }
                _ => "",
            };
            let refusal = Refusal::new(
                "navigation.blocked",
                format!(
                    "the page navigated to {}: {why}; {reset}{removed}",
                    self.redactor.url(&page)
                ),
            );
            reply = Reply::refused(session_id, &refusal);
            (outcome_name, error_type) = ("navigation_blocked", Some("navigation_blocked"));
            blocked = Some(refusal);
        }

        laps.lap("guard");
        let mut done = call
            .record
            .event(audit::Phase::Outcome, Some(&request.session));
        done.verdict = Some("allowed");
        done.confinement = Some(confinement);
        done.outcome = Some(outcome_name);
        if let Termination::SpawnFailed(why) = &raw.termination {
            done.reason = Some(why.clone());
        }
        if let Some(refusal) = blocked {
            done.rule = Some(refusal.rule.to_owned());
            done.reason = Some(refusal.message);
        }
        done.exit_code = Some(reply.exit_code);
        done.duration_ms = Some(millis(call.started));
        done.stdout_bytes = Some(raw.stdout_total);
        done.stderr_bytes = Some(raw.stderr_total);
        let outcome_written = self.append(call, done);
        laps.lap("outcome");
        laps.report();
        // The next call of a session in working order gets a child that is
        // already running (see `crate::standby`); after a timeout or a
        // cancellation it spawns its own. Last, so the guard's own reads
        // above do not use it up.
        if matches!(raw.termination, Termination::Exited(_)) && subcommand != "close" {
            self.runner.prepare_standby(&request.session);
        }
        if let Err(e) = outcome_written {
            // The command already ran and its intent proves it was allowed;
            // say so loudly. The next call's intent write is the gate: while
            // the log stays broken, every call is refused.
            tracing::error!(error = %e, "audit outcome not written");
            reply.stderr = format!(
                "{}\n[browser-shell: the audit outcome of this call could not be written: {e}]",
                reply.stderr
            )
            .trim_start()
            .to_owned();
        }
        (
            reply,
            Verdict::Allowed {
                subcommand,
                error_type,
            },
        )
    }

    /// Grammar, then the slot: the URL policy for `open`, the output dir for
    /// `screenshot`. Returns the exact tokens agent-browser will receive and
    /// the addresses a URL was checked against, and the file a screenshot
    /// will be written to.
    async fn plan(
        &self,
        request: &ValidRequest,
    ) -> Result<(Vec<String>, Vec<IpAddr>, Option<PathBuf>), Refusal> {
        let command = command::parse(&request.argv)?;
        let mut tokens = command.tokens;
        let mut resolved = Vec::new();
        let mut output = None;
        match command.slot {
            Slot::None => {}
            Slot::Url(raw) => {
                let checked = self
                    .url_policy
                    .check_open(&raw, self.resolver.as_ref())
                    .await?;
                tokens.push(checked.url);
                resolved = checked.resolved;
            }
            Slot::OutputFile(name) => {
                let path = outputs::resolve(&self.output_dir, &request.session, name.as_deref())?;
                // Only the check: room is made once the intent is durable.
                outputs::check_room(&self.limits.output_quota)?;
                tokens.push(path.display().to_string());
                output = Some(path);
            }
        }
        Ok((tokens, resolved, output))
    }

    /// Delete the oldest screenshots until one more fits the quotas (file
    /// I/O, on a blocking thread).
    async fn make_room(&self, session: &SessionId, dir: &std::path::Path) {
        let (root, dir, quota) = (
            self.output_dir.clone(),
            dir.to_owned(),
            self.limits.output_quota,
        );
        match tokio::task::spawn_blocking(move || outputs::make_room(&root, &dir, &quota)).await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(
                removed,
                session = session.as_str(),
                "oldest screenshots removed to stay within the output quota"
            ),
            Err(e) => tracing::warn!(error = %e, "making room for a screenshot did not finish"),
        }
    }

    /// Before a command, for a session whose page the guard has not seen
    /// since its last command: read the page URL and check it.
    async fn look_before(&self, session: &SessionId) -> Result<(), Withhold> {
        let Some(page) = self.read_page_url(session, false).await else {
            return Err(Withhold::Blocked {
                page: "an unknown URL".to_owned(),
                why: "the page URL could not be read before the command".to_owned(),
            });
        };
        match self.guard(&page).await {
            Ok(()) => Ok(()),
            Err(refusal) => Err(Withhold::Blocked {
                page,
                why: refusal.message,
            }),
        }
    }

    /// Read the session's page URL on its own, for the guard: up to three
    /// tries, 100 ms apart — the first at once, or, with `settle` (the
    /// batch's read fell in the middle of a navigation), after 100 ms too.
    async fn read_page_url(&self, session: &SessionId, settle: bool) -> Option<String> {
        let read = vec![
            outcome::GUARD_COMMAND
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        ];
        for attempt in 0..3 {
            if settle || attempt > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            let raw = self
                .runner
                .run(
                    session,
                    &read,
                    std::time::Duration::from_secs(10),
                    &CancellationToken::new(),
                    false,
                    // Part of a call whose intent is already durable.
                    std::future::ready(Ok(())),
                )
                .await;
            if let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(&raw.stdout)
                && let Some(url) = items
                    .first()
                    .and_then(|entry| entry.pointer("/result/url"))
                    .and_then(Value::as_str)
            {
                return Some(url.to_owned());
            }
        }
        None
    }

    /// Is the page URL a navigating command left the session on allowed?
    /// Chromium's own error page (a failed load) is not a destination.
    async fn guard(&self, page: &str) -> Result<(), Refusal> {
        let url = url::Url::parse(page)
            .map_err(|e| Refusal::new("url.invalid", format!("unparsable page URL: {e}")))?;
        if url.scheme() == "chrome-error" {
            return Ok(());
        }
        self.url_policy
            .check_url(&url, self.resolver.as_ref())
            .await
            .map(drop)
    }

    /// The batch sent on stdin: the agent's command, followed, when
    /// the guard needs its own read, by `get url`.
    fn batch_for(tokens: Vec<String>, guard: outcome::Guard) -> Vec<Vec<String>> {
        let mut batch = vec![tokens];
        if guard == outcome::Guard::Trailing {
            batch.push(
                outcome::GUARD_COMMAND
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
            );
        }
        batch
    }

    /// The idle TTL after which the reaper retires a session.
    pub fn session_idle(&self) -> std::time::Duration {
        self.limits.session_idle
    }

    /// Record why (`reaped`, `evicted`, …), then end `victim` for good —
    /// audit first, as for a call. What could not be undone is recorded
    /// after, as `retire_incomplete`.
    ///
    /// The session's turn is held throughout, so a call for it waits and
    /// then starts it anew ([`Sessions::is_current`]).
    async fn retire(&self, retiring: Retiring, outcome: &'static str, reason: &str) {
        let victim = &retiring.victim;
        self.lifecycle(&victim.session_id, outcome, reason.to_owned());
        let problems = self
            .runner
            .retire(&victim.daemon_name, &self.output_dir)
            .await;
        if !problems.is_empty() {
            self.lifecycle(&victim.session_id, "retire_incomplete", problems.join("; "));
        }
        // The session leaves the registry; a call waiting for it starts anew.
        drop(retiring);
    }

    fn lifecycle(&self, session_id: &str, outcome: &'static str, reason: String) {
        let mut event = audit::Event::new(audit::Phase::Lifecycle, crate::record::new_call_id());
        event.session_id = Some(session_id.to_owned());
        event.outcome = Some(outcome);
        event.reason = Some(reason);
        match self.write_audit(event, audit::Durability::Deferred) {
            Ok(sealed) => self.telemetry.log_audit_event(&sealed.record),
            Err(e) => {
                tracing::error!(error = %e, "audit record of a session lifecycle event not written");
            }
        }
    }

    /// Sync deferred audit records and refresh the checkpoint now (at exit).
    pub fn flush_audit(&self) {
        if let Err(e) = off_the_workers(|| self.audit.flush()) {
            tracing::error!(error = %e, "audit log not synced at exit");
        }
    }

    /// Retire every session idle longer than the TTL (the reaper's tick),
    /// all at once: each holds its session's turn until it is done, so one
    /// after the other would keep a call for the last of them waiting on
    /// all the others.
    pub async fn reap_idle(self: &Arc<Self>) {
        let why = format!(
            "idle for more than {} s",
            self.limits.session_idle.as_secs()
        );
        let mut retirements = tokio::task::JoinSet::new();
        for retiring in self.sessions.take_idle(self.limits.session_idle) {
            let (pipeline, why) = (Arc::clone(self), why.clone());
            retirements.spawn(async move { pipeline.retire(retiring, "reaped", &why).await });
        }
        while let Some(done) = retirements.join_next().await {
            if let Err(e) = done {
                // Its `Retiring` was dropped, so the name is free again; what
                // the retirement did not get to is said here, not silently lost.
                tracing::error!(error = %e, "a reaped session's retirement did not finish");
            }
        }
    }

    /// At start: adopt confined daemons already running in our socket dir
    /// (a previous server's sessions; the reaper ends them when idle), and
    /// kill unconfined ones (never reused).
    pub async fn adopt_orphans(&self) {
        for (name, confined) in self.runner.running_daemons().await {
            if confined {
                self.sessions.adopt(&name);
                self.lifecycle(
                    &name,
                    "adopted",
                    "a confined daemon was already running at start".into(),
                );
            } else {
                self.lifecycle(
                    &name,
                    "closed",
                    "an unconfined daemon was running at start".into(),
                );
                self.runner.kill_daemon(&name).await;
            }
        }
    }

    /// Graceful shutdown: refuse new calls, give in-flight calls up to
    /// `patience` to finish, then cancel the rest (their outcome is audited
    /// as `cancelled`) and wait a little for those records.
    pub async fn drain(&self, patience: std::time::Duration) {
        use std::sync::atomic::Ordering;
        self.draining.store(true, Ordering::SeqCst);
        let all = self.limits.max_inflight;
        let idle = async {
            // Holding every slot means nothing is running.
            if let Ok(slots) = self.inflight.acquire_many(all).await {
                drop(slots);
            }
        };
        if tokio::time::timeout(patience, idle).await.is_err() {
            tracing::warn!(
                "calls still running after {} s; cancelling them",
                patience.as_secs()
            );
            self.shutdown.cancel();
            let settled = async {
                if let Ok(slots) = self.inflight.acquire_many(all).await {
                    drop(slots);
                }
            };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), settled).await;
        }
    }

    /// Record a refusal (the call's only record) and build its reply.
    fn deny(
        &self,
        call: &Call<'_>,
        session: Option<&SessionId>,
        argv: Option<&[String]>,
        refusal: &Refusal,
    ) -> (Reply, Verdict) {
        let session_id = session.map_or("", SessionId::as_str);
        let subcommand = argv.and_then(|a| a.first().cloned());
        let mut event = call.record.event(audit::Phase::Denied, session);
        event.argv = argv.map(|argv| redact_argv(&self.redactor, argv));
        event.argv_mac = argv.map(|argv| self.redactor.argv_mac(argv));
        event.verdict = Some("denied");
        event.rule = Some(refusal.rule.to_owned());
        event.reason = Some(refusal.message.clone());
        event.exit_code = Some(exit_code::REFUSED);
        event.duration_ms = Some(millis(call.started));
        match self.append(call, event) {
            Ok(()) => (
                Reply::refused(session_id, refusal),
                Verdict::Denied {
                    rule: refusal.rule,
                    subcommand,
                },
            ),
            Err(e) => {
                tracing::error!(error = %e, "audit record of a refusal not written");
                let message = format!("audit unavailable ({e}); the call was refused: {refusal}");
                (
                    Reply::internal(session_id, &message),
                    Verdict::AuditUnavailable { subcommand },
                )
            }
        }
    }

    /// Audit a call of a tool this server does not have (answered with a
    /// JSON-RPC error). Returns the audit failure, if any.
    pub fn refuse_unknown_tool(&self, ctx: &CallContext) -> Result<(), String> {
        let span = self.start_span(ctx, None);
        let call = self.call(ctx, &span);
        let refusal = Refusal::new(
            "tool.unknown",
            "unknown tool; this server has exactly one tool, browser-shell",
        );
        let (reply, _) = self.deny(&call, None, None, &refusal);
        let failed = reply.exit_code == exit_code::INTERNAL;
        let error_type = if failed {
            "audit_unavailable"
        } else {
            "-32602"
        };
        span.finish(&CallOutcome {
            verdict: "denied",
            deny_reason: Some("tool.unknown"),
            error_type: Some(error_type),
            error_message: Some(&refusal.message),
            ..CallOutcome::default()
        });
        if failed { Err(reply.stderr) } else { Ok(()) }
    }

    /// Audit a message the wire answered itself (malformed JSON-RPC). There
    /// is no reply to build: the wire already sent the protocol error.
    pub fn record_protocol_fault(&self, fault: &crate::wire::Fault) {
        let ctx = CallContext {
            request_id: fault.request_id.clone(),
            ..CallContext::default()
        };
        let span = self.start_span(&ctx, None);
        let call = self.call(&ctx, &span);
        let mut event = call.record.event(audit::Phase::Denied, None);
        event.tool = None;
        event.verdict = Some("denied");
        event.rule = Some(fault.rule.to_owned());
        event.reason = Some(fault.message.clone());
        if let Err(e) = self.append(&call, event) {
            tracing::error!(error = %e, "audit record of a malformed message not written");
        }
        span.finish(&CallOutcome {
            verdict: "denied",
            deny_reason: Some(fault.rule),
            error_type: Some(if fault.rule == "jsonrpc.parse_error" {
                "-32700"
            } else {
                "-32600"
            }),
            error_message: Some(&fault.message),
            ..CallOutcome::default()
        });
    }

    /// Append to the audit log, then copy the sealed record to OTLP (best
    /// effort).
    ///
    /// Every record is written before anything acts on it (a killed server
    /// loses none) and synced within [`audit::DEFERRED_SYNC_WITHIN`]. The
    /// one record that gates something, an allowed call's intent, is synced
    /// before its child gets its command: on the spot ([`audit::Sink::sync`])
    /// while the child starts up, or, when the session's standby is ready,
    /// with the write itself ([`Pipeline::append_with`], `Synced`).
    fn append(&self, call: &Call<'_>, event: audit::Event) -> Result<(), audit::AuditError> {
        self.append_with(call, event, audit::Durability::Deferred)
    }

    fn append_with(
        &self,
        call: &Call<'_>,
        event: audit::Event,
        durability: audit::Durability,
    ) -> Result<(), audit::AuditError> {
        let sealed = self.write_audit(event, durability)?;
        call.span.log_audit_event(&sealed.record);
        Ok(())
    }

    /// The audit write itself: flock, write (and `fdatasync` when
    /// `Synced`) — blocking I/O. On the multi-threaded runtime it moves off
    /// the async worker for its duration (`block_in_place`), so a wait
    /// behind another call's sync never stalls other sessions.
    fn write_audit(
        &self,
        event: audit::Event,
        durability: audit::Durability,
    ) -> Result<audit::Sealed, audit::AuditError> {
        off_the_workers(|| self.audit.append_with(event, durability))
    }

    fn start_span(&self, ctx: &CallContext, session_id: Option<&str>) -> ActiveCall {
        self.telemetry.start_call(&CallMeta {
            request_id: ctx.request_id.as_deref(),
            traceparent: ctx.traceparent.as_deref(),
            tracestate: ctx.tracestate.as_deref(),
            protocol_version: ctx.protocol_version.as_deref(),
            session_id,
        })
    }

    fn call<'a>(&self, ctx: &CallContext, span: &'a ActiveCall) -> Call<'a> {
        Call {
            record: CallRecord::new(ctx, span.trace_id(), span.span_id()),
            span,
            started: Instant::now(),
        }
    }

    fn finish_span(&self, span: ActiveCall, reply: &Reply, verdict: &Verdict) {
        // The span gets the error text only through the redactor, and only
        // its first line: page text can hold secrets too.
        let message = reply.stderr.lines().next().map(|l| self.redactor.text(l));
        let message: Option<String> = message.map(|m| m.chars().take(200).collect());
        let outcome = match verdict {
            Verdict::Allowed {
                subcommand,
                error_type,
            } => CallOutcome {
                subcommand: Some(subcommand),
                verdict: "allowed",
                exit_code: Some(reply.exit_code),
                error_type: *error_type,
                error_message: error_type.and(message.as_deref()),
                ..CallOutcome::default()
            },
            Verdict::Denied { rule, subcommand } => CallOutcome {
                subcommand: subcommand.as_deref(),
                verdict: "denied",
                deny_reason: Some(rule),
                exit_code: Some(reply.exit_code),
                error_type: Some("policy_denied"),
                error_message: message.as_deref(),
            },
            Verdict::AuditUnavailable { subcommand } => CallOutcome {
                subcommand: subcommand.as_deref(),
                verdict: "denied",
                exit_code: Some(reply.exit_code),
                error_type: Some("audit_unavailable"),
                error_message: message.as_deref(),
                ..CallOutcome::default()
            },
        };
        span.finish(&outcome);
    }
}

/// Run blocking audit I/O (flock, write, fdatasync). On the multi-threaded
/// runtime the worker hands its other tasks to another thread for the
/// duration (`block_in_place`); elsewhere (a current-thread runtime, where
/// that would panic, or no runtime) it simply runs.
fn off_the_workers<T>(io: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(io)
    } else {
        io()
    }
}

fn millis(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}
