//! The URL policy, one table: `(property, policy file, input, expected)`.
//!
//! Pure policy: no sockets, no DNS, no browser. Every name goes through
//! [`resolver`], a fixed map (unknown names fail like NXDOMAIN); the policy
//! itself answers `localhost` and `*.localhost`. Expectations are what is
//! correct for security — the URL the browser would load and whether that
//! host may be reached — not a copy of what the implementation happens to do.
//! Rows the implementation gets wrong are marked `// DISAGREES:`.

use std::{
    collections::{BTreeSet, HashMap},
    io,
    net::IpAddr,
    sync::Mutex,
    time::Duration,
};

use pretty_assertions::assert_eq;
use url::Url;

use super::*;
use crate::policy::resolve::{BoxFuture, StaticResolver};

// ---------------------------------------------------------------------------
// Policies used by the table. `DEFAULT` (empty text) means `UrlPolicy::default()`.
// ---------------------------------------------------------------------------

const DEFAULT: &str = "";
/// Exact hosts plus subdomains of example.com.
const ALLOW: &str = r#"{"open": {
    "allow_hosts": ["example.com", "public.test", "xn--bcher-kva.example", "intranet.test", "93.184.216.34"],
    "allow_host_suffixes": [".example.com"]}}"#;
const SUFFIX_ONLY: &str = r#"{"open": {"allow_host_suffixes": [".example.com"]}}"#;
const HOSTS_ONLY: &str = r#"{"open": {"allow_hosts": ["example.com"]}}"#;
/// An allowlist written in Unicode and mixed case: compared after normalization.
const IDN_ALLOW: &str = r#"{"open": {"allow_hosts": ["Bücher.Example"]}}"#;
/// An explicit empty allowlist allows no host at all.
const EMPTY_ALLOW: &str = r#"{"open": {"allow_hosts": []}}"#;
const DENY: &str =
    r#"{"open": {"deny_hosts": ["evil.example.com", ".bad.test", "localhost", "8.8.8.8"]}}"#;
/// The same host allowed and denied: deny wins.
const BOTH: &str = r#"{"open": {
    "allow_hosts": ["evil.example.com", "public.test"], "deny_hosts": ["evil.example.com"]}}"#;
const PRIV: &str = r#"{"open": {"allow_private_cidrs": ["127.0.0.1/32", "10.1.0.0/16"]}}"#;
const PRIV_LOOP: &str = r#"{"open": {"allow_private_cidrs": ["127.0.0.0/8", "::1/128"]}}"#;
/// An IPv4-only allowance that must not cover IPv6 loopback.
const PRIV_ZERO: &str = r#"{"open": {"allow_private_cidrs": ["0.0.0.0/8"]}}"#;
const NO_BLANK: &str = r#"{"open": {"allow_about_blank": false}}"#;
const HTTPS_ONLY: &str = r#"{"open": {"allow_schemes": ["https"]}}"#;
/// The example from the policy documentation, verbatim.
const DOC: &str = r#"{"open": {"allow_schemes": ["http","https"], "allow_about_blank": true,
    "allow_hosts": ["example.com"], "allow_host_suffixes": [".example.com"],
    "allow_private_cidrs": ["127.0.0.1/32"], "deny_hosts": ["evil.example.com"],
    "navigation_guard": true, "dns_timeout_ms": 2000}}"#;

/// A public address standing in for every "good" name; never contacted.
const PUBLIC: &str = "93.184.216.34";

/// The test resolver. Every name also answers with a trailing dot (as DNS
/// does for an absolute name); anything else fails with `NotFound`.
fn resolver() -> StaticResolver {
    let entries: &[(&str, &[&str])] = &[
        ("public.test", &[PUBLIC]),
        ("sub.public.test", &[PUBLIC]),
        ("unlisted.test", &[PUBLIC]),
        ("evil.test", &[PUBLIC]),
        ("rebind.test", &[PUBLIC, "10.0.0.5"]),
        ("rebind6.test", &["2606:4700::1", "fd00::1"]),
        ("rebind-mapped.test", &[PUBLIC, "::ffff:127.0.0.1"]),
        ("rebind-allowed.test", &[PUBLIC, "10.1.0.5"]),
        ("intranet.test", &["10.1.2.3"]),
        ("private-ok.test", &["10.1.0.5"]),
        ("loop.test", &["127.0.0.1"]),
        ("meta.test", &["169.254.169.254"]),
        ("zero.test", &["0.0.0.0"]),
        ("v6only.test", &["2606:4700::1"]),
        ("multi.test", &[PUBLIC, "2606:4700::1"]),
        ("mapped.test", &["::ffff:10.0.0.1"]),
        ("mapped-ok.test", &["::ffff:10.1.0.1"]),
        ("nat64.test", &["64:ff9b::a00:1"]),
        ("ula.test", &["fd12:3456::1"]),
        ("nothing.test", &[]),
        ("foolocalhost", &[PUBLIC]),
        // Allowlist / denylist names: all public, so only the lists decide.
        ("example.com", &[PUBLIC]),
        ("a.example.com", &[PUBLIC]),
        ("x.y.example.com", &[PUBLIC]),
        ("badexample.com", &[PUBLIC]),
        ("aexample.com", &[PUBLIC]),
        ("example.com.evil.test", &[PUBLIC]),
        ("example.co", &[PUBLIC]),
        ("xn--bcher-kva.example", &[PUBLIC]),
        ("bucher.example", &[PUBLIC]),
        ("xn--xample-2of.com", &[PUBLIC]),
        ("evil.example.com", &[PUBLIC]),
        ("x.evil.example.com", &[PUBLIC]),
        ("ok.example.com", &[PUBLIC]),
        ("x.bad.test", &[PUBLIC]),
        ("a.b.bad.test", &[PUBLIC]),
        ("notbad.test", &[PUBLIC]),
        ("xbad.test", &[PUBLIC]),
    ];
    let mut map = HashMap::new();
    for (name, addrs) in entries {
        let addrs: Vec<IpAddr> = addrs.iter().map(|a| a.parse().unwrap()).collect();
        map.insert(format!("{name}."), addrs.clone());
        map.insert((*name).to_owned(), addrs);
    }
    StaticResolver(map)
}

// ---------------------------------------------------------------------------
// The table.
// ---------------------------------------------------------------------------

/// The property a row proves; each has a test of the same meaning below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prop {
    Schemes,
    AboutBlankOff,
    SchemeSet,
    SchemeLess,
    Invalid,
    Normalized,
    V4Forms,
    Tricks,
    V4Ranges,
    V6Ranges,
    Embedded,
    Localhost,
    Rebind,
    DnsFail,
    Suffix,
    Allow,
    Deny,
    Order,
    Cidr,
}

#[derive(Debug, Clone, Copy)]
enum Want {
    /// Allowed; the browser loads exactly this URL.
    Load(&'static str),
    /// Refused by exactly this rule.
    Refuse(&'static str),
    /// Refused; which rule is a matter of taste (the reason is in the row).
    RefuseAny,
}

use Prop::*;
use Want::{Load, Refuse, RefuseAny};

const INVALID: Want = Refuse("url.invalid");
const SCHEME: Want = Refuse("url.scheme");
const DENIED: Want = Refuse("host.denied");
const NOT_ALLOWED: Want = Refuse("host.not_allowed");
const PRIVATE: Want = Refuse("address.private");
const DNS: Want = Refuse("dns.failed");

#[rustfmt::skip]
const TABLE: &[(Prop, &str, &str, Want)] = &[
    // --- schemes: only http, https and exactly about:blank -----------------
    (Schemes, DEFAULT, "https://public.test/", Load("https://public.test/")),
    (Schemes, DEFAULT, "http://public.test/", Load("http://public.test/")),
    (Schemes, DEFAULT, "about:blank", Load("about:blank")),
    (Schemes, DEFAULT, "  about:blank  ", Load("about:blank")),
    (Schemes, DEFAULT, "about:srcdoc", SCHEME),
    (Schemes, DEFAULT, "about:config", SCHEME),
    (Schemes, DEFAULT, "about:version", SCHEME),
    (Schemes, DEFAULT, "about:", SCHEME),
    (Schemes, DEFAULT, "about:blankx", SCHEME),
    (Schemes, DEFAULT, "about://blank", SCHEME),
    (Schemes, DEFAULT, "file:///etc/passwd", SCHEME),
    (Schemes, DEFAULT, "FILE:///etc/passwd", SCHEME),
    (Schemes, DEFAULT, "javascript:alert(1)", SCHEME),
    (Schemes, DEFAULT, "  JavaScript:alert(1)", SCHEME),
    (Schemes, DEFAULT, "data:text/html,<h1>hi</h1>", SCHEME),
    (Schemes, DEFAULT, "chrome://version", SCHEME),
    (Schemes, DEFAULT, "chrome-extension://abc/x.html", SCHEME),
    (Schemes, DEFAULT, "devtools://devtools/bundled/inspector.html", SCHEME),
    (Schemes, DEFAULT, "view-source:https://public.test/", SCHEME),
    (Schemes, DEFAULT, "blob:https://public.test/0b1f", SCHEME),
    (Schemes, DEFAULT, "filesystem:https://public.test/temporary/x", SCHEME),
    (Schemes, DEFAULT, "ws://public.test/", SCHEME),
    (Schemes, DEFAULT, "wss://public.test/", SCHEME),
    (Schemes, DEFAULT, "ftp://public.test/", SCHEME),
    (Schemes, DEFAULT, "mailto:x@public.test", SCHEME),
    // `host:word` reads as a scheme, not a port: refused, never guessed at.
    (Schemes, DEFAULT, "public.test:abc", SCHEME),
    // A tab inside the scheme: either way it must not become javascript:.
    (Schemes, DEFAULT, "\tjava\nscript:alert(1)", RefuseAny),
    // --- about:blank can be switched off ---------------------------------------
    (AboutBlankOff, NO_BLANK, "about:blank", SCHEME),
    (AboutBlankOff, NO_BLANK, "ABOUT:BLANK", SCHEME),
    (AboutBlankOff, NO_BLANK, "about:srcdoc", SCHEME),
    (AboutBlankOff, NO_BLANK, "https://public.test/", Load("https://public.test/")),
    // --- allow_schemes narrows --------------------------------------------------
    (SchemeSet, HTTPS_ONLY, "https://public.test/", Load("https://public.test/")),
    (SchemeSet, HTTPS_ONLY, "http://public.test/", SCHEME),
    (SchemeSet, HTTPS_ONLY, "HTTP://PUBLIC.TEST/", SCHEME),
    (SchemeSet, HTTPS_ONLY, r"http:\\public.test\", SCHEME),
    (SchemeSet, HTTPS_ONLY, "public.test/x", Load("https://public.test/x")),
    (SchemeSet, HTTPS_ONLY, "about:blank", Load("about:blank")),
    // --- scheme-less input gets https:// ---------------------------------------
    (SchemeLess, DEFAULT, "public.test", Load("https://public.test/")),
    (SchemeLess, DEFAULT, "public.test/path?q=1#f", Load("https://public.test/path?q=1#f")),
    (SchemeLess, DEFAULT, "public.test:8443/x", Load("https://public.test:8443/x")),
    (SchemeLess, DEFAULT, "public.test:443", Load("https://public.test/")),
    (SchemeLess, DEFAULT, "user@public.test", Load("https://user@public.test/")),
    (SchemeLess, DEFAULT, "//public.test/x", Load("https://public.test/x")),
    (SchemeLess, DEFAULT, "localhost:8080/x", PRIVATE),
    (SchemeLess, DEFAULT, "LOCALHOST:3000", PRIVATE),
    (SchemeLess, DEFAULT, "localhost", PRIVATE),
    (SchemeLess, DEFAULT, "127.0.0.1:9222/json/version", PRIVATE),
    (SchemeLess, DEFAULT, "0x7f.1:9222", PRIVATE),
    (SchemeLess, DEFAULT, "[::1]:9222/json", PRIVATE),
    (SchemeLess, DEFAULT, "10.0.0.1", PRIVATE),
    (SchemeLess, DEFAULT, "public.test@10.0.0.1", PRIVATE),
    // Read as a `public.test:` scheme or as userinfo@10.0.0.1: refused either way.
    (SchemeLess, DEFAULT, "public.test:443@10.0.0.1", RefuseAny),
    // `javascript:1/…` looks like host:port, so it is https://javascript:1/ — harmless.
    (SchemeLess, DEFAULT, "javascript:1//%0aalert(1)", DNS),
    (SchemeLess, ALLOW, "example.com/path", Load("https://example.com/path")),
    (SchemeLess, ALLOW, "a.example.com:8443/x", Load("https://a.example.com:8443/x")),
    (SchemeLess, DENY, "evil.example.com/path", DENIED),
    // --- unparsable, or http(s) without a host ----------------------------------
    (Invalid, DEFAULT, "", INVALID),
    (Invalid, DEFAULT, "   ", INVALID),
    (Invalid, DEFAULT, "http://", INVALID),
    (Invalid, DEFAULT, "https://", INVALID),
    (Invalid, DEFAULT, "https://:443/", INVALID),
    (Invalid, DEFAULT, "http://[fe80::1%25eth0]/", INVALID),
    (Invalid, DEFAULT, "http://[fe80::1%eth0]/", INVALID),
    (Invalid, DEFAULT, "http://[::1/", INVALID),
    (Invalid, DEFAULT, "http://[::1]x/", INVALID),
    (Invalid, DEFAULT, "http://%5B::1%5D/", INVALID),
    (Invalid, DEFAULT, "http://1.2.3.4.5/", INVALID),
    (Invalid, DEFAULT, "http://256.0.0.1/", INVALID),
    (Invalid, DEFAULT, "http://1.2.3.09/", INVALID),
    (Invalid, DEFAULT, "http://0x7g.1/", INVALID),
    (Invalid, DEFAULT, "http://foo.0x1/", INVALID),
    (Invalid, DEFAULT, "http://4294967296/", INVALID),
    (Invalid, DEFAULT, "http://0x100000000/", INVALID),
    (Invalid, DEFAULT, "http://exa mple.com/", INVALID),
    (Invalid, DEFAULT, "http://ex%00ample.com/", INVALID),
    (Invalid, DEFAULT, "http://a<b/", INVALID),
    (Invalid, DEFAULT, "https://xn--/", INVALID),
    (Invalid, DEFAULT, "https://public.test:65536/", INVALID),
    (Invalid, DEFAULT, "https://public.test:port/", INVALID),
    (Invalid, DEFAULT, "https://\u{1}javascript:alert(1)", INVALID),
    // --- the URL passed on is the normalized WHATWG serialization ---------------
    (Normalized, DEFAULT, "HTTPS://PUBLIC.TEST", Load("https://public.test/")),
    (Normalized, DEFAULT, "HtTp://Public.Test:80/A/../B?x#y", Load("http://public.test/B?x#y")),
    (Normalized, DEFAULT, "https://public.test:443/", Load("https://public.test/")),
    (Normalized, DEFAULT, "https://public.test:8443", Load("https://public.test:8443/")),
    (Normalized, DEFAULT, "http://public.test/a b", Load("http://public.test/a%20b")),
    (Normalized, DEFAULT, "https://public.test/%2e%2e/x", Load("https://public.test/x")),
    (Normalized, DEFAULT, "  https://public.test/  ", Load("https://public.test/")),
    (Normalized, DEFAULT, "https://pub\tlic.test/", Load("https://public.test/")),
    (Normalized, DEFAULT, "https://public.test./", Load("https://public.test./")),
    (Normalized, DEFAULT, "https://bücher.example/", Load("https://xn--bcher-kva.example/")),
    (Normalized, DEFAULT, "https://ｐｕｂｌｉｃ.test/", Load("https://public.test/")),
    (Normalized, DEFAULT, "http:///public.test", Load("http://public.test/")),
    (Normalized, DEFAULT, "http:public.test", Load("http://public.test/")),
    (Normalized, DEFAULT, "https://[2606:4700:0:0:0:0:0:1]/", Load("https://[2606:4700::1]/")),
    (Normalized, DEFAULT, "http://1572395042/", Load("http://93.184.216.34/")),
    // --- IPv4 in every form the URL standard accepts ----------------------------
    (V4Forms, DEFAULT, "http://127.0.0.1/", PRIVATE),
    (V4Forms, DEFAULT, "http://127.0.0.1:8080/x", PRIVATE),
    (V4Forms, DEFAULT, "http://2130706433/", PRIVATE),
    (V4Forms, DEFAULT, "http://0x7f000001/", PRIVATE),
    (V4Forms, DEFAULT, "http://0x7f.1/", PRIVATE),
    (V4Forms, DEFAULT, "http://0X7F.1/", PRIVATE),
    (V4Forms, DEFAULT, "http://017700000001/", PRIVATE),
    (V4Forms, DEFAULT, "http://0177.0.0.1/", PRIVATE),
    (V4Forms, DEFAULT, "http://0x7f.0x0.0x0.0x1/", PRIVATE),
    (V4Forms, DEFAULT, "http://127.1/", PRIVATE),
    (V4Forms, DEFAULT, "http://127.0.1/", PRIVATE),
    (V4Forms, DEFAULT, "http://127.000.000.001/", PRIVATE),
    (V4Forms, DEFAULT, "http://127.0.0.1./", PRIVATE),
    (V4Forms, DEFAULT, "http://127.0./", PRIVATE),
    (V4Forms, DEFAULT, "http://127.0.0.1%2e/", PRIVATE),
    (V4Forms, DEFAULT, "https://%31%32%37.0.0.1/", PRIVATE),
    (V4Forms, DEFAULT, "http://１２７.０.０.１/", PRIVATE),
    (V4Forms, DEFAULT, "http://127。0。0。1/", PRIVATE),
    (V4Forms, DEFAULT, "http://127.0.\n0.1/", PRIVATE),
    (V4Forms, DEFAULT, "http://127.255.255.254/", PRIVATE),
    (V4Forms, DEFAULT, "http://[::1]/", PRIVATE),
    (V4Forms, DEFAULT, "http://[0:0:0:0:0:0:0:1]/", PRIVATE),
    (V4Forms, DEFAULT, "http://[::ffff:127.0.0.1]/", PRIVATE),
    (V4Forms, DEFAULT, "http://[0:0:0:0:0:ffff:7f00:1]/", PRIVATE),
    (V4Forms, DEFAULT, "http://0/", PRIVATE),
    (V4Forms, DEFAULT, "http://0x0/", PRIVATE),
    (V4Forms, DEFAULT, "http://0.0.0.0:9222/", PRIVATE),
    // --- userinfo, backslashes, percent-encoding, whitespace --------------------
    (Tricks, DEFAULT, "http://public.test@10.0.0.1/", PRIVATE),
    (Tricks, DEFAULT, "http://10.0.0.1@public.test/", Load("http://10.0.0.1@public.test/")),
    (Tricks, DEFAULT, "http://user:pass@10.0.0.1:80/", PRIVATE),
    (Tricks, DEFAULT, "http://public.test:80@10.0.0.1/", PRIVATE),
    (Tricks, DEFAULT, "http://public.test%2F@10.0.0.1/", PRIVATE),
    (Tricks, DEFAULT, "http://[::1]@public.test/", Load("http://%5B:%3A1%5D@public.test/")),
    (Tricks, DEFAULT, r"http://public.test\@10.0.0.1/", Load("http://public.test/@10.0.0.1/")),
    (Tricks, DEFAULT, r"http://10.0.0.1\@public.test/", PRIVATE),
    (Tricks, DEFAULT, r"http:\\10.0.0.1\", PRIVATE),
    (Tricks, DEFAULT, r"http:/\10.0.0.1/", PRIVATE),
    (Tricks, DEFAULT, r"http:\\public.test\a", Load("http://public.test/a")),
    (Tricks, DEFAULT, "http://%31%30.0.0.1/", PRIVATE),
    (Tricks, DEFAULT, "http://%70ublic.test/", Load("http://public.test/")),
    (Tricks, DEFAULT, "http://public.test#@10.0.0.1", Load("http://public.test/#@10.0.0.1")),
    (Tricks, DEFAULT, "http://public.test?@10.0.0.1", Load("http://public.test/?@10.0.0.1")),
    (Tricks, DEFAULT, "http://167772161/", PRIVATE),
    (Tricks, DEFAULT, "http://0x0a.0.0.1/", PRIVATE),
    (Tricks, DEFAULT, "http://3232235777/", PRIVATE),
    (Tricks, DEFAULT, "http://2852039166/", PRIVATE),
    (Tricks, DEFAULT, "http://4294967295/", PRIVATE),
    (Tricks, DEFAULT, "http://0xffffffff/", PRIVATE),
    (Tricks, DEFAULT, "http://1.1/", Load("http://1.0.0.1/")),
    // A tab in the scheme makes it scheme-less (https://http//10.0.0.1): never 10.0.0.1.
    (Tricks, DEFAULT, "ht\ttp://10.0.0.1/", RefuseAny),
    // --- every non-global IPv4 range, next to a public neighbour ---------------
    (V4Ranges, DEFAULT, "http://10.0.0.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://10.255.255.255/", PRIVATE),
    (V4Ranges, DEFAULT, "http://9.255.255.255/", Load("http://9.255.255.255/")),
    (V4Ranges, DEFAULT, "http://11.0.0.1/", Load("http://11.0.0.1/")),
    (V4Ranges, DEFAULT, "http://172.16.0.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://172.31.255.255/", PRIVATE),
    (V4Ranges, DEFAULT, "http://172.15.255.255/", Load("http://172.15.255.255/")),
    (V4Ranges, DEFAULT, "http://172.32.0.1/", Load("http://172.32.0.1/")),
    (V4Ranges, DEFAULT, "http://192.168.0.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://192.168.255.255/", PRIVATE),
    (V4Ranges, DEFAULT, "http://192.167.255.255/", Load("http://192.167.255.255/")),
    (V4Ranges, DEFAULT, "http://192.169.0.1/", Load("http://192.169.0.1/")),
    (V4Ranges, DEFAULT, "http://169.254.169.254/latest/meta-data/", PRIVATE),
    (V4Ranges, DEFAULT, "http://169.254.0.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://169.253.255.255/", Load("http://169.253.255.255/")),
    (V4Ranges, DEFAULT, "http://169.255.0.1/", Load("http://169.255.0.1/")),
    (V4Ranges, DEFAULT, "http://100.64.0.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://100.127.255.254/", PRIVATE),
    (V4Ranges, DEFAULT, "http://100.63.255.255/", Load("http://100.63.255.255/")),
    (V4Ranges, DEFAULT, "http://100.128.0.1/", Load("http://100.128.0.1/")),
    (V4Ranges, DEFAULT, "http://0.1.2.3/", PRIVATE),
    (V4Ranges, DEFAULT, "http://1.0.0.1/", Load("http://1.0.0.1/")),
    (V4Ranges, DEFAULT, "http://126.255.255.255/", Load("http://126.255.255.255/")),
    (V4Ranges, DEFAULT, "http://128.0.0.1/", Load("http://128.0.0.1/")),
    (V4Ranges, DEFAULT, "http://224.0.0.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://239.255.255.250/", PRIVATE),
    (V4Ranges, DEFAULT, "http://223.255.255.254/", Load("http://223.255.255.254/")),
    (V4Ranges, DEFAULT, "http://240.0.0.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://255.255.255.255/", PRIVATE),
    (V4Ranges, DEFAULT, "http://192.0.2.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://192.0.3.1/", Load("http://192.0.3.1/")),
    (V4Ranges, DEFAULT, "http://198.51.100.7/", PRIVATE),
    (V4Ranges, DEFAULT, "http://198.51.101.1/", Load("http://198.51.101.1/")),
    (V4Ranges, DEFAULT, "http://203.0.113.9/", PRIVATE),
    (V4Ranges, DEFAULT, "http://203.0.114.1/", Load("http://203.0.114.1/")),
    (V4Ranges, DEFAULT, "http://198.18.0.1/", PRIVATE),
    (V4Ranges, DEFAULT, "http://198.19.255.254/", PRIVATE),
    (V4Ranges, DEFAULT, "http://198.17.255.255/", Load("http://198.17.255.255/")),
    (V4Ranges, DEFAULT, "http://198.20.0.1/", Load("http://198.20.0.1/")),
    (V4Ranges, DEFAULT, "http://192.0.0.8/", PRIVATE),
    (V4Ranges, DEFAULT, "http://192.0.0.170/", PRIVATE),
    (V4Ranges, DEFAULT, "http://192.0.1.1/", Load("http://192.0.1.1/")),
    (V4Ranges, DEFAULT, "http://93.184.216.34/", Load("http://93.184.216.34/")),
    // --- every non-global IPv6 range ---------------------------------------------
    (V6Ranges, DEFAULT, "http://[::]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[::1]:9222/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[fe80::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[febf:ffff::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[fec0::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[fc00::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[fd12:3456::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[ff02::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[ff0e::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[2001:db8::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[2001:db8:ffff::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[2001:db9::1]/", Load("http://[2001:db9::1]/")),
    (V6Ranges, DEFAULT, "http://[100::1]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[100::ffff:ffff:ffff:ffff]/", PRIVATE),
    (V6Ranges, DEFAULT, "http://[2606:4700::1]/", Load("http://[2606:4700::1]/")),
    (V6Ranges, DEFAULT, "http://[2001:4860:4860::8888]/", Load("http://[2001:4860:4860::8888]/")),
    (V6Ranges, DEFAULT, "https://ula.test/", PRIVATE),
    // DISAGREES: 3fff::/20 is the second IPv6 documentation prefix (RFC 9637,
    // IANA special-purpose registry: globally reachable = false); address.rs
    // only knows 2001:db8::/32, so this is allowed.
    (V6Ranges, DEFAULT, "http://[3fff::1]/", PRIVATE),
    // DISAGREES: 5f00::/16 is the SRv6 SID block (RFC 9602, globally
    // reachable = false); address.rs does not list it, so this is allowed.
    (V6Ranges, DEFAULT, "http://[5f00::1]/", PRIVATE),
    // DISAGREES: 100:0:0:1::/64 is the dummy IPv6 prefix (RFC 9780, globally
    // reachable = false), next to discard 100::/64; address.rs only has the latter.
    (V6Ranges, DEFAULT, "http://[100:0:0:1::1]/", PRIVATE),
    // --- IPv6 forms embedding an IPv4 are judged by that IPv4 ------------------
    (Embedded, DEFAULT, "http://[::ffff:10.0.0.1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[::ffff:192.168.0.1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[::ffff:169.254.169.254]/", PRIVATE),
    (Embedded, DEFAULT, "http://[::ffff:0.0.0.0]/", PRIVATE),
    (Embedded, DEFAULT, "http://[::ffff:224.0.0.1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[::ffff:93.184.216.34]/", Load("http://[::ffff:5db8:d822]/")),
    (Embedded, DEFAULT, "http://[::127.0.0.1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[::10.0.0.1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[64:ff9b::127.0.0.1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[64:ff9b::10.0.0.1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[64:ff9b::a9fe:a9fe]/", PRIVATE),
    (Embedded, DEFAULT, "http://[64:ff9b::93.184.216.34]/", Load("http://[64:ff9b::5db8:d822]/")),
    (Embedded, DEFAULT, "http://[2002:7f00:1::]/", PRIVATE),
    (Embedded, DEFAULT, "http://[2002:a00:1::1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[2002:c0a8:101::1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[2002:5db8:d822::1]/", Load("http://[2002:5db8:d822::1]/")),
    (Embedded, DEFAULT, "http://[64:ff9b:1::1]/", PRIVATE),
    (Embedded, DEFAULT, "http://[64:ff9b:1::5db8:d822]/", PRIVATE),
    (Embedded, DEFAULT, "https://mapped.test/", PRIVATE),
    (Embedded, DEFAULT, "https://nat64.test/", PRIVATE),
    // --- localhost and *.localhost are loopback, whatever DNS says -------------
    (Localhost, DEFAULT, "http://localhost/", PRIVATE),
    (Localhost, DEFAULT, "http://LOCALHOST./", PRIVATE),
    (Localhost, DEFAULT, "http://localhost.:3000/", PRIVATE),
    (Localhost, DEFAULT, "http://foo.localhost/", PRIVATE),
    (Localhost, DEFAULT, "http://a.b.localhost:8080/x", PRIVATE),
    (Localhost, DEFAULT, "http://%6Cocalhost/", PRIVATE),
    (Localhost, DEFAULT, "http://ｌｏｃａｌｈｏｓｔ/", PRIVATE),
    (Localhost, DEFAULT, "http://ⓛocalhost/", PRIVATE),
    (Localhost, DEFAULT, "http://localhost%2e/", PRIVATE),
    (Localhost, DEFAULT, "http://LOCALHOST%2E%2E/", RefuseAny),
    (Localhost, DEFAULT, "http://foolocalhost/", Load("http://foolocalhost/")),
    (Localhost, DEFAULT, "https://loop.test/", PRIVATE),
    (Localhost, PRIV_LOOP, "http://localhost/", Load("http://localhost/")),
    (Localhost, PRIV_LOOP, "http://foo.localhost:3000/", Load("http://foo.localhost:3000/")),
    // 127.0.0.1 is allowed, ::1 is not, and localhost is both.
    (Localhost, PRIV, "http://localhost/", PRIVATE),
    // --- one bad address among good ones refuses -------------------------------
    (Rebind, DEFAULT, "https://rebind.test/", PRIVATE),
    (Rebind, DEFAULT, "https://rebind6.test/", PRIVATE),
    (Rebind, DEFAULT, "https://rebind-mapped.test/", PRIVATE),
    (Rebind, DEFAULT, "https://intranet.test/", PRIVATE),
    (Rebind, DEFAULT, "https://meta.test/", PRIVATE),
    (Rebind, DEFAULT, "https://zero.test/", PRIVATE),
    (Rebind, DEFAULT, "https://multi.test/", Load("https://multi.test/")),
    (Rebind, DEFAULT, "https://v6only.test/", Load("https://v6only.test/")),
    (Rebind, PRIV, "https://rebind.test/", PRIVATE),
    (Rebind, PRIV, "https://rebind-allowed.test/", Load("https://rebind-allowed.test/")),
    // --- DNS failure fails closed -------------------------------------------------
    (DnsFail, DEFAULT, "https://nothing.test/", DNS),
    (DnsFail, DEFAULT, "https://unknown.test/", DNS),
    (DnsFail, DEFAULT, "https://a.public.test/", DNS),
    (DnsFail, DEFAULT, "unknown.test", DNS),
    (DnsFail, PRIV, "https://nothing.test/", DNS),
    (DnsFail, ALLOW, "https://x.example.com/", DNS),
    // --- suffixes match subdomains on a label boundary only ---------------------
    (Suffix, SUFFIX_ONLY, "https://a.example.com/", Load("https://a.example.com/")),
    (Suffix, SUFFIX_ONLY, "https://x.y.example.com/", Load("https://x.y.example.com/")),
    (Suffix, SUFFIX_ONLY, "https://A.EXAMPLE.COM./", Load("https://a.example.com./")),
    (Suffix, SUFFIX_ONLY, "https://example.com/", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, "https://example.com./", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, "https://badexample.com/", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, "https://a.badexample.com/", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, "https://example.com.evil.test/", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, "https://example.com@evil.test/", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, "https://evil.test#.example.com", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, "https://evil.test?.example.com", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, r"https://evil.test\.example.com", NOT_ALLOWED),
    (Suffix, SUFFIX_ONLY, "https://evil.test%2f.example.com/", INVALID),
    // An empty leading label is no subdomain; the name cannot be loaded anyway.
    (Suffix, SUFFIX_ONLY, "https://.example.com/", RefuseAny),
    (Suffix, HOSTS_ONLY, "https://example.com/", Load("https://example.com/")),
    (Suffix, HOSTS_ONLY, "https://example.com./", Load("https://example.com./")),
    (Suffix, HOSTS_ONLY, "https://a.example.com/", NOT_ALLOWED),
    (Suffix, DENY, "https://x.bad.test/", DENIED),
    (Suffix, DENY, "https://a.b.bad.test/", DENIED),
    (Suffix, DENY, "https://X.BAD.TEST./", DENIED),
    (Suffix, DENY, "https://notbad.test/", Load("https://notbad.test/")),
    (Suffix, DENY, "https://xbad.test/", Load("https://xbad.test/")),
    // --- allowlists compare normalized hosts -----------------------------------
    (Allow, ALLOW, "https://example.com/", Load("https://example.com/")),
    (Allow, ALLOW, "https://EXAMPLE.COM/", Load("https://example.com/")),
    (Allow, ALLOW, "https://example.com./", Load("https://example.com./")),
    (Allow, ALLOW, "https://%65xample.com/", Load("https://example.com/")),
    (Allow, ALLOW, "https://ｅｘａｍｐｌｅ.com/", Load("https://example.com/")),
    (Allow, ALLOW, "https://a.example.com/", Load("https://a.example.com/")),
    (Allow, ALLOW, "https://x.y.example.com/", Load("https://x.y.example.com/")),
    (Allow, ALLOW, "https://evil.test@example.com/", Load("https://evil.test@example.com/")),
    (Allow, ALLOW, "https://example.com@evil.test/", NOT_ALLOWED),
    (Allow, ALLOW, "https://badexample.com/", NOT_ALLOWED),
    (Allow, ALLOW, "https://aexample.com/", NOT_ALLOWED),
    (Allow, ALLOW, "https://example.co/", NOT_ALLOWED),
    (Allow, ALLOW, "https://еxample.com/", NOT_ALLOWED), // Cyrillic е: xn--xample-2of.com
    (Allow, ALLOW, "https://bücher.example/", Load("https://xn--bcher-kva.example/")),
    (Allow, ALLOW, "https://xn--bcher-kva.example/", Load("https://xn--bcher-kva.example/")),
    (Allow, ALLOW, "https://public.test/", Load("https://public.test/")),
    (Allow, ALLOW, "https://sub.public.test/", NOT_ALLOWED),
    (Allow, ALLOW, "https://unlisted.test/", NOT_ALLOWED),
    (Allow, ALLOW, "http://93.184.216.34/", Load("http://93.184.216.34/")),
    (Allow, ALLOW, "http://1572395042/", Load("http://93.184.216.34/")),
    (Allow, ALLOW, "http://0x5d.0xb8.0xd8.0x22/", Load("http://93.184.216.34/")),
    (Allow, ALLOW, "http://8.8.8.8/", NOT_ALLOWED),
    (Allow, ALLOW, "http://[2606:4700::1]/", NOT_ALLOWED),
    (Allow, ALLOW, "https://v6only.test/", NOT_ALLOWED),
    (Allow, ALLOW, "about:blank", Load("about:blank")),
    // An allowed name must still resolve to public addresses.
    (Allow, ALLOW, "https://intranet.test/", PRIVATE),
    (Allow, IDN_ALLOW, "https://xn--bcher-kva.example/", Load("https://xn--bcher-kva.example/")),
    (Allow, IDN_ALLOW, "https://BÜCHER.example/", Load("https://xn--bcher-kva.example/")),
    (Allow, IDN_ALLOW, "https://bucher.example/", NOT_ALLOWED),
    (Allow, EMPTY_ALLOW, "https://public.test/", NOT_ALLOWED),
    (Allow, EMPTY_ALLOW, "about:blank", Load("about:blank")),
    (Allow, DOC, "https://example.com/", Load("https://example.com/")),
    (Allow, DOC, "https://a.example.com/", Load("https://a.example.com/")),
    (Allow, DOC, "https://public.test/", NOT_ALLOWED),
    // --- deny_hosts refuse every spelling of the host ---------------------------
    (Deny, DENY, "https://evil.example.com/", DENIED),
    (Deny, DENY, "https://EVIL.EXAMPLE.COM/", DENIED),
    (Deny, DENY, "https://evil.example.com./", DENIED),
    (Deny, DENY, "https://evil.example.com%2e/", DENIED),
    (Deny, DENY, "https://%65vil.example.com/", DENIED),
    (Deny, DENY, "https://ＥＶＩＬ.example.com/", DENIED),
    (Deny, DENY, "https://user@evil.example.com:8443/x", DENIED),
    (Deny, DENY, "https://public.test@evil.example.com/", DENIED),
    (Deny, DENY, r"http:\\evil.example.com\", DENIED),
    (Deny, DENY, "http://evil.example.com:80/", DENIED),
    // Two trailing dots: not a name DNS serves, and never a way around the list.
    (Deny, DENY, "https://evil.example.com../", RefuseAny),
    (Deny, DENY, "https://evil.example.com@public.test/", Load("https://evil.example.com@public.test/")),
    (Deny, DENY, "https://ok.example.com/", Load("https://ok.example.com/")),
    // Exact entries deny that host only, not its subdomains.
    (Deny, DENY, "https://x.evil.example.com/", Load("https://x.evil.example.com/")),
    (Deny, DENY, "http://8.8.8.8/", DENIED),
    (Deny, DENY, "http://134744072/", DENIED),
    (Deny, DENY, "http://0x8.0x8.0x8.0x8/", DENIED),
    (Deny, DENY, "http://localhost/", DENIED),
    (Deny, DENY, "http://LOCALHOST.:80/", DENIED),
    (Deny, DENY, "http://a.localhost/", PRIVATE),
    (Deny, DENY, "http://127.0.0.1/", PRIVATE),
    (Deny, DENY, "https://public.test/", Load("https://public.test/")),
    (Deny, DOC, "https://evil.example.com/", DENIED),
    // --- rules apply in order: scheme → host syntax → deny → allow → address --
    (Order, ALLOW, "ftp://example.com/", SCHEME),
    (Order, ALLOW, "javascript://example.com/%0aalert(1)", SCHEME),
    (Order, DENY, "ftp://evil.example.com/", SCHEME),
    (Order, ALLOW, "http://[fe80::1%25eth0]/", INVALID),
    (Order, DENY, "http://evil.example.com:99999/", INVALID),
    (Order, BOTH, "https://evil.example.com/", DENIED),
    (Order, BOTH, "https://public.test/", Load("https://public.test/")),
    (Order, BOTH, "https://unlisted.test/", NOT_ALLOWED),
    (Order, ALLOW, "http://localhost/", NOT_ALLOWED),
    (Order, ALLOW, "http://127.0.0.1/", NOT_ALLOWED),
    (Order, ALLOW, "https://unknown.test/", NOT_ALLOWED),
    (Order, ALLOW, "https://nothing.test/", NOT_ALLOWED),
    (Order, DENY, "https://x.bad.test/", DENIED),
    (Order, DOC, "http://127.0.0.1/", NOT_ALLOWED),
    // --- allow_private_cidrs lets exactly that range through --------------------
    (Cidr, PRIV, "http://127.0.0.1/", Load("http://127.0.0.1/")),
    (Cidr, PRIV, "http://127.0.0.1:8080/x", Load("http://127.0.0.1:8080/x")),
    (Cidr, PRIV, "http://2130706433/", Load("http://127.0.0.1/")),
    (Cidr, PRIV, "http://127.1/", Load("http://127.0.0.1/")),
    (Cidr, PRIV, "http://127.0.0.2/", PRIVATE),
    (Cidr, PRIV, "http://[::1]/", PRIVATE),
    (Cidr, PRIV, "http://10.1.0.0/", Load("http://10.1.0.0/")),
    (Cidr, PRIV, "http://10.1.255.255/", Load("http://10.1.255.255/")),
    (Cidr, PRIV, "http://10.0.255.255/", PRIVATE),
    (Cidr, PRIV, "http://10.2.0.0/", PRIVATE),
    (Cidr, PRIV, "http://10.0.0.5/", PRIVATE),
    (Cidr, PRIV, "http://192.168.1.1/", PRIVATE),
    (Cidr, PRIV, "http://169.254.169.254/", PRIVATE),
    (Cidr, PRIV, "https://intranet.test/", Load("https://intranet.test/")),
    (Cidr, PRIV, "https://private-ok.test/", Load("https://private-ok.test/")),
    (Cidr, PRIV, "https://mapped.test/", PRIVATE),
    (Cidr, PRIV, "https://mapped-ok.test/", Load("https://mapped-ok.test/")),
    (Cidr, PRIV, "http://[::ffff:127.0.0.1]/", Load("http://[::ffff:7f00:1]/")),
    (Cidr, PRIV, "http://[::ffff:127.0.0.2]/", PRIVATE),
    (Cidr, PRIV, "http://[::ffff:10.1.2.3]/", Load("http://[::ffff:a01:203]/")),
    (Cidr, PRIV, "http://[::ffff:10.2.0.1]/", PRIVATE),
    // NAT64 and 6to4 route through a translator or relay: an IPv4 allowance
    // is not theirs, though the address they embed still refuses them.
    (Cidr, PRIV, "http://[64:ff9b::10.1.2.3]/", PRIVATE),
    (Cidr, PRIV, "http://[2002:a01:203::1]/", PRIVATE),
    (Cidr, PRIV, "http://[2002:a00:1::1]/", PRIVATE),
    (Cidr, PRIV, "https://public.test/", Load("https://public.test/")),
    (Cidr, PRIV_LOOP, "http://127.0.0.2/", Load("http://127.0.0.2/")),
    (Cidr, PRIV_LOOP, "http://[::1]:9222/", Load("http://[::1]:9222/")),
    (Cidr, PRIV_LOOP, "http://10.0.0.1/", PRIVATE),
    (Cidr, DOC, "https://loop.test/", NOT_ALLOWED),
    (Cidr, PRIV_ZERO, "http://0.0.0.0/", Load("http://0.0.0.0/")),
    // DISAGREES: ::1 is IPv6 loopback, not an IPv4-compatible form of 0.0.0.1
    // (RFC 4291 2.5.5.1: the embedded IPv4 must be global unicast), yet
    // address::embedded_v4 maps ::/96 wholesale, so "0.0.0.0/8" lets [::1] through.
    (Cidr, PRIV_ZERO, "http://[::1]/", PRIVATE),
];

// ---------------------------------------------------------------------------
// Running rows.
// ---------------------------------------------------------------------------

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn policy(json: &str) -> UrlPolicy {
    if json.is_empty() {
        return UrlPolicy::default();
    }
    match UrlPolicy::from_json(json) {
        Ok(p) => p,
        Err(e) => panic!("test policy does not parse: {e}\n{json}"),
    }
}

fn check(policy_json: &str, input: &str, resolver: &dyn Resolve) -> Result<Checked, Refusal> {
    block_on(policy(policy_json).check_open(input, resolver))
}

/// `None` when the outcome is what the row wants, else a description.
fn judge(outcome: &Result<Checked, Refusal>, want: Want) -> Option<String> {
    match (want, outcome) {
        (Load(url), Ok(c)) if c.url == url => {
            // What is passed on must be a serialized URL, not a guess.
            let reparsed = Url::parse(&c.url).map(|u| u.to_string());
            if reparsed.as_deref() != Ok(c.url.as_str()) {
                return Some(format!("{:?} is not a serialized URL", c.url));
            }
            if c.url != "about:blank" && c.resolved.is_empty() {
                return Some(format!("allowed {:?} without any checked address", c.url));
            }
            None
        }
        (Refuse(rule), Err(r)) if r.rule == rule => None,
        (RefuseAny, Err(_)) => None,
        (_, Ok(c)) => Some(format!("got Load({:?}) resolved {:?}", c.url, c.resolved)),
        (_, Err(r)) => Some(format!("got Refuse({:?}): {}", r.rule, r.message)),
    }
}

/// Run every row of `prop`; report all failing rows at once.
fn rows(prop: Prop) {
    let resolver = resolver();
    let mut failures = Vec::new();
    let mut count = 0;
    for &(_, policy_json, input, want) in TABLE.iter().filter(|row| row.0 == prop) {
        count += 1;
        if let Some(why) = judge(&check(policy_json, input, &resolver), want) {
            failures.push(format!(
                "{input:?} under {}: want {want:?}, {why}",
                policy_name(policy_json)
            ));
        }
    }
    assert!(count > 0, "no rows");
    assert!(
        failures.is_empty(),
        "{} of {count} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn policy_name(json: &str) -> &'static str {
    [
        ("DEFAULT", DEFAULT),
        ("ALLOW", ALLOW),
        ("SUFFIX_ONLY", SUFFIX_ONLY),
        ("HOSTS_ONLY", HOSTS_ONLY),
        ("IDN_ALLOW", IDN_ALLOW),
        ("EMPTY_ALLOW", EMPTY_ALLOW),
        ("DENY", DENY),
        ("BOTH", BOTH),
        ("PRIV", PRIV),
        ("PRIV_LOOP", PRIV_LOOP),
        ("PRIV_ZERO", PRIV_ZERO),
        ("NO_BLANK", NO_BLANK),
        ("HTTPS_ONLY", HTTPS_ONLY),
        ("DOC", DOC),
    ]
    .into_iter()
    .find_map(|(name, text)| (text == json).then_some(name))
    .unwrap_or("an override of DEFAULT")
}

// ---------------------------------------------------------------------------
// One test per property of the table.
// ---------------------------------------------------------------------------

#[test]
fn only_http_https_and_exactly_about_blank_are_opened() {
    rows(Schemes);
}

#[test]
fn about_blank_can_be_switched_off() {
    rows(AboutBlankOff);
}

#[test]
fn allow_schemes_narrows_to_the_listed_schemes() {
    rows(SchemeSet);
}

#[test]
fn scheme_less_input_gets_https() {
    rows(SchemeLess);
}

#[test]
fn unparsable_or_hostless_input_is_invalid() {
    rows(Invalid);
}

#[test]
fn the_url_passed_on_is_the_normalized_whatwg_serialization() {
    rows(Normalized);
}

#[test]
fn ipv4_in_every_url_form_is_still_loopback() {
    rows(V4Forms);
}

#[test]
fn userinfo_backslash_and_percent_tricks_cannot_hide_the_host() {
    rows(Tricks);
}

#[test]
fn every_non_global_ipv4_range_is_private_and_its_neighbours_are_not() {
    rows(V4Ranges);
}

#[test]
fn every_non_global_ipv6_range_is_private() {
    rows(V6Ranges);
}

#[test]
fn embedded_ipv4_in_v6_forms_is_checked() {
    rows(Embedded);
}

#[test]
fn localhost_names_are_loopback() {
    rows(Localhost);
}

#[test]
fn one_private_address_among_public_ones_refuses() {
    rows(Rebind);
}

#[test]
fn dns_failure_fails_closed() {
    rows(DnsFail);
}

#[test]
fn suffixes_match_on_label_boundaries_only() {
    rows(Suffix);
}

#[test]
fn allowlists_compare_normalized_hosts() {
    rows(Allow);
}

#[test]
fn deny_hosts_refuse_every_spelling_of_the_host() {
    rows(Deny);
}

#[test]
fn rules_apply_in_order_scheme_host_deny_allow_address() {
    rows(Order);
}

#[test]
fn allowed_cidr_lets_exactly_that_range_through() {
    rows(Cidr);
}

#[test]
fn the_table_has_at_least_150_rows() {
    assert!(TABLE.len() >= 150, "only {} rows", TABLE.len());
}

#[test]
fn an_empty_policy_file_is_the_default_policy() {
    let resolver = resolver();
    for text in ["{}", r#"{"open": {}}"#] {
        assert!(policy(text) == UrlPolicy::default(), "{text}");
        // And it decides every default-policy row exactly as the default does.
        for &(_, _, input, _) in TABLE.iter().filter(|row| row.1 == DEFAULT) {
            assert_eq!(
                check(text, input, &resolver),
                check(DEFAULT, input, &resolver),
                "{input} under {text}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// What the policy reports, and what it asks the resolver.
// ---------------------------------------------------------------------------

fn addrs(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

#[test]
fn checked_reports_every_address_it_checked() {
    let resolver = resolver();
    let cases: &[(&str, &str, &[&str])] = &[
        (DEFAULT, "https://public.test/", &[PUBLIC]),
        (DEFAULT, "https://v6only.test/", &["2606:4700::1"]),
        (DEFAULT, "https://multi.test/x", &[PUBLIC, "2606:4700::1"]),
        (DEFAULT, "http://1572395042/", &[PUBLIC]),
        (DEFAULT, "http://[2606:4700::1]/", &["2606:4700::1"]),
        (
            DEFAULT,
            "http://[::ffff:93.184.216.34]/",
            &["::ffff:93.184.216.34"],
        ),
        (DEFAULT, "about:blank", &[]),
        (PRIV, "https://intranet.test/", &["10.1.2.3"]),
        (PRIV, "https://rebind-allowed.test/", &[PUBLIC, "10.1.0.5"]),
        (PRIV, "http://0x7f.1/", &["127.0.0.1"]),
        (PRIV_LOOP, "http://localhost/", &["127.0.0.1", "::1"]),
        (PRIV_LOOP, "http://a.b.localhost./", &["127.0.0.1", "::1"]),
    ];
    for &(policy_json, input, want) in cases {
        match check(policy_json, input, &resolver) {
            Ok(c) => assert_eq!(
                c.resolved.iter().copied().collect::<BTreeSet<_>>(),
                addrs(want),
                "{input} under {}",
                policy_name(policy_json)
            ),
            Err(r) => panic!("{input} under {}: {r}", policy_name(policy_json)),
        }
    }
}

/// A resolver that records every name it is asked and answers from `inner`.
struct Recording {
    inner: StaticResolver,
    asked: Mutex<Vec<String>>,
}

impl Recording {
    fn new(inner: StaticResolver) -> Self {
        Self {
            inner,
            asked: Mutex::new(Vec::new()),
        }
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

impl Resolve for Recording {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        self.asked.lock().unwrap().push(host.to_owned());
        self.inner.resolve(host)
    }
}

#[test]
fn localhost_is_resolved_by_the_policy_not_by_dns() {
    // A resolver that lies: localhost is public. The policy must not ask it.
    let lying = Recording::new(StaticResolver(
        [
            "localhost",
            "localhost.",
            "foo.localhost",
            "a.b.localhost",
            "a.b.localhost.",
        ]
        .into_iter()
        .map(|n| (n.to_owned(), vec![PUBLIC.parse().unwrap()]))
        .collect(),
    ));
    for input in [
        "http://localhost/",
        "http://LocalHost./",
        "localhost:8080",
        "http://foo.localhost/",
        "http://a.b.localhost./x",
    ] {
        match check(DEFAULT, input, &lying) {
            Ok(c) => panic!("{input} was allowed: {c:?}"),
            Err(r) => assert_eq!(r.rule, "address.private", "{input}: {r}"),
        }
        assert_eq!(lying.take(), Vec::<String>::new(), "{input} was resolved");
    }
}

#[test]
fn names_the_lists_refuse_and_ip_literals_are_never_resolved() {
    let recording = Recording::new(resolver());
    for (policy_json, input) in [
        (DENY, "https://evil.example.com/"),
        (DENY, "https://x.bad.test/"),
        (ALLOW, "https://unlisted.test/"),
        (ALLOW, "https://badexample.com/"),
        (SUFFIX_ONLY, "https://example.com/"),
        (DEFAULT, "http://10.0.0.1/"),
        (DEFAULT, "http://93.184.216.34/"),
        (DEFAULT, "http://[2606:4700::1]/"),
        (DEFAULT, "javascript:alert(1)"),
        (DEFAULT, "about:blank"),
    ] {
        let _ = check(policy_json, input, &recording);
        assert_eq!(
            recording.take(),
            Vec::<String>::new(),
            "{input} under {}",
            policy_name(policy_json)
        );
    }
    // And a name that passes the lists is resolved by its normalized form.
    let _ = check(ALLOW, "https://Bücher.Example./", &recording);
    let asked = recording.take();
    assert!(
        !asked.is_empty()
            && asked
                .iter()
                .all(|n| n.trim_end_matches('.') == "xn--bcher-kva.example"),
        "asked {asked:?}"
    );
}

/// A resolver whose every answer is an error.
struct Failing(io::ErrorKind);

impl Resolve for Failing {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        let err = io::Error::new(self.0, format!("{host}: resolver broken"));
        Box::pin(std::future::ready(Err(err)))
    }
}

#[test]
fn any_resolver_error_fails_closed() {
    for kind in [
        io::ErrorKind::TimedOut,
        io::ErrorKind::ConnectionRefused,
        io::ErrorKind::Other,
    ] {
        for (policy_json, input) in [
            (DEFAULT, "https://public.test/"),
            (PRIV, "https://intranet.test/"),
            (ALLOW, "https://example.com/"),
        ] {
            match check(policy_json, input, &Failing(kind)) {
                Ok(c) => panic!("{input} allowed with a broken resolver: {c:?}"),
                Err(r) => assert_eq!(r.rule, "dns.failed", "{input} ({kind:?}): {r}"),
            }
        }
    }
}

#[test]
fn about_blank_is_only_ever_passed_on_as_exactly_about_blank() {
    // Spellings of about:blank may be refused or normalized, never passed on as written.
    let resolver = resolver();
    for input in [
        "ABOUT:BLANK",
        "About:Blank",
        "about:blank#x",
        "about:blank?x",
        "about:%62lank",
    ] {
        if let Ok(c) = check(DEFAULT, input, &resolver) {
            assert_eq!(c.url, "about:blank", "{input}");
            assert!(c.resolved.is_empty(), "{input}");
        }
    }
}

// ---------------------------------------------------------------------------
// Policy files.
// ---------------------------------------------------------------------------

/// Every text must be refused with an error whose Display contains each of
/// its needles; all problems are reported at once.
fn assert_rejected<T: AsRef<str>>(cases: &[(T, &[&str])]) {
    let mut problems = Vec::new();
    for (text, needles) in cases {
        let text = text.as_ref();
        match UrlPolicy::from_json(text) {
            Ok(p) => problems.push(format!("accepted {text}: {p:?}")),
            Err(e) => {
                let err = e.to_string();
                let missing: Vec<&&str> = needles.iter().filter(|n| !err.contains(**n)).collect();
                if !missing.is_empty() {
                    problems.push(format!(
                        "error for {text} does not mention {missing:?}: {err}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_documented_example_policy_parses() {
    let p = policy(DOC);
    assert!(p.navigation_guard);
    assert_eq!(p.dns_timeout, Duration::from_millis(2000));
}

#[test]
fn malformed_policy_json_is_rejected() {
    assert_rejected(&[
        ("", &[]),
        ("{", &[]),
        ("open: {}", &[]),
        (r#"{"open": {"allow_hosts": ["a",]}}"#, &[]),
        ("null", &[]),
        ("true", &[]),
        (r#"{"open": null}"#, &[]),
        // DISAGREES: serde reads a struct from a JSON array too, so `[]` is
        // accepted as the default policy and `[{...}]` as a positional `open`.
        ("[]", &[]),
        (r#"[{"deny_hosts": ["evil.example.com"]}]"#, &[]),
    ]);
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    assert_rejected(&[
        (r#"{"oepn": {}}"#, &["oepn"]),
        (r#"{"open": {}, "extra": 1}"#, &["extra"]),
        (r#"{"open": {"allow_hostz": ["a.test"]}}"#, &["allow_hostz"]),
        (
            r#"{"open": {"allow_private_cidr": []}}"#,
            &["allow_private_cidr"],
        ),
    ]);
}

#[test]
fn wrong_types_are_rejected_by_name() {
    // DISAGREES: serde_json's "invalid type" message gives a line and column
    // but not the key (`invalid type: string "x", expected a sequence at line 1
    // column 28`), so none of these name their key.
    assert_rejected(&[
        (r#"{"open": {"allow_hosts": "x"}}"#, &["allow_hosts"]),
        (r#"{"open": {"deny_hosts": [1]}}"#, &["deny_hosts"]),
        (
            r#"{"open": {"allow_about_blank": "no"}}"#,
            &["allow_about_blank"],
        ),
        (
            r#"{"open": {"navigation_guard": 1}}"#,
            &["navigation_guard"],
        ),
        (r#"{"open": {"dns_timeout_ms": -1}}"#, &["dns_timeout_ms"]),
        (r#"{"open": []}"#, &["open"]),
    ]);
}

#[test]
fn out_of_range_values_are_rejected_by_name() {
    assert_rejected(&[
        (r#"{"open": {"dns_timeout_ms": 0}}"#, &["dns_timeout_ms"]),
        (
            r#"{"open": {"dns_timeout_ms": 3600000}}"#,
            &["dns_timeout_ms"],
        ),
    ]);
}

#[test]
fn bad_cidrs_are_rejected_with_key_and_value() {
    let cases: Vec<(String, &[&str])> = [
        "10.0.0.0/33",
        "nonsense",
        "::1/129",
        "10.0.0.0/",
        "300.0.0.0/8",
    ]
    .into_iter()
    .map(|bad| {
        let text = format!(r#"{{"open": {{"allow_private_cidrs": ["127.0.0.1/32", "{bad}"]}}}}"#);
        let needles: &[&str] = match bad {
            "10.0.0.0/33" => &["allow_private_cidrs", "10.0.0.0/33"],
            "nonsense" => &["allow_private_cidrs", "nonsense"],
            "::1/129" => &["allow_private_cidrs", "::1/129"],
            "10.0.0.0/" => &["allow_private_cidrs", "10.0.0.0/"],
            _ => &["allow_private_cidrs", "300.0.0.0/8"],
        };
        (text, needles)
    })
    .collect();
    assert_rejected(&cases);
}

#[test]
fn only_http_and_https_may_be_allowed() {
    let cases: Vec<(String, &[&str])> = [
        ("file", &["allow_schemes", "file"] as &[&str]),
        ("javascript", &["allow_schemes", "javascript"]),
        ("chrome", &["allow_schemes", "chrome"]),
        ("ftp", &["allow_schemes", "ftp"]),
        ("data", &["allow_schemes", "data"]),
        ("about", &["allow_schemes", "about"]),
    ]
    .into_iter()
    .map(|(bad, needles)| {
        (
            format!(r#"{{"open": {{"allow_schemes": ["https", "{bad}"]}}}}"#),
            needles,
        )
    })
    .collect();
    assert_rejected(&cases);
    assert!(policy(r#"{"open": {"allow_schemes": ["https"]}}"#).allow_schemes == ["https"]);
}

#[test]
fn host_entries_must_be_bare_hosts() {
    assert_rejected(&[
        (
            r#"{"open": {"allow_hosts": ["exa mple.com"]}}"#,
            &["allow_hosts", "exa mple.com"],
        ),
        (
            r#"{"open": {"deny_hosts": ["a<b"]}}"#,
            &["deny_hosts", "a<b"],
        ),
        (
            r#"{"open": {"deny_hosts": ["https://evil.example.com"]}}"#,
            &["deny_hosts"],
        ),
        (
            r#"{"open": {"deny_hosts": ["evil.example.com/"]}}"#,
            &["deny_hosts"],
        ),
        (
            r#"{"open": {"deny_hosts": ["evil.example.com:443"]}}"#,
            &["deny_hosts"],
        ),
        (r#"{"open": {"deny_hosts": [""]}}"#, &["deny_hosts"]),
        (
            r#"{"open": {"allow_host_suffixes": ["."]}}"#,
            &["allow_host_suffixes"],
        ),
    ]);
}

#[test]
fn wildcard_host_entries_are_rejected() {
    // DISAGREES: `*` is no forbidden host code point, so "*.evil.example.com"
    // is accepted as a literal host that nothing matches: a deny entry that
    // silently denies nothing (and an allow entry that silently allows nothing).
    assert_rejected(&[
        (
            r#"{"open": {"deny_hosts": ["*.evil.example.com"]}}"#,
            &["deny_hosts", "*.evil.example.com"],
        ),
        (
            r#"{"open": {"allow_hosts": ["*.example.com"]}}"#,
            &["allow_hosts", "*.example.com"],
        ),
        (
            r#"{"open": {"allow_host_suffixes": ["*.example.com"]}}"#,
            &["allow_host_suffixes", "*.example.com"],
        ),
    ]);
}

/// A request a page makes (the browser gate's warden): a document in any
/// frame meets the host allowlist like a page; a subresource does not, but
/// meets every other rule — its address above all.
#[test]
fn a_subresource_skips_only_the_host_allowlist_and_a_frame_meets_all_of_it() {
    let policy = policy(HOSTS_ONLY);
    let r = resolver();
    let request = |url: &str, document: bool| {
        let url = Url::parse(url).map_err(|e| e.to_string())?;
        let checked = if document {
            block_on(policy.check_url(&url, &r))
        } else {
            block_on(policy.check_subresource(&url, &r))
        };
        checked
            .map(|checked| checked.url)
            .map_err(|refusal| refusal.rule.id().to_owned())
    };
    let elsewhere = format!("http://{PUBLIC}/lib.js");
    assert_eq!(request(&elsewhere, true), Err("host.not_allowed".into()));
    assert_eq!(request(&elsewhere, false), Ok(elsewhere.clone()));
    assert_eq!(
        request("http://127.0.0.1/x.png", false),
        Err("address.private".into())
    );
    assert_eq!(
        request("file:///etc/passwd", false),
        Err("url.scheme".into())
    );
    assert_eq!(
        request("https://example.com/", true),
        Ok("https://example.com/".into())
    );
}

/// The stack's own ports (Chromium's DevTools, the gate, listed services)
/// are out of reach on every non-public address, whatever the allowlist
/// says; the same port on a public address is just a port.
#[test]
fn a_protected_port_is_refused_on_a_private_address_even_when_the_range_is_allowed() {
    let mut policy = policy(PRIV_LOOP);
    policy.protected_ports = vec![9222];
    let r = resolver();
    let rule = |url: &str| {
        block_on(policy.check_open(url, &r))
            .map(|_| ())
            .map_err(|refusal| refusal.rule.id())
    };
    assert_eq!(rule("http://127.0.0.1:9222/json"), Err("port.protected"));
    assert_eq!(rule("http://localhost:9222/"), Err("port.protected"));
    assert_eq!(rule("http://[::1]:9222/"), Err("port.protected"));
    assert_eq!(rule("http://127.0.0.1:9223/"), Ok(()));
    assert_eq!(rule(&format!("http://{PUBLIC}:9222/")), Ok(()));
}

/// `localhost` is ::1 as well as 127.0.0.1: a policy that allows only the
/// IPv4 loopback on a port refuses it, and the refusal says which entry
/// to add (or which URL to open instead).
#[test]
fn localhost_refused_as_ipv6_loopback_names_the_entry_that_would_allow_it() {
    let allows_v4 = r#"{"open": {"allow_private_cidrs": ["127.0.0.1:8765"]}}"#;
    let refused = check(allows_v4, "http://localhost:8765/", &resolver())
        .err()
        .map(|r| (r.rule.id(), r.message));
    let (rule, message) = refused.unwrap_or_default();
    assert_eq!(rule, "address.private");
    assert!(message.contains("\"[::1]:8765\""), "{message}");
    assert!(message.contains("http://127.0.0.1:8765/"), "{message}");
    // No hint where 127.0.0.1 is not allowed on that port either.
    let other_port = check(allows_v4, "http://localhost:9000/", &resolver())
        .err()
        .map(|r| r.message)
        .unwrap_or_default();
    assert!(!other_port.contains("[::1]"), "{other_port}");
}
