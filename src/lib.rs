//! browser-shell: an audit-first MCP stdio server with exactly one tool that
//! drives a real Chromium through allow-listed agent-browser subcommands.
//!
//! A call flows one way through the folders:
//!
//! [`transport`] (stdio, JSON-RPC framing, rmcp) → [`call`] (validate →
//! plan → admit → approve → audit intent → execute → guard → reply, with
//! the outcome record) using [`policy`] (URL policy, approval rules,
//! secrets and their spellings, output paths), [`approvals`] (where a
//! person answers) and [`runner`] (confined agent-browser). The daemons it starts
//! reach Chromium only through [`gate`] (CDP allowlist, the warden that
//! polices each tab's documents, a browser context per session, secret
//! typing), and each context reaches the network only through [`egress`]
//! (a proxy listener per session, deciding every connection); their
//! refusals reach the audit writer through [`browser_refusals`]. After a
//! call that can change the page, [`evidence`] records what it looked like
//! before and after, off the reply's path. Runner
//! and gate agree on a daemon through [`daemons`] (its gate URL, socket
//! dir, pinned tab). [`server`] builds the services a call's stages borrow
//! (admission, sessions with the daemon pool and reaper, the chronicle of
//! the server's own records, refusal pacing); [`obs`]
//! the audit journal behind its shield, and OTLP; [`cli`] the commands, which
//! check the flags and prepare the parts; [`boot`] starts the server from
//! them. [`refusal`] and [`session_id`] are the
//! vocabulary every layer shares, [`sync`] its one kind of lock,
//! [`png_scale`] its one way to shrink (and mask) a screenshot. docs/design.md explains why.

#![forbid(unsafe_code)]

mod approvals;
mod boot;
mod browser_refusals;
mod call;
mod chromium_ids;
mod cli;
mod daemons;
mod egress;
mod evidence;
mod gate;
mod obs;
mod png_scale;
mod policy;
mod refusal;
mod runner;
mod server;
mod session_id;
mod sync;
mod transport;

pub use cli::main;
pub use obs::telemetry;

/// The one tool's name.
pub(crate) const TOOL_NAME: &str = "browser-shell";
