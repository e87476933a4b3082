//! The redaction key: 32 random bytes in a 0600 file beside the log, from
//! which the redaction MAC key is derived.
//!
//! Keep it where the audited process cannot read it (browser-shell's
//! confinement never grants read access to the audit log's directory). It
//! is not needed to verify the log: checkpoints are signed by a key of their
//! own ([`crate::SigningKey`]), so a reviewer never holds this one, which
//! would let its holder test guesses of short typed values. Checkpoints of
//! schema `/1` were MAC'd under a key derived from it; those are still
//! checked with it.

use std::{io, path::Path};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{canonical::hex, secret_file};

/// Secret key material for redaction (and for checking `/1` checkpoints).
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
    /// # Errors
    /// See [`crate::secret_file::load_or_create`].
    pub fn load_or_create(path: &Path) -> io::Result<Self> {
        secret_file::load_or_create(path).map(|master| Self::derive(&master))
    }

    /// Load an existing key (for the verifier of old checkpoints).
    ///
    /// # Errors
    /// When the file cannot be read or does not hold 64 hex digits.
    pub fn load(path: &Path) -> io::Result<Self> {
        secret_file::load(path).map(|master| Self::derive(&master))
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
    /// from the MAC keys): servers that kept `/1` checkpoints recorded it in
    /// their `started` record, so a verifier can tell the key a checkpoint
    /// was kept under from a replacement.
    pub fn fingerprint(&self) -> String {
        hex(&self.fingerprint)
    }

    /// Hex HMAC-SHA256 of `data` under the redaction key.
    pub fn redaction_mac(&self, data: &[u8]) -> String {
        hex(&mac_bytes(&self.redaction, data))
    }

    /// Hex HMAC-SHA256 of `data` under the `/1` checkpoint key.
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
