//! Replacing a small file whole (the checkpoint, the public key): a reader
//! sees the old content or the new, never half of either.

use std::{
    fs::{File, OpenOptions, Permissions},
    io::{self, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::Path,
};

/// Write `bytes` to `tmp` (mode `mode`, whatever the umask), fdatasync it,
/// rename it over `path`, and fsync the directory. Without that last one,
/// the rename's metadata waits in the filesystem journal until the next
/// sync of anything: usually the next call's intent record, whose
/// `fdatasync` then commits it too, on the call's critical path.
///
/// # Errors
/// Any write, sync or rename failure.
pub(crate) fn replace(path: &Path, tmp: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(tmp)?;
    file.set_permissions(Permissions::from_mode(mode))?;
    file.write_all(bytes)?;
    file.sync_data()?;
    std::fs::rename(tmp, path)?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}
