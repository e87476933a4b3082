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
