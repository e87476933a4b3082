//! Which IP addresses a browser driven by an agent must not reach unless the
//! operator allows them: everything that is not globally routable unicast.
//!
//! IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64, 6to4)
//! are judged by the embedded address too, so `::ffff:10.0.0.1` is as
//! private as `10.0.0.1`. For what is allowed, only the IPv4-mapped form
//! is the same host ([`canonical`]): the others route through a translator
//! or a relay that may be anywhere, so they never borrow an allowance.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Special-purpose IPv4 ranges (RFC 6890 and friends), with what they are.
const V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "unspecified / this network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata lives here)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
];

/// Special-purpose IPv6 ranges.
const V6: &[(&str, &str)] = &[
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "SRv6 SIDs"),
    ("100:0:0:1::/64", "dummy prefix"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
];

/// Why `ip` is not a public unicast address, or `None` when it is.
pub(crate) fn special_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => {
            if let Some(kind) = in_table(IpAddr::V6(v6), V6) {
                return Some(kind);
            }
            match embedded_v4(v6) {
                Some(v4) => v4_kind(v4),
                // Only 2000::/3 is allocated as global unicast; the rest
                // (`::2`, `200::1`, `400::1`) routes nowhere public.
                None if !is_global_unicast(v6) => {
                    Some("reserved (outside global unicast 2000::/3)")
                }
                None => None,
            }
        }
    }
}

/// The one form of an address wherever addresses are compared: an
/// IPv4-mapped address (`::ffff:a.b.c.d`) is the IPv4 address it maps;
/// every other address is itself.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Is `v6` in IPv6's global unicast space, 2000::/3 (all that may be
/// public, less [`V6`]'s ranges)?
fn is_global_unicast(v6: Ipv6Addr) -> bool {
    v6.segments()[0] & 0xe000 == 0x2000
}

/// The IPv4 address an IPv6 address carries, for the forms that route to it:
/// IPv4-mapped `::ffff:0:0/96`, IPv4-translated `::ffff:0:0:0/96` (SIIT),
/// IPv4-compatible `::/96` (from 1.0.0.0 up), NAT64 `64:ff9b::/96` and 6to4
/// `2002::/16`.
pub(crate) fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let v4_from =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some(v4_from(hi, lo)),
        // IPv4-compatible embeds a global IPv4 (RFC 4291 2.5.5.1): `::1` and
        // `::` are IPv6 loopback and unspecified, never 0.0.0.x.
        [0, 0, 0, 0, 0, 0, hi, lo] if hi >> 8 != 0 => Some(v4_from(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4_from(hi, lo)),
        [0x2002, hi, lo, ..] => Some(v4_from(hi, lo)),
        _ => None,
    }
}

fn v4_kind(v4: Ipv4Addr) -> Option<&'static str> {
    in_table(IpAddr::V4(v4), V4)
}

fn in_table(ip: IpAddr, table: &'static [(&'static str, &'static str)]) -> Option<&'static str> {
    table.iter().find_map(|(cidr, kind)| {
        let net: IpNet = match ip {
            IpAddr::V4(_) => cidr.parse::<Ipv4Net>().ok()?.into(),
            IpAddr::V6(_) => cidr.parse::<Ipv6Net>().ok()?.into(),
        };
        net.contains(&ip).then_some(*kind)
    })
}

/// An `allow_private_cidrs` entry: a range, and the ports it allows (all
/// when none are listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allowance {
    pub(crate) net: IpNet,
    pub(crate) ports: Option<Vec<std::ops::RangeInclusive<u16>>>,
}

impl Allowance {
    /// `10.0.0.0/8`, `127.0.0.1`, `127.0.0.1:8765`, `127.0.0.0/8:8000-8999,9443`,
    /// `[::1]:8765`, `[fd00::]/8:443` (an IPv6 entry with ports is bracketed).
    pub(crate) fn parse(entry: &str) -> Result<Self, String> {
        let (net, ports) = match entry.strip_prefix('[') {
            Some(rest) => {
                let (addr, after) = rest.split_once(']').ok_or("an opening [ without its ]")?;
                let (len, ports) = match after.split_once(':') {
                    Some((len, ports)) => (len, Some(ports)),
                    None => (after, None),
                };
                (format!("{addr}{len}"), ports)
            }
            // One colon: IPv4 with ports; more: a bare IPv6 range.
            None => match entry.split_once(':') {
                Some((net, ports)) if !ports.contains(':') => (net.to_owned(), Some(ports)),
                _ => (entry.to_owned(), None),
            },
        };
        let net = net
            .parse::<IpNet>()
            .or_else(|_| net.parse::<IpAddr>().map(IpNet::from))
            .map_err(|e| format!("{net:?} is not a CIDR or an address: {e}"))?;
        let net = canonical_net(net);
        let ports = ports.map(port_ranges).transpose()?;
        Ok(Self { net, ports })
    }

    /// Does this entry let `ip` (in its [`canonical`] form) be reached on
    /// `port`?
    pub(crate) fn covers(&self, ip: IpAddr, port: u16) -> bool {
        self.net.contains(&canonical(ip))
            && self
                .ports
                .as_ref()
                .is_none_or(|ranges| ranges.iter().any(|r| r.contains(&port)))
    }
}

impl std::fmt::Display for Allowance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(ranges) = &self.ports else {
            return write!(f, "{}", self.net);
        };
        let ports: Vec<String> = ranges
            .iter()
            .map(|r| {
                if r.start() == r.end() {
                    r.start().to_string()
                } else {
                    format!("{}-{}", r.start(), r.end())
                }
            })
            .collect();
        match self.net {
            IpNet::V6(v6) => write!(f, "[{}]/{}:{}", v6.addr(), v6.prefix_len(), ports.join(",")),
            IpNet::V4(_) => write!(f, "{}:{}", self.net, ports.join(",")),
        }
    }
}

/// A range inside `::ffff:0:0/96` as the IPv4 range it maps, so that it
/// meets [`canonical`] addresses.
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, IpNet::V4),
            None => net,
        },
        _ => net,
    }
}

/// `80`, `8000-8999`, `80,443`: ports 1–65535.
fn port_ranges(text: &str) -> Result<Vec<std::ops::RangeInclusive<u16>>, String> {
    text.split(',')
        .map(|item| {
            let (low, high) = item.split_once('-').unwrap_or((item, item));
            let port = |p: &str| {
                p.trim()
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("{p:?} is not a port (1-65535)"))
            };
            let (low, high) = (port(low)?, port(high)?);
            if low > high {
                return Err(format!("{item:?} is an empty port range"));
            }
            Ok(low..=high)
        })
        .collect()
}

#[cfg(test)]
#[path = "address_tests.rs"]
mod tests;
