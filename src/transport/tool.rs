//! The one tool this server exposes: its name, description and schemas.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::{
    TOOL_NAME,
    call::{
        grammar::usages,
        request::{DEFAULT_TIMEOUT_SEC, MAX_ARG_BYTES, MAX_ARGV_ITEMS, MAX_TIMEOUT_SEC},
    },
};

/// The tool definition returned by `tools/list`.
pub(crate) fn definition() -> Tool {
    let mut description = String::from(
        "Drive a real, visible Chromium through allow-listed agent-browser subcommands. \
         Pass the command as argv items (never a shell string). Each session_id has its own \
         browser session; take `snapshot -i` to get element refs like @e3 for click/fill. \
         The reply's stdout is the command's JSON data; on failure exit_code is non-zero and \
         stderr says why (126 = refused by browser-shell, 124 = timed out).\n\nSubcommands:\n",
    );
    for (_, line) in usages() {
        description.push_str("  ");
        description.push_str(line);
        description.push('\n');
    }
    let mut tool = Tool::new(TOOL_NAME, description, Arc::new(object(input_schema())))
        .with_title("Browser shell")
        .with_raw_output_schema(Arc::new(object(output_schema())));
    let mut annotations = ToolAnnotations::default();
    annotations.title = Some("Browser shell".into());
    annotations.destructive_hint = Some(true);
    annotations.open_world_hint = Some(true);
    annotations.read_only_hint = Some(false);
    tool = tool.with_annotations(annotations);
    tool
}

fn input_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["session_id", "argv"],
        "properties": {
            "session_id": {
                "type": "string",
                "pattern": "^[a-zA-Z0-9._-]{1,64}$",
                "description": "Names your browser session; calls with the same id share one page."
            },
            "argv": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_ARGV_ITEMS,
                // One `type` per branch, not a type array: clients that map
                // a schema onto a single-type dialect (Gemini's OpenAPI
                // subset; the MCP Inspector's --strict warns) read this.
                "items": {
                    "anyOf": [
                        {"type": "string", "maxLength": MAX_ARG_BYTES},
                        {"type": "number"},
                        {"type": "boolean"}
                    ]
                },
                "description": "argv[0] is the subcommand, e.g. [\"open\", \"https://example.com\"] or [\"fill\", \"@e2\", \"hello\"]."
            },
            "timeout_sec": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_SEC,
                "default": DEFAULT_TIMEOUT_SEC,
                "description": "Kill the command after this many seconds."
            }
        }
    })
}

fn output_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["session_id", "exit_code", "stdout", "stderr"],
        "properties": {
            "session_id": {"type": "string"},
            "exit_code": {
                "type": "integer",
                "description": "0 ok, 1 agent-browser failure, 124 timed out, 125 browser-shell error, 126 refused by browser-shell"
            },
            "stdout": {"type": "string", "description": "The command's data as one line of JSON (may be truncated)."},
            "stderr": {"type": "string", "description": "Error text and warnings (may be truncated)."}
        }
    })
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
#[path = "tool_tests.rs"]
mod tests;
