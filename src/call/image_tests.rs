//! Reading a screenshot back for the reply: whole, shrunk, or left out
//! with its reason, never anything else.

use std::io::Cursor;

use super::*;
use crate::png_scale;
use crate::session_id::SessionId;

/// A `width`×`height` RGB PNG of noise (it barely compresses: ~3 bytes a pixel).
fn noise_png(width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().unwrap();
    let mut state = 0x1234_5678u32;
    let data: Vec<u8> = (0..width * height * 3)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state.to_le_bytes()[0]
        })
        .collect();
    writer.write_image_data(&data).unwrap();
    writer.finish().unwrap();
    out
}

/// A screenshot target in a fresh output dir, with `bytes` written to it.
fn written(bytes: &[u8]) -> (tempfile::TempDir, outputs::Target) {
    let root = tempfile::tempdir().unwrap();
    let session = SessionId::parse("u1").unwrap();
    let target = outputs::resolve(root.path(), &session, Some("shot.png")).unwrap();
    std::fs::write(&target.path, bytes).unwrap();
    (root, target)
}

fn dimensions_of(png: &[u8]) -> (u32, u32) {
    png_scale::dimensions(Cursor::new(png)).unwrap()
}

#[test]
fn a_screenshot_within_the_bound_is_attached_byte_for_byte() {
    let png = noise_png(40, 30);
    let (root, target) = written(&png);
    match prepare(root.path(), &target, png.len() as u64, 1 << 30) {
        Prepared::Whole(read) => assert_eq!(read, png),
        other => panic!("expected the whole file, got {other:?}"),
    }
}

#[test]
fn a_screenshot_over_the_bound_is_shrunk_until_it_fits() {
    let png = noise_png(300, 200);
    let bound = png.len() as u64 / 5;
    let (root, target) = written(&png);
    match prepare(root.path(), &target, bound, 1 << 30) {
        Prepared::Shrunk {
            shrunk,
            factor,
            source,
        } => {
            assert_eq!(source, png.len() as u64);
            assert!(factor >= 3, "1/{factor} cannot fit a fifth of the bytes");
            assert!(shrunk.png.len() as u64 <= bound);
            assert_eq!(
                dimensions_of(&shrunk.png),
                (300u32.div_ceil(factor), 200u32.div_ceil(factor))
            );
        }
        other => panic!("expected a shrunk image, got {other:?}"),
    }
}

#[test]
fn a_bound_that_even_the_smallest_shrink_misses_leaves_the_image_out() {
    let png = noise_png(200, 200);
    let (root, target) = written(&png);
    match prepare(root.path(), &target, 64, 1 << 30) {
        Prepared::Omitted(why) => assert!(why.contains("even shrunk to 1/8"), "{why}"),
        other => panic!("expected no image, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_a_png_is_never_attached() {
    let (root, target) = written(b"<html>not an image</html>");
    match prepare(root.path(), &target, 1 << 20, 1 << 30) {
        Prepared::Omitted(why) => assert_eq!(why, "the file is not a PNG"),
        other => panic!("expected no image, got {other:?}"),
    }
    let (root, target) = written(&[b'x'; 4096]);
    match prepare(root.path(), &target, 1024, 1 << 30) {
        Prepared::Omitted(why) => assert!(why.starts_with("the file is not a PNG"), "{why}"),
        other => panic!("expected no image, got {other:?}"),
    }
}

#[test]
fn a_file_larger_than_the_child_may_write_is_not_decoded() {
    let png = noise_png(100, 100);
    let (root, target) = written(&png);
    match prepare(root.path(), &target, 1024, 2048) {
        Prepared::Omitted(why) => assert!(why.contains("larger than any screenshot"), "{why}"),
        other => panic!("expected no image, got {other:?}"),
    }
}

#[test]
fn a_missing_file_is_left_out_with_its_reason() {
    let (root, target) = written(b"");
    std::fs::remove_file(&target.path).unwrap();
    match prepare(root.path(), &target, 1024, 2048) {
        Prepared::Omitted(why) => assert!(why.starts_with("the file cannot be read back"), "{why}"),
        other => panic!("expected no image, got {other:?}"),
    }
}

#[test]
fn the_png_bound_is_what_fits_the_base64_bound() {
    assert_eq!(png_bound(4 * 1024 * 1024), 3 * 1024 * 1024);
    assert_eq!(png_bound(3), 0);
    let png = vec![0u8; usize::try_from(png_bound(1000)).unwrap()];
    assert!(base64::engine::general_purpose::STANDARD.encode(&png).len() <= 1000);
}

#[test]
fn each_new_factor_is_larger_than_the_last() {
    assert_eq!(factor_for(1.0, 1), 2);
    assert_eq!(factor_for(4.0, 1), 3); // √4.4 ≈ 2.1
    assert_eq!(factor_for(1.01, 5), 6);
    assert_eq!(factor_for(f64::INFINITY, 2), u32::MAX);
    assert_eq!(factor_for(f64::NAN, 2), u32::MAX);
}

#[test]
fn what_the_reply_and_the_record_get_agree_on_the_bytes_sent() {
    let png = noise_png(20, 10);
    let whole = present(Prepared::Whole(png.clone()), 1 << 20);
    assert_eq!(whole.note, None);
    assert_eq!(whole.shown.action, "attached");
    assert_eq!(whole.shown.bytes, Some(png.len() as u64));
    assert_eq!(whole.shown.sha256, Some(audit::sha256_hex(&png)));
    let sent = base64::engine::general_purpose::STANDARD
        .decode(whole.base64.unwrap())
        .unwrap();
    assert_eq!(sent, png);

    let shrunk = png_scale::shrink(Cursor::new(&png), 2, 1 << 20).unwrap();
    let small = shrunk.png.clone();
    let downscaled = present(
        Prepared::Shrunk {
            shrunk,
            factor: 2,
            source: 12_345,
        },
        4096,
    );
    assert_eq!(downscaled.shown.action, "downscaled");
    assert_eq!(downscaled.shown.sha256, Some(audit::sha256_hex(&small)));
    let note = downscaled.note.unwrap();
    assert!(
        note.contains("(12345 bytes) is over this server's image bound (4096 bytes as base64)")
            && note.contains("shrunk 1/2 to 10×5 px"),
        "{note}"
    );

    let omitted = present(Prepared::Omitted("why".to_owned()), 4096);
    assert_eq!(omitted.base64, None);
    assert_eq!(omitted.shown.action, "omitted");
    assert_eq!(
        omitted.note.as_deref(),
        Some("the screenshot is not attached: why")
    );
}
