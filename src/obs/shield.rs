//! What a record may keep of what the agent typed: nothing in clear.
//!
//! Every record passes through [`Shield::apply`] on its way to the log (and
//! so to its OTLP copy and every report made from the log). It replaces each
//! secret's value, in any spelling, with its placeholder, and in every URL a
//! record quotes (a page URL, a refusal's reason or destination, a lifecycle detail) a query
//! or fragment value that holds text typed by `fill`, `type`, `select` or
//! `keyboard`, with the marker the intent record used for that text (its
//! length and keyed MAC): a GET form puts what was typed into the next
//! page's URL, and the log must not become a copy of it. A value is decoded
//! the ways a form encodes (percent-encoding in UTF-8 or windows-1252, `+`
//! for a space, twice over, `&#N;` references) and then searched for the
//! text: a text costs a string, where a pattern of every spelling (as for
//! the few secrets) would cost a compiled regex for each of the many texts.
//! An evidence record's page text (titles, element names), and what an
//! approval record says was shown, has typed text masked wherever it
//! appears, in any case and white space, not only in URLs.
//! Replies are not shielded from typed text: the agent may see what it typed.
//! Diagnostics are: every line the server prints or logs passes the same
//! shield ([`scrub_diagnostic`]) once the server has one.

use std::{
    borrow::Cow,
    collections::VecDeque,
    sync::{Arc, Mutex, OnceLock},
};

use serde_json::Value;

use crate::policy::rules;

/// How many typed texts are remembered (the most recent): enough for the
/// forms of every live session, bounded so a client cannot grow it.
const REMEMBERED: usize = 128;
/// Characters of a typed text that are matched: a value holding the whole
/// text holds its start (matching more costs memory and buys nothing).
const MATCHED_CHARS: usize = 64;
/// A typed text shorter than this masks a value only when it is the whole
/// value: a one-letter text would otherwise mask every value holding it.
const SHORT_CHARS: usize = 4;

/// One typed text (its first [`MATCHED_CHARS`] characters), and what
/// stands for it in a record.
struct Typed {
    text: String,
    short: bool,
    marker: String,
}

/// The secrets in force and the texts typed lately (see the module's doc).
pub(crate) struct Shield {
    rules: Arc<rules::Current>,
    typed: Mutex<VecDeque<Typed>>,
}

impl std::fmt::Debug for Shield {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shield").finish_non_exhaustive()
    }
}

impl Shield {
    pub(crate) fn new(rules: Arc<rules::Current>) -> Self {
        Self {
            rules,
            typed: Mutex::new(VecDeque::new()),
        }
    }

    /// Remember `text`, typed into a page as the agent wrote it (with its
    /// `{{secret:NAME}}` placeholders: a record's secrets are placeholders
    /// by the time typed text is looked for).
    pub(crate) fn remember_typed(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        let matched: String = text.chars().take(MATCHED_CHARS).collect();
        let mac = self.rules.get().redactor.secret(text);
        let marker = format!(
            "[typed:len={}:mac={}]",
            mac["len"],
            mac["mac"].as_str().unwrap_or_default()
        );
        let mut typed = crate::sync::lock(&self.typed);
        if typed.iter().any(|t| t.marker == marker) {
            return;
        }
        if typed.len() == REMEMBERED {
            typed.pop_front();
        }
        typed.push_back(Typed {
            text: matched,
            short: text.chars().count() < SHORT_CHARS,
            marker,
        });
    }

    /// `text` as a record may keep it, borrowed when nothing had to change.
    fn shielded<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let rules = self.rules.get();
        let typed = crate::sync::lock(&self.typed);
        shield_text(text, &rules, &typed).map_or(Cow::Borrowed(text), Cow::Owned)
    }

    /// Shield `event` before it is written (see the module's doc).
    pub(crate) fn apply(&self, event: &mut audit::Event) {
        let rules = self.rules.get();
        let typed = crate::sync::lock(&self.typed);
        let shield = |text: &str| shield_text(text, &rules, &typed);
        for field in [&mut event.reason, &mut event.page_url] {
            if let Some(text) = field.as_deref().and_then(shield) {
                *field = Some(text);
            }
        }
        // A refused request's destination is the page's choice of host.
        for value in event
            .detail
            .iter_mut()
            .chain(event.destination.iter_mut())
            .chain(event.argv.iter_mut().flatten())
        {
            shield_strings(value, &shield);
        }
        // An evidence record, and what an approval showed, quote page text
        // (titles, element names) as well as URLs: typed text is masked
        // wherever it appears there.
        let anywhere = |text: &str| {
            let shielded = shield(text);
            let text = shielded.as_deref().unwrap_or(text);
            mask_typed_anywhere(text, &typed).or(shielded)
        };
        if let Some(evidence) = event.evidence.as_mut() {
            shield_strings(evidence, &anywhere);
        }
        if let Some(shown) = event.approval.as_mut().and_then(|a| a.get_mut("shown")) {
            shield_strings(shown, &anywhere);
        }
    }
}

/// `text` with each typed text it holds (one of at least [`SHORT_CHARS`]
/// characters, or all of `text`), in any case and however its white space
/// was collapsed (`super::loose`), replaced by its marker; `None` when it
/// holds none.
fn mask_typed_anywhere(text: &str, typed: &VecDeque<Typed>) -> Option<String> {
    let mut out: Option<String> = None;
    for t in typed {
        let current = out.as_deref().unwrap_or(text);
        if t.short {
            if super::loose::equal(current, &t.text) {
                out = Some(t.marker.clone());
            }
        } else if let Some(masked) = super::loose::replace_all(current, &t.text, &t.marker) {
            out = Some(masked);
        }
    }
    out
}

/// The shield of the server's records, which diagnostics pass too.
static DIAGNOSTICS: OnceLock<Arc<Shield>> = OnceLock::new();

/// From now on, every diagnostic line passes `shield` (the first server's,
/// in a process that has one).
pub(crate) fn guard_diagnostics(shield: Arc<Shield>) {
    let _ = DIAGNOSTICS.set(shield);
}

/// A diagnostic line as a record may keep it: no secret in any spelling the
/// scrubber knows, no typed text in a URL. As it is before a server exists
/// (nothing was typed, and no line quotes a secret's value then).
///
/// Nothing the shield calls may log while it holds one of its locks: the
/// line would wait on the lock its own scrubbing needs.
pub(crate) fn scrub_diagnostic(line: &str) -> Cow<'_, str> {
    match DIAGNOSTICS.get() {
        Some(shield) => shield.shielded(line),
        None => Cow::Borrowed(line),
    }
}

/// `text` without secrets and typed text; `None` when nothing changed.
fn shield_text(text: &str, rules: &rules::Rules, typed: &VecDeque<Typed>) -> Option<String> {
    let scrubbed = rules.secrets.scrub(text);
    match mask_typed(&scrubbed, typed) {
        Cow::Owned(masked) => Some(masked),
        Cow::Borrowed(_) => match scrubbed {
            Cow::Owned(scrubbed) => Some(scrubbed),
            Cow::Borrowed(_) => None,
        },
    }
}

fn shield_strings(value: &mut Value, shield: &impl Fn(&str) -> Option<String>) {
    match value {
        Value::String(text) => {
            if let Some(shielded) = shield(text) {
                *text = shielded;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| shield_strings(v, shield)),
        Value::Object(map) => map.values_mut().for_each(|v| shield_strings(v, shield)),
        _ => {}
    }
}

/// `text` with every query and fragment value (of each URL in it) that
/// holds a typed text replaced by that text's marker.
fn mask_typed<'a>(text: &'a str, typed: &VecDeque<Typed>) -> Cow<'a, str> {
    if typed.is_empty() || !text.contains(['?', '#']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    // Values run to the next separator; whitespace and quotes end a URL.
    for piece in text.split_inclusive(['?', '#', '&', ';', ' ', '\n', '"', '\'']) {
        let (body, end) = match piece.char_indices().last() {
            Some((i, c)) if "?#&; \n\"'".contains(c) => (&piece[..i], &piece[i..]),
            _ => (piece, ""),
        };
        match body.split_once('=') {
            Some((name, value)) if !value.is_empty() => match marker_for(value, typed) {
                Some(marker) => {
                    changed = true;
                    out.push_str(name);
                    out.push('=');
                    out.push_str(marker);
                }
                None => out.push_str(body),
            },
            _ => out.push_str(body),
        }
        out.push_str(end);
    }
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// The marker of the first typed text `value` holds, decoded any way a form
/// encodes (a short text only as the whole value).
fn marker_for<'t>(value: &str, typed: &'t VecDeque<Typed>) -> Option<&'t str> {
    let decoded = decodings(value);
    typed
        .iter()
        .find(|t| {
            decoded.iter().any(|d| {
                if t.short {
                    d.as_str() == t.text
                } else {
                    d.contains(t.text.as_str())
                }
            })
        })
        .map(|t| t.marker.as_str())
}

/// `value` as it is and decoded: percent-encoding (`+` for a space) read as
/// UTF-8 and as windows-1252 (a page without a charset), each decoded once
/// more (a URL inside a URL), each with `&#N;`/`&#xH;` references resolved
/// (a character the page's charset cannot hold).
fn decodings(value: &str) -> Vec<String> {
    let mut out = vec![value.to_owned()];
    let mut layer = vec![value.to_owned()];
    for _ in 0..2 {
        let mut next = Vec::new();
        for text in &layer {
            let bytes: Vec<u8> =
                percent_encoding::percent_decode(text.replace('+', " ").as_bytes()).collect();
            next.push(String::from_utf8_lossy(&bytes).into_owned());
            next.push(
                encoding_rs::WINDOWS_1252
                    .decode_without_bom_handling(&bytes)
                    .0
                    .into_owned(),
            );
        }
        next.retain(|d| !out.contains(d));
        next.dedup();
        out.extend(next.iter().cloned());
        layer = next;
    }
    let references: Vec<String> = out.iter().filter_map(|d| resolve_references(d)).collect();
    out.extend(references);
    out
}

/// `text` with its numeric character references resolved, when it has any.
fn resolve_references(text: &str) -> Option<String> {
    if !text.contains("&#") {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("&#") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let (digits, radix) = match after.strip_prefix(['x', 'X']) {
            Some(hex) => (hex, 16),
            None => (after, 10),
        };
        let end = digits.find(';').unwrap_or(0);
        match u32::from_str_radix(&digits[..end], radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(c) if end > 0 => {
                out.push(c);
                rest = &digits[end + 1..];
            }
            _ => {
                out.push_str("&#");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
#[path = "shield_tests.rs"]
mod tests;
