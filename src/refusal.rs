//! A refusal: the single value every "no" in the pipeline becomes.
//!
//! Validation, the subcommand grammar and the URL policy all answer with a
//! [`Refusal`] naming the rule that decided, so a reply, an audit record and a
//! test can all point at the same stable identifier.

use std::fmt;

/// Why browser-shell refused a call, before anything was spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Stable, dotted rule identifier (`subcommand.denied`, `url.scheme`, …).
    pub rule: &'static str,
    /// Human-readable explanation for the agent; never echoes secrets.
    pub message: String,
}

impl Refusal {
    pub fn new(rule: &'static str, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused [{}]: {}", self.rule, self.message)
    }
}
