#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

/// The definition the writer must match: a copy of the tree with every
/// object's keys sorted, printed by serde_json.
fn reference(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for key in keys {
                    out.insert(key.clone(), sorted(&map[key]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

fn samples() -> Vec<Value> {
    vec![
        json!(null),
        json!(true),
        json!(-0.5),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1e300),
        json!("tab\tnewline\n quote\" backslash\\ nul\u{0} é 漢 🦀"),
        json!([]),
        json!({}),
        json!({"b": 1, "a": [3, {"z": null, "y": "x"}], "A": "upper", "é": 1, "ä": 2, "": 0}),
        json!({"hash": "top", "nested": {"hash": "kept", "seq": 2}, "seq": 1}),
        json!([{"k": [[], {}, [{"b": 2, "a": 1}]]}, "s", 0]),
    ]
}

#[test]
fn canonical_form_is_the_sorted_tree_printed_compactly() {
    for value in samples() {
        assert_eq!(canonical_json(&value), reference(&value), "{value}");
    }
}

#[test]
fn record_hash_covers_everything_but_the_top_level_hash() {
    for value in samples() {
        let Value::Object(record) = value else {
            continue;
        };
        let mut without = record.clone();
        without.remove("hash");
        let expected = hex(&Sha256::digest(
            reference(&Value::Object(without)).as_bytes(),
        ));
        assert_eq!(record_hash(&record), expected);
    }
    let mut a = json!({"seq": 1, "nested": {"hash": "x"}});
    let b = a.clone();
    a["nested"]["hash"] = json!("y");
    let (Value::Object(a), Value::Object(b)) = (a, b) else {
        unreachable!()
    };
    assert_ne!(
        record_hash(&a),
        record_hash(&b),
        "a nested `hash` is covered"
    );
}

#[test]
fn hex_is_lower_case_and_two_digits_per_byte() {
    assert_eq!(
        hex(&Sha256::digest(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
}
