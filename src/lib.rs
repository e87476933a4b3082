//! browser-shell: an audit-first MCP stdio server with exactly one tool that
//! drives a real Chromium through allow-listed agent-browser subcommands.
//!
//! A call flows one way through the modules:
//!
//! [`stdio`] → [`wire`] (framing, parsing) → [`mcp`] (JSON-RPC) → [`request`] (validate) → [`command`] (grammar) →
//! [`policy`] / [`outputs`] (decide the URL or file) → audit intent →
//! [`exec`] (spawn, or hand the batch to a [`standby`]) → [`outcome`] (normalise) →
//! audit outcome → reply. [`pipeline`] is that sequence written out once.

#![forbid(unsafe_code)]

pub mod address;
pub mod command;
pub mod config;
pub mod exec;
pub mod laps;
pub mod mcp;
pub mod operator;
pub mod outcome;
pub mod outputs;
pub mod pipeline;
pub mod policy;
pub mod record;
pub mod refusal;
pub mod request;
pub mod resolve;
pub mod review;
pub mod session;
pub mod sessions;
pub mod standby;
pub mod stdio;
pub mod telemetry;
pub mod tool;
pub mod wire;
