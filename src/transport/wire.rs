//! The JSON-RPC wire between stdio and rmcp, and rmcp's transport.
//!
//! rmcp drops a line that is not JSON without answering, and never tells us a
//! malformed message arrived. This layer sits in front of it: it frames stdin
//! into lines without ever buffering more than [`MAX_MESSAGE_BYTES`] of one,
//! answers what is not a JSON-RPC message itself (`-32700` parse error,
//! `-32600` invalid request, with the request id when there is one), reports
//! each such fault so it is audited, and hands everything else to rmcp
//! already parsed ([`Wire`] is rmcp's transport). It is also the only writer
//! of stdout, so its answers and rmcp's never interleave within a line.
//!
//! Parsed here, once, not framed and parsed again by rmcp: a byte pipe
//! between the two, with rmcp's own line reader and parser behind it, cost
//! every warm call a second parse and two hand-offs (docs/design.md, "The wire").

use rmcp::{
    RoleServer,
    model::ClientJsonRpcMessage,
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::mpsc,
};

use std::sync::Arc;

use crate::{
    refusal::{Answer, Rule},
    server::pace::RefusalPace,
};

/// Largest JSON-RPC message accepted, in bytes (one line).
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// A message the wire answered itself instead of passing it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    /// One of the `jsonrpc.*` rules.
    pub(crate) rule: Rule,
    pub message: String,
    /// The request id, when the message had a usable one.
    pub request_id: Option<String>,
}

/// Messages (each a line) queued for stdout before rmcp's next send waits:
/// a client that stops reading holds rmcp up instead of filling memory.
const OUTPUT_QUEUE: usize = 64;

/// The wire's own answers queued for stdout before it stops reading stdin:
/// a client that sends malformed lines and stops reading holds the input up
/// instead of filling memory.
const ANSWER_QUEUE: usize = 16;

/// Longest request id the wire's answers echo. JSON-RPC wants the id echoed
/// whenever it could be read, but an id of up to 1 MiB in every answer lets
/// a client make the server hold (and write) a megabyte per malformed line:
/// a longer id is treated as one that could not be read, and answered with
/// id `null`. The audit record still has it (capped, with its digest).
pub(crate) const MAX_ECHOED_ID_BYTES: usize = 256;

/// Parsed messages waiting for rmcp before the wire stops reading stdin
/// (each may be up to [`MAX_MESSAGE_BYTES`]). rmcp takes each one as soon as
/// it arrives and answers it on a task of its own: this is a hand-off, not
/// a buffer.
const INPUT_QUEUE: usize = 4;

/// rmcp's transport: the messages the wire parsed, and rmcp's own messages
/// out to the wire's writer.
pub(crate) struct Wire {
    from_input: mpsc::Receiver<ClientJsonRpcMessage>,
    to_output: mpsc::Sender<String>,
    spans: super::method_spans::MethodSpans,
}

/// The wire's ends of a [`Wire`]: where [`pump_input`] puts parsed messages,
/// and what [`pump_output`] writes.
pub(crate) struct WireEnds {
    pub to_server: mpsc::Sender<ClientJsonRpcMessage>,
    pub from_server: mpsc::Receiver<String>,
    /// The wire's own answers, from [`pump_input`] to [`pump_output`].
    pub answers_tx: mpsc::Sender<String>,
    pub answers_rx: mpsc::Receiver<String>,
}

impl Wire {
    pub(crate) fn new(telemetry: crate::obs::telemetry::Telemetry) -> (Self, WireEnds) {
        let (to_server, from_input) = mpsc::channel(INPUT_QUEUE);
        let (to_output, from_server) = mpsc::channel(OUTPUT_QUEUE);
        let (answers_tx, answers_rx) = mpsc::channel(ANSWER_QUEUE);
        (
            Self {
                from_input,
                to_output,
                spans: super::method_spans::MethodSpans::new(telemetry),
            },
            WireEnds {
                to_server,
                from_server,
                answers_tx,
                answers_rx,
            },
        )
    }
}

impl Transport<RoleServer> for Wire {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.spans.end(&item);
        let line = serde_json::to_string(&item).map_err(std::io::Error::other);
        let to_output = self.to_output.clone();
        async move {
            to_output.send(line?).await.map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout writer is gone")
            })
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let message = self.from_input.recv().await?;
        self.spans.begin(&message);
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.from_input.close();
        std::future::ready(Ok(()))
    }
}

/// Read `input` line by line: hand each JSON-RPC message to rmcp parsed, and
/// answer faults on `answers` (waiting, not reading on, while it is full).
///
/// Returns when `input` reaches EOF (or fails), dropping `to_server` so rmcp
/// sees the end of input too.
pub(crate) async fn pump_input<R>(
    input: R,
    to_server: mpsc::Sender<ClientJsonRpcMessage>,
    answers: mpsc::Sender<String>,
    pace: Arc<RefusalPace>,
    on_fault: impl Fn(&Fault),
) where
    R: AsyncRead + Unpin,
{
    let mut input = BufReader::new(input);
    loop {
        // A client that spent its refusals waits here, in its own pipe.
        let wait = pace.delay();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let line = match read_bounded_line(&mut input).await {
            Ok(Some(line)) => line,
            Ok(None) | Err(_) => break,
        };
        let verdict = match line {
            Line::TooLarge(len) => Err(Fault {
                rule: Rule::JsonRpcTooLarge,
                message: format!(
                    "message of {len}+ bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes"
                ),
                request_id: None,
            }),
            Line::Complete(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => continue,
            Line::Complete(bytes) => check(&bytes).and_then(typed),
        };
        match verdict {
            Ok(message) => {
                if to_server.send(message).await.is_err() {
                    break;
                }
            }
            Err(fault) => {
                pace.spend();
                on_fault(&fault);
                let _ = answers.send(error_line(&fault)).await;
            }
        }
    }
}

/// The checked message as rmcp's type, converted from the tree [`check`]
/// parsed (the text is parsed once). A failure here is a shape rmcp does not
/// know (a standard method with the wrong params, say), which rmcp itself
/// would have answered `-32600` without the request id.
fn typed(message: Value) -> Result<ClientJsonRpcMessage, Fault> {
    let request_id = message.get("id").and_then(id_string);
    serde_json::from_value(message).map_err(|e| Fault {
        rule: Rule::JsonRpcInvalidRequest,
        message: format!("invalid request: {e}"),
        request_id,
    })
}

/// Write rmcp's messages and the wire's own answers to `output`, whole
/// lines only, until both sources are finished.
pub(crate) async fn pump_output<W>(
    mut from_server: mpsc::Receiver<String>,
    mut answers: mpsc::Receiver<String>,
    mut output: W,
) where
    W: AsyncWrite + Unpin,
{
    let mut server_open = true;
    let mut answers_open = true;
    while server_open || answers_open {
        let line = tokio::select! {
            line = from_server.recv(), if server_open => match line {
                Some(line) => line,
                None => { server_open = false; continue; }
            },
            answer = answers.recv(), if answers_open => match answer {
                Some(line) => line,
                None => { answers_open = false; continue; }
            },
        };
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        if output.write_all(&bytes).await.is_err() || output.flush().await.is_err() {
            break;
        }
    }
}

enum Line {
    Complete(Vec<u8>),
    /// The line was longer than the limit; this many bytes were seen (and dropped).
    TooLarge(usize),
}

/// Read one `\n`-terminated line, keeping at most [`MAX_MESSAGE_BYTES`] of it.
async fn read_bounded_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
) -> std::io::Result<Option<Line>> {
    let mut kept = Vec::new();
    let mut seen = 0usize;
    loop {
        let chunk = input.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(match (seen, seen > MAX_MESSAGE_BYTES) {
                (0, _) => None,
                (_, true) => Some(Line::TooLarge(seen)),
                (_, false) => Some(Line::Complete(kept)),
            });
        }
        let (part, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        seen += part.len();
        if seen <= MAX_MESSAGE_BYTES {
            kept.extend_from_slice(part);
        } else {
            kept = Vec::new();
        }
        let consumed = done.unwrap_or(part.len());
        input.consume(consumed);
        if done.is_some() {
            return Ok(Some(if seen > MAX_MESSAGE_BYTES {
                Line::TooLarge(seen)
            } else {
                Line::Complete(kept)
            }));
        }
    }
}

/// Is this a JSON-RPC 2.0 message rmcp can take? Anything else is answered
/// here. Returns the parsed message.
fn check(bytes: &[u8]) -> Result<Value, Fault> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| Fault {
        rule: Rule::JsonRpcParseError,
        message: format!("parse error: {e}"),
        request_id: None,
    })?;
    let id = value.get("id").and_then(id_string);
    let invalid = |why: &str| Fault {
        rule: Rule::JsonRpcInvalidRequest,
        message: format!("invalid request: {why}"),
        request_id: id.clone(),
    };
    let Value::Object(message) = &value else {
        return Err(invalid(
            "a message must be a JSON object (batches are not supported)",
        ));
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("\"jsonrpc\" must be \"2.0\""));
    }
    match message.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return Err(invalid("\"method\" must be a string")),
        None if message.contains_key("result") || message.contains_key("error") => {}
        None => return Err(invalid("neither a request, a notification nor a response")),
    }
    if let Some(params) = message.get("params")
        && !matches!(params, Value::Object(_))
    {
        return Err(invalid("\"params\" must be an object"));
    }
    if message.get("method").and_then(Value::as_str) == Some("tools/call") {
        let params = message.get("params").and_then(Value::as_object);
        let bad_params = |why: &str| Fault {
            rule: Rule::JsonRpcInvalidParams,
            message: format!("invalid params: {why}"),
            request_id: id.clone(),
        };
        let Some(params) = params else {
            return Err(bad_params(
                "tools/call needs params {\"name\", \"arguments\"}",
            ));
        };
        if !params.get("name").is_some_and(Value::is_string) {
            return Err(bad_params("\"name\" must be a string"));
        }
        if params.get("arguments").is_some_and(|a| !a.is_object()) {
            return Err(bad_params("\"arguments\" must be an object"));
        }
    }
    if let Some(raw_id) = message.get("id")
        && id_string(raw_id).is_none()
        && !raw_id.is_null()
    {
        return Err(invalid("\"id\" must be a string or an integer"));
    }
    Ok(value)
}

fn id_string(id: &Value) -> Option<String> {
    match id {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

fn error_line(fault: &Fault) -> String {
    let code = match fault.rule.answer() {
        Answer::JsonRpc(code) => code,
        Answer::Tool(_) | Answer::Browser => -32600,
    };
    let id = match &fault.request_id {
        Some(id) if id.len() > MAX_ECHOED_ID_BYTES => Value::Null,
        Some(id) => serde_json::from_str::<Value>(id)
            .ok()
            .filter(Value::is_number)
            .unwrap_or_else(|| Value::String(id.clone())),
        None => Value::Null,
    };
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": fault.message}})
        .to_string()
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
