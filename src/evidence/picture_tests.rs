use std::{io::Cursor, os::unix::fs::PermissionsExt};

use super::*;
use crate::daemons::Field;

fn secrets(json: &str) -> Secrets {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secrets.json");
    std::fs::write(&path, json).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    Secrets::load(&path).unwrap()
}

fn demo() -> Secrets {
    secrets(r#"{"pw": {"value": "hunter22", "hosts": ["127.0.0.1"]}}"#)
}

/// A white 40×20 RGB screenshot of a 20-CSS-pixel viewport (scale 2).
fn white() -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, 40, 20);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(&[255; 40 * 20 * 3]).unwrap();
    writer.finish().unwrap();
    out
}

fn shot(read: DomRead) -> Shot {
    Shot {
        png: white(),
        css_width: 20.0,
        reads: [read.clone(), read],
    }
}

fn keep_shot(shot: Shot, secrets: &Secrets) -> Result<Kept, Withheld> {
    keep(&shot, secrets)
}

fn field(value: &str, rect: Option<[f64; 4]>) -> Field {
    Field {
        value: value.to_owned(),
        rect,
    }
}

/// The kept image's pixels, as RGB triples by row.
fn pixels(kept: &Kept) -> Vec<Vec<[u8; 3]>> {
    let mut reader = png::Decoder::new(Cursor::new(&kept.png))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut buf).unwrap();
    buf.chunks_exact(kept.width as usize * 3)
        .take(kept.height as usize)
        .map(|row| row.chunks_exact(3).map(|p| [p[0], p[1], p[2]]).collect())
        .collect()
}

#[test]
fn a_field_holding_a_secret_is_black_where_an_ordinary_field_is_not() {
    let read = DomRead {
        fields: vec![
            field("hunter22", Some([0.0, 0.0, 5.0, 5.0])),
            field("plain text", Some([10.0, 0.0, 5.0, 5.0])),
        ],
        ..DomRead::default()
    };
    let kept = keep_shot(shot(read), &demo()).unwrap();
    // CSS 0..5 → screenshot 0..10, a pixel more on each side → kept 0..6.
    assert_eq!(
        (kept.width, kept.height, kept.masks.clone()),
        (20, 10, vec![[0, 0, 6, 6]])
    );
    let image = pixels(&kept);
    // The secret's field (CSS 0..5 → image 0..10 → kept 0..5) is black...
    assert_eq!(image[2][2], [0, 0, 0]);
    // ...the ordinary field's place (CSS 10..15 → kept 10..15) is as it was.
    assert_eq!(image[2][12], [255, 255, 255]);
}

#[test]
fn a_secret_in_any_spelling_the_scrubber_knows_is_masked() {
    let read = DomRead {
        fields: vec![field("user%3Dhunter22", Some([0.0, 0.0, 5.0, 5.0]))],
        ..DomRead::default()
    };
    assert_eq!(keep_shot(shot(read), &demo()).unwrap().masks.len(), 1);
}

#[test]
fn a_page_whose_text_shows_a_secret_is_withheld() {
    let read = DomRead {
        texts: vec!["your password is hunter22".to_owned()],
        ..DomRead::default()
    };
    assert_eq!(
        keep_shot(shot(read), &demo()).unwrap_err(),
        Withheld::TextShowsSecret
    );
}

#[test]
fn a_secret_field_that_cannot_be_placed_is_withheld() {
    let read = DomRead {
        fields: vec![field("hunter22", None)],
        ..DomRead::default()
    };
    assert_eq!(
        keep_shot(shot(read), &demo()).unwrap_err(),
        Withheld::UnplacedSecretField
    );
}

#[test]
fn an_unseen_frame_withholds_only_when_there_are_secrets() {
    let read = DomRead {
        unseen_frames: 1,
        ..DomRead::default()
    };
    assert_eq!(
        keep_shot(shot(read.clone()), &demo()).unwrap_err(),
        Withheld::UnseenFrames(1)
    );
    let none = secrets("{}");
    assert_eq!(keep_shot(shot(read), &none).unwrap().masks.len(), 0);
}

#[test]
fn the_second_read_counts_as_much_as_the_first() {
    let moved = DomRead {
        fields: vec![field("hunter22", Some([10.0, 0.0, 5.0, 5.0]))],
        ..DomRead::default()
    };
    let mut two = shot(DomRead::default());
    two.reads[1] = moved;
    let kept = keep(&two, &demo()).unwrap();
    assert_eq!(pixels(&kept)[2][12], [0, 0, 0]);
}

#[test]
fn a_masks_rectangle_names_every_kept_pixel_it_touched() {
    // Screenshot pixels 1..3 fall in kept pixels 0 and 1 (each averages two).
    assert_eq!(in_kept(1, 2), (0, 2));
    assert_eq!(in_kept(0, 11), (0, 6));
    assert_eq!(in_kept(4, 2), (2, 1));
}
