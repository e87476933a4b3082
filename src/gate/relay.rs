//! One daemon's connection through the gate: agent-browser's CDP messages
//! judged one by one on their way to Chromium, Chromium's forwarded back.
//!
//! Messages to Chromium keep their order: one that must wait (its tab is
//! being put under the policy, or its URL resolved) holds the ones after it.
//! Messages from Chromium are not changed; the relay only reads which CDP
//! session belongs to which tab.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::{net::TcpStream, sync::mpsc};
use tokio_tungstenite::{WebSocketStream, tungstenite::Message};
use url::Url;

use super::{
    Shared,
    methods::{Treatment, treatment},
    warden::shown,
};
use crate::refusal::Rule;

/// A tab (or frame, or worker) agent-browser is attached to.
#[derive(Debug, Clone)]
struct Attached {
    target_id: String,
    kind: String,
}

/// What the relay does with one message from agent-browser.
enum Judgement {
    Forward(Value),
    Refuse { rule: Rule, why: String },
}

pub(super) async fn relay(
    client: WebSocketStream<TcpStream>,
    session: String,
    shared: Arc<Shared>,
) {
    let (mut to_daemon, mut from_daemon) = client.split();
    let attached: Arc<Mutex<HashMap<String, Attached>>> = Arc::default();
    // One writer to the daemon, fed by Chromium's messages and the gate's
    // own refusals.
    let (daemon_tx, mut daemon_rx) = mpsc::unbounded_channel::<Message>();
    let writer = tokio::spawn(async move {
        while let Some(message) = daemon_rx.recv().await {
            if to_daemon.send(message).await.is_err() {
                break;
            }
        }
        let _ = to_daemon.close().await;
    });
    // Connected on the first message that is forwarded: a refusal needs no
    // browser.
    let mut chromium: Option<ChromiumSink> = None;
    let mut reader = None;
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
        match judge(request.clone(), &session, &attached, &shared).await {
            Judgement::Forward(request) => {
                tracing::trace!(%session, message = %request, "the browser gate forwards");
                if chromium.is_none() {
                    match connect(&shared).await {
                        Ok((sink, stream)) => {
                            chromium = Some(sink);
                            reader = Some(tokio::spawn(from_chromium(
                                stream,
                                daemon_tx.clone(),
                                Arc::clone(&attached),
                            )));
                        }
                        Err(why) => {
                            tracing::warn!(%why, "a daemon's browser connection was not relayed");
                            break;
                        }
                    }
                }
                let Some(sink) = chromium.as_mut() else { break };
                if sink.send(Message::text(request.to_string())).await.is_err() {
                    break;
                }
            }
            Judgement::Refuse { rule, why } => {
                tracing::info!(%session, %rule, %why, "the browser gate refused a CDP message");
                shared.reporter.report(session.clone(), rule, why.clone());
                let mut answer = json!({
                    "id": request.get("id").cloned().unwrap_or(Value::Null),
                    "error": {"code": -32000, "message": format!("browser-shell refused [{rule}]: {why}")},
                });
                if let Some(cdp_session) = request.get("sessionId") {
                    answer["sessionId"] = cdp_session.clone();
                }
                if daemon_tx.send(Message::text(answer.to_string())).is_err() {
                    break;
                }
            }
        }
    }
    if let Some(mut sink) = chromium {
        let _ = sink.close().await;
    }
    if let Some(reader) = reader {
        reader.abort();
    }
    drop(daemon_tx);
    let _ = writer.await;
}

type ChromiumSink = futures_util::stream::SplitSink<
    WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>,
    Message,
>;
type ChromiumStream = futures_util::stream::SplitStream<
    WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>,
>;

/// The relay's own connection to Chromium's browser endpoint.
async fn connect(shared: &Shared) -> Result<(ChromiumSink, ChromiumStream), String> {
    let url = shared.browser_url().await?;
    let (socket, _) = tokio_tungstenite::connect_async_with_config(
        url.as_str(),
        Some(super::upstream_config()),
        false,
    )
    .await
    .map_err(|e| format!("cannot reach Chromium's DevTools: {e}"))?;
    Ok(socket.split())
}

/// Chromium → daemon, unchanged; only which CDP session is which target is
/// noted on the way.
async fn from_chromium(
    mut stream: ChromiumStream,
    daemon: mpsc::UnboundedSender<Message>,
    attached: Arc<Mutex<HashMap<String, Attached>>>,
) {
    while let Some(Ok(message)) = stream.next().await {
        match message {
            Message::Text(text) => {
                note_attachment(&text, &attached);
                if daemon.send(Message::Text(text)).is_err() {
                    break;
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    // Chromium went away: the daemon's connection ends too.
    let _ = daemon.send(Message::Close(None));
}

/// The gate's decision on one message from agent-browser.
async fn judge(
    request: Value,
    session: &str,
    attached: &Mutex<HashMap<String, Attached>>,
    shared: &Arc<Shared>,
) -> Judgement {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let shown_method: String = method.chars().take(64).collect();
    let Some(how) = treatment(&method) else {
        return Judgement::Refuse {
            rule: Rule::CdpRefused,
            why: format!("{shown_method} is not on the gate's allowlist"),
        };
    };
    match how {
        Treatment::Pass => {}
        Treatment::CheckUrl(param) => {
            if let Some(raw) = request
                .pointer(&format!("/params/{param}"))
                .and_then(Value::as_str)
                && let Err(why) = check_navigation(raw, shared).await
            {
                return Judgement::Refuse {
                    rule: Rule::CdpRefused,
                    why: format!("{shown_method} to {}: {why}", shown(raw)),
                };
            }
        }
    }
    // A message for a tab goes to it only once the tab is policed. Every
    // CDP session agent-browser holds was announced on this connection, so
    // one the relay never saw is refused rather than let through unpoliced.
    let Some(cdp_session) = request.get("sessionId") else {
        return Judgement::Forward(request);
    };
    let known = cdp_session
        .as_str()
        .and_then(|s| lock(attached).get(s).cloned());
    let Some(target) = known else {
        return Judgement::Refuse {
            rule: Rule::CdpUnwarded,
            why: format!("{shown_method} names a CDP session this connection never attached"),
        };
    };
    if target.kind == "page"
        && let Err(why) = shared.warden.ward(shared, &target.target_id, session).await
    {
        return Judgement::Refuse {
            rule: Rule::CdpUnwarded,
            why: format!("the tab could not be put under the URL policy: {why}"),
        };
    }
    Judgement::Forward(request)
}

/// A URL agent-browser asks Chromium to load, against the URL policy.
async fn check_navigation(raw: &str, shared: &Shared) -> Result<(), String> {
    let url = Url::parse(raw).map_err(|e| format!("not a valid URL: {e}"))?;
    shared
        .policy
        .check_url(&url, shared.resolver.as_ref())
        .await
        .map(|_| ())
        .map_err(|refusal| format!("[{}] {}", refusal.rule, refusal.message))
}

/// Learn, from Chromium's `Target.attachedToTarget` and
/// `Target.detachedFromTarget` events, which CDP session is which target.
fn note_attachment(text: &str, attached: &Mutex<HashMap<String, Attached>>) {
    // Cheap test first: most messages are neither.
    if !text.contains("\"Target.attachedToTarget\"")
        && !text.contains("\"Target.detachedFromTarget\"")
    {
        return;
    }
    let Ok(event) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let params = event.get("params").cloned().unwrap_or(Value::Null);
    let Some(cdp_session) = params.get("sessionId").and_then(Value::as_str) else {
        return;
    };
    match event.get("method").and_then(Value::as_str) {
        Some("Target.attachedToTarget") => {
            let info = params.get("targetInfo").cloned().unwrap_or(Value::Null);
            let field = |name: &str| {
                info.get(name)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            lock(attached).insert(
                cdp_session.to_owned(),
                Attached {
                    target_id: field("targetId"),
                    kind: field("type"),
                },
            );
        }
        Some("Target.detachedFromTarget") => {
            lock(attached).remove(cdp_session);
        }
        _ => {}
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
