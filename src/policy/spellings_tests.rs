//! Each value of a table, spelled by independent encoders (serde_json,
//! form encoding, encodeURIComponent's set, encoding_rs's legacy charsets,
//! HTML references), is found inside surrounding text and replaced whole.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_encode};

use super::*;

/// The issue's table: spaces, quotes, backslash, `+`, `&`, `=`, `%`,
/// non-ASCII (Latin-1, beyond it, outside the BMP), four characters.
const VALUES: &[&str] = &[
    "correct horse battery",
    r#"pa"ss\w0rd"#,
    "a+b+c+d",
    "me&you=us",
    "100%sure",
    "pässwörd",
    "€uro–Łódź",
    "пароль-日本",
    "🔑key",
    "abcd",
    "tab\there\nline",
    "<b>'x'</b>",
];

/// encodeURIComponent's unreserved set: what it leaves alone.
const URI_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

fn percent(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

/// A form's encoding of `value` in `charset`: bytes of the charset, a
/// character it cannot hold as `&#N;`, then form-urlencoded.
fn form_in(charset: &'static Encoding, value: &str) -> String {
    let mut bytes = Vec::new();
    for c in value.chars() {
        let mut buffer = [0; 4];
        let (encoded, _, unmappable) = charset.encode(c.encode_utf8(&mut buffer));
        if unmappable {
            bytes.extend(format!("&#{};", u32::from(c)).bytes());
        } else {
            bytes.extend_from_slice(&encoded);
        }
    }
    url::form_urlencoded::byte_serialize(&bytes).collect()
}

/// Every spelling of `value` the encoders produce.
fn spelled(value: &str) -> Vec<(String, String)> {
    let json = serde_json::to_string(value).expect("json");
    let json = json[1..json.len() - 1].to_owned();
    let form: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
    let component = percent_encode(value.as_bytes(), URI_COMPONENT).to_string();
    let html: String = value
        .chars()
        .map(|c| match c {
            '"' => "&quot;".to_owned(),
            '&' => "&amp;".to_owned(),
            '<' => "&lt;".to_owned(),
            c if !c.is_ascii() => format!("&#x{:X};", u32::from(c)),
            c => c.to_string(),
        })
        .collect();
    let mut forms = vec![
        ("raw".to_owned(), value.to_owned()),
        ("json".to_owned(), json.clone()),
        (
            "json twice".to_owned(),
            serde_json::to_string(&json).expect("json")[1..]
                .trim_end_matches('"')
                .to_owned(),
        ),
        ("form".to_owned(), form.clone()),
        ("form, lower-case hex".to_owned(), form.to_lowercase()),
        (
            "form inside a URL".to_owned(),
            url::form_urlencoded::byte_serialize(form.as_bytes()).collect(),
        ),
        ("encodeURIComponent".to_owned(), component),
        ("every byte".to_owned(), percent(value.as_bytes())),
        ("html".to_owned(), html),
    ];
    for charset in [
        encoding_rs::WINDOWS_1252,
        encoding_rs::ISO_8859_2,
        encoding_rs::WINDOWS_1251,
        encoding_rs::SHIFT_JIS,
    ] {
        forms.push((
            format!("form in {}", charset.name()),
            form_in(charset, value),
        ));
    }
    forms
}

#[test]
fn every_spelling_of_every_value_is_found_and_replaced_whole() {
    for value in VALUES {
        let spellings = Spellings::of(value).expect("buildable");
        for (how, form) in spelled(value) {
            let haystack = format!("{{\"url\":\"http://127.0.0.1:8765/s?pw={form}&x=1\"}}");
            assert!(spellings.is_in(&haystack), "{value:?} {how}: {form}");
            let scrubbed = spellings.replace_all(&haystack, "{{secret:pw}}");
            assert_eq!(
                scrubbed, "{\"url\":\"http://127.0.0.1:8765/s?pw={{secret:pw}}&x=1\"}",
                "{value:?} {how}: {form}"
            );
        }
    }
}

#[test]
fn a_mix_of_spellings_within_one_value_is_found() {
    let spellings = Spellings::of("pässwörd €").expect("buildable");
    for mixed in [
        "p%C3%A4sswörd+%80",
        "p%e4ssw%F6rd%20\\u20ac",
        "p&#228;ssw&#xf6;rd €",
        "p%26%23228%3Bssw%C3%B6rd%2B%E2%82%AC",
    ] {
        assert!(spellings.is_in(mixed), "{mixed}");
    }
}

#[test]
fn other_text_and_near_misses_are_left_alone() {
    let spellings = Spellings::of("correct horse battery").expect("buildable");
    // (More whitespace, or another case, is a rendering of the value: see
    // the test below.)
    for other in [
        "correct horse batter",
        "correcthorse battery",
        "correct_horse_battery",
        "correct%2horse battery",
    ] {
        assert!(!spellings.is_in(other), "{other}");
    }
    assert!(matches!(
        spellings.replace_all("nothing here", "x"),
        Cow::Borrowed(_)
    ));
}

#[test]
fn an_empty_or_overlong_text_has_no_spellings() {
    assert!(Spellings::of("").is_none());
    assert!(Spellings::of(&"x".repeat(MAX_CHARS + 1)).is_none());
    assert!(Spellings::of(&"x".repeat(MAX_CHARS)).is_some());
}

/// What a browser makes of a value when it renders it: runs of whitespace
/// collapsed to one space (and trimmed at the ends), and the case a
/// `text-transform` gives it. Each is still the value.
#[test]
fn the_browsers_renderings_of_a_value_are_found() {
    let value = "Correct  horse\t battery";
    let spellings = Spellings::of(value).expect("spellings");
    for rendered in [
        "Correct horse battery",
        "CORRECT HORSE BATTERY",
        "correct horse battery",
        "CORRECT  HORSE\t BATTERY",
    ] {
        let page = format!("<p>x {rendered} y</p>");
        assert_eq!(
            spellings.replace_all(&page, "{{secret:s}}"),
            "<p>x {{secret:s}} y</p>",
            "{rendered:?}"
        );
    }
    let padded = Spellings::of("  pad me ").expect("spellings");
    assert!(padded.is_in("[pad me]"));
    // Whitespace is not dropped inside a value, and words are not matched alone.
    assert!(!spellings.is_in("Correcthorse battery"));
    assert!(!spellings.is_in("horse battery"));
}
