//! Images of what a session's pages looked like around its actions, stored
//! beside the log under their SHA-256 (`<log>.evidence/<sha256>.png`), and
//! the check that every image a record names is there, unaltered.
//!
//! A record never holds an image, only its digest: the chain then vouches
//! for the image too, since changing a byte of it changes the name a sealed
//! record gave it. An image the store did not keep (over its bound) is
//! recorded as withheld, never silently missing; one a record names and the
//! store lacks, or whose bytes no longer hash to its name, breaks the log's
//! integrity like a rewritten record. To stay under its bound the store
//! drops its oldest images, each named by a synced record first, so a
//! dropped image is no alarm.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::{File, OpenOptions},
    io::{self, Write},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};

use crate::canonical::{sha256_hex, sha256_reader};

/// The directory that holds the images of the log at `log`.
pub fn evidence_dir(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".evidence");
    PathBuf::from(name)
}

/// An image as a record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredImage {
    /// SHA-256 (hex) of its bytes: its name in the store.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
    /// False when the store already held these bytes (one image, named by
    /// several records).
    pub new: bool,
}

/// The image store of one log: private (0700, files 0600), written whole
/// (a crash leaves a file complete or absent) and synced before a record
/// may name it.
#[derive(Debug, Clone)]
pub struct ImageStore {
    dir: PathBuf,
}

impl ImageStore {
    /// The store beside the log `log`, created if missing.
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn open(log: &Path) -> io::Result<Self> {
        let dir = evidence_dir(log);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(Self { dir })
    }

    /// Where the store keeps its images.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes the store holds now (its files' sizes).
    ///
    /// # Errors
    /// When the directory cannot be listed.
    pub fn bytes_held(&self) -> io::Result<u64> {
        let mut total = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let meta = entry?.metadata()?;
            if meta.is_file() {
                total += meta.len();
            }
        }
        Ok(total)
    }

    /// Store `png`, synced, under its digest.
    ///
    /// # Errors
    /// When it cannot be written and synced: then no record may name it.
    pub fn put(&self, png: &[u8]) -> io::Result<StoredImage> {
        let sha256 = sha256_hex(png);
        let path = self.path_of(&sha256);
        let bytes = png.len() as u64;
        if path.exists() {
            return Ok(StoredImage {
                sha256,
                bytes,
                new: false,
            });
        }
        let staged = self
            .dir
            .join(format!(".{sha256}.{}.tmp", std::process::id()));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&staged)?;
        file.write_all(png)?;
        file.sync_data()?;
        std::fs::rename(&staged, &path)?;
        File::open(&self.dir)?.sync_all()?;
        Ok(StoredImage {
            sha256,
            bytes,
            new: true,
        })
    }

    /// The file an image of this digest is kept in.
    pub fn path_of(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.png"))
    }

    /// The oldest images (by when they were stored) whose removal frees at
    /// least `bytes`: each digest with its size. A record must say they
    /// are dropped before [`ImageStore::remove`] deletes them.
    ///
    /// # Errors
    /// When the directory cannot be listed.
    pub fn oldest(&self, bytes: u64) -> io::Result<Vec<(String, u64)>> {
        let mut images = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(digest) = name.strip_suffix(".png").filter(|d| is_digest(d)) else {
                continue;
            };
            let meta = entry.metadata()?;
            images.push((meta.modified()?, digest.to_owned(), meta.len()));
        }
        images.sort();
        let mut freed = 0;
        Ok(images
            .into_iter()
            .take_while(|(_, _, size)| {
                let more = freed < bytes;
                freed += size;
                more
            })
            .map(|(_, digest, size)| (digest, size))
            .collect())
    }

    /// Delete the image `sha256` (gone already is no error).
    ///
    /// # Errors
    /// When it is there and cannot be deleted.
    pub fn remove(&self, sha256: &str) -> io::Result<()> {
        match std::fs::remove_file(self.path_of(sha256)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The images the records name: each digest with the `seq` of the first
/// record that names it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Named {
    images: BTreeMap<String, u64>,
    /// Images a record says the store dropped (its bound).
    dropped: BTreeSet<String>,
}

impl Named {
    /// Note the images `record` (at `seq`) names: the `image` of its
    /// evidence's `before` and `after` looks, and the one an approval
    /// request showed.
    pub(crate) fn note(&mut self, record: &Map<String, Value>, seq: u64) {
        let shown = record
            .get("approval")
            .and_then(|a| a.pointer("/shown/image/sha256"))
            .and_then(Value::as_str);
        if let Some(digest) = shown {
            self.images.entry(digest.to_owned()).or_insert(seq);
        }
        let Some(evidence) = record.get("evidence") else {
            return;
        };
        let dropped = evidence.get("dropped").and_then(Value::as_array);
        for digest in dropped.into_iter().flatten().filter_map(Value::as_str) {
            self.dropped.insert(digest.to_owned());
        }
        for look in ["before", "after"] {
            let digest = evidence
                .get(look)
                .and_then(|l| l.get("image"))
                .and_then(|i| i.get("sha256"))
                .and_then(Value::as_str);
            if let Some(digest) = digest {
                self.images.entry(digest.to_owned()).or_insert(seq);
            }
        }
    }

    /// Check each named image against the store in `dir`.
    pub(crate) fn check(&self, dir: &Path) -> ImageCheck {
        let mut check = ImageCheck {
            dir: Some(dir.to_owned()),
            ..ImageCheck::default()
        };
        for (digest, &seq) in &self.images {
            if self.dropped.contains(digest) {
                check.dropped += 1;
                continue;
            }
            let well_formed = is_digest(digest);
            let path = dir.join(format!("{digest}.png"));
            let found = if well_formed {
                File::open(&path).and_then(sha256_reader)
            } else {
                Err(io::Error::other("not a SHA-256 digest"))
            };
            match found {
                Ok(actual) if actual == *digest => check.checked += 1,
                Ok(actual) => check.problems.push(ImageProblem {
                    seq,
                    sha256: digest.clone(),
                    found: format!("the file's bytes hash to {actual}: the image was altered"),
                }),
                Err(e) => check.problems.push(ImageProblem {
                    seq,
                    sha256: digest.clone(),
                    found: format!(
                        "{} cannot be read ({e}): the image is missing",
                        path.display()
                    ),
                }),
            }
        }
        check
    }
}

/// What checking the images the records name found.
#[derive(Debug, Clone, Default)]
pub struct ImageCheck {
    /// The store checked; `None` when no store was looked at.
    pub dir: Option<PathBuf>,
    /// Images present and unaltered.
    pub checked: u64,
    /// Images named whose removal a record announced (the store's bound):
    /// not checked, and no alarm.
    pub dropped: u64,
    /// Images missing or altered.
    pub problems: Vec<ImageProblem>,
}

/// An image a record names that the store does not hold as named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageProblem {
    /// The first record that names it.
    pub seq: u64,
    /// The digest it names.
    pub sha256: String,
    /// What the store has instead.
    pub found: String,
}

#[cfg(test)]
#[path = "evidence_tests.rs"]
mod tests;
