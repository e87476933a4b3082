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
    let mut out = Vec::new();
    write_value(&mut out, value);
    into_string(out)
}

/// Hex SHA-256 of a record's canonical form, `hash` excluded.
pub fn record_hash(record: &Map<String, Value>) -> String {
    let mut out = Vec::new();
    write_object(&mut out, record, Some("hash"));
    hex(&Sha256::digest(&out))
}

/// Written straight from the borrowed tree, keys sorted by reference: a
/// record is hashed and written on every call's critical path, and
/// rebuilding a sorted copy of it (the obvious way) cost more than the
/// hashing itself.
fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => write_object(out, map, None),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        scalar => write_scalar(out, scalar),
    }
}

fn write_object(out: &mut Vec<u8>, map: &Map<String, Value>, skip: Option<&str>) {
    let mut entries: Vec<(&String, &Value)> = map
        .iter()
        .filter(|(key, _)| Some(key.as_str()) != skip)
        .collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_scalar(out, key);
        out.push(b':');
        write_value(out, value);
    }
    out.push(b'}');
}

/// A string, number, bool or null, in serde_json's compact form.
fn write_scalar<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, scalar: &T) {
    // Writing JSON scalars into a Vec cannot fail: serde_json only errors
    // on I/O, or on map keys that are not strings (there are no maps here).
    let _ = serde_json::to_writer(&mut *out, scalar);
}

/// serde_json writes UTF-8 only; the fallback is never taken.
fn into_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// SHA-256 of `bytes`, in lower-case hex: how every digest in a record is
/// written.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// SHA-256 of everything `reader` yields, in lower-case hex, read in
/// small pieces (a binary of tens of MiB is never held in memory).
///
/// # Errors
/// A read error.
pub fn sha256_reader(mut reader: impl std::io::Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(hex(&hasher.finalize())),
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
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
}
