//! The URL policy for `open`: which URLs the browser may be sent to.
//!
//! This is the seam the full policy (host allowlists, private ranges after
//! DNS, a policy file) plugs into. Today it enforces the scheme rule: only
//! `http`, `https` and exactly `about:blank`. It returns the URL the browser
//! will load, so the decision is made on exactly that string.
//!
//! A scheme-less argument (`example.com/a`, `localhost:8080`) gets `https://`,
//! as agent-browser itself would do; browser-shell prepends it here so that the
//! policy sees and passes on the final URL instead of guessing what the
//! browser will do.

use url::Url;

use crate::refusal::Refusal;

/// Schemes `open` accepts.
const ALLOWED_SCHEMES: &[&str] = &["http", "https"];

/// Decide an `open` argument; on success return the URL to load.
pub fn check_open(raw: &str) -> Result<String, Refusal> {
    let raw = raw.trim();
    if raw.eq_ignore_ascii_case("about:blank") {
        return Ok("about:blank".to_owned());
    }
    let candidate = if has_scheme(raw) {
        raw.to_owned()
    } else {
        format!("https://{raw}")
    };
    let url = Url::parse(&candidate)
        .map_err(|e| Refusal::new("url.invalid", format!("not a valid URL: {e}")))?;
    if !ALLOWED_SCHEMES.contains(&url.scheme()) {
        return Err(Refusal::new(
            "url.scheme",
            format!(
                "the {}: scheme is not allowed; open takes http, https or about:blank",
                url.scheme()
            ),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Refusal::new("url.invalid", "the URL has no host"));
    }
    Ok(url.into())
}

/// True when `raw` starts with `scheme:` in the RFC 3986 sense, except the
/// `host:port` shape (`localhost:8080/x`), which browsers read as scheme-less.
fn has_scheme(raw: &str) -> bool {
    let Some((scheme, rest)) = raw.split_once(':') else {
        return false;
    };
    let is_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let port_digits = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let looks_like_port =
        !port_digits.is_empty() && port_digits.bytes().all(|b| b.is_ascii_digit());
    is_scheme && !looks_like_port
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_https_and_about_blank_are_allowed() {
        assert_eq!(
            check_open("http://127.0.0.1:8080/x").unwrap(),
            "http://127.0.0.1:8080/x"
        );
        assert_eq!(
            check_open("HTTPS://Example.COM").unwrap(),
            "https://example.com/"
        );
        assert_eq!(check_open("about:blank").unwrap(), "about:blank");
    }

    #[test]
    fn scheme_less_urls_get_https() {
        assert_eq!(
            check_open("example.com/a?b").unwrap(),
            "https://example.com/a?b"
        );
        assert_eq!(
            check_open("localhost:8080/x").unwrap(),
            "https://localhost:8080/x"
        );
    }

    #[test]
    fn other_schemes_are_refused() {
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "chrome://version",
            "chrome-extension://abc/x",
            "devtools://devtools/x",
            "view-source:http://example.com",
            "data:text/html,x",
            "blob:http://example.com/uuid",
            "ws://example.com",
            "wss://example.com",
            "ftp://example.com",
            "about:config",
            "JaVaScRiPt:alert(1)",
        ] {
            assert_eq!(check_open(bad).unwrap_err().rule, "url.scheme", "{bad}");
        }
    }

    #[test]
    fn unparsable_urls_are_refused() {
        for bad in ["http://", "https://exa mple.com", "http://[::1"] {
            assert_eq!(check_open(bad).unwrap_err().rule, "url.invalid", "{bad}");
        }
    }
}
