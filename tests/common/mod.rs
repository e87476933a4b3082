//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

pub(crate) mod otlp_receiver;

/// The pinned agent-browser (the server runs it confined at start, so a
/// stand-in script would not do): `BROWSER_SHELL_AGENT_BROWSER`, or the
/// repository's pin as `deploy/local/install-deps` installs it.
pub(crate) fn agent_browser() -> PathBuf {
    if let Some(path) = std::env::var_os("BROWSER_SHELL_AGENT_BROWSER") {
        return PathBuf::from(path);
    }
    let arch = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "x64"
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "deploy/agent-browser/node_modules/agent-browser/bin/agent-browser-linux-musl-{arch}"
    ));
    assert!(
        path.is_file(),
        "{} is missing: run deploy/local/install-deps (tests/run does)",
        path.display()
    );
    path
}

/// `--allow-child-writable-inputs` when `server` or the agent-browser the
/// tests run lies under /tmp (a checkout or target dir there, as CI may
/// use): the server refuses such binaries otherwise, and these tests check
/// other things. Nothing when they lie elsewhere, so the refusal stays on.
pub(crate) fn binaries_under_tmp_flag(server: &Path) -> Option<&'static str> {
    let under_tmp = |path: &Path| {
        path.starts_with("/tmp") || path.canonicalize().is_ok_and(|p| p.starts_with("/tmp"))
    };
    (under_tmp(server) || under_tmp(&agent_browser())).then_some("--allow-child-writable-inputs")
}

/// Scratch dirs for one server: state under /tmp (short socket paths),
/// evidence under /var/tmp (outside the confinement's writable roots).
pub(crate) struct Dirs {
    pub(crate) scratch: Scratch,
    pub(crate) evidence: tempfile::TempDir,
}

/// A server's state dir. agent-browser daemons outlive the CLI that started
/// them (and the server); when the dir goes, so do the daemons whose socket
/// dir lies in it.
pub(crate) struct Scratch(tempfile::TempDir);

impl Scratch {
    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let root = self.0.path().to_string_lossy().into_owned() + "/";
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            let ours = environ.split(|b| *b == 0).any(|kv| {
                kv.strip_prefix(b"AGENT_BROWSER_SOCKET_DIR=")
                    .is_some_and(|dir| dir.starts_with(root.as_bytes()))
            });
            if ours {
                // SAFETY: kill(2) on a pid read from /proc; plain integers.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

pub(crate) fn dirs() -> Dirs {
    Dirs {
        scratch: Scratch(
            tempfile::Builder::new()
                .prefix("bs")
                .tempdir_in("/tmp")
                .unwrap(),
        ),
        evidence: tempfile::Builder::new()
            .prefix("bs-audit")
            .tempdir_in("/var/tmp")
            .unwrap(),
    }
}

/// A loopback port nothing listens on (bound, then released).
pub(crate) fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(9)
}
