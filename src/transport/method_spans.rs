//! A span and a duration for every MCP request the server answers besides
//! `tools/call` (which the call pipeline spans itself): `initialize`,
//! `tools/list`, `ping`, … Begun when the wire hands the request to rmcp,
//! ended when rmcp's answer with the same id goes out, so the time is the
//! server's whole handling of it.

use std::collections::HashMap;

use rmcp::{
    RoleServer,
    model::{ClientJsonRpcMessage, JsonRpcMessage},
    service::TxJsonRpcMessage,
};

use crate::obs::telemetry::{ActiveCall, CallMeta, CallOutcome, Called, Telemetry};

/// Requests not answered yet are bounded by rmcp's own concurrency; this
/// caps what a client that never reads its answers can make the map hold.
const MAX_OPEN: usize = 256;

/// The spans of requests in flight, by request id.
pub(crate) struct MethodSpans {
    telemetry: Telemetry,
    open: HashMap<String, ActiveCall>,
}

impl MethodSpans {
    pub(crate) fn new(telemetry: Telemetry) -> Self {
        Self {
            telemetry,
            open: HashMap::new(),
        }
    }

    /// A request arrives: its span starts (not for `tools/call`, nor when
    /// nothing is exported).
    pub(crate) fn begin(&mut self, message: &ClientJsonRpcMessage) {
        let JsonRpcMessage::Request(request) = message else {
            return;
        };
        let method = request.request.method();
        if !self.telemetry.is_enabled() || method == "tools/call" || self.open.len() >= MAX_OPEN {
            return;
        }
        let id = request.id.to_string();
        let span = self.telemetry.start_call(&CallMeta {
            called: Called::Method(known_method(method)),
            request_id: Some(&id),
            ..CallMeta::default()
        });
        self.open.insert(id, span);
    }

    /// An answer goes out: the span of the request it answers ends, an
    /// error with its JSON-RPC code.
    pub(crate) fn end(&mut self, message: &TxJsonRpcMessage<RoleServer>) {
        if self.open.is_empty() {
            return;
        }
        let (id, code) = match message {
            JsonRpcMessage::Response(response) => (response.id.to_string(), None),
            JsonRpcMessage::Error(error) => match &error.id {
                Some(id) => (id.to_string(), Some(error.error.code.0.to_string())),
                None => return,
            },
            _ => return,
        };
        let Some(span) = self.open.remove(&id) else {
            return;
        };
        span.finish(&CallOutcome {
            verdict: if code.is_some() { "error" } else { "ok" },
            error_type: code.as_deref(),
            error_message: code.as_deref(),
            ..CallOutcome::default()
        });
    }
}

/// The method's name from a fixed set (a span name and a metric attribute
/// must not be whatever a client sends).
fn known_method(method: &str) -> &'static str {
    const KNOWN: [&str; 12] = [
        "initialize",
        "ping",
        "tools/list",
        "server/discover",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "tasks/get",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == method)
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_name_a_client_makes_up_is_not_a_span_name() {
        assert_eq!(known_method("tools/list"), "tools/list");
        assert_eq!(known_method("x-secret-123"), "other");
    }
}
