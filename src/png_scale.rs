//! Shrinking a PNG by a whole factor, to fit a byte bound, with rectangles
//! blacked out before it is shrunk (a field holding a secret).
//!
//! A full-page screenshot can be tens of megabytes and hundreds of
//! megapixels, and the file is the confined child's work: nothing about it
//! is trusted. So the image is never held whole. It is decoded one row at a
//! time, each `factor`×`factor` block averaged (a box filter: enough for a
//! screenshot, whose point is to be read, not printed), each output row
//! encoded as soon as it is complete, and the encoder's output stops at the
//! bound. Memory is a few rows and the output, whatever the input's size.

use std::{
    cell::Cell,
    io::{BufRead, Seek, Write},
};

/// The decoder's own allocations (row buffers, metadata chunks) may not
/// exceed this: a PNG that claims rows of more is refused, not allocated.
const DECODER_MEMORY: usize = 16 * 1024 * 1024;

/// A shrunk PNG.
#[derive(Debug)]
pub(crate) struct Shrunk {
    pub(crate) png: Vec<u8>,
    pub(crate) width: u32,
    pub(crate) height: u32,
}

/// Why a PNG was not shrunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShrinkError {
    /// The output passed `max_bytes` when `rows_done` of `rows` input rows
    /// were encoded.
    OverBound { rows_done: u32, rows: u32 },
    /// Not a PNG this can shrink (malformed, interlaced, too wide).
    Unusable(String),
}

/// The width and height a PNG's header claims.
pub(crate) fn dimensions<R: BufRead + Seek>(input: R) -> Result<(u32, u32), png::DecodingError> {
    let mut decoder = png::Decoder::new_with_limits(input, limits());
    let info = decoder.read_header_info()?;
    Ok((info.width, info.height))
}

/// `input` shrunk `factor` times in each direction (sides rounded up), as
/// an 8-bit PNG of the same colour type, of at most `max_bytes`.
pub(crate) fn shrink<R: BufRead + Seek>(
    input: R,
    factor: u32,
    max_bytes: usize,
) -> Result<Shrunk, ShrinkError> {
    shrink_masked(input, (factor, max_bytes), &[], png::Compression::Balanced)
}

/// A rectangle of an image, in its pixels: x, y, width, height.
pub(crate) type PixelRect = [u32; 4];

/// [`shrink`], with every pixel of `masks` made black (opaque) before the
/// rows are averaged, so nothing of what was under them survives, and the
/// output compressed as much as `compression` says (less is faster).
pub(crate) fn shrink_masked<R: BufRead + Seek>(
    input: R,
    (factor, max_bytes): (u32, usize),
    masks: &[PixelRect],
    compression: png::Compression,
) -> Result<Shrunk, ShrinkError> {
    let unusable = |e: &dyn std::fmt::Display| ShrinkError::Unusable(e.to_string());
    let mut decoder = png::Decoder::new_with_limits(input, limits());
    // Palettes, sub-byte greys and tRNS become plain 8-bit samples.
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| unusable(&e))?;
    if reader.info().interlaced {
        // Interlaced rows arrive in passes, not top to bottom; Chromium
        // never writes one.
        return Err(ShrinkError::Unusable("the PNG is interlaced".to_owned()));
    }
    let (width, height) = (reader.info().width, reader.info().height);
    let (color, _) = reader.output_color_type();
    let factor = factor.max(1);
    let (out_width, out_height) = (width.div_ceil(factor), height.div_ceil(factor));
    let mut box_filter = BoxFilter::new(width, factor, color.samples());

    let over = Cell::new(false);
    let mut png = Vec::new();
    let sink = Capped {
        out: &mut png,
        max: max_bytes,
        over: &over,
    };
    // An encoder error is the bound when the sink said so.
    let failed = |e: &dyn std::fmt::Display, rows_done| {
        if over.get() {
            ShrinkError::OverBound {
                rows_done,
                rows: height,
            }
        } else {
            ShrinkError::Unusable(e.to_string())
        }
    };
    let mut encoder = png::Encoder::new(sink, out_width, out_height);
    encoder.set_color(color);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(compression);
    let mut writer = encoder.write_header().map_err(|e| unusable(&e))?;
    let mut stream = writer.stream_writer().map_err(|e| unusable(&e))?;
    let mut rows_done = 0;
    let mut masked = Vec::new();
    while let Some(row) = reader.next_row().map_err(|e| unusable(&e))? {
        let data = blacked(row.data(), rows_done, masks, color, &mut masked);
        rows_done += 1;
        if let Some(out) = box_filter.add(data, rows_done == height) {
            stream.write_all(out).map_err(|e| failed(&e, rows_done))?;
        }
    }
    stream.finish().map_err(|e| failed(&e, rows_done))?;
    writer.finish().map_err(|e| failed(&e, rows_done))?;
    Ok(Shrunk {
        png,
        width: out_width,
        height: out_height,
    })
}

/// Row `y` with the parts `masks` cover made black (copied into `buf`), or
/// the row itself when no mask crosses it.
fn blacked<'a>(
    row: &'a [u8],
    y: u32,
    masks: &[PixelRect],
    color: png::ColorType,
    buf: &'a mut Vec<u8>,
) -> &'a [u8] {
    let channels = color.samples();
    let crossing = masks
        .iter()
        .filter(|[_, top, _, h]| y >= *top && y - top < *h);
    let mut copied = false;
    for [x, _, w, _] in crossing {
        if !copied {
            buf.clear();
            buf.extend_from_slice(row);
            copied = true;
        }
        let start = (*x as usize * channels).min(buf.len());
        let end = ((*x as usize + *w as usize) * channels).min(buf.len());
        let alpha = matches!(color, png::ColorType::Rgba | png::ColorType::GrayscaleAlpha);
        for pixel in buf[start..end].chunks_exact_mut(channels) {
            pixel.fill(0);
            if alpha {
                pixel[channels - 1] = u8::MAX;
            }
        }
    }
    if copied { buf } else { row }
}

fn limits() -> png::Limits {
    png::Limits {
        bytes: DECODER_MEMORY,
    }
}

/// Averages `factor`×`factor` blocks of 8-bit samples, one band of
/// `factor` input rows at a time; the last column and band may be narrower.
struct BoxFilter {
    width: usize,
    factor: usize,
    channels: usize,
    sums: Vec<u32>,
    rows: u32,
    out: Vec<u8>,
}

impl BoxFilter {
    fn new(width: u32, factor: u32, channels: usize) -> Self {
        let (width, factor) = (width as usize, factor as usize);
        let out_width = width.div_ceil(factor);
        Self {
            width,
            factor,
            channels,
            sums: vec![0; out_width * channels],
            rows: 0,
            out: vec![0; out_width * channels],
        }
    }

    /// Add one input row; returns an output row when a band is complete
    /// (or `last` ends a short one).
    fn add(&mut self, row: &[u8], last: bool) -> Option<&[u8]> {
        let pixels = row.chunks_exact(self.channels).take(self.width);
        for (x, pixel) in pixels.enumerate() {
            let at = (x / self.factor) * self.channels;
            for (sum, sample) in self.sums[at..at + self.channels].iter_mut().zip(pixel) {
                *sum += u32::from(*sample);
            }
        }
        self.rows += 1;
        if self.rows < self.factor as u32 && !last {
            return None;
        }
        let band = self.rows;
        for (column, (sums, out)) in self
            .sums
            .chunks_exact_mut(self.channels)
            .zip(self.out.chunks_exact_mut(self.channels))
            .enumerate()
        {
            let columns = (self.width - column * self.factor).min(self.factor) as u32;
            let count = columns * band;
            for (sum, sample) in sums.iter_mut().zip(out) {
                // Rounded mean of at most 255 × factor² (≤ 16,320 at 8).
                *sample = u8::try_from((*sum + count / 2) / count).unwrap_or(u8::MAX);
                *sum = 0;
            }
        }
        self.rows = 0;
        Some(&self.out)
    }
}

/// A writer into `out` that fails (and says so in `over`) rather than grow
/// it past `max` bytes.
struct Capped<'a> {
    out: &'a mut Vec<u8>,
    max: usize,
    over: &'a Cell<bool>,
}

impl Write for Capped<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > self.max {
            self.over.set(true);
            return Err(std::io::Error::other("over the byte bound"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[path = "png_scale_tests.rs"]
mod tests;
