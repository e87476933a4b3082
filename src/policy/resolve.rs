//! Name resolution for the URL policy, behind a seam tests can fill.
//!
//! Production uses the system resolver (getaddrinfo through tokio) with a
//! timeout, through glibc's built-in `files` and `dns` only (see
//! [`hardening::nss`]). `localhost` and `*.localhost` never reach it: RFC
//! 6761 reserves them for loopback and Chromium resolves them that way
//! itself, so the policy sees the addresses the browser will use.

use std::{
    future::Future,
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    pin::Pin,
    time::Duration,
};

/// A boxed, sendable future (for the object-safe [`Resolve`]).
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Turns a host name into the addresses it resolves to.
pub(crate) trait Resolve: Send + Sync {
    /// Every address `host` resolves to.
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// The loopback addresses of `localhost` and `*.localhost`, or `None`.
pub(crate) fn reserved_localhost(host: &str) -> Option<Vec<IpAddr>> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (host == "localhost" || host.ends_with(".localhost")).then(|| {
        vec![
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ]
    })
}

/// The system resolver, bounded by a timeout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SystemResolver {
    timeout: Duration,
}

impl SystemResolver {
    /// Pins this process's lookups to the built-in modules first: every
    /// lookup goes through a resolver, so none runs before the pin.
    pub(crate) fn new(timeout: Duration) -> io::Result<Self> {
        hardening::nss::hosts_from_builtin_modules()?;
        Ok(Self { timeout })
    }
}

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let lookup = tokio::net::lookup_host((host, 0));
            match tokio::time::timeout(self.timeout, lookup).await {
                Ok(addrs) => Ok(addrs?.map(|a| a.ip()).collect()),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {} ms", self.timeout.as_millis()),
                )),
            }
        })
    }
}

/// A fixed table, for tests: unknown names fail like NXDOMAIN.
#[derive(Debug, Clone, Default)]
#[cfg(test)]
pub(crate) struct StaticResolver(pub std::collections::HashMap<String, Vec<IpAddr>>);

#[cfg(test)]
impl Resolve for StaticResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        let answer = self.0.get(host).cloned().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{host}: no such name"))
        });
        Box::pin(std::future::ready(answer))
    }
}
