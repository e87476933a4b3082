//! How calls arrive and replies leave: stdin and stdout ([`stdio`]), the
//! JSON-RPC framing in front of rmcp that bounds and checks every message
//! ([`wire`]) and the spans of the requests it carries besides
//! `tools/call` ([`method_spans`]), the rmcp handler that turns a
//! `tools/call` into a call ([`mcp`]), the person at the client as an
//! approvals channel (`elicit`, and `input_required` from 2026-07-28),
//! and the one tool's advertised schema ([`tool`]).

mod elicit;
mod input_required;
pub(crate) mod mcp;
pub(crate) mod method_spans;
pub(crate) mod stdio;
pub(crate) mod tool;
pub(crate) mod wire;
