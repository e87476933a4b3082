//! Each child uid's HOME: `<home root>/<uid>`, its owner's alone (0700).
//!
//! The root is the server's (0711: a child may enter the dir it is given,
//! not list or write the root), so no child can put a link where another
//! uid's HOME is made; the dir is opened without following one anyway.

use std::path::Path;

use rustix::fs::{CWD, Mode, OFlags, fchmod, fchown, mkdirat, openat};

use crate::daemons::ChildUid;

/// Make `uid`'s HOME under `root` (or take the one there) and give it to
/// `uid`, private.
pub(super) fn make(root: &Path, uid: ChildUid) -> std::io::Result<()> {
    let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root = openat(CWD, root, dir, Mode::empty())?;
    let name = uid.to_string();
    match mkdirat(&root, name.as_str(), Mode::RWXU) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let home = openat(&root, name.as_str(), dir, Mode::empty())?;
    let owner = Some(rustix::process::Uid::from_raw(uid.get()));
    fchown(
        &home,
        owner,
        Some(rustix::process::Gid::from_raw(uid.get())),
    )?;
    fchmod(&home, Mode::RWXU)?;
    Ok(())
}

/// Remove `uid`'s HOME and all in it. Best effort: std's `remove_dir_all`
/// never follows a link the child left there.
pub(super) fn remove(root: &Path, uid: ChildUid) {
    let home = root.join(uid.to_string());
    if let Err(e) = std::fs::remove_dir_all(&home)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(error = %e, home = %home.display(), "a released uid's HOME could not be removed");
    }
}
