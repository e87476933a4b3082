//! The clipboard is Chromium's, not a session's: one session's copy is
//! another's paste, and with a watched browser it is the operator's too (the
//! VNC viewer shares it). So no key event may copy, cut or paste: neither an
//! editing command (`commands: ["paste"]`) nor the shortcut that triggers
//! one (Ctrl or Meta with C, X, V or Insert; Shift with Insert or Delete).
//! Without it, text typed in one session (a secret's value included, which
//! the gate lets reach only its hosts) could be pasted anywhere.

use serde_json::Value;

/// CDP's modifier bits for `Input.dispatchKeyEvent`.
const ALT: u64 = 1;
const CTRL: u64 = 2;
const META: u64 = 4;
const SHIFT: u64 = 8;

/// Why this `Input.dispatchKeyEvent`'s parameters reach the clipboard, or
/// `None` when they do not.
pub(super) fn reaches_clipboard(params: &Value) -> Option<&'static str> {
    let commands = params.get("commands").and_then(Value::as_array);
    let editing = commands.into_iter().flatten().filter_map(Value::as_str);
    for command in editing {
        let command = command.to_ascii_lowercase();
        if ["copy", "cut", "paste"]
            .iter()
            .any(|c| command.starts_with(c))
        {
            return Some("a copy, cut or paste editing command");
        }
    }
    let modifiers = params.get("modifiers").and_then(Value::as_u64).unwrap_or(0);
    let key = named_key(params)?;
    let command_key = modifiers & (CTRL | META) != 0;
    let shift_only = modifiers & SHIFT != 0 && modifiers & (CTRL | META | ALT) == 0;
    match key {
        Key::C | Key::X | Key::V | Key::Insert if command_key => {
            Some("a copy, cut or paste shortcut")
        }
        Key::Insert | Key::Delete if shift_only => Some("a cut or paste shortcut"),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    C,
    X,
    V,
    Insert,
    Delete,
}

/// The key an event names by `key`, `code` or its Windows virtual key code
/// (any one is enough for Chromium to act on it).
fn named_key(params: &Value) -> Option<Key> {
    let text = |name| params.get(name).and_then(Value::as_str);
    let by_name = |name: &str| match name {
        "c" | "C" | "KeyC" => Some(Key::C),
        "x" | "X" | "KeyX" => Some(Key::X),
        "v" | "V" | "KeyV" => Some(Key::V),
        "Insert" => Some(Key::Insert),
        "Delete" => Some(Key::Delete),
        _ => None,
    };
    let by_code = |code: u64| match code {
        67 => Some(Key::C),
        88 => Some(Key::X),
        86 => Some(Key::V),
        45 => Some(Key::Insert),
        46 => Some(Key::Delete),
        _ => None,
    };
    let codes = ["windowsVirtualKeyCode", "nativeVirtualKeyCode"];
    text("key")
        .and_then(by_name)
        .or_else(|| text("code").and_then(by_name))
        .or_else(|| {
            codes
                .iter()
                .find_map(|c| params.get(*c).and_then(Value::as_u64).and_then(by_code))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::reaches_clipboard;

    #[test]
    fn copy_cut_and_paste_shortcuts_and_commands_are_caught() {
        for params in [
            json!({"type": "keyDown", "modifiers": 2, "key": "c"}),
            json!({"type": "rawKeyDown", "modifiers": 2, "code": "KeyV"}),
            json!({"type": "keyDown", "modifiers": 4, "windowsVirtualKeyCode": 88}),
            json!({"type": "keyDown", "modifiers": 10, "key": "V"}),
            json!({"type": "keyDown", "modifiers": 8, "key": "Insert"}),
            json!({"type": "keyDown", "modifiers": 8, "code": "Delete"}),
            json!({"type": "keyDown", "commands": ["selectAll", "Paste"]}),
            json!({"type": "keyDown", "commands": ["copy"]}),
        ] {
            assert!(reaches_clipboard(&params).is_some(), "{params}");
        }
    }

    #[test]
    fn ordinary_keys_and_selection_pass() {
        for params in [
            json!({"type": "keyDown", "key": "v", "text": "v"}),
            json!({"type": "keyDown", "modifiers": 8, "key": "V", "text": "V"}),
            json!({"type": "keyDown", "modifiers": 2, "key": "a", "commands": ["selectAll"]}),
            json!({"type": "keyDown", "key": "Delete"}),
            json!({"type": "keyDown", "key": "Enter"}),
            json!({"type": "keyDown", "modifiers": 1, "key": "Insert"}),
        ] {
            assert_eq!(reaches_clipboard(&params), None, "{params}");
        }
    }
}
