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
mod tests {
    use serde_json::{Value, json};

    use super::{definition, input_schema, output_schema};
    use crate::call::request::{MAX_ARG_BYTES, MAX_ARGV_ITEMS, MAX_TIMEOUT_SEC, validate};

    /// Arguments on both sides of every bound the schema advertises.
    fn cases() -> Vec<Value> {
        let id = |n: usize| "s".repeat(n);
        let item = |n: usize| "x".repeat(n);
        let items = |n: usize| vec![json!("get"); n];
        vec![
            json!({"session_id": "u1", "argv": ["get", "url"]}),
            json!({"session_id": "u1", "argv": ["get", "url"], "timeout_sec": 1}),
            json!({"session_id": "u1", "argv": ["get"], "timeout_sec": MAX_TIMEOUT_SEC}),
            json!({"session_id": "u1", "argv": ["get"], "timeout_sec": MAX_TIMEOUT_SEC + 1}),
            json!({"session_id": "u1", "argv": ["get"], "timeout_sec": 0}),
            json!({"session_id": "u1", "argv": ["get"], "timeout_sec": 1.5}),
            json!({"session_id": "u1", "argv": ["get"], "timeout_sec": "30"}),
            json!({"session_id": id(64), "argv": ["get"]}),
            json!({"session_id": id(65), "argv": ["get"]}),
            json!({"session_id": "", "argv": ["get"]}),
            json!({"session_id": "a b", "argv": ["get"]}),
            json!({"session_id": "a.b-c_d", "argv": ["get"]}),
            json!({"session_id": 7, "argv": ["get"]}),
            json!({"argv": ["get"]}),
            json!({"session_id": "u1"}),
            json!({"session_id": "u1", "argv": []}),
            json!({"session_id": "u1", "argv": items(MAX_ARGV_ITEMS)}),
            json!({"session_id": "u1", "argv": items(MAX_ARGV_ITEMS + 1)}),
            json!({"session_id": "u1", "argv": ["fill", "@e1", item(MAX_ARG_BYTES)]}),
            json!({"session_id": "u1", "argv": ["fill", "@e1", item(MAX_ARG_BYTES + 1)]}),
            json!({"session_id": "u1", "argv": ["scroll", "down", 300, true]}),
            json!({"session_id": "u1", "argv": ["get", null]}),
            json!({"session_id": "u1", "argv": ["get", {"url": true}]}),
            json!({"session_id": "u1", "argv": ["scroll", "down", 1.5, false]}),
            json!({"session_id": "u1", "argv": ["get", ["url"]]}),
            json!({"session_id": "u1", "argv": "get url"}),
            json!({"session_id": "u1", "argv": ["get"], "shell": "sh"}),
        ]
    }

    /// Every `type` in `schema`, with where it is.
    fn types(schema: &Value, at: &str, found: &mut Vec<(String, Value)>) {
        match schema {
            Value::Object(map) => {
                for (key, value) in map {
                    let here = format!("{at}/{key}");
                    if key == "type" {
                        found.push((here.clone(), value.clone()));
                    }
                    types(value, &here, found);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    types(item, &format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_schema_names_one_json_type_per_subschema() {
        for schema in [input_schema(), output_schema()] {
            let mut found = Vec::new();
            types(&schema, "", &mut found);
            assert!(found.len() >= 5, "{found:?}");
            for (at, ty) in found {
                assert!(ty.is_string(), "{at} is {ty}, not a single type");
            }
        }
    }

    #[test]
    fn the_annotations_say_the_tool_acts_on_the_open_world_and_may_destroy() {
        let tool = serde_json::to_value(definition()).unwrap();
        let hints = &tool["annotations"];
        assert_eq!(hints["readOnlyHint"], false);
        assert_eq!(hints["destructiveHint"], true);
        assert_eq!(hints["openWorldHint"], true);
        // Repeating a call (a click, a form submit) is not a no-op.
        assert_ne!(hints["idempotentHint"], true);
    }

    #[test]
    fn the_advertised_input_schema_and_the_validator_agree_on_every_bound() {
        let schema = jsonschema::validator_for(&input_schema()).expect("the schema compiles");
        for case in cases() {
            let accepted = validate(case.as_object()).is_ok();
            assert_eq!(
                schema.is_valid(&case),
                accepted,
                "schema and validator disagree on {}",
                serde_json::to_string(&case)
                    .unwrap_or_default()
                    .chars()
                    .take(120)
                    .collect::<String>()
            );
        }
    }
}
