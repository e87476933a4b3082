//! The daemons' socket dir, which the confined child writes, reached only
//! through a descriptor opened once at start.
//!
//! The server (often root) connects to, reads and unlinks files there. By
//! path, a child that swapped the dir for a symlink, or planted links in it,
//! would steer those acts at another program's files (connect to its socket,
//! unlink it). Through the descriptor every act is relative to the
//! directory that was opened, and no file in it is followed if it is a link.

use std::{
    io::Read,
    os::fd::{AsRawFd, OwnedFd},
    path::{Path, PathBuf},
    sync::Arc,
};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, fstat, openat, statat, unlinkat};

/// A socket file's (device, inode, ctime): a daemon that binds the path
/// anew creates a new file, so the identity changes.
pub(crate) type SocketIdentity = (u64, u64, i64, i64);

/// Largest file read from the dir (a pin file is a few hundred bytes).
const MAX_READ: u64 = 64 * 1024;

/// The socket dir: its path (for the child's environment) and the
/// descriptor every server operation goes through.
#[derive(Debug, Clone)]
pub(crate) struct SocketDir {
    path: PathBuf,
    fd: Arc<OwnedFd>,
}

/// What is at a session's socket path.
pub(crate) enum SocketFile {
    Missing,
    /// A socket, opened `O_PATH`: connect through [`SocketFile::proc_path`].
    Socket(OwnedFd),
    /// Not a socket: a symlink (never followed), a file, a directory.
    Other,
}

impl SocketFile {
    /// The path that reaches exactly this socket (`/proc/self/fd/N`).
    pub(crate) fn proc_path(fd: &OwnedFd) -> String {
        format!("/proc/self/fd/{}", fd.as_raw_fd())
    }
}

impl SocketDir {
    /// Open `path`, which must be a directory and not a symlink.
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let fd = openat(
            CWD,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            path: path.to_owned(),
            fd: Arc::new(fd),
        })
    }

    /// The path agent-browser is told (`AGENT_BROWSER_SOCKET_DIR`).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What is at `name`, opened without following a link.
    pub(crate) fn socket(&self, name: &str) -> SocketFile {
        let Ok(fd) = openat(
            &*self.fd,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return SocketFile::Missing;
        };
        match fstat(&fd) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Socket => {
                SocketFile::Socket(fd)
            }
            _ => SocketFile::Other,
        }
    }

    /// Remove the entry `name` (a link itself, never what it points to).
    pub(crate) fn remove(&self, name: &str) {
        let _ = unlinkat(&*self.fd, name, AtFlags::empty());
    }

    /// Device, inode and ctime of the entry `name` (not followed).
    pub(crate) fn identity(&self, name: &str) -> Option<SocketIdentity> {
        let st = statat(&*self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        Some((
            st.st_dev,
            st.st_ino,
            st.st_ctime,
            i64::try_from(st.st_ctime_nsec).unwrap_or_default(),
        ))
    }

    /// The uid that owns the entry `name` (not followed).
    pub(crate) fn owner(&self, name: &str) -> Option<u32> {
        statat(&*self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| st.st_uid)
    }

    /// The text of the regular file `name` (not followed), at most 64 KiB.
    pub(crate) fn read(&self, name: &str) -> Option<String> {
        let fd = openat(
            &*self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .ok()?;
        let regular =
            fstat(&fd).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile);
        if !regular {
            return None;
        }
        let mut text = String::new();
        std::fs::File::from(fd)
            .take(MAX_READ)
            .read_to_string(&mut text)
            .ok()?;
        Some(text)
    }

    /// The names of the entries in the dir.
    pub(crate) fn names(&self) -> Vec<String> {
        let Ok(dir) = rustix::fs::Dir::read_from(&*self.fd) else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect()
    }
}
