//! The checkpoint's own key pair (Ed25519): the server signs the chain head
//! with the secret half; a reviewer verifies with the public half alone.
//!
//! Kept apart from the redaction key so that neither stands in for the other:
//! the reviewer who checks integrity holds nothing that unmasks typed text,
//! and rotating or losing one key leaves what the other guarantees as it was.
//! The secret lives in a 0600 file (`<log>.checkpoint-key` by default); the
//! public half is written beside the log as `<log>.checkpoint-key.pub`, for
//! reviewers to keep a copy of off the machine.

use std::{
    io,
    path::{Path, PathBuf},
};

use ed25519_dalek::{Signature, Signer, Verifier};
use sha2::{Digest, Sha256};

use crate::{
    canonical::{hex, unhex},
    secret_file,
};

/// The secret half: signs checkpoints.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SigningKey(<secret>, public {})",
            self.public().fingerprint()
        )
    }
}

impl Clone for SigningKey {
    fn clone(&self) -> Self {
        Self(ed25519_dalek::SigningKey::from_bytes(&self.0.to_bytes()))
    }
}

impl SigningKey {
    /// Load the key at `path`, creating it (mode 0600, random) if missing.
    ///
    /// # Errors
    /// When the file cannot be read or created, or does not hold 64 hex digits.
    pub fn load_or_create(path: &Path) -> io::Result<Self> {
        secret_file::load_or_create(path)
            .map(|seed| Self(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    /// Its public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The hex signature of `data`.
    pub fn sign(&self, data: &[u8]) -> String {
        hex(&self.0.sign(data).to_bytes())
    }
}

/// The public half: verifies checkpoints, and is safe to hand anyone.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint())
    }
}

impl PublicKey {
    /// Load a public key file (64 hex digits).
    ///
    /// # Errors
    /// When the file cannot be read, or holds no Ed25519 public key.
    pub fn load(path: &Path) -> io::Result<Self> {
        let bytes = secret_file::load(path)?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map(Self)
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("not an Ed25519 public key: {e}"),
                )
            })
    }

    /// Names this key in 32 hex digits: the server records it in its
    /// `started` record, so a verifier can tell the key a checkpoint was
    /// signed under from a replacement.
    pub fn fingerprint(&self) -> String {
        let mut digest = Sha256::new();
        digest.update(b"browser-shell checkpoint public key v1");
        digest.update(self.0.as_bytes());
        hex(&digest.finalize()[..16])
    }

    /// Does `signature` (hex) sign `data` under this key?
    pub fn verifies(&self, data: &[u8], signature: &str) -> bool {
        unhex::<64>(signature)
            .map(|bytes| Signature::from_bytes(&bytes))
            .is_some_and(|signature| self.0.verify(data, &signature).is_ok())
    }

    /// Write this key to `path` (mode 0644) unless it already holds it,
    /// replacing the file whole.
    ///
    /// # Errors
    /// Any write, sync or rename failure.
    pub fn publish(&self, path: &Path) -> io::Result<()> {
        let text = format!("{}\n", hex(self.0.as_bytes()));
        if std::fs::read_to_string(path).is_ok_and(|current| current == text) {
            return Ok(());
        }
        let tmp = PathBuf::from(format!("{}.{}.tmp", path.display(), std::process::id()));
        // 0644 whatever the umask: reviewers must read it.
        crate::replace::replace(path, &tmp, text.as_bytes(), 0o644)
    }
}

/// Where the public half of the checkpoint key of the log at `log` lives.
pub fn public_key_path(log: &Path) -> PathBuf {
    PathBuf::from(format!("{}.checkpoint-key.pub", log.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_under_its_own_public_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::load_or_create(&dir.path().join("a")).unwrap();
        let other = SigningKey::load_or_create(&dir.path().join("b")).unwrap();
        let signature = key.sign(b"head");
        assert!(key.public().verifies(b"head", &signature));
        assert!(!key.public().verifies(b"head2", &signature));
        assert!(!other.public().verifies(b"head", &signature));
        assert!(!key.public().verifies(b"head", "zz"));
        assert_ne!(key.public().fingerprint(), other.public().fingerprint());
    }

    #[test]
    fn a_published_public_key_loads_back_and_reveals_no_secret() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("k");
        let key = SigningKey::load_or_create(&secret).unwrap();
        let public = dir.path().join("k.pub");
        key.public().publish(&public).unwrap();
        assert_eq!(PublicKey::load(&public).unwrap(), key.public());
        assert_ne!(
            std::fs::read_to_string(&public).unwrap().trim(),
            std::fs::read_to_string(&secret).unwrap().trim()
        );
        assert_eq!(
            std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(&public).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }
}
