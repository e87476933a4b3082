//! Where files written for an agent (screenshots) go.
//!
//! agent-browser writes wherever it is told, relative paths resolve against the
//! daemon's cwd, and `../` is not checked. So browser-shell always passes an
//! absolute path it chose or vetted: under `<output-dir>/<daemon-name>/`, with
//! no `..`, no symlink on the way, and an image extension.
//!
//! The confined child can write under the output dir, so it can swap any
//! directory there for a symlink at any moment. Every file operation the
//! server does there (creating the session's directories, pruning, deleting
//! a blocked screenshot) is relative to a directory fd opened with
//! `O_NOFOLLOW`, from the output root down: a symlink is never followed, and
//! nothing outside the tree can be reached by a path the child changed.

use std::{
    ffi::OsStr,
    os::{
        fd::{AsFd, BorrowedFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Component, Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

use rustix::{
    fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, mkdirat, openat, statat, unlinkat},
    io::Errno,
};

use crate::{
    refusal::{Refusal, Rule},
    session_id::SessionId,
};

/// Directories a screenshot path may have below the session's directory.
/// Pruning looks no deeper: its walk holds one fd per level, and a deeper
/// tree (the child can make one) must not exhaust the server's fds.
const MAX_SUBDIRS: usize = 16;

/// A screenshot's file, as agent-browser is told it and as the server finds
/// it again.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The absolute path agent-browser writes.
    pub(crate) path: PathBuf,
    /// The same file relative to the output root (`<daemon-name>/…`), every
    /// component a plain name.
    within: PathBuf,
}

/// Resolve the screenshot target for `session`, creating its directory.
///
/// `requested` is a name relative to the session's directory (`shot.png`,
/// `run1/shot.png`) or an absolute path inside it; `None` generates a name.
pub(crate) fn resolve(
    root: &Path,
    session: &SessionId,
    requested: Option<&str>,
) -> Result<Target, Refusal> {
    let dir = root.join(session.own_name().as_str());
    let relative = match requested {
        None => PathBuf::from(generated_name()),
        Some(name) => relative_inside(&dir, name)?,
    };
    let within = Path::new(session.own_name().as_str()).join(&relative);
    let (Some(parent), Some(name)) = (within.parent(), within.file_name()) else {
        return Err(Refusal::new(Rule::OutputPath, "no file name"));
    };
    let unusable = |e: Errno| Refusal::new(Rule::OutputPath, format!("output dir unusable: {e}"));
    let root_fd = open_dir(CWD, root).map_err(unusable)?;
    // Every component from the root down must be a real directory: a symlink
    // planted in the output tree must not redirect the write (or the mkdir)
    // elsewhere.
    let parent_fd = make_dirs(root_fd.as_fd(), parent).map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR => Refusal::new(
            Rule::OutputPath,
            "the output path leaves the session's output directory (symlink?)",
        ),
        e => Refusal::new(
            Rule::OutputPath,
            format!("cannot create the output directory: {e}"),
        ),
    })?;
    match statat(&parent_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile => {
            return Err(Refusal::new(
                Rule::OutputPath,
                "the output path exists and is not a regular file",
            ));
        }
        _ => {}
    }
    let canonical_root = root
        .canonicalize()
        .map_err(|e| Refusal::new(Rule::OutputPath, format!("output dir unusable: {e}")))?;
    Ok(Target {
        path: canonical_root.join(&within),
        within,
    })
}

/// Why a file under the output root was not handed over or opened. The
/// child writes there, so each of these may be its doing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OutputFileError {
    #[error("no file name")]
    NoFileName,
    #[error("the output directory could not be given to uid {owner}: {errno}")]
    NotHandedOver { owner: u32, errno: Errno },
    #[error("its directory cannot be opened without following a link: {0}")]
    Directory(Errno),
    #[error("it is a symbolic link")]
    Symlink,
    #[error("it cannot be opened: {0}")]
    Open(Errno),
    #[error("it cannot be examined: {0}")]
    Stat(Errno),
    #[error("it is not a regular file")]
    NotRegular,
}

/// Give the target's directories, from the session's own down, and the
/// file if one is there already, to `owner` (the daemon's uid): the server
/// made them, the child writes in them. Each level is opened without
/// following a link, as everywhere in this tree.
pub(crate) fn hand_over(root: &Path, target: &Target, owner: u32) -> Result<(), OutputFileError> {
    let (Some(parent), Some(name)) = (target.within.parent(), target.within.file_name()) else {
        return Err(OutputFileError::NoFileName);
    };
    let uid = Some(rustix::process::Uid::from_raw(owner));
    let gid = Some(rustix::process::Gid::from_raw(owner));
    let fail = |e: Errno| OutputFileError::NotHandedOver { owner, errno: e };
    let mut fd = open_dir(CWD, root).map_err(fail)?;
    for component in parent.components() {
        let Component::Normal(level) = component else {
            return Err(fail(Errno::INVAL));
        };
        fd = open_dir(&fd, level).map_err(fail)?;
        rustix::fs::fchown(&fd, uid, gid).map_err(fail)?;
    }
    match rustix::fs::chownat(&fd, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(fail(e)),
    }
}

/// Delete a screenshot a call wrote (its page was blocked). Only a regular
/// file, found without following a symlink; true if it was deleted.
pub(crate) fn remove(root: &Path, target: &Target) -> bool {
    let (Some(parent), Some(name)) = (target.within.parent(), target.within.file_name()) else {
        return false;
    };
    let Ok(dir) = open_dir(CWD, root).and_then(|root| open_within(root.as_fd(), parent)) else {
        return false;
    };
    // The name could change between the two calls, but only to something
    // else in this directory (inside the tree): unlinkat never follows it.
    statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile)
        && unlinkat(&dir, name, AtFlags::empty()).is_ok()
}

/// Open a screenshot a call wrote, to read it back for the reply: a regular
/// file at the target, found without following a symlink at any level, and
/// its size as `fstat` gives it (the caller bounds the read by it). The
/// child may have planted a FIFO or a device there: `O_NONBLOCK` keeps the
/// open from waiting on one, and the file type is checked on the open fd.
pub(crate) fn open_written(
    root: &Path,
    target: &Target,
) -> Result<(std::fs::File, u64), OutputFileError> {
    let (Some(parent), Some(name)) = (target.within.parent(), target.within.file_name()) else {
        return Err(OutputFileError::NoFileName);
    };
    let dir = open_dir(CWD, root)
        .and_then(|root| open_within(root.as_fd(), parent))
        .map_err(OutputFileError::Directory)?;
    let fd = openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::LOOP => OutputFileError::Symlink,
        e => OutputFileError::Open(e),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(OutputFileError::Stat)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(OutputFileError::NotRegular);
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    Ok((std::fs::File::from(fd), size))
}

/// Where files written for agents go and how much of them a reply carries.
#[derive(Debug, Clone)]
pub(crate) struct Outputs {
    /// The output root (`--output-dir`).
    pub(crate) dir: PathBuf,
    pub(crate) quota: Quota,
    /// The bound on a reply's stdout and stderr (`--max-output-bytes`).
    pub(crate) max_reply_bytes: usize,
    /// The bound on a reply's image, in base64 bytes (0: no images).
    pub(crate) max_image_bytes: u64,
}

/// Bytes of screenshots a session, and all sessions together, may keep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quota {
    pub per_session: u64,
    pub total: u64,
    /// The largest file one call can write (the child's RLIMIT_FSIZE).
    pub max_file: u64,
}

/// Can the quotas hold one more file of up to `max_file` bytes at all (with
/// everything older deleted)? If not, the write is refused before it runs.
pub(crate) fn check_room(quota: &Quota) -> Result<(), Refusal> {
    let too_small = |which: &str, limit: u64| {
        Refusal::new(
            Rule::OutputQuota,
            format!(
                "the {which} output quota ({limit} bytes) cannot hold one more screenshot of up to {} bytes",
                quota.max_file
            ),
        )
    };
    if quota.max_file > quota.per_session {
        return Err(too_small("per-session", quota.per_session));
    }
    if quota.max_file > quota.total {
        return Err(too_small("total", quota.total));
    }
    Ok(())
}

/// Make room for one more file in the session's directory before it is
/// written (on a quota [`check_room`] accepted): the oldest files go first,
/// in the session and then across all sessions, until a file of `max_file`
/// bytes fits both quotas. Returns how many were deleted. The pipeline calls
/// it only once the call's intent is durable: deleting is a side effect of
/// the call.
pub(crate) fn make_room(root: &Path, daemon_name: &str, quota: &Quota) -> usize {
    let per_session = quota.per_session.saturating_sub(quota.max_file);
    let total = quota.total.saturating_sub(quota.max_file);
    let Ok(root) = open_dir(CWD, root) else {
        return 0;
    };
    prune(root.as_fd(), Path::new(daemon_name), per_session)
        + prune(root.as_fd(), Path::new(""), total)
}

/// A regular file found by [`prune`].
struct Found {
    stat: rustix::fs::Stat,
    /// Its directory, relative to the root.
    dir: PathBuf,
    name: std::ffi::CString,
}

/// Delete the oldest regular files under `start` (relative to `root`) until
/// at most `keep` bytes remain; returns how many were deleted. Only regular
/// files count; a symlink is never followed, and nothing deeper than a
/// screenshot path may go is looked at.
fn prune(root: BorrowedFd<'_>, start: &Path, keep: u64) -> usize {
    let mut files = Vec::new();
    if let Ok(dir) = open_within(root, start).and_then(Dir::new) {
        let depth = start.components().count();
        // Depth first, one open directory per level.
        let mut stack = vec![(dir, start.to_owned())];
        loop {
            // The depth of a subdirectory found here, below the root.
            let level = depth + stack.len();
            let Some((dir, path)) = stack.last_mut() else {
                break;
            };
            let Some(Ok(entry)) = dir.read() else {
                stack.pop();
                continue;
            };
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            let Ok(fd) = dir.fd() else { continue };
            let Ok(stat) = statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => files.push(Found {
                    stat,
                    dir: path.clone(),
                    name: name.to_owned(),
                }),
                FileType::Directory if level <= MAX_SUBDIRS + 1 => {
                    let child = path.join(OsStr::from_bytes(name.to_bytes()));
                    if let Ok(sub) = open_dir(fd, name).and_then(Dir::new) {
                        stack.push((sub, child));
                    }
                }
                _ => {}
            }
        }
    }
    let size = |f: &Found| u64::try_from(f.stat.st_size).unwrap_or(0);
    let mut used: u64 = files.iter().map(size).sum();
    files.sort_by_key(|f| (f.stat.st_mtime, f.stat.st_mtime_nsec));
    let mut open: Option<(PathBuf, OwnedFd)> = None;
    let mut removed = 0;
    for file in files {
        if used <= keep {
            break;
        }
        // Opened again from the root, no-follow at every level: the tree
        // may have changed since the walk.
        if open.as_ref().is_none_or(|(path, _)| *path != file.dir) {
            open = open_within(root, &file.dir)
                .ok()
                .map(|fd| (file.dir.clone(), fd));
        }
        let Some((_, dir)) = &open else { continue };
        if unlinkat(dir, file.name.as_c_str(), AtFlags::empty()).is_ok() {
            used = used.saturating_sub(size(&file));
            removed += 1;
        }
    }
    removed
}

/// Open a directory, failing on a symlink (`ELOOP`) or a non-directory
/// (`ENOTDIR`).
fn open_dir<P: rustix::path::Arg>(at: impl AsFd, path: P) -> rustix::io::Result<OwnedFd> {
    openat(
        at,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Open `path` (plain names only) below `root`, one no-follow level at a time.
fn open_within(root: BorrowedFd<'_>, path: &Path) -> rustix::io::Result<OwnedFd> {
    let mut fd = open_dir(root, c".")?;
    for component in path.components() {
        let Component::Normal(name) = component else {
            return Err(Errno::INVAL);
        };
        fd = open_dir(&fd, name)?;
    }
    Ok(fd)
}

/// [`open_within`], creating (0700) the directories that are missing.
fn make_dirs(root: BorrowedFd<'_>, path: &Path) -> rustix::io::Result<OwnedFd> {
    let mut fd = open_dir(root, c".")?;
    for component in path.components() {
        let Component::Normal(name) = component else {
            return Err(Errno::INVAL);
        };
        // mkdirat does not follow a symlink at `name` (EEXIST), and
        // open_dir refuses one.
        match mkdirat(&fd, name, Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e),
        }
        fd = open_dir(&fd, name)?;
    }
    Ok(fd)
}

fn relative_inside(dir: &Path, name: &str) -> Result<PathBuf, Refusal> {
    let path = Path::new(name);
    let relative = if path.is_absolute() {
        path.strip_prefix(dir).map_err(|_| {
            Refusal::new(
                Rule::OutputPath,
                format!(
                    "screenshots are saved under {}; give a file name or a path inside it",
                    dir.display()
                ),
            )
        })?
    } else {
        path
    };
    let mut clean = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(Refusal::new(
                    Rule::OutputPath,
                    "`..` is not allowed in output paths",
                ));
            }
        }
    }
    if clean.components().count() > MAX_SUBDIRS + 1 {
        return Err(Refusal::new(
            Rule::OutputPath,
            format!("output paths may be at most {MAX_SUBDIRS} directories deep"),
        ));
    }
    let lower = clean.to_string_lossy().to_ascii_lowercase();
    if !lower.ends_with(".png") {
        return Err(Refusal::new(
            Rule::OutputPath,
            "screenshot files must end in .png (agent-browser always writes PNG)",
        ));
    }
    Ok(clean)
}

fn generated_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("screenshot-{ms}-{}-{n}.png", std::process::id())
}

#[cfg(test)]
#[path = "outputs_tests.rs"]
mod tests;
