//! The egress proxy: the browser's only way out to the network.
//!
//! Each session's browser context names one of its listeners as its proxy
//! (`proxyServer`, with loopback not bypassed), so every connection any of
//! the session's pages, frames, workers or service workers makes, of any
//! kind Chromium has or adds, arrives here first. Each is decided by the
//! same URL policy as `open` (schemes, host lists, ports, addresses after
//! DNS), resolved once: the proxy connects to exactly the addresses it
//! checked, so a name that resolves elsewhere the second time (DNS
//! rebinding) gains nothing. A refusal is an audited record naming the
//! session; the listener it arrived on is the session's identity
//! (docs/design.md, "The egress proxy").

mod proxy;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio_util::sync::CancellationToken;

use crate::{
    browser_refusals::Reporter,
    policy::{resolve::Resolve, rules},
    session_id::DaemonName,
    sync::lock,
};

/// Connections one session's listener serves at once, and open tunnels
/// beside them (a WebSocket outlives the connection that asked for it):
/// Chromium keeps at most a few dozen open to one proxy, so more is a page
/// trying to use up the server's descriptors.
const MAX_CONNECTIONS_PER_SESSION: usize = 64;

/// How long a connection to a checked address may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The egress proxy of one server: a listener per session, opened when the
/// gate makes the session's browser context and closed when it disposes it.
#[derive(Clone)]
pub(crate) struct Egress {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress").finish_non_exhaustive()
    }
}

struct Inner {
    /// The rules in force, read per decision (a reload applies at once).
    rules: Arc<rules::Current>,
    resolver: Arc<dyn Resolve>,
    reporter: Reporter,
    /// Each session's listener: its port, and what stops it.
    listeners: Mutex<HashMap<DaemonName, Listening>>,
}

struct Listening {
    port: u16,
    stop: CancellationToken,
}

impl Egress {
    pub(crate) fn new(
        rules: Arc<rules::Current>,
        resolver: Arc<dyn Resolve>,
        reporter: Reporter,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                rules,
                resolver,
                reporter,
                listeners: Mutex::default(),
            }),
        }
    }

    /// The port of `session`'s listener on 127.0.0.1, opened now unless it
    /// is open already. Must be called inside the server's runtime.
    pub(crate) fn open(&self, session: &DaemonName) -> std::io::Result<u16> {
        self.open_on(session, 0)
    }

    /// As [`Self::open`], on `port` (0: any free one): a context a previous
    /// server made names its listener's port for good.
    pub(crate) fn open_on(&self, session: &DaemonName, port: u16) -> std::io::Result<u16> {
        let mut listeners = lock(&self.inner.listeners);
        if let Some(listening) = listeners.get(session) {
            return Ok(listening.port);
        }
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let stop = CancellationToken::new();
        listeners.insert(
            session.clone(),
            Listening {
                port,
                stop: stop.clone(),
            },
        );
        let room = Arc::new(proxy::Room {
            session: session.clone(),
            egress: self.clone(),
            connections: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS_PER_SESSION)),
            tunnels: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS_PER_SESSION)),
        });
        tokio::spawn(proxy::listen(listener, room, stop));
        Ok(port)
    }

    /// Stop `session`'s listener and the connections it serves.
    pub(crate) fn close(&self, session: &str) {
        if let Some(listening) = lock(&self.inner.listeners).remove(session) {
            listening.stop.cancel();
        }
    }

    /// Is `port` one of the proxy's own listeners? A page may not reach
    /// another session's listener through its own (it would borrow that
    /// session's name in the audit trail).
    fn is_own_port(&self, port: u16) -> bool {
        lock(&self.inner.listeners)
            .values()
            .any(|listening| listening.port == port)
    }
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
