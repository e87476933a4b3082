//! The self-probe's CDP abuse attempts: what a confined child could ask of
//! Chromium if the browser gate let it — a download path (a write
//! anywhere), a `file:` tab (a read anywhere), a tab opened over the plain
//! HTTP endpoint. Each must be refused by the gate.

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
];

/// Run the gate probes against `gate_url` (the gate's WebSocket URL for a
/// session), from inside the confined process.
pub(super) fn run(gate_url: &str) -> Vec<(String, String)> {
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
        out
    });
    out.push(("gate_http_new_tab".into(), http_new_tab(gate_url)));
    out
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
