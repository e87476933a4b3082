//! The audit key: 32 random bytes in a 0600 file beside the log, from which
//! the redaction MAC key and the checkpoint MAC key are derived.
//!
//! Keep it where the audited process cannot read it (browser-shell's
//! confinement never grants read access to the audit log's directory).

use std::{
    fs::OpenOptions,
    io::{self, Read, Write},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::canonical::hex;

/// Secret key material for redaction and checkpoints.
#[derive(Clone)]
pub struct Key {
    redaction: [u8; 32],
    checkpoint: [u8; 32],
    fingerprint: [u8; 16],
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<secret>)")
    }
}

impl Key {
    /// Load the key at `path`, creating it (mode 0600, random) if missing.
    ///
    /// Creation is atomic: the key is written to a private temporary file and
    /// hard-linked into place, so a concurrent starter either wins or loads
    /// the winner's complete key — never a half-written one.
    ///
    /// # Errors
    /// When the file cannot be read or created, or holds fewer than 32 bytes.
    pub fn load_or_create(path: &Path) -> io::Result<Self> {
        if path.exists() {
            return Self::load(path);
        }
        let mut master = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut master)?;
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
            .write_all(hex(&master).as_bytes())
            .and_then(|()| file.sync_all());
        let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(Self::derive(&master)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Self::load(path),
            Err(e) => Err(e),
        }
    }

    /// Load an existing key (for the verifier).
    ///
    /// # Errors
    /// When the file cannot be read or does not hold 64 hex digits.
    pub fn load(path: &Path) -> io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let text = text.trim();
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "audit key must be 64 hex digits",
            )
        };
        // Checked byte-wise first: slicing below must never split a
        // multi-byte character, and from_str_radix would accept a sign.
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut master = [0u8; 32];
        for (i, byte) in master.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self::derive(&master))
    }

    fn derive(master: &[u8; 32]) -> Self {
        Self {
            redaction: mac_bytes(master, b"browser-shell redaction v1"),
            checkpoint: mac_bytes(master, b"browser-shell checkpoint v1"),
            fingerprint: {
                let mut fingerprint = [0u8; 16];
                fingerprint
                    .copy_from_slice(&mac_bytes(master, b"browser-shell key fingerprint v1")[..16]);
                fingerprint
            },
        }
    }

    /// Names this key without revealing it (32 hex digits, derived apart
    /// from the MAC keys): the server records it in its `started` record,
    /// so a verifier can tell the key a checkpoint was kept under from a
    /// replacement.
    pub fn fingerprint(&self) -> String {
        hex(&self.fingerprint)
    }

    /// Hex HMAC-SHA256 of `data` under the redaction key.
    pub fn redaction_mac(&self, data: &[u8]) -> String {
        hex(&mac_bytes(&self.redaction, data))
    }

    /// Hex HMAC-SHA256 of `data` under the checkpoint key.
    pub fn checkpoint_mac(&self, data: &[u8]) -> String {
        hex(&mac_bytes(&self.checkpoint, data))
    }
}

fn mac_bytes(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length; new_from_slice cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return [0u8; 32];
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_of_64_non_hex_bytes_is_refused_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        // 64 bytes, but "é" is two of them: byte-offset slicing would split it.
        for text in [
            format!("a\u{e9}{}", "0".repeat(61)),
            format!("+f{}", "0".repeat(62)),
        ] {
            assert_eq!(text.len(), 64);
            std::fs::write(&path, &text).unwrap();
            let err = Key::load(&path).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{text}");
        }
        std::fs::write(&path, "0f".repeat(32)).unwrap();
        assert!(Key::load(&path).is_ok(), "positive control");
    }
}
