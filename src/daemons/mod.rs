//! What the runner, which starts agent-browser's daemons, and the browser
//! gate, which they reach Chromium through, agree on about a daemon: the
//! gate URL it is given ([`gate_endpoint`]), the socket dir it listens in
//! ([`SocketDir`]), the tab it pinned there ([`pinned_target`]), and what
//! the gate knows and does about a daemon's tabs for the runner ([`Tabs`]),
//! and which uid each daemon runs as ([`Identities`]).
//! Both use this module; it uses neither, so neither uses the other.

mod identities;
mod look;
mod socket_dir;
mod uid_claim;

use futures_util::future::BoxFuture;

use crate::{chromium_ids::TargetId, session_id::DaemonName};

pub(crate) use identities::{ChildUid, Identities, UidRange};
pub(crate) use look::{DomRead, Field, LookError, Named, PageLook, Shot};
pub(crate) use socket_dir::{SocketDir, SocketFile, SocketIdentity};
pub(crate) use uid_claim::{ChildUids, claim as claim_child_uids, why_not as why_no_child_uids};

/// Replace the memo `path` (a server-owned file in the state dir that a
/// later server reads: the daemons' uids, their browser contexts) whole, so
/// a crash leaves the old version or the new one; private (0600), since the
/// children's uids may enter the state dir.
pub(crate) fn write_memo(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let staged = path.with_extension("tmp");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&staged)?
        .write_all(bytes)?;
    std::fs::rename(&staged, path)
}

/// Path prefix of the gate's one endpoint; the daemon's name follows.
pub(crate) const GATE_PATH_PREFIX: &str = "/devtools/browser/";

/// The `--cdp` value for a daemon: the gate on 127.0.0.1, with its name.
pub(crate) fn gate_endpoint(gate_port: u16, daemon_name: &DaemonName) -> String {
    format!("ws://127.0.0.1:{gate_port}{GATE_PATH_PREFIX}{daemon_name}")
}

/// The CDP target id of a daemon's pinned tab, once it has one.
///
/// The daemon writes `<socket dir>/<name>.target`; its content is not
/// trusted beyond being a hex target id, only ever used to address that tab.
pub(crate) fn pinned_target(socket_dir: &SocketDir, daemon_name: &DaemonName) -> Option<TargetId> {
    let text = socket_dir.read(&format!("{daemon_name}.target"))?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let id = value.get("targetId")?.as_str()?;
    let well_formed = (8..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit());
    well_formed.then(|| TargetId::from_chromium(id))
}

/// What the gate, which sees every tab of a daemon's browser context, does
/// for the runner about them.
pub(crate) trait Tabs: Send + Sync + std::fmt::Debug {
    /// Is `target` in `daemon`'s own browser context? A pin file is the
    /// child's to write: a compromised child could name another session's
    /// tab in it, so the server brings a tab forward, stops its loading or
    /// closes it only once this says the tab is the daemon's own.
    fn owns<'a>(&'a self, daemon: &'a DaemonName, target: &'a TargetId) -> BoxFuture<'a, bool>;

    /// Show `session`'s id in the window `daemon`'s context has, for a
    /// person watching the screen: in agent-browser's spare tab (it keeps
    /// one beside the tab it works in), never in the session's pages.
    /// Best effort; says whether it was done.
    fn label<'a>(&'a self, daemon: &'a DaemonName, session: &'a str) -> BoxFuture<'a, bool>;

    /// Look at `target`, a tab of `daemon`'s, once it is quiet: its
    /// document's URL and title (for the evidence of an action), and where
    /// the elements named `element` are (for what an approval binds).
    fn look<'a>(
        &'a self,
        daemon: &'a DaemonName,
        target: &'a TargetId,
        element: Option<Named<'a>>,
    ) -> BoxFuture<'a, Result<PageLook, LookError>>;

    /// A screenshot of `target`, with the DOM read just after it.
    fn shoot<'a>(
        &'a self,
        daemon: &'a DaemonName,
        target: &'a TargetId,
    ) -> BoxFuture<'a, Result<Shot, LookError>>;
}

/// What a pooled daemon's window says until a session is bound to it.
pub(crate) const WAITING_LABEL: &str = "(ready for a new session)";

/// No gate serves (as in a one-off check): no tab is vouched for, acted
/// on or labelled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoTabs;

impl Tabs for NoTabs {
    fn owns<'a>(&'a self, _daemon: &'a DaemonName, _target: &'a TargetId) -> BoxFuture<'a, bool> {
        Box::pin(std::future::ready(false))
    }

    fn label<'a>(&'a self, _daemon: &'a DaemonName, _session: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(std::future::ready(false))
    }

    fn look<'a>(
        &'a self,
        _daemon: &'a DaemonName,
        _target: &'a TargetId,
        _element: Option<Named<'a>>,
    ) -> BoxFuture<'a, Result<PageLook, LookError>> {
        Box::pin(std::future::ready(Err(LookError::NoGate)))
    }

    fn shoot<'a>(
        &'a self,
        _daemon: &'a DaemonName,
        _target: &'a TargetId,
    ) -> BoxFuture<'a, Result<Shot, LookError>> {
        Box::pin(std::future::ready(Err(LookError::NoGate)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemons_endpoint_is_a_loopback_websocket_url_on_the_gate_path() {
        assert_eq!(
            gate_endpoint(4242, &DaemonName::checked("u1").unwrap()),
            "ws://127.0.0.1:4242/devtools/browser/u1"
        );
    }
}
