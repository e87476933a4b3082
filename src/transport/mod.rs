//! How calls arrive and replies leave: stdin and stdout ([`stdio`]), the
//! JSON-RPC framing in front of rmcp that bounds and checks every message
//! ([`wire`]) and the spans of the requests it carries besides
//! `tools/call` ([`method_spans`]), the rmcp handler that turns a
//! `tools/call` into a call ([`mcp`]), and the one tool's advertised schema
//! ([`tool`]).

mod elicit;
pub(crate) mod mcp;
pub(crate) mod method_spans;
pub(crate) mod stdio;
pub(crate) mod tool;
pub(crate) mod wire;
