//! Typed text as a page may show it again. A title or an accessible name
//! collapses runs of white space, and CSS may change the case of what it
//! shows, so an evidence record's page text is searched for typed text with
//! both undone: case folded, any run of white space one space.

use std::ops::Range;

/// Each character of `text` as it is compared, and the bytes it came from;
/// a run of white space is one space.
fn units(text: &str) -> Vec<(char, Range<usize>)> {
    let mut units: Vec<(char, Range<usize>)> = Vec::new();
    for (at, c) in text.char_indices() {
        let end = at + c.len_utf8();
        if c.is_whitespace() {
            if let Some((' ', run)) = units.last_mut() {
                run.end = end;
                continue;
            }
            units.push((' ', at..end));
        } else {
            units.push((folded(c), at..end));
        }
    }
    units
}

/// `c` in lower case, when that is one character (else `c`).
fn folded(c: char) -> char {
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(one), None) => one,
        _ => c,
    }
}

fn compared(text: &str) -> Vec<char> {
    units(text.trim()).into_iter().map(|(c, _)| c).collect()
}

/// Whether `text` is `needle`, loosely (see the module's doc).
pub(super) fn equal(text: &str, needle: &str) -> bool {
    let needle = compared(needle);
    !needle.is_empty() && compared(text) == needle
}

/// `text` with each loose occurrence of `needle` replaced by `marker`;
/// `None` when it holds none.
pub(super) fn replace_all(text: &str, needle: &str, marker: &str) -> Option<String> {
    let needle = compared(needle);
    if needle.is_empty() {
        return None;
    }
    let hay = units(text);
    let mut found = Vec::new();
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        let here = &hay[i..i + needle.len()];
        if here.iter().zip(&needle).all(|((c, _), n)| c == n) {
            found.push(here[0].1.start..here[needle.len() - 1].1.end);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    if found.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for range in found {
        out.push_str(&text[from..range.start]);
        out.push_str(marker);
        from = range.end;
    }
    out.push_str(&text[from..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_case_or_collapsed_white_space_still_matches() {
        let masked = replace_all("Results for HELLO  World!", "hello world", "[m]");
        assert_eq!(masked.as_deref(), Some("Results for [m]!"));
        let masked = replace_all("a\thello\n\nworld b hello world", "hello world", "[m]");
        assert_eq!(masked.as_deref(), Some("a\t[m] b [m]"));
    }

    #[test]
    fn text_without_the_needle_is_left_alone() {
        assert_eq!(replace_all("hello there world", "hello world", "[m]"), None);
        assert_eq!(replace_all("anything", "   ", "[m]"), None);
    }

    #[test]
    fn equality_is_of_the_whole_text_loosely() {
        assert!(equal("  ABC ", "abc"));
        assert!(!equal("abcd", "abc"));
        assert!(!equal("", ""));
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        let masked = replace_all("Été ÉTÉ été", "été", "[m]");
        assert_eq!(masked.as_deref(), Some("[m] [m] [m]"));
    }
}
