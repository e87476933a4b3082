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

/// Exactly `2 * N` hex digits, as bytes; `None` for anything else.
pub(crate) fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    // Checked byte-wise first: slicing below must never split a multi-byte
    // character, and from_str_radix would accept a sign.
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0u8; N];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
#[path = "canonical_tests.rs"]
mod tests;
