//! rmcp glue: the JSON-RPC face of a call. No policy, no spawning.

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
        Tool,
    },
    service::RequestContext,
};

use super::tool;
use crate::{
    TOOL_NAME,
    call::{self, context::CallContext},
    server::Server,
};

/// The newest MCP revision this server is tested against. Every revision up
/// to it is spoken: 2026-07-28 without a handshake (`server/discover` and
/// per-request `_meta`), the older ones through `initialize`. Pinned here,
/// not left to rmcp's list, so an rmcp upgrade that learns a newer revision
/// does not claim it before the tests have seen it (tests/e2e/test_protocol.py).
pub(crate) const NEWEST_REVISION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The MCP server: one tool, every call through the pipeline.
#[derive(Clone)]
pub(crate) struct BrowserShellServer {
    server: Arc<Server>,
    tool: Tool,
}

impl BrowserShellServer {
    pub(crate) fn new(server: Arc<Server>) -> Self {
        Self {
            server,
            tool: tool::definition(),
        }
    }
}

impl ServerHandler for BrowserShellServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "browser-shell",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "One tool, browser-shell, drives a real Chromium. Start with \
                 [\"open\", url], then [\"snapshot\", \"-i\"] to see refs, then act on refs.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_REVISION))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.tool.clone()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let meta = |key: &str| {
            context
                .meta
                .get(key)
                .or_else(|| request.meta.as_ref().and_then(|m| m.get(key)))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        // From `initialize` (up to 2025-11-25), or from the request's own
        // `_meta` (2026-07-28, which has no handshake): rmcp knows which.
        let client = context
            .client_info()
            .map(|info| format!("{}/{}", info.name, info.version));
        let ctx = CallContext {
            request_id: Some(request_id_string(&context.id)),
            asker: super::elicit::Elicit::of(&context, client.clone()),
            retry: super::input_required::retry_of(&context, &request, client.as_deref()),
            client,
            protocol_version: context.protocol_version().map(|v| v.to_string()),
            traceparent: meta("traceparent"),
            tracestate: meta("tracestate"),
            cancel: context.ct.clone(),
        };
        if request.name != TOOL_NAME {
            // Unknown tools are a protocol error, but still on the record.
            let asked = (request.name.as_ref(), request.arguments.as_ref());
            let (journal, pace) = (&self.server.journal, &self.server.refusal_pace);
            let refused = call::refuse_unknown_tool(journal, pace, &self.server.rules, &ctx, asked);
            return Err(match refused {
                Ok(()) => ErrorData::invalid_params(
                    format!("unknown tool; this server has exactly one tool, {TOOL_NAME}"),
                    None,
                ),
                Err(unrecorded) => ErrorData::internal_error(unrecorded.to_string(), None),
            });
        }
        let services = services(&self.server);
        let mut reply = call::handle(services, request.arguments.as_ref(), &ctx).await;
        if let Some(question) = reply.question.take() {
            return super::input_required::result_of(question).map(CallToolResponse::from);
        }
        let image = reply.image.take();
        let is_error = reply.is_error();
        let value = serde_json::to_value(&reply).map_err(|e| {
            ErrorData::internal_error(format!("cannot encode the reply: {e}"), None)
        })?;
        let mut result = if is_error {
            CallToolResult::structured_error(value)
        } else {
            CallToolResult::structured(value)
        };
        // content[0] stays the dict as text; a screenshot follows it.
        if let Some(png) = image {
            result
                .content
                .push(ContentBlock::image(png, call::image::MIME));
        }
        Ok(result.into())
    }
}

fn request_id_string(id: &rmcp::model::RequestId) -> String {
    match id {
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
        rmcp::model::NumberOrString::String(s) => s.to_string(),
    }
}

/// Each of the server's services a call's stages may use, by reference.
fn services(server: &Server) -> call::Services<'_> {
    call::Services {
        rules: &server.rules,
        resolver: server.resolver.as_ref(),
        journal: &server.journal,
        refusal_pace: &server.refusal_pace,
        chronicle: &server.chronicle,
        admission: &server.admission,
        sessions: &server.sessions,
        runner: &server.runner,
        outputs: &server.outputs,
        typing: &server.gate.typing,
        reading: &server.gate.reading,
        witnesses: &server.witnesses,
        desk: server.desk.as_ref(),
        display: server.display.as_ref(),
        retries: &server.retries,
    }
}
