//! The element a call acted on, as the agent knew it: a `@ref` is named by
//! the role and name the session's last `snapshot` gave it (what the agent
//! read before it chose), a selector by itself.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::policy::secrets::Secrets;

/// Most bytes of an element's name or selector kept in a record.
const MAX_NAME_BYTES: usize = 200;

/// Most refs remembered of one snapshot.
const MAX_REFS: usize = 5_000;

/// A snapshot's refs: `e5` → (role, name).
pub(super) type Refs = HashMap<String, (String, String)>;

/// The refs of a `snapshot` run, from agent-browser's batch output (the
/// entry whose data has `refs`); `None` when it has none. Names are page
/// text: secrets are scrubbed from them and they are cut short.
pub(super) fn of_snapshot(stdout: &[u8], secrets: &Secrets) -> Option<Refs> {
    let parsed: Value = serde_json::from_slice(stdout).ok()?;
    let entries = match parsed {
        Value::Array(items) => items,
        other => vec![other],
    };
    let refs = entries.iter().find_map(|entry| {
        let data = entry.get("result").or_else(|| entry.get("data"))?;
        data.get("refs")?.as_object()
    })?;
    let text = |node: &Value, key: &str| {
        let raw = node.get(key).and_then(Value::as_str).unwrap_or_default();
        cut(&secrets.scrub(raw))
    };
    Some(
        refs.iter()
            .take(MAX_REFS)
            .map(|(id, node)| (id.clone(), (text(node, "role"), text(node, "name"))))
            .collect(),
    )
}

/// The element `target` (a command's `argv[1]`) as a record names it.
pub(super) fn element(target: &str, refs: Option<&Refs>, secrets: &Secrets) -> Value {
    let Some(id) = target.strip_prefix('@') else {
        return json!({"selector": cut(&secrets.scrub(target))});
    };
    match refs.and_then(|refs| refs.get(id)) {
        Some((role, name)) => json!({"ref": id, "role": role, "name": name}),
        None => json!({"ref": cut(id), "unknown": "not in the session's last snapshot"}),
    }
}

fn cut(text: &str) -> String {
    crate::obs::journal::capped(text, MAX_NAME_BYTES).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Secrets {
        Secrets::default()
    }

    #[test]
    fn a_ref_is_named_by_the_last_snapshots_role_and_name() {
        let out = br#"[{"success":true,"result":{"snapshot":"- button \"Pay\" [ref=e5]","refs":{"e5":{"role":"button","name":"Pay"}}}},{"success":true,"result":{"url":"http://127.0.0.1/"}}]"#;
        let refs = of_snapshot(out, &none()).unwrap();
        assert_eq!(
            element("@e5", Some(&refs), &none()),
            json!({"ref": "e5", "role": "button", "name": "Pay"})
        );
        assert_eq!(
            element("@e9", Some(&refs), &none())["unknown"],
            "not in the session's last snapshot"
        );
    }

    #[test]
    fn a_selector_names_itself() {
        assert_eq!(element("#q", None, &none()), json!({"selector": "#q"}));
    }

    #[test]
    fn output_without_refs_teaches_nothing() {
        assert!(of_snapshot(b"not json", &none()).is_none());
        assert!(of_snapshot(br#"[{"success":true,"result":{"url":"x"}}]"#, &none()).is_none());
    }
}
