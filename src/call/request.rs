//! Request validation: the tool's raw JSON arguments become a [`Validated`].
//!
//! Every bound of the tool contract is checked here, and only here, so later
//! stages can trust their input. Errors name the offending field and never
//! echo the rejected value back (it may be large or secret).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::{
    refusal::{Refusal, Rule},
    session_id::SessionId,
};

/// Most argv items one call may carry.
pub(crate) const MAX_ARGV_ITEMS: usize = 32;
/// Largest single argv item, in bytes.
pub(crate) const MAX_ARG_BYTES: usize = 4096;
/// Default and bounds of `timeout_sec`.
pub(crate) const DEFAULT_TIMEOUT_SEC: u64 = 30;
pub(crate) const MAX_TIMEOUT_SEC: u64 = 120;

/// A request whose every field is within the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Validated {
    pub session: SessionId,
    /// `argv[0]` is the subcommand; numbers and booleans are already strings.
    pub argv: Vec<String>,
    pub timeout: Duration,
}

/// The session id if the arguments carry a well-formed one, for replies and
/// audit records of calls that were refused for some other reason.
pub(crate) fn session_hint(arguments: Option<&Map<String, Value>>) -> Option<SessionId> {
    let id = arguments?.get("session_id")?.as_str()?;
    SessionId::parse(id).ok()
}

/// Validate the raw `arguments` object of a `tools/call`.
pub(crate) fn validate(arguments: Option<&Map<String, Value>>) -> Result<Validated, Refusal> {
    let args = arguments.ok_or_else(|| {
        Refusal::new(
            Rule::RequestInvalid,
            "arguments are required: {\"session_id\": \"…\", \"argv\": [\"…\"]}",
        )
    })?;
    if let Some(unknown) = args
        .keys()
        .find(|k| !matches!(k.as_str(), "session_id" | "argv" | "timeout_sec"))
    {
        return Err(Refusal::new(
            Rule::RequestInvalid,
            format!(
                "unknown argument {unknown:?}: only session_id, argv and timeout_sec are accepted"
            ),
        ));
    }
    let session = match args.get("session_id") {
        Some(Value::String(id)) => SessionId::parse(id)?,
        Some(other) => {
            return Err(Refusal::new(
                Rule::SessionIdInvalid,
                format!("session_id must be a string, not {}", type_name(other)),
            ));
        }
        None => {
            return Err(Refusal::new(
                Rule::SessionIdInvalid,
                "session_id is required",
            ));
        }
    };
    let argv = match args.get("argv") {
        Some(Value::Array(items)) => validate_argv(items)?,
        Some(other) => {
            return Err(Refusal::new(
                Rule::ArgvInvalid,
                format!(
                    "argv must be an array of strings, not {} (no shell strings: split the command into items)",
                    type_name(other)
                ),
            ));
        }
        None => return Err(Refusal::new(Rule::ArgvInvalid, "argv is required")),
    };
    let timeout_sec = match args.get("timeout_sec") {
        None => DEFAULT_TIMEOUT_SEC,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(t) if (1..=MAX_TIMEOUT_SEC).contains(&t) => t,
            _ => {
                return Err(Refusal::new(
                    Rule::TimeoutInvalid,
                    format!("timeout_sec must be a whole number from 1 to {MAX_TIMEOUT_SEC}"),
                ));
            }
        },
        Some(other) => {
            return Err(Refusal::new(
                Rule::TimeoutInvalid,
                format!("timeout_sec must be an integer, not {}", type_name(other)),
            ));
        }
    };
    Ok(Validated {
        session,
        argv,
        timeout: Duration::from_secs(timeout_sec),
    })
}

fn validate_argv(items: &[Value]) -> Result<Vec<String>, Refusal> {
    if items.is_empty() || items.len() > MAX_ARGV_ITEMS {
        return Err(Refusal::new(
            Rule::ArgvInvalid,
            format!(
                "argv must have 1 to {MAX_ARGV_ITEMS} items (got {})",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let text = match item {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => {
                    return Err(Refusal::new(
                        Rule::ArgvInvalid,
                        format!(
                            "argv[{i}] must be a string, number or boolean, not {}",
                            type_name(other)
                        ),
                    ));
                }
            };
            if text.len() > MAX_ARG_BYTES {
                return Err(Refusal::new(
                    Rule::ArgvInvalid,
                    format!(
                        "argv[{i}] is {} bytes; the limit is {MAX_ARG_BYTES}",
                        text.len()
                    ),
                ));
            }
            // Tab and newline are legitimate in typed text; every other control
            // character (NUL above all) is refused outright. Positions that are
            // not free text are held to a stricter rule by the grammar.
            if let Some(c) = text
                .chars()
                .find(|c| c.is_control() && !matches!(c, '\t' | '\n'))
            {
                return Err(Refusal::new(
                    Rule::ArgvInvalid,
                    format!(
                        "argv[{i}] contains the control character U+{:04X}",
                        u32::from(c)
                    ),
                ));
            }
            Ok(text)
        })
        .collect()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
