use super::*;

fn covers(entry: &str, ip: &str, port: u16) -> bool {
    Allowance::parse(entry)
        .unwrap()
        .covers(ip.parse().unwrap(), port)
}

#[test]
fn an_allowance_without_ports_covers_every_port_and_one_with_ports_only_those() {
    assert!(covers("127.0.0.1/32", "127.0.0.1", 9222));
    assert!(covers("127.0.0.1:8765", "127.0.0.1", 8765));
    assert!(!covers("127.0.0.1:8765", "127.0.0.1", 8766));
    assert!(covers("127.0.0.0/8:8000-8999,9443", "127.0.0.2", 8500));
    assert!(covers("127.0.0.0/8:8000-8999,9443", "127.0.0.2", 9443));
    assert!(!covers("127.0.0.0/8:8000-8999,9443", "127.0.0.2", 9000));
    assert!(covers("[::1]:8765", "::1", 8765));
    assert!(!covers("[::1]:8765", "::1", 80));
    assert!(covers("[fd00::]/8:443", "fd12::1", 443));
    assert!(covers("::1/128", "::1", 1));
    assert!(!covers("127.0.0.1:8765", "127.0.0.2", 8765));
}

#[test]
fn malformed_allowances_are_refused_with_the_reason() {
    for bad in [
        "127.0.0.1:0",
        "127.0.0.1:99999",
        "127.0.0.1:9-1",
        "127.0.0.1:",
        "[::1:80",
        "x:80",
    ] {
        assert!(Allowance::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(
        Allowance::parse("127.0.0.0/8:80,8000-8999")
            .unwrap()
            .to_string(),
        "127.0.0.0/8:80,8000-8999"
    );
    assert_eq!(
        Allowance::parse("[::1]:80").unwrap().to_string(),
        "[::1]/128:80"
    );
}

fn kind(s: &str) -> Option<&'static str> {
    special_kind(s.parse().unwrap())
}

#[test]
fn public_addresses_have_no_special_kind() {
    for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1", "1.1.1.1"] {
        assert_eq!(kind(ip), None, "{ip}");
    }
}

#[test]
fn every_special_range_is_recognised() {
    for (ip, want) in [
        ("127.0.0.2", "loopback"),
        ("10.9.8.7", "private"),
        ("169.254.169.254", "link-local (cloud metadata lives here)"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("0.0.0.0", "unspecified / this network"),
        ("::1", "loopback"),
        ("fd00::1", "unique local"),
        ("fe80::1", "link-local"),
        ("::ffff:10.0.0.1", "private"),
        ("::10.0.0.1", "private"),
        (
            "64:ff9b::a9fe:a9fe",
            "link-local (cloud metadata lives here)",
        ),
        ("2002:7f00:1::", "loopback"),
        ("ff02::1", "multicast"),
    ] {
        assert_eq!(kind(ip), Some(want), "{ip}");
    }
}

#[test]
fn ipv6_outside_global_unicast_and_translated_ipv4_are_not_public() {
    for (ip, want) in [
        ("::ffff:0:7f00:2", "loopback"),
        (
            "::ffff:0:a9fe:a9fe",
            "link-local (cloud metadata lives here)",
        ),
        ("::ffff:0:a00:1", "private"),
        ("::2", "reserved (outside global unicast 2000::/3)"),
        ("200::1", "reserved (outside global unicast 2000::/3)"),
        ("400::1", "reserved (outside global unicast 2000::/3)"),
        ("8000::1", "reserved (outside global unicast 2000::/3)"),
        ("e000::1", "reserved (outside global unicast 2000::/3)"),
    ] {
        assert_eq!(kind(ip), Some(want), "{ip}");
    }
    assert_eq!(kind("::ffff:0:808:808"), None, "translated public IPv4");
    assert_eq!(kind("2a00:1450::1"), None);
}

#[test]
fn an_ipv4_allowance_admits_only_that_address_and_its_mapped_form() {
    assert!(covers("127.0.0.1/32", "127.0.0.1", 80));
    assert!(covers("127.0.0.1/32", "::ffff:127.0.0.1", 80));
    assert!(covers("127.0.0.1:8000", "::ffff:7f00:1", 8000));
    assert!(!covers("127.0.0.1/32", "127.0.0.2", 80));
    // Forms that embed the address but route elsewhere (NAT64, 6to4, the
    // IPv4-compatible form, SIIT's translated form) count for refusal,
    // never for allowance.
    for elsewhere in [
        "64:ff9b::7f00:1",
        "2002:7f00:1:abcd::1",
        "::127.0.0.1",
        "::ffff:0:7f00:1",
    ] {
        assert!(!covers("127.0.0.1:8000", elsewhere, 8000), "{elsewhere}");
        assert_eq!(kind(elsewhere), Some("loopback"), "{elsewhere}");
    }
    assert!(!covers("10.0.0.0/8", "2002:a00::1", 443));
    // An allowance written in the mapped form is the IPv4 address.
    assert!(covers("::ffff:127.0.0.1/128", "127.0.0.1", 80));
}
