//! A screenshot reaches the agent: the PNG the call wrote goes into the
//! reply as an MCP `image` item, after the JSON text, within a size bound.
//!
//! An agent that talks only MCP (through a gateway, say) cannot open a path
//! on the server's disk, so the path alone is useless to it. The file stays
//! where it is (the quota is unchanged); the reply carries a copy. Over the
//! bound, the copy is shrunk by a whole factor ([`png_scale`]); when even
//! 1/[`MAX_FACTOR`] does not fit, or the file is unusable, it is left out.
//! Either way `stderr` says so: an image is never dropped silently.
//!
//! The file is the confined child's work and lies where the child may
//! write: it is opened without following a link, must be a regular file,
//! and is read no further than its size allows.

use std::{
    io::{BufReader, Read, Seek},
    path::Path,
};

use base64::Engine;

use super::{plan::Planned, reply::Reply};
use crate::png_scale;
use crate::policy::outputs::{self, Outputs};

/// The MIME type of every image a reply carries (agent-browser writes PNG).
pub(crate) const MIME: &str = "image/png";

/// Shrinking further than this per side leaves a screenshot nobody can read.
pub(crate) const MAX_FACTOR: u32 = 8;

/// Shrinks tried before the image is left out: the first factor is a guess
/// from the file's size, the next from how far the last one got.
const MAX_TRIES: u32 = 3;

/// Pixels a screenshot may have for this server to decode it: each try
/// decodes all of them (a 1280 px wide page 100,000 px long is 128 Mpx).
const MAX_PIXELS: u64 = 128 * 1024 * 1024;

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// What became of a call's screenshot, as its outcome record states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    /// `attached`, `downscaled` or `omitted`.
    pub(crate) action: &'static str,
    /// The PNG the reply carries (decoded from its base64): size and SHA-256.
    pub(crate) bytes: Option<u64>,
    pub(crate) sha256: Option<String>,
}

/// What the file became.
#[derive(Debug)]
enum Prepared {
    Whole(Vec<u8>),
    Shrunk {
        shrunk: png_scale::Shrunk,
        factor: u32,
        source: u64,
    },
    Omitted(String),
}

/// After a successful `screenshot`: put its PNG into `reply` (base64), or
/// say in `stderr` why it is shrunk or absent. None for any other call.
pub(crate) async fn attach(
    outputs: &Outputs,
    planned: &Planned,
    reply: &mut Reply,
) -> Option<Shown> {
    let target = planned.output.clone().filter(|_| reply.exit_code == 0)?;
    let max_base64 = outputs.max_image_bytes;
    let bound = png_bound(max_base64);
    let presented = if bound == 0 {
        present(
            Prepared::Omitted(
                "images are turned off on this server (--max-image-bytes 0)".to_owned(),
            ),
            max_base64,
        )
    } else {
        let root = outputs.dir.clone();
        let source_cap = outputs.quota.max_file;
        // Reading, shrinking, hashing and encoding: all off the runtime.
        tokio::task::spawn_blocking(move || {
            present(prepare(&root, &target, bound, source_cap), max_base64)
        })
        .await
        .unwrap_or_else(|e| {
            present(
                Prepared::Omitted(format!("reading it failed: {e}")),
                max_base64,
            )
        })
    };
    if let Some(note) = presented.note {
        add_note(reply, &note);
    }
    reply.image = presented.base64;
    Some(presented.shown)
}

/// What the reply gets: the image as base64, the note for `stderr`, and
/// what the outcome record says.
struct Presented {
    base64: Option<String>,
    note: Option<String>,
    shown: Shown,
}

fn present(prepared: Prepared, max_base64: u64) -> Presented {
    let (png, note) = match prepared {
        Prepared::Whole(png) => (png, None),
        Prepared::Shrunk {
            shrunk,
            factor,
            source,
        } => {
            let note = format!(
                "the screenshot ({source} bytes) is over this server's image bound ({max_base64} \
                 bytes as base64), so the image attached is shrunk 1/{factor} to {}×{} px ({} \
                 bytes); the full-size file is at its path",
                shrunk.width,
                shrunk.height,
                shrunk.png.len()
            );
            (shrunk.png, Some(note))
        }
        Prepared::Omitted(why) => {
            return Presented {
                base64: None,
                note: Some(format!("the screenshot is not attached: {why}")),
                shown: Shown {
                    action: "omitted",
                    bytes: None,
                    sha256: None,
                },
            };
        }
    };
    Presented {
        shown: Shown {
            action: if note.is_some() {
                "downscaled"
            } else {
                "attached"
            },
            bytes: Some(png.len() as u64),
            sha256: Some(audit::sha256_hex(&png)),
        },
        base64: Some(base64::engine::general_purpose::STANDARD.encode(&png)),
        note,
    }
}

/// Most PNG bytes whose base64 fits `max_base64` bytes.
pub(crate) fn png_bound(max_base64: u64) -> u64 {
    max_base64 / 4 * 3
}

fn add_note(reply: &mut Reply, note: &str) {
    let line = format!("[browser-shell: {note}]");
    reply.stderr = if reply.stderr.is_empty() {
        line
    } else {
        format!("{}\n{line}", reply.stderr)
    };
}

/// Read the screenshot back: whole when it fits `bound`, else shrunk to fit,
/// else the reason it is left out. Blocking (file reads, PNG decoding).
fn prepare(root: &Path, target: &outputs::Target, bound: u64, source_cap: u64) -> Prepared {
    let (file, size) = match outputs::open_written(root, target) {
        Ok(opened) => opened,
        Err(why) => return Prepared::Omitted(format!("the file cannot be read back: {why}")),
    };
    if size <= bound {
        // Read one byte past the size: a file that grew since is not sent
        // as whatever part of it fits.
        let mut png = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        if let Err(e) = file.take(bound + 1).read_to_end(&mut png) {
            return Prepared::Omitted(format!("the file cannot be read back: {e}"));
        }
        if png.len() as u64 > bound {
            return Prepared::Omitted("the file grew while it was read".to_owned());
        }
        if !png.starts_with(PNG_MAGIC) {
            return Prepared::Omitted("the file is not a PNG".to_owned());
        }
        return Prepared::Whole(png);
    }
    if size > source_cap {
        return Prepared::Omitted(format!(
            "the file ({size} bytes) is larger than any screenshot this server writes ({source_cap})"
        ));
    }
    shrink_to_fit(file, size, bound)
}

/// Shrink by the smallest factor that fits `bound`: guessed from the sizes
/// (a PNG's bytes go roughly with its pixels, so with the factor squared),
/// then corrected from how much of the image the last try encoded.
fn shrink_to_fit(file: std::fs::File, size: u64, bound: u64) -> Prepared {
    let max_bytes = usize::try_from(bound).unwrap_or(usize::MAX);
    let mut input = BufReader::new(file);
    match png_scale::dimensions(&mut input) {
        Ok((width, height)) if u64::from(width) * u64::from(height) > MAX_PIXELS => {
            return Prepared::Omitted(format!(
                "the screenshot has {width}×{height} px, more than this server shrinks ({MAX_PIXELS} px)"
            ));
        }
        Ok(_) => {}
        Err(why) => return Prepared::Omitted(format!("the file is not a PNG: {why}")),
    }
    // Never past 1/MAX_FACTOR, but 1/MAX_FACTOR itself is always tried
    // (the last try, if none before fits) before the image is left out.
    let mut factor = factor_for(size as f64 / bound as f64, 1).min(MAX_FACTOR);
    for attempt in 1..=MAX_TRIES {
        if input.rewind().is_err() {
            return Prepared::Omitted("the file cannot be read again".to_owned());
        }
        match png_scale::shrink(&mut input, factor, max_bytes) {
            Ok(shrunk) => {
                return Prepared::Shrunk {
                    shrunk,
                    factor,
                    source: size,
                };
            }
            Err(png_scale::ShrinkError::OverBound { .. }) if factor == MAX_FACTOR => break,
            Err(png_scale::ShrinkError::OverBound { rows_done, rows }) => {
                // The whole image would have come to about bound × rows /
                // rows_done at this factor.
                let over = f64::from(rows) / f64::from(rows_done.max(1));
                factor = if attempt + 1 == MAX_TRIES {
                    MAX_FACTOR
                } else {
                    factor_for(over, factor).min(MAX_FACTOR)
                };
            }
            Err(png_scale::ShrinkError::Unusable(why)) => {
                return Prepared::Omitted(format!(
                    "the file is not a PNG this server can shrink: {why}"
                ));
            }
        }
    }
    Prepared::Omitted(format!(
        "the file ({size} bytes) does not fit this server's image bound ({bound} bytes of PNG) \
         even shrunk to 1/{MAX_FACTOR}"
    ))
}

/// The next factor after `factor`, for an image `ratio` times over the
/// bound at `factor`: sides shrink with the square root, plus a margin,
/// and always at least one more than `factor`.
fn factor_for(ratio: f64, factor: u32) -> u32 {
    let wanted = (f64::from(factor) * (ratio * 1.1).sqrt()).ceil();
    let wanted = if wanted.is_finite() && wanted < f64::from(u32::MAX) {
        wanted as u32
    } else {
        u32::MAX
    };
    wanted.max(factor + 1)
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;
