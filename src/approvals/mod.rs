//! Where a person is asked for a yes, and answers: the channels of the
//! policy's approval rules. The call pipeline's stage (`call::approve`)
//! decides which calls need a yes and records every step; a channel only
//! carries the question and brings back the answer, with whatever identity
//! it can vouch for. Nothing here is reachable through MCP or from the
//! driven browser: an approval is never something the agent or the page
//! can produce.
//!
//! The channels: the person at the MCP client, through elicitation where
//! the client supports it: asked mid-call ([`Ask`], implemented by the
//! transport) up to 2025-11-25, or by ending the call with the question and
//! resuming it on the client's retry ([`retry`]) from 2026-07-28; and the
//! operator's desk ([`desk`]): request files beside the audit log, answered
//! with `browser-shell approvals`; and a dialog on the browser's X display
//! ([`display`]), for whoever watches it (the stack's VNC). The policy
//! says which may be used.

pub(crate) mod desk;
pub(crate) mod display;
pub(crate) mod retry;

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

/// What came back for a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// Yes, from `by`.
    Yes { by: Value },
    /// No, from `by`, and why (the person's words, or a mismatch).
    No { by: Value, why: String },
    /// Nothing within the wait.
    None,
    /// The call was cancelled while it waited.
    Cancelled,
}

/// What a yes covers, unredacted, and nothing else: the page's URL, the
/// element's role and name, and where the elements so named are.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Binding {
    pub(crate) url: Option<String>,
    pub(crate) element: Option<(String, String)>,
    pub(crate) places: Vec<[i64; 4]>,
}

/// The person at the MCP client, asked through the client.
pub(crate) trait Ask: Send + Sync + std::fmt::Debug {
    /// Ask `message` (what will happen, as shown); the answer, or
    /// [`Answer::None`] past `within`.
    fn ask(&self, message: String, within: Duration) -> BoxFuture<'_, Answer>;
}
