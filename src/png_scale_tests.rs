//! The PNG shrinker against images made here, decoded back.

use std::io::Cursor;

use super::*;

/// An 8-bit PNG of `color` whose samples are `pixel(x, y)`.
fn png_of(
    width: u32,
    height: u32,
    color: png::ColorType,
    pixel: impl Fn(u32, u32) -> Vec<u8>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(color);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().unwrap();
    let mut data = Vec::new();
    for y in 0..height {
        for x in 0..width {
            data.extend(pixel(x, y));
        }
    }
    writer.write_image_data(&data).unwrap();
    writer.finish().unwrap();
    out
}

/// Decoded: (width, height, colour type, samples).
fn decode(bytes: &[u8]) -> (u32, u32, png::ColorType, Vec<u8>) {
    let mut reader = png::Decoder::new(Cursor::new(bytes)).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info.width, info.height, info.color_type, buf)
}

/// A deterministic noise byte for (x, y, channel): incompressible enough.
fn noise(x: u32, y: u32, c: u32) -> u8 {
    let mut v =
        x.wrapping_mul(0x9E37_79B9) ^ y.wrapping_mul(0x85EB_CA6B) ^ c.wrapping_mul(0xC2B2_AE35);
    v ^= v >> 15;
    v = v.wrapping_mul(0x2C1B_3C6D);
    v ^= v >> 12;
    v.to_le_bytes()[0]
}

#[test]
fn each_output_pixel_is_the_rounded_mean_of_its_block_and_edges_are_narrower() {
    // 7×5 RGB, shrunk by 3: blocks of 3×3, the last column 1 wide, the
    // last band 2 high → 3×2.
    let source = png_of(7, 5, png::ColorType::Rgb, |x, y| {
        vec![
            u8::try_from(x * 30).unwrap(),
            u8::try_from(y * 50).unwrap(),
            200,
        ]
    });
    let shrunk = shrink(Cursor::new(&source), 3, 1 << 20).unwrap();
    assert_eq!((shrunk.width, shrunk.height), (3, 2));
    let (width, height, color, samples) = decode(&shrunk.png);
    assert_eq!((width, height, color), (3, 2, png::ColorType::Rgb));
    let mean = |xs: &[u32]| xs.iter().sum::<u32>() as f64 / xs.len() as f64;
    let red = |columns: &[u32]| (mean(columns) * 30.0).round() as u8;
    let green = |rows: &[u32]| (mean(rows) * 50.0).round() as u8;
    let expected = [
        [red(&[0, 1, 2]), green(&[0, 1, 2]), 200],
        [red(&[3, 4, 5]), green(&[0, 1, 2]), 200],
        [red(&[6]), green(&[0, 1, 2]), 200],
        [red(&[0, 1, 2]), green(&[3, 4]), 200],
        [red(&[3, 4, 5]), green(&[3, 4]), 200],
        [red(&[6]), green(&[3, 4]), 200],
    ];
    assert_eq!(samples, expected.concat());
}

#[test]
fn alpha_and_palettes_come_out_as_eight_bit_samples() {
    let rgba = png_of(4, 4, png::ColorType::Rgba, |x, _| {
        vec![10, 20, 30, if x < 2 { 0 } else { 255 }]
    });
    let shrunk = shrink(Cursor::new(&rgba), 2, 1 << 20).unwrap();
    let (_, _, color, samples) = decode(&shrunk.png);
    assert_eq!(color, png::ColorType::Rgba);
    assert_eq!(
        samples,
        [[10, 20, 30, 0], [10, 20, 30, 255]].concat().repeat(2)
    );

    let mut indexed = Vec::new();
    let mut encoder = png::Encoder::new(&mut indexed, 2, 2);
    encoder.set_color(png::ColorType::Indexed);
    encoder.set_depth(png::BitDepth::One);
    encoder.set_palette(vec![0, 0, 0, 255, 255, 255]);
    let mut writer = encoder.write_header().unwrap();
    // Rows of two 1-bit indices: black, white / white, black.
    writer
        .write_image_data(&[0b0100_0000, 0b1000_0000])
        .unwrap();
    writer.finish().unwrap();
    let shrunk = shrink(Cursor::new(&indexed), 2, 1 << 20).unwrap();
    let (width, height, color, samples) = decode(&shrunk.png);
    assert_eq!((width, height, color), (1, 1, png::ColorType::Rgb));
    assert_eq!(samples, [128, 128, 128]);
}

#[test]
fn an_output_over_the_bound_stops_and_says_how_far_it_got() {
    let source = png_of(256, 256, png::ColorType::Rgb, |x, y| {
        (0..3).map(|c| noise(x, y, c)).collect()
    });
    // Noise halved is still ~48 KiB: a 4 KiB bound stops it early.
    match shrink(Cursor::new(&source), 2, 4096) {
        Err(ShrinkError::OverBound { rows_done, rows }) => {
            assert_eq!(rows, 256);
            assert!(rows_done < 256, "{rows_done}");
        }
        other => panic!("expected OverBound, got {other:?}"),
    }
    // The same shrink with room enough fits, and its output is a PNG.
    let fits = shrink(Cursor::new(&source), 2, 1 << 20).unwrap();
    assert!(fits.png.len() <= 1 << 20);
    assert_eq!(decode(&fits.png).0, 128);
}

#[test]
fn a_file_that_is_not_a_png_is_unusable_not_a_panic() {
    assert!(matches!(
        shrink(Cursor::new(b"\x89PNG\r\n\x1a\nnot really"), 2, 1 << 20),
        Err(ShrinkError::Unusable(_))
    ));
    assert!(dimensions(Cursor::new(b"GIF89a")).is_err());
    let source = png_of(9, 4, png::ColorType::Grayscale, |_, _| vec![1]);
    assert_eq!(dimensions(Cursor::new(&source)).unwrap(), (9, 4));
}

#[test]
fn a_header_claiming_rows_wider_than_the_decoder_may_hold_is_refused() {
    // A valid 3×1 PNG whose IHDR is rewritten to 2^31-1 pixels wide (CRC
    // fixed up): its one row would need 8 GiB.
    let mut forged = png_of(3, 1, png::ColorType::Rgba, |_, _| vec![0; 4]);
    forged[16..20].copy_from_slice(&0x7FFF_FFFFu32.to_be_bytes());
    let crc = crc32(&forged[12..29]);
    forged[29..33].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        shrink(Cursor::new(&forged), 8, 1 << 20),
        Err(ShrinkError::Unusable(_))
    ));
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
