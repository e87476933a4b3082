//! The self-probe's CDP abuse attempts: what a confined child could ask of
//! Chromium if the browser gate let it — a download path (a write
//! anywhere), a `file:` tab (a read anywhere), a tab opened over the plain
//! HTTP endpoint. Each must be refused by the gate. And a page in the
//! probe's own browser context fetches from Chromium's DevTools port, which
//! no policy allows: the egress proxy must refuse it (the operator's side
//! reads that refusal, see `operator::egress_outcome`).

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// What each gate probe must report.
pub(super) const EXPECTED: &[(&str, &str)] = &[
    ("gate_download_behavior", "refused"),
    ("gate_file_target", "refused"),
    ("gate_http_new_tab", "refused"),
    (OTHER_SESSION, "refused"),
];

/// The probe that names another session at the gate: refused when each
/// daemon has a uid of its own (`--child-uids`); `unchecked` without.
pub(super) const OTHER_SESSION: &str = "gate_other_session";

/// The session the probes name at the gate.
pub(super) const SESSION: &str = "hardening-check";

/// [`SESSION`] as the daemon name the gate and the runner know it by.
pub(super) fn session() -> anyhow::Result<crate::session_id::DaemonName> {
    crate::session_id::DaemonName::checked(SESSION)
        .ok_or_else(|| anyhow::anyhow!("{SESSION} is not a daemon name"))
}

/// The child's part of the egress probe: `sent` once the page's fetch ran.
pub(super) const EGRESS_FETCH: &str = "egress_page_fetch";

/// The operator's part: what the egress proxy did with that fetch.
pub(super) const EGRESS_CONNECTION: &str = "egress_forbidden_connection";

/// What the egress probe must report.
pub(super) const EGRESS_EXPECTED: &[(&str, &str)] = &[(EGRESS_CONNECTION, "refused")];

/// Run the gate probes against `gate_url` (the gate's WebSocket URL for a
/// session), from inside the confined process.
pub(super) fn run(
    gate_url: &str,
    devtools_port: Option<u16>,
    separated: bool,
) -> Vec<(String, String)> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return vec![(
                "gate_download_behavior".into(),
                format!("setup failed: {e}"),
            )];
        }
    };
    let mut out = runtime.block_on(async {
        let attempts = [
            (
                "gate_download_behavior",
                json!({"id": 1, "method": "Browser.setDownloadBehavior",
                       "params": {"behavior": "allow", "downloadPath": "/"}}),
            ),
            (
                "gate_file_target",
                json!({"id": 2, "method": "Target.createTarget",
                       "params": {"url": "file:///etc/passwd"}}),
            ),
        ];
        let mut out = Vec::new();
        for (name, request) in attempts {
            out.push((name.to_owned(), ask(gate_url, &request).await));
        }
        let fetched = match devtools_port {
            Some(port) => page_fetch(gate_url, port).await,
            None => "setup failed: no DevTools port to aim at".into(),
        };
        out.push((EGRESS_FETCH.to_owned(), fetched));
        let other = if separated {
            other_session(gate_url).await
        } else {
            "unchecked".to_owned()
        };
        out.push((OTHER_SESSION.to_owned(), other));
        out
    });
    out.push(("gate_http_new_tab".into(), http_new_tab(gate_url)));
    out
}

/// Open a tab (in the probe session's context), have its page fetch from
/// Chromium's DevTools port, close the tab: `sent` when the fetch ran.
async fn page_fetch(gate_url: &str, devtools_port: u16) -> String {
    let connect = tokio_tungstenite::connect_async(gate_url);
    let mut socket = match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok((socket, _))) => socket,
        Ok(Err(e)) => return format!("cannot connect to the gate: {e}"),
        Err(_) => return "cannot connect to the gate: timed out".into(),
    };
    let mut next = 100;
    let mut command = async |method: &str, params: Value, session: Option<&str>| {
        next += 1;
        let mut message = json!({"id": next, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = Value::from(session);
        }
        socket
            .send(Message::text(message.to_string()))
            .await
            .map_err(|e| format!("cannot send: {e}"))?;
        let answered = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(Ok(reply)) = socket.next().await {
                if let Message::Text(text) = reply
                    && let Ok(value) = serde_json::from_str::<Value>(&text)
                    && value.get("id") == Some(&Value::from(next))
                {
                    return Some(value);
                }
            }
            None
        })
        .await;
        match answered {
            Ok(Some(value)) if value.get("error").is_none() => {
                Ok(value.get("result").cloned().unwrap_or(Value::Null))
            }
            Ok(Some(value)) => Err(format!("{method} failed: {}", value["error"])),
            Ok(None) => Err(format!("{method}: the gate closed the connection")),
            Err(_) => Err(format!("{method}: no answer within 10 s")),
        }
    };
    let steps = async {
        let created = command("Target.createTarget", json!({"url": "about:blank"}), None).await?;
        let target = created["targetId"].as_str().unwrap_or_default().to_owned();
        let attached = command(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
            None,
        )
        .await?;
        let session = attached["sessionId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let expression = format!(
            "fetch('http://127.0.0.1:{devtools_port}/json/version').then(() => 'answered', () => 'failed')"
        );
        command(
            "Runtime.evaluate",
            json!({"expression": expression, "awaitPromise": true}),
            Some(&session),
        )
        .await?;
        command("Target.closeTarget", json!({"targetId": target}), None).await?;
        Ok::<(), String>(())
    };
    match steps.await {
        Ok(()) => "sent".into(),
        Err(e) => e,
    }
}

/// Dial the gate naming another session than the probe's own: `refused`
/// when the handshake is answered 403.
async fn other_session(gate_url: &str) -> String {
    let other = format!("{gate_url}-other");
    let connect = tokio_tungstenite::connect_async(other.as_str());
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(_)) => "CONNECTED as another session".into(),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response)))
            if response.status() == 403 =>
        {
            "refused".into()
        }
        Ok(Err(e)) => format!("cannot connect to the gate: {e}"),
        Err(_) => "cannot connect to the gate: timed out".into(),
    }
}

/// Send one CDP command; `refused` when the gate answered with its own
/// refusal, otherwise what happened.
async fn ask(gate_url: &str, request: &Value) -> String {
    let connect = tokio_tungstenite::connect_async(gate_url);
    let (mut socket, _) = match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(connected)) => connected,
        Ok(Err(e)) => return format!("cannot connect to the gate: {e}"),
        Err(_) => return "cannot connect to the gate: timed out".into(),
    };
    if let Err(e) = socket.send(Message::text(request.to_string())).await {
        return format!("cannot send: {e}");
    }
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(message)) = socket.next().await {
            if let Message::Text(text) = message
                && let Ok(value) = serde_json::from_str::<Value>(&text)
                && value.get("id") == request.get("id")
            {
                return Some(value);
            }
        }
        None
    })
    .await;
    let _ = socket.close(None).await;
    match answer {
        Ok(Some(value)) => {
            let message = value
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if message.contains("[cdp.refused]") {
                "refused".into()
            } else {
                format!(
                    "ANSWERED: {}",
                    value.to_string().chars().take(200).collect::<String>()
                )
            }
        }
        Ok(None) => "the gate closed the connection without an answer".into(),
        Err(_) => "no answer within 5 s".into(),
    }
}

/// `GET /json/new?file:///etc/passwd` on the gate's port: Chromium would
/// open that tab; the gate serves no plain HTTP.
fn http_new_tab(gate_url: &str) -> String {
    let Some(authority) = gate_url
        .strip_prefix("ws://")
        .and_then(|rest| rest.split('/').next())
    else {
        return "setup failed: not a ws:// URL".into();
    };
    let attempt = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect(authority)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            stream,
            "GET /json/new?file:///etc/passwd HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        )?;
        let mut head = [0u8; 64];
        let n = stream.read(&mut head)?;
        Ok(String::from_utf8_lossy(&head[..n]).into_owned())
    };
    match attempt() {
        // Chromium would answer 200 with the new tab; anything else opened nothing.
        Ok(head) if head.starts_with("HTTP/1.1 2") => {
            format!("ANSWERED: {}", head.lines().next().unwrap_or_default())
        }
        Ok(_) => "refused".into(),
        Err(e) => format!("error: {e}"),
    }
}
