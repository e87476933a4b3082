//! The confinement policy: plain data, built by the caller, validated by
//! [`crate::prepare`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What a confined process may do. Everything not listed is denied.
/// Serialisable so that a [`crate::Trampoline`] can carry it across `exec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Policy {
    /// Paths beneath which the process may read and execute.
    pub read_exec_paths: Vec<PathBuf>,
    /// Paths beneath which the process may read only (no execute).
    pub read_paths: Vec<PathBuf>,
    /// Paths beneath which the process has every filesystem right but
    /// execute: what it writes must not become a program it can run.
    pub read_write_paths: Vec<PathBuf>,
    /// TCP ports the process may connect to (on any address: Landlock port
    /// rules are not address-specific).
    pub connect_tcp_ports: Vec<u16>,
    /// TCP ports the process may bind; empty means no TCP bind at all.
    pub bind_tcp_ports: Vec<u16>,
    /// Landlock scopes (ABI 6+): no connecting to abstract unix sockets
    /// created outside the sandbox, no signals to processes outside it.
    pub scoped: bool,
    /// Socket families `socket(2)` may create.
    pub socket_families: Vec<SocketFamily>,
    /// Resource limits (soft = hard) for the process and its descendants.
    pub rlimits: Vec<crate::rlimits::Limit>,
    /// Switch to this identity after dropping the bounding set.
    pub identity: Option<Identity>,
    /// The file mode creation mask (e.g. `0o077`: what the process makes is
    /// its owner's alone); `None` keeps the parent's.
    #[serde(default)]
    pub umask: Option<u32>,
    /// What to do when the kernel cannot enforce all of this.
    pub degraded: Degraded,
}

/// A socket family a confined process may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SocketFamily {
    /// `AF_UNIX`.
    Unix,
    /// `AF_INET`: TCP and UDP only (no raw, SCTP or MPTCP: Landlock's port
    /// rules cover TCP alone, and an MPTCP socket connects to any port).
    Inet,
    /// `AF_INET6`, as [`Self::Inet`].
    Inet6,
    /// `AF_INET`, TCP only: [`Self::Inet`] without UDP, which Landlock does
    /// not restrict at all.
    InetTcp,
    /// `AF_INET6`, TCP only.
    Inet6Tcp,
    /// `AF_NETLINK` with protocol `NETLINK_ROUTE` only (getaddrinfo, getifaddrs).
    NetlinkRoute,
}

/// A uid/gid to switch to; supplementary groups are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
}

/// Whether a kernel that cannot enforce the whole policy is acceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Degraded {
    /// Refuse to prepare: the caller must not start (the default).
    Refuse,
    /// Enforce what the kernel supports and report the rest.
    Allow,
}

impl Default for Policy {
    /// Nothing readable or writable, no network, scopes on, the generic
    /// socket families, degraded mode refused.
    fn default() -> Self {
        Self {
            read_exec_paths: Vec::new(),
            read_paths: Vec::new(),
            read_write_paths: Vec::new(),
            connect_tcp_ports: Vec::new(),
            bind_tcp_ports: Vec::new(),
            scoped: true,
            socket_families: vec![
                SocketFamily::Unix,
                SocketFamily::Inet,
                SocketFamily::Inet6,
                SocketFamily::NetlinkRoute,
            ],
            rlimits: Vec::new(),
            identity: None,
            umask: None,
            degraded: Degraded::Refuse,
        }
    }
}
