//! Serving, once the server is built: the browser gate, the wire between
//! stdio and rmcp, the reaper and the pool, until the client hangs up or
//! SIGTERM drains the calls in flight; then the server's last records.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use super::HASH_AFTER_HANDSHAKE;
use crate::{
    call,
    gate::Gate,
    server::{Server, sessions::Sessions},
    transport::{mcp, stdio, wire},
};

/// The file in the state dir (the server's; the child writes only in its
/// `home/` and `sock/`) that keeps the sessions' browser contexts.
const CONTEXTS_MEMO: &str = "contexts.json";

/// stdin → wire → rmcp → wire → stdout, plus the reaper, until the client
/// hangs up or SIGTERM drains the calls in flight.
///
/// `start_hashing` is called [`HASH_AFTER_HANDSHAKE`] after the handshake
/// was answered (or failed), or sooner when a call needs the `started`
/// record, which follows it.
pub(super) async fn run(
    server: Arc<Server>,
    gate: Gate,
    grace: Duration,
    start_hashing: impl FnOnce(&Arc<Server>) + Send + 'static,
) -> anyhow::Result<()> {
    let (gate_kept, refusals) = serve_gate(&server, gate)?;
    // The wire frames, bounds and parses messages, answers malformed ones
    // itself, is rmcp's transport and stdout's only writer.
    let (transport, ends) = wire::Wire::new(server.journal.telemetry().clone());
    let (input, output) = pump_stdio(&server, ends);
    server.sessions.adopt_orphans(gate_kept).await;
    let reaper = tokio::spawn(reap_forever(Arc::clone(&server.sessions)));
    // After the previous server's pooled daemons are closed, and after the
    // `started` record: the pool's records follow the record of its server.
    let pool = {
        let server = Arc::clone(&server);
        tokio::spawn(async move {
            server.chronicle.wait_started().await;
            server.sessions.keep_pool(&server.admission).await;
        })
    };
    let served = mcp::BrowserShellServer::new(Arc::clone(&server))
        .serve(transport)
        .await;
    hash_after_handshake(&server, start_hashing);
    let stopped = match served {
        Ok(service) => {
            // The MCP session began with the handshake just answered.
            let began = std::time::Instant::now();
            let version = service.peer_info().map(|p| p.protocol_version.to_string());
            let why = until_stopped(service, &server, grace, &input).await?;
            let telemetry = server.journal.telemetry();
            telemetry.session_ended(began.elapsed(), version.as_deref());
            why
        }
        // The client hung up before a session began: after nothing at all,
        // or after a `server/discover` probe alone (2026-07-28 clients probe
        // to learn the revisions, then may go). An end like stdin's EOF.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(during)) => {
            tracing::info!(%during, "the client closed the connection before a session began");
            "the client closed the connection before a session began"
        }
        Err(e) => return Err(e.into()),
    };
    // Everything rmcp and the wire still have to say reaches stdout; a
    // client that stops reading cannot hold the exit.
    let _ = tokio::time::timeout(Duration::from_secs(2), output).await;
    reaper.abort();
    pool.abort();
    leave_sessions(&server, grace).await;
    // Questions no retry can answer any more end in the trail, before its
    // `stopped` record.
    server.retries.stop();
    // The life's last record follows its first, even for a client that left
    // before the binaries were hashed.
    server.chronicle.need_started().await;
    // The refusals already made are the life's too: written before its end.
    refusals.drain().await;
    let calls_served = server.admission.calls_served();
    server.chronicle.record_stopped(stopped, calls_served);
    server.close();
    tracing::info!("browser-shell exiting");
    Ok(())
}

/// stdin → the wire → rmcp, and rmcp and the wire's own answers → stdout,
/// each its own task; a malformed message is recorded as a protocol fault.
fn pump_stdio(
    server: &Arc<Server>,
    ends: wire::WireEnds,
) -> (tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>) {
    let input = tokio::spawn(wire::pump_input(
        stdio::input(),
        ends.to_server,
        ends.answers_tx,
        Arc::clone(&server.refusal_pace),
        {
            let server = Arc::clone(server);
            move |fault: &wire::Fault| {
                let id = fault.request_id.clone();
                let (journal, rules) = (&server.journal, &server.rules);
                call::record_protocol_fault(journal, rules, fault.rule, &fault.message, id);
            }
        },
    ));
    let output = tokio::spawn(wire::pump_output(
        ends.from_server,
        ends.answers_rx,
        stdio::output(),
    ));
    (input, output)
}

/// Hashing beside the client's first request (its `tools/list` follows the
/// handshake at once) slows that request's answer on two cores, nice value
/// or not (docs/benchmarks.md, "A quieter start"): it waits for that moment
/// to pass, or for a call that needs the record.
fn hash_after_handshake(
    server: &Arc<Server>,
    start_hashing: impl FnOnce(&Arc<Server>) + Send + 'static,
) {
    let server = Arc::clone(server);
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(HASH_AFTER_HANDSHAKE) => {}
            () = server.chronicle.started_needed() => {}
        }
        start_hashing(&server);
    });
}

/// Close the pool, and with `--on-exit end` every session. Bounded: a
/// Chromium that does not answer cannot hold the exit. At once: a client
/// that closed stdin may stop the process a moment later.
async fn leave_sessions(server: &Arc<Server>, grace: Duration) {
    let (_, ended) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(5), server.sessions.empty_pool()),
        tokio::time::timeout(
            grace.max(Duration::from_secs(5)),
            server.sessions.end_on_exit()
        ),
    );
    if ended.is_err() {
        tracing::warn!("the sessions did not all end before the server stopped (--on-exit end)");
    }
}

/// Serve the browser gate; its refusals go to the audit writer. Returns
/// whether its port is the previous server's, and the refusals' recorder.
fn serve_gate(
    server: &Arc<Server>,
    gate: Gate,
) -> anyhow::Result<(bool, super::refusals::Recorder)> {
    let kept = gate.same_port_as_before();
    let refusals = gate
        .serve(
            Arc::clone(&server.rules),
            Arc::clone(&server.resolver),
            server.runner.socket_dir().clone(),
            Arc::clone(server.runner.identities()),
            Some(server.runner.state_dir().join(CONTEXTS_MEMO)),
            &server.gate,
        )
        .context("cannot serve the browser gate")?;
    let recorder = super::refusals::Recorder::start(server, refusals);
    Ok((kept, recorder))
}

/// Serve the MCP session until the client leaves or SIGTERM (after a
/// drain); SIGHUP reloads the rules. Returns why it stopped.
async fn until_stopped(
    service: rmcp::service::RunningService<rmcp::RoleServer, mcp::BrowserShellServer>,
    server: &Arc<Server>,
    grace: Duration,
    input: &tokio::task::JoinHandle<()>,
) -> anyhow::Result<&'static str> {
    let stop = service.cancellation_token();
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let waiting = service.waiting();
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            quit = &mut waiting => {
                quit?;
                return Ok("the client closed the connection (stdin)");
            }
            _ = sighup.recv() => {
                // Off the workers: reading and hashing a file blocks.
                let server = Arc::clone(server);
                let _ = tokio::task::spawn_blocking(move || server.chronicle.reload_rules()).await;
            }
            _ = sigterm.recv() => {
                tracing::info!("SIGTERM: refusing new calls, letting in-flight calls finish");
                server.admission.drain(grace).await;
                stop.cancel();
                input.abort();
                return Ok("SIGTERM: drained the calls in flight");
            }
        }
    }
}

/// Retire idle sessions, checking a few times per idle TTL.
async fn reap_forever(sessions: Arc<Sessions>) {
    let tick = (sessions.idle_ttl() / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
    loop {
        tokio::time::sleep(tick).await;
        sessions.reap_idle().await;
    }
}
