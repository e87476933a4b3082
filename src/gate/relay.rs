//! One daemon's connection through the gate: agent-browser's CDP messages
//! judged one by one on their way to Chromium, Chromium's screened on their
//! way back.
//!
//! Messages to Chromium keep their order: one that must wait (its tab is
//! being put under the policy, or its URL resolved) holds the ones after it.
//! Messages from Chromium pass unchanged, except that targets outside the
//! session's browser context are left out of target lists and events
//! ([`super::contexts`]); a new tab is opened in that context. A command on
//! a tab that closes before Chromium answers it is answered by the gate
//! ([`super::in_flight`]).

use super::error::GateError;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt, stream::SplitSink};
use serde_json::{Value, json};
use tokio::{
    net::TcpStream,
    sync::{OwnedSemaphorePermit, Semaphore, mpsc},
};
use tokio_tungstenite::{WebSocketStream, tungstenite::Message};

use super::{
    ChromiumSocket, Shared,
    connection::Connection,
    in_flight::{answer_id, session_gone_answer},
    judge::{Judgement, judge},
    screen::{Screened, screen},
};
use crate::session_id::DaemonName;
use crate::{
    browser_refusals::{BrowserRefusal, Requester},
    refusal::Rule,
    sync::lock,
};

type ChromiumSink = SplitSink<ChromiumSocket, Message>;
type ChromiumStream = futures_util::stream::SplitStream<ChromiumSocket>;

pub(super) async fn relay(
    client: WebSocketStream<TcpStream>,
    session: DaemonName,
    shared: Arc<Shared>,
) {
    shared.contexts.adopt_or_drop(&shared, &session).await;
    let conn = Arc::new(Connection::new(session));
    let (to_daemon, mut from_daemon) = client.split();
    let (daemon_tx, writer) = spawn_writer(to_daemon);
    let budget = Arc::new(Semaphore::new(MAX_QUEUED_BYTES));
    let mut upstream = Upstream::default();
    while let Some(Ok(message)) = from_daemon.next().await {
        let text = match message {
            Message::Text(text) => text,
            Message::Close(_) => break,
            _ => continue,
        };
        let Ok(request) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!(
                "a daemon sent a CDP message that is not JSON; its connection is closed"
            );
            break;
        };
        let answer = match judge(request.clone(), &conn, &shared).await {
            Judgement::Forward(request) => {
                let back = (daemon_tx.clone(), Arc::clone(&budget));
                if upstream.forward(request, &conn, &shared, back).await {
                    continue;
                }
                break;
            }
            Judgement::Refuse { rule, why } => {
                report_refused(&shared, &conn.session, rule, &why);
                refusal_answer(&request, rule, &why)
            }
            Judgement::Decline { why } => {
                tracing::debug!(session = %conn.session, "the browser gate declined a CDP message");
                refusal_answer(&request, Rule::CdpRefused, &why)
            }
            Judgement::SessionGone { cdp_session } => {
                session_gone_answer(request.get("id").cloned(), &cdp_session)
            }
            Judgement::Answer(answer) => answer,
        };
        // A daemon that sends refused messages and never reads the answers
        // has its connection closed, not a queue that grows.
        let Ok(room) = Arc::clone(&budget).try_acquire_many_owned(room_for(answer.len())) else {
            tracing::warn!(session = %conn.session, "a daemon does not read the gate's answers; its connection is closed");
            break;
        };
        if daemon_tx.send((Message::text(answer), Some(room))).is_err() {
            break;
        }
    }
    upstream.close().await;
    drop(daemon_tx);
    let _ = writer.await;
}

/// One writer to the daemon, fed by Chromium's messages and the gate's own
/// answers (at most [`MAX_QUEUED_BYTES`] of them waiting, which the
/// senders' permits count); it closes the socket when every sender is gone.
fn spawn_writer(
    mut to_daemon: SplitSink<WebSocketStream<TcpStream>, Message>,
) -> (mpsc::UnboundedSender<Queued>, tokio::task::JoinHandle<()>) {
    let (daemon_tx, mut daemon_rx) = mpsc::unbounded_channel::<Queued>();
    let writer = tokio::spawn(async move {
        while let Some((message, room)) = daemon_rx.recv().await {
            if to_daemon.send(message).await.is_err() {
                break;
            }
            drop(room);
        }
        let _ = to_daemon.close().await;
    });
    (daemon_tx, writer)
}

/// The relay's own connection to Chromium, made on the first message that
/// is forwarded (a refusal needs no browser), and the task reading it.
#[derive(Default)]
struct Upstream {
    sink: Option<ChromiumSink>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Upstream {
    /// Send `request` to Chromium, connecting first if need be; false when
    /// the connection cannot be made or is gone (the daemon's ends too).
    async fn forward(
        &mut self,
        request: Value,
        conn: &Arc<Connection>,
        shared: &Arc<Shared>,
        back: (mpsc::UnboundedSender<Queued>, Arc<Semaphore>),
    ) -> bool {
        conn.sent(&request);
        tracing::trace!(session = %conn.session, message = %request, "the browser gate forwards");
        if self.sink.is_none() {
            match connect(shared).await {
                Ok((sink, stream)) => {
                    self.sink = Some(sink);
                    self.reader = Some(tokio::spawn(from_chromium(
                        stream,
                        back,
                        Arc::clone(conn),
                        Arc::clone(shared),
                    )));
                }
                Err(why) => {
                    tracing::warn!(%why, "a daemon's browser connection was not relayed");
                    return false;
                }
            }
        }
        match self.sink.as_mut() {
            Some(sink) => sink.send(Message::text(request.to_string())).await.is_ok(),
            None => false,
        }
    }

    async fn close(self) {
        if let Some(mut sink) = self.sink {
            let _ = sink.close().await;
        }
        if let Some(reader) = self.reader {
            reader.abort();
        }
    }
}

/// A CDP message the gate refused, on its way to the audit writer. The
/// reason stays out of diagnostics: it may quote a URL or text a page
/// holds; the record's copy is scrubbed.
fn report_refused(shared: &Shared, session: &DaemonName, rule: Rule, why: &str) {
    tracing::info!(%session, %rule, "the browser gate refused a CDP message; the audit record says why");
    shared.reporter.report(BrowserRefusal::new(
        Some(session.clone()),
        rule,
        why.to_owned(),
        Requester::AgentBrowser,
    ));
}

/// The CDP error a refused message of agent-browser's is answered with.
fn refusal_answer(request: &Value, rule: Rule, why: &str) -> String {
    let mut answer = json!({
        "id": request.get("id").cloned().unwrap_or(Value::Null),
        "error": {"code": -32000, "message": format!("browser-shell refused [{rule}]: {why}")},
    });
    if let Some(cdp_session) = request.get("sessionId") {
        answer["sessionId"] = cdp_session.clone();
    }
    answer.to_string()
}

/// The relay's own connection to Chromium's browser endpoint.
async fn connect(shared: &Shared) -> Result<(ChromiumSink, ChromiumStream), GateError> {
    Ok(shared.connect_browser().await?.split())
}

/// Chromium → daemon: screened (see [`screen`]), otherwise unchanged. While
/// the daemon's queue is full, Chromium is not read; when it stays full, the
/// daemon is not reading, and its connection is closed.
async fn from_chromium(
    mut stream: ChromiumStream,
    (daemon, budget): (mpsc::UnboundedSender<Queued>, Arc<Semaphore>),
    conn: Arc<Connection>,
    shared: Arc<Shared>,
) {
    'relay: while let Some(Ok(message)) = stream.next().await {
        match message {
            Message::Text(text) => {
                tracing::trace!(session = %conn.session, message = %text.chars().take(160).collect::<String>(), "the browser gate relays back");
                let already_answered = {
                    let mut in_flight = lock(&conn.in_flight);
                    in_flight.waiting()
                        && answer_id(&text).is_some_and(|id| !in_flight.answered(id))
                };
                if already_answered {
                    continue;
                }
                let (passed, owed) = match screen(&text, &conn, || {
                    shared.contexts.known(&conn.session)
                }) {
                    Screened::Unchanged => (Message::Text(text), Vec::new()),
                    Screened::Rewritten(value) => (Message::text(value.to_string()), Vec::new()),
                    Screened::Detached(owed) => (Message::Text(text), owed),
                    Screened::Dropped => continue,
                };
                // The detach first, then the answers Chromium will not give.
                for passed in std::iter::once(passed).chain(owed.into_iter().map(Message::text)) {
                    let room = Arc::clone(&budget).acquire_many_owned(room_for(passed.len()));
                    let Ok(Ok(room)) = tokio::time::timeout(QUEUE_PATIENCE, room).await else {
                        tracing::warn!(session = %conn.session, "a daemon does not read what Chromium sends it; its connection is closed");
                        break 'relay;
                    };
                    if daemon.send((passed, Some(room))).is_err() {
                        break 'relay;
                    }
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    // Chromium went away, or the daemon stopped reading: its connection ends.
    let _ = daemon.send((Message::Close(None), None));
}

/// A message for the daemon, and the room it takes in the queue.
type Queued = (Message, Option<OwnedSemaphorePermit>);

/// Bytes of messages that may wait for a daemon at once: a screenshot or a
/// large evaluation fits, a daemon that never reads does not grow the
/// server (a message larger than this waits for an empty queue).
const MAX_QUEUED_BYTES: usize = 32 << 20;

/// How long a message may wait for room before the daemon is taken to be
/// not reading.
const QUEUE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The room a message of `len` bytes takes: all of the queue at most.
fn room_for(len: usize) -> u32 {
    u32::try_from(len.clamp(1, MAX_QUEUED_BYTES)).unwrap_or(u32::MAX)
}
