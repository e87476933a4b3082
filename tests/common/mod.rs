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
