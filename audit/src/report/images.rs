//! The images a report shows: read from the store beside the log, each
//! only if its bytes still hash to the digest its record names (an
//! altered or missing one is shown as such; `verify` names it).

use std::path::Path;

use serde_json::Value;

use super::{Report, Row};
use crate::canonical::sha256_hex;

/// Most bytes of images one report carries; past it, images are shown as
/// left out (a report is one file a reviewer opens in a browser).
pub const MAX_REPORT_IMAGE_BYTES: u64 = 256 << 20;

/// The digests of the images `row`'s evidence names, before then after.
pub(crate) fn named(row: &Row) -> impl Iterator<Item = &str> {
    ["before", "after"].into_iter().filter_map(|look| {
        row.evidence
            .as_ref()?
            .get(look)?
            .get("image")?
            .get("sha256")?
            .as_str()
    })
}

impl Report {
    /// Carry each image the timeline's evidence names, from the store in
    /// `dir`, while the report's images stay under
    /// [`MAX_REPORT_IMAGE_BYTES`].
    pub fn attach_images(&mut self, dir: &Path) {
        let mut total = 0u64;
        let shown = self
            .approvals
            .iter()
            .filter_map(|a| a.shown.pointer("/image/sha256").and_then(Value::as_str));
        let wanted: Vec<String> = self
            .timeline
            .iter()
            .flat_map(named)
            .chain(shown)
            .map(str::to_owned)
            .collect();
        for digest in wanted {
            let well_formed = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
            if !well_formed || self.images.contains_key(&digest) {
                continue;
            }
            let Ok(bytes) = std::fs::read(dir.join(format!("{digest}.png"))) else {
                continue;
            };
            if sha256_hex(&bytes) != digest || total + bytes.len() as u64 > MAX_REPORT_IMAGE_BYTES {
                continue;
            }
            total += bytes.len() as u64;
            self.images.insert(digest, bytes);
        }
    }
}

/// What a look names, for a caption: its URL and title.
pub(crate) fn caption(look: &Value) -> (String, String) {
    let text = |key: &str| {
        look.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (text("url"), text("title"))
}
