//! At start, with a uid per session's daemon (`--child-uids`): hold the
//! range, open the state dirs to the children's uids as far as each must
//! be (and no further), and put agent-browser where those uids can run it.
//!
//! Why each session has a uid of its own: docs/design.md, "Session
//! separation". The uids are assigned in `crate::daemons::Identities`.

use std::{
    fs,
    io::Read,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};

use super::assemble::StateDirs;
use crate::daemons::{ChildUids, Identities, UidRange};

/// Which uid each daemon runs as, for a later server (server-owned, 0600).
const MEMO: &str = "child-uids.json";

/// Where a copy of agent-browser goes when its own path is out of the
/// children's reach: a directory of the state dir that holds it alone.
const BIN_DIR: &str = "bin";

/// The range `choice` asks for, held; with it, the dirs opened to the
/// children's uids: the state, HOME and output roots enterable (not
/// listable), the socket dir writable as /tmp is (sticky: no child removes
/// another's file), the empty config readable.
pub(super) fn identities(choice: ChildUids, dirs: &StateDirs) -> anyhow::Result<Identities> {
    let memo = dirs.state.join(MEMO);
    let claim = crate::daemons::claim_child_uids(choice, Identities::remembered_range(&memo))
        .map_err(anyhow::Error::msg)?;
    let Some(claim) = claim else {
        if let Some(why) = crate::daemons::why_no_child_uids()
            && choice == ChildUids::Auto
        {
            tracing::warn!(
                "every agent-browser runs as one uid: {why}; sessions are then not separated at \
                 the browser gate, sockets, /proc or /tmp (see --child-uids)"
            );
        }
        return Ok(Identities::new(None, None));
    };
    let mode = |path: &Path, mode: u32| {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot open {} to the children's uids", path.display()))
    };
    mode(&dirs.state, 0o711)?;
    mode(&dirs.home, 0o711)?;
    mode(&dirs.socket, 0o1733)?;
    shared_write_test(&dirs.socket)?;
    mode(&dirs.config_file, 0o644)?;
    if fs::metadata(&dirs.output).is_ok_and(|m| m.uid() == rustix::process::geteuid().as_raw()) {
        mode(&dirs.output, 0o711)?;
    }
    for path in [&dirs.state, &dirs.output] {
        if let Some(closed) = closed_above(path) {
            bail!(
                "{} (mode {:o}) does not let other users through, and the children run as uids \
                 {} (--child-uids): {} is out of their reach; chmod o+x {} or choose a dir whose \
                 parents allow it",
                closed.display(),
                fs::metadata(&closed)
                    .map(|m| m.mode() & 0o7777)
                    .unwrap_or_default(),
                claim.range,
                path.display(),
                closed.display()
            );
        }
    }
    Ok(Identities::new(Some(claim), Some(memo)))
}

/// agent-browser as the children will run it: `binary` itself when every
/// uid may reach and run it, else a copy in the state dir (made when it
/// differs), which every uid may. A checkout under a private home (`/root`)
/// is then no reason to refuse the start.
pub(super) fn agent_browser_within_reach(
    binary: &Path,
    range: Option<UidRange>,
    state: &Path,
) -> anyhow::Result<PathBuf> {
    let Some(range) = range else {
        return Ok(binary.to_owned());
    };
    let runnable = fs::metadata(binary).is_ok_and(|m| m.mode() & 0o005 == 0o005);
    let Some(closed) = closed_above(binary).or_else(|| (!runnable).then(|| binary.to_owned()))
    else {
        return Ok(binary.to_owned());
    };
    let dir = state.join(BIN_DIR);
    let copy = dir.join(
        binary
            .file_name()
            .unwrap_or_else(|| "agent-browser".as_ref()),
    );
    if !same_content(binary, &copy) {
        fs::DirBuilder::new()
            .mode(0o755)
            .recursive(true)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let partial = dir.join(".agent-browser.partial");
        let _ = fs::remove_file(&partial);
        fs::copy(binary, &partial).with_context(|| {
            format!("cannot copy {} to {}", binary.display(), partial.display())
        })?;
        fs::set_permissions(&partial, fs::Permissions::from_mode(0o755))?;
        fs::rename(&partial, &copy).with_context(|| format!("cannot write {}", copy.display()))?;
    }
    tracing::info!(
        closed = %closed.display(),
        copy = %copy.display(),
        "agent-browser is out of reach of the children's uids ({range}); they run a copy in the state dir"
    );
    Ok(copy)
}

/// The first directory above `path` that other users cannot pass (`o+x`
/// missing), if any.
fn closed_above(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|above| fs::metadata(above).map_or(true, |m| m.mode() & 0o001 == 0))
        .map(Path::to_path_buf)
}

/// Do both files hold the same bytes? (Read in full: agent-browser is some
/// tens of MiB, read once per start, and only when it must be copied.)
fn same_content(a: &Path, b: &Path) -> bool {
    let read = |p: &Path| -> Option<Vec<u8>> {
        let mut bytes = Vec::new();
        fs::File::open(p).ok()?.read_to_end(&mut bytes).ok()?;
        Some(bytes)
    };
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(ma), Ok(mb)) if ma.len() == mb.len() => read(a).is_some_and(|x| read(b) == Some(x)),
        _ => false,
    }
}

/// agent-browser checks that its socket dir is writable by writing and
/// removing `.write_test` there. In a dir the children's uids share, one
/// child's file would make every other's check fail until it is removed
/// (sticky: only by its owner), so the server keeps one there that any uid
/// may write and none may remove.
fn shared_write_test(socket_dir: &Path) -> anyhow::Result<()> {
    let path = socket_dir.join(".write_test");
    let ours = fs::symlink_metadata(&path)
        .is_ok_and(|m| m.is_file() && m.uid() == rustix::process::geteuid().as_raw());
    if !ours {
        let _ = fs::remove_file(&path);
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
    }
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot open {} to the children's uids", path.display()))
}
