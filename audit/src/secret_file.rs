//! 32 random bytes kept as 64 hex digits in a 0600 file: the storage of both
//! the redaction key and the checkpoint's signing key.

use std::{
    fs::OpenOptions,
    io::{self, Read, Write},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use crate::canonical::{hex, unhex};

/// Load the secret at `path`, creating it (mode 0600, random) if missing.
///
/// Creation is atomic: the secret is written to a private temporary file and
/// hard-linked into place, so a concurrent starter either wins or loads the
/// winner's complete secret — never a half-written one.
///
/// # Errors
/// When the file cannot be read or created, or does not hold 64 hex digits.
pub(crate) fn load_or_create(path: &Path) -> io::Result<[u8; 32]> {
    if path.exists() {
        return load(path);
    }
    let mut secret = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut secret)?;
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let written = file
        .write_all(hex(&secret).as_bytes())
        .and_then(|()| file.sync_all());
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(secret),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => load(path),
        Err(e) => Err(e),
    }
}

/// Load an existing secret (or public key: the format is the same).
///
/// # Errors
/// When the file cannot be read or does not hold 64 hex digits.
pub(crate) fn load(path: &Path) -> io::Result<[u8; 32]> {
    parse_hex32(&std::fs::read_to_string(path)?)
}

/// 64 hex digits, surrounding white space ignored.
///
/// # Errors
/// [`io::ErrorKind::InvalidData`] for anything else.
pub(crate) fn parse_hex32(text: &str) -> io::Result<[u8; 32]> {
    unhex(text.trim())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a key must be 64 hex digits"))
}
