//! The log's files on disk: opening the log, reading its last record back,
//! and rotating it by size (`log` → `log.1` … `log.N`), with the record a
//! rotation writes. The writer ([`crate::sink`]) decides when; this says how.

use std::{
    fs::{File, OpenOptions},
    io::{self, BufReader, Read, Seek, SeekFrom},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};

use crate::{
    canonical::GENESIS,
    event::{Event, Phase},
};

/// First and largest window read back from the end to find the last record.
const FIRST_TAIL_WINDOW: u64 = 8 * 1024;
const MAX_TAIL_WINDOW: u64 = 8 * 1024 * 1024;

/// Size-based rotation: keep at most `max_files` rotated files of about
/// `max_bytes` each (`log.1` newest … `log.N` oldest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate before a record would make the file larger than this.
    pub max_bytes: u64,
    /// Rotated files kept; older ones are deleted.
    pub max_files: u32,
}

/// The chain head as the last record left it.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    pub(crate) seq: u64,
    pub(crate) hash: String,
    pub(crate) needs_newline: bool,
}

/// Shift `log.(k)` → `log.(k+1)`, drop the oldest, `log` → `log.1`, and
/// open a fresh `log`. Returns it and the `seq` of the oldest record
/// still on disk afterwards.
pub(crate) fn rotate(path: &Path, rotation: Rotation) -> io::Result<(File, Option<u64>)> {
    let max = rotation.max_files.max(1);
    match std::fs::remove_file(rotated(path, max)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    for k in (1..max).rev() {
        match std::fs::rename(rotated(path, k), rotated(path, k + 1)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::rename(path, rotated(path, 1))?;
    let file = open_log(path)?;
    // A bare file name has the empty path as its parent: the cwd.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()?;
    let kept_from = (1..=max).rev().find_map(|k| first_seq(&rotated(path, k)));
    Ok((file, kept_from))
}

/// The record a rotation writes into the new file.
pub(crate) fn rotation_record(rotation: Rotation, kept_from: Option<u64>) -> Map<String, Value> {
    let mut event = Event::new(Phase::Rotation, "rotation");
    event.kept_from_seq = kept_from;
    event.reason = Some(format!(
        "rotated past {} bytes; at most {} rotated files are kept{}",
        rotation.max_bytes,
        rotation.max_files,
        kept_from.map_or_else(String::new, |seq| format!(
            ", so the oldest record on disk is seq {seq}"
        )),
    ));
    match serde_json::to_value(&event) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// The `seq` of the first record of `path`, if it has one.
fn first_seq(path: &Path) -> Option<u64> {
    use std::io::BufRead;
    let file = File::open(path).ok()?;
    let mut first = Vec::new();
    BufReader::new(file)
        .take(1 << 20)
        .read_until(b'\n', &mut first)
        .ok()?;
    let record: Value = serde_json::from_slice(first.trim_ascii_end()).ok()?;
    record.get("seq").and_then(Value::as_u64)
}

/// `log.N`.
pub fn rotated(path: &Path, n: u32) -> PathBuf {
    PathBuf::from(format!("{}.{n}", path.display()))
}

pub(crate) fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .open(path)
}

pub(crate) fn genesis(needs_newline: bool) -> Tail {
    Tail {
        seq: 0,
        hash: GENESIS.to_owned(),
        needs_newline,
    }
}

/// The last complete record of a file of `len` bytes. Reads backwards in
/// growing windows, so a long log costs one small read.
pub(crate) fn read_tail(mut file: &File, len: u64) -> io::Result<Tail> {
    let mut window = FIRST_TAIL_WINDOW;
    loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start))?;
        let mut tail = Vec::new();
        file.take(len - start).read_to_end(&mut tail)?;
        let needs_newline = tail.last() != Some(&b'\n');
        // When the window does not reach the start of the file, its first
        // line may be cut: never trust it.
        let lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
        let trusted = if start == 0 { &lines[..] } else { &lines[1..] };
        for line in trusted.iter().rev() {
            if let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(line)
                && let (Some(seq), Some(hash)) = (
                    record.get("seq").and_then(Value::as_u64),
                    record.get("hash").and_then(Value::as_str),
                )
            {
                return Ok(Tail {
                    seq,
                    hash: hash.to_owned(),
                    needs_newline,
                });
            }
        }
        if start == 0 {
            return Ok(genesis(needs_newline));
        }
        if window >= MAX_TAIL_WINDOW {
            // Restarting the chain here would hide whatever this is.
            return Err(io::Error::other(format!(
                "no complete record in the last {MAX_TAIL_WINDOW} bytes"
            )));
        }
        window *= 4;
    }
}
