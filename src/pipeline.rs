//! One tool call, start to finish, as a one-way pipeline:
//!
//! request → validate → grammar → policy → audit intent → confined spawn →
//! normalize → audit outcome → reply.
//!
//! Every branch ends in a [`Reply`] and at least one audit record. A refusal is
//! recorded as a single `denied` record; an allowed call gets an `intent`
//! record, synced to disk *before* the child is spawned, and an `outcome`
//! record after. If the intent cannot be written, nothing runs.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Instant,
};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::{
    command::{self, Slot},
    config::Prepared,
    exec::{Runner, Termination},
    outcome::{self, Reply},
    outputs, policy,
    record::{CallRecord, confinement_record, redact_argv},
    refusal::Refusal,
    request::{self, ValidRequest},
    session::SessionId,
};

/// Who is calling, as far as the protocol tells us.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    pub request_id: Option<String>,
    pub client: Option<String>,
    pub cancel: CancellationToken,
}

/// Shared state of the server: built once, used by every call.
#[derive(Debug)]
pub struct Pipeline {
    pub runner: Runner,
    pub audit: audit::Sink,
    pub redactor: audit::Redactor,
    pub output_dir: PathBuf,
    pub max_output_bytes: usize,
    sessions: SessionLocks,
}

impl Pipeline {
    pub fn new(prepared: Prepared) -> Self {
        Self {
            runner: prepared.runner,
            audit: prepared.audit,
            redactor: prepared.redactor,
            output_dir: prepared.output_dir,
            max_output_bytes: prepared.max_output_bytes,
            sessions: SessionLocks::default(),
        }
    }

    /// Handle a `tools/call` of `browser-shell` with these raw arguments.
    pub async fn handle(&self, arguments: Option<&Map<String, Value>>, ctx: &CallContext) -> Reply {
        let started = Instant::now();
        let call = CallRecord::new(ctx);
        let request = match request::validate(arguments) {
            Ok(request) => request,
            Err(refusal) => {
                let session = request::session_hint(arguments);
                let session_id = session.as_ref().map_or("", SessionId::as_str);
                return self.deny(&call, session.as_ref(), None, &refusal, started, session_id);
            }
        };
        let session_id = request.session.as_str();
        let tokens = match self.plan(&request) {
            Ok(tokens) => tokens,
            Err(refusal) => {
                return self.deny(
                    &call,
                    Some(&request.session),
                    Some(&request.argv),
                    &refusal,
                    started,
                    session_id,
                );
            }
        };

        // One call at a time per session: agent-browser serialises in its
        // daemon anyway, and the wrapper's own bookkeeping must not interleave.
        let lock = self.sessions.lock_for(request.session.daemon_name());
        let _guard = tokio::select! {
            guard = lock.lock() => guard,
            () = ctx.cancel.cancelled() => {
                let refusal = Refusal::new("call.cancelled", "cancelled while waiting for the session's previous call");
                return self.deny(&call, Some(&request.session), Some(&request.argv), &refusal, started, session_id);
            }
        };

        let confinement = confinement_record(self.runner.confinement.report());
        let mut intent = call.event(audit::Phase::Intent, Some(&request.session));
        intent.argv = Some(redact_argv(&self.redactor, &request.argv));
        intent.argv_mac = Some(self.redactor.argv_mac(&request.argv));
        intent.verdict = Some("allowed");
        intent.confinement = Some(confinement.clone());
        if let Err(e) = self.audit.append(intent) {
            tracing::error!(error = %e, "audit intent not written; refusing the call");
            return Reply::internal(
                session_id,
                &format!("audit unavailable, nothing was run: {e}"),
            );
        }

        let batch = self.batch_for(&request.session, tokens);
        let raw = self
            .runner
            .run(&request.session, &batch, request.timeout, &ctx.cancel)
            .await;
        let reply = outcome::normalize(session_id, &raw, self.max_output_bytes);

        let mut done = call.event(audit::Phase::Outcome, Some(&request.session));
        done.verdict = Some("allowed");
        done.confinement = Some(confinement);
        done.outcome = Some(match &raw.termination {
            Termination::Exited(0) if reply.exit_code == 0 => "ok",
            Termination::Exited(_) | Termination::Signaled(_) => "error",
            Termination::TimedOut => "timeout",
            Termination::Cancelled => "cancelled",
            Termination::SpawnFailed(_) => "spawn_failed",
        });
        if let Termination::SpawnFailed(why) = &raw.termination {
            done.reason = Some(why.clone());
        }
        done.exit_code = Some(reply.exit_code);
        done.duration_ms = Some(millis(started));
        done.stdout_bytes = Some(raw.stdout_total);
        done.stderr_bytes = Some(raw.stderr_total);
        if let Err(e) = self.audit.append(done) {
            // The command already ran; the intent record proves it was
            // allowed. Surface the failure loudly rather than hide it.
            tracing::error!(error = %e, "audit outcome not written");
        }
        reply
    }

    /// Grammar, then the slot: the URL policy for `open`, the output dir for
    /// `screenshot`. Returns the exact tokens agent-browser will receive.
    fn plan(&self, request: &ValidRequest) -> Result<Vec<String>, Refusal> {
        let command = command::parse(&request.argv)?;
        let mut tokens = command.tokens;
        match command.slot {
            Slot::None => {}
            Slot::Url(raw) => tokens.push(policy::check_open(&raw)?),
            Slot::OutputFile(name) => {
                let path = outputs::resolve(&self.output_dir, &request.session, name.as_deref())?;
                tokens.push(path.display().to_string());
            }
        }
        Ok(tokens)
    }

    /// The batch sent on stdin: the agent's command, preceded for
    /// `screenshot` by foregrounding the session's own tab. Chromium captures
    /// only the visible tab of a window; a background tab's capture hangs
    /// until agent-browser's 30 s CDP timeout.
    fn batch_for(&self, session: &SessionId, tokens: Vec<String>) -> Vec<Vec<String>> {
        let mut batch = Vec::with_capacity(2);
        if tokens.first().is_some_and(|t| t == "screenshot")
            && let Some(target) = self.runner.session_target(session)
        {
            batch.push(vec!["tab".to_owned(), target]);
        }
        batch.push(tokens);
        batch
    }

    /// Record a refusal (the call's only record) and build its reply.
    pub fn deny(
        &self,
        call: &CallRecord,
        session: Option<&SessionId>,
        argv: Option<&[String]>,
        refusal: &Refusal,
        started: Instant,
        session_id: &str,
    ) -> Reply {
        let mut event = call.event(audit::Phase::Denied, session);
        event.argv = argv.map(|argv| redact_argv(&self.redactor, argv));
        event.argv_mac = argv.map(|argv| self.redactor.argv_mac(argv));
        event.verdict = Some("denied");
        event.rule = Some(refusal.rule.to_owned());
        event.reason = Some(refusal.message.clone());
        event.exit_code = Some(outcome::exit_code::REFUSED);
        event.duration_ms = Some(millis(started));
        match self.audit.append(event) {
            Ok(_) => Reply::refused(session_id, refusal),
            Err(e) => {
                tracing::error!(error = %e, "audit record of a refusal not written");
                Reply::internal(
                    session_id,
                    &format!("audit unavailable ({e}); the call was refused: {refusal}"),
                )
            }
        }
    }
}

impl Pipeline {
    /// Audit a message the wire answered itself (malformed JSON-RPC). There
    /// is no reply to build: the wire already sent the protocol error.
    pub fn record_protocol_fault(&self, fault: &crate::wire::Fault) {
        let ctx = CallContext {
            request_id: fault.request_id.clone(),
            ..CallContext::default()
        };
        let mut event = CallRecord::new(&ctx).event(audit::Phase::Denied, None);
        event.tool = None;
        event.verdict = Some("denied");
        event.rule = Some(fault.rule.to_owned());
        event.reason = Some(fault.message.clone());
        if let Err(e) = self.audit.append(event) {
            tracing::error!(error = %e, "audit record of a malformed message not written");
        }
    }
}

fn millis(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

/// One async mutex per daemon name.
#[derive(Debug, Default)]
struct SessionLocks {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl SessionLocks {
    fn lock_for(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = match self.map.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.entry(name.to_owned()).or_default().clone()
    }
}
