//! Finding a text in whatever spelling a browser or a serialiser gave it.
//!
//! A value typed into a page comes back in many spellings: as it is in a
//! text field, JSON-escaped in agent-browser's output, percent-encoded in a
//! URL (its UTF-8 bytes or the page's legacy charset's, `+` for a space,
//! either case of hex, again when a URL travels inside another), or as an
//! HTML character reference where a charset cannot hold it. A [`Spellings`]
//! matches the text in any mix of these, one character at a time, so what
//! scrubs a secret or masks typed text does not depend on which spelling a
//! page chose. It also knows what rendering does to a text: runs of
//! whitespace collapsed (and trimmed at its ends), and another case
//! (`text-transform`). Matching only: callers decide what replaces a match.

use std::borrow::Cow;

use encoding_rs::Encoding;
use regex::{Regex, RegexBuilder};

/// The legacy charsets a page may declare: a form on such a page sends a
/// character as that charset's bytes, percent-encoded (`é` is `%E9` in
/// windows-1252, the default of a page that declares none). These are the
/// WHATWG Encoding Standard's, less the UTF-16 pair and the stateful
/// ISO-2022-JP, which no URL carries.
const LEGACY: &[&Encoding] = &[
    encoding_rs::WINDOWS_1252,
    encoding_rs::WINDOWS_1250,
    encoding_rs::WINDOWS_1251,
    encoding_rs::WINDOWS_1253,
    encoding_rs::WINDOWS_1254,
    encoding_rs::WINDOWS_1255,
    encoding_rs::WINDOWS_1256,
    encoding_rs::WINDOWS_1257,
    encoding_rs::WINDOWS_1258,
    encoding_rs::WINDOWS_874,
    encoding_rs::ISO_8859_2,
    encoding_rs::ISO_8859_3,
    encoding_rs::ISO_8859_4,
    encoding_rs::ISO_8859_5,
    encoding_rs::ISO_8859_6,
    encoding_rs::ISO_8859_7,
    encoding_rs::ISO_8859_8,
    encoding_rs::ISO_8859_10,
    encoding_rs::ISO_8859_13,
    encoding_rs::ISO_8859_14,
    encoding_rs::ISO_8859_15,
    encoding_rs::ISO_8859_16,
    encoding_rs::KOI8_R,
    encoding_rs::KOI8_U,
    encoding_rs::IBM866,
    encoding_rs::MACINTOSH,
    encoding_rs::X_MAC_CYRILLIC,
    encoding_rs::SHIFT_JIS,
    encoding_rs::EUC_JP,
    encoding_rs::EUC_KR,
    encoding_rs::GBK,
    encoding_rs::GB18030,
    encoding_rs::BIG5,
];

/// A percent sign, itself percent-encoded any number of times (a URL
/// inside another URL's query).
const PERCENT: &str = "%(?:25)*";

/// Longest text a [`Spellings`] is built for, in characters: each one
/// becomes an alternation of its spellings, and a regex of thousands of
/// them is slow to build and large.
const MAX_CHARS: usize = 256;

/// One text, matched in every spelling (see the module's doc).
#[derive(Debug, Clone)]
pub(crate) struct Spellings {
    regex: Regex,
}

impl Spellings {
    /// Match all of `text`; `None` for an empty text or one too long to
    /// match reliably (over [`MAX_CHARS`]).
    pub(crate) fn of(text: &str) -> Option<Self> {
        if text.is_empty() || text.chars().count() > MAX_CHARS {
            return None;
        }
        RegexBuilder::new(&pattern_of(text))
            .size_limit(64 << 20)
            .build()
            .ok()
            .map(|regex| Self { regex })
    }

    /// Does `haystack` hold the text in any spelling?
    #[cfg(test)]
    pub(crate) fn is_in(&self, haystack: &str) -> bool {
        self.regex.is_match(haystack)
    }

    /// `haystack` with every spelling of the text replaced by `with`.
    pub(crate) fn replace_all<'a>(&self, haystack: &'a str, with: &str) -> Cow<'a, str> {
        self.regex.replace_all(haystack, regex::NoExpand(with))
    }
}

/// Shortest text a rendering may trim a value down to: an edge of
/// whitespace is optional only when at least this much is left, so that a
/// value never matches a word or two of ordinary text.
const MIN_TRIMMED_CHARS: usize = 4;

/// Each character in its spellings and cases; each run of whitespace as a
/// run of any whitespace spelling (a browser collapses runs), optional at
/// either end when enough is left (a browser trims rendered text).
fn pattern_of(text: &str) -> String {
    let trimmed = text.trim().chars().count();
    let chars: Vec<char> = text.chars().collect();
    let mut pattern = String::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_whitespace() {
            pattern.push_str(&cased_spellings_of(chars[i]));
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let mut run: Vec<char> = chars[start..i].to_vec();
        run.extend([' ', '\u{a0}']);
        run.sort_unstable();
        run.dedup();
        let any: Vec<String> = run.into_iter().map(spellings_of).collect();
        let at_edge = start == 0 || i == chars.len();
        let repeat = if at_edge && trimmed >= MIN_TRIMMED_CHARS {
            '*'
        } else {
            '+'
        };
        pattern.push_str(&format!("(?:{}){repeat}", any.join("|")));
    }
    pattern
}

/// [`spellings_of`] `c`, and of its upper- and lower-case forms.
fn cased_spellings_of(c: char) -> String {
    let mut forms = vec![spellings_of(c)];
    for other in [c.to_uppercase().to_string(), c.to_lowercase().to_string()] {
        let mut each = other.chars();
        match (each.next(), each.next()) {
            (Some(one), None) if one != c => forms.push(spellings_of(one)),
            // `ß` upper-cases to `SS`: matched as it is written.
            (Some(_), Some(_)) => forms.push(regex::escape(&other)),
            _ => {}
        }
    }
    forms.dedup();
    if forms.len() == 1 {
        return forms.remove(0);
    }
    format!("(?:{})", forms.join("|"))
}

/// A regex alternation of the ways `c` may be written.
fn spellings_of(c: char) -> String {
    let mut buffer = [0; 4];
    let text: &str = c.encode_utf8(&mut buffer);
    let mut forms: Vec<String> = vec![regex::escape(text)];
    forms.extend(json_escapes(c));
    forms.push(percent_bytes(text.as_bytes()));
    for encoding in LEGACY {
        let (bytes, _, unmappable) = encoding.encode(text);
        if !unmappable {
            let form = percent_bytes(&bytes);
            if !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    if c == ' ' {
        // Form encoding's space, and that `+` encoded again.
        forms.push(r"\+".to_owned());
        forms.push(format!("{PERCENT}2[bB]"));
    }
    forms.push(character_reference(c));
    forms.extend(named_reference(c));
    format!("(?:{})", forms.join("|"))
}

/// `%HH` for each byte, either case of hex, the `%` itself possibly
/// encoded again; a printable ASCII byte may also stand as it is (the
/// second byte of a Shift_JIS character can be a letter, and a form leaves
/// letters alone).
fn percent_bytes(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            let hex = format!("{PERCENT}{}", either_case(&format!("{b:02x}")));
            if b.is_ascii_graphic() {
                format!("(?:{hex}|{})", regex::escape(&char::from(b).to_string()))
            } else {
                hex
            }
        })
        .collect()
}

/// `hex` matched in either case, one class per digit: spelled out rather
/// than `(?i)`, whose Unicode case tables would grow the binary, and with it
/// an idle server's resident text.
fn either_case(hex: &str) -> String {
    hex.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// JSON's escapes of `c` (`\"`, `\\`, `\/`, `\n`, `\u00e9`, a surrogate
/// pair), with the backslash itself escaped any number of times (JSON in a
/// JSON string).
fn json_escapes(c: char) -> Vec<String> {
    let slash = r"\\+";
    let mut forms = Vec::new();
    match c {
        '"' | '/' => forms.push(format!("{slash}{}", regex::escape(&c.to_string()))),
        '\\' => forms.push(slash.to_owned()),
        '\n' => forms.push(format!("{slash}n")),
        '\r' => forms.push(format!("{slash}r")),
        '\t' => forms.push(format!("{slash}t")),
        '\u{8}' => forms.push(format!("{slash}b")),
        '\u{c}' => forms.push(format!("{slash}f")),
        _ => {}
    }
    let mut units = [0u16; 2];
    let unicode: String = c
        .encode_utf16(&mut units)
        .iter()
        .map(|u| format!("{slash}u{}", either_case(&format!("{u:04x}"))))
        .collect();
    forms.push(unicode);
    forms
}

/// `&#233;` or `&#xE9;`: how a form on a page whose charset cannot hold
/// `c` sends it, and how HTML may write any character. Its `&`, `#` and
/// `;` may be percent-encoded in turn.
fn character_reference(c: char) -> String {
    let code = u32::from(c);
    let hex = either_case(&format!("{code:x}"));
    format!("(?:&|{PERCENT}26)(?:#|{PERCENT}23)(?:0*{code}|[xX]0*{hex})(?:;|{PERCENT}3[bB])")
}

/// HTML's named references for the characters it must escape.
fn named_reference(c: char) -> Option<String> {
    let name = match c {
        '"' => "quot",
        '&' => "amp",
        '<' => "lt",
        '>' => "gt",
        '\'' => "apos",
        '\u{a0}' => "nbsp",
        _ => return None,
    };
    Some(format!("(?:&|{PERCENT}26){name}(?:;|{PERCENT}3[bB])"))
}

#[cfg(test)]
#[path = "spellings_tests.rs"]
mod tests;
