//! rmcp glue: the JSON-RPC face of the pipeline. No policy, no spawning.

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};

use crate::{
    pipeline::{CallContext, Pipeline},
    record::CallRecord,
    refusal::Refusal,
    tool::{self, TOOL_NAME},
};

/// The MCP server: one tool, every call through the pipeline.
#[derive(Clone)]
pub struct BrowserShellServer {
    pipeline: Arc<Pipeline>,
    tool: Tool,
}

impl BrowserShellServer {
    pub fn new(pipeline: Arc<Pipeline>) -> Self {
        Self {
            pipeline,
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
        let ctx = CallContext {
            request_id: Some(request_id_string(&context.id)),
            client: context
                .peer
                .peer_info()
                .map(|info| format!("{}/{}", info.client_info.name, info.client_info.version)),
            cancel: context.ct.clone(),
        };
        if request.name != TOOL_NAME {
            // Unknown tools are a protocol error, but still on the record.
            let refusal = Refusal::new(
                "tool.unknown",
                format!("unknown tool; this server has exactly one tool, {TOOL_NAME}"),
            );
            let call = CallRecord::new(&ctx);
            let reply =
                self.pipeline
                    .deny(&call, None, None, &refusal, std::time::Instant::now(), "");
            if reply.exit_code == crate::outcome::exit_code::INTERNAL {
                return Err(ErrorData::internal_error(reply.stderr, None));
            }
            return Err(ErrorData::invalid_params(refusal.message, None));
        }
        let reply = self.pipeline.handle(request.arguments.as_ref(), &ctx).await;
        let is_error = reply.is_error();
        let value = serde_json::to_value(&reply).map_err(|e| {
            ErrorData::internal_error(format!("cannot encode the reply: {e}"), None)
        })?;
        let result = if is_error {
            CallToolResult::structured_error(value)
        } else {
            CallToolResult::structured(value)
        };
        Ok(result.into())
    }
}

fn request_id_string(id: &rmcp::model::RequestId) -> String {
    match id {
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
        rmcp::model::NumberOrString::String(s) => s.to_string(),
    }
}
