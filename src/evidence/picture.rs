//! A screenshot made fit for the evidence store, or the reason it is not
//! kept: fields whose value holds a secret are blacked out before the image
//! is shrunk; a page whose text shows a secret, a secret field that cannot
//! be placed, or a frame the look could not see into while secrets are
//! configured withholds the image. Every spelling the scrubber knows counts
//! (`crate::policy::secrets`).

use std::{borrow::Cow, io::Cursor};

use crate::{
    daemons::{DomRead, Shot},
    png_scale::{self, PixelRect},
    policy::secrets::Secrets,
};

/// Each side of the kept image is the screenshot's divided by this: a
/// viewport of 1280 CSS pixels is kept 640 wide, enough to read a page.
const SHRINK_FACTOR: u32 = 2;

/// The most bytes one kept image may have.
const MAX_IMAGE_BYTES: usize = 512 * 1024;

/// A kept image: its PNG, and where it was blacked out.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) png: Vec<u8>,
    pub(super) width: u32,
    pub(super) height: u32,
    /// The blacked-out rectangles, in the kept image's pixels (x, y,
    /// width, height): a reviewer tells a mask from the page's own black.
    pub(super) masks: Vec<PixelRect>,
}

/// Why a screenshot is not kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Withheld {
    #[error("the page has {0} frame(s) the look cannot read, which could show a secret")]
    UnseenFrames(usize),
    #[error("the page's text shows a secret")]
    TextShowsSecret,
    #[error("a field holding a secret could not be placed to mask it")]
    UnplacedSecretField,
    #[error("the screenshot is not a PNG: {0}")]
    NotPng(String),
    #[error("the screenshot could not be shrunk: {0}")]
    Unshrinkable(String),
}

/// `shot` as the store may keep it, or why it may not.
pub(super) fn keep(shot: &Shot, secrets: &Secrets) -> Result<Kept, Withheld> {
    let masks = if secrets.is_empty() {
        Vec::new()
    } else {
        secret_places(&shot.reads, secrets)?
    };
    let (width, _) = png_scale::dimensions(Cursor::new(&shot.png))
        .map_err(|e| Withheld::NotPng(e.to_string()))?;
    let scale = if shot.css_width > 0.0 {
        f64::from(width) / shot.css_width
    } else {
        1.0
    };
    let pixels: Vec<PixelRect> = masks.iter().map(|rect| in_pixels(*rect, scale)).collect();
    // The fastest compression: twice the bytes, half the server's CPU,
    // which the session's next command shares (docs/benchmarks.md).
    let shrunk = png_scale::shrink_masked(
        Cursor::new(&shot.png),
        (SHRINK_FACTOR, MAX_IMAGE_BYTES),
        &pixels,
        png::Compression::Fastest,
    )
    .map_err(|e| Withheld::Unshrinkable(format!("{e:?}")))?;
    let masks = pixels
        .iter()
        .map(|&[x, y, w, h]| {
            let ((x, w), (y, h)) = (in_kept(x, w), in_kept(y, h));
            [x, y, w, h]
        })
        .collect();
    Ok(Kept {
        png: shrunk.png,
        width: shrunk.width,
        height: shrunk.height,
        masks,
    })
}

/// Where the fields holding a secret are (in CSS pixels), from both reads
/// of the DOM; or why the image must be withheld.
fn secret_places(reads: &[DomRead; 2], secrets: &Secrets) -> Result<Vec<[f64; 4]>, Withheld> {
    let holds = |text: &str| matches!(secrets.scrub(text), Cow::Owned(_));
    let mut places = Vec::new();
    for read in reads {
        let DomRead {
            fields,
            texts,
            unseen_frames,
        } = read;
        if *unseen_frames > 0 {
            return Err(Withheld::UnseenFrames(*unseen_frames));
        }
        if texts.iter().any(|text| holds(text)) {
            return Err(Withheld::TextShowsSecret);
        }
        for field in fields.iter().filter(|f| holds(&f.value)) {
            match field.rect {
                Some(rect) if !places.contains(&rect) => places.push(rect),
                Some(_) => {}
                None => {
                    return Err(Withheld::UnplacedSecretField);
                }
            }
        }
    }
    Ok(places)
}

/// A CSS-pixel rectangle in image pixels, grown to whole pixels (and one
/// more on each side, for anti-aliased edges); off-image parts are cut by
/// the masking itself.
fn in_pixels([x, y, w, h]: [f64; 4], scale: f64) -> PixelRect {
    let edge = |v: f64| (v * scale).max(0.0);
    let (left, top) = (edge(x).floor(), edge(y).floor());
    let (right, bottom) = (edge(x + w).ceil(), edge(y + h).ceil());
    let clamp = |v: f64| v.min(f64::from(u32::MAX)) as u32;
    let (left, top) = (clamp(left).saturating_sub(1), clamp(top).saturating_sub(1));
    [
        left,
        top,
        clamp(right).saturating_add(1).saturating_sub(left),
        clamp(bottom).saturating_add(1).saturating_sub(top),
    ]
}

/// A span of the screenshot's pixels (start, length) as the kept image's:
/// every kept pixel it touched, rounded outwards (a kept pixel averages
/// `SHRINK_FACTOR` of them, so one partly masked is named too).
fn in_kept(start: u32, len: u32) -> (u32, u32) {
    let from = start / SHRINK_FACTOR;
    let to = start.saturating_add(len).div_ceil(SHRINK_FACTOR);
    (from, to - from)
}

#[cfg(test)]
#[path = "picture_tests.rs"]
mod tests;
