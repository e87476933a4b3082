//! The canonical form a record's hash covers: compact JSON with every
//! object's keys sorted, recursively, and `hash` itself left out.
//!
//! Explicit rather than relying on serde_json's default map order, which a
//! dependency enabling `preserve_order` would silently change.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// `prev_hash` of the first record of a chain.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Compact JSON of `value` with object keys sorted at every level.
pub fn canonical_json(value: &Value) -> String {
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

/// Hex SHA-256 of a record's canonical form, `hash` excluded.
pub fn record_hash(record: &Map<String, Value>) -> String {
    let mut without = record.clone();
    without.remove("hash");
    hex(&Sha256::digest(
        canonical_json(&Value::Object(without)).as_bytes(),
    ))
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
