//! Who dialled the gate, as the kernel says: the uid that owns the other
//! end of the TCP connection (`/proc/net/tcp`), which the child cannot
//! forge or borrow from another session. The name in the path is only the
//! child's claim; with a uid per daemon (`crate::daemons::Identities`) the
//! claim must be the dialler's own daemon.

use std::net::{SocketAddr, SocketAddrV4};

use crate::{daemons::Identities, session_id::DaemonName};

/// What the gate knows of a connection before its handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Caller {
    /// Separation is off: the path's name is all there is.
    Unchecked,
    /// The daemon whose uid dialled.
    Daemon(DaemonName),
    /// A uid that is no live daemon's (or the kernel could not say).
    Stranger(Option<u32>),
}

impl Caller {
    /// Identify the dialler of the connection from `peer` to `local`.
    pub(super) fn of(identities: &Identities, peer: SocketAddr, local: SocketAddr) -> Self {
        if identities.range().is_none() {
            return Self::Unchecked;
        }
        let uid = socket_uid(peer, local);
        match uid.and_then(|uid| identities.daemon_of(uid)) {
            Some(daemon) => Self::Daemon(daemon),
            None => Self::Stranger(uid),
        }
    }

    /// `None` when a connection from this caller may name `claimed`; else
    /// why not, for the `gate.identity` record.
    pub(super) fn refuses(&self, claimed: &str) -> Option<String> {
        match self {
            Self::Unchecked => None,
            Self::Daemon(own) if own == claimed => None,
            Self::Daemon(own) => Some(format!(
                "a connection from session {own}'s daemon named session {claimed}"
            )),
            Self::Stranger(Some(uid)) => Some(format!(
                "a connection from uid {uid}, which is no daemon of this server, named session {claimed}"
            )),
            Self::Stranger(None) => Some(format!(
                "a connection whose owner the kernel did not report named session {claimed}"
            )),
        }
    }

    /// The daemon a refusal is recorded under: the one that dialled, when
    /// known, else the one named.
    pub(super) fn blame(&self, claimed: &DaemonName) -> DaemonName {
        match self {
            Self::Daemon(own) => own.clone(),
            Self::Unchecked | Self::Stranger(_) => claimed.clone(),
        }
    }
}

/// The uid of the IPv4 TCP socket whose local end is `peer` and remote end
/// `local` (the dialler's side of our accepted connection).
fn socket_uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (SocketAddr::V4(peer), SocketAddr::V4(local)) = (peer, local) else {
        return None; // the gate listens on 127.0.0.1 only
    };
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    uid_in_table(&table, peer, local)
}

/// The table's uid for the connection `from` → `to`: columns are `sl
/// local_address rem_address st … uid`, addresses as the kernel prints a
/// `__be32` in native order (`%08X`) and the port in hex.
fn uid_in_table(table: &str, from: SocketAddrV4, to: SocketAddrV4) -> Option<u32> {
    let spell = |a: SocketAddrV4| {
        format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(a.ip().octets()),
            a.port()
        )
    };
    let (from, to) = (spell(from), spell(to));
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&from.as_str()) && fields.get(2) == Some(&to.as_str()))
            .then(|| fields.get(7)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dialler_is_read_from_the_kernels_own_table_of_this_connection() {
        // Our own connection to a listener of ours: the table must name our uid.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        let local = accepted.local_addr().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let me = rustix::process::getuid().as_raw();
        assert_eq!(socket_uid(peer, local), Some(me));
        // The other direction is the listener's side: not the dialler's entry.
        let other = SocketAddr::from(([127, 0, 0, 1], 1));
        assert_eq!(socket_uid(other, local), None);
    }

    #[test]
    fn only_the_dialling_daemon_may_name_itself() {
        let name = |n: &str| DaemonName::checked(n).expect("a daemon name");
        let daemon = Caller::Daemon(name("thief"));
        assert_eq!(daemon.refuses("thief"), None);
        let why = daemon.refuses("victim").unwrap();
        assert!(why.contains("thief") && why.contains("victim"), "{why}");
        assert_eq!(daemon.blame(&name("victim")), name("thief"));
        assert!(Caller::Stranger(Some(0)).refuses("victim").is_some());
        assert_eq!(Caller::Unchecked.refuses("victim"), None);
    }
}
